"""Bounded exhaustive exploration of the session reducer, and the shrinking of what it finds.

Theory of operation
-------------------
:func:`explore` walks breadth first from a start state (:func:`~.alphabet.start_state`) to a
bounded depth and keeps every node it has seen, so a node reached two ways is expanded once. A
node is the state plus one small monitor, the guard continuations published since the last user
input (SG-B1 is a rule about paths, not states). Every step is checked with
:func:`~.invariants.check_step` and every new state with :func:`~.invariants.check_state`.

:class:`_Findings` keeps the first violation of each rule, shrunk by :func:`shrink` (delta
debugging, each trial replayed from a new session by :func:`_replay`) to a short sequence a host
could send, and counts the rest. :func:`reachable` is the same walk without the checks, for the
tests that sample states. :class:`_Report` is what the explorer and the fuzzer both report.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import attrs

from ...errors import ProtocolError
from ...session import SessionState
from ...session.invariants import HardBound
from .alphabet import CONFIGS, MISUSE, SCRIPT, Move, _reduce, alphabet, start_state
from .invariants import Violation, check_state, check_step, known_bug

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
    said = "no rule broken" if not new else f"{len(new)} broken rule(s) no known bug explains"
    return f"  violations: {said}" + "".join(
        f"; known {name} x{n}" for name, n in sorted(known.items()))


def explore(depth: int, config: str = "daemon", start: str = "new", max_violations: int = 20,
            clock: Callable[[], float] = lambda: 0.0,
            progress: Callable[[int, int], None] | None = None) -> ExploreReport:
    """Every node reachable from ``start`` in at most ``depth`` moves, each step checked.

    ``clock`` (seconds, e.g. ``time.perf_counter``) times the run; this module reads none.
    ``progress(level, nodes)`` is called as each level is done. ``depth`` is at least 1.
    """
    if type(depth) is not int or depth < 1:
        raise ValueError(f"depth must be an int of at least 1, got {depth!r}")
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
                findings.add(result.problems, functools.partial(path, node, move))
                child: _Node = (result.state, result.streams)
                if child in parents:
                    continue
                parents[child] = (node, move)
                following.append(child)
                if result.state not in states:
                    states.add(result.state)
                    findings.add([("state", p) for p in check_state(result.state, result.owed)],
                                 functools.partial(path, child))
        if not following:
            break
        per_level.append(len(following))
        frontier = following
        if progress is not None:
            progress(len(per_level), len(parents))
    counts = [Counter(x.name for x in phases) for phases in (
        (n[0].phase for n in parents), (n[0].turn.phase for n in parents),
        (n[0].guard.phase for n in parents))]
    return ExploreReport(
        config=config, start=start, depth=depth, reached=len(per_level), states=len(states),
        nodes=len(parents), transitions=transitions, per_level=tuple(per_level),
        outcomes=dict(outcomes), session_phases=dict(counts[0]), turn_phases=dict(counts[1]),
        guard_phases=dict(counts[2]), seconds=clock() - began,
        violations=tuple(findings.found), counts=dict(findings.counts))
