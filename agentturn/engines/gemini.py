"""Gemini ``generateContent`` stream chunks (``streamGenerateContent``) to one event.

Theory of operation
-------------------
Every chunk is a whole ``GenerateContentResponse``: ``candidates[0].content.parts`` carry text
fragments and whole function calls, ``candidates[0].finishReason`` comes on the last chunk, and
``usageMetadata`` comes on every chunk, only the last one final (the output tokens are
``candidatesTokenCount`` plus ``thoughtsTokenCount``, which the output limit also counts).
Both spellings are read: the REST wire's camelCase and the SDK's ``model_dump()`` snake_case
(an enum left in a python-mode dump is read by its value). An ``{"error": ...}`` chunk ends the
stream with ``StreamFailed``; a prompt blocked before any candidate (``promptFeedback
.blockReason``) ends it with the block reason as the raw finish reason. Nothing marks the end:
the event comes from :meth:`~agentturn.engines.EngineStream.finish`.

Gemini gives no tool-call ids and sends arguments parsed (an object). So that the turn has ids
and raw argument strings like every engine: a call's id is the wire's ``id`` when the API sent
one, else ``"{request_id}/call-{n}"`` (``n`` counting the response's calls from 1: the same
stream always gives the same ids, unique within the turn since request ids are); its arguments
are the object serialized canonically — ``json.dumps(args, ensure_ascii=False, sort_keys=True,
separators=(",", ":"))``, ``"{}"`` for none — so the same call always has the same string.
``args`` that JSON cannot hold exactly (a non-str key, NaN, a set) or that nest deeper than
:data:`agentturn._json.MAX_DEPTH` end the stream with ``StreamFailed`` naming the field.

Streamed function-call arguments (Vertex AI's ``stream_function_call_arguments``: a
``functionCall`` with ``willContinue: true`` and its arguments in ``partialArgs`` pieces, each a
JSON Path and a value) are not assembled: the SDK's types leave open how a continued string
piece joins the last one, how an empty object or array is sent and which paths may appear, and
guessing wrong would run a call with arguments the model did not write. Such a ``functionCall``
ends the stream with ``StreamFailed`` saying so (not ``network``: sending the request again
would stream the same way); a host leaves the option off, and every call arrives whole.

Finish reasons reach the turn as they are: ``STOP`` ends normally (function calls end with it
too), ``MAX_TOKENS`` is an output limit, ``SAFETY`` / ``RECITATION`` / ``BLOCKLIST`` /
``PROHIBITED_CONTENT`` / ``SPII`` are withheld for policy, and ``MALFORMED_FUNCTION_CALL`` (the
model wrote a call the API could not parse) sets ``malformed_tool_format``: the malformed-format
path of TL-6, one corrective retry. Thought parts (``thought: true``) are not the answer: they
are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._core import (
    DraftCall,
    EngineStream,
    Usage,
    canonical_json,
    check_mapping,
    count,
    error_text,
    field,
)

__all__ = ["GeminiStream", "canonical_arguments"]


def canonical_arguments(args: Mapping[str, Any] | None,
                        where: str = "functionCall.args") -> str:
    """The raw argument string of a Gemini function call's parsed ``args``.

    Raises ``ValueError`` naming ``where`` when ``args`` is not an exact JSON value or nests
    deeper than :data:`agentturn._json.MAX_DEPTH` levels."""
    return canonical_json(args, where)


def _spelled(obj: Mapping[str, Any], snake: str, camel: str) -> str:
    """The key as this wire object spells it (for error messages)."""
    return snake if obj.get(snake) is not None else camel


def _streamed_in_pieces(call: Mapping[str, Any]) -> bool:
    """Whether a ``functionCall`` is a piece of one whose arguments stream (see above)."""
    pieces = call.get("partial_args") or call.get("partialArgs")
    return bool(call.get("will_continue") or call.get("willContinue")) or bool(pieces)


@attrs.frozen(kw_only=True)
class GeminiStream(EngineStream):
    """An accumulator of Gemini ``generateContent`` stream chunks (see the module docstring)."""

    wire_format = "Gemini generateContent"

    def _take(self, chunk: Mapping[str, Any]) -> GeminiStream:
        draft = self.draft
        if chunk.get("error") is not None:
            return self._with(draft.failed(
                f"the engine reported an error: {error_text(chunk['error'])}"))
        candidates = field(chunk, "candidates", "chunk", list) or []
        for number, candidate in enumerate(candidates):
            where = f"candidates[{number}]"
            candidate = check_mapping(candidate, where)
            if (count(candidate, "index", where) or 0) != 0:
                continue
            content = field(candidate, "content", where, Mapping) or {}
            for position, part in enumerate(field(content, "parts", where + ".content", list)
                                            or ()):
                place = f"{where}.content.parts[{position}]"
                part = check_mapping(part, place)
                if field(part, "thought", place, bool):
                    continue
                draft = draft.add_text(field(part, "text", place, str) or "")
                call = field(part, "function_call", place, Mapping, alias="functionCall")
                if call is not None:
                    place += ".functionCall" if "functionCall" in part else ".function_call"
                    if _streamed_in_pieces(call):
                        return self._with(draft.failed(
                            f"{place} streams its arguments in pieces (willContinue / "
                            "partialArgs, the request's stream_function_call_arguments), which "
                            "GeminiStream does not assemble; leave that option off so each "
                            "call arrives whole"))
                    name = field(call, "name", place, str, required=True)
                    call_id = field(call, "id", place, str) or (
                        f"{draft.request_id}/call-{len(draft.calls) + 1}")
                    arguments = canonical_arguments(field(call, "args", place, Mapping),
                                                    place + ".args")
                    draft = draft.add_call(DraftCall(key=call_id, call_id=call_id, name=name,
                                                     arguments=(arguments, None)))
            reason = field(candidate, "finish_reason", where, str, alias="finishReason")
            if reason is not None:
                draft = attrs.evolve(draft, finish_reason=reason,
                                     malformed=reason.upper() == "MALFORMED_FUNCTION_CALL")
        if not candidates and draft.finish_reason is None:
            feedback = field(chunk, "prompt_feedback", "chunk", Mapping,
                             alias="promptFeedback") or {}
            blocked = field(feedback, "block_reason", "chunk." + _spelled(
                chunk, "prompt_feedback", "promptFeedback"), str, alias="blockReason")
            if blocked is not None:
                draft = attrs.evolve(draft, finish_reason=blocked)
        usage = field(chunk, "usage_metadata", "chunk", Mapping, alias="usageMetadata")
        if usage is not None:
            where = "chunk." + _spelled(chunk, "usage_metadata", "usageMetadata")
            answer = count(usage, "candidates_token_count", where, alias="candidatesTokenCount")
            thoughts = count(usage, "thoughts_token_count", where, alias="thoughtsTokenCount")
            output = None if answer is None and thoughts is None else (answer or 0) + (
                thoughts or 0)
            draft = attrs.evolve(draft, usage=Usage(
                input_tokens=count(usage, "prompt_token_count", where, alias="promptTokenCount"),
                output_tokens=output))
        return self._with(draft)


