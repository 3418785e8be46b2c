"""The strict parser of the todo-write result envelope (SG-A1, SG-A4, SG-A5, OB-4).

Theory of operation
-------------------
Only a structured result of the built-in todo-write tool can arm the guard, so the parser is
strict: the envelope must be a mapping (a JSON *object*, never a JSON string that would still need
parsing) with ``type == "todo_list"`` and a list ``todos``; each item must be a mapping with a
string ``id``, a string ``content`` and a ``status`` of ``pending``, ``in_progress`` or
``completed``. Anything else rejects the whole envelope and changes nothing. Extra keys are allowed
(a newer tool may add ``priority``); wrong types, unknown statuses and missing keys are not.

The parser is total, like the reducer that calls it: a mapping whose own methods raise (a broken
or hostile object a host passed through) is rejected whole too, never raised through
``guard.reduce``.

The parser returns counts only. Todo text never leaves this function (OB-4): the guard's state,
commands and telemetry are built from :class:`TodoCounts`, which has no room for it.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .._base import Value

__all__ = ["STATUSES", "TodoCounts", "parse_todo_envelope"]

#: The statuses a todo item may have; unfinished = pending + in_progress.
STATUSES = frozenset({"pending", "in_progress", "completed"})


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TodoCounts(Value):
    """What the guard keeps of a todo list: how many items, how many unfinished."""

    total: int
    unfinished: int


def parse_todo_envelope(envelope: object) -> TodoCounts | None:
    """Counts of a well-formed envelope, or ``None`` when anything about it is off."""
    try:
        return _parse(envelope)
    except Exception:  # a Mapping whose get/__getitem__ raises: malformed, rejected whole
        return None


def _parse(envelope: object) -> TodoCounts | None:
    if not isinstance(envelope, Mapping):
        return None
    if type(envelope.get("type")) is not str or envelope["type"] != "todo_list":
        return None
    todos = envelope.get("todos")
    if type(todos) is not list:
        return None
    unfinished = 0
    for item in todos:
        if not isinstance(item, Mapping):
            return None
        if type(item.get("id")) is not str or type(item.get("content")) is not str:
            return None
        status = item.get("status")
        if type(status) is not str or status not in STATUSES:
            return None
        if status != "completed":
            unfinished += 1
    return TodoCounts(total=len(todos), unfinished=unfinished)
