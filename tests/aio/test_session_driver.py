"""The session driver, as a daemon author uses it: timers on a clock in hand, the drain and the
Stop hooks, clients, queued prompts, quiescence, closing."""

from __future__ import annotations

import io
from typing import Any

import pytest
from world import Act, World, events, run, when

import agentturn as at
from agentturn import aio
from agentturn import guard as g
from agentturn import session as se
from agentturn.tools.check import check
from agentturn.trace import read_trace

PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser")
CONFIG = se.SessionConfig(chat_id="chat", guard=g.GuardConfig(todo_stop_guard=True, daemon=True),
                          stop_hooks=True, turn=at.TurnConfig(auto_title=False))




def driver(world: World, trace: io.StringIO, clock: aio.ManualClock,
           **options: Any) -> aio.SessionDriver:
    return aio.SessionDriver(options.pop("config", CONFIG), world.effects(), trace=trace,
                             clock=clock, max_output_tokens=1000, **options)



@pytest.mark.req("SO-6")
def test_a_prompt_runs_to_a_quiescent_session() -> None:
    """Prompt, response, the drain, the Stop hooks, the end: ``quiescent`` returns once the
    session waits for nothing the effects owe, and says what it still waits for."""
    world, trace, clock = World(), io.StringIO(), aio.ManualClock()
    ended: list[at.EndTurn] = []

    def sink(notice: at.Notice) -> None:
        if isinstance(notice, at.EndTurn):
            ended.append(notice)

    async def main() -> None:
        async with driver(world, trace, clock, on_notice=sink) as d:
            await d.send(PROMPT)
            assert await d.quiescent() == ()

    run(main)
    assert [e.outcome.kind for e in ended] == [at.OutcomeKind.FINISHED]
    names = [type(e).__name__ for e in events(trace)]
    assert "MidTurnDrained" in names and "StopHookDecided" in names
    assert check(read_trace(trace.getvalue())).ok


@pytest.mark.req("SO-6")
def test_stop_hooks_that_raise_never_block() -> None:
    """A raising Stop-hook effect is ``StopHookFailed``: the turn ends."""
    world = World(iter([Act(), Act(), Act(), Act(), Act(kind="raise")]))
    trace, clock = io.StringIO(), aio.ManualClock()

    async def main() -> None:
        async with driver(world, trace, clock) as d:
            await d.send(PROMPT)
            await d.quiescent()
            assert d.state.phase is se.SessionPhase.IDLE

    run(main)
    assert any(isinstance(e, se.StopHookFailed) for e in events(trace))


@pytest.mark.req("BR-3")
def test_a_drain_the_client_never_answers_is_bounded_by_its_timer() -> None:
    """The drain effect hangs: the session waits on the drain's timer, which fires when the
    clock reaches it; the turn then goes on to the Stop hooks."""
    world = World(iter([Act(), Act(), Act(), Act(kind="hang")]))
    trace, clock = io.StringIO(), aio.ManualClock()

    async def main() -> None:
        async with driver(world, trace, clock) as d:
            await d.send(PROMPT)
            await when(lambda: d.state.phase is se.SessionPhase.DRAINING)
            await when(lambda: clock.sleepers == 1)
            clock.advance(CONFIG.drain_timeout)
            await when(lambda: d.state.phase is se.SessionPhase.IDLE)
            assert await d.quiescent() == ()

    run(main)
    assert any(isinstance(e, se.TimerFired) for e in events(trace))
    assert world.running == 0  # the hanging drain was let go when the driver closed


@pytest.mark.req("BR-4")
def test_the_grace_timer_closes_an_abandoned_session() -> None:
    """The last client leaves: the grace timer starts on the driver's clock; when it runs out
    the session closes."""
    world, trace, clock = World(), io.StringIO(), aio.ManualClock()
    notices: list[str] = []

    async def main() -> None:
        async with driver(world, trace, clock,
                          on_notice=lambda n: notices.append(type(n).__name__)) as d:
            await d.send(se.ClientAttached(client_id="c1"))
            await d.send(se.ClientDetached(client_id="c1"))
            (waiting,) = await d.quiescent()
            assert (waiting.command, waiting.answer_id) == (se.StartTimer, "grace")
            await when(lambda: clock.sleepers == 1)
            clock.advance(CONFIG.grace_period)
            await when(lambda: d.state.phase is se.SessionPhase.CLOSED)

    run(main)
    assert "CloseSession" in notices


@pytest.mark.req("BR-4")
def test_a_client_coming_back_cancels_the_grace_timer() -> None:
    """``CancelTimer`` cancels the timer's task: advancing past it fires nothing."""
    world, trace, clock = World(), io.StringIO(), aio.ManualClock()

    async def main() -> None:
        async with driver(world, trace, clock) as d:
            await d.send(se.ClientAttached(client_id="c1"))
            await d.send(se.ClientDetached(client_id="c1"))
            await d.send(se.ClientAttached(client_id="c1"))
            clock.advance(60)
            assert await d.quiescent() == ()
            assert d.state.phase is se.SessionPhase.IDLE

    run(main)
    assert not any(isinstance(e, se.TimerFired) for e in events(trace))


@pytest.mark.req("BR-1")
def test_a_prompt_queued_during_a_turn_runs_after_it() -> None:
    """A queued prompt sent from another task while a turn runs waits in the FIFO and runs
    next; ``quiescent`` returns after both."""
    world = World(iter([Act(), Act(pause=30)]))
    trace, clock = io.StringIO(), aio.ManualClock()
    ended: list[str] = []

    def sink(notice: at.Notice) -> None:
        if isinstance(notice, at.EndTurn):
            ended.append(notice.turn_id)

    async def main() -> None:
        async with driver(world, trace, clock, on_notice=sink) as d:
            await d.send(PROMPT)
            d.send_nowait(se.PromptQueued(prompt_id="q1", message_id="mq1", text="And the docs"))
            await d.quiescent()

    run(main)
    assert ended == ["t1", "q1"]


def test_closing_hands_back_a_prompt_still_arriving() -> None:
    """A queued prompt whose content is still arriving when the session closes comes back in
    ``PromptRefused``, with ``CloseSession`` after it."""
    world, trace, clock = World(), io.StringIO(), aio.ManualClock()

    async def main() -> None:
        async with driver(world, trace, clock) as d:
            await d.send(PROMPT)
            await d.send(se.PromptQueued(prompt_id="q1", message_id="mq1", text="And th",
                                         complete=False))
            waiting = await d.quiescent()
            assert [w.kind for w in waiting] == [se.WaitKind.PROMPT_CONTENT]
            closed = await d.aclose()
            assert [p.text for p in closed.refused_prompts] == ["And th"]
            assert isinstance(closed.notices[-1], se.CloseSession)

    run(main)
    assert world.running == 0
    assert check(read_trace(trace.getvalue())).ok


def test_background_work_is_the_hosts_input() -> None:
    """Background items start and end through ``send``, like any input of the host."""
    world, trace, clock = World(), io.StringIO(), aio.ManualClock()

    async def main() -> None:
        async with driver(world, trace, clock) as d:
            await d.send(se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="b1"))
            await d.send(se.BackgroundEnded(item_id="b1", notification_id=None))
            assert await d.quiescent() == ()

    run(main)
