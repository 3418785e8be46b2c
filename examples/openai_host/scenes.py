"""The demo's scenes: what the scripted engines answer, and the runs that use them.

Theory of operation
-------------------
Each ``run_*`` coroutine starts the local server, builds a host with the official SDK client
pointed at it, runs one turn under the host's driver in a fresh temporary work folder (removed
afterwards), and returns a :class:`Run`: the outcome, the host's log, the files left in the
folder, the requests the server saw, how many streams the client closed early, and the
driver's trace with every command agentturn returned. Tests and ``python -m
examples.openai_host`` share them.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import agentturn as at
from agentturn.trace import read_trace

from .engines import ChatEngine, MessagesEngine
from .host import Host
from .server import Reply, ScriptedServer

__all__ = ["SCENES", "Run", "run_anthropic", "run_cut", "run_lead", "run_stop"]

FIRST = "def add(a, b):\n    return a + b\n"
SECOND = 'def add(a, b):\n    """Return a + b."""\n    return a + b\n'
#: The output limit every request asks for.
MAX_TOKENS = 64


def _args(**values: str) -> str:
    return json.dumps(values, ensure_ascii=False)


SCENES: dict[str, list[Reply]] = {
    # A Lead typed while write_file runs: the unstarted list_files is skipped, the next request
    # carries the instruction, and the model acts on it.
    "lead": [
        Reply(text="I'll write calc.py, then list the folder.", finish="tool_calls", calls=(
            ("call_w1", "write_file", _args(path="calc.py", content=FIRST)),
            ("call_l1", "list_files", "{}"))),
        Reply(text="Adding the docstring, as you asked.", finish="tool_calls", calls=(
            ("call_w2", "write_file", _args(path="calc.py", content=SECOND)),)),
        Reply(text="calc.py is written, with a docstring.", finish="stop"),
    ],
    # A long, slow answer: the user presses Stop while it streams.
    "stop": [Reply(text="Let me explain everything in great detail. " * 12, finish="stop",
                   delay=0.02)],
    # A serving stack that lies: arguments cut mid-JSON at the token limit, labelled
    # ``tool_calls``. The call must not run.
    "cut": [Reply(text="Writing the report.", finish="tool_calls", output_tokens=MAX_TOKENS,
                  calls=(("call_r1", "write_file",
                          '{"path": "report.md", "content": "# Report\\n\\nThe first fin'),))],
    # The Anthropic SDK against the Messages endpoint: a tool round, then the answer.
    "anthropic": [
        Reply(text="Let me write the notes.", finish="tool_use", calls=(
            ("toolu_1", "write_file", _args(path="notes.md", content="- ß and ✓\n")),)),
        Reply(text="notes.md is written.", finish="end_turn"),
    ],
    # A proxy relabelling a cut tool block ``tool_use``: the block never closed.
    "anthropic-cut": [
        Reply(text="Overwriting the notes.", finish="tool_use", unclosed=True, calls=(
            ("toolu_9", "write_file", '{"path": "notes.md", "content": "- on'),)),
    ],
}


@dataclass
class Run:
    """What one scene did."""

    outcome: at.TurnOutcome
    log: list[str]
    files: dict[str, str]
    requests: list[tuple[str, dict[str, Any]]]
    closed_early: int
    #: Every command agentturn returned, in order (read from the trace).
    commands: list[at.Command]
    #: The temporary work folder (removed when the run ended).
    workdir: pathlib.Path
    #: The driver's trace of the run (``agentturn check`` replays it).
    trace: str


async def _run(scene: str, prompt: str, anthropic: bool,
               prepare: Callable[[Host], None]) -> Run:
    with tempfile.TemporaryDirectory(prefix="agentturn-openai-host-") as folder:
        workdir = pathlib.Path(folder)
        async with ScriptedServer(SCENES) as server:
            engine: ChatEngine | MessagesEngine = (
                MessagesEngine(server.base_url, scene, MAX_TOKENS) if anthropic
                else ChatEngine(server.base_url, scene, MAX_TOKENS))
            host = Host(engine, workdir)
            prepare(host)
            try:
                async with host.driver:
                    outcome = await host.run_turn("t1", prompt)
            finally:
                await engine.close()
        # read after the server stopped: it has seen every stream to its end by then
        files = {path.name: path.read_text(encoding="utf-8")
                 for path in sorted(workdir.iterdir())}
    trace = host.trace.getvalue()
    commands = [c for step in read_trace(trace).steps for c in step.commands]
    return Run(outcome, host.log, files, server.requests, server.closed_early, commands,
               workdir, trace)


def _nothing(host: Host) -> None:
    pass


def _lead(host: Host) -> None:
    host.lead_during["call_w1"] = "Also add a docstring."


def _stop(host: Host) -> None:
    host.stop_on_text = True


async def run_lead() -> Run:
    return await _run("lead", "Create calc.py with an add function.", False, _lead)


async def run_stop() -> Run:
    return await _run("stop", "Explain the project.", False, _stop)


async def run_cut() -> Run:
    return await _run("cut", "Write a report.", False, _nothing)


async def run_anthropic() -> Run:
    return await _run("anthropic", "Write my notes.", True, _nothing)


async def run_anthropic_cut() -> Run:
    return await _run("anthropic-cut", "Rewrite my notes.", True, _nothing)


#: Every run, in the demo's order.
RUNS: dict[str, Callable[[], Awaitable[Run]]] = {
    "A Lead typed during a tool (OpenAI Chat Completions)": run_lead,
    "Stop while the model streams (OpenAI Chat Completions)": run_stop,
    "A cut at max_tokens labelled tool_calls (OpenAI Chat Completions)": run_cut,
    "A tool round (Anthropic Messages)": run_anthropic,
    "A cut block relabelled tool_use (Anthropic Messages)": run_anthropic_cut,
}
