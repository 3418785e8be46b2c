"""Benchmark: the ratios of ``run.py`` counted in instructions, which do not depend on the host.

Run:  python benchmarks/instructions.py [--fuzz-steps N] [--explore-depth D] [--parts ...]
      (needs valgrind)

``run.py`` measures CPU time, and on this project's shared two-core virtual machines the same
tree gives ``reduce/floor`` 3.3-3.5 on one host and 4.0-4.4 on another (``README.md``, "Third
look"): a ratio of two Python code paths of very different shapes (the reduce walks a few
kilobytes of state through some forty small functions; the floor builds one class) depends on
the host's caches. Instructions executed do not, so this script prints the same ratios counted
by ``valgrind --tool=cachegrind --cache-sim=no`` (no cache simulation: only the count):

* ``instructions reduce/floor``: ``session.reduce`` on the recorded trace's ready-made events,
  over the floor on the same events (``run.time_reduce`` and ``run.time_floor``);
* ``instructions explore transition/reduce``: one explorer walk (daemon, ``armed``, one worker,
  every check) per transition, over ``session.reduce`` on the very ``(state, event)`` pairs that
  walk reduced, replayed with the cycle collector off (as the walk runs);
* ``instructions fuzz step/reduce``: the same for a seeded fuzz run;
* ``instructions driver overhead/reduce``: a session driven by ``agentturn.aio`` with no-op
  effects (``driver.py``: a prompt, four tool rounds, the close) per event, less
  ``session.reduce`` on the same events ready-made, over the latter (DESIGN.md: at most 1.0,
  "a driven event costs at most two reduces"), and the share of it that is the engine
  accumulator (``ChatCompletionsStream`` over the same replies, alone). Needs the ``aio``
  extra. A driven pass is not the same instructions every time (the event loop's and anyio's
  structures grow, the collector runs at other points): this figure moves by a few per cent
  with ``--driver-sessions``. Then what anyio's primitives cost alone, in reduces of one event
  (``driver.primitive``): a task started and run, a task switch, a cancel scope, an event; the
  floor under any driver that runs each awaited answer in a task of its own.

Each figure is a difference of two whole processes that differ only in the part measured (the
interpreter's start, the imports, a first warming run are in both and cancel), so it is exact
up to the few instructions of a loop. As in ``run.py``, the walk measured is the second of two
in one process (the first fills the alphabet's caches), and a pair reduced twice in a row (the
determinism re-run) is replayed once. It takes several minutes: valgrind runs Python about
fifty times slower.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import re
import shutil
import subprocess
import sys


def _child(mode: str, what: str, size: int, times: int) -> int:
    """The measured program: ``mode`` ``walk`` runs ``times`` walks (``what``: explore or
    fuzz) after a first one; ``replay`` captures one walk's pairs and reduces them ``times``
    times; ``trace`` runs ``run.time_reduce`` or ``run.time_floor`` ``times`` times; ``driver``
    runs ``times`` driven sessions or their bare reduce (``driver.child``)."""
    if mode == "driver":
        import driver  # beside this file
        if what.startswith("primitive-"):
            return driver.primitive(what.removeprefix("primitive-"), times)
        return driver.child(what, times)
    if mode == "trace":
        import run  # beside this file (a script's directory is on the path)
        events = [run.build(spec) for spec in run.record_trace()]
        timer = run.time_reduce if what == "reduce" else run.time_floor
        timer(events, 1)  # warm, in both processes of a difference
        for _ in range(times):
            timer(events, 1)
        return len(events)
    import walks  # beside this file, as run.py is

    def walk() -> int:
        return walks.explore_walk(size) if what == "explore" else walks.fuzz_walk(size)

    if mode == "walk":
        count = walk()
        for _ in range(times):
            walk()
        return count
    pairs = walks.capture_pairs(walk)
    gc.disable()  # as the walks run
    for _ in range(times):
        walks.time_reduce(pairs)  # (its two clock reads: a few hundred instructions)
    return len(pairs)


def _count(mode: str, what: str, size: int, times: int) -> tuple[int, int]:
    """Instructions of one child process, and the count it reports (events, transitions, steps
    or pairs). The hash seed is fixed, so that the two processes of a difference lay out their
    sets and dicts alike and run the same instructions but for the part measured."""
    result = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, os.path.abspath(__file__), "--child", mode, what, str(size),
         str(times)], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"I\s+refs:\s+([\d,]+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind:\n{result.stderr[-2000:]}")
    return int(found.group(1).replace(",", "")), int(result.stdout.split()[-1])


def _difference(mode: str, what: str, size: int, times: int = 1) -> tuple[int, int]:
    """The instructions of ``times`` more walks, replays or trace passes, and their count."""
    more, count = _count(mode, what, size, times)
    zero, _ = _count(mode, what, size, 0)
    return more - zero, count * times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fuzz-steps", type=int, default=20_000)
    parser.add_argument("--explore-depth", type=int, default=4)
    parser.add_argument("--parts", nargs="+", default=["reduce", "explore", "fuzz", "driver"],
                        choices=["reduce", "explore", "fuzz", "driver"],
                        help="what to count (default: all)")
    parser.add_argument("--driver-sessions", type=int, default=20,
                        help="driven sessions counted (26 events each)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        mode, what, size, times = args.child
        print(_child(mode, what, int(size), int(times)))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing to count", file=sys.stderr)
        return 2
    if "reduce" in args.parts:
        reduce, events = _difference("trace", "reduce", 0, times=5)
        floor, _ = _difference("trace", "floor", 0, times=5)
        print(f"instructions per event: reduce {reduce / events:,.0f}, "
              f"floor {floor / events:,.0f}")
        print(f"instructions reduce/floor: {reduce / floor:.2f}")
    for what, size, unit in (("explore", args.explore_depth, "transition"),
                             ("fuzz", args.fuzz_steps, "step")):
        if what not in args.parts:
            continue
        walked, count = _difference("walk", what, size)
        replayed, pairs = _difference("replay", what, size)
        per_walk, per_pair = walked / count, replayed / pairs
        print(f"instructions per {unit}: {what} {per_walk:,.0f}, its reduce {per_pair:,.0f} "
              f"({count} {unit}s, {pairs} pairs)")
        print(f"instructions {what} {unit}/reduce: {per_walk / per_pair:.2f}")
    if "driver" in args.parts and importlib.util.find_spec("anyio") is None:
        print("instructions driver overhead/reduce: skipped, anyio is not installed "
              "(pip install -e '.[aio]')")
    elif "driver" in args.parts:
        sessions = args.driver_sessions
        driven, events = _difference("driver", "driven", 0, times=sessions)
        bare, _ = _difference("driver", "bare", 0, times=sessions)
        accumulated, _ = _difference("driver", "wire", 0, times=sessions)
        print(f"instructions per event: driven {driven / events:,.0f}, its reduce "
              f"{bare / events:,.0f} ({sessions} sessions, {events // sessions} events each)")
        print(f"instructions driver overhead/reduce: {(driven - bare) / bare:.2f}")
        print(f"  of which the engine accumulator (its streams' chunks to events, alone): "
              f"{accumulated / bare:.2f}; the rest {(driven - bare - accumulated) / bare:.2f}")
        # The floor under any driver on anyio: what one of its primitives costs, in reduces of
        # one event (driver.py's ``primitive``), so the target can be weighed against them.
        reduce_per_event = bare / events
        for primitive in ("spawn", "switch", "scope", "event"):
            cost, count = _difference("driver", "primitive-" + primitive, 0)
            print(f"  anyio {driver_primitives[primitive]}: {cost / count:,.0f} instructions, "
                  f"{cost / count / reduce_per_event:.2f} reduces")
    return 0


driver_primitives = {
    "spawn": "task started (start_soon) and run to its end",
    "switch": "task switch (a checkpoint: the loop runs once)",
    "scope": "cancel scope entered and left",
    "event": "Event made and set",
}


if __name__ == "__main__":
    sys.exit(main())
