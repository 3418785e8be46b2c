"""Every phase of every part against every event class it takes: a documented transition, a
late answer absorbed, or a ProtocolError that changes nothing; never another exception.

The states are real: :func:`agentturn.tools.explore.reachable` walks the session from a new session
and from a few starting points (each reached by real events) over the explorer's alphabet, and
the turn, Lead, title and guard states are the parts of those session states (plus a manual
rename, for the title phases only a rename reaches). No private field is ever set by hand.

For each state the events of a class are built from the state's own ids, one field varied at a
time: the id the part is waiting for first, then earlier ids, ids nobody issued and the other
values of each flag and enum. So a pair is exercised through its documented transition as well as
through its refusals.
"""

from __future__ import annotations

import enum
import types
import typing
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from typing import Any

import attrs
import pytest
from conftest import PROFILE

import agentturn as at
from agentturn import PhaseGraph
from agentturn import guard as g
from agentturn import lead as lead_part
from agentturn import session as S
from agentturn import titles as title_part
from agentturn.registry import events_of, part_of
from agentturn.tools import explore
from agentturn.trace import event_types

#: How many states of each phase are tried (spread over everything reached), and how many moves
#: from each starting point they are drawn from; the mutation profile, which runs these tests
#: once per mutant, tries fewer.
PER_PHASE, DEPTH = (3, 2) if PROFILE == "mutation" else (10, 3)
ENVELOPE_LEFT = {"type": "todo_list", "todos": [
    {"id": "1", "content": "port the parser", "status": "pending"}]}
ENVELOPE_DONE = {"type": "todo_list", "todos": []}
CALL = at.ToolCall(call_id="fresh-call", name="read_file", arguments="{}")


@cache
def session_states() -> tuple[S.SessionState, ...]:
    """Every session state within ``DEPTH`` moves of each starting point, for two
    configurations."""
    found: dict[S.SessionState, None] = {}
    for config in ("daemon", "interactive"):
        for start in explore.STARTS:
            found.update(dict.fromkeys(explore.reachable(DEPTH, config, start)))
    return tuple(found)


def spread(states: Sequence[Any], phase_of: Callable[[Any], enum.Enum]
           ) -> dict[enum.Enum, list[Any]]:
    """Up to ``PER_PHASE`` distinct states of each phase, spread evenly over ``states``."""
    by_phase: dict[enum.Enum, list[Any]] = defaultdict(list)
    for state in dict.fromkeys(states):
        by_phase[phase_of(state)].append(state)
    return {phase: found[:: max(1, len(found) // PER_PHASE)][:PER_PHASE]
            for phase, found in by_phase.items()}


# --- events built from a state's ids ----------------------------------------------------------


def _unique(*values: Any) -> list[Any]:
    return list(dict.fromkeys(v for v in values if v not in (None, "")))


def turn_pools(t: at.TurnState) -> dict[str, list[Any]]:
    current = t.calls[t.next_call].call_id if t.next_call < len(t.calls) else None
    entries = [entry.lead_id for entry in t.lead.entries]
    return {
        "turn_id": _unique(t.turn_id, "t-fresh"),
        "request_id": _unique(t.request_id, t.cancelled_request, t.title.request_id,
                              f"{t.chat_id}/title-1", "nobody/r9"),
        "key": _unique(t.persist_key, "nobody/p9"),
        "call_id": _unique(current, t.dismissed_call, *(c.call_id for c in t.calls[:1]),
                           "nobody-call"),
        "lead_id": _unique(*entries, *t.lead.recent[-1:], "L-fresh", "nobody-lead"),
        "chat_id": [t.chat_id, "elsewhere"],
    }


def guard_pools(s: g.GuardState) -> dict[str, list[Any]]:
    return {"turn_id": _unique(s.live_turn, s.superseded_turn, "t-fresh"),
            "call_id": _unique(s.open_call, "c-fresh"),
            "invalidated_turn_id": [None, *_unique(s.live_turn, "t-gone")]}


def session_pools(s: S.SessionState) -> dict[str, list[Any]]:
    pools = turn_pools(s.turn)
    turn = s.turn.turn_id or "t0"
    pools["key"] += _unique(s.drain_id, S.state.GRACE_TIMER, "never-started")
    pools["turn_id"] += _unique(*(p.prompt_id for p in s.fifo[:1]),
                                *(t.turn_id for t in s.deferred.turns[:1]))
    pools.update(
        drain_id=_unique(s.drain_id, s.late_drain, f"{turn}/drain-{s.stops}",
                         f"nobody/drain-{s.stops + 9}"),
        run_id=_unique(s.hook_run, f"{turn}/hooks-{s.stops}", f"nobody/hooks-{s.stops + 9}"),
        prompt_id=_unique(*(p.prompt_id for p in s.fifo), "q-fresh", "nobody-prompt"),
        client_id=_unique(*s.clients, "phone"),
        item_id=_unique(*(item.item_id for item in s.background.live), "bg-1"),
        notification_id=_unique(*(n.notification_id for n in s.background.queued), "n-1"),
        source_id=_unique(*(item.item_id for item in s.background.live), "cron-a"),
    )
    return pools


#: Variants beyond one-field-at-a-time, where fields only make sense together.
EXTRA: dict[str, list[dict[str, Any]]] = {
    "StreamCompleted": [dict(text="Done.", finish_reason="stop"),
                        dict(text="", finish_reason="tool_use", tool_calls=(CALL,)),
                        dict(text="Cut", finish_reason="length", tool_calls=(CALL,)),
                        dict(text="", finish_reason="tool_use", malformed_tool_format=True)],
    "NaturalStopDecided": [dict(message_id="continue-1", text="Keep going.")],
    "StopHookDecided": [dict(block=True, reason="tests fail")],
    "TitleGenerated": [dict(title="  ")],
    "ToolFinished": [dict(structured=ENVELOPE_LEFT), dict(structured=ENVELOPE_DONE)],
    "MidTurnDrained": [dict(messages=("and the docs",)), dict(has_queued_prompt=True)],
    "NaturalStop": [dict(hook_reason="hook says no")],
}


@cache
def _fields(cls: type) -> tuple[attrs.Attribute[Any], ...]:
    attrs.resolve_types(cls, globalns=vars(__import__(cls.__module__, fromlist=["_"])))
    return tuple(attrs.fields(cls))


def _choices(field: attrs.Attribute[Any], pools: dict[str, list[Any]]) -> list[Any]:
    tp = field.type
    if field.name in pools:
        return pools[field.name]
    if field.default is not attrs.NOTHING and field.name not in ("text", "reason", "title"):
        default = field.default
        if tp is bool:
            return [default, not default]
        if isinstance(default, enum.Enum):
            return _unique(default, *type(default))
        return [default]
    if tp is bool:
        return [False, True]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return list(tp)
    if tp is str:
        return ["x"]
    if tp is Any:
        return [ENVELOPE_LEFT, ENVELOPE_DONE, "{\"type\": \"todo_list\"}"]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [None]
    raise TypeError(f"no values for {field.name}: {tp!r}")


def variants(cls: type, pools: dict[str, list[Any]]) -> Iterator[Any]:
    """Events of ``cls``: every field at its first choice, then each field varied alone, then
    the combinations of :data:`EXTRA`. Combinations a field rule refuses are skipped."""
    choices = {field.name: _choices(field, pools) for field in _fields(cls) if field.init}
    base = {name: values[0] for name, values in choices.items()}
    trials = [base] + [{**base, name: value} for name, values in choices.items()
                       for value in values[1:]]
    trials += [{**base, **extra} for extra in EXTRA.get(cls.__name__, [])]
    for values in trials:
        try:
            yield cls(**values)
        except at.FieldError:
            continue


# --- the check ----------------------------------------------------------------------------------


@attrs.define
class Table:
    """What one part's walk found: outcomes by (phase, event class), and what broke."""

    outcomes: dict[tuple[str, str], Counter[str]] = attrs.field(
        factory=lambda: defaultdict(Counter))
    broken: list[str] = attrs.field(factory=list)
    known: Counter[str] = attrs.field(factory=Counter)
    steps: int = 0


def check_pair(table: Table, graph: PhaseGraph[Any], reduce: Callable[[Any, Any], at.Step[Any]],
               phase_of: Callable[[Any], enum.Enum], state: Any, event: Any,
               absorbs: bool = True) -> None:
    """One (state, event) pair: a documented transition, an absorbed late answer (where the part
    has late answers), or a ProtocolError that changes nothing."""
    phase = phase_of(state)
    name = type(event).__name__
    declared = graph.table.get((phase, name))
    copy = attrs.evolve(state)
    where = f"{graph.part} {phase.name} <- {event!r}"
    table.steps += 1
    try:
        new, commands = reduce(state, event)
    except at.ProtocolError as error:
        outcome = "protocol_error"
        if declared is None and not isinstance(error, at.UnexpectedEvent):
            table.broken.append(f"{where}: an undeclared pair raised {type(error).__name__}")
    except Exception as error:  # the rule under test: nothing else escapes
        table.broken.append(f"{where}: {type(error).__name__}: {error}")
        return
    else:
        if any(isinstance(c, at.StaleAnswerIgnored) for c in commands):
            outcome = "absorbed"
            if not absorbs or len(commands) != 1 or new != state:
                table.broken.append(f"{where}: a late answer changed or said more: {commands}")
        else:
            outcome = "transition"
            if declared is None or phase_of(new) not in declared:
                detail = (f"{phase.name} --{name}--> {phase_of(new).name} is not declared")
                known = explore.known_bug("table", detail, event) if graph.part == "session" \
                    else ""
                if known:
                    table.known[known.split(":")[0]] += 1
                else:
                    table.broken.append(f"{where}: {detail}")
    if state != copy:
        table.broken.append(f"{where}: the step changed the state it was given")
    table.outcomes[(phase.name, _label(type(event)))][outcome] += 1


def _label(cls: type) -> str:
    """The class's name, with its part where two parts use one name (``ClientAttached``)."""
    return f"guard.{cls.__name__}" if part_of(cls) == "guard" else cls.__name__


def assert_complete(table: Table, graph: PhaseGraph[Any], phases: Sequence[enum.Enum],
                    classes: Sequence[type], every_edge: bool = True) -> None:
    tried = set(table.outcomes)
    wanted = {(phase.name, _label(cls)) for phase in phases for cls in classes}
    assert wanted <= tried, f"pairs never tried: {sorted(wanted - tried)[:20]}"
    assert not table.broken, "\n".join(table.broken[:30])
    if not every_edge or PROFILE == "mutation":  # too few states to accept every pair
        return
    # Every declared pair of an event class was accepted from some state.
    labels = {c.__name__: _label(c) for c in classes}
    unexercised = {(p.name, n) for (p, n) in graph.table if n in labels
                   and not (table.outcomes[(p.name, labels[n])]["transition"]
                            or table.outcomes[(p.name, labels[n])]["absorbed"])}
    assert not unexercised, sorted(unexercised)


def _class_names(union: Any) -> list[type]:
    return list(typing.get_args(union))


# --- the parts ----------------------------------------------------------------------------------


TURN_CLASSES = _class_names(at.TurnEvent)
LEAD_CLASSES = [at.LeadSubmitted, at.LeadSaved, at.LeadSaveFailed]
TITLE_CLASSES = [at.TitleGenerated, at.TitleFailed, at.ManualRename, at.AutoTitlePreferenceChanged]
GUARD_CLASSES = _class_names(g.GuardEvent)


def _turn_table() -> Table:
    table = Table()
    # Spread over the phase and whether a tool is in flight, so an ENDING turn still waiting
    # for its tool's result is always among the states tried.
    for _phase, states in spread([s.turn for s in session_states()],
                                 lambda t: (t.phase, t.tool_in_flight)).items():  # type: ignore[arg-type, return-value]
        for state in states:
            pools = turn_pools(state)
            for cls in TURN_CLASSES:
                for event in variants(cls, pools):
                    check_pair(table, at.TURN_GRAPH, at.reduce, lambda t: t.phase, state, event)
    return table


@pytest.mark.req("TL-3", "TL-8", "TL-11", "LD-4", "TT-5")
def test_every_turn_phase_takes_every_turn_event_as_documented() -> None:
    """The turn's 12 phases x the 25 classes of ``TurnEvent``: a documented transition, a late
    answer absorbed with one StaleAnswerIgnored and no change, or a ProtocolError."""
    assert len(TURN_CLASSES) == 25
    table = _turn_table()
    assert_complete(table, at.TURN_GRAPH, list(at.TurnPhase), TURN_CLASSES)


def _lead_states() -> list[lead_part.LeadQueue]:
    return [s.turn.lead for s in session_states()]


@pytest.mark.req("LD-1", "LD-2", "LD-4", "LD-5", "LD-7", "LD-14")
def test_every_lead_admission_takes_every_lead_event_as_documented() -> None:
    """Lead's three admission phases x its three events: refusals are commands, late
    acknowledgements are absorbed, an id never admitted is a ProtocolError."""
    table = Table()
    for _phase, states in spread(_lead_states(), lambda q: q.admission).items():
        for state in states:
            pools = {"lead_id": _unique(*(x.lead_id for x in state.entries), *state.recent[-1:],
                                        "L-fresh", "nobody-lead"),
                     "chat_id": [state.chat_id, "elsewhere"], "text": ["use tabs", " "]}
            for cls in LEAD_CLASSES:
                for event in variants(cls, pools):
                    check_pair(table, lead_part.LEAD_GRAPH, lead_part.reduce,
                               lambda q: q.admission, state, event)
    assert_complete(table, lead_part.LEAD_GRAPH, list(lead_part.Admission), LEAD_CLASSES)


def _title_states() -> list[title_part.TitleState]:
    """The title states of the sessions, and each after a manual rename (RENAMED and
    RENAMED_NAMING are reached only that way)."""
    found = [s.turn.title for s in session_states()]
    renamed = [title_part.reduce(t, at.ManualRename(title="Mine")).state for t in found]
    return found + renamed


@pytest.mark.req("TT-3", "TT-4", "TT-5", "TT-6")
def test_every_title_phase_takes_every_title_event_as_documented() -> None:
    """The five title phases x the four title events: an answer to an earlier request is
    absorbed, one to a request never made is a ProtocolError."""
    table = Table()
    for _phase, states in spread(_title_states(), lambda t: t.phase).items():
        for state in states:
            pools = {"request_id": _unique(state.request_id, f"{state.chat_id}/title-1",
                                           f"{state.chat_id}/title-{state.requests + 1}",
                                           "nobody/title-1")}
            for cls in TITLE_CLASSES:
                for event in variants(cls, pools):
                    check_pair(table, title_part.TITLE_GRAPH, title_part.reduce,
                               lambda t: t.phase, state, event)
    assert_complete(table, title_part.TITLE_GRAPH, list(title_part.TitlePhase), TITLE_CLASSES)


@pytest.mark.req("SG-A3", "SG-B3", "SG-C3", "SG-C6")
def test_every_guard_phase_takes_every_guard_event_as_documented() -> None:
    """The guard's eight phases x the 25 classes of ``GuardEvent``: a documented transition or
    an UnexpectedEvent; the guard has no late answers to absorb."""
    assert len(GUARD_CLASSES) == 25
    table = Table()
    guards = [s.guard for s in session_states()]
    for _phase, states in spread(guards, lambda s: s.phase).items():
        for state in states:
            pools = guard_pools(state)
            for cls in GUARD_CLASSES:
                for event in variants(cls, pools):
                    check_pair(table, g.GUARD_GRAPH, g.reduce, lambda s: s.phase, state, event,
                               absorbs=False)
    assert_complete(table, g.GUARD_GRAPH, list(g.GuardPhase), GUARD_CLASSES)


@pytest.mark.req("BR-3", "BR-4", "SO-6", "BG-6")
def test_every_session_phase_takes_every_event_class_as_documented() -> None:
    """The session's six phases x every event class of every part (64): the 44 the session
    takes give a documented transition, an absorbed late answer or a ProtocolError; the others
    (the guard's own facts, ``NaturalStopDecided``, which the session answers itself) an
    UnexpectedEvent. Pairs the table misses because of a known bug are counted apart."""
    classes = list(event_types())
    session_types = events_of("turn", "guard", "session")
    session_handles = {name for (_, name) in S.SESSION_GRAPH.table if name in session_types}
    assert len(classes) == 64 and len(session_handles) == 44
    table = Table()
    for _phase, states in spread(session_states(), lambda s: s.phase).items():
        for state in states:
            pools = session_pools(state)
            for cls in classes:
                for event in variants(cls, pools):
                    check_pair(table, S.SESSION_GRAPH, S.reduce, lambda s: s.phase, state,
                               event)
    taken = {name for (_, name), seen in table.outcomes.items()
             if seen["transition"] or seen["absorbed"]}
    handled = {_label(session_types[name]) for name in session_handles}
    assert taken <= handled, sorted(taken - handled)
    # The session's table is coarse on purpose: it lets the turn family's events through in
    # DRAINING and HOOKS (where the turn's own table refuses most of them), so not every
    # declared pair has an accepting state.
    assert_complete(table, S.SESSION_GRAPH, list(S.SessionPhase), classes, every_edge=False)


