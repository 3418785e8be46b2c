"""Command line: the demo, trace checking and explaining, the phase diagrams, the explorer.

``agentturn demo [--trace FILE] [--daemon-trace FILE]`` prints the scripted turn and the daemon
scene (and writes their traces); ``agentturn check FILE`` replays a trace and compares its
commands with the spec's; ``agentturn explain FILE`` tells a trace's story in plain words;
``agentturn diagram PART`` draws a phase graph's main path (``--full``: every edge; ``--format
dot``: Graphviz text; ``stop-order``: the stop order as a flowchart); ``agentturn explore
--depth N`` model-checks every session state reachable in N moves over a small event alphabet
derived from each state (``--workers N``, ``--coverage``, ``--counterexample FILE``), and
``agentturn fuzz --steps N --seed S`` walks at random; both check every step's invariants.
``agentturn conform [--runner PKG.MODULE:NAME]`` runs the conformance suite on an agent runtime
against a scripted engine on 127.0.0.1 (the ``conform`` extra) and prints the report.

Every input file is read as hostile: whatever is wrong with it ends in one line on stderr and
exit 2, never a traceback. Everything printed from a file (prompts, model text, versions) is
made safe for a terminal first: control characters are shown escaped (:func:`terminal_safe`).
A reader that closes the pipe early (``agentturn demo | head``) ends the command quietly with
the code it would have had.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from .render import terminal_safe, written_by

__all__ = ["EXIT_CODES", "main", "terminal_safe"]

#: What the exit codes mean, for every command.
EXIT_CODES = """exit codes:
  0  done: the trace agrees with the spec; the walk broke no rule (or only known bugs)
  1  check: the commands differ from the spec's or a rule is broken;
     explore, fuzz: a rule broke that no known bug explains;
     conform: the runtime failed a scenario
  2  the input cannot be used: a usage error, a file that cannot be read or written, a trace
     that is unreadable, truncated, reordered, edited (check, explain) or of another version"""

#: The longest walk ``explore`` takes: each level costs about five times the one before (depth
#: 6 from the five starts is about 80 s of CPU and 420 MB at its peak; 8 is the most that fits
#: a laptop's patience and memory).
MAX_DEPTH = 8
#: The largest trace file ``check`` and ``explain`` read.
MAX_TRACE_BYTES = 256 * 1024 * 1024
#: The most steps ``fuzz`` takes in one run.
MAX_STEPS = 10**9

_PARTS = ("turn", "lead", "titles", "guard", "session")
#: The streams whose reader closed the pipe: nothing more is written to them.
_CLOSED: set[str] = set()


def _say(text: str, *, error: bool = False, one_line: bool = False) -> None:
    """Print ``text`` made safe (``one_line``: its newlines escaped too). A reader that closed
    the pipe gets nothing more, and the command still ends with its own exit code."""
    name = "stderr" if error else "stdout"
    if name in _CLOSED:
        return
    stream = sys.stderr if error else sys.stdout
    try:
        stream.write(terminal_safe(text, one_line) + "\n")
        stream.flush()
    except BrokenPipeError:
        _CLOSED.add(name)


class _Refused(Exception):
    """The input cannot be used: one line on stderr, exit 2."""


def _write(path: str, lines: Iterable[str]) -> None:
    if not path:
        raise _Refused("a trace path must not be empty")
    try:
        pathlib.Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    except OSError as error:
        raise _Refused(f"cannot write {path}: {error.strerror or error}") from None


def _demo(args: argparse.Namespace) -> int:
    from .demo import steps, timeline
    from .demo_daemon import daemon_config, daemon_scene

    text, pairs = daemon_scene()
    if args.trace is not None or args.daemon_trace is not None:  # first: a bad path is refused
        from .. import trace
        from ..turn.state import TurnState

        if args.trace is not None:
            config = TurnState.create("chat-1").config
            _write(args.trace, trace.write_trace("turn", config, steps(), chat_id="chat-1"))
        if args.daemon_trace is not None:
            _write(args.daemon_trace, trace.write_trace("session", daemon_config(), pairs))
    _say(timeline())
    _say(text)
    return 0


def _read(path: str) -> Any:
    from .. import trace

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: a FIFO would block
            raise trace.TraceError(f"cannot read {path}: not a regular file")
        with open(path, "rb") as file:
            data = file.read(MAX_TRACE_BYTES + 1)
    except OSError as error:
        raise trace.TraceError(f"cannot read {path}: {error.strerror or error}") from None
    if len(data) > MAX_TRACE_BYTES:
        raise trace.TraceError(f"{path} is larger than {MAX_TRACE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise trace.TraceError(f"{path} is not UTF-8 text (byte {error.start})") from None
    return trace.read_trace(text)


def _check(args: argparse.Namespace) -> int:
    from .. import trace
    from .check import check

    try:
        recorded = _read(args.file)
    except trace.TraceError as error:
        _say(f"rejected: {error}", error=True, one_line=True)
        return 2
    if not recorded.intact:  # an edited trace is not judged: its verdict would be the editor's
        _say("rejected: the trace was edited after it was written (its end record's digest "
             "does not match its lines)", error=True, one_line=True)
        return 2
    report = check(recorded)
    status = 0 if report.ok else 1
    divergence = report.divergence
    if divergence is not None:
        _say(f"step {divergence.step}: the commands differ from the spec's", error=True)
        _say(f"  event:    {divergence.event!r}", error=True, one_line=True)
        if divergence.refused:
            _say(f"  expected: the reducer refuses it: {divergence.refused}", error=True,
                 one_line=True)
        else:
            _say(f"  expected: {list(divergence.expected)!r}", error=True, one_line=True)
        _say(f"  recorded: {list(divergence.recorded)!r}", error=True, one_line=True)
    for rule in report.broken:
        _say(f"broken rule: {rule}", error=True, one_line=True)
    if status == 0:
        _say(f"ok: the {report.steps} steps of this {recorded.part} trace agree with the spec "
             f"(written by {written_by(recorded.library_version)})", one_line=True)
    return status


def _explain(args: argparse.Namespace) -> int:
    from .. import trace
    from .explain import explain

    try:
        recorded = _read(args.file)
    except trace.TraceError as error:
        _say(f"rejected: {error}", error=True, one_line=True)
        return 2
    if not recorded.intact and not args.unsealed:
        _say("rejected: the trace was edited after it was written (its end record's digest "
             "does not match its lines); explain --unsealed tells its story anyway",
             error=True)
        return 2
    if not recorded.intact:
        _say("WARNING: this trace was edited after it was written (its digest does not match): "
             "the story below is of the edited lines, not of what the host recorded.")
    _say(explain(recorded))
    return 0


def _report_violations(violations: Any, show: int) -> int:
    new = [v for v in violations if not v.known]
    for violation in new[:show]:
        _say(violation.describe())
    shortest: dict[str, int] = {}
    for violation in violations:
        if violation.known:
            shortest[violation.known] = min(len(violation.events),
                                            shortest.get(violation.known, 1 << 30))
    for known, length in sorted(shortest.items()):
        _say(f"known {known} (shortest sequence found: {length} events)")
    return 1 if new else 0


def _explore(args: argparse.Namespace) -> int:
    from . import explore
    from .explore.counterexample import program, trace_lines

    configs = list(explore.CONFIGS) if args.config == "all" else [args.config]
    starts = list(explore.STARTS) if args.start == "all" else [args.start]
    workers = args.workers or explore.default_workers()
    status = states = transitions = 0
    seconds = 0.0
    covered = None
    first_new = None
    for config in configs:
        for start in starts:
            label = f"explore {config}/{start}"

            def progress(level: int, nodes: int, label: str = label) -> None:
                _progress(f"{label}: level {level} of {args.depth} done, {nodes} nodes")

            report = explore.explore(args.depth, config, start, clock=time.perf_counter,
                                     progress=progress, workers=workers)
            _say(report.summary())
            status |= _report_violations(report.violations, args.show)
            for violation in report.new_violations[:args.show]:
                _say(program(violation))
            if first_new is None and report.new_violations:
                first_new = report.new_violations[0]
            states += report.states
            transitions += report.transitions
            seconds += report.seconds
            if report.coverage is not None:
                covered = report.coverage if covered is None else covered.merge(report.coverage)
    _say(f"total: {states} states, {transitions} transitions, depth {args.depth}, "
         f"{seconds:.1f} s, {workers} worker(s)")
    if args.coverage and covered is not None:
        _say(covered.summary())
    if args.counterexample is not None:
        if first_new is None:
            _say(f"no rule broken: no counterexample written to {args.counterexample}")
        else:
            _write(args.counterexample, trace_lines(first_new))
            _say(f"the shortest counterexample ({first_new.rule}) was written to "
                 f"{args.counterexample}: agentturn check / explain read it")
    return status


def _fuzz(args: argparse.Namespace) -> int:
    from . import explore

    configs = list(explore.CONFIGS) if args.config == "all" else [args.config]
    report = explore.fuzz(args.steps, seed=args.seed, episode=args.episode, configs=configs,
                          clock=time.perf_counter,
                          progress=lambda done: _progress(f"fuzz: {done} of {args.steps} steps"))
    _say(report.summary())
    return _report_violations(report.violations, args.show)


def _progress(line: str) -> None:
    """A progress line on stderr, for long runs (a closed stderr is ignored)."""
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:  # a closed pipe included
        pass


def _ranged(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high``."""
    def read(text: str) -> int:
        if not re.fullmatch(r"-?[0-9]+", text):  # not int(): it takes "1_0", "+1", other digits
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value
    return read


class _Parser(argparse.ArgumentParser):
    """argparse with the project's exit code for usage errors, and its words."""

    def error(self, message: str) -> NoReturn:
        raise _Refused(f"{self.prog}: {message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
    from .. import __version__

    formatter = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog="agentturn", description=(__doc__ or "").split("\n\n")[0],
                     epilog=EXIT_CODES, formatter_class=formatter)
    parser.add_argument("--version", action="version", version=f"agentturn {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        found: argparse.ArgumentParser = commands.add_parser(
            name, help=summary, description=summary, epilog=EXIT_CODES, formatter_class=formatter)
        return found

    demo = command("demo", "print a scripted turn and a daemon scene")
    demo.add_argument("--trace", metavar="FILE", help="also write the turn's trace to FILE")
    demo.add_argument("--daemon-trace", metavar="FILE",
                      help="also write the daemon scene's trace to FILE")
    check = command("check", "replay a trace and compare its commands with the spec's")
    check.add_argument("file", metavar="FILE", help="a trace (JSON Lines, UTF-8)")
    explain = command("explain", "tell a trace's story in plain words")
    explain.add_argument("file", metavar="FILE", help="a trace (JSON Lines, UTF-8)")
    explain.add_argument("--unsealed", action="store_true",
                         help="tell the story of a trace whose digest does not match (edited "
                              "after it was written), with a warning on the first line")
    diagram = command("diagram", "print a part's phase graph as Mermaid (or Graphviz dot)")
    diagram.add_argument("part", metavar="PART", nargs="?", choices=(*_PARTS, "stop-order"),
                         help=f"one of {', '.join(_PARTS)}; or stop-order, the session's "
                              "stop order as a flowchart")
    diagram.add_argument("--full", action="store_true",
                         help="draw every declared edge, self-loops included (default: the "
                              "main path, with absorbed and folded events in a caption)")
    diagram.add_argument("--format", choices=("mermaid", "dot", "caption"), default="mermaid",
                         help="mermaid (default); dot, for Graphviz: agentturn diagram turn "
                              "--format dot | dot -Tsvg -o turn.svg; or caption, the main "
                              "view's caption alone")
    configs = ["daemon", "interactive", "supersede", "all"]
    starts = ["new", "armed", "draining", "permission", "naming", "all"]
    walk = command("explore", "check every session state reachable in N moves")
    walk.add_argument("--depth", type=_ranged(1, MAX_DEPTH), default=4, metavar="N",
                      help=f"moves from each start, 1 to {MAX_DEPTH} (default 4; each level "
                           "costs about five times the one before)")
    walk.add_argument("--config", default="daemon", choices=configs,
                      help="the session configuration (default daemon)")
    walk.add_argument("--start", default="all", choices=starts,
                      help="the state the walk starts from (default all)")
    walk.add_argument("--show", type=_ranged(0, 1000), default=5, metavar="K",
                      help="new violations to print in full (default 5)")
    walk.add_argument("--workers", type=_ranged(1, 256), default=0, metavar="N",
                      help="worker processes (default: the cores available; the result is the "
                           "same for any number)")
    walk.add_argument("--coverage", action="store_true",
                      help="list every declared (phase, event) edge of every part the walks "
                           "never reached")
    walk.add_argument("--counterexample", metavar="FILE",
                      help="write the first new violation's shortest sequence to FILE as a "
                           "session trace, which agentturn check and explain read")
    fuzz = command("fuzz", "random walks through the session, checked each step")
    fuzz.add_argument("--steps", type=_ranged(1, MAX_STEPS), default=100_000, metavar="N",
                      help="steps in all (default 100000; progress every 100000)")
    fuzz.add_argument("--seed", type=_ranged(0, 2**64 - 1), default=0, metavar="S",
                      help="the seed: the same seed gives the same walks (default 0)")
    fuzz.add_argument("--episode", type=_ranged(1, MAX_STEPS), default=400, metavar="N",
                      help="steps before a walk starts a new session (default 400)")
    fuzz.add_argument("--config", default="all", choices=configs,
                      help="the session configuration (default all, in turn)")
    fuzz.add_argument("--show", type=_ranged(0, 1000), default=5, metavar="K",
                      help="new violations to print in full (default 5)")
    _conform_parser(command)
    return parser


#: The modes ``conform --mode`` takes (agentturn.tools.conform.MODES; a test keeps them equal).
_CONFORM_MODES = ("openai-chat-stream", "openai-chat", "anthropic-messages-stream",
                  "anthropic-messages")
#: The runner ``conform`` runs unless told otherwise: agentturn's host on the driver.
_REFERENCE_RUNNER = "agentturn.tools.conform.runners.agentturn_driver:Runner"


def _conform_parser(command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    conform = command("conform", "run the conformance suite on an agent runtime (TL-1, TL-4, "
                                 "TL-6, TL-7, TL-9, TL-10) against a scripted engine on "
                                 "127.0.0.1; needs the conform extra")
    conform.add_argument("--runner", default=_REFERENCE_RUNNER, metavar="PKG.MODULE:NAME",
                         help="the runner to run: a runner object, class or factory "
                              "(default: agentturn's own host on the driver)")
    where = conform.add_mutually_exclusive_group()
    where.add_argument("--python", metavar="PY",
                       help="run the runner in this interpreter (its own venv), over a pipe")
    where.add_argument("--venv", metavar="DIR",
                       help="run the runner in the venv DIR, made (and cached) from "
                            "--requirements or the runner module's REQUIREMENTS")
    conform.add_argument("--requirements", metavar="FILE",
                         help="with --venv: the requirements file to install in DIR")
    conform.add_argument("--scenario", action="append", metavar="ID",
                         help="run only the scenarios whose id starts with ID (repeatable; "
                              "for example TL-9)")
    conform.add_argument("--mode", action="append", choices=_CONFORM_MODES,
                         help="run only this mode (repeatable; default: all four)")
    conform.add_argument("--examples", type=_ranged(1, 1000), default=6, metavar="N",
                         help="runs of each drawn scenario before shrinking (default 6)")
    conform.add_argument("--timeout", type=_ranged(1, 3600), default=30, metavar="S",
                         help="seconds one run may take before it fails (default 30)")
    conform.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    conform.add_argument("--evidence", action="store_true",
                         help="print every row's evidence, not only the failures'")


def _conform(args: argparse.Namespace) -> int:
    try:
        from . import conform
    except ImportError as error:  # hypothesis or anyio missing
        raise _Refused(f"agentturn conform needs the conform extra "
                       f"(pip install 'agentturn[conform]'): {error}") from None
    if args.requirements is not None and args.venv is None:
        raise _Refused("--requirements goes with --venv")
    if args.python is not None or args.venv is not None:
        return _conform_isolated(args)
    try:
        runner = conform.load_runner(args.runner)
    except conform.RunnerLoadError as error:
        raise _Refused(f"--runner: {error}") from None
    return _conform_run(args, runner)


def _conform_isolated(args: argparse.Namespace) -> int:
    """``--python``/``--venv``: the runner in its own interpreter (conform.isolated)."""
    import subprocess

    from .conform import isolated

    python = args.python
    if args.venv is not None:
        if args.requirements is not None:
            try:
                with open(args.requirements, encoding="utf-8") as file:
                    pins = [line.split("#")[0].strip() for line in file]
            except OSError as error:
                raise _Refused(f"--requirements: {error}") from None
            pins = [p for p in pins if p]
        else:
            try:
                found = isolated.requirements_of(args.runner)
            except ImportError as error:
                raise _Refused(f"--runner: cannot import it to read its REQUIREMENTS: "
                               f"{error}") from None
            if found is None:
                raise _Refused("--venv needs --requirements (the runner module names no "
                               "REQUIREMENTS)")
            pins = found
        try:
            python = str(isolated.ensure_venv(args.venv, pins, say=_progress))
        except (OSError, subprocess.CalledProcessError) as error:
            raise _Refused(f"--venv: could not make {args.venv}: {error}") from None
    try:
        runner = isolated.IsolatedRunner(args.runner, python)
    except (OSError, RuntimeError) as error:
        raise _Refused(f"--runner: {error}") from None
    try:
        return _conform_run(args, runner)
    finally:
        runner.close()
        for address in dict.fromkeys(runner.outbound):
            _progress(f"conform: the runtime tried to reach {address} (refused)")


def _conform_run(args: argparse.Namespace, runner: Any) -> int:
    from . import conform

    scenarios = [s for s in conform.SCENARIOS
                 if not args.scenario or any(s.id.startswith(p) for p in args.scenario)]
    if not scenarios:
        raise _Refused(f"no scenario id starts with {' or '.join(args.scenario)}")
    modes = [m for m in conform.MODES if not args.mode or m.name in args.mode]
    if args.json is not None and not args.json:
        raise _Refused("a JSON path must not be empty")
    try:
        report = conform.run_suite(runner, scenarios=scenarios, modes=modes,
                                   examples=args.examples, timeout=float(args.timeout),
                                   progress=lambda row: _progress(
                                       f"conform: {row.scenario.id} [{row.mode.name}] "
                                       f"{row.verdict}"))
    except conform.NoModeSpoken as error:
        raise _Refused(f"--runner: {error}") from None
    if args.json is not None:
        _write(args.json, [report.to_json()])
    _say(report.table(evidence=args.evidence))
    return 0 if report.ok else 1


def _diagram(args: argparse.Namespace) -> int:
    if args.part is None:
        _say("agentturn diagram PART: choose a part: " + ", ".join(_PARTS), error=True)
        return 2
    from . import diagrams

    dot = args.format == "dot"
    if args.part == "stop-order":
        chart = diagrams.STOP_ORDER
        _say(diagrams.flowchart_dot(chart) if dot else diagrams.flowchart_mermaid(chart))
        return 0
    graph = diagrams.graph_of(args.part)
    if args.format == "caption":
        _say("\n".join(diagrams.caption(diagrams.main_view(graph))) if not args.full else "")
        return 0
    if args.full:
        _say(diagrams.dot(diagrams.full_view(graph)) if dot else graph.mermaid())
    else:
        view = diagrams.main_view(graph)
        _say(diagrams.dot(view) if dot else diagrams.mermaid(view))
    return 0


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "demo": _demo, "check": _check, "explain": _explain, "diagram": _diagram,
    "explore": _explore, "fuzz": _fuzz, "conform": _conform}


def main(argv: list[str] | None = None) -> int:
    """Run the ``agentturn`` command; return its exit code (see :data:`EXIT_CODES`)."""
    try:
        try:
            args = _parser().parse_args(argv)
        except SystemExit as done:  # --help and --version print and exit 0
            return int(done.code or 0)
        return _COMMANDS[args.command](args)
    except _Refused as refused:
        _say(str(refused), error=True, one_line=True)
        return 2
    finally:
        if "stdout" in _CLOSED:
            _silence_stdout()


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush is
    quiet too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
