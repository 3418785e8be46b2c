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

Streamed function-call arguments (Vertex AI's ``stream_function_call_arguments``) are
assembled: a ``functionCall`` with ``willContinue: true`` (or with ``partialArgs``) opens a
call, the ``functionCall`` parts after it are its pieces (a name or id they repeat must be the
call's), and the first without ``willContinue: true`` ends it. Its ``partialArgs`` are put back
into one object by their JSON paths (:mod:`agentturn.engines._partial_args` has the rules), and
the call then reads like any other: same id, same canonical argument string. A call the stream
never ended, or that ended with a string still continuing, is unclosed: it never runs, and the
response counts as cut (``MAX_TOKENS`` says ``FINISH_REASON``; a ``STOP`` label over it,
``UNCLOSED_TOOL_BLOCK``). Pieces that cannot be read (a path that addresses no single value, a
value of the wrong type, a value set twice, a call started while another streams) end the stream
with ``StreamFailed`` naming the piece.

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
    Draft,
    DraftCall,
    EngineEvent,
    EngineStream,
    Usage,
    WireShapeError,
    canonical_json,
    check_mapping,
    count,
    error_text,
    field,
)
from ._partial_args import Pieces, assemble, read_piece, whole_members

__all__ = ["GeminiStream", "StreamedCall", "canonical_arguments"]


def canonical_arguments(args: Mapping[str, Any] | None,
                        where: str = "functionCall.args") -> str:
    """The raw argument string of a Gemini function call's parsed ``args``.

    Raises ``ValueError`` naming ``where`` when ``args`` is not an exact JSON value or nests
    deeper than :data:`agentturn._json.MAX_DEPTH` levels."""
    return canonical_json(args, where)


def _spelled(obj: Mapping[str, Any], snake: str, camel: str) -> str:
    """The key as this wire object spells it (for error messages)."""
    return snake if obj.get(snake) is not None else camel


@attrs.frozen(kw_only=True)
class StreamedCall:
    """A call whose arguments are still streaming in pieces."""

    #: Where the call is in the draft's calls.
    index: int
    name: str
    #: The wire's id, if the call's first piece gave one.
    wire_id: str | None
    pieces: Pieces = None


@attrs.frozen(kw_only=True)
class GeminiStream(EngineStream):
    """An accumulator of Gemini ``generateContent`` stream chunks (see the module docstring)."""

    wire_format = "Gemini generateContent"
    #: The call whose arguments are streaming (``willContinue``), if one is.
    streaming: StreamedCall | None = None

    def finish(self) -> EngineEvent:
        """The transport ended: the request's one event. A call still streaming its arguments
        is unclosed (it never runs) and holds the arguments received so far."""
        if self.draft.event is not None or self.streaming is None:
            return super().finish()
        try:
            draft = _ended(self.draft, self.streaming, cut=True)
        except WireShapeError as error:
            draft = self.draft.failed(f"the {self.wire_format} stream was malformed: {error}")
        return attrs.evolve(self, draft=draft, streaming=None).finish()

    def _take(self, chunk: Mapping[str, Any]) -> GeminiStream:
        draft = self.draft
        streaming = self.streaming
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
                    call = check_mapping(call, place)
                    if streaming is not None or _in_pieces(call, place):
                        draft, streaming = _piece(draft, streaming, call, place)
                        continue
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
        return attrs.evolve(self, draft=draft, streaming=streaming)


# --- arguments streamed in pieces -------------------------------------------------------------


def _in_pieces(call: Mapping[str, Any], place: str) -> bool:
    """Whether a ``functionCall`` opens a call whose arguments stream (see above)."""
    more = field(call, "will_continue", place, bool, alias="willContinue")
    pieces = field(call, "partial_args", place, list, alias="partialArgs")
    return bool(more) or bool(pieces)


def _piece(draft: Draft, streaming: StreamedCall | None, call: Mapping[str, Any],
           place: str) -> tuple[Draft, StreamedCall | None]:
    """One ``functionCall`` of a call that streams its arguments: it opens the call, adds its
    pieces, and ends it unless it says ``willContinue``."""
    name = field(call, "name", place, str, required=streaming is None)
    wire_id = field(call, "id", place, str)
    if streaming is None:
        call_id = wire_id or f"{draft.request_id}/call-{len(draft.calls) + 1}"
        streaming = StreamedCall(index=len(draft.calls), name=name, wire_id=wire_id)
        draft = draft.add_call(DraftCall(key=call_id, call_id=call_id, name=name,
                                         closed=False))
    elif name is not None and name != streaming.name:
        raise WireShapeError(f"{place}.name is {name!r} while the call {streaming.name!r} "
                             "still streams its arguments (willContinue)")
    elif wire_id is not None and wire_id != (streaming.wire_id or wire_id):
        raise WireShapeError(f"{place}.id is {wire_id!r} while the call "
                             f"{streaming.wire_id!r} still streams its arguments "
                             "(willContinue)")
    spelled = "partial_args" if call.get("partial_args") is not None else "partialArgs"
    pieces = streaming.pieces
    for number, raw in enumerate(field(call, "partial_args", place, list,
                                       alias="partialArgs") or ()):
        pieces = (read_piece(raw, f"{place}.{spelled}[{number}]"), pieces)
    args = field(call, "args", place, Mapping)
    for member in whole_members(args, place + ".args") if args else ():
        pieces = (member, pieces)
    streaming = attrs.evolve(streaming, pieces=pieces)
    if field(call, "will_continue", place, bool, alias="willContinue"):
        return draft, streaming
    return _ended(draft, streaming, cut=False), None


def _ended(draft: Draft, streaming: StreamedCall, *, cut: bool) -> Draft:
    """The draft with the streamed call's arguments assembled: closed when the engine ended it
    with every string whole, unclosed (it never runs) otherwise."""
    arguments, finished = assemble(streaming.pieces)
    return draft.change_call(streaming.index, arguments=(
        canonical_json(arguments, f"the arguments of the streamed call {streaming.name!r}"),
        None),
        closed=finished and not cut)



