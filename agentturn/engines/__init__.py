"""Engine streams to events: the four wire formats hosts meet, truncation caught even when the
engine lies.

Theory of operation
-------------------
The first thing every host writes is the code that turns its engine's stream into the turn's
``StreamCompleted``: text, tool calls, finish reason. This package is that code, pure (no SDK
imported, no I/O; not loaded by ``import agentturn``). One accumulator per wire format:

* :class:`ChatCompletionsStream` — OpenAI Chat Completions chunks (and OpenAI-compatible
  servers: vLLM, Ollama, LiteLLM ...);
* :class:`ResponsesStream` — OpenAI Responses events;
* :class:`AnthropicMessagesStream` — Anthropic Messages events;
* :class:`GeminiStream` — Gemini ``generateContent`` stream chunks.

Each is a value: ``start(request_id, max_output_tokens=...)``, then ``feed(mapping)`` per wire
object (an SDK object's ``model_dump()``, or the SSE ``data:`` JSON), each call returning a new
accumulator. The request's one event (``StreamCompleted`` or ``StreamFailed``) is
:attr:`~EngineStream.event` as soon as a wire object decides it, else :meth:`~EngineStream.finish`
when the transport ends; :meth:`~EngineStream.abort` turns an exception of the transport into
``StreamFailed``. The host loop::

    acc = ChatCompletionsStream.start(request.request_id, max_output_tokens=1024)
    async for chunk in stream:
        acc = acc.feed(chunk.model_dump())
        if acc.event is not None:
            break
    event = acc.finish()        # StreamCompleted or StreamFailed, for agentturn.reduce

Truncation has two kinds of signal (see :mod:`agentturn.engines._core`): the finish reason, and,
since engines mislabel cut-off responses, the output tokens at the requested limit or a tool
block the stream never closed. Any of them sets ``StreamCompleted.cut_off``: the turn ends with
the output-limit outcome and runs none of the response's calls, whatever its label (TL-9); the
outcome and ``agentturn explain`` name the signal. Arguments that do not parse under a normal
label below the limit are a malformed tool-call format: one corrective retry (TL-6). Whatever
the wire objects hold, only a ``ProtocolError`` (host misuse) escapes ``feed``; a wrong shape is
``StreamFailed`` naming the field, and no call runs with arguments that were not received.
"""

from __future__ import annotations

from ._core import EngineEvent, EngineStream, StreamEnded, Usage, WireInputError
from .anthropic_messages import AnthropicMessagesStream
from .gemini import GeminiStream, canonical_arguments
from .openai_chat import ChatCompletionsStream
from .openai_responses import ResponsesStream

__all__ = [
    "AnthropicMessagesStream",
    "ChatCompletionsStream",
    "EngineEvent",
    "EngineStream",
    "GeminiStream",
    "ResponsesStream",
    "StreamEnded",
    "Usage",
    "WireInputError",
    "canonical_arguments",
]
