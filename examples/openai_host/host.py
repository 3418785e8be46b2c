"""The host: its effects only (storage, the engine's stream, the tools, the permission answers);
the driver (:mod:`agentturn.aio`) runs the turn, agentturn decides.

Theory of operation
-------------------
:class:`Host` gives an :class:`agentturn.aio.TurnDriver` one async function per effect. The
driver owns the loop the host used to write by hand: it reduces each event, runs each effect in
a task of its own, feeds the engine's wire objects to the engine's accumulator, answers
``StreamOpened`` and the response's one event, cancels the stream task on ``CancelStream``
(closing the HTTP response), sets the tool's stop signal on ``CancelTool``, turns a raising
effect into its failure event, and writes the trace (``agentturn check`` replays it). What is
left here:

* ``persist``: the in-memory conversation, written in ``Persist`` order. A response that did
  not complete normally (``ResponseRecord.completes_normally`` false: cut off ...) goes to the
  engine with its text only, and the results of its calls are not sent: its calls may hold
  incomplete JSON;
* ``model``: the Lead instructions the request names and the corrective note (TL-6) join the
  conversation, then the engine's SDK stream, wire object by wire object;
* ``permission``: the user allows every call;
* ``tool``: real tools that touch only the work folder (``write_file``, ``read_file``,
  ``list_files``); a path that leaves the folder is an error, never a write elsewhere. A tool
  takes a moment to begin, which Stop may cut short; the file work itself is never stopped;
* ``save_lead``: the Lead instructions, by id;
* the notices (``EndTurn``, ``CancelStream``, a late answer ignored) go to the log.

The scripted user acts through ``driver.send_nowait``, as a UI would: it types a Lead while a
given call runs (``lead_during``) and presses Stop as soon as the model's text starts to arrive
(``stop_on_text``), watching a copy of the response the way a UI shows it as it streams.

Host glue, before and after the driver, counted in code lines (no blank, comment or docstring
line) of this file and :mod:`.engines` that drive the reducer rather than do an effect's work:
**94 before** (the event queue and loop, the exhaustive command ``match``, the stream and tool
tasks and their cancelling, every answering event built by hand, the accumulators fed and
finished, ``StreamOpened``, an SDK error turned into ``StreamFailed``), **30 after** (the
driver's construction, ``run_turn``, the notice sink's three cases, the engine interface,
closing the engine's iterator, an SDK error turned into ``aio.StreamError``). All code lines
of the two files: 279 before, 233 after.
"""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import anyio

import agentturn as at
from agentturn import aio
from agentturn.engines import EngineStream

from .engines import Item, Wires

__all__ = ["Engine", "Host"]

#: What the host says to the model before the one corrective retry (TL-6).
CORRECTIVE = "Your last tool call could not be parsed. Send it again as valid JSON arguments."


class Engine(Protocol):
    """An SDK engine (:mod:`.engines`): its accumulator class, output limit and stream."""

    @property
    def wire(self) -> type[EngineStream]: ...
    @property
    def max_tokens(self) -> int: ...
    def stream(self, conversation: list[Item]) -> Wires: ...


class Host:
    """Runs turns of one chat against ``engine``, with real tools in ``workdir``: within
    ``async with host.driver:`` (leaving it closes the chat), ``await host.run_turn(...)``."""

    def __init__(self, engine: Engine, workdir: pathlib.Path) -> None:
        self.engine = engine
        self.workdir = workdir.resolve()
        self.conversation: list[Item] = []
        #: The calls of the last response, when it did not complete normally: not sent again.
        self.withheld: set[str] = set()
        self.saved_leads: dict[str, str] = {}
        #: What happened, one line each, for the demo and the tests.
        self.log: list[str] = []
        #: The driver's trace: every step, replayable with ``agentturn check``.
        self.trace = io.StringIO()
        #: The scripted user: a Lead to type while the call with this id runs ...
        self.lead_during: dict[str, str] = {}
        #: ... and whether to press Stop as soon as the model's text starts to arrive.
        self.stop_on_text = False
        self.driver = aio.TurnDriver(
            "chat-1", at.TurnConfig(auto_title=False),
            aio.Effects(persist=self.persist, model=self.model, permission=self.permission,
                        tool=self.tool, save_lead=self.save_lead),
            max_output_tokens=engine.max_tokens, wire=engine.wire, on_notice=self.notice,
            trace=self.trace)

    async def run_turn(self, turn_id: str, prompt: str) -> at.TurnOutcome:
        """Run one turn to its end (late answers included); return its outcome."""
        self.log.append(f"user: {prompt}")
        ending = await self.driver.run_turn(at.PromptSubmitted(
            turn_id=turn_id, message_id=f"{turn_id}/prompt", text=prompt))
        return ending.outcome

    # --- the effects ---------------------------------------------------------------------

    async def persist(self, command: at.Persist) -> None:
        for record in command.records:
            if isinstance(record, at.UserMessageRecord):
                self.conversation.append(Item("user", record.text))
            elif isinstance(record, at.ResponseRecord):
                # A response that did not complete normally (cut off ...) goes to the engine
                # with its text only: its calls may hold incomplete JSON, so their results are
                # not sent either.
                calls = record.tool_calls if record.completes_normally else ()
                self.withheld = set() if calls else {c.call_id for c in record.tool_calls}
                self.conversation.append(Item("assistant", record.text, calls))
                if record.text:
                    self.log.append(f"model: {record.text}")
            else:
                text = record.output if record.status is at.ToolResultStatus.EXECUTED else (
                    record.reason)
                if record.call_id not in self.withheld:
                    self.conversation.append(Item("tool", text, call_id=record.call_id))
                if record.status is not at.ToolResultStatus.EXECUTED:
                    self.log.append(f"not run: {record.name} [{record.status.value}]")

    async def model(self, command: at.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        for lead_id in command.lead_ids:
            self.conversation.append(Item("user", self.saved_leads[lead_id]))
        if command.corrective:
            self.conversation.append(Item("user", CORRECTIVE))
        shown = self.engine.wire.start(command.request_id)  # what a UI shows as it streams
        async with contextlib.aclosing(self.engine.stream(list(self.conversation))) as wires:
            async for wire in wires:
                yield wire
                shown = shown.feed(wire)
                self._user_reads(shown)

    async def permission(self, command: at.AskPermission) -> at.PermissionDecision:
        return at.PermissionDecision.ALLOW

    async def tool(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        call = command.call
        self.log.append(f"tool: {call.name} {call.arguments}")
        self._user_acts_during(call)
        with stop.scope() as scope:
            await anyio.sleep(0.02)  # a real tool takes a moment: the user can act meanwhile
        if scope.cancelled_caught:
            return aio.ToolResult(output="cancelled before it began", cancelled=True)
        # A raise (a bad path, bad arguments) is an error result: the driver says so.
        return aio.ToolResult(output=self._tool(call))

    async def save_lead(self, command: at.SaveLead) -> None:
        self.saved_leads[command.lead_id] = command.record.text

    def notice(self, notice: at.Notice) -> None:
        if isinstance(notice, at.EndTurn):
            self.log.append(f"end: {notice.outcome.kind.value}: {notice.outcome.message}")
        elif isinstance(notice, at.CancelStream):
            self.log.append(f"host: closed the stream of {notice.request_id}")
        elif isinstance(notice, at.StaleAnswerIgnored):
            self.log.append(f"host: a late {notice.event} was ignored")

    # --- the scripted user ---------------------------------------------------------------

    def _user_reads(self, shown: EngineStream) -> None:
        if self.stop_on_text and shown.draft.text is not None:
            self.stop_on_text = False
            self.log.append("user: presses Stop while the model writes")
            self.driver.send_nowait(at.StopPressed())

    def _user_acts_during(self, call: at.ToolCall) -> None:
        if call.call_id in self.lead_during:
            text = self.lead_during.pop(call.call_id)
            self.log.append(f"user: types Lead {text!r} while {call.name} runs")
            self.driver.send_nowait(at.LeadSubmitted(
                chat_id="chat-1", lead_id=f"lead-{call.call_id}", text=text))

    # --- the tools -----------------------------------------------------------------------

    def _path(self, name: object) -> pathlib.Path:
        if not isinstance(name, str) or not name:
            raise ValueError("path must be a non-empty string")
        path = (self.workdir / name).resolve()
        if not path.is_relative_to(self.workdir):
            raise ValueError(f"{name!r} is outside the work folder")
        return path

    def _tool(self, call: at.ToolCall) -> str:
        args = json.loads(call.arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError("arguments must be an object")
        if call.name == "write_file":
            content = args.get("content")
            if not isinstance(content, str):
                raise ValueError("content must be a string")
            self._path(args.get("path")).write_text(content, encoding="utf-8")
            return f"wrote {args['path']} ({len(content)} characters)"
        if call.name == "read_file":
            return self._path(args.get("path")).read_text(encoding="utf-8")
        if call.name == "list_files":
            return "\n".join(sorted(p.name for p in self.workdir.iterdir()))
        raise ValueError(f"no tool named {call.name!r}")
