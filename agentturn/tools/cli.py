"""Command line: the demo, trace checking and explaining, and the phase diagrams.

``agentturn demo [--trace FILE] [--daemon-trace FILE]`` prints the scripted turn and the daemon
scene (and writes their traces); ``agentturn check FILE`` replays a trace and compares its
commands with the spec's (exit 0: they agree; 1: they differ or a rule is broken; 2: the trace
is unreadable, truncated, reordered, edited or of another format version); ``agentturn explain
FILE`` tells a trace's story in plain words; ``agentturn diagram [PART]`` draws a phase graph.
``agentturn explore --depth N`` walks every session state reachable in N moves over a small event
alphabet derived from each state, and ``agentturn fuzz --steps N --seed S`` walks at random; both
check every step's invariants (exit 0: nothing but known bugs; 1: a rule broke that no known bug
explains).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from typing import Any

__all__ = ["main"]


def _write(path: str, lines: Any) -> None:
    pathlib.Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _demo(args: argparse.Namespace) -> int:
    from .demo import steps, timeline
    from .demo_daemon import daemon_config, daemon_scene

    text, pairs = daemon_scene()
    print(timeline())
    print(text)
    if args.trace or args.daemon_trace:
        from .. import trace
        from ..turn.state import TurnState

        if args.trace:
            config = TurnState.create("chat-1").config
            _write(args.trace, trace.write_trace("turn", config, steps(), chat_id="chat-1"))
        if args.daemon_trace:
            _write(args.daemon_trace, trace.write_trace("session", daemon_config(), pairs))
    return 0


def _read(path: str) -> Any:
    from .. import trace

    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise trace.TraceError(f"cannot read {path}: {error}") from None
    return trace.read_trace(text)


def _check(args: argparse.Namespace) -> int:
    from .. import trace
    from .check import check

    try:
        recorded = _read(args.file)
    except trace.TraceError as error:
        print(f"rejected: {error}", file=sys.stderr)
        return 2
    report = check(recorded)
    status = 0 if report.ok else 1
    if not recorded.intact:
        print("rejected: the trace was edited after it was written (its end record's digest "
              "does not match its lines)", file=sys.stderr)
        status = 2
    divergence = report.divergence
    if divergence is not None:
        print(f"step {divergence.step}: the commands differ from the spec's", file=sys.stderr)
        print(f"  event:    {divergence.event!r}", file=sys.stderr)
        if divergence.refused:
            print(f"  expected: the reducer refuses it: {divergence.refused}", file=sys.stderr)
        else:
            print(f"  expected: {list(divergence.expected)!r}", file=sys.stderr)
        print(f"  recorded: {list(divergence.recorded)!r}", file=sys.stderr)
    for rule in report.broken:
        print(f"broken rule: {rule}", file=sys.stderr)
    if status == 0:
        print(f"ok: the {report.steps} steps of this {recorded.part} trace agree with the spec "
              f"(written by agentturn {recorded.library_version})")
    return status


def _explain(args: argparse.Namespace) -> int:
    from .. import trace
    from .explain import explain

    try:
        recorded = _read(args.file)
    except trace.TraceError as error:
        print(f"rejected: {error}", file=sys.stderr)
        return 2
    print(explain(recorded))
    return 0


def _report_violations(violations: Any, show: int) -> int:
    new = [v for v in violations if not v.known]
    for violation in new[:show]:
        print(violation.describe())
    shortest: dict[str, int] = {}
    for violation in violations:
        if violation.known:
            shortest[violation.known] = min(len(violation.events),
                                            shortest.get(violation.known, 1 << 30))
    for known, length in sorted(shortest.items()):
        print(f"known {known} (shortest sequence found: {length} events)")
    return 1 if new else 0


def _explore(args: argparse.Namespace) -> int:
    from . import explore

    configs = list(explore.CONFIGS) if args.config == "all" else [args.config]
    starts = list(explore.STARTS) if args.start == "all" else [args.start]
    status = states = transitions = 0
    seconds = 0.0
    for config in configs:
        for start in starts:
            report = explore.explore(args.depth, config, start, clock=time.perf_counter)
            print(report.summary())
            status |= _report_violations(report.violations, args.show)
            states += report.states
            transitions += report.transitions
            seconds += report.seconds
    print(f"total: {states} states, {transitions} transitions, depth {args.depth}, "
          f"{seconds:.1f} s")
    return status


def _fuzz(args: argparse.Namespace) -> int:
    from . import explore

    configs = list(explore.CONFIGS) if args.config == "all" else [args.config]
    report = explore.fuzz(args.steps, seed=args.seed, episode=args.episode, configs=configs,
                          clock=time.perf_counter)
    print(report.summary())
    return _report_violations(report.violations, args.show)


def main(argv: list[str] | None = None) -> int:
    """Run the ``agentturn`` command."""
    parser = argparse.ArgumentParser(prog="agentturn", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="print a scripted turn and a daemon scene")
    demo.add_argument("--trace", metavar="FILE", help="write the turn's trace to FILE")
    demo.add_argument("--daemon-trace", metavar="FILE",
                      help="write the daemon scene's trace to FILE")
    check = commands.add_parser("check", help="replay a trace and compare it with the spec")
    check.add_argument("file", metavar="FILE")
    explain = commands.add_parser("explain", help="tell a trace's story in plain words")
    explain.add_argument("file", metavar="FILE")
    diagram = commands.add_parser("diagram", help="print a part's phase graph as Mermaid")
    diagram.add_argument("part", nargs="?", default="turn",
                         choices=["turn", "lead", "titles", "guard", "session"])
    configs = ["daemon", "interactive", "supersede", "all"]
    walk = commands.add_parser("explore", help="check every session state reachable in N moves")
    walk.add_argument("--depth", type=int, default=4, metavar="N")
    walk.add_argument("--config", default="daemon", choices=configs)
    walk.add_argument("--start", default="all",
                      choices=["new", "armed", "draining", "permission", "naming", "all"])
    walk.add_argument("--show", type=int, default=5, help="new violations to print in full")
    fuzz = commands.add_parser("fuzz", help="random walks through the session, checked each step")
    fuzz.add_argument("--steps", type=int, default=100_000, metavar="N")
    fuzz.add_argument("--seed", type=int, default=0)
    fuzz.add_argument("--episode", type=int, default=400,
                      help="steps before a walk starts a new session")
    fuzz.add_argument("--config", default="all", choices=configs)
    fuzz.add_argument("--show", type=int, default=5, help="new violations to print in full")
    args = parser.parse_args(argv)
    if args.command == "explore":
        return _explore(args)
    if args.command == "fuzz":
        return _fuzz(args)
    if args.command == "demo":
        return _demo(args)
    if args.command == "check":
        return _check(args)
    if args.command == "explain":
        return _explain(args)
    from .. import LEAD_GRAPH, TITLE_GRAPH, TURN_GRAPH, PhaseGraph
    from ..guard import GUARD_GRAPH
    from ..session import SESSION_GRAPH

    graphs: dict[str, PhaseGraph[Any]] = {
        "turn": TURN_GRAPH, "lead": LEAD_GRAPH, "titles": TITLE_GRAPH, "guard": GUARD_GRAPH,
        "session": SESSION_GRAPH}
    print(graphs[args.part].mermaid())
    return 0

