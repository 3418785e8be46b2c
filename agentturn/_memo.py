"""Remembering the last answers of a function of frozen values, by identity.

Theory of operation
-------------------
A model checker or a fuzzer asks the same questions about the same state object several times
in a row (its moves, the step's check, *never stuck*), and a random walk goes on from the state
its last step made. States are frozen, so an answer about one never changes; and a remembered
state is kept alive by the memory itself, so its ``id`` cannot be reused by another object.
:func:`remember_recent` keeps the last few answers it computed, each under its argument tuple
compared by identity (never by equality, which would cost more than most answers); a new one
pushes out the oldest.

This is a speed trick for checkers, kept in this one place. The memory is replaced whole, never
changed in place, so a caller in another thread always reads a consistent one. A remembered
answer is shared: functions that use this return immutable values.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

__all__ = ["remember_recent"]

P = ParamSpec("P")
R = TypeVar("R")


def remember_recent(size: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function of positional, frozen arguments to remember its last ``size``
    answers, each under its arguments compared by identity."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        recent: list[tuple[tuple[tuple[Any, ...], Any], ...]] = [()]

        @functools.wraps(function)
        def remembered(*args: P.args, **kwargs: P.kwargs) -> R:
            if kwargs:  # only positional calls are remembered
                return function(*args, **kwargs)
            entries = recent[0]
            for keys, answer in entries:
                if len(keys) == len(args) and all(map(operator.is_, keys, args)):
                    return answer  # type: ignore[no-any-return]
            answer = function(*args, **kwargs)  # kwargs is empty here
            recent[0] = ((args, answer), *entries[:size - 1])
            return answer

        return remembered

    return decorate
