"""Measure the async spec kit against the catalogue of buggy asyncio hosts
(``tests/spec_kit/async_catalogue.py``): each bug caught *and* shrunk under the CI profile.

For each bug and each seed (0, 1, 2 unless given): the CPU time to catch and shrink it
(``time.process_time``: run it pinned to one core, ``taskset -c 1``) and the moves of the shrunk
program; then the reference host on the same seeds, which must pass. Prints a Markdown table.

    taskset -c 1 .venv/bin/python benchmarks/spec_kit_async_catalogue.py
    taskset -c 1 .venv/bin/python benchmarks/spec_kit_async_catalogue.py --bugs sdk-retries
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import time

from hypothesis import settings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "spec_kit"))
import async_catalogue  # type: ignore[import-not-found]  # noqa: E402

from agentturn.testing import profiles  # noqa: E402
from agentturn.testing.asyncio_kit import AsyncSpec, check, reference_effects  # noqa: E402

MOVE = re.compile(r"^        (?:answer|user|tick)\(", re.MULTILINE)


def measure(spec: AsyncSpec, run_seed: int) -> tuple[str, int, float]:
    """(first broken rule, moves of the shrunk program, CPU seconds) for one seed."""
    started = time.process_time()
    try:
        check(spec, settings(profiles.CI, derandomize=False), run_seed=run_seed)
    except AssertionError as failure:
        found = str(failure)
        return found.splitlines()[0], len(MOVE.findall(found)), time.process_time() - started
    return "MISSED", 0, time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bugs", nargs="*", default=list(async_catalogue.CATALOGUE))
    parser.add_argument("--seed-list", default="0,1,2")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seed_list.split(",")]
    print("| bug | caught by | shrunk moves, worst | catch + shrink s, worst |")
    print("| --- | --- | --- | --- |")
    for name in args.bugs:
        results = [measure(async_catalogue.CATALOGUE[name].spec, s) for s in seeds]
        rule = results[0][0].split("]")[0].lstrip("[").split(",")[0]
        missed = sum(r[0] == "MISSED" for r in results)
        print(f"| `{name}` | `{rule}`{' MISSED ' + str(missed) if missed else ''} | "
              f"{max(r[1] for r in results)} | {max(r[2] for r in results):.1f} |", flush=True)
    started = time.process_time()
    for run_seed in seeds:
        check(AsyncSpec(make_effects=reference_effects),
              settings(profiles.CI, derandomize=False), run_seed=run_seed)
    print(f"\nreference host: {len(seeds)} seeds x 200 examples passed in "
          f"{time.process_time() - started:.1f} s")


if __name__ == "__main__":
    main()
