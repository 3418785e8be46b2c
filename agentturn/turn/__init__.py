"""The turn lifecycle of one chat: model requests, tools, barriers, Lead and naming in one reducer.

The part's state and configuration are in :mod:`agentturn.turn.state` (with the phase graph,
:data:`TURN_GRAPH`), its reducer in :mod:`agentturn.turn.reducer`. Everything here is also
exported by :mod:`agentturn` itself.
"""

from .reducer import Outstanding, outstanding, reduce, reduce_into
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
]
