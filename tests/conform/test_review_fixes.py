"""The outside review of issue 35: each finding, with a runner or a probe that showed it.

* every call reaches the record, raw arguments included, in-process and over the pipe;
* TL-1 runs more rounds than every default cap the issue names (10 rounds, 50 requests, 20
  steps);
* TL-4 judges overlap by [start, end] intervals: calls run concurrently, staggered, fail;
* a runner that speaks none of the selected modes is refused, not passed with all n/a;
* a one-parameter call cut mid-JSON is a scenario; TL-6's retry must tell the model;
* the child's guard: only exact loopback, every lookup and datagram, no child process.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("anyio")
pytest.importorskip("openai")
pytest.importorskip("anthropic")

from bad_runners import (
    NaiveRunner,
    RawArgs,
    RawAsParameter,
    SilentRetry,
    StaggeredParallel,
)

from agentturn.tools import cli
from agentturn.tools.conform import (
    SCENARIOS,
    EngineServer,
    Mode,
    NoModeSpoken,
    RunnerLoadError,
    Tools,
    load_runner,
    run_suite,
)
from agentturn.tools.conform.isolated import HttpTools, IsolatedRunner
from agentturn.tools.conform.scenarios import ROUNDS

HERE = str(pathlib.Path(__file__).parent)
NS = (Mode("openai-chat", False),)


def _only(*ids: str) -> list[object]:
    return [s for s in SCENARIOS if s.id in ids]


# --- 1. raw arguments reach the record in both ways of running --------------------------------


@pytest.mark.req("TL-9")
def test_a_call_run_with_raw_text_fails_tl_9_in_process_and_over_the_pipe() -> None:
    scenarios = _only("TL-9/length-cut-args")
    inside = run_suite(RawArgs(), scenarios=scenarios, modes=NS)
    with IsolatedRunner("bad_runners:RawArgs", sys.executable, path=[HERE]) as runner:
        outside = run_suite(runner, scenarios=scenarios, modes=NS)
    for report in (inside, outside):
        (row,) = report.rows
        assert row.verdict == "fail", report.table()
        assert row.evidence is not None
        (record,) = row.evidence.tools
        assert record.name == "write_file" and isinstance(record.arguments, str)
        assert record.arguments.startswith('{"path": "report.md"')
    assert inside.rows[0].evidence.tools[0].arguments == (  # type: ignore[union-attr]
        outside.rows[0].evidence.tools[0].arguments)  # type: ignore[union-attr]


def test_http_tools_record_every_call_whatever_its_arguments() -> None:
    tools = Tools(delay=0)
    with EngineServer() as server:
        server.script("m", "openai-chat", [], 16, tools)
        http = HttpTools(server.tools_url("m"))
        outputs = [http.call("write_file", '{"path": "a.txt", "cont'),  # cut JSON
                   http.call("read_file", "[1, 2]"),                       # JSON, not an object
                   http.call("read_file", {"path": {1, 2}}),               # not JSON-able
                   http.call("write_file", {"path": "b.txt", "content": "x"})]
    assert [r.arguments for r in tools.records] == [
        '{"path": "a.txt", "cont', "[1, 2]", repr({"path": {1, 2}}),
        {"path": "b.txt", "content": "x"}]
    assert [o.startswith("error:") for o in outputs] == [True, True, True, False]


# --- 2. TL-1 beyond every default cap ---------------------------------------------------------


@pytest.mark.req("TL-1")
def test_tl_1_exceeds_every_default_cap_the_issue_names() -> None:
    assert max(10, 20, 50) < ROUNDS
    scenarios = [s for s in SCENARIOS if s.id.startswith("TL-1/")]
    capped = run_suite(NaiveRunner(round_cap=50), scenarios=scenarios, modes=NS)
    assert [r.verdict for r in capped.rows] == ["fail"], capped.table()
    assert "50 call(s) ran" in capped.table()
    uncapped = run_suite(NaiveRunner(round_cap=None), scenarios=scenarios, modes=NS)
    assert uncapped.ok, uncapped.table()


# --- 3. TL-4 by intervals ---------------------------------------------------------------------


@pytest.mark.req("TL-4")
def test_calls_run_concurrently_fail_tl_4_even_when_staggered() -> None:
    scenarios = [s for s in SCENARIOS if s.id.startswith("TL-4/")]
    staggered = run_suite(StaggeredParallel(), scenarios=scenarios, modes=NS, examples=3)
    assert {r.scenario.id: r.verdict for r in staggered.rows} == {
        "TL-4/calls-in-order": "fail", "TL-4/drawn": "fail"}, staggered.table()
    assert "OVERLAPPING" in staggered.table()
    sequential = run_suite(NaiveRunner(), scenarios=scenarios, modes=NS, examples=3)
    assert sequential.ok, sequential.table()


def test_the_tools_list_calls_in_start_order_and_mark_overlaps() -> None:
    import threading
    import time

    tools = Tools(delay=0.05)
    slow = threading.Thread(target=tools.call, args=("write_file", {"path": "a", "content": "1"}))
    slow.start()
    time.sleep(0.01)
    tools.call("read_file", {"path": "a"})  # starts second, ends first
    slow.join()
    assert [(r.seq, r.name, r.overlapping) for r in tools.records] == [
        (0, "write_file", True), (1, "read_file", True)]
    tools2 = Tools(delay=0.01)
    tools2.call("write_file", {"path": "a", "content": "1"})
    tools2.call("read_file", {"path": "a"})
    assert not any(r.overlapping for r in tools2.records)


# --- 4. no mode spoken ------------------------------------------------------------------------


def test_a_runner_that_speaks_no_selected_mode_is_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(RunnerLoadError, match="speaks no mode"):
        load_runner("bad_runners:NoModes")
    assert cli.main(["conform", "--runner", "bad_runners:NoModes", "--scenario", "TL-9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "speaks no mode" in err
    with pytest.raises(NoModeSpoken, match="speaks none of the modes selected"):
        run_suite(NaiveRunner(), scenarios=_only("TL-7/empty-answer"),
                  modes=[Mode("anthropic-messages", True)])
    # the same from the command line: one line, exit 2 (not a traceback)
    assert cli.main(["conform", "--runner", "bad_runners:NaiveRunner", "--scenario",
                     "TL-7/empty-answer", "--mode", "anthropic-messages-stream"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "speaks none of the modes selected" in err
    with pytest.raises(RuntimeError, match="speaks no mode"):
        IsolatedRunner("bad_runners:NoModes", sys.executable, path=[HERE])


# --- one-parameter calls, TL-6's corrective retry, TL-7 whitespace ----------------------------


@pytest.mark.req("TL-9")
def test_a_cut_one_parameter_call_whose_raw_text_becomes_the_parameter_fails() -> None:
    scenarios = [s for s in SCENARIOS if s.id.startswith("TL-9/one-param-")]
    assert len(scenarios) == 2
    report = run_suite(RawAsParameter(), scenarios=scenarios, modes=NS)
    assert [r.verdict for r in report.rows] == ["fail", "fail"], report.table()
    ran = report.rows[0].evidence.tools  # type: ignore[union-attr]
    assert [(t.name, t.arguments) for t in ran] == [
        ("read_file", {"path": '{"path": "notes/2026/summ'})]


@pytest.mark.req("TL-6")
def test_a_silent_resend_is_not_a_corrective_retry() -> None:
    scenarios = [s for s in SCENARIOS if s.id.startswith("TL-6/")]
    report = run_suite(SilentRetry(), scenarios=scenarios, modes=NS)
    assert [r.verdict for r in report.rows] == ["fail", "fail", "fail"], report.table()
    assert "not a corrective retry" in report.table()


@pytest.mark.req("TL-7")
def test_a_whitespace_answer_taken_as_success_fails_tl_7() -> None:
    report = run_suite(NaiveRunner(), scenarios=_only("TL-7/whitespace-answer"), modes=NS)
    assert [r.verdict for r in report.rows] == ["fail"]


def test_the_child_keeps_the_users_pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", HERE)
    with IsolatedRunner("bad_runners:RawArgs", sys.executable) as runner:
        assert runner.name == "raw-args"


# --- 7. the child's guard ---------------------------------------------------------------------

_PROBE = textwrap.dedent('''
    import os, socket, subprocess, sys
    from agentturn.tools.conform.isolated import _guard
    refused = []
    _guard(refused)
    def tried(what, act):
        try:
            act()
        except OSError as error:
            print(what, "refused" if "agentturn conform" in str(error) else "error")
        else:
            print(what, "allowed")
    audit = sys.audit
    tried("getaddrinfo 127.0.0.1", lambda: audit("socket.getaddrinfo", "127.0.0.1", 80, 0, 0, 0))
    tried("getaddrinfo 127.9.9.9", lambda: audit("socket.getaddrinfo", "127.9.9.9", 80, 0, 0, 0))
    tried("getaddrinfo localhost", lambda: audit("socket.getaddrinfo", "localhost", 80, 0, 0, 0))
    tried("getaddrinfo ::1", lambda: audit("socket.getaddrinfo", "::1", 80, 0, 0, 0))
    tried("getaddrinfo 127.attacker.example",
          lambda: audit("socket.getaddrinfo", "127.attacker.example", 80, 0, 0, 0))
    tried("getaddrinfo localhost.attacker.example",
          lambda: audit("socket.getaddrinfo", "localhost.attacker.example", 80, 0, 0, 0))
    tried("getaddrinfo ::1.example",
          lambda: audit("socket.getaddrinfo", "::1.example", 80, 0, 0, 0))
    tried("gethostbyname", lambda: socket.gethostbyname("example.invalid"))
    tried("gethostbyname_ex", lambda: socket.gethostbyname_ex("example.invalid"))
    tried("gethostbyaddr", lambda: socket.gethostbyaddr("192.0.2.1"))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tried("sendto", lambda: udp.sendto(b"x", ("192.0.2.1", 9)))
    tried("sendmsg", lambda: udp.sendmsg([b"x"], [], 0, ("192.0.2.1", 9)))
    tried("udp connect", lambda: udp.connect(("192.0.2.1", 9)))
    tried("sendto loopback", lambda: udp.sendto(b"x", ("127.0.0.1", 9)))
    tried("subprocess.Popen", lambda: subprocess.Popen(["true"]))
    tried("os.system", lambda: os.system("true"))
    tried("os.execv", lambda: os.execv("/bin/true", ["true"]))
    tried("os.posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))
    print("recorded", len(refused))
''')


def test_the_guard_allows_exact_loopback_only_and_no_child_process() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    said = dict(line.rsplit(" ", 1) for line in out.strip().splitlines())
    allowed = {"getaddrinfo 127.0.0.1", "getaddrinfo 127.9.9.9", "getaddrinfo localhost",
               "getaddrinfo ::1", "sendto loopback"}
    assert {k for k, v in said.items() if v == "allowed"} == allowed, out
    refused = set(said) - allowed - {"recorded"}
    assert all(said[k] == "refused" for k in refused), out
    assert int(said["recorded"]) == len(refused)
