"""``agentturn conform``: a conformance suite for agent runtimes, black-box, against a scripted
engine on 127.0.0.1 (the ``conform`` extra; ``import agentturn`` never loads it).

Theory of operation
-------------------
Most agents run on a framework's loop, not agentturn's, and the turn rules (TL-*) are easy to
break there: a call run from a response cut at the output limit, an empty or cut answer
returned as success, a round cap. The suite checks any runtime from the outside:

* :mod:`.server` scripts an OpenAI Chat Completions and Anthropic Messages server (streamed and
  not) on 127.0.0.1 and records every request;
* :mod:`.scenarios` names each scenario by requirement ID: the replies the server gives and a
  judge over what was observed; general rules are drawn by hypothesis;
* :mod:`.protocol` is the runner protocol: a :class:`~.protocol.Task` in (base URL, model,
  output limit, prompt, the suite's recording tools), a :class:`~.protocol.RunResult` out, all
  plain JSON-able data so a runner may live in another process;
* :mod:`.suite` runs every scenario in every mode and builds the :class:`~.suite.Report`
  (a text table and JSON, each verdict with its evidence);
* :mod:`.runners.agentturn_driver` is the reference runner, agentturn's host on the driver,
  which passes every scenario; the other modules of :mod:`.runners` start third-party runtimes
  (the OpenAI Agents SDK, pydantic-ai, smolagents, LangGraph), each in its own venv;
* :mod:`.isolated` runs a runner in another interpreter (``--python``/``--venv``): JSON over a
  pipe, the tools over HTTP, nothing beyond 127.0.0.1.

The verdicts rest on observation, not on the runner's word: the tools record what ran, in
which order and whether two overlapped; the server records each request. The runner reports
one judgement, whether its caller got an ordinary success, and what it was shown.
"""

from .protocol import (
    MODES,
    SUITE_TOOLS,
    Mode,
    Runner,
    RunnerLoadError,
    RunResult,
    Task,
    ToolRecord,
    Tools,
    ToolSpec,
    load_runner,
)
from .scenarios import SCENARIOS, Check, Evidence, Scenario
from .server import Call, EngineServer, Reply
from .suite import OUTPUT_LIMIT, NoModeSpoken, Report, Row, run_suite

__all__ = [
    "MODES",
    "OUTPUT_LIMIT",
    "SCENARIOS",
    "SUITE_TOOLS",
    "Call",
    "Check",
    "EngineServer",
    "Evidence",
    "Mode",
    "NoModeSpoken",
    "Reply",
    "Report",
    "Row",
    "RunResult",
    "Runner",
    "RunnerLoadError",
    "Scenario",
    "Task",
    "ToolRecord",
    "ToolSpec",
    "Tools",
    "load_runner",
    "run_suite",
]
