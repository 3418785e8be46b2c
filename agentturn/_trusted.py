"""Trusted constructors: the one place where agentturn builds values without ``__init__``.

Theory of operation
-------------------
A reducer makes a new state on every step, and commands and records from the event it took.
Everything it builds them from was validated already: the event when the host built it, the
state when the reducer before made it. Running the validators again, or ``attrs.evolve``, would
cost more than the step's own logic (see ``benchmarks/run.py``), so reducers build with the two
functions here instead:

* :func:`replacer` gives a class's fast ``evolve``: ``replace(state, phase=...)``;
* :func:`builder` gives its trusted keyword constructor: ``builder(Persist)(key=..., ...)``.

Each is *generated once per class*, at import: Python source with the field list written out is
compiled by ``exec`` into a function that fills every slot directly. From
:data:`DRAFT_FROM_FIELDS` fields on, the function fills an instance of a *draft* class (a
subclass of the frozen class that adds no slot and allows plain assignment) and then re-labels it
as the class itself by assigning ``__class__`` (CPython allows this between classes of one
layout), which is cheaper than calling each slot's descriptor.

Why this is safe:

* the generated source is built from the class's own field names (Python identifiers) and
  references to its defaults and factories held in the function's namespace: no input from a
  host, a trace or any file ever reaches ``exec``;
* classes whose construction does more than fill slots are refused when the function is built:
  a converter, an alias, ``__attrs_post_init__`` or a factory that takes ``self``;
* the draft never leaves the generated function, and the result *is* the class (``type(x) is
  cls``), frozen, equal to what ``attrs.evolve`` and the class's constructor make: the tests
  (``tests/test_table.py``) check both for every field;
* it runs no validator, so only reducers use it, on values made from validated ones; everything
  a host builds goes through the class and validates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from ._base import Step

__all__ = ["DRAFT_FROM_FIELDS", "builder", "new_step", "replacer"]

_T = TypeVar("_T")


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


_new_tuple = tuple.__new__


def new_step(*, state: Any, commands: tuple[Any, ...]) -> Step[Any]:
    """A :class:`~agentturn.Step` of a reducer's own, validated output (shared by the reducers).

    ``Step`` is a typed pair (a ``tuple`` subclass): this builds it with ``tuple.__new__``
    directly, skipping the class's own ``__new__`` call.
    """
    return _new_tuple(Step, (state, commands))
