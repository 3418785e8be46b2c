"""Checking a recorded trace against the spec: replay its events, compare the commands.

Theory of operation
-------------------
The reducers are deterministic, so replaying a trace's events from the state its header
describes must give, step by step, exactly the commands it recorded. :func:`check` does that
and stops at the first step where they differ (or where the reducer refuses the event: a host
that sent it broke the protocol). Independently, :func:`broken_invariants` reads the *recorded*
commands and events for rules any host must see kept, so a trace written by an older or patched
library, or edited by hand, shows which rule its commands broke, not only that they differ:

* no tool call of a response that did not complete normally runs (TL-9);
* no model request while a write is unacknowledged, and no answer for a write never asked
  (TL-5);
* at most two guard continuations without new user input (SG-B1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._base import Command, Event, Step
from ..commands import ExecuteTool, Persist, RequestModelStream
from ..errors import ProtocolError
from ..events import LeadSubmitted, Persisted, PersistFailed, PromptSubmitted
from ..records import ResponseRecord
from ..trace import Trace

__all__ = ["Divergence", "Report", "broken_invariants", "check", "initial", "reducer"]


@attrs.frozen(kw_only=True)
class Divergence:
    """The first step whose replayed commands differ from the recorded ones."""

    step: int
    event: Event
    expected: tuple[Command, ...]
    recorded: tuple[Command, ...]
    #: Set when the reducer refused the event instead (the host broke the protocol).
    refused: str = ""


@attrs.frozen(kw_only=True)
class Report:
    """What :func:`check` found."""

    steps: int
    divergence: Divergence | None
    broken: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """The recorded commands are the spec's, and no rule was broken."""
        return self.divergence is None and not self.broken


def initial(trace: Trace) -> Any:
    """The state the trace starts from."""
    if trace.part == "turn":
        from ..turn.state import TurnState

        return TurnState.create(trace.chat_id, trace.config)
    if trace.part == "guard":
        from ..guard import GuardState

        return GuardState.create(trace.config)
    from ..session import Session

    return Session.create(trace.config)


def reducer(part: str) -> Callable[[Any, Any], Step[Any]]:
    """The reducer of ``part``."""
    if part == "turn":
        from ..turn import reduce as turn_reduce

        return turn_reduce
    if part == "guard":
        from ..guard import reduce as guard_reduce

        return guard_reduce
    from ..session import reduce as session_reduce

    return session_reduce


def check(trace: Trace) -> Report:
    """Replay ``trace`` and compare; report the first divergence and every broken rule."""
    state = initial(trace)
    reduce = reducer(trace.part)
    divergence: Divergence | None = None
    for step in trace.steps:
        try:
            state, expected = reduce(state, step.event)
        except ProtocolError as error:
            divergence = Divergence(step=step.number, event=step.event, expected=(),
                                    recorded=step.commands, refused=str(error))
            break
        if expected != step.commands:
            divergence = Divergence(step=step.number, event=step.event, expected=expected,
                                    recorded=step.commands)
            break
    return Report(steps=len(trace.steps), divergence=divergence,
                  broken=broken_invariants(trace))


def broken_invariants(trace: Trace) -> tuple[str, ...]:
    """The rules the recorded commands break, each with the step where it broke."""
    from ..session.ring import EntryKind
    from ..session.vocabulary import MidTurnDrained, Publish

    broken: list[str] = []
    cut_off: set[str] = set()
    writes: set[str] = set()
    continuations = 0
    for step in trace.steps:
        event = step.event
        if isinstance(event, Persisted | PersistFailed):
            if event.key not in writes:
                broken.append(f"step {step.number}: an answer for write {event.key!r}, which "
                              "was never asked for (TL-5)")
            writes.discard(event.key)
        if isinstance(event, PromptSubmitted | LeadSubmitted) or (
                isinstance(event, MidTurnDrained) and event.messages):
            continuations = 0
        for command in step.commands:
            if isinstance(command, Persist):
                writes.add(command.key)
                for record in command.records:
                    if isinstance(record, ResponseRecord) and not (
                            record.finish_reason.completes_normally):
                        cut_off.update(call.call_id for call in record.tool_calls)
            elif isinstance(command, ExecuteTool) and command.call.call_id in cut_off:
                broken.append(f"step {step.number}: ran {command.call.call_id!r} from a "
                              "response that did not complete normally (TL-9)")
            elif isinstance(command, RequestModelStream):
                if writes:
                    broken.append(f"step {step.number}: requested {command.request_id!r} "
                                  f"while write {sorted(writes)[0]!r} was unacknowledged (TL-5)")
                if command.lead_ids:
                    continuations = 0
            elif isinstance(command, Publish) and command.entry.kind is EntryKind.GUARD_CHUNK:
                continuations += 1
                if continuations > 2:
                    broken.append(f"step {step.number}: a third guard continuation without new "
                                  "user input (SG-B1)")
    return tuple(broken)
