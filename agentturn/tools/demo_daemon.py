"""The demo's daemon scene: the session's stop order, told as events in and commands out.

Theory of operation
-------------------
The scene runs on :class:`~agentturn.testing.ScriptedHost`, the scripted host the tests and the
benchmark use: writes are acknowledged, the model answers from a list, every tool call is a todo
write with one item unfinished, and the client's drain replies come from a script. Every event
and command is rendered as one line by :mod:`~agentturn.tools.render`, like the demo's turn.
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
from ..commands import EndTurn, ExecuteTool, SaveLead
from ..events import PromptSubmitted
from ..guard import GuardConfig
from ..records import ToolCall
from ..turn.state import TurnConfig
from .render import describe

__all__ = ["daemon_config", "daemon_scene", "daemon_timeline"]

_TODO = {"type": "todo_list", "todos": [
    {"id": "1", "content": "port the tokenizer", "status": "completed"},
    {"id": "2", "content": "port the parser", "status": "in_progress"}]}
#: Who sends each kind of event, for the timeline's second column.
_WHO = {"PromptSubmitted": "user", "PromptQueued": "client", "MidTurnDrained": "client",
        "Persisted": "storage", "StreamOpened": "engine", "StreamCompleted": "engine",
        "ToolFinished": "tool"}


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
    from ..testing import ScriptedHost, say

    drains = deque([None, None, None, True, None])

    class Daemon(ScriptedHost):
        def run(self, call: ToolCall) -> tuple[str, Any]:
            return "2 todos", _TODO

        def stepped(self, event: Event) -> None:
            if isinstance(event, PromptSubmitted) and event.turn_id == "t2":
                # the user queues a prompt as soon as t2 starts
                self.queue.appendleft(se.PromptQueued(prompt_id="q1", message_id="q1m",
                                                      text="Update the docs"))

    host = Daemon(daemon_config())
    host.drain = lambda command: se.MidTurnDrained(
        drain_id=command.drain_id, has_queued_prompt=drains.popleft() if drains else None)
    host.responses.extend([
        say("I'll track this with a todo list.", ToolCall(call_id="tw-1", name="todo_write")),
        say("The tokenizer is ported."),
        say("Working on the parser."),
        say("Parser half done; stopping."),
        say("Noted.", ToolCall(call_id="tw-2", name="todo_write")),
        say("I'll pause here."),
        say("Docs updated."),
    ])
    host.send(PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser"))
    host.send(PromptSubmitted(turn_id="t2", message_id="m2", text="Keep going on the parser"))
    lines = ["", "agentturn demo, daemon scene: the session's stop order with the todo stop guard",
             ""]
    quiet = (ExecuteTool, SaveLead, se.StartTimer, se.CancelTimer)
    for number, (event, commands) in enumerate(host.steps, start=1):
        lines.append(f"{number:>2}  {_WHO.get(type(event).__name__, 'host'):<8} > "
                     f"{describe(event)}")
        for command in commands:
            if not isinstance(command, quiet) or isinstance(command, EndTurn):
                lines.append(f"{'':>12}< {describe(command)}")
            note = _note(command)
            if note:
                lines.append(f"{'':>14}({note})")
    usage = host.state.usage
    lines.append("")
    lines.append(f"usage: {usage.model_calls} model calls, {usage.guard_calls} of them the "
                 "guard's; the guard chunks stay replayable from the event ring.")
    return "\n".join(lines), host.steps
