"""The reducer contract every part keeps: graphs as tables, diagrams that match, misuse refused
with a ProtocolError, and handlers typed for the events they are registered for.
"""

from __future__ import annotations

import re

import pytest

import agentturn as at
from agentturn.session import SESSION_GRAPH

GRAPHS = [at.TURN_GRAPH, at.LEAD_GRAPH, at.TITLE_GRAPH, at.guard.GUARD_GRAPH, SESSION_GRAPH]


def mermaid_edges(text: str) -> set[tuple[str, str, str]]:
    edges = set()
    for line in text.splitlines():
        match = re.fullmatch(r"\s*(\w+) --> (\w+): (.+)", line)
        if match:
            source, dest, label = match.groups()
            for trigger in label.split("|"):
                edges.add((source, trigger.strip(), dest))
    return edges


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.part)
def test_the_diagram_draws_exactly_the_table(graph: at.PhaseGraph) -> None:  # type: ignore[type-arg]
    """The Mermaid drawing, made by transitions from the declaration, has the table's edges."""
    text = graph.mermaid()
    assert "stateDiagram-v2" in text
    assert mermaid_edges(text) == {(s, e, d) for s, e, d in graph.edges()}


@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.part)
def test_the_table_is_read_only(graph: at.PhaseGraph) -> None:  # type: ignore[type-arg]
    """Reducers use a frozen table: it cannot be changed at run time."""
    with pytest.raises(TypeError):
        graph.table[(graph.initial, "X")] = frozenset()  # type: ignore[index]


def test_every_turn_phase_is_reachable_in_the_table() -> None:
    """Every phase can be entered from the idle phase by following declared edges."""
    reached = {at.TurnPhase.IDLE}
    frontier = [at.TurnPhase.IDLE]
    while frontier:
        phase = frontier.pop()
        for (source, _), dests in at.TURN_GRAPH.table.items():
            if source is phase:
                for dest in dests - reached:
                    reached.add(dest)
                    frontier.append(dest)
    assert reached == set(at.TurnPhase)


def test_an_event_outside_the_table_is_refused_with_phase_event_and_expectation() -> None:
    """A ToolFinished while idle raises UnexpectedEvent naming all three, and nothing changes."""
    state = at.TurnState.create("chat")
    event = at.ToolFinished(call_id="c1", output="x")
    with pytest.raises(at.UnexpectedEvent) as caught:
        at.reduce(state, event)
    error = caught.value
    assert error.phase == "IDLE" and error.event is event
    assert "PromptSubmitted" in error.expected
    assert "can't handle ToolFinished in phase IDLE" in str(error)
    assert state == at.TurnState.create("chat")


def test_a_non_event_is_a_protocol_error_too() -> None:
    """Feeding something that is not an agentturn event raises ProtocolError, not TypeError."""
    with pytest.raises(at.ProtocolError):
        at.reduce(at.TurnState.create("chat"), "PromptSubmitted")


def test_a_second_stream_for_one_request_is_refused() -> None:
    """StreamOpened twice for one request is host misuse."""
    state = at.TurnState.create("chat")
    for event in (at.PromptSubmitted(turn_id="t", message_id="m", text="x"),
                  at.Persisted(key="t/p1"), at.StreamOpened(request_id="t/r1")):
        state = at.reduce(state, event).state
    with pytest.raises(at.UnexpectedEvent):
        at.reduce(state, at.StreamOpened(request_id="t/r1"))


def test_an_event_for_another_request_is_refused() -> None:
    """A StreamOpened naming an unknown request raises UnknownId."""
    state = at.TurnState.create("chat")
    for event in (at.PromptSubmitted(turn_id="t", message_id="m", text="x"),
                  at.Persisted(key="t/p1")):
        state = at.reduce(state, event).state
    with pytest.raises(at.UnknownId, match="t/r1"):
        at.reduce(state, at.StreamOpened(request_id="t/r9"))


def test_a_step_unpacks_into_state_and_commands() -> None:
    """``state, commands = reduce(...)`` works, and commands is a tuple."""
    state, commands = at.reduce(at.TurnState.create("chat"), at.StopPressed())
    assert isinstance(state, at.TurnState) and commands == ()


def _handled_classes(annotation: object) -> set[type]:
    """The classes an event parameter's annotation names (a class or a union of classes)."""
    import types
    import typing

    if isinstance(annotation, type):
        return {annotation}
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return {arg for arg in typing.get_args(annotation) if isinstance(arg, type)}
    return set()


def test_every_handler_is_typed_for_the_events_it_is_registered_for() -> None:
    """The handler tables hold handlers of differently typed events, so they are typed with
    ``Any`` for the event; this checks instead that each handler's own annotation names every
    event class it is registered for (a handler for the wrong event would otherwise pass mypy).
    A handler that takes ``object`` passes any event on unread."""
    import typing

    # the reducers' own handler tables (``_HANDLERS``): the mechanism itself is what this checks
    from agentturn.guard import reducer as guard_reducer
    from agentturn.registry import events_of
    from agentturn.session import reducer as session_reducer
    from agentturn.turn import reducer as turn_reducer

    session_events = events_of("turn", "guard", "session")
    tables: list[tuple[str, dict[type, object], str]] = [
        ("turn", dict(turn_reducer._HANDLERS), "event"),
        ("guard", dict(guard_reducer._HANDLERS), "event"),
        ("session", {session_events[name]: handler
                     for name, handler in session_reducer._HANDLERS.items()}, "event"),
    ]
    wrong = []
    for part, table, parameter in tables:
        assert len(table) > 20
        for cls, handler in table.items():
            hints = typing.get_type_hints(handler)
            if parameter not in hints:
                wrong.append(f"{part}: {handler.__qualname__} has no {parameter!r} parameter")
            elif hints[parameter] not in (typing.Any, object) and cls not in _handled_classes(
                    hints[parameter]):  # ``object``: a pass-through, for any event
                wrong.append(f"{part}: {handler.__qualname__} is registered for "
                             f"{cls.__name__} but takes {hints[parameter]}")
    assert wrong == []
