"""The turn rules in pydantic-ai: a ``WrapperModel`` that ends the run on a cut, filtered or
empty response before any of its calls runs.

Adopt it with two lines (docs/howto/adapter-pydantic-ai.md)::

    from agentturn.integrations.pydantic_ai import guarded
    agent = Agent(guarded(model), ...)          # model: a Model or a model name

Theory of operation
-------------------
pydantic-ai's public extension point for the model is ``pydantic_ai.models.wrapper
.WrapperModel``: every request of the agent's loop goes through its ``request`` (not
streamed) or ``request_stream`` (streamed). The wrapper lets the wrapped model answer, then
reads the ``ModelResponse`` pydantic-ai built: the engine's raw finish reason
(``provider_details["finish_reason"]``, else pydantic-ai's normalized ``finish_reason``), the
output tokens (``usage.output_tokens``), the limit the request asked for
(``model_settings["max_tokens"]``), the text and the calls. :func:`agentturn.integrations.judge`
decides; a response that did not complete normally raises its
:class:`~agentturn.integrations.TurnEnded`. Not streamed, that happens before ``request``
returns; streamed, when the framework has read the stream to its end and leaves the
``request_stream`` context, which it does before it runs any call of the response.

What it cannot see: whether a streamed Anthropic tool block closed. pydantic-ai reads
``content_block_stop`` inside its private stream mapping and emits the same public events
(``PartStartEvent``/``PartDeltaEvent``/``PartEndEvent``, the final ``ModelResponse``) for a
block that closed and for one that never did, so the engines' ``UNCLOSED_TOOL_BLOCK`` signal
cannot be read through its public surface: an Anthropic stream whose tool block never closes,
under the limit and labelled ``tool_use``, gets past the adapter (``agentturn conform``,
TL-9/unclosed-block, fails; with complete arguments the call runs, with cut ones pydantic-ai
takes it as a malformed call and retries, TL-6). Such a cut is caught when it is at the
limit (the output tokens) or labelled ``max_tokens``.

pydantic-ai is imported only when :func:`guarded` is called.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Any

from . import judge, raise_for

__all__ = ["guarded"]


def _check(response: Any, model_settings: Any) -> None:
    details = getattr(response, "provider_details", None) or {}
    finish = details.get("finish_reason") or getattr(response, "finish_reason", None)
    usage = getattr(response, "usage", None)
    limit = (model_settings or {}).get("max_tokens")
    raise_for(judge(
        finish_reason=None if finish is None else str(finish),
        output_tokens=getattr(usage, "output_tokens", None) or None,
        max_output_tokens=limit, text=response.text or "",
        calls=[(part.tool_name, part.args) for part in response.tool_calls]))


@functools.cache
def _guarded_class() -> type[Any]:
    from pydantic_ai.models.wrapper import WrapperModel

    class GuardedModel(WrapperModel):
        """A pydantic-ai model that withholds the calls of a response that did not complete
        normally and ends the run with a typed outcome (agentturn.integrations)."""

        async def request(self, messages: Any, model_settings: Any,
                          model_request_parameters: Any, *args: Any, **kwargs: Any) -> Any:
            response = await super().request(messages, model_settings,
                                             model_request_parameters, *args, **kwargs)
            _check(response, model_settings)
            return response

        @contextlib.asynccontextmanager
        async def request_stream(self, messages: Any, model_settings: Any,
                                 model_request_parameters: Any, *args: Any,
                                 **kwargs: Any) -> AsyncIterator[Any]:
            async with self.wrapped.request_stream(messages, model_settings,
                                                   model_request_parameters, *args,
                                                   **kwargs) as streamed:
                yield streamed
            _check(streamed.get(), model_settings)

    return GuardedModel


def guarded(model: Any) -> Any:
    """``model`` (a pydantic-ai ``Model`` or model name) with agentturn's turn rules."""
    return _guarded_class()(model)
