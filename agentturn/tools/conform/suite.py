"""Running the scenarios on a runner, and the report with its evidence.

Theory of operation
-------------------
:func:`run_suite` starts one :class:`~.server.EngineServer`, then for each scenario and each
mode: not applicable when the runner does not speak the mode or the script cannot be said in
it; otherwise it scripts the server under a fresh model name, gives the runner the
:class:`~.protocol.Task` with fresh :class:`~.protocol.Tools`, waits for the
:class:`~.protocol.RunResult` (in a worker thread, bounded by ``timeout``: a runtime that hangs
fails its row instead of the suite), and judges what was observed.

A drawn scenario is a hypothesis property over scripts: each example is one run. Settings are
fixed (``derandomize``, no example database) so two runs of the suite draw the same scripts
and reach the same verdicts. When a run fails, hypothesis shrinks the script and replays the
smallest failing one last; the row keeps that replay's script and evidence, so the report shows
the simplest response that broke the runtime. A passing drawn row keeps its last example.

:class:`Report` holds the rows; :meth:`Report.table` is the text (a matrix of verdicts, then
each failure with its evidence), :meth:`Report.to_json` the whole record.
"""

from __future__ import annotations

import datetime
import itertools
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .protocol import MODES, Mode, Runner, RunResult, Task, Tools
from .scenarios import SCENARIOS, Check, Evidence, Scenario
from .server import EngineServer, Reply

__all__ = ["OUTPUT_LIMIT", "NoModeSpoken", "Report", "Row", "run_suite"]

#: The output limit every task asks for.
OUTPUT_LIMIT = 256

Verdict = Literal["pass", "fail", "n/a"]


@dataclass
class Row:
    """One scenario in one mode: its verdict and why."""

    scenario: Scenario
    mode: Mode
    verdict: Verdict
    checks: list[Check] = field(default_factory=list)
    evidence: Evidence | None = None
    #: Why the row is not applicable.
    reason: str = ""
    #: Drawn scenarios: how many runs hypothesis made (examples and shrinking).
    runs: int = 1

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "scenario": self.scenario.id, "requirements": list(self.scenario.requirements),
            "title": self.scenario.title, "mode": self.mode.name, "verdict": self.verdict,
            "checks": [c.to_dict() for c in self.checks]}
        if self.reason:
            data["reason"] = self.reason
        if self.scenario.draw is not None:
            data["drawn"] = {"runs": self.runs, "shrunk": self.verdict == "fail"}
        if self.evidence is not None:
            data["evidence"] = self.evidence.to_dict()
        return data


@dataclass
class Report:
    """Every row of a suite run."""

    runner: str
    rows: list[Row]
    seconds: float
    date: str

    @property
    def ok(self) -> bool:
        return all(row.verdict != "fail" for row in self.rows)

    def counts(self) -> dict[str, int]:
        return {v: sum(1 for r in self.rows if r.verdict == v) for v in ("pass", "fail", "n/a")}

    def to_json(self) -> str:
        from ... import __version__

        return json.dumps({"runner": self.runner, "agentturn": __version__, "date": self.date,
                           "seconds": round(self.seconds, 2), "summary": self.counts(),
                           "rows": [r.to_dict() for r in self.rows]},
                          ensure_ascii=False, indent=1)

    def table(self, evidence: bool = False) -> str:
        """The verdict matrix, then each failure with its evidence (``evidence``: every row's)."""
        modes = [m for m in MODES if any(r.mode == m for r in self.rows)]
        scenarios = list(dict.fromkeys(r.scenario.id for r in self.rows))
        cell = {(r.scenario.id, r.mode): r for r in self.rows}
        first = max([len("scenario"), *map(len, scenarios)])
        columns = [(m, max(len(m.name), 4)) for m in modes]

        def line(head: str, cells: list[str]) -> str:
            return "  ".join([head.ljust(first),
                              *(c.ljust(w) for c, (_, w) in zip(cells, columns, strict=True))]
                             ).rstrip()

        def verdict(scenario: str, mode: Mode) -> str:
            row = cell.get((scenario, mode))
            if row is None:
                return "-"
            return "FAIL" if row.verdict == "fail" else row.verdict  # a failure stands out

        lines = [f"agentturn conform: runner {self.runner}, {self.date}", "",
                 line("scenario", [m.name for m in modes])]
        lines += [line(s, [verdict(s, m) for m in modes]) for s in scenarios]
        counts = self.counts()
        lines += ["", f"{counts['pass']} pass, {counts['fail']} fail, {counts['n/a']} n/a "
                  f"in {self.seconds:.1f} s"]
        for row in self.rows:
            if row.verdict == "fail" or (evidence and row.evidence is not None):
                lines += ["", *_explain(row)]
        return "\n".join(lines)


def _explain(row: Row) -> list[str]:
    head = f"{row.verdict.upper()} {row.scenario.id} [{row.mode.name}]: {row.scenario.title}"
    lines = [head]
    for check in row.checks:
        mark = "ok  " if check.passed else "FAIL"
        lines.append(f"  {mark} {check.requirement}: {check.says}")
    if row.scenario.draw is not None and row.verdict == "fail":
        lines.append(f"  shrunk example after {row.runs} run(s):")
    evidence = row.evidence
    if evidence is None:
        return lines
    lines.append("  scripted:")
    lines += _capped([f"    {i}. {reply.describe(row.mode.api)}"
                      for i, reply in enumerate(evidence.script, 1)])
    lines.append(f"  requests received: {len(evidence.requests)}")
    lines += _capped([
        f"    {r.index + 1}. {r.path} stream={r.stream}"
        f"{', usage asked' if r.include_usage else ''} max_tokens={r.max_tokens} "
        f"messages={r.messages} -> {r.answer}" for r in evidence.requests])
    lines.append(f"  tools run: {len(evidence.tools)}")
    lines += _capped([
        f"    {t.seq + 1}. {t.name}({json.dumps(t.arguments, ensure_ascii=False)[:80]})"
        f"{' OVERLAPPING' if t.overlapping else ''}" for t in evidence.tools])
    result = evidence.result
    lines.append(f"  the caller got: success={result.success} outcome={result.outcome} "
                 f"finish_reason={result.finish_reason} text={_short(result.text)} "
                 f"error={_short(result.error)}")
    return lines


#: The most lines of one list the text report shows (the JSON has them all).
SHOWN = 8


def _capped(lines: list[str]) -> list[str]:
    if len(lines) <= SHOWN:
        return lines
    return [*lines[:SHOWN - 2], f"    ... {len(lines) - SHOWN + 1} more ...", lines[-1]]


def _short(text: str | None) -> str:
    if text is None:
        return "None"
    return repr(text if len(text) <= 80 else text[:79] + "…")


class NoModeSpoken(ValueError):
    """The runner speaks none of the selected modes: a report would be all n/a, and pass."""


class _Session:
    """One suite run's server, runner and settings."""

    def __init__(self, server: EngineServer, runner: Runner, timeout: float) -> None:
        self.server = server
        self.runner = runner
        self.timeout = timeout
        self._names = itertools.count(1)

    def run(self, scenario: Scenario, mode: Mode, script: list[Reply]) -> Evidence:
        model = f"conform-{next(self._names):04d}-{re.sub(r'[^A-Za-z0-9]+', '-', scenario.id)}"
        tools = Tools(delay=scenario.tool_delay)
        self.server.script(model, mode.api, script, OUTPUT_LIMIT, tools)
        task = Task(scenario=scenario.id, api=mode.api, stream=mode.stream,
                    base_url=self.server.base_url(mode.api), model=model,
                    max_tokens=OUTPUT_LIMIT, prompt=scenario.prompt,
                    tools_url=self.server.tools_url(model), timeout=self.timeout)
        started = time.monotonic()
        result = _bounded(lambda: self.runner.run(task, tools), self.timeout)
        seconds = time.monotonic() - started
        evidence = Evidence(script, self.server.requests(model), list(tools.records), result,
                            seconds, mode)
        self.server.forget(model)
        return evidence


def _bounded(run: Callable[[], RunResult], timeout: float) -> RunResult:
    """``run()`` in a worker thread; what it raised is what the caller got; a run that does
    not return within ``timeout`` is recorded as such (its thread is left to end alone)."""
    box: list[RunResult] = []

    def work() -> None:
        try:
            result = run()
            box.append(result if isinstance(result, RunResult) else RunResult(
                success=False, outcome="runner-error",
                error=f"the runner returned {type(result).__name__}, not a RunResult"))
        except BaseException as error:  # the runtime's exception is what its caller got
            box.append(RunResult.raised(error))

    thread = threading.Thread(target=work, name="conform-run", daemon=True)
    thread.start()
    thread.join(timeout)
    if not box:
        return RunResult(success=False, outcome="timeout",
                         error=f"the run did not return within {timeout:g} s")
    return box[0]


def _fixed(session: _Session, scenario: Scenario, mode: Mode, script: list[Reply]) -> Row:
    evidence = session.run(scenario, mode, script)
    checks = _judged(scenario, mode, script, evidence)
    return Row(scenario, mode, "pass" if all(c.passed for c in checks) else "fail", checks,
               evidence)


def _judged(scenario: Scenario, mode: Mode, script: list[Reply], evidence: Evidence
            ) -> list[Check]:
    checks = scenario.judge(mode, script, evidence)
    if evidence.result.outcome == "timeout":
        checks.append(Check(scenario.requirements[0], False, evidence.result.error or "timeout"))
    return checks


def _drawn(session: _Session, scenario: Scenario, mode: Mode, strategy: Any,
           examples: int) -> Row:
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings

    failures: list[tuple[Evidence, list[Check]]] = []
    passes: list[tuple[Evidence, list[Check]]] = []
    runs = 0

    @settings(max_examples=examples, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
              phases=(Phase.explicit, Phase.generate, Phase.shrink), report_multiple_bugs=False)
    @given(strategy)
    def holds(script: list[Reply]) -> None:
        nonlocal runs
        runs += 1
        evidence = session.run(scenario, mode, script)
        checks = _judged(scenario, mode, script, evidence)
        if all(c.passed for c in checks):
            passes.append((evidence, checks))
            return
        failures.append((evidence, checks))
        raise AssertionError("; ".join(c.says for c in checks if not c.passed))

    try:
        holds()
    except Exception:  # a failure (or a flaky one): the recorded runs tell which
        if not failures:
            raise
    if failures:
        # hypothesis replays the shrunk example last
        evidence, checks = failures[-1]
        return Row(scenario, mode, "fail", checks, evidence, runs=runs)
    evidence, checks = passes[-1]
    return Row(scenario, mode, "pass", checks, evidence, runs=runs)


def run_suite(runner: Runner, *, scenarios: Iterable[Scenario] = SCENARIOS,
              modes: Sequence[Mode] = MODES, examples: int = 6, timeout: float = 30.0,
              progress: Callable[[Row], None] | None = None) -> Report:
    """Run ``scenarios`` on ``runner`` in ``modes``; ``examples``: runs per drawn scenario
    before shrinking. Raises :class:`NoModeSpoken` when the runner speaks none of ``modes``
    (nothing would run, and an all-n/a report would look like a pass)."""
    supported = set(runner.modes)
    if not supported & set(modes):
        raise NoModeSpoken(
            f"the runner {runner.name} speaks none of the modes selected "
            f"({', '.join(m.name for m in modes) or 'none'}); it speaks "
            f"{', '.join(m.name for m in runner.modes) or 'none'}: every row would be n/a")
    started = time.monotonic()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows: list[Row] = []
    with EngineServer() as server:
        session = _Session(server, runner, timeout)
        for scenario in scenarios:
            for mode in modes:
                row = _row(session, scenario, mode, supported, examples)
                rows.append(row)
                if progress is not None:
                    progress(row)
    return Report(runner.name, rows, time.monotonic() - started, date)


def _row(session: _Session, scenario: Scenario, mode: Mode, supported: set[Mode],
         examples: int) -> Row:
    if mode not in supported:
        return Row(scenario, mode, "n/a", reason=f"the runner does not speak {mode.name}")
    if scenario.draw is not None:
        strategy = scenario.draw(mode)
        if strategy is None:
            return Row(scenario, mode, "n/a", reason=scenario.not_applicable)
        return _drawn(session, scenario, mode, strategy, examples)
    assert scenario.script is not None
    script = scenario.script(mode)
    if script is None:
        return Row(scenario, mode, "n/a", reason=scenario.not_applicable)
    return _fixed(session, scenario, mode, script)
