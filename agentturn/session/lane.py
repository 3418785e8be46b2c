"""The direct lane: the commonest session steps, taken without the message loop.

Theory of operation
-------------------
Most steps of a running session are a write acknowledged, a tool's result, a permission answer,
a Lead typed or saved, a stream that opens or completes. The order rules
(:mod:`agentturn.session.reducer`) fix who hears such an event and what follows, and most of the
time the turn answers with commands that are the host's alone: a ``Persist``, the next
``ExecuteTool``, the user's next ``RequestModelStream``. Then the session has nothing to
translate (:func:`~agentturn.session.translate.passes_through`) and nothing to decide
(:func:`~agentturn.session.scheduling.settle` decides only when the session idles, a turn
ended or an automatic turn came due, and none of that happens while a turn runs on). Such a step
can be built directly: the parts are called in the order the rules give, on the state itself,
with no :class:`~agentturn.session.tick.Tick`, no inbox and no settle.

A lane step exists for each of these handlers (:data:`LANES`), and takes the step only in the
plain case its handler names; anything else (the todo-write call's result, a cancelled dialog,
the guard's own stream, a request another part must attribute, the turn's end) goes through the
message loop, which is the definition. When a turn-only event turns out to need the session
after the turn has answered, the lane hands that answer to the loop, which goes on from there,
so nothing is computed twice; the two rarer lanes let the loop redo the step.

This is a speed path, and the one place that has one. ``tests/session/test_lane.py`` walks every
configuration both ways (with the lanes and with none) and requires equal states, commands
and refusals on every step, and checks :func:`~agentturn.session.translate.passes_through`
against the translations themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from .. import guard as g
from .._base import Command, Step
from .._trusted import new_step, replacer
from ..events import (
    PermissionDecided,
    PermissionDecision,
    StreamCompleted,
    StreamOpened,
    ToolFinished,
)
from ..guard.reducer import reduce_into as guard_into
from ..turn import reduce_into as turn_into
from . import turn_events as on
from .ring import EntryKind, count_model_call
from .scheduling import settle
from .state import SessionState
from .tick import Tick, with_turn
from .translate import SESSION_ACTS_ON, heard_by_turn, passes_through, published

__all__ = ["LANES"]

_Handler = Callable[[Tick, Any], None]
_Lane = Callable[[SessionState, Any], "Step[SessionState] | None"]

#: ``(state, turn, ring)``: a response recorded and its text published.
_with_turn_and_ring = replacer(SessionState, "turn", "ring")
#: ``(state, turn, guard, guard_request, hook_request, usage)``: an ordinary stream opened.
_opened = replacer(SessionState, "turn", "guard", "guard_request", "hook_request", "usage")


def _step(state: SessionState, commands: list[Command]) -> Step[SessionState]:
    return new_step(state=state, commands=tuple(commands))


def _for_the_host(state: SessionState, commands: list[Command]) -> bool:
    for command in commands:
        # (The commonest commands are no concern of the session's: one set lookup says so.)
        if type(command) in SESSION_ACTS_ON and not passes_through(state, command):
            return False
    return True


def _turn_alone(state: SessionState, event: object) -> Step[SessionState] | None:
    """``to_turn`` (and the handlers below in their plain case): only the turn hears it."""
    commands: list[Command] = []
    turn = turn_into(state.turn, event, commands)
    if not _for_the_host(state, commands):
        tick = Tick(state)  # the session has a part in it: the message loop goes on
        heard_by_turn(tick, turn, commands, None)
        settle(tick)
        return _step(tick.s, tick.out)
    return _step(state if turn is state.turn else with_turn(state, turn), commands)


def _tool_finished(state: SessionState, event: ToolFinished) -> Step[SessionState] | None:
    if event.call_id == state.todo_call:
        return None  # its result goes to the guard too (SG-A1)
    return _turn_alone(state, event)


def _permission(state: SessionState, event: PermissionDecided) -> Step[SessionState] | None:
    if event.decision is PermissionDecision.CANCEL:
        return None  # a cancelled dialog is a hard stop for the guard (SG-S1)
    return _turn_alone(state, event)


def _stream_opened(state: SessionState, event: StreamOpened) -> Step[SessionState] | None:
    if event.request_id == state.guard_request and state.guard.phase is g.GuardPhase.CONTINUING:
        return None  # the guard's own stream: its attempt commits (SG-B3)
    commands: list[Command] = []
    turn = turn_into(state.turn, event, commands)
    if not _for_the_host(state, commands):
        return None
    if turn is state.turn:
        return _step(state, commands)  # a late answer the turn absorbed
    said: list[Command] = []
    guard = guard_into(state.guard, on.ORDINARY_STREAM_OPENED, said)  # it ends its tool loop
    if said:
        return None
    usage = count_model_call(state.usage, guard=False, hook=event.request_id == state.hook_request)
    return _step(_opened(state, turn, guard, "", "", usage), commands)


def _stream_completed(state: SessionState, event: StreamCompleted
                      ) -> Step[SessionState] | None:
    commands: list[Command] = []
    turn = turn_into(state.turn, event, commands)
    if not _for_the_host(state, commands):
        return None
    if turn is state.turn or not event.text:
        return _step(state if turn is state.turn else with_turn(state, turn), commands)
    ring, publish = published(state, EntryKind.MESSAGE_CHUNK, event.request_id, event.text, None)
    commands.append(publish)
    return _step(_with_turn_and_ring(state, turn, ring), commands)


#: The lane of each session handler that has one (:mod:`agentturn.session.turn_events`). The
#: reducer joins it with its routes of the phase ``TURN`` (``reducer.LANE_ROUTES``); a test
#: empties that table to compare.
LANES: Mapping[_Handler, _Lane] = MappingProxyType({
    on.to_turn: _turn_alone,
    on.on_lead: _turn_alone,  # a Lead in a running turn is the turn's (LD-1 ... LD-6)
    on.on_tool_finished: _tool_finished,
    on.on_permission: _permission,
    on.on_stream_opened: _stream_opened,
    on.on_stream_completed: _stream_completed,
})
