"""The reducer contract shared by every part.

Theory of operation
-------------------
Every part of agentturn is a function ``reduce(state, event) -> Step``. A ``Step`` is the new
state plus a tuple of commands the host carries out with its own I/O; the completion of each
command comes back later as another event. Nothing here reads a clock, draws a random number or
touches a file: identifiers and time arrive inside events.

Rules this module keeps:

* Events, commands, records and states are frozen, slotted, keyword-only attrs classes
  (``@attrs.frozen(kw_only=True, eq=False, repr=False)``; ``attrs.frozen`` is slotted by
  default) on :class:`Value`, which gives them equality, hash and ``repr`` written once, with
  attrs' semantics, instead of code compiled for each class at import.
* Events and commands validate their fields on construction, so an invalid one never exists. A
  validation error is a :class:`FieldError` (a ``TypeError``/``ValueError``) whose message names
  the class and the field.
* States are built only by reducers from validated events, so they carry no validators: that
  keeps a reducer step cheap (see ``benchmarks/run.py``).
* Inside a reducer, new states, commands and records are made from values that were validated
  already, so they are built with one trusted mechanism (:mod:`agentturn._trusted`), which
  fills the slots directly and runs no validator. Everything a host builds validates.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import attrs

from ._json import json_problem

__all__ = [
    "AwaitingCommand",
    "Command",
    "Event",
    "FieldError",
    "Notice",
    "State",
    "Step",
    "Value",
    "ids",
    "is_bool",
    "is_id",
    "is_json",
    "is_str",
    "non_negative",
    "not_blank",
    "one_of",
    "optional",
    "tuple_of",
]


class Value:
    """Base of every event, command and record: equality, hash and ``repr``, written once.

    attrs generates these three methods for every class by compiling code for it, and for the
    hundred-odd classes of the vocabulary that compiling was most of the cost of
    ``import agentturn``. They are the same for every value, so the vocabulary's classes say
    ``@attrs.frozen(kw_only=True, eq=False, repr=False)`` and inherit them from here, with the
    semantics attrs gives them: equal when of the same class and every compared field is equal
    (field by field, in order); hashed from the class and those fields; shown as
    ``Name(field=value, ...)`` with the fields attrs would show.
    """

    # The speed tricks of this class, in this one place, for whoever compares and hashes values
    # over and over (the explorer's fingerprints, a host's sets of states):
    # * the hash is computed once and kept in this slot: a value is frozen and its fields are
    #   values or immutable builtins, so its hash never changes. The slot is empty until the
    #   first ``hash()``; trusted constructors (:mod:`agentturn._trusted`) leave it so, and
    #   pickling does not carry it;
    # * the compared fields are read by one ``operator.attrgetter`` per class (in C) into a
    #   tuple, and compared or hashed as that tuple: the semantics attrs gives (``==`` field by
    #   field, in order, each item's identity first, as a tuple compares);
    # * a value is equal to itself at once: states share most of their parts. (Comparing the
    #   cached hashes first would cost an exception whenever one is not computed yet, as in a
    #   reducer, which never hashes; a dict or set compares hashes before calling this anyway.)
    __slots__ = ("_cached_hash",)
    _cached_hash: int  # the slot's type, for the checker; attrs collects no field from here

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _GETTERS.get(self.__class__) or _getter(self.__class__)
        return bool(compared(self) == compared(other))

    def __hash__(self) -> int:
        try:
            return self._cached_hash
        except AttributeError:
            pass
        compared = _GETTERS.get(self.__class__) or _getter(self.__class__)
        found = hash((self.__class__, compared(self)))
        _HASH_SLOT.__set__(self, found)
        return found

    def __repr__(self) -> str:
        busy: set[int] | None = getattr(_repr_context, "busy", None)
        if busy is None:
            busy = _repr_context.busy = set()
        if id(self) in busy:
            return "..."  # a value inside itself (through a mutable field), as attrs shows it
        busy.add(id(self))
        try:
            shown = ", ".join(f"{name}={getattr(self, name)!r}" if how is True
                              else f"{name}={how(getattr(self, name))}"
                              for name, how in _fields_of(self.__class__)[1])
            return f"{self.__class__.__qualname__.rsplit('>.', 1)[-1]}({shown})"
        finally:
            busy.discard(id(self))


#: The member descriptor of :class:`Value`'s hash slot: reading and filling it directly skips a
#: frozen class's ``__setattr__``, which refuses every assignment.
_HASH_SLOT: Any = Value.__dict__["_cached_hash"]
_repr_context = threading.local()
_FIELDS: dict[type, tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]] = {}


def _fields_of(cls: type) -> tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]:
    """The names of the fields ``cls`` compares and hashes, and the shown ones with their repr."""
    found = _FIELDS.get(cls)
    if found is None:
        fields = attrs.fields(cls)
        if any(field.eq_key is not None for field in fields):
            raise TypeError(f"{cls.__name__}: a field with an eq key needs attrs' own __eq__")
        found = _FIELDS[cls] = (tuple(field.name for field in fields if field.eq),
                                tuple((field.name, field.repr) for field in fields
                                      if field.repr))
    return found


#: Per class, the function that reads its compared fields into a tuple (see :class:`Value`).
_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _getter(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    names = _fields_of(cls)[0]
    found: Callable[[Any], tuple[Any, ...]]
    if len(names) >= 2:
        found = operator.attrgetter(*names)  # already a tuple, built in C
    elif names:
        single = operator.attrgetter(names[0])
        found = lambda value: (single(value),)  # noqa: E731 - one field: still a tuple
    else:
        found = lambda value: ()  # noqa: E731 - no compared field
    _GETTERS[cls] = found
    return found


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Event(Value):
    """Base of every input a host feeds to a reducer."""


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Command(Value):
    """Base of every output a reducer asks the host to carry out."""


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AwaitingCommand(Command):
    """A command whose completion comes back as an answering event.

    ``answered_by`` names the event classes that answer it; :attr:`answer_id` is the id those
    events echo (``None`` where at most one such command can be outstanding, so none is needed).
    A host keeps its outstanding awaiting commands until one of the answers arrives.
    """

    answered_by: ClassVar[tuple[str, ...]] = ()

    @property
    def answer_id(self) -> str | None:
        """The id the answering event carries."""
        return None


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Notice(Command):
    """A command that only informs or asks for a fire-and-forget effect: nothing answers it."""


@attrs.frozen(kw_only=True, eq=False, repr=False)
class State(Value):
    """Base of every reducer state."""


S = TypeVar("S")


class Step(tuple[S, tuple[Command, ...]], Generic[S]):
    """What one reducer call returns: the new state and the commands, in order.

    A ``Step`` is a typed pair, so ``state, commands = reduce(state, event)`` gives mypy the
    state's type and ``tuple[Command, ...]``; ``step.state`` and ``step.commands`` name the two.
    Being a tuple, it compares equal to the plain pair ``(state, commands)``.
    """

    __slots__ = ()

    def __new__(cls, state: S, commands: tuple[Command, ...] = ()) -> Step[S]:
        return tuple.__new__(cls, (state, commands))

    @property
    def state(self) -> S:
        """The new state."""
        return self[0]

    @property
    def commands(self) -> tuple[Command, ...]:
        """The commands to carry out, in order."""
        return self[1]

    def __repr__(self) -> str:
        return f"Step(state={self[0]!r}, commands={self[1]!r})"

    def __getnewargs__(self) -> tuple[S, tuple[Command, ...]]:  # pickling and copying
        return (self[0], self[1])


class FieldError(TypeError, ValueError):
    """An event or command was built with a bad field; the message names class and field."""


Validator = Callable[[Any, "attrs.Attribute[Any]", Any], None]


def _where(instance: Any, attribute: attrs.Attribute[Any]) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def is_str(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: the field is a ``str`` that can be encoded as UTF-8 (empty allowed).

    A lone surrogate (``"\\ud800"``, as a broken UI or a bad JSON decoder may produce) cannot be
    stored or sent by any host, so it is refused here, when the value is built, rather than
    failing later inside a reducer.
    """
    if type(value) is not str:
        raise FieldError(
            f"{_where(instance, attribute)} must be a str, got {type(value).__name__}"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise FieldError(
                f"{_where(instance, attribute)} must be encodable as UTF-8; position "
                f"{error.start} holds a lone surrogate {value[error.start]!r}"
            ) from None


def not_blank(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: the field is a UTF-8-encodable ``str`` with at least one non-space character."""
    is_str(instance, attribute, value)
    if not value.strip():
        raise FieldError(f"{_where(instance, attribute)} must not be empty or only white space")


def is_id(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: the field is a non-empty ``str`` identifier."""
    if type(value) is str and value and value.isascii():
        return  # the common case, decided without a further call
    is_str(instance, attribute, value)
    if not value:
        raise FieldError(f"{_where(instance, attribute)} must be a non-empty id")


def ids(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: the field is a tuple of distinct non-empty ``str`` identifiers."""
    if type(value) is not tuple:
        raise FieldError(
            f"{_where(instance, attribute)} must be a tuple, got {type(value).__name__}"
        )
    for item in value:
        if type(item) is not str or not item:
            raise FieldError(f"{_where(instance, attribute)} must hold non-empty str ids")
        is_str(instance, attribute, item)
    if len(set(value)) != len(value):
        raise FieldError(f"{_where(instance, attribute)} holds a repeated id")


def non_negative(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: the field is an ``int`` (not a bool) that is zero or more."""
    if type(value) is not int:
        raise FieldError(
            f"{_where(instance, attribute)} must be an int, got {type(value).__name__}"
        )
    if value < 0:
        raise FieldError(f"{_where(instance, attribute)} must not be negative, got {value}")


def _name(kind: type | tuple[type, ...]) -> str:
    if isinstance(kind, tuple):
        return " | ".join(k.__name__ for k in kind)
    return kind.__name__


def one_of(kind: type | tuple[type, ...]) -> Validator:
    """Validator factory: the field is an instance of ``kind`` (an Enum or a record class)."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, kind):
            raise FieldError(
                f"{_where(instance, attribute)} must be a {_name(kind)}, "
                f"got {type(value).__name__}"
            )

    return check


def optional(check: Validator) -> Validator:
    """Validator factory: ``None`` or a value ``check`` accepts."""

    def maybe(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None:
            check(instance, attribute, value)

    return maybe


def tuple_of(kind: type | tuple[type, ...]) -> Validator:
    """Validator factory: a tuple whose items are all instances of ``kind``."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if type(value) is not tuple:
            raise FieldError(
                f"{_where(instance, attribute)} must be a tuple, got {type(value).__name__}"
            )
        for item in value:
            if not isinstance(item, kind):
                raise FieldError(
                    f"{_where(instance, attribute)} must hold {_name(kind)} items, "
                    f"got {type(item).__name__}"
                )

    return check


def is_json(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: the field holds a JSON value that a trace writes and reads back exactly
    (see :mod:`agentturn._json`: no tuple, no set, no NaN, nesting and numbers bounded)."""
    if value is None:
        return
    problem = json_problem(value)
    if problem is not None:
        raise FieldError(f"{_where(instance, attribute)} must be a JSON value: it {problem}")


def is_bool(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: the field is a ``bool``."""
    if type(value) is not bool:
        raise FieldError(
            f"{_where(instance, attribute)} must be a bool, got {type(value).__name__}"
        )
