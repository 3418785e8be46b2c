"""Traces: a versioned JSON Lines record of every event in and every command out.

Theory of operation
-------------------
The reducers are deterministic, so the events a host fed them are enough to replay a session
exactly; recording the commands beside them lets anyone check that the host got what the spec
says, and explain afterwards why each thing happened. A trace is one JSON object per line:

1. a header: ``{"format": "agentturn-trace", "format_version": 1, "library_version": ...,
   "part": "session" | "turn" | "guard", "config": {...}}``;
2. one line per step: ``{"step": n, "event": {"type": "StreamCompleted", ...}, "commands":
   [{"type": "Persist", ...}, ...]}``, steps numbered from 1 without gaps;
3. an end line: ``{"end": true, "steps": n, "digest": "<sha256>"}``, the SHA-256 of every line
   before it, so a truncated or edited trace is told from a complete one.

Events and commands are written with ``cattrs`` as tagged unions: the ``type`` field is the
class name (``guard.`` or ``session.`` before the names of those parts' own vocabulary, since
both have a ``ClientAttached``). Enums are written by value, tuples as lists, a ring entry's
``meta`` as the JSON object it is. ``cattrs`` is imported here only: ``import agentturn`` does not
load this module.

A session state can be saved and restored the same way (:func:`dump_state` /
:func:`load_state`). The guard's trust is never persisted (SG-A12): a saved session has no guard,
and a restored one gets a new guard from the configuration, as after a daemon restart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from typing import Any, Union

import attrs
import cattrs
from cattrs.strategies import configure_tagged_union

from . import __version__
from ._base import Command, Event
from .guard.state import GuardConfig, GuardState
from .registry import command_types, event_types, tag
from .session.ring import Meta
from .session.state import SessionConfig, SessionState
from .turn.state import TurnConfig

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Trace",
    "TraceError",
    "TraceStep",
    "command_types",
    "converter",
    "dump_state",
    "end_line",
    "event_types",
    "header_line",
    "load_state",
    "read_trace",
    "step_line",
    "write_trace",
]

FORMAT = "agentturn-trace"
FORMAT_VERSION = 1
PARTS = ("turn", "guard", "session")  # the parts a trace can record


class TraceError(ValueError):
    """The trace cannot be read: the message says where and why (never a traceback)."""


@cache
def _events() -> Any:
    """The tagged union of every event class."""
    return Union[event_types()]  # noqa: UP007


@cache
def _commands() -> Any:
    """The tagged union of every command class."""
    return Union[command_types()]  # noqa: UP007


@cache
def converter() -> cattrs.Converter:
    """The one converter for events, commands, configurations and states."""
    conv = cattrs.Converter()
    conv.register_unstructure_hook(Meta, lambda meta: meta.as_dict())
    conv.register_structure_hook(Meta, lambda value, _: Meta.of(value))
    # JSON passes through ``Any`` fields (a predicate hook: Python 3.10's singledispatch cannot
    # register ``typing.Any`` itself)
    conv.register_structure_hook_func(lambda tp: tp is Any, lambda value, _: value)
    conv.register_unstructure_hook_func(  # sets as sorted lists, so a trace reads the same
        lambda tp: tp is frozenset or getattr(tp, "__origin__", None) is frozenset,
        lambda value: sorted(value, key=repr))
    for union in (_events(), _commands()):
        configure_tagged_union(union, conv, tag_generator=tag, tag_name="type")
    return conv


_CONFIGS: Mapping[str, type] = {"turn": TurnConfig, "guard": GuardConfig,
                                "session": SessionConfig}


# --- writing ----------------------------------------------------------------------------------


def _dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def header_line(part: str, config: Any, chat_id: str = "") -> str:
    """The header: format, versions, the part, its configuration (and a turn's chat id)."""
    if part not in PARTS:
        raise TraceError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    header: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION,
                              "library_version": __version__, "part": part}
    if part == "turn":
        header["chat_id"] = chat_id
    header["config"] = converter().unstructure(config, _CONFIGS[part])
    return _dumps(header)


def _tagged(value: Any, union: Any) -> dict[str, Any]:
    data: dict[str, Any] = converter().unstructure(value, union)
    return {"type": data.pop("type"), **data}  # the type first: a person reads it first


def step_line(number: int, event: Event, commands: Iterable[Command]) -> str:
    """One step: the event in and the commands out."""
    return _dumps({"step": number,
                   "event": _tagged(event, _events()),
                   "commands": [_tagged(c, _commands())
                                for c in commands]})


def end_line(lines: Iterable[str]) -> str:
    """The end record for the lines before it."""
    digest = hashlib.sha256()
    count = -1
    for count, line in enumerate(lines):  # noqa: B007
        digest.update(line.encode("utf-8") + b"\n")
    return _dumps({"end": True, "steps": max(count, 0), "digest": digest.hexdigest()})


def write_trace(part: str, config: Any, steps: Iterable[tuple[Event, tuple[Command, ...]]],
                chat_id: str = "") -> Iterator[str]:
    """Every line of a trace, header to end (no newlines)."""
    lines = [header_line(part, config, chat_id)]
    yield lines[0]
    for number, (event, commands) in enumerate(steps, 1):
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


def _json(number: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise TraceError(f"line {number}: not JSON ({error.msg} at column {error.colno})"
                         ) from None
    if not isinstance(value, dict):
        raise TraceError(f"line {number}: a trace line is a JSON object, got "
                         f"{type(value).__name__}")
    return value


def read_trace(text: str) -> Trace:
    """Parse a whole trace; :class:`TraceError` names the line and what is wrong with it."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise TraceError("the trace is empty")
    header = _json(1, lines[0])
    if header.get("format") != FORMAT:
        raise TraceError(f"line 1: not an {FORMAT} header")
    if header.get("format_version") != FORMAT_VERSION:
        raise TraceError(f"line 1: format version {header.get('format_version')!r} is not "
                         f"supported (this agentturn reads version {FORMAT_VERSION})")
    part = header.get("part")
    if part not in PARTS:
        raise TraceError(f"line 1: unknown part {part!r}")
    conv = converter()
    try:
        config: Any = conv.structure(header.get("config"), _CONFIGS[part])
    except Exception as error:  # cattrs raises several kinds; all mean the same here
        raise TraceError(f"line 1: the configuration does not read as a "
                         f"{_CONFIGS[part].__name__}: {_reason(error)}") from None
    end = _json(len(lines), lines[-1])
    if end.get("end") is not True:
        raise TraceError(f"the trace is truncated: its last line ({len(lines)}) is not the end "
                         "record")
    steps: list[TraceStep] = []
    for index, line in enumerate(lines[1:-1], start=2):
        record = _json(index, line)
        if record.get("end") is True:
            raise TraceError(f"line {index}: an end record before the last line")
        if record.get("step") != len(steps) + 1:
            raise TraceError(f"line {index}: step {record.get('step')!r} where step "
                             f"{len(steps) + 1} was expected: the trace is reordered or has "
                             "a gap")
        try:
            event = conv.structure(record.get("event"), _events())
            commands = tuple(conv.structure(c, _commands())
                             for c in record.get("commands", []))
        except Exception as error:
            raise TraceError(f"line {index}: step {len(steps) + 1} does not read: "
                             f"{_reason(error)}") from None
        steps.append(TraceStep(number=len(steps) + 1, event=event, commands=commands))
    if end.get("steps") != len(steps):
        raise TraceError(f"the end record counts {end.get('steps')!r} steps but the trace has "
                         f"{len(steps)}: it is truncated or edited")
    expected = json.loads(end_line(lines[:-1]))["digest"]
    chat_id = header.get("chat_id") if part == "turn" else getattr(config, "chat_id", "-")
    if not isinstance(chat_id, str) or not chat_id:
        raise TraceError("line 1: a turn trace names its chat_id")
    return Trace(part=part, library_version=str(header.get("library_version")), config=config,
                 steps=tuple(steps), intact=end.get("digest") == expected, chat_id=chat_id)


def _reason(error: Exception) -> str:
    """One line for a cattrs or validation error (their groups nest the real cause)."""
    nested = getattr(error, "exceptions", None)
    while nested:
        error = nested[0]
        nested = getattr(error, "exceptions", None)
    return f"{type(error).__name__}: {error}"


# --- states -----------------------------------------------------------------------------------


def dump_state(state: SessionState) -> str:
    """A session state as one JSON object, without its guard (never persisted, SG-A12)."""
    data = converter().unstructure(state, SessionState)
    del data["guard"]
    return _dumps({"format": FORMAT + "-state", "format_version": FORMAT_VERSION,
                   "library_version": __version__, "state": data})


def load_state(text: str, guard: GuardConfig | None = None) -> SessionState:
    """The saved session with a new guard, as after a restart: nothing it trusted survives.

    ``guard`` is the guard configuration read at this restart (SG-C2: the setting applies at
    restart); by default the saved configuration's.
    """
    record = _json(1, text)
    if record.get("format") != FORMAT + "-state" or record.get(
            "format_version") != FORMAT_VERSION:
        raise TraceError("not a saved agentturn session state of a supported version")
    data = dict(record.get("state") or {})
    try:
        config = converter().structure(data.get("config"), SessionConfig)
        if guard is not None:
            config = attrs.evolve(config, guard=guard)
        data["config"] = converter().unstructure(config, SessionConfig)
        data["guard"] = converter().unstructure(GuardState.create(config.guard), GuardState)
        return converter().structure(data, SessionState)
    except TraceError:
        raise
    except Exception as error:
        raise TraceError(f"the saved state does not read: {_reason(error)}") from None
