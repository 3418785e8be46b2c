"""A runner for LangGraph's prebuilt agent with langchain-openai / langchain-anthropic, as its
user would write it.

Runs only in its own venv (``agentturn conform --runner
agentturn.tools.conform.runners.langgraph:Runner --venv .conform-envs/langgraph``): LangGraph
and LangChain are imported inside :meth:`Runner.run`, so the suite can read
:data:`REQUIREMENTS` without them.

The defaults and the framework's own loop: ``langgraph.prebuilt.create_react_agent`` (deprecated
in LangGraph 1.x in favour of ``langchain.agents.create_agent``, still shipped and still the
most documented) on ``ChatOpenAI`` or ``ChatAnthropic`` given the suite's base URL and the
output limit (``max_tokens``), two ``@tool`` functions that call the suite's tools;
``agent.invoke`` (not streamed) or ``agent.stream(..., stream_mode=["messages", "values"])``
(streamed: the model streams its tokens, the last ``values`` state is the result).

``success``: the graph returned a state (LangGraph's success); an exception (for example
``GraphRecursionError``, when the recursion limit is reached: LangGraph 1.2.22's default,
``DEFAULT_RECURSION_LIMIT``, is 10007 steps, so no scenario here reaches it) is what its caller
got.
``finish_reason``: the last message's ``response_metadata`` (``finish_reason`` or
``stop_reason``), which LangChain hands to the caller.
"""

from __future__ import annotations

from typing import Any

from ..protocol import MODES, RunResult, Task, Tools

#: The pins of this runner's venv.
REQUIREMENTS = ["langgraph==1.2.22", "langgraph-prebuilt==1.1.2", "langchain-core==1.8.1",
                "langchain-openai==1.7.4", "langchain-anthropic==1.7.10"]


class Runner:
    name = "langgraph 1.2.22 (prebuilt 1.1.2) + langchain-openai 1.7.4 / langchain-anthropic 1.7.10"
    modes = MODES

    def run(self, task: Task, tools: Tools) -> RunResult:
        import warnings

        from langchain_core.tools import tool
        from langgraph.prebuilt import create_react_agent

        @tool
        def write_file(path: str, content: str) -> str:
            """Write a text file."""
            return tools.call("write_file", {"path": path, "content": content})

        @tool
        def read_file(path: str) -> str:
            """Read a text file."""
            return tools.call("read_file", {"path": path})

        model: Any
        if task.api == "openai-chat":
            from langchain_openai import ChatOpenAI

            model = ChatOpenAI(model=task.model, base_url=task.base_url, api_key="conform",
                               max_tokens=task.max_tokens)
        else:
            from langchain_anthropic import ChatAnthropic

            model = ChatAnthropic(model=task.model, base_url=task.base_url, api_key="conform",
                                  max_tokens=task.max_tokens)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent's deprecation
            agent = create_react_agent(model, tools=[write_file, read_file])
        inputs = {"messages": [{"role": "user", "content": task.prompt}]}
        if task.stream:
            state: Any = None
            for mode, chunk in agent.stream(inputs, stream_mode=["messages", "values"]):
                if mode == "values":
                    state = chunk
        else:
            state = agent.invoke(inputs)
        last = state["messages"][-1]
        metadata = getattr(last, "response_metadata", None) or {}
        finish = metadata.get("finish_reason") or metadata.get("stop_reason")
        text = last.content if isinstance(last.content, str) else str(last.text)
        return RunResult(success=True, text=text, outcome=type(last).__name__,
                         finish_reason=None if finish is None else str(finish))
