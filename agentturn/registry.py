"""Every event and command class of every part, found once, from the vocabularies themselves.

Theory of operation
-------------------
A part's vocabulary is the module that defines its events and commands: the turn family's is
:mod:`agentturn.events` and :mod:`agentturn.commands`, the guard's
:mod:`agentturn.guard.vocabulary`, the session's :mod:`agentturn.session.vocabulary`. A class
belongs to the part whose vocabulary *defines* it (its ``__module__``); a vocabulary may re-export
another part's class for its users (the session's ``ClientAttached`` is the guard's), which does
not make a second class. So each name is one class, and each class has one part.

Three readers use this and nothing else: the turn and the session route events by the class a
phase graph names (:func:`events_of`), and traces tag each value with its part
(:func:`tag`, :func:`event_types`, :func:`command_types`). The guard's and the session's
vocabularies are imported when first asked for, so ``import agentturn`` loads neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import import_module
from types import MappingProxyType

import attrs

from ._base import Command, Event

__all__ = ["PARTS", "command_types", "event_types", "events_of", "part_of", "tag"]

#: The vocabulary modules of each part, in the order traces list them.
_VOCABULARIES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "turn": ("agentturn.events", "agentturn.commands"),
    "guard": ("agentturn.guard.vocabulary", "agentturn.guard.decisions"),
    "session": ("agentturn.session.vocabulary",),
})
PARTS = tuple(_VOCABULARIES)
#: Bases a vocabulary exports that are no value of their own.
_ABSTRACT = frozenset({"AwaitingCommand", "Notice", "TurnCommand"})


@cache
def _defined(part: str) -> tuple[type, ...]:
    """The attrs classes the part's vocabulary modules define (not the ones they re-export)."""
    found: list[type] = []
    for name in _VOCABULARIES[part]:
        module = import_module(name)
        for export in module.__all__:
            value = getattr(module, export)
            if (isinstance(value, type) and value.__module__ == name and attrs.has(value)
                    and issubclass(value, Event | Command) and value.__name__ not in _ABSTRACT):
                found.append(value)
    return tuple(found)


@cache
def events_of(*parts: str) -> Mapping[str, type]:
    """The event classes of ``parts``, by class name; each name is one class.

    Raises ``RuntimeError`` (a packaging mistake, met at import) if two of the parts define an
    event of the same name: routing by name would then depend on search order.
    """
    found: dict[str, type] = {}
    for part in parts:
        for cls in _defined(part):
            if issubclass(cls, Event) and found.setdefault(cls.__name__, cls) is not cls:
                raise RuntimeError(f"two events are named {cls.__name__!r} in {parts}")
    return MappingProxyType(found)


@cache
def event_types() -> tuple[type, ...]:
    """Every event class of every part."""
    return tuple(cls for part in PARTS for cls in _defined(part) if issubclass(cls, Event))


@cache
def command_types() -> tuple[type, ...]:
    """Every command class of every part."""
    return tuple(cls for part in PARTS for cls in _defined(part) if issubclass(cls, Command))


def part_of(cls: type) -> str:
    """The part whose vocabulary defines ``cls``."""
    for part, modules in _VOCABULARIES.items():
        if cls.__module__ in modules:
            return part
    raise ValueError(f"{cls.__qualname__} is in no agentturn vocabulary")


def tag(cls: type) -> str:
    """The name traces write for ``cls``: the turn family's classes by their name, the guard's
    and the session's with their part in front (``guard.NaturalStop``)."""
    part = part_of(cls)
    return cls.__name__ if part == "turn" else f"{part}.{cls.__name__}"
