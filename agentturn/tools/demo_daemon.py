"""The demo's daemon scene: the session's stop order, told as events in and commands out.

Theory of operation
-------------------
A small scripted daemon host answers every awaiting command of :mod:`agentturn.session` at once
(writes are acknowledged, the model answers from a list, the client's drain reply comes from a
script) and every event and command is rendered as one line, like :mod:`agentturn.demo`'s turn.
The story: the model writes a todo list with one item unfinished and stops; the todo stop guard
continues it twice, with the exact texts, then reports exhaustion. A second prompt arms the guard
again, but at its stop the client reports a queued prompt: it takes priority, the guard does not
continue, and the queued prompt runs next.

This module builds text only; ``agentturn demo`` prints it after the turn.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .._base import Command, Event
from ..commands import EndTurn, ExecuteTool, Persist, RequestModelStream, SaveLead
from .demo import describe_command, describe_event
from ..events import (
    PromptSubmitted,
    StreamCompleted,
    StreamOpened,
    ToolFinished,
)
from ..guard import GuardConfig
from ..records import ToolCall
from ..turn.state import TurnConfig

__all__ = ["daemon_config", "daemon_scene", "daemon_timeline"]

_TODO = {"type": "todo_list", "todos": [
    {"id": "1", "content": "port the tokenizer", "status": "completed"},
    {"id": "2", "content": "port the parser", "status": "in_progress"}]}


def _say(text: str, *calls: ToolCall) -> dict[str, Any]:
    return {"text": text, "finish_reason": "tool_use" if calls else "end_turn",
            "tool_calls": calls}


def _describe(item: Event | Command) -> str:
    from .. import session as se

    if isinstance(item, se.Publish):
        entry = item.entry
        meta = dict(entry.meta or {})
        if entry.kind is se.EntryKind.GUARD_CHUNK:
            return (f"Publish guard chunk #{entry.seq} (attempt {meta['attempt']} of "
                    f"{meta['maxAttempts']}, {meta['unfinishedCount']} unfinished, discrete)")
        if entry.kind is se.EntryKind.GUARD_EXHAUSTED:
            return f"Publish #{entry.seq}: {entry.text!r}"
        return f"Publish #{entry.seq} {entry.kind.value}"
    if isinstance(item, se.MidTurnDrained):
        flag = "omitted" if item.has_queued_prompt is None else item.has_queued_prompt
        return f"MidTurnDrained {item.drain_id}: no messages, hasQueuedPrompt {flag}"
    if isinstance(item, se.PromptQueued):
        return f"PromptQueued {item.prompt_id} {item.text!r} (waits in the daemon FIFO)"
    if isinstance(item, Persist) and any(
            getattr(r, "text", "").startswith("[Todo Stop Guard]") for r in item.records):
        text = item.records[0].text  # type: ignore[union-attr]
        final = " + final-continuation sentence" if "final automatic" in text else ""
        return f"Persist {item.key}: guard continuation prompt{final} (a user-role message)"
    if isinstance(item, Event):
        return describe_event(item)
    return describe_command(item)


def _note(command: Command) -> str:
    """A short note after the commands the scene is about."""
    from .. import session as se

    if isinstance(command, se.Publish):
        if command.entry.kind is se.EntryKind.GUARD_CHUNK:
            return "the attempt commits only now that its stream opened"
        if command.entry.kind is se.EntryKind.GUARD_EXHAUSTED:
            return "two automatic continuations used: reported once, the turn ends"
    if isinstance(command, se.DrainMidTurnQueue):
        return "a natural stop: first drain the client's mid-turn messages (2 s timer)"
    if isinstance(command, se.SuppressFollowUpSuggestions):
        return "the queued prompt takes priority: no guard continuation, no suggestions"
    return ""


def daemon_timeline() -> str:
    """The daemon scene as text."""
    return daemon_scene()[0]


def daemon_config() -> Any:
    """The session configuration of the scene."""
    from .. import session as se

    return se.SessionConfig(chat_id="chat-2", turn=TurnConfig(auto_title=False),
                            guard=GuardConfig(todo_stop_guard=True, daemon=True))


def daemon_scene() -> tuple[str, list[tuple[Event, tuple[Command, ...]]]]:
    """The daemon scene: its text, and its (event, commands) pairs for a trace."""
    from .. import session as se

    state = se.Session.create(daemon_config())
    pairs: list[tuple[Event, tuple[Command, ...]]] = []
    responses = deque([
        _say("I'll track this with a todo list.", ToolCall(call_id="tw-1", name="todo_write")),
        _say("The tokenizer is ported."),
        _say("Working on the parser."),
        _say("Parser half done; stopping."),
        _say("Noted.", ToolCall(call_id="tw-2", name="todo_write")),
        _say("I'll pause here."),
        _say("Docs updated."),
    ])
    drains = deque([None, None, None, True, None])
    queue: deque[tuple[str, Event]] = deque([
        ("user", PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser")),
    ])
    later: deque[tuple[str, Event]] = deque([
        ("user", PromptSubmitted(turn_id="t2", message_id="m2", text="Keep going on the parser")),
        ("client", se.PromptQueued(prompt_id="q1", message_id="q1m", text="Update the docs")),
    ])
    lines = ["", "agentturn demo, daemon scene: the session's stop order with the todo stop guard",
             ""]
    quiet = (ExecuteTool, SaveLead, se.StartTimer, se.CancelTimer, EndTurn)
    number = 0
    while queue or later:
        if not queue:
            queue.append(later.popleft())
        who, event = queue.popleft()
        number += 1
        state, commands = se.reduce(state, event)
        pairs.append((event, commands))
        lines.append(f"{number:>2}  {who:<8} > {_describe(event)}")
        for command in commands:
            if not isinstance(command, quiet) or isinstance(command, EndTurn):
                lines.append(f"{'':>12}< {_describe(command)}")
            note = _note(command)
            if note:
                lines.append(f"{'':>14}({note})")
            if isinstance(command, Persist):
                queue.append(("storage", se_persisted(command.key)))
            elif isinstance(command, RequestModelStream) and responses:
                queue.append(("engine", StreamOpened(request_id=command.request_id)))
                queue.append(("engine", StreamCompleted(request_id=command.request_id,
                                                        **responses.popleft())))
            elif isinstance(command, ExecuteTool):
                queue.append(("tool", ToolFinished(call_id=command.call.call_id,
                                                   output="2 todos", structured=_TODO)))
            elif isinstance(command, se.DrainMidTurnQueue):
                flag = drains.popleft() if drains else None
                queue.append(("client", se.MidTurnDrained(drain_id=command.drain_id,
                                                          has_queued_prompt=flag)))
        if isinstance(event, PromptSubmitted) and event.turn_id == "t2":
            queue.appendleft(later.popleft())  # the user queues a prompt as soon as t2 starts
    usage = state.usage
    lines.append("")
    lines.append(f"usage: {usage.model_calls} model calls, {usage.guard_calls} of them the "
                 "guard's; the guard chunks stay replayable from the event ring.")
    return "\n".join(lines), pairs


def se_persisted(key: str) -> Event:
    """The storage's acknowledgement (a name the loop above reads well with)."""
    from ..events import Persisted

    return Persisted(key=key)
