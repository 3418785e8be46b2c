"""The async kit's world: the clients a host's effects call, each call a job the schedule ends.

Theory of operation
-------------------
A host's effects talk to the world through its clients, as they talk to real services in
production: :attr:`AsyncWorld.storage` (``await write(records)``, ``history()``),
:attr:`AsyncWorld.engine` (``await create(messages)``: an SDK-like stream of Chat Completions
chunks), :attr:`AsyncWorld.tools` (``await run(call, stop)``), :attr:`AsyncWorld.user`
(``await ask(call)``: a permission dialog), :attr:`AsyncWorld.namer` (``await title(text)``),
:attr:`AsyncWorld.client` (``await drain()``), :attr:`AsyncWorld.hooks` (``await run()``) and
:attr:`AsyncWorld.clock` (an :class:`agentturn.aio.ManualClock`).

Every call is a :class:`Job` that waits until the schedule (the kit's runner) ends it with an
*outcome*: a success, a failure (the client raises), or nothing at all — the job hangs until
its task is cancelled. Which effect is running a job is known through a context variable the
kit sets when it calls the host's effect (:data:`CURRENT`), so a job started in a task the host
spawned on its own is still charged to the effect that spawned it.

The world keeps the truth and records a broken rule where it sees the fact, never raising into
the host's code (a host's ``try``/``except`` would swallow it): :attr:`AsyncWorld.violations`,
each ``[rule, IDs] text``. The rules seen here:

* ``engine-input`` (LD-8, LD-9, TL-5, TL-9): a request, read back with the host's format
  (:mod:`agentturn.testing.received`), holds only stored user text and no more copies of a text
  than storage holds (a retried save, a replayed history), and some of it (none read back: the
  format declared is not the one sent); a Lead only from the request that gives it on, every
  Lead it gives; no call of a cut-off or malformed response, nor its result; each tool result
  stored, sent once, and in the first request after it was stored;
* ``one-retry`` (TL-6, TL-11): one engine request per ``RequestModelStream`` (an SDK's own
  retries send it twice);
* ``drain`` (SO-1, with the runner): the session hears every mid-turn message the client's
  drain gave;
* ``token-limit`` (TL-2, with the runner): a request the engine refused for its length
  (:class:`ContextTooLong`) ends with its own outcome, ``TokenLimitRejected``, not as a failed
  stream the user would retry into the same refusal;
* ``one-stream`` (TT-3): never a naming request beside an open model stream;
* ``storage`` (TL-5, LD-7): storage holds each record once;
* ``tools-as-asked`` (TL-4), ``permission`` (TL-3), ``cut-off`` (TL-9, TL-6), ``cancel`` (TL-8):
  a tool runs only inside its ``ExecuteTool``'s effect, one at a time, never from a cut-off or
  malformed response, a write only after the user's allow; a write is never stopped part-way.

The engine calls the world's three tools (``read_file``, ``write_file``, ``todo_write``) in the
host's own tool vocabulary: :class:`WorldTool` says, for each, the name and arguments the
engine writes and what the world holds it to (a write never stops part-way; a call that needs
the user's allow). A host with other tools (one ``bash`` tool, say) maps the three onto its
own; the world knows each call it sent by its id.

The rules that need the session's side (acknowledgements, liveness, cancels, timers, no text
lost) are the runner's (:mod:`agentturn.testing.asyncio_kit.runner`).
"""

from __future__ import annotations

import contextvars
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs

from ... import commands as c
from ...aio import CallReview, DrainReply, HookVerdict, ManualClock, StopSignal, ToolResult
from ...events import PermissionDecision
from ...records import ToolCall, ToolResultRecord, UserMessageRecord
from ..received import READERS, Reader, SentAssistant, SentToolResult, SentUser

__all__ = ["CURRENT", "TOOLS", "AsyncWorld", "ContextTooLong", "EffectRun", "Job",
           "StorageError", "WorldError", "WorldTool"]


@attrs.frozen
class WorldTool:
    """One of the world's tools as the engine calls it for this host: the name and the JSON
    arguments of the call, in the host's own tool vocabulary, and what the world holds the
    call to."""

    name: str
    arguments: str
    #: It changes files: never stopped part-way (TL-8), whatever the user does.
    writes: bool = False
    #: It runs only after the user allowed it (TL-3); the world's review asks for the dialog.
    needs_permission: bool = False


#: The world's tools for a host whose tools are these three (the kit's default).
TOOLS: dict[str, WorldTool] = {
    "read_file": WorldTool("read_file", '{"path": "notes.txt"}'),
    "write_file": WorldTool("write_file", '{"path": "notes.txt"}', writes=True,
                            needs_permission=True),
    "todo_write": WorldTool("todo_write", '{"path": "notes.txt"}'),
}
#: Every outcome a job of each kind can be ended with, the plainest first.
OUTCOMES: dict[str, tuple[tuple[str, int], ...]] = {
    "storage": (("ok", 8), ("fail", 1), ("timeout", 1)),
    "engine": (("open", 6), ("fail", 1), ("too-long", 1)),
    "engine-open": (("text", 3), ("read_file", 3), ("write_file", 3), ("todo_write", 2),
                    ("read_file+write_file", 1), ("cut:read_file", 1),
                    ("malformed:read_file", 1), ("fail", 1)),
    "tool": (("ok", 6), ("fail", 1)),
    "dialog": (("allow", 4), ("deny", 1), ("close", 1)),
    "namer": (("ok", 3), ("fail", 1)),
    "drain": (("ok", 1), ("message", 1)),
    "hooks": (("pass", 3), ("block", 1), ("fail", 1)),
}


class WorldError(Exception):
    """A world client failed (the API answered an error, the dialog closed, the hook crashed)."""


class StorageError(WorldError):
    """A write failed: nothing was written."""


class ContextTooLong(WorldError):
    """The API refused the request for its length: it is over the model's context window (an
    SDK's ``context_length_exceeded``). A host raises :class:`agentturn.aio.TokenLimitError`
    for it, from it."""


@attrs.define(eq=False)
class EffectRun:
    """One call of a host's effect by the driver: the command it carries out, and its jobs."""

    kind: str  # persist, model, permission, tool, lead, title, hooks, drain
    command: Any
    key: str
    ended: bool = False
    jobs: list[Job] = attrs.Factory(list)

    def pending(self) -> list[Job]:
        return [job for job in self.jobs if job.state == "pending"]


#: The effect run the current task works for (set by the kit's effect wrappers; copied into
#: any task the host spawns from inside an effect).
CURRENT: contextvars.ContextVar[EffectRun | None] = contextvars.ContextVar(
    "agentturn_kit_effect", default=None)


@attrs.define(eq=False)
class Job:
    """One call into the world, waiting for the outcome the schedule gives it."""

    name: str  # "storage#3": the kind and its number, stable from one run to the next
    kind: str
    run: EffectRun | None
    payload: Any
    stage: str = ""  # engine: "" until it opened, then "open"
    state: str = "pending"  # pending, done, failed, cancelled, stopped, closed
    answers: deque[str] = attrs.Factory(deque)
    wake: anyio.Event | None = None

    @property
    def options(self) -> tuple[tuple[str, int], ...]:
        return OUTCOMES["engine-open" if self.stage == "open" else self.kind]

    def answer(self, outcome: str) -> None:
        self.answers.append(outcome)
        if self.wake is not None:
            self.wake.set()

    async def next(self) -> str:
        """The next outcome the schedule gives; a cancellation marks the job cancelled."""
        while not self.answers:
            self.wake = anyio.Event()
            try:
                await self.wake.wait()
            except anyio.get_cancelled_exc_class():
                self.end("cancelled")
                raise
        return self.answers.popleft()

    def end(self, state: str) -> None:
        if self.state == "pending":
            self.state = state


class AsyncWorld:
    """The world behind a host's effects (see the module docstring)."""

    def __init__(self, request_format: str | Reader = "openai-chat",
                 tools: Mapping[str, WorldTool] | None = None) -> None:
        self.reader: Reader = (READERS[request_format] if isinstance(request_format, str)
                               else request_format)
        self.tool_shapes: Mapping[str, WorldTool] = TOOLS if tools is None else tools
        self.kind_of: dict[str, str] = {}  # each call the engine sent -> the world's tool
        self.violations: list[str] = []
        self.failures: list[Exception] = []  # every exception a client raised
        self.jobs: list[Job] = []
        self.counts: dict[str, int] = {}
        self.saved: list[Any] = []
        self.clock = ManualClock()
        self.storage = Storage(self)
        self.engine = Engine(self)
        self.tools = Tools(self)
        self.user = User(self)
        self.namer = Namer(self)
        self.client = Client(self)
        self.hooks = Hooks(self)
        self.calls = 0
        self.cut_off: set[str] = set()  # calls of responses the engine cut off
        self.malformed: set[str] = set()  # calls of responses whose format was malformed
        self.allowed: set[str] = set()
        self.lead_texts: dict[str, str] = {}  # a Lead's text -> its id (SaveLead)
        self.given_leads: set[str] = set()
        self.sent_results: set[str] = set()
        self.too_long: set[str] = set()  # requests the engine refused for their length
        self.results_due: set[str] = set()  # results stored since the last request
        self.drained: dict[str, tuple[str, ...]] = {}  # drain id -> the messages the client gave
        #: Set by the runner once it found a broken rule: what the shutdown does is not judged.
        self.frozen = False

    def failure(self, error: Exception) -> Exception:
        """``error``, remembered as the world's: what a client raises (see :meth:`raised`)."""
        self.failures.append(error)
        return error

    def raised(self, error: BaseException) -> bool:
        """Whether ``error`` is one a client raised, or was raised from one; an exception group
        (a task group's) is when each exception in it is."""
        seen: set[int] = set()
        found: BaseException | None = error
        while found is not None and id(found) not in seen:
            if any(found is failure for failure in self.failures):
                return True
            inner = getattr(found, "exceptions", None)
            if isinstance(inner, tuple) and inner and all(
                    isinstance(one, BaseException) and self.raised(one) for one in inner):
                return True
            seen.add(id(found))
            found = found.__cause__ or found.__context__
        return False

    def violate(self, rule: str, ids: str, text: str) -> None:
        if not self.frozen:
            self.violations.append(f"[{rule}, {ids}] {text}")

    def job(self, kind: str, payload: Any) -> Job:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        run = CURRENT.get()
        job = Job(f"{kind}#{self.counts[kind]}", kind, run, payload)
        if run is not None:
            run.jobs.append(job)
        self.jobs.append(job)
        return job

    def pending(self) -> list[Job]:
        return [job for job in self.jobs if job.state == "pending"]

    def running(self, kind: str) -> list[Job]:
        return [job for job in self.pending() if job.kind == kind]

    def owner(self, kind: str, what: str) -> EffectRun | None:
        """The effect run of ``kind`` the current task works for; a broken rule if none."""
        run = CURRENT.get()
        if run is None or run.ended or run.kind != kind:
            self.violate("tools-as-asked" if kind == "tool" else "engine-input", "TL-4, TL-5",
                         f"{what} was called outside the {kind} effect that carries it out"
                         f"{' (after it returned)' if run is not None and run.ended else ''}")
            return None
        return run

    # --- what the engine received ----------------------------------------------------------

    def received(self, run: EffectRun | None, messages: Sequence[Any]) -> None:
        command = run.command if run is not None else None
        rid = command.request_id if isinstance(command, c.RequestModelStream) else "?"
        if isinstance(command, c.RequestModelStream):
            self.given_leads.update(command.lead_ids)
        try:
            sent = self.reader(messages)
        except Exception as error:  # a request the format's reader cannot read is a finding
            self.violate("engine-input", "TL-5", f"{rid}: the request cannot be read as the "
                         f"host's format: {type(error).__name__}: {error}")
            return
        stored_users: dict[str, int] = {}
        stored_results = set()
        for record in self.saved:
            if isinstance(record, UserMessageRecord):
                stored_users[record.text] = stored_users.get(record.text, 0) + 1
            elif isinstance(record, ToolResultRecord):
                stored_results.add(record.call_id)
        users: dict[str, int] = {}
        results: set[str] = set()
        for item in sent:
            if isinstance(item, SentUser):
                users[item.text] = users.get(item.text, 0) + 1
                lead = self.lead_texts.get(item.text)
                if lead is not None and lead not in self.given_leads:
                    self.violate("engine-input", "LD-8", f"{rid} sent Lead {lead} before a "
                                 "request gave it")
            elif isinstance(item, SentAssistant):
                cut = [call.call_id for call in item.calls
                       if call.call_id in self.cut_off | self.malformed]
                if cut:
                    self.violate("engine-input", "TL-9", f"{rid} sent the model the calls {cut} "
                                 "of a response that did not end normally")
            elif isinstance(item, SentToolResult):
                if item.call_id in results:
                    self.violate("engine-input", "TL-5", f"{rid} sent the result of "
                                 f"{item.call_id} twice")
                results.add(item.call_id)
                if item.call_id in self.cut_off | self.malformed:
                    self.violate("engine-input", "TL-9", f"{rid} sent a result for the cut-off "
                                 f"call {item.call_id}")
                elif item.call_id not in stored_results:
                    self.violate("engine-input", "TL-5", f"{rid} sent a result for "
                                 f"{item.call_id} that storage does not hold")
        missing = sorted(self.results_due - results)
        if missing:
            self.violate("engine-input", "TL-5", f"{rid} does not carry the stored results of "
                         f"{missing}: the model never reads what those calls did (or the "
                         "request's format is not the one declared)")
        self.results_due.clear()
        if stored_users and not users:
            self.violate("engine-input", "TL-5", f"{rid} carries none of the user's text, read "
                         "as the host's format: is AsyncSpec.request_format the format the "
                         "host sends?")
        for text, count in users.items():
            held = stored_users.get(text, 0)
            if held == 0:
                self.violate("engine-input", "LD-8, TL-5", f"{rid} sent the model user text "
                             f"storage does not hold: {text!r}")
            elif count > held:
                self.violate("engine-input", "TL-5", f"{rid} sent {text!r} {count} times; "
                             f"storage holds it {held} time(s) (a retried save, or a replayed "
                             "history)")
        for lead in getattr(command, "lead_ids", ()):
            lead_text = next((t for t, i in self.lead_texts.items() if i == lead), None)
            if lead_text is not None and lead_text not in users:
                self.violate("engine-input", "LD-9", f"{rid} gives Lead {lead} but the model "
                             "never received its text")

    def fresh_call(self, kind: str) -> ToolCall:
        """A new call of the world's tool ``kind``, as the host's vocabulary writes it."""
        self.calls += 1
        shape = self.tool_shapes[kind]
        call = ToolCall(call_id=f"c{self.calls}", name=shape.name, arguments=shape.arguments)
        self.kind_of[call.call_id] = kind
        return call

    def shape_of(self, call: ToolCall) -> WorldTool | None:
        """What the world holds ``call`` to (None: the engine never sent that call)."""
        kind = self.kind_of.get(call.call_id)
        return None if kind is None else self.tool_shapes[kind]


class Storage:
    """The host's database: ``await write(records)`` appends them (or raises), ``history()``
    reads every record it holds, in order."""

    def __init__(self, world: AsyncWorld) -> None:
        self._world = world

    def history(self) -> tuple[Any, ...]:
        return tuple(self._world.saved)

    async def write(self, records: Sequence[Any]) -> None:
        world = self._world
        job = world.job("storage", tuple(records))
        outcome = await job.next()
        if outcome == "fail":
            job.end("failed")
            raise world.failure(StorageError("the write failed: nothing was written"))
        for record in records:
            if record in world.saved:
                world.violate("storage", "TL-5", f"storage already holds {record!r}: the "
                              "user's history shows it twice")
        world.saved.extend(records)
        world.results_due.update(  # the next request carries them
            record.call_id for record in records if isinstance(record, ToolResultRecord)
            and record.call_id not in world.cut_off | world.malformed)
        job.end("done")
        if outcome == "timeout":
            raise world.failure(TimeoutError("the write landed but its acknowledgement "
                                                "timed out"))


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "w", "object": "chat.completion.chunk", "created": 0, "model": "world",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class EngineStream:
    """An engine's response as an SDK gives it: an async iterator of Chat Completions chunks,
    an async context manager, ``aclose()``."""

    def __init__(self, world: AsyncWorld, job: Job) -> None:
        self._world, self._job = world, job
        self._chunks: deque[dict[str, Any]] = deque([_chunk({"role": "assistant",
                                                              "content": ""})])
        self._ended = False

    def __aiter__(self) -> EngineStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if not self._chunks and not self._ended:
            outcome = await self._job.next()
            if outcome == "fail":
                self._job.end("failed")
                raise self._world.failure(ConnectionError("the connection dropped mid-stream"))
            self._chunks.extend(self._response(outcome))
            self._ended = True
            self._job.end("done")
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.popleft()

    def _response(self, outcome: str) -> list[dict[str, Any]]:
        kind, _, names = outcome.partition(":")
        if kind == "text":
            return [_chunk({"content": "Done."}), _chunk({}, "stop")]
        if kind == "cut" or kind == "malformed":
            call = self._world.fresh_call(names)
            (self._world.cut_off if kind == "cut" else self._world.malformed).add(call.call_id)
            # malformed: the arguments end half-way (not JSON), the finish reason says calls
            arguments = (call.arguments if kind == "cut"
                         else call.arguments[:max(1, len(call.arguments) // 2)])
            return [_chunk({"tool_calls": [{"index": 0, "id": call.call_id, "type": "function",
                                            "function": {"name": call.name,
                                                         "arguments": arguments}}]}),
                    _chunk({}, "length" if kind == "cut" else "tool_calls")]
        calls = [self._world.fresh_call(name) for name in outcome.split("+")]
        return [_chunk({"tool_calls": [{"index": index, "id": call.call_id, "type": "function",
                                        "function": {"name": call.name,
                                                     "arguments": call.arguments}}
                                       for index, call in enumerate(calls)]}),
                _chunk({}, "tool_calls")]

    async def aclose(self) -> None:
        self._job.end("closed")

    async def __aenter__(self) -> EngineStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._job.end("closed")


class Engine:
    """The model's API: ``stream = await create(messages)`` (messages in the host's format),
    then ``async for chunk in stream`` (Chat Completions chunks, as ``model_dump()`` gives)."""

    def __init__(self, world: AsyncWorld) -> None:
        self._world = world

    async def create(self, messages: Sequence[Any]) -> EngineStream:
        world = self._world
        run = world.owner("model", "the engine")
        if run is not None and any(job.kind == "engine" for job in run.jobs):
            world.violate("one-retry", "TL-6, TL-11", f"{run.key} was sent to the engine again "
                          "by the host: retries are the session's (a ContinueTurn, the one "
                          "corrective retry)")
        if world.running("namer"):
            world.violate("one-stream", "TT-3", "a model request opened while the naming "
                          "request streams")
        job = world.job("engine", tuple(messages))
        world.received(run, messages)
        outcome = await job.next()
        if outcome == "fail":
            job.end("failed")
            raise world.failure(WorldError("the API answered 500"))
        if outcome == "too-long":
            job.end("failed")
            world.too_long.add(run.key if run is not None else "?")
            raise world.failure(ContextTooLong("the request is over the model's context "
                                               "window"))
        job.stage = "open"
        return EngineStream(world, job)


class Tools:
    """The tool runtime: ``await run(call, stop)`` runs a tool; a write (:attr:`WorldTool.writes`)
    never stops part-way, the others stop when ``stop`` is set."""

    def __init__(self, world: AsyncWorld) -> None:
        self._world = world

    async def run(self, call: ToolCall, stop: StopSignal) -> ToolResult:
        world = self._world
        cid = call.call_id
        run = world.owner("tool", f"tool {cid}")
        if run is not None and run.key != cid:
            world.violate("tools-as-asked", "TL-4", f"{cid} ran inside the effect for "
                          f"{run.key}")
        others = [job.payload.call_id for job in world.running("tool")]
        if others:
            world.violate("tools-as-asked", "TL-4", f"{cid} started while {others[0]} still "
                          "runs: tools run one at a time")
        if cid in world.cut_off | world.malformed:
            world.violate("cut-off", "TL-9, TL-6", f"{cid} ran from a response that did not "
                          "end normally")
        shape = world.shape_of(call)
        if shape is None:
            world.violate("tools-as-asked", "TL-4", f"{cid} ran, but the engine never sent a "
                          "call with that id")
        elif shape.needs_permission and cid not in world.allowed:
            world.violate("permission", "TL-3", f"{cid} ({call.name}) ran without the user's "
                          "allow")
        job = world.job("tool", call)
        if shape is not None and shape.writes:
            try:
                outcome = await job.next()
            except anyio.get_cancelled_exc_class():
                world.violate("cancel", "TL-8", f"the write {cid} was stopped part-way (its "
                              "task was cancelled): a write is never stopped part-way")
                raise
        else:
            with stop.scope() as scope:
                outcome = await job.next()
            if scope.cancelled_caught:
                job.state = "stopped"
                return ToolResult(output="stopped before it ended", cancelled=True)
        if outcome == "fail":
            job.end("failed")
            raise world.failure(WorldError(f"{call.name} failed"))
        job.end("done")
        if world.kind_of.get(cid) == "todo_write":
            return ToolResult(output="todos saved", structured={"type": "todo_list", "todos": [
                {"id": "1", "content": "step 1", "status": "completed"},
                {"id": "2", "content": "step 2", "status": "pending"}]})
        return ToolResult(output=f"{call.name} ok")

    def review(self, call: ToolCall) -> CallReview:
        """The world's permission policy: a call whose tool needs it waits for the user's
        allow (TL-3)."""
        shape = self._world.shape_of(call)
        return CallReview(needs_permission=shape is not None and shape.needs_permission)


class User:
    """The user, for permission dialogs: ``await ask(call)``; a closed dialog raises."""

    def __init__(self, world: AsyncWorld) -> None:
        self._world = world

    async def ask(self, call: ToolCall) -> PermissionDecision:
        job = self._world.job("dialog", call)
        outcome = await job.next()
        job.end("done")
        if outcome == "close":
            raise self._world.failure(WorldError("the dialog was closed"))
        if outcome == "allow":
            self._world.allowed.add(call.call_id)
            return PermissionDecision.ALLOW
        return PermissionDecision.DENY


class Namer:
    """The naming model: ``await title(text)``; a model request too (one stream at a time)."""

    def __init__(self, world: AsyncWorld) -> None:
        self._world = world

    async def title(self, text: str = "") -> str:
        world = self._world
        if world.running("engine"):
            world.violate("one-stream", "TT-3", "the naming request opened while "
                          f"{world.running('engine')[0].name} streams: model requests (naming "
                          "included) run one at a time")
        job = world.job("namer", text)
        outcome = await job.next()
        job.end("done")
        if outcome == "fail":
            raise world.failure(WorldError("the namer failed"))
        return "A title"


class Client:
    """The daemon's client: ``await drain()`` answers the mid-turn drain, with the message the
    user typed meanwhile or none."""

    def __init__(self, world: AsyncWorld) -> None:
        self._world = world

    async def drain(self) -> DrainReply:
        world = self._world
        job = world.job("drain", None)
        outcome = await job.next()
        job.end("done")
        messages = (f"typed while it worked {len(world.jobs)}",) if outcome == "message" else ()
        if job.run is not None:
            world.drained[job.run.key] = messages
        return DrainReply(messages=messages, has_queued_prompt=False)


class Hooks:
    """The external Stop hooks: ``await run()``; a crashed hook raises."""

    def __init__(self, world: AsyncWorld) -> None:
        self._world = world

    async def run(self) -> HookVerdict:
        job = self._world.job("hooks", None)
        outcome = await job.next()
        job.end("done")
        if outcome == "fail":
            raise self._world.failure(WorldError("the hook crashed"))
        return HookVerdict(block=outcome == "block",
                           reason="The tests fail." if outcome == "block" else None)

