"""Every (phase, event) pair is a declared transition or a ProtocolError; never anything else."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
from driver import Driver, call

import agentturn as at
from agentturn._trusted import replacer  # the mechanism itself is what this file tests


def in_phase(phase: at.TurnPhase) -> at.TurnState:
    """A real state in ``phase``, reached by a real event sequence (no private fields poked)."""
    driver = Driver(at.TurnConfig(hold_natural_stops=True))
    scripts: dict[at.TurnPhase, Callable[[], object]] = {
        at.TurnPhase.IDLE: lambda: None,
        at.TurnPhase.SAVING_PROMPT: lambda: driver.send(
            at.PromptSubmitted(turn_id="t1", message_id="m", text="go")),
        at.TurnPhase.AWAITING_STREAM: lambda: (driver.send(
            at.PromptSubmitted(turn_id="t1", message_id="m", text="go")), driver.ack()),
        at.TurnPhase.STREAMING: driver.start,
        at.TurnPhase.SAVING_RESPONSE: lambda: (driver.start(), driver.respond(
            finish_reason="tool_calls", calls=[call("a")])),
        at.TurnPhase.AWAITING_TITLE: lambda: (driver.start(), driver.respond(
            text="Reading", finish_reason="tool_calls", calls=[call("a")]), driver.ack()),
        at.TurnPhase.RUNNING_TOOL: lambda: (driver.start(), driver.respond(
            finish_reason="tool_calls", calls=[call("a")]), driver.ack()),
        at.TurnPhase.AWAITING_PERMISSION: lambda: (driver.start(), driver.respond(
            finish_reason="tool_calls", calls=[call("a", permission=True)]), driver.ack()),
        at.TurnPhase.SAVING_RESULTS: lambda: (driver.start(), driver.respond(
            finish_reason="tool_calls", calls=[call("a")]), driver.ack(),
            driver.send(at.ToolFinished(call_id="a", output="x"))),
        at.TurnPhase.AWAITING_LEAD_SAVES: lambda: (driver.start(), driver.respond(
            finish_reason="tool_calls", calls=[call("a")]), driver.ack(),
            driver.send(at.LeadSubmitted(chat_id="chat", lead_id="l", text="hey")),
            driver.send(at.ToolFinished(call_id="a", output="x")), driver.ack()),
        at.TurnPhase.AWAITING_STOP_DECISION: lambda: (driver.start(), driver.respond(
            text="Done."), driver.named("T"), driver.ack()),
        at.TurnPhase.ENDING: lambda: (driver.start(), driver.respond(
            finish_reason="tool_calls", calls=[call("a")]), driver.ack(),
            driver.send(at.StopPressed())),
    }
    scripts[phase]()
    assert driver.state.phase is phase
    return driver.state


SAMPLES: list[at.Event] = [
    at.PromptSubmitted(turn_id="t9", message_id="m9", text="x"),
    at.ContinueTurn(turn_id="t1"),
    at.StopPressed(),
    at.ClientDisconnected(),
    at.LeadSubmitted(chat_id="chat", lead_id="l9", text="x"),
    at.LeadSaved(lead_id="l"),
    at.LeadSaveFailed(lead_id="l", reason="x"),
    at.ManualRename(title="x"),
    at.AutoTitlePreferenceChanged(enabled=False),
    at.PermissionDecided(call_id="a", decision=at.PermissionDecision.DENY),
    at.StreamOpened(request_id="t1/r1"),
    at.StreamCompleted(request_id="t1/r1", text="x", finish_reason="stop"),
    at.StreamFailed(request_id="t1/r1", error="x"),
    at.CompactionFailed(request_id="t1/r1", reason="x"),
    at.TokenLimitRejected(request_id="t1/r1", reason="x"),
    at.ToolFinished(call_id="a", output="x"),
    at.Persisted(key="t1/p1"),
    at.PersistFailed(key="t1/p2", reason="x"),
    at.HardStopped(reason="loop protection"),
    at.NaturalStopDecided(request_id="t1/r1"),
    at.NaturalStopDecided(request_id="t1/r1", message_id="c1", text="Continue."),
    at.TitleGenerated(request_id="chat/title-1", title="x"),
    at.TitleFailed(request_id="chat/title-1", reason="x"),
]


@pytest.mark.parametrize("phase", list(at.TurnPhase), ids=lambda p: p.name)
@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_every_phase_event_pair_is_declared_or_a_protocol_error(
    phase: at.TurnPhase, event: at.Event
) -> None:
    """A pair outside the table raises UnexpectedEvent or, for a late answer, is absorbed with
    one StaleAnswerIgnored and no change; inside, the step either raises a ProtocolError (the ids
    do not match), absorbs a late answer, or lands in a declared destination."""
    state = in_phase(phase)
    declared = at.TURN_GRAPH.table.get((phase, type(event).__name__))
    try:
        new_state, commands = at.reduce(state, event)
    except at.ProtocolError as error:
        if declared is None:
            assert isinstance(error, at.UnexpectedEvent)
        return
    if declared is None:
        assert new_state is state
        assert [type(c) for c in commands] == [at.StaleAnswerIgnored]
        return
    assert new_state.phase in declared


def test_the_fast_replace_agrees_with_attrs_evolve_for_every_field() -> None:
    """``replacer(TurnState)`` gives what ``attrs.evolve`` gives, field by field."""
    replace = replacer(at.TurnState)
    state = in_phase(at.TurnPhase.RUNNING_TOOL)
    other = in_phase(at.TurnPhase.IDLE)
    for field in attrs.fields(at.TurnState):
        value = getattr(other, field.name)
        assert replace(state, **{field.name: value}) == attrs.evolve(state, **{field.name: value})
    assert replace(state) == state


def test_a_copy_specialised_to_some_fields_agrees_with_attrs_evolve() -> None:
    """``replacer(cls, *fields)`` takes exactly those fields, positionally, and copies the rest;
    an unknown or repeated field is refused when the function is built."""
    from agentturn.session import Session, SessionConfig, SessionState

    session = Session.create(SessionConfig(chat_id="chat"))
    turn = in_phase(at.TurnPhase.RUNNING_TOOL)
    with_turn = replacer(SessionState, "turn")
    with_two = replacer(SessionState, "stops", "drain_id")
    assert with_turn(session, turn) == attrs.evolve(session, turn=turn) != session
    assert type(with_turn(session, turn)) is SessionState
    assert with_two(session, 3, "t1/drain-1") == attrs.evolve(session, stops=3,
                                                               drain_id="t1/drain-1")
    with pytest.raises(TypeError, match=r"^SessionState has no field 'turns'$"):
        replacer(SessionState, "turns")
    with pytest.raises(TypeError, match=r"^SessionState: a field is named twice in \('turn', "):
        replacer(SessionState, "turn", "turn")


def test_every_general_copy_names_its_fields() -> None:
    """The general copy takes its fields positionally-or-by-keyword (CPython fills positional
    defaults faster), so a call passing a field by position would silently set the class's
    first field: every call in the package passes only the state by position."""
    import ast
    from pathlib import Path

    import agentturn

    root = Path(agentturn.__file__).parent
    calls: list[tuple[str, int]] = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        general = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                   and isinstance(node.value, ast.Call) and len(node.value.args) == 1
                   and getattr(node.value.func, "id", "") == "replacer"
                   for target in node.targets if isinstance(target, ast.Name)}
        calls += [(f"{path.name}:{node.lineno}", len(node.args)) for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and getattr(node.func, "id", "") in general]
    assert len(calls) > 50  # the scan sees the reducers' copies (60 today)
    assert [where for where, positional in calls if positional != 1] == []


def test_every_specialised_copy_takes_exactly_its_fields_by_position() -> None:
    """A copy specialised to some fields (``replacer(cls, "a", "b")``) takes the state and those
    fields by position, in the order it names them: every call in the package passes exactly
    that many values and no keyword."""
    import ast
    from pathlib import Path

    import agentturn

    trees = [(path, ast.parse(path.read_text(encoding="utf-8")))
             for path in sorted(Path(agentturn.__file__).parent.rglob("*.py"))]
    fields: dict[str, int] = {}
    for _, tree in trees:
        fields.update({target.id: len(node.value.args) - 1 for node in ast.walk(tree)
                       if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                       and len(node.value.args) > 1
                       and getattr(node.value.func, "id", "") == "replacer"
                       for target in node.targets if isinstance(target, ast.Name)})
    calls = [(f"{path.name}:{node.lineno}", node) for path, tree in trees
             for node in ast.walk(tree)
             if isinstance(node, ast.Call) and getattr(node.func, "id", "") in fields]
    assert len(fields) >= 6 and len(calls) >= 10  # the scan sees the copies (8 and 11 today)
    assert [where for where, node in calls
            if node.keywords or len(node.args) != 1 + fields[getattr(node.func, "id", "")]] == []


def test_a_trusted_constructor_returns_the_frozen_class_itself_on_both_paths() -> None:
    """Wide classes are filled as a draft and re-labelled, narrow ones slot by slot: either way
    the value is of the class itself (never the draft), equal to what attrs builds, and frozen."""
    from agentturn._trusted import DRAFT_FROM_FIELDS, builder  # the mechanism itself
    from agentturn.session import Session, SessionConfig, SessionState

    session = Session.create(SessionConfig(chat_id="chat"))
    assert len(attrs.fields(SessionState)) >= DRAFT_FROM_FIELDS > len(attrs.fields(at.Persist))
    wide = replacer(SessionState)(session, stops=2)
    narrow = builder(at.Persist)(key="t1/p1", records=())
    assert (type(wide), type(narrow)) == (SessionState, at.Persist)
    assert wide == attrs.evolve(session, stops=2) and wide != session
    assert narrow == at.Persist(key="t1/p1", records=())
    for made in (wide, narrow):
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            made.stops = 3  # type: ignore[misc,union-attr]


GUARD_ON = at.guard.GuardConfig(todo_stop_guard=True, daemon=True)


def guard_in_phase(phase: at.guard.GuardPhase) -> at.guard.GuardState:
    """A real guard state in ``phase``, reached by real events."""
    g = at.guard
    envelope = {"type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "pending"}]}
    scripts: dict[g.GuardPhase, list[at.Event]] = {
        g.GuardPhase.OFF: [],
        g.GuardPhase.PLAN: [g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)],
        g.GuardPhase.NO_CHAIN: [],
        g.GuardPhase.ACTIVE: [g.OrdinaryPromptStarted(turn_id="t")],
        g.GuardPhase.CONTINUING: [
            g.OrdinaryPromptStarted(turn_id="t"),
            g.TodoWriteStarted(call_id="c", turn_id="t"),
            g.TodoWriteResult(call_id="c", turn_id="t", envelope=envelope, succeeded=True),
            g.NaturalStop()],
        g.GuardPhase.PAUSED: [g.OrdinaryPromptStarted(turn_id="t"),
                              g.RequestErrored(kind=g.ErrorKind.API)],
        g.GuardPhase.SUSPENDED: [g.OrdinaryPromptStarted(turn_id="t"),
                                 g.HardStopped(kind=g.HardStopKind.USER_CANCELLED)],
        g.GuardPhase.AWAITING_PROMPT: [g.OrdinaryPromptStarted(turn_id="t"),
                                       g.NaturalStop(queued_prompt=True)],
    }
    state = g.GuardState.create(g.GuardConfig() if phase is g.GuardPhase.OFF else GUARD_ON)
    for event in scripts[phase]:
        state = g.reduce(state, event).state
    assert state.phase is phase
    return state


_g = at.guard
GUARD_SAMPLES: list[at.Event] = [
    _g.OrdinaryPromptStarted(turn_id="t2"),
    _g.AutomaticTurnStarted(turn_id="a", kind=_g.AutomaticTurnKind.CRON, related=True),
    _g.MidTurnMessage(),
    _g.RetryOrContinue(turn_id="t"),
    _g.BackgroundResult(related=True),
    _g.TodoWriteResult(call_id="c2", turn_id="t", envelope={"type": "todo_list", "todos": []},
                       succeeded=True),
    _g.TodoWriteStarted(call_id="c2", turn_id="t"),
    _g.TodoArgumentsObserved(arguments={}),
    _g.TodoHistoryReplayed(envelope={}),
    _g.TodoDiskStateLoaded(envelope={}),
    _g.SubagentTodoObserved(envelope={}),
    _g.NaturalStop(),
    _g.GuardStreamOpened(),
    _g.GuardStreamNotOpened(reason=_g.NotOpenedReason.CANCELLED),
    _g.OrdinaryStreamOpened(),
    _g.ToolResultsReady(),
    _g.RequestErrored(kind=_g.ErrorKind.API),
    _g.HardStopped(kind=_g.HardStopKind.TOKEN_LIMIT),
    _g.TrustCleared(kind=_g.TrustClearingKind.FORK),
    _g.ForegroundPromptSettled(turn_id="t"),
    _g.QueuedPromptAborted(last=True),
    _g.ClientAttached(client_id="c"),
    _g.ModelChanged(),
    _g.ApprovalModeChanged(mode=_g.ApprovalMode.PLAN),
    _g.SettingsChanged(todo_stop_guard=True),
]


@pytest.mark.parametrize("phase", list(at.guard.GuardPhase), ids=lambda p: p.name)
@pytest.mark.parametrize("event", GUARD_SAMPLES, ids=lambda e: type(e).__name__)
def test_every_guard_phase_event_pair_is_declared_or_a_protocol_error(
    phase: at.guard.GuardPhase, event: at.Event
) -> None:
    """The guard's table is complete: an undeclared pair raises UnexpectedEvent; a declared one
    lands in a declared destination."""
    state = guard_in_phase(phase)
    declared = at.guard.GUARD_GRAPH.table.get((phase, type(event).__name__))
    try:
        new_state, _ = at.guard.reduce(state, event)
    except at.ProtocolError as error:
        assert declared is None and isinstance(error, at.UnexpectedEvent)
        return
    assert declared is not None, "accepted an event the table does not declare"
    assert new_state.phase in declared
