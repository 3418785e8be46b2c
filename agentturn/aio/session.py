"""The session driver: :func:`agentturn.session.reduce` run by the driver.

Theory of operation
-------------------
A :class:`SessionDriver` starts from ``Session.create(config)``. Beyond the turn's effects it
carries out the session's own awaiting commands (``RunStopHooks``, ``DrainMidTurnQueue``,
``StartTimer`` on the driver's clock) and takes the session's input: queued prompts, clients
attaching and detaching, background work, automatic turns, lifecycle changes.

A driver can also go on from a saved session (``state=``, or :meth:`SessionDriver.restored`), as
a daemon does after a restart: the state must owe no answer, and the timers it waits on start
again.

*Done* for a session is quiescence: :meth:`quiescent` waits until nothing is queued and no
effect runs, and returns :func:`agentturn.session.waiting_for` of that state: what the session
still waits for (a timer, a prompt the client holds, the user's retry, background input), each
something the host can still deliver (the session's *never stuck* invariant). Closing sends
``CloseRequested``: a running turn is halted, then the session hands back what it holds
(``UnsavedRecords``, ``PromptRefused``, ``AutomaticTurnDropped``, ``LeadUnapplied``) and says
``CloseSession``; all of it comes back in :class:`~agentturn.aio.Closed`.
"""

from __future__ import annotations

from typing import TextIO

from ..engines import ChatCompletionsStream, EngineStream
from ..session import (
    SessionConfig,
    SessionPhase,
    SessionState,
    Waiting,
    lost_on_restart,
    outstanding,
    reduce,
    timers_to_rearm,
    waiting_for,
)
from ..session.vocabulary import CloseRequested
from .clock import Clock
from .driver import Driver, NoticeSink, StepSink
from .effects import Effects, TextSink
from .tracing import TraceWriter

__all__ = ["SessionDriver"]


class SessionDriver(Driver[SessionState]):
    """Runs one session. Use as ``async with SessionDriver(...) as driver:``."""

    def __init__(self, config: SessionConfig, effects: Effects, *,
                 max_output_tokens: int | None, wire: type[EngineStream] = ChatCompletionsStream,
                 on_notice: NoticeSink | None = None, on_step: StepSink | None = None,
                 on_text: TextSink | None = None, clock: Clock | None = None,
                 trace: TextIO | None = None, state: SessionState | None = None) -> None:
        if state is None:
            state = SessionState.create(config)
        else:
            _check_restorable(state, config, trace)
        super().__init__(state=state, reduce=reduce, outstanding=outstanding, effects=effects,
                         max_output_tokens=max_output_tokens, wire=wire, on_notice=on_notice,
                         on_step=on_step, on_text=on_text, clock=clock,
                         trace=TraceWriter(trace, "session", config),
                         rearm=timers_to_rearm(state))

    @classmethod
    def restored(cls, state: SessionState, effects: Effects, *, max_output_tokens: int | None,
                 wire: type[EngineStream] = ChatCompletionsStream,
                 on_notice: NoticeSink | None = None, on_step: StepSink | None = None,
                 on_text: TextSink | None = None,
                 clock: Clock | None = None) -> SessionDriver:
        """A driver that goes on from a saved session (``agentturn.trace.load_state``'s, or any
        state the host kept), rather than a new one (the same as ``state=``). The state must be
        at rest: no answer owed (the effects that would give it ran in another process;
        ``ValueError`` names it). The timers it waits on start again when the driver starts, each
        for its whole length (:func:`agentturn.session.timers_to_rearm`). It writes no trace: a
        trace replays from a new session, so it cannot begin mid-way."""
        return cls(state.config, effects, max_output_tokens=max_output_tokens, wire=wire,
                   on_notice=on_notice, on_step=on_step, on_text=on_text, clock=clock,
                   state=state)

    async def quiescent(self) -> tuple[Waiting, ...]:
        """Wait until nothing is queued and no effect runs; what the session then waits for."""
        await self.settled()
        return waiting_for(self.state)

    async def _close(self, reason: str) -> None:
        self._enqueue(CloseRequested())
        await self._wait(lambda: self.state.phase is SessionPhase.CLOSED and not self._busy)


def _check_restorable(state: SessionState, config: SessionConfig, trace: TextIO | None) -> None:
    """Refuse, naming why, a state a new driver cannot go on from."""
    if type(state) is not SessionState:
        raise TypeError(f"state must be a SessionState, got {type(state).__name__}")
    if state.config != config:
        raise ValueError("state.config differs from config: pass the saved state's own "
                         "configuration (SessionDriver.restored does)")
    if trace is not None:
        raise ValueError("a trace replays from a new session's header, so a restored session "
                         "writes none: pass trace=None (keep the trace of the session's start)")
    if state.phase is SessionPhase.CLOSED:
        raise ValueError("the session is closed: a closed session takes no more input, so "
                         "there is nothing to go on with (save the state before closing)")
    awaited = lost_on_restart(state)
    if awaited:
        names = ", ".join(f"{o.command.__name__} {o.answer_id!r}" for o in awaited)
        raise ValueError(f"the state awaits answers ({names}) whose effects ran in another "
                         "process: restore a state saved at rest (no turn running)")
