"""The turn driver, as a host author uses it: effects in, notices out, done, closing, trace.

Every test runs a real ``TurnDriver`` on asyncio (``anyio.run``) against the fake world of
``world.py``, from the public names of ``agentturn`` and ``agentturn.aio`` only.
"""

from __future__ import annotations

import builtins
import importlib
import io
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from world import Act, World, call_chunks, chunk, events, run, text_chunks, when

import agentturn as at
from agentturn import aio
from agentturn.tools.check import check
from agentturn.trace import read_trace

PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Read the notes")




def commands(trace: io.StringIO) -> list[at.Command]:
    return [c for step in read_trace(trace.getvalue()).steps for c in step.commands]


def checks_clean(trace: io.StringIO) -> bool:
    return bool(check(read_trace(trace.getvalue())).ok)


def driver(world: World, trace: io.StringIO, **options: Any) -> aio.TurnDriver:
    config = options.pop("config", at.TurnConfig(auto_title=False))
    options.setdefault("max_output_tokens", 1000)
    return aio.TurnDriver("chat-1", config, world.effects(), trace=trace, **options)



async def stop_in(d: aio.TurnDriver, phase: at.TurnPhase) -> at.EndTurn:
    """Send ``PROMPT``, press Stop once its turn reaches ``phase``, and wait for its end."""
    await d.send(PROMPT)
    await when(lambda: d.state.phase is phase)
    await d.send(at.StopPressed())
    return await d.turn_ended("t1")


# --- effects and sinks ------------------------------------------------------------------------


@pytest.mark.req("TL-5")
def test_a_turn_runs_with_the_hosts_effects() -> None:
    """Prompt, response, tool, result, final answer: each saved before the next request, and
    the trace checks clean."""
    world = World(iter([Act(), Act(value="read")]))
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            ending = await d.run_turn(PROMPT)
            assert ending.outcome.kind is at.OutcomeKind.FINISHED

    run(main)
    kinds = [type(r).__name__ for r in world.saved]
    assert kinds == ["UserMessageRecord", "ResponseRecord", "ToolResultRecord", "ResponseRecord"]
    assert checks_clean(trace)
    assert world.running == 0


def test_notices_reach_an_async_sink_in_order() -> None:
    """Every notice goes to the sink, awaited, in the order the reducer returned them."""
    world = World(iter([Act(), Act(value="read")]))
    seen: list[str] = []

    async def sink(notice: at.Notice) -> None:
        await anyio.sleep(0)
        seen.append(type(notice).__name__)

    async def main() -> None:
        async with driver(world, io.StringIO(), on_notice=sink) as d:
            await d.run_turn(PROMPT)
            await d.send(at.LeadSubmitted(chat_id="chat-1", lead_id="l1", text="late"))

    run(main)
    assert seen == ["EndTurn", "ReturnDraft"]


@pytest.mark.req("TL-3")
def test_a_call_the_review_marks_waits_for_the_users_allow() -> None:
    """The host's review marks a write as needing permission: the permission effect is asked
    before the tool runs."""
    world = World(iter([Act(), Act(value="write")]))
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            await d.run_turn(PROMPT)

    run(main)
    names = [type(c).__name__ for c in commands(trace)]
    assert names.index("AskPermission") < names.index("ExecuteTool")


# --- engine streams ---------------------------------------------------------------------------


@pytest.mark.req("TL-9", "TL-10")
def test_a_response_cut_at_the_output_limit_runs_none_of_its_calls() -> None:
    """The model says ``tool_calls`` but used every token asked for: the driver's accumulator
    knows the limit, so the turn ends with the output-limit outcome and runs nothing."""
    trace = io.StringIO()

    async def model(command: at.RequestModelStream) -> AsyncIterator[dict[str, Any]]:
        for item in call_chunks("call-1", "read"):
            yield item
        yield {**chunk({}), "choices": [],
               "usage": {"prompt_tokens": 5, "completion_tokens": 50, "total_tokens": 55}}

    world = World()
    effects = aio.Effects(persist=world.persist, model=model, permission=world.permission,
                          tool=world.tool)

    async def main() -> None:
        async with aio.TurnDriver("chat-1", at.TurnConfig(auto_title=False), effects,
                                  max_output_tokens=50, trace=trace) as d:
            ending = await d.run_turn(PROMPT)
            assert ending.outcome.kind is at.OutcomeKind.OUTPUT_LIMIT
            reason = ending.outcome.finish_reason
            assert reason is not None and reason.raw == "tool_calls"  # kept unchanged (TL-10)

    run(main)
    assert not any(isinstance(c, at.ExecuteTool) for c in commands(trace))
    assert checks_clean(trace)


def test_a_bad_output_limit_is_refused_when_the_driver_is_made() -> None:
    """``max_output_tokens`` is checked at once, not at the first request."""
    with pytest.raises(at.FieldError):
        driver(World(), io.StringIO(), max_output_tokens=0)


# --- cancellation -----------------------------------------------------------------------------


@pytest.mark.req("TL-8")
def test_stop_cancels_the_stream_and_closes_it() -> None:
    """Stop while the model writes: the stream's iterator is closed, nothing more is fed for
    it, and the turn ends cancelled."""
    world = World(iter([Act(), Act(kind="hang")]))
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            ending = await stop_in(d, at.TurnPhase.STREAMING)
            assert ending.outcome.kind is at.OutcomeKind.CANCELLED

    run(main)
    assert world.closed_streams == ["t1/r1"]
    assert not any(isinstance(e, at.StreamCompleted) for e in events(trace))
    assert checks_clean(trace)


def test_a_new_stream_waits_for_the_cancelled_one_to_close() -> None:
    """A stream that takes a while to close still holds its place: the next request's stream
    opens only once it has closed (never two model streams at once)."""
    world = World()
    closing = 0

    async def model(command: at.RequestModelStream) -> AsyncIterator[dict[str, Any]]:
        nonlocal closing
        stream = world.model(command)
        try:
            async for item in stream:
                yield item
                if command.request_id == "t1/r1":
                    await anyio.sleep_forever()
        finally:
            closing += 1
            with anyio.CancelScope(shield=True):
                for _ in range(20):
                    await anyio.sleep(0)
            await stream.aclose()

    effects = aio.Effects(persist=world.persist, model=model, permission=world.permission,
                          tool=world.tool)

    async def main() -> None:
        async with aio.TurnDriver("chat-1", at.TurnConfig(auto_title=False), effects,
                                  max_output_tokens=100) as d:
            await d.send(PROMPT)
            await when(lambda: d.state.phase is at.TurnPhase.STREAMING)
            await d.send(at.StopPressed())
            second = at.PromptSubmitted(turn_id="t2", message_id="m2", text="again")
            ending = await d.run_turn(second)
            assert ending.outcome.kind is at.OutcomeKind.FINISHED

    run(main)
    assert closing == 2
    assert world.most_streams_open == 1


@pytest.mark.req("TL-8")
def test_stop_asks_a_stoppable_tool_to_stop() -> None:
    """``CancelTool`` sets the tool's stop signal: a read stops and reports it, once."""
    world = World(iter([Act(), Act(value="read"), Act(), Act(kind="hang")]))
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            await stop_in(d, at.TurnPhase.RUNNING_TOOL)

    run(main)
    finished = [e for e in events(trace) if isinstance(e, at.ToolFinished)]
    assert [(f.call_id, f.cancelled) for f in finished] == [("call-1", True)]
    assert world.stopped == ["call-1"]


@pytest.mark.req("TL-8")
def test_a_write_runs_to_its_end_after_stop() -> None:
    """A write never looks at its stop signal: it runs to its end and its whole result is
    saved; the turn's ending (cancelled) stands."""
    world = World(iter([Act(), Act(value="write"), Act(), Act(), Act(pause=30)]))
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            ending = await stop_in(d, at.TurnPhase.RUNNING_TOOL)
            assert ending.outcome.kind is at.OutcomeKind.CANCELLED

    run(main)
    finished = [e for e in events(trace) if isinstance(e, at.ToolFinished)]
    assert [(f.output, f.cancelled) for f in finished] == [("wrote the file", False)]
    assert any(isinstance(r, at.ToolResultRecord) and r.output == "wrote the file"
               for r in world.saved)


@pytest.mark.req("TL-3", "TL-8")
def test_stop_closes_a_permission_dialog() -> None:
    """``DismissPermission`` cancels the dialog's task; no decision is ever sent for it."""
    world = World(iter([Act(), Act(value="write"), Act(), Act(kind="hang")]))
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            await stop_in(d, at.TurnPhase.AWAITING_PERMISSION)

    run(main)
    assert world.dismissed == ["call-1"]
    assert not any(isinstance(e, at.PermissionDecided) for e in events(trace))
    assert checks_clean(trace)


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.req("TL-5", "TL-11", "TL-3", "LD-7")
@pytest.mark.parametrize(("script", "failure"), [
    ([Act(kind="raise")], at.PersistFailed),
    ([Act(), Act(kind="raise")], at.StreamFailed),
    ([Act(), Act(value="write"), Act(), Act(kind="raise")], at.PermissionDecided),
    ([Act(), Act(value="write"), Act(), Act(), Act(kind="raise")], at.ToolFinished),
])
def test_an_effect_that_raises_is_its_failure_event(script: list[Act],
                                                    failure: type[at.Event]) -> None:
    """A raise is the command's documented failure event: the turn goes on deciding, the
    driver never raises, and nothing hangs."""
    world = World(iter(script))
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            with anyio.fail_after(5):
                await d.run_turn(PROMPT)

    run(main)
    (answer,) = [e for e in events(trace) if isinstance(e, failure)]
    if isinstance(answer, at.StreamFailed):
        assert answer.network  # an OSError is a network error
    if isinstance(answer, at.PermissionDecided):
        assert answer.decision is at.PermissionDecision.CANCEL  # never an allow
    if isinstance(answer, at.ToolFinished):
        assert answer.error
    assert checks_clean(trace)


@pytest.mark.req("TL-2")
@pytest.mark.parametrize(("error", "answer"), [
    (aio.CompactionError("too long"), at.CompactionFailed),
    (aio.TokenLimitError("over"), at.TokenLimitRejected),
])
def test_the_budgeting_step_fails_with_its_own_event(error: Exception,
                                                     answer: type[at.Event]) -> None:
    """A model effect that raises ``CompactionError`` / ``TokenLimitError`` before its first
    wire object answers ``CompactionFailed`` / ``TokenLimitRejected``."""
    world = World()
    trace = io.StringIO()

    async def model(command: at.RequestModelStream) -> AsyncIterator[dict[str, Any]]:
        raise error
        yield {}  # an async generator

    effects = aio.Effects(persist=world.persist, model=model, permission=world.permission,
                          tool=world.tool)

    async def main() -> None:
        async with aio.TurnDriver("chat-1", at.TurnConfig(auto_title=False), effects,
                                  max_output_tokens=100, trace=trace) as d:
            await d.run_turn(PROMPT)

    run(main)
    assert any(isinstance(e, answer) for e in events(trace))


def _wrapped(cause: Exception) -> Exception:
    """``cause`` wrapped the way SDKs wrap it (litellm's ``InternalServerError`` over the OpenAI
    client's ``APIConnectionError`` over the socket's error)."""
    try:
        try:
            raise cause
        except Exception as inner:
            raise RuntimeError("Connection error.") from inner
    except RuntimeError as middle:
        try:
            raise LookupError("InternalServerError: Connection error.")  # (implicit context)
        except LookupError as outer:
            assert outer.__context__ is middle
            return outer


def _grouped(member: Exception) -> Exception:
    """``member`` in the exception group a task group inside an SDK raises."""
    # (a builtin from Python 3.11; on 3.10 the backport anyio itself needs)
    group = getattr(builtins, "ExceptionGroup", None) or importlib.import_module(
        "exceptiongroup").ExceptionGroup
    error: Exception = group("unhandled errors in a TaskGroup", [member])
    return error


@pytest.mark.req("TL-11")
@pytest.mark.parametrize(("error", "network"), [
    (aio.StreamError("429 Too Many Requests", network=False), False),
    (aio.StreamError("connection reset", network=True), True),
    (ConnectionResetError("reset by peer"), True),
    (ValueError("bad"), False),
    (_wrapped(ConnectionRefusedError("refused")), True),
    (_wrapped(ValueError("bad")), False),
    (_grouped(ConnectionResetError("reset")), True),
    (_grouped(ValueError("bad")), False),
])
def test_a_failed_request_says_whether_the_network_failed(error: Exception,
                                                          network: bool) -> None:
    """``StreamError`` says it; otherwise an ``OSError``, raised or among the exception's causes
    (an SDK that wraps the connection error in its own), is a network error."""
    world = World()
    trace = io.StringIO()

    async def model(command: at.RequestModelStream) -> AsyncIterator[dict[str, Any]]:
        yield chunk({"content": "Hel"})
        raise error

    effects = aio.Effects(persist=world.persist, model=model, permission=world.permission,
                          tool=world.tool)

    async def main() -> None:
        async with aio.TurnDriver("chat-1", at.TurnConfig(auto_title=False), effects,
                                  max_output_tokens=100, trace=trace) as d:
            ending = await d.run_turn(PROMPT)
            assert ending.outcome.resumable  # the user may retry (TL-11)

    run(main)
    (failed,) = [e for e in events(trace) if isinstance(e, at.StreamFailed)]
    assert failed.network is network


@pytest.mark.req("LD-7")
def test_a_lead_whose_save_raises_comes_back_as_a_draft() -> None:
    """``LeadSaveFailed``, and the reducer hands the draft back (``ReturnDraft``)."""
    world = World(iter([Act(), Act(value="read"), Act(), Act(kind="hang"), Act(kind="raise")]))
    drafts: list[at.ReturnDraft] = []

    def sink(notice: at.Notice) -> None:
        if isinstance(notice, at.ReturnDraft):
            drafts.append(notice)

    async def main() -> None:
        async with driver(world, io.StringIO(), on_notice=sink) as d:
            await d.send(PROMPT)
            await when(lambda: d.state.phase is at.TurnPhase.RUNNING_TOOL)
            await d.send(at.LeadSubmitted(chat_id="chat-1", lead_id="l1", text="also X"))
            await when(lambda: bool(drafts))  # (settled() would wait for the running tool)
            await d.send(at.StopPressed())
            await d.turn_ended("t1")

    run(main)
    assert [(d.lead_id, d.reason) for d in drafts] == [("l1", at.DraftReason.SAVE_FAILED)]


@pytest.mark.parametrize("namer", ["raises", "none"])
def test_a_raising_title_effect_is_a_failed_title(namer: str) -> None:
    """``TitleFailed``; and a host with no namer at all gets the same."""
    world = World()
    trace = io.StringIO()

    async def title(command: at.RequestTitle) -> str:
        raise RuntimeError("the namer is down")

    effects = aio.Effects(persist=world.persist, model=world.model, permission=world.permission,
                          tool=world.tool, title=title if namer == "raises" else None)

    async def main() -> None:
        async with aio.TurnDriver("chat-1", at.TurnConfig(), effects, max_output_tokens=100,
                                  trace=trace) as d:
            await d.run_turn(PROMPT)

    run(main)
    (failed,) = [e for e in events(trace) if isinstance(e, at.TitleFailed)]
    assert failed.reason == ("RuntimeError: the namer is down" if namer == "raises"
                             else "no namer")


def test_keyboard_interrupt_in_an_effect_ends_the_driver_cleanly() -> None:
    """``KeyboardInterrupt`` is not a failure event: every task ends, the trace is ended, and
    the interrupt reaches the host."""
    world = World()
    trace = io.StringIO()

    async def persist(command: at.Persist) -> None:
        raise KeyboardInterrupt

    effects = aio.Effects(persist=persist, model=world.model, permission=world.permission,
                          tool=world.tool)

    async def main() -> None:
        async with aio.TurnDriver("chat-1", at.TurnConfig(), effects, max_output_tokens=100,
                                  trace=trace) as d:
            await d.run_turn(PROMPT)

    with pytest.raises(KeyboardInterrupt):
        run(main)
    assert read_trace(trace.getvalue()).steps  # complete, with its end line and digest
    assert world.running == 0


def test_cancelling_the_driver_ends_it_cleanly() -> None:
    """The host cancels the scope the driver runs in: every effect is cancelled, the trace
    ends, nothing is left running."""
    world = World(iter([Act(), Act(kind="hang")]))
    trace = io.StringIO()

    async def main() -> None:
        with anyio.CancelScope() as scope:
            async with driver(world, trace) as d:
                await d.send(PROMPT)
                await when(lambda: d.state.phase is at.TurnPhase.STREAMING)
                scope.cancel()
                await anyio.sleep_forever()

    run(main)
    assert world.running == 0
    assert checks_clean(trace)


# --- input from any task ----------------------------------------------------------------------


@pytest.mark.req("LD-8")
def test_a_lead_typed_from_another_task_reaches_the_next_request() -> None:
    """The user types a Lead in their own task while a tool runs: it is saved and the next
    request carries it."""
    world = World(iter([Act(), Act(value="read"), Act(), Act(pause=40)]))
    trace = io.StringIO()

    async def user(d: aio.TurnDriver) -> None:
        await when(lambda: d.state.phase is at.TurnPhase.RUNNING_TOOL)
        d.send_nowait(at.LeadSubmitted(chat_id="chat-1", lead_id="l1", text="Use tabs"))

    async def main() -> None:
        async with driver(world, trace) as d, anyio.create_task_group() as tg:
            tg.start_soon(user, d)
            await d.run_turn(PROMPT)

    run(main)
    requests = [c for c in commands(trace) if isinstance(c, at.RequestModelStream)]
    assert [r.lead_ids for r in requests] == [(), ("l1",)]


def test_send_gives_the_commands_and_raises_a_refusal() -> None:
    """``send`` returns what the input caused; an input the reducer refuses raises its
    ``ProtocolError`` in the sender, changes nothing, and the driver runs on."""
    world = World(iter([Act(), Act(value="read"), Act(), Act(kind="hang")]))

    async def main() -> None:
        async with driver(world, io.StringIO()) as d:
            await d.send(PROMPT)
            await when(lambda: d.state.phase is at.TurnPhase.RUNNING_TOOL)
            with pytest.raises(at.ProtocolError):
                await d.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="x"))
            d.send_nowait(at.PromptSubmitted(turn_id="t3", message_id="m3", text="y"))
            done = await d.send(at.StopPressed())
            assert any(isinstance(c, at.CancelTool) for c in done)
            await d.turn_ended("t1")
            assert [type(e).__name__ for e, _ in d.refused] == ["PromptSubmitted"]

    run(main)


def test_answers_are_the_drivers_to_send() -> None:
    """An answering event from the host is refused at once: the driver owns the answers."""
    async def main() -> None:
        async with driver(World(), io.StringIO()) as d:
            with pytest.raises(TypeError):
                d.send_nowait(at.Persisted(key="t1/p1"))

    run(main)


# --- done and closing -------------------------------------------------------------------------


def test_turn_ended_waits_for_late_answers() -> None:
    """After ``EndTurn`` a stopped stream may still be closing: ``turn_ended`` returns once it
    has."""
    world = World(iter([Act(), Act(kind="hang")]))
    closed_at_end: list[str] = []

    async def main() -> None:
        async with driver(world, io.StringIO()) as d:
            await d.send(PROMPT)
            await when(lambda: d.state.phase is at.TurnPhase.STREAMING)
            d.send_nowait(at.StopPressed())
            await d.turn_ended("t1")
            closed_at_end.extend(world.closed_streams)
            assert world.running == 0

    run(main)
    assert closed_at_end == ["t1/r1"]


@pytest.mark.req("TL-5")
def test_closing_halts_the_turn_and_hands_back_what_is_owed() -> None:
    """Closing mid-turn halts it (the running read is asked to stop), and what the turn still
    owes comes back: here the tool result whose save failed."""
    world = World(iter([Act(), Act(value="read"), Act(), Act(kind="hang"), Act(kind="raise")]))
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            await d.send(PROMPT)
            await when(lambda: d.state.phase is at.TurnPhase.RUNNING_TOOL)
            closed = await d.aclose("the app quits")
            (unsaved,) = closed.unsaved
            assert [type(r).__name__ for r in unsaved.records] == ["ToolResultRecord"]
            ending = next(n for n in closed.notices if isinstance(n, at.EndTurn))
            assert ending.outcome.kind is at.OutcomeKind.HALTED
            with pytest.raises(aio.DriverClosed):
                d.send_nowait(at.StopPressed())

    run(main)
    assert world.stopped == ["call-1"]
    assert world.running == 0
    assert checks_clean(trace)


def test_leaving_the_block_closes_the_driver() -> None:
    """The end of ``async with`` is a close: the trace has its end line, nothing runs on."""
    world = World()
    trace = io.StringIO()

    async def main() -> None:
        async with driver(world, trace) as d:
            await d.run_turn(PROMPT)

    run(main)
    assert isinstance(events(trace)[-1], at.CloseChat)
    assert checks_clean(trace)


def test_holding_natural_stops_needs_the_effect() -> None:
    """A configuration that asks ``DecideNaturalStop`` without an effect to answer it would
    hang: it is refused when the driver is made."""
    with pytest.raises(ValueError, match="natural_stop"):
        driver(World(), io.StringIO(), config=at.TurnConfig(hold_natural_stops=True))


def test_a_text_only_answer_finishes() -> None:
    """The plainest turn: one text response."""
    world = World()

    async def model(command: at.RequestModelStream) -> AsyncIterator[dict[str, Any]]:
        for item in text_chunks("Hello."):
            yield item

    effects = aio.Effects(persist=world.persist, model=model, permission=world.permission,
                          tool=world.tool)

    async def main() -> None:
        async with aio.TurnDriver("chat-1", at.TurnConfig(), effects,
                                  max_output_tokens=None) as d:
            ending = await d.run_turn(PROMPT)
            assert ending.outcome.kind is at.OutcomeKind.FINISHED

    run(main)


def test_import_agentturn_loads_neither_the_driver_nor_anyio() -> None:
    """The driver is an optional layer: ``import agentturn`` (and its session) load neither
    ``agentturn.aio`` nor ``anyio``."""
    import subprocess
    import sys

    code = ("import sys, agentturn, agentturn.session; "
            "print([m for m in ('agentturn.aio', 'anyio') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_a_driver_runs_once() -> None:
    """A driver is one run of one chat: entering it again is refused."""
    async def main() -> None:
        d = driver(World(), io.StringIO())
        async with d:
            pass
        with pytest.raises(aio.DriverClosed):
            async with d:
                pass

    run(main)
