"""The Lead queue's and the title's events inside a turn: each goes to its part, then the turn.

Theory of operation
-------------------
Lead (:mod:`agentturn.lead`) and titles (:mod:`agentturn.titles`) are parts of their own; the
turn holds their states and hands each of their events to them. What the part decides comes
first; the turn then reacts only where that changes what it waits for: a Lead save that
completes a boundary (:func:`~agentturn.turn.advance.advance`), one that ends a turn in
``ENDING`` (:func:`~agentturn.turn.advance.finalize`), a saved Lead that supersedes a pending
permission dialog (the ``SUPERSEDE`` policy), and a title that releases the tools and requests
waiting for it (TT-3).
"""

from __future__ import annotations

from .. import lead, titles
from .._bounded import remember
from ..commands import DismissPermission
from ..events import (
    AutoTitlePreferenceChanged,
    LeadSaved,
    LeadSaveFailed,
    LeadSubmitted,
    ManualRename,
    TitleFailed,
    TitleGenerated,
)
from ..records import ToolResultRecord, ToolResultStatus
from .advance import (
    LEAD_SKIP,
    SUPERSEDED,
    Commands,
    advance,
    current_call_id,
    finalize,
    persist,
    replace,
    results_for_rest,
)
from .state import LATE_MEMORY, LeadPermissionPolicy, TurnPhase, TurnState

P = TurnPhase


def on_lead(state: TurnState, event: LeadSubmitted | LeadSaved | LeadSaveFailed,
            out: Commands) -> TurnState:
    step = lead.reduce(state.lead, event)
    out.extend(step.commands)
    if step.state is state.lead:
        return state  # a refusal or a late answer: nothing changed
    state = replace(state, lead=step.state)
    if isinstance(event, LeadSubmitted):
        return state
    phase = state.phase
    if phase is P.AWAITING_LEAD_SAVES:
        if lead.has_unsaved(state.lead):
            return state
        if not state.lead.entries and state.stop_decided:
            # The stop was decided for instructions that all failed to save: nothing of the
            # user's joins the turn after all, so the stop is decided again (SO-1 ... SO-7).
            state = replace(state, stop_decided=False)
        return advance(state, out)
    if phase is P.ENDING:
        return finalize(state, out)
    if (phase is P.AWAITING_PERMISSION and isinstance(event, LeadSaved)
            and state.config.lead_permission_policy is LeadPermissionPolicy.SUPERSEDE):
        call_id = current_call_id(state)
        out.append(DismissPermission(call_id=call_id, recorded_as=ToolResultStatus.SUPERSEDED))
        superseded = ToolResultRecord(call_id=call_id, name=state.calls[state.next_call].name,
                                      status=ToolResultStatus.SUPERSEDED, reason=SUPERSEDED)
        state = replace(state, next_call=state.next_call + 1)
        rest = results_for_rest(state, ToolResultStatus.SKIPPED, LEAD_SKIP)
        return persist(state, (superseded, *rest), P.SAVING_RESULTS, out,
                       next_call=len(state.calls),
                       dismissed_calls=remember(state.dismissed_calls, call_id,
                                                limit=LATE_MEMORY))
    return state


def on_title(state: TurnState, event: TitleGenerated | TitleFailed | ManualRename
             | AutoTitlePreferenceChanged, out: Commands) -> TurnState:
    step = titles.reduce(state.title, event)
    out.extend(step.commands)
    if step.state is state.title:
        return state  # a late answer: nothing changed
    state = replace(state, title=step.state)
    if state.phase is P.AWAITING_TITLE and not titles.naming_in_flight(state.title):
        return advance(state, out)
    return state
