"""A runner for smolagents' ``ToolCallingAgent``, as its user would write it.

Runs only in its own venv (``agentturn conform --runner
agentturn.tools.conform.runners.smolagents:Runner --venv .conform-envs/smolagents``):
smolagents is imported inside :meth:`Runner.run`, so the suite can read :data:`REQUIREMENTS`
without it.

The defaults and the framework's own loop: ``ToolCallingAgent`` (the smolagents agent that
uses the API's tool calls; its ``CodeAgent`` asks for Python code in text instead, which no
tool-call scenario can script) on ``OpenAIServerModel`` given the suite's base URL and the
output limit (``max_tokens``, passed through to the request), two ``@tool`` functions that
call the suite's tools, ``agent.run(prompt)``; streamed with ``stream_outputs=True`` (the model's
``generate_stream``). Anthropic is reached through its LiteLLM model, not installed here: the
runner speaks the two OpenAI modes.

``success``: ``run`` returned (smolagents' success, also when it reached ``max_steps`` and
asked the model for a final answer); an exception is what its caller got. smolagents' result
does not carry the engine's finish reason: ``finish_reason`` is None.
"""

from __future__ import annotations

from ..protocol import Mode, RunResult, Task, Tools

#: The pins of this runner's venv.
REQUIREMENTS = ["smolagents[openai]==1.26.0"]


class Runner:
    name = "smolagents 1.26.0 (ToolCallingAgent)"
    modes = (Mode("openai-chat", True), Mode("openai-chat", False))

    def run(self, task: Task, tools: Tools) -> RunResult:
        from smolagents import OpenAIServerModel, ToolCallingAgent, tool

        @tool
        def write_file(path: str, content: str) -> str:
            """Write a text file.

            Args:
                path: The file's path.
                content: The text to write.
            """
            return tools.call("write_file", {"path": path, "content": content})

        @tool
        def read_file(path: str) -> str:
            """Read a text file.

            Args:
                path: The file's path.
            """
            return tools.call("read_file", {"path": path})

        model = OpenAIServerModel(model_id=task.model, api_base=task.base_url,
                                  api_key="conform", max_tokens=task.max_tokens)
        agent = ToolCallingAgent(tools=[write_file, read_file], model=model,
                                 stream_outputs=task.stream)
        output = agent.run(task.prompt)
        return RunResult(success=True, text=None if output is None else str(output),
                         outcome="final_answer")
