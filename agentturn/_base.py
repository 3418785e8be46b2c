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
  already, so they are built with one trusted mechanism, :func:`replacer` and :func:`builder`,
  which fill the slots directly and run no validator. Everything a host builds validates.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import attrs

__all__ = [
    "AwaitingCommand",
    "Command",
    "Event",
    "FieldError",
    "Notice",
    "State",
    "Step",
    "Value",
    "builder",
    "ids",
    "is_bool",
    "is_id",
    "is_str",
    "new_step",
    "non_negative",
    "not_blank",
    "one_of",
    "optional",
    "replacer",
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

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        for name in _fields_of(self.__class__)[0]:
            if not getattr(self, name) == getattr(other, name):
                return False
        return True

    def __hash__(self) -> int:
        return hash((self.__class__, *[getattr(self, name)
                                       for name in _fields_of(self.__class__)[0]]))

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
_T = TypeVar("_T")


@attrs.frozen(slots=True)
class Step(Generic[S]):
    """What one reducer call returns: the new state and the commands, in order.

    A ``Step`` unpacks like a pair: ``state, commands = reduce(state, event)``.
    """

    state: S
    commands: tuple[Command, ...] = ()

    def __iter__(self) -> Any:
        return iter((self.state, self.commands))


def _slot_setters(cls: type) -> dict[str, Any]:
    """Each field's slot setter: the ``__set__`` of its slot's member descriptor."""
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted attrs class")
    if getattr(cls, "__attrs_post_init__", None) is not None:
        raise TypeError(f"{cls.__name__} has __attrs_post_init__; build it with its constructor")
    setters: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if field.converter is not None or field.alias != field.name:
            raise TypeError(f"{cls.__name__}.{field.name} has a converter or an alias")
        slot = next(klass.__dict__[field.name] for klass in cls.__mro__
                    if field.name in klass.__dict__)
        setters[field.name] = slot.__set__
    return setters


#: From this many fields on, :func:`_compile` fills a draft and re-labels it (one fixed cost,
#: then a plain slot store per field); below it, each slot's setter is called (no fixed cost).
#: Measured on CPython 3.11: a draft pays off from about six fields.
DRAFT_FROM_FIELDS = 8


def _draft_class(cls: type) -> type:
    """A subclass of ``cls`` that adds no slot and restores plain attribute assignment.

    A frozen attrs class raises in ``__setattr__``, so each slot of a new instance must be
    filled by calling its descriptor's ``__set__``, a slow call (about five times a plain slot
    store). An instance of this class has the very same layout, so it can be filled with plain
    stores and then re-labelled as ``cls`` by assigning ``__class__`` (which CPython allows
    between classes of identical layout). The draft never leaves the generated function.
    """
    return type(f"{cls.__name__}Draft", (cls,), {
        "__slots__": (), "__module__": cls.__module__,
        "__setattr__": object.__setattr__, "__delattr__": object.__delattr__,
        "__doc__": f"A {cls.__name__} being filled by a trusted constructor; never escapes."})


def _compile(cls: type, kind: str, changing: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Generate ``kind`` (``"replace"`` or ``"build"``) for ``cls``; see :func:`replacer`.

    With ``changing`` (``kind == "replace"``), the copy takes exactly those fields, positionally,
    and copies the rest unconditionally.
    """
    fields = attrs.fields(cls)
    setters = _slot_setters(cls)
    unknown = sorted(set(changing) - {field.name for field in fields})
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(map(repr, unknown))}")
    if len(set(changing)) != len(changing):
        raise TypeError(f"{cls.__name__}: a field is named twice in {changing!r}")
    draft = len(fields) >= DRAFT_FROM_FIELDS
    namespace: dict[str, Any] = {"_KEEP": object(), "_new": object.__new__, "_cls": cls,
                                 "_draft": _draft_class(cls) if draft else None}
    params, body = [], []
    for number, field in enumerate(fields):
        name = field.name
        namespace[f"_set{number}"] = setters[name]
        if changing:
            value = name if name in changing else f"state.{name}"
        elif kind == "replace":
            params.append(f"{name}=_KEEP")
            value = f"state.{name} if {name} is _KEEP else {name}"
        elif field.default is attrs.NOTHING:
            params.append(name)
            value = name
        elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            if field.default.takes_self:
                raise TypeError(f"{cls.__name__}.{name} has a factory that takes self")
            namespace[f"_factory{number}"] = field.default.factory
            params.append(f"{name}=_KEEP")
            value = f"_factory{number}() if {name} is _KEEP else {name}"
        else:
            namespace[f"_default{number}"] = field.default
            params.append(f"{name}=_default{number}")
            value = name
        body.append(f"    new.{name} = {value}\n" if draft
                    else f"    _set{number}(new, {value})\n")
    # Not keyword-only: CPython fills missing positional defaults from a tuple but missing
    # keyword-only ones by a dict lookup each, which made a copy of a wide state ~30 % slower.
    # Callers still name every field (a positional field would be a bug the tests catch).
    head = "state, " if kind == "replace" else "*, "
    if changing:
        head, params = "state, ", list(changing)
    source = (f"def {kind}({head}{', '.join(params)}):\n"
              f"    new = _new({'_draft' if draft else '_cls'})\n" + "".join(body)
              + ("    new.__class__ = _cls\n" if draft else "") + "    return new\n")
    exec(compile(source, f"<agentturn {kind} {cls.__qualname__}>", "exec"), namespace)
    function: Callable[..., Any] = namespace[kind]
    return function


def replacer(cls: type[_T], *changing: str) -> Callable[..., _T]:
    """A fast ``attrs.evolve`` for a slotted attrs class, for reducers' own states.

    A reducer builds a new state on every step, and both ``attrs.evolve`` (which walks the
    fields) and a frozen class's ``__init__`` (which calls ``object.__setattr__`` by name for
    each field) cost much more than the step's logic (see ``benchmarks/run.py``). This builds,
    once per class, a function with the field list written out that fills each slot through its
    member descriptor, so ``replace(state, phase=...)`` costs about one C call per field.

    Like :func:`builder` it is *trusted*: no validator runs, so it is only for values made from
    values that were validated already (a state, an event's fields). Classes with a converter,
    an alias or ``__attrs_post_init__`` are refused when the function is built. The tests check
    that it agrees with ``attrs.evolve`` for every field.

    ``replacer(cls, "turn")`` gives a copy for one hot call site that changes exactly the named
    fields, passed positionally: ``with_turn(state, turn)``. Keyword matching and a test per
    field are what the general copy spends most of its time on, so this one costs about half
    (measured on ``SessionState``: 0.25 floor against 0.51; see ``benchmarks/README.md``).
    """
    function: Callable[..., _T] = _compile(cls, "replace", changing)
    function.__doc__ = (f"Return a copy of a {cls.__name__} with "
                        + (", ".join(changing) if changing else "the given fields") + " changed.")
    return function


def builder(cls: type[_T]) -> Callable[..., _T]:
    """The trusted keyword constructor of a slotted attrs class, for reducers' own output.

    Commands, records and internal events a reducer makes from validated events and states
    need no second validation: ``builder(Persist)(key=..., records=...)`` fills the slots as
    :func:`replacer` does, with the class's defaults, and runs no validator. A host builds
    events with their classes, which validate; only reducers use this.
    """
    function: Callable[..., _T] = _compile(cls, "build")
    function.__doc__ = f"Build a {cls.__name__} from trusted, already validated values."
    return function


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


def is_bool(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Validator: the field is a ``bool``."""
    if type(value) is not bool:
        raise FieldError(
            f"{_where(instance, attribute)} must be a bool, got {type(value).__name__}"
        )


#: The trusted constructor of a :class:`Step` (see :func:`builder`), shared by the reducers.
new_step: Callable[..., Step[Any]] = builder(Step)
