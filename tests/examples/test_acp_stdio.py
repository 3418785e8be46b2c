"""The ACP example agent on raw stdio: every malformed line gets its JSON-RPC error, and the agent
keeps answering.

The SDK's own reader would crash on ``42``, stop on ``null`` and drop the rest silently; the
agent reads stdin through :mod:`jsonrpc_stdio` instead (see that module and the example's
README). One agent process serves the module: each test writes one bad line, reads the error,
then checks that a valid ``initialize`` is still answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("acp")  # the agent's own dependency (the `acp` extra)

AGENT = pathlib.Path(__file__).resolve().parents[2] / "examples" / "acp_agent" / "agent.py"
TIMEOUT = 20


class RawAgent:
    """The agent process, written to and read from line by line."""

    def __init__(self, state_dir: pathlib.Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(AGENT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "AGENTTURN_ACP_STATE_DIR": str(state_dir)})
        self.lines: queue.Queue[bytes] = queue.Queue()
        self._ids = iter(range(1000, 100000))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def write(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def read(self) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.lines.get(timeout=TIMEOUT))
        return message

    def request(self, method: str, params: object) -> dict[str, Any]:
        """Send a request, return its response (the agent sends nothing else unasked here)."""
        request_id = next(self._ids)
        self.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                               "params": params}).encode())
        reply = self.read()
        assert reply["id"] == request_id
        return reply

    def still_answers(self) -> None:
        reply = self.request("initialize", {"protocolVersion": 1})
        assert reply["result"]["agentCapabilities"]["loadSession"] is True


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawAgent]:
    raw = RawAgent(tmp_path_factory.mktemp("acp-state"))
    try:
        raw.still_answers()
        yield raw
    finally:
        assert raw.process.stdin is not None
        raw.process.stdin.close()
        try:
            raw.process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            raw.process.kill()
            raw.process.wait(TIMEOUT)


@pytest.mark.parametrize(("line", "code", "message_id"), [
    pytest.param(b"42", -32600, None, id="a number"),
    pytest.param(b'"text"', -32600, None, id="a string"),
    pytest.param(b"[]", -32600, None, id="an empty array"),
    pytest.param(b'[{"jsonrpc": "2.0", "id": 1, "method": "initialize"}]', -32600, None,
                 id="a batch"),
    pytest.param(b"null", -32600, None, id="null"),
    pytest.param(b"true", -32600, None, id="true"),
    pytest.param(b'{"jsonrpc": "2.0", "method": "initialize"', -32700, None, id="cut JSON"),
    pytest.param(b"not json at all", -32700, None, id="not JSON"),
    pytest.param(b'{"a": "\xff"}', -32700, None, id="not UTF-8"),
    pytest.param(b'{"jsonrpc": "2.0"}', -32600, None, id="no method, no id"),
    pytest.param(b"{}", -32600, None, id="an empty object"),
    pytest.param(b'{"jsonrpc": "1.0", "id": 8, "method": "initialize"}', -32600, 8,
                 id="JSON-RPC 1.0"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 9, "method": 5}', -32600, 9, id="method not text"),
    pytest.param(b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "initialize"}', -32600, None,
                 id="id an object"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 10, "method": "initialize", "params": 3}', -32600,
                 10, id="params a number"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 11}', -32600, 11, id="a response with no result"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 12, "method": "session/new", "params": {}}', -32602,
                 12, id="session/new without cwd"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 13, "method": "session/new", "params": '
                 b'{"cwd": "relative/dir", "mcpServers": []}}', -32602, 13, id="a relative cwd"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 14, "method": "session/new", "params": '
                 b'{"cwd": null, "mcpServers": []}}', -32602, 14, id="a null cwd"),
    pytest.param(b'{"jsonrpc": "2.0", "id": 15, "method": "no/such/method", "params": {}}',
                 -32601, 15, id="an unknown method"),
])
def test_a_malformed_line_gets_its_error_and_the_agent_goes_on(
        agent: RawAgent, line: bytes, code: int, message_id: int | None) -> None:
    """JSON-RPC 2.0 section 5.1: -32700 with id null for what does not parse, -32600 for what is
    not a request (with the id when it has a valid one); ACP's -32602 for a missing or relative
    cwd. Then a valid request is still answered."""
    agent.write(line)
    reply = agent.read()
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] == message_id
    assert reply["error"]["code"] == code
    assert "result" not in reply
    agent.still_answers()


def test_blank_lines_are_skipped_without_an_answer(agent: RawAgent) -> None:
    """A blank line is no message: nothing is answered, the next request is."""
    agent.write(b"")
    agent.write(b"   ")
    agent.still_answers()


# --- the reader itself, in process: whatever a line holds, it is passed on or answered ----------

def _transport_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("acp_example_jsonrpc_stdio",
                                                  AGENT.parent / "jsonrpc_stdio.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STDIO = _transport_module()


class _Sink:
    """A stand-in for the stdout writer: it keeps what is written."""

    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


def _feed(line: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the SDK would receive from ``line`` (then end of input), and what was answered."""
    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        reader = asyncio.StreamReader()
        reader.feed_data(line + b"\n")
        reader.feed_eof()
        sink = _Sink()
        transport = STDIO.CheckedStdioTransport(reader, sink)
        passed = []
        while (message := await transport.receive()) is not None:
            passed.append(message)
        answered = [json.loads(out) for out in bytes(sink.written).splitlines()]
        return passed, answered
    return asyncio.run(run())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error",
                                       "x"]), inner, max_size=5),
    max_leaves=8)
MESSAGE_LIKE = st.fixed_dictionaries({}, optional={
    "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
    "id": st.none() | st.integers() | st.text(max_size=4) | st.booleans() | st.floats(),
    "method": st.sampled_from(["initialize", "session/new"]) | st.integers(),
    "params": st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
    | st.lists(st.integers(), max_size=2) | st.integers(),
    "result": st.none() | st.integers(), "error": st.none() | st.integers()})


@given(value=JSON | MESSAGE_LIKE)
def test_every_json_line_is_passed_on_as_a_valid_message_or_answered_once(value: Any) -> None:
    """A line is either handed to the SDK as an object with no problem, or answered with one
    -32600 error whose id is the line's valid id or null; never both, never neither."""
    passed, answered = _feed(json.dumps(value).encode())
    if passed:
        assert passed == [value] and answered == []
        assert isinstance(value, dict) and STDIO.problem_of(value) is None
    else:
        error, = answered
        assert error["error"]["code"] == -32600
        expected = value.get("id") if isinstance(value, dict) else None
        valid = expected is None or isinstance(expected, str) or type(expected) is int
        assert error["id"] == (expected if valid else None)


@given(line=st.binary(max_size=40).filter(lambda b: b"\n" not in b))
def test_any_bytes_are_passed_on_or_answered_and_never_raise(line: bytes) -> None:
    """Bytes that do not parse get -32700 with id null; a blank line gets nothing."""
    passed, answered = _feed(line)
    if not line.strip():
        assert passed == [] and answered == []
        return
    try:
        json.loads(line)
    except ValueError:
        assert passed == [] and [a["error"]["code"] for a in answered] == [-32700]
        assert answered[0]["id"] is None
    else:
        assert len(passed) + len(answered) == 1
