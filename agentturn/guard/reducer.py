"""The todo stop guard's reducer and its pure stop decision.

Theory of operation
-------------------
:func:`reduce` takes the session's facts (see :mod:`agentturn.guard.vocabulary`) and returns the
guard's decisions as commands. The decision at a natural stop is :func:`decide`, a pure function
of the state: deciding twice without committing gives the same attempt number, because an
attempt is counted only when ``GuardStreamOpened`` reports that its stream was returned (SG-B3).

The budget rule lives in one place, :func:`_next_guard_attempt`: a stage allows
:data:`MAX_ATTEMPTS` guard-attributable streams, prompted continuations and tool-result
follow-ups alike (SG-B1, SG-B4); new user input (a mid-turn message) starts a new stage (SG-B2).

Trust rules: only :class:`TodoWriteResult` can arm, and only when it is successful, top-level,
from the built-in tool, observed after status calculation, the first result of its call id, from
the live turn, with a valid envelope (SG-A1 ... SG-A3, SG-A14); the newest such result replaces the
count and an empty or completed list disarms at once (SG-A4, SG-A5). A disarmed chain makes no
new continuation, but a tool loop opened by a committed guard stream still sends its results
(SG-A6, SG-B6).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from .._base import Command, Step, replacer
from ..errors import UnexpectedEvent
from .envelope import parse_todo_envelope
from .state import GUARD_GRAPH, SEEN_CALLS_KEPT, GuardPhase, GuardState, LoopOwner
from .texts import MAX_ATTEMPTS, GuardChunkMeta, continuation_text, exhaustion_text
from .vocabulary import (
    ApprovalMode,
    ApprovalModeChanged,
    AutomaticTurnStarted,
    BackgroundResult,
    ClientAttached,
    ContinueWithGuardPrompt,
    EmitAgentMessageChunk,
    ForegroundPromptSettled,
    GuardStreamNotOpened,
    GuardStreamOpened,
    HardStop,
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
    ToolOrigin,
    ToolResultsReady,
    TrustCleared,
)

__all__ = ["Decision", "GuardDecision", "decide", "reduce"]

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
    #: Open one more guard-attributable stream with the continuation prompt.
    CONTINUE = "continue"
    #: The stage's attempts are used up with items unfinished.
    EXHAUSTED = "exhausted"


@attrs.frozen(kw_only=True)
class GuardDecision:
    """The result of :func:`decide`; ``attempt`` and ``text`` are set for ``CONTINUE``."""

    decision: Decision
    why: str
    attempt: int = 0
    text: str = ""


def decide(state: GuardState, stop: NaturalStop) -> GuardDecision:
    """The guard's decision at a natural stop, without changing anything (SO-7)."""
    if state.phase is not G.ACTIVE:
        return GuardDecision(decision=Decision.NONE,
                             why=f"no active work chain ({state.phase.name})")
    if stop.mid_turn_messages:
        return GuardDecision(decision=Decision.USER_CONTINUATION, why="mid-turn user messages")
    if stop.queued_prompt:
        return GuardDecision(decision=Decision.AWAIT_QUEUED_PROMPT, why="a queued prompt")
    if state.plan_mode:
        return GuardDecision(decision=Decision.NONE, why="approval plan mode")
    if not state.armed or state.unfinished == 0:
        return GuardDecision(decision=Decision.NONE, why="not armed with unfinished todos")
    if stop.relevant_background:
        return GuardDecision(decision=Decision.NONE, why="relevant background input pending")
    attempt = _next_guard_attempt(state)
    if attempt is None:
        return GuardDecision(decision=Decision.EXHAUSTED, why="attempts used up")
    return GuardDecision(decision=Decision.CONTINUE, why="unfinished todos", attempt=attempt,
                         text=continuation_text(attempt, state.unfinished))


def _next_guard_attempt(state: GuardState) -> int | None:
    """The one budget rule: the next attempt of this stage, or ``None`` when used up."""
    return state.attempts + 1 if state.attempts < MAX_ATTEMPTS else None


# --- building blocks --------------------------------------------------------------------------


def _new_chain(state: GuardState, turn_id: str, out: _Commands) -> GuardState:
    """Start an unarmed work chain with a fresh background baseline (SG-A7, SG-A8)."""
    chain = state.chain + 1
    out.append(StartWorkChain(chain=chain))
    return _replace(state, phase=G.ACTIVE, chain=chain, live_turn=turn_id, armed=False,
                    unfinished=0, attempts=0, pending_attempt=0, pending_text="",
                    pending_owner=LoopOwner.NONE, pending_hook_reason=None, loop=LoopOwner.NONE,
                    seen_calls=())


def _exhaust(state: GuardState, out: _Commands) -> GuardState:
    """Report exhaustion (OB-3) and suspend the chain.

    Once per chain by construction: a suspended chain never reaches this again; only a new
    chain (which starts unreported) leaves the suspension.
    """
    if state.armed and state.unfinished:
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


# --- handlers ---------------------------------------------------------------------------------


def _unchanged(state: GuardState, event: object, out: _Commands) -> GuardState:
    # Untrusted todo sources (SG-A3), a live client attach and a model change (SG-A13), and a
    # settings change, which applies to new sessions only (SG-C2): none changes the guard.
    return state


def _on_approval_mode(state: GuardState, event: ApprovalModeChanged, out: _Commands) -> GuardState:
    # SG-C3: off while in Plan; a change between non-Plan modes changes nothing (SG-A13).
    return _replace(state, plan_mode=event.mode is ApprovalMode.PLAN)


def _on_prompt(state: GuardState, event: OrdinaryPromptStarted, out: _Commands) -> GuardState:
    return _new_chain(state, event.turn_id, out)


def _on_automatic_turn(state: GuardState, event: AutomaticTurnStarted,
                       out: _Commands) -> GuardState:
    if event.related and state.phase in (G.SUSPENDED, G.AWAITING_PROMPT):
        return state  # a related result never revives a suspended or superseded chain
    if event.related and state.phase in (G.ACTIVE, G.PAUSED):
        # SG-A10: it works for the armed chain and keeps its budget; like a related background
        # result it is a trusted continuation that clears a pause (SG-A11).
        return _replace(state, phase=G.ACTIVE, live_turn=event.turn_id)
    return _new_chain(state, event.turn_id, out)


def _on_mid_turn(state: GuardState, event: MidTurnMessage, out: _Commands) -> GuardState:
    if state.phase in (G.ACTIVE, G.PAUSED):
        # SG-A9, SG-B2: new user input keeps activation and starts a fresh two-attempt stage.
        return _replace(state, phase=G.ACTIVE, attempts=0)
    return state


def _on_retry(state: GuardState, event: RetryOrContinue, out: _Commands) -> GuardState:
    if state.phase in (G.SUSPENDED, G.AWAITING_PROMPT):
        return state
    if state.phase in (G.ACTIVE, G.PAUSED) and state.armed and state.unfinished:
        # SG-A8, SG-B2: same chain, same budget; the retried request is the live turn now.
        return _replace(state, phase=G.ACTIVE, live_turn=event.turn_id)
    return _new_chain(state, event.turn_id, out)


def _on_background(state: GuardState, event: BackgroundResult, out: _Commands) -> GuardState:
    if event.related and state.phase is G.PAUSED:
        return _replace(state, phase=G.ACTIVE)  # SG-A11: clears a pause, never a suspension
    return state


def _on_todo_result(state: GuardState, event: TodoWriteResult, out: _Commands) -> GuardState:
    if state.phase is not G.ACTIVE:
        return state
    trusted = (
        event.succeeded
        and event.top_level
        and event.origin is ToolOrigin.BUILTIN
        and event.point is ObservationPoint.AFTER_STATUS
        and event.turn_id == state.live_turn
        and event.call_id not in state.seen_calls
    )
    if not trusted:
        return state
    seen = (*state.seen_calls, event.call_id)[-SEEN_CALLS_KEPT:]
    counts = parse_todo_envelope(event.envelope)
    if counts is None:
        return _replace(state, seen_calls=seen)  # rejected whole: the count stays as it was
    # SG-A4: the newest result replaces the count; SG-A5: empty or all done disarms at once.
    return _replace(state, seen_calls=seen, armed=counts.unfinished > 0,
                    unfinished=counts.unfinished)


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
    if event.reason is NotOpenedReason.COMPACTION_FAILED and state.pending_hook_reason:
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
        # SG-B8: the hook's own loop sends them: no guard prompt, no guard attempt.
        out.append(SendToolResults(sponsor=Sponsor.STOP_HOOK))
        return _replace(state, loop=LoopOwner.NONE)
    attempt = _next_guard_attempt(state)
    if attempt is None:
        # SG-B5: the results are kept, but no third guard-attributable stream opens.
        out.append(KeepToolResults(reason=f"The todo stop guard used its {MAX_ATTEMPTS} "
                                          "automatic continuations; no further stream opens."))
        return _exhaust(state, out)
    # SG-B4, SG-B6: the follow-up counts, and needs no unfinished-todo prompt (even disarmed).
    out.append(SendToolResults(sponsor=Sponsor.GUARD, attempt=attempt))
    return _pending(state, attempt, "", LoopOwner.GUARD, None)


def _on_error(state: GuardState, event: RequestErrored, out: _Commands) -> GuardState:
    if state.phase in (G.ACTIVE, G.CONTINUING, G.PAUSED):
        # SG-S2: the state is kept for a trusted retry; an attempt not yet opened is not spent.
        return _clear_pending(state, phase=G.PAUSED, loop=LoopOwner.NONE)
    return state


def _on_hard_stop(state: GuardState, event: HardStop, out: _Commands) -> GuardState:
    if state.phase is G.NO_CHAIN:
        return state
    return _clear_pending(state, phase=G.SUSPENDED, loop=LoopOwner.NONE)  # SG-S1, SG-S3


def _on_trust_cleared(state: GuardState, event: TrustCleared, out: _Commands) -> GuardState:
    # SG-A12: forget everything; SG-A14: the invalidated turn is no longer live, so its late
    # results cannot arm; SG-A15: queues wait for it to settle, or go now if none runs.
    if event.invalidated_turn_id is None:
        out.append(ReleaseAutomaticQueues())
    return _clear_pending(state, phase=G.NO_CHAIN, live_turn="", armed=False, unfinished=0,
                          attempts=0, loop=LoopOwner.NONE, seen_calls=(),
                          release_on_settle=event.invalidated_turn_id or "")


def _on_settled(state: GuardState, event: ForegroundPromptSettled, out: _Commands) -> GuardState:
    if state.release_on_settle and event.turn_id == state.release_on_settle:
        out.append(ReleaseAutomaticQueues())  # SG-A15, errored or not
        return _replace(state, release_on_settle="")
    return state


def _on_queued_aborted(state: GuardState, event: QueuedPromptAborted,
                       out: _Commands) -> GuardState:
    if state.phase is G.AWAITING_PROMPT and event.last:
        # SO-3, SO-4: the awaiting chain ends for good; unrelated queues may run.
        out.append(ReleaseAutomaticQueues())
        return _replace(state, phase=G.NO_CHAIN, armed=False, unfinished=0, attempts=0)
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
    TodoWriteResult: _on_todo_result,
    NaturalStop: _on_natural_stop,
    GuardStreamOpened: _on_stream_opened,
    GuardStreamNotOpened: _on_not_opened,
    OrdinaryStreamOpened: _on_ordinary_stream,
    ToolResultsReady: _on_tool_results,
    RequestErrored: _on_error,
    HardStop: _on_hard_stop,
    TrustCleared: _on_trust_cleared,
    ForegroundPromptSettled: _on_settled,
    QueuedPromptAborted: _on_queued_aborted,
})


def reduce(state: GuardState, event: object) -> Step[GuardState]:
    """Take one session fact; return the guard's new state and decisions.

    Raises :class:`~agentturn.UnexpectedEvent` (changing nothing) for an event the guard does not
    accept in its phase, such as ``GuardStreamOpened`` when no continuation was asked for.
    """
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise UnexpectedEvent(part="todo_stop_guard", phase=state.phase.name, event=event,
                              expected="a todo stop guard event")
    GUARD_GRAPH.check(state.phase, event)
    if state.phase is G.OFF:
        return Step(state)  # SG-C6: a guard that is off is inert
    out: _Commands = []
    new_state = handler(state, event, out)
    return Step(new_state, tuple(out))
