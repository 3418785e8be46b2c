"""The runner protocol: how the suite starts a runtime on a task, and what it hears back.

Theory of operation
-------------------
The suite never imports a runtime. It hands a :class:`Runner` one :class:`Task` at a time (a
base URL on 127.0.0.1, the API and whether to stream, a model name, an output limit, a prompt,
the suite's tools as JSON Schema) plus a :class:`Tools` handle, and the runner starts its
runtime on that task and returns a :class:`RunResult`: what the caller of the runtime got.
Everything the verdicts need besides that result is observed, not reported: the server records
every request, and the tools record every call. A runner therefore cannot make a runtime look
better than it is, except by lying in its :class:`RunResult`, which is the one thing the
runtime's own user would see.

Every value that crosses the boundary is plain data with ``to_dict``/``from_dict`` (JSON), and
the tools are also served over HTTP by the suite's server (``Task.tools_url``: ``POST
{tools_url}/{name}`` with the arguments as a JSON body answers ``{"output": ...}``; arguments
the runtime did not parse go as raw text to ``{tools_url}/{name}?raw=1``, and every call is
recorded, whatever it holds), so a runner
may live in another process or its own virtual environment: a small shim reads the task as
JSON, runs the runtime with tools that post to ``tools_url``, and prints the result as JSON.
Nothing here assumes the runner shares the suite's interpreter.

:func:`load_runner` turns ``pkg.module:Name`` into a runner: ``Name`` may be a runner object,
a class (called with no arguments) or a factory function.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "API",
    "MODES",
    "SUITE_TOOLS",
    "Mode",
    "RunResult",
    "Runner",
    "RunnerLoadError",
    "Task",
    "ToolRecord",
    "ToolSpec",
    "Tools",
    "load_runner",
]

API = Literal["openai-chat", "anthropic-messages"]


@dataclass(frozen=True, order=True)
class Mode:
    """One way of talking to the engine: the API, streamed or not."""

    api: API
    stream: bool

    @property
    def name(self) -> str:
        return f"{self.api}{'-stream' if self.stream else ''}"

    @classmethod
    def parse(cls, name: str) -> Mode:
        for mode in MODES:
            if mode.name == name:
                return mode
        raise ValueError(f"unknown mode {name!r}: one of {', '.join(m.name for m in MODES)}")


#: Every mode the server speaks, in the report's order.
MODES: tuple[Mode, ...] = (
    Mode("openai-chat", True), Mode("openai-chat", False),
    Mode("anthropic-messages", True), Mode("anthropic-messages", False))


@dataclass(frozen=True)
class ToolSpec:
    """One of the suite's tools: its name, what it does, the JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "parameters": dict(self.parameters)}


#: The tools every task offers. They act on an in-memory folder of the run, never on disk.
SUITE_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("write_file", "Write a text file.", {
        "type": "object", "required": ["path", "content"],
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
    ToolSpec("read_file", "Read a text file.", {
        "type": "object", "required": ["path"], "properties": {"path": {"type": "string"}}}),
)


@dataclass(frozen=True)
class Task:
    """What a runner starts its runtime on.

    ``base_url`` is the one the API's official SDK takes: ``http://127.0.0.1:PORT/v1`` for
    ``openai-chat`` (``openai.OpenAI(base_url=...)``), ``http://127.0.0.1:PORT`` for
    ``anthropic-messages`` (``anthropic.Anthropic(base_url=...)``); any API key is accepted.
    ``max_tokens`` is the output limit the runtime should ask for (``max_tokens`` or
    ``max_completion_tokens``); the server cuts its scripted responses at the limit the request
    names, or at this one when the request names none.
    """

    scenario: str
    api: API
    stream: bool
    base_url: str
    model: str
    max_tokens: int
    prompt: str
    tools: tuple[ToolSpec, ...] = SUITE_TOOLS
    #: ``POST {tools_url}/{name}`` runs a tool (for a runner in another process).
    tools_url: str = ""
    #: Seconds the suite waits for the run before it records a timeout.
    timeout: float = 30.0

    @property
    def mode(self) -> Mode:
        return Mode(self.api, self.stream)

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "api": self.api, "stream": self.stream,
                "base_url": self.base_url, "model": self.model, "max_tokens": self.max_tokens,
                "prompt": self.prompt, "tools": [t.to_dict() for t in self.tools],
                "tools_url": self.tools_url, "timeout": self.timeout}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Task:
        api = data["api"]
        if api not in ("openai-chat", "anthropic-messages"):
            raise ValueError(f"unknown api {api!r}")
        return cls(scenario=str(data["scenario"]), api=api, stream=bool(data["stream"]),
                   base_url=str(data["base_url"]), model=str(data["model"]),
                   max_tokens=int(data["max_tokens"]), prompt=str(data["prompt"]),
                   tools=tuple(ToolSpec(str(t["name"]), str(t["description"]),
                                        dict(t["parameters"])) for t in data["tools"]),
                   tools_url=str(data.get("tools_url", "")),
                   timeout=float(data.get("timeout", 30.0)))


@dataclass(frozen=True)
class RunResult:
    """What the caller of the runtime got.

    ``success`` is the one judgement a runner makes, and it must make it as the runtime's user
    would: True when the runtime handed back an ordinary successful result (what a caller that
    checks nothing more takes as "done"); False when it raised, or returned a result that says
    something else happened (a typed outcome, an error field, a finish reason other than a
    normal stop). The rest is evidence: the final ``text``, the runtime's own name for how the
    run ended (``outcome``: an outcome kind, an exception class), the engine's ``finish_reason``
    if the runtime surfaced it to the caller (None if it did not), and the ``error`` message.
    """

    success: bool
    text: str | None = None
    outcome: str | None = None
    finish_reason: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "text": self.text, "outcome": self.outcome,
                "finish_reason": self.finish_reason, "error": self.error}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)
        return cls(success=bool(data["success"]), text=text("text"), outcome=text("outcome"),
                   finish_reason=text("finish_reason"), error=text("error"))

    @classmethod
    def raised(cls, error: BaseException) -> RunResult:
        """The runtime raised: the caller got an exception, never a success."""
        return cls(success=False, outcome=type(error).__name__, error=str(error) or repr(error))


@dataclass(frozen=True)
class ToolRecord:
    """One call of a suite tool, as it ran."""

    #: The call's place in the order the calls started (0 first).
    seq: int
    name: str
    #: The arguments as the runtime gave them (a mapping, or raw text it did not parse).
    arguments: Any
    output: str
    #: How many calls were running when this one started (itself included).
    in_flight: int
    started: float
    ended: float
    #: Whether another call of the run ran during this one (their [start, end] overlap).
    overlapping: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "name": self.name, "arguments": self.arguments,
                "output": self.output, "in_flight": self.in_flight,
                "overlapping": self.overlapping}


class Tools:
    """The suite's tools for one run, recording every call. Thread-safe; ``call`` for
    synchronous runtimes, ``acall`` for asynchronous ones (asyncio or trio, through anyio).

    Each call holds for ``delay`` seconds, so calls a runtime runs concurrently are seen to
    overlap (TL-4): each record keeps its [start, end] interval, measured here (for a runner
    in another process, in the suite's server), and :attr:`records` lists the calls in the
    order they started, each marked ``overlapping`` when another call's interval meets its
    own. The files live in :attr:`files`, in memory: no tool touches the disk. A tool never
    raises: a bad argument is an ``error: ...`` output, as most runtimes would send it to the
    model. Every call is recorded, whatever its arguments (raw text that is not JSON, JSON that
    is not an object, a value JSON cannot hold).
    """

    def __init__(self, specs: Sequence[ToolSpec] = SUITE_TOOLS, delay: float = 0.003) -> None:
        self.specs = tuple(specs)
        self.delay = delay
        self.files: dict[str, str] = {}
        self._done: list[ToolRecord] = []
        self._lock = threading.Lock()
        self._running = 0
        self._started = 0

    @property
    def records(self) -> list[ToolRecord]:
        """Every call that ran, in the order the calls started, overlaps marked."""
        with self._lock:
            done = sorted(self._done, key=lambda r: r.seq)
        return [dataclasses.replace(r, overlapping=any(
            o is not r and o.started < r.ended and r.started < o.ended for o in done))
            for r in done]

    def _begin(self) -> tuple[int, int, float]:
        with self._lock:
            self._running += 1
            self._started += 1
            return self._started - 1, self._running, time.monotonic()

    def _end(self, seq: int, name: str, arguments: Any, in_flight: int, started: float) -> str:
        ended = time.monotonic()
        with self._lock:
            self._running -= 1
            output = self._act(name, arguments)
            self._done.append(ToolRecord(seq, name, _plain(arguments), output, in_flight,
                                         started, ended))
            return output

    def call(self, name: str, arguments: Any) -> str:
        """Run tool ``name`` with ``arguments`` (a mapping, or the raw text); return its
        output."""
        seq, in_flight, started = self._begin()
        time.sleep(self.delay)
        return self._end(seq, name, arguments, in_flight, started)

    async def acall(self, name: str, arguments: Any) -> str:
        """``call`` for async runtimes: the wait yields to the event loop."""
        import anyio  # the conform extra has it; only async runners reach here

        seq, in_flight, started = self._begin()
        await anyio.sleep(self.delay)
        return self._end(seq, name, arguments, in_flight, started)

    def _act(self, name: str, arguments: Any) -> str:
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return "error: the arguments are not JSON"
        if not isinstance(arguments, Mapping):
            return "error: the arguments must be an object"
        path = arguments.get("path")
        if not isinstance(path, str) or not path:
            return "error: path must be a non-empty string"
        if name == "write_file":
            content = arguments.get("content")
            if not isinstance(content, str):
                return "error: content must be a string"
            self.files[path] = content
            return f"wrote {path} ({len(content)} characters)"
        if name == "read_file":
            if path not in self.files:
                return f"error: no file named {path}"
            return self.files[path]
        return f"error: no tool named {name}"


def _plain(arguments: Any) -> Any:
    """The arguments as JSON can hold them (a copy: the runtime may change its mapping)."""
    if isinstance(arguments, str):
        return arguments
    try:
        plain: Any = json.loads(json.dumps(arguments))
    except (TypeError, ValueError):
        return repr(arguments)
    return plain


@runtime_checkable
class Runner(Protocol):
    """Starts a runtime on a task. ``modes``: the modes it can run (others are not
    applicable); ``run`` is called from a worker thread, one task at a time, and may raise
    (what the runtime raised is what its caller got: :meth:`RunResult.raised`)."""

    @property
    def name(self) -> str: ...

    @property
    def modes(self) -> Sequence[Mode]: ...

    def run(self, task: Task, tools: Tools) -> RunResult: ...


class RunnerLoadError(Exception):
    """``--runner`` names nothing that is a runner."""


def load_runner(spec: str) -> Runner:
    """The runner ``pkg.module:Name`` names (an object, a class or a factory)."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise RunnerLoadError(f"{spec!r} is not of the form pkg.module:Name")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise RunnerLoadError(f"cannot import {module_name}: {error}") from None
    found: Any = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise RunnerLoadError(f"{module_name} has no {attribute}") from None
    # A class satisfies the protocol's attribute check itself: make an instance of it.
    if isinstance(found, type) or (not isinstance(found, Runner) and callable(found)):
        try:
            found = found()
        except Exception as error:
            raise RunnerLoadError(f"{spec}() failed: {error!r}") from None
    if not isinstance(found, Runner):
        raise RunnerLoadError(f"{spec} is not a runner (needs name, modes and run)")
    if not tuple(found.modes):
        raise RunnerLoadError(f"{spec} speaks no mode: every row would be n/a")
    return found
