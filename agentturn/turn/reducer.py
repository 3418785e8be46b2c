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
acknowledgement goes through :func:`advance`, which picks the next action in a fixed order:

1. Lead saves in flight are awaited; saved Lead instructions make the boundary: the old
   response's unstarted calls are recorded as skipped and the next request carries the
   instructions (LD-8, LD-9, LD-16);
2. the end of the turn if the model finished and no instruction is waiting (the end needs no
   model, so a naming request still running does not hold it);
3. a naming request in flight holds every tool and every model request (TT-3);
4. the next tool call of the response (TL-4), or else the next request.

Ending is one path too, :func:`finalize`: close Lead admission (LD-14), wait for a write or a
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
* Engines mislabel cut-off responses, so a ``StreamCompleted.cut_off`` signal (the output tokens
  at the request's limit, an unclosed tool block; :mod:`agentturn.engines` derives it) ends the
  turn as an output limit whatever the finish reason says; the outcome's ``cut_off`` names the
  signal that decided (``FINISH_REASON`` when the label itself said so).
* ``PersistFailed`` ends the turn with a resumable error that keeps the unsaved records;
  ``ContinueTurn`` writes them again and goes on. During final lifecycle work (after Stop, for
  example) a failed write cannot be retried: the turn ends with the outcome it had, and the
  records it could not save, with a result for every call still without one, are kept in
  ``owed`` and written first by the next prompt, so no executed tool output is lost.
* A whitespace-only final response counts as empty (TL-7).
* A call's record gives the true reason it did not run or was cut short, since the model reads
  it: "the user stopped the turn" only after Stop; a hard stop names its authority (loop
  protection, a PostToolUse hook, the session closing, grace expiring ...); a tool that reports
  ``cancelled`` while nothing ends the turn cancelled itself (a timeout), and the turn goes on.
* The saved response of a cut-off turn carries the outcome's ``cut_off`` signal; a response
  that did not complete normally (``ResponseRecord.completes_normally`` false) is sent to the
  engine later with its text only, without its calls or their results.
* A call the host refused (``ToolCall.refusal``, see :func:`~agentturn.review_calls`) is
  recorded ``REFUSED`` with the host's reason when its turn comes, never run nor asked about.
* A tool that ends the task (``ToolFinished(ends_task=True)``) has its result saved, then the
  turn ends ``ENDED_BY_TOOL``: no natural stop (no stop decision), saved Lead instructions
  reported unapplied. After Stop or a hard stop, the ending decided first stands.

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
from .._base import Command, Step
from .._trusted import new_step
from ..commands import (
    StaleAnswerIgnored,
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
    CutOffSignal,
    FinishKind,
    FinishReason,
    HardStopKind,
    OutcomeKind,
    ToolResultStatus,
    TurnOutcome,
)
from ..registry import events_of
from ..titles import TitleTrigger
from .advance import (
    CUT_EVIDENCE,
    CUT_OFF,
    PERMISSION_CANCELLED,
    SKIP_REASONS,
    Commands,
    advance,
    cancelled_reason,
    copy_for_call,
    copy_for_stream,
    copy_write_done,
    current_call_id,
    finalize,
    make_outcome,
    new_execute_tool,
    new_response_record,
    new_tool_result,
    new_user_message,
    not_run,
    persist,
    persist_response,
    persist_result,
    replace,
    results_for_rest,
    undelivered,
    unknown,
)
from .endings import (
    on_amend,
    on_close_chat,
    on_disconnect,
    on_stop,
    on_stop_decided,
    on_withdraw_retry,
    owed_by_resumable,
)
from .parts import on_lead, on_title
from .state import (
    SAVING_PHASES,
    TURN_GRAPH,
    NextStep,
    TurnPhase,
    TurnState,
)

P = TurnPhase

__all__ = ["reduce", "reduce_into"]

# --- handlers, one per event type -------------------------------------------------------------


def _on_prompt(state: TurnState, event: PromptSubmitted, out: Commands) -> TurnState:
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
    carried = state.owed + owed_by_resumable(state)
    # Instructions saved in a turn that ended with a resumable error are reported now: the
    # new prompt is not that turn (LD-3, LD-13).
    queue = state.lead
    if queue.entries:
        released = lead.release(queue)
        out.extend(released.commands)
        queue = released.state
    state = replace(
        state, turn_id=event.turn_id, request_seq=0, persist_seq=0, persisting=False, batch=(),
        calls=(), next_call=0, tool_in_flight=False, next_step=NextStep.REQUEST,
        finish_reason=None, ending=None, resume_phase=None, owed=(), request_leads=(),
        prompt=(event.message_id, event.text), lead=lead.open_admission(queue),
        title=titles.new_turn(state.title))
    prompt = new_user_message(message_id=event.message_id, text=event.text)
    return persist(state, (*carried, prompt), P.SAVING_PROMPT, out)


def _on_continue(state: TurnState, event: ContinueTurn, out: Commands) -> TurnState:
    if state.resume_phase is None or event.turn_id != state.turn_id:
        raise unknown(state, event, "ContinueTurn for the turn that ended with a resumable error")
    resume = state.resume_phase
    state = replace(state, resume_phase=None, lead=lead.open_admission(state.lead))
    if resume in SAVING_PHASES:
        return persist(state, state.batch, resume, out)
    return advance(state, out)


def _is_late(state: TurnState, event: StreamOpened | StreamCompleted | StreamFailed
             | CompactionFailed | TokenLimitRejected | PermissionDecided, out: Commands) -> bool:
    """True (with the notice sent) when ``event`` is a late answer; raise when it is misuse."""
    notice = _late_answer(state, event)
    if notice is None:
        expected = (f"a decision for call {current_call_id(state)!r}"
                    if isinstance(event, PermissionDecided)
                    else f"an event for request {state.request_id!r}")
        raise unknown(state, event, expected)
    out.append(notice)
    return True


def _on_stream_opened(state: TurnState, event: StreamOpened, out: Commands) -> TurnState:
    if event.request_id != state.request_id and _is_late(state, event, out):
        return state
    # The stream was returned: the instructions it carries reached the model (LD-8, LD-13).
    return copy_for_stream(state, P.STREAMING, ())


def _cut_off(reason: FinishReason, calls: int, signal: CutOffSignal | None) -> TurnOutcome:
    """The outcome of a response that did not complete normally (TL-9), raw reason kept.

    A cut-off ``signal`` of the stream normalizer makes it an output limit whatever the label.
    """
    if signal is None or signal is CutOffSignal.FINISH_REASON:
        kind, sentence = CUT_OFF[reason.kind if signal is None else FinishKind.LENGTH]
        said = f"finish reason {reason.raw!r}"
        if kind is OutcomeKind.OUTPUT_LIMIT:
            signal = CutOffSignal.FINISH_REASON
    else:
        kind, sentence = CUT_OFF[FinishKind.LENGTH]
        said = f"{CUT_EVIDENCE[signal]}, though the finish reason was {reason.raw!r}"
    return TurnOutcome(kind=kind, finish_reason=reason, cut_off=signal,
                       message=f"{sentence} ({said})"
                               + (f"; its {calls} tool call(s) were not run." if calls else "."))


def _on_stream_completed(state: TurnState, event: StreamCompleted, out: Commands) -> TurnState:
    if event.request_id != state.request_id and _is_late(state, event, out):
        return state
    reason = state.config.finish_reason(event.finish_reason)
    ending: TurnOutcome | None = None
    next_step = state.next_step
    if not reason.completes_normally or event.cut_off is not None:
        # TL-9 before TL-6: truncation explains a broken call; no retry can mend it.
        ending = _cut_off(reason, len(event.tool_calls), event.cut_off)
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
    # The record says it was cut, as the outcome does: a trace checker and the host's history
    # read the record alone (its ``completes_normally``).
    response = new_response_record(request_id=event.request_id, text=event.text,
                                   tool_calls=event.tool_calls, finish_reason=reason,
                                   malformed_tool_format=event.malformed_tool_format,
                                   cut_off=None if ending is None else ending.cut_off)
    state = persist_response(state, response, next_step, out)
    if titles.is_due(state.title) and event.text.strip() and not event.malformed_tool_format:
        named = titles.request_if_due(state.title, TitleTrigger.USABLE_RESPONSE)
        if named.commands:
            out.extend(named.commands)
            state = replace(state, title=named.state)
    if ending is not None:
        return finalize(state, out, ending)
    return state


def _on_request_failed(state: TurnState, event: StreamFailed | CompactionFailed
                       | TokenLimitRejected, out: Commands) -> TurnState:
    if event.request_id != state.request_id and _is_late(state, event, out):
        return state
    state = undelivered(state)
    if isinstance(event, StreamFailed):
        state = replace(state, resume_phase=P.AWAITING_STREAM)
        return finalize(state, out, make_outcome(
            state, OutcomeKind.ERROR,
            f"The model request failed: {event.error}. You can retry or continue.",
            resumable=True))
    if isinstance(event, CompactionFailed):
        return finalize(state, out, make_outcome(
            state, OutcomeKind.COMPACTION_FAILED,
            f"Compacting the conversation failed: {event.reason}."))
    return finalize(state, out, make_outcome(
        state, OutcomeKind.TOKEN_LIMIT, f"The prompt is over the model's token limit: "
                                        f"{event.reason}."))


def _check_key(state: TurnState, event: Persisted | PersistFailed) -> None:
    if not state.persisting or event.key != state.persist_key:
        raise unknown(state, event, f"an acknowledgement for write {state.persist_key!r}")


def _on_persisted(state: TurnState, event: Persisted, out: Commands) -> TurnState:
    _check_key(state, event)
    phase = state.phase
    if phase is P.ENDING:
        return finalize(copy_write_done(state, False, ()), out)
    if phase is P.SAVING_RESPONSE and state.next_step is NextStep.RETRY and state.calls:
        # TL-6: calls in a malformed response are recorded, never run; then the retry.
        skipped = results_for_rest(state, *SKIP_REASONS[OutcomeKind.MALFORMED_TOOL_FORMAT])
        return persist(state, skipped, P.SAVING_RESULTS, out, next_call=len(state.calls))
    if (phase is P.SAVING_RESULTS and state.calls and state.next_call == len(state.calls)
            and state.next_step is not NextStep.RETRY and titles.is_due(state.title)):
        named = titles.request_if_due(state.title, TitleTrigger.TOOL_ROUND)
        if named.commands:
            out.extend(named.commands)
            state = replace(state, title=named.state)
    return advance(state, out, acknowledged=True)


#: The hard stops that end the session too: the chat closes after the turn (``CloseChat``).
_CLOSING_KINDS = frozenset({HardStopKind.SESSION_CLOSED, HardStopKind.GRACE_EXPIRED})


def _on_persist_failed(state: TurnState, event: PersistFailed, out: Commands) -> TurnState:
    _check_key(state, event)
    if state.phase is P.ENDING:
        ending = state.ending
        assert ending is not None
        # TL-5: nothing executed is dropped. What this write held, and a result for every call
        # still without one, is owed: the next prompt writes it before anything else.
        owed = state.owed + state.batch + results_for_rest(state, *not_run(ending))
        # What the user is told must be true: a closing session has no next prompt, and hands
        # the records back (``UnsavedRecords``) when it closes the chat.
        closing = ending.halt_kind in _CLOSING_KINDS
        later = ("the session is closing, so they are handed back unsaved" if closing
                 else "they will be saved before the next prompt")
        note = f" Saving {len(owed)} record(s) failed ({event.reason}); {later}."
        state = replace(state, persisting=False, batch=(), calls=(), next_call=0, owed=owed,
                        ending=attrs.evolve(ending, message=ending.message + note))
        return finalize(state, out)
    state = replace(state, persisting=False, resume_phase=state.phase)
    return finalize(state, out, make_outcome(
        state, OutcomeKind.ERROR,
        f"Saving the conversation failed: {event.reason}. You can retry or continue.",
        resumable=True))


def _late_answer(state: TurnState, event: object) -> StaleAnswerIgnored | None:
    """The notice absorbing ``event`` as a late answer, or ``None`` when it is not one."""
    if isinstance(event, PermissionDecided):
        call_id = event.call_id
        if call_id in state.dismissed_calls:
            return _absorbed(event, call_id, "the permission dialog was already dismissed")
        decided = state.next_call + 1 if state.tool_in_flight else state.next_call
        if any(call.call_id == call_id for call in state.calls[:decided]):
            return _absorbed(event, call_id, "this call was already decided")
        return None
    if (isinstance(event, (StreamOpened, StreamCompleted, StreamFailed, CompactionFailed,
                           TokenLimitRejected))
            and event.request_id in state.cancelled_requests):
        return _absorbed(event, event.request_id, "the request was cancelled")
    return None


def _absorbed(event: object, answer_id: str, why: str) -> StaleAnswerIgnored:
    return StaleAnswerIgnored(event=type(event).__name__, answer_id=answer_id, reason=why)


def _on_permission(state: TurnState, event: PermissionDecided, out: Commands) -> TurnState:
    call = state.calls[state.next_call]
    if event.call_id != call.call_id and _is_late(state, event, out):
        return state
    if event.decision is PermissionDecision.ALLOW:
        out.append(new_execute_tool(call=call))
        return copy_for_call(state, P.RUNNING_TOOL, True)
    if event.decision is PermissionDecision.DENY:
        denied = new_tool_result(call_id=event.call_id, name=call.name,
                                   status=ToolResultStatus.DENIED, output="",
                                   reason="Denied: the user did not allow this call.")
        return persist(state, (denied,), P.SAVING_RESULTS, out, next_call=state.next_call + 1)
    # TL-3: the turn is cancelled; the records say why, this call's and the later ones'.
    dismissed = new_tool_result(call_id=call.call_id, name=call.name,
                                status=ToolResultStatus.CANCELLED,
                                reason="Cancelled: the user cancelled the permission request "
                                       "for this call.")
    state = replace(state, next_call=state.next_call + 1)
    rest = results_for_rest(state, ToolResultStatus.CANCELLED, PERMISSION_CANCELLED)
    return finalize(replace(state, next_call=len(state.calls)), out, make_outcome(
        state, OutcomeKind.CANCELLED,
        "The permission request was cancelled, so the turn was cancelled."),
        extra=(dismissed, *rest))


def _on_tool_finished(state: TurnState, event: ToolFinished, out: Commands) -> TurnState:
    if not state.tool_in_flight or event.call_id != current_call_id(state):
        raise unknown(state, event, "the result of the running call"
                      + (f" {current_call_id(state)!r}" if state.tool_in_flight else ""))
    call = state.calls[state.next_call]
    ending = state.ending if state.phase is P.ENDING else None
    if event.cancelled:
        # The true reason (issue 32): Stop, a hard stop, or the tool itself while the turn
        # goes on (a timeout); never "the user stopped the turn" unless the user did.
        result = new_tool_result(call_id=event.call_id, name=call.name, output=event.output,
                                 status=ToolResultStatus.CANCELLED,
                                 reason=cancelled_reason(ending))
    else:
        result = new_tool_result(call_id=event.call_id, name=call.name, output=event.output,
                                 status=ToolResultStatus.EXECUTED, reason="")
    if state.phase is P.ENDING:
        # The ending decided first (Stop, a hard stop) stands, even for a tool ending the task.
        state = replace(state, tool_in_flight=False, next_call=state.next_call + 1)
        return finalize(state, out, extra=(result,))
    state = persist_result(state, result, out)
    if event.ends_task:
        # The result is saved first; then the later calls are recorded not run, and the turn
        # ends: the model's explicit end of the task, neither an error nor a natural stop.
        return finalize(state, out, make_outcome(
            state, OutcomeKind.ENDED_BY_TOOL,
            f"{call.name} ({call.call_id}) ended the task."))
    return state


#: A handler takes the event class it is registered for (the test of the tables checks it).
_Handler = Callable[[TurnState, Any, Commands], TurnState]
_HANDLERS: Mapping[type, _Handler] = MappingProxyType({
    PromptSubmitted: _on_prompt,
    ContinueTurn: _on_continue,
    StreamOpened: _on_stream_opened,
    StreamCompleted: _on_stream_completed,
    StreamFailed: _on_request_failed,
    CompactionFailed: _on_request_failed,
    TokenLimitRejected: _on_request_failed,
    Persisted: _on_persisted,
    PersistFailed: _on_persist_failed,
    PermissionDecided: _on_permission,
    ToolFinished: _on_tool_finished,
    StopPressed: on_stop,
    HardStopped: on_stop,
    NaturalStopDecided: on_stop_decided,
    AmendRequest: on_amend,
    WithdrawRetry: on_withdraw_retry,
    CloseChat: on_close_chat,
    ClientDisconnected: on_disconnect,
    LeadSubmitted: on_lead,
    LeadSaved: on_lead,
    LeadSaveFailed: on_lead,
    TitleGenerated: on_title,
    TitleFailed: on_title,
    ManualRename: on_title,
    AutoTitlePreferenceChanged: on_title,
})


#: ``(phase name, event class) -> handler``, built from TURN_GRAPH once.
_ROUTES: Mapping[tuple[str, type], _Handler] = TURN_GRAPH.routes(_HANDLERS)
#: The turn family's event classes by name (the ones a host may feed the turn, and more).
_EVENTS = events_of("turn")


def reduce(state: TurnState, event: object) -> Step[TurnState]:
    """Take one event; return the new state and the commands to carry out, in order.

    Raises a :class:`~agentturn.ProtocolError` (and changes nothing) when the event is not
    acceptable in the current phase or names a request, call, write or instruction the turn is
    not waiting on.
    """
    if type(state) is not TurnState:
        check_state("turn", state, TurnState, event)
    out: Commands = []
    new_state = reduce_into(state, event, out)
    return new_step(state=new_state, commands=tuple(out))


def reduce_into(state: TurnState, event: object, out: list[Command]) -> TurnState:
    """:func:`reduce` for a composing reducer (the session): append the commands to ``out``
    and return the new state. A ``ProtocolError`` propagates; the caller then drops ``out``."""
    handler = _ROUTES.get((state.phase._name_, type(event)))
    if handler is None:
        if _EVENTS.get(type(event).__name__) is not type(event):
            raise UnexpectedEvent(part="turn", phase=state.phase.name, event=event,
                                  expected="an agentturn event")
        notice = _late_answer(state, event)
        if notice is not None:
            out.append(notice)
            return state
        TURN_GRAPH.refuse(state.phase, event)  # naming what the phase accepts
    return handler(state, event, out)
