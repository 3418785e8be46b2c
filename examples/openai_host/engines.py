"""The engines the host talks to, through their official SDKs: each one an async iterator of
wire objects for the driver to read.

Theory of operation
-------------------
:class:`ChatEngine` (``openai.AsyncOpenAI``, Chat Completions) and :class:`MessagesEngine`
(``anthropic.AsyncAnthropic``, Messages) do the same two things: turn the conversation into
their request, open a stream (``stream=True``) and yield every event's ``model_dump()``. They
read nothing of it: the driver (:mod:`agentturn.aio`) feeds the objects to the accumulator each
names as its ``wire`` (``ChatCompletionsStream``, ``AnthropicMessagesStream``), which catches a
response cut at ``max_tokens`` whatever its label says. An SDK exception becomes
:class:`agentturn.aio.StreamError` (a connection error is a network error, an API error is
not), which the driver answers with ``StreamFailed``. When the turn's ``CancelStream`` cancels
the stream, or the driver closes the iterator after the response's last event, the ``async
with`` block closes the HTTP response: the server sees the stream closed before its end. Both
clients are built with ``max_retries=0``: the SDKs otherwise send a failed request again,
twice, silently; here the turn decides retries (a failed request ends the turn with a
resumable error, and the user's ``ContinueTurn`` sends it again).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, cast

import anthropic
import openai

import agentturn as at
from agentturn import aio
from agentturn.engines import AnthropicMessagesStream, ChatCompletionsStream

__all__ = ["TOOLS", "ChatEngine", "Item", "MessagesEngine", "Wires"]


@dataclass(frozen=True)
class Item:
    """One entry of the conversation, engine-neutral."""

    role: str  # "user", "assistant" or "tool"
    text: str = ""
    calls: tuple[at.ToolCall, ...] = ()
    #: For a tool result: the call it answers.
    call_id: str = ""


#: The tools the model may call: name -> (description, JSON Schema of the arguments).
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "write_file": ("Write a text file in the work folder.", {
        "type": "object", "required": ["path", "content"],
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
    "read_file": ("Read a text file of the work folder.", {
        "type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}}),
    "list_files": ("List the files of the work folder.", {"type": "object", "properties": {}}),
}

#: One response's wire objects, as the SDK streamed them.
Wires = AsyncGenerator[dict[str, Any], None]


def _openai_messages(conversation: list[Item]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in conversation:
        if item.role == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": item.text or None}
            if item.calls:
                message["tool_calls"] = [
                    {"id": c.call_id, "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}}
                    for c in item.calls]
            messages.append(message)
        elif item.role == "tool":
            messages.append({"role": "tool", "tool_call_id": item.call_id,
                             "content": item.text})
        else:
            messages.append({"role": "user", "content": item.text})
    return messages


def _anthropic_messages(conversation: list[Item]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in conversation:
        if item.role == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": item.text}] if (
                item.text) else []
            blocks += [{"type": "tool_use", "id": c.call_id, "name": c.name,
                        "input": json.loads(c.arguments or "{}")} for c in item.calls]
            role = "assistant"
        elif item.role == "tool":
            blocks = [{"type": "tool_result", "tool_use_id": item.call_id,
                       "content": item.text}]
            role = "user"
        else:
            blocks = [{"type": "text", "text": item.text}]
            role = "user"
        if messages and messages[-1]["role"] == role:  # the API alternates roles
            messages[-1]["content"] += blocks
        else:
            messages.append({"role": role, "content": blocks})
    return messages


class ChatEngine:
    """OpenAI Chat Completions through ``openai.AsyncOpenAI(base_url=...)``."""

    wire = ChatCompletionsStream

    def __init__(self, base_url: str, model: str, max_tokens: int) -> None:
        self.client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="not-needed",
                                         max_retries=0)
        self.model = model
        self.max_tokens = max_tokens

    async def stream(self, conversation: list[Item]) -> Wires:
        tools = [{"type": "function", "function": {"name": name, "description": text,
                                                   "parameters": schema}}
                 for name, (text, schema) in TOOLS.items()]
        try:
            stream = await self.client.chat.completions.create(
                model=self.model, messages=cast(Any, _openai_messages(conversation)),
                tools=cast(Any, tools), stream=True, stream_options={"include_usage": True},
                max_completion_tokens=self.max_tokens)
            async with stream:
                async for chunk in stream:
                    yield chunk.model_dump()
        except openai.APIError as error:
            raise aio.StreamError(
                str(error), network=isinstance(error, openai.APIConnectionError)) from error

    async def close(self) -> None:
        await self.client.close()


class MessagesEngine:
    """Anthropic Messages through ``anthropic.AsyncAnthropic(base_url=...)``."""

    wire = AnthropicMessagesStream

    def __init__(self, base_url: str, model: str, max_tokens: int) -> None:
        self.client = anthropic.AsyncAnthropic(base_url=base_url, api_key="not-needed",
                                               max_retries=0)
        self.model = model
        self.max_tokens = max_tokens

    async def stream(self, conversation: list[Item]) -> Wires:
        tools = [{"name": name, "description": text, "input_schema": schema}
                 for name, (text, schema) in TOOLS.items()]
        try:
            stream = await self.client.messages.create(
                model=self.model, max_tokens=self.max_tokens, stream=True,
                messages=cast(Any, _anthropic_messages(conversation)), tools=cast(Any, tools))
            async with stream:
                async for event in stream:
                    yield event.model_dump()
        except anthropic.APIError as error:
            raise aio.StreamError(
                str(error), network=isinstance(error, anthropic.APIConnectionError)) from error

    async def close(self) -> None:
        await self.client.close()
