"""The session: one reducer a daemon (or an interactive host) runs, composing every part.

``Session.create(config)`` (an alias of :meth:`SessionState.create`) and :func:`reduce` are all a
host needs: the session takes the turn family's events and its own (the daemon FIFO, the
mid-turn drain, Stop hooks, background work, automatic turns, timers, clients and lifecycle), and
returns the commands to carry out. See :mod:`agentturn.session.reducer` for how a step is
composed (messages between parts, then one decision about what runs next) and the order rules,
and :func:`waiting_for` for what a quiescent session waits on.
Imported on use: ``import agentturn`` does not load it.
"""

from ..guard.texts import combined_continuation
from . import background, fifo, ring
from .background import AutomaticKind, BackgroundKind
from .reducer import lost_on_restart, outstanding, reduce, timers_to_rearm
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
from .waiting import Held, Waiting, WaitKind, held, waiting_for

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
    "Held",
    "RingEntry",
    "Session",
    "SessionConfig",
    "SessionPhase",
    "SessionState",
    "Usage",
    "WaitKind",
    "Waiting",
    "background",
    "combined_continuation",
    "fifo",
    "held",
    "lost_on_restart",
    "outstanding",
    "reduce",
    "ring",
    "timers_to_rearm",
    "waiting_for",
    *_vocabulary_all,
]
