"""The explorer's alphabet: the moves a host could make from a session state, and where walks start.

Theory of operation
-------------------
Session states are frozen and hashable, so the states a host can reach form a graph that can be
walked. :func:`alphabet` derives, from a state alone, the events a host could send next:

* every answer to what the session has outstanding (:func:`agentturn.session.outstanding`), in a
  few variants each (a write saved or failed; a stream opened, failed or refused, and completed
  with text, nothing, a plain call, a guarded call, the todo-write call, a truncated or malformed
  response; a permission allowed, denied or cancelled; a todo list with work left or done; a
  drain reply empty, with a message or with a queued prompt; hooks that block, pass or fail ...);
* a few user and daemon events (a prompt, a continue, a Lead, Stop, a queued prompt, a cron turn,
  a hard stop, a client that attaches or leaves, a rewind, background work, Plan mode, close);
* the late answers that real timing produces (a stream event for a cancelled request, a click on
  a dismissed dialog, a drain reply after its timeout, an old naming result, an old hook run);
* two ids no interleaving can produce (a write key and a tool call that were never issued).

Ids are derived from the state (``t<next ring seq>`` for a prompt, ``<turn>/L<n>`` for a Lead),
so the same state always offers the same events, and two paths that reach one state meet there.

Each move has a kind (:data:`ANSWER`, :data:`USER`, :data:`DAEMON`, :data:`LATE`,
:data:`MISUSE`) that says whether the session must accept it, and a weight for the fuzzer.
:data:`CONFIGS` are the small configurations walked; :data:`STARTS` the starting points, each
reached from a new session by real events (:func:`start_state`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable
from typing import Any, NamedTuple

from ... import events as e
from ... import guard as g
from ... import lead as lead_part
from ..._base import Event, Step
from ..._memo import remember_recent
from ..._trusted import replacer
from ...records import ToolCall
from ...session import (
    AutomaticKind,
    BackgroundKind,
    SessionConfig,
    SessionPhase,
    SessionState,
    outstanding,
)
from ...session import vocabulary as sv
from ...session.background import Deferred, LiveItem
from ...session.fifo import QueuedPrompt
from ...turn.state import LeadPermissionPolicy, TurnConfig, TurnPhase
from .. import explore as package  # this package, for its ``reduce`` (see _reduce)

__all__ = ["ANSWER", "CONFIGS", "DAEMON", "LATE", "MISUSE", "SCRIPT", "STARTS", "TODO_TOOL",
           "USER", "Move", "alphabet", "start_state"]

P = SessionPhase
T = TurnPhase
# (read once: a member read off its enum class costs ten times a global on Python 3.11)
_S_CLOSED, _T_AWAITING_STREAM, _T_ENDING = P.CLOSED, T.AWAITING_STREAM, T.ENDING

#: Small bounds, so that the exploration reaches them: the FIFO, the deferred queue and the ring.
CONFIGS: dict[str, SessionConfig] = {
    "daemon": SessionConfig(
        chat_id="chat", guard=g.GuardConfig(todo_stop_guard=True, daemon=True),
        stop_hooks=True, stop_hook_cap=2, max_deferred=2, ring_capacity=6, ring_pinned=2),
    "interactive": SessionConfig(
        chat_id="chat", guard=g.GuardConfig(todo_stop_guard=True), stop_hooks=True,
        stop_hook_cap=1, ring_capacity=6, ring_pinned=2),
    "supersede": SessionConfig(
        chat_id="chat",
        turn=TurnConfig(lead_permission_policy=LeadPermissionPolicy.SUPERSEDE,
                        auto_title=False, max_requests=4),
        guard=g.GuardConfig(todo_stop_guard=True, daemon=True), max_deferred=1,
        ring_capacity=4, ring_pinned=2),
}

#: The kinds of move, and whether the session must accept them.
ANSWER, USER, DAEMON, LATE, MISUSE = "answer", "user", "daemon", "late", "misuse"
#: The events that reach a starting point (:data:`STARTS`).
SCRIPT = "script"
_MUST_ACCEPT = frozenset({ANSWER, USER, DAEMON, LATE, SCRIPT})

TODO_TOOL = "todo_write"
_TODOS_LEFT = {"type": "todo_list", "todos": [
    {"id": "1", "content": "port the parser", "status": "in_progress"},
    {"id": "2", "content": "run the tests", "status": "pending"}]}
_TODOS_DONE = {"type": "todo_list", "todos": [
    {"id": "1", "content": "port the parser", "status": "completed"}]}


class Move(NamedTuple):
    """One event the alphabet offers: its kind says what the session must do with it; its
    weight is how likely the fuzzer is to pick it."""

    kind: str
    event: Event
    weight: float = 1.0


# --- the alphabet -------------------------------------------------------------------------------


def _number(text: str, prefix: str) -> int:
    rest = text[len(prefix):] if text.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else 0


def _next_lead_id(turn_id: str, lead: lead_part.LeadQueue) -> str:
    prefix = f"{turn_id}/L"
    taken = [entry.lead_id for entry in lead.entries] + list(lead.recent)
    return f"{prefix}{1 + max((_number(i, prefix) for i in taken), default=0)}"


# Most steps keep the turn's id and its Lead queue: the move is remembered for those objects.
@remember_recent(2)
def _lead_move(chat_id: str, turn_id: str, lead: lead_part.LeadQueue) -> Move:
    return Move(kind=USER, event=_lead(chat_id, _next_lead_id(turn_id, lead)), weight=0.3)


def _next_id(next_seq: int, held: tuple[str, ...], letter: str) -> str:
    """A fresh turn or prompt id: the ring seq grows with every turn end, so ids never repeat
    across turns; within one, one more than the ids already ``held`` with the same stem."""
    stem = f"{letter}{next_seq}."
    return f"{stem}{1 + max((_number(i, stem) for i in held), default=0)}"


# Events are validated when built, which costs more than a reducer step: the alphabet builds each
# one once per id and keeps it (the caches hold one entry per id a run meets).
_Weighted = tuple[tuple[float, Event], ...]
_cache = functools.lru_cache(maxsize=1 << 14)


def _answer_moves(answers: Callable[..., _Weighted]) -> Callable[..., tuple[Move, ...]]:
    """``answers``, cached, its weighted events made into :data:`ANSWER` moves once."""
    @_cache
    @functools.wraps(answers)
    def moves(*args: Any) -> tuple[Move, ...]:
        return tuple(Move(kind=ANSWER, event=event, weight=weight)
                     for weight, event in answers(*args))
    return moves


@_answer_moves
def _write_answers(key: str) -> _Weighted:
    return ((10.0, e.Persisted(key=key)), (0.4, e.PersistFailed(key=key, reason="disk full")))


@_answer_moves
def _open_answers(request_id: str) -> _Weighted:
    return ((10.0, e.StreamOpened(request_id=request_id)),
            (0.4, e.StreamFailed(request_id=request_id, error="503")),
            (0.2, e.CompactionFailed(request_id=request_id, reason="nothing to drop")),
            (0.2, e.TokenLimitRejected(request_id=request_id, reason="too long")))


@_answer_moves
def _responses(request_id: str) -> _Weighted:
    # A new request id every round, and eight validated events for each: they are copied from
    # the ones built (and validated) once for a template id, with only the ids changed (ids the
    # session issued, so valid as the template's are). tests/tools/test_explore_caches.py
    # checks the copies equal the events built directly.
    out: list[tuple[float, Event]] = []
    for weight, event in _RESPONSE_TEMPLATES:
        if isinstance(event, e.StreamCompleted):
            calls = tuple(_with_call_id(call, f"{request_id}/c1") for call in event.tool_calls)
            out.append((weight, _with_response_ids(event, request_id, calls)))
        else:
            out.append((weight, _with_failed_id(event, request_id)))
    return tuple(out)


_with_response_ids = replacer(e.StreamCompleted, "request_id", "tool_calls")
_with_call_id = replacer(ToolCall, "call_id")
_with_failed_id = replacer(e.StreamFailed, "request_id")


def _built_responses(request_id: str) -> _Weighted:
    """The responses to ``request_id``, each event built (and validated) by its class."""
    def calls(name: str, permission: bool = False) -> tuple[ToolCall, ...]:
        return (ToolCall(call_id=f"{request_id}/c1", name=name, arguments="{}",
                         needs_permission=permission),)

    def done(text: str, reason: str, tool_calls: tuple[ToolCall, ...] = (),
             malformed: bool = False) -> Event:
        return e.StreamCompleted(request_id=request_id, text=text, finish_reason=reason,
                                 tool_calls=tool_calls, malformed_tool_format=malformed)

    return ((3.0, done("Done.", "stop")), (0.4, done("", "end_turn")),
            (2.0, done("Reading.", "tool_use", calls("read_file"))),
            (1.0, done("", "tool_use", calls("write_file", permission=True))),
            (3.0, done("Planning.", "tool_use", calls(TODO_TOOL))),
            (0.3, done("Cut", "length", calls("read_file"))),
            (0.3, done("", "tool_use", malformed=True)),
            (0.3, e.StreamFailed(request_id=request_id, error="connection reset", network=True)))


_RESPONSE_TEMPLATES = _built_responses("template/r1")


@_answer_moves
def _decisions(call_id: str) -> _Weighted:
    weights = {e.PermissionDecision.ALLOW: 3.0, e.PermissionDecision.DENY: 1.0,
               e.PermissionDecision.CANCEL: 0.3}
    return tuple((weights[d], e.PermissionDecided(call_id=call_id, decision=d))
                 for d in e.PermissionDecision)


@_answer_moves
def _tool_results(call_id: str, todo: bool, ending: bool) -> _Weighted:
    found: list[tuple[float, Event]] = (
        [(3.0, e.ToolFinished(call_id=call_id, output="todos", structured=_TODOS_LEFT)),
         (1.0, e.ToolFinished(call_id=call_id, output="todos", structured=_TODOS_DONE))]
        if todo else [(3.0, e.ToolFinished(call_id=call_id, output="ok"))])
    if ending:
        found.append((3.0, e.ToolFinished(call_id=call_id, output="partial", cancelled=True)))
    return tuple(found)


@_answer_moves
def _other_answers(kind: str, answer: str) -> _Weighted:
    if kind == "SaveLead":
        return ((5.0, e.LeadSaved(lead_id=answer)),
                (0.4, e.LeadSaveFailed(lead_id=answer, reason="io")))
    if kind == "RequestTitle":
        return ((3.0, e.TitleGenerated(request_id=answer, title="Port the parser")),
                (1.0, e.TitleFailed(request_id=answer, reason="offline")))
    if kind == "DrainMidTurnQueue":
        return ((5.0, sv.MidTurnDrained(drain_id=answer)),
                (1.0, sv.MidTurnDrained(drain_id=answer, messages=("and the docs",))),
                (0.5, sv.MidTurnDrained(drain_id=answer, has_queued_prompt=True)))
    if kind == "StartTimer":
        return ((0.3, sv.TimerFired(key=answer)),)
    if kind == "RunStopHooks":
        return ((2.0, sv.StopHookDecided(run_id=answer, block=True, reason="tests still fail")),
                (2.0, sv.StopHookDecided(run_id=answer, block=False)),
                (0.5, sv.StopHookFailed(run_id=answer, error="exit 2")))
    raise ValueError(f"no answers for {kind}")  # pragma: no cover - every kind is above


def _answers(s: SessionState, owed: Iterable[tuple[str, str]]) -> list[Move]:
    out: list[Move] = []
    turn = s.turn
    for kind, answer in owed:
        if kind == "Persist":
            found = _write_answers(answer)
        elif kind == "RequestModelStream":
            found = (_open_answers(answer) if turn.phase is _T_AWAITING_STREAM
                     else _responses(answer))
        elif kind == "AskPermission":
            found = _decisions(answer)
        elif kind == "ExecuteTool":
            found = _tool_results(answer, turn.calls[turn.next_call].name == TODO_TOOL,
                                  turn.phase is _T_ENDING)
        else:
            found = _other_answers(kind, answer)
        out += found
    return out


@_cache
def _prompt(turn_id: str) -> Event:
    return e.PromptSubmitted(turn_id=turn_id, message_id=f"{turn_id}-m", text="Port the parser")


@_cache
def _continue(turn_id: str) -> Event:
    return e.ContinueTurn(turn_id=turn_id)


@_cache
def _lead(chat_id: str, lead_id: str) -> Event:
    return e.LeadSubmitted(chat_id=chat_id, lead_id=lead_id, text="use tabs")


@_cache
def _queued(prompt_id: str) -> Event:
    return sv.PromptQueued(prompt_id=prompt_id, message_id=f"{prompt_id}-m",
                           text="and then this")


@_cache
def _cron(turn_id: str) -> Event:
    return sv.AutomaticTurnDue(turn_id=turn_id, message_id=f"{turn_id}-m", text="nightly check",
                               kind=AutomaticKind.CRON, source_id="cron-nightly",
                               recurring=True)


_STOP = e.StopPressed()
_HARD = sv.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="the same call five times")
_CLOSE = sv.CloseRequested()
_ATTACH = sv.ClientAttached(client_id="desk")
_DETACH = sv.ClientDetached(client_id="desk")
_REWIND = sv.LifecycleChanged(kind=g.TrustClearingKind.REWIND)
_BG_START = sv.BackgroundStarted(kind=BackgroundKind.SHELL, item_id="bg-1")
_BG_END = sv.BackgroundEnded(item_id="bg-1", notification_id=None)
_PLAN = g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)
_DEFAULT = g.ApprovalModeChanged(mode=g.ApprovalMode.DEFAULT)
_MISUSE = (e.Persisted(key="nobody/p1"), e.ToolFinished(call_id="never-started", output=""))


# The moves that carry no id are made once; the ones that do, once per id (cached).
_M_CLOSED = Move(kind=USER, event=_CLOSE, weight=0.05)
_M_STOP = Move(kind=USER, event=_STOP, weight=0.15)
_M_HARD = Move(kind=DAEMON, event=_HARD, weight=0.05)
_M_CLOSE = Move(kind=USER, event=_CLOSE, weight=0.01)
_M_ATTACH = Move(kind=DAEMON, event=_ATTACH, weight=0.2)
_M_DETACH = Move(kind=DAEMON, event=_DETACH, weight=0.2)
_M_REWIND = Move(kind=DAEMON, event=_REWIND, weight=0.05)
_M_BG_START = Move(kind=DAEMON, event=_BG_START, weight=0.3)
_M_BG_END = Move(kind=DAEMON, event=_BG_END, weight=0.3)
_M_PLAN = Move(kind=USER, event=_PLAN, weight=0.05)
_M_DEFAULT = Move(kind=USER, event=_DEFAULT, weight=0.5)
_MISUSE_MOVES = [Move(kind=MISUSE, event=event, weight=0.05) for event in _MISUSE]


@_cache
def _moves_with_ids(next_seq: int, held: tuple[str, ...], idle: bool, closing: bool
                    ) -> tuple[Move, ...]:
    """The prompt (when idle), the queued prompt and the cron turn (unless closing), with their
    fresh ids (:func:`_next_id`)."""
    found: list[Move] = []
    if idle:
        found.append(Move(kind=USER, event=_prompt(_next_id(next_seq, held, "t")), weight=3.0))
    if not closing:
        found.append(Move(kind=USER, event=_queued(_next_id(next_seq, held, "q")), weight=0.15))
        found.append(Move(kind=DAEMON, event=_cron(_next_id(next_seq, held, "a")), weight=0.15))
    return tuple(found)


def _user_and_daemon(s: SessionState) -> tuple[Move, ...]:
    turn = s.turn
    return _user_and_daemon_of(s.phase, s.config, turn.turn_id, turn.resume_phase, turn.lead,
                               s.fifo, s.deferred, s.ring.next_seq, s.clients, s.background.live,
                               s.guard.phase)


# The user's and the daemon's moves depend on these few parts of a state, which most steps keep
# (the turn changes, its id and its Lead queue mostly not): remembered for them.
@remember_recent(2)
def _user_and_daemon_of(phase: SessionPhase, config: SessionConfig, turn_id: str,
                        resume_phase: TurnPhase | None, lead: lead_part.LeadQueue,
                        fifo: tuple[QueuedPrompt, ...], deferred: Deferred, next_seq: int,
                        clients: tuple[str, ...], live: tuple[LiveItem, ...],
                        guard_phase: g.GuardPhase) -> tuple[Move, ...]:
    if phase is P.CLOSED:
        return (_M_CLOSED,)
    held = (*(p.prompt_id for p in fifo), *(t.turn_id for t in deferred.turns), turn_id)
    fresh = _moves_with_ids(next_seq, held, phase is P.IDLE, phase is P.CLOSING)
    moves: list[Move] = []
    if phase is P.IDLE:
        moves.append(fresh[0])
        if resume_phase is not None:
            moves.append(Move(kind=USER, event=_continue(turn_id), weight=2.0))
    else:
        moves.append(_M_STOP)
    if lead_part.is_offered(lead):
        moves.append(_lead_move(config.chat_id, turn_id, lead))
    moves.append(_M_HARD)
    if phase is not P.CLOSING:
        moves += fresh[-2:]
    moves.append(_M_CLOSE)
    moves.append(_M_DETACH if "desk" in clients else _M_ATTACH)
    moves.append(_M_REWIND)
    moves.append(_M_BG_END if live else _M_BG_START)
    moves.append(_M_DEFAULT if guard_phase is g.GuardPhase.PLAN else _M_PLAN)
    return tuple(moves)


def _late_move(event: Event) -> Move:
    return Move(kind=LATE, event=event, weight=0.3)


@_cache
def _late_stream(request_id: str) -> Move:
    return _late_move(e.StreamCompleted(request_id=request_id, text="late", finish_reason="stop"))


@_cache
def _late_click(call_id: str) -> Move:
    return _late_move(e.PermissionDecided(call_id=call_id, decision=e.PermissionDecision.ALLOW))


@_cache
def _late_drain(drain_id: str) -> Move:
    return _late_move(sv.MidTurnDrained(drain_id=drain_id, messages=("typed late",)))


@_cache
def _late_title(request_id: str) -> Move:
    return _late_move(e.TitleGenerated(request_id=request_id, title="Late"))


@_cache
def _late_hooks(run_id: str) -> Move:
    return _late_move(sv.StopHookFailed(run_id=run_id, error="late"))


def _late(s: SessionState, waiting: Collection[tuple[str, str]]) -> list[Move]:
    out: list[Move] = []
    turn, title = s.turn, s.turn.title
    if s.phase is _S_CLOSED:
        return out
    # (turn.cancelled_request and turn.dismissed_call, read without their property calls)
    cancelled = turn.cancelled_requests[-1] if turn.cancelled_requests else ""
    if cancelled and ("RequestModelStream", cancelled) not in waiting:
        out.append(_late_stream(cancelled))
    dismissed = turn.dismissed_calls[-1] if turn.dismissed_calls else ""
    if dismissed and ("AskPermission", dismissed) not in waiting:
        out.append(_late_click(dismissed))
    if s.late_drain:
        out.append(_late_drain(s.late_drain))
    if title.requests and ("RequestTitle", title.request_id) not in waiting:
        out.append(_late_title(title.request_id))
    run = _last_run(s.issued)
    if run and ("RunStopHooks", run) not in waiting:
        out.append(_late_hooks(run))
    return out


@remember_recent(1)
def _last_run(issued: tuple[str, ...]) -> str:
    """The last hook run the session issued ("" when none): its own memory of ids, which most
    steps keep as it was."""
    runs = [answer for answer in issued if "/hooks-" in answer]
    return runs[-1] if runs else ""

#: The last two states :func:`awaited` answered for, and its answers, kept by identity (each
#: state is held, so its id cannot be reused). A walk asks about one state for every move it
#: makes there (the alphabet, then each step's check: the first memo), and a step's check asks
#: about the state it made, which a random walk moves to next (the second). Each memo is a pair
#: replaced whole, so a caller in another thread reads a consistent one.
_Awaited = dict[tuple[str, str], type]
_awaited_before: tuple[Any, _Awaited] = (None, {})
_awaited_after: tuple[Any, _Awaited] = (None, {})


def awaited(s: SessionState, after: bool = False) -> _Awaited:
    """``outstanding(s)`` as ``{(command name, answer id): command class}``; ``after``: ``s``
    was just made by a step (kept in the second memo). Do not mutate the dict: it is shared
    with the next caller that asks about the same state."""
    global _awaited_before, _awaited_after
    before, made = _awaited_before, _awaited_after
    if before[0] is s:
        return before[1]
    if made[0] is s:
        if not after:  # a walk moves on to the state a step made: the memo of "before" now
            _awaited_before = made
        return made[1]
    found = {(o.command.__name__, o.answer_id): o.command for o in outstanding(s)}
    if after:
        _awaited_after = (s, found)
    else:
        _awaited_before = (s, found)
    return found


def _owed(s: SessionState) -> list[tuple[str, str]]:
    """``outstanding(s)`` as pairs, a repeat kept (a check looks for one)."""
    return [(o.command.__name__, o.answer_id) for o in outstanding(s)]


def alphabet(s: SessionState) -> list[Move]:
    """Every move the explorer and the fuzzer may make from ``s`` (see the module docstring).

    Each has a weight for the fuzzer: the answers that keep work moving outweigh failures, and
    the moves that are always possible (Plan mode, a rewind, close) are rare.
    """
    owed = awaited(s)
    moves = _answers(s, owed)
    moves += _user_and_daemon(s)
    late = _late(s, owed)
    if late:
        moves += late
    moves += _MISUSE_MOVES
    return moves


# --- starting points ----------------------------------------------------------------------------


def _prompt_and_first_response(config: SessionConfig, response: e.StreamCompleted
                               ) -> list[Event]:
    events: list[Event] = [
        e.PromptSubmitted(turn_id="t0", message_id="t0-m", text="Port the parser"),
        e.Persisted(key="t0/p1"), e.StreamOpened(request_id="t0/r1"), response]
    if config.turn.auto_title and response.text:
        events.append(e.TitleGenerated(request_id="chat/title-1", title="Parser"))
    return [*events, e.Persisted(key="t0/p2")]


def _armed_script(config: SessionConfig) -> list[Event]:
    """A turn whose todo-write result armed the guard with work left; the next stream is open,
    one completion away from the natural stop where drain, hooks and guard decide."""
    events = _prompt_and_first_response(config, e.StreamCompleted(
        request_id="t0/r1", text="", finish_reason="tool_use",
        tool_calls=(ToolCall(call_id="w1", name=TODO_TOOL, arguments="{}"),)))
    events += [e.ToolFinished(call_id="w1", output="todos", structured=_TODOS_LEFT),
               e.Persisted(key="t0/p3")]
    if config.turn.auto_title:
        events.append(e.TitleGenerated(request_id="chat/title-1", title="Parser"))
    return [*events, e.StreamOpened(request_id="t0/r2")]


def _draining_script(config: SessionConfig) -> list[Event]:
    """The armed turn's model stopped naturally: the session's stop order runs (a daemon drains
    the client's mid-turn messages first)."""
    return [*_armed_script(config),
            e.StreamCompleted(request_id="t0/r2", text="Done.", finish_reason="stop"),
            e.Persisted(key="t0/p4")]


def _permission_script(config: SessionConfig) -> list[Event]:
    """A call that needs permission waits for the user's answer while a Lead instruction is
    being saved."""
    events = _prompt_and_first_response(config, e.StreamCompleted(
        request_id="t0/r1", text="Editing.", finish_reason="tool_use",
        tool_calls=(ToolCall(call_id="w1", name="write_file", arguments="{}",
                             needs_permission=True),)))
    return [*events, e.LeadSubmitted(chat_id=config.chat_id, lead_id="t0/L1",
                                     text="keep the API")]


def _naming_script(config: SessionConfig) -> list[Event]:
    """The first response's tools wait for the naming request it caused (TT-3)."""
    return [e.PromptSubmitted(turn_id="t0", message_id="t0-m", text="Port the parser"),
            e.Persisted(key="t0/p1"), e.StreamOpened(request_id="t0/r1"),
            e.StreamCompleted(request_id="t0/r1", text="Reading first.",
                              finish_reason="tool_use",
                              tool_calls=(ToolCall(call_id="r1", name="read_file",
                                                   arguments="{}"),)),
            e.Persisted(key="t0/p2")]


#: Where an exploration starts, each reached from a new session by real events.
STARTS: dict[str, Callable[[SessionConfig], list[Event]]] = {
    "new": lambda config: [], "armed": _armed_script, "draining": _draining_script,
    "permission": _permission_script, "naming": _naming_script}


def start_state(config: str, start: str) -> tuple[SessionState, tuple[Event, ...]]:
    """The state ``start`` reaches in a new session of ``config``, and the events it took."""
    state = SessionState.create(CONFIGS[config])
    events = tuple(STARTS[start](CONFIGS[config]))
    for event in events:
        state = _reduce(state, event).state
    return state, events


def _reduce(s: SessionState, event: Event) -> Step[SessionState]:
    """``session.reduce``, looked up as ``agentturn.tools.explore.reduce`` at every call, so a
    test that swaps that one name for a broken reducer has every walk and every check use it
    (as when the explorer was one module)."""
    return package.reduce(s, event)
