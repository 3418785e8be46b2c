"""The session: one reducer a daemon (or an interactive host) runs, composing every part.

``Session.create(config)`` (an alias of :meth:`SessionState.create`) and :func:`reduce` are all a
host needs: the session takes the turn family's events and its own (the daemon FIFO, the
mid-turn drain, Stop hooks, background work, automatic turns, timers, clients and lifecycle), and
returns the commands to carry out. See :mod:`agentturn.session.reducer` for the stop order.
Imported on use: ``import agentturn`` does not load it.
"""

from . import background, fifo, ring
from .background import AutomaticKind, BackgroundKind
from .reducer import combined_continuation, outstanding, reduce
from .ring import EntryKind, EventRing, RingEntry, Usage
from .state import (
    DEFAULT_STOP_HOOK_CAP,
    SESSION_GRAPH,
    Continuation,
    SessionConfig,
    SessionPhase,
    SessionState,
)
from .vocabulary import *  # noqa: F403
from .vocabulary import __all__ as _vocabulary_all

#: ``Session.create(config)`` reads as the design documents say it.
Session = SessionState

__all__ = [
    "DEFAULT_STOP_HOOK_CAP",
    "SESSION_GRAPH",
    "AutomaticKind",
    "BackgroundKind",
    "Continuation",
    "EntryKind",
    "EventRing",
    "RingEntry",
    "Session",
    "SessionConfig",
    "SessionPhase",
    "SessionState",
    "Usage",
    "background",
    "combined_continuation",
    "fifo",
    "outstanding",
    "reduce",
    "ring",
    *_vocabulary_all,
]
