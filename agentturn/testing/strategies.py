"""Hypothesis strategies for every agentturn event, command and value type.

Theory of operation
-------------------
Every event and command is a frozen attrs class whose fields are validated; the strategies here
are derived from those declarations, so a new field or class is covered without a new line: a
``str`` field validated as an id draws a short id, a free ``str`` draws any text that UTF-8 can
encode (odd text included: combining marks, right-to-left, emoji, NUL), a tuple of ids draws
distinct ones, an enum draws its members, a nested attrs class draws recursively, and an ``Any``
field draws JSON. Classes with rules across fields (``NaturalStopDecided``, ``StopHookDecided``,
``StreamCompleted``'s distinct call ids) are drawn and the few that break the rule are filtered.

``st.from_type(agentturn.Event)`` and friends work once :func:`register` has run; the package's
hypothesis entry point runs it when hypothesis is imported.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

import attrs
from hypothesis import strategies as st

from .._base import Command, Event, FieldError, ids, is_id, is_str, not_blank

__all__ = [
    "any_command",
    "any_event",
    "commands",
    "events",
    "id_text",
    "json_values",
    "register",
    "texts",
    "value_of",
]

#: Every code point UTF-8 can encode: all but the surrogates.
_STORABLE = st.characters(exclude_categories=typing.cast(Any, ("Cs",)))

#: Short identifiers, as hosts make them.
id_text: st.SearchStrategy[str] = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz0123456789-/_", min_size=1, max_size=10)

#: Any text a host can store: every code point but lone surrogates, with some odd favourites.
texts: st.SearchStrategy[str] = st.one_of(
    st.text(alphabet=_STORABLE, max_size=40),
    st.sampled_from(["", " ", "\n\t", "e\u0301", "\u202eevil", "\U0001f600", "\x00", "a" * 300]),
)

#: JSON values: what a tool's structured result or an envelope may hold.
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=False,
                                                                   allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet=_STORABLE, max_size=8),
                      inner, max_size=3),
    max_leaves=8,
)


def _validators(field: attrs.Attribute[Any]) -> tuple[Any, ...]:
    validator = field.validator
    if validator is None:
        return ()
    return tuple(getattr(validator, "_validators", (validator,)))


def _is_free_text(field: attrs.Attribute[Any]) -> bool:
    checks = _validators(field)
    return is_str in checks or any(getattr(c, "__name__", "") == "_check" for c in checks) or (
        not checks)


def value_of(tp: Any, field: attrs.Attribute[Any] | None = None) -> st.SearchStrategy[Any]:
    """A strategy for one field's type (``field`` refines ``str`` and tuples of ids)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return json_values
    if tp is str:
        if field is not None and (is_id in _validators(field) or not_blank in _validators(field)):
            return id_text
        if field is not None and not _is_free_text(field):
            return id_text  # a wrapped check (optional, maybe): an id satisfies every one
        return texts
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(0, 40)
    if tp is float:
        return st.floats(0, 100, allow_nan=False)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if origin in (typing.Union, types.UnionType):
        members = [value_of(arg, field) for arg in typing.get_args(tp) if arg is not type(None)]
        optional = type(None) in typing.get_args(tp)
        return st.one_of(*([st.none()] if optional else []), *members)
    if origin is tuple:
        item = typing.get_args(tp)[0]
        unique = field is not None and ids in _validators(field)
        inner = id_text if unique else value_of(item, None if item is not str else field)
        return st.lists(inner, max_size=3, unique=unique).map(tuple)
    from ..session.ring import Meta

    if tp is Meta:  # an attrs class too, but built only through Meta.of
        return st.dictionaries(id_text, st.one_of(st.booleans(), st.integers(0, 9), id_text),
                               max_size=4).map(Meta.of)
    if isinstance(tp, type) and attrs.has(tp):
        return _of_class(tp)
    raise TypeError(f"no strategy for {tp!r}")


def _build(cls: type, values: dict[str, Any]) -> Any:
    try:
        return cls(**values)
    except FieldError:
        return None  # a rule across fields; filtered out below


@cache
def _of_class(cls: type) -> st.SearchStrategy[Any]:
    attrs.resolve_types(cls)
    fields = {field.name: value_of(field.type, field) for field in attrs.fields(cls)
              if field.init}
    strategy = st.fixed_dictionaries(fields).map(lambda values: _build(cls, values))
    return strategy.filter(lambda value: value is not None)


def events(cls: type | None = None) -> st.SearchStrategy[Any]:
    """Any event of ``cls`` (every event class of every part when ``None``)."""
    return _of_class(cls) if cls is not None else any_event()


def commands(cls: type | None = None) -> st.SearchStrategy[Any]:
    """Any command of ``cls`` (every command class of every part when ``None``)."""
    return _of_class(cls) if cls is not None else any_command()


@cache
def any_event() -> st.SearchStrategy[Any]:
    """One event of any class of any part."""
    from ..trace import event_types

    return st.one_of(*(_of_class(cls) for cls in event_types()))


@cache
def any_command() -> st.SearchStrategy[Any]:
    """One command of any class of any part."""
    from ..trace import command_types

    return st.one_of(*(_of_class(cls) for cls in command_types()))


def register() -> None:
    """Make ``st.from_type`` draw agentturn events, commands and their classes."""
    from ..trace import command_types, event_types

    for cls in (*event_types(), *command_types()):
        st.register_type_strategy(cls, _lazy(cls))
    st.register_type_strategy(Event, st.deferred(lambda: any_event()))
    st.register_type_strategy(Command, st.deferred(lambda: any_command()))


def _lazy(cls: type) -> Callable[[type], st.SearchStrategy[Any]]:
    return lambda _: _of_class(cls)
