"""The driver at its edges, as an outside review found them: an effect's own cancellation, a
hanging title at close, the host's exception in the ``async with`` body, waiters on a driver
that ended, a stream whose cleanup shields itself."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest
from world import chunk, run, text_chunks

import agentturn as at
from agentturn import aio

PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Write it")
WRITE = [chunk({"tool_calls": [{"index": 0, "id": "w1", "type": "function",
                                "function": {"name": "write_file", "arguments": "{}"}}]}),
         chunk({}, "tool_calls")]


class Host:
    """A host whose effects the test shapes: each field says how that effect behaves."""

    def __init__(self, replies: list[list[dict[str, Any]]], **behaviour: str) -> None:
        self.replies = replies
        self.behaviour = behaviour
        self.saved: list[at.Record] = []
        self.log: list[str] = []

    async def _cancelled_future(self) -> None:
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(future.cancel)  # the UI closed the window
        await future

    async def persist(self, command: at.Persist) -> None:
        if self.behaviour.get("persist") == "future-cancelled":
            await self._cancelled_future()
        self.saved.extend(command.records)

    async def model(self, command: at.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        try:
            for wire in self.replies.pop(0):
                yield wire
            if self.behaviour.get("model") == "hang":
                await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):  # a cleanup that awaits shields itself
                await anyio.sleep(0.01)
                self.log.append("stream closed")

    async def permission(self, command: at.AskPermission) -> at.PermissionDecision:
        if self.behaviour.get("permission") == "future-cancelled":
            await self._cancelled_future()
        return at.PermissionDecision.ALLOW

    async def tool(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        if self.behaviour.get("tool") == "future-cancelled":
            await self._cancelled_future()
        return aio.ToolResult(output="written")

    async def title(self, command: at.RequestTitle) -> str:
        await anyio.sleep_forever()
        return "never"

    def review(self, call: at.ToolCall) -> aio.CallReview:
        return aio.CallReview(needs_permission=call.name == "write_file")

    def effects(self) -> aio.Effects:
        return aio.Effects(persist=self.persist, model=self.model, permission=self.permission,
                           tool=self.tool, title=self.title, review=self.review)



def turn_driver(host: Host, trace: io.StringIO | None = None, **config: Any) -> aio.TurnDriver:
    return aio.TurnDriver("chat-1", at.TurnConfig(**{"auto_title": False, **config}),
                          host.effects(), max_output_tokens=1000, trace=trace)


@pytest.mark.req("TL-3", "TL-5")
@pytest.mark.parametrize(("effect", "replies", "failure"), [
    ("persist", [], at.PersistFailed),
    ("permission", [WRITE], at.PermissionDecided),
    ("tool", [WRITE], at.ToolFinished),
], ids=["persist", "permission", "tool"])
def test_an_effect_whose_own_future_is_cancelled_fails_like_any_effect(
        effect: str, replies: list[list[dict[str, Any]]], failure: type) -> None:
    """An effect that awaits a future the UI cancels (a dialog closed with its window) raises a
    cancellation nobody asked the driver for: that is the effect's failure event (a write
    failed, a dialog cancelled, a tool's error), never a silent end of the driver, and the turn
    ends with an outcome."""
    host = Host([*replies, text_chunks("done")], **{effect: "future-cancelled"})
    trace = io.StringIO()
    endings: list[at.EndTurn] = []

    async def main() -> None:
        async with turn_driver(host, trace) as driver:
            await driver.send(PROMPT)
            endings.append(await driver.turn_ended("t1"))

    run(main)
    from agentturn.trace import read_trace
    fed = [step.event for step in read_trace(trace.getvalue()).steps]
    assert any(isinstance(event, failure) for event in fed)
    if failure is at.PermissionDecided:
        assert at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.CANCEL) in fed
    if failure is at.ToolFinished:
        assert any(isinstance(e, at.ToolFinished) and e.error for e in fed)
    assert len(endings) == 1


def test_a_hanging_title_never_holds_up_the_close() -> None:
    """A naming request that never answers is cancelled when the driver closes and answered as
    a failed naming request: nobody will see the title of a closed chat, and the close
    returns. (``turn_ended`` waits for it, as it waits for every late answer.)"""
    host = Host([text_chunks("Hello.")])
    notices: list[at.Command] = []
    trace = io.StringIO()

    async def main() -> None:
        async with aio.TurnDriver("chat-1", at.TurnConfig(), host.effects(),
                                  max_output_tokens=1000, on_notice=notices.append,
                                  trace=trace) as driver:
            await driver.send(PROMPT)
            while not any(isinstance(n, at.EndTurn) for n in notices):
                await anyio.sleep(0.001)
            with anyio.fail_after(2):
                await driver.aclose()

    run(main)
    from agentturn.trace import read_trace
    fed = [step.event for step in read_trace(trace.getvalue()).steps]
    assert at.TitleFailed(request_id="chat-1/title-1", reason="the chat is closing") in fed


@pytest.mark.parametrize("error", [TimeoutError(), ValueError("a bug of the host")],
                         ids=["timeout", "bug"])
def test_the_hosts_own_exception_comes_out_as_it_was_raised(error: Exception) -> None:
    """An exception of the ``async with`` body (a ``fail_after`` that ran out, a bug) ends the
    driver and comes out unwrapped: ``except TimeoutError`` around the driver works."""
    host = Host([text_chunks("Hello.")], model="hang")

    async def main() -> None:
        async with turn_driver(host) as driver:
            await driver.send(PROMPT)
            raise error

    with pytest.raises(type(error)):
        anyio.run(main)


def test_waiters_are_told_when_the_driver_ends() -> None:
    """``turn_ended`` for a turn that never ends raises ``DriverClosed`` once the driver has
    ended, and ``settled`` returns; neither hangs."""
    host = Host([text_chunks("Hello.")])
    results: list[str] = []

    async def main() -> None:
        async with turn_driver(host) as driver:
            await driver.run_turn(PROMPT)
        with anyio.fail_after(2):
            await driver.settled()
            with pytest.raises(aio.DriverClosed):
                await driver.turn_ended("t-never")
        results.append("told")

    run(main)
    assert results == ["told"]


@pytest.mark.req("TL-8")
def test_a_stream_cleanup_that_shields_itself_runs_to_its_end_on_stop() -> None:
    """Stop while the stream waits: the cancellation reaches the effect where it waits, and a
    cleanup that shields itself (as an SDK's response close does) runs to its end."""
    host = Host([[chunk({"role": "assistant", "content": "Hel"})]], model="hang")

    async def main() -> None:
        async with turn_driver(host) as driver:
            await driver.send(PROMPT)
            while driver.state.phase is not at.TurnPhase.STREAMING:
                await anyio.sleep(0)
            await driver.send(at.StopPressed())
            ending = await driver.turn_ended("t1")
            assert ending.outcome.kind is at.OutcomeKind.CANCELLED

    run(main)
    assert host.log == ["stream closed"]
