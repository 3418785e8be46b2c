"""The session driver: :func:`agentturn.session.reduce` run by the driver.

Theory of operation
-------------------
A :class:`SessionDriver` starts from ``Session.create(config)``. Beyond the turn's effects it
carries out the session's own awaiting commands (``RunStopHooks``, ``DrainMidTurnQueue``,
``StartTimer`` on the driver's clock) and takes the session's input: queued prompts, clients
attaching and detaching, background work, automatic turns, lifecycle changes.

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
    outstanding,
    reduce,
    waiting_for,
)
from ..session.vocabulary import CloseRequested
from .clock import Clock
from .driver import Driver, NoticeSink
from .effects import Effects
from .tracing import TraceWriter

__all__ = ["SessionDriver"]


class SessionDriver(Driver[SessionState]):
    """Runs one session. Use as ``async with SessionDriver(...) as driver:``."""

    def __init__(self, config: SessionConfig, effects: Effects, *,
                 max_output_tokens: int | None, wire: type[EngineStream] = ChatCompletionsStream,
                 on_notice: NoticeSink | None = None, clock: Clock | None = None,
                 trace: TextIO | None = None) -> None:
        super().__init__(state=SessionState.create(config), reduce=reduce,
                         outstanding=outstanding, effects=effects,
                         max_output_tokens=max_output_tokens, wire=wire, on_notice=on_notice,
                         clock=clock, trace=TraceWriter(trace, "session", config))

    async def quiescent(self) -> tuple[Waiting, ...]:
        """Wait until nothing is queued and no effect runs; what the session then waits for."""
        await self.settled()
        return waiting_for(self.state)

    async def _close(self, reason: str) -> None:
        self._enqueue(CloseRequested())
        await self._wait(lambda: self.state.phase is SessionPhase.CLOSED and not self._busy)
