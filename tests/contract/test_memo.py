"""The checkers' memory of recent answers (``agentturn._memo``): by identity, bounded."""

from __future__ import annotations

from agentturn._memo import remember_recent


def test_answers_are_remembered_by_identity_for_the_last_few_arguments() -> None:
    """An answer is reused only for the very same argument objects, and only the last
    ``size`` answers computed are kept; equal but distinct arguments are asked again."""
    calls: list[object] = []

    @remember_recent(2)
    def ask(value: object) -> tuple[object, ...]:
        calls.append(value)
        return (value,)

    a, b, c = [1], [1], [2]            # a and b are equal, not identical
    assert ask(a) == ([1],) and ask(a) is ask(a)
    assert calls == [a]
    ask(b)
    assert calls == [a, b]             # equal is not enough
    ask(a)
    assert calls == [a, b]             # still among the last two
    ask(c)                             # the oldest computed answer (a's) goes
    ask(b)
    assert calls == [a, b, c]
    ask(a)
    assert calls == [a, b, c, a]


def test_keyword_calls_are_answered_but_not_remembered() -> None:
    """A call with keywords is passed through and leaves the memory as it was."""
    calls: list[int] = []

    @remember_recent(1)
    def ask(value: int, *, extra: int = 0) -> int:
        calls.append(value)
        return value + extra

    key = 1000
    assert ask(key, extra=1) == 1001 and ask(key, extra=1) == 1001
    assert calls == [key, key]
