"""Clocks: where the driver's timers wait, so a test can hold time in its hand.

Theory of operation
-------------------
The reducers ask for a wait with ``StartTimer(key, seconds)``; the driver reads the clock's
``time()`` when it carries the command out, so the deadline is fixed at once (a test that
advances the clock right after the command was carried out reaches it, whether or not the
timer's task has started yet), and runs one task per timer that awaits
``clock.sleep_until(deadline)`` and then answers ``TimerFired(key)``, unless
``CancelTimer(key)`` cancelled the task first. The clock is the only thing the timer reads, so
it is injectable: :class:`SystemClock` (the default) sleeps on the event loop's clock;
:class:`ManualClock` never moves on its own, and ``advance(seconds)`` wakes every sleeper whose
deadline it reaches (aioquic's tests advance a hand-held ``now`` the same way).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Protocol

import anyio
import anyio.lowlevel

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """What a timer waits on: the time now, and a sleep until a deadline of that time."""

    def time(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class SystemClock:
    """The event loop's clock (``anyio.current_time``, ``anyio.sleep_until``)."""

    def time(self) -> float:
        return anyio.current_time()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep_until(deadline)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told: ``advance(seconds)`` wakes the sleepers it reaches."""

    def __init__(self) -> None:
        #: Seconds advanced since it was made.
        self.now = 0.0
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._order = itertools.count()

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting."""
        return sum(not event.is_set() for _, _, event in self._sleepers)

    def next_deadline(self) -> float | None:
        """When the earliest sleep still waiting is due (``None``: no sleep waits)."""
        return min((deadline for deadline, _, event in self._sleepers if not event.is_set()),
                   default=None)

    def time(self) -> float:
        return self.now

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self.now:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        heapq.heappush(self._sleepers, (deadline, next(self._order), event))
        try:
            await event.wait()
        finally:
            event.set()  # a sleep cancelled is no longer waited for

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self.now + seconds)

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds`` and wake every sleep whose deadline has come."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.now += seconds
        while self._sleepers and self._sleepers[0][0] <= self.now:
            heapq.heappop(self._sleepers)[2].set()
