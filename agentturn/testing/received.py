"""What the engine received, typed: a host's request messages read back as agentturn's terms.

Theory of operation
-------------------
A host sends the engine a message list in its engine's own format, not agentturn records. The
spec kit checks what was really sent (no unsaved text, no text twice, no call of a cut-off
response, no tool result twice), so it reads that list back with the converter for the
format, the three ``agentturn.engines`` reads:

* :func:`from_openai_chat` — OpenAI Chat Completions ``messages``;
* :func:`from_openai_responses` — OpenAI Responses ``input`` items;
* :func:`from_anthropic` — Anthropic Messages ``messages`` (the ``system`` prompt is a separate
  parameter there, never a message).

Each returns a tuple of :data:`Sent` items, in order: :class:`SentUser` (user text),
:class:`SentAssistant` (the assistant's text and its tool calls, as agentturn
:class:`~agentturn.ToolCall` values), :class:`SentToolResult` (a tool's result, in whatever
message shape the format gives it) and :class:`SentOther` for anything else (a system prompt,
an image, a format's own item kinds), kept whole so nothing a host sends is silently dropped.
Each text part of a user message is a text of its own, in order with the message's other parts
(a host that joins consecutive user turns into one message, as Anthropic's alternating roles
ask, sends the prompt and a Lead as two parts); an assistant message's text parts are joined.

:data:`READERS` maps a format's name (``"openai-chat"``, ``"openai-responses"``,
``"anthropic"``) to its converter; a host with another format passes its own function of the
same shape. Nothing here imports hypothesis or anyio.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..records import ToolCall

__all__ = ["READERS", "Reader", "Sent", "SentAssistant", "SentOther", "SentToolResult",
           "SentUser", "from_anthropic", "from_openai_chat", "from_openai_responses"]


@attrs.frozen
class SentUser:
    """User text the engine received (a prompt, a Lead, a continuation)."""

    text: str


@attrs.frozen
class SentAssistant:
    """An assistant turn the engine received again: its text and the tool calls it carries."""

    text: str
    calls: tuple[ToolCall, ...] = ()


@attrs.frozen
class SentToolResult:
    """A tool's result the engine received, for ``call_id``."""

    call_id: str
    output: str


@attrs.frozen
class SentOther:
    """Anything else the request carried (a system prompt, an image part ...), kept whole."""

    item: Any


Sent = SentUser | SentAssistant | SentToolResult | SentOther
#: A converter: a request's message list to what the engine received.
Reader = Callable[[Sequence[Any]], "tuple[Sent, ...]"]


def _text(content: Any, kinds: tuple[str, ...]) -> str:
    """A message's text: a string, or the text of its parts of ``kinds``, joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content
                   if isinstance(part, Mapping) and part.get("type") in kinds)


def _user(content: Any, kinds: tuple[str, ...]) -> list[Sent]:
    """A user message's content: each text part its own :class:`SentUser` (a host that joins
    consecutive user turns into one message, as Anthropic's alternating roles ask, sends each
    text as a part), every other part a :class:`SentOther`, in order."""
    if content is None or isinstance(content, str):
        return [SentUser(content or "")]
    return [SentUser(str(part.get("text", ""))) if isinstance(part, Mapping)
            and part.get("type") in kinds else SentOther(part) for part in content]


def _call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    if not isinstance(arguments, str):  # Anthropic's input is an object: written canonically
        arguments = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    return ToolCall(call_id=str(call_id), name=str(name), arguments=arguments)


def from_openai_chat(messages: Sequence[Any]) -> tuple[Sent, ...]:
    """OpenAI Chat Completions messages (``system``/``developer``, ``user``, ``assistant``
    with ``tool_calls``, ``tool``)."""
    sent: list[Sent] = []
    for message in messages:
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "user":
            sent.extend(_user(message.get("content"), ("text",)))
        elif role == "assistant":
            text = _text(message.get("content"), ("text", "output_text"))
            calls = tuple(_call(c.get("id"), c.get("function", {}).get("name"),
                                c.get("function", {}).get("arguments", ""))
                          for c in message.get("tool_calls") or ())
            sent.append(SentAssistant(text, calls))
        elif role == "tool":
            text = _text(message.get("content"), ("text",))
            sent.append(SentToolResult(str(message.get("tool_call_id")), text))
        else:
            sent.append(SentOther(message))
    return tuple(sent)


def from_openai_responses(items: Sequence[Any]) -> tuple[Sent, ...]:
    """OpenAI Responses input items (messages by role, ``function_call``,
    ``function_call_output``); a ``function_call`` joins the assistant item before it."""
    sent: list[Sent] = []
    for item in items:
        if not isinstance(item, Mapping):
            sent.append(SentOther(item))
            continue
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "function_call":
            call = _call(item.get("call_id"), item.get("name"), item.get("arguments", ""))
            last = sent[-1] if sent else None
            if isinstance(last, SentAssistant):
                sent[-1] = SentAssistant(last.text, (*last.calls, call))
            else:
                sent.append(SentAssistant("", (call,)))
        elif kind == "function_call_output":
            output = item.get("output", "")
            text = output if isinstance(output, str) else _text(output, ("input_text",))
            sent.append(SentToolResult(str(item.get("call_id")), text))
        elif kind == "message" and role == "user":
            sent.extend(_user(item.get("content"), ("input_text", "text")))
        elif kind == "message" and role == "assistant":
            text = _text(item.get("content"), ("output_text", "text"))
            sent.append(SentAssistant(text))
        else:
            sent.append(SentOther(item))
    return tuple(sent)


def from_anthropic(messages: Sequence[Any]) -> tuple[Sent, ...]:
    """Anthropic Messages ``messages`` (``user`` with ``text`` and ``tool_result`` blocks,
    ``assistant`` with ``text`` and ``tool_use`` blocks)."""
    sent: list[Sent] = []
    for message in messages:
        role = message.get("role") if isinstance(message, Mapping) else None
        content = message.get("content") if isinstance(message, Mapping) else None
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if role not in ("user", "assistant") or not isinstance(blocks, Sequence):
            sent.append(SentOther(message))
            continue
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind == "text" and role == "user":  # each text block a text of its own
                sent.append(SentUser(str(block.get("text", ""))))
            elif kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "tool_result" and role == "user":
                text = _text(block.get("content"), ("text",))
                sent.append(SentToolResult(str(block.get("tool_use_id")), text))
            elif kind == "tool_use" and role == "assistant":
                calls.append(_call(block.get("id"), block.get("name"), block.get("input", {})))
            else:
                sent.append(SentOther(block))
        if role == "assistant":
            sent.append(SentAssistant("".join(texts), tuple(calls)))
    return tuple(sent)


READERS: dict[str, Reader] = {"openai-chat": from_openai_chat,
                              "openai-responses": from_openai_responses,
                              "anthropic": from_anthropic}
