"""Traces: a versioned JSON Lines record of every event in and every command out.

Theory of operation
-------------------
The reducers are deterministic, so the events a host fed them are enough to replay a session
exactly; recording the commands beside them lets anyone check that the host got what the spec
says, and explain afterwards why each thing happened. A trace is one JSON object per line
(``docs/trace-format.schema.json`` is its JSON Schema):

1. a header: ``{"format": "agentturn-trace", "format_version": 1, "library_version": ...,
   "part": "session" | "turn" | "guard", "config": {...}}`` (a turn trace adds ``chat_id``);
2. one line per step: ``{"step": n, "event": {"type": "StreamCompleted", ...}, "commands":
   [{"type": "Persist", ...}, ...]}``, steps numbered from 1 without gaps;
3. an end line: ``{"end": true, "steps": n, "digest": "<sha256>"}``, the SHA-256 of every line
   before it (each as UTF-8 with its ``\\n``), so a truncated or edited trace is told from a
   complete one.

* :mod:`~agentturn.trace.convert`: values to JSON and back (tagged unions; strict reading);
* :mod:`~agentturn.trace.lines`: writing the lines and reading them back, with the limits;
* :mod:`~agentturn.trace.states`: saving and restoring a session state.

``cattrs`` is imported here only: ``import agentturn`` does not load this package.
"""

from ..registry import command_types, event_types
from .convert import converter
from .lines import (
    FORMAT,
    FORMAT_VERSION,
    MAX_LINES,
    PARTS,
    Trace,
    TraceError,
    TraceStep,
    end_line,
    header_line,
    initial_state,
    read_trace,
    step_line,
    write_trace,
)
from .states import dump_state, load_state

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_LINES",
    "PARTS",
    "Trace",
    "TraceError",
    "TraceStep",
    "command_types",
    "converter",
    "dump_state",
    "end_line",
    "event_types",
    "header_line",
    "initial_state",
    "load_state",
    "read_trace",
    "step_line",
    "write_trace",
]
