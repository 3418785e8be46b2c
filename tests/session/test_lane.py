"""The direct lane (agentturn.session.lane) makes exactly the steps the message loop makes.

Walks of every explorer configuration, from every starting point: at each state reached, every
move the explorer's alphabet offers is reduced twice, with the lanes and with none, and the two
must give equal states and commands, or the same refusal. The walk then goes on by a seeded pick.
A second test checks ``passes_through`` against the translations it stands for.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from agentturn.errors import ProtocolError
from agentturn.session import SessionPhase, SessionState, lane, translate
from agentturn.session import reducer as session_reducer
from agentturn.session.tick import Tick
from agentturn.tools.explore import CONFIGS, STARTS, alphabet, start_state
from agentturn.turn import reduce_into as turn_into

STEPS = 300  # per configuration and start: over 10,000 moves compared in all


def _outcome(state: SessionState, event: object) -> tuple[str, Any, Any]:
    try:
        step = session_reducer.reduce(state, event)
    except ProtocolError as error:
        return ("refused", type(error), str(error))
    return ("accepted", step.state, step.commands)


def _walks() -> list[tuple[str, str, SessionState, list[Any]]]:
    """Every (config, start, state, moves) a seeded walk visits."""
    rng = random.Random(20261202)
    visited = []
    for config in CONFIGS:
        for start in STARTS:
            first, _ = start_state(config, start)
            state = first
            for _ in range(STEPS):
                moves = alphabet(state)
                visited.append((config, start, state, moves))
                move = rng.choices(moves, weights=[m.weight for m in moves])[0]
                try:
                    state = session_reducer.reduce(state, move.event).state
                except ProtocolError:
                    continue
                if state.phase is SessionPhase.CLOSED:
                    state = first  # a new episode from the same start
    return visited


WALKS = _walks()


def test_the_lanes_make_the_steps_the_message_loop_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    compared = in_turn = 0
    for config, start, state, moves in WALKS:
        for move in moves:
            with_lanes = _outcome(state, move.event)
            monkeypatch.setattr(session_reducer, "LANE_ROUTES", {})
            without = _outcome(state, move.event)
            monkeypatch.undo()
            assert with_lanes == without, (config, start, state, move)
            compared += 1
            in_turn += state.phase is SessionPhase.TURN
    # The walks reach the lanes often, in every configuration.
    assert compared > 10_000 and in_turn > compared // 3


def test_every_lane_is_taken_on_the_walks(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: set[str] = set()

    def spy(name: str, function: Any) -> Any:
        def lane_step(state: SessionState, event: object) -> Any:
            step = function(state, event)
            if step is not None:
                taken.add(name)
            return step
        return lane_step

    assert set(session_reducer.LANE_ROUTES.values()) == set(lane.LANES.values())
    monkeypatch.setattr(session_reducer, "LANE_ROUTES", {
        route: spy(function.__name__, function)
        for route, function in session_reducer.LANE_ROUTES.items()})
    for _, _, state, moves in WALKS:
        for move in moves:
            _outcome(state, move.event)
    assert taken == {"_turn_alone", "_tool_finished", "_permission", "_stream_opened",
                     "_stream_completed"}


def test_passes_through_says_what_the_translations_do() -> None:
    """A turn command ``passes_through`` calls for-the-host is, translated, only handed on."""
    checked = {True: 0, False: 0}
    for _, _, state, moves in WALKS:
        if state.phase is not SessionPhase.TURN:
            continue
        for move in moves:
            commands: list[Any] = []
            try:
                turn = turn_into(state.turn, move.event, commands)
            except ProtocolError:
                continue
            moved = state if turn is state.turn else translate.with_turn(state, turn)
            for command in commands:
                if type(command) not in translate.SESSION_ACTS_ON:
                    continue
                passes = translate.passes_through(state, command)
                checked[passes] += 1
                tick = Tick(moved)
                translate._TURN_COMMANDS[type(command)](tick, command)
                only_handed_on = (tick.out == [command] and not tick.inbox and tick.s is moved
                                  and tick.ended is None)
                if passes:
                    assert only_handed_on, (state, command)
    assert checked[True] > 100 and checked[False] > 10


def test_the_explorers_coverage_sees_the_steps_the_lanes_make(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The coverage report watches each part where the session calls it: the lanes' calls
    count as the message loop's would (the same edges reached with the lanes and without)."""
    from agentturn.tools.explore import explore

    with_lanes = explore(3, "daemon", "armed").coverage
    monkeypatch.setattr(session_reducer, "LANE_ROUTES", {})
    without = explore(3, "daemon", "armed").coverage
    assert with_lanes is not None and with_lanes == without
