"""Anthropic Messages streaming events to one event.

Theory of operation
-------------------
The stream is ``message_start`` (usage with the input tokens and a provisional output count),
then content blocks, each ``content_block_start`` / ``content_block_delta``... /
``content_block_stop`` at its ``index``, then ``message_delta`` (the ``stop_reason`` and the
final ``usage.output_tokens``) and ``message_stop``, which decides the event — and only it: a
transport that ends without ``message_stop`` (even after ``message_delta``) was cut off, so
:meth:`~agentturn.engines.EngineStream.finish` gives ``StreamFailed(network=True)``, as every
format does for a stream that ends before its terminal event.

A ``text`` block streams ``text_delta``; a ``tool_use`` block starts with its ``id``, ``name``
and an empty ``input: {}`` placeholder, and its arguments are the joined
``input_json_delta.partial_json`` strings. A proxy that re-emits a non-streamed reply puts the
whole ``input`` in ``content_block_start`` and sends no delta: then the arguments are that
input written canonically (compact, keys sorted, as Gemini's). When deltas with text follow a
non-empty start ``input``, the deltas win and replace it, as in the SDK's own accumulator
(empty ``partial_json`` fragments change nothing). A delta of the other kind of block
(``text_delta`` in a ``tool_use`` block, ``input_json_delta`` in a ``text`` block) is a wrong
shape: ``StreamFailed`` naming it, rather than text or arguments silently lost.

A tool block without its ``content_block_stop`` when the message stops was cut, whatever the
stop reason says (a proxy relabelling a cut block ``tool_use``): the
:attr:`~agentturn.CutOffSignal.UNCLOSED_TOOL_BLOCK` signal. An ``error`` event ends the stream
with ``StreamFailed``.

Stop reasons reach the turn as they are: ``end_turn`` / ``stop_sequence`` / ``tool_use`` end
normally, ``max_tokens`` and ``model_context_window_exceeded`` are output limits, ``refusal``
is withheld for policy (``CONTENT_FILTERED``), and ``pause_turn`` (a long server-side turn the
API paused) is not a normal completion: the turn ends ``UNRECOGNIZED_FINISH`` with the raw
reason, and the host may send the conversation again to let the model go on.

Thinking blocks and server-run tool blocks (``server_tool_use``, web search results ...) are
not the host's to run or show as the answer: they are skipped.

A response asked for without streaming (one ``message`` object: its ``content`` blocks whole,
its ``stop_reason`` and ``usage``) is fed as one object: it is read as the stream that would
have carried it (``message_start``, each block started with its text or ``input`` and stopped,
``message_delta``, ``message_stop``), so the same rules apply; a whole message has no unclosed
block, so its cut-off signals are the stop reason and the output tokens at the limit. A whole
``tool_use`` block must carry its ``input`` object (missing or null is a wrong shape); an empty
one, ``{}``, is a call without arguments (``""``), as a streamed block with no delta is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..events import StreamFailed
from ._core import (
    DraftCall,
    EngineEvent,
    EngineStream,
    Usage,
    WireShapeError,
    canonical_json,
    check_mapping,
    conclude,
    count,
    error_text,
    field,
)

__all__ = ["AnthropicMessagesStream"]


@attrs.frozen(kw_only=True)
class AnthropicMessagesStream(EngineStream):
    """An accumulator of Anthropic Messages stream events (see the module docstring)."""

    wire_format = "Anthropic Messages"
    #: ``(block index, call index)`` of each ``tool_use`` block seen.
    tool_blocks: tuple[tuple[int, int], ...] = ()
    #: The indexes of the ``text`` blocks seen.
    text_blocks: tuple[int, ...] = ()
    #: The call indexes whose arguments are still their start block's ``input`` (no delta with
    #: text came yet): the first such delta replaces it.
    start_inputs: tuple[int, ...] = ()

    def _call_at(self, block: int) -> int | None:
        for index, call in self.tool_blocks:
            if index == block:
                return call
        return None

    def _take(self, chunk: Mapping[str, Any]) -> AnthropicMessagesStream:
        draft = self.draft
        kind = field(chunk, "type", "event", str, required=True)
        where = kind
        if kind == "message":  # a response asked for without streaming: read as its stream
            accumulator = self
            for event in _as_stream(chunk):
                accumulator = accumulator._take(event)
                if accumulator.draft.event is not None:
                    break
            return accumulator
        if kind == "message_start":
            message = field(chunk, "message", where, Mapping, required=True)
            usage = field(message, "usage", where + ".message", Mapping) or {}
            return self._with(attrs.evolve(draft, usage=Usage(
                input_tokens=count(usage, "input_tokens", where + ".message.usage"),
                output_tokens=count(usage, "output_tokens", where + ".message.usage"))))
        if kind == "content_block_start":
            block_index = count(chunk, "index", where)
            block = field(chunk, "content_block", where, Mapping, required=True)
            block_kind = field(block, "type", where + ".content_block", str, required=True)
            if block_index is None:
                raise WireShapeError(f"{where}.index is missing")
            if block_kind == "text":
                draft = draft.add_text(field(block, "text", where + ".content_block", str) or "")
                return attrs.evolve(self, draft=draft,
                                    text_blocks=(*self.text_blocks, block_index))
            if block_kind == "tool_use":
                call_id = field(block, "id", where + ".content_block", str, required=True)
                name = field(block, "name", where + ".content_block", str, required=True)
                start_input = field(block, "input", where + ".content_block", Mapping)
                arguments = canonical_json(start_input, where + ".content_block.input") \
                    if start_input else ""
                draft = draft.add_call(DraftCall(key=str(block_index), call_id=call_id,
                                                 name=name, closed=False,
                                                 arguments=(arguments, None) if arguments
                                                 else None))
                position = len(draft.calls) - 1
                return attrs.evolve(
                    self, draft=draft, tool_blocks=(*self.tool_blocks, (block_index, position)),
                    start_inputs=(*self.start_inputs, position) if arguments
                    else self.start_inputs)
            return self  # thinking, server-run tools: not the host's
        if kind == "content_block_delta":
            block_index = count(chunk, "index", where)
            delta = field(chunk, "delta", where, Mapping, required=True)
            delta_kind = field(delta, "type", where + ".delta", str, required=True)
            call = self._call_at(block_index) if block_index is not None else None
            if delta_kind == "text_delta":
                if call is not None:
                    raise WireShapeError(f"{where}.delta.type is text_delta, but block "
                                         f"{block_index} is a tool_use block")
                if block_index in self.text_blocks:
                    return self._with(draft.add_text(
                        field(delta, "text", where + ".delta", str, required=True)))
            if delta_kind == "input_json_delta":
                if block_index in self.text_blocks:
                    raise WireShapeError(f"{where}.delta.type is input_json_delta, but block "
                                         f"{block_index} is a text block")
                if call is not None:
                    return self._arguments(call, field(delta, "partial_json", where + ".delta",
                                                       str, required=True))
            return self
        if kind == "content_block_stop":
            block_index = count(chunk, "index", where)
            call = self._call_at(block_index) if block_index is not None else None
            return self if call is None else self._with(draft.change_call(call, closed=True))
        if kind == "message_delta":
            delta = field(chunk, "delta", where, Mapping) or {}
            reason = field(delta, "stop_reason", where + ".delta", str)
            if reason is not None:
                draft = attrs.evolve(draft, finish_reason=reason)
            usage = field(chunk, "usage", where, Mapping) or {}
            output = count(usage, "output_tokens", where + ".usage")
            inputs = count(usage, "input_tokens", where + ".usage")
            draft = attrs.evolve(draft, usage=Usage(
                input_tokens=draft.usage.input_tokens if inputs is None else inputs,
                output_tokens=draft.usage.output_tokens if output is None else output))
            return self._with(draft)
        if kind == "message_stop":
            return self._with(attrs.evolve(draft, event=conclude(draft)))
        if kind == "error":
            return self._with(draft.failed(
                f"the engine reported an error: {error_text(chunk.get('error'))}"))
        return self  # ping, and event types added later

    def _arguments(self, call: int, fragment: str) -> AnthropicMessagesStream:
        if not fragment:
            return self
        draft = self.draft
        if call in self.start_inputs:  # deltas win over the start block's input
            draft = draft.change_call(call, arguments=None)
            inputs = tuple(index for index in self.start_inputs if index != call)
            return attrs.evolve(self, draft=draft.add_arguments(call, fragment),
                                start_inputs=inputs)
        return self._with(draft.add_arguments(call, fragment))

    def finish(self) -> EngineEvent:
        """The transport ended: the decided event, or, without ``message_stop``, a network
        failure (the message was cut off; see the module docstring)."""
        if self.draft.event is not None:
            return self.draft.event
        return StreamFailed(request_id=self.draft.request_id, network=True,
                            error="the stream ended before message_stop: the message was cut "
                                  "off in transit")


def _as_stream(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The stream events that carry the whole ``message`` (see the module docstring)."""
    blocks = field(message, "content", "message", list) or []
    usage = field(message, "usage", "message", Mapping) or {}
    events: list[Mapping[str, Any]] = [{"type": "message_start", "message": {
        "usage": {"input_tokens": usage.get("input_tokens"), "output_tokens": None}}}]
    for index, block in enumerate(blocks):
        where = f"message.content[{index}]"
        block = check_mapping(block, where)
        if block.get("type") == "tool_use":  # a whole block carries its input, always
            field(block, "input", where, Mapping, required=True)
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta",
                   "delta": {"stop_reason": message.get("stop_reason")},
                   "usage": {"output_tokens": usage.get("output_tokens")}})
    events.append({"type": "message_stop"})
    return events
