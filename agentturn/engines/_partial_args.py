"""Vertex AI's streamed function-call arguments (``partialArgs``) put back into one object.

Theory of operation
-------------------
With ``stream_function_call_arguments`` on, a Gemini function call arrives in pieces: a
``functionCall`` with ``willContinue: true`` opens it, later ones carry ``partialArgs``, and
the first without ``willContinue: true`` ends it. Each partial arg (google-genai's
``PartialArg``) is a JSON Path (RFC 9535) to one value of the arguments and that value:
``stringValue``, ``numberValue``, ``boolValue`` or ``nullValue``; its own ``willContinue`` says
another piece of the *same path* follows, which only a string can do (a double, a bool and a
null are whole).

:func:`read_piece` checks one partial arg where it arrives (its path parses, it holds one value
of a type its field allows); :func:`assemble` builds the arguments from a call's pieces, in
order, when the call ends. The rules, each a choice the type leaves open:

* Paths are the normalized paths and shorthands of RFC 9535: ``$`` then ``.name``,
  ``['name']`` / ``["name"]`` (with the RFC's escapes) or ``[n]``, a non-negative index. The
  first step names a member (the arguments are an object); wildcards, slices, filters,
  descendants and negative indices address no single value and are refused. At most
  ``MAX_DEPTH - 1`` steps.
* Objects and arrays exist through their members: ``$.a.b`` makes ``a`` an object,
  ``$.a[0]`` makes it an array. An array grows in order: an index may address an element that
  exists (``$.a[0].x`` then ``$.a[0].y``) or the next one, never skip one. (An empty object or
  array has no member to send, so it cannot arrive this way.)
* A string's pieces join as they are, with nothing between them; a piece with no value ends a
  continued string (``""``). Pieces of other paths may come between.
* A piece with no value that continues nothing is ``null``: proto3 JSON writes ``NullValue`` as
  ``null``, which the SDK's types read back as absent (``"NULL_VALUE"`` is read too).
* A number that is a whole double of at most 2**53 is an int (``3``, not ``3.0``), as the API
  writes a whole call's ``args``, so both give the same argument string.
* A ``functionCall.args`` given with the pieces is more members of the same object, read after
  them: a member the pieces also set must be equal.
* A value set twice, a member of a string, an array addressed as an object (or the reverse), an
  index that skips one: the pieces cannot be read, and the stream fails naming the piece.

A call that ends with a string still continuing, or whose stream ends before it does, was
cut: :func:`assemble` says it is unfinished, and the accumulator marks it unclosed, so it never
runs (``UNCLOSED_TOOL_BLOCK`` under a normal label, ``FINISH_REASON`` under ``MAX_TOKENS``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from .._json import MAX_DEPTH, json_problem
from ._core import WireShapeError, field

__all__ = ["Piece", "Pieces", "assemble", "parse_path", "read_piece", "whole_members"]

#: A path into the arguments: member names and array indexes.
Path = tuple[str | int, ...]

#: The largest whole double read as an int (every int up to it is exact in a double).
_EXACT = 2 ** 53


@attrs.frozen(kw_only=True)
class Piece:
    """One partial arg, checked; or a whole ``args`` member given with the pieces."""

    path: Path
    #: The path as the wire spelled it, and the field the piece came in (for errors).
    spelled: str
    where: str
    #: ``"string"``, ``"value"`` (any other JSON value) or ``"none"`` (no value sent).
    kind: str
    value: Any = None
    #: The piece's own ``willContinue``: more of this path's string follows.
    more: bool = False
    #: From ``functionCall.args`` (checked against the pieces), not from ``partialArgs``.
    whole: bool = False


#: A call's pieces, newest first: ``(piece, older)`` or ``None`` (O(1) to add, shared).
Pieces = tuple[Piece, "Pieces"] | None


# --- paths ----------------------------------------------------------------------------------

_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "/": "/", "\\": "\\",
            "'": "'", '"': '"'}


def _name_start(char: str) -> bool:
    return not char.isascii() or char.isalpha() or char == "_"


def _quoted(text: str, start: int, where: str) -> tuple[str, int]:
    """The member name quoted at ``text[start]``, and the index after its closing quote."""
    quote, i = text[start], start + 1
    out: list[str] = []
    while i < len(text):
        char = text[i]
        if char == quote:
            return "".join(out), i + 1
        if char == "\\":
            code = text[i + 1:i + 2]
            if code == "u":
                unit = _hex4(text, i + 2, where)
                i += 6
                if 0xD800 <= unit < 0xDC00 and text[i:i + 2] == "\\u":
                    low = _hex4(text, i + 2, where)
                    if 0xDC00 <= low < 0xE000:
                        unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                        i += 6
                if 0xD800 <= unit < 0xE000:
                    raise WireShapeError(f"{where} escapes a lone surrogate")
                out.append(chr(unit))
                continue
            if code not in _ESCAPES or (code in "'\"" and code != quote):
                raise WireShapeError(f"{where} has an unknown escape at {i}")
            out.append(_ESCAPES[code])
            i += 2
            continue
        if ord(char) < 0x20:
            raise WireShapeError(f"{where} has a control character at {i}")
        out.append(char)
        i += 1
    raise WireShapeError(f"{where} has an unclosed quote at {start}")


def _hex4(text: str, start: int, where: str) -> int:
    digits = text[start:start + 4]
    if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise WireShapeError(f"{where} has a bad \\u escape at {start - 2}")
    return int(digits, 16)


def parse_path(text: str, where: str) -> Path:
    """The steps of a JSON Path to one value of the arguments (see the module docstring).

    Raises :class:`WireShapeError` naming ``where`` and the position it cannot read."""
    if not text.startswith("$"):
        raise WireShapeError(f"{where} must start with '$'")
    steps: list[str | int] = []
    i = 1
    while i < len(text):
        if len(steps) >= MAX_DEPTH:
            raise WireShapeError(f"{where} has more than {MAX_DEPTH} steps")
        if text.startswith(".", i) and i + 1 < len(text) and _name_start(text[i + 1]):
            end = i + 2
            while end < len(text) and (_name_start(text[end]) or text[end].isdigit()):
                end += 1
            steps.append(text[i + 1:end])
            i = end
        elif text.startswith("['", i) or text.startswith('["', i):
            name, i = _quoted(text, i + 1, where)
            if not text.startswith("]", i):
                raise WireShapeError(f"{where} expects ']' at {i}")
            steps.append(name)
            i += 1
        elif text.startswith("[", i):
            end = text.find("]", i)
            digits = text[i + 1:end] if end != -1 else ""
            if not digits.isascii() or not digits.isdigit() or (
                    len(digits) > 1 and digits[0] == "0") or len(digits) > 9:
                raise WireShapeError(f"{where} addresses no single value at {i} (an array "
                                     "index is a non-negative integer; wildcards, slices, "
                                     "filters and negative indexes are not read)")
            steps.append(int(digits))
            i = end + 1
        else:
            raise WireShapeError(f"{where} cannot be read at {i} (expected '.name', "
                                 "\"['name']\" or '[index]')")
    if not steps or not isinstance(steps[0], str):
        raise WireShapeError(f"{where} must name a member of the arguments (an object)")
    return tuple(steps)


# --- pieces ---------------------------------------------------------------------------------


def read_piece(obj: object, where: str) -> Piece:
    """One partial arg, checked: its path parses, it holds at most one value of a type its
    field allows. Raises :class:`WireShapeError` naming the field."""
    if not isinstance(obj, Mapping):
        raise WireShapeError(f"{where} must be an object, got {type(obj).__name__}")
    snake = any(key in obj for key in ("json_path", "string_value", "number_value",
                                        "bool_value", "null_value", "will_continue"))
    spelled_key = "json_path" if obj.get("json_path") is not None or (
        snake and obj.get("jsonPath") is None) else "jsonPath"
    spelled: str | None = field(obj, "json_path", where, str, alias="jsonPath")
    if spelled is None:
        raise WireShapeError(f"{where}.{spelled_key} is missing")
    path = parse_path(spelled, f"{where}.{spelled_key} {spelled[:80]!r}")
    more = bool(field(obj, "will_continue", where, bool, alias="willContinue"))
    text = field(obj, "string_value", where, str, alias="stringValue")
    flag = field(obj, "bool_value", where, bool, alias="boolValue")
    number = _number(obj, where)
    null = _null(obj, where)
    given = [kind for kind, present in (("stringValue", text is not None),
                                        ("numberValue", number is not None),
                                        ("boolValue", flag is not None), ("nullValue", null))
             if present]
    if len(given) > 1:
        raise WireShapeError(f"{where} holds more than one value ({', '.join(given)})")
    if text is not None:
        return Piece(path=path, spelled=spelled, where=where, kind="string", value=text,
                     more=more)
    value = number[0] if number else flag
    kind = "none" if number is None and flag is None and not null else "value"
    if more and kind == "value":
        raise WireShapeError(f"{where}.willContinue is true, but only a string value comes in "
                             "pieces")
    return Piece(path=path, spelled=spelled, where=where, kind=kind, value=value, more=more)


def _number(obj: Mapping[str, Any], where: str) -> tuple[int | float] | None:
    value = field(obj, "number_value", where, (int, float), alias="numberValue")
    if value is None:
        return None
    spelled = "number_value" if obj.get("number_value") is not None else "numberValue"
    if isinstance(value, bool):
        raise WireShapeError(f"{where}.{spelled} must be int/float, got bool")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise WireShapeError(f"{where}.{spelled} must be a finite number, got {value!r}")
        if value.is_integer() and abs(value) <= _EXACT:
            return (int(value),)
    return (value,)


def _null(obj: Mapping[str, Any], where: str) -> bool:
    """Whether the piece says null: ``NULL_VALUE`` in either spelling, or the REST wire's
    ``"nullValue": null`` (a python-mode dump has every key, ``null_value: None`` included, so
    there a None says nothing)."""
    for key in ("null_value", "nullValue"):
        value = obj.get(key)
        if value is not None and getattr(value, "value", value) != "NULL_VALUE":
            raise WireShapeError(f"{where}.{key} must be NULL_VALUE or null, got "
                                 f"{type(value).__name__}")
    return any(obj.get(key) is not None for key in ("null_value", "nullValue")) or (
        "nullValue" in obj)


def whole_members(args: Mapping[str, Any], where: str) -> list[Piece]:
    """A ``functionCall.args`` given with the pieces, as one piece per member."""
    problem = json_problem(dict(args))
    if problem is not None:
        raise WireShapeError(f"{where} cannot be written as JSON: it {problem}")
    return [Piece(path=(key,), spelled=f"$[{key!r}]", where=f"{where}.{key}", kind="value",
                  value=value, whole=True) for key, value in args.items()]


# --- assembly -------------------------------------------------------------------------------


class _Open:
    """A string whose pieces still come."""

    __slots__ = ("parts",)

    def __init__(self, first: str) -> None:
        self.parts = [first]


def _kind(value: object) -> str:
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    return "a string" if isinstance(value, (str, _Open)) else "a value"


def assemble(pieces: Pieces) -> tuple[dict[str, Any], bool]:
    """The arguments the pieces build, and whether they are finished (no string still
    continues). Raises :class:`WireShapeError` naming the piece that cannot be placed."""
    ordered: list[Piece] = []
    while pieces is not None:
        ordered.append(pieces[0])
        pieces = pieces[1]
    root: dict[str, Any] = {}
    strings: dict[Path, tuple[Any, str | int, _Open]] = {}
    for piece in reversed(ordered):
        if piece.whole:
            continue
        if piece.path in strings:
            if piece.kind == "value":
                raise WireShapeError(f"{piece.where} continues the string at "
                                     f"{piece.spelled!r} with a value that is not a string")
            holder, key, text = strings[piece.path]
            if piece.kind == "string":
                text.parts.append(piece.value)
            if not piece.more:
                holder[key] = "".join(text.parts)
                del strings[piece.path]
            continue
        if piece.kind == "none" and piece.more:
            raise WireShapeError(f"{piece.where} has no value and continues "
                                 f"{piece.spelled!r}, which is no string under way")
        holder, key = _place(root, piece)
        if piece.kind == "string" and piece.more:
            text = _Open(piece.value)
            _put(holder, key, text)
            strings[piece.path] = (holder, key, text)
        else:
            _put(holder, key, piece.value)
    for holder, key, text in strings.values():  # cut while a string still came
        holder[key] = "".join(text.parts)
    for piece in ordered:
        if piece.whole:
            key = piece.path[0]
            if key in root and root[key] != piece.value:
                raise WireShapeError(f"{piece.where} differs from what partialArgs sent")
            root.setdefault(str(key), piece.value)
    return root, not strings


def _place(root: dict[str, Any], piece: Piece) -> tuple[Any, str | int]:
    """The container the piece's value goes in (made on the way) and its key there."""
    holder: Any = root
    for depth, step in enumerate(piece.path[:-1]):
        following = piece.path[depth + 1]
        holder = _child(holder, step, {} if isinstance(following, str) else [], piece, depth)
    last = piece.path[-1]
    _check_slot(holder, last, piece, len(piece.path) - 1)
    return holder, last


def _child(holder: Any, step: str | int, empty: Any, piece: Piece, depth: int) -> Any:
    _check_container(holder, step, piece, depth)
    if isinstance(holder, dict):
        if step not in holder:
            holder[step] = empty
    elif step == len(holder):
        holder.append(empty)
    elif isinstance(step, int) and step > len(holder):
        raise _skips(piece, depth, len(holder))
    return holder[step]


def _check_slot(holder: Any, step: str | int, piece: Piece, depth: int) -> None:
    _check_container(holder, step, piece, depth)
    if (isinstance(holder, dict) and step in holder) or (
            isinstance(holder, list) and isinstance(step, int) and step < len(holder)):
        raise WireShapeError(f"{piece.where} sets {piece.spelled!r} a second time")
    if isinstance(holder, list) and isinstance(step, int) and step > len(holder):
        raise _skips(piece, depth, len(holder))


def _check_container(holder: Any, step: str | int, piece: Piece, depth: int) -> None:
    wanted = dict if isinstance(step, str) else list
    if not isinstance(holder, wanted):
        at = _spell(piece.path[:depth])
        raise WireShapeError(f"{piece.where} addresses {piece.spelled!r}, but {at!r} is "
                             f"{_kind(holder)} there, not {_kind(wanted())}")


def _put(holder: Any, key: str | int, value: Any) -> None:
    if isinstance(holder, dict):
        holder[key] = value
    else:
        holder.append(value)


def _skips(piece: Piece, depth: int, size: int) -> WireShapeError:
    return WireShapeError(f"{piece.where} addresses {piece.spelled!r}, which skips index "
                          f"{size} of {_spell(piece.path[:depth])!r} (an array grows in order)")


def _spell(path: Path) -> str:
    return "$" + "".join(f"[{step}]" if isinstance(step, int) else
                         f".{step}" if step.isidentifier() else f"[{step!r}]" for step in path)
