"""A runner for pydantic-ai, as its user would write it.

Runs only in its own venv (``agentturn conform --runner
agentturn.tools.conform.runners.pydantic_ai:Runner --venv .conform-envs/pydantic_ai``):
pydantic-ai is imported inside :meth:`Runner.run`, so the suite can read
:data:`REQUIREMENTS` without it. ``pydantic-ai-slim`` with its ``openai`` and ``anthropic``
extras is the same framework as ``pydantic-ai`` without the other providers' SDKs.

The framework's defaults and its own loop: an ``Agent`` on ``OpenAIChatModel`` or
``AnthropicModel`` with a provider given the suite's base URL, two ``@agent.tool_plain`` tools
that call the suite's tools, the output limit as ``model_settings={"max_tokens": ...}``;
``agent.run`` (not streamed) or ``agent.run_stream_events`` (streamed: the whole run's
events, the last one carrying the result). Not ``agent.run_stream``: it ends the run at the
first text the model streams, even when calls follow it (measured: a response "Step 1." plus a
call ends the run there, as a success), which would measure something else.

``success``: the run returned a result (pydantic-ai's success); an exception is what its
caller got. ``finish_reason``: the raw one in the last response's ``provider_details``, which
pydantic-ai's result exposes (``result.response``), so a careful caller could read it.

``AdaptedRunner``: the same code with agentturn's adapter added,
:func:`agentturn.integrations.pydantic_ai.guarded` around the model.
"""

from __future__ import annotations

from typing import Any

from ..protocol import MODES, RunResult, Task, Tools
from ._adaptable import AdaptableRunner

#: The pins of this runner's venv.
REQUIREMENTS = ["pydantic-ai-slim[openai,anthropic]==2.68.0"]


class Runner(AdaptableRunner):
    name = "pydantic-ai 2.68.0"
    modes = MODES

    async def _run(self, task: Task, tools: Tools) -> RunResult:
        from pydantic_ai import Agent

        model: Any
        if task.api == "openai-chat":
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider

            model = OpenAIChatModel(task.model, provider=OpenAIProvider(
                base_url=task.base_url, api_key="conform"))
        else:
            from pydantic_ai.models.anthropic import AnthropicModel
            from pydantic_ai.providers.anthropic import AnthropicProvider

            model = AnthropicModel(task.model, provider=AnthropicProvider(
                base_url=task.base_url, api_key="conform"))
        if self.adapted:
            from agentturn.integrations.pydantic_ai import guarded

            model = guarded(model)
        agent = Agent(model, instructions="You are a helpful assistant.",
                      model_settings={"max_tokens": task.max_tokens})

        @agent.tool_plain
        async def write_file(path: str, content: str) -> str:
            """Write a text file."""
            return await tools.acall("write_file", {"path": path, "content": content})

        @agent.tool_plain
        async def read_file(path: str) -> str:
            """Read a text file."""
            return await tools.acall("read_file", {"path": path})

        if task.stream:
            from pydantic_ai import AgentRunResultEvent

            final: Any = None
            async with agent.run_stream_events(task.prompt) as events:
                async for event in events:
                    if isinstance(event, AgentRunResultEvent):
                        final = event.result
            output, response = final.output, final.response
        else:
            result = await agent.run(task.prompt)
            output, response = result.output, result.response
        details = getattr(response, "provider_details", None) or {}
        finish = details.get("finish_reason")
        return RunResult(success=True, text=str(output), outcome="output",
                         finish_reason=None if finish is None else str(finish))


def AdaptedRunner() -> Runner:
    """The same runner with agentturn's adapter added."""
    return Runner(adapted=True)
