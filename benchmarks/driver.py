"""Benchmark: what the driver (``agentturn.aio``) adds to a reduce; many sessions in a process.

Run:  python benchmarks/driver.py [--repeats K] [--sessions N] [--active M]
      (the instruction count is ``instructions.py``'s, which calls :func:`child`)

The session measured (:func:`one_session`): a ``SessionDriver`` with **no-op effects**
(:class:`Quiet`: ``persist`` keeps nothing, the model yields prebuilt Chat Completions chunks,
the tool returns a prebuilt result at once, no trace) runs one prompt through ``ROUNDS`` tool
rounds of one call each and a final text, then is closed by leaving its ``async with``
(``CloseRequested``). Its events, recorded once from the driver's own trace
(:func:`record_events`), are what the **bare reduce** (:func:`bare`) replays: ``session.reduce``
from ``Session.create`` over the same events, ready-made. Both include making the state; the
driven one also makes the driver, its task group and its queue, and closes them.

* **driver overhead per event over the reduce**: (driven - bare) / bare, per event. DESIGN.md's
  target is at most 1.0 ("a driven event costs at most two reduces"), counted in instructions by
  ``instructions.py`` (whole processes, fixed hash seed, the second pass counted) and printed
  here in CPU time from one interleaved run (``--repeats`` pairs, order alternated, median of
  the paired ratios);
* **memory per idle session** (:func:`memory`, a fresh process each): ``--sessions`` sessions
  started at once, each idle after one finished turn (its ``async with`` still open, its task
  waiting), measured with ``tracemalloc`` (Python allocations only) in one process and as the
  RSS difference (``/proc/self/statm``, allocator overhead and fragmentation included) in
  another, against the same process before the sessions started (after one warm session, so
  lazy imports and caches are not counted). Target: at most 64 KB;
* **events per second per core with ``--active`` sessions**: that many sessions running their
  turn concurrently on one event loop, events reduced over the process's CPU seconds.

The event loop is asyncio's (``anyio.run``'s default backend). This is a measurement, not a
test: absolute numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel

import agentturn as at
from agentturn import aio
from agentturn import session as se
from agentturn.engines import ChatCompletionsStream
from agentturn.trace import read_trace

#: Tool rounds of the measured turn (one call each), before its final text.
ROUNDS = 4
PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="What do my notes say?")


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
            "model": "scripted", "choices": [{"index": 0, "delta": delta,
                                              "finish_reason": finish}]}


def _call_chunks(number: int) -> tuple[dict[str, Any], ...]:
    call = {"index": 0, "id": f"call-{number}", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}
    return (_chunk({"role": "assistant", "content": "", "tool_calls": [call]}),
            _chunk({}, "tool_calls"))


#: The engine's answers by request number: ``ROUNDS`` tool calls, then a text.
REPLIES = {number: _call_chunks(number) for number in range(1, ROUNDS + 1)}
TEXT = (_chunk({"role": "assistant", "content": "The notes say: ship on Friday."}),
        _chunk({}, "stop"))
RESULT = aio.ToolResult(output="ship on Friday")


class Quiet:
    """No-op effects: nothing kept, nothing awaited, every answer prebuilt."""

    async def persist(self, command: at.Persist) -> None:
        return None

    async def model(self, command: at.RequestModelStream) -> AsyncIterator[dict[str, Any]]:
        for wire in REPLIES.get(int(command.request_id.rpartition("/r")[2]), TEXT):
            yield wire

    async def permission(self, command: at.AskPermission) -> at.PermissionDecision:
        return at.PermissionDecision.ALLOW

    async def tool(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        return RESULT

    def effects(self) -> aio.Effects:
        return aio.Effects(persist=self.persist, model=self.model,
                           permission=self.permission, tool=self.tool)


def config(number: int = 0) -> se.SessionConfig:
    return se.SessionConfig(chat_id=f"chat-{number}", turn=at.TurnConfig(auto_title=False))


CONFIG = config()


async def one_session(trace: io.StringIO | None = None) -> None:
    """One driven session: the prompt, its turn to the end, the close."""
    async with aio.SessionDriver(CONFIG, Quiet().effects(), max_output_tokens=1024,
                                 trace=trace) as driver:
        await driver.send(PROMPT)
        await driver.turn_ended("t1")


def record_events() -> list[at.Event]:
    """The events one driven session reduces, in its order (from its trace)."""
    trace = io.StringIO()
    anyio.run(one_session, trace)
    return [step.event for step in read_trace(trace.getvalue()).steps]


def bare(events: list[at.Event], times: int) -> None:
    """``session.reduce`` over ``events``, ``times`` times, from a new state each time."""
    reduce, create = se.reduce, se.SessionState.create
    for _ in range(times):
        state = create(CONFIG)
        for event in events:
            state = reduce(state, event).state


async def driven(times: int) -> None:
    for _ in range(times):
        await one_session()


def wire(times: int) -> None:
    """The engine accumulator's share of a driven session, alone: ``ChatCompletionsStream``
    over the session's replies (``ROUNDS`` tool calls and the text), ``times`` times."""
    replies = [*REPLIES.values(), TEXT]
    for _ in range(times):
        for number, chunks in enumerate(replies, 1):
            accumulator = ChatCompletionsStream.start(f"t1/r{number}", max_output_tokens=1024)
            for chunk in chunks:
                accumulator = accumulator.feed(chunk)
            accumulator.finish()


def child(what: str, times: int) -> int:
    """``instructions.py``'s measured program: a warm pass, then ``times`` passes of ``what``
    (``driven`` sessions, their ``bare`` reduce, or their ``wire`` accumulation alone); returns
    the events per pass."""
    events = record_events()  # in both processes of a difference
    if what == "bare":
        bare(events, 1 + times)
    elif what == "wire":
        wire(1 + times)
    else:
        anyio.run(driven, 1 + times)
    return len(events)


#: How many of a primitive one pass of :func:`primitive` runs.
PRIMITIVES_PER_PASS = 2000


def primitive(what: str, times: int) -> int:
    """``instructions.py``'s measure of one anyio primitive: ``times`` passes of
    :data:`PRIMITIVES_PER_PASS` each, on one event loop:
    ``spawn`` (a no-op task started with ``start_soon`` and run to its end), ``switch`` (a
    checkpoint: the task yields and the loop runs once), ``scope`` (a ``CancelScope`` entered
    and left), ``event`` (an ``anyio.Event`` made and set). Returns the primitives per pass."""
    count = PRIMITIVES_PER_PASS * times

    async def nothing() -> None:
        pass

    async def run() -> None:
        if what == "spawn":
            async with anyio.create_task_group() as group:
                for _ in range(count):
                    group.start_soon(nothing)
                    await anyio.lowlevel.checkpoint()
        elif what == "switch":
            for _ in range(count):
                await anyio.lowlevel.checkpoint()
        elif what == "scope":
            for _ in range(count):
                with anyio.CancelScope():
                    pass
        elif what == "event":
            for _ in range(count):
                anyio.Event().set()
        else:
            raise ValueError(f"no primitive {what!r}")

    anyio.run(run)
    return PRIMITIVES_PER_PASS


# --- CPU time, interleaved ------------------------------------------------------------------


def cpu_ratio(events: list[at.Event], repeats: int, passes: int) -> tuple[list[float],
                                                                           list[float],
                                                                           list[float]]:
    """Per repeat: driven and bare CPU ns per event (order alternated), and their ratio."""
    driven_ns, bare_ns, ratios = [], [], []

    async def run() -> None:
        await driven(passes)  # warm
        bare(events, passes)
        for repeat in range(repeats):
            pair: dict[str, float] = {}
            for what in (("driven", "bare") if repeat % 2 == 0 else ("bare", "driven")):
                started = time.process_time_ns()
                if what == "driven":
                    await driven(passes)
                else:
                    bare(events, passes)
                pair[what] = (time.process_time_ns() - started) / (passes * len(events))
            driven_ns.append(pair["driven"])
            bare_ns.append(pair["bare"])
            ratios.append(pair["driven"] / pair["bare"])

    anyio.run(run)
    return driven_ns, bare_ns, ratios


# --- many sessions ----------------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def _many(count: int, measure: Callable[[], Awaitable[None]] | None) -> None:
    """``count`` sessions on one task group, each idle after one finished turn; ``measure``
    runs when all of them are, then they close."""
    all_idle, idle = anyio.Event(), 0

    async def one(number: int) -> None:
        nonlocal idle
        async with aio.SessionDriver(config(number), Quiet().effects(),
                                     max_output_tokens=1024) as driver:
            await driver.send(at.PromptSubmitted(turn_id="t1", message_id="m1",
                                                 text="What do my notes say?"))
            await driver.turn_ended("t1")
            await driver.quiescent()
            idle += 1
            if idle == count:
                all_idle.set()
            await all_idle.wait()

    async with anyio.create_task_group() as group:
        for number in range(count):
            group.start_soon(one, number)
        await all_idle.wait()
        if measure is not None:
            await measure()


def memory(count: int, how: str) -> dict[str, Any]:
    """Bytes per idle session (``how``: ``tracemalloc`` or ``rss``), in this process."""
    found: dict[str, Any] = {}

    async def run() -> None:
        await _many(1, None)  # warm: lazy imports, caches, the first driver's code paths
        gc.collect()
        if how == "tracemalloc":
            tracemalloc.start(1)
            before = tracemalloc.take_snapshot()
            base = tracemalloc.get_traced_memory()[0]
        else:
            base = _rss()

        async def measure() -> None:
            gc.collect()
            if how == "tracemalloc":
                found["bytes"] = (tracemalloc.get_traced_memory()[0] - base) / count
                after = tracemalloc.take_snapshot()
                top = after.compare_to(before, "filename")[:12]
                found["top"] = [("/".join(str(s.traceback[0].filename).split("/")[-2:]),
                                 s.size_diff / count) for s in top]
            else:
                found["bytes"] = (_rss() - base) / count

        await _many(count, measure)
        if how == "tracemalloc":
            tracemalloc.stop()

    anyio.run(run)
    return found


def active(count: int) -> tuple[float, int]:
    """Events per CPU second with ``count`` sessions running their turn at once."""
    events = len(record_events())
    anyio.run(_many, 50, None)  # warm
    started = time.process_time()
    anyio.run(_many, count, None)
    seconds = time.process_time() - started
    # each session's events are those of one_session: the turn, then its close on leaving
    return count * events / seconds, count * events


def _fresh(*args: str) -> Any:
    """Run this file with ``args`` in a fresh interpreter; its JSON answer."""
    result = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                            capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": "0"})
    return json.loads(result.stdout)


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    q1, _, q3 = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else ordered * 3
    return (f"median {statistics.median(ordered):.2f}, IQR {q1:.2f}-{q3:.2f}, "
            f"range {ordered[0]:.2f}-{ordered[-1]:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21, help="interleaved CPU-time pairs")
    parser.add_argument("--passes", type=int, default=20, help="sessions per timed sample")
    parser.add_argument("--sessions", type=int, default=10_000, help="idle sessions at once")
    parser.add_argument("--active", type=int, default=1_000, help="sessions running at once")
    parser.add_argument("--memory", choices=("tracemalloc", "rss"), help=argparse.SUPPRESS)
    parser.add_argument("--rate", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory:
        print(json.dumps(memory(args.sessions, args.memory)))
        return 0
    if args.rate:
        print(json.dumps(active(args.active)))
        return 0

    events = record_events()
    kinds: dict[str, int] = {}
    for event in events:
        kinds[type(event).__name__] = kinds.get(type(event).__name__, 0) + 1
    print(f"python {sys.version.split()[0]}; anyio on asyncio; {len(events)} events per "
          f"session: " + ", ".join(f"{name} {n}" for name, n in
                                   sorted(kinds.items(), key=lambda x: -x[1])))
    driven_ns, bare_ns, ratios = cpu_ratio(events, args.repeats, args.passes)
    print(f"driven event (no-op effects), CPU ns: {_spread(driven_ns)}")
    print(f"bare reduce of the same events, CPU ns: {_spread(bare_ns)}")
    overheads = [ratio - 1 for ratio in ratios]
    print(f"cpu driver overhead/reduce: {statistics.median(overheads):.2f}")
    print(f"  paired: {_spread(overheads)} ({args.repeats} pairs of {args.passes} sessions)")

    for how in ("tracemalloc", "rss"):
        found = _fresh("--memory", how, "--sessions", str(args.sessions))
        print(f"bytes per idle session ({how}, {args.sessions:,} at once): "
              f"{found['bytes']:,.0f}")
        for where, size in found.get("top", []):
            print(f"  {where}: {size:,.0f}")
    rate, total = _fresh("--rate", "--active", str(args.active))
    print(f"events per second per core, {args.active:,} sessions active: {rate:,.0f}")
    print(f"  ({total:,} events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
