"""The stop order: what a session does when the model stops naturally (SO-1 ... SO-8).

Theory of operation
-------------------
The turn holds every natural stop (``DecideNaturalStop``) and the session answers it, one rule
after the other:

1. In a daemon, drain the client's mid-turn messages (``DrainMidTurnQueue`` and a
   ``StartTimer`` of ``drain_timeout``). They become Lead instructions of this turn, and any
   instruction pending now (drained, or typed with Lead meanwhile) is *mid-turn input*: Stop
   hooks and guard are skipped, the guard's stage restarts, and the turn continues with it
   (SO-1).
2. Else a complete queued prompt wins: the session's own FIFO, one the drain reply says the
   client holds, or one a drain saw beside mid-turn messages earlier (SO-2, SO-5). The chain
   awaits it; the turn ends.
3. Else, on a foreground turn, the external Stop hooks run (``RunStopHooks``, with the count of
   consecutive blocks so far and the cap, SO-6). Their answer is taken only after checking
   rule 1 again: a Lead saved while they ran is mid-turn input, and the hooks' block is set
   aside with the guard (rule 1's "skip Stop hooks and the guard"). Rule 2 is checked again
   too: a complete prompt queued while they ran wins as it would have before them, so the
   hooks' answer is set aside (neither counted towards the cap nor breaking the streak) and
   the chain awaits the prompt.
4. Else, or after the hooks, the guard decides (SO-7). A hook block and a guard continuation
   become one continuation message: the hook's reason, a blank line, the guard's text (SO-8);
   the counters stay apart.

Every decision ends with one ``NaturalStopDecided`` for the turn. Drain and hook-run ids are
numbered per turn (``<turn>/drain-<k>``, ``<turn>/hooks-<k>``, k from 1) and remembered in
``SessionState.issued``: a reply to one no longer awaited is absorbed (a drain's messages are
handed back, BR-3), a reply to an id never issued is misuse.
"""

from __future__ import annotations

from .. import guard as g
from .. import lead as lead_queue
from .._base import Command
from ..errors import UnknownId
from ..events import LeadSubmitted, NaturalStopDecided
from ..guard.texts import combined_continuation
from ..records import HardStopKind
from . import background as bg
from . import fifo
from .state import Continuation, SessionPhase
from .tick import Tick, remember, replace
from .vocabulary import (
    CancelTimer,
    DrainMidTurnQueue,
    MidTurnDrained,
    RestoreMidTurnMessages,
    RunStopHooks,
    StartTimer,
    StopHookDecided,
    StopHookFailed,
    Warn,
)

__all__ = ["after_drain", "natural_stop", "on_drained", "on_hook"]

P = SessionPhase


def natural_stop(tick: Tick) -> None:
    """The turn's ``DecideNaturalStop``: drain first in a daemon, else go on at rule 2."""
    s = tick.s
    stops = s.stops + 1
    tick.s = s = replace(s, stops=stops)
    if not s.config.daemon:
        after_drain(tick, (), queued=fifo.has_queued_prompt(s.fifo))
        return
    drain_id = f"{s.turn.turn_id}/drain-{stops}"
    tick.emit(DrainMidTurnQueue(drain_id=drain_id))
    tick.emit(StartTimer(key=drain_id, seconds=s.config.drain_timeout))
    tick.s = replace(s, phase=P.DRAINING, drain_id=drain_id, stale_snapshot=False,
                     issued=remember(s.issued, drain_id))


def on_drained(tick: Tick, event: MidTurnDrained) -> None:
    s = tick.s
    if s.phase is P.DRAINING and event.drain_id == s.drain_id:
        tick.emit(CancelTimer(key=event.drain_id))
        # BR-1, BR-2: the client's flag (omitted: false), unless an abort crossed this drain,
        # which makes its snapshot stale (BR-3); the session's own FIFO counts either way.
        reported = bool(event.has_queued_prompt) and not s.stale_snapshot
        own = fifo.has_queued_prompt(s.fifo)
        tick.s = replace(s, answered_drain=event.drain_id, stale_snapshot=False,
                         client_prompt=s.client_prompt or (reported and not own))
        after_drain(tick, event.messages, queued=reported or own)
        return
    if event.drain_id == s.late_drain and s.late_drain:
        # BR-3: the messages come back; the queued-prompt snapshot is stale and discarded.
        tick.s = s = replace(s, late_drain="", answered_drain=event.drain_id)
        if event.messages and lead_queue.is_offered(s.turn.lead):
            _submit(tick, event.drain_id, event.messages)
        elif event.messages:
            tick.emit(RestoreMidTurnMessages(drain_id=event.drain_id, messages=event.messages))
        return
    if event.drain_id == s.answered_drain and s.answered_drain:
        # A second copy of a reply already taken (a transport that delivers at least once):
        # its messages reached the turn or the client already.
        tick.stale(event, event.drain_id, "this drain's reply was already taken")
        return
    if event.drain_id in s.issued:
        if event.messages:  # nothing drained is ever dropped
            tick.emit(RestoreMidTurnMessages(drain_id=event.drain_id, messages=event.messages))
        else:
            tick.stale(event, event.drain_id, "the drain is no longer awaited")
        return
    raise UnknownId(part="session", phase=s.phase.name, event=event,
                    expected="the reply to a drain this session asked for")


def drain_timed_out(tick: Tick) -> None:
    """The drain's timer ran out: go on without its reply (a late reply restores, BR-3)."""
    s = tick.s
    tick.s = replace(s, late_drain=s.drain_id)
    after_drain(tick, (), queued=fifo.has_queued_prompt(s.fifo))


def _submit(tick: Tick, prefix: str, messages: tuple[str, ...]) -> None:
    chat_id = tick.s.config.chat_id
    for number, text in enumerate(messages, 1):
        tick.to_turn(LeadSubmitted(chat_id=chat_id, lead_id=f"{prefix}/m{number}", text=text))


def after_drain(tick: Tick, messages: tuple[str, ...], queued: bool) -> None:
    """Rule 1 with the drained messages, then rules 2 ... 4 once the turn has heard them."""
    s = tick.s
    tick.s = replace(s, phase=P.TURN, drain_id="")
    _submit(tick, f"{s.turn.turn_id}/stop-{s.stops}", messages)

    def decide_stop(tick: Tick) -> None:
        s = tick.s
        if s.turn.lead.entries:
            _mid_turn_input(tick, queued)
        elif queued or s.fifo_priority or s.client_prompt:
            _yield_to_queued_prompt(tick)
        elif s.config.hooks_enabled and not s.automatic:
            run_id = f"{s.turn.turn_id}/hooks-{s.stops}"  # SO-6; never automatic turns (BG-4)
            tick.emit(RunStopHooks(run_id=run_id, turn_id=s.turn.turn_id,
                                   consecutive_blocks=s.hook_blocks,
                                   cap=s.config.stop_hook_cap))
            tick.s = replace(s, phase=P.HOOKS, hook_run=run_id,
                             issued=remember(s.issued, run_id))
        else:
            _guard_stop(tick, None)

    tick.later(decide_stop)


def _mid_turn_input(tick: Tick, queued: bool) -> None:
    """SO-1: the user continuation runs in this loop; hooks and guard wait; a queued prompt
    seen now keeps its priority at the next stop (SO-5).

    The guard's budget is reset when the user's input reaches the model: the request that
    carries the instructions is new user input (``MidTurnMessage``, SG-A9), or sponsors the
    guard loop's tool-result send (SG-B7). Not before: an instruction whose save fails never
    reaches the model, and the stop is then decided again with the budget it had."""
    s = tick.s
    tick.s = replace(s, fifo_priority=s.fifo_priority or queued)
    _decide(tick, Continuation.NONE, None)


def _yield_to_queued_prompt(tick: Tick) -> None:
    """SO-2: the current request finishes; the chain waits for the queued prompt."""
    tick.s = replace(tick.s, fifo_priority=False)
    tick.to_guard(g.NaturalStop(queued_prompt=True))
    _decide(tick, Continuation.NONE, None)


def on_hook(tick: Tick, event: StopHookDecided | StopHookFailed) -> None:
    s = tick.s
    if s.phase is not P.HOOKS or event.run_id != s.hook_run:
        if event.run_id in s.issued:
            tick.stale(event, event.run_id, "the Stop hooks' answer is no longer awaited")
            return
        raise UnknownId(part="session", phase=s.phase.name, event=event,
                        expected="the answer of a Stop-hook run this session asked for")
    queued = fifo.has_queued_prompt(s.fifo) or s.client_prompt
    if s.turn.lead.entries:
        # Rule 1 again: the user typed while the hooks ran; their answer is set aside.
        tick.s = replace(s, phase=P.TURN, hook_run="")
        _mid_turn_input(tick, queued)
        return
    if queued:
        # Rule 2 again: a complete prompt queued while the hooks ran wins, as it would have
        # had it arrived before them; their answer is set aside (a block does not count
        # towards the cap, a pass does not break the streak), and the chain awaits the prompt.
        tick.s = replace(s, phase=P.TURN, hook_run="")
        _yield_to_queued_prompt(tick)
        return
    if isinstance(event, StopHookFailed) or not event.block:
        # SO-6: a hook that errors or times out does not block; the streak is broken.
        tick.s = replace(s, hook_blocks=0)
        _guard_stop(tick, None)
        return
    cap = s.config.stop_hook_cap
    if s.hook_blocks >= cap:
        # SO-6, SG-S1: the cap ends the turn with a warning and suspends the chain.
        tick.emit(Warn(text=f"The Stop hook blocked {s.hook_blocks + 1} times in a row, past "
                            f"its cap of {cap}; the turn ends here."))
        tick.s = replace(s, hook_blocks=0)
        tick.to_guard(g.HardStopped(kind=HardStopKind.STOP_HOOK_CAP))
        _decide(tick, Continuation.NONE, None)
        return
    tick.s = replace(s, hook_blocks=s.hook_blocks + 1)
    _guard_stop(tick, event.reason)


def _guard_stop(tick: Tick, hook_reason: str | None) -> None:
    """SO-7, SO-8: the guard decides; a hook block joins its continuation, or goes alone."""
    relevant = bg.relevant_input(tick.s.background)

    def decided(tick: Tick, commands: list[Command], changed: bool) -> None:
        prompt = next((c for c in commands if isinstance(c, g.ContinueWithGuardPrompt)), None)
        if prompt is not None:
            _decide(tick, Continuation.GUARD, combined_continuation(hook_reason, prompt.text))
        elif hook_reason is not None:
            _decide(tick, Continuation.HOOK, hook_reason)
        else:
            _decide(tick, Continuation.NONE, None)

    tick.to_guard(g.NaturalStop(relevant_background=relevant, hook_reason=hook_reason), decided)


def _decide(tick: Tick, who: Continuation, text: str | None) -> None:
    s = tick.s
    request_id = s.turn.request_id
    tick.s = replace(s, phase=P.TURN, continuation=who, hook_run="")
    if text is None:
        tick.to_turn(NaturalStopDecided(request_id=request_id))
    else:
        tick.to_turn(NaturalStopDecided(request_id=request_id,
                                        message_id=f"{request_id}/continue", text=text))
