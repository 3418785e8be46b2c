"""The reference runner: a host on :class:`agentturn.aio.TurnDriver`, talking to the suite's
server through the official ``openai`` and ``anthropic`` SDKs.

Theory of operation
-------------------
Each task is one turn of a fresh chat, run by the driver in its own event loop
(``anyio.run`` in the suite's worker thread). The host writes only effects, as
``docs/howto/driver.md`` shows:

* ``persist``: the conversation, in ``Persist`` order. A response that did not complete
  normally (cut off, filtered, malformed: ``completes_normally`` false) joins it with its text
  only, and the results recorded for its calls are not sent: its arguments may be incomplete
  JSON a real server rejects;
* ``model``: the corrective note when the request is the one retry after a malformed format
  (TL-6), then the SDK's request. Streamed, every event's ``model_dump()`` is yielded; an
  OpenAI stream asks for its usage (``stream_options.include_usage``), without which a cut
  labelled ``tool_calls`` cannot be seen. Not streamed, an OpenAI ``chat.completion`` is
  ``chat.completion`` or Anthropic ``message`` is yielded whole (the accumulators read a
  whole response as the stream that would have carried it);
* ``tool``: the suite's tools (:meth:`~agentturn.tools.conform.protocol.Tools.acall`);
* ``permission``: never asked (no call needs one), allow if it were.

The driver does the rest: it feeds the wire objects to the accumulator started with the
requested output limit, so a response cut at the limit is caught whatever its label, and none
of its calls runs. The caller gets the turn's typed outcome: ``success`` only for
``FINISHED``, the outcome kind and the raw finish reason always.

Both SDK clients are built with ``max_retries=0``: the turn decides retries, not the SDK.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import anthropic
import anyio
import openai

import agentturn as at
from agentturn import aio
from agentturn.engines import AnthropicMessagesStream, ChatCompletionsStream

from ..protocol import MODES, Mode, RunResult, Task, Tools

__all__ = ["CORRECTIVE", "Runner"]

#: What the host says to the model before the one corrective retry (TL-6).
CORRECTIVE = "Your last tool call could not be parsed. Send it again as valid JSON arguments."


@dataclass(frozen=True)
class _Item:
    role: str  # "user", "assistant" or "tool"
    text: str = ""
    calls: tuple[at.ToolCall, ...] = ()
    call_id: str = ""


class _Host:
    """One turn's effects."""

    def __init__(self, task: Task, tools: Tools) -> None:
        self.task = task
        self.tools = tools
        self.conversation: list[_Item] = []
        #: The calls of responses whose calls are not sent back (their results neither).
        self.withheld: set[str] = set()
        self.last_text = ""
        self.openai: openai.AsyncOpenAI | None = None
        self.anthropic: anthropic.AsyncAnthropic | None = None
        if task.api == "openai-chat":
            self.openai = openai.AsyncOpenAI(base_url=task.base_url, api_key="conform",
                                             max_retries=0)
        else:
            self.anthropic = anthropic.AsyncAnthropic(base_url=task.base_url,
                                                      api_key="conform", max_retries=0)

    async def close(self) -> None:
        if self.openai is not None:
            await self.openai.close()
        if self.anthropic is not None:
            await self.anthropic.close()

    # --- the effects ---------------------------------------------------------------------

    async def persist(self, command: at.Persist) -> None:
        for record in command.records:
            if isinstance(record, at.UserMessageRecord):
                self.conversation.append(_Item("user", record.text))
            elif isinstance(record, at.ResponseRecord):
                calls = record.tool_calls if record.completes_normally else ()
                self.withheld |= {c.call_id for c in record.tool_calls if c not in calls}
                self.conversation.append(_Item("assistant", record.text, calls))
                self.last_text = record.text
            elif record.call_id not in self.withheld:
                text = record.output if record.status is at.ToolResultStatus.EXECUTED else (
                    record.reason)
                self.conversation.append(_Item("tool", text, call_id=record.call_id))

    async def model(self, command: at.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        if command.corrective:
            self.conversation.append(_Item("user", CORRECTIVE))
        # closing the SDK iterator closes the HTTP response, even when the driver stops early
        wires = self._openai() if self.openai is not None else self._anthropic()
        async with contextlib.aclosing(wires) as objects:
            async for wire in objects:
                yield wire

    async def permission(self, command: at.AskPermission) -> at.PermissionDecision:
        return at.PermissionDecision.ALLOW

    async def tool(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        # Only a call of a normally completed response reaches here: its arguments parse.
        arguments = json.loads(command.call.arguments or "{}")
        output = await self.tools.acall(command.call.name, arguments)
        return aio.ToolResult(output=output, error=output.startswith("error:"))

    # --- the engines ---------------------------------------------------------------------

    async def _openai(self) -> AsyncGenerator[Mapping[str, Any], None]:
        assert self.openai is not None
        tools = [{"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": dict(t.parameters)}}
            for t in self.task.tools]
        request: dict[str, Any] = {
            "model": self.task.model, "messages": _openai_messages(self.conversation),
            "tools": tools, "max_completion_tokens": self.task.max_tokens}
        try:
            if not self.task.stream:
                completion = await self.openai.chat.completions.create(**request)
                yield completion.model_dump()
                return
            stream = await self.openai.chat.completions.create(
                **request, stream=True, stream_options={"include_usage": True})
            async with stream:
                async for chunk in stream:
                    yield chunk.model_dump()
        except openai.APIError as error:
            raise aio.StreamError(
                str(error), network=isinstance(error, openai.APIConnectionError)) from error

    async def _anthropic(self) -> AsyncGenerator[Mapping[str, Any], None]:
        assert self.anthropic is not None
        tools = [{"name": t.name, "description": t.description,
                  "input_schema": dict(t.parameters)} for t in self.task.tools]
        request: dict[str, Any] = {
            "model": self.task.model, "max_tokens": self.task.max_tokens,
            "messages": _anthropic_messages(self.conversation), "tools": tools}
        try:
            if not self.task.stream:
                message = await self.anthropic.messages.create(**request)
                yield message.model_dump()
                return
            stream = await self.anthropic.messages.create(**request, stream=True)
            async with stream:
                async for event in stream:
                    yield event.model_dump()
        except anthropic.APIError as error:
            raise aio.StreamError(
                str(error), network=isinstance(error, anthropic.APIConnectionError)) from error


def _openai_messages(conversation: list[_Item]) -> list[dict[str, Any]]:
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


def _anthropic_messages(conversation: list[_Item]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for item in conversation:
        blocks: list[dict[str, Any]]
        if item.role == "assistant":
            blocks = [{"type": "text", "text": item.text}] if item.text else []
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
        if not blocks:
            continue  # an empty response: the API takes no empty message
        if messages and messages[-1]["role"] == role:  # the API alternates roles
            messages[-1]["content"] += blocks
        else:
            messages.append({"role": role, "content": blocks})
    return messages


class Runner:
    """agentturn's host on the driver, in every mode the server speaks."""

    name = "agentturn-driver"
    modes: tuple[Mode, ...] = MODES

    def run(self, task: Task, tools: Tools) -> RunResult:
        return anyio.run(self._run, task, tools)

    async def _run(self, task: Task, tools: Tools) -> RunResult:
        host = _Host(task, tools)
        wire = ChatCompletionsStream if task.api == "openai-chat" else AnthropicMessagesStream
        try:
            driver = aio.TurnDriver(
                "conform", at.TurnConfig(auto_title=False),
                aio.Effects(persist=host.persist, model=host.model,
                            permission=host.permission, tool=host.tool),
                max_output_tokens=task.max_tokens, wire=wire)
            async with driver:
                ending = await driver.run_turn(at.PromptSubmitted(
                    turn_id="turn-1", message_id="turn-1/prompt", text=task.prompt))
        finally:
            await host.close()
        outcome = ending.outcome
        success = outcome.kind is at.OutcomeKind.FINISHED
        return RunResult(
            success=success, text=host.last_text, outcome=outcome.kind.value,
            finish_reason=outcome.finish_reason.raw if outcome.finish_reason else None,
            error=None if success else outcome.message)


