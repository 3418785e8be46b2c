"""A runner for the OpenAI Agents SDK (``openai-agents``), as its user would write it.

Runs only in its own venv (``agentturn conform --runner
agentturn.tools.conform.runners.openai_agents:Runner --venv .conform-envs/openai_agents``):
the SDK is imported inside :meth:`Runner.run`, so the suite can read :data:`REQUIREMENTS`
without it.

The SDK's defaults, its own loop: an ``Agent`` with two ``@function_tool`` tools that call the
suite's tools, on ``OpenAIChatCompletionsModel`` (the SDK's documented way to use another
OpenAI-compatible server: its default model speaks the Responses API, which the suite's server
does not), ``Runner.run`` or ``Runner.run_streamed`` (whose events are drained). The only
setting is the output limit (``ModelSettings(max_tokens=...)``). Tracing is off (the suite's
environment sets ``OPENAI_AGENTS_DISABLE_TRACING``). Anthropic is reached only through the
SDK's LiteLLM extension, not installed here: the runner speaks the two OpenAI modes.

``success``: the run returned a ``RunResult`` (the SDK's success); an exception is what its
caller got. The SDK's result does not carry the engine's finish reason: ``finish_reason`` is
None.

With ``adapted=True`` (the ``AdaptedRunner``) the same code runs with agentturn's adapter
added, :func:`agentturn.integrations.openai_agents.guarded` around the model.
"""

from __future__ import annotations

from typing import Any

from ..protocol import Mode, RunResult, Task, Tools
from ._adaptable import AdaptableRunner

#: The pins of this runner's venv.
REQUIREMENTS = ["openai-agents==0.24.0"]


class Runner(AdaptableRunner):
    name = "openai-agents 0.24.0"
    modes = (Mode("openai-chat", True), Mode("openai-chat", False))

    async def _run(self, task: Task, tools: Tools) -> RunResult:
        from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, function_tool
        from agents import Runner as AgentRunner
        from openai import AsyncOpenAI

        @function_tool
        async def write_file(path: str, content: str) -> str:
            """Write a text file."""
            return await tools.acall("write_file", {"path": path, "content": content})

        @function_tool
        async def read_file(path: str) -> str:
            """Read a text file."""
            return await tools.acall("read_file", {"path": path})

        client = AsyncOpenAI(base_url=task.base_url, api_key="conform")
        model: Any = OpenAIChatCompletionsModel(model=task.model, openai_client=client)
        if self.adapted:
            from agentturn.integrations.openai_agents import guarded

            model = guarded(model)
        agent = Agent(name="assistant", instructions="You are a helpful assistant.",
                      model=model, tools=[write_file, read_file],
                      model_settings=ModelSettings(max_tokens=task.max_tokens))
        if task.stream:
            streamed = AgentRunner.run_streamed(agent, task.prompt)
            async for _ in streamed.stream_events():
                pass
            output = streamed.final_output
        else:
            result = await AgentRunner.run(agent, task.prompt)
            output = result.final_output
        return RunResult(success=True, text=None if output is None else str(output),
                         outcome="final_output")


def AdaptedRunner() -> Runner:
    """The same runner with agentturn's adapter added."""
    return Runner(adapted=True)
