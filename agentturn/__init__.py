"""agentturn: the hard decisions around an AI-agent model turn, as side-effect-free reducers.

Feed typed events in, get a new immutable state and a tuple of commands out, and carry out the
commands with your own I/O::

    state = agentturn.TurnState.create("chat-1")
    for event in host_events():
        state, commands = agentturn.reduce(state, event)
        for command in commands:
            adapter.carry_out(command)  # its completion comes back later as an event

Parts, each usable alone: the turn lifecycle (:mod:`agentturn.turn`), Lead
(:mod:`agentturn.lead`), automatic titles (:mod:`agentturn.titles`) and the daemon todo stop
guard (:mod:`agentturn.guard`, its own namespace: ``agentturn.guard.reduce``). ``import agentturn``
loads only attrs: the guard and the session (:mod:`agentturn.session`) are imported when first
used (``agentturn.guard.reduce`` works after a plain ``import agentturn``), and ``transitions``
only to validate or draw a phase graph (:meth:`PhaseGraph.validate`, :meth:`PhaseGraph.mermaid`).
"""

from typing import TYPE_CHECKING, Any

from . import lead, titles
from ._base import AwaitingCommand, Command, Event, FieldError, Notice, State, Step
from .commands import *  # noqa: F403
from .commands import __all__ as _commands_all
from .errors import ProtocolError, UnexpectedEvent, UnknownId, WrongState
from .events import *  # noqa: F403
from .events import __all__ as _events_all
from .lead import LEAD_GRAPH, MAX_LEAD_BYTES, MAX_PENDING, LeadQueue
from .phases import PhaseGraph
from .records import *  # noqa: F403
from .records import __all__ as _records_all
from .titles import TITLE_GRAPH, TitlePhase, TitleState
from .turn import (
    TURN_GRAPH,
    LeadPermissionPolicy,
    Outstanding,
    TurnConfig,
    TurnPhase,
    TurnState,
    outstanding,
    reduce,
    review_calls,
)

if TYPE_CHECKING:
    from . import guard as guard
    from . import session as session

__version__ = "0.1.0"

#: The parts imported on first use, so ``import agentturn`` stays light.
_LAZY = ("guard", "session")


def __getattr__(name: str) -> Any:
    """Import :mod:`agentturn.guard` or :mod:`agentturn.session` on first use."""
    if name in _LAZY:
        from importlib import import_module

        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "LEAD_GRAPH",
    "MAX_LEAD_BYTES",
    "MAX_PENDING",
    "TITLE_GRAPH",
    "TURN_GRAPH",
    "AwaitingCommand",
    "Command",
    "Event",
    "FieldError",
    "LeadPermissionPolicy",
    "LeadQueue",
    "Notice",
    "Outstanding",
    "PhaseGraph",
    "ProtocolError",
    "State",
    "Step",
    "TitlePhase",
    "TitleState",
    "TurnConfig",
    "TurnPhase",
    "TurnState",
    "UnexpectedEvent",
    "UnknownId",
    "WrongState",
    "__version__",
    "guard",
    "lead",
    "outstanding",
    "reduce",
    "review_calls",
    "titles",
    *_commands_all,
    *_events_all,
    *_records_all,
]
