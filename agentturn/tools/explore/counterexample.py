"""A broken rule's counterexample, as a trace file and as a short program.

Theory of operation
-------------------
A :class:`~.invariants.Violation` carries the events that reproduce it from a new session of its
configuration. :func:`trace_lines` replays them with the reducer the walk used (the session's,
or a test's planted one) and writes what it did as a session trace (:mod:`agentturn.trace`), so
``agentturn check`` and ``agentturn explain`` read it: ``check`` replays it with the library's
reducer and shows where the commands differ, or which recorded rule they break; ``explain``
tells its story. An event the reducer refused is written with no commands, as a host that sent
it would have recorded it: ``check`` then stops there, naming the refusal.

:func:`program` prints the same sequence as the few lines of Python a test would hold (in the
spirit of Hypothesis's "Falsifying example"), ready to paste into a regression test.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any

import attrs

from ..._base import Command, Event
from ...errors import ProtocolError
from ...session import SessionState
from ...trace import write_trace
from .alphabet import CONFIGS, _reduce
from .invariants import Violation

__all__ = ["program", "source", "trace_lines"]


def _steps(violation: Violation) -> Iterator[tuple[Event, tuple[Command, ...]]]:
    state = SessionState.create(CONFIGS[violation.config])
    for event in violation.events:
        try:
            state, commands = _reduce(state, event)
        except ProtocolError:
            yield event, ()
            return  # a refused event ends the story: nothing after it was accepted
        yield event, commands


def trace_lines(violation: Violation) -> list[str]:
    """The counterexample as the lines of a session trace (no newlines)."""
    return list(write_trace("session", CONFIGS[violation.config], _steps(violation)))


def program(violation: Violation) -> str:
    """The counterexample as a short program that replays it and shows the broken rule."""
    lines = [
        f"# Falsifying example: {violation.rule}: {violation.detail}",
        "from agentturn import *",
        "from agentturn.guard import *",
        "from agentturn.session import *",
        "from agentturn.session import reduce",
        "from agentturn.tools.explore import CONFIGS",
        f"state = SessionState.create(CONFIGS[{violation.config!r}])",
    ]
    lines.extend(f"state, commands = reduce(state, {source(event)})"
                 for event in violation.events)
    return "\n".join(lines)


def source(value: object) -> str:
    """``value`` as Python source: a value as its constructor call with the fields that differ
    from their defaults, an enum member by its name, anything else by its ``repr``."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, tuple):
        items = [source(item) for item in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    kind: Any = type(value)
    if attrs.has(kind):
        shown = []
        for field in attrs.fields(kind):
            got = getattr(value, field.name)
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()
            if default is not attrs.NOTHING and got == default:
                continue
            shown.append(f"{field.name}={source(got)}")
        return f"{type(value).__name__}({', '.join(shown)})"
    return repr(value)
