"""Saving a session state and restoring it: the same strict reading, then a consistency check.

Theory of operation
-------------------
:func:`dump_state` writes a session state as one JSON object without its guard: the guard's
trust is never persisted (SG-A12). :func:`load_state` reads it with the strict converter (exact
types, no unknown field, the limits of :mod:`agentturn._json`), gives it a new guard from the
configuration, as after a daemon restart, and then checks that the state agrees with itself
(:func:`~agentturn.session.consistency.inconsistencies`): a hand-edited ``next_call`` past the
response's calls, a phase that waits on an id the state does not hold, counters that disagree.
A state that does not is refused with a :class:`~agentturn.trace.TraceError` naming the first
disagreement, rather than handed back to fail later inside a reducer.
"""

from __future__ import annotations

from typing import Any

import attrs

from .. import __version__
from .._json import parse_line
from ..guard.state import GuardConfig, GuardState
from ..session.consistency import inconsistencies
from ..session.state import SessionConfig, SessionState
from .convert import converter, reason, strict
from .lines import FORMAT, FORMAT_VERSION, TraceError, dumps

__all__ = ["dump_state", "load_state"]

_FORMAT = FORMAT + "-state"
_FIELDS = {"format", "format_version", "library_version", "state"}


def dump_state(state: SessionState) -> str:
    """A session state as one JSON object, without its guard (never persisted, SG-A12)."""
    if type(state) is not SessionState:
        raise TraceError(f"dump_state saves a SessionState, got {type(state).__name__}")
    data = converter().unstructure(state, SessionState)
    del data["guard"]
    return dumps({"format": _FORMAT, "format_version": FORMAT_VERSION,
                   "library_version": __version__, "state": data})


def load_state(text: str, guard: GuardConfig | None = None) -> SessionState:
    """The saved session with a new guard, as after a restart: nothing it trusted survives.

    ``guard`` is the guard configuration read at this restart (SG-C2: the setting applies at
    restart); by default the saved configuration's. Raises :class:`TraceError` when the text
    is not a saved state of this format version, a field does not read, or the state does not
    agree with itself.
    """
    if type(text) is not str:
        raise TraceError(f"a saved state is text, got {type(text).__name__}")
    try:
        record: Any = parse_line(text.rstrip("\r\n"))
    except ValueError as error:
        raise TraceError(f"the saved state: {error}") from None
    if (type(record) is not dict or record.get("format") != _FORMAT
            or type(record.get("format_version")) is not int
            or record.get("format_version") != FORMAT_VERSION):
        raise TraceError("not a saved agentturn session state of a supported version")
    if type(record.get("library_version")) is not str:
        raise TraceError("the saved state: 'library_version' must be a string")
    unknown = sorted(set(record) - _FIELDS)
    if unknown:
        raise TraceError(f"the saved state: unknown field(s) {', '.join(map(repr, unknown))}")
    data = record.get("state")
    if type(data) is not dict:
        raise TraceError("the saved state: 'state' must be an object")
    if "guard" in data:
        raise TraceError("the saved state: it holds a guard, which is never saved (SG-A12)")
    try:
        config = strict().structure(data.get("config"), SessionConfig)
        if guard is not None:
            config = attrs.evolve(config, guard=guard)
        fields = {**data, "config": converter().unstructure(config, SessionConfig),
                  "guard": converter().unstructure(GuardState.create(config.guard), GuardState)}
        state = strict().structure(fields, SessionState)
    except Exception as error:  # anything the strict converter or a validator refuses
        raise TraceError(f"the saved state does not read: {reason(error)}") from None
    problems = inconsistencies(state)
    if problems:
        raise TraceError(f"the saved state does not agree with itself: {problems[0]}")
    return state
