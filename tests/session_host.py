"""A scripted daemon host for the session tests: it answers every awaiting command itself.

The model is a list of responses, one per request; tools answer from a table; drain replies and
Stop-hook decisions come from policies the test sets. Completions go to the back of a queue, the
way an event loop delivers them, and every event and command is logged in order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import agentturn as at
from agentturn import guard as g
from agentturn import session as se

ON = g.GuardConfig(todo_stop_guard=True, daemon=True)


def todos(*statuses: str) -> dict[str, Any]:
    """A todo-write envelope with these statuses."""
    return {"type": "todo_list", "todos": [
        {"id": str(i), "content": f"step {i}", "status": status}
        for i, status in enumerate(statuses)]}


def todo_call(call_id: str) -> at.ToolCall:
    return at.ToolCall(call_id=call_id, name="todo_write", arguments="{}")


def say(text: str, *calls: at.ToolCall) -> dict[str, Any]:
    """One scripted response."""
    return {"text": text, "finish_reason": "tool_use" if calls else "end_turn",
            "tool_calls": calls}


class Host:
    """Runs a session to quiescence, answering what it asks with the scripted parts."""

    def __init__(self, config: se.SessionConfig | None = None, **fields: Any) -> None:
        if config is None:
            fields.setdefault("chat_id", "chat")
            fields.setdefault("guard", ON)
            fields.setdefault("turn", at.TurnConfig(auto_title=False))
            config = se.SessionConfig(**fields)
        self.state = se.Session.create(config)
        self.queue: deque[at.Event] = deque()
        self.responses: deque[dict[str, Any]] = deque()
        self.tool_results: dict[str, dict[str, Any]] = {}
        #: drain_id -> reply; the default reply: nothing held, no queued prompt (field omitted)
        self.drain: Callable[[se.DrainMidTurnQueue], at.Event | None] = (
            lambda c: se.MidTurnDrained(drain_id=c.drain_id))
        self.hooks: Callable[[se.RunStopHooks], at.Event | None] = (
            lambda c: se.StopHookDecided(run_id=c.run_id, block=False))
        self.log: list[tuple[str, Any]] = []
        self.held: list[at.Command] = []  # awaiting commands the policies chose not to answer

    # --- running ----------------------------------------------------------------------------

    def send(self, *events: at.Event) -> list[at.Command]:
        """Feed ``events``, then everything the host's answers produce; the commands, in order."""
        start = len(self.log)
        self.queue.extend(events)
        while self.queue:
            event = self.queue.popleft()
            self.log.append(("event", event))
            self.state, commands = se.reduce(self.state, event)
            self.stepped(event)
            for command in commands:
                self.log.append(("command", command))
                self.answer(command)
        return [item for kind, item in self.log[start:] if kind == "command"]

    def stepped(self, event: at.Event) -> None:
        """Called after each step with the event just taken; a checking host overrides it."""

    def answer(self, command: at.Command) -> None:
        match command:
            case at.Persist():
                self.queue.append(at.Persisted(key=command.key))
            case at.SaveLead():
                self.queue.append(at.LeadSaved(lead_id=command.lead_id))
            case at.RequestModelStream():
                if not self.responses:
                    self.held.append(command)
                    return
                self.queue.append(at.StreamOpened(request_id=command.request_id))
                self.queue.append(at.StreamCompleted(request_id=command.request_id,
                                                     **self.responses.popleft()))
            case at.ExecuteTool():
                result = self.tool_results.get(command.call.call_id, {"output": "ok"})
                self.queue.append(at.ToolFinished(call_id=command.call.call_id, **result))
            case at.AskPermission():
                self.held.append(command)
            case at.RequestTitle():
                self.queue.append(at.TitleGenerated(request_id=command.request_id, title="T"))
            case se.DrainMidTurnQueue():
                reply = self.drain(command)
                if reply is None:
                    self.held.append(command)
                else:
                    self.queue.append(reply)
            case se.RunStopHooks():
                decided = self.hooks(command)
                if decided is None:
                    self.held.append(command)
                else:
                    self.queue.append(decided)
            case _:
                pass

    # --- reading the log --------------------------------------------------------------------

    def commands(self, kind: type | tuple[type, ...] = at.Command) -> list[Any]:
        return [item for what, item in self.log if what == "command" and isinstance(item, kind)]

    def events(self, kind: type | tuple[type, ...] = at.Event) -> list[Any]:
        return [item for what, item in self.log if what == "event" and isinstance(item, kind)]

    def published(self, kind: se.EntryKind) -> list[se.RingEntry]:
        return [c.entry for c in self.commands(se.Publish) if c.entry.kind is kind]

    def outcomes(self) -> list[at.OutcomeKind]:
        return [c.outcome.kind for c in self.commands(at.EndTurn)]

    def user_messages(self) -> list[str]:
        """Every user-role message saved, in order: prompts, continuations, Lead instructions."""
        texts: list[str] = []
        for command in self.commands((at.Persist, at.SaveLead)):
            records = command.records if isinstance(command, at.Persist) else (command.record,)
            texts.extend(r.text for r in records if isinstance(r, at.UserMessageRecord))
        return texts

    def position(self, predicate: Callable[[Any], bool]) -> int:
        for index, (_, item) in enumerate(self.log):
            if predicate(item):
                return index
        raise AssertionError("not in the log")
