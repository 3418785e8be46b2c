"""Clients, the grace period and closing (BR-4, BR-5, SG-A13).

Theory of operation
-------------------
A client attaching is replayed the event ring after its ``last_seq`` (BR-5) and cancels a
running grace timer; the guard hears the same ``ClientAttached`` and keeps its state (SG-A13).
When the last client detaches, the grace timer starts (``grace_period``, 10 s by default) and
the turn hears ``ClientDisconnected``, which never approves a pending permission (TL-3, BR-4).

The session ends on an explicit close (``CloseRequested``) or when the grace timer runs out,
both the same way: a running turn is halted first (``HALTED`` with the close's kind; its dialog
dismissed, never approved) and the session is ``CLOSING`` until the turn has ended; then
:func:`close` hands back everything still waiting, so nothing is dropped: what the turn owed
(``UnsavedRecords``, ``LeadUnapplied``, through the turn's ``CloseChat``), every queued prompt
(``PromptRefused``) and every held automatic turn (``AutomaticTurnDropped``, with its text), and
then says ``CloseSession``. What races the close afterwards is absorbed or handed back.
"""

from __future__ import annotations

from ..events import ClientDisconnected, CloseChat, HardStopped
from ..records import HardStopKind
from . import background as bg
from .ring import replay
from .state import GRACE_TIMER, SessionPhase
from .tick import Tick, held_prompt, replace
from .vocabulary import (
    AutomaticTurnDropped,
    CancelTimer,
    ClientAttached,
    ClientDetached,
    CloseRequested,
    CloseSession,
    PromptRefused,
    ReplayEvents,
    StartTimer,
)

__all__ = ["CLOSED_REASON", "GRACE_EXPIRED", "close", "on_attached", "on_close", "on_detached",
           "terminate"]

P = SessionPhase
GRACE_EXPIRED = "The client did not come back within the grace period."
CLOSED_REASON = "The session was closed."


def on_attached(tick: Tick, event: ClientAttached) -> None:
    s = tick.s
    if s.phase is P.CLOSED:
        tick.stale(event, event.client_id, "the session is closed")
        return
    if event.client_id not in s.clients:
        tick.s = s = replace(s, clients=(*s.clients, event.client_id))
    if s.grace:
        tick.emit(CancelTimer(key=GRACE_TIMER))
        tick.s = s = replace(s, grace=False)
    seen = replay(s.ring, event.last_seq)
    tick.emit(ReplayEvents(client_id=event.client_id, entries=seen.entries, gap=seen.gap))
    tick.to_guard(event)  # SG-A13: a live attach keeps the state


def on_detached(tick: Tick, event: ClientDetached) -> None:
    s = tick.s
    if event.client_id not in s.clients:
        tick.stale(event, event.client_id, "this client is not attached")
        return
    tick.s = s = replace(s, clients=tuple(c for c in s.clients if c != event.client_id))
    if s.clients or s.phase is P.CLOSED or s.phase is P.CLOSING:
        return  # a closing session needs no grace period: it ends when its turn has
    # BR-4: the grace period starts; a disconnect never approves a pending permission.
    tick.emit(StartTimer(key=GRACE_TIMER, seconds=s.config.grace_period))
    tick.s = replace(s, grace=True)
    tick.to_turn(ClientDisconnected())


def on_close(tick: Tick, event: CloseRequested) -> None:
    if tick.s.phase is P.CLOSED or tick.s.phase is P.CLOSING:
        return
    terminate(tick, CLOSED_REASON, HardStopKind.SESSION_CLOSED)


def terminate(tick: Tick, reason: str, kind: HardStopKind) -> None:
    """End the session: halt a running turn first, then close once it has ended."""
    s = tick.s
    if s.grace and kind is not HardStopKind.GRACE_EXPIRED:
        tick.emit(CancelTimer(key=GRACE_TIMER))  # closed by the client before grace ran out
    if s.retry_timer:
        tick.emit(CancelTimer(key=s.retry_timer))
    tick.s = s = replace(s, grace=False, retry_timer="")
    if s.phase is P.IDLE:
        close(tick, reason)
        return
    if s.phase is P.DRAINING:
        tick.emit(CancelTimer(key=s.drain_id))
    stopped = HardStopped(kind=kind, reason=reason)
    tick.to_guard(stopped)
    tick.s = replace(s, phase=P.CLOSING, drain_id="", hook_run="", close_reason=reason)
    tick.to_turn(stopped)


def close(tick: Tick, reason: str) -> None:
    """Hand back everything still waiting (nothing is dropped silently), then close."""
    tick.to_turn(CloseChat(reason="the session closed before these records were saved"))

    def closed(tick: Tick) -> None:
        s = tick.s
        for entry in s.fifo:
            tick.emit(PromptRefused(prompt_id=entry.prompt_id, text=entry.text,
                                    reason="the session closed before this prompt ran"))
        for held in s.deferred.turns:
            message_id, text = held_prompt(s, held.turn_id)
            tick.emit(AutomaticTurnDropped(turn_id=held.turn_id, message_id=message_id,
                                           text=text, reason="the session closed"))
        tick.emit(CloseSession(reason=reason))
        tick.s = replace(s, phase=P.CLOSED, fifo=(), deferred=bg.Deferred(
            max_deferred=s.deferred.max_deferred), deferred_prompts=(), grace=False,
            close_reason=reason, client_prompt=False, follow_ups_due="")

    tick.later(closed)
