"""The example host under the async spec kit: :class:`~.host.MiniSweHost`'s own effects, with
the kit's world behind its three seams (``tests/examples/test_mini_swe_agent_kit.py``).

Theory of operation
-------------------
:func:`make_effects` builds the host as the example does, with mini-swe-agent's real model
objects, agent and message history, and hands the kit its effects; only the clients change:

* :class:`WorldModel` sends the request the host built to the world's engine and yields its
  Chat Completions chunks (the production client yields one whole ``chat.completion``: the
  driver reads both), raises the engine's refusals as litellm raises them (a request over the
  context window as ``litellm.ContextWindowExceededError``), and asks the world's namer for
  the title;
* :class:`WorldShell` runs a call on the world's tools, as ``LocalEnvironment.execute`` runs a
  command: to its end whatever the user does (the production shell cannot stop a command),
  a failure coming back as the command's ``exception_info``;
* the store is the world's storage.

The world's three tools are ``bash`` commands here (:data:`TOOLS`): a read, a write (never
stopped part-way) and a third command; a headless run asks for no permission.
:func:`read_request` reads what the host sends the engine back in agentturn's terms: OpenAI
Chat messages, with the two texts the host adds of its own made plain: the first prompt, which
mini-swe-agent frames with its instance template (read back as the prompt typed), and the
corrective note of a TL-6 retry (not the user's text: kept whole, as ``SentOther``).

The production clients run litellm and the commands in worker threads; the kit cannot see into
threads, and does not need to: what it checks is the host's own code around the clients.
"""

from __future__ import annotations

import functools
import json
import pathlib
import tempfile
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from litellm.exceptions import ContextWindowExceededError
from minisweagent.models.litellm_model import LitellmModel

import agentturn as at
from agentturn import aio
from agentturn.testing.asyncio_kit import (
    AsyncSpec,
    AsyncWorld,
    ContextTooLong,
    Sent,
    SentOther,
    SentUser,
    WorldError,
    WorldTool,
    from_openai_chat,
)

from .host import MiniSweHost

__all__ = ["SPEC", "TOOLS", "WorldModel", "WorldShell", "host_for", "make_effects",
           "read_request"]

#: The most tokens a response may hold (the driver checks each response against it).
MAX_TOKENS = 1024


def _bash(command: str, *, writes: bool = False) -> WorldTool:
    return WorldTool("bash", json.dumps({"command": command}), writes=writes)


#: The world's tools as the example's one ``bash`` tool.
TOOLS = {"read_file": _bash("cat notes.txt"),
         "write_file": _bash("echo done > notes.txt", writes=True),
         "todo_write": _bash("ls")}


class WorldModel:
    """The world's engine and namer as the host's :class:`~.host.ModelClient`."""

    def __init__(self, world: AsyncWorld) -> None:
        self.world = world

    async def respond(self, model: LitellmModel, messages: list[dict[str, Any]]
                      ) -> AsyncGenerator[Mapping[str, Any], None]:
        try:
            stream = await self.world.engine.create(messages)
        except ContextTooLong as error:  # as litellm raises the API's refusal
            raise ContextWindowExceededError(
                str(error), model=model.config.model_name, llm_provider="openai") from error
        async with stream:
            async for chunk in stream:
                yield chunk

    async def name(self, model: LitellmModel, messages: list[dict[str, Any]]) -> str:
        return await self.world.namer.title(str(messages[-1]["content"]))


class WorldShell:
    """The world's tools as the host's :class:`~.host.Shell`."""

    def __init__(self, world: AsyncWorld) -> None:
        self.world = world

    async def execute(self, action: dict[str, Any], call: at.ToolCall) -> dict[str, Any]:
        try:
            # a signal never set: the production shell cannot stop a command either
            result = await self.world.tools.run(call, aio.StopSignal())
        except WorldError as error:  # as LocalEnvironment reports a command that raised
            return {"output": "", "returncode": -1, "exception_info": str(error)}
        return {"output": result.output, "returncode": 0, "exception_info": ""}


def host_for(world: AsyncWorld | None, cls: type[MiniSweHost] = MiniSweHost) -> MiniSweHost:
    """The example host (or a subclass of it) with the world behind its clients (``None``:
    the production clients, never called)."""
    # litellm is never called (the world answers); the address is one nothing listens on
    kwargs = {"api_base": "http://127.0.0.1:9", "api_key": "none", "max_tokens": MAX_TOKENS}
    workdir = pathlib.Path(tempfile.gettempdir())  # nothing runs in it: the world's tools do
    if world is None:
        return cls(model_name="openai/world", model_kwargs=kwargs, workdir=workdir)
    return cls(model_name="openai/world", model_kwargs=kwargs, workdir=workdir,
               client=WorldModel(world), shell=WorldShell(world), store=world.storage)


def make_effects(world: AsyncWorld) -> aio.Effects:
    """The example host's effects, the world behind its clients."""
    return host_for(world).effects


@functools.cache
def _framing() -> tuple[str, str, str]:
    """What the host puts before and after the first prompt, and its corrective note."""
    host = host_for(None)
    marker = "\x00task\x00"
    framed = host._user_text(marker)
    before, _, after = framed.partition(marker)
    return before, after, host.corrective_note()


def read_request(messages: Sequence[Any]) -> tuple[Sent, ...]:
    """What the host sent, read back: OpenAI Chat, its own two texts made plain."""
    before, after, corrective = _framing()
    read: list[Sent] = []
    for item in from_openai_chat(messages):
        if isinstance(item, SentUser):
            if item.text == corrective:
                item = SentOther(item.text)
            elif (item.text.startswith(before) and item.text.endswith(after)
                  and len(item.text) >= len(before) + len(after)):
                item = SentUser(item.text[len(before):len(item.text) - len(after)])
        read.append(item)
    return tuple(read)


#: The example host, as the kit checks it.
SPEC = AsyncSpec(make_effects=make_effects, request_format=read_request,
                 config=MiniSweHost.CONFIG, chat_id="chat-1", tools=TOOLS,
                 max_output_tokens=MAX_TOKENS)
