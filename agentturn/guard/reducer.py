"""The todo stop guard's reducer, its pure stop decision and its hold on automatic turns.

Theory of operation
-------------------
:func:`reduce` takes the session's facts (see :mod:`agentturn.guard.vocabulary`) and returns the
guard's decisions as commands. The decision at a natural stop is :func:`decide`, a pure function
of the state: deciding twice without committing gives the same attempt number, because an
attempt is counted only when ``GuardStreamOpened`` reports that its stream was returned (SG-B3).
Its :class:`DecisionReason` says why, as data.

The budget rule lives in one place, :func:`_next_guard_attempt`: a stage allows
:data:`MAX_ATTEMPTS` guard-attributable streams, prompted continuations and tool-result
follow-ups alike (SG-B1, SG-B4); new user input (a mid-turn message) starts a new stage (SG-B2).
Retries and related automatic turns keep the chain and its stage (SG-A10, SG-B2).

The automatic-queue rule lives in one place too, :func:`reduce`: :func:`holds_automatic_turns`
says whether the guard's chain can still resume (or a FIFO prompt has priority), and a step that
turns it from true to false emits exactly one :class:`ReleaseAutomaticQueues` (SG-A15, SO-4,
BG-5). While it holds, an unrelated automatic turn gets :class:`DeferAutomaticTurn` instead of a
new chain.

Trust rules: only :class:`TodoWriteResult` can arm, and only when it answers the open call
(:class:`TodoWriteStarted`), is successful, top-level, from the built-in tool, observed after
status calculation, from the live turn (never the one invalidated turn), with a valid envelope
(SG-A1 ... SG-A3, SG-A14). Any result for the open call closes it, so a duplicate report finds
nothing open. The newest trusted result replaces the count and an empty or completed list disarms
at once (SG-A4, SG-A5). A disarmed chain makes no new continuation, but a tool loop opened by a
committed guard stream still sends its results (SG-A6, SG-B6). In Approval plan mode nothing
arms, starts or continues (SG-C3).

Rules this module keeps: pure, total and deterministic; host misuse raises
:class:`~agentturn.UnexpectedEvent` before anything changes; no other exception escapes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from .._base import Command, Step, Value, new_step, replacer
from ..errors import UnexpectedEvent, check_state
from .envelope import parse_todo_envelope
from .state import GUARD_GRAPH, GuardPhase, GuardState, LoopOwner
from .texts import MAX_ATTEMPTS, GuardChunkMeta, continuation_text, exhaustion_text
from .vocabulary import (
    ApprovalMode,
    ApprovalModeChanged,
    AutomaticTurnStarted,
    BackgroundResult,
    ClientAttached,
    ContinueWithGuardPrompt,
    DeferAutomaticTurn,
    EmitAgentMessageChunk,
    ForegroundPromptSettled,
    GuardStreamNotOpened,
    GuardStreamOpened,
    HardStopped,
    HookMayContinue,
    KeepToolResults,
    MidTurnMessage,
    ModelChanged,
    NaturalStop,
    NotOpenedReason,
    ObservationPoint,
    OrdinaryPromptStarted,
    OrdinaryStreamOpened,
    QueuedPromptAborted,
    ReleaseAutomaticQueues,
    ReportGuardExhausted,
    RequestErrored,
    RetryOrContinue,
    SendToolResults,
    SettingsChanged,
    Sponsor,
    StartWorkChain,
    SubagentTodoObserved,
    TodoArgumentsObserved,
    TodoDiskStateLoaded,
    TodoHistoryReplayed,
    TodoWriteResult,
    TodoWriteStarted,
    ToolOrigin,
    ToolResultsReady,
    TrustCleared,
)

__all__ = [
    "Decision",
    "DecisionReason",
    "GuardDecision",
    "decide",
    "defers_automatic_turn",
    "holds_automatic_turns",
    "reduce",
    "reduce_into",
]

G = GuardPhase
_replace = replacer(GuardState)
_Commands = list[Command]


class Decision(enum.Enum):
    """What the guard decides at a natural stop."""

    #: Nothing for the guard to do; the stop stands (or another rule acts).
    NONE = "none"
    #: Mid-turn user messages run first; the guard's budget resets (SO-1).
    USER_CONTINUATION = "user_continuation"
    #: A complete queued prompt has priority; the chain waits for it (SO-2).
    AWAIT_QUEUED_PROMPT = "await_queued_prompt"
    #: Armed with unfinished items, but relevant background input comes first (SO-7, BG-2):
    #: the stop stands and the chain can still resume.
    DEFER_FOR_BACKGROUND = "defer_for_background"
    #: Open one more guard-attributable stream with the continuation prompt.
    CONTINUE = "continue"
    #: The stage's attempts are used up with items unfinished.
    EXHAUSTED = "exhausted"


class DecisionReason(enum.Enum):
    """Why :func:`decide` decided what it did."""

    #: The guard is not enabled in this session (SG-C1, SG-C5, SG-C6).
    GUARD_OFF = "guard_off"
    #: Approval plan mode (SG-C3).
    PLAN_MODE = "plan_mode"
    #: No work chain (before the first prompt, after trust was cleared or Plan mode).
    NO_CHAIN = "no_chain"
    #: A guard-attributable stream is already pending.
    CONTINUATION_PENDING = "continuation_pending"
    #: An API or network error paused the chain (SG-S2).
    PAUSED = "paused"
    #: A hard path or exhaustion suspended the chain (SG-S1).
    SUSPENDED = "suspended"
    #: The chain waits for a queued prompt (SO-2).
    AWAITING_PROMPT = "awaiting_prompt"
    #: Mid-turn user messages were drained at this stop (SO-1).
    MID_TURN_MESSAGES = "mid_turn_messages"
    #: The daemon FIFO holds a complete prompt (SO-2).
    QUEUED_PROMPT = "queued_prompt"
    #: No trusted todo list arrived in this chain (SG-A1).
    NOT_ARMED = "not_armed"
    #: The newest trusted todo list has nothing unfinished (SG-A5).
    NOTHING_UNFINISHED = "nothing_unfinished"
    #: Relevant background input is pending (SO-7, BG-2).
    RELEVANT_BACKGROUND = "relevant_background"
    #: Armed with unfinished todos and an attempt left.
    UNFINISHED_TODOS = "unfinished_todos"
    #: The stage's attempts are used up (SG-B1).
    ATTEMPTS_USED_UP = "attempts_used_up"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class GuardDecision(Value):
    """The result of :func:`decide`; ``attempt`` and ``text`` are set for ``CONTINUE``."""

    decision: Decision
    reason: DecisionReason
    attempt: int = 0
    text: str = ""


_PHASE_REASONS: Mapping[GuardPhase, DecisionReason] = MappingProxyType({
    G.OFF: DecisionReason.GUARD_OFF,
    G.PLAN: DecisionReason.PLAN_MODE,
    G.NO_CHAIN: DecisionReason.NO_CHAIN,
    G.CONTINUING: DecisionReason.CONTINUATION_PENDING,
    G.PAUSED: DecisionReason.PAUSED,
    G.SUSPENDED: DecisionReason.SUSPENDED,
    G.AWAITING_PROMPT: DecisionReason.AWAITING_PROMPT,
})


def decide(state: GuardState, stop: NaturalStop) -> GuardDecision:
    """The guard's decision at a natural stop, without changing anything (SO-1, SO-2, SO-7)."""
    if state.phase is not G.ACTIVE:
        return GuardDecision(decision=Decision.NONE, reason=_PHASE_REASONS[state.phase])
    if stop.mid_turn_messages:
        return GuardDecision(decision=Decision.USER_CONTINUATION,
                             reason=DecisionReason.MID_TURN_MESSAGES)
    if stop.queued_prompt:
        return GuardDecision(decision=Decision.AWAIT_QUEUED_PROMPT,
                             reason=DecisionReason.QUEUED_PROMPT)
    if not state.armed:
        reason = DecisionReason.NOTHING_UNFINISHED if state.listed else DecisionReason.NOT_ARMED
        return GuardDecision(decision=Decision.NONE, reason=reason)
    if stop.relevant_background:
        return GuardDecision(decision=Decision.DEFER_FOR_BACKGROUND,
                             reason=DecisionReason.RELEVANT_BACKGROUND)
    attempt = _next_guard_attempt(state)
    if attempt is None:
        return GuardDecision(decision=Decision.EXHAUSTED, reason=DecisionReason.ATTEMPTS_USED_UP)
    return GuardDecision(decision=Decision.CONTINUE, reason=DecisionReason.UNFINISHED_TODOS,
                         attempt=attempt, text=continuation_text(attempt, state.unfinished))


def holds_automatic_turns(state: GuardState) -> bool:
    """Whether unrelated automatic turns (and follow-up suggestions) must wait (BG-5, BG-7).

    True while the guard's chain can still resume or a complete FIFO prompt has priority: a
    continuation is pending (``CONTINUING``), the chain awaits a queued prompt
    (``AWAITING_PROMPT``), the chain is ``ACTIVE`` or ``PAUSED`` and armed with unfinished items
    or has a guard-attributed tool loop open; and, in any phase outside ``OFF`` and ``PLAN``,
    while a foreground turn invalidated by a lifecycle event has not settled (SG-A15). False
    otherwise: off, in Plan mode, with no chain, suspended, or disarmed with no loop open.
    """
    phase = state.phase
    if phase is G.OFF or phase is G.PLAN:
        return False
    if state.release_on_settle or phase is G.CONTINUING or phase is G.AWAITING_PROMPT:
        return True
    if phase is G.ACTIVE or phase is G.PAUSED:
        return state.armed or state.loop is not LoopOwner.NONE
    return False


def _next_guard_attempt(state: GuardState) -> int | None:
    """The one budget rule: the next attempt of this stage, or ``None`` when used up."""
    return state.attempts + 1 if state.attempts < MAX_ATTEMPTS else None


# --- building blocks --------------------------------------------------------------------------


def _new_chain(state: GuardState, turn_id: str, out: _Commands) -> GuardState:
    """Start an unarmed work chain with a fresh background baseline (SG-A7, SG-A8)."""
    chain = state.chain + 1
    out.append(StartWorkChain(chain=chain))
    return _replace(state, phase=G.ACTIVE, chain=chain, live_turn=turn_id, open_call="",
                    listed=False, unfinished=0, attempts=0, pending_attempt=0, pending_text="",
                    pending_owner=LoopOwner.NONE, pending_hook_reason=None, loop=LoopOwner.NONE)


def _exhaust(state: GuardState, out: _Commands) -> GuardState:
    """Report exhaustion (OB-3) and suspend the chain.

    Once per chain by construction: a suspended chain never reaches this again; only a new
    chain (which starts unreported) leaves the suspension.
    """
    if state.armed:
        out.append(ReportGuardExhausted(text=exhaustion_text(state.unfinished)))
    return _replace(state, phase=G.SUSPENDED, loop=LoopOwner.NONE)


def _pending(state: GuardState, attempt: int, text: str, owner: LoopOwner,
             hook_reason: str | None) -> GuardState:
    return _replace(state, phase=G.CONTINUING, pending_attempt=attempt, pending_text=text,
                    pending_owner=owner, pending_hook_reason=hook_reason)


def _end_loop(state: GuardState) -> GuardState:
    """The current primary stream is no longer anyone's tool loop."""
    return state if state.loop is LoopOwner.NONE else _replace(state, loop=LoopOwner.NONE)


def _clear_pending(state: GuardState, **changes: Any) -> GuardState:
    return _replace(state, pending_attempt=0, pending_text="", pending_owner=LoopOwner.NONE,
                    pending_hook_reason=None, **changes)


def _forget(state: GuardState, phase: GuardPhase, **changes: Any) -> GuardState:
    """Drop everything the chain trusted: unarmed, no stage, nothing pending, no live turn."""
    return _clear_pending(state, phase=phase, live_turn="", open_call="", listed=False,
                          unfinished=0, attempts=0, loop=LoopOwner.NONE, **changes)


# --- handlers ---------------------------------------------------------------------------------


def _unchanged(state: GuardState, event: object, out: _Commands) -> GuardState:
    # Untrusted todo sources (SG-A3), a live client attach and a model change (SG-A13), and a
    # settings change, which applies to new sessions only (SG-C2): none changes the guard.
    return state


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
    if state.phase is G.PLAN:
        return state
    return _new_chain(state, event.turn_id, out)


def _defer(state: GuardState, event: AutomaticTurnStarted, out: _Commands) -> GuardState:
    out.append(DeferAutomaticTurn(turn_id=event.turn_id, kind=event.kind))
    return state


def defers_automatic_turn(state: GuardState, related: bool) -> bool:
    """Whether the guard holds an automatic turn back now: the one rule (BG-5, SO-2, SG-A10).

    A queued prompt the chain awaits has priority over every automatic turn. Otherwise only an
    *unrelated* turn waits, and only while :func:`holds_automatic_turns`: a related result keeps
    the chain's budget and runs ("a related result retains the current budget, while an
    old-task notification or ordinary cron turn is delayed until the active chain can no longer
    resume").
    """
    phase = state.phase
    if phase is G.OFF or phase is G.PLAN:
        return False
    if phase is G.AWAITING_PROMPT:
        return True
    if related and phase in (G.ACTIVE, G.PAUSED, G.CONTINUING, G.SUSPENDED):
        return False
    return holds_automatic_turns(state)


def _on_automatic_turn(state: GuardState, event: AutomaticTurnStarted,
                       out: _Commands) -> GuardState:
    phase = state.phase
    if phase is G.PLAN:
        return state  # nothing starts in Plan mode; nothing is held either
    if defers_automatic_turn(state, event.related):
        return _defer(state, event, out)
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
        # SG-A9, SG-B2: new user input keeps activation and starts a fresh two-attempt stage.
        return _replace(state, phase=G.ACTIVE, attempts=0)
    return state


def _on_retry(state: GuardState, event: RetryOrContinue, out: _Commands) -> GuardState:
    if state.phase in (G.PLAN, G.SUSPENDED, G.AWAITING_PROMPT):
        return state
    trusted = event.turn_id != state.superseded_turn
    if trusted and state.phase in (G.ACTIVE, G.PAUSED) and state.armed:
        # SG-A8, SG-B2: same chain, same budget; the retried request is the live turn now.
        return _replace(state, phase=G.ACTIVE, live_turn=event.turn_id, open_call="")
    # SG-A8: after a trust-clearing event, a fresh chain with a fresh baseline. A retry of the
    # invalidated turn itself is that fresh chain's live turn: its writes from before the
    # invalidation were forgotten with the open call (SG-A14), so only the retry's own trusted
    # writes can arm it.
    fresh = _new_chain(state, event.turn_id, out)
    return fresh if trusted else _replace(fresh, superseded_turn="")


def _on_background(state: GuardState, event: BackgroundResult, out: _Commands) -> GuardState:
    if event.related and state.phase is G.PAUSED:
        return _replace(state, phase=G.ACTIVE)  # SG-A11: clears a pause, never a suspension
    return state


def _live(state: GuardState, turn_id: str) -> bool:
    return turn_id == state.live_turn and turn_id != state.superseded_turn


def _on_todo_started(state: GuardState, event: TodoWriteStarted, out: _Commands) -> GuardState:
    # Tools run one at a time (TL-4): this call replaces any open one. Only a call of the live
    # turn in an active chain can later be trusted (SG-A14, SG-C3).
    trusted = state.phase is G.ACTIVE and _live(state, event.turn_id)
    open_call = event.call_id if trusted else ""
    return state if open_call == state.open_call else _replace(state, open_call=open_call)


def _on_todo_result(state: GuardState, event: TodoWriteResult, out: _Commands) -> GuardState:
    if not state.open_call or event.call_id != state.open_call:
        return state  # SG-A3: no open call to answer: a duplicate, or a call never started
    closed = _replace(state, open_call="")
    trusted = (
        state.phase is G.ACTIVE
        and event.succeeded
        and event.top_level
        and event.origin is ToolOrigin.BUILTIN
        and event.point is ObservationPoint.AFTER_STATUS
        and _live(state, event.turn_id)
    )
    counts = parse_todo_envelope(event.envelope) if trusted else None
    if counts is None:
        return closed  # untrusted, or rejected whole: the count stays as it was
    # SG-A4: the newest result replaces the count; SG-A5: empty or all done disarms at once.
    return _replace(closed, listed=True, unfinished=counts.unfinished)


def _on_natural_stop(state: GuardState, event: NaturalStop, out: _Commands) -> GuardState:
    verdict = decide(state, event)
    if verdict.decision is Decision.USER_CONTINUATION:
        return _replace(state, attempts=0, loop=LoopOwner.NONE)
    if verdict.decision is Decision.AWAIT_QUEUED_PROMPT:
        return _replace(state, phase=G.AWAITING_PROMPT, loop=LoopOwner.NONE)
    if verdict.decision is Decision.EXHAUSTED:
        return _exhaust(state, out)
    if verdict.decision is Decision.CONTINUE:
        out.append(ContinueWithGuardPrompt(attempt=verdict.attempt, unfinished=state.unfinished,
                                           text=verdict.text, hook_reason=event.hook_reason))
        owner = LoopOwner.GUARD if event.hook_reason is None else LoopOwner.GUARD_AND_HOOK
        return _pending(state, verdict.attempt, verdict.text, owner, event.hook_reason)
    return _end_loop(state)


def _on_stream_opened(state: GuardState, event: GuardStreamOpened, out: _Commands) -> GuardState:
    # SG-B3: the attempt is committed now that the stream was returned.
    attempt = state.pending_attempt
    out.append(EmitAgentMessageChunk(
        text=state.pending_text,
        meta=GuardChunkMeta(attempt=attempt, unfinished=state.unfinished)))
    return _clear_pending(state, phase=G.ACTIVE, attempts=attempt, loop=state.pending_owner)


def _on_not_opened(state: GuardState, event: GuardStreamNotOpened, out: _Commands) -> GuardState:
    # SG-B3: nothing was consumed. Cancellation and token rejection are hard paths (SG-S1);
    # a compaction failure suspends too, leaving a coalesced hook to its own rules (SG-B9).
    if (event.reason is NotOpenedReason.COMPACTION_FAILED
            and state.pending_hook_reason is not None):
        out.append(HookMayContinue(reason=state.pending_hook_reason))
    return _clear_pending(state, phase=G.SUSPENDED, loop=LoopOwner.NONE)


def _on_ordinary_stream(state: GuardState, event: OrdinaryStreamOpened,
                        out: _Commands) -> GuardState:
    return _end_loop(state)


def _on_tool_results(state: GuardState, event: ToolResultsReady, out: _Commands) -> GuardState:
    if state.phase is not G.ACTIVE or state.loop is LoopOwner.NONE:
        return state  # not a guard loop: the session sends its results as it always does
    if event.mid_turn_input:
        # SG-B7: the user's input sponsors the send; no guard attempt, and a new stage.
        out.append(SendToolResults(sponsor=Sponsor.MID_TURN_INPUT))
        return _replace(state, attempts=0, loop=LoopOwner.NONE)
    if state.loop is LoopOwner.GUARD_AND_HOOK and not state.armed:
        # SG-B8: the combined stream completed every todo, so what is left is the hook's own
        # loop: it sends the results with no guard prompt and no guard attempt.
        out.append(SendToolResults(sponsor=Sponsor.STOP_HOOK))
        return _replace(state, loop=LoopOwner.NONE)
    attempt = _next_guard_attempt(state)
    if attempt is None:
        # SG-B5: the results are kept, but no third guard-attributable stream opens.
        out.append(KeepToolResults(reason=f"The todo stop guard used its {MAX_ATTEMPTS} "
                                          "automatic continuations; no further stream opens."))
        return _exhaust(state, out)
    # SG-B4: the follow-up counts, a combined stream's too (it is attributable to the guard).
    # SG-B6: only a stream that completed every todo may send its results without the prompt;
    # with todos unfinished the model must read this attempt's text ("This is the final...").
    text = continuation_text(attempt, state.unfinished) if state.armed else ""
    out.append(SendToolResults(sponsor=Sponsor.GUARD, attempt=attempt, text=text))
    return _pending(state, attempt, text, LoopOwner.GUARD, None)


def _on_error(state: GuardState, event: RequestErrored, out: _Commands) -> GuardState:
    if state.phase in (G.ACTIVE, G.CONTINUING, G.PAUSED):
        # SG-S2: the state is kept for a trusted retry; an attempt not yet opened is not spent.
        return _clear_pending(state, phase=G.PAUSED, loop=LoopOwner.NONE)
    return state


def _on_hard_stop(state: GuardState, event: HardStopped, out: _Commands) -> GuardState:
    if state.phase in (G.NO_CHAIN, G.PLAN):
        return state
    return _clear_pending(state, phase=G.SUSPENDED, loop=LoopOwner.NONE)  # SG-S1, SG-S3


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
    if state.phase is G.AWAITING_PROMPT and event.last:
        # SO-3, SO-4: the awaiting chain ends for good; unrelated queues may run.
        return _forget(state, G.NO_CHAIN)
    return state


_Handler = Callable[[GuardState, Any, _Commands], GuardState]
_HANDLERS: Mapping[type, _Handler] = MappingProxyType({
    ClientAttached: _unchanged,
    ModelChanged: _unchanged,
    SettingsChanged: _unchanged,
    TodoArgumentsObserved: _unchanged,
    TodoHistoryReplayed: _unchanged,
    TodoDiskStateLoaded: _unchanged,
    SubagentTodoObserved: _unchanged,
    ApprovalModeChanged: _on_approval_mode,
    OrdinaryPromptStarted: _on_prompt,
    AutomaticTurnStarted: _on_automatic_turn,
    MidTurnMessage: _on_mid_turn,
    RetryOrContinue: _on_retry,
    BackgroundResult: _on_background,
    TodoWriteStarted: _on_todo_started,
    TodoWriteResult: _on_todo_result,
    NaturalStop: _on_natural_stop,
    GuardStreamOpened: _on_stream_opened,
    GuardStreamNotOpened: _on_not_opened,
    OrdinaryStreamOpened: _on_ordinary_stream,
    ToolResultsReady: _on_tool_results,
    RequestErrored: _on_error,
    HardStopped: _on_hard_stop,
    TrustCleared: _on_trust_cleared,
    ForegroundPromptSettled: _on_settled,
    QueuedPromptAborted: _on_queued_aborted,
})


def reduce(state: GuardState, event: object) -> Step[GuardState]:
    """Take one session fact; return the guard's new state and decisions.

    Raises :class:`~agentturn.UnexpectedEvent` (changing nothing) for an event the guard does not
    accept in its phase, such as ``GuardStreamOpened`` when no continuation was asked for.

    After the step's own commands comes the one release rule: if the guard held automatic turns
    before the step and no longer does, one :class:`ReleaseAutomaticQueues` is appended.
    """
    check_state("guard", state, GuardState, event)
    out: _Commands = []
    new_state = reduce_into(state, event, out)
    return new_step(state=new_state, commands=tuple(out))


def reduce_into(state: GuardState, event: object, out: list[Command]) -> GuardState:
    """:func:`reduce` for the session: append the decisions to ``out``, return the new state."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise UnexpectedEvent(part="todo_stop_guard", phase=state.phase.name, event=event,
                              expected="a todo stop guard event")
    GUARD_GRAPH.check(state.phase, event)
    if state.phase is G.OFF:
        return state  # SG-C6: a guard that is off is inert
    new_state = handler(state, event, out)
    if new_state is not state and holds_automatic_turns(state) and not holds_automatic_turns(
            new_state):
        out.append(ReleaseAutomaticQueues())
    return new_state
