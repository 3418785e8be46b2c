"""An entry's ``_meta``: an immutable, hashable JSON object (:class:`Meta`).

Theory of operation
-------------------
A ring entry keeps its ``_meta`` frozen so a state stays hashable and comparable: objects become
:class:`Meta` (keys sorted, so key order never matters), arrays tuples. Freezing checks that the
value is JSON (finite numbers, ``str`` keys, text encodable as UTF-8, at most sixteen levels
deep) and names the path of what is not, with a :class:`~agentturn.FieldError`. Equality is
exact: ``True``, ``1`` and ``1.0`` differ, as they do in JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

import attrs

from .._base import FieldError

__all__ = ["JsonValue", "Meta"]

#: How deeply ``meta`` values may nest (lists and objects inside objects).
_MAX_DEPTH = 16

#: A frozen JSON value: objects are :class:`Meta`, arrays are tuples.
JsonValue: TypeAlias = "bool | int | float | str | tuple[JsonValue, ...] | Meta | None"


def _meta_error(path: str, problem: str) -> FieldError:
    return FieldError(f"RingEntry.meta{path} {problem}")


def _freeze(value: object, path: str, depth: int) -> JsonValue:
    kind = type(value)
    if value is None or (isinstance(value, int) and kind in (bool, int)):
        return value
    if isinstance(value, str) and kind is str:
        _check_text(value, path)
        return value
    if isinstance(value, float) and kind is float:
        if not math.isfinite(value):
            raise _meta_error(path, f"must be a finite number, got {value!r}")
        return value
    if isinstance(value, Meta):
        return value
    if depth >= _MAX_DEPTH:
        raise _meta_error(path, f"nests deeper than {_MAX_DEPTH} levels")
    if isinstance(value, (list, tuple)) and kind in (list, tuple):
        return tuple(_freeze(item, f"{path}[{n}]", depth + 1) for n, item in enumerate(value))
    if isinstance(value, Mapping):
        return Meta(pairs=_freeze_pairs(value, path, depth + 1))
    raise _meta_error(path, f"must be a JSON value, got {kind.__name__}")


def _freeze_pairs(mapping: Mapping[Any, Any], path: str,
                  depth: int) -> tuple[tuple[str, JsonValue], ...]:
    pairs = []
    for key, value in mapping.items():
        if type(key) is not str:
            raise _meta_error(path, f"keys must be str, got {type(key).__name__}")
        _check_text(key, path)
        pairs.append((key, _freeze(value, f"{path}[{key!r}]", depth)))
    pairs.sort(key=lambda pair: pair[0])
    return tuple(pairs)


def _check_text(text: str, path: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise _meta_error(path, f"holds a lone surrogate at position {error.start}") from None


def _strict(value: JsonValue) -> object:
    """A comparison key that tells ``True`` from ``1`` and ``1`` from ``1.0``, at any depth."""
    if isinstance(value, Meta):
        return tuple((key, _strict(item)) for key, item in value.pairs)
    if isinstance(value, tuple):
        return tuple(_strict(item) for item in value)
    return (type(value).__name__, value)


def _thaw(value: JsonValue) -> object:
    if isinstance(value, Meta):
        return value.as_dict()
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


@attrs.frozen(kw_only=True, eq=False)
class Meta(Mapping[str, "JsonValue"]):
    """An immutable, hashable JSON object: an entry's ``_meta``. Build it with :meth:`of`.

    It reads like a read-only ``dict`` (``meta["attempt"]``, ``meta.get(...)``, ``dict(meta)``),
    with arrays as tuples and nested objects as :class:`Meta`; :meth:`as_dict` gives the wire
    form back. Keys are kept sorted, so key order never matters. Equality is exact: ``True``,
    ``1`` and ``1.0`` are different values here (JSON tells them apart), also against a ``dict``.
    """

    #: The key/value pairs, sorted by key.
    pairs: tuple[tuple[str, JsonValue], ...]

    @classmethod
    def of(cls, mapping: Mapping[str, object]) -> Meta:
        """Freeze a JSON-like mapping; :class:`FieldError` if it is not one."""
        if isinstance(mapping, Meta):
            return mapping
        if not isinstance(mapping, Mapping):
            raise _meta_error("", f"must be a mapping or None, got {type(mapping).__name__}")
        return cls(pairs=_freeze_pairs(mapping, "", 0))

    def __getitem__(self, key: str) -> JsonValue:
        for name, value in self.pairs:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Meta):
            return self is other or _strict(self) == _strict(other)
        if isinstance(other, Mapping):
            try:
                return _strict(self) == _strict(Meta.of(other))
            except FieldError:
                return False
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.pairs)

    def as_dict(self) -> dict[str, object]:
        """A new, mutable wire form: nested objects as ``dict``, arrays as ``list``."""
        return {key: _thaw(value) for key, value in self.pairs}


