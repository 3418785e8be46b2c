"""The daemon's own events: the FIFO, background work, automatic turns, hard stops, timers and
lifecycle (SO-2 ... SO-5, BG-1 ... BG-7, BR-1 ... BR-4, SG-A11 ... SG-A15).

Theory of operation
-------------------
These handlers *admit* and *record*; they never start a turn (settle does, in
:mod:`agentturn.session.scheduling`):

* ``PromptQueued`` joins the FIFO (bounded, ids unique across the FIFO, the running turn and
  the held automatic turns); a resend of the same prompt is absorbed, a reused id handed back.
  A prompt arriving ends a wait for a prompt the client reported holding.
* ``PromptAborted`` removes a queued prompt (SO-3). When it was the last complete one, or the
  one the client reported holding, the chain awaiting it ends for good (SO-4) and the old
  chain's background items stop counting as related, so their later results start an
  independent, unarmed chain instead of reviving it. An abort naming a prompt that already ran
  is late. One that crosses a drain in flight makes that drain's queued-prompt snapshot stale.
* ``AutomaticTurnDue`` is checked (ids unique) and handed to settle, which starts or holds it.
* Background reports update what the session knows (BG-1, BG-2); a queued notification is a
  background result for the guard (SG-A11: a related one clears a pause).
* ``HardStopped`` reaches the guard (the same event), then halts the running turn with its
  kind; with no turn running it halts nothing (what runs next is settle's).
* Timers: the drain's (rule 1 of the stop order goes on without the reply), the grace period's
  (the session ends), a retry window's (the retry is withdrawn: ``RetryWithdrawn``, and the
  turn gives up its resumable state). A timer that was cancelled, or that this session issued
  and no longer awaits, is absorbed; a key it never issued is misuse.
* Everything that races the close is absorbed or handed back.
"""

from __future__ import annotations

from .. import guard as g
from ..errors import UnknownId
from ..events import WithdrawRetry
from ..records import HardStopKind
from . import background as bg
from . import clients, fifo, stop_order
from .state import GRACE_TIMER, SessionPhase
from .tick import Tick, closed_reason, held_prompt, replace
from .vocabulary import (
    AutomaticTurnDropped,
    AutomaticTurnDue,
    BackgroundEnded,
    BackgroundStarted,
    CancelTimer,
    HardStopped,
    LifecycleChanged,
    NotificationConsumed,
    NotificationQueued,
    PromptAborted,
    PromptCompleted,
    PromptQueued,
    PromptRefused,
    RetryWithdrawn,
    TimerFired,
)

__all__ = [
    "on_automatic",
    "on_background",
    "on_guard_event",
    "on_hard_stop",
    "on_lifecycle",
    "on_prompt_aborted",
    "on_prompt_completed",
    "on_prompt_queued",
    "on_timer",
]

P = SessionPhase


# --- the FIFO ---------------------------------------------------------------------------------


def on_prompt_queued(tick: Tick, event: PromptQueued) -> None:
    s = tick.s
    closed = closed_reason(s)
    if closed:
        tick.emit(PromptRefused(prompt_id=event.prompt_id, text=event.text, reason=closed))
        return
    queued = fifo.find(s.fifo, event.prompt_id)
    if queued is not None and (queued.message_id, queued.text) == (event.message_id,
                                                                     event.text):
        tick.stale(event, event.prompt_id, "this prompt is already queued")
        return
    taken = (queued is not None or event.prompt_id == s.turn.turn_id
             or any(held.turn_id == event.prompt_id for held in s.deferred.turns))
    queue = None if taken else fifo.admit(s.fifo, fifo.QueuedPrompt(
        prompt_id=event.prompt_id, message_id=event.message_id, text=event.text,
        complete=event.complete))
    if queue is None:
        tick.emit(PromptRefused(prompt_id=event.prompt_id, text=event.text,
                                reason="this prompt id is already in use" if taken
                                else f"{fifo.MAX_QUEUED} prompts are already queued"))
        return
    # The client's prompt arrived: a wait for a prompt it reported holding is over.
    tick.s = replace(s, fifo=queue, client_prompt=False)


def on_prompt_completed(tick: Tick, event: PromptCompleted) -> None:
    s = tick.s
    if fifo.find(s.fifo, event.prompt_id) is None:
        if s.phase is P.CLOSED:
            tick.stale(event, event.prompt_id, "the session is closed")
            return
        raise UnknownId(part="session", phase=s.phase.name, event=event,
                        expected="a queued prompt's id")
    # A prompt the client reported holding has arrived whole: it is the FIFO's now.
    tick.s = replace(s, fifo=fifo.complete(s.fifo, event.prompt_id, event.text),
                     client_prompt=False)


def on_prompt_aborted(tick: Tick, event: PromptAborted) -> None:
    s = tick.s
    if s.phase is P.CLOSED:
        tick.stale(event, event.prompt_id, "the session is closed")
        return
    awaited = s.client_prompt or s.fifo_priority or s.guard.prompt_first
    if fifo.find(s.fifo, event.prompt_id) is not None:
        queue = fifo.abort(s.fifo, event.prompt_id)
        # A prompt the client reported complete that is still arriving here is one of the
        # incomplete entries: with none left, the reported one is gone too.
        reported = s.client_prompt and any(not entry.complete for entry in queue)
        tick.s = s = replace(s, fifo=queue, client_prompt=reported)
        last = not fifo.has_queued_prompt(s.fifo) and not reported
    elif event.prompt_id in s.started_prompts or event.prompt_id == s.turn.turn_id:
        tick.stale(event, event.prompt_id, "this prompt already ran")
        return
    elif s.client_prompt:
        # The client's held prompt was aborted before it was sent: "the bridge explicitly tells
        # the live Session to terminate the awaiting guard" (SO-4).
        tick.s = s = replace(s, client_prompt=False)
        last = not fifo.has_queued_prompt(s.fifo)
    elif s.phase is P.DRAINING and not s.stale_snapshot:
        # The drain reply in flight may have been taken before this abort: its queued-prompt
        # snapshot will be discarded as stale (BR-3).
        tick.s = replace(s, stale_snapshot=True)
        return
    else:
        tick.stale(event, event.prompt_id, "this prompt is not queued here")
        return
    if last and awaited:
        # SO-3, SO-4: the wait ends for good; the old chain's background work is no longer
        # the live chain's, so its later results start an independent, unarmed chain.
        tick.s = replace(tick.s, fifo_priority=False,
                         background=bg.snapshot_baseline(tick.s.background))
    tick.to_guard(g.QueuedPromptAborted(last=last))


# --- background work and automatic turns ------------------------------------------------------


def on_background(tick: Tick, event: BackgroundStarted | BackgroundEnded | NotificationQueued
                  | NotificationConsumed) -> None:
    s = tick.s
    if s.phase is P.CLOSED:
        return  # nothing will run any more: what the host reports changes nothing
    work = s.background
    if isinstance(event, BackgroundStarted):
        tick.s = replace(s, background=bg.started(work, event.kind, event.item_id))
    elif isinstance(event, BackgroundEnded):
        if event.notification_id is not None:
            work = bg.notification_queued(work, event.notification_id, event.item_id)
            tick.to_guard(g.BackgroundResult(related=bg.is_related(work, event.item_id)))
        tick.s = replace(s, background=bg.ended(work, event.item_id))
    elif isinstance(event, NotificationConsumed):
        tick.s = replace(s, background=bg.notification_consumed(work, event.notification_id))
    else:
        tick.s = replace(s, background=bg.notification_queued(work, event.notification_id,
                                                              event.source_id))
        # SG-A11: a related background result is a trusted continuation: it clears a pause.
        tick.to_guard(g.BackgroundResult(related=bg.is_related(work, event.source_id)))


def on_automatic(tick: Tick, event: AutomaticTurnDue) -> None:
    s = tick.s
    closed = closed_reason(s)
    if closed:
        tick.emit(AutomaticTurnDropped(turn_id=event.turn_id, message_id=event.message_id,
                                       text=event.text, reason=closed))
        return
    held_here = any(held.turn_id == event.turn_id for held in s.deferred.turns)
    if held_here and held_prompt(s, event.turn_id) == (event.message_id, event.text):
        tick.stale(event, event.turn_id, "this automatic turn is already held")
        return
    if (held_here or event.turn_id == s.turn.turn_id
            or fifo.find(s.fifo, event.turn_id) is not None):
        # A reused id is refused at admission, its text handed back, nothing changed.
        tick.emit(AutomaticTurnDropped(turn_id=event.turn_id, message_id=event.message_id,
                                       text=event.text, reason="this turn id is already in use"))
        return
    turn = bg.AutomaticTurn(turn_id=event.turn_id, kind=event.kind, source_id=event.source_id,
                            recurring=event.recurring and event.kind is bg.AutomaticKind.CRON,
                            related=bg.is_related(s.background, event.source_id))
    tick.due = (turn, event.message_id, event.text)


# --- hard stops, timers, lifecycle ------------------------------------------------------------


def on_hard_stop(tick: Tick, event: HardStopped) -> None:
    s = tick.s
    if s.phase is P.CLOSED:
        return
    tick.to_guard(event)  # SG-S1: the chain is suspended
    if s.phase is P.IDLE:
        return  # nothing runs to halt; what runs next is settle's
    if s.phase is P.DRAINING:
        tick.emit(CancelTimer(key=s.drain_id))
    if s.phase is not P.CLOSING:
        tick.s = replace(s, phase=P.TURN, drain_id="", hook_run="")
    tick.to_turn(event)  # the same event: HALTED with its kind and reason


def on_timer(tick: Tick, event: TimerFired) -> None:
    s = tick.s
    key = event.key
    if s.phase is P.DRAINING and key == s.drain_id:
        stop_order.drain_timed_out(tick)
    elif key == GRACE_TIMER and s.grace:
        clients.terminate(tick, clients.GRACE_EXPIRED, HardStopKind.GRACE_EXPIRED)
    elif key == s.retry_timer and key:
        tick.s = replace(s, retry_timer="")
        if s.phase is P.IDLE and s.turn.resume_phase is not None:
            tick.s = replace(tick.s, withdrawn_retry=s.turn.turn_id)
            # TL-11: the chat kept the user's retry as long as it said it would; now the
            # automatic turns waiting behind it may run, and the user is told.
            tick.emit(RetryWithdrawn(turn_id=s.turn.turn_id,
                                     reason="the retry window ran out; the turn's records are "
                                            "kept and its Lead instructions reported "
                                            "unapplied"))
            tick.to_turn(WithdrawRetry())
    elif key == GRACE_TIMER or key in s.issued or s.phase is P.CLOSED:
        tick.stale(event, key, "this timer is no longer running")
    else:
        raise UnknownId(part="session", phase=s.phase.name, event=event,
                        expected="a timer this session started")


def on_lifecycle(tick: Tick, event: LifecycleChanged) -> None:
    s = tick.s
    if s.phase is P.CLOSED:
        return
    running = s.phase is not P.IDLE
    tick.to_guard(g.TrustCleared(kind=event.kind,
                                 invalidated_turn_id=s.turn.turn_id if running else None))


def on_guard_event(tick: Tick, event: object) -> None:
    if tick.s.phase is not P.CLOSED:
        tick.to_guard(event)
