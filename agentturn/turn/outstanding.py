"""What a turn still waits on: every awaiting command the host has not answered yet."""

from __future__ import annotations

import attrs

from .. import lead, titles
from .._base import AwaitingCommand, Value
from .._trusted import builder
from ..commands import (
    AskPermission,
    DecideNaturalStop,
    ExecuteTool,
    Persist,
    RequestModelStream,
    RequestTitle,
    SaveLead,
)
from .advance import current_call_id
from .state import TurnPhase, TurnState

__all__ = ["Outstanding", "outstanding"]

P = TurnPhase


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Outstanding(Value):
    """One awaiting command the host has not answered yet: its class and the id to echo."""

    command: type[AwaitingCommand]
    answer_id: str


#: The trusted constructor (see ``builder``): the ids come from the state, and a checker asks
#: about every state it reaches.
_new = builder(Outstanding)


def outstanding(state: TurnState) -> tuple[Outstanding, ...]:
    """Every awaiting command this chat is still waiting on, oldest kind first.

    A host can show it, time it out, or check after a restart that it answered everything.
    """
    found: list[Outstanding] = []
    if state.persisting:
        found.append(_new(command=Persist, answer_id=state.persist_key))
    if state.phase is P.AWAITING_STREAM or state.phase is P.STREAMING:
        found.append(_new(command=RequestModelStream, answer_id=state.request_id))
    if state.phase is P.AWAITING_PERMISSION:
        found.append(_new(command=AskPermission, answer_id=current_call_id(state)))
    if state.tool_in_flight:
        found.append(_new(command=ExecuteTool, answer_id=current_call_id(state)))
    saving = lead.saving_id(state.lead)
    if saving is not None:
        found.append(_new(command=SaveLead, answer_id=saving))
    if titles.naming_in_flight(state.title):
        found.append(_new(command=RequestTitle, answer_id=state.title.request_id))
    if state.phase is P.AWAITING_STOP_DECISION:
        found.append(_new(command=DecideNaturalStop, answer_id=state.request_id))
    return tuple(found)
