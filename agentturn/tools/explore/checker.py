"""Breadth-first model checking over fingerprints, in worker processes sharded by fingerprint.

Theory of operation
-------------------
A node is a session state and its SG-B1 monitor (:class:`~agentturn.session.invariants.HardBound`).
The walk never keeps a node it has expanded: it keeps its **fingerprint**, a 64-bit structural
hash (each value's hash combines its class and its fields' hashes; :class:`agentturn._base.Value`
computes it once per value and keeps it, so a new state costs only the hashes of the parts a step
rebuilt). Two equal nodes have one fingerprint; two different ones share one with the small
probability the report estimates as TLC does (:func:`collision_probability`). Fingerprints are
seeded per process (``PYTHONHASHSEED``), so they mean nothing outside a run; the workers are
forked from the run's process and share its seed.

The walk goes level by level. Each of N :class:`Shard` s owns the fingerprints ``f`` with
:func:`owner` ``(f) == its index`` (by the *state's* fingerprint, so one shard also counts the
distinct states exactly), and holds a part of the frontier. A level is four rounds:

1. **expand**: every shard reduces each move of the alphabet in each of its frontier nodes and
   checks the step (:func:`~.invariants.check_step`); it offers each child's fingerprints and
   *path* (the indices of the moves taken in each state's alphabet) to the child's owner;
2. **decide**: each owner keeps the offers of fingerprints it has not seen, one per fingerprint:
   the lexicographically smallest path, so the walk is the same whatever N is;
3. **release**: each producer keeps its winning nodes, except the few the coordinator moves
   from the shards with more than an equal share of the next frontier to those with less
   (:func:`_balance`): a node crosses processes only to even out the work, pickled;
4. **adopt**: each shard checks the new states it holds (:func:`~.invariants.check_state`,
   *never stuck* included) and makes its nodes its next frontier, sorted by path.

Who expands a node changes nothing in the result: the checks are the node's, and the choice
between two paths to one node is the owner's.

With one worker the shards are called in-process; with more, each runs in a forked process that
answers over a pipe (fork, so that a test's patched reducer and the hash seed reach it). A
broken rule is kept with the shortest, then lexicographically first, path that breaks it (BFS:
shortest first) and counted; :mod:`~.search` replays and shrinks it.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

from ...session import SessionState
from ...session.invariants import HardBound
from .alphabet import alphabet
from .coverage import Call, Sighting, phases_of, sighting, watching
from .invariants import check_step, state_rules

__all__ = ["MASK", "Path", "Shard", "collector_resting", "collision_probability",
           "default_workers", "owner", "run"]

MASK = (1 << 64) - 1
#: The moves taken from the start, each an index into the alphabet of the state it was made in.
Path = tuple[int, ...]
Node = tuple[SessionState, HardBound]
#: A node on its way to a frontier: its state is new, its path, the node, what it awaits.
Adopted = tuple[bool, "Path", Node, tuple[tuple[str, str], ...]]
#: One step in :data:`RECHECK_EVERY` is reduced twice, to check it is deterministic; which ones
#: is decided by the path, so the same steps are re-run whatever the number of workers.
RECHECK_EVERY = 8


@contextlib.contextmanager
def collector_resting() -> Iterator[None]:
    """The cycle collector off for the block, and back on after it unless the host had turned
    it off.

    A walk (this module's, or the fuzzer's) makes millions of frozen values, none in a cycle:
    reference counting frees every one, and the collector's passes only walk live values and
    find nothing (``tests/tools/test_explore_caches.py`` checks that a walk and a fuzz run leave
    no cyclic garbage). Off, it saves about a seventh of an exhaustive walk's time and a few
    per cent of a fuzz run's; set before the workers fork, it is off in them too."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def owner(state_fingerprint: int, workers: int) -> int:
    """The shard that owns a state's nodes (the high half: the low bits of a hash mix less)."""
    return (state_fingerprint >> 32) % workers


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def collision_probability(distinct: int, generated: int) -> float:
    """TLC's "calculated (optimistic)" estimate: ``n * (m - n) / 2**64`` for ``n`` distinct
    fingerprints stored and ``m`` generated, i.e. the chance that one of the ``m - n`` repeat
    lookups met a *different* stored node of the same fingerprint (so a state went unexplored)."""
    return distinct * max(0, generated - distinct) / 2.0**64


class Findings:
    """A shard's broken rules: how often each was seen, and its shortest path."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.best: dict[tuple[str, str], tuple[Path, str, str]] = {}

    def add(self, key: tuple[str, str], path: Path, rule: str, detail: str) -> None:
        self.counts[key] += 1
        held = self.best.get(key)
        if held is None or (len(path), path) < (len(held[0]), held[0]):
            self.best[key] = (path, rule, detail)

    def merge(self, other: Findings) -> None:
        self.counts.update(other.counts)
        for key, (path, rule, detail) in other.best.items():
            held = self.best.get(key)
            if held is None or (len(path), path) < (len(held[0]), held[0]):
                self.best[key] = (path, rule, detail)


class Shard:
    """One worker's part of the walk (the module docstring): the rounds are its methods."""

    def __init__(self, index: int, workers: int, key: Callable[[str, str], tuple[str, str]]
                 ) -> None:
        self.index, self.workers, self.key = index, workers, key
        self.seen: set[int] = set()
        self.states: set[int] = set()
        self.kept: list[Adopted] = []  # the winners this shard made and keeps (round 3 to 4)
        self.frontier: list[tuple[Path, Node]] = []
        self.offered: dict[int, tuple[Path, Node, tuple[tuple[str, str], ...]]] = {}
        self.findings = Findings()
        self.outcomes: Counter[str] = Counter()
        self.phases: list[Counter[str]] = [Counter(), Counter(), Counter()]
        self.sightings: set[Sighting] = set()
        self.calls: set[Call] = set()
        self.transitions = 0

    def seed(self, node: Node) -> int:
        """Take the root: seen, counted and checked like an adopted node."""
        state_fp = hash(node[0]) & MASK
        self.seen.add(hash((state_fp, node[1])) & MASK)
        self.states.add(state_fp)
        self._adopt_one((), node, None, True)
        return 1

    def expand(self) -> dict[int, list[tuple[int, int, Path]]]:
        """Round 1: every move from every frontier node, checked; the offers, by owner."""
        offered = self.offered
        with watching(self.calls):
            for path, (state, streams) in self.frontier:
                before = phases_of(state)
                salt = sum(path) + len(path)
                for index, move in enumerate(alphabet(state)):
                    self.transitions += 1
                    step_path = (*path, index)
                    result = check_step(state, streams, move,
                                         recheck=(salt + index) % RECHECK_EVERY == 0)
                    self.outcomes[result.outcome] += 1
                    for rule, detail in result.problems:
                        self.findings.add(self.key(rule, detail), step_path, rule, detail)
                    if result.outcome == "refused":
                        continue
                    self.sightings.add(sighting(state, before, type(move.event).__name__,
                                                result.state))
                    if result.state is state and result.streams == streams:
                        continue  # a late answer absorbed: the node itself
                    state_fp = hash(result.state) & MASK
                    fp = hash((state_fp, result.streams)) & MASK
                    if fp in offered or (fp in self.seen):
                        continue  # the frontier is in path order: the first offer is the least
                    offered[fp] = (step_path, (result.state, result.streams), result.owed)
        self.frontier = []
        by_owner: dict[int, list[tuple[int, int, Path]]] = {}
        for fp, (path, (state, _), _) in offered.items():
            state_fp = hash(state) & MASK
            by_owner.setdefault(owner(state_fp, self.workers), []).append((fp, state_fp, path))
        return by_owner

    def decide(self, offers: Sequence[tuple[int, int, Path, int]]
               ) -> dict[int, list[tuple[int, bool]]]:
        """Round 2: the new fingerprints this shard owns, each won by its least path; the
        winners by producer, each with whether its state is new (to be checked)."""
        best: dict[int, tuple[Path, int, int]] = {}
        for fp, state_fp, path, producer in offers:
            if fp in self.seen:
                continue
            held = best.get(fp)
            if held is None or path < held[0]:
                best[fp] = (path, producer, state_fp)
        winners: dict[int, list[tuple[int, bool]]] = {}
        for fp, (_, producer, state_fp) in best.items():
            self.seen.add(fp)
            fresh = state_fp not in self.states
            if fresh:
                self.states.add(state_fp)
            winners.setdefault(producer, []).append((fp, fresh))
        return winners

    def release(self, wins: Sequence[tuple[int, bool]], sends: Sequence[tuple[int, int]]
                ) -> dict[int, list[Adopted]]:
        """Round 3: the winning nodes this shard made stay here, but for ``sends``, ``(worker,
        count)`` pairs: that many go to that worker, to even out the next level's work. The
        losing offers are dropped."""
        kept: list[Adopted] = [(fresh, *self.offered[fp]) for fp, fresh in wins]
        self.offered = {}
        kept.sort(key=lambda item: item[1])
        out: dict[int, list[Adopted]] = {}
        for target, count in sends:
            out.setdefault(target, []).extend(kept[len(kept) - count:])
            del kept[len(kept) - count:]
        self.kept = kept
        return out

    def adopt(self, received: Sequence[Adopted], last: bool = False) -> int:
        """Round 4: the nodes kept and received become this shard's frontier, in path order,
        their new states checked (``last``: the deepest level, whose nodes are checked and
        counted, then dropped)."""
        nodes = self.kept + list(received)
        self.kept = []
        nodes.sort(key=lambda item: item[1])
        for fresh, path, node, owed in nodes:
            self._adopt_one(path, node, owed, fresh)
        if last:
            self.frontier = []
        return len(nodes)

    def _adopt_one(self, path: Path, node: Node, owed: tuple[tuple[str, str], ...] | None,
                   new_state: bool) -> None:
        state = node[0]
        self.frontier.append((path, node))
        self.phases[0][state.phase.name] += 1
        self.phases[1][state.turn.phase.name] += 1
        self.phases[2][state.guard.phase.name] += 1
        if new_state:
            for rule, problem in state_rules(state, owed):
                self.findings.add(self.key(rule, problem), path, rule, problem)

    def totals(self) -> dict[str, Any]:
        """Everything the report needs from this shard."""
        return {"seen": len(self.seen), "states": len(self.states),
                "transitions": self.transitions, "outcomes": self.outcomes,
                "phases": self.phases, "findings": self.findings, "sightings": self.sightings,
                "calls": self.calls}


class _Local:
    """A shard called in this process."""

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.answer: Any = None

    def send(self, name: str, *args: Any) -> None:
        self.answer = getattr(self.shard, name)(*args)

    def receive(self) -> Any:
        return self.answer

    def close(self) -> None:
        pass


class _Remote:
    """A shard in a forked process, answering over a pipe."""

    def __init__(self, context: Any, shard: Shard) -> None:
        self.pipe, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, shard), daemon=True)
        self.process.start()
        theirs.close()

    def send(self, name: str, *args: Any) -> None:
        self.pipe.send((name, args))

    def receive(self) -> Any:
        kind, value = self.pipe.recv()
        if kind == "error":
            raise RuntimeError(f"an explorer worker failed: {value}")
        return value

    def close(self) -> None:
        with contextlib.suppress(OSError):  # the worker may be gone already
            self.pipe.send(None)
        self.process.join(timeout=10)
        if self.process.is_alive():  # pragma: no cover - a worker that does not stop
            self.process.terminate()
        self.pipe.close()


def _serve(pipe: Connection, shard: Shard) -> None:  # pragma: no cover - runs in a worker
    while True:
        message = pipe.recv()
        if message is None:
            return
        name, args = message
        try:
            pipe.send(("ok", getattr(shard, name)(*args)))
        except Exception as error:  # reported to the coordinator, which raises it there
            pipe.send(("error", f"{type(error).__name__}: {error}"))


def _balance(wins: Sequence[Sequence[object]]) -> list[list[tuple[int, int]]]:
    """For each worker, the ``(worker, count)`` moves that give every worker an equal share of
    the next frontier (within one node), moving as few nodes as possible."""
    total, workers = sum(len(w) for w in wins), len(wins)
    share = [total // workers + (index < total % workers) for index in range(workers)]
    deficits = [[index, share[index] - len(w)] for index, w in enumerate(wins)
                if len(w) < share[index]]
    sends: list[list[tuple[int, int]]] = [[] for _ in wins]
    for index, w in enumerate(wins):
        surplus = len(w) - share[index]
        while surplus > 0:
            target = deficits[0]
            count = min(surplus, target[1])
            sends[index].append((target[0], count))
            surplus -= count
            target[1] -= count
            if not target[1]:
                deficits.pop(0)
    return sends


def run(root: Node, depth: int, workers: int, key: Callable[[str, str], tuple[str, str]],
        progress: Callable[[int, int], None] | None = None
        ) -> tuple[list[int], list[dict[str, Any]]]:
    """The walk (the module docstring): the new nodes per level, and each shard's totals."""
    per_level: list[int] = []
    shards = [Shard(index, workers, key) for index in range(workers)]
    links: list[Any] = []
    with collector_resting():  # (see collector_resting: a walk makes no cycles)
        try:
            if workers == 1:
                links = [_Local(shards[0])]
            else:
                context = multiprocessing.get_context("fork")
                links = [_Remote(context, shard) for shard in shards]
            root_owner = owner(hash(root[0]) & MASK, workers)
            links[root_owner].send("seed", root)
            links[root_owner].receive()
            nodes = 1

            def everyone(name: str, arguments: list[tuple[Any, ...]]) -> list[Any]:
                for link, args in zip(links, arguments, strict=True):
                    link.send(name, *args)
                return [link.receive() for link in links]

            for level in range(1, depth + 1):
                offers: list[list[tuple[int, int, Path, int]]] = [[] for _ in links]
                for producer, by_owner in enumerate(everyone("expand", [()] * workers)):
                    for target, items in by_owner.items():
                        offers[target].extend((*item, producer) for item in items)
                wins: list[list[tuple[int, bool]]] = [[] for _ in links]
                for by_producer in everyone("decide", [(items,) for items in offers]):
                    for producer, fps in by_producer.items():
                        wins[producer].extend(fps)
                moving: list[list[Any]] = [[] for _ in links]
                for by_target in everyone("release", list(zip(wins, _balance(wins), strict=True))):
                    for target, items in by_target.items():
                        moving[target].extend(items)
                new = sum(everyone("adopt", [(items, level == depth) for items in moving]))
                if not new:
                    break
                per_level.append(new)
                nodes += new
                if progress is not None:
                    progress(len(per_level), nodes)
            totals = everyone("totals", [()] * workers)
        finally:
            for link in links:
                link.close()
    return per_level, totals
