"""Checks the turn's and the session's tests share: the particulars of a refusal, the tool
results a turn asked to save, the documented shape of a state (each field of its declared type;
a turn state's records, outcome and calls kept only while they mean something), and a turn asking
permission for two writes.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

import attrs
from driver import Driver, call, no_titles

import agentturn as at


def refused(error: at.ProtocolError) -> tuple[object, ...]:
    """The particulars of a refusal: its class, part, phase, event and what was expected."""
    return (type(error), error.part, error.phase, error.event, error.expected)


def two_writes_awaiting_permission(config: at.TurnConfig | None = None) -> Driver:
    """A response of two calls that each need permission; the turn asks about ``w1``."""
    driver = Driver(config or no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("w1", "write_file", permission=True),
                                                      call("w2", "write_file", permission=True)])
    driver.ack()
    assert driver.state.phase is at.TurnPhase.AWAITING_PERMISSION
    return driver


def turn_shape_problems(state: at.TurnState) -> list[str]:
    """What breaks the documented shape of a turn state: a field of the wrong type, records
    in ``batch`` ("the records of the write in flight") with no write in flight and no failed
    write kept for ``ContinueTurn``, an ``ending`` ("the outcome decided while final
    lifecycle work drains") kept once the turn is no longer ending, or ``calls`` ("the current
    response's tool calls") kept once the turn has ended with nothing to continue."""
    problems = field_type_problems(state)
    if state.batch and not state.persisting and state.resume_phase is None:
        problems.append(f"batch {state.batch!r} kept with no write in flight")
    if state.calls and state.phase is at.TurnPhase.IDLE and state.resume_phase is None:
        problems.append(f"calls {state.calls!r} kept after the turn ended")
    if state.ending is not None and state.phase is not at.TurnPhase.ENDING:
        problems.append(f"ending {state.ending!r} kept in {state.phase.name}")
    return problems


class CheckedDriver(Driver):
    """The turn driver, checking the turn's shape after every single step."""

    def send(self, *events: at.Event) -> tuple[at.Command, ...]:
        commands: list[at.Command] = []
        for event in events:
            commands.extend(super().send(event))
            assert not turn_shape_problems(self.state), (event, turn_shape_problems(self.state))
        return tuple(commands)


def field_type_problems(state: Any) -> list[str]:
    """Each ``str``, ``bool``, ``int``, enum or tuple field of a state that holds another type."""
    kind = type(state)
    # Resolved here, so the check never depends on whether another test resolved them first.
    attrs.resolve_types(kind)
    problems = []
    for field in attrs.fields(kind):
        declared = typing.get_origin(field.type) or field.type
        if (isinstance(declared, type)
                and (declared in (str, bool, int, tuple) or issubclass(declared, enum.Enum))
                and type(getattr(state, field.name)) is not declared):
            problems.append(f"{field.name}={getattr(state, field.name)!r} is not {field.type}")
    return problems
