"""The agent's stdio transport: every line is answered, a malformed one with its JSON-RPC error.

Theory of operation
-------------------
The ``agent-client-protocol`` SDK (0.12) reads stdin with ``json.loads`` and hands whatever it
gets to its connection as a message. A line that is not a JSON object breaks that: ``null``
reads as end of input (the agent stops answering), ``42``, ``"text"`` or ``[]`` raise
``AttributeError`` inside the receive loop (the connection dies), an unparsable line is logged
and dropped (no ``-32700``), and an object that is neither a request nor a response
(``{"jsonrpc": "2.0"}``) is dropped silently (no ``-32600``). JSON-RPC 2.0 (section 5.1) asks
for an answer to each of them.

:class:`CheckedStdioTransport` stands in front of the SDK as its message-level ``Transport``
(the seam ``AgentSideConnection`` accepts instead of two byte streams). It reads one line at a
time and hands the SDK only well-formed messages; everything else it answers itself, through
the same single writer the SDK's messages go through, so no two writes interleave:

=========================================  =========  ==========================================
the line                                   code       ``id`` of the error
=========================================  =========  ==========================================
not JSON (or not UTF-8)                    ``-32700`` ``null``
JSON but not an object (``42``, ``null``,  ``-32600`` ``null``
``"text"``, ``[]``, a non-empty batch)
an object that is neither a valid request  ``-32600`` its ``id`` when that is a valid id (a
nor a valid response                                  string, a number, ``null``), else ``null``
=========================================  =========  ==========================================

A request is valid with ``"jsonrpc": "2.0"``, a string ``method``, an ``id`` (if present) that
is a string, an integer or ``null``, and ``params`` (if present) an object or an array. A
response is valid with ``"jsonrpc": "2.0"``, an ``id``, no ``method`` and exactly one of
``result`` and ``error``. Batches are not part of ACP: the agent answers one with ``-32600``.
An invalid message without an ``id`` (a would-be notification) is answered too: the peer
cannot otherwise learn that its line was lost. Blank lines are skipped; end of input ends the
connection as before. The SDK goes on to answer bad ``params`` (``-32602``) and unknown methods
(``-32601``) itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

__all__ = ["INVALID_REQUEST", "PARSE_ERROR", "CheckedStdioTransport", "problem_of"]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

log = logging.getLogger("agentturn.acp_agent")

#: Bytes one line may hold (a prompt with an embedded file can be large).
LINE_LIMIT = 50 * 1024 * 1024


def _is_id(value: object) -> bool:
    return value is None or isinstance(value, str) or (type(value) is int)


def problem_of(message: dict[str, Any]) -> str | None:
    """Why the object ``message`` is not a valid JSON-RPC 2.0 request or response, or ``None``."""
    if message.get("jsonrpc") != "2.0":
        return "'jsonrpc' must be \"2.0\""
    if "method" in message:
        if not isinstance(message["method"], str):
            return "'method' must be a string"
        if "id" in message and not _is_id(message["id"]):
            return "'id' must be a string, an integer or null"
        if "params" in message and not isinstance(message["params"], dict | list):
            return "'params' must be an object or an array"
        return None
    if "id" not in message:
        return "neither a request ('method') nor a response ('id' with 'result' or 'error')"
    if not _is_id(message["id"]):
        return "'id' must be a string, an integer or null"
    if ("result" in message) == ("error" in message):
        return "a response holds exactly one of 'result' and 'error'"
    return None


class CheckedStdioTransport:
    """The SDK's ``Transport`` over stdin/stdout that answers malformed lines itself."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls) -> CheckedStdioTransport:
        """The process's stdin and stdout as a transport (POSIX pipes)."""
        from acp.stdio import stdio_streams

        reader, writer = await stdio_streams(limit=LINE_LIMIT)
        return cls(reader, writer)

    async def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        async with self._lock:
            self._writer.write(data)
            await self._writer.drain()

    async def receive(self) -> dict[str, Any] | None:
        while True:
            line = await self._read_line()
            if not line:
                return None  # end of input
            line = line.strip()
            if not line:
                continue
            message = await self._checked(line)
            if message is not None:
                return message

    async def close(self) -> None:
        try:
            self._writer.close()
        except Exception:  # stdout already gone: nothing left to tell anyone
            log.debug("closing stdout failed", exc_info=True)

    async def _checked(self, line: bytes) -> dict[str, Any] | None:
        """``line`` as a message for the SDK, or ``None`` after answering it with an error."""
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
            await self._error(None, PARSE_ERROR, "Parse error", str(error))
            return None
        if not isinstance(value, dict):
            what = "a batch (not used by ACP)" if isinstance(value, list) and value else (
                f"JSON {type(value).__name__ if value is not None else 'null'}")
            await self._error(None, INVALID_REQUEST, "Invalid Request",
                              f"a message must be a JSON object, got {what}")
            return None
        problem = problem_of(value)
        if problem is not None:
            message_id = value.get("id")
            await self._error(message_id if _is_id(message_id) else None, INVALID_REQUEST,
                              "Invalid Request", problem)
            return None
        return value

    async def _error(self, message_id: object, code: int, text: str, details: str) -> None:
        log.warning("answered a malformed line with %d: %s", code, details)
        await self.send({"jsonrpc": "2.0", "id": message_id,
                         "error": {"code": code, "message": text, "data": {"details": details}}})

    async def _read_line(self) -> bytes:
        """One line, however long (the reader's limit only bounds its buffer)."""
        parts: list[bytes] = []
        while True:
            try:
                parts.append(await self._reader.readuntil(b"\n"))
                return b"".join(parts)
            except asyncio.LimitOverrunError as error:
                parts.append(await self._reader.readexactly(error.consumed))
            except asyncio.IncompleteReadError as error:
                parts.append(error.partial)
                return b"".join(parts)
