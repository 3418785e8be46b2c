"""agentturn's I/O layer: a driver that carries out the reducers' commands with the host's
effects (the ``aio`` extra: ``pip install 'agentturn[aio]'``).

Theory of operation
-------------------
The reducers decide; the host's effects act; the driver sits between them and does what every
host otherwise writes by hand: the event queue, a task per awaited answer, cancelling the right
task, timers, a raising effect turned into its failure event, knowing when a turn is over or a
session quiescent, writing the trace, closing with nothing lost and no task left. It decides
nothing: every "what next" is still a reducer's, so its trace replays. It is built on
:mod:`anyio` (task groups on Python 3.10, asyncio or trio); ``import agentturn`` never loads it.

* :mod:`~agentturn.aio.effects`: the effects as protocols, and the values they return;
* :mod:`~agentturn.aio.answers`: an effect's result (or raise) to the answering event;
* :mod:`~agentturn.aio.driver`: the loop, cancellation, done, closing;
* :mod:`~agentturn.aio.turn`, :mod:`~agentturn.aio.session`: the two drivers;
* :mod:`~agentturn.aio.clock`: the timers' clock, injectable;
* :mod:`~agentturn.aio.tracing`: the trace, written as it runs.

A host with its own event loop writes the plain loop instead (``docs/howto/driver.md``).
"""

from .clock import Clock, ManualClock, SystemClock
from .driver import ANSWERS, Closed, Driver, DriverClosed, NoticeSink, StepSink
from .effects import (
    OPENED,
    CallReview,
    CompactionError,
    DrainEffect,
    DrainReply,
    Effects,
    HookVerdict,
    ModelEffect,
    NaturalStopEffect,
    PermissionEffect,
    PersistEffect,
    ReviewEffect,
    SaveLeadEffect,
    StopDecision,
    StopHooksEffect,
    StopSignal,
    StreamError,
    TextSink,
    TitleEffect,
    TokenLimitError,
    ToolEffect,
    ToolResult,
)
from .session import SessionDriver
from .tracing import TraceWriter
from .turn import TurnDriver

__all__ = [
    "ANSWERS",
    "OPENED",
    "CallReview",
    "Clock",
    "Closed",
    "CompactionError",
    "DrainEffect",
    "DrainReply",
    "Driver",
    "DriverClosed",
    "Effects",
    "HookVerdict",
    "ManualClock",
    "ModelEffect",
    "NaturalStopEffect",
    "NoticeSink",
    "PermissionEffect",
    "PersistEffect",
    "ReviewEffect",
    "SaveLeadEffect",
    "SessionDriver",
    "StepSink",
    "StopDecision",
    "StopHooksEffect",
    "StopSignal",
    "StreamError",
    "SystemClock",
    "TextSink",
    "TitleEffect",
    "TokenLimitError",
    "ToolEffect",
    "ToolResult",
    "TraceWriter",
    "TurnDriver",
]
