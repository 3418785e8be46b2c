"""A restored state must agree with itself: every state the session reaches does, and saves and
restores through the strict reader exactly (but for the guard, which is never saved)."""

from __future__ import annotations

import math

import attrs
import pytest

from agentturn import guard as g
from agentturn import session as se
from agentturn import trace
from agentturn.session.consistency import inconsistencies
from agentturn.tools import explore


@pytest.mark.parametrize("start", list(explore.STARTS))
def test_every_reachable_state_agrees_with_itself_and_round_trips(start: str) -> None:
    states = explore.reachable(2, "daemon", start)
    assert len(states) > 10
    for state in states:
        assert inconsistencies(state) == (), state
        back = trace.load_state(trace.dump_state(state))
        assert back == attrs.evolve(state, guard=g.GuardState.create(state.config.guard))


def test_an_unbounded_retry_window_saves_and_restores() -> None:
    """``math.inf`` is written as ``"Infinity"`` (JSON has no such number) and read back."""
    state = se.Session.create(se.SessionConfig(chat_id="c", retry_window=math.inf))
    text = trace.dump_state(state)
    assert '"retry_window": "Infinity"' in text
    assert trace.load_state(text).config.retry_window == math.inf
