"""The turn family's events in a session: who hears each, and in what order.

Theory of operation
-------------------
Most turn events go to the turn as they are. The ones below also concern the guard or the
session, and the order in which the parts hear them is the rule (the table in
:mod:`agentturn.session.reducer` lists it):

* a stream failure reaches the guard first (``RequestErrored``: the chain pauses for a retry,
  an attempt not yet opened is not spent, SG-S2, SG-B3), then the turn, whose end settles the
  session;
* a compaction failure or a token rejection likewise reaches the guard first (a hard stop, or
  the pending continuation not opened, SG-S1, SG-B3); a combined hook + guard continuation
  whose compaction failed continues with the hook's reason alone (SG-B9);
* a stream that opens commits a pending guard attempt (SG-B3) and counts in the usage (OB-5);
* Stop reaches the guard first (a hard stop, SG-S1), then the turn;
* a cancelled permission dialog ends the turn and is a hard stop (SG-S1);
* the built-in todo-write call's result goes to the guard once, after the turn recorded it
  (SG-A1, SG-A2, SG-A3).

A prompt or a retry is only admitted here; :mod:`agentturn.session.scheduling` starts it.
"""

from __future__ import annotations

from .. import guard as g
from .._base import Command
from .._trusted import replacer
from ..commands import DraftReason, ReturnDraft
from ..errors import UnexpectedEvent, UnknownId
from ..events import (
    AmendRequest,
    CompactionFailed,
    ContinueTurn,
    LeadSubmitted,
    PermissionDecided,
    PermissionDecision,
    PromptSubmitted,
    StopPressed,
    StreamCompleted,
    StreamFailed,
    StreamOpened,
    TokenLimitRejected,
    ToolFinished,
)
from ..records import HardStopKind
from ..turn.state import TurnPhase
from . import fifo
from .ring import EntryKind, count_model_call
from .state import Continuation, SessionPhase, SessionState
from .tick import Tick, closed_reason, replace
from .translate import publish_entry
from .vocabulary import CancelTimer, PromptRefused

__all__ = [
    "CLOSED_LEAD",
    "ORDINARY_STREAM_OPENED",
    "on_continue",
    "on_lead",
    "on_permission",
    "on_prompt",
    "on_request_failed",
    "on_stop",
    "on_stream_completed",
    "on_stream_opened",
    "on_tool_finished",
    "to_turn",
]

P = SessionPhase
#: What a Lead typed into a closed chat says as its draft comes back.
CLOSED_LEAD = "This chat is closed; your text was not sent and is kept as a draft."
_STREAM_PHASES = (TurnPhase.AWAITING_STREAM, TurnPhase.STREAMING)
#: ``(state, guard_request, hook_request, usage)``: the copy every opened stream makes.
_opened_copy = replacer(SessionState, "guard_request", "hook_request", "usage")
#: The guard's event for every ordinary stream that opens (it has no fields: one will do; the
#: direct lane sends it too).
ORDINARY_STREAM_OPENED = g.OrdinaryStreamOpened()


#: The handler of an event only the turn needs to hear: ``to_turn(tick, event)`` queues it for
#: the turn as it is. (The method itself, not a function that calls it: the commonest events,
#: a write's acknowledgement first, cost one call less.)
to_turn = Tick.to_turn


def on_prompt(tick: Tick, event: PromptSubmitted) -> None:
    s = tick.s
    closed = closed_reason(s)
    if closed:
        tick.emit(PromptRefused(prompt_id=event.turn_id, text=event.text, reason=closed))
        return
    if event.turn_id == s.turn.turn_id and (event.message_id, event.text) == s.turn.prompt:
        # The client sent the same prompt again (a retry after a network blip).
        tick.stale(event, event.turn_id, "this prompt was already received")
        return
    if s.phase is not P.IDLE:
        raise UnexpectedEvent(part="session", phase=s.phase.name, event=event,
                              expected="PromptQueued while a turn runs")
    if event.turn_id == s.turn.turn_id:
        raise UnknownId(part="session", phase=s.phase.name, event=event,
                        expected=f"a new turn id (the last turn was {s.turn.turn_id!r})")
    if (fifo.find(s.fifo, event.turn_id) is not None
            or any(held.turn_id == event.turn_id for held in s.deferred.turns)):
        # A reused id is refused at admission, its text handed back, nothing changed.
        tick.emit(PromptRefused(prompt_id=event.turn_id, text=event.text,
                                reason="this prompt id is already in use"))
        return
    # The client's prompt arrived: a wait for a prompt it reported holding is over.
    tick.s = replace(s, client_prompt=False)
    tick.submitted = event


def on_continue(tick: Tick, event: ContinueTurn) -> None:
    s = tick.s
    if closed_reason(s):
        tick.stale(event, event.turn_id, "the session is closed")
        return
    if event.turn_id == s.withdrawn_retry:
        # A click on Continue that crossed the withdrawal of that retry (its window ran out, an
        # automatic turn or a new prompt took the chat): a race of the UI, absorbed.
        tick.stale(event, event.turn_id, "this turn's retry was withdrawn")
        return
    if s.phase is not P.IDLE:
        if event.turn_id == s.turn.turn_id and s.turn.resume_phase is None:
            # A second click on Continue: the turn already goes on.
            tick.stale(event, event.turn_id, "this turn is already continuing")
            return
        raise UnexpectedEvent(part="session", phase=s.phase.name, event=event,
                              expected="ContinueTurn while the session is idle")
    tick.submitted = event


def on_stream_opened(tick: Tick, event: StreamOpened) -> None:
    s = tick.s
    # Only while the guard still waits for it: trust clearing or Plan mode drop the attempt.
    guard_call = event.request_id == s.guard_request and s.guard.phase is g.GuardPhase.CONTINUING
    hook_call = event.request_id == s.hook_request

    def committed(tick: Tick, commands: list[Command], changed: bool) -> None:
        hook = tick.s.guard.loop is g.LoopOwner.GUARD_AND_HOOK  # one call for both (SO-8)
        tick.s = replace(tick.s, usage=count_model_call(tick.s.usage, guard=True, hook=hook))

    def opened(tick: Tick, commands: list[Command], changed: bool) -> None:
        if not changed:
            return  # a late answer, absorbed by the turn
        s = tick.s
        if guard_call:
            tick.s = replace(s, guard_request="", hook_request="")
            tick.to_guard(g.GuardStreamOpened(), committed)  # SG-B3: the attempt commits now
            return
        tick.s = _opened_copy(s, "", "", count_model_call(s.usage, guard=False, hook=hook_call))
        tick.to_guard(ORDINARY_STREAM_OPENED)  # the guard only ends its tool loop

    tick.to_turn(event, opened)


def on_stream_completed(tick: Tick, event: StreamCompleted) -> None:
    def recorded(tick: Tick, commands: list[Command], changed: bool) -> None:
        if changed and event.text:
            publish_entry(tick, EntryKind.MESSAGE_CHUNK, event.request_id, event.text, None)

    tick.to_turn(event, recorded)


def on_request_failed(tick: Tick, event: StreamFailed | CompactionFailed
                      | TokenLimitRejected) -> None:
    s = tick.s
    turn = s.turn
    awaited = event.request_id == turn.request_id and (
        turn.phase in _STREAM_PHASES if isinstance(event, StreamFailed)
        else turn.phase is TurnPhase.AWAITING_STREAM)
    if not awaited:
        tick.to_turn(event)  # a late answer the turn absorbs, or misuse it refuses
        return
    pending = event.request_id == s.guard_request and s.guard.phase is g.GuardPhase.CONTINUING
    tick.s = s = replace(s, guard_request="")
    if isinstance(event, StreamFailed):
        # SG-S2: kept for a trusted retry; an attempt not yet opened is not spent (SG-B3).
        tick.to_guard(g.RequestErrored(kind=g.ErrorKind.NETWORK if event.network
                                       else g.ErrorKind.API))
    elif isinstance(event, CompactionFailed):
        hook_reason = s.guard.pending_hook_reason if pending else None
        tick.to_guard(g.GuardStreamNotOpened(reason=g.NotOpenedReason.COMPACTION_FAILED)
                      if pending else g.HardStopped(kind=HardStopKind.COMPACTION_FAILED))
        if hook_reason is not None:
            # SG-B9: the guard chain is suspended; the coalesced hook's reason still continues
            # under the hook's own semantics: saved alone, then a request of the hook's.
            tick.s = replace(s, continuation=Continuation.HOOK)
            tick.to_turn(AmendRequest(request_id=event.request_id,
                                      message_id=f"{event.request_id}/hook", text=hook_reason))
            return
    else:
        tick.to_guard(g.GuardStreamNotOpened(reason=g.NotOpenedReason.TOKEN_REJECTED)
                      if pending else g.HardStopped(kind=HardStopKind.TOKEN_LIMIT))
    tick.to_turn(event)


def on_stop(tick: Tick, event: StopPressed) -> None:
    s = tick.s
    if s.phase is P.IDLE or s.phase is P.CLOSED:
        tick.to_turn(event)  # nothing runs: the turn says so
        return
    if s.phase is P.DRAINING:
        tick.emit(CancelTimer(key=s.drain_id))
    pending = bool(s.guard_request) and s.guard.phase is g.GuardPhase.CONTINUING
    tick.to_guard(g.GuardStreamNotOpened(reason=g.NotOpenedReason.CANCELLED) if pending
                  else g.HardStopped(kind=HardStopKind.USER_CANCELLED))  # SG-S1
    phase = s.phase if s.phase is P.CLOSING else P.TURN
    tick.s = replace(s, phase=phase, drain_id="", hook_run="",
                     guard_request="" if pending else s.guard_request)
    tick.to_turn(event)


def on_permission(tick: Tick, event: PermissionDecided) -> None:
    def decided(tick: Tick, commands: list[Command], changed: bool) -> None:
        if changed and event.decision is PermissionDecision.CANCEL:
            tick.to_guard(g.HardStopped(kind=HardStopKind.PERMISSION_CANCELLED))  # SG-S1

    tick.to_turn(event, decided)


def on_tool_finished(tick: Tick, event: ToolFinished) -> None:
    s = tick.s
    call_id, turn_id = s.todo_call, s.turn.turn_id

    def recorded(tick: Tick, commands: list[Command], changed: bool) -> None:
        if call_id and event.call_id == call_id:
            # SG-A1, SG-A2: after execution and status, before PostToolUse hooks; handed once.
            tick.s = replace(tick.s, todo_call="")
            tick.to_guard(g.TodoWriteResult(
                call_id=call_id, turn_id=turn_id, envelope=event.structured,
                succeeded=not event.error and not event.cancelled))

    tick.to_turn(event, recorded)


def on_lead(tick: Tick, event: LeadSubmitted) -> None:
    if tick.s.phase is P.CLOSED and event.chat_id == tick.s.config.chat_id:
        tick.emit(ReturnDraft(lead_id=event.lead_id, reason=DraftReason.NOT_ACTIVE,
                              draft=event.text, message=CLOSED_LEAD))
        return
    tick.to_turn(event)  # the turn says the rest (LD-1 ... LD-6)
