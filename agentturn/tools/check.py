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
* at most two guard continuations without new user input in one work chain (SG-B1).

The rules follow the session across chains and ids: a response that completes normally clears
any earlier cut-off mark on a call id it reuses (engines number calls ``call_0``, ``call_1``
in every response), and the guard's count starts over where the replay shows a new work chain
(a queued prompt or an unrelated automatic turn starts one, SG-A10), as well as at new user
input. Where the replay cannot follow (the reducer refused an event), a chain is taken to end
with its turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .._base import Command, Event, Step
from ..commands import EndTurn, ExecuteTool, Persist, RequestModelStream
from ..errors import ProtocolError
from ..events import LeadSubmitted, Persisted, PersistFailed, PromptSubmitted
from ..records import ResponseRecord
from ..trace import Trace, initial_state

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
    return initial_state(trace.part, trace.config, trace.chat_id)


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
    chains: list[object] = []  # the guard's work chain after each step, while the replay runs
    for step in trace.steps:
        try:
            state, expected = reduce(state, step.event)
        except ProtocolError as error:
            if divergence is None:
                divergence = Divergence(step=step.number, event=step.event, expected=(),
                                        recorded=step.commands, refused=str(error))
            break
        chains.append(_chain(trace.part, state))
        if divergence is None and expected != step.commands:
            divergence = Divergence(step=step.number, event=step.event, expected=expected,
                                    recorded=step.commands)
    return Report(steps=len(trace.steps), divergence=divergence,
                  broken=broken_invariants(trace, chains))


def _chain(part: str, state: Any) -> object:
    """The guard's current work chain in ``state`` (None for a turn trace)."""
    if part == "session":
        return state.guard.chain
    if part == "guard":
        return state.chain
    return None


def broken_invariants(trace: Trace, chains: Sequence[object] = ()) -> tuple[str, ...]:
    """The rules the recorded commands break, each with the step where it broke.

    ``chains`` is the guard's work chain after each step as the replay saw it (as far as it
    went); without it, a chain is taken to end with its turn."""
    from ..session.ring import EntryKind
    from ..session.vocabulary import MidTurnDrained, Publish

    broken: list[str] = []
    cut_off: set[str] = set()
    writes: set[str] = set()
    continuations = 0
    chain: object = None
    for index, step in enumerate(trace.steps):
        event = step.event
        if index < len(chains):
            if chains[index] != chain:
                continuations = 0  # a new work chain is a new stage (SG-A10)
            chain = chains[index]
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
                    if isinstance(record, ResponseRecord):
                        ids = {call.call_id for call in record.tool_calls}
                        # The record's own mark: a cut-off signal counts whatever the
                        # finish reason says (engines mislabel cut responses).
                        if record.completes_normally:
                            cut_off -= ids  # a later, complete response may reuse an id
                        else:
                            cut_off |= ids
            elif isinstance(command, ExecuteTool) and command.call.call_id in cut_off:
                broken.append(f"step {step.number}: ran {command.call.call_id!r} from a "
                              "response that did not complete normally (TL-9)")
            elif isinstance(command, RequestModelStream):
                if writes:
                    broken.append(f"step {step.number}: requested {command.request_id!r} "
                                  f"while write {sorted(writes)[0]!r} was unacknowledged (TL-5)")
                if command.lead_ids:
                    continuations = 0
            elif isinstance(command, EndTurn) and index >= len(chains):
                continuations = 0  # past the replay: a chain is taken to end with its turn
            elif isinstance(command, Publish) and command.entry.kind is EntryKind.GUARD_CHUNK:
                continuations += 1
                if continuations > 2:
                    broken.append(f"step {step.number}: a third guard continuation without new "
                                  "user input (SG-B1)")
    return tuple(broken)
