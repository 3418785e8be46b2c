"""Writing a trace line by line, and reading one back as a parser that trusts nothing.

Theory of operation
-------------------
Writing: :func:`header_line`, :func:`step_line` and :func:`end_line` make the three kinds of
line, :func:`write_trace` all of them in order. JSON is written compact, UTF-8 (``ensure_ascii``
off), with U+2028, U+2029 and U+0085 escaped, so no line-splitting reader anywhere can cut a
line inside a string.

Reading (:func:`read_trace`): the text is split on ``\\n`` only (a ``\\r`` before it is allowed,
as JSON Lines does); every line is parsed within the limits of :mod:`agentturn._json` (line
length, nesting depth, number size) and :data:`MAX_LINES`; every record must have exactly its
fields with exactly their JSON types (``"step": true`` is not step 1, ``1.0`` is not format
version 1, a step without ``"commands"`` is refused, an unknown field too); events and
commands are built through their classes, so their validators run. Whatever is wrong ends in
one :class:`TraceError` naming the line, the field and what is wrong, in the project's words.
The digest is checked and reported (:attr:`Trace.intact`): whether to accept an edited trace is
the caller's decision (``check`` and ``explain`` refuse one).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from .. import __version__
from .._base import Command, Event
from .._json import MAX_LINE_BYTES, over_line_limit, parse_line
from ..guard.state import GuardConfig
from ..registry import command_types, event_types, tag
from ..session.state import SessionConfig
from ..turn.state import TurnConfig
from .convert import commands_union, converter, events_union, json_kind, reason, strict

__all__ = ["FORMAT", "FORMAT_VERSION", "MAX_LINES", "PARTS", "Trace", "TraceError",
           "TraceStep", "end_line", "header_line", "initial_state", "read_trace", "step_line",
           "write_trace"]

FORMAT = "agentturn-trace"
FORMAT_VERSION = 1
#: The parts a trace can record.
PARTS = ("turn", "guard", "session")
#: The most lines a trace may have (a step a line, plus the header and the end).
MAX_LINES = 10_000_000
_CONFIGS: Mapping[str, type] = {"turn": TurnConfig, "guard": GuardConfig,
                                "session": SessionConfig}
#: Characters JSON leaves raw that some readers take for line ends.
_SEPARATORS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"})


class TraceError(ValueError):
    """The trace cannot be read: the message says where and why (never a traceback)."""


# --- writing ----------------------------------------------------------------------------------


def dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False,
                      separators=(", ", ": ")).translate(_SEPARATORS)


def header_line(part: str, config: Any, chat_id: str = "") -> str:
    """The header: format, versions, the part, its configuration (and a turn's chat id)."""
    if part not in PARTS:
        raise TraceError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    kind = _CONFIGS[part]
    if type(config) is not kind:
        raise TraceError(f"a {part} trace's config must be a {kind.__name__}, got "
                         f"{type(config).__name__}")
    if part == "turn" and (type(chat_id) is not str or not chat_id):
        raise TraceError("a turn trace names its chat: pass chat_id= (a turn's configuration "
                         "does not hold it)")
    header: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION,
                              "library_version": __version__, "part": part}
    if part == "turn":
        header["chat_id"] = chat_id
    header["config"] = converter().unstructure(config, kind)
    return dumps(header)


def _tagged(value: Any, union: Any) -> dict[str, Any]:
    data: dict[str, Any] = converter().unstructure(value, union)
    return {"type": data.pop("type"), **data}  # the type first: a person reads it first


def step_line(number: int, event: Event, commands: Iterable[Command]) -> str:
    """One step: the event in and the commands out. Refuses (``TraceError``) what the reader
    would refuse: a step number that is not a positive int, a value that is not an agentturn
    event or command, a line over the reader's length limit."""
    if type(number) is not int or number < 1:
        raise TraceError(f"a step number is an int from 1, got {number!r}")
    if not isinstance(event, event_types()):
        raise TraceError(f"step {number}: {type(event).__name__} is not an agentturn event")
    done = tuple(commands)
    for command in done:
        if not isinstance(command, command_types()):
            raise TraceError(f"step {number}: {type(command).__name__} is not an agentturn "
                             "command")
    line = dumps({"step": number, "event": _tagged(event, events_union()),
                  "commands": [_tagged(c, commands_union()) for c in done]})
    if over_line_limit(line):
        raise TraceError(f"step {number} is longer than {MAX_LINE_BYTES} bytes, the most a "
                         "trace line may hold")
    return line


def _digest(lines: Iterable[str]) -> tuple[int, str]:
    digest = hashlib.sha256()
    count = 0
    for count, line in enumerate(lines, start=1):  # noqa: B007
        digest.update(line.encode("utf-8") + b"\n")
    return count, digest.hexdigest()


def end_line(lines: Iterable[str]) -> str:
    """The end record for the lines before it (the header and the steps)."""
    lines = list(lines)
    if not all(type(line) is str for line in lines):
        raise TraceError("end_line takes the trace's lines as str")
    count, digest = _digest(lines)
    return dumps({"end": True, "steps": max(count - 1, 0), "digest": digest})


def write_trace(part: str, config: Any, steps: Iterable[tuple[Event, tuple[Command, ...]]],
                chat_id: str = "") -> Iterator[str]:
    """Every line of a trace, header to end (no newlines). A turn trace needs ``chat_id``."""
    lines = [header_line(part, config, chat_id)]
    yield lines[0]
    for number, (event, commands) in enumerate(steps, 1):
        if number + 2 > MAX_LINES:
            raise TraceError(f"a trace holds at most {MAX_LINES - 2} steps")
        line = step_line(number, event, commands)
        lines.append(line)
        yield line
    yield end_line(lines)


# --- reading ----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TraceStep:
    """One recorded step."""

    number: int
    event: Event
    commands: tuple[Command, ...]


@attrs.frozen(kw_only=True)
class Trace:
    """A trace read back: its part, configuration and steps."""

    part: str
    library_version: str
    config: Any
    steps: tuple[TraceStep, ...]
    #: The chat of a turn trace (a turn's configuration does not name it).
    chat_id: str
    #: The digest on the end line matches the lines: nothing was edited after writing.
    intact: bool


def _parse(number: int, line: str) -> dict[str, Any]:
    """Line ``number`` as a JSON object."""
    if not line.strip():
        raise TraceError(f"line {number}: blank (a trace has one record a line)")
    try:
        value = parse_line(line)
    except ValueError as error:
        raise TraceError(f"line {number}: {error}") from None
    if type(value) is not dict:
        raise TraceError(f"line {number}: a trace line is a JSON object, got "
                         f"{json_kind(value)}")
    return value


def _fields(number: int, value: dict[str, Any], fields: Mapping[str, tuple[type, str]],
            required: Iterable[str]) -> dict[str, Any]:
    """``value`` with exactly ``fields`` (name -> JSON type and its name), ``required`` there."""
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise TraceError(f"line {number}: unknown field(s) {', '.join(map(repr, unknown))}")
    for name in required:
        if name not in value:
            raise TraceError(f"line {number}: the field {name!r} is missing")
    for name, item in value.items():
        kind, kind_name = fields[name]
        if type(item) is not kind:
            raise TraceError(f"line {number}: {name!r} must be {kind_name}, got "
                             f"{json_kind(item)}")
    return value


_HEADER = {"format": (str, "a string"), "format_version": (int, "an integer"),
           "library_version": (str, "a string"), "part": (str, "a string"),
           "chat_id": (str, "a string"), "config": (dict, "an object")}
_STEP = {"step": (int, "an integer"), "event": (dict, "an object"),
         "commands": (list, "an array")}
_END = {"end": (bool, "true"), "steps": (int, "an integer"), "digest": (str, "a string")}


def _split(text: str) -> list[str]:
    if type(text) is not str:
        raise TraceError(f"a trace is text, got {type(text).__name__}")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if len(lines) > MAX_LINES:
        raise TraceError(f"the trace has more than {MAX_LINES} lines")
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _header(lines: list[str]) -> tuple[Any, str, Any, str]:
    first = lines[0] if lines else ""
    if not first.strip():
        raise TraceError("the trace is empty" if len(lines) <= 1 else "line 1: blank")
    header = _parse(1, first)
    if header.get("format") != FORMAT:
        raise TraceError(f"line 1: not an {FORMAT} header")
    _fields(1, header, _HEADER, ())
    version = header.get("format_version")
    if type(version) is not int or version != FORMAT_VERSION:
        raise TraceError(f"line 1: format version {version!r} is not supported (this "
                         f"agentturn reads version {FORMAT_VERSION}, an integer)")
    part = header.get("part")
    if part not in PARTS:
        raise TraceError(f"line 1: unknown part {part!r} (one of {', '.join(PARTS)})")
    _fields(1, header, _HEADER, ("library_version", "config"))
    if part == "turn":
        if not header.get("chat_id"):
            raise TraceError("line 1: a turn trace names its chat_id")
    elif "chat_id" in header:
        raise TraceError(f"line 1: a {part} trace has no chat_id (its configuration names it)")
    try:
        config: Any = strict().structure(header["config"], _CONFIGS[part])
    except Exception as error:  # anything the strict converter refuses
        raise TraceError(f"line 1: config: {reason(error)}") from None
    changed = _changed(header["config"], converter().unstructure(config, _CONFIGS[part]))
    if changed:
        raise TraceError(f"line 1: config: {changed} (the library never writes it so)")
    chat_id = str(header.get("chat_id") or getattr(config, "chat_id", "-"))
    try:
        initial_state(part, config, chat_id)
    except (TypeError, ValueError) as error:  # a FieldError: the configuration cannot start
        raise TraceError(f"line 1: config: {reason(error)}") from None
    library_version: str = header["library_version"]
    return part, library_version, config, chat_id


def _changed(given: Any, written: Any, where: str = "") -> str:
    """How ``given`` (what the file says) differs from ``written`` (what the library writes for
    the value it read): a configuration a converter would silently change (a cap below 1 read
    as the default, a finish reason normalized) is refused rather than accepted changed."""
    if type(given) is dict and type(written) is dict:
        for key, value in given.items():
            found = _changed(value, written.get(key), f"{where}.{key}" if where else key)
            if found:
                return found
        return ""
    if type(given) is not type(written) or given != written:
        return f"{where}: {json.dumps(given)[:80]} would be read as {json.dumps(written)[:80]}"
    return ""


def initial_state(part: str, config: Any, chat_id: str = "") -> Any:
    """The state a trace of ``part`` starts from: a new turn, guard or session."""
    if part == "turn":
        from ..turn.state import TurnState

        return TurnState.create(chat_id, config)
    if part == "guard":
        from ..guard.state import GuardState

        return GuardState.create(config)
    from ..session.state import SessionState

    return SessionState.create(config)


def _by_tag(classes: Iterable[type]) -> dict[str, type]:
    return {tag(cls): cls for cls in classes}


def _value(number: int, where: str, data: object, classes: Mapping[str, type]) -> Any:
    if type(data) is not dict:
        raise TraceError(f"line {number}: {where} must be an object, got {json_kind(data)}")
    kind = data.get("type")
    if type(kind) is not str:
        raise TraceError(f"line {number}: {where} has no \"type\" string")
    cls = classes.get(kind)
    if cls is None:
        raise TraceError(f"line {number}: {where}: unknown type {kind!r}")
    fields = {key: value for key, value in data.items() if key != "type"}
    try:
        return strict().structure(fields, cls)
    except Exception as error:  # the strict converter's refusal or a validator's FieldError
        raise TraceError(f"line {number}: {where} {kind}: {reason(error)}") from None


def read_trace(text: str) -> Trace:
    """Parse a whole trace; :class:`TraceError` names the line and what is wrong with it."""
    lines = _split(text)
    part, library_version, config, chat_id = _header(lines)
    events, commands = _by_tag(event_types()), _by_tag(command_types())
    steps: list[TraceStep] = []
    end: dict[str, Any] | None = None
    for number, line in enumerate(lines[1:], start=2):
        record = _parse(number, line)
        if "end" in record:
            if number != len(lines):
                raise TraceError(f"line {number}: an end record before the last line")
            end = _fields(number, record, _END, _END)
            break
        _fields(number, record, _STEP, _STEP)
        if record["step"] != len(steps) + 1:
            raise TraceError(f"line {number}: step {record['step']!r} where step "
                             f"{len(steps) + 1} was expected: the trace is reordered or has a "
                             "gap")
        event = _value(number, "event", record["event"], events)
        done = tuple(_value(number, f"command {index}", data, commands)
                     for index, data in enumerate(record["commands"], start=1))
        steps.append(TraceStep(number=len(steps) + 1, event=event, commands=done))
    if end is None:
        raise TraceError(f"the trace is truncated: its last line ({len(lines)}) is not the end "
                         "record")
    if end["end"] is not True:
        raise TraceError(f"line {len(lines)}: the end record says \"end\": false")
    if end["steps"] != len(steps):
        raise TraceError(f"the end record counts {end['steps']!r} steps but the trace has "
                         f"{len(steps)}: it is truncated or edited")
    _, expected = _digest(lines[:-1])
    return Trace(part=part, library_version=library_version, config=config, steps=tuple(steps),
                 intact=end["digest"] == expected, chat_id=chat_id)
