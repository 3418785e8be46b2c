"""Wire objects of the four engines, built with the engines' own SDK types and dumped.

A :class:`Script` is one response said plainly (text pieces, tool calls with their argument
pieces, the finish reason, usage); each ``*_stream`` function streams it the way that engine
does, each piece one delta, through the SDK's pydantic event classes and their ``model_dump()``.
Splitting a text or an argument string into more pieces re-chunks the same response.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from anthropic.types import (
    Message,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
)
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseIncompleteEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
)

import agentturn as at

Wire = dict[str, Any]


@attrs.frozen
class Call:
    call_id: str
    name: str
    pieces: tuple[str, ...]
    #: False: the stream stops inside this call (no closing marker).
    closed: bool = True


@attrs.frozen
class Script:
    text: tuple[str, ...] = ()
    calls: tuple[Call, ...] = ()
    finish: str = "stop"
    input_tokens: int = 12
    output_tokens: int = 30


# --- OpenAI Chat Completions ------------------------------------------------------------------


def chat_chunk(choices: list[dict[str, Any]] | None = None,
               usage: dict[str, int] | None = None) -> Wire:
    return ChatCompletionChunk(id="chatcmpl-1", created=0, model="gpt-test",
                               object="chat.completion.chunk", choices=choices or [],
                               usage=usage).model_dump()


def chat_stream(script: Script, *, usage: bool = True) -> list[Wire]:
    out = [chat_chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}}])]
    out += [chat_chunk([{"index": 0, "delta": {"content": piece}}]) for piece in script.text]
    for index, call in enumerate(script.calls):
        first, *rest = call.pieces or ("",)
        out.append(chat_chunk([{"index": 0, "delta": {"tool_calls": [{
            "index": index, "id": call.call_id, "type": "function",
            "function": {"name": call.name, "arguments": first}}]}}]))
        out += [chat_chunk([{"index": 0, "delta": {"tool_calls": [{
            "index": index, "function": {"arguments": piece}}]}}]) for piece in rest]
    out.append(chat_chunk([{"index": 0, "delta": {}, "finish_reason": script.finish}]))
    if usage:
        out.append(chat_chunk(usage={"prompt_tokens": script.input_tokens,
                                     "completion_tokens": script.output_tokens,
                                     "total_tokens": script.input_tokens + script.output_tokens}))
    return out


def chat_completion(script: Script, *, usage: bool = True) -> list[Wire]:
    """The same response asked for without streaming: one ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(script.text) or None}
    if script.calls:
        message["tool_calls"] = [
            {"id": call.call_id, "type": "function",
             "function": {"name": call.name, "arguments": "".join(call.pieces)}}
            for call in script.calls]
    return [ChatCompletion(
        id="chatcmpl-1", created=0, model="gpt-test", object="chat.completion",
        choices=[{"index": 0, "message": message, "finish_reason": script.finish}],
        usage={"prompt_tokens": script.input_tokens, "completion_tokens": script.output_tokens,
               "total_tokens": script.input_tokens + script.output_tokens} if usage else None,
    ).model_dump()]


# --- Anthropic Messages -----------------------------------------------------------------------


def anthropic_stream(script: Script, *, stop: bool = True) -> list[Wire]:
    out = [RawMessageStartEvent(type="message_start", message={
        "id": "msg_1", "type": "message", "role": "assistant", "content": [],
        "model": "claude-test", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": script.input_tokens, "output_tokens": 1}}).model_dump()]
    index = 0
    if script.text:
        out.append(RawContentBlockStartEvent(type="content_block_start", index=0, content_block={
            "type": "text", "text": ""}).model_dump())
        out += [RawContentBlockDeltaEvent(type="content_block_delta", index=0, delta={
            "type": "text_delta", "text": piece}).model_dump() for piece in script.text]
        out.append(RawContentBlockStopEvent(type="content_block_stop", index=0).model_dump())
        index = 1
    for call in script.calls:
        out.append(RawContentBlockStartEvent(type="content_block_start", index=index,
                                             content_block={"type": "tool_use",
                                                            "id": call.call_id,
                                                            "name": call.name, "input": {}}
                                             ).model_dump())
        out += [RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta={
            "type": "input_json_delta", "partial_json": piece}).model_dump()
            for piece in call.pieces]
        if call.closed:
            out.append(RawContentBlockStopEvent(type="content_block_stop",
                                                index=index).model_dump())
        index += 1
    out.append(RawMessageDeltaEvent(type="message_delta", delta={
        "stop_reason": script.finish, "stop_sequence": None},
        usage={"output_tokens": script.output_tokens}).model_dump())
    if stop:
        out.append(RawMessageStopEvent(type="message_stop").model_dump())
    return out


def anthropic_message(script: Script) -> list[Wire]:
    """The same response asked for without streaming: one ``message`` object (each call's
    pieces must join to a JSON object: a whole message carries ``input`` parsed)."""
    content: list[dict[str, Any]] = []
    if script.text:
        content.append({"type": "text", "text": "".join(script.text)})
    content += [{"type": "tool_use", "id": call.call_id, "name": call.name,
                 "input": json.loads("".join(call.pieces) or "{}")} for call in script.calls]
    return [Message(id="msg_1", type="message", role="assistant", content=content,
                    model="claude-test", stop_reason=script.finish, stop_sequence=None,
                    usage={"input_tokens": script.input_tokens,
                           "output_tokens": script.output_tokens}).model_dump()]


# --- OpenAI Responses -------------------------------------------------------------------------


def response_object(status: str, script: Script, reason: str | None = None,
                    max_output_tokens: int | None = None) -> Response:
    return Response.model_validate({
        "id": "resp_1", "object": "response", "created_at": 0, "model": "gpt-test",
        "output": [], "status": status, "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [], "max_output_tokens": max_output_tokens,
        "incomplete_details": {"reason": reason} if reason else None,
        "usage": {"input_tokens": script.input_tokens, "output_tokens": script.output_tokens,
                  "total_tokens": script.input_tokens + script.output_tokens,
                  "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}}})


def responses_stream(script: Script, *, incomplete: str | None = None,
                     max_output_tokens: int | None = None) -> list[Wire]:
    out: list[Wire] = []
    seq = iter(range(10_000))
    if script.text:
        out += [ResponseTextDeltaEvent(type="response.output_text.delta", item_id="msg_1",
                                       output_index=0, content_index=0, delta=piece,
                                       logprobs=[], sequence_number=next(seq)).model_dump()
                for piece in script.text]
    for number, call in enumerate(script.calls, start=1):
        item = {"type": "function_call", "id": f"fc_{number}", "call_id": call.call_id,
                "name": call.name, "arguments": "", "status": "in_progress"}
        out.append(ResponseOutputItemAddedEvent(type="response.output_item.added",
                                                output_index=number, item=item,
                                                sequence_number=next(seq)).model_dump())
        out += [ResponseFunctionCallArgumentsDeltaEvent(
            type="response.function_call_arguments.delta", item_id=f"fc_{number}",
            output_index=number, delta=piece, sequence_number=next(seq)).model_dump()
            for piece in call.pieces]
        if call.closed:
            whole = "".join(call.pieces)
            out.append(ResponseFunctionCallArgumentsDoneEvent(
                type="response.function_call_arguments.done", item_id=f"fc_{number}",
                output_index=number, arguments=whole,
                sequence_number=next(seq)).model_dump())
            out.append(ResponseOutputItemDoneEvent(
                type="response.output_item.done", output_index=number,
                item={**item, "arguments": whole, "status": "completed"},
                sequence_number=next(seq)).model_dump())
    if incomplete is None:
        out.append(ResponseCompletedEvent(
            type="response.completed", sequence_number=next(seq),
            response=response_object("completed", script, None, max_output_tokens)).model_dump())
    else:
        out.append(ResponseIncompleteEvent(
            type="response.incomplete", sequence_number=next(seq),
            response=response_object("incomplete", script, incomplete, max_output_tokens)
        ).model_dump())
    return out


# --- the turn, fed the event ------------------------------------------------------------------


def commands_after(event: at.StreamCompleted | at.StreamFailed,
                   permission: bool = False) -> list[at.Command]:
    """Every command the turn gives from the event on (each write acknowledged), as far as the
    turn goes without a tool's answer."""
    state = at.TurnState.create("chat-1", at.TurnConfig(auto_title=False))
    state, _ = at.reduce(state, at.PromptSubmitted(turn_id="t1", message_id="m1", text="go"))
    state, _ = at.reduce(state, at.Persisted(key="t1/p1"))
    state, _ = at.reduce(state, at.StreamOpened(request_id="t1/r1"))
    if isinstance(event, at.StreamCompleted) and permission:
        event = attrs.evolve(event, tool_calls=tuple(
            attrs.evolve(call, needs_permission=True) for call in event.tool_calls))
    state, commands = at.reduce(state, event)
    seen = list(commands)
    for _ in range(20):
        writes = [c for c in commands if isinstance(c, at.Persist)]
        if not writes:
            break
        state, commands = at.reduce(state, at.Persisted(key=writes[-1].key))
        seen += commands
    return seen


def runs_a_tool(commands: list[at.Command]) -> bool:
    return any(isinstance(c, at.ExecuteTool | at.AskPermission) for c in commands)


def end_of(commands: list[at.Command]) -> at.TurnOutcome:
    ends = [c for c in commands if isinstance(c, at.EndTurn)]
    assert len(ends) == 1, commands
    return ends[0].outcome
