"""A scripted host: it answers every awaiting command itself, from a script, and logs each step.

Theory of operation
-------------------
:class:`ScriptedHost` is a world (:class:`~agentturn.testing.adapter.WorldLike`) answered from a
script, joined to the reference adapter and an event loop:

* the model answers from :attr:`~ScriptedHost.responses`, one per request, in order (with none
  left, the request stays outstanding); tools answer from :attr:`~ScriptedHost.tool_results`
  (``"ok"`` by default); writes always succeed; the namer answers :attr:`~ScriptedHost.title_text`;
* permission dialogs, the client's drain reply and the Stop hooks follow policies the caller
  sets (:meth:`ask`, :attr:`drain`, :attr:`hooks`; assign a function to change one); by default
  a dialog waits for the user, the drain reply says nothing is held and the hooks do not block;
* :meth:`send` feeds events, and every completion goes to the back of a queue, the way an event
  loop delivers them, until nothing is left to deliver. Every event and command is logged in
  order (:attr:`log`, and :attr:`steps` as the ``(event, commands)`` pairs a trace records);
  awaiting commands nothing answered are kept in :attr:`held`.

The same class runs a turn (a :class:`~agentturn.TurnState`) or a session (a
:class:`~agentturn.session.SessionState`). Subclass it to script a richer world (override
:meth:`stream`, :meth:`run`, :meth:`ask`, ...) or to check something after each step
(:meth:`stepped`). Commands are mapped to events by
:class:`~agentturn.testing.adapter.ReferenceAdapter`, the one such mapping, so a scripted run
answers exactly what the spec kit's reference host answers. Nothing here imports hypothesis.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from .. import commands as c
from .. import events as e
from .. import turn
from .._base import AwaitingCommand, Command, Event
from ..records import OutcomeKind, ToolCall, UserMessageRecord
from ..session import reducer as session_reducer
from ..session import vocabulary as sv
from ..session.ring import EntryKind, RingEntry
from ..session.state import SessionConfig, SessionState
from ..turn.state import TurnState
from .adapter import EngineResponse, ReferenceAdapter, hooks_do_not_block, nothing_held

__all__ = ["ScriptedHost", "say"]


def say(text: str, *calls: ToolCall, finish_reason: str | None = None) -> dict[str, Any]:
    """One scripted response: ``text`` and ``calls``, finishing ``tool_use`` when there are calls
    and ``end_turn`` otherwise (or ``finish_reason``, raw, as an engine sends it)."""
    reason = finish_reason or ("tool_use" if calls else "end_turn")
    return {"text": text, "finish_reason": reason, "tool_calls": calls}


class ScriptedHost:
    """Runs a turn or a session to quiescence, answering what it asks from a script."""

    def __init__(self, state: TurnState | SessionState | SessionConfig) -> None:
        if isinstance(state, SessionConfig):
            state = SessionState.create(state)
        self.state: Any = state
        self._reduce: Callable[[Any, Event], Any] = (
            session_reducer.reduce if isinstance(state, SessionState) else turn.reduce)
        self.adapter = ReferenceAdapter()
        self.queue: deque[Event] = deque()
        #: The model's responses, one per request: ``StreamCompleted`` fields (see :func:`say`)
        #: or an :class:`~agentturn.testing.EngineResponse`.
        self.responses: deque[dict[str, Any] | EngineResponse] = deque()
        #: Call id -> ``{"output": ..., "structured": ...}``; other calls answer ``"ok"``.
        self.tool_results: dict[str, dict[str, Any]] = {}
        self.title_text = "T"
        #: The client's drain reply to each drain (``None``: it does not answer yet).
        self.drain: Callable[[sv.DrainMidTurnQueue], Event | None] = nothing_held
        #: The Stop hooks' verdict on each run (``None``: not decided yet).
        self.hooks: Callable[[sv.RunStopHooks], Event | None] = hooks_do_not_block
        #: Every event in and command out, in order: ``("event", e)`` and ``("command", c)``.
        self.log: list[tuple[str, Any]] = []
        #: Each step as the ``(event, commands)`` pair a trace records.
        self.steps: list[tuple[Event, tuple[Command, ...]]] = []
        #: Awaiting commands nothing answered (a dialog, a request with no response left, ...).
        self.held: list[Command] = []
        #: Every record written, in order.
        self.stored: list[Any] = []

    # --- the scripted world ---------------------------------------------------------------

    def store(self, records: Sequence[Any]) -> bool:
        """Every write succeeds (and is kept in :attr:`stored`)."""
        self.stored.extend(records)
        return True

    def history(self) -> Sequence[Any]:
        """Every record stored, in order."""
        return tuple(self.stored)

    def cancel(self, call_id: str) -> bool:
        """A scripted tool ends as soon as it starts: there is nothing left to stop."""
        return False

    def stream(self, request: c.RequestModelStream | None = None) -> EngineResponse | None:
        """The next scripted response; ``None`` (the request waits) when none is left."""
        if not self.responses:
            return None
        response = self.responses.popleft()
        if isinstance(response, EngineResponse):
            return response
        return EngineResponse(text=response.get("text", ""),
                              raw_finish_reason=response["finish_reason"],
                              calls=tuple(response.get("tool_calls", ())),
                              malformed_tool_format=response.get("malformed_tool_format", False))

    def ask(self, call: ToolCall) -> e.PermissionDecision | None:
        """The user's answer to a dialog: none by default (the dialog waits, in :attr:`held`)."""
        return None

    def run(self, call: ToolCall) -> tuple[str, Any]:
        """The scripted tool result for ``call``, ``"ok"`` by default."""
        result = self.tool_results.get(call.call_id, {})
        return result.get("output", "ok"), result.get("structured")

    def title(self, request: c.RequestTitle) -> str | None:
        """The namer's title: :attr:`title_text`."""
        return self.title_text

    # --- running --------------------------------------------------------------------------

    def send(self, *events: Event) -> list[Command]:
        """Feed ``events``, then everything the answers produce; the commands, in order."""
        start = len(self.log)
        self.queue.extend(events)
        while self.queue:
            event = self.queue.popleft()
            self.log.append(("event", event))
            self.state, commands = self._reduce(self.state, event)
            self.steps.append((event, commands))
            self.stepped(event)
            for command in commands:
                self.log.append(("command", command))
                self.answer(command)
        return [item for kind, item in self.log[start:] if kind == "command"]

    def answer(self, command: Command) -> None:
        """Queue the events answering ``command`` (:meth:`reply`); an awaiting command nothing
        answers goes to :attr:`held`. Call it again for a held command once the script can
        answer it, then :meth:`send` with no event to deliver what it queued."""
        answers = self.reply(command)
        if not answers and isinstance(command, AwaitingCommand) and not isinstance(
                command, sv.StartTimer):
            self.held.append(command)
        self.queue.extend(answers)

    def reply(self, command: Command) -> list[Event]:
        """The events answering ``command``: the reference adapter against this world."""
        return self.adapter.carry_out(command, self)

    def stepped(self, event: Event) -> None:
        """Called after each step with the event just taken; a checking host overrides it."""

    # --- reading the log ------------------------------------------------------------------

    def commands(self, kind: type | tuple[type, ...] = Command) -> list[Any]:
        """Every command of the log that is a ``kind``, in order."""
        return [item for what, item in self.log if what == "command" and isinstance(item, kind)]

    def events(self, kind: type | tuple[type, ...] = Event) -> list[Any]:
        """Every event of the log that is a ``kind``, in order."""
        return [item for what, item in self.log if what == "event" and isinstance(item, kind)]

    def published(self, kind: EntryKind) -> list[RingEntry]:
        """The ring entries of ``kind`` the session published, in order."""
        return [command.entry for command in self.commands(sv.Publish)
                if command.entry.kind is kind]

    def outcomes(self) -> list[OutcomeKind]:
        """How each turn ended, in order."""
        return [command.outcome.kind for command in self.commands(c.EndTurn)]

    def user_messages(self) -> list[str]:
        """Every user-role message saved, in order: prompts, continuations, Lead instructions."""
        texts: list[str] = []
        for command in self.commands((c.Persist, c.SaveLead)):
            records = command.records if isinstance(command, c.Persist) else (command.record,)
            texts.extend(r.text for r in records if isinstance(r, UserMessageRecord))
        return texts

    def position(self, predicate: Callable[[Any], bool]) -> int:
        """The index in :attr:`log` of the first event or command ``predicate`` accepts."""
        for index, (_, item) in enumerate(self.log):
            if predicate(item):
                return index
        raise LookupError("nothing in the log matches")
