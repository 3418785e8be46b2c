"""The turn lifecycle of one chat: model requests, tools, barriers, Lead and naming in one reducer.

Theory of operation
-------------------
A turn starts with ``PromptSubmitted`` and runs until the model finishes, an error prevents
progress, or the user presses Stop; there is no round cap (TL-1). Each step is
``reduce(state, event) -> Step``. The phase graph below is the single place where the phases and
the events they accept are declared; :data:`TURN_GRAPH` compiles it into a table (``transitions``
validates and draws the same declaration) and the reducer consults only that table, so an event
in the wrong phase is an
:class:`~agentturn.UnexpectedEvent` raised before anything changes.

One round goes: save the prompt (``Persist``) -> ask for a stream (``RequestModelStream``, which
includes the host's budgeting step, TL-2) -> ``StreamOpened`` -> ``StreamCompleted`` -> save the
response with its raw finish reason (TL-5, TL-10) -> for each tool call in order: permission if
needed (TL-3), ``ExecuteTool``, save its result record -> the next request. Everything after an
acknowledgement goes through :func:`_advance`, which picks the next action in a fixed order:

1. Lead saves in flight are awaited; saved Lead instructions make the boundary: the old
   response's unstarted calls are recorded as skipped and the next request carries the
   instructions (LD-8, LD-9, LD-16);
2. the end of the turn if the model finished and no instruction is waiting (the end needs no
   model, so a naming request still running does not hold it);
3. a naming request in flight holds every tool and every model request (TT-3);
4. the next tool call of the response (TL-4), or else the next request.

Ending is one path too, :func:`_finalize`: close Lead admission (LD-14), wait for a write or a
tool still in flight, record a result for every call that has none (so each call of a persisted
response ends with exactly one result record), wait for a Lead save in flight, report unapplied
instructions (LD-13), then send ``EndTurn`` with the typed outcome and the raw finish reason.

Rules this module keeps:

* No tool call of a response cut by the output limit is ever executed (TL-9).
* At most one tool runs, in the model's order; no request while a tool runs or a write is unacked.
* One corrective retry for a malformed tool-call format; the second in a row ends the turn (TL-6).
* The state holds the current response only, so a turn of a million rounds holds as much state
  as a turn of ten; request ids and write keys are derived from the turn id and two counters.

Choices where the documents are silent, written down here:

* A Lead save still in flight at a boundary is awaited rather than left for a later boundary,
  so the instruction takes effect before any further action, as the user expects.
* Lead instructions apply at a natural stop too (the turn continues with them), but not after an
  output limit or Stop: those end the turn and report them as saved and unapplied
  (``LeadUnapplied``, the one report). A resumable error keeps them: ``ContinueTurn`` gives them
  to the model in its next request's ``lead_ids``; a new prompt reports them unapplied first.
* Only a response whose finish reason is known to complete normally runs its tools (TL-9): an
  output limit, a safety stop or an unrecognized reason ends the turn with its own outcome, the
  raw reason kept, and every call recorded as not run. Truncation is checked before the tool-call
  format: a cut-off response explains its broken call, and a corrective retry cannot help.
* ``PersistFailed`` ends the turn with a resumable error that keeps the unsaved records;
  ``ContinueTurn`` writes them again and goes on. During final lifecycle work (after Stop, for
  example) a failed write cannot be retried: the turn ends with the outcome it had, and the
  records it could not save, with a result for every call still without one, are kept in
  ``owed`` and written first by the next prompt, so no executed tool output is lost.
* A whitespace-only final response counts as empty (TL-7).

Late answers are absorbed, not raised: a permission decision for a dialog already dismissed or
decided, and a stream event for a request cancelled by Stop, give one ``StaleAnswerIgnored``
notice and change nothing (titles and Lead acknowledgements are absorbed by their parts). An id
the turn never issued, or a second answer to what is still awaited, stays a ``ProtocolError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from .. import lead, titles
from .._base import AwaitingCommand, Command, Step, Value, builder, new_step, replacer
from ..commands import (
    AskPermission,
    CancelStream,
    CancelTool,
    DecideNaturalStop,
    DismissPermission,
    EndTurn,
    ExecuteTool,
    Persist,
    Record,
    RequestModelStream,
    RequestTitle,
    SaveLead,
    StaleAnswerIgnored,
    UnsavedRecords,
)
from ..errors import UnexpectedEvent, UnknownId, check_state
from ..events import (
    AmendRequest,
    AutoTitlePreferenceChanged,
    ClientDisconnected,
    CloseChat,
    CompactionFailed,
    ContinueTurn,
    HardStopped,
    LeadSaved,
    LeadSaveFailed,
    LeadSubmitted,
    ManualRename,
    NaturalStopDecided,
    PermissionDecided,
    PermissionDecision,
    Persisted,
    PersistFailed,
    PromptSubmitted,
    StopPressed,
    StreamCompleted,
    StreamFailed,
    StreamOpened,
    TitleFailed,
    TitleGenerated,
    TokenLimitRejected,
    ToolFinished,
    WithdrawRetry,
)
from ..records import (
    FinishKind,
    FinishReason,
    OutcomeKind,
    ResponseRecord,
    ToolResultRecord,
    ToolResultStatus,
    TurnOutcome,
    UserMessageRecord,
)
from ..titles import TitleTrigger
from .state import (
    SAVING_PHASES,
    TURN_GRAPH,
    LeadPermissionPolicy,
    NextStep,
    TurnConfig,
    TurnPhase,
    TurnState,
)

__all__ = [
    "TURN_GRAPH",
    "LeadPermissionPolicy",
    "Outstanding",
    "TurnConfig",
    "TurnPhase",
    "TurnState",
    "outstanding",
    "reduce",
    "reduce_into",
]

P = TurnPhase
#: ``attrs.evolve`` for TurnState, at the cost of one C call per field (see ``replacer``).
_replace = replacer(TurnState)
# The trusted constructors (see ``builder``) of what a step makes from validated values.
_Persist = builder(Persist)
_RequestModelStream = builder(RequestModelStream)
_AskPermission = builder(AskPermission)
_ExecuteTool = builder(ExecuteTool)
_ResponseRecord = builder(ResponseRecord)
_ToolResultRecord = builder(ToolResultRecord)
_UserMessageRecord = builder(UserMessageRecord)


_Commands = list[Command]

LEAD_SKIP = "Skipped: the user sent a Lead instruction before this call started."
SUPERSEDED = ("Superseded: the user sent a Lead instruction while this call waited for "
              "permission.")
_SKIP_REASONS = {
    OutcomeKind.CANCELLED: (ToolResultStatus.CANCELLED, "Cancelled: the user stopped the turn."),
    OutcomeKind.OUTPUT_LIMIT: (ToolResultStatus.SKIPPED, "Not run: the response was cut at the "
                               "engine's output limit, so this call may be incomplete."),
    OutcomeKind.MALFORMED_TOOL_FORMAT: (ToolResultStatus.SKIPPED,
                                        "Not run: the tool-call format was malformed."),
    OutcomeKind.CONTENT_FILTERED: (ToolResultStatus.SKIPPED, "Not run: the engine withheld or "
                                   "cut the response for safety or policy."),
    OutcomeKind.UNRECOGNIZED_FINISH: (ToolResultStatus.SKIPPED, "Not run: the response did not "
                                      "end normally, so this call may be incomplete."),
}
#: Why a response that did not complete normally ends the turn, by its finish kind (TL-9).
_CUT_OFF = {
    FinishKind.LENGTH: (OutcomeKind.OUTPUT_LIMIT, "The response was cut at the engine's output "
                        "limit"),
    FinishKind.CONTENT_FILTER: (OutcomeKind.CONTENT_FILTERED, "The engine withheld or cut the "
                                "response for safety or policy"),
    FinishKind.OTHER: (OutcomeKind.UNRECOGNIZED_FINISH, "The engine ended the response in a way "
                       "not known to be a normal completion"),
}
_ENDED_OTHERWISE = (ToolResultStatus.SKIPPED, "Not run: the turn ended first.")
_NOT_CONTINUED = (ToolResultStatus.SKIPPED,
                  "Not run: the turn stopped on an error and was not continued.")


def _outcome(state: TurnState, kind: OutcomeKind, message: str,
             resumable: bool = False) -> TurnOutcome:
    return TurnOutcome(kind=kind, finish_reason=state.finish_reason, message=message,
                       resumable=resumable)


# --- building blocks --------------------------------------------------------------------------


def _persist(state: TurnState, records: tuple[Record, ...], phase: TurnPhase,
             out: _Commands, **changes: Any) -> TurnState:
    """Send one write and wait for it in ``phase``; ``changes`` join the same new state."""
    changes.update(phase=phase, persist_seq=state.persist_seq + 1, persisting=True,
                   batch=records)
    state = _replace(state, **changes)
    out.append(_Persist(key=state.persist_key, records=records))
    return state


def _results_for_rest(state: TurnState, status: ToolResultStatus,
                      reason: str) -> tuple[ToolResultRecord, ...]:
    return tuple(
        _ToolResultRecord(call_id=call.call_id, name=call.name, status=status, reason=reason)
        for call in state.calls[state.next_call:]
    )


def _request(state: TurnState, out: _Commands, **changes: Any) -> TurnState:
    limit = state.config.max_requests
    if limit is not None and state.request_seq >= limit:
        state = _replace(state, **changes) if changes else state
        return _finalize(state, out, _outcome(
            state, OutcomeKind.ACTION_BUDGET,
            f"The turn reached the host's limit of {limit} model requests."))
    queue, taken = lead.take_saved_entries(state.lead)
    retry = state.next_step is NextStep.RETRY
    state = _replace(state, phase=P.AWAITING_STREAM, request_seq=state.request_seq + 1,
                     lead=queue, calls=(), next_call=0, stop_decided=False, request_leads=taken,
                     next_step=NextStep.RETRY if retry else NextStep.REQUEST, **changes)
    out.append(_RequestModelStream(request_id=state.request_id,
                                   lead_ids=tuple(entry.lead_id for entry in taken),
                                   corrective=retry))
    return state


def _start_call(state: TurnState, out: _Commands, **changes: Any) -> TurnState:
    call = state.calls[state.next_call]
    if call.needs_permission:
        out.append(_AskPermission(call=call))
        return _replace(state, phase=P.AWAITING_PERMISSION, **changes)
    out.append(_ExecuteTool(call=call))
    return _replace(state, phase=P.RUNNING_TOOL, tool_in_flight=True, **changes)


def _advance(state: TurnState, out: _Commands, **changes: Any) -> TurnState:
    """Pick the next action at a boundary (see the module docstring for the order).

    ``changes`` (for fields this function does not read: ``persisting``, ``batch``) join the one
    new state the step builds.
    """
    pending = bool(state.lead.entries)  # Lead bookkeeping only while instructions are pending
    if pending and lead.has_unsaved(state.lead):
        return _replace(state, phase=P.AWAITING_LEAD_SAVES, **changes)
    leads_ready = pending and bool(lead.saved_ids(state.lead))
    if leads_ready and state.next_call < len(state.calls):
        skipped = _results_for_rest(state, ToolResultStatus.SKIPPED, LEAD_SKIP)
        changes["next_call"] = len(state.calls)
        return _persist(state, skipped, P.SAVING_RESULTS, out, **changes)
    finishing = state.next_step is NextStep.FINISH or state.next_step is NextStep.FINISH_EMPTY
    if not leads_ready and state.next_call == len(state.calls) and finishing:
        # The end needs no model: it is not held for a naming request still running.
        if state.config.hold_natural_stops and not state.stop_decided:
            # A session applies its stop order here; Lead admission stays open meanwhile.
            out.append(DecideNaturalStop(turn_id=state.turn_id, request_id=state.request_id,
                                         empty=state.next_step is NextStep.FINISH_EMPTY))
            return _replace(state, phase=P.AWAITING_STOP_DECISION, **changes)
        state = _replace(state, **changes) if changes else state
        if state.next_step is NextStep.FINISH:
            return _finalize(state, out, _outcome(state, OutcomeKind.FINISHED,
                                                  "The agent finished."))
        return _finalize(state, out, _outcome(
            state, OutcomeKind.EMPTY_RESPONSE,
            "The model ended its turn without any text or tool call."))
    if titles.naming_in_flight(state.title):
        # TT-3: tools and requests wait for the naming request.
        return _replace(state, phase=P.AWAITING_TITLE, **changes)
    if not leads_ready and state.next_call < len(state.calls):
        return _start_call(state, out, **changes)
    return _request(state, out, **changes)


def _finalize(state: TurnState, out: _Commands, outcome: TurnOutcome | None = None,
              extra: tuple[ToolResultRecord, ...] = ()) -> TurnState:
    """Drain final lifecycle work, then end the turn (see the module docstring)."""
    if outcome is not None and state.ending is None:
        state = _replace(state, ending=outcome)
    ending = state.ending
    assert ending is not None  # every caller sets or has set the outcome
    queue_step = lead.close_admission(state.lead)
    out.extend(queue_step.commands)
    state = _replace(state, phase=P.ENDING, lead=queue_step.state)
    if state.persisting or state.tool_in_flight:
        return state
    if not ending.resumable and (extra or state.next_call < len(state.calls)):
        status, reason = _SKIP_REASONS.get(ending.kind, _ENDED_OTHERWISE)
        records = extra + _results_for_rest(state, status, reason)
        state = _replace(state, next_call=len(state.calls))
        return _persist(state, records, P.ENDING, out)
    if lead.has_unsaved(state.lead):
        return state
    if ending.resumable:
        # TL-11: saved instructions wait for ContinueTurn (or are reported by a new prompt).
        kept = lead.suspend(state.lead)
        out.extend(kept.commands)
        out.append(EndTurn(turn_id=state.turn_id, outcome=ending))
        return _replace(state, phase=P.IDLE, lead=kept.state, ending=None)
    released = lead.release(state.lead)
    out.extend(released.commands)
    out.append(EndTurn(turn_id=state.turn_id, outcome=ending))
    return _replace(state, phase=P.IDLE, lead=released.state, ending=None, calls=(),
                    next_call=0, batch=(), resume_phase=None)


# --- handlers, one per event type -------------------------------------------------------------


def _unknown(state: TurnState, event: object, expected: str) -> UnknownId:
    return UnknownId(part="turn", phase=state.phase.name, event=event, expected=expected)


def _on_prompt(state: TurnState, event: PromptSubmitted, out: _Commands) -> TurnState:
    if event.turn_id == state.turn_id:
        if (event.message_id, event.text) == state.prompt:
            # The client sent the same prompt again (a retry after a network blip): it started
            # once already.
            out.append(StaleAnswerIgnored(event="PromptSubmitted", answer_id=event.turn_id,
                                          reason="this prompt was already received"))
            return state
        # Request ids and write keys derive from the turn id: reused, an old request's late
        # answer could not be told from the new one's.
        raise UnknownId(part="turn", phase=state.phase.name, event=event,
                        expected=f"a new turn id (the last turn was {state.turn_id!r})")
    # A previous turn that ended with a resumable error and was not continued still owes its
    # unsaved records and a result for each of its unstarted calls: they go first, in the same
    # write as the new prompt, so nothing is lost and every call ends with one record.
    # A turn whose final write failed owes its records the same way (``owed``).
    carried = state.owed + _owed_by_resumable(state)
    # Instructions saved in a turn that ended with a resumable error are reported now: the
    # new prompt is not that turn (LD-3, LD-13).
    queue = state.lead
    if queue.entries:
        released = lead.release(queue)
        out.extend(released.commands)
        queue = released.state
    state = _replace(
        state, turn_id=event.turn_id, request_seq=0, persist_seq=0, persisting=False, batch=(),
        calls=(), next_call=0, tool_in_flight=False, next_step=NextStep.REQUEST,
        finish_reason=None, ending=None, resume_phase=None, owed=(), request_leads=(),
        prompt=(event.message_id, event.text), lead=lead.open_admission(queue),
        title=titles.new_turn(state.title))
    prompt = _UserMessageRecord(message_id=event.message_id, text=event.text)
    return _persist(state, (*carried, prompt), P.SAVING_PROMPT, out)


def _on_continue(state: TurnState, event: ContinueTurn, out: _Commands) -> TurnState:
    if state.resume_phase is None or event.turn_id != state.turn_id:
        raise _unknown(state, event, "ContinueTurn for the turn that ended with a resumable error")
    resume = state.resume_phase
    state = _replace(state, resume_phase=None, lead=lead.open_admission(state.lead))
    if resume in SAVING_PHASES:
        return _persist(state, state.batch, resume, out)
    return _advance(state, out)


def _is_late(state: TurnState, event: StreamOpened | StreamCompleted | StreamFailed
             | CompactionFailed | TokenLimitRejected | PermissionDecided, out: _Commands) -> bool:
    """True (with the notice sent) when ``event`` is a late answer; raise when it is misuse."""
    why = _late_answer(state, event)
    if why is None:
        expected = (f"a decision for call {_current_call_id(state)!r}"
                    if isinstance(event, PermissionDecided)
                    else f"an event for request {state.request_id!r}")
        raise _unknown(state, event, expected)
    out.append(_absorb(event, why))
    return True


def _on_stream_opened(state: TurnState, event: StreamOpened, out: _Commands) -> TurnState:
    if event.request_id != state.request_id and _is_late(state, event, out):
        return state
    # The stream was returned: the instructions it carries reached the model (LD-8, LD-13).
    return _replace(state, phase=P.STREAMING, request_leads=())


def _undelivered(state: TurnState) -> TurnState:
    """The current request will never open: the Lead instructions it carried go back to the
    queue, so the turn's end reports them (or a ``ContinueTurn`` sends them again, LD-13)."""
    if not state.request_leads:
        return state
    return _replace(state, lead=lead.restore(state.lead, state.request_leads), request_leads=())


def _cut_off(reason: FinishReason, calls: int) -> TurnOutcome:
    """The outcome of a response that did not complete normally (TL-9), raw reason kept."""
    kind, sentence = _CUT_OFF[reason.kind]
    return TurnOutcome(kind=kind, finish_reason=reason,
                       message=f"{sentence} (finish reason {reason.raw!r})"
                               + (f"; its {calls} tool call(s) were not run." if calls else "."))


def _on_stream_completed(state: TurnState, event: StreamCompleted, out: _Commands) -> TurnState:
    if event.request_id != state.request_id and _is_late(state, event, out):
        return state
    reason = state.config.finish_reason(event.finish_reason)
    response = _ResponseRecord(request_id=event.request_id, text=event.text,
                               tool_calls=event.tool_calls, finish_reason=reason,
                               malformed_tool_format=event.malformed_tool_format)
    ending: TurnOutcome | None = None
    next_step = state.next_step
    if not reason.completes_normally:
        # TL-9 before TL-6: truncation explains a broken call; no retry can mend it.
        ending = _cut_off(reason, len(event.tool_calls))
    elif event.malformed_tool_format:
        if state.next_step is NextStep.RETRY:
            ending = TurnOutcome(kind=OutcomeKind.MALFORMED_TOOL_FORMAT, finish_reason=reason,
                                 message="The model sent malformed tool calls twice in a row; "
                                         "the turn stopped.")
        next_step = NextStep.RETRY
    elif event.tool_calls:
        next_step = NextStep.REQUEST
    else:
        next_step = NextStep.FINISH if event.text.strip() else NextStep.FINISH_EMPTY
    state = _persist(state, (response,), P.SAVING_RESPONSE, out, finish_reason=reason,
                     calls=event.tool_calls, next_call=0, next_step=next_step)
    if titles.is_due(state.title) and event.text.strip() and not event.malformed_tool_format:
        named = titles.request_if_due(state.title, TitleTrigger.USABLE_RESPONSE)
        if named.commands:
            out.extend(named.commands)
            state = _replace(state, title=named.state)
    if ending is not None:
        return _finalize(state, out, ending)
    return state


def _on_request_failed(state: TurnState, event: StreamFailed | CompactionFailed
                       | TokenLimitRejected, out: _Commands) -> TurnState:
    if event.request_id != state.request_id and _is_late(state, event, out):
        return state
    state = _undelivered(state)
    if isinstance(event, StreamFailed):
        state = _replace(state, resume_phase=P.AWAITING_STREAM)
        return _finalize(state, out, _outcome(
            state, OutcomeKind.ERROR,
            f"The model request failed: {event.error}. You can retry or continue.",
            resumable=True))
    if isinstance(event, CompactionFailed):
        return _finalize(state, out, _outcome(
            state, OutcomeKind.COMPACTION_FAILED,
            f"Compacting the conversation failed: {event.reason}."))
    return _finalize(state, out, _outcome(
        state, OutcomeKind.TOKEN_LIMIT, f"The prompt is over the model's token limit: "
                                        f"{event.reason}."))


def _check_key(state: TurnState, event: Persisted | PersistFailed) -> None:
    if not state.persisting or event.key != state.persist_key:
        raise _unknown(state, event, f"an acknowledgement for write {state.persist_key!r}")


def _on_persisted(state: TurnState, event: Persisted, out: _Commands) -> TurnState:
    _check_key(state, event)
    phase = state.phase
    if phase is P.ENDING:
        return _finalize(_replace(state, persisting=False, batch=()), out)
    if phase is P.SAVING_RESPONSE and state.next_step is NextStep.RETRY and state.calls:
        # TL-6: calls in a malformed response are recorded, never run; then the retry.
        skipped = _results_for_rest(state, *_SKIP_REASONS[OutcomeKind.MALFORMED_TOOL_FORMAT])
        return _persist(state, skipped, P.SAVING_RESULTS, out, next_call=len(state.calls))
    if (phase is P.SAVING_RESULTS and state.calls and state.next_call == len(state.calls)
            and state.next_step is not NextStep.RETRY and titles.is_due(state.title)):
        named = titles.request_if_due(state.title, TitleTrigger.TOOL_ROUND)
        if named.commands:
            out.extend(named.commands)
            state = _replace(state, title=named.state)
    return _advance(state, out, persisting=False, batch=())


def _on_persist_failed(state: TurnState, event: PersistFailed, out: _Commands) -> TurnState:
    _check_key(state, event)
    if state.phase is P.ENDING:
        ending = state.ending
        assert ending is not None
        # TL-5: nothing executed is dropped. What this write held, and a result for every call
        # still without one, is owed: the next prompt writes it before anything else.
        status, reason = _SKIP_REASONS.get(ending.kind, _ENDED_OTHERWISE)
        owed = state.owed + state.batch + _results_for_rest(state, status, reason)
        note = (f" Saving {len(owed)} record(s) failed ({event.reason}); they will be saved "
                "before the next prompt.")
        state = _replace(state, persisting=False, batch=(), calls=(), next_call=0, owed=owed,
                         ending=attrs.evolve(ending, message=ending.message + note))
        return _finalize(state, out)
    state = _replace(state, persisting=False, resume_phase=state.phase)
    return _finalize(state, out, _outcome(
        state, OutcomeKind.ERROR,
        f"Saving the conversation failed: {event.reason}. You can retry or continue.",
        resumable=True))


def _current_call_id(state: TurnState) -> str:
    return state.calls[state.next_call].call_id


def _late_answer(state: TurnState, event: object) -> str | None:
    """Why ``event`` is a late answer to absorb, or ``None`` when it is not one."""
    if isinstance(event, PermissionDecided):
        call_id = event.call_id
        if call_id in state.dismissed_calls:
            return "the permission dialog was already dismissed"
        decided = state.next_call + 1 if state.tool_in_flight else state.next_call
        if any(call.call_id == call_id for call in state.calls[:decided]):
            return "this call was already decided"
        return None
    if (isinstance(event, (StreamOpened, StreamCompleted, StreamFailed, CompactionFailed,
                           TokenLimitRejected))
            and event.request_id in state.cancelled_requests):
        return "the request was cancelled"
    return None


def _absorb(event: PermissionDecided | StreamOpened | StreamCompleted | StreamFailed
            | CompactionFailed | TokenLimitRejected, why: str) -> StaleAnswerIgnored:
    answer_id = event.call_id if isinstance(event, PermissionDecided) else event.request_id
    return StaleAnswerIgnored(event=type(event).__name__, answer_id=answer_id, reason=why)


def _on_permission(state: TurnState, event: PermissionDecided, out: _Commands) -> TurnState:
    call = state.calls[state.next_call]
    if event.call_id != call.call_id and _is_late(state, event, out):
        return state
    if event.decision is PermissionDecision.ALLOW:
        out.append(_ExecuteTool(call=call))
        return _replace(state, phase=P.RUNNING_TOOL, tool_in_flight=True)
    if event.decision is PermissionDecision.DENY:
        denied = _ToolResultRecord(call_id=event.call_id, name=call.name,
                                   status=ToolResultStatus.DENIED, output="",
                                   reason="Denied: the user did not allow this call.")
        state = _replace(state, next_call=state.next_call + 1)
        return _persist(state, (denied,), P.SAVING_RESULTS, out)
    return _finalize(state, out, _outcome(
        state, OutcomeKind.CANCELLED,
        "The permission request was cancelled, so the turn was cancelled."))


def _on_tool_finished(state: TurnState, event: ToolFinished, out: _Commands) -> TurnState:
    if not state.tool_in_flight or event.call_id != _current_call_id(state):
        raise _unknown(state, event, "the result of the running call"
                       + (f" {_current_call_id(state)!r}" if state.tool_in_flight else ""))
    call = state.calls[state.next_call]
    result = _ToolResultRecord(
        call_id=event.call_id, name=call.name, output=event.output,
        status=ToolResultStatus.CANCELLED if event.cancelled else ToolResultStatus.EXECUTED,
        reason="Cancelled: the user stopped the turn." if event.cancelled else "")
    if state.phase is P.ENDING:
        state = _replace(state, tool_in_flight=False, next_call=state.next_call + 1)
        return _finalize(state, out, extra=(result,))
    return _persist(state, (result,), P.SAVING_RESULTS, out, tool_in_flight=False,
                    next_call=state.next_call + 1)


def _on_stop(state: TurnState, event: StopPressed | HardStopped, out: _Commands) -> TurnState:
    phase = state.phase
    if phase is P.IDLE or phase is P.ENDING:
        return state  # nothing runs, or the turn already ends: a second Stop changes nothing
    if isinstance(event, HardStopped):
        outcome = TurnOutcome(kind=OutcomeKind.HALTED, finish_reason=state.finish_reason,
                              message=event.reason, halt_kind=event.kind)
    else:
        outcome = _outcome(state, OutcomeKind.CANCELLED, "Stopped by the user.")
    if phase is P.AWAITING_STREAM or phase is P.STREAMING:
        out.append(CancelStream(request_id=state.request_id))
        state = _undelivered(_replace(state, cancelled_requests=state.remember(
            state.cancelled_requests, state.request_id)))
    elif phase is P.AWAITING_PERMISSION:
        # The notice says what the record the end writes for this call will say.
        recorded_as, _ = _SKIP_REASONS.get(outcome.kind, _ENDED_OTHERWISE)
        out.append(DismissPermission(call_id=_current_call_id(state), recorded_as=recorded_as))
        state = _replace(state, dismissed_calls=state.remember(state.dismissed_calls,
                                                               _current_call_id(state)))
    elif phase is P.RUNNING_TOOL:
        # TL-8: Stop is the user's explicit cancel; the tool reports what it did (LD-10 is about
        # Lead, which never cancels).
        out.append(CancelTool(call_id=_current_call_id(state)))
    return _finalize(state, out, outcome)


def _on_stop_decided(state: TurnState, event: NaturalStopDecided, out: _Commands) -> TurnState:
    if event.request_id != state.request_id:
        raise _unknown(state, event, f"the decision for the stop of {state.request_id!r}")
    if event.text is None or event.message_id is None:
        return _advance(_replace(state, stop_decided=True), out)
    # The continuation is a user-role message: saved before any request includes it (TL-5).
    message = _UserMessageRecord(message_id=event.message_id, text=event.text)
    return _persist(state, (message,), P.SAVING_PROMPT, out, next_step=NextStep.REQUEST,
                    calls=(), next_call=0)


def _on_amend(state: TurnState, event: AmendRequest, out: _Commands) -> TurnState:
    if event.request_id != state.request_id:
        raise _unknown(state, event, f"an amendment of request {state.request_id!r}")
    # The request is dropped (the composing reducer never passed it on, or it could not open):
    # an answer to it is late. The message is saved before the next request includes it (TL-5).
    state = _undelivered(_replace(state, cancelled_requests=state.remember(
        state.cancelled_requests, state.request_id)))
    message = _UserMessageRecord(message_id=event.message_id, text=event.text)
    return _persist(state, (message,), P.SAVING_PROMPT, out, calls=(), next_call=0)


def _owed_by_resumable(state: TurnState) -> tuple[Record, ...]:
    """What a turn that ended with a resumable error still owes if it is never continued."""
    if state.resume_phase is None:
        return ()
    return state.batch + _results_for_rest(state, *_NOT_CONTINUED)


def _on_withdraw_retry(state: TurnState, event: WithdrawRetry, out: _Commands) -> TurnState:
    if state.resume_phase is None:
        return state
    # The records go to ``owed`` (the next prompt writes them first); the instructions kept for
    # the retry are reported now, since no request will carry them (LD-13).
    released = lead.release(state.lead)
    out.extend(released.commands)
    return _replace(state, owed=state.owed + _owed_by_resumable(state), resume_phase=None,
                    batch=(), calls=(), next_call=0, lead=released.state)


def _on_close_chat(state: TurnState, event: CloseChat, out: _Commands) -> TurnState:
    records = state.owed + _owed_by_resumable(state)
    released = lead.release(state.lead)
    out.extend(released.commands)
    if records:
        out.append(UnsavedRecords(records=records, reason=event.reason))
    return _replace(state, owed=(), resume_phase=None, batch=(), calls=(), next_call=0,
                    lead=released.state)


def _on_disconnect(state: TurnState, event: ClientDisconnected, out: _Commands) -> TurnState:
    # TL-3, BR-4: a disconnect is never an allow; a pending permission request stays pending.
    return state


def _on_lead(state: TurnState, event: LeadSubmitted | LeadSaved | LeadSaveFailed,
             out: _Commands) -> TurnState:
    step = lead.reduce(state.lead, event)
    out.extend(step.commands)
    if step.state is state.lead:
        return state  # a refusal or a late answer: nothing changed
    state = _replace(state, lead=step.state)
    if isinstance(event, LeadSubmitted):
        return state
    phase = state.phase
    if phase is P.AWAITING_LEAD_SAVES:
        if lead.has_unsaved(state.lead):
            return state
        if not state.lead.entries and state.stop_decided:
            # The stop was decided for instructions that all failed to save: nothing of the
            # user's joins the turn after all, so the stop is decided again (SO-1 ... SO-7).
            state = _replace(state, stop_decided=False)
        return _advance(state, out)
    if phase is P.ENDING:
        return _finalize(state, out)
    if (phase is P.AWAITING_PERMISSION and isinstance(event, LeadSaved)
            and state.config.lead_permission_policy is LeadPermissionPolicy.SUPERSEDE):
        call_id = _current_call_id(state)
        out.append(DismissPermission(call_id=call_id, recorded_as=ToolResultStatus.SUPERSEDED))
        superseded = ToolResultRecord(call_id=call_id, name=state.calls[state.next_call].name,
                                      status=ToolResultStatus.SUPERSEDED, reason=SUPERSEDED)
        state = _replace(state, next_call=state.next_call + 1)
        rest = _results_for_rest(state, ToolResultStatus.SKIPPED, LEAD_SKIP)
        return _persist(state, (superseded, *rest), P.SAVING_RESULTS, out,
                        next_call=len(state.calls),
                        dismissed_calls=state.remember(state.dismissed_calls, call_id))
    return state


def _on_title(state: TurnState, event: TitleGenerated | TitleFailed | ManualRename
              | AutoTitlePreferenceChanged, out: _Commands) -> TurnState:
    step = titles.reduce(state.title, event)
    out.extend(step.commands)
    if step.state is state.title:
        return state  # a late answer: nothing changed
    state = _replace(state, title=step.state)
    if state.phase is P.AWAITING_TITLE and not titles.naming_in_flight(state.title):
        return _advance(state, out)
    return state


_Handler = Callable[[TurnState, object, _Commands], TurnState]
_HANDLERS: Mapping[type, _Handler] = MappingProxyType({
    PromptSubmitted: _on_prompt,  # type: ignore[dict-item]
    ContinueTurn: _on_continue,  # type: ignore[dict-item]
    StreamOpened: _on_stream_opened,  # type: ignore[dict-item]
    StreamCompleted: _on_stream_completed,  # type: ignore[dict-item]
    StreamFailed: _on_request_failed,  # type: ignore[dict-item]
    CompactionFailed: _on_request_failed,  # type: ignore[dict-item]
    TokenLimitRejected: _on_request_failed,  # type: ignore[dict-item]
    Persisted: _on_persisted,  # type: ignore[dict-item]
    PersistFailed: _on_persist_failed,  # type: ignore[dict-item]
    PermissionDecided: _on_permission,  # type: ignore[dict-item]
    ToolFinished: _on_tool_finished,  # type: ignore[dict-item]
    StopPressed: _on_stop,  # type: ignore[dict-item]
    HardStopped: _on_stop,  # type: ignore[dict-item]
    NaturalStopDecided: _on_stop_decided,  # type: ignore[dict-item]
    AmendRequest: _on_amend,  # type: ignore[dict-item]
    WithdrawRetry: _on_withdraw_retry,  # type: ignore[dict-item]
    CloseChat: _on_close_chat,  # type: ignore[dict-item]
    ClientDisconnected: _on_disconnect,  # type: ignore[dict-item]
    LeadSubmitted: _on_lead,  # type: ignore[dict-item]
    LeadSaved: _on_lead,  # type: ignore[dict-item]
    LeadSaveFailed: _on_lead,  # type: ignore[dict-item]
    TitleGenerated: _on_title,  # type: ignore[dict-item]
    TitleFailed: _on_title,  # type: ignore[dict-item]
    ManualRename: _on_title,  # type: ignore[dict-item]
    AutoTitlePreferenceChanged: _on_title,  # type: ignore[dict-item]
})


#: The phase graph's table joined with the handlers: ``(phase name, event type) -> handler``.
#: Built from TURN_GRAPH once, so the graph stays the one place that says what is accepted.
_BY_NAME = {event_type.__name__: event_type for event_type in _HANDLERS}
_ROUTES: Mapping[tuple[str, type], _Handler] = MappingProxyType({
    (phase._name_, _BY_NAME[name]): _HANDLERS[_BY_NAME[name]]
    for (phase, name) in TURN_GRAPH.table
    if name in _BY_NAME
})


def reduce(state: TurnState, event: object) -> Step[TurnState]:
    """Take one event; return the new state and the commands to carry out, in order.

    Raises a :class:`~agentturn.ProtocolError` (and changes nothing) when the event is not
    acceptable in the current phase or names a request, call, write or instruction the turn is
    not waiting on.
    """
    if type(state) is not TurnState:
        check_state("turn", state, TurnState, event)
    out: _Commands = []
    new_state = reduce_into(state, event, out)
    return new_step(state=new_state, commands=tuple(out))


def reduce_into(state: TurnState, event: object, out: list[Command]) -> TurnState:
    """:func:`reduce` for a composing reducer (the session): append the commands to ``out``
    and return the new state. A ``ProtocolError`` propagates; the caller then drops ``out``."""
    handler = _ROUTES.get((state.phase._name_, type(event)))
    if handler is None:
        if type(event) not in _HANDLERS:
            raise UnexpectedEvent(part="turn", phase=state.phase.name, event=event,
                                  expected="an agentturn event")
        why = _late_answer(state, event)
        if why is not None:
            out.append(_absorb(event, why))  # type: ignore[arg-type]
            return state
        TURN_GRAPH.check(state.phase, event)  # raises, naming what the phase accepts
    return handler(state, event, out)  # type: ignore[misc]


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Outstanding(Value):
    """One awaiting command the host has not answered yet: its class and the id to echo."""

    command: type[AwaitingCommand]
    answer_id: str


def outstanding(state: TurnState) -> tuple[Outstanding, ...]:
    """Every awaiting command this chat is still waiting on, oldest kind first.

    A host can show it, time it out, or check after a restart that it answered everything.
    """
    found: list[Outstanding] = []
    if state.persisting:
        found.append(Outstanding(command=Persist, answer_id=state.persist_key))
    if state.phase is P.AWAITING_STREAM or state.phase is P.STREAMING:
        found.append(Outstanding(command=RequestModelStream, answer_id=state.request_id))
    if state.phase is P.AWAITING_PERMISSION:
        found.append(Outstanding(command=AskPermission, answer_id=_current_call_id(state)))
    if state.tool_in_flight:
        found.append(Outstanding(command=ExecuteTool, answer_id=_current_call_id(state)))
    saving = lead.saving_id(state.lead)
    if saving is not None:
        found.append(Outstanding(command=SaveLead, answer_id=saving))
    if titles.naming_in_flight(state.title):
        found.append(Outstanding(command=RequestTitle, answer_id=state.title.request_id))
    if state.phase is P.AWAITING_STOP_DECISION:
        found.append(Outstanding(command=DecideNaturalStop, answer_id=state.request_id))
    return tuple(found)
