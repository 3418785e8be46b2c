"""The trace format as a JSON Schema, derived from the vocabularies: what a host in any language
writes.

Theory of operation
-------------------
Every line of a trace is one JSON document; :func:`schema` returns the JSON Schema (draft
2020-12) each line validates against: a header, a step or an end record. It is derived from the
same declarations the reader uses — the registry's event and command classes, their attrs
fields and annotations, the configurations — so it cannot drift from the reader: a field's
Python type becomes its JSON type (``str`` a string, ``int`` an integer, a ``float`` a number or
``"Infinity"``, an enum its values, a tuple an array, ``X | None`` either, an attrs class an
object with exactly its fields, those without a default required), and each event and command is
an object whose ``"type"`` is its tag. ``docs/trace-format.schema.json`` is this schema as a
file, versioned with :data:`~agentturn.trace.FORMAT_VERSION`; a test checks the file equals
:func:`schema`, and that every trace the library writes validates against it.

The schema says what a line may look like; the reader also checks what no schema can: step
numbers in order, the end record's count and digest, the limits of :mod:`agentturn._json`.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import attrs

from ..registry import command_types, event_types, tag
from ..session.ring import Meta
from .lines import _CONFIGS, FORMAT, FORMAT_VERSION, PARTS

__all__ = ["schema"]

_ANY: dict[str, Any] = {}


class _Builder:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def of(self, tp: Any) -> dict[str, Any]:
        """The schema of one annotation."""
        if tp is Any or isinstance(tp, typing.ForwardRef) or tp is Meta:
            return {"type": "object"} if tp is Meta else dict(_ANY)
        if tp is type(None):
            return {"type": "null"}
        if tp is str:
            return {"type": "string"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"anyOf": [{"type": "number"}, {"enum": ["Infinity", "-Infinity"]}]}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"enum": [member.value for member in tp]}
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(arg) for arg in args]}
        if origin is tuple or origin is frozenset:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                return {"type": "array", "prefixItems": [self.of(arg) for arg in args],
                        "minItems": len(args), "maxItems": len(args)}
            return {"type": "array", "items": self.of(args[0]) if args else _ANY}
        if isinstance(tp, type) and attrs.has(tp):
            return self.ref(tp)
        raise TypeError(f"no JSON Schema for {tp!r}")

    def ref(self, cls: type, tagged: str = "") -> dict[str, Any]:
        """A reference to ``cls``'s definition (built once); ``tagged`` adds its ``type``."""
        name = tagged or cls.__qualname__
        if name not in self.defs:
            self.defs[name] = {}  # a placeholder: a class may refer to itself
            hints = typing.get_type_hints(cls)
            properties: dict[str, Any] = {}
            required: list[str] = []
            if tagged:
                properties["type"] = {"const": tagged}
                required.append("type")
            for field in attrs.fields(cls):
                properties[field.name] = self.of(hints[field.name])
                if field.default is attrs.NOTHING:
                    required.append(field.name)
            self.defs[name] = {"type": "object", "properties": properties,
                               "required": required, "additionalProperties": False}
            doc = (cls.__doc__ or "").strip().split("\n\n")[0]
            if doc:
                self.defs[name]["description"] = " ".join(doc.split())
        return {"$ref": f"#/$defs/{name}"}


def schema() -> dict[str, Any]:
    """The JSON Schema every line of a trace of this format version validates against."""
    build = _Builder()
    events = [build.ref(cls, tag(cls)) for cls in event_types()]
    commands = [build.ref(cls, tag(cls)) for cls in command_types()]
    configs = {part: build.ref(cls) for part, cls in _CONFIGS.items()}
    common = {"format": {"const": FORMAT}, "format_version": {"const": FORMAT_VERSION},
              "library_version": {"type": "string"}}
    header = {"description": "Line 1: what the trace records, and the configuration it "
                             "starts from.",
              "oneOf": [{"type": "object",
                         "properties": {**common, "part": {"const": part}, "config": ref,
                                        **({"chat_id": {"type": "string", "minLength": 1}}
                                           if part == "turn" else {})},
                         "required": ["format", "format_version", "library_version", "part",
                                      "config", *(["chat_id"] if part == "turn" else [])],
                         "additionalProperties": False}
                        for part, ref in configs.items()]}
    step = {"description": "One step: the event in and the commands out, numbered from 1.",
            "type": "object",
            "properties": {"step": {"type": "integer", "minimum": 1},
                           "event": {"oneOf": events},
                           "commands": {"type": "array", "items": {"oneOf": commands}}},
            "required": ["step", "event", "commands"], "additionalProperties": False}
    end = {"description": "The last line: the number of steps and the SHA-256 of every line "
                          "before it, each as UTF-8 followed by a newline.",
           "type": "object",
           "properties": {"end": {"const": True}, "steps": {"type": "integer", "minimum": 0},
                          "digest": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
           "required": ["end", "steps", "digest"], "additionalProperties": False}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://agentturn.dev/schema/trace-format-{FORMAT_VERSION}.json",
        "title": f"{FORMAT} format version {FORMAT_VERSION}: one line of a trace",
        "description": ("A trace is JSON Lines (UTF-8, lines ended by a newline): a header, "
                        "one step a line, an end record. Each line validates against this "
                        f"schema. Parts: {', '.join(PARTS)}."),
        "oneOf": [{"$ref": "#/$defs/header"}, {"$ref": "#/$defs/step"},
                  {"$ref": "#/$defs/end"}],
        "$defs": {"header": header, "step": step, "end": end, **build.defs},
    }
