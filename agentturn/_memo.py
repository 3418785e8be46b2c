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

A function of one argument or of two (most are: a state, a part of one, a part and the
configuration) gets a wrapper written out for that many, which compares the arguments
themselves instead of tuples of them; its behaviour is the general one's.

This is a speed trick for checkers, kept in this one place. The memory is replaced whole, never
changed in place, so a caller in another thread always reads a consistent one. A remembered
answer is shared: functions that use this return immutable values.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

__all__ = ["remember_recent"]

P = ParamSpec("P")
R = TypeVar("R")
#: Code flags of a function that takes ``*args`` or ``**kwargs``.
_VARIADIC = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS


def remember_recent(size: int) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function of positional, frozen arguments to remember its last ``size``
    answers, each under its arguments compared by identity."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        recent: list[tuple[tuple[Any, Any], ...]] = [()]
        code = getattr(function, "__code__", None)
        if code is not None and code.co_argcount == 1 and not code.co_flags & _VARIADIC:
            # A function of one argument (most are: a state, or one part of it): its memory
            # is keyed by that argument alone, which saves packing and comparing tuples on a
            # path a checker takes several times per step.
            @functools.wraps(function)
            def remembered_one(*args: Any, **kwargs: Any) -> Any:
                if kwargs or len(args) != 1:
                    return function(*args, **kwargs)
                arg = args[0]
                entries = recent[0]
                for key, answer in entries:
                    if key is arg:
                        return answer
                answer = function(arg)  # type: ignore[call-arg]
                recent[0] = ((arg, answer), *entries[:size - 1])
                return answer

            return cast(Callable[P, R], remembered_one)

        if code is not None and code.co_argcount == 2 and not code.co_flags & _VARIADIC:
            # Two arguments (a part and the configuration, say): the same, written out.
            @functools.wraps(function)
            def remembered_two(*args: Any, **kwargs: Any) -> Any:
                if kwargs or len(args) != 2:
                    return function(*args, **kwargs)
                first, second = args
                entries = recent[0]
                for key, answer in entries:
                    if key[0] is first and key[1] is second:
                        return answer
                answer = function(first, second)  # type: ignore[call-arg]
                recent[0] = ((args, answer), *entries[:size - 1])
                return answer

            return cast(Callable[P, R], remembered_two)

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
