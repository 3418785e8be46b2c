"""The openai_host example end to end: the official openai and anthropic SDKs over real SSE
against the local scripted server, real tools in a temporary folder, agentturn deciding and
agentturn.aio driving. Every run's trace must replay (``agentturn check``)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Coroutine
from typing import Any

import pytest

for _module in ("openai", "anthropic", "starlette", "uvicorn"):
    pytest.importorskip(_module)

import agentturn as at  # noqa: E402
from agentturn.tools.check import check  # noqa: E402
from agentturn.trace import read_trace  # noqa: E402
from examples.openai_host import scenes  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def scene(run: Coroutine[Any, Any, scenes.Run]) -> scenes.Run:
    """Run a scene; its driver's trace is whole and replays to the same commands."""
    done = asyncio.run(run)
    trace = read_trace(done.trace)
    assert trace.intact and type(trace.steps[-1].event) is at.CloseChat
    report = check(trace)
    assert report.ok, report
    return done


def ran(run: scenes.Run) -> list[str]:
    return [c.call.call_id for c in run.commands
            if isinstance(c, at.ExecuteTool | at.AskPermission)]


@pytest.mark.req("LD-8", "LD-16", "TL-4")
def test_a_lead_typed_during_a_tool_reaches_the_next_request() -> None:
    """The Lead typed while write_file runs: list_files is skipped, the next Chat Completions
    request carries the instruction after the tool results, and the model's second write lands."""
    run = scene(scenes.run_lead())
    assert run.outcome.kind is at.OutcomeKind.FINISHED
    assert run.files == {"calc.py": scenes.SECOND}
    assert ran(run) == ["call_w1", "call_w2"]
    assert [path for path, _ in run.requests] == ["/v1/chat/completions"] * 3
    first, second, _ = (body for _, body in run.requests)
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    assert first["max_completion_tokens"] == scenes.MAX_TOKENS
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool", "tool",
                                                       "user"]
    assert second["messages"][-1]["content"] == "Also add a docstring."
    skipped = second["messages"][3]
    assert skipped["tool_call_id"] == "call_l1" and skipped["content"].startswith("Skipped")
    assert not run.workdir.exists()


@pytest.mark.req("TL-8")
def test_stop_closes_the_http_stream() -> None:
    """Stop while the model streams: ``CancelStream`` closes the SDK stream, the server sees
    the client go away before the stream's end, and the turn ends CANCELLED."""
    run = scene(scenes.run_stop())
    assert run.outcome.kind is at.OutcomeKind.CANCELLED
    assert [c for c in run.commands if isinstance(c, at.CancelStream)] == [
        at.CancelStream(request_id="t1/r1")]
    assert run.closed_early == 1


@pytest.mark.req("TL-9", "TL-10")
def test_a_cut_at_max_tokens_labelled_tool_calls_does_not_run() -> None:
    """The server says ``tool_calls`` for arguments cut mid-JSON at the token limit: the call
    never runs, the file is never written, the raw label and the signal reach EndTurn."""
    run = scene(scenes.run_cut())
    assert ran(run) == [] and run.files == {}
    outcome = run.outcome
    assert (outcome.kind, outcome.cut_off) == (at.OutcomeKind.OUTPUT_LIMIT,
                                               at.CutOffSignal.UNPARSABLE_ARGUMENTS_AT_LIMIT)
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "tool_calls"


@pytest.mark.req("TL-4", "TL-10")
def test_the_anthropic_sdk_runs_a_tool_round_on_the_messages_endpoint() -> None:
    """AsyncAnthropic streams from /v1/messages: the tool runs (non-ASCII intact), its result
    goes back as a tool_result block, and the model finishes."""
    run = scene(scenes.run_anthropic())
    assert run.outcome.kind is at.OutcomeKind.FINISHED
    assert run.outcome.finish_reason is not None and run.outcome.finish_reason.raw == "end_turn"
    assert run.files == {"notes.md": "- ß and ✓\n"}
    assert [path for path, _ in run.requests] == ["/v1/messages"] * 2
    last = run.requests[1][1]["messages"][-1]
    assert last["role"] == "user" and last["content"][0]["type"] == "tool_result"
    assert json.dumps(last).count("wrote notes.md") == 1


@pytest.mark.req("TL-9")
def test_a_cut_block_relabelled_tool_use_does_not_run() -> None:
    """A tool block without its stop, labelled ``tool_use``: nothing runs, the outcome names
    the unclosed block."""
    run = scene(scenes.run_anthropic_cut())
    assert ran(run) == [] and run.files == {}
    assert (run.outcome.kind, run.outcome.cut_off) == (at.OutcomeKind.OUTPUT_LIMIT,
                                                       at.CutOffSignal.UNCLOSED_TOOL_BLOCK)


def test_the_demo_runs_and_leaves_no_folder_behind(tmp_path: pathlib.Path) -> None:
    """``python -m examples.openai_host`` prints every scene's outcome, and removes every
    temporary work folder it made (TMPDIR points at an empty folder of the test's own)."""
    result = subprocess.run([sys.executable, "-m", "examples.openai_host"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []
    outcomes = [line.split("outcome ")[1].split(";")[0] for line in result.stdout.splitlines()
                if "-> outcome" in line]
    assert outcomes == ["finished", "cancelled",
                        "output_limit (cut off: unparsable_arguments_at_limit)", "finished",
                        "output_limit (cut off: unclosed_tool_block)"]
