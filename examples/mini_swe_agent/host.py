"""The host: mini-swe-agent's model, environment and message history as the driver's effects.

Theory of operation
-------------------
:class:`MiniSweHost` builds mini-swe-agent's three objects from its own tool-calling
configuration (``mini.yaml``: templates, observation and format-error texts, environment
variables) and gives an :class:`agentturn.aio.TurnDriver` one effect per awaiting command.
Nothing here decides what comes next; the driver asks, the reducers decide:

* ``model``: the Lead instructions the request names and the corrective note (TL-6) join
  ``DefaultAgent.messages``; then ``LitellmModel._query`` runs in a worker thread
  (``abandon_on_cancel=True``: Stop ends the turn at once; the abandoned thread still waits for
  its HTTP response, which is then dropped, and the chat's next request waits for it: see
  ``_ask``) and the ``chat.completion``'s ``model_dump()`` is the one wire object.
  ``_query``, not ``query``: ``query`` retries up to ten times with waits of 4 to 60 seconds
  (tenacity) and parses the calls itself, raising ``FormatError`` for a response without a
  bash call; here a response without calls is the model finishing, a cut response is
  agentturn's reader's to catch, and a failed request ends the turn with a resumable error
  (TL-11), a network one when a connection error is among its causes. The cost bookkeeping
  ``query`` does after ``_query`` is kept;
* ``review``: mini-swe-agent's own call check (``parse_toolcall_actions``: the ``bash`` tool,
  a ``command`` argument); what it would raise as ``FormatError`` refuses that one call, and the
  model reads mini-swe-agent's format-error text as the call's result;
* ``tool``: ``LocalEnvironment.execute`` in a worker thread, not abandoned on cancel: a command
  cannot be stopped from outside (mini-swe-agent keeps no handle on its process), so it runs to
  its end or its timeout, and its whole result is kept. The output is rendered by the model's
  ``observation_template``; the submit sentinel (``Submitted``) ends the task;
* ``persist``: each record becomes a message of ``DefaultAgent.messages`` in mini-swe-agent's
  format (a response that did not complete normally, or whose call format was malformed,
  keeps its text only, and the results of its calls are not sent: its calls may hold
  incomplete JSON);
* ``save_lead``, ``title`` (a second ``LitellmModel``, the naming model), ``permission`` (a
  headless run allows every command), and the notices, kept in ``log``.

The effects reach the outside through three clients, the host's seams: a :class:`ModelClient`
(:class:`LitellmClient`: litellm in worker threads), a :class:`Shell` (:class:`LocalShell`:
``LocalEnvironment.execute`` in a worker thread) and, optionally, a :class:`Store` that keeps
the chat's records where a restarted daemon finds them (none by default: the conversation
lives in ``DefaultAgent.messages``). The async spec kit checks these same effects with its
world behind the seams (``examples/mini_swe_agent/checked.py``).
"""

from __future__ import annotations

import io
import json
import pathlib
import threading
import types
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any, Protocol

import anyio.to_thread
from jinja2 import StrictUndefined, Template
from litellm.exceptions import ContextWindowExceededError
from minisweagent.agents.default import DefaultAgent
from minisweagent.config import get_config_from_spec
from minisweagent.environments.local import LocalEnvironment
from minisweagent.exceptions import FormatError, Submitted
from minisweagent.models import GLOBAL_MODEL_STATS
from minisweagent.models.litellm_model import LitellmModel
from minisweagent.models.utils.actions_toolcall import parse_toolcall_actions

import agentturn as at
from agentturn import aio

__all__ = ["NAMING", "LitellmClient", "LocalShell", "MiniSweHost", "ModelClient", "Shell",
           "Store"]

#: What the naming model is asked (the task follows as the user's message).
NAMING = "Name this task in at most six words. Answer with the name only."
#: The note a corrective request (TL-6) adds, as mini-swe-agent's format-error template says it.
CORRECTIVE_ERROR = "The tool call's arguments are not valid JSON."


class ModelClient(Protocol):
    """How a request reaches the engine: the wire objects of one response, and a title."""

    def respond(self, model: LitellmModel, messages: list[dict[str, Any]]
                ) -> AsyncGenerator[Mapping[str, Any], None]: ...

    async def name(self, model: LitellmModel, messages: list[dict[str, Any]]) -> str: ...


class Shell(Protocol):
    """Where a command runs: mini-swe-agent's ``{"output", "returncode", "exception_info"}``
    for one action (``Submitted`` raised for the submit sentinel)."""

    async def execute(self, action: dict[str, Any], call: at.ToolCall) -> dict[str, Any]: ...


class Store(Protocol):
    """Where the chat's records are kept: every record held, in order; a write raises when
    nothing was written (and may raise after it landed: a lost acknowledgement)."""

    def history(self) -> Sequence[object]: ...

    async def write(self, records: Sequence[object]) -> None: ...


class MiniSweHost:
    """One chat of mini-swe-agent on agentturn: within ``async with host.driver:``,
    ``await host.driver.run_turn(at.PromptSubmitted(...))``. ``model_kwargs`` go to litellm as
    mini-swe-agent passes them (``api_base``, ``api_key`` ...) and must hold ``max_tokens``:
    the driver checks each response against it."""

    #: The turn's configuration: titles on, everything else agentturn's defaults.
    CONFIG = at.TurnConfig()

    def __init__(self, *, model_name: str, model_kwargs: Mapping[str, Any],
                 workdir: pathlib.Path, namer_name: str | None = None,
                 config: str = "mini", chat_id: str = "chat-1",
                 client: ModelClient | None = None, shell: Shell | None = None,
                 store: Store | None = None) -> None:
        settings = get_config_from_spec(config)
        # max_retries=0: litellm's OpenAI client would send a failed request again, twice,
        # silently; here the turn decides (an error outcome, then the user's ContinueTurn).
        kwargs = {"max_retries": 0, **settings["model"].get("model_kwargs", {}), **model_kwargs}
        self.model = LitellmModel(**{**settings["model"], "model_name": model_name,
                                     "model_kwargs": kwargs, "cost_tracking": "ignore_errors"})
        self.namer = LitellmModel(model_name=namer_name or model_name, model_kwargs={
            **kwargs, "max_tokens": 32}, cost_tracking="ignore_errors")
        self.env = LocalEnvironment(**{**settings["environment"], "cwd": str(workdir)})
        self.client = client or LitellmClient()
        self.shell = shell or LocalShell(self.env)
        self.store = store
        self.agent = DefaultAgent(self.model, self.env, **settings["agent"])
        self.agent.add_messages(self.model.format_message(
            role="system", content=self.agent._render_template(self.agent.config.system_template)))
        self.task: str | None = None
        self.leads: dict[str, str] = {}
        #: The records already in ``DefaultAgent.messages``.
        self.kept: set[object] = set()
        #: The rendered observation of each executed call, until its result record is saved.
        self.observations: dict[str, dict[str, Any]] = {}
        #: The calls of the last response, when it was cut or malformed: not sent again.
        self.withheld: set[str] = set()
        self.title: str | None = None
        self.log: list[str] = []
        self.trace = io.StringIO()
        self.effects = aio.Effects(
            persist=self.persist, model=self.query, permission=self.permission,
            tool=self.execute, review=self.review, save_lead=self.save_lead, title=self.name)
        self.driver = aio.TurnDriver(
            chat_id, self.CONFIG, self.effects, max_output_tokens=kwargs["max_tokens"],
            on_notice=self.notice, trace=self.trace)

    # --- the effects ---------------------------------------------------------------------

    async def persist(self, command: at.Persist) -> None:
        await self._save(command.records)
        for record in command.records:
            if record in self.kept:
                continue
            self.kept.add(record)
            if isinstance(record, at.UserMessageRecord):
                self.agent.add_messages(self.model.format_message(
                    role="user", content=self._user_text(record.text)))
            elif isinstance(record, at.ResponseRecord):
                # Cut, filtered or malformed: text only (the calls may hold bad JSON).
                calls = record.tool_calls if record.completes_normally else ()
                self.withheld = set() if calls else {c.call_id for c in record.tool_calls}
                message: dict[str, Any] = {"role": "assistant", "content": record.text or None}
                if calls:
                    message["tool_calls"] = [{"id": c.call_id, "type": "function", "function": {
                        "name": c.name, "arguments": c.arguments}} for c in calls]
                self.agent.add_messages(message)
            else:
                if record.status is not at.ToolResultStatus.EXECUTED:
                    self.log.append(f"not run: {record.call_id} [{record.status.value}]")
                if record.call_id not in self.withheld:  # what it did, or why it did not run
                    observation = self.observations.pop(record.call_id, None)
                    self.agent.add_messages(observation or {
                        "role": "tool", "tool_call_id": record.call_id, "content": record.reason})

    async def query(self, command: at.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        # The Leads the request gives and the corrective note go with it, and join the
        # conversation once it reached the model (its first wire object): the session gives a
        # failed request's Leads again on the next request, so until then they are kept.
        added = [self.model.format_message(role="user", content=self.leads[lead_id])
                 for lead_id in command.lead_ids]
        if command.corrective:
            added.append(self.model.format_message(role="user", content=self.corrective_note()))
        messages = self.model._prepare_messages_for_api([*self.agent.messages, *added])
        # (a refused connection comes as litellm's InternalServerError raised from the socket's
        # OSError: the driver finds the OSError among its causes, a network failure)
        async with aclosing(self.client.respond(self.model, messages)) as responses:
            try:
                first = await anext(responses, None)
            except ContextWindowExceededError as error:  # its own outcome (TL-2), not a retry
                raise aio.TokenLimitError(str(error)) from error
            if first is None:
                return
            self.agent.add_messages(*added)
            for lead_id in command.lead_ids:
                del self.leads[lead_id]
            yield first
            async for wire_object in responses:
                yield wire_object

    def review(self, call: at.ToolCall) -> aio.CallReview:
        wire = types.SimpleNamespace(id=call.call_id, function=types.SimpleNamespace(
            name=call.name, arguments=call.arguments))
        try:
            parse_toolcall_actions([wire], format_error_template=(
                self.model.config.format_error_template))
        except FormatError as error:
            return aio.CallReview(refuse=error.messages[0]["content"])
        return aio.CallReview()

    async def permission(self, command: at.AskPermission) -> at.PermissionDecision:
        return at.PermissionDecision.ALLOW

    async def execute(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        call = command.call
        action = {"command": json.loads(call.arguments)["command"], "tool_call_id": call.call_id}
        self.log.append(f"bash: {action['command']}")
        try:
            output = await self.shell.execute(action, call)
        except Submitted as submitted:
            done = submitted.messages[0]
            self.observations[call.call_id] = {"role": "tool", "tool_call_id": call.call_id,
                                               "content": done["content"], "extra": done["extra"]}
            return aio.ToolResult(output=done["content"], ends_task=True)
        (observation,) = self.model.format_observation_messages(
            {"extra": {"actions": [action]}}, [output], self.agent.get_template_vars())
        self.observations[call.call_id] = observation
        return aio.ToolResult(output=observation["content"], error=bool(output["exception_info"]))

    async def save_lead(self, command: at.SaveLead) -> None:
        await self._save([command.record])
        self.leads[command.lead_id] = command.record.text

    async def name(self, command: at.RequestTitle) -> str:
        messages = [{"role": "system", "content": NAMING},
                    {"role": "user", "content": self.task or ""}]
        return await self.client.name(self.namer, messages)

    def notice(self, notice: at.Notice) -> None:
        if isinstance(notice, at.EndTurn):
            self.log.append(f"end: {notice.outcome.kind.value}: {notice.outcome.message}")
        elif isinstance(notice, at.SetTitle):
            self.title = notice.title
            self.log.append(f"title: {notice.title}")
        elif isinstance(notice, at.StaleAnswerIgnored | at.CancelStream | at.LeadAccepted):
            self.log.append(f"host: {type(notice).__name__}")

    # --- mini-swe-agent's pieces ---------------------------------------------------------

    async def _save(self, records: Sequence[object]) -> None:
        """Write the records the store does not hold yet: a ``Persist`` asked again (its write
        failed, or landed and its acknowledgement was lost) holds records it may already have.
        (The messages keep each record once too: ``kept``.)"""
        if self.store is not None:
            held = self.store.history()
            new = [record for record in records if record not in held]
            if new:
                await self.store.write(new)

    def corrective_note(self) -> str:
        """What a corrective request (TL-6) tells the model: mini-swe-agent's format-error
        text."""
        template = Template(self.model.config.format_error_template, undefined=StrictUndefined)
        return str(template.render(error=CORRECTIVE_ERROR, actions=[], has_tool_calls=True))

    def _user_text(self, text: str) -> str:
        """The chat's first prompt is mini-swe-agent's task, framed by its instance template;
        a later prompt goes to the model as it was typed."""
        if self.task is not None:
            return text
        self.task = text
        self.agent.extra_template_vars["task"] = text
        return self.agent._render_template(self.agent.config.instance_template)


class LitellmClient:
    """mini-swe-agent's litellm requests, each in a worker thread: the default
    :class:`ModelClient`. The response is one wire object, the whole ``chat.completion``."""

    def __init__(self) -> None:
        #: One request on the wire at a time, an abandoned one included (see ``_ask``).
        self.wire = threading.Lock()

    async def respond(self, model: LitellmModel, messages: list[dict[str, Any]]
                      ) -> AsyncGenerator[Mapping[str, Any], None]:
        response = await self._ask(model, messages)
        yield response.model_dump()

    async def name(self, model: LitellmModel, messages: list[dict[str, Any]]) -> str:
        response = await self._ask(model, messages)
        return str(response.choices[0].message.content or "").strip()

    async def _ask(self, model: LitellmModel, messages: list[dict[str, Any]]) -> Any:
        """One litellm request in a worker thread, abandoned when the effect is cancelled.

        Stop abandons the thread, not the request: litellm cannot be interrupted, so the thread
        waits for its response and drops it. The driver, which sees the effect end at once,
        would start the next request (a new prompt, the naming model) beside it; the lock makes
        that request wait until the abandoned one has its answer, so the engine never serves
        two of this chat's requests at once (TT-3 for the title), and a request abandoned while
        it waited for the lock is never sent."""
        gone = threading.Event()
        try:
            return await anyio.to_thread.run_sync(self._complete, model, messages, gone,
                                                  abandon_on_cancel=True)
        finally:
            gone.set()

    def _complete(self, model: LitellmModel, messages: list[dict[str, Any]],
                  gone: threading.Event) -> Any:
        """In the worker thread: mini-swe-agent's litellm request, then its cost bookkeeping
        (an opt-in global cost or call limit, ``MSWEA_GLOBAL_*_LIMIT``, raises here)."""
        with self.wire:
            if gone.is_set():
                return None
            response = model._query(messages)
        GLOBAL_MODEL_STATS.add(model._calculate_cost(response)["cost"])
        return response


class LocalShell:
    """mini-swe-agent's ``LocalEnvironment.execute`` in a worker thread, not abandoned on
    cancel: the default :class:`Shell`."""

    def __init__(self, env: LocalEnvironment) -> None:
        self.env = env

    async def execute(self, action: dict[str, Any], call: at.ToolCall) -> dict[str, Any]:
        output: dict[str, Any] = await anyio.to_thread.run_sync(self.env.execute, action)
        return output
