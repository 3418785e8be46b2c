"""Runners in their own interpreter (``agentturn conform --python/--venv``), and the third-party
runtimes measured in their own venvs, before and after agentturn's adapters.

The shim's tests run in this interpreter as the "other" one (``sys.executable``): the reference
runner over the pipe, a runner that prints to stdout, one that hangs, one that dies, one that
tries to reach beyond 127.0.0.1 (refused before any packet: the audit hook raises first).

The runtime tests need each runtime's venv, ``.conform-envs/<runtime>`` (made by ``agentturn
conform --venv``). Without it they skip, except where ``AGENTTURN_CONFORM_RUNTIMES=required``
(``.ci/run``'s step that makes the venvs and then runs these tests), where a missing venv
fails: the README's test command, which makes no venv of a framework, skips them.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

from agentturn.tools import cli
from agentturn.tools.conform import (
    SCENARIOS,
    Mode,
    Report,
    RunResult,
    Task,
    Tools,
    run_suite,
)
from agentturn.tools.conform.isolated import IsolatedRunner, ensure_venv, requirements_of

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = str(pathlib.Path(__file__).parent)
OPENAI = (Mode("openai-chat", True), Mode("openai-chat", False))


# --- runners the child loads from this module (HERE is on its path) -------------------------


class Chatty:
    """Prints to stdout, as frameworks do: the protocol must not see it."""

    name = "chatty"
    modes = OPENAI

    def run(self, task: Task, tools: Tools) -> RunResult:
        print("hello from the runtime")
        os.write(1, b"raw bytes on fd 1\n")
        return RunResult(success=True, text="hi")


class Hangs:
    name = "hangs"
    modes = OPENAI

    def run(self, task: Task, tools: Tools) -> RunResult:
        time.sleep(60)
        return RunResult(success=True)


class Dies:
    name = "dies"
    modes = OPENAI

    def run(self, task: Task, tools: Tools) -> RunResult:
        sys.stderr.write("the runtime fell over\n")
        sys.stderr.flush()
        os._exit(3)


class ReachesOut:
    """Tries a name lookup beyond loopback (refused by the child's audit hook before it is
    made), then runs one tool over HTTP."""

    name = "reaches-out"
    modes = OPENAI

    def run(self, task: Task, tools: Tools) -> RunResult:
        try:
            socket.getaddrinfo("telemetry.example.invalid", 443)
            reached = "looked up"
        except OSError as error:
            reached = str(error)
        output = tools.call("write_file", {"path": "a.txt", "content": "x"})
        return RunResult(success=True, text=f"{reached} | {output}")


#: The programs a child tried to start, refused by its guard, that no runtime needs: the
#: openai SDK's platform headers ask ``uname -p`` (``platform.processor``), trio names its
#: threads after ``ctypes.util.find_library("pthread")`` (``ldconfig``, then ``gcc``/``ld``);
#: each does without when refused.
HARMLESS = ("'uname'", "'/sbin/ldconfig'", "'/usr/bin/gcc'", "'ld'")


def _only_harmless(refused: list[str]) -> None:
    """Nothing went beyond loopback, and no program but the harmless ones was tried."""
    assert [a for a in refused if a.startswith("socket.")] == [], refused
    assert all(a.startswith("subprocess.Popen") and any(h in a for h in HARMLESS)
               for a in refused), refused


def _task(tools_url: str = "http://127.0.0.1:9/conform/tools/none", timeout: float = 30.0
          ) -> Task:
    return Task(scenario="unit", api="openai-chat", stream=False,
                base_url="http://127.0.0.1:9/v1", model="m", max_tokens=16, prompt="p",
                tools_url=tools_url, timeout=timeout)


@pytest.mark.req("TL-9")
def test_the_reference_runner_passes_over_the_pipe_with_http_tools() -> None:
    spec = "agentturn.tools.conform.runners.agentturn_driver:Runner"
    scenarios = [s for s in SCENARIOS if s.id.startswith("TL-9/") and s.draw is None]
    with IsolatedRunner(spec, sys.executable) as runner:
        assert runner.name == "agentturn-driver"
        report = run_suite(runner, scenarios=scenarios, modes=OPENAI, timeout=30)
        assert report.ok, report.table()
        _only_harmless(runner.outbound)
    # the calls ran in the child and were recorded here, through the server
    complete = [r for r in report.rows if r.scenario.id == "TL-9/length-complete-args"]
    assert complete and all(r.evidence is not None and not r.evidence.tools for r in complete)


def test_what_the_runtime_prints_never_reaches_the_protocol() -> None:
    with IsolatedRunner("test_runtimes:Chatty", sys.executable, path=[HERE]) as runner:
        assert runner.run(_task(), Tools()) == RunResult(success=True, text="hi")
        assert runner.run(_task(), Tools()) == RunResult(success=True, text="hi")


def test_a_hanging_run_times_out_and_the_next_run_gets_a_new_child() -> None:
    with IsolatedRunner("test_runtimes:Hangs", sys.executable, path=[HERE]) as runner:
        first = runner._proc
        result = runner.run(_task(timeout=0.5), Tools())
        assert (result.success, result.outcome) == (False, "timeout")
        assert first is not None and first.poll() is not None  # ended, by its handle


def test_a_child_that_dies_is_a_failed_run_with_its_last_words() -> None:
    with IsolatedRunner("test_runtimes:Dies", sys.executable, path=[HERE]) as runner:
        result = runner.run(_task(), Tools())
        assert (result.success, result.outcome) == (False, "runner-died")
        assert "the runtime fell over" in (result.error or "")


def test_nothing_beyond_loopback_and_the_tools_run_over_http() -> None:
    from agentturn.tools.conform import EngineServer

    tools = Tools()
    with EngineServer() as server, IsolatedRunner("test_runtimes:ReachesOut", sys.executable,
                                                  path=[HERE]) as runner:
        server.script("m", "openai-chat", [], 16, tools)
        result = runner.run(_task(server.tools_url("m")), tools)
    assert result.text is not None and "beyond 127.0.0.1" in result.text
    assert result.text.endswith("wrote a.txt (1 characters)")
    assert runner.outbound == ["socket.getaddrinfo telemetry.example.invalid"]
    assert [(r.name, r.arguments) for r in tools.records] == [
        ("write_file", {"path": "a.txt", "content": "x"})]


def test_a_runner_that_cannot_load_is_refused_at_start() -> None:
    with pytest.raises(RuntimeError, match="no_such_module"):
        IsolatedRunner("no_such_module:Runner", sys.executable)


def test_a_venv_whose_requirements_are_unchanged_is_reused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    pins = ["example-pin==1.0"]
    stamp = tmp_path / "conform-requirements.txt"
    from agentturn.tools.conform.isolated import _own_dependencies

    stamp.write_text("\n".join([*pins, *_own_dependencies()]) + "\n")
    said: list[str] = []
    assert ensure_venv(tmp_path, pins, say=said.append) == tmp_path.resolve() / "bin" / "python"
    assert said == []  # no install was started


def test_the_cli_runs_a_runner_in_another_interpreter(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code = cli.main(["conform", "--python", sys.executable, "--scenario",
                     "TL-9/length-complete", "--mode", "openai-chat"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert "1 pass, 0 fail" in out.out


@pytest.mark.parametrize("argv, says", [
    (["--requirements", "r.txt"], "--requirements goes with --venv"),
    (["--venv", "x"], "names no REQUIREMENTS"),
    (["--python", "/no/such/python"], "--runner:"),
])
def test_the_cli_refuses_what_it_cannot_isolate(argv: list[str], says: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["conform", *argv]) == 2
    assert says in capsys.readouterr().err


def test_each_runtime_runner_names_its_pins_without_loading_its_framework() -> None:
    code = ("import sys\n"
            "from agentturn.tools.conform.isolated import requirements_of\n"
            "for rt in ('openai_agents', 'pydantic_ai', 'smolagents', 'langgraph'):\n"
            "    pins = requirements_of(f'agentturn.tools.conform.runners.{rt}:Runner')\n"
            "    assert pins and all('==' in p for p in pins), pins\n"
            "print(sorted(m for m in ('agents', 'pydantic_ai', 'smolagents', 'langgraph',"
            " 'langchain_core') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
    assert requirements_of("agentturn.tools.conform.runners.agentturn_driver:Runner") is None


# --- the runtimes, each in its own venv -------------------------------------------------------

#: runtime -> (runner, has an adapter)
RUNTIMES = {"openai_agents": True, "pydantic_ai": True, "smolagents": False, "langgraph": False}
#: The rows the adapters are for (TL-7, TL-9, TL-10), the drawn one included.
GUARDED = ("TL-7/", "TL-9/", "TL-10/")


def _venv(runtime: str) -> pathlib.Path:
    python = ROOT / ".conform-envs" / runtime / "bin" / "python"
    if not python.exists():
        if os.environ.get("AGENTTURN_CONFORM_RUNTIMES") == "required":
            pytest.fail(f"{python} is missing: .ci/run makes it with agentturn conform --venv")
        pytest.skip(f"no venv for {runtime} (agentturn conform --venv .conform-envs/{runtime})")
    return python


def _rows(runtime: str, runner: str, examples: int = 3) -> dict[tuple[str, str], str]:
    spec = f"agentturn.tools.conform.runners.{runtime}:{runner}"
    scenarios = [s for s in SCENARIOS if s.id.startswith(GUARDED)]
    with IsolatedRunner(spec, _venv(runtime)) as isolated:
        report = run_suite(isolated, scenarios=scenarios, examples=examples, timeout=30)
        _only_harmless(isolated.outbound)
    _EVIDENCE[(runtime, runner)] = report
    return {(r.scenario.id, r.mode.name): r.verdict for r in report.rows}


_EVIDENCE: dict[tuple[str, str], Report] = {}


@pytest.mark.req("TL-9")
@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_runtime_as_shipped_runs_a_call_from_a_cut_response(runtime: str) -> None:
    rows = _rows(runtime, "Runner")
    for mode in ("openai-chat-stream", "openai-chat"):
        assert rows[("TL-9/length-complete-args", mode)] == "fail"
        assert rows[("TL-9/mislabelled-complete-args", mode)] == "fail"
        assert rows[("TL-9/one-param-length-cut", mode)] == "fail"


@pytest.mark.req("TL-9")
@pytest.mark.parametrize("runtime, mode, path", [
    # smolagents: the raw cut JSON becomes the one parameter, not streamed or streamed
    ("smolagents", "openai-chat", '{"path": "notes/2026/summ'),
    ("smolagents", "openai-chat-stream", '{"path": "notes/2026/summ'),
    # LangGraph's streamed path repairs the cut JSON and runs the repaired call
    ("langgraph", "openai-chat-stream", "notes/2026/summ"),
    ("langgraph", "anthropic-messages-stream", "notes/2026/summ"),
])
def test_a_cut_one_parameter_call_runs_in_smolagents_and_langgraph(
        runtime: str, mode: str, path: str) -> None:
    spec = f"agentturn.tools.conform.runners.{runtime}:Runner"
    scenarios = [s for s in SCENARIOS if s.id == "TL-9/one-param-length-cut"]
    with IsolatedRunner(spec, _venv(runtime)) as isolated:
        report = run_suite(isolated, scenarios=scenarios, modes=[Mode.parse(mode)])
    (row,) = report.rows
    assert row.verdict == "fail" and row.evidence is not None
    assert [(t.name, t.arguments) for t in row.evidence.tools] == [
        ("read_file", {"path": path})]


@pytest.mark.req("TL-7", "TL-9", "TL-10")
@pytest.mark.parametrize("runtime", sorted(r for r, adapted in RUNTIMES.items() if adapted))
def test_the_adapter_turns_the_cut_empty_and_filtered_rows_to_pass(runtime: str) -> None:
    rows = _rows(runtime, "AdaptedRunner")
    # pydantic-ai shows no sign of a streamed Anthropic tool block that never closed (its
    # adapter page says so): that one row still fails, with the call run
    blind = {("TL-9/unclosed-block", "anthropic-messages-stream")} if (
        runtime == "pydantic_ai") else set()
    assert {k for k, v in rows.items() if v == "fail"} == blind, rows
    assert sum(v == "pass" for v in rows.values()) >= 20


@pytest.mark.req("TL-9")
def test_the_openai_agents_adapter_refuses_a_name_and_a_client_it_cannot_hook() -> None:
    code = ("import openai, agents\n"
            "from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel\n"
            "from agentturn.integrations.openai_agents import guarded\n"
            "for bad in ('gpt-4.1', object()):\n"
            "    try:\n"
            "        guarded(bad)\n"
            "    except TypeError as error:\n"
            "        print('refused:', error)\n"
            "model = OpenAIChatCompletionsModel(model='m', openai_client=openai.AsyncOpenAI("
            "api_key='x', base_url='http://127.0.0.1:9/v1'))\n"
            "guarded(model)\n"
            "print('hooked')\n"
            "model._client = type('Moved', (), {})()  # the private name is gone\n"
            "try:\n"
            "    guarded(model)\n"
            "except RuntimeError as error:\n"
            "    print('loud:', error)\n")
    out = subprocess.run([str(_venv("openai_agents")), "-c", code], capture_output=True,
                         text=True, timeout=120, cwd=_agentturn_path(),
                         env={**os.environ, "PYTHONPATH": _agentturn_path()})
    lines = out.stdout.splitlines()
    assert len(lines) == 4, out.stdout + out.stderr
    assert lines[0].startswith("refused: guarded('gpt-4.1'): pass an agents Model")
    assert lines[1].startswith("refused: guarded(...) takes an agents Model")
    assert lines[2] == "hooked"
    assert lines[3].startswith("loud: ") and "checked on openai 3.63.0" in lines[3]


def _agentturn_path() -> str:
    """A folder that holds only agentturn (as the shim gives its child)."""
    import tempfile

    folder = tempfile.mkdtemp(prefix="agentturn-path-")
    os.symlink(ROOT / "agentturn", os.path.join(folder, "agentturn"))
    return folder
