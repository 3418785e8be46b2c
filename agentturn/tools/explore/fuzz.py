"""Long seeded random walks of the session reducer.

Theory of operation
-------------------
:func:`fuzz` walks at random with a fixed seed, one configuration after another, for as many
steps as asked: each move is picked from :func:`~.alphabet.alphabet` as likely as its weight, by
:class:`_SplitMix`, so the same seed walks the same way on every Python. Every step is checked
with :func:`~.invariants.check_step` (determinism on one in :data:`RECHECK_EVERY`) and every new
state with :func:`~.invariants.check_state`; violations are kept and shrunk as the explorer's are
(:class:`~.search._Findings`).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import attrs

from ... import commands as c
from ...session import SessionPhase, SessionState
from ...session import vocabulary as sv
from ...session.invariants import HardBound
from ...session.ring import EntryKind
from .alphabet import CONFIGS, Move, alphabet
from .checker import collector_resting
from .invariants import check_step, state_rules
from .search import _Findings, _Report, _violation_line

__all__ = ["RECHECK_EVERY", "FuzzReport", "fuzz"]

P = SessionPhase


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
#: How often :func:`fuzz` reports its progress, in steps.
PROGRESS_EVERY = 100_000
RECHECK_EVERY = 8


_GUARD_CHUNK, _GUARD_EXHAUSTED = EntryKind.GUARD_CHUNK, EntryKind.GUARD_EXHAUSTED
#: A move's weight (a Move is a named tuple: its third item), read in C.
_WEIGHT = operator.itemgetter(2)


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
        totals = list(itertools.accumulate(map(_WEIGHT, moves)))
        return moves[min(bisect.bisect_right(totals, self.below(totals[-1])), len(moves) - 1)]


def fuzz(steps: int, seed: int = 0, episode: int = 400, max_violations: int = 20,
         configs: Iterable[str] = tuple(CONFIGS),
         clock: Callable[[], float] = lambda: 0.0,
         progress: Callable[[int], None] | None = None) -> FuzzReport:
    """Random walks through :func:`alphabet` for ``steps`` steps in all, every step checked
    (determinism on one step in :data:`RECHECK_EVERY`).

    A walk starts a new session (the next configuration in turn) when its session is closed or
    after ``episode`` steps. The same ``seed`` gives the same walks. ``clock`` times the run;
    ``progress(steps_done)`` is called every :data:`PROGRESS_EVERY` steps. ``steps`` and
    ``episode`` are at least 1 (an episode of 0 steps would never end the run).
    """
    for name, value in (("steps", steps), ("episode", episode)):
        if type(value) is not int or value < 1:
            raise ValueError(f"{name} must be an int of at least 1, got {value!r}")
    with collector_resting():  # (a fuzz run makes no reference cycles, as a walk makes none)
        return _walks(steps, seed, episode, max_violations, configs, clock, progress)


def _walks(steps: int, seed: int, episode: int, max_violations: int, configs: Iterable[str],
           clock: Callable[[], float], progress: Callable[[int], None] | None) -> FuzzReport:
    """:func:`fuzz`'s walks, its arguments checked."""
    began = clock()
    rng = _SplitMix(seed)
    names = list(configs)
    outcomes: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    phases: list[Counter[str]] = [Counter(), Counter(), Counter()]
    # (session, turn, guard) phase names after each step: one count a step, split at the end
    seen: Counter[tuple[str, str, str]] = Counter()
    kinds: set[str] = set()
    findings: dict[str, _Findings] = {name: _Findings(name, max_violations) for name in names}
    chunks = exhaustions = episodes = 0
    done = 0
    closed = P.CLOSED  # (read once: a member read off its enum class costs more than a local)
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
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(done)
            outcomes[result.outcome] += 1
            problems = result.problems
            if result.state is not state:
                rules = state_rules(result.state, result.owed)
                if rules:
                    problems = (*problems, *rules)
            if problems:
                findings[config].add(problems, functools.partial(list, moves))
            for command in result.commands:
                if isinstance(command, c.EndTurn):
                    ends[command.outcome.kind.name] += 1
                elif isinstance(command, sv.Publish):
                    chunks += command.entry.kind is _GUARD_CHUNK
                    exhaustions += command.entry.kind is _GUARD_EXHAUSTED
            state, streams = result.state, result.streams
            seen[state.phase._name_, state.turn.phase._name_, state.guard.phase._name_] += 1
            if state.phase is closed:
                break
    for names_seen, times in seen.items():  # the three parts' phases, counted apart
        for counter, name in zip(phases, names_seen, strict=True):
            counter[name] += times
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
