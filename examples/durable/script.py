"""The demo session: a scripted model (answers by request id) and what the user sends.

Turn ``t1`` writes ``calc.py`` behind a permission prompt; while the prompt is open the user types
two Lead instructions and queues a second prompt, then allows the write. The Leads join ``t1``'s
next request, in order (the test run is skipped); the model rewrites the file with a docstring;
at the natural stop the queued prompt wins (SO-2). Turn ``t2`` writes a README and a todo list with
open items, stops, and the todo stop guard continues it once (attempt 1, committed when its
stream opens); the model completes the todos. Turn ``t3`` asks to run the tests; the user
presses Stop at the permission prompt. Then the client closes the session.
"""

from __future__ import annotations

import json
from typing import Any

Json = dict[str, Any]

__all__ = ["DEMO_INPUTS", "DEMO_SCRIPT", "demo_script"]

CALC = "def add(a, b):\n    return a + b\n"
CALC_DOC = 'def add(a, b):\n    """Return a + b."""\n    return a + b\n'
README = "# calc\n\n`add(a, b)` adds two numbers. See calc.py.\n"


def _call(call_id: str, name: str, needs_permission: bool = False, **arguments: Any) -> Json:
    return {"call_id": call_id, "name": name, "arguments": json.dumps(arguments),
            "needs_permission": needs_permission}


def _say(text: str, *calls: Json) -> Json:
    return {"text": text, "finish_reason": "tool_use" if calls else "end_turn",
            "tool_calls": list(calls)}


def _todos(*items: tuple[str, str]) -> list[Json]:
    return [{"id": str(n), "content": content, "status": status}
            for n, (content, status) in enumerate(items, 1)]


def demo_script(chat_id: str = "demo") -> Json:
    """The scripted model and the session's settings."""
    return {
        "chat_id": chat_id,
        "guard": True,
        "auto_title": True,
        "responses": {
            "t1/r1": _say("I'll write calc.py, then run the tests.",
                          _call("w1", "write_file", True, path="calc.py", content=CALC),
                          _call("x1", "run_tests")),
            "t1/r2": _say("Adding the one-line docstring you asked for.",
                          _call("w2", "write_file", path="calc.py", content=CALC_DOC)),
            "t1/r3": _say("calc.py is written, with its docstring."),
            "t2/r1": _say("Writing the README; I'll track it as todos.",
                          _call("c1", "todo_write", todos=_todos(("write README", "completed"),
                                                                 ("link calc.py", "pending"))),
                          _call("w3", "write_file", path="README.md", content=README)),
            "t2/r2": _say("The README is written."),
            "t2/r3": _say("Marking the link as done: the README names calc.py.",
                          _call("c2", "todo_write", todos=_todos(("write README", "completed"),
                                                                 ("link calc.py", "completed")))),
            "t2/r4": _say("All done: README written and linked."),
            "t3/r1": _say("Running the tests.", _call("x2", "run_tests", True)),
        },
        "default": _say("(no scripted answer)"),
    }


DEMO_SCRIPT = demo_script()

#: What the user sends, one message each time the session waits for input.
DEMO_INPUTS: list[Json] = [
    {"kind": "prompt", "text": "Create calc.py with an add function, then run the tests"},
    {"kind": "lead", "text": "also add a docstring"},  # while w1's permission prompt is open
    {"kind": "lead", "text": "and keep it to one line"},
    {"kind": "prompt", "text": "Then write a README"},  # queued: t1 is still running
    {"kind": "permission", "call_id": "w1", "decision": "allow"},
    {"kind": "prompt", "text": "Run the tests"},
    {"kind": "stop"},  # at x2's permission prompt
    {"kind": "close"},
]
