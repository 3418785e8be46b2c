"""What a host sees besides the notices, and where a driver may start: the response's text as
it streams (``on_text``), every step (``on_step``), an engine's acceptance before its first
object (``aio.OPENED``), and a session restored from a saved state (``SessionDriver.restored``)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest
from world import World, chunk, events, run, when

import agentturn as at
from agentturn import aio
from agentturn import guard as g
from agentturn import session as se
from agentturn.trace import dump_state, load_state

PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Read the notes")
CONFIG = at.TurnConfig(auto_title=False)
SESSION = se.SessionConfig(chat_id="chat", guard=g.GuardConfig(todo_stop_guard=True, daemon=True),
                           stop_hooks=False, turn=CONFIG)


def turn_driver(world: World, **options: Any) -> aio.TurnDriver:
    return aio.TurnDriver("chat-1", CONFIG, world.effects(), max_output_tokens=1000, **options)


# --- the text as it streams ----------------------------------------------------------------------


def test_the_text_sink_sees_each_piece_as_it_streams() -> None:
    """``on_text`` gets the response's text in the pieces the engine sent, in order, before the
    response completes; joined, they are the response's text."""
    pieces = ["The ", "notes ", "say ", "hello."]
    seen: list[tuple[str, str, int]] = []

    async def model(command: at.RequestModelStream) -> AsyncIterator[dict[str, Any]]:
        yield chunk({"role": "assistant", "content": ""})
        for piece in pieces:
            yield chunk({"content": piece})
            await anyio.sleep(0)
        yield chunk({}, "stop")

    async def show(request_id: str, text: str) -> None:
        seen.append((request_id, text, len(world.saved)))

    world = World()
    effects = aio.Effects(persist=world.persist, model=model, permission=world.permission,
                          tool=world.tool)

    async def main() -> None:
        async with aio.TurnDriver("chat-1", CONFIG, effects, max_output_tokens=1000,
                                  on_text=show) as driver:
            ending = await driver.run_turn(PROMPT)
            assert ending.outcome.kind is at.OutcomeKind.FINISHED

    run(main)
    assert [text for _, text, _ in seen] == pieces
    assert {request for request, _, _ in seen} == {"t1/r1"}
    assert {saved for _, _, saved in seen} == {1}  # the prompt only: the response is to come
    response = [r for r in world.saved if isinstance(r, at.ResponseRecord)]
    assert [r.text for r in response] == ["".join(pieces)]


def test_a_text_sink_that_raises_fails_the_stream() -> None:
    """The sink is part of reading the stream: its error is the stream's (``StreamFailed``),
    never a hang and never an exception out of the driver."""
    world = World()

    def show(request_id: str, text: str) -> None:
        raise RuntimeError("the window is gone")

    trace = io.StringIO()

    async def main() -> None:
        async with turn_driver(world, on_text=show, trace=trace) as d:
            ending = await d.run_turn(PROMPT)
            assert ending.outcome.kind is at.OutcomeKind.ERROR

    run(main)
    failed = [e for e in events(trace) if isinstance(e, at.StreamFailed)]
    assert [e.error for e in failed] == ["RuntimeError: the window is gone"]


# --- every step ---------------------------------------------------------------------------------


def test_the_step_sink_sees_every_step_before_its_commands_run() -> None:
    """``on_step`` gets each event and its step, in the trace's order, before the step's
    commands are carried out: the prompt's step comes before its record is saved."""
    world = World()
    trace = io.StringIO()
    steps: list[tuple[at.Event, int]] = []
    driver: aio.TurnDriver | None = None

    async def record(event: at.Event, step: at.Step[Any]) -> None:
        assert driver is not None and step.state is driver.state
        steps.append((event, len(world.saved)))

    async def main() -> None:
        nonlocal driver
        async with turn_driver(world, on_step=record, trace=trace) as driver:
            await driver.run_turn(PROMPT)

    run(main)
    assert [event for event, _ in steps] == events(trace)
    assert steps[0] == (PROMPT, 0)  # nothing saved yet when the prompt's step was seen


# --- the engine accepted the request ------------------------------------------------------------


def test_opened_answers_stream_opened_before_the_first_object() -> None:
    """A model effect that yields ``aio.OPENED`` (its request accepted, the response not yet
    come) has the turn streaming at once; Stop then cancels it as a stream that opened, and a
    failure after it is the stream's, not the budgeting step's."""
    release = anyio.Event()

    async def model(command: at.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        yield aio.OPENED
        await release.wait()
        raise aio.CompactionError("too late to compact")

    world = World()
    effects = aio.Effects(persist=world.persist, model=model, permission=world.permission,
                          tool=world.tool)
    trace = io.StringIO()

    async def main() -> None:
        async with aio.TurnDriver("chat-1", CONFIG, effects, max_output_tokens=1000,
                                  trace=trace) as d:
            await d.send(PROMPT)
            await when(lambda: d.state.phase is at.TurnPhase.STREAMING)
            release.set()
            ending = await d.turn_ended("t1")
            assert ending.outcome.kind is at.OutcomeKind.ERROR

    run(main)
    names = [type(e).__name__ for e in events(trace)]
    assert names.count("StreamOpened") == 1
    assert "CompactionFailed" not in names and "StreamFailed" in names


def test_opened_is_an_empty_mapping() -> None:
    """``OPENED`` types as a wire object (an empty mapping), so a model effect's type holds."""
    assert dict(aio.OPENED) == {} and len(aio.OPENED) == 0
    assert repr(aio.OPENED) == "agentturn.aio.OPENED"


# --- a restored session -------------------------------------------------------------------------


@pytest.mark.req("SG-A12")
def test_a_session_saved_at_rest_goes_on_in_a_new_driver() -> None:
    """Run a turn, save the state at rest, restore it into a new driver (as a daemon does after
    a restart): the next turn runs on from it, with a guard that trusts nothing."""
    first, second = World(), World()
    saved = ""

    async def main() -> None:
        nonlocal saved
        async with aio.SessionDriver(SESSION, first.effects(), max_output_tokens=1000) as d:
            await d.send(PROMPT)
            assert await d.quiescent() == ()
            saved = dump_state(d.state)
        state = load_state(saved)
        async with aio.SessionDriver.restored(state, second.effects(),
                                              max_output_tokens=1000) as d:
            assert d.state == state
            await d.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="And now?"))
            assert await d.quiescent() == ()
            assert d.state.phase is se.SessionPhase.IDLE

    run(main)
    assert [type(r).__name__ for r in second.saved][:1] == ["UserMessageRecord"]
    assert [r.text for r in second.saved if isinstance(r, at.UserMessageRecord)] == ["And now?"]


def test_a_state_with_answers_owed_is_refused() -> None:
    """A state saved mid-turn awaits answers whose effects ran in another process: refused,
    naming them (a driver would wait for them forever)."""
    world = World()
    mid: list[se.SessionState] = []

    def keep(event: at.Event, step: at.Step[Any]) -> None:
        if se.outstanding(step.state):
            mid.append(step.state)

    async def main() -> None:
        async with aio.SessionDriver(SESSION, world.effects(), max_output_tokens=1000,
                                     on_step=keep) as d:
            await d.send(PROMPT)
            await d.quiescent()

    run(main)
    assert [o.answer_id for o in se.lost_on_restart(mid[0])] == ["t1/p1"]
    with pytest.raises(ValueError, match=r"awaits answers \(Persist 't1/p1'"):
        aio.SessionDriver.restored(mid[0], world.effects(), max_output_tokens=1000)


def test_a_restored_session_writes_no_trace_and_keeps_its_config() -> None:
    """A trace replays from a new session, so a restored one refuses ``trace=``; a state whose
    configuration differs from ``config`` is refused too."""
    world = World()
    state = se.Session.create(SESSION)
    with pytest.raises(ValueError, match="trace=None"):
        aio.SessionDriver(SESSION, world.effects(), max_output_tokens=1000, state=state,
                          trace=io.StringIO())
    other = se.SessionConfig(chat_id="other", turn=CONFIG)
    with pytest.raises(ValueError, match=r"state\.config differs"):
        aio.SessionDriver(other, world.effects(), max_output_tokens=1000, state=state)


@pytest.mark.req("BR-4")
def test_a_restored_session_starts_its_timers_again() -> None:
    """A session saved while its grace timer ran (the last client gone) is restored with the
    timer started again for its whole length: when it runs out, the session closes, as it
    would have in the old process."""
    world, clock = World(), aio.ManualClock()
    saved: se.SessionState | None = None
    notices: list[str] = []

    async def main() -> None:
        nonlocal saved
        async with aio.SessionDriver(SESSION, world.effects(), max_output_tokens=1000,
                                     clock=aio.ManualClock()) as d:
            await d.send(se.ClientAttached(client_id="c1"))
            await d.send(se.ClientDetached(client_id="c1"))
            await d.quiescent()
            saved = d.state
        assert saved is not None
        assert se.timers_to_rearm(saved) == (
            se.StartTimer(key="grace", seconds=SESSION.grace_period),)
        assert se.lost_on_restart(saved) == ()  # the timer starts again: nothing is lost
        async with aio.SessionDriver.restored(
                saved, world.effects(), max_output_tokens=1000, clock=clock,
                on_notice=lambda n: notices.append(type(n).__name__)) as d:
            await when(lambda: clock.sleepers == 1)
            clock.advance(SESSION.grace_period - 1)
            for _ in range(20):  # time for a timer that (wrongly) ran out to be reduced
                await anyio.sleep(0)
            assert d.state.phase is se.SessionPhase.IDLE
            clock.advance(1)
            await when(lambda: d.state.phase is se.SessionPhase.CLOSED)

    run(main)
    assert "CloseSession" in notices


def test_a_turn_drivers_notices_are_the_turn_notice_union() -> None:
    """``at.TurnNotice`` holds every notice of the turn family, so a turn driver's sink can match
    on it exhaustively; the notices a run sends are all in it."""
    import typing

    import agentturn.commands

    declared = {value for value in vars(agentturn.commands).values()
                if isinstance(value, type) and issubclass(value, at.Notice)
                and value is not at.Notice}
    assert set(typing.get_args(at.TurnNotice)) == declared
    seen: list[at.Notice] = []
    world = World()

    async def main() -> None:
        async with turn_driver(world, on_notice=seen.append) as d:
            await d.run_turn(PROMPT)
            await d.send(at.StopPressed())

    run(main)
    assert seen and all(isinstance(notice, typing.get_args(at.TurnNotice)) for notice in seen)


# --- found by an outside review ------------------------------------------------------------------


def test_turn_ended_after_aclose_says_the_driver_is_closed() -> None:
    """Inside ``async with``, after ``aclose()``: waiting for a turn that never ended raises
    ``DriverClosed`` at once rather than waiting for the block to be left."""
    async def main() -> None:
        async with turn_driver(World()) as d:
            await d.aclose()
            with pytest.raises(aio.DriverClosed, match="is closed"):
                await d.turn_ended("never")

    run(main)


@pytest.mark.parametrize("wait", ["send", "settled"])
def test_a_sink_that_awaits_the_driver_is_refused_not_left_hanging(wait: str) -> None:
    """A notice sink runs inside the driver's loop: awaiting ``send`` or ``settled`` there
    would wait for the step the sink is part of. It raises, and the driver ends with it, as
    with any raising sink; ``send_nowait`` from a sink works."""
    async def sink(notice: at.Notice) -> None:
        if isinstance(notice, at.EndTurn):
            assert driver is not None
            if wait == "send":
                await driver.send(at.ManualRename(title="Mine"))
            else:
                await driver.settled()

    driver: aio.TurnDriver | None = None

    async def main() -> None:
        nonlocal driver
        async with turn_driver(World(), on_notice=sink) as driver:
            await driver.send(PROMPT)
            await anyio.sleep_forever()

    with pytest.raises(RuntimeError, match=rf"{wait}\(\) from inside a notice or step sink"):
        run(main)


def test_send_nowait_from_a_sink_works() -> None:
    """The way to send from a sink: ``send_nowait``, reduced after the sink's step (a Lead
    typed after the turn ended comes back as a draft)."""
    seen: list[str] = []

    def sink(notice: at.Notice) -> None:
        seen.append(type(notice).__name__)
        if isinstance(notice, at.EndTurn):
            assert driver is not None
            driver.send_nowait(at.LeadSubmitted(chat_id="chat-1", lead_id="l1", text="late"))

    driver: aio.TurnDriver | None = None

    async def main() -> None:
        nonlocal driver
        async with turn_driver(World(), on_notice=sink) as driver:
            await driver.run_turn(PROMPT)
            await driver.settled()
            assert driver.refused == ()

    run(main)
    assert seen == ["EndTurn", "ReturnDraft"]


@pytest.mark.req("BR-4")
@pytest.mark.parametrize("restored", [False, True])
def test_a_timer_armed_before_its_task_runs_still_fires_on_one_advance(restored: bool) -> None:
    """The timer's deadline is fixed when ``StartTimer`` is carried out (or the restored timer
    started): advancing the clock once, right after ``quiescent()``, fires it even if its task
    has not begun to sleep yet."""
    clock = aio.ManualClock()
    notices: list[str] = []
    left = se.Session.create(SESSION)
    for event in (se.ClientAttached(client_id="c1"), se.ClientDetached(client_id="c1")):
        left = se.reduce(left, event).state

    async def main() -> None:
        options: dict[str, Any] = {
            "max_output_tokens": 1000, "clock": clock,
            "on_notice": lambda n: notices.append(type(n).__name__)}
        driver = (aio.SessionDriver.restored(left, World().effects(), **options) if restored
                  else aio.SessionDriver(SESSION, World().effects(), **options))
        async with driver as d:
            if not restored:
                await d.send(se.ClientAttached(client_id="c1"))
                await d.send(se.ClientDetached(client_id="c1"))
            await d.quiescent()
            clock.advance(SESSION.grace_period)
            await when(lambda: d.state.phase is se.SessionPhase.CLOSED)

    run(main)
    assert "CloseSession" in notices


def test_a_closed_session_is_not_restored() -> None:
    """A closed session takes no more input: restoring it is refused, naming why."""
    closed: list[se.SessionState] = []

    async def main() -> None:
        async with aio.SessionDriver(SESSION, World().effects(), max_output_tokens=1000) as d:
            await d.aclose()
            closed.append(d.state)

    run(main)
    assert closed[0].phase is se.SessionPhase.CLOSED
    with pytest.raises(ValueError, match="the session is closed"):
        aio.SessionDriver.restored(closed[0], World().effects(), max_output_tokens=1000)
