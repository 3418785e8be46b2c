"""The async spec kit (``agentturn.testing.asyncio_kit``): what the engine received, typed;
a program replays the same run; a finding shrinks to a short program that pastes as a test;
the rules the synchronous kit could not see (a text sent twice, an effect still running).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import Phase, settings

import agentturn as at
from agentturn import aio
from agentturn.testing import profiles
from agentturn.testing.asyncio_kit import (
    TOOLS,
    AsyncSpec,
    ProgramMismatch,
    ReferenceHost,
    SentAssistant,
    SentOther,
    SentToolResult,
    SentUser,
    WorldError,
    WorldTool,
    answer,
    check,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    reference_effects,
    replay,
    report,
    tick,
    user,
)
from agentturn.testing.asyncio_kit.runner import Run
from agentturn.testing.asyncio_kit.schedule import Listed

from async_catalogue import CATALOGUE  # isort: skip

CALL = at.ToolCall(call_id="c1", name="read_file", arguments='{"path":"a.py"}')
EXPECTED = (SentUser("Fix it"), SentAssistant("Looking.", (CALL,)), SentToolResult("c1", "ok"),
            SentUser("thanks"))


def test_the_three_formats_read_back_the_same_conversation() -> None:
    """OpenAI Chat, OpenAI Responses and Anthropic Messages: one conversation, one reading;
    tool results in the host's format count, and anything else is kept whole."""
    chat = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Fix it"},
            {"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "read_file", "arguments": '{"path":"a.py"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "text": "thanks"}]}]
    responses = [{"role": "developer", "content": "Be brief."},
                 {"role": "user", "content": "Fix it"},
                 {"type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": "Looking."}]},
                 {"type": "function_call", "call_id": "c1", "name": "read_file",
                  "arguments": '{"path":"a.py"}'},
                 {"type": "function_call_output", "call_id": "c1", "output": "ok"},
                 {"role": "user", "content": [{"type": "input_text", "text": "thanks"}]}]
    anthropic = [{"role": "user", "content": "Fix it"},
                 {"role": "assistant", "content": [
                     {"type": "text", "text": "Looking."},
                     {"type": "tool_use", "id": "c1", "name": "read_file",
                      "input": {"path": "a.py"}}]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
                     {"type": "text", "text": "thanks"}]}]
    assert from_openai_chat(chat) == (SentOther(chat[0]), *EXPECTED)
    assert from_openai_responses(responses) == (SentOther(responses[0]), *EXPECTED)
    assert from_anthropic(anthropic) == EXPECTED
    image = {"type": "image", "source": {}}
    assert from_anthropic([{"role": "user", "content": [image]}]) == (SentOther(image),)


def test_the_kit_and_the_readers_load_nothing_heavy() -> None:
    """``import agentturn.testing`` and its readers load neither anyio nor hypothesis."""
    code = ("import sys, agentturn.testing, agentturn.testing.received; "
            "print(sorted(m for m in ('anyio', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


PLAIN = [user("prompt"), answer("storage#1", "ok"), answer("engine#1", "open"),
         answer("engine#1", "read_file"), answer("storage#2", "ok"), answer("tool#1", "ok"),
         answer("storage#3", "ok"), answer("namer#1", "ok"), answer("engine#2", "open"),
         user("stop")]


def test_a_program_replays_the_same_run() -> None:
    """Same program, same run: no wall clock, decisions only where every task is blocked."""
    spec = AsyncSpec(make_effects=reference_effects)
    logs = []
    for _ in range(2):
        run = Run(spec, Listed(PLAIN), steps=len(PLAIN), verbose=True)
        assert run.play() == []
        logs.append(run.log)
    assert logs[0] == logs[1]
    assert any("CancelStream" in line for line in logs[0])  # the Stop reached the stream
    replay(spec, PLAIN)


def test_a_program_that_no_longer_applies_says_so() -> None:
    with pytest.raises(ProgramMismatch, match="storage#9"):
        replay(AsyncSpec(make_effects=reference_effects),
               [user("prompt"), answer("storage#9", "ok")])


class ReplaysTheHistory(ReferenceHost):
    """Sends the stored history and then the whole conversation again (a replayed history)."""

    async def model(self, command: at.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        messages = self.messages(command)
        stream = await self.world.engine.create(messages + messages)
        async with stream:
            async for chunk in stream:
                yield chunk


@pytest.mark.req("TL-5")
def test_a_text_sent_twice_is_caught_in_the_hosts_own_format() -> None:
    """req: TL-5 — the engine-input rule reads what the host really sent (OpenAI Chat here)
    and counts each user text against what storage holds."""
    with pytest.raises(AssertionError, match=r"\[engine-input, TL-5\] p1/r1 sent 'prompt 1' "
                                             r"2 times; storage holds it 1 time"):
        replay(AsyncSpec(make_effects=ReplaysTheHistory.effects_for),
               [user("prompt"), answer("storage#1", "ok")])


@pytest.mark.req("TL-5")
def test_a_request_the_format_cannot_read_is_a_finding() -> None:
    """A request the host's reader cannot read is told, not silently passed."""
    def unreadable(messages: Any) -> Any:
        raise ValueError("not my format")

    with pytest.raises(AssertionError, match=r"\[engine-input, TL-5\] p1/r1: the request "
                                             r"cannot be read"):
        replay(AsyncSpec(make_effects=reference_effects, request_format=unreadable),
               [user("prompt"), answer("storage#1", "ok")])


def pasted(message: str) -> tuple[str, int]:
    """The test a finding printed, as source, and how many moves its program has."""
    code = message[message.index("The schedule, as a test"):].split("\n", 2)[2]
    return code, len(re.findall(r"^        (?:answer|user|tick)\(", code, flags=re.M))


def run_pasted(code: str) -> None:
    """Paste the printed test into a module of its own and run it."""
    namespace: dict[str, Any] = {"__name__": "pasted_finding"}
    exec(compile(code, "<pasted>", "exec"), namespace)
    namespace["test_the_async_kit_finding"]()


@pytest.mark.req("TL-5")
def test_a_finding_shrinks_to_a_program_that_pastes_and_replays() -> None:
    """req: TL-5 — under the CI profile with the shrinker on, the retried save shrinks to at
    most 15 moves; the printed test, pasted as it is, fails the same way."""
    bug = CATALOGUE["retries-saves"]
    with pytest.raises(AssertionError) as caught:
        check(bug.spec, settings(profiles.CI, phases=[Phase.generate, Phase.shrink]))
    code, moves = pasted(str(caught.value))
    assert 1 <= moves <= 15, code
    assert "from async_catalogue import RetriesSaves" in code
    assert "make_effects=RetriesSaves.effects_for," in code
    with pytest.raises(AssertionError, match=bug.rule):
        run_pasted(code)


#: A spec this module names, with options: a turn driver, the tools as ``bash``.
BASH = {kind: WorldTool("bash", json.dumps({"command": kind}), writes=shape.writes,
                        needs_permission=shape.needs_permission) for kind, shape in TOOLS.items()}
KILLS_WRITES_ON_A_TURN = AsyncSpec(make_effects=CATALOGUE["cancel-kills-writes"].spec.make_effects,
                                   config=at.TurnConfig(auto_title=False), tools=BASH)


def test_the_pasted_test_names_the_spec_or_writes_it_whole() -> None:
    """A spec the calling module names is imported by name; one it does not name is written
    out with every option, so the pasted test replays the same run (a spec with the default
    tools and a session driver would pass the same program)."""
    program = [user("prompt"), answer("storage#1", "ok"), answer("engine#1", "open"),
               answer("engine#1", "write_file"), answer("storage#2", "ok"),
               answer("dialog#1", "allow"), user("stop")]
    with pytest.raises(AssertionError) as caught:
        replay(KILLS_WRITES_ON_A_TURN, program)
    code, _ = pasted(str(caught.value))
    assert "from test_async_kit import KILLS_WRITES_ON_A_TURN" in code
    assert "replay(KILLS_WRITES_ON_A_TURN, [" in code
    unnamed = attrs.evolve(KILLS_WRITES_ON_A_TURN)
    with pytest.raises(AssertionError) as caught:
        replay(unnamed, program)
    code, _ = pasted(str(caught.value))
    assert "config=TurnConfig(auto_title=False)," in code and "WorldTool(name='bash'" in code
    with pytest.raises(AssertionError, match=r"\[cancel, TL-8\]"):
        run_pasted(code)
    lambda_spec = attrs.evolve(unnamed, make_effects=lambda world: reference_effects(world),
                               config=at.TurnConfig(auto_title=True))
    run = Run(lambda_spec, Listed([user("prompt")]), steps=1, verbose=True)
    run.play()
    printed = report(lambda_spec, run, ["[rule, ID] what broke"])  # as a finding prints it
    assert "make_effects=...,  # fill in: your make_effects (it cannot be printed)" in printed
    assert "config=TurnConfig()," in printed


def test_the_reference_host_reads_its_requests_back_as_it_stored_them() -> None:
    """What the reference host sends (OpenAI Chat) reads back through the Chat converter."""
    stored = [at.UserMessageRecord(message_id="m1", text="hi")]
    from agentturn.testing.asyncio_kit import chat_messages

    assert from_openai_chat(chat_messages(stored)) == (SentUser("hi"),)
    assert json.dumps(chat_messages(stored))  # plain JSON, as an SDK takes it
    assert isinstance(reference_effects, object) and aio.Effects


def test_the_same_seed_finds_the_same_program() -> None:
    """Same seed, same run: two checks of one buggy host print the same shrunk program."""
    bug = CATALOGUE["acks-lead-before-save"]
    found = []
    for _ in range(2):
        with pytest.raises(AssertionError) as caught:
            check(bug.spec, settings(profiles.CI, phases=[Phase.generate, Phase.shrink]))
        found.append(str(caught.value))
    assert found[0] == found[1]
    assert re.search(bug.rule, found[0])


class LosesItsBookkeeping(ReferenceHost):
    """Looks a Lead up in a table of its own that a failed save never filled: a ``KeyError``
    of the host's own, which the driver reports as the request's failure."""

    async def model(self, command: at.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        texts: dict[str, str] = {}
        for lead_id in command.lead_ids:
            texts[lead_id] = texts.pop(lead_id)
        async for chunk in super().model(command):
            yield chunk


class WrapsTheWorldsErrors(ReferenceHost):
    """Raises an error type of its own from the storage's (``raise ... from error``): still the
    world's failure, not the host's."""

    async def persist(self, command: at.Persist) -> None:
        try:
            await super().persist(command)
        except Exception as error:
            raise RuntimeError("the save failed") from error


@pytest.mark.req("TL-11")
def test_an_exception_of_the_hosts_own_is_a_finding() -> None:
    """An effect that raises what no client raised is a bug of the host's, told as such; one
    that raises from the world's own failure is not."""
    program = [user("prompt"), answer("storage#1", "ok"), user("lead"),
               answer("storage#2", "ok"), answer("engine#1", "open"),
               answer("engine#1", "read_file"), answer("storage#3", "ok")]
    with pytest.raises(AssertionError, match=r"\[host-error, TL-11\] the model effect for "
                                             r"p1/r2 raised KeyError: 'L2'"):
        replay(AsyncSpec(make_effects=LosesItsBookkeeping.effects_for), program)
    replay(AsyncSpec(make_effects=WrapsTheWorldsErrors.effects_for),
           [user("prompt"), answer("storage#1", "fail"), user("continue"),
            answer("storage#2", "timeout")])


@pytest.mark.req("TL-3", "TL-8")
def test_the_worlds_tools_in_the_hosts_own_vocabulary() -> None:
    """The world's three tools as one ``bash`` tool: the rules follow the world's tool, not the
    name (a write is still never stopped part-way, and still needs the user's allow); a map
    that leaves one out is refused, naming the field."""
    bash = {kind: WorldTool("bash", json.dumps({"command": kind}), writes=shape.writes,
                            needs_permission=shape.needs_permission)
            for kind, shape in TOOLS.items()}
    spec = AsyncSpec(make_effects=reference_effects, tools=bash)
    run = Run(spec, Listed(PLAIN), steps=len(PLAIN), verbose=True)
    assert run.play() == []
    assert any("name='bash'" in line for line in run.log)
    kills = attrs.evolve(CATALOGUE["cancel-kills-writes"].spec, tools=bash)
    with pytest.raises(AssertionError, match=r"\[cancel, TL-8\] the write c1 was stopped"):
        replay(kills, [user("prompt"), answer("storage#1", "ok"), answer("engine#1", "open"),
                       answer("engine#1", "write_file"), answer("storage#2", "ok"),
                       answer("dialog#1", "allow"), user("stop")])
    with pytest.raises(ValueError, match=r"tools must map each of the world's tools"):
        AsyncSpec(make_effects=reference_effects, tools={"read_file": TOOLS["read_file"]})


def test_each_text_part_of_a_user_message_is_a_text_of_its_own() -> None:
    """A host that joins consecutive user turns into one message (Anthropic's alternating
    roles) sends the prompt and a Lead as two parts: two texts, each checked on its own."""
    joined = [{"role": "user", "content": [{"type": "text", "text": "prompt 1"},
                                           {"type": "text", "text": "lead 2"}]}]
    assert from_anthropic(joined) == (SentUser("prompt 1"), SentUser("lead 2"))
    assert from_openai_chat(joined) == (SentUser("prompt 1"), SentUser("lead 2"))


class LocksItsWrites(ReferenceHost):
    """Correct: its writes take turns under a lock (a Lead's save waits for the prompt's)."""

    def __init__(self, world: Any) -> None:
        super().__init__(world)
        self.lock = anyio.Lock()

    async def persist(self, command: at.Persist) -> None:
        async with self.lock:
            await super().persist(command)

    async def save_lead(self, command: at.SaveLead) -> None:
        async with self.lock:
            await super().save_lead(command)


class RunsToolsInATaskGroup(ReferenceHost):
    """Correct: runs each tool in a task group of its own; a failure comes out as a group."""

    async def tool(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        results: list[aio.ToolResult] = []
        async with anyio.create_task_group() as group:
            async def run() -> None:
                results.append(await self.world.tools.run(command.call, stop))
            group.start_soon(run)
        return results[0]


def test_locks_and_task_groups_are_not_findings() -> None:
    """An effect waiting on a lock another effect holds waits on the world too; a world error
    raised through a task group is still the world's."""
    replay(AsyncSpec(make_effects=LocksItsWrites.effects_for),
           [user("prompt"), user("lead"), answer("storage#1", "ok"), answer("storage#2", "ok")])
    check(AsyncSpec(make_effects=LocksItsWrites.effects_for),
          settings(profiles.CI, max_examples=30))
    replay(AsyncSpec(make_effects=RunsToolsInATaskGroup.effects_for),
           [user("prompt"), answer("storage#1", "ok"), answer("engine#1", "open"),
            answer("engine#1", "read_file"), answer("storage#2", "ok"), answer("tool#1", "fail")])


class AnswersWithABool(ReferenceHost):
    async def permission(self, command: at.AskPermission) -> Any:
        return await self.world.user.ask(command.call) == at.PermissionDecision.ALLOW


class DropsToolResults(ReferenceHost):
    def messages(self, command: at.RequestModelStream) -> list[dict[str, Any]]:
        return [m for m in super().messages(command) if m["role"] != "tool"]


@pytest.mark.req("TL-3", "TL-5", "TL-11")
def test_a_wrong_return_and_a_dropped_result_are_findings() -> None:
    """An effect's value the driver cannot read is the host's error; a stored tool result the
    next request leaves out is a finding of what the engine received."""
    to_the_dialog = [user("prompt"), answer("storage#1", "ok"), answer("engine#1", "open"),
                     answer("engine#1", "write_file"), answer("storage#2", "ok")]
    with pytest.raises(AssertionError, match=r"\[host-error, TL-11\] the permission effect for "
                                             r"c1 returned True, not a PermissionDecision"):
        replay(AsyncSpec(make_effects=AnswersWithABool.effects_for),
               [*to_the_dialog, answer("dialog#1", "allow")])
    with pytest.raises(AssertionError, match=r"\[engine-input, TL-5\] p1/r2 does not carry the "
                                             r"stored results of \['c1'\]"):
        replay(AsyncSpec(make_effects=DropsToolResults.effects_for),
               [user("prompt"), answer("storage#1", "ok"), answer("engine#1", "open"),
                answer("engine#1", "read_file"), answer("storage#2", "ok"),
                answer("tool#1", "ok"), answer("storage#3", "ok")])


def test_a_spec_the_kit_cannot_run_is_refused_naming_the_field() -> None:
    """Misuse is a typed error that names what to fix, not a finding."""
    with pytest.raises(ValueError, match=r"request_format must be one of"):
        AsyncSpec(make_effects=reference_effects, request_format="openai")

    def raises(world: Any) -> aio.Effects:
        raise KeyError("no database")

    with pytest.raises(ValueError, match=r"AsyncSpec.make_effects\(world\) raised KeyError"):
        replay(AsyncSpec(make_effects=raises), [])
    with pytest.raises(TypeError, match=r"must return aio.Effects, got dict"):
        replay(AsyncSpec(make_effects=lambda world: {}), [])  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match=r"the driver refuses the spec \(AsyncSpec.config"):
        replay(AsyncSpec(make_effects=reference_effects,
                         config=at.TurnConfig(hold_natural_stops=True)), [])


def test_check_says_it_cannot_run_inside_an_event_loop() -> None:
    async def inside() -> None:
        check(AsyncSpec(make_effects=reference_effects))

    with pytest.raises(RuntimeError, match=r"call it from a plain \(synchronous\) test"):
        anyio.run(inside)


_SEEN: set[str] = set()


class RemembersAcrossExamples(ReferenceHost):
    """Keeps state at module level: the second example's run differs from the first's."""

    async def persist(self, command: at.Persist) -> None:
        if command.key in _SEEN:
            raise RuntimeError("seen before")
        _SEEN.add(command.key)
        await super().persist(command)


def test_state_kept_between_examples_is_told_as_such() -> None:
    """A finding that does not replay (the host keeps state between examples) is told as
    that, not as hypothesis's flakiness error."""
    with pytest.raises(AssertionError, match=r"make_effects\(world\) is called once per "
                                             r"example and must build all of the host's state"):
        check(AsyncSpec(make_effects=RemembersAcrossExamples.effects_for),
              settings(profiles.CI, max_examples=50))


class BacksOffOnTheWorldsClock(ReferenceHost):
    """Correct: waits a second on the world's clock before it tries a failed write again (and
    writes only what storage lacks)."""

    async def persist(self, command: at.Persist) -> None:
        try:
            await super().persist(command)
        except WorldError:
            await self.world.clock.sleep(1.0)
            await super().persist(command)


class YieldsSdkObjects(ReferenceHost):
    """Yields the SDK's objects instead of their ``model_dump()``: every stream fails."""

    async def model(self, command: at.RequestModelStream) -> AsyncIterator[Any]:
        async for chunk in super().model(command):
            yield type("Chunk", (), {"data": chunk})()


def test_a_sleep_on_the_worlds_clock_is_time_passing_and_a_wrong_yield_a_finding() -> None:
    """A host's own sleep on the world's clock is something the world will answer (time moves
    to it); a model effect that yields what the driver cannot read is the host's error."""
    replay(AsyncSpec(make_effects=BacksOffOnTheWorldsClock.effects_for),
           [user("prompt"), answer("storage#1", "fail"), tick(), answer("storage#2", "ok")])
    with pytest.raises(AssertionError, match=r"\[host-error, TL-11\] the model effect for "
                                             r"p1/r1 yielded Chunk, not a wire object"):
        replay(AsyncSpec(make_effects=YieldsSdkObjects.effects_for),
               [user("prompt"), answer("storage#1", "ok"), answer("engine#1", "open")])


def test_misuse_of_check_and_replay_names_the_argument() -> None:
    with pytest.raises(TypeError, match=r"moves must be a list of moves"):
        replay(AsyncSpec(make_effects=reference_effects), None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"settings must be hypothesis settings"):
        check(AsyncSpec(make_effects=reference_effects), {"max_examples": 5})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"spec must be an AsyncSpec"):
        check(reference_effects)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"make_effects must be a function of the world, got "
                                        r"ellipsis \(a printed test leaves"):
        AsyncSpec(make_effects=...)  # type: ignore[arg-type]
