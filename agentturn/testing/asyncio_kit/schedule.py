"""Moves, choosers and quiescence: how the kit decides what happens next, and when to decide.

Theory of operation
-------------------
The kit runs the real driver on asyncio, and only ever decides at a *quiescent* point: every
task (the driver's loop, every effect task, whatever the host spawned) is blocked, waiting on
the world or on the driver. :func:`settle` finds that point without a wall clock: it yields to
the event loop until nothing else is ready to run (asyncio's ready queue is empty when this
task resumes). A host that polls (``sleep(0)`` in a loop) or swallows its own cancellation
never settles; :func:`settle` then gives up after a bounded number of turns and says so.

At a quiescent point the runner lists the moves possible now, each with a weight and a kind
(``storage:ok``, ``user:stop``), the plainest first (end the oldest job plainly), and a chooser
picks one: :class:`Drawn` from hypothesis's choice sequence (one draw to go on, one for the
move, read through a fixed table of kinds so a draw means the same move wherever the shrinker
moves it: deleting a move's draws deletes the move, and the smallest draws are the plainest
world), :class:`Listed` from a written program
(:func:`agentturn.testing.asyncio_kit.replay`). A :class:`Move` prints as the call that makes
it (``answer("storage#1", "ok")``, ``user("stop")``, ``tick()``), so a found schedule prints as
a test a host author pastes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

__all__ = ["Chooser", "Drawn", "Listed", "Move", "ProgramMismatch", "answer", "settle", "tick",
           "user"]

#: How many event-loop turns :func:`settle` waits for every task to block.
SETTLE_TURNS = 2000


@attrs.frozen
class Move:
    """One move of the world: a job ended with an outcome, a user action, or time passing."""

    kind: str  # "answer", "user", "tick"
    target: str = ""  # the job's name, or the user's action
    outcome: str = ""

    def __repr__(self) -> str:
        if self.kind == "answer":
            return f"answer({self.target!r}, {self.outcome!r})"
        if self.kind == "user":
            return f"user({self.target!r})"
        return "tick()"


def answer(job: str, outcome: str) -> Move:
    """End the pending job ``job`` (``"storage#2"``: the kind and its number) with
    ``outcome`` (``"ok"``, ``"fail"``, ``"open"``, ``"text"`` ...)."""
    return Move("answer", job, outcome)


def user(action: str) -> Move:
    """A user action: ``prompt``, ``lead``, ``stop``, ``rename``, ``detach``, ``attach``,
    ``continue``."""
    return Move("user", action)


def tick() -> Move:
    """Time passes until the next timer the session started, or the next sleep on the world's
    clock, is due."""
    return Move("tick")


class ProgramMismatch(AssertionError):
    """A replayed program names a move that is not possible at its point (the host changed)."""


class Chooser(Protocol):
    """Where the moves come from."""

    def more(self) -> bool: ...

    def pick(self, options: Sequence[tuple[Move, int, str]]) -> Move: ...


class Drawn:
    """Moves drawn from hypothesis (``st.data()``), through its choice sequence: a note per
    draw would cost more than the move."""

    def __init__(self, data: Any, steps: int, table: Sequence[str] = ()) -> None:
        self._table = tuple(table)
        self._data = getattr(data, "conjecture_data", None)
        self._fallback = data
        self._go_on = 1.0 - 1.0 / max(steps, 2)

    def more(self) -> bool:
        if self._data is not None:
            return bool(self._data.draw_boolean(self._go_on))
        from hypothesis import strategies as st

        return bool(self._fallback.draw(st.integers(0, 49)))  # pragma: no cover

    def pick(self, options: Sequence[tuple[Move, int, str]]) -> Move:
        # One draw per move, an index into the fixed table of move kinds (bounded: the
        # shrinker minimizes it in a few steps, towards the table's first, plainest kinds).
        top = (len(self._table) or 64) - 1
        if self._data is not None:
            drawn = int(self._data.draw_integer(0, top))
        else:  # pragma: no cover
            from hypothesis import strategies as st

            drawn = int(self._fallback.draw(st.integers(0, top)))
        # A draw names the same kind of move wherever the shrinker moves it, when one of that
        # kind is possible (the fixed table: "end the oldest storage job ok"), so deleting an
        # earlier move does not change what the later ones mean; otherwise it picks among the
        # possible moves by their weights.
        if self._table:
            wanted = self._table[drawn % len(self._table)]
            for move, _, key in options:
                if key == wanted:
                    return move
        total = sum(weight for _, weight, _ in options)
        point = drawn % total
        for move, weight, _ in options:
            if point < weight:
                return move
            point -= weight
        raise AssertionError("unreachable")  # pragma: no cover


class Listed:
    """Moves from a written program, in order."""

    def __init__(self, moves: Sequence[Move]) -> None:
        self._moves = list(moves)
        self._at = 0

    def more(self) -> bool:
        return self._at < len(self._moves)

    def pick(self, options: Sequence[tuple[Move, int, str]]) -> Move:
        move = self._moves[self._at]
        self._at += 1
        if move not in {option for option, _, _ in options}:
            raise ProgramMismatch(f"move {self._at} {move!r} is not possible here; possible: "
                                  f"{[option for option, _, _ in options]}")
        return move


async def settle(turns: int = SETTLE_TURNS) -> bool:
    """Yield until every other task is blocked (``True``), or ``turns`` turns passed."""
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    for _ in range(turns):
        await asyncio.sleep(0)
        if ready is None or not ready:
            return True
    return False
