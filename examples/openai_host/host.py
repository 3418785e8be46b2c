"""An asyncio host: agentturn decides, this host does the I/O (engine streams, tools, storage).

Theory of operation
-------------------
One loop takes events from a queue, one at a time, hands each to ``agentturn.reduce`` and
carries out the commands it returns; everything that completes later (a stream, a tool, a write)
puts its answering event back on the queue. The engine streams and the tools run as asyncio
tasks, so the user can act while they run: a Lead typed during a tool (``lead_during``), Stop
pressed while the model is still writing (``stop_on_text``). ``CancelStream`` cancels the stream
task, which closes the HTTP response; ``CancelTool`` cancels the tool task, which reports what it
did. Storage is the in-memory conversation, written in ``Persist`` order.

The tools are real and touch only the work folder: ``write_file``, ``read_file``,
``list_files``; a path that leaves the folder is an error output, never a write elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import NoReturn, Protocol

import agentturn as at
from agentturn.engines import EngineStream

from .engines import Emit, Item, Watch

__all__ = ["Engine", "Host"]

#: What the host says to the model before the one corrective retry (TL-6).
CORRECTIVE = "Your last tool call could not be parsed. Send it again as valid JSON arguments."


class Engine(Protocol):
    async def stream(self, request_id: str, conversation: list[Item], emit: Emit,
                     watch: Watch) -> None: ...


def assert_never(value: NoReturn) -> NoReturn:
    """Unreachable when the match below is exhaustive; mypy checks that it is."""
    raise AssertionError(f"unhandled command: {value!r}")


class Host:
    """Runs turns of one chat against ``engine``, with real tools in ``workdir``."""

    def __init__(self, engine: Engine, workdir: pathlib.Path) -> None:
        self.engine = engine
        self.workdir = workdir.resolve()
        self.state = at.TurnState.create("chat-1", at.TurnConfig(auto_title=False))
        self.queue: asyncio.Queue[at.Event] = asyncio.Queue()
        self.conversation: list[Item] = []
        #: The calls of the last response, when it did not complete normally: not sent again.
        self.withheld: set[str] = set()
        self.saved_leads: dict[str, str] = {}
        self.stream_task: asyncio.Task[None] | None = None
        self.tool_tasks: dict[str, asyncio.Task[None]] = {}
        #: What happened, one line each, for the demo and the tests.
        self.log: list[str] = []
        #: Every command agentturn returned, in order.
        self.commands: list[at.Command] = []
        self.outcome: at.TurnOutcome | None = None
        #: The scripted user: a Lead to type while the call with this id runs ...
        self.lead_during: dict[str, str] = {}
        #: ... and whether to press Stop as soon as the model's text starts to arrive.
        self.stop_on_text = False
        self._stopped = False
        self._leads = 0

    def emit(self, event: at.Event) -> None:
        self.queue.put_nowait(event)

    def watch(self, acc: EngineStream) -> None:
        if self.stop_on_text and not self._stopped and acc.draft.text is not None:
            self._stopped = True
            self.log.append("user: presses Stop while the model writes")
            self.emit(at.StopPressed())

    async def run_turn(self, turn_id: str, prompt: str) -> at.TurnOutcome:
        """Run one turn to its end; return its outcome."""
        self.outcome = None
        self.log.append(f"user: {prompt}")
        self.emit(at.PromptSubmitted(turn_id=turn_id, message_id=f"{turn_id}/prompt",
                                     text=prompt))
        while self.outcome is None:
            event = await self.queue.get()
            self.state, commands = at.reduce(self.state, event)
            for command in commands:
                assert isinstance(command, at.TurnCommand)  # the turn returns nothing else
                self.commands.append(command)
                self.carry_out(command)
        tasks = [t for t in (self.stream_task, *self.tool_tasks.values()) if t is not None]
        await asyncio.gather(*tasks, return_exceptions=True)  # a cancelled stream winds down
        self.tool_tasks.clear()
        return self.outcome

    def carry_out(self, command: at.TurnCommand) -> None:
        match command:
            case at.Persist():
                for record in command.records:
                    self._store(record)
                self.emit(at.Persisted(key=command.key))
            case at.RequestModelStream():
                for lead_id in command.lead_ids:
                    self.conversation.append(Item("user", self.saved_leads[lead_id]))
                if command.corrective:
                    self.conversation.append(Item("user", CORRECTIVE))
                self.stream_task = asyncio.create_task(self.engine.stream(
                    command.request_id, list(self.conversation), self.emit, self.watch))
            case at.CancelStream():
                if self.stream_task is not None:
                    self.stream_task.cancel()  # closes the HTTP response
                self.log.append(f"host: closed the stream of {command.request_id}")
            case at.AskPermission():
                self.emit(at.PermissionDecided(call_id=command.call.call_id,
                                               decision=at.PermissionDecision.ALLOW))
            case at.ExecuteTool():
                call = command.call
                self.log.append(f"tool: {call.name} {call.arguments}")
                self.tool_tasks[call.call_id] = asyncio.create_task(self._run_tool(call))
                if call.call_id in self.lead_during:
                    self._leads += 1
                    text = self.lead_during.pop(call.call_id)
                    self.log.append(f"user: types Lead {text!r} while {call.name} runs")
                    self.emit(at.LeadSubmitted(chat_id="chat-1", lead_id=f"lead-{self._leads}",
                                               text=text))
            case at.CancelTool():
                task = self.tool_tasks.get(command.call_id)
                if task is not None:
                    task.cancel()
            case at.SaveLead():
                self.saved_leads[command.lead_id] = command.record.text
                self.emit(at.LeadSaved(lead_id=command.lead_id))
            case at.RequestTitle():
                self.emit(at.TitleFailed(request_id=command.request_id, reason="no namer"))
            case at.DecideNaturalStop():
                self.emit(at.NaturalStopDecided(request_id=command.request_id))
            case at.EndTurn():
                self.outcome = command.outcome
                self.log.append(f"end: {command.outcome.kind.value}: {command.outcome.message}")
            case at.StaleAnswerIgnored():
                self.log.append(f"host: a late {command.event} was ignored")
            case (at.DismissPermission() | at.LeadAccepted() | at.ReturnDraft()
                  | at.LeadUnapplied() | at.SetTitle() | at.UnsavedRecords()):
                pass  # a UI would show these; the log keeps the commands
            case _:
                assert_never(command)

    def _store(self, record: at.Record) -> None:
        if isinstance(record, at.UserMessageRecord):
            self.conversation.append(Item("user", record.text))
        elif isinstance(record, at.ResponseRecord):
            # A response that did not complete normally (cut off ...) goes to the engine with
            # its text only: its calls may hold incomplete JSON, and their results go too.
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

    async def _run_tool(self, call: at.ToolCall) -> None:
        try:
            await asyncio.sleep(0.02)  # a real tool takes a moment: the user can act meanwhile
            output, error = self._tool(call), False
        except (OSError, ValueError) as problem:
            output, error = f"error: {problem}", True
        except asyncio.CancelledError:
            self.emit(at.ToolFinished(call_id=call.call_id, output="cancelled before it began",
                                      cancelled=True))
            raise
        self.emit(at.ToolFinished(call_id=call.call_id, output=output, error=error))

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
