"""The scripted engine server: loopback only, both APIs streamed and not, usage on request,
every request recorded, the tools served over HTTP for runners in other processes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from agentturn.tools.conform import EngineServer, Reply, Tools
from agentturn.tools.conform.server import Call


@pytest.fixture
def server() -> Iterator[EngineServer]:
    with EngineServer() as running:
        yield running


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines()
            if line.startswith("data: ") and line != "data: [DONE]"]


CUT = Reply(text="Writing.", finish="tool_calls", at_limit=True,
            calls=(Call("c1", "write_file", '{"path": "a.txt", "content": "x"}'),))


def test_the_server_binds_loopback_only(server: EngineServer) -> None:
    host, port = server.address
    assert host == "127.0.0.1" and port > 0
    assert server.base_url("openai-chat") == f"http://127.0.0.1:{port}/v1"
    assert server.base_url("anthropic-messages") == f"http://127.0.0.1:{port}"


@pytest.mark.req("TL-9")
def test_a_mislabelled_cut_carries_the_requested_limit_as_its_output_tokens(
        server: EngineServer) -> None:
    server.script("m", "openai-chat", [CUT, CUT], 256, Tools())
    status, raw = _post(server.base_url("openai-chat") + "/chat/completions", {
        "model": "m", "messages": [], "stream": True, "max_completion_tokens": 77,
        "stream_options": {"include_usage": True}})
    assert status == 200
    chunks = _events(raw)
    assert chunks[-1]["usage"]["completion_tokens"] == 77
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "tool_calls"
    # without include_usage, no usage chunk: the real API's behaviour
    status, raw = _post(server.base_url("openai-chat") + "/chat/completions", {
        "model": "m", "messages": [], "stream": True, "max_tokens": 77})
    assert all("usage" not in c for c in _events(raw))
    records = server.requests("m")
    assert [(r.stream, r.include_usage, r.max_tokens) for r in records] == [
        (True, True, 77), (True, False, 77)]
    assert records[0].body["max_completion_tokens"] == 77  # the whole body is kept


def test_openai_without_streaming_and_beyond_the_script(server: EngineServer) -> None:
    server.script("m", "openai-chat", [Reply(text="Hello.")], 256, Tools())
    status, raw = _post(server.base_url("openai-chat") + "/chat/completions",
                        {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    completion = json.loads(raw)
    assert status == 200 and completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"]["content"] == "Hello."
    assert completion["usage"]["completion_tokens"] < 256
    status, raw = _post(server.base_url("openai-chat") + "/chat/completions",
                        {"model": "m", "messages": []})
    assert status == 400 and "no scripted reply" in json.loads(raw)["error"]["message"]
    assert [r.answer for r in server.requests("m")][1] == "HTTP 400: no scripted reply"


def test_anthropic_streamed_and_not(server: EngineServer) -> None:
    unclosed = Reply(text="W", finish="length", at_limit=True, unclosed=True,
                     calls=(Call("t1", "write_file", '{"path": "a'),))
    server.script("a", "anthropic-messages", [unclosed, CUT], 100, Tools())
    url = server.base_url("anthropic-messages") + "/v1/messages"
    status, raw = _post(url, {"model": "a", "messages": [], "max_tokens": 50, "stream": True})
    assert status == 200
    events = _events(raw)
    kinds = [e["type"] for e in events]
    assert kinds.count("content_block_start") == 2 and kinds.count("content_block_stop") == 1
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "max_tokens"
    assert delta["usage"]["output_tokens"] == 50
    status, raw = _post(url, {"model": "a", "messages": [], "max_tokens": 50})
    assert status == 200
    message = json.loads(raw)
    assert message["stop_reason"] == "tool_use" and message["usage"]["output_tokens"] == 50
    assert message["content"][1]["input"] == {"path": "a.txt", "content": "x"}


def test_the_tools_are_served_for_runners_in_other_processes(server: EngineServer) -> None:
    tools = Tools()
    server.script("m", "openai-chat", [], 256, tools)
    status, raw = _post(server.tools_url("m") + "/write_file",
                        {"path": "a.txt", "content": "hi"})
    assert status == 200 and json.loads(raw) == {"output": "wrote a.txt (2 characters)"}
    _, raw = _post(server.tools_url("m") + "/read_file", {"path": "a.txt"})
    assert json.loads(raw) == {"output": "hi"}
    assert [(r.name, r.arguments) for r in tools.records] == [
        ("write_file", {"path": "a.txt", "content": "hi"}), ("read_file", {"path": "a.txt"})]
    status, _ = _post(server.tools_url("nobody") + "/read_file", {"path": "a.txt"})
    assert status == 404
