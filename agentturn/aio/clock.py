"""Clocks: where the driver's timers wait, so a test can hold time in its hand.

Theory of operation
-------------------
The reducers ask for a wait with ``StartTimer(key, seconds)``; the driver runs one task per
timer that awaits ``clock.sleep(seconds)`` and then answers ``TimerFired(key)``, unless
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

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """What a timer waits on."""

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The event loop's clock (``anyio.sleep``)."""

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
        """How many sleeps are waiting (cancelled ones included until the next advance)."""
        return sum(not event.is_set() for _, _, event in self._sleepers)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._order), event))
        await event.wait()

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds`` and wake every sleep whose deadline has come."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.now += seconds
        while self._sleepers and self._sleepers[0][0] <= self.now:
            heapq.heappop(self._sleepers)[2].set()
