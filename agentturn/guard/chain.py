"""The todo stop guard's work-chain handlers and its hold on automatic turns.

Theory of operation
-------------------
A work chain is what one unit of the user's work sees of the guard: it starts unarmed with a
fresh background baseline (:class:`~agentturn.guard.StartWorkChain`) on an ordinary prompt, an
unrelated automatic turn or a retry after trust was cleared; it is kept, with its stage, by
related background results and automatic turns and by a retry (SG-A8, SG-A10, SG-A11); new user
input starts a new stage in it (SG-A9, SG-B2); an API or network error pauses it and a hard path
suspends it (SG-S1, SG-S2); and a lifecycle event (trust cleared, Approval plan mode, the last
queued prompt aborted) ends it (SG-A12, SG-C3, SO-3). This module holds those handlers, the
building blocks that start and forget a chain (and clear a pending continuation, which the
reducer's stream handlers use too), and the two rules on automatic turns that depend on the
chain: :func:`holds_automatic_turns` and :func:`defers_automatic_turn`.

It is apart from :mod:`agentturn.guard.reducer`, which holds the stop decision, the todo-write
trust handlers, the stream and tool-loop handlers, the handler table and :func:`reduce` (which
applies the release rule with :func:`holds_automatic_turns`); the reducer imports the handlers
here and re-exports the two public rules. This module imports nothing from the reducer. The rules
are the reducer's: pure, total and deterministic, and nothing here raises.
"""

from __future__ import annotations

from typing import Any

from .._base import Command
from .._trusted import replacer
from .state import GuardPhase, GuardState, LoopOwner
from .vocabulary import (
    ApprovalMode,
    ApprovalModeChanged,
    AutomaticTurnStarted,
    BackgroundResult,
    DeferAutomaticTurn,
    ForegroundPromptSettled,
    HardStopped,
    MidTurnMessage,
    OrdinaryPromptStarted,
    QueuedPromptAborted,
    RequestErrored,
    RetryOrContinue,
    StartWorkChain,
    TrustCleared,
)

__all__ = ["defers_automatic_turn", "holds_automatic_turns"]

G = GuardPhase
_replace = replacer(GuardState)
_Commands = list[Command]


def holds_automatic_turns(state: GuardState) -> bool:
    """Whether unrelated automatic turns (and follow-up suggestions) must wait (BG-5, BG-7).

    True while the guard's chain can still resume or a complete FIFO prompt has priority: a
    queued prompt the guard yielded to has neither run nor been reported aborted
    (``prompt_first``, in any phase, Plan mode and after a trust clear included), a
    continuation is pending (``CONTINUING``), the chain awaits a queued prompt
    (``AWAITING_PROMPT``), the chain is ``ACTIVE`` or ``PAUSED`` and armed with unfinished items
    or has a guard-attributed tool loop open; and, in any phase outside ``OFF`` and ``PLAN``,
    while a foreground turn invalidated by a lifecycle event has not settled (SG-A15). False
    otherwise: off, in Plan mode, with no chain, suspended, or disarmed with no loop open.
    """
    if state.prompt_first:
        return True
    phase = state.phase
    if phase is G.OFF or phase is G.PLAN:
        return False
    if state.release_on_settle or phase is G.CONTINUING or phase is G.AWAITING_PROMPT:
        return True
    if phase is G.ACTIVE or phase is G.PAUSED:
        return state.armed or state.loop is not LoopOwner.NONE
    return False


def defers_automatic_turn(state: GuardState, related: bool) -> bool:
    """Whether the guard holds an automatic turn back now: the one rule (BG-5, SO-2, SG-A10).

    A queued prompt the guard yielded to has priority over every automatic turn until it runs
    or its abort is reported, whatever became of the chain meanwhile. Otherwise only an
    *unrelated* turn waits, and only while :func:`holds_automatic_turns`: a related result keeps
    the chain's budget and runs ("a related result retains the current budget, while an
    old-task notification or ordinary cron turn is delayed until the active chain can no longer
    resume").
    """
    if state.prompt_first:
        return True
    phase = state.phase
    if phase is G.OFF or phase is G.PLAN:
        return False
    if phase is G.AWAITING_PROMPT:
        return True
    if related and phase in (G.ACTIVE, G.PAUSED, G.CONTINUING, G.SUSPENDED):
        return False
    return holds_automatic_turns(state)


# --- building blocks --------------------------------------------------------------------------


def _new_chain(state: GuardState, turn_id: str, out: _Commands) -> GuardState:
    """Start an unarmed work chain with a fresh background baseline (SG-A7, SG-A8)."""
    chain = state.chain + 1
    out.append(StartWorkChain(chain=chain))
    return _replace(state, phase=G.ACTIVE, chain=chain, live_turn=turn_id, open_call="",
                    listed=False, unfinished=0, attempts=0, pending_attempt=0, pending_text="",
                    pending_owner=LoopOwner.NONE, pending_hook_reason=None, loop=LoopOwner.NONE)


def _clear_pending(state: GuardState, **changes: Any) -> GuardState:
    return _replace(state, pending_attempt=0, pending_text="", pending_owner=LoopOwner.NONE,
                    pending_hook_reason=None, **changes)


def _forget(state: GuardState, phase: GuardPhase, **changes: Any) -> GuardState:
    """Drop everything the chain trusted: unarmed, no stage, nothing pending, no live turn."""
    return _clear_pending(state, phase=phase, live_turn="", open_call="", listed=False,
                          unfinished=0, attempts=0, loop=LoopOwner.NONE, **changes)


# --- the user and the work chain --------------------------------------------------------------


def _on_approval_mode(state: GuardState, event: ApprovalModeChanged, out: _Commands) -> GuardState:
    # SG-C3: Plan mode is a chain boundary that clears trust; leaving it starts no chain (the
    # next ordinary prompt or automatic turn does); non-Plan to non-Plan changes nothing (SG-A13).
    into_plan = event.mode is ApprovalMode.PLAN
    if state.phase is G.PLAN:
        return state if into_plan else _replace(state, phase=G.NO_CHAIN)
    if into_plan:
        return _forget(state, G.PLAN, release_on_settle="")
    return state


def _on_prompt(state: GuardState, event: OrdinaryPromptStarted, out: _Commands) -> GuardState:
    # A prompt runs: a queued prompt's priority is over (the FIFO's prompts run as ordinary
    # prompts, first in first out).
    if state.phase is G.PLAN:
        return _replace(state, prompt_first=False) if state.prompt_first else state
    return _new_chain(_replace(state, prompt_first=False), event.turn_id, out)


def _defer(state: GuardState, event: AutomaticTurnStarted, out: _Commands) -> GuardState:
    out.append(DeferAutomaticTurn(turn_id=event.turn_id, kind=event.kind))
    return state


def _on_automatic_turn(state: GuardState, event: AutomaticTurnStarted,
                       out: _Commands) -> GuardState:
    phase = state.phase
    if defers_automatic_turn(state, event.related):
        return _defer(state, event, out)
    if phase is G.PLAN:
        return state  # nothing starts in Plan mode
    if event.related and phase is G.SUSPENDED:
        return state  # SG-A11, SG-S1: a related turn never revives a suspended chain
    if event.related and phase in (G.ACTIVE, G.PAUSED, G.CONTINUING):
        # SG-A10, SG-B2: it works for this chain and keeps its budget; like a related background
        # result it is a trusted continuation that clears a pause (SG-A11). A pending attempt
        # was never committed, so dropping it consumes nothing (SG-B3).
        return _clear_pending(state, phase=G.ACTIVE, live_turn=event.turn_id, open_call="",
                              loop=LoopOwner.NONE)
    # Unrelated, or with no chain to relate to, and nothing holds it: an independent, unarmed
    # chain.
    return _new_chain(state, event.turn_id, out)


def _on_mid_turn(state: GuardState, event: MidTurnMessage, out: _Commands) -> GuardState:
    if state.phase is G.CONTINUING:
        # The user's input joined the pending continuation's request: it sponsors that stream,
        # so the attempt is not consumed (SG-B7), and a fresh stage starts (SG-A9).
        return _clear_pending(state, phase=G.ACTIVE, attempts=0, loop=LoopOwner.NONE)
    if state.phase in (G.ACTIVE, G.PAUSED):
        # SG-A9, SG-B2: new user input keeps activation and starts a fresh two-attempt stage
        # (a continuation a paused chain still owed its retry is the user's now).
        return _clear_pending(state, phase=G.ACTIVE, attempts=0)
    return state


def _on_retry(state: GuardState, event: RetryOrContinue, out: _Commands) -> GuardState:
    if state.phase in (G.PLAN, G.SUSPENDED, G.AWAITING_PROMPT):
        return state
    trusted = event.turn_id != state.superseded_turn
    if trusted and state.phase in (G.ACTIVE, G.PAUSED) and state.armed:
        # SG-A8, SG-B2: same chain, same budget; the retried request is the live turn now.
        # A continuation whose request failed before its stream opened consumed nothing
        # (SG-B3), and its retry is that continuation again: pending, so that the retried
        # stream commits the attempt when it opens (SG-B1: it counts like any guard stream).
        phase = G.CONTINUING if state.pending_attempt else G.ACTIVE
        return _replace(state, phase=phase, live_turn=event.turn_id, open_call="")
    # SG-A8: after a trust-clearing event, a fresh chain with a fresh baseline. A retry of the
    # invalidated turn itself is that fresh chain's live turn: its writes from before the
    # invalidation were forgotten with the open call (SG-A14), so only the retry's own trusted
    # writes can arm it.
    fresh = _new_chain(state, event.turn_id, out)
    return fresh if trusted else _replace(fresh, superseded_turn="")


def _on_background(state: GuardState, event: BackgroundResult, out: _Commands) -> GuardState:
    if event.related and state.phase is G.PAUSED:
        # SG-A11: clears a pause, never a suspension; the chain goes on from the result, so a
        # continuation owed to the retry is dropped unspent (SG-B3).
        return _clear_pending(state, phase=G.ACTIVE)
    return state


# --- errors and hard paths --------------------------------------------------------------------


def _on_error(state: GuardState, event: RequestErrored, out: _Commands) -> GuardState:
    if state.phase in (G.ACTIVE, G.CONTINUING, G.PAUSED):
        # SG-S2: the state is kept for a trusted retry; an attempt not yet opened is not spent
        # (SG-B3), and it stays pending: the retry re-sends that continuation (``_on_retry``).
        return _replace(state, phase=G.PAUSED, loop=LoopOwner.NONE)
    return state


def _on_hard_stop(state: GuardState, event: HardStopped, out: _Commands) -> GuardState:
    if state.phase in (G.NO_CHAIN, G.PLAN):
        return state
    return _clear_pending(state, phase=G.SUSPENDED, loop=LoopOwner.NONE)  # SG-S1, SG-S3


# --- lifecycle --------------------------------------------------------------------------------


def _on_trust_cleared(state: GuardState, event: TrustCleared, out: _Commands) -> GuardState:
    # SG-A12: forget everything. SG-A14: the invalidated turn is remembered (one id) so that
    # neither its late results nor a retry naming it can arm. SG-A15: automatic queues stay held
    # until it settles (outside Plan mode, which holds nothing).
    superseded = event.invalidated_turn_id or state.superseded_turn
    if state.phase is G.PLAN:
        return _replace(state, superseded_turn=superseded)
    return _forget(state, G.NO_CHAIN, superseded_turn=superseded,
                   release_on_settle=event.invalidated_turn_id or "")


def _on_settled(state: GuardState, event: ForegroundPromptSettled, out: _Commands) -> GuardState:
    if state.release_on_settle and event.turn_id == state.release_on_settle:
        return _replace(state, release_on_settle="")  # SG-A15, errored or not
    return state


def _on_queued_aborted(state: GuardState, event: QueuedPromptAborted,
                       out: _Commands) -> GuardState:
    if not event.last:
        return state
    if state.phase is G.AWAITING_PROMPT:
        # SO-3, SO-4: the awaiting chain ends for good; unrelated queues may run.
        return _forget(state, G.NO_CHAIN, prompt_first=False)
    if state.prompt_first:
        # The chain ended meanwhile (a trust clear, Plan mode); the priority ends now (SO-4).
        return _replace(state, prompt_first=False)
    return state
