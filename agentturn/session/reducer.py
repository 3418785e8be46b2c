"""The session reducer: one step composes the turn lifecycle, Lead, titles and the guard.

Theory of operation
-------------------
A step is a small program in two halves, kept apart (h11's fixed-point loop over its two sides
is the model):

1. **Messages between parts.** The event goes to the handler that owns it (the route table
   below). A handler never calls a part: it queues messages in a local FIFO
   (:class:`~agentturn.session.tick.Tick`). The loop (:func:`~agentturn.session.translate.run`)
   hands them to the parts one at a time; what a part returns that another part must hear
   becomes one more message at the back. No part is re-entered while its own output is walked.
2. **One decision about what runs next.** With the inbox empty,
   :func:`~agentturn.session.scheduling.settle` reads the resulting state alone: whether a
   chain that holds automatic turns can still resume, follow-up suggestions, and the next turn
   (a prompt the user sent, the FIFO's first complete prompt, a held automatic turn). No other
   code starts a turn. What the session then waits for is :func:`waiting_for`.

**The order rules**, written once. The code follows this table; each row says who hears an
event, in order, and what the session does afterwards.

=============================  ===================================================  ==========
event                          heard by, in this order                              then
=============================  ===================================================  ==========
``StreamFailed``               guard (``RequestErrored``: pause, attempt kept),     settle
                               turn (resumable end)
``CompactionFailed``,          guard (hard stop, or the pending continuation not    settle
``TokenLimitRejected``         opened), turn (end); a combined hook + guard
                               continuation instead saves the hook's reason alone
                               and asks again (SG-B9)
``StreamOpened``               turn, guard (a pending attempt commits; usage)       --
``StopPressed``                guard (hard stop), turn (cancels, ends)              settle
``HardStopped``                guard (the same event), turn (``HardStopped`` with its  settle
                               kind) -- with no turn running only the guard: a
                               hard stop applies to what runs when it arrives
``PermissionDecided`` cancel   turn (ends), guard (hard stop)                       settle
``ToolFinished`` (todo write)  turn (records it), guard (``TodoWriteResult``)       --
the turn's ``EndTurn``         guard (an unresumable ending is a hard stop;         settle
                               ``ForegroundPromptSettled``), ring
``DecideNaturalStop``          the stop order (:mod:`~agentturn.session.stop_order`) --
a Lead saved while the drain   mid-turn input: hooks and guard are skipped, the     --
or the Stop hooks run          stage restarts (SO-1)
``RequestModelStream`` in the  guard (``ToolResultsReady``), then the request: sent,  --
guard's tool loop              amended with the guard's prompt, or withheld
``PromptSubmitted``,           admitted here, started by settle                     settle
``ContinueTurn``,
``PromptQueued``,
``AutomaticTurnDue``
``CloseRequested``, grace      guard (hard stop), turn (``HardStopped``); once it has  --
                               ended: the turn hands back what it owed, queued
                               prompts and held turns come back, ``CloseSession``
=============================  ===================================================  ==========

Three invariants hold after every step (the property machine, the explorer and the fuzzer
check them): no text lost (every prompt, queued prompt, Lead, drained message, automatic turn
and tool output reaches a terminal fate: saved and delivered, handed back, reported unapplied,
refused with its text, coalesced), never stuck (an idle session with held input waits only for
something the host can still deliver, and :func:`waiting_for` names it), and the hard bound (at
most two guard-attributable streams without new user input).

Every step is built locally and returned whole: a ``ProtocolError`` raised by any part, at any
depth, leaves the host's state exactly as it was.

While a turn runs, the commonest steps (a write acknowledged, a tool's result, a permission
answer, a Lead, a stream that opens or completes, each in its plain case) are built by the
direct lane (:mod:`agentturn.session.lane`) instead: the same parts in the same order, with no
inbox and no settle, because nothing is left to translate or decide. It is a speed path only;
a test walks every configuration both ways and requires equal steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from .. import turn as turn_part
from .._base import Step
from .._memo import remember_recent
from .._trusted import new_step
from ..commands import DecideNaturalStop
from ..errors import UnexpectedEvent, check_state
from ..registry import events_of
from . import clients, daemon, stop_order
from . import turn_events as on
from .lane import LANES
from .scheduling import settle
from .state import GRACE_TIMER, GUARD_EVENTS, SESSION_GRAPH, TURN_EVENTS, SessionPhase, SessionState
from .tick import Tick
from .vocabulary import DrainMidTurnQueue, RunStopHooks, StartTimer

__all__ = ["outstanding", "reduce"]

P = SessionPhase

#: A handler takes the event class it is registered for (the test of the tables checks it).
_Handler = Callable[[Tick, Any], None]
#: The handlers by event name: the names are the phase graph's, and each module below owns its.
_HANDLERS: Mapping[str, _Handler] = MappingProxyType({
    **{name: on.to_turn for name in TURN_EVENTS},
    "PromptSubmitted": on.on_prompt,
    "ContinueTurn": on.on_continue,
    "StreamOpened": on.on_stream_opened,
    "StreamCompleted": on.on_stream_completed,
    "StreamFailed": on.on_request_failed,
    "CompactionFailed": on.on_request_failed,
    "TokenLimitRejected": on.on_request_failed,
    "StopPressed": on.on_stop,
    "PermissionDecided": on.on_permission,
    "ToolFinished": on.on_tool_finished,
    "LeadSubmitted": on.on_lead,
    "HardStopped": daemon.on_hard_stop,
    "PromptQueued": daemon.on_prompt_queued,
    "PromptCompleted": daemon.on_prompt_completed,
    "PromptAborted": daemon.on_prompt_aborted,
    "MidTurnDrained": stop_order.on_drained,
    "TimerFired": daemon.on_timer,
    "StopHookDecided": stop_order.on_hook,
    "StopHookFailed": stop_order.on_hook,
    "BackgroundStarted": daemon.on_background,
    "BackgroundEnded": daemon.on_background,
    "NotificationQueued": daemon.on_background,
    "NotificationConsumed": daemon.on_background,
    "AutomaticTurnDue": daemon.on_automatic,
    "ClientAttached": clients.on_attached,
    "ClientDetached": clients.on_detached,
    "CloseRequested": clients.on_close,
    "LifecycleChanged": daemon.on_lifecycle,
    **{name: daemon.on_guard_event for name in GUARD_EVENTS},
})


#: The session's event classes by name: the turn family's, the guard's and its own (the
#: registry refuses two classes of one name, so routing never depends on search order).
_EVENTS: Mapping[str, type] = events_of("turn", "guard", "session")
#: ``(phase name, event class) -> handler``, built from SESSION_GRAPH once.
_ROUTES: Mapping[tuple[str, type], _Handler] = SESSION_GRAPH.routes(
    {_EVENTS[name]: handler for name, handler in _HANDLERS.items()})
#: The lane of each route that has one: a handler's lane, while a turn runs.
LANE_ROUTES: Mapping[tuple[str, type], Callable[[SessionState, Any], Step[SessionState] | None]]
LANE_ROUTES = MappingProxyType({route: LANES[handler] for route, handler in _ROUTES.items()
                                if route[0] == P.TURN.name and handler in LANES})


def reduce(state: SessionState, event: object) -> Step[SessionState]:
    """Take one event; return the session's new state and the commands to carry out, in order.

    Raises a :class:`~agentturn.ProtocolError` (and changes nothing) when the event is not
    acceptable in the session's phase, or any part refuses it.
    """
    if type(state) is not SessionState:
        check_state("session", state, SessionState, event)
    route = (state.phase._name_, type(event))
    lane = LANE_ROUTES.get(route)  # the commonest steps, built directly (agentturn.session.lane)
    if lane is not None:
        step = lane(state, event)
        if step is not None:
            return step
    handler = _ROUTES.get(route)
    if handler is None:
        if _EVENTS.get(type(event).__name__) is not type(event):
            raise UnexpectedEvent(part="session", phase=state.phase.name, event=event,
                                  expected="a session event")
        SESSION_GRAPH.refuse(state.phase, event)  # naming what the phase accepts
    tick = Tick(state)
    handler(tick, event)
    settle(tick)
    return new_step(state=tick.s, commands=tuple(tick.out))


# A checker asks about each state it reaches several times (its moves, the step's check,
# *never stuck*): the last answer is remembered (see agentturn._memo).
@remember_recent(1)
def outstanding(state: SessionState) -> tuple[turn_part.Outstanding, ...]:
    """Every awaiting command the session still waits on: the turn's, plus the drain (and its
    timer), the Stop-hook run, the grace timer and a retry window's timer.
    ``DecideNaturalStop`` never shows: the session answers it itself."""
    found = [o for o in turn_part.outstanding(state.turn) if o.command is not DecideNaturalStop]
    if state.phase is P.DRAINING:
        found.append(turn_part.Outstanding(command=DrainMidTurnQueue, answer_id=state.drain_id))
        found.append(turn_part.Outstanding(command=StartTimer, answer_id=state.drain_id))
    if state.phase is P.HOOKS:
        found.append(turn_part.Outstanding(command=RunStopHooks, answer_id=state.hook_run))
    if state.grace:
        found.append(turn_part.Outstanding(command=StartTimer, answer_id=GRACE_TIMER))
    if state.retry_timer:
        found.append(turn_part.Outstanding(command=StartTimer, answer_id=state.retry_timer))
    return tuple(found)


def timers_to_rearm(state: SessionState) -> tuple[StartTimer, ...]:
    """The timers a session saved at rest waits on, to start again in the process that restores
    it (the old process's timers ended with it): the grace timer and a retry window's, each for
    its whole length from the configuration, since how long it had run is not known. A restart
    gives the user a whole retry window, and an absent client a whole grace period."""
    timers = []
    if state.grace:
        timers.append(StartTimer(key=GRACE_TIMER, seconds=state.config.grace_period))
    if state.retry_timer:
        timers.append(StartTimer(key=state.retry_timer, seconds=state.config.retry_window))
    return tuple(timers)


def lost_on_restart(state: SessionState) -> tuple[turn_part.Outstanding, ...]:
    """The answers ``state`` awaits that a restart would lose: every outstanding command but
    the timers :func:`timers_to_rearm` starts again. Empty: the state is at rest, and can be
    saved and restored in a new process (``agentturn.aio.SessionDriver.restored``)."""
    timers = {timer.key for timer in timers_to_rearm(state)}
    return tuple(o for o in outstanding(state)
                 if not (o.command is StartTimer and o.answer_id in timers))
