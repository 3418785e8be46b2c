"""The runner protocol: plain data both ways, a loader by dotted path, and a suite that
``import agentturn`` never loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentturn.tools.conform import (
    MODES,
    SCENARIOS,
    RunnerLoadError,
    RunResult,
    Task,
    Tools,
    load_runner,
)
from agentturn.tools.conform.protocol import Mode


def test_import_agentturn_never_loads_the_suite() -> None:
    code = ("import sys, agentturn, agentturn.tools.cli; "
            "print(sorted(m for m in sys.modules if 'conform' in m or m == 'hypothesis'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_the_suite_loads_no_runtime_and_no_hypothesis_until_it_needs_them() -> None:
    code = ("import sys, agentturn.tools.conform; "
            "print(sorted(m for m in ('openai', 'anthropic', 'hypothesis', 'anyio') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_task_and_result_survive_json() -> None:
    task = Task(scenario="TL-9/drawn", api="anthropic-messages", stream=True,
                base_url="http://127.0.0.1:1", model="m", max_tokens=256, prompt="p",
                tools_url="http://127.0.0.1:1/conform/tools/m")
    assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task
    result = RunResult(success=False, text="", outcome="output_limit", finish_reason="length",
                       error="cut")
    assert RunResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert RunResult.raised(ValueError("boom")) == RunResult(
        success=False, outcome="ValueError", error="boom")


def test_modes_and_scenario_ids() -> None:
    from agentturn.tools import cli

    assert tuple(m.name for m in MODES) == cli._CONFORM_MODES
    assert Mode.parse("openai-chat-stream") == Mode("openai-chat", True)
    with pytest.raises(ValueError):
        Mode.parse("gemini")
    ids = [s.id for s in SCENARIOS]
    assert len(ids) == len(set(ids))
    assert all(s.id.split("/")[0] in s.requirements for s in SCENARIOS)
    for required in ("TL-1", "TL-4", "TL-6", "TL-7", "TL-9", "TL-10"):
        assert any(required in s.requirements for s in SCENARIOS)


def test_load_runner() -> None:
    pytest.importorskip("openai")
    pytest.importorskip("anthropic")
    runner = load_runner(cli_reference())
    assert runner.name == "agentturn-driver" and set(runner.modes) == set(MODES)
    for bad, says in [("nothing", "pkg.module:Name"), ("no_such_module_x:R", "cannot import"),
                      ("json:NoSuch", "has no"), ("bad_runners:Raising", "not a runner")]:
        with pytest.raises(RunnerLoadError, match=says):
            load_runner(bad)


def cli_reference() -> str:
    from agentturn.tools import cli

    return cli._REFERENCE_RUNNER


def test_tools_record_what_ran_and_never_raise() -> None:
    tools = Tools(delay=0)
    assert tools.call("write_file", {"path": "a", "content": "b"}) == "wrote a (1 characters)"
    assert tools.call("write_file", '{"path": "a", "content": "c"}').startswith("wrote")
    assert tools.call("read_file", "{not json").startswith("error:")
    assert tools.call("delete", {"path": "a"}).startswith("error:")
    assert tools.files == {"a": "c"}
    assert [r.name for r in tools.records] == ["write_file", "write_file", "read_file",
                                               "delete"]
    assert all(r.in_flight == 1 for r in tools.records)
