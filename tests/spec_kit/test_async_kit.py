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
    WorldTool,
    answer,
    check,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    reference_effects,
    replay,
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


@pytest.mark.req("TL-5")
def test_a_finding_shrinks_to_a_program_that_pastes_and_replays() -> None:
    """req: TL-5 — under the CI profile with the shrinker on, the retried save shrinks to at
    most 15 moves; the printed program is a test that, pasted, fails the same way."""
    bug = CATALOGUE["retries-saves"]
    with pytest.raises(AssertionError) as caught:
        check(bug.spec, settings(profiles.CI, phases=[Phase.generate, Phase.shrink]))
    message = str(caught.value)
    program = message[message.index("def test_the_async_kit_finding"):]
    moves = re.findall(r"^        ((?:answer|user|tick)\(.*\)),$", program, flags=re.M)
    assert 1 <= len(moves) <= 15, message
    namespace = {"answer": answer, "user": user, "tick": tick}
    with pytest.raises(AssertionError, match=bug.rule):
        replay(bug.spec, [eval(move, namespace) for move in moves])
    assert "from async_catalogue import RetriesSaves" in message
    assert "replay(AsyncSpec(make_effects=RetriesSaves.effects_for), [" in message


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
