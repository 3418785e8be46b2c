"""The rules every step of a walk must keep, and the reducer bugs already known to break them.

Theory of operation
-------------------
:func:`check_step` reduces one move of the alphabet in a state and checks the step;
:func:`check_state` checks a state on its own. The explorer and the fuzzer call both on every
step; a broken rule becomes a :class:`Violation` that carries the event sequence reproducing it
from a new session.

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

import re
from collections.abc import Sequence
from typing import NamedTuple

import attrs

from ... import commands as c
from ... import events as e
from ... import guard as g
from ... import lead as lead_part
from ..._base import AwaitingCommand, Command, Event
from ..._memo import remember_recent
from ...errors import ProtocolError, UnexpectedEvent
from ...session import SESSION_GRAPH, SessionConfig, SessionPhase, SessionState
from ...session import fifo as fifo_part
from ...session import vocabulary as sv
from ...session.consistency import inconsistencies
from ...session.invariants import HardBound, lost_texts, stuck
from ...session.ring import EntryKind, RingEntry
from ...turn.state import TurnPhase
from .alphabet import _MUST_ACCEPT, MISUSE, Move, _owed, _reduce, awaited

__all__ = [
    "KNOWN_BUGS",
    "StepResult",
    "Violation",
    "check_state",
    "check_step",
    "known_bug",
    "state_rules",
]

P = SessionPhase
T = TurnPhase


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


# --- the rules ----------------------------------------------------------------------------------

# Enum members the state rules read, bound once: on Python 3.11 reading a member off its class
# costs ten times reading a global, and a walk checks every state it reaches.
_S_IDLE, _S_CLOSED, _T_IDLE, _T_STOP = P.IDLE, P.CLOSED, T.IDLE, T.AWAITING_STOP_DECISION
_IDLE_OR_CLOSED, _TURN_PHASES = (P.IDLE, P.CLOSED), (P.TURN, P.DRAINING, P.HOOKS)
_STOP_PHASES, _IDLE_OR_ENDING = (P.DRAINING, P.HOOKS), (T.IDLE, T.ENDING)
_SAVING, _OPEN = lead_part.LeadStatus.SAVING, lead_part.Admission.OPEN
_CLOSED = lead_part.Admission.CLOSED


def check_state(s: SessionState, owed: Sequence[tuple[str, str]] | None = None) -> list[str]:
    """What is wrong with ``s`` on its own (an empty list when nothing is); ``owed`` is
    ``outstanding(s)`` as ``(command name, answer id)`` pairs, when the caller has it."""
    problems: list[str] = []
    config, turn, guard, phase = s.config, s.turn, s.guard, s.phase
    turn_phase = turn.phase

    idle_turn = turn_phase is _T_IDLE
    # (A message that names a phase is formatted only when the rule breaks: a state is checked
    # on every step of a walk, and formatting costs more than the check. The same goes for the
    # sets of ids built below: only when two ids could repeat, so a rule could break.)
    if phase in _IDLE_OR_CLOSED and not idle_turn:
        problems.append(f"session {phase.name} but the turn is {turn_phase.name}")
    if phase in _TURN_PHASES and idle_turn:
        problems.append(f"session {phase.name} but no turn runs")
    if (turn_phase is _T_STOP) != (phase in _STOP_PHASES):
        problems.append(f"turn {turn_phase.name} in session phase {phase.name}")
    fifo = s.fifo
    if phase is _S_IDLE and fifo and fifo_part.has_queued_prompt(fifo):
        problems.append("SO-2: a complete prompt waits idle")
    if phase is _S_CLOSED and (fifo or s.deferred.turns or s.grace):
        problems.append("CLOSED still holds work")
    if len(fifo) > fifo_part.MAX_QUEUED:
        problems.append("the FIFO is over its bound")
    if len(s.deferred.turns) > config.max_deferred:
        problems.append("BG-6: the deferred queue is over its bound")
    # what a state must agree on by itself (indexes, ids, bounded memories, held turns and their
    # prompts): the library's one check, which a restored state passes too
    found = inconsistencies(s)
    if found:
        problems.extend(found)
    ring = s.ring
    if len(ring.live) > config.ring_capacity or len(ring.pinned) > config.ring_pinned:
        problems.append("OB-6: the ring is over its bounds")
    queue = turn.lead
    entries = queue.entries
    if len(entries) > 1 and sum(x.status is _SAVING for x in entries) > 1:
        problems.append("LD-4: two Lead saves in flight")
    admission = queue.admission
    if admission is _OPEN and turn_phase in _IDLE_OR_ENDING:
        problems.append(f"Lead offered in {turn_phase.name}")
    if idle_turn and admission is not _CLOSED:
        problems.append("Lead admission open with no turn")
    found = _guard_rules(guard, config)
    if found:
        problems.extend(found)
    usage = s.usage
    if usage.guard_calls > usage.model_calls:
        problems.append("OB-5: more guard calls than model calls")
    if owed is None:
        owed = _owed(s)
    many = len(owed) > 1  # (one item or none: no id twice, no kind twice, at most one timer)
    if many and len(owed) != len(set(owed)):
        problems.append(f"an awaiting command outstanding twice: {owed}")
    found_stuck = stuck(s)  # never stuck (the session's invariant)
    if found_stuck:
        problems.extend(found_stuck)
    if many:
        kinds = [kind for kind, _ in owed if kind != "StartTimer"]
        if len(kinds) != len(set(kinds)) or len(owed) - len(kinds) > 2:
            problems.append(f"too many awaiting commands of one kind: {owed}")
    return problems


# Most steps keep the guard as it was: its rules are remembered for it (agentturn._memo).
@remember_recent(1)
def _guard_rules(guard: g.GuardState, config: SessionConfig) -> tuple[str, ...]:
    problems: list[str] = []
    if guard.attempts > g.MAX_ATTEMPTS or guard.pending_attempt > g.MAX_ATTEMPTS:
        problems.append("SG-B1: more guard attempts than allowed")
    if (guard.phase is g.GuardPhase.OFF) != (not config.guard.enabled):
        problems.append("SG-C2: the guard's presence differs from its configuration")
    if guard.phase is g.GuardPhase.CONTINUING and guard.pending_attempt < 1:
        problems.append("a pending continuation without an attempt")
    return tuple(problems)


def state_rules(s: SessionState, owed: Sequence[tuple[str, str]] | None = None
                ) -> list[tuple[str, str]]:
    """:func:`check_state` as ``(rule, detail)`` pairs: *never stuck*, the liveness rule, under
    its own name; every other rule of a state as ``"state"``."""
    return [("never stuck" if p.startswith("never stuck") else "state", p)
            for p in check_state(s, owed)]


#: The session's table by names: ``(phase name, event name) -> destination names`` (an enum
#: member hashes through Python code, its name in C; every step of a walk looks here).
_DECLARED = {(phase.name, event): frozenset(dest.name for dest in dests)
             for (phase, event), dests in SESSION_GRAPH.table.items()}

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


class StepResult(NamedTuple):
    """What :func:`check_step` found: the outcome, the node after the step, what broke. (A
    named tuple: one is made per step of a walk, and it builds in a fraction of the time.)"""

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
        step = _reduce(s, event)
    except ProtocolError as error:
        if move.kind in _MUST_ACCEPT:
            problems.append(("refused", f"a {move.kind} event was refused: {error}"))
        if (s.phase._name_, name) not in _DECLARED and not isinstance(error, UnexpectedEvent):
            problems.append(("table", f"an undeclared pair raised {type(error).__name__}"))
        return StepResult(outcome="refused", state=s, streams=streams, problems=tuple(problems))
    except Exception as error:  # the one rule: nothing but ProtocolError escapes
        return StepResult(outcome="refused", state=s, streams=streams, problems=(
            ("crash", f"{type(error).__name__}: {error}"),))
    new, commands = step.state, step.commands
    if move.kind == MISUSE:
        problems.append(("misuse", "an id nobody issued was accepted"))
    if recheck:
        again = _reduce(s, event)
        if again.state != new or again.commands != commands:
            problems.append(("determinism", "the same step gave another result"))
    if new.phase._name_ not in _DECLARED.get((s.phase._name_, name), ()):
        problems.append(("table", f"{s.phase.name} --{name}--> {new.phase.name} is not declared"))
    # One pass over the commands gathers what the rules below ask of them.
    published: list[RingEntry] = []
    absorbed = touches = False  # touches: an awaiting command, a cancel or a CancelTool
    ends = 0
    for x in commands:
        role, touch = _ROLES.get(x.__class__) or _role(x.__class__)
        if role is _PUBLISH:
            published.append(x.entry)  # type: ignore[attr-defined]
        elif role is _STALE:
            absorbed = True
        elif role is _END:
            ends += 1
        if touch:
            touches = True
    if absorbed and (len(commands) != 1 or new != s):
        problems.append(("stale", f"a late answer changed something or said more: {commands}"))
    after = awaited(new, after=True)
    if touches or (after is not (before := awaited(s)) and after.keys() != before.keys()):
        problems += _check_outstanding(s, after, event, commands)
    # (else nothing was handed out or cancelled and the same items are outstanding: each rule
    # of _check_outstanding holds)
    # The ring and the usage (OB-5, OB-6).
    if published or new.ring.next_seq != s.ring.next_seq:
        seqs = [entry.seq for entry in published]
        if new.ring.next_seq - s.ring.next_seq != len(published) or seqs != list(
                range(s.ring.next_seq, s.ring.next_seq + len(published))):
            problems.append(("ring", f"seqs {seqs} after {s.ring.next_seq - 1}"))
    chunks = sum(entry.kind is EntryKind.GUARD_CHUNK for entry in published)
    opened = isinstance(event, e.StreamOpened) and new.turn is not s.turn
    usage, used = new.usage, s.usage
    if usage is not used or opened or chunks:
        if usage.model_calls - used.model_calls != int(opened):
            problems.append(("usage", "OB-5: model calls counted wrongly"))
        if usage.guard_calls - used.guard_calls != chunks:
            problems.append(("usage", "OB-2, OB-5: a guard call without its one chunk, or the "
                                      "reverse"))
    # The session's invariants: no text lost, and the hard bound over the path (SG-B1).
    lost = lost_texts(s, event, new, commands)
    if lost:
        problems += [("no text lost", p) for p in lost]
    streams, broken = streams.step(s, event, new, commands)
    if broken:
        problems += [("SG-B1", p) for p in broken]
    if ends > 1:
        problems.append(("end", "two EndTurn in one step"))
    return StepResult("absorbed" if absorbed else "accepted", new, streams, commands,
                      tuple(problems), tuple(after))


#: What :func:`check_step` asks of a command, by its class (found once per class by
#: :func:`_role`): its role, and whether it touches what is outstanding (an awaiting command, a
#: cancel or a ``CancelTool``).
_PUBLISH, _STALE, _END, _OTHER = "publish", "stale", "end", "other"
_ROLES: dict[type, tuple[str, bool]] = {}


def _role(cls: type) -> tuple[str, bool]:
    role = (_PUBLISH if issubclass(cls, sv.Publish) else _STALE
            if issubclass(cls, c.StaleAnswerIgnored) else _END if issubclass(cls, c.EndTurn)
            else _OTHER)
    found = _ROLES[cls] = (role, issubclass(cls, AwaitingCommand | c.CancelTool)
                           or cls.__name__ in _CANCELS)
    return found


def _check_outstanding(s: SessionState, after: dict[tuple[str, str], type], event: Event,
                       commands: Sequence[Command]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    before = awaited(s)
    issued = {(type(x).__name__, str(x.answer_id)) for x in commands
              if isinstance(x, AwaitingCommand)}
    cancelled: set[tuple[str, str]] = set()
    for command in commands:
        if not (_ROLES.get(command.__class__) or _role(command.__class__))[1]:
            continue  # neither a cancel nor a CancelTool
        cancel = _CANCELS.get(type(command).__name__)
        if cancel is not None:
            item = (cancel[0], getattr(command, cancel[1]))
            if item not in before and item not in issued:
                problems.append(("outstanding", f"{command!r} cancels nothing outstanding"))
            cancelled.add(item)
        elif isinstance(command, c.CancelTool) and ("ExecuteTool", command.call_id) not in before:
            problems.append(("outstanding", f"{command!r} for a tool not running"))
    # (the dicts answer membership themselves: no set of their keys is built, and nothing is
    # sorted unless something is wrong)
    lost = [item for item in issued if item not in after]
    if lost:
        problems += [("outstanding", f"{item} handed out but not outstanding")
                     for item in sorted(lost)]
    unasked = [item for item in after if item not in before and item not in issued]
    if unasked:
        problems += [("outstanding", f"{item} outstanding without a command")
                     for item in sorted(unasked)]
    for item, awaiting in before.items():
        if item in after or item in cancelled or item[0] in _ABANDONABLE or _answers_item(
                event, item, awaiting):
            continue
        problems.append(("outstanding", f"{item} stopped being awaited without an answer or "
                                        "a cancel"))
    return sorted(problems) if len(problems) > 1 else problems


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
