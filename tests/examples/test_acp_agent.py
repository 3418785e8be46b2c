"""The ACP example agent, driven end to end over stdio by the SDK's own client.

One agent process serves the whole module (starting one costs seconds: it imports pydantic);
every test opens its own ACP session in its own folder, and the client below records what each
session receives and answers its permission requests the way the test says.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import pathlib
import sys
import uuid
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
    InitializeResponse,
    PermissionOption,
    PromptResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UserMessageChunk,
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
        self.initialized: InitializeResponse | None = None

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


@contextlib.contextmanager
def running_agent(state_dir: pathlib.Path) -> Iterator[Agent]:
    """An agent process that keeps its sessions under ``state_dir``, initialized."""
    loop = asyncio.new_event_loop()
    client = Client()
    spawned = spawn_agent_process(cast(AcpClient, client), sys.executable,
                                  str(EXAMPLE / "agent.py"),
                                  env={"AGENTTURN_ACP_STATE_DIR": str(state_dir)})
    conn, _process = loop.run_until_complete(spawned.__aenter__())
    try:
        agent = Agent(loop, conn, client)
        agent.initialized = agent.run(conn.initialize(protocol_version=PROTOCOL_VERSION))
        yield agent
    finally:
        loop.run_until_complete(spawned.__aexit__(None, None, None))
        loop.close()


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("acp-state")


@pytest.fixture(scope="module")
def agent(state_dir: pathlib.Path) -> Iterator[Agent]:
    with running_agent(state_dir) as running:
        yield running


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
@pytest.mark.parametrize("client_answer", ["cancelled", "allow after the cancel"])
def test_a_cancel_during_a_pending_permission_is_never_an_approval(
        agent: Agent, tmp_path: pathlib.Path, client_answer: str) -> None:
    """session/cancel while the dialog is open ends the turn cancelled and the file is never
    written, whatever the client answers afterwards."""
    asked, release = asyncio.Event(), asyncio.Event()

    async def answer(call: ToolCallUpdate) -> RequestPermissionResponse:
        asked.set()
        await release.wait()
        if client_answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return await allow("allow")(call)

    session = agent.new_session(tmp_path, answer)

    async def scenario() -> PromptResponse:
        turn = asyncio.ensure_future(agent.prompt(session, "write notes.txt"))
        await asked.wait()
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


def _failing(call: ToolCallUpdate) -> Awaitable[RequestPermissionResponse]:
    raise RequestError.internal_error({"details": "the dialog crashed"})


async def _never_offered(call: ToolCallUpdate) -> RequestPermissionResponse:
    return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id="yes"))


@pytest.mark.req("TL-3", "BR-4")
@pytest.mark.parametrize(("policy", "why"), [
    (_failing, "the permission request failed (JSON-RPC error -32603: Internal error): denied"),
    (_never_offered, "the client chose 'yes', an option never offered: denied"),
])
def test_a_failed_or_unreadable_permission_answer_is_a_deny_that_says_why(
        agent: Agent, tmp_path: pathlib.Path, policy: Policy, why: str) -> None:
    """No session/cancel came, so a failed request or an option never offered does not end the
    turn cancelled: the call is denied (never an allow), the model goes on, and the tool call's
    end says what happened."""
    session = agent.new_session(tmp_path, policy)
    response = agent.run(agent.prompt(session, "write notes.txt"))
    updates = agent.updates(session)
    call = of_call(updates, started(updates, "write_file").tool_call_id)
    assert response.stop_reason == "end_turn"
    assert states(call) == ["tool_call:pending", "permission", "tool_call_update:failed"]
    assert call[-1].raw_output["status"] == "denied"
    assert call[-1].raw_output["permission"] == why
    assert not (tmp_path / "notes.txt").exists()
    assert chunks(updates)[-1].content.text == "Understood: notes.txt was not written."


def test_the_agent_advertises_session_load_and_its_extensions(agent: Agent) -> None:
    """initialize: loadSession, and the Lead and continue extensions under the capabilities'
    _meta, with the method names a client calls."""
    assert agent.initialized is not None
    capabilities = agent.initialized.agent_capabilities
    assert capabilities is not None and capabilities.load_session is True
    assert capabilities.field_meta is not None
    extensions = capabilities.field_meta["agentturn"]
    assert extensions["lead"]["method"] == "_agentturn/lead"
    assert extensions["lead"]["injectMode"] == "steer"
    assert extensions["continue"]["method"] == "_agentturn/continue"


def test_session_ids_are_uuids_unique_across_agent_processes(
        agent: Agent, state_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """Every process numbered from session-1 before; now each id is a fresh UUID."""
    first = agent.new_session(tmp_path)
    with running_agent(state_dir) as other:
        second = other.new_session(tmp_path)
    assert first != second
    for session_id in (first, second):
        assert str(uuid.UUID(session_id)) == session_id


@pytest.mark.parametrize("cwd", ["relative/folder", "", "/nonexistent/agentturn-acp"])
def test_a_cwd_that_is_not_an_absolute_folder_is_invalid_params(agent: Agent, cwd: str) -> None:
    """session/new refuses a relative, empty or missing folder with -32602 (no temp folder)."""
    with pytest.raises(RequestError) as refused:
        agent.run(agent.conn.new_session(cwd=cwd))
    assert refused.value.code == -32602
    assert "cwd" in str(refused.value.data)


def test_tool_call_locations_are_absolute_paths_in_the_sessions_folder(
        agent: Agent, tmp_path: pathlib.Path) -> None:
    """The tool call and the permission request name the file by its absolute path."""
    asked: list[ToolCallUpdate] = []

    async def answer(call: ToolCallUpdate) -> RequestPermissionResponse:
        asked.append(call)
        return await allow("allow")(call)

    session = agent.new_session(tmp_path, answer)
    agent.run(agent.prompt(session, "write notes.txt"))
    start = started(agent.updates(session), "write_file")
    expected = str((tmp_path / "notes.txt").resolve())
    assert [location.path for location in start.locations or []] == [expected]
    assert [location.path for location in asked[0].locations or []] == [expected]


def test_every_discrete_message_has_its_own_message_id(
        agent: Agent, tmp_path: pathlib.Path) -> None:
    """Each model response and each guard message is its own message on the wire: a client
    that treats _meta as opaque still keeps the guard's text apart from the model's."""
    session = agent.new_session(tmp_path)
    agent.run(agent.prompt(session, "todo: port the parser"))
    sent = chunks(agent.updates(session))
    ids = [c.message_id for c in sent]
    assert all(ids) and len(set(ids)) == len(ids) == 7
    exhausted = sent[-1].field_meta
    assert exhausted == {**GUARD_META, "kind": "exhausted", "attempt": 2, "maxAttempts": 2,
                         "unfinishedCount": 1}


def _loaded(agent: Agent, folder: pathlib.Path, session_id: str) -> list[Any]:
    agent.run(agent.conn.load_session(cwd=str(folder), session_id=session_id))
    return agent.updates(session_id)


@pytest.mark.req("SG-A12")
def test_a_restarted_agent_loads_the_session_and_replays_the_conversation(
        state_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """session/load in a new agent process: the user messages, the agent's messages (the
    guard's with their _meta and own messageIds), each tool call and its end, the title, all as
    session/update before the load's answer; the session then goes on in the same folder."""
    with running_agent(state_dir) as first:
        session = first.new_session(tmp_path, allow("allow"))
        first.run(first.prompt(session, "write notes.txt"))
        first.run(first.prompt(session, "todo: port the parser"))
        live = first.updates(session)
    with running_agent(state_dir) as second:
        replayed = _loaded(second, tmp_path, session)
        users = [u.content.text for u in replayed if isinstance(u, UserMessageChunk)]
        assert users == ["write notes.txt", "todo: port the parser"]
        assert ([(c.message_id, c.content.text, c.field_meta) for c in chunks(replayed)]
                == [(c.message_id, c.content.text, c.field_meta) for c in chunks(live)])
        ends = [(u.tool_call_id, (u.raw_output or {})["status"]) for u in replayed
                if isinstance(u, ToolCallProgress)]
        assert ends == [("call-1", "executed"), ("call-2", "executed")]
        assert [u.title for u in replayed if isinstance(u, SessionInfoUpdate)] == [
            "Write notes.txt"]
        second.client.updates[session].clear()
        second.client.policies[session] = allow("allow")
        response = second.run(second.prompt(session, "write again.txt"))
        assert response.stop_reason == "end_turn"
        assert (tmp_path / "again.txt").exists()
        assert started(second.updates(session), "write_file").tool_call_id == "call-3"


@pytest.mark.req("SG-A12", "SG-A8")
@pytest.mark.parametrize("between", ["nothing", "a restart", "a load in another folder"])
def test_a_continued_turn_keeps_the_guards_chain_only_while_trust_holds(
        state_dir: pathlib.Path, tmp_path: pathlib.Path, between: str) -> None:
    """A todo list left unfinished, then a network error. Continued in the same process, the
    guard's trusted chain goes on (a guard continuation follows). After an agent restart and
    session/load, or a session/load that moves the live session to another folder (a working
    directory change), the guard trusts nothing it saw before (SG-A12) and stays quiet."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()

    def go_on(agent: Agent, session: str) -> tuple[dict[str, Any], list[Any]]:
        agent.client.updates[session].clear()
        reply = agent.run(agent.conn.ext_method("agentturn/continue", {"sessionId": session}))
        return reply, [c.field_meta for c in chunks(agent.updates(session))]

    with running_agent(state_dir) as first:
        session = first.new_session(work)
        with pytest.raises(RequestError) as failed:
            first.run(first.prompt(session, "todo: port the parser, flaky"))
        assert (failed.value.data or {})["resumable"] is True
        if between == "a load in another folder":
            _loaded(first, elsewhere, session)
        if between != "a restart":
            reply, metas = go_on(first, session)
    if between == "a restart":
        with running_agent(state_dir) as second:
            _loaded(second, work, session)
            reply, metas = go_on(second, session)
    assert reply["stopReason"] == "end_turn"
    guarded = [meta for meta in metas if meta is not None]
    if between == "nothing":
        assert guarded and all(GUARD_META.items() <= meta.items() for meta in guarded)
    else:
        assert metas == [None]


def test_loading_a_live_session_in_another_folder_moves_its_work_there(
        agent: Agent, tmp_path: pathlib.Path) -> None:
    """session/load of a session this process serves: the conversation is replayed and the
    tools write into the folder the load named from then on."""
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    session = agent.new_session(before, allow("allow"))
    agent.run(agent.prompt(session, "hello"))
    agent.client.updates[session].clear()
    replayed = _loaded(agent, after, session)
    assert [u.content.text for u in replayed if isinstance(u, UserMessageChunk)] == ["hello"]
    agent.run(agent.prompt(session, "write moved.txt"))
    assert [p.name for p in after.iterdir()] == ["moved.txt"]
    assert list(before.iterdir()) == []


@pytest.mark.req("TL-11")
def test_a_turn_ended_by_a_network_error_is_continued_after_a_restart(
        state_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The prompt fails with a resumable error; a new agent process loads the session and
    _agentturn/continue finishes the same turn."""
    with running_agent(state_dir) as first:
        session = first.new_session(tmp_path)
        with pytest.raises(RequestError) as failed:
            first.run(first.prompt(session, "flaky question"))
        data = failed.value.data or {}
        assert (data["outcome"], data["resumable"]) == ("error", True)
    with running_agent(state_dir) as second:
        _loaded(second, tmp_path, session)
        second.client.updates[session].clear()
        reply = second.run(second.conn.ext_method("agentturn/continue", {"sessionId": session}))
        assert reply["stopReason"] == "end_turn"
        assert [c.content.text for c in chunks(second.updates(session))] == [
            "Continued after the network error: flaky question"]
        with pytest.raises(RequestError) as nothing_left:
            second.run(second.conn.ext_method("agentturn/continue", {"sessionId": session}))
        assert nothing_left.value.code == -32600


def test_loading_an_unknown_session_is_refused(agent: Agent, tmp_path: pathlib.Path) -> None:
    """A session id no agent saved is not silently a new empty session."""
    with pytest.raises(RequestError) as refused:
        agent.run(agent.conn.load_session(cwd=str(tmp_path), session_id=str(uuid.uuid4())))
    assert refused.value.code == -32002


def test_an_agent_ended_mid_turn_comes_back_before_that_turn_with_fresh_ids(
        state_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The agent process ends during a long write: the write leaves nothing, the load replays
    what the turn had sent, and the next turn's ids are new (turn 2, call 3), never the dead
    turn's again."""
    with running_agent(state_dir) as first:
        session = first.new_session(tmp_path, allow("allow"))
        writing = first.client.watch(session, lambda u: isinstance(u, ToolCallProgress)
                                     and u.status == "in_progress")

        async def until_writing() -> None:
            turn = asyncio.ensure_future(first.prompt(session, "write big.txt slowly over 9 "
                                                               "seconds"))
            await writing.wait()
            turn.cancel()  # the client stops waiting; the agent process ends below
            with contextlib.suppress(asyncio.CancelledError):
                await turn

        first.run(until_writing())
    assert list(tmp_path.iterdir()) == []
    with running_agent(state_dir) as second:
        replayed = _loaded(second, tmp_path, session)
        assert [u.content.text for u in replayed if isinstance(u, UserMessageChunk)] == [
            "write big.txt slowly over 9 seconds"]
        assert [c.message_id for c in chunks(replayed)] == ["t1/r1"]
        second.client.updates[session].clear()
        second.client.policies[session] = allow("allow")
        response = second.run(second.prompt(session, "write again.txt"))
        assert response.stop_reason == "end_turn"
        assert started(second.updates(session), "write_file").tool_call_id == "call-3"
        assert chunks(second.updates(session))[0].message_id == "t2/r1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again.txt"]
