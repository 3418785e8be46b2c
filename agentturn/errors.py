"""Host misuse: the ``ProtocolError`` family.

Theory of operation
-------------------
A reducer raises a :class:`ProtocolError` when the host sends an event it should never have sent
in the current phase: a tool result for a call that is not running, a second stream for one
request, an acknowledgement for a write that was never asked for. The error is raised before
anything is computed, so the state the host holds stays valid and unchanged; the host may log it
and carry on with that state.

A refusal that belongs to the user (a Lead that is too long, a ninth pending instruction) is never
an exception: it is a command with a typed reason. Validation errors of single fields are
:class:`agentturn.FieldError` and are raised when the event is built, before any reducer sees it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ProtocolError", "UnexpectedEvent", "UnknownId", "WrongState", "check_state"]


class ProtocolError(Exception):
    """The host sent an event that the reducer cannot accept in its current phase.

    Attributes name what happened: ``phase`` (the phase the state was in), ``event`` (the
    offending event) and ``expected`` (what the reducer would have accepted instead).
    """

    def __init__(self, *, part: str, phase: str, event: Any, expected: str) -> None:
        self.part = part
        self.phase = phase
        self.event = event
        self.expected = expected
        super().__init__(
            f"{part}: can't handle {type(event).__name__} in phase {phase}; expected {expected}"
        )


class UnexpectedEvent(ProtocolError):
    """The event's type is not accepted in the current phase."""


class UnknownId(ProtocolError):
    """The event names a request, tool call, record or instruction the reducer is not waiting on."""


class WrongState(ProtocolError):
    """The state handed to a reducer is not that reducer's state (``None``, another part's)."""


def check_state(part: str, state: object, kind: type, event: object) -> None:
    """Raise :class:`WrongState` unless ``state`` is a ``kind``: a reducer's first line, so a
    host that passes the wrong object gets a ``ProtocolError``, never an ``AttributeError``."""
    if not isinstance(state, kind):
        raise WrongState(part=part, phase=f"<not a {kind.__name__}: {type(state).__name__}>",
                         event=event, expected=f"a {kind.__name__} as the state")
