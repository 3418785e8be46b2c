"""Settle: what runs next, decided in one place from the state alone (BG-5, BG-7, SO-2, TL-11).

Theory of operation
-------------------
After a step's messages have all been delivered, :func:`settle` looks at the resulting state
and decides, in this order, until nothing more changes:

1. **A chain that holds automatic turns must be able to resume.** While the session idles, an
   armed chain is resumable only through something the host can still deliver: the user's
   retry of a turn that ended with a resumable error, relevant background input (BG-2), a
   related automatic turn, or the queued prompt it awaits. When none is left, the chain can no
   longer resume: the guard hears ``HardStopped(UNRESUMABLE)`` (or the end of its wait) and the
   automatic turns it held run. This is what makes *never stuck* hold.
2. **Follow-up suggestions** for a turn that ended in this step (BG-7): suppressed while the
   chain can resume or a queued prompt has priority; otherwise offered, but only once no naming
   request runs (the suggestion call is a small model request like the title's, serialized
   with it).
3. **The next turn**, only while no turn runs:

   * the FIFO's first complete prompt (SO-2): a queued prompt always goes first;
   * nothing else while the client holds a complete queued prompt it reported (SO-5's FIFO
     priority outlives trust clears and hard stops of the old chain); while a turn that ended
     with a resumable error keeps the chat for the user's retry (``retry_window``), only a
     *related* automatic turn of a chain an API or network error paused (not suspended), which
     continues that chain and clears its retry pause (SG-A11; the retry is withdrawn, said with
     ``RetryWithdrawn``), never one of a suspended chain;
   * the first held automatic turn, oldest first, that the guard does not hold back
     (:func:`agentturn.guard.defers_automatic_turn`: only *unrelated* turns wait for a chain
     that can resume), and then an automatic turn that became due in this step.

   An automatic turn that cannot start is held (coalesced per recurring task, bounded, BG-6);
   one that finds no room is handed back with its text, never lost.

No other code starts a turn.
"""

from __future__ import annotations

from .. import guard as g
from .. import titles
from .._base import Command
from ..commands import StaleAnswerIgnored, TurnOrigin
from ..events import ContinueTurn, PromptSubmitted
from ..records import HardStopKind
from . import background as bg
from . import fifo
from .state import Continuation, SessionPhase, SessionState
from .tick import Tick, held_prompt, remember, replace
from .translate import run
from .vocabulary import (
    AutomaticTurnDeferred,
    AutomaticTurnDropped,
    CancelTimer,
    OfferFollowUpSuggestions,
    RetryWithdrawn,
    StartTimer,
    SuppressFollowUpSuggestions,
)

__all__ = ["can_resume", "settle", "start_prompt"]

P = SessionPhase
#: The automatic-turn kinds the guard knows: a wakeup is a notification to it.
_GUARD_KIND = {bg.AutomaticKind.CRON: g.AutomaticTurnKind.CRON,
               bg.AutomaticKind.NOTIFICATION: g.AutomaticTurnKind.NOTIFICATION,
               bg.AutomaticKind.WAKEUP: g.AutomaticTurnKind.NOTIFICATION}
_ORIGIN = {bg.AutomaticKind.CRON: TurnOrigin.CRON,
           bg.AutomaticKind.NOTIFICATION: TurnOrigin.NOTIFICATION,
           bg.AutomaticKind.WAKEUP: TurnOrigin.WAKEUP}


def settle(tick: Tick) -> None:
    """Deliver the step's messages, then decide what runs next until nothing changes."""
    while True:
        run(tick)
        s = tick.s
        if s.phase is P.IDLE and _release_stale_hold(tick):
            continue
        if tick.ended is not None:
            end, tick.ended = tick.ended, None
            _follow_ups(tick, end.turn_id)
        if tick.s.phase is P.IDLE and _start_next(tick):
            continue
        break
    if tick.due is not None:
        turn, message_id, text = tick.due
        tick.due = None
        _hold(tick, turn, message_id, text)
    if tick.s.follow_ups_due and tick.s.phase is P.IDLE:
        _follow_ups(tick, tick.s.follow_ups_due)
    if tick.s.phase is P.IDLE:  # (checked here too: most steps end with a turn running)
        _open_retry_window(tick)


def _open_retry_window(tick: Tick) -> None:
    """A daemon session idling after a resumable error keeps the chat for the user's retry for
    ``retry_window`` seconds (TL-11); automatic turns wait meanwhile (rule 3)."""
    s = tick.s
    window = s.config.retry_window
    if (s.phase is not P.IDLE or not _keeps_the_chat(s) or s.retry_timer
            or not s.config.daemon or window == float("inf")):
        return
    # One window per failure: a continued turn that fails again gets a new one. A window that
    # ran out withdrew the retry, so it is never opened twice. (The key is the turn's, like the
    # grace timer's one key: a firing that crosses a ``CancelTimer`` may be taken for the next
    # window's, which only ends that window early.)
    key = f"{s.turn.turn_id}/retry"
    tick.emit(StartTimer(key=key, seconds=window))
    tick.s = replace(s, retry_timer=key, issued=remember(s.issued, key))


def can_resume(tick: Tick) -> bool:
    """Whether the idle session's chain can still resume through something the host can
    deliver: the user's retry, relevant background input, or a related automatic turn."""
    s = tick.s
    if s.turn.resume_phase is not None:
        return True  # the user's ContinueTurn (TL-11, SG-S2)
    if bg.relevant_input(s.background):
        return True  # BG-2: background work the chain started is still coming
    related = [held.source_id for held in s.deferred.turns]
    if tick.due is not None:
        related.append(tick.due[0].source_id)
    return any(bg.is_related(s.background, source) for source in related)


def _release_stale_hold(tick: Tick) -> bool:
    """Rule 1 of the module docstring; True when it queued a message for the guard."""
    s = tick.s
    guard = s.guard
    if not g.holds_automatic_turns(guard):
        return False
    if guard.prompt_first:  # the chain awaits the prompt, or did until a trust clear or Plan
        if fifo.has_queued_prompt(s.fifo) or s.client_prompt:
            return False
        tick.to_guard(g.QueuedPromptAborted(last=True))  # nothing left to await (SO-4)
        return True
    if guard.release_on_settle:
        # Nothing runs, so the invalidated foreground prompt has settled (SG-A15).
        tick.to_guard(g.ForegroundPromptSettled(turn_id=guard.release_on_settle))
        return True
    if can_resume(tick):
        return False
    tick.to_guard(g.HardStopped(kind=HardStopKind.UNRESUMABLE))
    return True


def _follow_ups(tick: Tick, turn_id: str) -> None:
    """BG-7 for the turn ``turn_id`` that ended (now, or while a naming request ran)."""
    s = tick.s
    if not s.config.daemon:
        return
    resumable = g.holds_automatic_turns(s.guard)
    queued = fifo.has_queued_prompt(s.fifo) or s.client_prompt or s.guard.prompt_first
    if bg.suppress_follow_ups(resumable, queued):
        why = "a queued prompt has priority" if queued else "a work chain can still resume"
        tick.emit(SuppressFollowUpSuggestions(turn_id=turn_id, reason=why))
        tick.s = replace(s, follow_ups_due="")
    elif titles.naming_in_flight(s.turn.title):
        tick.s = replace(s, follow_ups_due=turn_id)  # offered once the title has come
    else:
        tick.emit(OfferFollowUpSuggestions(turn_id=turn_id))
        tick.s = replace(s, follow_ups_due="")


def _start_next(tick: Tick) -> bool:
    """Rule 3 of the module docstring; True when a turn started."""
    s = tick.s
    submitted = tick.submitted
    if submitted is not None:
        # What the user sent in this step: admitted while idle, so it runs now.
        tick.submitted = None
        if isinstance(submitted, ContinueTurn):
            _continue_turn(tick, submitted)
        else:
            start_prompt(tick, submitted.turn_id, submitted.message_id, submitted.text,
                         TurnOrigin.PROMPT)
        return True
    queue, entry = fifo.pop_next(s.fifo)
    if entry is not None:
        tick.s = replace(s, fifo=queue)
        start_prompt(tick, entry.prompt_id, entry.message_id, entry.text,
                     TurnOrigin.QUEUED_PROMPT)
        return True
    if s.client_prompt:
        return False
    # A turn kept for the user's retry holds every automatic turn but one that continues its
    # chain: a related result is a trusted continuation that clears an API/network retry
    # pause (the guard is PAUSED, or ACTIVE once the result itself cleared it), never a hard
    # suspension (SG-A11).
    kept = _keeps_the_chat(s)
    continues = kept and s.guard.phase in _CONTINUABLE
    for held in s.deferred.turns:
        related = bg.is_related(s.background, held.source_id)  # as of now, not when it was due
        if (not kept or (continues and related)) and not g.defers_automatic_turn(s.guard,
                                                                                 related):
            message_id, text = held_prompt(s, held.turn_id)
            tick.s = _forget(s, held.turn_id)
            _start_automatic(tick, held, related, message_id, text)
            return True
    if tick.due is not None:
        turn, message_id, text = tick.due
        related = bg.is_related(s.background, turn.source_id)
        if (not kept or (continues and related)) and not g.defers_automatic_turn(s.guard,
                                                                                 related):
            tick.due = None
            _start_automatic(tick, turn, related, message_id, text)
            return True
    return False


#: The guard phases of a chain a related automatic turn continues during a retry window.
_CONTINUABLE = (g.GuardPhase.PAUSED, g.GuardPhase.ACTIVE)


def _keeps_the_chat(s: SessionState) -> bool:
    """A turn that ended with a resumable error keeps the chat for the user's retry, unless a
    lifecycle event invalidated it: then automatic queues are released once it settled, errors
    included (SG-A15)."""
    return s.turn.resume_phase is not None and s.guard.superseded_turn != s.turn.turn_id


def start_prompt(tick: Tick, turn_id: str, message_id: str, text: str,
                 origin: TurnOrigin) -> None:
    """A prompt starts a turn and an unarmed work chain (SG-A7)."""
    s = tick.s
    if s.retry_timer:
        tick.emit(CancelTimer(key=s.retry_timer))  # the user chose a new prompt over the retry
    withdrawn = s.turn.turn_id if s.turn.resume_phase is not None else s.withdrawn_retry
    tick.s = replace(s, phase=P.TURN, origin=origin, hook_blocks=0, stops=0, follow_ups_due="",
                     retry_timer="", started_prompts=remember(s.started_prompts, turn_id),
                     withdrawn_retry=withdrawn)
    tick.to_guard(g.OrdinaryPromptStarted(turn_id=turn_id))
    tick.to_turn(PromptSubmitted(turn_id=turn_id, message_id=message_id, text=text))


def _continue_turn(tick: Tick, event: ContinueTurn) -> None:
    """The user's retry of the turn that ended with a resumable error (TL-11, SG-A8): the guard
    keeps the chain while it is trusted, the turn goes on where it stopped."""
    s = tick.s
    if s.retry_timer:
        tick.emit(CancelTimer(key=s.retry_timer))
    tick.s = replace(s, phase=P.TURN, retry_timer="", follow_ups_due="")

    def resumed(tick: Tick, commands: list[Command], changed: bool) -> None:
        if tick.s.guard.phase is g.GuardPhase.CONTINUING:
            # The failed request was the guard's continuation and never opened (SG-B3): the
            # retried request is that continuation, and its stream commits the attempt.
            tick.s = replace(tick.s, continuation=Continuation.GUARD)

    tick.to_guard(g.RetryOrContinue(turn_id=event.turn_id), resumed)
    tick.to_turn(event)


def _start_automatic(tick: Tick, turn: bg.AutomaticTurn, related: bool, message_id: str,
                     text: str) -> None:
    """An automatic turn starts: the guard keeps the chain for a related one (SG-A10) or
    starts an independent unarmed chain (BG-5); it runs no Stop hooks (BG-4)."""
    s = tick.s
    if s.retry_timer:
        tick.emit(CancelTimer(key=s.retry_timer))
    if s.turn.resume_phase is not None:
        # The retry of the turn is given up here, never silently (TL-11): the turn was
        # invalidated, or a related automatic turn continues its chain (SG-A11).
        reason = ("a related automatic turn continues the work chain" if _keeps_the_chat(s)
                  else "an automatic turn took the chat")
        tick.emit(RetryWithdrawn(turn_id=s.turn.turn_id,
                                 reason=f"{reason}; the turn's records are kept and its Lead "
                                        "instructions reported unapplied"))
    withdrawn = s.turn.turn_id if s.turn.resume_phase is not None else s.withdrawn_retry
    tick.s = replace(s, phase=P.TURN, origin=_ORIGIN[turn.kind], hook_blocks=0, stops=0,
                     follow_ups_due="", retry_timer="", withdrawn_retry=withdrawn)
    tick.to_guard(g.AutomaticTurnStarted(turn_id=turn.turn_id, kind=_GUARD_KIND[turn.kind],
                                         related=related))
    tick.to_turn(PromptSubmitted(turn_id=turn.turn_id, message_id=message_id, text=text))


def _forget(s: SessionState, turn_id: str) -> SessionState:
    """``s`` without the held automatic turn ``turn_id`` and the prompt it would send."""
    return replace(s, deferred=bg.take(s.deferred, turn_id), deferred_prompts=tuple(
        prompt for prompt in s.deferred_prompts if prompt[0] != turn_id))


def _hold(tick: Tick, turn: bg.AutomaticTurn, message_id: str, text: str) -> None:
    """Hold an automatic turn in the bounded queue (BG-5, BG-6); nothing leaves it silently."""
    s = tick.s
    queue, outcome = bg.defer(s.deferred, turn)
    tick.s = s = replace(s, deferred=queue)
    result = outcome.result
    if result is bg.Deferral.QUEUED:
        tick.s = s = replace(s, deferred_prompts=(*s.deferred_prompts,
                                                  (turn.turn_id, message_id, text)))
        tick.emit(AutomaticTurnDeferred(turn_id=turn.turn_id))
        evicted = outcome.evicted
        if evicted is not None:
            evicted_message, evicted_text = held_prompt(s, evicted.turn_id)
            tick.s = _forget(s, evicted.turn_id)  # ``defer`` already took the turn itself
            tick.emit(AutomaticTurnDropped(
                turn_id=evicted.turn_id, message_id=evicted_message, text=evicted_text,
                reason="the deferred queue is full; the oldest unrelated automatic turn made "
                       "room"))
    elif result is bg.Deferral.COALESCED and outcome.into is not None:
        tick.emit(AutomaticTurnDeferred(turn_id=turn.turn_id,
                                        coalesced_into=outcome.into.turn_id))
    elif result is bg.Deferral.DUPLICATE:
        tick.emit(StaleAnswerIgnored(event="AutomaticTurnDue", answer_id=turn.turn_id,
                                     reason="this automatic turn is already held"))
    else:  # DROPPED or REFUSED: the queue is full of turns related to the live chain
        tick.emit(AutomaticTurnDropped(
            turn_id=turn.turn_id, message_id=message_id, text=text,
            reason="the deferred queue is full of turns related to the live work chain; "
                   "deliver it again once one has run"))
