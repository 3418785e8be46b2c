"""The example's tools: real file writes in the session's folder, a test run, a todo list.

Theory of operation
-------------------
Each tool is a coroutine that returns a :class:`Result`; the agent turns it into the session's
``ToolFinished``. A file write never leaves a half-written file: the content goes to a temporary
file beside the target (in ``chunks`` pieces, one every ``delay`` seconds, by default
:data:`CHUNK_DELAY`, so a long write takes a while) and is renamed over the target at the end.
Only ``stop`` (the driver's :class:`agentturn.aio.StopSignal`, set when the session sends
``CancelTool`` after Stop) ends a write early, and
then nothing is written; a Lead never sets it (LD-10). Paths must stay inside the folder;
anything else is a tool error the model reads, not an exception.

``todo_write`` returns the todo list as the structured envelope the session hands to the todo
stop guard (``{"type": "todo_list", "todos": [...]}``).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
from dataclasses import dataclass
from typing import Any

from agentturn.aio import StopSignal

__all__ = ["CHUNK_DELAY", "MAX_CHUNK_DELAY", "Result", "run_tool"]

#: Seconds between two chunks of a chunked write (the call's ``delay`` argument, if any, within
#: :data:`MAX_CHUNK_DELAY`).
CHUNK_DELAY = 0.03
MAX_CHUNK_DELAY = 3.0


@dataclass(frozen=True)
class Result:
    """What a tool returned."""

    output: str
    error: bool = False
    cancelled: bool = False
    #: The structured result (the todo-write envelope), if any.
    structured: Any = None


def _inside(root: pathlib.Path, relative: object) -> pathlib.Path | None:
    if not isinstance(relative, str) or not relative:
        return None
    target = (root / relative).resolve()
    return target if target.is_relative_to(root.resolve()) else None


async def _write_file(root: pathlib.Path, arguments: dict[str, Any],
                      stop: StopSignal) -> Result:
    target = _inside(root, arguments.get("path"))
    content = arguments.get("content")
    if target is None or not isinstance(content, str):
        return Result(output="refused: give a path inside the working folder and text content",
                      error=True)
    chunks = arguments.get("chunks", 1)
    chunks = chunks if type(chunks) is int and chunks > 1 else 1
    delay = arguments.get("delay", CHUNK_DELAY)
    delay = min(float(delay), MAX_CHUNK_DELAY) if type(delay) in (int, float) and delay > 0 else (
        CHUNK_DELAY)
    size = -(-len(content) // chunks)
    partial = target.with_name(f".{target.name}.partial")
    stopped = False
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("w", encoding="utf-8") as handle:
            for start in range(0, len(content), size):
                if stop.requested:
                    stopped = True
                    break
                handle.write(content[start:start + size])
                handle.flush()
                if chunks > 1:
                    await asyncio.sleep(delay)
        if not stopped:
            os.replace(partial, target)
    except OSError as error:
        return Result(output=f"failed: {error}", error=True)
    finally:
        partial.unlink(missing_ok=True)  # gone already after a completed write
    if stopped:
        return Result(output=f"cancelled: {target.name} was not written", cancelled=True)
    return Result(output=f"wrote {target.relative_to(root.resolve())} ({len(content)} chars)")


def _todo_write(arguments: dict[str, Any]) -> Result:
    todos = arguments.get("todos")
    if not isinstance(todos, list):
        return Result(output="refused: todos must be a list", error=True)
    unfinished = sum(1 for todo in todos
                     if isinstance(todo, dict) and todo.get("status") != "completed")
    return Result(output=f"{len(todos)} todos, {unfinished} unfinished",
                  structured={"type": "todo_list", "todos": todos})


async def run_tool(root: pathlib.Path, name: str, arguments_json: str,
                   stop: StopSignal) -> Result:
    """Run tool ``name`` with its JSON arguments in folder ``root``."""
    try:
        arguments = json.loads(arguments_json or "{}")
    except json.JSONDecodeError:
        return Result(output="refused: the arguments are not JSON", error=True)
    if not isinstance(arguments, dict):
        return Result(output="refused: the arguments must be an object", error=True)
    if name == "write_file":
        return await _write_file(root, arguments, stop)
    if name == "todo_write":
        return _todo_write(arguments)
    if name == "run_tests":
        return Result(output="3 passed")
    return Result(output=f"unknown tool {name!r}", error=True)
