"""OpenAI Chat Completions streaming chunks (``stream=True``), or one whole response, to one
event.

Theory of operation
-------------------
A chunk is ``{"choices": [{"index", "delta": {...}, "finish_reason"}], "usage": ...}``. Text
arrives in ``delta.content`` (a refusal in ``delta.refusal``, kept as text: the user is shown
it); a tool call's id and name come only in the first delta of its ``index``, its arguments in
``function.arguments`` fragments of every delta of that index. The finish reason comes once,
on a chunk with an empty delta (a later chunk may repeat it; one that says another reason is a
wrong shape, so a ``length`` is never overwritten by a ``tool_calls``), and usage only in a
later chunk with ``choices: []``, and only when the request set
``stream_options={"include_usage": True}`` — without it the output-token signal cannot be
checked. Nothing marks the end of the stream (the SSE ``[DONE]`` line is the
transport's), so the event comes from :meth:`~agentturn.engines.EngineStream.finish` when the
transport ends, unless an ``{"error": ...}`` chunk (as OpenAI-compatible servers send one
mid-stream) decided it first.

A tool call is its ``index``: the id and name of a later delta of the same index, when it
repeats them (some OpenAI-compatible servers do), must be the same; a different one is a wrong
shape (``StreamFailed`` naming the field), never a second call merged into the first — the
SDK's own accumulator, which concatenates them, would make one call of two. The calls reach the
turn ordered by ``index`` (the SDK's accumulator places each at its index too), not by when they
first appeared; a delta without ``index`` is addressed by its position in the delta's list.

Only choice ``0`` is read (an agent asks for one choice); chunks of other choices are ignored.
The legacy ``function_call`` delta is not read: a stream that uses it ends with ``StreamFailed``
saying so, rather than losing the call.

A response asked for without streaming (``stream=False``: a ``chat.completion`` object, as
LiteLLM, mini-swe-agent and most framework clients fetch it) is fed the same way, as one chunk:
its choice carries ``message`` where a chunk carries ``delta``, with the usage in the same
object, and the same rules read it (a call's position in ``message.tool_calls`` is its index).
It decides the event at once: anything fed after it is refused (``StreamEnded``), never merged
into it. A choice with both is a wrong shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._core import (
    Draft,
    DraftCall,
    EngineStream,
    Usage,
    WireShapeError,
    check_mapping,
    conclude,
    count,
    field,
)
from ._core import error_text as _error_text

__all__ = ["ChatCompletionsStream"]


def _in_index_order(draft: Draft) -> Draft:
    return attrs.evolve(draft, calls=tuple(sorted(draft.calls, key=lambda call: int(call.key))))


def _same(first: str, later: str | None, where: str, key: str) -> None:
    if later and later != first:
        raise WireShapeError(f"{where} is {later!r}, but tool call {key} began as {first!r} "
                             "(an index is one call: its id and name come in its first delta)")


@attrs.frozen(kw_only=True)
class ChatCompletionsStream(EngineStream):
    """An accumulator of OpenAI Chat Completions chunks (see the module docstring)."""

    wire_format = "OpenAI Chat Completions"

    def _take(self, chunk: Mapping[str, Any]) -> ChatCompletionsStream:
        draft = self.draft
        if chunk.get("error") is not None:
            return self._with(draft.failed(f"the engine reported an error: "
                                           f"{_error_text(chunk['error'])}"))
        whole = False
        for number, choice in enumerate(field(chunk, "choices", "chunk", list) or ()):
            where = f"choices[{number}]"
            choice = check_mapping(choice, where)
            if (count(choice, "index", where) or 0) != 0:
                continue
            delta = field(choice, "delta", where, Mapping)
            message = field(choice, "message", where, Mapping)
            if delta is not None and message is not None:
                raise WireShapeError(f"{where} has both delta (a streamed chunk) and message "
                                     "(a whole response); a choice is one or the other")
            where += ".delta" if message is None else ".message"
            delta = message if message is not None else delta or {}
            if delta.get("function_call") is not None:
                return self._with(draft.failed(
                    "the engine used the legacy function_call delta, which is not read; ask "
                    "for tools instead"))
            draft = draft.add_text(field(delta, "content", where, str) or "")
            draft = draft.add_text(field(delta, "refusal", where, str) or "")
            for position, delta_call in enumerate(field(delta, "tool_calls", where, list) or ()):
                place = f"{where}.tool_calls[{position}]"
                delta_call = check_mapping(delta_call, place)
                wire_index = count(delta_call, "index", place)
                key = str(position if wire_index is None else wire_index)
                function = field(delta_call, "function", place, Mapping) or {}
                index = draft.call_index(key)
                call_id = field(delta_call, "id", place, str)
                name = field(function, "name", place + ".function", str)
                if index is None:
                    if not call_id or not name:
                        raise WireShapeError(f"{place}: the first delta of tool call {key} "
                                             "must carry its id and function.name")
                    draft = _in_index_order(draft.add_call(
                        DraftCall(key=key, call_id=call_id, name=name)))
                    index = next(slot for slot, call in enumerate(draft.calls) if call.key == key)
                else:
                    _same(draft.calls[index].call_id, call_id, f"{place}.id", key)
                    _same(draft.calls[index].name, name, f"{place}.function.name", key)
                arguments = field(function, "arguments", place + ".function", str)
                draft = draft.add_arguments(index, arguments or "")
            reason = field(choice, "finish_reason", f"choices[{number}]", str)
            if reason is not None and reason != draft.finish_reason:
                if draft.finish_reason is not None:  # a cut's label is never overwritten
                    raise WireShapeError(
                        f"choices[{number}].finish_reason is {reason!r}, but the response "
                        f"already finished with {draft.finish_reason!r}")
                draft = attrs.evolve(draft, finish_reason=reason)
            whole = whole or message is not None
        usage = field(chunk, "usage", "chunk", Mapping)
        if usage is not None:
            draft = attrs.evolve(draft, usage=Usage(
                input_tokens=count(usage, "prompt_tokens", "usage"),
                output_tokens=count(usage, "completion_tokens", "usage")))
        if whole:  # a whole response is all there is: it decides the event now
            draft = attrs.evolve(draft, event=conclude(draft))
        return self._with(draft)
