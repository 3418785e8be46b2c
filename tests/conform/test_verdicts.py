"""The verdicts: agentturn's host on the driver passes every scenario, and each scenario can
fail, on the right rows, for runners that break its rule (``bad_runners``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("anyio")
pytest.importorskip("openai")
pytest.importorskip("anthropic")

from bad_runners import LimitBlindRunner, NaiveRunner

from agentturn.tools.conform import MODES, SCENARIOS, Mode, Report, run_suite
from agentturn.tools.conform.runners.agentturn_driver import Runner
from agentturn.tools.conform.scenarios import ROUNDS

OPENAI = (Mode("openai-chat", True), Mode("openai-chat", False))


@pytest.fixture(scope="module")
def reference() -> Report:
    return run_suite(Runner(), examples=3)


def _verdicts(report: Report) -> dict[tuple[str, str], str]:
    return {(r.scenario.id, r.mode.name): r.verdict for r in report.rows}


def _failing(report: Report) -> set[str]:
    return {r.scenario.id for r in report.rows if r.verdict == "fail"}


@pytest.mark.req("TL-1", "TL-4", "TL-6", "TL-7", "TL-9", "TL-10")
def test_the_driver_host_passes_every_scenario(reference: Report) -> None:
    assert reference.ok, reference.table()
    not_applicable = {(r.scenario.id, r.mode.name) for r in reference.rows
                      if r.verdict == "n/a"}
    # only what a non-streamed Anthropic reply cannot say (cut or malformed arguments), and
    # the unclosed tool block, which only an Anthropic stream can say
    assert not_applicable == {
        (s, "anthropic-messages") for s in ("TL-6/one-retry", "TL-6/no-second-retry",
                                            "TL-6/allowance-resets", "TL-9/length-cut-args",
                                            "TL-9/mislabelled-cut-args",
                                            "TL-9/one-param-length-cut",
                                            "TL-9/one-param-mislabelled-cut",
                                            "TL-9/unclosed-block")} | {
        ("TL-9/unclosed-block", m) for m in ("openai-chat-stream", "openai-chat")}
    assert len(reference.rows) == len(SCENARIOS) * len(MODES)


def test_the_report_keeps_the_evidence(reference: Report) -> None:
    data = json.loads(reference.to_json())
    assert data["runner"] == "agentturn-driver" and data["summary"]["fail"] == 0
    row = next(r for r in data["rows"] if r["scenario"] == "TL-9/mislabelled-complete-args"
               and r["mode"] == "openai-chat-stream")
    evidence = row["evidence"]
    assert evidence["tools"] == []
    assert evidence["requests"][0]["include_usage"] is True
    assert evidence["requests"][0]["max_tokens"] == 256
    assert evidence["result"] == {"success": False, "text": "Writing the report.",
                                  "outcome": "output_limit", "finish_reason": "tool_calls",
                                  "error": evidence["result"]["error"]}
    assert all(c["passed"] for c in row["checks"])
    rounds = next(r for r in data["rows"] if r["scenario"] == f"TL-1/{ROUNDS}-rounds")
    assert len(rounds["evidence"]["requests"]) == ROUNDS + 1
    assert len(rounds["evidence"]["tools"]) == ROUNDS
    table = reference.table(evidence=True)
    assert "TL-9/drawn" in table and "the caller got: success=False" in table


@pytest.fixture(scope="module")
def naive() -> Report:
    return run_suite(NaiveRunner(), examples=3)  # Anthropic rows: n/a, it does not speak it


@pytest.mark.req("TL-1", "TL-6", "TL-7", "TL-9", "TL-10")
def test_a_naive_loop_fails_the_rows_it_breaks(naive: Report) -> None:
    verdicts = _verdicts(naive)
    assert _failing(naive) == {
        f"TL-1/{ROUNDS}-rounds", "TL-6/no-second-retry", "TL-7/empty-answer",
        "TL-7/whitespace-answer", "TL-9/cut-answer", "TL-10/filtered-answer",
        "TL-9/length-complete-args", "TL-9/length-cut-args", "TL-9/mislabelled-complete-args",
        "TL-9/mislabelled-cut-args", "TL-9/one-param-length-cut",
        "TL-9/one-param-mislabelled-cut", "TL-9/drawn"}
    for mode in OPENAI:  # both modes fail alike; Anthropic it does not speak
        assert {s for (s, m), v in verdicts.items() if m == mode.name and v == "fail"} == (
            _failing(naive))
    assert {v for (_, m), v in verdicts.items() if m.startswith("anthropic")} == {"n/a"}
    table = naive.table()
    assert f"10 call(s) ran, {ROUNDS} scripted" in table
    assert "3 request(s), expected exactly 2" in table


@pytest.mark.req("TL-9")
def test_a_failing_drawn_row_keeps_the_shrunk_example(naive: Report) -> None:
    row = next(r for r in naive.rows if r.scenario.id == "TL-9/drawn")
    assert row.verdict == "fail" and row.evidence is not None
    cut, _finish = row.evidence.script
    # shrunk: one call, its arguments whole, labelled tool_calls at the limit, no text
    assert len(cut.calls) == 1 and cut.calls[0].parsed is not None
    assert (cut.finish, cut.at_limit, cut.text) == ("tool_calls", True, "")
    assert [t.name for t in row.evidence.tools] == ["write_file"]
    assert "shrunk example" in naive.table()
    assert row.to_dict()["drawn"]["shrunk"] is True


@pytest.mark.req("TL-4")
def test_calls_run_together_or_out_of_order_fail_tl_4() -> None:
    scenarios = [s for s in SCENARIOS if s.id.startswith("TL-4")]
    parallel = run_suite(NaiveRunner(parallel=True), scenarios=scenarios, modes=OPENAI[:1],
                         examples=3)
    assert _failing(parallel) == {"TL-4/calls-in-order", "TL-4/drawn"}
    assert "started while another ran" in parallel.table()
    reverse = run_suite(NaiveRunner(reverse=True), scenarios=scenarios, modes=OPENAI[1:],
                        examples=3)
    assert _failing(reverse) == {"TL-4/calls-in-order", "TL-4/drawn"}
    assert "not in the model's order" in reverse.table()


@pytest.mark.req("TL-1")
def test_a_round_cap_above_the_rounds_passes_tl_1() -> None:
    # the row fails for a cap, not for any difference: a cap above ROUNDS lets them through
    scenarios = [s for s in SCENARIOS if s.id == f"TL-1/{ROUNDS}-rounds"]
    report = run_suite(NaiveRunner(round_cap=ROUNDS + 10), scenarios=scenarios,
                       modes=OPENAI[1:])
    assert report.ok


@pytest.mark.req("TL-9")
def test_a_host_that_trusts_the_label_fails_only_the_mislabelled_rows() -> None:
    scenarios = [s for s in SCENARIOS if s.id.startswith("TL-9/")]
    report = run_suite(LimitBlindRunner(), scenarios=scenarios, modes=MODES, examples=4)
    verdicts = _verdicts(report)
    for mode in MODES:
        assert verdicts[("TL-9/length-complete-args", mode.name)] == "pass"
        assert verdicts[("TL-9/mislabelled-complete-args", mode.name)] == "fail"
        assert verdicts[("TL-9/drawn", mode.name)] == "fail"
    shrunk = next(r for r in report.rows if r.scenario.id == "TL-9/drawn")
    assert shrunk.evidence is not None and shrunk.evidence.script[0].finish == "tool_calls"


def test_a_runner_that_hangs_fails_its_row_and_the_suite_goes_on() -> None:
    class Hanging:
        name = "hanging"
        modes = OPENAI[:1]

        def run(self, task: object, tools: object) -> object:
            import time
            time.sleep(3)
            raise AssertionError("never seen")

    scenarios = [s for s in SCENARIOS if s.id == "TL-7/empty-answer"]
    report = run_suite(Hanging(), scenarios=scenarios, modes=OPENAI[:1], timeout=0.2)
    (row,) = report.rows
    assert row.verdict == "fail" and row.evidence is not None
    assert row.evidence.result.outcome == "timeout"
