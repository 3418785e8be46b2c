"""The message loop, and what each part's commands mean to the rest of the session.

Theory of operation
-------------------
:func:`run` empties a tick's inbox: it hands each message to its part (the turn's or the guard's
``reduce_into``, or a decision of the session's own) and translates the part's commands, one at
a time, in order. Translating a command does one of three things, and never calls a part:

* passes it to the host (``tick.emit``): a ``Persist``, an ``ExecuteTool``, a notice;
* turns it into a message for another part, queued at the back: the built-in todo-write call
  the turn starts becomes the guard's ``TodoWriteStarted``; the turn's ``EndTurn`` becomes the
  guard's ``ForegroundPromptSettled``;
* records what the session must remember: the request a guard continuation opens, the ring
  entry a guard chunk becomes.

A request for the model (``RequestModelStream``) is attributed here: to the continuation the
stop order decided (guard, hook), or, inside a tool loop the guard owns, to whoever the guard
says sponsors it (``ToolResultsReady``): the request waits in the message's ``then`` for the
guard's answer, which may amend it with the guard's prompt (SG-B6), withhold it (SG-B5) or let it
go. An ending the chain cannot resume from (an output limit, a content filter, an unrecognized
finish, a second malformed format, the action budget) tells the guard so (``UNRESUMABLE``), so
automatic turns never wait on a chain that cannot continue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, cast

import attrs

from .. import guard as g
from .. import turn as turn_part
from .._base import Command
from ..commands import (
    CancelStream,
    DecideNaturalStop,
    EndTurn,
    ExecuteTool,
    RequestModelStream,
)
from ..events import AmendRequest, HardStopped
from ..guard.reducer import reduce_into as guard_into
from ..guard.texts import DISCRETE_MARKER, GUARD_SOURCE, MAX_ATTEMPTS
from ..records import HardStopKind, OutcomeKind
from ..turn.state import TurnState
from . import background as bg
from . import clients, stop_order
from .ring import EntryKind, EventRing, publish
from .state import Continuation, SessionPhase, SessionState
from .tick import (
    Decision,
    Part,
    Then,
    Tick,
    build_publish,
    replace,
    with_guard,
    with_ring,
    with_turn,
)
from .vocabulary import Publish

__all__ = ["SESSION_ACTS_ON", "heard_by_turn", "passes_through", "publish_entry", "published",
           "run"]

P = SessionPhase
_EXHAUSTED_META = {"source": GUARD_SOURCE, DISCRETE_MARKER: True, "kind": "exhausted",
                   "attempt": MAX_ATTEMPTS, "maxAttempts": MAX_ATTEMPTS}
#: Endings the guard has heard about already: a natural stop (the stop order told it), Stop,
#: a cancelled dialog, a halt, a compaction failure and a token rejection (each told it as it
#: happened). A resumable error pauses the chain for its retry. Any other ending (an output
#: limit, a filter, a tool that ended the task, ...) leaves the chain nothing to resume from,
#: and the guard is told so at the turn's end.
_HEARD_BY_THE_GUARD = frozenset({OutcomeKind.FINISHED, OutcomeKind.EMPTY_RESPONSE,
                                 OutcomeKind.CANCELLED, OutcomeKind.HALTED,
                                 OutcomeKind.COMPACTION_FAILED, OutcomeKind.TOKEN_LIMIT})


def run(tick: Tick) -> None:
    """Deliver every message in the inbox, in order, translating what each part returns."""
    inbox = tick.inbox
    while inbox:
        part, message, then = inbox.popleft()
        if part is Part.SESSION:
            cast(Decision, message)(tick)  # the session's own decisions are the only callables
            continue
        commands: list[Command] = []
        s = tick.s
        if part is Part.TURN:
            heard_by_turn(tick, turn_part.reduce_into(s.turn, message, commands), commands, then)
            continue
        guard = guard_into(s.guard, message, commands)
        changed = guard is not s.guard
        if changed:
            tick.s = with_guard(s, guard)
        for command in commands:
            _on_guard_command(tick, command)
        if then is not None:
            then(tick, commands, changed)


def heard_by_turn(tick: Tick, turn: TurnState, commands: list[Command], then: Then | None
                  ) -> None:
    """The turn heard a message and answered with ``turn`` and ``commands``: take its new state,
    translate each command in order, then run the message's ``then``."""
    changed = turn is not tick.s.turn
    if changed:
        tick.s = with_turn(tick.s, turn)
    for command in commands:
        translate = _TURN_COMMANDS.get(type(command))
        if translate is None:
            tick.out.append(command)  # most go to the host as they are (tick.emit)
        else:
            translate(tick, command)
    if then is not None:
        then(tick, commands, changed)


def passes_through(s: SessionState, command: Command) -> bool:
    """Whether translating the turn's ``command`` in ``s`` only hands it to the host: no part
    hears of it and the state stays as it is. (The direct lane,
    :mod:`agentturn.session.lane`, relies on it; a test checks it against the translations.)"""
    kind = type(command)
    if kind not in _TURN_COMMANDS:
        return True
    if kind is ExecuteTool:  # not the built-in todo-write call, which the guard hears of
        call = cast(ExecuteTool, command).call
        return call.name != s.config.todo_tool or call.discovered
    if kind is RequestModelStream:  # a request of the user's, with no one else to attribute to
        return (s.continuation is Continuation.NONE and not s.guard_request
                and not s.hook_request and s.guard.loop is g.LoopOwner.NONE
                and not cast(RequestModelStream, command).lead_ids)
    if kind is CancelStream:  # a request the host was sent
        return cast(CancelStream, command).request_id != s.withheld_request
    return False  # the natural stop and the turn's end are the session's to decide


def publish_entry(tick: Tick, kind: EntryKind, message_id: str, text: str,
                  meta: Mapping[str, object] | None) -> None:
    """Put one replayable event in the ring and send it to the subscribers (OB-6, BR-5)."""
    ring, command = published(tick.s, kind, message_id, text, meta)
    tick.emit(command)
    tick.s = with_ring(tick.s, ring)


def published(s: SessionState, kind: EntryKind, message_id: str, text: str,
              meta: Mapping[str, object] | None) -> tuple[EventRing, Publish]:
    """The ring with one more replayable event, and the ``Publish`` that sends it (an event
    about the chat itself when ``message_id`` is empty)."""
    ring, entry = publish(s.ring, kind, message_id or s.config.chat_id, text, meta)
    return ring, build_publish(entry=entry)


# --- the guard's commands ---------------------------------------------------------------------


def _on_guard_command(tick: Tick, command: Command) -> None:
    if isinstance(command, g.StartWorkChain):
        tick.s = replace(tick.s, background=bg.snapshot_baseline(tick.s.background))  # BG-1
    elif isinstance(command, g.EmitAgentMessageChunk):
        publish_entry(tick, EntryKind.GUARD_CHUNK, tick.s.turn.request_id, command.text,
                      command.meta.as_meta())
    elif isinstance(command, g.ReportGuardExhausted):
        publish_entry(tick, EntryKind.GUARD_EXHAUSTED, tick.s.turn.turn_id, command.text,
                      {**_EXHAUSTED_META, "unfinishedCount": tick.s.guard.unfinished})
    elif isinstance(command, g.ContinueWithGuardPrompt | g.SendToolResults | g.KeepToolResults
                    | g.DeferAutomaticTurn | g.ReleaseAutomaticQueues | g.HookMayContinue):
        # Decisions the session reads where it asked (a message's ``then``), or acts on
        # itself: settle reads the hold from the state; a coalesced hook's reason is sent by
        # the session when its combined continuation cannot be compacted (SG-B9).
        pass
    else:
        tick.emit(command)


# --- the turn's commands ----------------------------------------------------------------------


def _on_execute_tool(tick: Tick, command: ExecuteTool) -> None:
    call = command.call
    s = tick.s
    if call.name == s.config.todo_tool and not call.discovered:
        tick.s = replace(s, todo_call=call.call_id)
        tick.to_guard(g.TodoWriteStarted(call_id=call.call_id, turn_id=s.turn.turn_id))
    tick.emit(command)


def _on_natural_stop(tick: Tick, command: DecideNaturalStop) -> None:
    stop_order.natural_stop(tick)


def _on_cancel_stream(tick: Tick, command: CancelStream) -> None:
    if command.request_id != tick.s.withheld_request:  # else the host never got that request
        tick.emit(command)


def _attribute(tick: Tick, request: RequestModelStream) -> None:
    """Attribute a model request: a decided continuation, the guard's tool loop, or the user."""
    s = tick.s
    continuation = s.continuation
    if continuation is Continuation.GUARD and request.lead_ids:
        # Lead instructions saved meanwhile ride on the continuation's request: the user's input
        # sponsors it, and the guard's pending attempt is withdrawn unspent (SG-B7, SG-A9).
        tick.s = replace(s, continuation=Continuation.NONE, guard_request="", hook_request="")
        tick.to_guard(g.MidTurnMessage())
        tick.emit(request)
        return
    if continuation is Continuation.GUARD:
        tick.emit(request)
        tick.s = replace(s, continuation=Continuation.NONE, guard_request=request.request_id,
                         hook_request="")
        return
    if continuation is Continuation.HOOK:
        tick.emit(request)
        tick.s = replace(s, continuation=Continuation.NONE, guard_request="",
                         hook_request=request.request_id)
        return
    if s.guard_request or s.hook_request:
        tick.s = s = replace(s, guard_request="", hook_request="")
    if s.guard.loop is not g.LoopOwner.NONE:
        # The guard's tool loop: the request waits for the guard to say who sponsors it.
        def sponsored(tick: Tick, commands: list[Command], changed: bool) -> None:
            _sponsored(tick, request, commands)

        tick.to_guard(g.ToolResultsReady(mid_turn_input=bool(request.lead_ids)), sponsored)
        return
    if request.lead_ids:
        tick.to_guard(g.MidTurnMessage())  # new user input: a fresh stage (SG-A9)
    tick.emit(request)


def _sponsored(tick: Tick, request: RequestModelStream, commands: list[Command]) -> None:
    keep = next((c for c in commands if isinstance(c, g.KeepToolResults)), None)
    if keep is not None:
        # SG-B5: the results are saved; no third guard-attributable stream opens.
        tick.s = replace(tick.s, withheld_request=request.request_id)
        tick.to_turn(HardStopped(reason=keep.reason, kind=HardStopKind.GUARD_BUDGET))
        return
    send = next((c for c in commands if isinstance(c, g.SendToolResults)), None)
    if send is not None and send.sponsor is g.Sponsor.GUARD:
        if send.text:
            # SG-B6: todos are still unfinished, so the follow-up carries this attempt's prompt:
            # the turn saves it, then asks again; that request is the guard's.
            tick.s = replace(tick.s, continuation=Continuation.GUARD)
            tick.to_turn(AmendRequest(request_id=request.request_id,
                                      message_id=f"{request.request_id}/continue",
                                      text=send.text))
            return
        tick.emit(request)
        tick.s = replace(tick.s, guard_request=request.request_id)
        return
    tick.emit(request)


def _turn_ended(tick: Tick, end: EndTurn) -> None:
    """The turn ended: the guard hears how, the ring records it; settle decides what is next."""
    s = tick.s
    outcome = end.outcome
    if s.guard.phase is g.GuardPhase.CONTINUING:
        # The turn ended before the continuation's stream opened (its message could not be
        # saved, say): nothing was consumed; an error pauses for a retry (SG-S2, SG-B3).
        tick.to_guard(g.RequestErrored(kind=g.ErrorKind.API) if outcome.resumable
                      else g.GuardStreamNotOpened(reason=g.NotOpenedReason.CANCELLED))
    elif not outcome.resumable and outcome.kind not in _HEARD_BY_THE_GUARD:
        tick.to_guard(g.HardStopped(kind=HardStopKind.UNRESUMABLE))
    # A drain that timed out belongs to this turn: a late reply after it ended is handed back
    # to the client (BR-3), never joined to the next turn as its Lead.
    tick.s = s = replace(s, continuation=Continuation.NONE, guard_request="", hook_request="",
                         withheld_request="", todo_call="", drain_id="", late_drain="",
                         hook_run="", fifo_priority=False)
    tick.to_guard(g.ForegroundPromptSettled(turn_id=end.turn_id,
                                            errored=outcome.kind is OutcomeKind.ERROR))
    tick.emit(attrs.evolve(end, origin=s.origin) if end.origin is not s.origin else end)
    publish_entry(tick, EntryKind.TURN_ENDED, end.turn_id, outcome.message, None)
    if s.phase is P.CLOSING:
        clients.close(tick, s.close_reason)
        return
    # ``origin`` stays as it was: a ContinueTurn continues the same kind of turn (BG-4).
    tick.s = replace(tick.s, phase=P.IDLE)
    tick.ended = end



#: The turn's commands the session acts on, by class (``run`` looks each up by its exact
#: class); every other command goes to the host as it is.
_TURN_COMMANDS: Mapping[type, Callable[[Tick, Any], None]] = MappingProxyType({
    RequestModelStream: _attribute,
    ExecuteTool: _on_execute_tool,
    DecideNaturalStop: _on_natural_stop,
    CancelStream: _on_cancel_stream,
    EndTurn: _turn_ended,
})
#: The classes of those commands.
SESSION_ACTS_ON = frozenset(_TURN_COMMANDS)
