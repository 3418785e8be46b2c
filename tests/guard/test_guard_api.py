"""The todo stop guard as a stranger meets it: only ``agentturn.guard``'s public names.

These tests read the part from the host's chair: the exported unions cover every event and
command (so a host's ``match`` can be exhaustive), ``__all__`` says exactly what is public, the
awaiting commands name the events that answer them, every phase and event pair is either declared
or refused as host misuse, and the diagram is the table.
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import NoReturn

import pytest

import agentturn as at
from agentturn import guard as g

ON = g.GuardConfig(todo_stop_guard=True, daemon=True)


def exported(base: type) -> set[type]:
    """Every class ``agentturn.guard`` exports that derives from ``base``."""
    return {value for name in g.__all__
            if isinstance(value := getattr(g, name), type) and issubclass(value, base)}


def assert_never(value: NoReturn) -> NoReturn:
    """The exhaustiveness check a host writes (``typing.assert_never`` from Python 3.11)."""
    raise AssertionError(f"unhandled: {value!r}")


def what_to_do(command: g.GuardCommand) -> str:
    """A host's dispatch over every guard command; mypy proves it exhaustive."""
    match command:
        case g.StartWorkChain():
            return "snapshot the background baseline"
        case g.ContinueWithGuardPrompt():
            return "open a stream with the guard prompt"
        case g.SendToolResults():
            return "send the tool results"
        case g.KeepToolResults():
            return "keep the results, open nothing"
        case g.EmitAgentMessageChunk():
            return "emit a discrete chunk"
        case g.ReportGuardExhausted():
            return "show the exhaustion message"
        case g.HookMayContinue():
            return "let the hook continue"
        case g.ReleaseAutomaticQueues():
            return "release the automatic queues"
        case g.DeferAutomaticTurn():
            return "hold the automatic turn"
        case _:
            assert_never(command)


@pytest.mark.req("OB-2")
def test_guard_command_is_the_union_of_every_exported_command() -> None:
    """req: OB-2 — typing.get_args(GuardCommand) is exactly the exported command classes, and
    the exhaustive dispatch above handles each of them."""
    assert set(typing.get_args(g.GuardCommand)) == exported(at.Command)
    samples: list[g.GuardCommand] = [
        g.StartWorkChain(chain=1), g.ContinueWithGuardPrompt(attempt=1, unfinished=1, text="x"),
        g.SendToolResults(sponsor=g.Sponsor.GUARD, attempt=2),
        g.KeepToolResults(reason="x"),
        g.EmitAgentMessageChunk(text="", meta=g.GuardChunkMeta(attempt=1, unfinished=1)),
        g.ReportGuardExhausted(text="x"), g.HookMayContinue(reason="lint"),
        g.ReleaseAutomaticQueues(),
        g.DeferAutomaticTurn(turn_id="a", kind=g.AutomaticTurnKind.CRON)]
    assert {type(sample) for sample in samples} == exported(at.Command)
    assert len({what_to_do(sample) for sample in samples}) == len(samples)


def test_guard_event_is_the_union_of_every_exported_event() -> None:
    """typing.get_args(GuardEvent) is exactly the exported event classes, each one a key of the
    phase graph."""
    events = exported(at.Event)
    assert set(typing.get_args(g.GuardEvent)) == events
    assert {name for (_, name) in g.GUARD_GRAPH.table} == {kind.__name__ for kind in events}


def test_all_names_exactly_the_public_surface() -> None:
    """Every name in __all__ exists once; every public class or function of the guard's modules
    is in it; the removed names are gone and the new ones are there."""
    assert len(g.__all__) == len(set(g.__all__))
    assert all(hasattr(g, name) for name in g.__all__)
    public = {name for name, value in vars(g).items()
              if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
              and getattr(value, "__module__", "").startswith("agentturn.guard")}
    assert public <= set(g.__all__)
    assert {"TodoWriteStarted", "DeferAutomaticTurn", "DecisionReason", "holds_automatic_turns",
            "GuardEvent", "GuardCommand"} <= set(g.__all__)
    assert "SEEN_CALLS_KEPT" not in g.__all__ and not hasattr(g, "SEEN_CALLS_KEPT")


@pytest.mark.req("SG-B3", "SG-B4")
def test_a_host_that_tracks_awaiting_commands_always_gets_an_answer() -> None:
    """req: SG-B3, SG-B4 — a host keeps each awaiting command until an event named in its
    answered_by arrives; through continuations, a tool-result send and exhaustion it never holds
    more than one, and none is left over."""
    state = g.GuardState.create(ON)
    outstanding: list[at.AwaitingCommand] = []
    envelope = {"type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "pending"}]}
    script: list[at.Event] = [
        g.OrdinaryPromptStarted(turn_id="t1"), g.TodoWriteStarted(call_id="c1", turn_id="t1"),
        g.TodoWriteResult(call_id="c1", turn_id="t1", envelope=envelope, succeeded=True),
        g.NaturalStop(), g.GuardStreamOpened(), g.ToolResultsReady(), g.GuardStreamOpened(),
        g.NaturalStop()]
    for event in script:
        outstanding = [c for c in outstanding if type(event).__name__ not in c.answered_by]
        state, commands = g.reduce(state, event)
        for command in commands:
            assert isinstance(command, at.AwaitingCommand | at.Notice)
            what_to_do(command)  # type: ignore[arg-type]
            if isinstance(command, at.AwaitingCommand):
                assert command.answer_id is None
                outstanding.append(command)
        assert len(outstanding) <= 1
    assert outstanding == [] and state.phase is g.GuardPhase.SUSPENDED


def _reach(phase: g.GuardPhase) -> g.GuardState:
    """A real guard state in ``phase``, reached by real events."""
    envelope = {"type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "pending"}]}
    armed: list[at.Event] = [
        g.OrdinaryPromptStarted(turn_id="t"), g.TodoWriteStarted(call_id="c", turn_id="t"),
        g.TodoWriteResult(call_id="c", turn_id="t", envelope=envelope, succeeded=True)]
    scripts: dict[g.GuardPhase, list[at.Event]] = {
        g.GuardPhase.OFF: [], g.GuardPhase.NO_CHAIN: [],
        g.GuardPhase.PLAN: [g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)],
        g.GuardPhase.ACTIVE: armed,
        g.GuardPhase.CONTINUING: [*armed, g.NaturalStop()],
        g.GuardPhase.PAUSED: [*armed, g.RequestErrored(kind=g.ErrorKind.API)],
        g.GuardPhase.SUSPENDED: [*armed, g.HardStopped(kind=g.HardStopKind.USER_CANCELLED)],
        g.GuardPhase.AWAITING_PROMPT: [*armed, g.NaturalStop(queued_prompt=True)],
    }
    state = g.GuardState.create(g.GuardConfig() if phase is g.GuardPhase.OFF else ON)
    for event in scripts[phase]:
        state = g.reduce(state, event).state
    assert state.phase is phase
    return state


SAMPLES: list[at.Event] = [
    g.OrdinaryPromptStarted(turn_id="t2"),
    g.AutomaticTurnStarted(turn_id="a", kind=g.AutomaticTurnKind.CRON, related=True),
    g.AutomaticTurnStarted(turn_id="b", kind=g.AutomaticTurnKind.CRON, related=False),
    g.MidTurnMessage(), g.RetryOrContinue(turn_id="t"), g.BackgroundResult(related=True),
    g.TodoWriteStarted(call_id="c2", turn_id="t"),
    g.TodoWriteResult(call_id="c", turn_id="t", envelope={"type": "todo_list", "todos": []},
                      succeeded=True),
    g.TodoArgumentsObserved(arguments={}), g.TodoHistoryReplayed(envelope={}),
    g.TodoDiskStateLoaded(envelope={}), g.SubagentTodoObserved(envelope={}),
    g.NaturalStop(), g.NaturalStop(queued_prompt=True), g.NaturalStop(hook_reason="lint"),
    g.GuardStreamOpened(), g.GuardStreamNotOpened(reason=g.NotOpenedReason.COMPACTION_FAILED),
    g.OrdinaryStreamOpened(), g.ToolResultsReady(), g.RequestErrored(kind=g.ErrorKind.API),
    g.HardStopped(kind=g.HardStopKind.TOKEN_LIMIT),
    g.TrustCleared(kind=g.TrustClearingKind.FORK, invalidated_turn_id="t"),
    g.ForegroundPromptSettled(turn_id="t"), g.QueuedPromptAborted(last=True),
    g.ClientAttached(client_id="c"), g.ModelChanged(),
    g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
    g.ApprovalModeChanged(mode=g.ApprovalMode.YOLO), g.SettingsChanged(todo_stop_guard=True),
]


@pytest.mark.parametrize("phase", list(g.GuardPhase), ids=lambda p: p.name)
def test_every_phase_and_event_is_declared_or_refused_unchanged(phase: g.GuardPhase) -> None:
    """Each sample event in each phase either lands in a declared destination or raises
    UnexpectedEvent, leaving the state as it was; nothing else escapes."""
    for event in SAMPLES:
        state = _reach(phase)
        declared = g.GUARD_GRAPH.table.get((phase, type(event).__name__))
        try:
            new_state, _ = g.reduce(state, event)
        except at.UnexpectedEvent:
            assert declared is None, f"refused a declared {type(event).__name__}"
            assert state == _reach(phase)
            continue
        assert declared is not None and new_state.phase in declared, type(event).__name__


@pytest.mark.parametrize("thing", ["NaturalStop", None, at.Event(), object()],
                         ids=["str", "none", "base-event", "object"])
def test_anything_that_is_not_a_guard_event_is_a_protocol_error(thing: object) -> None:
    """A host passing a non-event gets a ProtocolError, never another exception."""
    with pytest.raises(at.ProtocolError):
        g.reduce(g.GuardState.create(ON), thing)


def test_the_diagram_draws_exactly_the_table_and_every_phase_is_reachable() -> None:
    """The Mermaid drawing has the table's edges; from the phases a session can be created in,
    every phase is reachable along declared edges."""
    drawn: set[tuple[str, str, str]] = set()
    for line in g.GUARD_GRAPH.mermaid().splitlines():
        match = re.fullmatch(r"\s*(\w+) --> (\w+): (.+)", line)
        if match:
            source, dest, label = match.groups()
            drawn.update((source, name.strip(), dest) for name in label.split("|"))
    assert drawn == set(g.GUARD_GRAPH.edges())
    reached = {g.GuardPhase.OFF, g.GuardPhase.NO_CHAIN, g.GuardPhase.PLAN}
    frontier = list(reached)
    while frontier:
        phase = frontier.pop()
        for (source, _), dests in g.GUARD_GRAPH.table.items():
            if source is phase:
                for dest in dests - reached:
                    reached.add(dest)
                    frontier.append(dest)
    assert reached == set(g.GuardPhase)
