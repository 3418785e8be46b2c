"""The demo: one scripted turn of a coding agent, told as events in and commands out.

Theory of operation
-------------------
:data:`SCRIPT` is what a host would feed the reducer: the user's prompt, the engine's answers,
storage acknowledgements, a permission decision, tool results, a title, and a Lead instruction
typed while a file write runs. :func:`timeline` feeds it to :func:`agentturn.reduce` and renders
each step as a line for the event and one line per command (:mod:`~agentturn.tools.render`), so
the story of the turn reads top to bottom: the title arrives before the first tool, the Lead
waits for the write, the unstarted call is skipped, and the model reads the instruction before
doing anything else.

This module builds text only; ``python -m agentturn demo`` prints it.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._base import Command, Event
from ..events import (
    LeadSaved,
    LeadSubmitted,
    PermissionDecided,
    PermissionDecision,
    Persisted,
    PromptSubmitted,
    StreamCompleted,
    StreamOpened,
    TitleGenerated,
    ToolFinished,
)
from ..records import ToolCall
from ..turn import TurnState, reduce
from .render import describe

__all__ = ["SCRIPT", "steps", "timeline"]

_READ = ToolCall(call_id="call-1", name="read_file", arguments='{"path": "app/config.py"}')
_WRITE = ToolCall(call_id="call-2", name="write_file", needs_permission=True,
                  arguments='{"path": "app/config.py", "content": "..."}')
_TEST = ToolCall(call_id="call-3", name="run_tests", arguments='{"path": "tests/"}')

#: (who, event) pairs: the host's side of the story.
SCRIPT: tuple[tuple[str, Event], ...] = (
    ("user", PromptSubmitted(turn_id="t1", message_id="msg-1",
                             text="Rename load_cfg to load_config and fix its callers")),
    ("storage", Persisted(key="t1/p1")),
    ("engine", StreamOpened(request_id="t1/r1")),
    ("engine", StreamCompleted(request_id="t1/r1", text="I'll read the config module first.",
                               finish_reason="tool_calls", tool_calls=(_READ,))),
    ("storage", Persisted(key="t1/p2")),
    ("namer", TitleGenerated(request_id="chat-1/title-1", title="Rename load_cfg")),
    ("tool", ToolFinished(call_id="call-1", output="def load_cfg(path): ...")),
    ("storage", Persisted(key="t1/p3")),
    ("engine", StreamOpened(request_id="t1/r2")),
    ("engine", StreamCompleted(request_id="t1/r2", text="", finish_reason="tool_use",
                               tool_calls=(_WRITE, _TEST))),
    ("storage", Persisted(key="t1/p4")),
    ("user", PermissionDecided(call_id="call-2", decision=PermissionDecision.ALLOW)),
    ("user", LeadSubmitted(chat_id="chat-1", lead_id="lead-1",
                           text="Keep a load_cfg alias for the plugins", attachment_ids=())),
    ("storage", LeadSaved(lead_id="lead-1")),
    ("tool", ToolFinished(call_id="call-2", output="wrote app/config.py")),
    ("storage", Persisted(key="t1/p5")),
    ("storage", Persisted(key="t1/p6")),
    ("engine", StreamOpened(request_id="t1/r3")),
    ("engine", StreamCompleted(request_id="t1/r3",
                               text="Renamed to load_config and kept load_cfg as an alias.",
                               finish_reason="end_turn")),
    ("storage", Persisted(key="t1/p7")),
)


_NOTES = {
    4: "the first usable response: the title is asked for now, before its tool runs",
    6: "the title is back; only now does the first tool run",
    13: "a Lead arrives while the permitted file write runs: saved, not applied yet",
    16: "the write finished on its own; at this boundary run_tests never started, so it "
        "is recorded as skipped",
    17: "the model reads the Lead before any further action",
}


def steps(script: Iterable[tuple[str, Event]] = SCRIPT, chat_id: str = "chat-1"
          ) -> list[tuple[Event, tuple[Command, ...]]]:
    """The scripted turn as (event, commands) pairs, for a trace."""
    state = TurnState.create(chat_id)
    pairs = []
    for _, event in script:
        state, commands = reduce(state, event)
        pairs.append((event, commands))
    return pairs


def timeline(script: Iterable[tuple[str, Event]] = SCRIPT, chat_id: str = "chat-1") -> str:
    """The scripted turn as text: each event, the commands it produced, and short notes."""
    state = TurnState.create(chat_id)
    lines = ["agentturn demo: one turn of a coding agent, as events in (>) and commands out (<)",
             ""]
    for number, (who, event) in enumerate(script, start=1):
        step = reduce(state, event)
        state = step.state
        lines.append(f"{number:>2}  {who:<8} > {describe(event)}")
        lines.extend(f"{'':>12}< {describe(command)}" for command in step.commands)
        if number in _NOTES:
            lines.append(f"{'':>12}  ({_NOTES[number]})")
    lines.append("")
    lines.append(f"final phase: {state.phase.name}; every step was pure: replaying the same "
                 "events gives the same commands.")
    return "\n".join(lines)
