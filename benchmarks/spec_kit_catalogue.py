"""Measure the spec kit against the catalogue of buggy adapters (``tests/spec_kit/catalogue.py``).

For each bug and each seed: does the kit catch it within ``--examples`` examples (the detection),
how many examples did it take, and — with ``--shrink`` — how long the shrink took and how many
moves the shrunk program has. The reference adapter is run on the same seeds and must never
fail. The seeds are random unless given; the output is a Markdown table for
``benchmarks/EVIDENCE.md``.

    .venv/bin/python benchmarks/spec_kit_catalogue.py --seeds 20 --shrink
    .venv/bin/python benchmarks/spec_kit_catalogue.py --seed-list 0,1,2 --bugs ignores-cancel-tool
"""

from __future__ import annotations

import argparse
import pathlib
import random
import re
import sys
import time
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import get_state_machine_test

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "spec_kit"))
import catalogue  # type: ignore[import-not-found]  # noqa: E402

from agentturn.testing import ReferenceAdapter  # noqa: E402
from agentturn.testing.profiles import STEPS  # noqa: E402


def run(adapter: type[ReferenceAdapter], run_seed: int, examples: int,
        shrink: bool) -> dict[str, Any]:
    """One seed: caught or not and the examples it took (generation only, stopping at the
    first failure); with ``shrink``, the same run again with the shrink, timed."""
    found: list[int] = []

    class Counted(catalogue.spec_for(adapter)):  # type: ignore[misc]
        def teardown(self) -> None:
            found.append(1)  # one example ran

    result: dict[str, Any] = {"caught": False, "examples": 0, "seconds": 0.0, "moves": 0,
                              "rule": ""}
    for phases in ([Phase.generate], [Phase.generate, Phase.shrink]):
        test = get_state_machine_test(Counted, settings=settings(
            max_examples=examples, stateful_step_count=STEPS, deadline=None, database=None,
            phases=phases, report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck)))
        began = time.perf_counter()
        try:
            seed(run_seed)(test)()
        except AssertionError as error:
            notes = "\n".join(getattr(error, "__notes__", []))
            rule = re.search(r"\[([a-z-]+), ", str(error))
            if len(phases) == 1:
                result.update(caught=True, examples=len(found),
                              rule=rule.group(1) if rule else "?")
            else:
                result.update(seconds=time.perf_counter() - began, moves=len(re.findall(
                    r"^state\.move\(", notes, flags=re.MULTILINE)))
        if not result["caught"] or not shrink:
            break
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="random seeds per bug")
    parser.add_argument("--seed-list", default="", help="fixed seeds, comma-separated")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--shrink", action="store_true", help="also shrink and time it")
    parser.add_argument("--bugs", default="", help="catalogue names, comma-separated")
    args = parser.parse_args(argv)
    seeds = ([int(s) for s in args.seed_list.split(",")] if args.seed_list
             else [random.randrange(2**32) for _ in range(args.seeds)])
    names = args.bugs.split(",") if args.bugs else list(catalogue.CATALOGUE)
    print(f"seeds: {seeds}\n")
    print("| bug | rule | caught | examples to find (median / worst) | shrunk moves (worst) "
          "| shrink s (worst) |")
    print("|---|---|---|---|---|---|")
    worst_time = 0.0
    for name in ["reference", *names]:
        adapter = ReferenceAdapter if name == "reference" else catalogue.CATALOGUE[name].adapter
        runs = [run(adapter, s, args.examples, args.shrink) for s in seeds]
        caught = [r for r in runs if r["caught"]]
        rules = sorted({r["rule"] for r in caught})
        found = sorted(r["examples"] for r in caught) or [0]
        moves = max((r["moves"] for r in caught), default=0)
        took = max((r["seconds"] for r in caught), default=0.0)
        if name != "reference":
            worst_time = max(worst_time, took)
        shrunk = f"{moves}" if args.shrink else "-"
        timed = f"{took:.1f}" if args.shrink else "-"
        print(f"| {name} | {', '.join(rules) or '-'} | {len(caught)}/{len(runs)} | "
              f"{found[len(found) // 2]} / {found[-1]} | {shrunk} | {timed} |", flush=True)
    if args.shrink:
        print(f"\nworst time to catch and shrink: {worst_time:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
