"""The ACP example agent, driven end to end over stdio by the SDK's own client.

One agent process serves the whole module (starting one costs seconds: it imports pydantic);
every test opens its own ACP session in its own folder, and the client below records what each
session receives and answers its permission requests the way the test says.
"""

from __future__ import annotations

import asyncio
import importlib.util
import pathlib
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from types import ModuleType
from typing import Any, TypeVar, cast

import pytest

acp = pytest.importorskip("acp")

from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block  # noqa: E402
from acp.client.connection import ClientSideConnection  # noqa: E402
from acp.interfaces import Client as AcpClient  # noqa: E402
from acp.schema import (  # noqa: E402
    AgentMessageChunk,
    AgentPlanUpdate,
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    PromptResponse,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "acp_agent"
T = TypeVar("T")
Policy = Callable[[ToolCallUpdate], Awaitable[RequestPermissionResponse]]
GUARD_META = {"source": "todo_stop_guard", "qwenDiscreteMessage": True}
FIRST = ("[Todo Stop Guard] 1 todo item(s) are still pending or in progress. Continue executing "
         "the current task now. Do not ask the user whether to continue. If progress requires "
         "user input, use the structured question or permission flow. If progress depends on "
         "external state, report the blocker explicitly.")
FINAL = ("This is the final automatic continuation. Before ending, either complete/update the "
         "todos or report the completed progress and the exact blocker.")


def _load_model() -> ModuleType:
    """The example's scripted model (pure, no ACP), for the texts it writes."""
    name = "acp_example_scripted_model"
    spec = importlib.util.spec_from_file_location(name, EXAMPLE / "scripted_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


MODEL = _load_model()


def allow(option_id: str) -> Policy:
    """A permission policy that picks ``option_id`` at once."""
    async def answer(call: ToolCallUpdate) -> RequestPermissionResponse:
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=option_id))
    return answer


class Client:
    """The test's ACP client: it records every session's updates and permission requests."""

    def __init__(self) -> None:
        self.updates: dict[str, list[Any]] = defaultdict(list)
        self.notifications: list[tuple[str, dict[str, Any]]] = []
        self.policies: dict[str, Policy] = {}
        self.options: list[list[PermissionOption]] = []
        self._watches: list[tuple[str, Callable[[Any], bool], asyncio.Event]] = []

    def watch(self, session_id: str, predicate: Callable[[Any], bool]) -> asyncio.Event:
        """An event set when ``session_id`` receives an update matching ``predicate``."""
        seen = asyncio.Event()
        self._watches.append((session_id, predicate, seen))
        return seen

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates[session_id].append(update)
        for watched, predicate, seen in self._watches:
            if watched == session_id and predicate(update):
                seen.set()

    async def request_permission(self, session_id: str, tool_call: ToolCallUpdate,
                                 options: list[PermissionOption],
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.updates[session_id].append(("permission asked", tool_call.tool_call_id))
        self.options.append(options)
        return await self.policies[session_id](tool_call)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        self.notifications.append((method, params))

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    def on_connect(self, conn: Any) -> None:
        pass


class Agent:
    """The running agent process, its connection, and the one event loop they live on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: ClientSideConnection,
                 client: Client) -> None:
        self.loop, self.conn, self.client = loop, conn, client

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(work, 20))

    def new_session(self, folder: pathlib.Path, policy: Policy | None = None) -> str:
        session_id = self.run(self.conn.new_session(cwd=str(folder))).session_id
        if policy is not None:
            self.client.policies[session_id] = policy
        return session_id

    async def prompt(self, session_id: str, text: str) -> PromptResponse:
        return await self.conn.prompt(session_id=session_id, prompt=[text_block(text)])

    def updates(self, session_id: str) -> list[Any]:
        return self.client.updates[session_id]


@pytest.fixture(scope="module")
def agent() -> Iterator[Agent]:
    loop = asyncio.new_event_loop()
    client = Client()
    spawned = spawn_agent_process(cast(AcpClient, client), sys.executable,
                                  str(EXAMPLE / "agent.py"))
    conn, _process = loop.run_until_complete(spawned.__aenter__())
    try:
        loop.run_until_complete(conn.initialize(protocol_version=PROTOCOL_VERSION))
        yield Agent(loop, conn, client)
    finally:
        loop.run_until_complete(spawned.__aexit__(None, None, None))
        loop.close()


def chunks(updates: list[Any]) -> list[AgentMessageChunk]:
    return [u for u in updates if isinstance(u, AgentMessageChunk)]


def of_call(updates: list[Any], call_id: str) -> list[Any]:
    """The tool-call updates and permission requests of one call, in order."""
    return [u for u in updates if (isinstance(u, ToolCallStart | ToolCallProgress)
                                   and u.tool_call_id == call_id)
            or (isinstance(u, tuple) and u[1] == call_id)]


def states(updates: list[Any]) -> list[str]:
    """``tool_call:pending``, ``permission``, ``tool_call_update:completed`` ..."""
    return ["permission" if isinstance(u, tuple) else f"{u.session_update}:{u.status}"
            for u in updates]


def started(updates: list[Any], name: str) -> ToolCallStart:
    return next(u for u in updates if isinstance(u, ToolCallStart) and u.title.startswith(name))


def test_a_plain_turn_streams_its_answer_and_ends_with_end_turn(
        agent: Agent, tmp_path: pathlib.Path) -> None:
    """A plain prompt gets one agent_message_chunk without _meta, the chat's title, end_turn."""
    session = agent.new_session(tmp_path)
    response = agent.run(agent.prompt(session, "hello there"))
    assert response.stop_reason == "end_turn"
    assert response.field_meta is not None
    assert response.field_meta["agentturn"]["outcome"] == "finished"
    updates = agent.updates(session)
    assert [u.session_update for u in updates] == ["agent_message_chunk", "session_info_update"]
    assert updates[0].content.text == "Hello! You said: hello there"
    assert updates[0].field_meta is None
    assert updates[1].title == "Hello there"


@pytest.mark.parametrize(("prompt", "stop_reason", "outcome"), [
    pytest.param("max tokens please", "max_tokens", "output_limit", marks=pytest.mark.req("TL-9")),
    pytest.param("refuse this", "refusal", "content_filtered"),
])
def test_the_stop_reason_is_mapped_from_the_turns_outcome(
        agent: Agent, tmp_path: pathlib.Path, prompt: str, stop_reason: str,
        outcome: str) -> None:
    """An output limit ends max_tokens with its tool call never run; a safety stop, refusal."""
    session = agent.new_session(tmp_path)
    response = agent.run(agent.prompt(session, prompt))
    assert response.stop_reason == stop_reason
    assert response.field_meta is not None
    assert response.field_meta["agentturn"]["outcome"] == outcome
    for start in (u for u in agent.updates(session) if isinstance(u, ToolCallStart)):
        calls = of_call(agent.updates(session), start.tool_call_id)
        assert states(calls) == ["tool_call:pending", "tool_call_update:failed"]
        assert calls[-1].raw_output["status"] == "skipped"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.req("TL-3")
@pytest.mark.parametrize("choice", ["allow", "deny"])
def test_a_file_is_written_only_after_an_allow_and_a_deny_lets_the_turn_go_on(
        agent: Agent, tmp_path: pathlib.Path, choice: str) -> None:
    """The write waits for the answer: allow writes the file, deny writes nothing and the model
    goes on with a denied result."""
    target = tmp_path / "notes.txt"
    existed: list[bool] = []

    async def answer(call: ToolCallUpdate) -> RequestPermissionResponse:
        existed.append(target.exists())
        return await allow(choice)(call)

    session = agent.new_session(tmp_path, answer)
    response = agent.run(agent.prompt(session, "write notes.txt"))
    updates = agent.updates(session)
    call = of_call(updates, started(updates, "write_file").tool_call_id)
    assert response.stop_reason == "end_turn"
    assert existed == [False]
    assert [o.option_id for o in agent.client.options[-1]] == ["allow", "deny"]
    if choice == "allow":
        assert states(call) == ["tool_call:pending", "permission", "tool_call_update:in_progress",
                                "tool_call_update:completed"]
        assert target.read_text() == MODEL.written_content("write notes.txt")
        assert chunks(updates)[-1].content.text == "Wrote notes.txt."
    else:
        assert states(call) == ["tool_call:pending", "permission", "tool_call_update:failed"]
        assert call[-1].raw_output["status"] == "denied"
        assert not target.exists()
        assert chunks(updates)[-1].content.text == "Understood: notes.txt was not written."


@pytest.mark.req("TL-3", "TL-8", "BR-4")
@pytest.mark.parametrize("client_answer", ["cancelled", "allow after the cancel", "an error"])
def test_a_cancel_during_a_pending_permission_is_never_an_approval(
        agent: Agent, tmp_path: pathlib.Path, client_answer: str) -> None:
    """session/cancel (or a failed permission request) while the dialog is open ends the turn
    cancelled and the file is never written, whatever the client answers afterwards."""
    asked, release = asyncio.Event(), asyncio.Event()

    async def answer(call: ToolCallUpdate) -> RequestPermissionResponse:
        asked.set()
        if client_answer == "an error":
            raise RequestError.internal_error({"details": "the dialog crashed"})
        await release.wait()
        if client_answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return await allow("allow")(call)

    session = agent.new_session(tmp_path, answer)

    async def scenario() -> PromptResponse:
        turn = asyncio.ensure_future(agent.prompt(session, "write notes.txt"))
        await asked.wait()
        if client_answer != "an error":
            await agent.conn.cancel(session_id=session)
            release.set()
        response = await turn
        await asyncio.sleep(0.2)  # a late answer has had time to arrive and be dropped
        return response

    response = agent.run(scenario())
    updates = agent.updates(session)
    call = of_call(updates, started(updates, "write_file").tool_call_id)
    assert response.stop_reason == "cancelled"
    assert states(call) == ["tool_call:pending", "permission", "tool_call_update:failed"]
    assert call[-1].raw_output["status"] == "cancelled"
    assert not (tmp_path / "notes.txt").exists()


@pytest.mark.req("LD-9", "LD-10")
def test_a_lead_sent_during_a_file_write_is_applied_after_the_write(
        agent: Agent, tmp_path: pathlib.Path) -> None:
    """A Lead arriving while big.txt is written: the write completes untouched, the unstarted
    test run is skipped, and the next model request carries the instruction."""
    session = agent.new_session(tmp_path)
    writing = agent.client.watch(session, lambda u: isinstance(u, ToolCallProgress)
                                 and u.status == "in_progress")

    async def scenario() -> tuple[PromptResponse, dict[str, Any]]:
        turn = asyncio.ensure_future(agent.prompt(session, "write big.txt slowly"))
        await writing.wait()
        reply = await agent.conn.ext_method("agentturn/lead", {
            "sessionId": session, "leadId": "lead-1", "text": "also add a docstring"})
        agent.updates(session).append(("lead answered", reply))
        return await turn, reply

    response, reply = agent.run(scenario())
    updates = agent.updates(session)
    write = started(updates, "write_file").tool_call_id
    tests = started(updates, "run_tests").tool_call_id
    assert reply == {"accepted": True}
    assert response.stop_reason == "end_turn"
    assert (tmp_path / "big.txt").read_text() == MODEL.big_file_content()
    assert states(of_call(updates, tests)) == ["tool_call:pending", "tool_call_update:failed"]
    assert of_call(updates, tests)[-1].raw_output["status"] == "skipped"
    answer = next(c for c in chunks(updates) if c.content.text.startswith("Following"))
    assert answer.content.text == "Following your instruction: also add a docstring"
    order = [updates.index(of_call(updates, write)[1]),      # the write runs
             updates.index(("lead answered", reply)),        # the Lead is accepted meanwhile
             updates.index(of_call(updates, write)[-1]),     # the write completes
             updates.index(of_call(updates, tests)[-1]),     # the test run is skipped
             updates.index(answer)]                          # the model follows the Lead
    assert states(of_call(updates, write))[-1] == "tool_call_update:completed"
    assert order == sorted(order)


def test_a_lead_with_no_turn_running_comes_back_as_a_draft(
        agent: Agent, tmp_path: pathlib.Path) -> None:
    """A Lead between turns is refused with its reason and its text handed back."""
    session = agent.new_session(tmp_path)
    reply = agent.run(agent.conn.ext_method("agentturn/lead", {
        "sessionId": session, "leadId": "lead-1", "text": "keep going"}))
    assert reply["accepted"] is False
    assert reply["reason"] == "not_active"
    assert reply["draft"] == "keep going"


@pytest.mark.req("OB-1", "OB-2", "OB-3")
def test_guard_continuations_go_out_as_discrete_chunks_then_the_exhaustion_message(
        agent: Agent, tmp_path: pathlib.Path) -> None:
    """An unfinished todo list: two guard chunks with their _meta, then the exhaustion message;
    the model's own text carries no _meta."""
    session = agent.new_session(tmp_path)
    response = agent.run(agent.prompt(session, "todo: port the parser"))
    assert response.stop_reason == "end_turn"
    updates = agent.updates(session)
    marked = [c for c in chunks(updates) if c.field_meta is not None]
    assert [c.field_meta for c in marked[:2]] == [
        {**GUARD_META, "attempt": 1, "maxAttempts": 2, "unfinishedCount": 1},
        {**GUARD_META, "attempt": 2, "maxAttempts": 2, "unfinishedCount": 1}]
    assert [c.content.text for c in marked[:2]] == [FIRST, FIRST + "\n\n" + FINAL]
    assert len(marked) == 3 and marked[2] is chunks(updates)[-1]
    assert marked[2].content.text == ("[Todo Stop Guard] Automatic continuation stopped after "
                                      "2 attempts; 1 todo item(s) remain unfinished.")
    assert marked[2].field_meta is not None
    assert GUARD_META.items() <= marked[2].field_meta.items()
    assert marked[2].field_meta["maxAttempts"] == 2
    ordinary = [c.content.text for c in chunks(updates) if c.field_meta is None]
    assert ordinary == ["I'll track this with a todo list.",
                        "The tokenizer is ported; I'll stop here.",
                        "Still working on the parser; stopping for now.",
                        "Still working on the parser; stopping for now."]
    plans = [u for u in updates if isinstance(u, AgentPlanUpdate)]
    assert [e.status for e in plans[0].entries] == ["completed", "in_progress"]
