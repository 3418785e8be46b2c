"""The reducer contract: graphs as tables, diagrams that match, validation, misuse, purity."""

from __future__ import annotations

import re
import subprocess
import sys

import attrs
import pytest

import agentturn as at
from agentturn import lead, titles
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


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: at.PromptSubmitted(turn_id="t", message_id="m", text=3), "PromptSubmitted.text"),
        (lambda: at.PromptSubmitted(turn_id="", message_id="m", text="x"),
         "PromptSubmitted.turn_id"),
        (lambda: at.LeadSubmitted(chat_id="c", lead_id="l", text=b"bytes"), "LeadSubmitted.text"),
        (lambda: at.StreamCompleted(request_id="r", text="", finish_reason=None),
         "StreamCompleted.finish_reason"),
        (lambda: at.StreamCompleted(
            request_id="r", text="", finish_reason="stop",
            tool_calls=(at.ToolCall(call_id="a", name="x"), at.ToolCall(call_id="a", name="y"))),
         "StreamCompleted.tool_calls"),
        (lambda: at.StreamCompleted(request_id="r", text="", finish_reason="stop",
                                    tool_calls=["not a tuple"]), "StreamCompleted.tool_calls"),
        (lambda: at.ToolFinished(call_id="c", output="", cancelled="yes"),
         "ToolFinished.cancelled"),
        (lambda: at.PermissionDecided(call_id="c", decision="allow"), "PermissionDecided.decision"),
        (lambda: at.TurnConfig(max_requests=-1), "TurnConfig.max_requests"),
        (lambda: at.TurnConfig(max_requests=0), "TurnConfig.max_requests"),
        (lambda: at.TurnConfig(max_title_attempts=True), "TurnConfig.max_title_attempts"),
        (lambda: at.LeadSubmitted(chat_id="c", lead_id="l", text="x", attachment_ids=("a", "a")),
         "LeadSubmitted.attachment_ids"),
    ],
)
def test_bad_fields_are_refused_on_construction_naming_the_field(build, field: str) -> None:  # type: ignore[no-untyped-def]
    """An invalid event never exists: building one raises FieldError naming class and field."""
    with pytest.raises(at.FieldError, match=re.escape(field)):
        build()


@pytest.mark.parametrize("cls", [at.PromptSubmitted, at.StreamCompleted, at.Persist, at.TurnState,
                                 at.LeadQueue, at.TitleState, at.TurnOutcome])
def test_values_are_frozen_slotted_and_keyword_only(cls: type) -> None:
    """States, events and commands are frozen, slotted, keyword-only attrs classes."""
    assert attrs.has(cls)
    assert "__slots__" in cls.__dict__
    assert all(field.kw_only for field in attrs.fields(cls))
    assert cls.__setattr__ is not object.__setattr__


def test_a_step_unpacks_into_state_and_commands() -> None:
    """``state, commands = reduce(...)`` works, and commands is a tuple."""
    state, commands = at.reduce(at.TurnState.create("chat"), at.StopPressed())
    assert isinstance(state, at.TurnState) and commands == ()


def test_importing_agentturn_loads_no_test_or_protocol_library() -> None:
    """``import agentturn`` stays light: no hypothesis, pytest, pydantic or ACP SDK."""
    code = ("import sys, agentturn; heavy = [m for m in ('hypothesis', 'pytest', 'pydantic', "
            "'acp', 'transitions.extensions.diagrams') if m in sys.modules]; print(heavy)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_the_core_reads_no_clock_randomness_or_io() -> None:
    """No module of agentturn imports time, random, uuid, os, io, socket or logging."""
    import pathlib

    banned = re.compile(r"^\s*(import|from)\s+(time|random|uuid|os|io|socket|logging|datetime)\b",
                        re.M)
    package = pathlib.Path(at.__file__).parent
    core = [path for path in package.rglob("*.py")
            if "tools" not in path.relative_to(package).parts and path.name != "__main__.py"]
    assert len(core) > 10
    offenders = [path.name for path in core if banned.search(path.read_text())]
    assert offenders == []


def test_no_library_module_imports_the_tools() -> None:
    """``agentturn.tools`` is what a person runs: no module outside it imports it (the package's
    ``__main__`` is the command line's entry, not library code)."""
    import ast
    import pathlib

    package = pathlib.Path(at.__file__).parent
    library = [path for path in package.rglob("*.py")
               if "tools" not in path.relative_to(package).parts and path.name != "__main__.py"]
    assert len(library) > 30
    offenders = []
    for path in library:
        depth = len(path.relative_to(package).parts) - 1  # how many packages below agentturn
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    names = [node.module or ""]
                elif node.level == depth + 1:  # relative to agentturn itself
                    names = [f"agentturn.{node.module}" if node.module
                             else f"agentturn.{alias.name}" for alias in node.names]
                else:
                    names = []
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            offenders += [f"{path.name}: {name}" for name in names
                          if name == "agentturn.tools" or name.startswith("agentturn.tools.")]
    assert offenders == []


def test_parts_are_usable_alone() -> None:
    """The Lead and title parts run without the turn lifecycle."""
    queue = lead.open_admission(lead.LeadQueue.create("c"))
    queue, commands = lead.reduce(queue, at.LeadSubmitted(chat_id="c", lead_id="l", text="hi"))
    assert [type(c) for c in commands] == [at.LeadAccepted, at.SaveLead]
    title = titles.TitleState.create("c")
    title, commands = titles.request_if_due(title, titles.TitleTrigger.USABLE_RESPONSE)
    assert commands == (at.RequestTitle(chat_id="c", request_id="c/title-1"),)


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
