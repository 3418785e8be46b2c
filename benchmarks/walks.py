"""The explorer's and the fuzzer's cost per step against the reduce they check, and text builds.

Used by ``run.py`` (see its docstring); kept apart so that each file stays readable.

* **explore transition/reduce** (:func:`explore_pair`): the CPU time of one explorer walk (one
  worker, every check) per transition, over the time ``session.reduce`` alone takes on the very
  same ``(state, event)`` pairs, captured from that walk (the determinism re-runs left out:
  they are part of the explorer's cost, not of the reduce it checks);
* **fuzz step/reduce** (:func:`fuzz_pair`): the same for a seeded fuzz run;
* **explore depth 6, 2 workers** (:func:`explore_wall`): the wall time of the five-start walk
  of ``agentturn explore --depth N``, with one or more workers;
* **parallel capacity** (:func:`parallel_capacity`): the control printed beside the speedup;
* **non-ASCII build/ASCII build** (:func:`text_builds`): building a ``ToolFinished`` whose
  output is 100 KB of ASCII or of non-ASCII text (validated: a str without lone surrogates).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

import agentturn as at
from agentturn.errors import ProtocolError
from agentturn.tools import explore

Pair = tuple[Any, Any]


def capture_pairs(run: Callable[[], object]) -> list[Pair]:
    """Run ``run()`` and return the ``(state, event)`` pairs it reduced (a pair reduced twice in
    a row, a determinism re-run, is kept once)."""
    real = explore.reduce
    pairs: list[Pair] = []

    def capture(state: Any, event: Any) -> Any:
        if not pairs or pairs[-1][0] is not state or pairs[-1][1] is not event:
            pairs.append((state, event))
        return real(state, event)

    explore.reduce = capture
    try:
        run()
    finally:
        explore.reduce = real
    return pairs


def _captured(run: Callable[[], object]) -> tuple[float, list[Pair]]:
    """The CPU seconds of ``run()``, and the pairs it reduced (:func:`capture_pairs`)."""
    pairs = capture_pairs(run)  # the capture's own cost is not timed: the walk runs again
    started = time.process_time()
    run()
    return time.process_time() - started, pairs


def time_reduce(pairs: list[Pair]) -> float:
    """CPU seconds of ``session.reduce`` over ``pairs`` (a refusal included, as walks meet)."""
    reduce = explore.reduce
    started = time.process_time()
    for state, event in pairs:
        try:  # noqa: SIM105 - contextlib.suppress would add its own cost to the figure
            reduce(state, event)
        except ProtocolError:
            pass
    return time.process_time() - started


def explore_walk(depth: int = 4, start: str = "armed") -> int:
    """The explorer walk the ratios are measured on (daemon, one worker); its transitions."""
    return explore.explore(depth, "daemon", start, workers=1).transitions


def fuzz_walk(steps: int = 20_000, seed: int = 3) -> int:
    """The fuzz run the ratios are measured on; its steps."""
    return explore.fuzz(steps, seed=seed).steps


def explore_pair(depth: int = 4, start: str = "armed") -> tuple[float, float, int]:
    """One paired measurement: explorer CPU per transition, reduce CPU per pair, transitions."""
    transitions: list[int] = []
    seconds, pairs = _captured(lambda: transitions.append(explore_walk(depth, start)))
    return seconds / transitions[-1], time_reduce(pairs) / len(pairs), transitions[-1]


def fuzz_pair(steps: int = 20_000, seed: int = 3) -> tuple[float, float, int]:
    """One paired measurement: fuzzer CPU per step, reduce CPU per pair, steps."""
    seconds, pairs = _captured(lambda: fuzz_walk(steps, seed))
    return seconds / steps, time_reduce(pairs) / len(pairs), steps


def explore_wall(depth: int, workers: int) -> tuple[float, int, int]:
    """Wall seconds of the five-start walk at ``depth`` with ``workers``; states, transitions."""
    started = time.perf_counter()
    states = transitions = 0
    for start in explore.STARTS:
        report = explore.explore(depth, "daemon", start, workers=workers)
        states += report.states
        transitions += report.transitions
    return time.perf_counter() - started, states, transitions


def _spin() -> None:
    total = 0
    for number in range(3_000_000):
        total += number


def parallel_capacity() -> float:
    """How many cores two processes get at the moment, as a control for the speedup: a pure
    Python loop timed alone, then twice at once in two forked processes (2.0 on an idle
    two-core machine; less when other work holds the cores)."""
    started = time.perf_counter()
    _spin()
    alone = time.perf_counter() - started
    context = multiprocessing.get_context("fork")
    started = time.perf_counter()
    spinners = [context.Process(target=_spin) for _ in range(2)]
    for spinner in spinners:
        spinner.start()
    for spinner in spinners:
        spinner.join()
    return 2 * alone / (time.perf_counter() - started)


#: 100 KB of tool output: ASCII, and the same length of mixed-script text (accents, CJK, emoji).
ASCII_OUTPUT = ("def parse(text: str) -> Tree:\n" * 3500)[:100_000]
NON_ASCII_OUTPUT = ("Übersetzung des Parsers — 解析器を移植する 🚀\n" * 3000)[:100_000]


def time_text_build(output: str, count: int) -> float:
    """Nanoseconds to build one ``ToolFinished`` carrying ``output``."""
    started = time.perf_counter_ns()
    for number in range(count):
        at.ToolFinished(call_id=f"c{number}", output=output)
    return (time.perf_counter_ns() - started) / count
