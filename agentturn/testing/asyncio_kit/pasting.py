"""A finding as a test to paste: the spec that found it, written as Python, and its program.

Theory of operation
-------------------
A failure ends with a test a host author pastes: ``replay(<the spec>, [<the moves>])``. The
spec is written the shortest way that gives the same spec back:

* by its name, when a module other than ``__main__`` holds it as a module-level name (the test
  module that called :func:`~agentturn.testing.asyncio_kit.check`, or the host's module):
  ``from tests.test_my_host import SPEC``;
* otherwise as ``AsyncSpec(...)`` with every field that differs from its default, each value
  written as source (:func:`source`): attrs classes by their non-default fields, enums by
  member, functions and classes by their import, tuples, lists and dicts item by item. A value
  that cannot be written (a lambda, a closure, an object of no importable class) becomes
  ``...`` with a comment that names the field to fill in, so the test still parses and says
  what is missing.
"""

from __future__ import annotations

import enum
import math
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import attrs

__all__ = ["source", "spec_source"]


def _module_of(obj: Any, name: str) -> str | None:
    """The shortest module path that exports ``obj`` as ``name`` (its own module otherwise)."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str) or module == "__main__":
        return None
    parts = module.split(".")
    for end in range(1, len(parts) + 1):
        candidate = sys.modules.get(".".join(parts[:end]))
        if candidate is not None and getattr(candidate, name, None) is obj:
            return ".".join(parts[:end])
    return module


def _named(obj: Any, imports: set[str]) -> str | None:
    """An importable name for a function, a class or a classmethod, noting its import."""
    owner = getattr(obj, "__self__", None)
    if isinstance(owner, type):  # a classmethod: named on its class
        name = _named(owner, imports)
        return None if name is None else f"{name}.{obj.__name__}"
    if owner is not None and not isinstance(owner, ModuleType):
        return None  # a method of an object: the object cannot be named
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(qualname, str) or "<" in qualname:
        return None
    top = qualname.split(".")[0]
    module = _module_of(obj, top) if "." not in qualname else getattr(obj, "__module__", None)
    if not isinstance(module, str) or module == "__main__":
        return None
    imports.add(f"from {module} import {top}")
    return qualname


def source(value: Any, imports: set[str]) -> str | None:
    """``value`` as Python source (``None``: it cannot be written), noting the imports."""
    if isinstance(value, enum.Enum):  # (before int and str: an IntEnum is an int)
        name = _named(type(value), imports)
        return None if name is None else f"{name}.{value.name}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    if isinstance(value, tuple | list):
        items = [source(item, imports) for item in value]
        written = [item for item in items if item is not None]
        if len(written) < len(items):
            return None
        text = ", ".join(written)
        if isinstance(value, list):
            return f"[{text}]"
        return f"({text},)" if len(written) == 1 else f"({text})"
    if isinstance(value, Mapping):
        pairs = [(source(k, imports), source(v, imports)) for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    if attrs.has(type(value)):
        name = _named(type(value), imports)
        if name is None:
            return None
        arguments = []
        for field in attrs.fields(type(value)):
            if not field.init:
                continue
            given = getattr(value, field.name)
            if given == _default(field):
                continue
            argument = source(given, imports)
            if argument is None:
                return None
            arguments.append(f"{field.alias or field.name}={argument}")
        return f"{name}({', '.join(arguments)})"
    if callable(value):
        return _named(value, imports)
    return None


def _default(field: attrs.Attribute[Any]) -> Any:
    default: Any = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return attrs.NOTHING if default.takes_self else default.factory()
    return default


def spec_source(spec: Any, places: list[dict[str, Any]], imports: set[str]) -> str:
    """The spec as source: its module-level name in one of ``places`` (module globals), or
    ``AsyncSpec(...)`` with its non-default fields (see the module docstring)."""
    for namespace in places:
        module = namespace.get("__name__")
        if not isinstance(module, str) or module == "__main__":
            continue
        for name, value in namespace.items():
            if value is spec and not name.startswith("_"):
                imports.add(f"from {module} import {name}")
                return name
    imports.add("from agentturn.testing.asyncio_kit import AsyncSpec")
    lines = []
    for field in attrs.fields(type(spec)):
        given = getattr(spec, field.name)
        if field.name != "make_effects" and given == _default(field):
            continue
        written = source(given, imports)
        if written is None:
            lines.append(f"        {field.name}=...,  # fill in: your {field.name} "
                         "(it cannot be printed)")
        else:
            lines.append(f"        {field.name}={written},")
    return "AsyncSpec(\n" + "\n".join(lines) + "\n    )"
