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
from ..lead import MAX_PENDING, LeadQueue
from ..records import ToolCall
from ..turn.state import LATE_MEMORY, SAVING_PHASES, TurnPhase, TurnState
from .background import AutomaticTurn
from .ring import EventRing
from .state import SessionConfig, SessionPhase, SessionState
from .tick import ISSUED_MEMORY

__all__ = ["inconsistencies"]

T = TurnPhase
_DRAINING, _HOOKS = SessionPhase.DRAINING, SessionPhase.HOOKS


def _distinct(name: str, ids: tuple[str, ...]) -> list[str]:
    return [f"{name} holds {ids!r}, an id twice"] if len(set(ids)) != len(ids) else []


@remember_recent(1)
def _turn(turn: TurnState) -> tuple[str, ...]:
    # Most steps rebuild the turn but keep its calls and its Lead queue: those checks are
    # remembered for those objects (_calls, _lead), the rest is a few comparisons, written out
    # (a checker asks this of every state it reaches).
    found: list[str] = []
    phase, next_call, persisting = turn.phase, turn.next_call, turn.persisting
    calls = len(turn.calls)
    if not 0 <= next_call <= calls:
        found.append(f"turn.next_call is {next_call} with {calls} call(s)")
    elif (phase in _ON_A_CALL or turn.tool_in_flight) and (
            next_call >= calls):
        found.append(f"turn.phase {phase.name} waits on call {next_call}, but the "
                     f"response has {calls}")
    if turn.request_seq < 0:
        found.append("turn.request_seq is negative")
    if turn.persist_seq < 0:
        found.append("turn.persist_seq is negative")
    if turn.tool_in_flight and phase not in _RUNNING_OR_ENDING:
        found.append(f"turn.tool_in_flight in turn.phase {phase.name}")
    if not persisting and phase in SAVING_PHASES:
        found.append(f"turn.phase {phase.name} waits on a write, but turn.persisting is "
                     "false")
    if persisting and phase not in _WRITING_PHASES:
        found.append(f"turn.persisting in turn.phase {phase.name}")
    if phase is _ENDING and turn.ending is None:
        found.append("turn.phase ENDING has no turn.ending")
    if phase is not _IDLE and not turn.turn_id:
        found.append(f"turn.phase {phase.name} has no turn.turn_id")
    if turn.request_seq < 1 and phase in _ON_A_REQUEST:
        found.append(f"turn.phase {phase.name} waits on a request, but turn.request_seq "
                     "is 0")
    if calls > 1:
        found += _calls(turn.calls)
    if len(turn.dismissed_calls) > LATE_MEMORY:
        found.append(f"turn.dismissed_calls holds more than {LATE_MEMORY} ids")
    if len(turn.cancelled_requests) > LATE_MEMORY:
        found.append(f"turn.cancelled_requests holds more than {LATE_MEMORY} ids")
    found += _lead(turn.lead)
    return tuple(found)


#: Where a turn may hold a write in flight.
_WRITING_PHASES = (*SAVING_PHASES, T.ENDING)
# The turn phases the checks name, bound once (reading a member off its enum class costs ten
# times reading a global on Python 3.11, and a checker asks about every state it reaches).
_IDLE, _ENDING = T.IDLE, T.ENDING
_ON_A_CALL = (T.AWAITING_PERMISSION, T.RUNNING_TOOL)
_RUNNING_OR_ENDING = (T.RUNNING_TOOL, T.ENDING)
_ON_A_REQUEST = (T.AWAITING_STREAM, T.STREAMING)


@remember_recent(1)
def _calls(calls: tuple[ToolCall, ...]) -> tuple[str, ...]:
    return tuple(_distinct("turn.calls", tuple(call.call_id for call in calls)))


@remember_recent(1)
def _lead(lead: LeadQueue) -> tuple[str, ...]:
    found: list[str] = []
    entries = tuple(entry.lead_id for entry in lead.entries)
    if len(entries) > MAX_PENDING:
        found.append(f"turn.lead.entries holds more than {MAX_PENDING} instructions")
    found += _distinct("turn.lead.entries", entries)
    if len(lead.recent) > MAX_PENDING:
        found.append(f"turn.lead.recent holds more than {MAX_PENDING} ids")
    return tuple(found)


def inconsistencies(state: SessionState) -> tuple[str, ...]:
    """Every way ``state`` disagrees with itself, one line each (empty: it agrees)."""
    found = list(_turn(state.turn))
    phase = state.phase
    if phase is _DRAINING and not state.drain_id:
        found.append("phase DRAINING has no drain_id")
    if phase is _HOOKS and not state.hook_run:
        found.append("phase HOOKS has no hook_run")
    if state.stops < 0:
        found.append("stops is negative")
    if state.hook_blocks < 0:
        found.append("hook_blocks is negative")
    if len(state.issued) > ISSUED_MEMORY:
        found.append(f"issued holds more than {ISSUED_MEMORY} ids")
    if len(state.fifo) > 1:
        found += _distinct("fifo", tuple(entry.prompt_id for entry in state.fifo))
    if len(state.clients) > 1:
        found += _distinct("clients", state.clients)
    if state.deferred.turns or state.deferred_prompts:
        found += _deferred(state.deferred.turns, state.deferred_prompts)
    found += _ring(state.ring, state.config)
    return tuple(found)


@remember_recent(1)
def _deferred(turns: tuple[AutomaticTurn, ...], deferred_prompts: tuple[tuple[str, str, str], ...]
              ) -> tuple[str, ...]:
    found: list[str] = []
    held = {turn.turn_id for turn in turns}
    prompts = {prompt[0] for prompt in deferred_prompts}
    if held - prompts:
        found.append(f"deferred.turns holds {sorted(held - prompts)!r} without its prompt in "
                     "deferred_prompts")
    if prompts - held:
        found.append(f"deferred_prompts holds {sorted(prompts - held)!r} for no held turn")
    return tuple(found)


# A checker asks about state after state, and most steps leave the ring as it was, many the
# turn, most the deferred queue, the calls and the Lead queue: the last answer for each is
# remembered (see agentturn._memo).
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
