"""mini-swe-agent 2.4.6 embedded (examples/mini_swe_agent): its litellm client and its local
command execution, agentturn's driver and reducers deciding, against the scripted server on
127.0.0.1 (a non-streamed ``chat.completion`` per request, as litellm asks for it).

Every scene runs real bash commands in a temporary folder and checks the folder afterwards, so
"the call never ran" is seen on the file system, not only in the commands. Every scene's trace
replays (``agentturn check``). Nothing leaves 127.0.0.1: an audit hook, installed before
litellm is imported, records every name lookup and connection to anywhere else (litellm fetches
its model cost map from GitHub at import unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set), and
each test checks that none happened. mini-swe-agent's global configuration folder is a
temporary one, so no ``.env`` of the machine's changes what runs.

mini-swe-agent is heavy (litellm, datasets): it is in the ``mini-swe`` extra only. Without the
scripted server's dependencies (starlette, uvicorn) these tests skip; with them but without
mini-swe-agent they skip too, except under CI (``CI=true``), where a missing mini-swe-agent
fails.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

import mini_swe_guard  # isort: skip  (tests/examples is on sys.path: pytest's prepend imports)

#: Every name lookup or connection to a host other than loopback, as "event host".
REMOTE: list[str] = []
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.getaddrinfo":
        host = args[0]
    elif event == "socket.connect" and isinstance(args[1], tuple):  # not a Unix socket
        host = args[1][0]
    else:
        return
    host = host.decode() if isinstance(host, bytes) else host
    if host is not None and host not in LOOPBACK:
        REMOTE.append(f"{event} {host}")


sys.addaudithook(_audit)  # cannot be removed: it only appends to REMOTE
# Before anything imports minisweagent or litellm (its configuration folder, no banner, no
# cost-map fetch), and whether this file runs at all.
mini_swe_guard.prepare()

import agentturn as at  # noqa: E402
from agentturn.tools.check import check  # noqa: E402
from agentturn.trace import read_trace  # noqa: E402
from examples.mini_swe_agent import glue  # noqa: E402
from examples.mini_swe_agent.host import NAMING, MiniSweHost  # noqa: E402
from examples.openai_host.server import Reply, ScriptedServer  # noqa: E402

# litellm's import: pydantic says it cannot protect its ReadOnly TypedDict items.
pytestmark = pytest.mark.filterwarnings("ignore:Items? .*`ReadOnly` qualifier:UserWarning")
ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_TOKENS = 256
#: Tool rounds of the uncapped scene: more than the ``step_limit`` of 10 its configuration sets
#: (never consulted). Past the 250 of mini-swe-agent's SWE-bench configurations would cost about
#: 20 s here (a round is about 80 ms of litellm, HTTP and bash) and show nothing more.
ROUNDS = 25
#: Seconds any one scene may take.
TIMEOUT = 60

User = Callable[[MiniSweHost, ScriptedServer], Awaitable[None]]


def bash(call_id: str, command: str) -> tuple[str, str, str]:
    return (call_id, "bash", json.dumps({"command": command}))


@dataclass
class Run:
    host: MiniSweHost
    ending: at.EndTurn
    #: The bodies of the model requests (the naming model's are in ``titles``).
    requests: list[dict[str, Any]]
    titles: list[dict[str, Any]]
    #: The requests of both models, in arrival order, by model name.
    order: list[str]
    files: dict[str, str]

    @property
    def outcome(self) -> at.TurnOutcome:
        return self.ending.outcome

    @property
    def ran(self) -> list[str]:
        return [line.removeprefix("bash: ") for line in self.host.log if line.startswith("bash: ")]


@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[None]:
    yield
    assert REMOTE == [], f"a connection beyond 127.0.0.1 was attempted: {REMOTE}"


def play(workdir: pathlib.Path, replies: list[Reply], *, title: str = "A scripted task",
         user: User | None = None, config: str = "mini") -> Run:
    """One turn of one prompt; ``user`` acts while it runs, as a UI would."""

    async def main() -> Run:
        async with ScriptedServer({"scene": replies, "namer": [Reply(text=title)]}) as server:
            host = MiniSweHost(model_name="openai/scene", namer_name="openai/namer",
                               model_kwargs={"api_base": f"{server.base_url}/v1", "api_key": "x",
                                             "max_tokens": MAX_TOKENS},
                               workdir=workdir, config=config)
            with anyio.fail_after(TIMEOUT):
                async with host.driver:
                    await host.driver.send(at.PromptSubmitted(
                        turn_id="t1", message_id="m1", text="Do the scripted task."))
                    if user is not None:
                        await user(host, server)
                    ending = await host.driver.turn_ended("t1")
        bodies = [body for _, body in server.requests]
        return Run(host=host, ending=ending, order=[body["model"] for body in bodies],
                   requests=[body for body in bodies if body["model"] == "scene"],
                   titles=[body for body in bodies if body["model"] == "namer"],
                   files={path.name: path.read_text() for path in workdir.iterdir()})

    run = anyio.run(main)
    trace = read_trace(run.host.trace.getvalue())
    assert trace.intact and type(trace.steps[-1].event) is at.CloseChat
    report = check(trace)
    assert report.ok, report
    return run


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await anyio.sleep(0.005)


@pytest.mark.req("TL-1")
def test_many_tool_rounds_run_with_no_cap(tmp_path: pathlib.Path) -> None:
    """25 bash rounds, then mini-swe-agent's submit command: every round runs, in order, and
    the submit ends the task (``ENDED_BY_TOOL``). mini-swe-agent's own loop never ran: its
    step counter is still 0 and its configured ``step_limit`` of 10 was never consulted."""
    replies = [Reply(text=f"Round {n}.", calls=(bash(f"call_{n}", f"echo {n} >> rounds.txt"),),
                     finish="tool_calls") for n in range(ROUNDS)]
    replies.append(Reply(text="Submitting.", finish="tool_calls", calls=(
        bash("call_submit", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo all done"),)))
    config = tmp_path / "capped.yaml"
    config.write_text(json.dumps({**_mini(), "agent": {**_mini()["agent"], "step_limit": 10}}))
    work = tmp_path / "work"
    work.mkdir()
    run = play(work, replies, config=str(config))
    assert run.outcome.kind is at.OutcomeKind.ENDED_BY_TOOL
    assert run.files == {"rounds.txt": "".join(f"{n}\n" for n in range(ROUNDS))}
    assert len(run.requests) == ROUNDS + 1 and len(run.ran) == ROUNDS + 1
    assert run.host.agent.config.step_limit == 10 and run.host.agent.n_calls == 0
    # The observations went back in mini-swe-agent's format, rendered by its template.
    last = run.requests[-1]["messages"]
    assert last[-1]["role"] == "tool" and json.loads(last[-1]["content"]) == {
        "returncode": 0, "output": ""}
    submitted = run.host.agent.messages[-1]
    assert submitted["extra"]["exit_status"] == "Submitted"
    assert submitted["content"] == "all done\n"


@pytest.mark.req("TL-9", "TL-10")
def test_a_response_cut_at_the_limit_never_runs_its_call(tmp_path: pathlib.Path) -> None:
    """finish_reason ``length`` with a complete, valid bash call that would write a file: the
    call never runs (no file), the turn ends with the output-limit outcome and the raw reason."""
    run = play(tmp_path, [Reply(text="Writing the report.", finish="length",
                                output_tokens=MAX_TOKENS,
                                calls=(bash("call_w", "echo report > report.txt"),))])
    assert run.ran == [] and run.files == {}
    outcome = run.outcome
    assert (outcome.kind, outcome.cut_off) == (at.OutcomeKind.OUTPUT_LIMIT,
                                               at.CutOffSignal.FINISH_REASON)
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "length"
    assert run.requests[0]["max_tokens"] == MAX_TOKENS


@pytest.mark.req("TL-9", "TL-10")
def test_a_cut_mislabelled_tool_calls_never_runs_its_call(tmp_path: pathlib.Path) -> None:
    """The same cut labelled ``tool_calls`` by the server, with completion_tokens at the
    requested max_tokens: mini-swe-agent would run it; here it never runs."""
    run = play(tmp_path, [Reply(text="Writing the report.", finish="tool_calls",
                                output_tokens=MAX_TOKENS,
                                calls=(bash("call_w", "echo report > report.txt"),))])
    assert run.ran == [] and run.files == {}
    outcome = run.outcome
    assert (outcome.kind, outcome.cut_off) == (at.OutcomeKind.OUTPUT_LIMIT,
                                               at.CutOffSignal.OUTPUT_TOKEN_LIMIT)
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "tool_calls"


@pytest.mark.parametrize("finish", ["length", "tool_calls"])
def test_the_same_cut_runs_under_mini_swe_agents_own_loop(tmp_path: pathlib.Path,
                                                         finish: str) -> None:
    """The baseline the two tests above are measured against: ``DefaultAgent.run``, mini-swe-
    agent's own loop on the same client and environment, runs the cut response's write."""
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    replies = [Reply(text="Writing the report.", finish=finish, output_tokens=MAX_TOKENS,
                     calls=(bash("call_w", "echo report > report.txt"),)),
               Reply(text="Submitting.", finish="tool_calls", calls=(
                   bash("call_s", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),))]

    async def main() -> dict[str, Any]:
        async with ScriptedServer({"scene": replies}) as server:
            model = LitellmModel(model_name="openai/scene", cost_tracking="ignore_errors",
                                 model_kwargs={"api_base": f"{server.base_url}/v1",
                                               "api_key": "x", "max_tokens": MAX_TOKENS})
            agent = DefaultAgent(model, LocalEnvironment(cwd=str(tmp_path)),
                                 **_mini()["agent"])
            with anyio.fail_after(TIMEOUT):
                exit_info: dict[str, Any] = await anyio.to_thread.run_sync(agent.run, "Report.")
            return exit_info

    assert anyio.run(main)["exit_status"] == "Submitted"
    assert (tmp_path / "report.txt").read_text() == "report\n"


@pytest.mark.req("LD-3", "LD-9", "LD-10")
def test_a_lead_during_a_slow_command_joins_the_turn_at_the_safe_boundary(
        tmp_path: pathlib.Path) -> None:
    """A Lead typed while a slow command runs: the command runs to its end (its file is
    written), the response's next call is skipped (its file is not), and the next request
    carries the Lead after the two results, in the same turn."""
    lead = "Also write lead.txt."

    async def user(host: MiniSweHost, server: ScriptedServer) -> None:
        await until(lambda: host.driver.state.phase is at.TurnPhase.RUNNING_TOOL)
        await host.driver.send(at.LeadSubmitted(chat_id="chat-1", lead_id="lead-1", text=lead))

    run = play(tmp_path, [
        Reply(text="A slow check, then the next step.", finish="tool_calls", calls=(
            bash("call_slow", "sleep 0.5 && echo slow > slow.txt"),
            bash("call_next", "echo next > next.txt"))),
        Reply(text="Writing lead.txt as asked.", finish="tool_calls",
              calls=(bash("call_lead", "echo lead > lead.txt"),)),
        Reply(text="Done: slow.txt and lead.txt.", finish="stop"),
    ], user=user)
    assert run.outcome.kind is at.OutcomeKind.FINISHED
    assert run.files == {"slow.txt": "slow\n", "lead.txt": "lead\n"}
    assert run.ran == ["sleep 0.5 && echo slow > slow.txt", "echo lead > lead.txt"]
    second = run.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool", "user"]
    slow, skipped, instruction = second[3:]
    assert slow["tool_call_id"] == "call_slow" and '"returncode": 0' in slow["content"]
    assert skipped["tool_call_id"] == "call_next" and skipped["content"].startswith("Skipped")
    assert instruction["content"] == lead
    assert "host: LeadAccepted" in run.host.log


@pytest.mark.req("TL-8")
def test_stop_while_the_request_is_in_flight(tmp_path: pathlib.Path) -> None:
    """Stop while litellm waits for a slow reply (about 1.4 s): the turn ends CANCELLED at
    once, and the reply's write never runs, even after the reply reaches the abandoned thread.
    The next request waits until the abandoned one has its answer (the server never serves
    two of the chat's requests at once), and one stopped while it waited is never sent."""
    reply = Reply(text="I will write the file.", finish="tool_calls", delay=0.1,
                  calls=(bash("call_w", "echo late > late.txt"),))
    times: dict[str, float] = {}

    async def stop(host: MiniSweHost, server: ScriptedServer, turn: str, requests: int) -> None:
        if requests:
            await until(lambda: len(server.requests) == requests)  # it is at the server
        else:
            await until(lambda: host.driver.state.phase is at.TurnPhase.AWAITING_STREAM)
        times[f"{turn} asked"] = time.monotonic()
        await host.driver.send(at.StopPressed())
        await host.driver.turn_ended(turn)
        times[f"{turn} ended"] = time.monotonic()

    async def user(host: MiniSweHost, server: ScriptedServer) -> None:
        await stop(host, server, "t1", 1)
        await host.driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="Two."))
        await stop(host, server, "t2", 0)  # while its request waits for t1's
        await host.driver.send(at.PromptSubmitted(turn_id="t3", message_id="m3", text="Three."))
        await stop(host, server, "t3", 2)

    run = play(tmp_path, [reply], user=user)
    assert run.outcome.kind is at.OutcomeKind.CANCELLED
    assert times["t1 ended"] - times["t1 asked"] < 0.7
    assert times["t2 ended"] - times["t1 asked"] < 0.7
    assert times["t3 asked"] - times["t1 asked"] > 1.0
    assert len(run.requests) == 2  # t1's and t3's: t2's was never sent
    assert [m["content"] for m in run.requests[1]["messages"]][-2:] == ["Two.", "Three."]
    assert run.ran == [] and run.files == {}
    assert run.host.log.count("host: CancelStream") == 3


@pytest.mark.req("TL-6")
def test_mini_swe_agents_format_errors_meet_agentturns_rules(tmp_path: pathlib.Path) -> None:
    """What ``LitellmModel.query`` would raise as ``FormatError``: arguments that are not JSON
    get agentturn's one corrective retry, worded by mini-swe-agent's ``format_error_template``;
    a call of an unknown tool is refused by mini-swe-agent's own check (the review), and the
    model reads its format-error text as that call's result; a response without calls is the
    model finishing, not an error."""
    run = play(tmp_path, [
        Reply(text="Listing.", finish="tool_calls",
              calls=(("call_bad", "bash", '{"command": "ls'),)),
        Reply(text="Trying python.", finish="tool_calls",
              calls=(("call_py", "python", '{"code": "print(1)"}'),)),
        Reply(text="Done without a command.", finish="stop"),
    ])
    assert run.outcome.kind is at.OutcomeKind.FINISHED
    assert run.ran == [] and run.files == {}
    corrective = run.requests[1]["messages"][-1]
    assert corrective["role"] == "user" and corrective["content"].startswith("Tool call error:")
    assert "not valid JSON" in corrective["content"]
    # The malformed response went back with its text only: its call is not sent again.
    assert run.requests[1]["messages"][-2] == {"role": "assistant", "content": "Listing."}
    refused = run.requests[2]["messages"][-1]
    assert refused["tool_call_id"] == "call_py" and "Unknown tool 'python'" in refused["content"]
    assert "not run: call_py [refused]" in run.host.log


@pytest.mark.req("TL-11")
def test_a_refused_connection_ends_the_turn_resumable_as_a_network_error(
        tmp_path: pathlib.Path) -> None:
    """No server on the port: one request (no retry by mini-swe-agent or litellm's client),
    the turn ends with a resumable error, and the failure is a network one, although litellm
    reports it as an ``InternalServerError``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def main() -> tuple[MiniSweHost, at.EndTurn, float]:
        host = MiniSweHost(model_name="openai/scene", workdir=tmp_path, model_kwargs={
            "api_base": f"http://127.0.0.1:{port}/v1", "api_key": "x", "max_tokens": 64})
        started = time.monotonic()
        with anyio.fail_after(TIMEOUT):
            async with host.driver:
                ending = await host.driver.run_turn(at.PromptSubmitted(
                    turn_id="t1", message_id="m1", text="Do the scripted task."))
        return host, ending, time.monotonic() - started

    host, ending, took = anyio.run(main)
    assert (ending.outcome.kind, ending.outcome.resumable) == (at.OutcomeKind.ERROR, True)
    assert took < 5.0  # mini-swe-agent's query would wait 4 to 60 s between 10 attempts
    (failed,) = [step.event for step in read_trace(host.trace.getvalue()).steps
                 if isinstance(step.event, at.StreamFailed)]
    assert failed.network and "InternalServerError" in failed.error


@pytest.mark.req("TT-1", "TT-3")
def test_the_title_comes_from_the_naming_model(tmp_path: pathlib.Path) -> None:
    """The first response has text: the naming model (a second LitellmModel on the same
    server) is asked before that response's command runs, and its answer reaches the host as
    ``SetTitle``."""
    run = play(tmp_path, [
        Reply(text="Let me look at the folder.", finish="tool_calls",
              calls=(bash("call_ls", "ls -a"),)),
        Reply(text="The folder is empty.", finish="stop"),
    ], title="  Inspect the work folder\n")
    assert run.outcome.kind is at.OutcomeKind.FINISHED
    assert run.host.title == "Inspect the work folder"
    assert "title: Inspect the work folder" in run.host.log
    assert run.order == ["scene", "namer", "scene"]
    (asked,) = run.titles
    assert asked["max_tokens"] == 32
    assert [m["content"] for m in asked["messages"]] == [NAMING, "Do the scripted task."]


def test_the_readme_states_the_glue_count() -> None:
    """The glue count in the README is the one ``python -m examples.mini_swe_agent.glue``
    prints today."""
    readme = (ROOT / "examples" / "mini_swe_agent" / "README.md").read_text()
    stated = re.search(r"\*\*(\d+) glue lines\*\*", readme)
    assert stated is not None and int(stated.group(1)) == glue.count()


def test_the_demo_runs_and_leaves_nothing_behind(tmp_path: pathlib.Path) -> None:
    """``python -m examples.mini_swe_agent``: the Lead scene finishes with calc.py written and
    the skipped call not run, the cut scene writes nothing; no temporary folder is left."""
    result = subprocess.run([sys.executable, "-m", "examples.mini_swe_agent"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert list(tmp_path.iterdir()) == []
    out = result.stdout
    assert "end: finished" in out and "files: calc.py\n" in out
    assert "not run: c2 [skipped]" in out and "title: Write calc.py" in out
    assert "end: output_limit" in out and "files: (none)" in out


def _mini() -> dict[str, Any]:
    from minisweagent.config import get_config_from_spec
    return dict(get_config_from_spec("mini"))
