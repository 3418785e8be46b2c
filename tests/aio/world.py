"""A fake world for the driver tests, written as a host author would: effects from the public
API of ``agentturn.aio``, answered from a script, recording what ran.

Each effect call takes the next :class:`Act` of the script (``ok`` once it runs out): ``ok``
answers after ``pause`` scheduling points, ``raise`` raises after them, ``hang`` waits until
the driver cancels it (a stream, a dialog, a stoppable tool, a drain) or, for what nothing
cancels, answers like ``ok``. The model streams Chat Completions chunks: text, or one tool call
(``read`` and ``todo_write`` can stop when asked, ``write`` never does).
"""

from __future__ import annotations

import io
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from typing import Any

import anyio
import anyio.lowlevel
import attrs

import agentturn as at
from agentturn import aio
from agentturn import session as se
from agentturn.trace import read_trace

__all__ = ["BACKEND", "TODOS", "Act", "World", "call_chunks", "chunk", "text_chunks"]

#: A todo-write result with unfinished work: it arms the session's todo stop guard.
TODOS = {"type": "todo_list", "todos": [
    {"id": "1", "content": "port the parser", "status": "in_progress"},
    {"id": "2", "content": "write the docs", "status": "pending"}]}


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One Chat Completions chunk, as ``ChatCompletionChunk.model_dump()`` gives it."""
    return {"id": "c-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def text_chunks(text: str, finish: str = "stop") -> list[dict[str, Any]]:
    return [chunk({"role": "assistant", "content": ""}), chunk({"content": text}),
            chunk({}, finish)]


def call_chunks(call_id: str, name: str, arguments: str = "{}") -> list[dict[str, Any]]:
    return [chunk({"role": "assistant", "content": ""}),
            chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": arguments}}]}),
            chunk({}, "tool_calls")]


@attrs.frozen
class Act:
    kind: str = "ok"  # "ok", "raise", "hang"
    pause: int = 0
    #: For the model: "text", "read", "write"; for a permission: "allow", "deny";
    #: for the Stop hooks: "block" or "pass"; for a drain: a message or "".
    value: str = ""


async def pause(points: int) -> None:
    for _ in range(points):
        await anyio.lowlevel.checkpoint()


class World:
    """The effects, the record of what ran, and the invariants a test reads after the run."""

    def __init__(self, script: Iterator[Act] | None = None,
                 plan: dict[str, list[Act]] | None = None) -> None:
        self.script = script if script is not None else iter(())
        #: A script per effect ("persist", "model", "permission", "tool", "lead", "title",
        #: "hooks", "drain"), used instead of the shared one where given.
        self.plan = {kind: iter(acts) for kind, acts in (plan or {}).items()}
        self.saved: list[Any] = []
        self.streams_open = 0
        self.most_streams_open = 0
        self.running = 0  # effect calls that have started and not ended
        self.closed_streams: list[str] = []
        self.dismissed: list[str] = []
        self.stopped: list[str] = []
        self.calls = 0
        #: Set: nothing hangs from now on (a hang is answered like ``ok``).
        self.calm = False

    def next(self, kind: str) -> Act:
        act = next(self.plan.get(kind, self.script), Act())
        return attrs.evolve(act, kind="ok") if self.calm and act.kind == "hang" else act

    def effects(self) -> aio.Effects:
        return aio.Effects(persist=self.persist, model=self.model, permission=self.permission,
                           tool=self.tool, review=self.review, save_lead=self.save_lead,
                           title=self.title, stop_hooks=self.stop_hooks, drain=self.drain)

    async def _done_after(self, act: Act) -> None:
        await pause(act.pause)
        if act.kind == "raise":
            raise OSError("the world failed")

    def review(self, call: at.ToolCall) -> aio.CallReview:
        """A write needs the user's allow; a read does not."""
        return aio.CallReview(needs_permission=call.name == "write")

    async def persist(self, command: at.Persist) -> None:
        self.running += 1
        try:
            await self._done_after(self.next("persist"))
            self.saved.extend(command.records)
        finally:
            self.running -= 1

    async def save_lead(self, command: at.SaveLead) -> None:
        self.running += 1
        try:
            await self._done_after(self.next("lead"))
            self.saved.append(command.record)
        finally:
            self.running -= 1

    async def title(self, command: at.RequestTitle) -> str:
        self.running += 1
        try:
            await self._done_after(self.next("title"))
            return "A title"
        finally:
            self.running -= 1

    async def model(self, command: at.RequestModelStream) -> AsyncGenerator[dict[str, Any], None]:
        act = self.next("model")
        self.running += 1
        self.streams_open += 1
        self.most_streams_open = max(self.most_streams_open, self.streams_open)
        try:
            await self._done_after(act)
            if act.value in ("read", "write", "todo_write"):
                self.calls += 1
                wire = call_chunks(f"call-{self.calls}", act.value)
            else:
                wire = text_chunks("All done.")
            for item in wire[:-1]:
                yield item
                await pause(act.pause)
            if act.kind == "hang":
                await anyio.sleep_forever()
            yield wire[-1]
        finally:
            with anyio.CancelScope(shield=True):
                await pause(act.pause * 5)  # closing the response takes a moment
            self.closed_streams.append(command.request_id)
            self.streams_open -= 1
            self.running -= 1

    async def permission(self, command: at.AskPermission) -> at.PermissionDecision:
        act = self.next("permission")
        self.running += 1
        try:
            await self._done_after(act)
            if act.kind == "hang":
                await anyio.sleep_forever()
            return (at.PermissionDecision.DENY if act.value == "deny"
                    else at.PermissionDecision.ALLOW)
        except anyio.get_cancelled_exc_class():
            self.dismissed.append(command.call.call_id)
            raise
        finally:
            self.running -= 1

    async def tool(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        act = self.next("tool")
        self.running += 1
        try:
            if command.call.name == "write":  # a write never stops part-way
                await pause(act.pause)
                if act.kind == "raise":
                    raise OSError("disk full")
                return aio.ToolResult(output="wrote the file")
            with stop.scope() as scope:
                await self._done_after(act)
                if act.kind == "hang":
                    await anyio.sleep_forever()
            if scope.cancelled_caught:
                self.stopped.append(command.call.call_id)
                return aio.ToolResult(output="stopped before the read ended", cancelled=True)
            if command.call.name == "todo_write":
                return aio.ToolResult(output="todos saved", structured=TODOS)
            return aio.ToolResult(output="file contents")
        finally:
            self.running -= 1

    async def stop_hooks(self, command: se.RunStopHooks) -> aio.HookVerdict:
        act = self.next("hooks")
        self.running += 1
        try:
            await self._done_after(act)
            if act.value == "block":
                return aio.HookVerdict(block=True, reason="Run the tests first.")
            return aio.HookVerdict()
        finally:
            self.running -= 1

    async def drain(self, command: se.DrainMidTurnQueue) -> aio.DrainReply:
        act = self.next("drain")
        self.running += 1
        try:
            await self._done_after(act)
            if act.kind == "hang":
                await anyio.sleep_forever()
            return aio.DrainReply(messages=(act.value,) if act.value else ())
        finally:
            self.running -= 1


#: The event loop the driver tests run on: asyncio, or trio with ``AGENTTURN_AIO_BACKEND=trio``
#: (CI runs the driver's tests on both).
BACKEND = os.environ.get("AGENTTURN_AIO_BACKEND", "asyncio")


def run(main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main`` on :data:`BACKEND`, bounded to 10 seconds (a hang fails, never blocks the
    suite)."""
    async def bounded() -> None:
        with anyio.fail_after(10):
            await main()

    anyio.run(bounded, backend=BACKEND)


def events(trace: io.StringIO) -> list[at.Event]:
    """The events a driver's trace recorded, in order."""
    return [step.event for step in read_trace(trace.getvalue()).steps]


async def when(condition: Callable[[], bool]) -> None:
    """Let the other tasks run until ``condition`` holds."""
    with anyio.fail_after(5):
        while not condition():
            await anyio.sleep(0)
