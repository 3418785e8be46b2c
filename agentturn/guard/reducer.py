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
follow-ups alike (SG-B1, SG-B4), except the follow-ups of a combined hook + guard stream, which
belong to the hook's own tool loop (SG-B8); new user input (a mid-turn message) starts a new
stage (SG-B2).
Retries and related automatic turns keep the chain and its stage (SG-A10, SG-B2).

The automatic-queue rule lives in one place too, :func:`reduce`: :func:`holds_automatic_turns`
says whether the guard's chain can still resume (or a FIFO prompt has priority), and a step that
turns it from true to false emits exactly one :class:`ReleaseAutomaticQueues` (SG-A15, SO-4,
BG-5). While it holds, an unrelated automatic turn gets :class:`DeferAutomaticTurn` instead of a
new chain.

The handlers that start, keep, pause, suspend and end a work chain, with
:func:`holds_automatic_turns` and :func:`defers_automatic_turn` (re-exported here), are in
:mod:`agentturn.guard.chain`; this module holds the stop decision, the todo-write, stream and
tool-loop handlers, the handler table and :func:`reduce`.

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

from .._base import Command, Step, Value
from .._trusted import new_step, replacer
from ..errors import UnexpectedEvent, check_state
from .chain import (
    _clear_pending,
    _on_approval_mode,
    _on_automatic_turn,
    _on_background,
    _on_error,
    _on_hard_stop,
    _on_mid_turn,
    _on_prompt,
    _on_queued_aborted,
    _on_retry,
    _on_settled,
    _on_trust_cleared,
    defers_automatic_turn,
    holds_automatic_turns,
)
from .envelope import parse_todo_envelope
from .state import GUARD_GRAPH, GuardPhase, GuardState, LoopOwner
from .texts import MAX_ATTEMPTS, GuardChunkMeta, continuation_text, exhaustion_text
from .vocabulary import (
    ApprovalModeChanged,
    AutomaticTurnStarted,
    BackgroundResult,
    ClientAttached,
    ContinueWithGuardPrompt,
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


def _next_guard_attempt(state: GuardState) -> int | None:
    """The one budget rule: the next attempt of this stage, or ``None`` when used up."""
    return state.attempts + 1 if state.attempts < MAX_ATTEMPTS else None


# --- building blocks --------------------------------------------------------------------------


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


# --- handlers ---------------------------------------------------------------------------------


def _unchanged(state: GuardState, event: object, out: _Commands) -> GuardState:
    # Untrusted todo sources (SG-A3), a live client attach and a model change (SG-A13), and a
    # settings change, which applies to new sessions only (SG-C2): none changes the guard.
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
        return _replace(state, phase=G.AWAITING_PROMPT, loop=LoopOwner.NONE, prompt_first=True)
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
    if state.loop is LoopOwner.GUARD_AND_HOOK:
        # SG-B8: a combined hook + guard stream's tool loop is the hook's existing loop: it
        # sends the results with no guard prompt and no guard attempt, todos finished or not,
        # exactly as it would with the guard off ("enabling the Guard must not truncate an
        # external hook continuation"). The combined stream itself was the guard's attempt; the
        # streams of the hook's loop are not attributable to the guard, so the hard bound holds.
        out.append(SendToolResults(sponsor=Sponsor.STOP_HOOK))
        return _replace(state, loop=LoopOwner.NONE)
    attempt = _next_guard_attempt(state)
    if attempt is None:
        # SG-B5: the results are kept, but no third guard-attributable stream opens.
        out.append(KeepToolResults(reason=f"The todo stop guard used its {MAX_ATTEMPTS} "
                                          "automatic continuations; no further stream opens."))
        return _exhaust(state, out)
    # SG-B4: the follow-up of a plain guard stream counts (a combined one's went to the hook).
    # SG-B6: only a stream that completed every todo may send its results without the prompt;
    # with todos unfinished the model must read this attempt's text ("This is the final...").
    text = continuation_text(attempt, state.unfinished) if state.armed else ""
    out.append(SendToolResults(sponsor=Sponsor.GUARD, attempt=attempt, text=text))
    return _pending(state, attempt, text, LoopOwner.GUARD, None)


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
