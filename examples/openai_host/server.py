"""A scripted stand-in for the engines: OpenAI Chat Completions and Anthropic Messages over
real SSE, on 127.0.0.1 only.

Theory of operation
-------------------
A scene is a list of :class:`Reply` values, one per model request of a turn: the request's
``model`` names the scene and the number of assistant messages in its conversation picks the
reply, so the server keeps no session. Each reply is streamed the way that engine streams it
(text and argument strings cut into small deltas, the finish reason, usage), as the SDKs' own
SSE: ``data: {...}`` lines closed by ``data: [DONE]`` for OpenAI, ``event:``/``data:`` pairs for
Anthropic. A reply can lie like real serving stacks do: a ``tool_calls`` label on arguments cut
mid-JSON at the token limit, a ``tool_use`` label on a block that never got its stop.

A Chat Completions request that does not ask for a stream (``stream`` absent or false, as
LiteLLM and mini-swe-agent send it) gets the same reply as one ``chat.completion`` object (the
choice's ``message`` holds the text and the calls, the usage is in the same object), sent after
the time its stream would have taken (``delay`` per delta), so a slow reply stays slow.

The server records every request body, and how many streams the client closed before their end
(what ``CancelStream`` must do).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["Reply", "ScriptedServer"]


@dataclass(frozen=True)
class Reply:
    """One scripted model response."""

    text: str = ""
    #: ``(call id, tool name, raw argument string)``; the string may stop mid-JSON.
    calls: tuple[tuple[str, str, str], ...] = ()
    finish: str = "stop"
    output_tokens: int = 20
    #: Seconds between two deltas (a slow stream, for Stop to land in).
    delay: float = 0.0
    #: Anthropic only: the last tool block never gets its ``content_block_stop``.
    unclosed: bool = False


def _cut(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or []


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _chat_lines(reply: Reply) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return _sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                     "model": "scripted", "choices": [{"index": 0, "delta": delta,
                                                        "finish_reason": finish}], **extra})

    lines = [chunk({"role": "assistant", "content": ""})]
    lines += [chunk({"content": piece}) for piece in _cut(reply.text, 8)]
    for index, (call_id, name, arguments) in enumerate(reply.calls):
        lines.append(chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                            "function": {"name": name, "arguments": ""}}]}))
        lines += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                  for piece in _cut(arguments, 6)]
    lines.append(chunk({}, reply.finish))
    lines.append(_sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
                       "model": "scripted", "choices": [],
                       "usage": {"prompt_tokens": 50, "completion_tokens": reply.output_tokens,
                                 "total_tokens": 50 + reply.output_tokens}}))
    return [*lines, "data: [DONE]\n\n"]


def _chat_completion(reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name,
                                                              "arguments": arguments}}
            for call_id, name, arguments in reply.calls]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish}],
            "usage": {"prompt_tokens": 50, "completion_tokens": reply.output_tokens,
                      "total_tokens": 50 + reply.output_tokens}}


def _anthropic_lines(reply: Reply) -> list[str]:
    def event(kind: str, **data: Any) -> str:
        return _sse({"type": kind, **data}, kind)

    lines = [event("message_start", message={
        "id": "msg_1", "type": "message", "role": "assistant", "content": [],
        "model": "scripted", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 1}})]
    index = 0
    if reply.text:
        lines.append(event("content_block_start", index=0,
                           content_block={"type": "text", "text": ""}))
        lines += [event("content_block_delta", index=0,
                        delta={"type": "text_delta", "text": piece})
                  for piece in _cut(reply.text, 8)]
        lines.append(event("content_block_stop", index=0))
        index = 1
    for number, (call_id, name, arguments) in enumerate(reply.calls):
        lines.append(event("content_block_start", index=index, content_block={
            "type": "tool_use", "id": call_id, "name": name, "input": {}}))
        lines += [event("content_block_delta", index=index,
                        delta={"type": "input_json_delta", "partial_json": piece})
                  for piece in _cut(arguments, 6)]
        if not (reply.unclosed and number == len(reply.calls) - 1):
            lines.append(event("content_block_stop", index=index))
        index += 1
    lines.append(event("message_delta", delta={"stop_reason": reply.finish,
                                                "stop_sequence": None},
                       usage={"output_tokens": reply.output_tokens}))
    return [*lines, event("message_stop")]


class ScriptedServer:
    """The Starlette app and its uvicorn server; ``async with`` starts and stops it."""

    def __init__(self, scenes: dict[str, list[Reply]]) -> None:
        self.scenes = scenes
        #: ``(path, body)`` of every request, in arrival order.
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._streams: list[list[int]] = []
        self.base_url = ""
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/messages", self._messages, methods=["POST"]),
        ])
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def closed_early(self) -> int:
        """How many streams the client closed before their last line."""
        return sum(1 for sent, total in self._streams if sent < total)

    def _reply(self, body: dict[str, Any]) -> Reply | None:
        scene = self.scenes.get(str(body.get("model")), [])
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        return scene[turn] if turn < len(scene) else None

    async def _respond(self, request: Request, lines_of: Any) -> Response:
        body = await request.json()
        self.requests.append((request.url.path, body))
        reply = self._reply(body)
        if reply is None:
            return JSONResponse({"error": {"message": "no scripted reply", "type": "invalid"}},
                                status_code=400)
        if request.url.path == "/v1/chat/completions" and body.get("stream") is not True:
            # The whole reply at once, after the time its stream would have taken.
            await asyncio.sleep(reply.delay * len(lines_of(reply)))
            return JSONResponse(_chat_completion(reply))
        return StreamingResponse(self._stream(lines_of(reply), reply.delay),
                                 media_type="text/event-stream")

    async def _stream(self, lines: list[str], delay: float) -> AsyncIterator[str]:
        progress = [0, len(lines)]  # lines sent, lines in all
        self._streams.append(progress)
        for line in lines:
            if delay:
                await asyncio.sleep(delay)
            yield line  # the client going away cancels the response here or in the sleep
            progress[0] += 1

    async def _chat(self, request: Request) -> Response:
        return await self._respond(request, _chat_lines)

    async def _messages(self, request: Request) -> Response:
        return await self._respond(request, _anthropic_lines)

    async def __aenter__(self) -> ScriptedServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # a free port, loopback only
        port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
            await asyncio.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{port}"
        self._socket = sock
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        await self._task
        self._socket.close()
