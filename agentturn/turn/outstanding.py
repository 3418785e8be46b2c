"""What a turn still waits on: every awaiting command the host has not answered yet."""

from __future__ import annotations

import attrs

from .. import lead, titles
from .._base import AwaitingCommand, Value
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


def outstanding(state: TurnState) -> tuple[Outstanding, ...]:
    """Every awaiting command this chat is still waiting on, oldest kind first.

    A host can show it, time it out, or check after a restart that it answered everything.
    """
    found: list[Outstanding] = []
    if state.persisting:
        found.append(Outstanding(command=Persist, answer_id=state.persist_key))
    if state.phase is P.AWAITING_STREAM or state.phase is P.STREAMING:
        found.append(Outstanding(command=RequestModelStream, answer_id=state.request_id))
    if state.phase is P.AWAITING_PERMISSION:
        found.append(Outstanding(command=AskPermission, answer_id=current_call_id(state)))
    if state.tool_in_flight:
        found.append(Outstanding(command=ExecuteTool, answer_id=current_call_id(state)))
    saving = lead.saving_id(state.lead)
    if saving is not None:
        found.append(Outstanding(command=SaveLead, answer_id=saving))
    if titles.naming_in_flight(state.title):
        found.append(Outstanding(command=RequestTitle, answer_id=state.title.request_id))
    if state.phase is P.AWAITING_STOP_DECISION:
        found.append(Outstanding(command=DecideNaturalStop, answer_id=state.request_id))
    return tuple(found)
