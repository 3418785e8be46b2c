"""The daemon: many ``SessionDriver``s in one task group, on one event loop.

:func:`serve` starts one task per session. Each makes its :class:`~.host.SessionHost` and
``SessionDriver``, sends the prompt (and the queued prompt, if its plan has one), waits for
each of its turns to end and for the session to be quiescent, then waits until *every* session
is idle, so that all of them are alive and idle at once, and leaves its ``async with``, which
closes the session and ends every task of its driver. Each driver writes its trace to a sink
that counts the lines (a daemon would write a file per session): the events reduced.
"""

from __future__ import annotations

import io
import time
from collections import Counter

import anyio
import attrs

import agentturn as at
from agentturn import aio
from agentturn import session as se

from .host import SessionHost, plan_for

__all__ = ["LineCount", "Summary", "serve"]


class LineCount(io.StringIO):
    """A trace sink that keeps nothing but the number of lines written."""

    def __init__(self) -> None:
        super().__init__()
        self.lines = 0

    def write(self, text: str, /) -> int:
        self.lines += text.count("\n")
        return len(text)


@attrs.frozen(kw_only=True)
class Summary:
    """What :func:`serve` did."""

    hosts: tuple[SessionHost, ...]
    #: Turns ended, by outcome (``finished``, ``cancelled`` ...).
    outcomes: dict[str, int]
    #: Events reduced, over every session (their trace lines but the header and the end).
    events: int
    #: Sessions alive at once when all were idle.
    idle_at_once: int
    #: Tasks still running once every session was closed (the main task not counted).
    tasks_left: int
    seconds: float

    def lines(self) -> list[str]:
        turns = sum(self.outcomes.values())
        by_outcome = ", ".join(f"{kind} {count}" for kind, count in sorted(self.outcomes.items()))
        return [f"sessions: {len(self.hosts)} (idle at once: {self.idle_at_once})",
                f"turns ended: {turns} ({by_outcome})",
                f"events: {self.events:,} ({self.events / self.seconds:,.0f} per second)",
                f"wall time: {self.seconds:.2f} s",
                f"tasks left: {self.tasks_left}"]


async def serve(sessions: int, rounds: int = 3) -> Summary:
    """Run ``sessions`` scripted sessions of ``rounds`` tool rounds each, concurrently."""
    hosts = [SessionHost(number, plan_for(number, rounds)) for number in range(sessions)]
    traces = [LineCount() for _ in hosts]
    all_idle = anyio.Event()
    idle = 0

    async def one(host: SessionHost, trace: LineCount) -> None:
        nonlocal idle
        async with aio.SessionDriver(host.config(), host.effects(), max_output_tokens=1024,
                                     on_notice=host.notice, trace=trace) as driver:
            host.user = driver.send_nowait
            await driver.send(at.PromptSubmitted(turn_id="t1", message_id="m1",
                                                 text="What do my notes say?"))
            if host.plan.queued:
                await driver.send(se.PromptQueued(prompt_id="q1", message_id="mq1",
                                                  text="And the deadlines?"))
            for turn_id in host.plan.expected():
                await driver.turn_ended(turn_id)
            host.waiting = await driver.quiescent()
            idle += 1
            if idle == sessions:
                all_idle.set()
            await all_idle.wait()

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for host, trace in zip(hosts, traces, strict=True):
            group.start_soon(one, host, trace)
    seconds = time.perf_counter() - started
    outcomes = Counter(kind.value for host in hosts for kind in host.outcomes.values())
    return Summary(hosts=tuple(hosts), outcomes=dict(outcomes),
                   events=sum(trace.lines - 2 for trace in traces), idle_at_once=idle,
                   tasks_left=len(anyio.get_running_tasks()) - 1, seconds=seconds)
