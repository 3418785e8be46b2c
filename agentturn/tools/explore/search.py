"""Bounded exhaustive exploration of the session reducer, and the shrinking of what it finds.

Theory of operation
-------------------
:func:`explore` model-checks breadth first from a start state (:func:`~.alphabet.start_state`)
to a bounded depth, in one or more worker processes (:mod:`~.checker`): nodes are stored as
64-bit fingerprints, so a node reached two ways is expanded once, and the report estimates the
chance that a fingerprint collision hid one (as TLC does). A node is the state plus one small
monitor, the guard continuations published since the last user input (SG-B1 is a rule about
paths, not states). Every step is checked with :func:`~.invariants.check_step` and every new
state with :func:`~.invariants.check_state` (*never stuck*, the liveness rule, reported under
its own name); the walk also records which declared (phase, event) edges of every part it took
(:mod:`~.coverage`).

Of each broken rule the shortest path is kept (breadth first: shortest first), replayed as the
moves it names and shrunk by :func:`shrink` (delta debugging, each trial replayed from a new
session by :func:`_replay`) to a short sequence a host could send; the rest are counted.
:mod:`~.counterexample` writes it as a trace file and as a short program. :func:`reachable` is
the same walk without the checks, keeping the states, for the tests that sample them.
:class:`_Findings` keeps the fuzzer's violations; :class:`_Report` is what both report.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import attrs

from ...errors import ProtocolError
from ...session import SessionState
from ...session.invariants import HardBound
from . import checker
from .alphabet import CONFIGS, MISUSE, SCRIPT, Move, _reduce, alphabet, start_state
from .coverage import Call, Coverage, Sighting, coverage
from .invariants import Violation, check_step, known_bug, state_rules

__all__ = ["ExploreReport", "explore", "reachable", "shrink"]

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
                _reduce(state, move.event)
            except ProtocolError:
                continue  # the script's earlier events were dropped: so is this one
        elif move.kind != MISUSE and move.event not in [m.event for m in alphabet(state)]:
            continue  # no longer a move a host could make here: dropping it keeps the rest real
        played.append(move)
        result = check_step(state, streams, move, recheck=False)
        problems = list(result.problems) + state_rules(result.state)
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
                    child = _reduce(state, move.event).state
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
    #: The worker processes that walked.
    workers: int = 1
    #: The chance that a fingerprint collision hid a node (TLC's optimistic estimate).
    collision: float = 0.0
    #: Every part's declared edges, reached or not.
    coverage: Coverage | None = None

    def summary(self, show_coverage: bool = False) -> str:
        rate = self.transitions / self.seconds if self.seconds else 0.0
        lines = [
            f"explore config={self.config} start={self.start}: depth {self.reached} of "
            f"{self.depth}, {self.states} states ({self.nodes} nodes with the SG-B1 monitor), "
            f"{self.transitions} transitions in {self.seconds:.1f} s ({rate:.0f}/s), "
            f"{self.workers} worker(s)",
            f"  nodes stored as 64-bit fingerprints; the probability of a fingerprint "
            f"collision is calculated (optimistic): {self.collision:.1e}",
            f"  new nodes per level: {list(self.per_level)}",
            f"  outcomes: {dict(sorted(self.outcomes.items()))}",
            f"  session phases: {dict(sorted(self.session_phases.items()))}",
            f"  turn phases: {dict(sorted(self.turn_phases.items()))}",
            f"  guard phases: {dict(sorted(self.guard_phases.items()))}",
            _violation_line(self.violations, self.counts)]
        if show_coverage and self.coverage is not None:
            lines.append(self.coverage.summary())
        return "\n".join(lines)


def _violation_line(violations: Sequence[Violation], counts: dict[tuple[str, str], int]) -> str:
    new = {_key(v.rule, v.detail) for v in violations if not v.known}
    known: Counter[str] = Counter()
    for key, name in {_key(v.rule, v.detail): v.known for v in violations if v.known}.items():
        known[name.split(":")[0]] += counts.get(key, 0)
    said = "no rule broken" if not new else f"{len(new)} broken rule(s) no known bug explains"
    return f"  violations: {said}" + "".join(
        f"; known {name} x{n}" for name, n in sorted(known.items()))


def explore(depth: int, config: str = "daemon", start: str = "new", max_violations: int = 20,
            clock: Callable[[], float] = lambda: 0.0,
            progress: Callable[[int, int], None] | None = None,
            workers: int = 1) -> ExploreReport:
    """Every node reachable from ``start`` in at most ``depth`` moves, each step checked, in
    ``workers`` processes (:mod:`~.checker`; the result is the same for any number).

    ``clock`` (seconds, e.g. ``time.perf_counter``) times the run; this module reads none.
    ``progress(level, nodes)`` is called as each level is done. ``depth`` and ``workers`` are
    at least 1.
    """
    for name, value in (("depth", depth), ("workers", workers)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int of at least 1, got {value!r}")
    began = clock()
    root_state, prefix = start_state(config, start)
    prefix_moves = [Move(kind=SCRIPT, event=event) for event in prefix]
    per_level, totals = checker.run((root_state, HardBound()), depth, workers, _key, progress)
    findings = checker.Findings()
    outcomes: Counter[str] = Counter()
    phases: list[Counter[str]] = [Counter(), Counter(), Counter()]
    sightings: set[Sighting] = set()
    calls: set[Call] = set()
    for shard in totals:
        findings.merge(shard["findings"])
        outcomes.update(shard["outcomes"])
        for mine, theirs in zip(phases, shard["phases"], strict=True):
            mine.update(theirs)
        sightings |= shard["sightings"]
        calls |= shard["calls"]
    nodes = sum(shard["seen"] for shard in totals)
    transitions = sum(shard["transitions"] for shard in totals)
    violations = []
    ranked = sorted(findings.best.items(), key=lambda item: (len(item[1][0]), item[1][0]))
    for key, (path, rule, detail) in ranked[:max_violations]:
        moves = prefix_moves + _moves(root_state, path)
        known = known_bug(rule, detail, moves[-1].event) if moves else ""
        moves = shrink(config, moves, key)
        violations.append(Violation(rule=rule, detail=detail, config=config,
                                    events=tuple(m.event for m in moves), known=known))
    return ExploreReport(
        config=config, start=start, depth=depth, reached=len(per_level),
        states=sum(shard["states"] for shard in totals), nodes=nodes, transitions=transitions,
        per_level=tuple(per_level), outcomes=dict(outcomes), session_phases=dict(phases[0]),
        turn_phases=dict(phases[1]), guard_phases=dict(phases[2]), seconds=clock() - began,
        violations=tuple(violations), counts=dict(findings.counts), workers=workers,
        collision=checker.collision_probability(nodes, transitions + 1),
        coverage=coverage(sightings, calls))


def _moves(root: SessionState, path: Sequence[int]) -> list[Move]:
    """The moves a path names, each an index into the alphabet where it is made."""
    state, moves = root, []
    for index in path:
        move = alphabet(state)[index]
        moves.append(move)
        with contextlib.suppress(ProtocolError):  # a refused move changes nothing
            state = _reduce(state, move.event).state
    return moves
