"""The driver's trace: the library's own format, written line by line as the driver runs.

Theory of operation
-------------------
Every step the driver takes (an event in, the reducer's commands out) is one trace line,
written before any of those commands is carried out, so the file on disk is always a prefix of
what happened. The header is written when the driver starts, from the configuration the driver
made its first state from (a trace replays from the header's state, so a driver that traces
starts from a new session or turn). The end line, with its SHA-256 of every line before it, is
written when the driver ends, however it ends (closed, cancelled, interrupted); it is computed
as the lines go, so a long session holds no copy of its trace. ``agentturn check`` and
``agentturn explain`` read the result. A trace is bounded (:data:`agentturn.trace.MAX_LINES`):
past it, the driver ends the trace and writes no more (``TraceWriter.full``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, TextIO

from .._base import Command, Event
from ..trace import MAX_LINES, header_line, step_line
from ..trace.lines import dumps

__all__ = ["TraceWriter"]


class TraceWriter:
    """Writes one trace to ``out`` (any text file); ``out=None`` writes nothing."""

    def __init__(self, out: TextIO | None, part: str, config: Any, chat_id: str = "") -> None:
        self._out = out
        self._digest = hashlib.sha256()
        self._lines = 0
        self.ended = out is None
        #: The trace reached its line limit and was ended early.
        self.full = False
        self._header = header_line(part, config, chat_id) if out is not None else ""

    def start(self) -> None:
        """Write the header (the driver does, when it starts)."""
        if self._header and self._lines == 0:
            self._write(self._header)

    def _write(self, line: str) -> None:
        if self._out is None:
            return
        self._out.write(line + "\n")
        self._digest.update(line.encode("utf-8") + b"\n")
        self._lines += 1

    def step(self, event: Event, commands: Iterable[Command]) -> None:
        """Write one step (nothing once the trace has ended)."""
        if self.ended:
            return
        if self._lines + 2 > MAX_LINES:
            self.full = True
            self.end()
            return
        self._write(step_line(self._lines, event, commands))

    def end(self) -> None:
        """Write the end line, once."""
        if self.ended or self._out is None:
            return
        self.ended = True
        self._out.write(dumps({"end": True, "steps": self._lines - 1,
                               "digest": self._digest.hexdigest()}) + "\n")
        self._out.flush()
