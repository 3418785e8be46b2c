"""A catalogue of realistic one-bug asyncio hosts on the driver: what host authors get wrong.

Each is the kit's reference host (``agentturn.testing.asyncio_kit.ReferenceHost``) with one
mistake a real asyncio host makes, and names the rule that must catch it.
``tests/spec_kit/test_async_catalogue.py`` checks that the async kit catches every one on three
fixed seeds within 200 examples; ``benchmarks/spec_kit_async_catalogue.py`` times the catch and
the shrink and counts the moves of the shrunk program.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, NamedTuple

import anyio

from agentturn import aio
from agentturn import commands as c
from agentturn.session import vocabulary as sv
from agentturn.testing.asyncio_kit import AsyncSpec, AsyncWorld, ReferenceHost, WorldError

#: Tasks the buggy hosts spawned: kept so asyncio does not collect them mid-run.
_SPAWNED: set[asyncio.Task[Any]] = set()


def _spawn(coroutine: Any) -> asyncio.Task[Any]:
    task = asyncio.ensure_future(coroutine)
    _SPAWNED.add(task)
    task.add_done_callback(_SPAWNED.discard)
    return task


class SwallowsSaveError(ReferenceHost):
    """Writes in a task of its own and waits for a future the task sets; a failed write is
    logged and swallowed, so the future never resolves and the turn waits forever."""

    async def persist(self, command: c.Persist) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def write() -> None:
            try:
                await ReferenceHost.persist(self, command)
                done.set_result(None)
            except Exception:
                pass  # "logged": the error never reaches the driver

        _spawn(write())
        await done


class TitlesBesideTheStream(ReferenceHost):
    """Names the chat on a second task as soon as the first request goes out, to save time,
    while the model streams (TT-3: one model stream at a time)."""

    named = False

    async def model(self, command: c.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        if not self.named:
            self.named = True
            _spawn(self.world.namer.title())
        async for chunk in super().model(command):
            yield chunk


class CancelKillsWrites(ReferenceHost):
    """Puts every tool, writes too, in the Stop signal's scope: Stop cancels a write in flight."""

    async def tool(self, command: c.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        with stop.scope() as scope:
            result = await self.world.tools.run(command.call, aio.StopSignal())
        if scope.cancelled_caught:
            return aio.ToolResult(output="stopped", cancelled=True)
        return result


class AcksLeadBeforeSave(ReferenceHost):
    """Starts the Lead's write and returns at once: ``LeadSaved`` before it is durable."""

    async def save_lead(self, command: c.SaveLead) -> None:
        self.adapter.lead_of[command.record.message_id] = command.lead_id
        _spawn(self.world.storage.write([command.record]))


class SdkRetries(ReferenceHost):
    """An SDK client configured with its own retries: a failed request is sent again by the
    client, behind the session's back (TL-6, TL-11: retries are the session's)."""

    async def model(self, command: c.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        messages = self.messages(command)
        for attempt in range(3):
            try:
                stream = await self.world.engine.create(messages)
                break
            except WorldError:
                if attempt == 2:
                    raise
        async with stream:
            async for chunk in stream:
                yield chunk


class RetriesSaves(ReferenceHost):
    """Retries a failed write, and writes without checking what storage holds: a write whose
    acknowledgement timed out had landed, so the records are stored (and sent) twice."""

    async def persist(self, command: c.Persist) -> None:
        for attempt in range(3):
            try:
                await self.world.storage.write(command.records)
                return
            except (WorldError, TimeoutError):
                if attempt == 2:
                    raise


class ShieldsItsStream(ReferenceHost):
    """Shields each read of the stream from cancellation ("a half-read chunk would corrupt the
    connection pool"): Stop's ``CancelStream`` never reaches it."""

    async def model(self, command: c.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        stream = await self.create(self.messages(command))
        while True:
            with anyio.CancelScope(shield=True):
                try:
                    chunk = await stream.__anext__()
                except StopAsyncIteration:
                    break
            yield chunk


class ToolOutlivesTheTurn(ReferenceHost):
    """On Stop, answers "cancelled" at once and lets the tool run on in the background: its
    result lands after the turn ended."""

    async def tool(self, command: c.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        running = _spawn(self.world.tools.run(command.call, aio.StopSignal()))
        stopped = _spawn(stop.wait())
        await asyncio.wait({running, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if running.done():
            stopped.cancel()
            result: aio.ToolResult = running.result()
            return result
        return aio.ToolResult(output="stopped", cancelled=True)


class TokenLimitAsAFailure(ReferenceHost):
    """Lets the SDK's "context length exceeded" error out as it is: the session hears a failed
    stream and offers a retry that is refused the same way (TL-2: its own outcome)."""

    async def model(self, command: c.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        stream = await self.world.engine.create(self.messages(command))
        async with stream:
            async for chunk in stream:
                yield chunk


class DropsDrainedMessages(ReferenceHost):
    """Passes on the client's ``hasQueuedPrompt`` and forgets its messages: what the user typed
    mid-turn never reaches the turn (SO-1)."""

    async def drain(self, command: sv.DrainMidTurnQueue) -> aio.DrainReply:
        reply = await self.world.client.drain()
        return aio.DrainReply(has_queued_prompt=reply.has_queued_prompt)


class OwnClock(aio.ManualClock):
    """A host that builds its own clock rather than using the one it is given: its timers are
    never armed on the world's time, so they never fire."""


class RearmingClock:
    """A clock adapter that arms each timer twice (a repeating timer used for a one-shot): it
    fires a whole period late."""

    def __init__(self, world: AsyncWorld) -> None:
        self.world = world

    def time(self) -> float:
        return self.world.clock.time()

    async def sleep_until(self, deadline: float) -> None:
        period = deadline - self.world.clock.time()
        await self.world.clock.sleep_until(deadline)
        await self.world.clock.sleep_until(deadline + period)


class Bug(NamedTuple):
    spec: AsyncSpec
    #: A regular expression the failure message must match: the rule that catches it.
    rule: str
    #: The requirement it breaks, for the coverage report.
    req: str
    #: Whether a turn driver has what it breaks (timers and drains are the session's).
    on_a_turn_driver: bool = True


def _host(host: type[ReferenceHost]) -> Callable[[AsyncWorld], aio.Effects]:
    return host.effects_for


CATALOGUE: dict[str, Bug] = {
    "swallows-save-error": Bug(AsyncSpec(make_effects=_host(SwallowsSaveError)),
                               r"\[liveness", "TL-5"),
    "titles-beside-the-stream": Bug(AsyncSpec(make_effects=_host(TitlesBesideTheStream)),
                                    r"one-stream|effects-ended", "TT-3"),
    "cancel-kills-writes": Bug(AsyncSpec(make_effects=_host(CancelKillsWrites)),
                               r"\[cancel, TL-8\]", "TL-8"),
    "acks-lead-before-save": Bug(AsyncSpec(make_effects=_host(AcksLeadBeforeSave)),
                                 r"\[storage|effects-ended", "LD-7"),
    "sdk-retries": Bug(AsyncSpec(make_effects=_host(SdkRetries)), r"\[one-retry", "TL-11"),
    "retries-saves": Bug(AsyncSpec(make_effects=_host(RetriesSaves)),
                         r"\[storage|engine-input", "TL-5"),
    "shields-its-stream": Bug(AsyncSpec(make_effects=_host(ShieldsItsStream)),
                              r"\[cancel|liveness", "TL-2"),
    "tool-outlives-the-turn": Bug(AsyncSpec(make_effects=_host(ToolOutlivesTheTurn)),
                                  r"tools-as-asked|effects-ended", "TL-4"),
    "token-limit-as-a-failure": Bug(AsyncSpec(make_effects=_host(TokenLimitAsAFailure)),
                                    r"\[token-limit, TL-2\]", "TL-2"),
    "drops-drained-messages": Bug(AsyncSpec(make_effects=_host(DropsDrainedMessages)),
                                  r"\[drain, SO-1\]", "SO-1", on_a_turn_driver=False),
    "timer-never-armed": Bug(AsyncSpec(make_effects=_host(ReferenceHost),
                                       make_clock=lambda world: OwnClock()),
                             r"\[timers|liveness", "SO-4", on_a_turn_driver=False),
    "timer-armed-twice": Bug(AsyncSpec(make_effects=_host(ReferenceHost),
                                       make_clock=RearmingClock), r"\[timers", "SO-4",
                             on_a_turn_driver=False),
}
