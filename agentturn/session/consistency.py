"""Whether a session state agrees with itself: the checks a restored state must pass.

Theory of operation
-------------------
States are made only by reducers, so they carry no validators. A state that comes back from
storage (``agentturn.trace.load_state``, or a host's own store) may have been edited or written
by something else; handed to a reducer, a disagreement would surface later as an exception deep
inside a step. :func:`inconsistencies` lists what the reducers never produce: an index past the
calls it indexes, a phase that waits on an id the state does not hold, a counter below zero,
an id twice where ids are distinct, a bounded memory over its bound, the ring's sequence numbers
out of order. Each message names the field. The checks are the reducers' own invariants, so
every state the explorer reaches passes them (the explorer checks them on every state it
reaches, beside the rules only a run can break).
"""

from __future__ import annotations

from .._memo import remember_recent
from ..lead import MAX_PENDING
from ..turn.state import LATE_MEMORY, SAVING_PHASES, TurnPhase, TurnState
from .ring import EventRing
from .state import SessionConfig, SessionPhase, SessionState
from .tick import ISSUED_MEMORY

__all__ = ["inconsistencies"]

T = TurnPhase


def _distinct(name: str, ids: tuple[str, ...]) -> list[str]:
    return [f"{name} holds {ids!r}, an id twice"] if len(set(ids)) != len(ids) else []


@remember_recent(1)
def _turn(turn: TurnState) -> tuple[str, ...]:
    found: list[str] = []
    calls = len(turn.calls)
    if not 0 <= turn.next_call <= calls:
        found.append(f"turn.next_call is {turn.next_call} with {calls} call(s)")
    elif (turn.phase in (T.AWAITING_PERMISSION, T.RUNNING_TOOL) or turn.tool_in_flight) and (
            turn.next_call >= calls):
        found.append(f"turn.phase {turn.phase.name} waits on call {turn.next_call}, but the "
                     f"response has {calls}")
    for name in ("request_seq", "persist_seq"):
        if getattr(turn, name) < 0:
            found.append(f"turn.{name} is negative")
    if turn.tool_in_flight and turn.phase not in (T.RUNNING_TOOL, T.ENDING):
        found.append(f"turn.tool_in_flight in turn.phase {turn.phase.name}")
    if turn.phase in SAVING_PHASES and not turn.persisting:
        found.append(f"turn.phase {turn.phase.name} waits on a write, but turn.persisting is "
                     "false")
    if turn.persisting and turn.phase not in (*SAVING_PHASES, T.ENDING):
        found.append(f"turn.persisting in turn.phase {turn.phase.name}")
    if turn.phase is T.ENDING and turn.ending is None:
        found.append("turn.phase ENDING has no turn.ending")
    if turn.phase is not T.IDLE and not turn.turn_id:
        found.append(f"turn.phase {turn.phase.name} has no turn.turn_id")
    if turn.phase in (T.AWAITING_STREAM, T.STREAMING) and turn.request_seq < 1:
        found.append(f"turn.phase {turn.phase.name} waits on a request, but turn.request_seq "
                     "is 0")
    found += _distinct("turn.calls", tuple(call.call_id for call in turn.calls))
    for name in ("dismissed_calls", "cancelled_requests"):
        if len(getattr(turn, name)) > LATE_MEMORY:
            found.append(f"turn.{name} holds more than {LATE_MEMORY} ids")
    entries = tuple(entry.lead_id for entry in turn.lead.entries)
    if len(entries) > MAX_PENDING:
        found.append(f"turn.lead.entries holds more than {MAX_PENDING} instructions")
    found += _distinct("turn.lead.entries", entries)
    if len(turn.lead.recent) > MAX_PENDING:
        found.append(f"turn.lead.recent holds more than {MAX_PENDING} ids")
    return tuple(found)


def inconsistencies(state: SessionState) -> tuple[str, ...]:
    """Every way ``state`` disagrees with itself, one line each (empty: it agrees)."""
    found = list(_turn(state.turn))
    if state.phase is SessionPhase.DRAINING and not state.drain_id:
        found.append("phase DRAINING has no drain_id")
    if state.phase is SessionPhase.HOOKS and not state.hook_run:
        found.append("phase HOOKS has no hook_run")
    for name in ("stops", "hook_blocks"):
        if getattr(state, name) < 0:
            found.append(f"{name} is negative")
    if len(state.issued) > ISSUED_MEMORY:
        found.append(f"issued holds more than {ISSUED_MEMORY} ids")
    found += _distinct("fifo", tuple(entry.prompt_id for entry in state.fifo))
    found += _distinct("clients", state.clients)
    held = {turn.turn_id for turn in state.deferred.turns}
    prompts = {prompt[0] for prompt in state.deferred_prompts}
    if held - prompts:
        found.append(f"deferred.turns holds {sorted(held - prompts)!r} without its prompt in "
                     "deferred_prompts")
    if prompts - held:
        found.append(f"deferred_prompts holds {sorted(prompts - held)!r} for no held turn")
    found += _ring(state.ring, state.config)
    return tuple(found)


# A checker asks about state after state, and most steps leave the ring as it was, many the
# turn: the last answer for each is remembered (see agentturn._memo).
@remember_recent(1)
def _ring(ring: EventRing, config: SessionConfig) -> tuple[str, ...]:
    found: list[str] = []
    if (ring.capacity, ring.pinned_capacity) != (config.ring_capacity, config.ring_pinned):
        found.append("ring.capacity and ring.pinned_capacity differ from the configuration's")
    for name in ("live", "pinned"):
        seqs = [entry.seq for entry in getattr(ring, name)]
        if any(seq >= ring.next_seq or seq < 1 for seq in seqs):
            found.append(f"ring.{name} holds a sequence number outside 1..{ring.next_seq - 1}")
        if seqs != sorted(set(seqs)):
            found.append(f"ring.{name} holds sequence numbers out of order or twice")
    return tuple(found)
