"""The turn rules in the OpenAI Agents SDK: a ``Model`` that wraps the agent's model and ends
the run on a cut or empty response before any of its calls runs.

Adopt it with two lines (docs/howto/adapter-openai-agents.md)::

    from agentturn.integrations.openai_agents import guarded
    agent = Agent(..., model=guarded(model))    # model: an agents Model (e.g. chat completions)

Theory of operation
-------------------
The SDK's public extension point for the model is ``agents.models.interface.Model``: the run
loop calls ``get_response`` (not streamed) or ``stream_response`` (streamed) and runs the
calls of the result only after it has the whole response. The wrapper passes both through to
the wrapped model and reads what the SDK keeps of each response: its output items (text and
``function_call`` items with their argument text), its usage (``output_tokens``), and the
limit asked for (``model_settings.max_tokens``). Streamed, it asks for usage
(``include_usage=True`` unless the user set it), as the SDK does only for api.openai.com, and
judges the ``response.completed`` event before passing it on, so the run loop never sees
a cut response. :func:`agentturn.integrations.judge` decides.

The finish reason: the SDK's ``Model`` interface does not carry it (the chat-completions
model turns each response into Responses-API items and drops it). For an
``OpenAIChatCompletionsModel``, :func:`guarded` therefore adds a response hook to the HTTP
client of the model's ``AsyncOpenAI`` (``model._client._client.event_hooks``: the one reach
past a public name, on the **openai** SDK, which openai-agents does not pin; checked on
openai 3.63.0, :data:`CHECKED_OPENAI`, and a chat-completions model whose client lacks it is
refused with a RuntimeError rather than guarded silently without it) that reads the
``finish_reason`` of each chat completion, streamed or not, as the bytes pass, without
changing them; it records only during a call of the guarded model. Where that hook cannot be
added (another model class), a cut is still seen by the output tokens at the limit (the honest
and the mislabelled cut alike, whenever the engine reports usage) and an empty answer by its
lack of text and calls, but a filtered answer looks like a normal short one and the outcome's
``finish_reason`` is None.

What it cannot see: an unclosed tool block (the issue's "unclosed call" signal) has no
meaning in Chat Completions, whose streamed calls have no block that closes; the SDK reaches
Anthropic only through LiteLLM, which this adapter does not guard. A model name is refused
(see :func:`guarded`).

The SDK is imported only when :func:`guarded` is called.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import json
from collections.abc import AsyncIterator
from typing import Any

from . import judge, raise_for

__all__ = ["guarded"]


#: The finish reasons the HTTP hook read during the current guarded model call.
_SEEN: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "agentturn_openai_agents_finish_reasons", default=None)


def _finish_reasons(payload: Any, seen: list[str]) -> None:
    if isinstance(payload, dict):
        for choice in payload.get("choices") or ():
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if isinstance(reason, str):
                seen.append(reason)


class _Tap:
    """The response's bytes, unchanged, read for finish reasons on the way."""

    def __init__(self, stream: Any, seen: list[str], sse: bool) -> None:
        self.stream, self.seen, self.sse, self.buffer = stream, seen, sse, b""

    def _lines(self, final: bool) -> None:
        lines = self.buffer.split(b"\n")
        self.buffer = b"" if final else lines.pop()
        for line in lines:
            if line.startswith(b"data:") and line[5:].strip() not in (b"", b"[DONE]"):
                with contextlib.suppress(ValueError):
                    _finish_reasons(json.loads(line[5:]), self.seen)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            self.buffer += chunk
            if self.sse:
                self._lines(final=False)
            yield chunk
        if self.sse:
            self._lines(final=True)
        else:
            with contextlib.suppress(ValueError):
                _finish_reasons(json.loads(self.buffer), self.seen)

    async def aclose(self) -> None:
        await self.stream.aclose()


async def _on_response(response: Any) -> None:
    seen = _SEEN.get()
    if seen is not None and response.request.url.path.endswith("/chat/completions"):
        sse = "text/event-stream" in response.headers.get("content-type", "")
        response.stream = _tap_class(type(response.stream))(response.stream, seen, sse)


_TAPS: dict[type, type[_Tap]] = {}


def _tap_class(stream: type) -> type[_Tap]:
    """:class:`_Tap` as the HTTP library's own async byte stream (which it checks for)."""
    if stream not in _TAPS:
        base = next((c for c in stream.__mro__ if c.__name__ == "AsyncByteStream"), None)
        _TAPS[stream] = _Tap if base is None else type("Tap", (_Tap, base), {})
    return _TAPS[stream]


#: The openai SDK the private reach (``model._client._client.event_hooks``) was checked on.
CHECKED_OPENAI = "3.63.0"


def _tap(model: Any) -> None:
    """Add the finish-reason hook to the HTTP client of a chat-completions model's client.

    ``model._client`` is the SDK model's ``AsyncOpenAI``; its ``_client`` (the openai SDK's
    private name for its httpx client, checked on openai :data:`CHECKED_OPENAI`) holds the
    ``event_hooks``. The openai SDK is not pinned by openai-agents (0.24.0 asks for
    ``openai>=3,<4``): should that name move, a chat-completions model is refused here, at
    :func:`guarded`, with a RuntimeError, rather than guarded without its finish reasons.
    """
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel

    http = getattr(getattr(model, "_client", None), "_client", None)
    hooks = getattr(http, "event_hooks", None)
    if not isinstance(hooks, dict):
        if isinstance(model, OpenAIChatCompletionsModel):
            import openai

            raise RuntimeError(
                f"agentturn.integrations.openai_agents: this openai SDK "
                f"({openai.__version__}) keeps no httpx client at model._client._client "
                f"(checked on openai {CHECKED_OPENAI}); the finish-reason hook cannot be "
                f"added, so the model is not guarded")
        return  # another model class: judged without the finish reason (see the docstring)
    if _on_response not in hooks.get("response", []):
        setattr(http, "event_hooks",  # noqa: B010 (http is untyped: the SDK's client)
                {**hooks, "response": [*hooks.get("response", []), _on_response]})


def _check(output: Any, usage: Any, model_settings: Any) -> None:
    text: list[str] = []
    calls: list[tuple[str, Any]] = []
    for item in output or ():
        kind = getattr(item, "type", None)
        if kind == "function_call":
            calls.append((item.name, item.arguments))
        elif kind == "message":
            text += [getattr(part, "text", "") or getattr(part, "refusal", "") or ""
                     for part in item.content]
        elif kind is not None and kind != "reasoning":
            calls.append((str(kind), None))  # another kind of call (a built-in tool)
    seen = _SEEN.get()
    raise_for(judge(finish_reason=seen[-1] if seen else None,
                    output_tokens=getattr(usage, "output_tokens", None) or None,
                    max_output_tokens=getattr(model_settings, "max_tokens", None),
                    text="".join(text), calls=calls))


@functools.cache
def _guarded_class() -> type[Any]:
    from agents.models.interface import Model

    class GuardedModel(Model):
        """An agents ``Model`` that withholds the calls of a response that did not complete
        normally and ends the run with a typed outcome (agentturn.integrations)."""

        def __init__(self, wrapped: Any) -> None:
            self.wrapped = wrapped
            _tap(wrapped)

        def __getattr__(self, name: str) -> Any:  # anything else is the wrapped model's
            return getattr(self.wrapped, name)

        async def get_response(self, system_instructions: Any, input: Any,
                               model_settings: Any, *args: Any, **kwargs: Any) -> Any:
            token = _SEEN.set([])
            try:
                response = await self.wrapped.get_response(system_instructions, input,
                                                           model_settings, *args, **kwargs)
                _check(response.output, response.usage, model_settings)
            finally:
                _SEEN.reset(token)  # the hook records only during a guarded call
            return response

        async def stream_response(self, system_instructions: Any, input: Any,
                                  model_settings: Any, *args: Any,
                                  **kwargs: Any) -> AsyncIterator[Any]:
            if getattr(model_settings, "include_usage", None) is None:
                model_settings = dataclasses.replace(model_settings, include_usage=True)
            seen: list[str] = []
            stream = self.wrapped.stream_response(system_instructions, input, model_settings,
                                                  *args, **kwargs)
            while True:
                # the hook records into ``seen`` only while the wrapped stream is read
                token = _SEEN.set(seen)
                try:
                    event = await stream.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    _SEEN.reset(token)
                if getattr(event, "type", None) == "response.completed":
                    token = _SEEN.set(seen)
                    try:
                        _check(event.response.output, event.response.usage, model_settings)
                    finally:
                        _SEEN.reset(token)
                yield event

        async def close(self) -> None:
            await self.wrapped.close()

    return GuardedModel


def guarded(model: Any) -> Any:
    """``model`` (an OpenAI Agents SDK ``Model``) with agentturn's turn rules.

    A model name (``"gpt-4.1"``) is refused at once with a TypeError: the SDK resolves a name
    to its Responses model, whose interface keeps no finish reason, so the adapter needs the
    model object; wrap an ``OpenAIChatCompletionsModel(model=..., openai_client=...)``.
    """
    if isinstance(model, str):
        raise TypeError(
            f"guarded({model!r}): pass an agents Model, not a model name, for example "
            f"guarded(OpenAIChatCompletionsModel(model={model!r}, openai_client=AsyncOpenAI()))"
            f"; a name resolves to the Responses model, which keeps no finish reason")
    from agents.models.interface import Model

    if not isinstance(model, Model):
        raise TypeError(f"guarded(...) takes an agents Model, not {type(model).__name__}")
    return _guarded_class()(model)
