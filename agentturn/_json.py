"""JSON values: what an event's free-form field may hold, and how a trace line is parsed.

Theory of operation
-------------------
A few event fields carry the host's own data unread by agentturn's types: a tool's structured
result, a todo envelope, a tool call's parsed arguments. Traces write them as JSON and read them
back, so a value is accepted only if it survives that round trip exactly: ``None``, ``bool``,
``int``, finite ``float``, ``str``, ``list`` and ``dict`` with ``str`` keys, nested at most
:data:`MAX_DEPTH` deep, integers of at most :data:`MAX_INT_DIGITS` digits, text UTF-8 can
encode. A tuple (written as a JSON array and read back as a list) or a set is refused when the
event is built, with the field named, rather than changing meaning on replay.

:func:`parse_line` is the reading side: one line of JSON, parsed with the same limits, so a
hostile line ends in one :class:`ValueError` that says what is wrong (never ``RecursionError``,
never Python's own digit limit, never a silently coerced value). ``NaN`` and ``Infinity`` are
not JSON and are refused; a key given twice is refused.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_LINE_BYTES", "MAX_LINE_DEPTH", "json_problem",
           "over_line_limit", "parse_line"]

#: How deep arrays and objects may nest in a field's value.
MAX_DEPTH = 64
#: How deep a trace line may nest: a value's own depth plus the line's structure around it (a
#: step holds commands, a command records, a record its fields), so every value an event may
#: hold fits in a line.
MAX_LINE_DEPTH = MAX_DEPTH + 8
#: How many digits an integer may have (a float's literal may have up to twice as many chars).
MAX_INT_DIGITS = 40
#: The longest trace line read, in UTF-8 bytes (a tool output is written twice on its line: in
#: the event and in the result record).
MAX_LINE_BYTES = 64 * 1024 * 1024


def json_problem(value: object, max_depth: int = MAX_DEPTH) -> str | None:
    """What keeps ``value`` from being an exact JSON value, or ``None`` when it is one."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if item is None or type(item) is bool:
            continue
        if type(item) is str:
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return "holds a lone surrogate, which UTF-8 cannot encode"
        elif type(item) is int:
            if len(str(abs(item))) > MAX_INT_DIGITS:
                return f"holds an integer of more than {MAX_INT_DIGITS} digits"
        elif type(item) is float:
            if not math.isfinite(item):
                return f"holds {item!r}, which JSON cannot hold"
        elif type(item) is list or type(item) is dict:
            if depth > max_depth:
                return f"nests deeper than {max_depth} levels"
            if type(item) is dict:
                for key, inner in item.items():
                    if type(key) is not str:
                        return f"has a key {key!r} that is not a str"
                    stack.append((key, depth + 1))
                    stack.append((inner, depth + 1))
            else:
                stack.extend((inner, depth + 1) for inner in item)
        else:
            return (f"holds a {type(item).__name__}, which is not a JSON value (use a list, a "
                    "dict, a str, a number, a bool or None)")
    return None


def _int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of more than {MAX_INT_DIGITS} digits")
    return int(literal)


def _float(literal: str) -> float:
    if len(literal) > 2 * MAX_INT_DIGITS:
        raise ValueError(f"a number written with more than {2 * MAX_INT_DIGITS} characters")
    number = float(literal)
    if not math.isfinite(number):
        raise ValueError(f"the number {literal} is too large for a float")
    return number


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {key!r} is given twice")
        found[key] = value
    return found


@cache
def _decoder() -> Any:
    """The strict decoder (``json`` is imported here, on first use: the validators above are
    part of ``import agentturn``, which does not load it)."""
    import json

    return json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant,
                            object_pairs_hook=_object)


def over_line_limit(line: str) -> bool:
    """Whether ``line`` is longer than :data:`MAX_LINE_BYTES` in UTF-8 (a line of at most a
    quarter as many characters cannot be, so most lines are not encoded to tell)."""
    return len(line) > MAX_LINE_BYTES // 4 and len(line.encode("utf-8", "surrogatepass")) > (
        MAX_LINE_BYTES)


def parse_line(line: str) -> Any:
    """One line of JSON, within the limits above; ``ValueError`` says what is wrong."""
    if over_line_limit(line):
        raise ValueError(f"the line is longer than {MAX_LINE_BYTES} bytes")
    import json

    try:
        value = _decoder().decode(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {_plain(error.msg)} at column {error.colno}") from None
    except RecursionError:
        raise ValueError(f"not JSON this reader takes: it nests deeper than {MAX_LINE_DEPTH} "
                         "levels") from None
    problem = json_problem(value, MAX_LINE_DEPTH)
    if problem is not None:
        raise ValueError(f"the line {problem}")
    return value


def _plain(message: str) -> str:
    """The ``json`` module's message in plain words (``"Expecting value"`` -> ``a value is
    expected``), without its doubled words."""
    return message.replace("starting at", "that starts").replace("Expecting", "expected") \
        .replace("Unterminated", "an unterminated").replace("Invalid", "an invalid") \
        .replace("Extra data", "more data after the value")
