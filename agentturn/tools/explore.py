"""Bounded exhaustive exploration, and long random walks, of the session reducer.

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

:func:`explore` walks breadth first from a start state to a bounded depth and keeps every node it
has seen, so a node reached two ways is expanded once. A node is the state plus one small
monitor, the guard continuations published since the last user input (SG-B1 is a rule about
paths, not states). :func:`fuzz` walks at random with a fixed seed, one configuration after
another, for as many steps as asked. Both check every step with :func:`check_step`; a broken rule
is a :class:`Violation` that carries the event sequence reproducing it from a new session.

What every step must satisfy:

* only a ``ProtocolError`` escapes ``session.reduce``, and only for the ids nobody issued: every
  answer, user, daemon and late event the alphabet offers is accepted;
* the step is deterministic (reducing it again gives an equal state and equal commands) and the
  new phase is one of the session table's destinations for that event;
* a late answer absorbed with ``StaleAnswerIgnored`` changes nothing and says nothing else;
* the awaiting commands stay consistent with ``outstanding``: every awaiting command handed out is
  outstanding afterwards, nothing becomes outstanding without one, and whatever stops being
  outstanding was answered by this event, cancelled by a command of this step (``CancelTimer``,
  ``CancelStream``, ``DismissPermission``) or is a drain or hook run whose late answer the session
  absorbs (BR-3); every cancel names something outstanding;
* the ring's seqs advance by the number of ``Publish`` commands, consecutively; the usage counts
  one model call per accepted ``StreamOpened`` and one guard call per guard chunk (OB-5);
* at most two guard continuations are published without new user input or a new work chain
  (SG-B1);
* every state is bounded and coherent (:func:`check_state`): the FIFO, the deferred queue, the
  ring, the Lead queue and the late-answer memories within their bounds; the session phase and the
  turn phase agree; no complete queued prompt waits while the session idles (SO-2); the guard's
  attempts within ``MAX_ATTEMPTS`` and the guard off exactly when the configuration says so.

Known reducer bugs are recognized by :func:`known_bug` and counted apart, so a run still tells
something new from something already pinned by a test.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import attrs

from .. import commands as c
from .. import events as e
from .. import guard as g
from .. import lead as lead_part
from .._base import AwaitingCommand, Command, Event
from ..errors import ProtocolError, UnexpectedEvent
from ..records import ToolCall
from ..session import (
    SESSION_GRAPH,
    AutomaticKind,
    BackgroundKind,
    SessionConfig,
    SessionPhase,
    SessionState,
    outstanding,
    reduce,
)
from ..session import fifo as fifo_part
from ..session import vocabulary as sv
from ..session.invariants import HardBound, lost_texts, stuck
from ..session.ring import EntryKind
from ..turn.state import (
    LATE_MEMORY,
    SAVING_PHASES,
    LeadPermissionPolicy,
    TurnConfig,
    TurnPhase,
)

__all__ = [
    "CONFIGS",
    "KNOWN_BUGS",
    "STARTS",
    "ExploreReport",
    "FuzzReport",
    "Move",
    "Violation",
    "alphabet",
    "check_state",
    "check_step",
    "explore",
    "fuzz",
    "known_bug",
    "reachable",
    "shrink",
    "start_state",
]

P = SessionPhase
T = TurnPhase

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


@attrs.frozen(kw_only=True)
class Violation:
    """A broken rule, with the events that reproduce it from ``config``'s new session."""

    rule: str
    detail: str
    config: str
    events: tuple[Event, ...]
    #: The name of the known bug it matches, or "" when it is new.
    known: str = ""

    def describe(self) -> str:
        lines = [f"{self.rule}: {self.detail}" + (f"  [known: {self.known}]" if self.known else ""),
                 f"  config {self.config!r}; events from a new session:"]
        lines.extend(f"    {event!r}" for event in self.events)
        return "\n".join(lines)


# --- the alphabet -------------------------------------------------------------------------------


def _number(text: str, prefix: str) -> int:
    rest = text[len(prefix):] if text.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else 0


def _next_lead_id(s: SessionState) -> str:
    prefix = f"{s.turn.turn_id}/L"
    taken = [entry.lead_id for entry in s.turn.lead.entries] + list(s.turn.lead.recent)
    return f"{prefix}{1 + max((_number(i, prefix) for i in taken), default=0)}"


def _next_id(s: SessionState, letter: str) -> str:
    """A fresh turn or prompt id: the ring seq grows with every turn end, so ids never repeat
    across turns; within one, one more than the ids already held with the same stem."""
    stem = f"{letter}{s.ring.next_seq}."
    held = [p.prompt_id for p in s.fifo] + [t.turn_id for t in s.deferred.turns] + [
        s.turn.turn_id]
    return f"{stem}{1 + max((_number(i, stem) for i in held), default=0)}"


# Events are validated when built, which costs more than a reducer step: the alphabet builds each
# one once per id and keeps it (the caches hold one entry per id a run meets).
_Weighted = tuple[tuple[float, Event], ...]
_cache = functools.lru_cache(maxsize=1 << 14)


@_cache
def _write_answers(key: str) -> _Weighted:
    return ((10.0, e.Persisted(key=key)), (0.4, e.PersistFailed(key=key, reason="disk full")))


@_cache
def _open_answers(request_id: str) -> _Weighted:
    return ((10.0, e.StreamOpened(request_id=request_id)),
            (0.4, e.StreamFailed(request_id=request_id, error="503")),
            (0.2, e.CompactionFailed(request_id=request_id, reason="nothing to drop")),
            (0.2, e.TokenLimitRejected(request_id=request_id, reason="too long")))


@_cache
def _responses(request_id: str) -> _Weighted:
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


@_cache
def _decisions(call_id: str) -> _Weighted:
    weights = {e.PermissionDecision.ALLOW: 3.0, e.PermissionDecision.DENY: 1.0,
               e.PermissionDecision.CANCEL: 0.3}
    return tuple((weights[d], e.PermissionDecided(call_id=call_id, decision=d))
                 for d in e.PermissionDecision)


@_cache
def _tool_results(call_id: str, todo: bool, ending: bool) -> _Weighted:
    found: list[tuple[float, Event]] = (
        [(3.0, e.ToolFinished(call_id=call_id, output="todos", structured=_TODOS_LEFT)),
         (1.0, e.ToolFinished(call_id=call_id, output="todos", structured=_TODOS_DONE))]
        if todo else [(3.0, e.ToolFinished(call_id=call_id, output="ok"))])
    if ending:
        found.append((3.0, e.ToolFinished(call_id=call_id, output="partial", cancelled=True)))
    return tuple(found)


@_cache
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


def _answers(s: SessionState, owed: Sequence[tuple[str, str]]) -> _Weighted:
    out: _Weighted = ()
    turn = s.turn
    for kind, answer in owed:
        if kind == "Persist":
            out += _write_answers(answer)
        elif kind == "RequestModelStream":
            out += (_open_answers(answer) if turn.phase is T.AWAITING_STREAM
                    else _responses(answer))
        elif kind == "AskPermission":
            out += _decisions(answer)
        elif kind == "ExecuteTool":
            out += _tool_results(answer, turn.calls[turn.next_call].name == TODO_TOOL,
                                 turn.phase is T.ENDING)
        else:
            out += _other_answers(kind, answer)
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
_BG_END = sv.BackgroundEnded(item_id="bg-1")
_PLAN = g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)
_DEFAULT = g.ApprovalModeChanged(mode=g.ApprovalMode.DEFAULT)
_MISUSE = (e.Persisted(key="nobody/p1"), e.ToolFinished(call_id="never-started", output=""))


def _user_and_daemon(s: SessionState) -> list[Move]:
    phase, turn = s.phase, s.turn
    if phase is P.CLOSED:
        return [Move(kind=USER, event=_CLOSE, weight=0.05)]
    moves: list[Move] = []
    if phase is P.IDLE:
        moves.append(Move(kind=USER, event=_prompt(_next_id(s, "t")), weight=3.0))
        if turn.resume_phase is not None:
            moves.append(Move(kind=USER, event=_continue(turn.turn_id), weight=2.0))
    else:
        moves.append(Move(kind=USER, event=_STOP, weight=0.15))
    if lead_part.is_offered(turn.lead):
        moves.append(Move(kind=USER, event=_lead(s.config.chat_id, _next_lead_id(s)),
                          weight=0.3))
    moves.append(Move(kind=DAEMON, event=_HARD, weight=0.05))
    if phase is not P.CLOSING:
        moves.append(Move(kind=USER, event=_queued(_next_id(s, "q")), weight=0.15))
        moves.append(Move(kind=DAEMON, event=_cron(_next_id(s, "a")), weight=0.15))
    moves.append(Move(kind=USER, event=_CLOSE, weight=0.01))
    moves.append(Move(kind=DAEMON, event=_DETACH if "desk" in s.clients else _ATTACH,
                      weight=0.2))
    moves.append(Move(kind=DAEMON, event=_REWIND, weight=0.05))
    moves.append(Move(kind=DAEMON, event=_BG_END if s.background.live else _BG_START,
                      weight=0.3))
    plan = s.guard.phase is g.GuardPhase.PLAN
    moves.append(Move(kind=USER, event=_DEFAULT if plan else _PLAN, weight=0.5 if plan else 0.05))
    return moves


@_cache
def _late_stream(request_id: str) -> Event:
    return e.StreamCompleted(request_id=request_id, text="late", finish_reason="stop")


@_cache
def _late_click(call_id: str) -> Event:
    return e.PermissionDecided(call_id=call_id, decision=e.PermissionDecision.ALLOW)


@_cache
def _late_drain(drain_id: str) -> Event:
    return sv.MidTurnDrained(drain_id=drain_id, messages=("typed late",))


@_cache
def _late_title(request_id: str) -> Event:
    return e.TitleGenerated(request_id=request_id, title="Late")


@_cache
def _late_hooks(run_id: str) -> Event:
    return sv.StopHookFailed(run_id=run_id, error="late")


def _late(s: SessionState, waiting: set[tuple[str, str]]) -> list[Event]:
    out: list[Event] = []
    turn, title = s.turn, s.turn.title
    if s.phase is P.CLOSED:
        return out
    cancelled = turn.cancelled_request
    if cancelled and ("RequestModelStream", cancelled) not in waiting:
        out.append(_late_stream(cancelled))
    dismissed = turn.dismissed_call
    if dismissed and ("AskPermission", dismissed) not in waiting:
        out.append(_late_click(dismissed))
    if s.late_drain:
        out.append(_late_drain(s.late_drain))
    if title.requests and ("RequestTitle", title.request_id) not in waiting:
        out.append(_late_title(title.request_id))
    runs = [issued for issued in s.issued if "/hooks-" in issued]  # the session's own memory
    if runs and ("RunStopHooks", runs[-1]) not in waiting:
        out.append(_late_hooks(runs[-1]))
    return out


def alphabet(s: SessionState) -> list[Move]:
    """Every move the explorer and the fuzzer may make from ``s`` (see the module docstring).

    Each has a weight for the fuzzer: the answers that keep work moving outweigh failures, and
    the moves that are always possible (Plan mode, a rewind, close) are rare.
    """
    owed = _owed(s)
    moves = [Move(kind=ANSWER, event=event, weight=weight)
             for weight, event in _answers(s, owed)]
    moves += _user_and_daemon(s)
    moves += [Move(kind=LATE, event=event, weight=0.3) for event in _late(s, set(owed))]
    moves += [Move(kind=MISUSE, event=event, weight=0.05) for event in _MISUSE]
    return moves


# --- the rules ----------------------------------------------------------------------------------


def _owed(s: SessionState) -> list[tuple[str, str]]:
    return [(o.command.__name__, o.answer_id) for o in outstanding(s)]


def check_state(s: SessionState, owed: Sequence[tuple[str, str]] | None = None) -> list[str]:
    """What is wrong with ``s`` on its own (an empty list when nothing is); ``owed`` is
    ``outstanding(s)`` as ``(command name, answer id)`` pairs, when the caller has it."""
    problems: list[str] = []
    config, turn, guard = s.config, s.turn, s.guard

    def need(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    idle_turn = turn.phase is T.IDLE
    if s.phase in (P.IDLE, P.CLOSED):
        need(idle_turn, f"session {s.phase.name} but the turn is {turn.phase.name}")
    if s.phase in (P.TURN, P.DRAINING, P.HOOKS):
        need(not idle_turn, f"session {s.phase.name} but no turn runs")
    need((turn.phase is T.AWAITING_STOP_DECISION) == (s.phase in (P.DRAINING, P.HOOKS)),
         f"turn {turn.phase.name} in session phase {s.phase.name}")
    if s.phase is P.IDLE:
        need(not fifo_part.has_queued_prompt(s.fifo), "SO-2: a complete prompt waits idle")
    if s.phase is P.CLOSED:
        need(not s.fifo and not s.deferred.turns and not s.grace, "CLOSED still holds work")
    need(len(s.fifo) <= fifo_part.MAX_QUEUED, "the FIFO is over its bound")
    need(len(s.deferred.turns) <= config.max_deferred, "BG-6: the deferred queue is over its bound")
    need(sorted(t.turn_id for t in s.deferred.turns) == sorted(p[0] for p in s.deferred_prompts),
         "a held automatic turn without its prompt, or the reverse")
    need(len(s.ring.live) <= config.ring_capacity and len(s.ring.pinned) <= config.ring_pinned,
         "OB-6: the ring is over its bounds")
    queue = turn.lead
    need(len(queue.entries) <= lead_part.MAX_PENDING and len(queue.recent) <= lead_part.MAX_PENDING,
         "LD-5: the Lead queue is over its bound")
    need(sum(x.status is lead_part.LeadStatus.SAVING for x in queue.entries) <= 1,
         "LD-4: two Lead saves in flight")
    if queue.admission is lead_part.Admission.OPEN:
        need(turn.phase not in (T.IDLE, T.ENDING), f"Lead offered in {turn.phase.name}")
    if idle_turn:
        need(queue.admission is lead_part.Admission.CLOSED, "Lead admission open with no turn")
    need(len(turn.cancelled_requests) <= LATE_MEMORY and len(turn.dismissed_calls) <= LATE_MEMORY,
         "the late-answer memory is over its bound")
    need(turn.next_call <= len(turn.calls), "next_call past the response's calls")
    if turn.tool_in_flight:
        need(turn.next_call < len(turn.calls) and turn.phase in (T.RUNNING_TOOL, T.ENDING),
             f"a tool in flight in {turn.phase.name}")
    if turn.phase in SAVING_PHASES:
        need(turn.persisting, f"{turn.phase.name} without a write in flight")
    if turn.persisting:
        need(turn.phase in (*SAVING_PHASES, T.ENDING), f"a write in flight in {turn.phase.name}")
    need(guard.attempts <= g.MAX_ATTEMPTS and guard.pending_attempt <= g.MAX_ATTEMPTS,
         "SG-B1: more guard attempts than allowed")
    need((guard.phase is g.GuardPhase.OFF) == (not config.guard.enabled),
         "SG-C2: the guard's presence differs from its configuration")
    if guard.phase is g.GuardPhase.CONTINUING:
        need(guard.pending_attempt >= 1, "a pending continuation without an attempt")
    need(s.usage.guard_calls <= s.usage.model_calls, "OB-5: more guard calls than model calls")
    if owed is None:
        owed = _owed(s)
    need(len(owed) == len(set(owed)), f"an awaiting command outstanding twice: {owed}")
    problems.extend(stuck(s))  # never stuck (the session's invariant)
    kinds = Counter(kind for kind, _ in owed)
    need(all(n == 1 for k, n in kinds.items() if k != "StartTimer") and kinds["StartTimer"] <= 2,
         f"too many awaiting commands of one kind: {owed}")
    return problems


#: The event field that echoes the answer id, for each answering event class.
_ECHO = {"Persisted": "key", "PersistFailed": "key", "StreamCompleted": "request_id",
         "StreamFailed": "request_id", "CompactionFailed": "request_id",
         "TokenLimitRejected": "request_id", "PermissionDecided": "call_id",
         "ToolFinished": "call_id", "LeadSaved": "lead_id", "LeadSaveFailed": "lead_id",
         "TitleGenerated": "request_id", "TitleFailed": "request_id",
         "MidTurnDrained": "drain_id", "TimerFired": "key", "StopHookDecided": "run_id",
         "StopHookFailed": "run_id"}
#: Awaiting commands no command cancels: the session stops awaiting them and absorbs a late
#: answer (BR-3).
_ABANDONABLE = frozenset({"DrainMidTurnQueue", "RunStopHooks"})
_CANCELS = {"CancelTimer": ("StartTimer", "key"), "CancelStream": ("RequestModelStream",
                                                                   "request_id"),
            "DismissPermission": ("AskPermission", "call_id")}


def _answers_item(event: Event, item: tuple[str, str], command: type) -> bool:
    name = type(event).__name__
    field = _ECHO.get(name)
    return (field is not None and getattr(event, field) == item[1]
            and name in getattr(command, "answered_by", ()))


@attrs.frozen(kw_only=True)
class StepResult:
    """What :func:`check_step` found: the outcome, the node after the step, what broke."""

    outcome: str  # "accepted", "absorbed" or "refused"
    state: SessionState
    streams: HardBound
    commands: tuple[Command, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()
    #: ``outstanding`` of the new state, as (command name, answer id) pairs.
    owed: tuple[tuple[str, str], ...] = ()


def check_step(s: SessionState, streams: HardBound, move: Move,
               recheck: bool = True) -> StepResult:
    """Reduce ``move`` in ``s`` and check the rules of a step (the module docstring); the new
    state's own rules are :func:`check_state`'s.

    ``streams`` is the hard-bound monitor (:class:`~agentturn.session.invariants.HardBound`):
    guard-attributable streams since the last user input.
    ``recheck`` reduces the step a second time to check it is deterministic.
    """
    event = move.event
    name = type(event).__name__
    problems: list[tuple[str, str]] = []
    try:
        step = reduce(s, event)
    except ProtocolError as error:
        if move.kind in _MUST_ACCEPT:
            problems.append(("refused", f"a {move.kind} event was refused: {error}"))
        if (s.phase, name) not in SESSION_GRAPH.table and not isinstance(error, UnexpectedEvent):
            problems.append(("table", f"an undeclared pair raised {type(error).__name__}"))
        return StepResult(outcome="refused", state=s, streams=streams, problems=tuple(problems))
    except Exception as error:  # the one rule: nothing but ProtocolError escapes
        return StepResult(outcome="refused", state=s, streams=streams, problems=(
            ("crash", f"{type(error).__name__}: {error}"),))
    new, commands = step.state, step.commands
    if move.kind == MISUSE:
        problems.append(("misuse", "an id nobody issued was accepted"))
    if recheck:
        again = reduce(s, event)
        if again.state != new or again.commands != commands:
            problems.append(("determinism", "the same step gave another result"))
    declared = SESSION_GRAPH.table.get((s.phase, name), frozenset())
    if new.phase not in declared:
        problems.append(("table", f"{s.phase.name} --{name}--> {new.phase.name} is not declared"))
    absorbed = any(isinstance(x, c.StaleAnswerIgnored) for x in commands)
    if absorbed and (len(commands) != 1 or new != s):
        problems.append(("stale", f"a late answer changed something or said more: {commands}"))
    after = {(o.command.__name__, o.answer_id): o.command for o in outstanding(new)}
    problems += _check_outstanding(s, after, event, commands)
    # The ring and the usage (OB-5, OB-6).
    published = [x.entry for x in commands if isinstance(x, sv.Publish)]
    seqs = [entry.seq for entry in published]
    if new.ring.next_seq - s.ring.next_seq != len(published) or seqs != list(
            range(s.ring.next_seq, s.ring.next_seq + len(published))):
        problems.append(("ring", f"seqs {seqs} after {s.ring.next_seq - 1}"))
    chunks = [entry for entry in published if entry.kind is EntryKind.GUARD_CHUNK]
    opened = isinstance(event, e.StreamOpened) and new.turn is not s.turn
    if new.usage.model_calls - s.usage.model_calls != int(opened):
        problems.append(("usage", "OB-5: model calls counted wrongly"))
    if new.usage.guard_calls - s.usage.guard_calls != len(chunks):
        problems.append(("usage", "OB-2, OB-5: a guard call without its one chunk, or the reverse"))
    # The session's invariants: no text lost, and the hard bound over the path (SG-B1).
    problems += [("no text lost", p) for p in lost_texts(s, event, new, commands)]
    streams, broken = streams.step(s, event, new, commands)
    problems += [("SG-B1", p) for p in broken]
    if sum(isinstance(x, c.EndTurn) for x in commands) > 1:
        problems.append(("end", "two EndTurn in one step"))
    return StepResult(outcome="absorbed" if absorbed else "accepted", state=new,
                      streams=streams, commands=commands, problems=tuple(problems),
                      owed=tuple(after))


def _check_outstanding(s: SessionState, after: dict[tuple[str, str], type], event: Event,
                       commands: Sequence[Command]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    before = {(o.command.__name__, o.answer_id): o.command for o in outstanding(s)}
    issued = {(type(x).__name__, str(x.answer_id)) for x in commands
              if isinstance(x, AwaitingCommand)}
    cancelled: set[tuple[str, str]] = set()
    for command in commands:
        cancel = _CANCELS.get(type(command).__name__)
        if cancel is not None:
            item = (cancel[0], getattr(command, cancel[1]))
            if item not in before and item not in issued:
                problems.append(("outstanding", f"{command!r} cancels nothing outstanding"))
            cancelled.add(item)
        elif isinstance(command, c.CancelTool) and ("ExecuteTool", command.call_id) not in before:
            problems.append(("outstanding", f"{command!r} for a tool not running"))
    for item in sorted(issued - set(after)):
        problems.append(("outstanding", f"{item} handed out but not outstanding"))
    for item in sorted(set(after) - set(before) - issued):
        problems.append(("outstanding", f"{item} outstanding without a command"))
    for item, awaited in sorted(before.items()):
        if item in after or _answers_item(event, item, awaited) or item in cancelled or (
                item[0] in _ABANDONABLE):
            continue
        problems.append(("outstanding", f"{item} stopped being awaited without an answer or "
                                        "a cancel"))
    return problems


#: Reducer bugs the explorer or the fuzzer found that are still open: name -> (rule, a regular
#: expression the violation's detail matches, what breaks). Each is pinned by an
#: ``xfail(strict=True)`` test in ``tests/test_explore.py``; a violation that matches one is
#: counted apart, so a run still tells something new from something already known. Empty
#: today: BUG-5 to BUG-10 were fixed, and their sequences are regression tests now.
KNOWN_BUGS: dict[str, tuple[str, str, str]] = {}


def known_bug(rule: str, detail: str, event: Event) -> str:
    """The known reducer bug (``"BUG-n: what"``) a violation matches, "" when it is new.

    ``event`` is the step's event, which a future entry may need to tell two bugs apart."""
    del event
    for name, (bug_rule, pattern, what) in KNOWN_BUGS.items():
        if bug_rule == rule and re.search(pattern, detail):
            return f"{name}: {what}"
    return ""


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
        state = reduce(state, event).state
    return state, events


# --- exploration --------------------------------------------------------------------------------

_Node = tuple[SessionState, HardBound]


class _Findings:
    """The violations of a run: the first of each rule (and of its detail's first clause) is
    kept, shrunk to a shortest-found reproducing sequence; the rest are counted."""

    def __init__(self, config: str, limit: int) -> None:
        self.config = config
        self.limit = limit
        self.counts: Counter[tuple[str, str]] = Counter()
        self.found: list[Violation] = []

    def add(self, problems: Iterable[tuple[str, str]], moves: Callable[[], list[Move]]) -> None:
        for rule, detail in problems:
            key = _key(rule, detail)
            self.counts[key] += 1
            if self.counts[key] > 1 or len(self.found) >= self.limit:
                continue
            path = moves()
            known = known_bug(rule, detail, path[-1].event) if path else ""
            path = shrink(self.config, path, key)
            self.found.append(Violation(rule=rule, detail=detail, config=self.config,
                                        events=tuple(m.event for m in path), known=known))


def _key(rule: str, detail: str) -> tuple[str, str]:
    """What makes two violations the same: the rule and its detail without ids."""
    text = re.sub(r"\('(\w+)', '[^']*'\)", r"(\1)", detail)
    return rule, text.split(";")[0] if rule == "refused" else text.split(":")[0]


def _replay(config: str, moves: Sequence[Move], key: tuple[str, str]) -> list[Move] | None:
    """The moves that, played from a new session, break ``key``'s rule (ending with the one that
    does), skipping any the alphabet no longer offers where it comes; ``None`` when they never
    break it."""
    state = SessionState.create(CONFIGS[config])
    streams = HardBound()
    played: list[Move] = []
    for move in moves:
        if move.kind == SCRIPT:
            try:
                reduce(state, move.event)
            except ProtocolError:
                continue  # the script's earlier events were dropped: so is this one
        elif move.kind != MISUSE and move.event not in [m.event for m in alphabet(state)]:
            continue  # no longer a move a host could make here: dropping it keeps the rest real
        played.append(move)
        result = check_step(state, streams, move, recheck=False)
        problems = list(result.problems) + [("state", p) for p in check_state(result.state)]
        if any(_key(rule, detail) == key for rule, detail in problems):
            return played
        state, streams = result.state, result.streams
    return None


def shrink(config: str, moves: Sequence[Move], key: tuple[str, str]) -> list[Move]:
    """A shorter sequence that still breaks ``key``'s rule: chunks of moves are dropped while the
    rule still breaks (delta debugging). A move the alphabet no longer offers where it is
    replayed is dropped, so what is left is a sequence a host could send."""
    played = _replay(config, moves, key)
    if played is None:
        return list(moves)
    current = played
    size = max(1, len(current) // 2)
    while size >= 1:
        start = 0
        while start < len(current) - 1:
            trial = current[:start] + current[start + size:]
            shorter = _replay(config, trial, key) if trial else None
            if shorter is not None:
                current = shorter
            else:
                start += size
        size //= 2
    return current


def reachable(depth: int, config: str = "daemon", start: str = "new") -> list[SessionState]:
    """Every state reachable from ``start`` in at most ``depth`` moves the session accepts, in
    breadth-first order, without checking anything (the exhaustive table test samples them)."""
    root, _ = start_state(config, start)
    seen = {root: None}
    frontier = [root]
    for _ in range(depth):
        following = []
        for state in frontier:
            for move in alphabet(state):
                try:
                    child = reduce(state, move.event).state
                except ProtocolError:
                    continue
                if child not in seen:
                    seen[child] = None
                    following.append(child)
        frontier = following
    return list(seen)


@attrs.frozen(kw_only=True)
class _Report:
    """What a run of the explorer or the fuzzer saw, whichever walked the states."""

    session_phases: dict[str, int]
    turn_phases: dict[str, int]
    guard_phases: dict[str, int]
    seconds: float
    violations: tuple[Violation, ...]
    counts: dict[tuple[str, str], int]

    @property
    def new_violations(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if not v.known)


@attrs.frozen(kw_only=True)
class ExploreReport(_Report):
    """What :func:`explore` did."""

    config: str
    start: str
    depth: int
    #: The deepest level at which new nodes were found (``depth`` unless the space closed early).
    reached: int
    states: int
    nodes: int
    transitions: int
    per_level: tuple[int, ...]
    outcomes: dict[str, int]

    def summary(self) -> str:
        rate = self.transitions / self.seconds if self.seconds else 0.0
        return "\n".join([
            f"explore config={self.config} start={self.start}: depth {self.reached} of "
            f"{self.depth}, {self.states} states ({self.nodes} nodes with the SG-B1 monitor), "
            f"{self.transitions} transitions in {self.seconds:.1f} s ({rate:.0f}/s)",
            f"  new nodes per level: {list(self.per_level)}",
            f"  outcomes: {dict(sorted(self.outcomes.items()))}",
            f"  session phases: {dict(sorted(self.session_phases.items()))}",
            f"  turn phases: {dict(sorted(self.turn_phases.items()))}",
            f"  guard phases: {dict(sorted(self.guard_phases.items()))}",
            _violation_line(self.violations, self.counts)])


def _violation_line(violations: Sequence[Violation], counts: dict[tuple[str, str], int]) -> str:
    new = {_key(v.rule, v.detail) for v in violations if not v.known}
    known: Counter[str] = Counter()
    for key, name in {_key(v.rule, v.detail): v.known for v in violations if v.known}.items():
        known[name.split(":")[0]] += counts.get(key, 0)
    return f"  violations: {len(new)} unknown broken rule(s)" + "".join(
        f"; known {name} x{n}" for name, n in sorted(known.items()))


def explore(depth: int, config: str = "daemon", start: str = "new", max_violations: int = 20,
            clock: Callable[[], float] = lambda: 0.0) -> ExploreReport:
    """Every node reachable from ``start`` in at most ``depth`` moves, each step checked.

    ``clock`` (seconds, e.g. ``time.perf_counter``) times the run; this module reads none.
    """
    began = clock()
    root_state, prefix = start_state(config, start)
    prefix_moves = [Move(kind=SCRIPT, event=event) for event in prefix]
    root: _Node = (root_state, HardBound())
    parents: dict[_Node, tuple[_Node, Move] | None] = {root: None}
    states: set[SessionState] = {root_state}
    frontier = [root]
    per_level: list[int] = []
    outcomes: Counter[str] = Counter()
    findings = _Findings(config, max_violations)
    transitions = 0

    def path(node: _Node, last: Move | None = None) -> list[Move]:
        found: list[Move] = [] if last is None else [last]
        link = parents[node]
        while link is not None:
            node, move = link
            found.append(move)
            link = parents[node]
        return prefix_moves + found[::-1]

    findings.add([("state", p) for p in check_state(root_state)], lambda: path(root))
    for _ in range(depth):
        following: list[_Node] = []
        for node in frontier:
            state, streams = node
            for move in alphabet(state):
                transitions += 1
                result = check_step(state, streams, move)
                outcomes[result.outcome] += 1
                findings.add(result.problems, lambda n=node, m=move: path(n, m))  # type: ignore[misc]
                child: _Node = (result.state, result.streams)
                if child in parents:
                    continue
                parents[child] = (node, move)
                following.append(child)
                if result.state not in states:
                    states.add(result.state)
                    findings.add([("state", p) for p in check_state(result.state, result.owed)],
                                 lambda n=child: path(n))  # type: ignore[misc]
        if not following:
            break
        per_level.append(len(following))
        frontier = following
    counts = [Counter(x.name for x in phases) for phases in (
        (n[0].phase for n in parents), (n[0].turn.phase for n in parents),
        (n[0].guard.phase for n in parents))]
    return ExploreReport(
        config=config, start=start, depth=depth, reached=len(per_level), states=len(states),
        nodes=len(parents), transitions=transitions, per_level=tuple(per_level),
        outcomes=dict(outcomes), session_phases=dict(counts[0]), turn_phases=dict(counts[1]),
        guard_phases=dict(counts[2]), seconds=clock() - began,
        violations=tuple(findings.found), counts=dict(findings.counts))


# --- fuzzing ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class FuzzReport(_Report):
    """What :func:`fuzz` did."""

    steps: int
    seed: int
    episodes: int
    outcomes: dict[str, int]
    event_kinds: int
    turn_outcomes: dict[str, int]
    guard_chunks: int
    exhaustions: int

    def summary(self) -> str:
        rate = self.steps / self.seconds if self.seconds else 0.0
        return "\n".join([
            f"fuzz seed={self.seed}: {self.steps} steps in {self.episodes} sessions, "
            f"{self.seconds:.1f} s ({rate:.0f} steps/s), {self.event_kinds} event classes",
            f"  outcomes: {dict(sorted(self.outcomes.items()))}",
            f"  turn outcomes: {dict(sorted(self.turn_outcomes.items()))}",
            f"  guard continuations published: {self.guard_chunks}; exhaustion reports: "
            f"{self.exhaustions}",
            f"  session phases: {dict(sorted(self.session_phases.items()))}",
            f"  turn phases: {dict(sorted(self.turn_phases.items()))}",
            f"  guard phases: {dict(sorted(self.guard_phases.items()))}",
            _violation_line(self.violations, self.counts)])


#: The fuzzer reduces one step in this many twice, to check it is deterministic.
RECHECK_EVERY = 8


class _SplitMix:
    """SplitMix64: a small seeded generator, so the walks are the same on every Python."""

    _MASK = (1 << 64) - 1

    def __init__(self, seed: int) -> None:
        self.state = seed & self._MASK

    def below(self, bound: float) -> float:
        """A number in ``[0, bound)``."""
        self.state = (self.state + 0x9E3779B97F4A7C15) & self._MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self._MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self._MASK
        return ((z ^ (z >> 31)) >> 11) * bound / (1 << 53)

    def pick(self, moves: Sequence[Move]) -> Move:
        """One of ``moves``, each as likely as its weight."""
        totals = list(itertools.accumulate(m.weight for m in moves))
        return moves[min(bisect.bisect_right(totals, self.below(totals[-1])), len(moves) - 1)]


def fuzz(steps: int, seed: int = 0, episode: int = 400, max_violations: int = 20,
         configs: Iterable[str] = tuple(CONFIGS),
         clock: Callable[[], float] = lambda: 0.0) -> FuzzReport:
    """Random walks through :func:`alphabet` for ``steps`` steps in all, every step checked
    (determinism on one step in :data:`RECHECK_EVERY`).

    A walk starts a new session (the next configuration in turn) when its session is closed or
    after ``episode`` steps. The same ``seed`` gives the same walks. ``clock`` times the run.
    """
    began = clock()
    rng = _SplitMix(seed)
    names = list(configs)
    outcomes: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    phases: list[Counter[str]] = [Counter(), Counter(), Counter()]
    kinds: set[str] = set()
    findings: dict[str, _Findings] = {name: _Findings(name, max_violations) for name in names}
    chunks = exhaustions = episodes = 0
    done = 0
    while done < steps:
        config = names[episodes % len(names)]
        episodes += 1
        state = SessionState.create(CONFIGS[config])
        streams = HardBound()
        moves: list[Move] = []
        for _ in range(min(episode, steps - done)):
            options = alphabet(state)
            move = rng.pick(options)
            moves.append(move)
            kinds.add(type(move.event).__name__)
            result = check_step(state, streams, move, recheck=done % RECHECK_EVERY == 0)
            done += 1
            outcomes[result.outcome] += 1
            problems = list(result.problems)
            if result.state is not state:
                problems += [("state", p) for p in check_state(result.state, result.owed)]
            findings[config].add(problems, functools.partial(list, moves))
            for command in result.commands:
                if isinstance(command, c.EndTurn):
                    ends[command.outcome.kind.name] += 1
                elif isinstance(command, sv.Publish):
                    chunks += command.entry.kind is EntryKind.GUARD_CHUNK
                    exhaustions += command.entry.kind is EntryKind.GUARD_EXHAUSTED
            state, streams = result.state, result.streams
            phases[0][state.phase.name] += 1
            phases[1][state.turn.phase.name] += 1
            phases[2][state.guard.phase.name] += 1
            if state.phase is P.CLOSED:
                break
    counts: Counter[tuple[str, str]] = Counter()
    for found in findings.values():
        counts.update(found.counts)
    return FuzzReport(
        steps=done, seed=seed, episodes=episodes, outcomes=dict(outcomes), event_kinds=len(kinds),
        turn_outcomes=dict(ends), guard_chunks=chunks, exhaustions=exhaustions,
        session_phases=dict(phases[0]), turn_phases=dict(phases[1]),
        guard_phases=dict(phases[2]), seconds=clock() - began,
        violations=tuple(v for found in findings.values() for v in found.found),
        counts=dict(counts))
