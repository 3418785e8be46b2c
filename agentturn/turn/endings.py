"""How a turn is stopped, amended, withdrawn or closed: the handlers of the endings.

Theory of operation
-------------------
These handlers end a turn, or settle what an ended one still owes, from outside its normal
flow: the user's Stop and a hard stop (the request, the dialog or the tool in flight is
cancelled, then :func:`~agentturn.turn.advance.finalize`), the session's decision at a natural
stop and its amendment of a request (a continuation saved first, TL-5), a retry window that ran
out, a chat that closes (everything still owed handed back as ``UnsavedRecords``), and a client
that disconnects (never an allow, TL-3).
"""

from __future__ import annotations

from .. import lead
from .._bounded import remember
from ..commands import CancelStream, CancelTool, DismissPermission, Record, UnsavedRecords
from ..events import (
    AmendRequest,
    ClientDisconnected,
    CloseChat,
    HardStopped,
    NaturalStopDecided,
    StopPressed,
    WithdrawRetry,
)
from ..records import OutcomeKind, TurnOutcome
from .advance import (
    NOT_CONTINUED,
    Commands,
    advance,
    current_call_id,
    finalize,
    halt_message,
    make_outcome,
    new_user_message,
    not_run,
    persist,
    replace,
    results_for_rest,
    undelivered,
    unknown,
)
from .state import LATE_MEMORY, NextStep, TurnPhase, TurnState

P = TurnPhase


def on_stop(state: TurnState, event: StopPressed | HardStopped, out: Commands) -> TurnState:
    phase = state.phase
    if phase is P.IDLE or phase is P.ENDING:
        return state  # nothing runs, or the turn already ends: a second Stop changes nothing
    if isinstance(event, HardStopped):
        outcome = TurnOutcome(kind=OutcomeKind.HALTED, finish_reason=state.finish_reason,
                              message=halt_message(event.kind, event.reason),
                              halt_kind=event.kind)
    else:
        outcome = make_outcome(state, OutcomeKind.CANCELLED, "Stopped by the user.")
    if phase is P.AWAITING_STREAM or phase is P.STREAMING:
        out.append(CancelStream(request_id=state.request_id))
        state = undelivered(replace(state, cancelled_requests=remember(
            state.cancelled_requests, state.request_id, limit=LATE_MEMORY)))
    elif phase is P.AWAITING_PERMISSION:
        # The notice says what the record the end writes for this call will say.
        recorded_as, _ = not_run(outcome)
        out.append(DismissPermission(call_id=current_call_id(state), recorded_as=recorded_as))
        state = replace(state, dismissed_calls=remember(
            state.dismissed_calls, current_call_id(state), limit=LATE_MEMORY))
    elif phase is P.RUNNING_TOOL:
        # TL-8: Stop is the user's explicit cancel; the tool reports what it did (LD-10 is about
        # Lead, which never cancels).
        out.append(CancelTool(call_id=current_call_id(state)))
    return finalize(state, out, outcome)


def on_stop_decided(state: TurnState, event: NaturalStopDecided, out: Commands) -> TurnState:
    if event.request_id != state.request_id:
        raise unknown(state, event, f"the decision for the stop of {state.request_id!r}")
    if event.text is None or event.message_id is None:
        return advance(replace(state, stop_decided=True), out)
    # The continuation is a user-role message: saved before any request includes it (TL-5).
    message = new_user_message(message_id=event.message_id, text=event.text)
    return persist(state, (message,), P.SAVING_PROMPT, out, next_step=NextStep.REQUEST,
                   calls=(), next_call=0)


def on_amend(state: TurnState, event: AmendRequest, out: Commands) -> TurnState:
    if event.request_id != state.request_id:
        raise unknown(state, event, f"an amendment of request {state.request_id!r}")
    # The request is dropped (the composing reducer never passed it on, or it could not open):
    # an answer to it is late. The message is saved before the next request includes it (TL-5).
    state = undelivered(replace(state, cancelled_requests=remember(
        state.cancelled_requests, state.request_id, limit=LATE_MEMORY)))
    message = new_user_message(message_id=event.message_id, text=event.text)
    return persist(state, (message,), P.SAVING_PROMPT, out, calls=(), next_call=0)


def owed_by_resumable(state: TurnState) -> tuple[Record, ...]:
    """What a turn that ended with a resumable error still owes if it is never continued."""
    if state.resume_phase is None:
        return ()
    return state.batch + results_for_rest(state, *NOT_CONTINUED)


def on_withdraw_retry(state: TurnState, event: WithdrawRetry, out: Commands) -> TurnState:
    if state.resume_phase is None:
        return state
    # The records go to ``owed`` (the next prompt writes them first); the instructions kept for
    # the retry are reported now, since no request will carry them (LD-13).
    released = lead.release(state.lead)
    out.extend(released.commands)
    return replace(state, owed=state.owed + owed_by_resumable(state), resume_phase=None,
                   batch=(), calls=(), next_call=0, lead=released.state)


def on_close_chat(state: TurnState, event: CloseChat, out: Commands) -> TurnState:
    records = state.owed + owed_by_resumable(state)
    released = lead.release(state.lead)
    out.extend(released.commands)
    if records:
        out.append(UnsavedRecords(records=records, reason=event.reason))
    return replace(state, owed=(), resume_phase=None, batch=(), calls=(), next_call=0,
                   lead=released.state)


def on_disconnect(state: TurnState, event: ClientDisconnected, out: Commands) -> TurnState:
    # TL-3, BR-4: a disconnect is never an allow; a pending permission request stays pending.
    return state
