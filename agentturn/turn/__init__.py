"""The turn lifecycle of one chat: model requests, tools, barriers, Lead and naming in one reducer.

* :mod:`~agentturn.turn.state`: the state, its configuration and the phase graph
  (:data:`TURN_GRAPH`);
* :mod:`~agentturn.turn.reducer`: the reducer and its handlers, one per event (the theory of
  operation is there);
* :mod:`~agentturn.turn.advance`: what runs next at a boundary, and how a turn ends;
* :mod:`~agentturn.turn.endings`: Stop, hard stops, amendments, a withdrawn retry, a closed chat;
* :mod:`~agentturn.turn.parts`: the Lead queue's and the title's events inside a turn;
* :mod:`~agentturn.turn.outstanding`: what the turn still waits on;
* :mod:`~agentturn.turn.review`: a host's own rules about calls, applied as data
  (:func:`review_calls`).

Everything here is also exported by :mod:`agentturn` itself.
"""

from .outstanding import Outstanding, outstanding
from .reducer import reduce, reduce_into
from .review import review_calls
from .state import TURN_GRAPH, LeadPermissionPolicy, TurnConfig, TurnPhase, TurnState

__all__ = [
    "TURN_GRAPH",
    "LeadPermissionPolicy",
    "Outstanding",
    "TurnConfig",
    "TurnPhase",
    "TurnState",
    "outstanding",
    "reduce",
    "reduce_into",
    "review_calls",
]
