"""The session reducer: one step composes the turn lifecycle, Lead, titles and the guard.

Theory of operation
-------------------
The host feeds one event; the session hands it to the part that owns it and translates what
that part returns into what the others need, so a host never does that itself:

* a prompt starts a guard work chain (``OrdinaryPromptStarted``; the chain's ``StartWorkChain``
  snapshots the background baseline, BG-1) and a turn; a ``ContinueTurn`` is the guard's trusted
  ``RetryOrContinue``;
* the built-in todo-write call the turn runs is announced to the guard (``TodoWriteStarted``)
  and its ``ToolFinished`` becomes the guard's one trusted ``TodoWriteResult`` (SG-A1 ... SG-A3):
  a duplicate can never be handed over twice, since the call is forgotten once answered;
* a request that carries Lead instructions is new user input (``MidTurnMessage``, SG-A9); a
  request in a guard-owned tool loop asks the guard who sponsors it (``ToolResultsReady``,
  SG-B4 ... SG-B8), and one the guard will not allow is withheld and the turn halted (SG-B5);
* a stream opening commits a pending guard attempt (``GuardStreamOpened``, SG-B3) and counts in
  the usage (OB-5); failures before it are ``GuardStreamNotOpened``, failures after it errors
  (SG-S2); Stop, a cancelled permission and token limits are hard stops (SG-S1).

**Stop order** (SO-1 ... SO-8). The turn holds every natural stop (``DecideNaturalStop``) and the
session answers it: in a daemon it first drains the client's mid-turn messages
(``DrainMidTurnQueue`` plus a ``StartTimer`` of ``drain_timeout``); mid-turn messages become Lead
instructions and the turn continues with them, skipping hooks and guard (SO-1); else a complete
queued prompt wins and the chain waits for it (SO-2); else, on a foreground turn, the external
Stop hooks run with their cap (SO-6); else, or after them, the guard decides (SO-7). A hook block
and a guard continuation on the same stop become one continuation message: the hook's reason, a
blank line, then the guard's text (SO-8); the counters stay apart. A drain reply after its
timeout restores its messages and its queued-prompt snapshot is discarded (BR-3).

**Between turns** the FIFO's first complete prompt starts next; then held automatic turns, one
at a time, once the guard no longer holds them (BG-5). An automatic turn that arrives while a
turn runs, or while the guard's chain can resume and it is unrelated, is held (coalesced per
recurring task, bounded: BG-6). Follow-up suggestions are offered only when nothing has priority
(BG-7). Every replayable event goes into the ring with a ``Publish`` (OB-6, BR-5).

Every step is built locally and returned whole: a ``ProtocolError`` raised by any part, at any
depth, leaves the host's state exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from .. import guard as g
from .. import lead as lead_queue
from .. import turn as turn_part
from .._base import Command, Step, builder, new_step, replacer
from ..commands import (
    CancelStream,
    DecideNaturalStop,
    DraftReason,
    EndTurn,
    ExecuteTool,
    RequestModelStream,
    ReturnDraft,
    StaleAnswerIgnored,
)
from ..errors import UnexpectedEvent, UnknownId, check_state
from ..events import (
    ClientDisconnected,
    CompactionFailed,
    ContinueTurn,
    HaltTurn,
    LeadSubmitted,
    NaturalStopDecided,
    PermissionDecided,
    PermissionDecision,
    PromptSubmitted,
    StopPressed,
    StreamCompleted,
    StreamFailed,
    StreamOpened,
    TokenLimitRejected,
    ToolFinished,
)
from ..guard.reducer import reduce_into as guard_into
from ..guard.texts import DISCRETE_MARKER, GUARD_SOURCE, MAX_ATTEMPTS
from ..records import OutcomeKind
from . import background as bg
from . import fifo
from .ring import EntryKind, count_model_call, publish, replay
from .state import (
    GRACE_TIMER,
    GUARD_EVENTS,
    SESSION_GRAPH,
    TURN_EVENTS,
    Continuation,
    SessionPhase,
    SessionState,
)
from .vocabulary import (
    AutomaticTurnDeferred,
    AutomaticTurnDropped,
    AutomaticTurnDue,
    BackgroundEnded,
    BackgroundStarted,
    CancelTimer,
    ClientAttached,
    ClientDetached,
    CloseRequested,
    CloseSession,
    DrainMidTurnQueue,
    HardStopped,
    LifecycleChanged,
    MidTurnDrained,
    NotificationConsumed,
    NotificationQueued,
    OfferFollowUpSuggestions,
    PromptAborted,
    PromptCompleted,
    PromptQueued,
    PromptRefused,
    Publish,
    ReplayEvents,
    RestoreMidTurnMessages,
    RunStopHooks,
    StartTimer,
    StopHookDecided,
    StopHookFailed,
    SuppressFollowUpSuggestions,
    TimerFired,
    Warn,
)

__all__ = ["combined_continuation", "outstanding", "reduce"]

P = SessionPhase
_replace = replacer(SessionState)
#: The two copies nearly every step makes (a part moved, nothing else changed), specialised.
_with_turn = replacer(SessionState, "turn")
_with_guard = replacer(SessionState, "guard")
_Publish = builder(Publish)  # the trusted constructor (see ``builder``)
_Out = list[Command]
#: The guard facts without fields, built once (events are immutable values).
_ORDINARY_STREAM_OPENED = g.OrdinaryStreamOpened()
_GUARD_STREAM_OPENED = g.GuardStreamOpened()

#: The automatic-turn kinds the guard knows: a wakeup is a notification to it.
_GUARD_KIND = {bg.AutomaticKind.CRON: g.AutomaticTurnKind.CRON,
               bg.AutomaticKind.NOTIFICATION: g.AutomaticTurnKind.NOTIFICATION,
               bg.AutomaticKind.WAKEUP: g.AutomaticTurnKind.NOTIFICATION}
_EXHAUSTED_META = {"source": GUARD_SOURCE, DISCRETE_MARKER: True, "kind": "exhausted",
                   "attempt": MAX_ATTEMPTS, "maxAttempts": MAX_ATTEMPTS}


GRACE_EXPIRED = "The client did not come back within the grace period."
#: What a Lead typed into a closed chat says as its draft comes back (the turn's own text,
#: "No turn is running in this chat; send the text as a new message.", suggests a send that a
#: closed session would refuse too).
CLOSED_LEAD = "This chat is closed; your text was not sent and is kept as a draft."


def combined_continuation(hook_reason: str | None, guard_text: str | None) -> str:
    """The one continuation message of a stop (SO-8): the hook's reason, then the guard's text."""
    return "\n\n".join(part for part in (hook_reason, guard_text) if part)


# --- the parts --------------------------------------------------------------------------------


def _to_guard(s: SessionState, event: object, out: _Out, **changes: Any) -> SessionState:
    """Hand ``event`` to the guard; ``changes`` join the same new session state."""
    commands: _Out = []
    guard = guard_into(s.guard, event, commands)
    return _apply_guard(s, guard, commands, out, **changes)


def _apply_guard(s: SessionState, guard: g.GuardState, commands: _Out | tuple[Command, ...],
                 out: _Out, **changes: Any) -> SessionState:
    if changes:
        s = _replace(s, guard=guard, **changes)
    elif guard is not s.guard:
        s = _with_guard(s, guard)
    for command in commands:
        s = _on_guard_command(s, command, out)
    return s


def _on_guard_command(s: SessionState, command: Command, out: _Out) -> SessionState:
    if isinstance(command, g.StartWorkChain):
        return _replace(s, background=bg.snapshot_baseline(s.background))  # BG-1
    if isinstance(command, g.EmitAgentMessageChunk):
        return _publish(s, EntryKind.GUARD_CHUNK, s.turn.request_id, command.text,
                        command.meta.as_meta(), out)
    if isinstance(command, g.ReportGuardExhausted):
        return _publish(s, EntryKind.GUARD_EXHAUSTED, s.turn.turn_id, command.text,
                        {**_EXHAUSTED_META, "unfinishedCount": s.guard.unfinished}, out)
    if isinstance(command, g.ReleaseAutomaticQueues):
        # BG-5: the chain can no longer resume; held automatic turns may run (one at a time,
        # each starting an unarmed chain). While a turn runs they start when it ends.
        return _start_next(s, out)
    if isinstance(command, g.ContinueWithGuardPrompt | g.SendToolResults | g.KeepToolResults
                  | g.DeferAutomaticTurn):
        return s  # decisions the session reads from the step where it asked
    out.append(command)  # HookMayContinue and anything informative: the host's to show
    return s


def _to_turn(s: SessionState, event: object, out: _Out, **changes: Any) -> SessionState:
    """Hand ``event`` to the turn and translate its commands; ``changes`` join the same new
    session state as the turn's."""
    commands: _Out = []
    turn = turn_part.reduce_into(s.turn, event, commands)
    return _apply_turn(s, turn, commands, out, **changes)


def _apply_turn(s: SessionState, turn: turn_part.TurnState, commands: _Out, out: _Out,
                **changes: Any) -> SessionState:
    """The second half of :func:`_to_turn`, for a handler that looked at the turn's step."""
    if changes:
        s = _replace(s, turn=turn, **changes)
    elif turn is not s.turn:
        s = _with_turn(s, turn)
    for command in commands:
        s = _on_turn_command(s, command, out)
    return s


def _on_turn_command(s: SessionState, command: Command, out: _Out) -> SessionState:
    kind = type(command)  # the turn's own commands: exact classes, never subclasses
    if kind is RequestModelStream:
        return _on_request(s, command, out)  # type: ignore[arg-type]
    if kind is ExecuteTool:
        call = command.call  # type: ignore[attr-defined]
        if call.name == s.config.todo_tool and not call.discovered:
            s = _to_guard(s, g.TodoWriteStarted(call_id=call.call_id, turn_id=s.turn.turn_id),
                          out, todo_call=call.call_id)
    elif kind is DecideNaturalStop:
        return _natural_stop(s, out)
    elif kind is CancelStream and command.request_id == s.withheld_request:  # type: ignore[attr-defined]
        return s  # the host never got that request
    elif kind is EndTurn:
        out.append(command)
        return _turn_ended(s, command, out)  # type: ignore[arg-type]
    out.append(command)
    return s


def _on_request(s: SessionState, request: RequestModelStream, out: _Out) -> SessionState:
    """Attribute a model request: a decided continuation, the guard's tool loop, or the user."""
    continuation = s.continuation
    if continuation is Continuation.GUARD:
        out.append(request)
        return _replace(s, continuation=Continuation.NONE, guard_request=request.request_id,
                        hook_request="")
    if continuation is Continuation.HOOK:
        out.append(request)
        return _replace(s, continuation=Continuation.NONE, guard_request="",
                        hook_request=request.request_id)
    if s.guard_request or s.hook_request:
        s = _replace(s, guard_request="", hook_request="")
    if s.guard.loop is not g.LoopOwner.NONE:
        commands: _Out = []
        guard = guard_into(s.guard, g.ToolResultsReady(mid_turn_input=bool(request.lead_ids)),
                           commands)
        keep = next((c for c in commands if isinstance(c, g.KeepToolResults)), None)
        send = next((c for c in commands if isinstance(c, g.SendToolResults)), None)
        s = _apply_guard(s, guard, commands, out)
        if keep is not None:
            # SG-B5: the results are saved; no third guard-attributable stream opens.
            return _to_turn(s, HaltTurn(reason=keep.reason), out,
                            withheld_request=request.request_id)
        out.append(request)
        if send is not None and send.sponsor is g.Sponsor.GUARD:
            return _replace(s, guard_request=request.request_id)
        return s
    if request.lead_ids:
        s = _to_guard(s, g.MidTurnMessage(), out)  # new user input: a fresh stage (SG-A9)
    out.append(request)
    return s


def _publish(s: SessionState, kind: EntryKind, message_id: str, text: str,
             meta: Mapping[str, object] | None, out: _Out) -> SessionState:
    ring, entry = publish(s.ring, kind, message_id or s.config.chat_id, text, meta)
    out.append(_Publish(entry=entry))
    return _replace(s, ring=ring)


# --- starting turns ---------------------------------------------------------------------------


def _start_prompt(s: SessionState, turn_id: str, message_id: str, text: str,
                  out: _Out) -> SessionState:
    s = _replace(s, phase=P.TURN, automatic=False, hook_blocks=0)
    s = _to_guard(s, g.OrdinaryPromptStarted(turn_id=turn_id), out)
    return _to_turn(s, PromptSubmitted(turn_id=turn_id, message_id=message_id, text=text), out)


def _prompt_of(s: SessionState, turn_id: str) -> tuple[str, str]:
    for held_id, message_id, text in s.deferred_prompts:
        if held_id == turn_id:
            return message_id, text
    raise KeyError(turn_id)  # unreachable: every held turn has its prompt


def _forget_prompt(s: SessionState, turn_id: str) -> SessionState:
    return _replace(s, deferred_prompts=tuple(p for p in s.deferred_prompts if p[0] != turn_id))


def _try_automatic(s: SessionState, turn: bg.AutomaticTurn, message_id: str, text: str,
                   out: _Out) -> tuple[SessionState, bool]:
    """Start ``turn`` unless the guard holds it (its ``DeferAutomaticTurn``, one rule)."""
    related = bg.is_related(s.background, turn.source_id)  # as of now, not when it was due
    commands: _Out = []
    guard = guard_into(s.guard, g.AutomaticTurnStarted(
        turn_id=turn.turn_id, kind=_GUARD_KIND[turn.kind], related=related), commands)
    if any(isinstance(c, g.DeferAutomaticTurn) for c in commands):
        return s, False
    s = _apply_guard(s, guard, commands, out, phase=P.TURN, automatic=True, hook_blocks=0)
    return _to_turn(s, PromptSubmitted(turn_id=turn.turn_id, message_id=message_id,
                                       text=text), out), True


def _hold(s: SessionState, turn: bg.AutomaticTurn, message_id: str, text: str,
          out: _Out) -> SessionState:
    """Hold an automatic turn in the bounded queue (BG-5, BG-6); nothing leaves it silently."""
    queue, outcome = bg.defer(s.deferred, turn)
    s = _replace(s, deferred=queue)
    result = outcome.result
    if result is bg.Deferral.QUEUED:
        s = _replace(s, deferred_prompts=(*s.deferred_prompts, (turn.turn_id, message_id, text)))
        out.append(AutomaticTurnDeferred(turn_id=turn.turn_id))
        if outcome.evicted is not None:
            s = _forget_prompt(s, outcome.evicted.turn_id)
            out.append(AutomaticTurnDropped(turn_id=outcome.evicted.turn_id,
                                            reason="the deferred queue is full; the oldest "
                                                   "unrelated automatic turn made room"))
    elif result is bg.Deferral.COALESCED:
        assert outcome.into is not None
        out.append(AutomaticTurnDeferred(turn_id=turn.turn_id,
                                         coalesced_into=outcome.into.turn_id))
    elif result is bg.Deferral.DROPPED:
        out.append(AutomaticTurnDropped(turn_id=turn.turn_id,
                                        reason="the deferred queue is full of turns related to "
                                               "the live work chain"))
    elif result is bg.Deferral.DUPLICATE:
        out.append(StaleAnswerIgnored(event="AutomaticTurnDue", answer_id=turn.turn_id,
                                      reason="this automatic turn is already held"))
    elif s.phase is P.IDLE:  # REFUSED: related and no room: it runs now if it can
        s, started = _try_automatic(s, turn, message_id, text, out)
        if not started:
            out.append(AutomaticTurnDropped(turn_id=turn.turn_id,
                                            reason="no room to hold it and it may not run now"))
    else:
        out.append(AutomaticTurnDropped(turn_id=turn.turn_id,
                                        reason="no room to hold it while a turn runs"))
    return s


def _start_next(s: SessionState, out: _Out) -> SessionState:
    """Between turns: the FIFO's first complete prompt, else a held automatic turn (BG-5)."""
    if s.phase is not P.IDLE:
        return s
    queue, entry = fifo.pop_next(s.fifo)
    if entry is not None:
        s = _replace(s, fifo=queue)
        return _start_prompt(s, entry.prompt_id, entry.message_id, entry.text, out)
    while s.deferred.turns and not g.holds_automatic_turns(s.guard):
        deferred, turn = bg.pop_next(s.deferred)
        assert turn is not None
        message_id, text = _prompt_of(s, turn.turn_id)
        s = _forget_prompt(_replace(s, deferred=deferred), turn.turn_id)
        s, started = _try_automatic(s, turn, message_id, text, out)
        if started:
            return s
        s = _hold(s, turn, message_id, text, out)  # the guard held it after all: back in line
        break
    return s


def _turn_ended(s: SessionState, end: EndTurn, out: _Out) -> SessionState:
    errored = end.outcome.kind is OutcomeKind.ERROR
    if s.guard.phase is g.GuardPhase.CONTINUING:
        # The turn ended before the continuation's stream opened (its message could not be
        # saved, say): nothing was consumed; an error pauses for a retry (SG-S2, SG-B3).
        s = _to_guard(s, g.RequestErrored(kind=g.ErrorKind.API) if end.outcome.resumable
                      else g.GuardStreamNotOpened(reason=g.NotOpenedReason.CANCELLED), out)
    # A drain that timed out belongs to this turn: a late reply after it ended is handed back
    # to the client (BR-3), never joined to the next turn as its Lead.
    s = _replace(s, continuation=Continuation.NONE, guard_request="", hook_request="",
                 withheld_request="", todo_call="", drain_id="", late_drain="", hook_run="",
                 fifo_priority=False)
    s = _to_guard(s, g.ForegroundPromptSettled(turn_id=end.turn_id, errored=errored), out)
    s = _publish(s, EntryKind.TURN_ENDED, end.turn_id, end.outcome.message, None, out)
    if s.phase is P.CLOSING:
        return _close(s, s.close_reason, out)
    # ``automatic`` stays as it was: a ContinueTurn continues the same kind of turn (BG-4).
    s = _replace(s, phase=P.IDLE)
    if s.config.daemon:
        resumable = g.holds_automatic_turns(s.guard)
        # a complete queued prompt here, or one the client reported that the chain awaits
        queued = (fifo.has_queued_prompt(s.fifo)
                  or s.guard.phase is g.GuardPhase.AWAITING_PROMPT)
        if bg.suppress_follow_ups(resumable, queued):
            why = ("a queued prompt has priority" if queued
                   else "a work chain can still resume")
            out.append(SuppressFollowUpSuggestions(turn_id=end.turn_id, reason=why))
        else:
            out.append(OfferFollowUpSuggestions(turn_id=end.turn_id))
    return _start_next(s, out)


# --- the stop order ---------------------------------------------------------------------------


def _natural_stop(s: SessionState, out: _Out) -> SessionState:
    stops = s.stops + 1
    s = _replace(s, stops=stops)
    if not s.config.daemon:
        return _after_drain(s, (), fifo.has_queued_prompt(s.fifo), out)
    drain_id = f"{s.turn.turn_id}/drain-{stops}"
    out.append(DrainMidTurnQueue(drain_id=drain_id))
    out.append(StartTimer(key=drain_id, seconds=s.config.drain_timeout))
    return _replace(s, phase=P.DRAINING, drain_id=drain_id)


def _submit_messages(s: SessionState, drain_id: str, messages: tuple[str, ...],
                     out: _Out) -> SessionState:
    for number, text in enumerate(messages, 1):
        s = _to_turn(s, LeadSubmitted(chat_id=s.config.chat_id, lead_id=f"{drain_id}/m{number}",
                                      text=text), out)
    return s


def _after_drain(s: SessionState, messages: tuple[str, ...], queued: bool,
                 out: _Out) -> SessionState:
    s = _replace(s, phase=P.TURN, drain_id="")
    s = _submit_messages(s, f"{s.turn.turn_id}/stop-{s.stops}", messages, out)
    pending = s.turn.lead.entries
    if pending:
        # SO-1: the user continuation runs in this loop; hooks and guard wait; a queued prompt
        # seen now keeps its priority at the next stop (SO-5).
        s = _replace(s, fifo_priority=s.fifo_priority or queued)
        s = _to_guard(s, g.NaturalStop(mid_turn_messages=True), out)
        return _decide(s, Continuation.NONE, None, out)
    if queued or s.fifo_priority:
        return _yield_to_queued_prompt(s, out)
    if s.config.hooks_enabled and not s.automatic:
        run_id = f"{s.turn.turn_id}/hooks-{s.stops}"  # SO-6; never on automatic turns (BG-4)
        out.append(RunStopHooks(run_id=run_id, turn_id=s.turn.turn_id))
        return _replace(s, phase=P.HOOKS, hook_run=run_id)
    return _guard_stop(s, None, out)


def _yield_to_queued_prompt(s: SessionState, out: _Out) -> SessionState:
    """SO-2: the current request finishes; the chain waits for the queued prompt."""
    s = _replace(s, fifo_priority=False)
    s = _to_guard(s, g.NaturalStop(queued_prompt=True), out)
    return _decide(s, Continuation.NONE, None, out)


def _guard_stop(s: SessionState, hook_reason: str | None, out: _Out) -> SessionState:
    """SO-7, SO-8: the guard decides; a hook block joins its continuation, or goes alone."""
    relevant = bg.relevant_input(s.background)
    commands: _Out = []
    guard = guard_into(s.guard, g.NaturalStop(relevant_background=relevant,
                                              hook_reason=hook_reason), commands)
    prompt = next((c for c in commands if isinstance(c, g.ContinueWithGuardPrompt)), None)
    s = _apply_guard(s, guard, commands, out)
    if prompt is not None:
        return _decide(s, Continuation.GUARD, combined_continuation(hook_reason, prompt.text), out)
    if hook_reason is not None:
        return _decide(s, Continuation.HOOK, hook_reason, out)
    return _decide(s, Continuation.NONE, None, out)


def _decide(s: SessionState, who: Continuation, text: str | None, out: _Out) -> SessionState:
    request_id = s.turn.request_id
    s = _replace(s, phase=P.TURN, continuation=who, hook_run="")
    if text is None:
        return _to_turn(s, NaturalStopDecided(request_id=request_id), out)
    return _to_turn(s, NaturalStopDecided(request_id=request_id,
                                          message_id=f"{request_id}/continue", text=text), out)


# --- handlers: the turn family ----------------------------------------------------------------


def _on_prompt(s: SessionState, event: PromptSubmitted, out: _Out) -> SessionState:
    if s.phase is not P.IDLE:
        raise UnexpectedEvent(part="session", phase=s.phase.name, event=event,
                              expected="PromptQueued while a turn runs")
    return _start_prompt(s, event.turn_id, event.message_id, event.text, out)


def _on_continue(s: SessionState, event: ContinueTurn, out: _Out) -> SessionState:
    s = _replace(s, phase=P.TURN)
    s = _to_guard(s, g.RetryOrContinue(turn_id=event.turn_id), out)
    return _to_turn(s, event, out)


def _on_stream_opened(s: SessionState, event: StreamOpened, out: _Out) -> SessionState:
    commands: _Out = []
    turn = turn_part.reduce_into(s.turn, event, commands)
    if turn is s.turn:
        return _apply_turn(s, turn, commands, out)  # a late answer, absorbed by the turn
    # Only while the guard still waits for it: trust clearing or Plan mode drop the attempt.
    guard_call = (event.request_id == s.guard_request
                  and s.guard.phase is g.GuardPhase.CONTINUING)
    hook_call = event.request_id == s.hook_request
    if guard_call:
        s = _apply_turn(s, turn, commands, out, guard_request="", hook_request="")
        s = _to_guard(s, _GUARD_STREAM_OPENED, out)  # SG-B3: the attempt commits now
        hook_call = s.guard.loop is g.LoopOwner.GUARD_AND_HOOK  # one call for both (SO-8)
        return _replace(s, usage=count_model_call(s.usage, guard=True, hook=hook_call))
    # An ordinary stream: counted in the same new state; the guard only ends its tool loop.
    s = _apply_turn(s, turn, commands, out, guard_request="", hook_request="",
                    usage=count_model_call(s.usage, guard=False, hook=hook_call))
    return _to_guard(s, _ORDINARY_STREAM_OPENED, out)


def _on_stream_completed(s: SessionState, event: StreamCompleted, out: _Out) -> SessionState:
    before = s.turn
    s = _to_turn(s, event, out)
    if s.turn is not before and event.text:
        s = _publish(s, EntryKind.MESSAGE_CHUNK, event.request_id, event.text, None, out)
    return s


def _not_opened(s: SessionState, request_id: str, reason: g.NotOpenedReason,
                otherwise: object, out: _Out) -> SessionState:
    if (request_id and request_id == s.guard_request
            and s.guard.phase is g.GuardPhase.CONTINUING):
        s = _replace(s, guard_request="")
        return _to_guard(s, g.GuardStreamNotOpened(reason=reason), out)
    return _to_guard(s, otherwise, out)


def _on_request_failed(s: SessionState, event: StreamFailed | CompactionFailed
                       | TokenLimitRejected, out: _Out) -> SessionState:
    if isinstance(event, StreamFailed):
        before = s.turn
        s = _to_turn(s, event, out)
        if s.turn is before:
            return s
        kind = g.ErrorKind.NETWORK if event.network else g.ErrorKind.API
        return _to_guard(_replace(s, guard_request=""), g.RequestErrored(kind=kind), out)
    commands: _Out = []
    turn = turn_part.reduce_into(s.turn, event, commands)
    if turn is s.turn:
        return _apply_turn(s, turn, commands, out)  # a late answer, absorbed by the turn
    # The guard hears of the failure before the turn's end is handled, so that end sees the
    # chain as it now is (suspended: follow-ups are offered, BG-7) and a pending combined
    # continuation is reported as not opened for this reason (HookMayContinue, SG-B9).
    request_id = s.guard_request if event.request_id == s.guard_request else ""
    if isinstance(event, CompactionFailed):
        s = _not_opened(s, request_id, g.NotOpenedReason.COMPACTION_FAILED,
                        g.HardStop(kind=g.HardStopKind.COMPACTION_FAILED), out)
    else:
        s = _not_opened(s, request_id, g.NotOpenedReason.TOKEN_REJECTED,
                        g.HardStop(kind=g.HardStopKind.TOKEN_LIMIT), out)
    return _apply_turn(s, turn, commands, out)


def _on_stop(s: SessionState, event: StopPressed, out: _Out) -> SessionState:
    if s.phase is P.IDLE or s.phase is P.CLOSED:
        return _to_turn(s, event, out)
    if s.phase is P.DRAINING:
        out.append(CancelTimer(key=s.drain_id))
    reason = g.NotOpenedReason.CANCELLED
    s = _not_opened(s, s.guard_request, reason,
                    g.HardStop(kind=g.HardStopKind.USER_CANCELLED), out)
    if s.phase is not P.CLOSING:
        s = _replace(s, phase=P.TURN, drain_id="", hook_run="")
    return _to_turn(s, event, out)


def _on_permission(s: SessionState, event: PermissionDecided, out: _Out) -> SessionState:
    before = s.turn
    s = _to_turn(s, event, out)
    if s.turn is not before and event.decision is PermissionDecision.CANCEL:
        s = _to_guard(s, g.HardStop(kind=g.HardStopKind.PERMISSION_CANCELLED), out)  # SG-S1
    return s


def _on_tool_finished(s: SessionState, event: ToolFinished, out: _Out) -> SessionState:
    call_id, turn_id = s.todo_call, s.turn.turn_id
    s = _to_turn(s, event, out)
    if call_id and event.call_id == call_id:
        # SG-A1, SG-A2: after execution and status, before PostToolUse hooks; handed once.
        s = _to_guard(s, g.TodoWriteResult(
            call_id=call_id, turn_id=turn_id, envelope=event.structured,
            succeeded=not event.error and not event.cancelled), out, todo_call="")
    return s


def _on_hard_stop(s: SessionState, event: HardStopped, out: _Out) -> SessionState:
    s = _to_guard(s, g.HardStop(kind=event.kind), out)
    if s.phase is P.IDLE:
        return s
    if s.phase is P.DRAINING:
        out.append(CancelTimer(key=s.drain_id))
    if s.phase is not P.CLOSING:
        s = _replace(s, phase=P.TURN, drain_id="", hook_run="")
    return _to_turn(s, HaltTurn(reason=event.reason), out)


# --- handlers: the daemon FIFO ----------------------------------------------------------------


def _on_prompt_queued(s: SessionState, event: PromptQueued, out: _Out) -> SessionState:
    if s.phase is P.CLOSING or s.phase is P.CLOSED:
        out.append(PromptRefused(prompt_id=event.prompt_id, text=event.text,
                                 reason="the session is closed" if s.phase is P.CLOSED
                                 else "the session is closing"))
        return s
    taken = fifo.find(s.fifo, event.prompt_id) is not None or event.prompt_id == s.turn.turn_id
    queue = None if taken else fifo.admit(s.fifo, fifo.QueuedPrompt(
        prompt_id=event.prompt_id, message_id=event.message_id, text=event.text,
        complete=event.complete))
    if queue is None:
        out.append(PromptRefused(prompt_id=event.prompt_id, text=event.text,
                                 reason="this prompt id is already in use" if taken
                                 else f"{fifo.MAX_QUEUED} prompts are already queued"))
        return s
    return _start_next(_replace(s, fifo=queue), out)


def _on_prompt_completed(s: SessionState, event: PromptCompleted, out: _Out) -> SessionState:
    if fifo.find(s.fifo, event.prompt_id) is None:
        raise UnknownId(part="session", phase=s.phase.name, event=event,
                        expected="a queued prompt's id")
    return _start_next(_replace(s, fifo=fifo.complete(s.fifo, event.prompt_id, event.text)), out)


def _on_prompt_aborted(s: SessionState, event: PromptAborted, out: _Out) -> SessionState:
    if fifo.find(s.fifo, event.prompt_id) is not None:
        s = _replace(s, fifo=fifo.abort(s.fifo, event.prompt_id))
        # SO-3, SO-4: the last complete queued prompt gone: the awaiting chain ends for good.
        last = not fifo.has_queued_prompt(s.fifo)
    elif (s.guard.phase is g.GuardPhase.AWAITING_PROMPT
          and not fifo.has_queued_prompt(s.fifo)):
        # The chain awaits a prompt only the client holds (its drain reply said
        # hasQueuedPrompt): the host says so when the client's last queued prompt is aborted,
        # "the bridge explicitly tells the live Session to terminate the awaiting guard".
        last = True
    else:
        out.append(StaleAnswerIgnored(event="PromptAborted", answer_id=event.prompt_id,
                                      reason="this prompt is not queued (started or aborted)"))
        return s
    s = _to_guard(s, g.QueuedPromptAborted(last=last), out)
    if last:
        s = _replace(s, fifo_priority=False)
    return _start_next(s, out)


# --- handlers: the stop order -----------------------------------------------------------------


def _issued(s: SessionState, answer_id: str, kind: str) -> bool:
    """``answer_id`` has the shape of a drain or hook run this session asked for:
    ``<turn>/<kind>-<n>`` with ``n`` at most the session's count of natural stops.

    **Choice:** the session does not remember every turn id (its state stays bounded), so an
    answer whose number it issued but whose turn it cannot confirm is absorbed as late, never
    raised; a drain reply's messages are then handed back (``RestoreMidTurnMessages``), so
    nothing is lost either way. An id of another shape, or a number not issued yet, is misuse.
    """
    _, separator, number = answer_id.rpartition(f"/{kind}-")
    return (bool(separator) and number.isdigit() and number == str(int(number))
            and 1 <= int(number) <= s.stops)


def _stale(event: object, answer_id: str, why: str, out: _Out) -> None:
    out.append(StaleAnswerIgnored(event=type(event).__name__, answer_id=answer_id, reason=why))


def _on_drained(s: SessionState, event: MidTurnDrained, out: _Out) -> SessionState:
    if s.phase is P.DRAINING and event.drain_id == s.drain_id:
        out.append(CancelTimer(key=event.drain_id))
        queued = bool(event.has_queued_prompt) or fifo.has_queued_prompt(s.fifo)  # BR-1, BR-2
        return _after_drain(_replace(s, answered_drain=event.drain_id), event.messages, queued,
                            out)
    if event.drain_id == s.late_drain and s.late_drain:
        # BR-3: the messages come back; the queued-prompt snapshot is stale and discarded.
        s = _replace(s, late_drain="", answered_drain=event.drain_id)
        if event.messages and lead_queue.is_offered(s.turn.lead):
            return _submit_messages(s, event.drain_id, event.messages, out)
        if event.messages:
            out.append(RestoreMidTurnMessages(drain_id=event.drain_id, messages=event.messages))
        return s
    if event.drain_id == s.answered_drain and s.answered_drain:
        # A second copy of a reply already taken (a transport that delivers at least once):
        # its messages reached the turn or the client already.
        _stale(event, event.drain_id, "this drain's reply was already taken", out)
        return s
    if _issued(s, event.drain_id, "drain"):
        if event.messages:  # nothing drained is ever dropped
            out.append(RestoreMidTurnMessages(drain_id=event.drain_id, messages=event.messages))
        else:
            _stale(event, event.drain_id, "the drain is no longer awaited", out)
        return s
    raise UnknownId(part="session", phase=s.phase.name, event=event,
                    expected="the reply to a drain this session asked for")


def _on_timer(s: SessionState, event: TimerFired, out: _Out) -> SessionState:
    if s.phase is P.DRAINING and event.key == s.drain_id:
        s = _replace(s, late_drain=event.key)
        return _after_drain(s, (), fifo.has_queued_prompt(s.fifo), out)
    if event.key == GRACE_TIMER and s.grace:
        return _terminate(s, GRACE_EXPIRED, g.HardStopKind.GRACE_EXPIRED, out)
    if event.key != GRACE_TIMER and not _issued(s, event.key, "drain"):
        raise UnknownId(part="session", phase=s.phase.name, event=event,
                        expected="a timer this session started")
    _stale(event, event.key, "this timer is no longer running", out)
    return s


def _on_hook(s: SessionState, event: StopHookDecided | StopHookFailed, out: _Out) -> SessionState:
    if s.phase is not P.HOOKS or event.run_id != s.hook_run:
        if _issued(s, event.run_id, "hooks"):
            _stale(event, event.run_id, "the Stop hooks' answer is no longer awaited", out)
            return s
        raise UnknownId(part="session", phase=s.phase.name, event=event,
                        expected="the answer of a Stop-hook run this session asked for")
    # A complete prompt queued while the hooks ran keeps SO-2's priority over the guard: the
    # FIFO was checked before the hooks started, so it is checked again now.
    queued = fifo.has_queued_prompt(s.fifo)
    if isinstance(event, StopHookFailed) or not event.block:
        # SO-6: a hook that errors or times out does not block; the streak is broken.
        s = _replace(s, hook_blocks=0)
        return _yield_to_queued_prompt(s, out) if queued else _guard_stop(s, None, out)
    cap = s.config.stop_hook_cap
    if s.hook_blocks >= cap:
        # SO-6, SG-S1: the cap ends the turn with a warning and suspends the chain; only Lead
        # instructions the user sent meanwhile (new input, SO-1) still carry the turn on.
        times = "1 time" if cap == 1 else f"{cap} times"
        then = ("its block is set aside and the turn goes on only with your new instructions"
                if s.turn.lead.entries else "the turn ends here")
        out.append(Warn(text=f"The Stop hook blocked {times} in a row; {then}."))
        s = _replace(s, hook_blocks=0)
        s = _to_guard(s, g.HardStop(kind=g.HardStopKind.STOP_HOOK_CAP), out)
        return _decide(s, Continuation.NONE, None, out)
    s = _replace(s, hook_blocks=s.hook_blocks + 1)
    if queued:
        # The hook's continuation runs alone (the guard is not asked at this stop), and the
        # queued prompt wins at the next one (SO-5's priority).
        return _decide(_replace(s, fifo_priority=True), Continuation.HOOK, event.reason, out)
    return _guard_stop(s, event.reason, out)


# --- handlers: background and automatic turns -------------------------------------------------


def _on_background(s: SessionState, event: BackgroundStarted | BackgroundEnded
                   | NotificationQueued | NotificationConsumed, out: _Out) -> SessionState:
    work = s.background
    if isinstance(event, BackgroundStarted):
        return _replace(s, background=bg.started(work, event.kind, event.item_id))
    if isinstance(event, BackgroundEnded):
        return _replace(s, background=bg.ended(work, event.item_id))
    if isinstance(event, NotificationConsumed):
        return _replace(s, background=bg.notification_consumed(work, event.notification_id))
    s = _replace(s, background=bg.notification_queued(work, event.notification_id,
                                                      event.source_id))
    # SG-A11: a related background result is a trusted continuation: it clears a pause.
    return _to_guard(s, g.BackgroundResult(related=bg.is_related(work, event.source_id)), out)


def _on_automatic(s: SessionState, event: AutomaticTurnDue, out: _Out) -> SessionState:
    if event.turn_id == s.turn.turn_id or fifo.find(s.fifo, event.turn_id) is not None:
        raise UnknownId(part="session", phase=s.phase.name, event=event,
                        expected="a turn id not already in use")
    turn = bg.AutomaticTurn(turn_id=event.turn_id, kind=event.kind, source_id=event.source_id,
                            recurring=event.recurring and event.kind is bg.AutomaticKind.CRON,
                            related=bg.is_related(s.background, event.source_id))
    if s.phase is P.IDLE and not fifo.has_queued_prompt(s.fifo):
        s, started = _try_automatic(s, turn, event.message_id, event.text, out)
        if started:
            return s
    return _hold(s, turn, event.message_id, event.text, out)


# --- handlers: clients and lifecycle ----------------------------------------------------------


def _on_attached(s: SessionState, event: ClientAttached, out: _Out) -> SessionState:
    if event.client_id not in s.clients:
        s = _replace(s, clients=(*s.clients, event.client_id))
    if s.grace:
        out.append(CancelTimer(key=GRACE_TIMER))
        s = _replace(s, grace=False)
    seen = replay(s.ring, event.last_seq)
    out.append(ReplayEvents(client_id=event.client_id, entries=seen.entries, gap=seen.gap))
    return _to_guard(s, g.ClientAttached(), out)  # SG-A13: a live attach keeps the state


def _on_detached(s: SessionState, event: ClientDetached, out: _Out) -> SessionState:
    if event.client_id not in s.clients:
        _stale(event, event.client_id, "this client is not attached", out)
        return s
    s = _replace(s, clients=tuple(c for c in s.clients if c != event.client_id))
    if s.clients or s.phase is P.CLOSED or s.phase is P.CLOSING:
        return s  # a closing session needs no grace period: it ends when its turn has
    # BR-4: the grace period starts; a disconnect never approves a pending permission.
    out.append(StartTimer(key=GRACE_TIMER, seconds=s.config.grace_period))
    s = _replace(s, grace=True)
    return _to_turn(s, ClientDisconnected(), out)


def _on_close(s: SessionState, event: CloseRequested, out: _Out) -> SessionState:
    if s.phase is P.CLOSED or s.phase is P.CLOSING:
        return s
    return _terminate(s, "The session was closed.", g.HardStopKind.USER_CANCELLED, out)


def _terminate(s: SessionState, reason: str, kind: g.HardStopKind, out: _Out) -> SessionState:
    """End the session: halt a running turn first (its pending dialog is dismissed, never
    approved), then close once it has ended."""
    if s.grace and reason != GRACE_EXPIRED:
        out.append(CancelTimer(key=GRACE_TIMER))  # closed by the client before grace ran out
    if s.grace:
        s = _replace(s, grace=False)
    if s.phase is P.IDLE:
        return _close(s, reason, out)
    if s.phase is P.DRAINING:
        out.append(CancelTimer(key=s.drain_id))
    s = _to_guard(s, g.HardStop(kind=kind), out)
    s = _replace(s, phase=P.CLOSING, drain_id="", hook_run="", close_reason=reason)
    return _to_turn(s, HaltTurn(reason=reason), out)


def _close(s: SessionState, reason: str, out: _Out) -> SessionState:
    """Hand back everything still waiting (nothing is dropped silently), then close."""
    for entry in s.fifo:
        out.append(PromptRefused(prompt_id=entry.prompt_id, text=entry.text,
                                 reason="the session closed before this prompt ran"))
    for held in s.deferred.turns:
        out.append(AutomaticTurnDropped(turn_id=held.turn_id, reason="the session closed"))
    out.append(CloseSession(reason=reason))
    return _replace(s, phase=P.CLOSED, fifo=(), deferred=bg.Deferred(
        max_deferred=s.deferred.max_deferred), deferred_prompts=(), grace=False,
        close_reason=reason)


def _on_lead(s: SessionState, event: LeadSubmitted, out: _Out) -> SessionState:
    if s.phase is P.CLOSED and event.chat_id == s.config.chat_id:
        out.append(ReturnDraft(lead_id=event.lead_id, reason=DraftReason.NOT_ACTIVE,
                               draft=event.text, message=CLOSED_LEAD))
        return s
    return _to_turn(s, event, out)  # the turn says the rest (LD-1 ... LD-6)


def _on_lifecycle(s: SessionState, event: LifecycleChanged, out: _Out) -> SessionState:
    running = s.phase is not P.IDLE
    return _to_guard(s, g.TrustCleared(
        kind=event.kind, invalidated_turn_id=s.turn.turn_id if running else None), out)


def _on_guard_event(s: SessionState, event: object, out: _Out) -> SessionState:
    return _to_guard(s, event, out)


_Handler = Callable[[SessionState, Any, _Out], SessionState]
_HANDLERS: Mapping[str, _Handler] = MappingProxyType({
    "PromptSubmitted": _on_prompt,
    "ContinueTurn": _on_continue,
    "StreamOpened": _on_stream_opened,
    "StreamCompleted": _on_stream_completed,
    "StreamFailed": _on_request_failed,
    "CompactionFailed": _on_request_failed,
    "TokenLimitRejected": _on_request_failed,
    "StopPressed": _on_stop,
    "PermissionDecided": _on_permission,
    "ToolFinished": _on_tool_finished,
    "LeadSubmitted": _on_lead,
    **{name: _to_turn for name in TURN_EVENTS if name not in (
        "PromptSubmitted", "ContinueTurn", "StreamOpened", "StreamCompleted", "StreamFailed",
        "CompactionFailed", "TokenLimitRejected", "StopPressed", "PermissionDecided",
        "ToolFinished", "LeadSubmitted")},
    "HardStopped": _on_hard_stop,
    "PromptQueued": _on_prompt_queued,
    "PromptCompleted": _on_prompt_completed,
    "PromptAborted": _on_prompt_aborted,
    "MidTurnDrained": _on_drained,
    "TimerFired": _on_timer,
    "StopHookDecided": _on_hook,
    "StopHookFailed": _on_hook,
    "BackgroundStarted": _on_background,
    "BackgroundEnded": _on_background,
    "NotificationQueued": _on_background,
    "NotificationConsumed": _on_background,
    "AutomaticTurnDue": _on_automatic,
    "ClientAttached": _on_attached,
    "ClientDetached": _on_detached,
    "CloseRequested": _on_close,
    "LifecycleChanged": _on_lifecycle,
    **{name: _on_guard_event for name in GUARD_EVENTS},
})

def _event_types() -> dict[str, type]:
    """The event classes the session takes, by name, so a look-alike class is refused."""
    from .. import events
    from . import vocabulary

    found: dict[str, type] = {}
    for name in _HANDLERS:
        for module in (events, vocabulary, g):
            candidate = getattr(module, name, None)
            if isinstance(candidate, type):
                found[name] = candidate
                break
    return found


_TYPES: Mapping[str, type] = MappingProxyType(_event_types())
#: The phase graph's table joined with the handlers: ``(phase name, event class) -> handler``.
#: Built from SESSION_GRAPH once, so the graph stays the one place that says what is accepted.
_ROUTES: Mapping[tuple[str, type], _Handler] = MappingProxyType({
    (phase._name_, _TYPES[name]): _HANDLERS[name]
    for (phase, name) in SESSION_GRAPH.table
    if name in _TYPES
})


def reduce(state: SessionState, event: object) -> Step[SessionState]:
    """Take one event; return the session's new state and the commands to carry out, in order.

    Raises a :class:`~agentturn.ProtocolError` (and changes nothing) when the event is not
    acceptable in the session's phase, or any part refuses it.
    """
    if type(state) is not SessionState:
        check_state("session", state, SessionState, event)
    handler = _ROUTES.get((state.phase._name_, type(event)))
    if handler is None:
        if _TYPES.get(type(event).__name__) is not type(event):
            raise UnexpectedEvent(part="session", phase=state.phase.name, event=event,
                                  expected="a session event")
        SESSION_GRAPH.check(state.phase, event)  # raises, naming what the phase accepts
    out: _Out = []
    new_state = handler(state, event, out)  # type: ignore[misc]
    return new_step(state=new_state, commands=tuple(out))


def outstanding(state: SessionState) -> tuple[turn_part.Outstanding, ...]:
    """Every awaiting command the session still waits on: the turn's, plus the drain (and its
    timer), the Stop-hook run and the grace timer. ``DecideNaturalStop`` never shows: the
    session answers it itself."""
    found = [o for o in turn_part.outstanding(state.turn) if o.command is not DecideNaturalStop]
    if state.phase is P.DRAINING:
        found.append(turn_part.Outstanding(command=DrainMidTurnQueue, answer_id=state.drain_id))
        found.append(turn_part.Outstanding(command=StartTimer, answer_id=state.drain_id))
    if state.phase is P.HOOKS:
        found.append(turn_part.Outstanding(command=RunStopHooks, answer_id=state.hook_run))
    if state.grace:
        found.append(turn_part.Outstanding(command=StartTimer, answer_id=GRACE_TIMER))
    return tuple(found)
