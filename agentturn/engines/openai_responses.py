"""OpenAI Responses streaming events to one event.

Theory of operation
-------------------
Responses has no finish reason: the terminal event says how the response ended.
``response.completed`` (status ``completed``) is a normal end; ``response.incomplete`` carries
``incomplete_details.reason`` (``max_output_tokens``, ``content_filter``), which becomes the raw
finish reason the turn keeps (``incomplete`` when it gives none); ``response.failed`` and the
``error`` event end the stream with ``StreamFailed``. Usage (``input_tokens`` /
``output_tokens``) and the ``max_output_tokens`` the request set come on the terminal event's
``response``; the limit the host passed to ``start`` wins, the echoed one is used otherwise.

A function call is announced by ``response.output_item.added`` (an item of type
``function_call``: its ``id`` addresses the argument deltas, its ``call_id`` is the id to answer
with), its arguments stream as ``response.function_call_arguments.delta`` fragments, and
``response.function_call_arguments.done`` / ``response.output_item.done`` close it with the whole
argument string (which then replaces the fragments). A call not closed when the response ends was
cut, whatever the terminal event says: the :attr:`~agentturn.CutOffSignal.UNCLOSED_TOOL_BLOCK`
signal; so is one whose done item has status ``incomplete``. Text comes from
``response.output_text.delta`` (and a refusal from ``response.refusal.delta``); reasoning and
server-run tools are skipped.

Only ``function_call`` items are read as calls. The other items that ask the *host* to act —
``custom_tool_call`` (free-form input), ``computer_call``, ``local_shell_call``, ``shell_call``,
``apply_patch_call``, ``mcp_approval_request`` — end the stream with ``StreamFailed`` naming the
item type: skipping one would end the turn as if the model had asked for nothing, and mapping
one to a function call would give the host a call of a tool it may not have declared in that
shape. A host that declares such tools reads their items itself.
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
    conclude,
    count,
    error_text,
    field,
)

__all__ = ["ResponsesStream"]

_TEXT_DELTAS = ("response.output_text.delta", "response.refusal.delta")
#: Output items that ask the host to run something, other than ``function_call``: not read.
_HOST_RUN_ITEMS = frozenset({"custom_tool_call", "computer_call", "local_shell_call",
                             "shell_call", "apply_patch_call", "mcp_approval_request"})


def _key(item_id: str | None, output_index: int | None, where: str) -> str:
    if item_id:
        return item_id
    if output_index is None:
        raise WireShapeError(f"{where} has neither an item id nor an output_index")
    return f"#{output_index}"


@attrs.frozen(kw_only=True)
class ResponsesStream(EngineStream):
    """An accumulator of OpenAI Responses stream events (see the module docstring)."""

    wire_format = "OpenAI Responses"

    def _take(self, chunk: Mapping[str, Any]) -> ResponsesStream:
        draft = self.draft
        kind = field(chunk, "type", "event", str, required=True)
        where = kind
        if kind in _TEXT_DELTAS:
            return self._with(draft.add_text(field(chunk, "delta", where, str, required=True)))
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = field(chunk, "item", where, Mapping, required=True)
            item_kind = field(item, "type", where + ".item", str, required=True)
            if item_kind in _HOST_RUN_ITEMS:
                return self._with(draft.failed(
                    f"{where}.item.type is {item_kind}: the engine asked the host to run an "
                    "item ResponsesStream does not read (only function_call items are calls)"))
            if item_kind != "function_call":
                return self
            key = _key(field(item, "id", where + ".item", str),
                       count(chunk, "output_index", where), where)
            index = draft.call_index(key)
            arguments = field(item, "arguments", where + ".item", str) or ""
            if index is None:
                call_id = field(item, "call_id", where + ".item", str, required=True)
                name = field(item, "name", where + ".item", str, required=True)
                draft = draft.add_call(DraftCall(key=key, call_id=call_id, name=name,
                                                 closed=False))
                index = len(draft.calls) - 1
                if kind.endswith(".added"):
                    return self._with(draft.add_arguments(index, arguments))
            if kind.endswith(".added"):
                raise WireShapeError(f"{where}: function call {key} was added twice")
            status = field(item, "status", where + ".item", str)
            return self._with(draft.change_call(index, arguments=(arguments, None),
                                                closed=status != "incomplete"))
        if kind in ("response.function_call_arguments.delta",
                    "response.function_call_arguments.done"):
            key = _key(field(chunk, "item_id", where, str), count(chunk, "output_index", where),
                       where)
            index = draft.call_index(key)
            if index is None:
                raise WireShapeError(f"{where}.item_id {key!r} names no function call added")
            if kind.endswith(".delta"):
                return self._with(draft.add_arguments(
                    index, field(chunk, "delta", where, str, required=True)))
            arguments = field(chunk, "arguments", where, str, required=True)
            return self._with(draft.change_call(index, arguments=(arguments, None), closed=True))
        if kind in ("response.completed", "response.incomplete"):
            response = field(chunk, "response", where, Mapping, required=True)
            draft = self._ended(draft, response, kind, where + ".response")
            return self._with(attrs.evolve(draft, event=conclude(draft)))
        if kind == "response.failed":
            response = field(chunk, "response", where, Mapping) or {}
            return self._with(draft.failed(
                f"the engine reported the response failed: {error_text(response.get('error'))}"))
        if kind == "error":
            return self._with(draft.failed(f"the engine reported an error: {error_text(chunk)}"))
        return self  # created, in progress, reasoning, server-run tools, annotations ...

    @staticmethod
    def _ended(draft: Draft, response: Mapping[str, Any], kind: str, where: str) -> Draft:
        reason = "completed"
        if kind == "response.incomplete":
            details = field(response, "incomplete_details", where, Mapping) or {}
            reason = field(details, "reason", where + ".incomplete_details", str) or "incomplete"
        usage = field(response, "usage", where, Mapping) or {}
        limit = draft.max_output_tokens
        if limit is None:
            limit = count(response, "max_output_tokens", where)
        return attrs.evolve(draft, finish_reason=reason, max_output_tokens=limit, usage=Usage(
            input_tokens=count(usage, "input_tokens", where + ".usage"),
            output_tokens=count(usage, "output_tokens", where + ".usage")))
