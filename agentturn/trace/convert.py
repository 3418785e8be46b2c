"""Converting values to JSON and back: one converter writes, a strict one reads.

Theory of operation
-------------------
``cattrs`` does both directions. Writing (:func:`converter`) unstructures events and commands as
tagged unions (the ``type`` field is :func:`agentturn.registry.tag`), enums by value, tuples and
sets as lists, a ring entry's ``meta`` as its JSON object, and a non-finite float (an unbounded
``retry_window``) as the string ``"Infinity"``, since JSON has no such number.

Reading (:func:`strict`) is a parser, not a hopeful decoder: every field must have exactly the
JSON type its annotation says (no ``"42"`` for ``42``, no ``42`` for ``"42"``, no ``"no"`` for a
bool, a list for a tuple and nothing else), no field may be missing unless it has a default (or,
for a field that became required later, the value older traces meant by leaving it out:
``_LEGACY_DEFAULTS``), no unknown field is accepted, and events and commands are built through
their classes, so their validators run. What it refuses raises; :func:`reason` turns that into
one line that names the field.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, Union

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn
from cattrs.strategies import configure_tagged_union

from ..registry import command_types, event_types, tag
from ..session.ring import Meta
from ..session.vocabulary import BackgroundEnded

__all__ = ["commands_union", "converter", "events_union", "json_kind", "reason", "strict"]

_INFINITY = {"Infinity": math.inf, "-Infinity": -math.inf}


@cache
def events_union() -> Any:
    """The tagged union of every event class."""
    return Union[event_types()]  # noqa: UP007


@cache
def commands_union() -> Any:
    """The tagged union of every command class."""
    return Union[command_types()]  # noqa: UP007


def _write_float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        raise ValueError("NaN cannot be written to a trace")
    return "Infinity" if value > 0 else "-Infinity"


def _common(conv: cattrs.Converter) -> None:
    conv.register_unstructure_hook(Meta, lambda meta: meta.as_dict())
    conv.register_unstructure_hook(float, _write_float)
    conv.register_unstructure_hook_func(  # sets as sorted lists, so a trace reads the same
        _is_frozenset, lambda value: sorted(value, key=repr))


@cache
def converter() -> cattrs.Converter:
    """The converter that writes events, commands, configurations and states (it also reads
    them leniently, as earlier versions did; :func:`strict` is what traces are read with)."""
    conv = cattrs.Converter()
    _common(conv)
    conv.register_structure_hook(Meta, lambda value, _: Meta.of(value))
    # JSON passes through ``Any`` fields (a predicate hook: Python 3.10's singledispatch cannot
    # register ``typing.Any`` itself)
    conv.register_structure_hook_func(lambda tp: tp is Any, lambda value, _: value)
    for union in (events_union(), commands_union()):
        configure_tagged_union(union, conv, tag_generator=tag, tag_name="type")
    return conv


def json_kind(value: object) -> str:
    """What JSON calls ``value``'s type, for messages: ``an object``, ``null``, ..."""
    return _kind(value)


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a bool",
             int: "an integer", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _exact(expected: type, name: str) -> Callable[[Any, Any], Any]:
    def read(value: Any, _: Any) -> Any:
        if type(value) is not expected:
            raise TypeError(f"must be {name}, got {_kind(value)}")
        return value
    return read


def _read_float(value: Any, _: Any) -> float:
    if type(value) is int or type(value) is float:
        return float(value)
    if type(value) is str and value in _INFINITY:
        return _INFINITY[value]
    raise TypeError(f"must be a number, got {_kind(value)}")


def _is_tuple(tp: Any) -> bool:
    return tp is tuple or typing.get_origin(tp) is tuple


def _is_frozenset(tp: Any) -> bool:
    return tp is frozenset or typing.get_origin(tp) is frozenset


def _is_enum(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


@cache
def strict() -> cattrs.Converter:
    """The converter traces and saved states are read with (see the module docstring)."""
    conv = cattrs.Converter(forbid_extra_keys=True)
    _common(conv)
    conv.register_structure_hook(str, _exact(str, "a string"))
    conv.register_structure_hook(bool, _exact(bool, "a bool"))
    conv.register_structure_hook(int, _exact(int, "an integer"))
    conv.register_structure_hook(float, _read_float)
    conv.register_structure_hook_func(lambda tp: tp is Any, lambda value, _: value)

    def read_meta(value: Any, _: Any) -> Meta:
        if type(value) is not dict:
            raise TypeError(f"must be an object, got {_kind(value)}")
        return Meta.of(value)

    conv.register_structure_hook(Meta, read_meta)

    def read_enum(tp: Any) -> Callable[[Any, Any], Any]:
        by_value = {member.value: member for member in tp}

        def read(value: Any, _: Any) -> Any:
            member = by_value.get(value) if type(value) in (str, int) else None
            if member is None or type(member.value) is not type(value):
                raise ValueError(f"must be one of {', '.join(map(repr, by_value))}, "
                                 f"got {value!r}"[:200])
            return member
        return read

    conv.register_structure_hook_factory(_is_enum, read_enum)

    def read_tuple(tp: Any) -> Callable[[Any, Any], Any]:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            item = args[0]

            def read_any_length(value: Any, _: Any) -> Any:
                if type(value) is not list:
                    raise TypeError(f"must be an array, got {_kind(value)}")
                return tuple(conv.structure(inner, item) for inner in value)
            return read_any_length

        def read_fixed(value: Any, _: Any) -> Any:
            if type(value) is not list or len(value) != len(args):
                raise TypeError(f"must be an array of {len(args)}, got {_kind(value)}")
            return tuple(conv.structure(inner, kind)
                         for inner, kind in zip(value, args, strict=True))
        return read_fixed

    conv.register_structure_hook_factory(_is_tuple, read_tuple)

    def read_frozenset(tp: Any) -> Callable[[Any, Any], Any]:
        (item,) = typing.get_args(tp) or (Any,)

        def read(value: Any, _: Any) -> Any:
            if type(value) is not list:
                raise TypeError(f"must be an array, got {_kind(value)}")
            return frozenset(conv.structure(inner, item) for inner in value)
        return read

    conv.register_structure_hook_factory(_is_frozenset, read_frozenset)

    def read_class(cls: Any) -> Callable[[Any, Any], Any]:
        inner = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)
        legacy = _LEGACY_DEFAULTS.get(cls)

        def read(value: Any, tp: Any) -> Any:
            if type(value) is not dict:
                raise TypeError(f"must be an object, got {_kind(value)}")
            if legacy is not None and not legacy.keys() <= value.keys():
                value = {**legacy, **value}
            return inner(value, tp)
        return read

    conv.register_structure_hook_factory(attrs.has, read_class)

    def read_union(tp: Any) -> Callable[[Any, Any], Any]:
        """A union of attrs classes (a record of any kind), told apart by the fields present."""
        members = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        nullable = len(members) != len(typing.get_args(tp))
        shapes = [(cls, {f.name for f in attrs.fields(cls)},
                   {f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING})
                  for cls in members]
        names = ", ".join(cls.__name__ for cls in members)

        def read(value: Any, _: Any) -> Any:
            if value is None and nullable:
                return None
            if type(value) is not dict:
                raise TypeError(f"must be an object (one of {names}), got {_kind(value)}")
            keys = set(value)
            fits = [cls for cls, every, required in shapes if required <= keys <= every]
            if len(fits) != 1:
                raise TypeError(f"its fields match {'none' if not fits else 'more than one'} "
                                f"of {names}")
            return conv.structure(value, fits[0])
        return read

    conv.register_structure_hook_factory(_is_class_union, read_union)
    return conv


#: Fields that became required after traces were written without them, with the value an
#: older trace meant by leaving them out: ``BackgroundEnded.notification_id`` had the default
#: ``None`` (no notification in the same step).
_LEGACY_DEFAULTS: dict[type, dict[str, Any]] = {BackgroundEnded: {"notification_id": None}}


def _is_class_union(tp: Any) -> bool:
    if typing.get_origin(tp) not in (Union, types.UnionType):
        return False
    members = [arg for arg in typing.get_args(tp) if arg is not type(None)]
    return len(members) > 1 and all(isinstance(arg, type) and attrs.has(arg) for arg in members)


def reason(error: BaseException) -> str:
    """One line for what a converter or a validator refused, naming the field."""
    if isinstance(error, cattrs.BaseValidationError):
        lines = cattrs.transform_error(error, path="", format_exception=_format)
        if not lines:
            return "it does not read"
        message, _, where = lines[0].rpartition(" @ ")
        where = where.lstrip(".")
        return f"{where}: {message}" if where else message
    return _format(error, None)


def _format(error: BaseException, _type: Any) -> str:
    if isinstance(error, KeyError):
        return "a required field is missing"
    if isinstance(error, cattrs.ForbiddenExtraKeysError):
        return f"unknown field(s) {', '.join(sorted(map(repr, error.extra_fields)))}"
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:300]
