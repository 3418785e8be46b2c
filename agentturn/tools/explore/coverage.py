"""Which declared (phase, event) edges of each part a walk took, and which it never reached.

Theory of operation
-------------------
Every part with phases declares its graph once (:class:`~agentturn.phases.PhaseGraph`): the
session, the turn, the Lead queue's admission, the naming (titles) and the guard. The session
takes the host's events itself; the other parts take what the session (or the turn) passes
them, often an event of their own the session made (the guard hears ``NaturalStop``, not
``StreamCompleted``). So a walk watches each part where it is called (:func:`watching`: the
part's ``reduce``/``reduce_into`` is wrapped for the walk's duration and each call that returns
records ``(part, phase, event class)``), and records, for every step the session accepted, a
:data:`Sighting` (the five parts' phases before and after, the event's name, which parts changed).

:func:`coverage` marks each declared edge ``(phase, trigger)``:

* an edge named after an event class is *reached* when the part was called with that event in
  that phase and accepted it (for the session: the step was accepted);
* an edge named after an internal trigger (``open_admission``, ``request_title`` ...: a move a
  part makes on its own inside a step) is reached when the part moved, in one step, from that
  phase to one of the edge's destinations other than that phase.

What is not reached is listed, so a report says exactly which edges a walk of that depth never
exercised.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import attrs

from ... import LEAD_GRAPH, TITLE_GRAPH, TURN_GRAPH, PhaseGraph
from ...guard import GUARD_GRAPH
from ...session import SESSION_GRAPH, SessionState

__all__ = ["PARTS", "Call", "Coverage", "Sighting", "coverage", "phases_of", "sighting",
           "watching"]

#: The parts, in the order of a :data:`Sighting`'s phase tuples.
PARTS: tuple[tuple[str, PhaseGraph[Any]], ...] = (
    ("session", SESSION_GRAPH), ("turn", TURN_GRAPH), ("lead", LEAD_GRAPH),
    ("titles", TITLE_GRAPH), ("guard", GUARD_GRAPH))

#: One accepted step: phases before, the event's class name, phases after, the changed parts
#: (a bit per part, in :data:`PARTS` order).
Sighting = tuple[tuple[str, ...], str, tuple[str, ...], int]


#: One call of a part: its name, its phase's name, the event's class name.
Call = tuple[str, str, str]


@contextlib.contextmanager
def watching(calls: set[Call]) -> Iterator[None]:
    """For the ``with`` block, record in ``calls`` every call the session makes of the turn, the
    guard, the Lead queue and the naming that returns (the module docstring). The wrapped names
    are put back when the block ends, whatever happens in it."""
    from ... import lead as lead_part
    from ... import titles as titles_part
    from ... import turn as turn_part
    from ...session import lane, translate

    def watch(part: str, original: Any, phase: Callable[[Any], Any]) -> Any:
        def watched(state: Any, event: Any, *rest: Any) -> Any:
            result = original(state, event, *rest)
            calls.add((part, phase(state)._name_, type(event).__name__))
            return result
        return watched

    phase_of, admission_of = operator.attrgetter("phase"), operator.attrgetter("admission")
    spots = [(turn_part, "reduce_into", "turn", phase_of),
             (translate, "guard_into", "guard", phase_of),
             # the direct lane calls the same two parts itself (agentturn.session.lane)
             (lane, "turn_into", "turn", phase_of),
             (lane, "guard_into", "guard", phase_of),
             (lead_part, "reduce", "lead", admission_of),
             (titles_part, "reduce", "titles", phase_of)]
    saved = [(module, name, getattr(module, name)) for module, name, _, _ in spots]
    try:
        for module, name, part, phase in spots:
            setattr(module, name, watch(part, getattr(module, name), phase))
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


def phases_of(s: SessionState) -> tuple[str, ...]:
    """The names of the five parts' phases in ``s``, in :data:`PARTS` order (names: an enum
    member hashes through Python code, its name in C, and a walk adds a sighting per step)."""
    turn = s.turn
    return (s.phase._name_, turn.phase._name_, turn.lead.admission._name_,
            turn.title.phase._name_, s.guard.phase._name_)


def sighting(before: SessionState, phases: tuple[str, ...], name: str,
             after: SessionState) -> Sighting:
    """What :func:`coverage` needs of one accepted step (``phases`` is ``phases_of(before)``)."""
    turn, new_turn = before.turn, after.turn
    changed = (1 | (new_turn is not turn) << 1 | (new_turn.lead is not turn.lead) << 2
               | (new_turn.title is not turn.title) << 3 | (after.guard is not before.guard) << 4)
    return phases, name, phases_of(after), changed


@attrs.frozen(kw_only=True)
class Coverage:
    """Each part's declared edges, reached or not: ``(phase name, trigger)`` pairs."""

    reached: dict[str, frozenset[tuple[str, str]]]
    missed: dict[str, frozenset[tuple[str, str]]]

    def summary(self) -> str:
        lines = []
        for part, _ in PARTS:
            reached, missed = self.reached[part], self.missed[part]
            lines.append(f"  coverage {part}: {len(reached)} of {len(reached) + len(missed)} "
                         "declared (phase, event) edges reached")
            by_phase: dict[str, list[str]] = {}
            for phase, trigger in sorted(missed):
                by_phase.setdefault(phase, []).append(trigger)
            lines.extend(f"    never reached from {phase}: {', '.join(triggers)}"
                         for phase, triggers in by_phase.items())
        return "\n".join(lines)

    def merge(self, other: Coverage) -> Coverage:
        """What two walks reached together."""
        reached = {part: self.reached[part] | other.reached[part] for part, _ in PARTS}
        return Coverage(reached=reached, missed={
            part: (self.missed[part] | other.missed[part]) - reached[part] for part, _ in PARTS})


def coverage(sightings: Iterable[Sighting], calls: Iterable[Call]) -> Coverage:
    """Mark every declared edge of every part reached or missed (the module docstring)."""
    seen = list(sightings)
    called = set(calls)
    reached: dict[str, frozenset[tuple[str, str]]] = {}
    missed: dict[str, frozenset[tuple[str, str]]] = {}
    for number, (part, graph) in enumerate(PARTS):
        bit = 1 << number
        hit = {(phase, name) for who, phase, name in called if who == part}
        internal = [(phase.name, trigger, {dest.name for dest in dests})
                    for (phase, trigger), dests in graph.table.items()
                    if trigger not in _EVENT_NAMES]
        for before, name, after, changed in seen:
            if not changed & bit:
                continue
            source, dest = before[number], after[number]
            if part == "session":
                hit.add((source, name))
            if dest != source:
                hit.update((phase, trigger) for phase, trigger, dests in internal
                           if phase == source and dest in dests)
        every = {(phase.name, trigger) for phase, trigger in graph.table}
        reached[part] = frozenset(hit & every)
        missed[part] = frozenset(every - hit)
    return Coverage(reached=reached, missed=missed)


def _event_names() -> frozenset[str]:
    from ...registry import event_types

    return frozenset(t.__name__ for t in event_types())


_EVENT_NAMES = _event_names()
