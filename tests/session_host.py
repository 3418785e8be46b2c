"""The session tests' host: agentturn's :class:`~agentturn.testing.ScriptedHost` on a daemon
session with the guard on and automatic titles off, the first prompt and the todo helpers
the tests share."""

from __future__ import annotations

from typing import Any

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn.testing import ScriptedHost, say

__all__ = ["ON", "PROMPT", "Host", "say", "todo_call", "todos"]

ON = g.GuardConfig(todo_stop_guard=True, daemon=True)
#: The prompt most session tests start with.
PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser")


def todos(*statuses: str) -> dict[str, Any]:
    """A todo-write envelope with these statuses."""
    return {"type": "todo_list", "todos": [
        {"id": str(i), "content": f"step {i}", "status": status}
        for i, status in enumerate(statuses)]}


def todo_call(call_id: str) -> at.ToolCall:
    return at.ToolCall(call_id=call_id, name="todo_write", arguments="{}")


class Host(ScriptedHost):
    """A scripted daemon host; ``fields`` are :class:`~agentturn.session.SessionConfig`'s."""

    def __init__(self, config: se.SessionConfig | None = None, **fields: Any) -> None:
        if config is None:
            fields.setdefault("chat_id", "chat")
            fields.setdefault("guard", ON)
            fields.setdefault("turn", at.TurnConfig(auto_title=False))
            config = se.SessionConfig(**fields)
        super().__init__(config)
