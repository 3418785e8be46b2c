"""The scripted engine server: OpenAI Chat Completions and Anthropic Messages on 127.0.0.1.

Theory of operation
-------------------
One :class:`EngineServer` serves a whole suite run. Each run of a scenario gets a model name of
its own, and the server keys everything by it: the script (a list of :class:`Reply`, one per
request: the n-th request for a model gets the n-th reply, whatever the conversation holds, so
the verdicts never depend on how a runtime words its history), the record of every request
body, and the run's :class:`~.protocol.Tools` (served at ``/conform/tools/MODEL/NAME`` for
runners in other processes). A request beyond the script gets an HTTP 400 in the API's error
shape, which shows in the evidence as a request the script did not expect.

A reply is written in neutral terms (``stop``, ``tool_calls``, ``length``, ``filter``) and
labelled on the wire as each API labels it (``tool_calls`` / ``tool_use``, ``length`` /
``max_tokens``, ``content_filter`` / ``refusal`` ...). ``at_limit`` makes the reply's output
tokens equal the limit the request asked for (``max_tokens`` or ``max_completion_tokens``, else
the task's): a cut the label may hide, as serving stacks do. Otherwise the output tokens stay
below the limit. Streamed replies are cut into small deltas; an OpenAI stream carries its usage
chunk only when the request set ``stream_options.include_usage``, as the real API does, so a
runtime that never asks for usage cannot see a mislabelled cut (and its verdict says so). An
Anthropic streamed reply may leave its last tool block ``unclosed``.

Built on :mod:`http.server` (one thread per connection, every response closes its connection),
so the suite needs no web framework and installs anywhere. It binds 127.0.0.1 only, on a free
port.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import unquote

from .protocol import API, Tools

__all__ = ["LABELS", "Call", "EngineServer", "Finish", "Reply", "RequestRecord"]

Finish = Literal["stop", "tool_calls", "length", "filter"]

#: How each API labels each kind of end on the wire.
LABELS: dict[str, dict[str, str]] = {
    "openai-chat": {"stop": "stop", "tool_calls": "tool_calls", "length": "length",
                    "filter": "content_filter"},
    "anthropic-messages": {"stop": "end_turn", "tool_calls": "tool_use",
                           "length": "max_tokens", "filter": "refusal"},
}
#: The largest request body read (a runtime sending more gets a 413).
MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class Call:
    """A scripted tool call; ``arguments`` is the raw JSON text, which may stop mid-JSON."""

    call_id: str
    name: str
    arguments: str

    @property
    def parsed(self) -> dict[str, Any] | None:
        """The arguments as an object, or None when they do not parse as one."""
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class Reply:
    """One scripted model response, in neutral terms."""

    text: str = ""
    calls: tuple[Call, ...] = ()
    finish: Finish = "stop"
    #: The output tokens equal the requested limit (a cut, whatever ``finish`` says).
    at_limit: bool = False
    #: Anthropic streams only: the last tool block never gets its ``content_block_stop``.
    unclosed: bool = False

    def describe(self, api: API | None = None) -> str:
        label = LABELS[api][self.finish] if api else self.finish
        parts = [f"finish={label}"]
        if self.at_limit:
            parts.append("output tokens = limit")
        if self.text:
            parts.append(f"text={_short(self.text)!r}")
        parts += [f"{c.name}({_short(c.arguments, 60)})" for c in self.calls]
        if self.unclosed:
            parts.append("last tool block unclosed")
        return ", ".join(parts)


def _short(text: str, size: int = 40) -> str:
    return text if len(text) <= size else text[:size - 1] + "…"


@dataclass(frozen=True)
class RequestRecord:
    """One request the server received, summarized, with the reply it sent."""

    index: int
    path: str
    stream: bool
    include_usage: bool
    #: The output limit the request asked for (None: it asked for none).
    max_tokens: int | None
    messages: int
    tools: tuple[str, ...]
    #: What the server answered (a reply's description, or the error it sent).
    answer: str
    body: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "path": self.path, "stream": self.stream,
                "include_usage": self.include_usage, "max_tokens": self.max_tokens,
                "messages": self.messages, "tools": list(self.tools), "answer": self.answer}


@dataclass
class _Run:
    api: API
    replies: list[Reply]
    default_limit: int
    tools: Tools
    requests: list[RequestRecord]


def _requested_limit(body: dict[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _tool_names(body: dict[str, Any]) -> tuple[str, ...]:
    names: list[str] = []
    for tool in body.get("tools") or ():
        if isinstance(tool, dict):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            names.append(str(name))
    return tuple(names)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def openai_chunks(reply: Reply, output_tokens: int, usage: bool) -> Iterator[bytes]:
    """A Chat Completions stream of ``reply``."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({"id": "chatcmpl-conform", "object": "chat.completion.chunk",
                     "created": 0, "model": "conform",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text, 8):
        yield chunk({"content": piece})
    for index, call in enumerate(reply.calls):
        yield chunk({"tool_calls": [{"index": index, "id": call.call_id, "type": "function",
                                     "function": {"name": call.name, "arguments": ""}}]})
        for piece in _pieces(call.arguments, 6):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, LABELS["openai-chat"][reply.finish])
    if usage:
        yield _sse({"id": "chatcmpl-conform", "object": "chat.completion.chunk", "created": 0,
                    "model": "conform", "choices": [], "usage": _openai_usage(output_tokens)})
    yield b"data: [DONE]\n\n"


def _openai_usage(output_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": 50, "completion_tokens": output_tokens,
            "total_tokens": 50 + output_tokens}


def openai_completion(reply: Reply, output_tokens: int) -> dict[str, Any]:
    """A whole ``chat.completion`` object of ``reply``."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for c in reply.calls]
    return {"id": "chatcmpl-conform", "object": "chat.completion", "created": 0,
            "model": "conform", "choices": [{"index": 0, "message": message,
                                             "finish_reason": LABELS["openai-chat"][
                                                 reply.finish]}],
            "usage": _openai_usage(output_tokens)}


def anthropic_events(reply: Reply, output_tokens: int) -> Iterator[bytes]:
    """An Anthropic Messages stream of ``reply``."""
    def event(kind: str, **data: Any) -> bytes:
        return _sse({"type": kind, **data}, kind)

    yield event("message_start", message={
        "id": "msg_conform", "type": "message", "role": "assistant", "content": [],
        "model": "conform", "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 1}})
    index = 0
    if reply.text:
        yield event("content_block_start", index=0, content_block={"type": "text", "text": ""})
        for piece in _pieces(reply.text, 8):
            yield event("content_block_delta", index=0,
                        delta={"type": "text_delta", "text": piece})
        yield event("content_block_stop", index=0)
        index = 1
    for number, call in enumerate(reply.calls):
        yield event("content_block_start", index=index, content_block={
            "type": "tool_use", "id": call.call_id, "name": call.name, "input": {}})
        for piece in _pieces(call.arguments, 6):
            yield event("content_block_delta", index=index,
                        delta={"type": "input_json_delta", "partial_json": piece})
        if not (reply.unclosed and number == len(reply.calls) - 1):
            yield event("content_block_stop", index=index)
        index += 1
    yield event("message_delta", delta={"stop_reason": LABELS["anthropic-messages"][
        reply.finish], "stop_sequence": None}, usage={"output_tokens": output_tokens})
    yield event("message_stop")


def anthropic_message(reply: Reply, output_tokens: int) -> dict[str, Any]:
    """A whole Anthropic ``message`` object of ``reply`` (its calls' arguments must parse:
    the non-streamed API carries them as objects)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    for call in reply.calls:
        parsed = call.parsed
        if parsed is None:
            raise ValueError(f"{call.call_id}: cut arguments cannot be sent without streaming")
        content.append({"type": "tool_use", "id": call.call_id, "name": call.name,
                        "input": parsed})
    return {"id": "msg_conform", "type": "message", "role": "assistant", "model": "conform",
            "content": content, "stop_reason": LABELS["anthropic-messages"][reply.finish],
            "stop_sequence": None,
            "usage": {"input_tokens": 50, "output_tokens": output_tokens}}


class EngineServer:
    """The server; ``with EngineServer() as server:`` starts it on 127.0.0.1 and stops it."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self._httpd is not None, "the server is not running"
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    @property
    def root(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def base_url(self, api: API) -> str:
        """The base URL the API's official SDK takes."""
        return f"{self.root}/v1" if api == "openai-chat" else self.root

    def tools_url(self, model: str) -> str:
        return f"{self.root}/conform/tools/{model}"

    def script(self, model: str, api: API, replies: list[Reply], default_limit: int,
               tools: Tools) -> None:
        """Answer the requests for ``model`` with ``replies``, in order."""
        with self._lock:
            self._runs[model] = _Run(api, list(replies), default_limit, tools, [])

    def requests(self, model: str) -> list[RequestRecord]:
        with self._lock:
            return list(self._runs[model].requests)

    def forget(self, model: str) -> None:
        with self._lock:
            self._runs.pop(model, None)

    def __enter__(self) -> EngineServer:
        server = self

        class Handler(_Handler):
            engine = server

        # Loopback only, a free port: nothing in the suite reaches beyond 127.0.0.1.
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="conform-engine", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    # --- answering ------------------------------------------------------------------------

    def tool(self, path: str, arguments: Any) -> tuple[int, Any]:
        """Run a tool for a runner in another process: ``arguments`` as it sent them (a JSON
        value, or raw text); every call is recorded on the run's tools, whatever it holds."""
        model, _, name = unquote(path[len("/conform/tools/"):]).rpartition("/")
        with self._lock:
            run = self._runs.get(model)
        if run is None:
            return 404, {"error": f"no run named {model!r}"}
        return 200, {"output": run.tools.call(name, arguments)}

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any, Iterator[bytes] | None]:
        """``(status, JSON object, None)`` or ``(200, None, SSE lines)`` for one request."""
        if path.startswith("/conform/tools/"):
            status, payload = self.tool(path, body)
            return status, payload, None
        api: API = "openai-chat" if path.endswith("/chat/completions") else "anthropic-messages"
        if not (path.endswith("/chat/completions") or path.endswith("/messages")):
            return 404, _error(api, f"no endpoint {path}"), None
        model = str(body.get("model"))
        stream = body.get("stream") is True
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        limit = _requested_limit(body)
        with self._lock:
            run = self._runs.get(model)
            reply: Reply | None = None
            if run is not None:
                index = len(run.requests)
                reply = run.replies[index] if index < len(run.replies) else None
                if run.api != api:
                    reply = None
                answer = reply.describe(api) if reply else "HTTP 400: no scripted reply"
                run.requests.append(RequestRecord(
                    index, path, stream, usage, limit,
                    len(body.get("messages") or ()), _tool_names(body), answer, body))
        if run is None or reply is None:
            return 400, _error(api, f"no scripted reply for this request (model {model!r})"), None
        ceiling = limit or run.default_limit
        tokens = ceiling if reply.at_limit else max(1, min(20, ceiling - 1))
        if api == "openai-chat":
            if stream:
                return 200, None, openai_chunks(reply, tokens, usage)
            return 200, openai_completion(reply, tokens), None
        if stream:
            return 200, None, anthropic_events(reply, tokens)
        return 200, anthropic_message(reply, tokens), None


def _error(api: API, message: str) -> dict[str, Any]:
    if api == "anthropic-messages":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {"error": {"message": message, "type": "invalid_request_error", "code": None}}


class _Handler(BaseHTTPRequestHandler):
    engine: EngineServer
    server_version = "agentturn-conform"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the records are the log

    def do_POST(self) -> None:  # http.server's name for it
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._json(413, {"error": {"message": "bad or too large body"}})
            return
        data = self.rfile.read(length)
        path, _, query = self.path.partition("?")
        if path.startswith("/conform/tools/"):  # every call is recorded, whatever it holds
            arguments: Any = data.decode("utf-8", "replace")
            if "raw=1" not in query.split("&"):
                with contextlib.suppress(ValueError):  # not JSON: the raw text, as sent
                    arguments = json.loads(data or b"{}")
            self._json(*self.engine.tool(path, arguments))
            return
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "the body is not JSON"}})
            return
        if not isinstance(body, dict):
            self._json(400, {"error": {"message": "the body is not a JSON object"}})
            return
        status, payload, lines = self.engine.answer(path, body)
        if lines is None:
            self._json(status, payload)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the body ends when the connection does
        self.end_headers()
        try:
            for line in lines:
                self.wfile.write(line)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client closed the stream early: its request is recorded all the same

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
