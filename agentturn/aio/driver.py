"""The driver: one event queue, one reducer, a task per awaited answer.

Theory of operation
-------------------
A driver owns a reducer's state and runs one loop, in a task of an :mod:`anyio` task group:
take the next event from the queue, reduce it, write the step to the trace, then carry out the
step's commands in order. An awaiting command starts a task that calls the host's effect and
puts the answering event on the queue (:mod:`agentturn.aio.answers`); a notice that asks for an
effect is done at once (``CancelStream`` and ``DismissPermission`` cancel their command's task,
``CancelTool`` sets the tool's :class:`~agentturn.aio.StopSignal`, ``CancelTimer`` cancels the
timer's task); every notice then goes to the host's sink, awaited in order. The host's own
input (a prompt, Lead, Stop, a rename, a queued prompt, clients, background work) goes on the
same queue from any task (:meth:`Driver.send`, :meth:`Driver.send_nowait`), so the reducer sees
one order and the trace records it.

The rules it keeps:

* **It decides nothing.** Which command comes next is always the reducer's; the driver only
  turns effects' results into the events that answer them (a raise into the documented failure
  event), so a trace of its steps replays exactly.
* **One model stream at a time.** A stream task holds a lock while its effect runs: a request
  made while a cancelled stream is still closing waits for it to close.
* **No answer after a cancel.** A task cancelled by ``CancelStream`` or ``DismissPermission``
  puts nothing more on the queue; an answer already queued is absorbed by the reducer
  (``StaleAnswerIgnored``).
* **No exception from an effect escapes.** A raising effect is its failure event. The driver
  itself ends with an exception only for a bug (the reducer refusing an answer the driver made)
  or the host's own (a raising sink), after cancelling every task and ending the trace, and
  ``KeyboardInterrupt`` or the host cancelling it end it the same clean way.
* **Nothing leaks.** Every task lives in the driver's task group: when the driver exits, every
  one has ended.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio
import attrs
from anyio.abc import TaskGroup

from .._base import AwaitingCommand, Command, Event, Notice, Step
from ..commands import (
    AskPermission,
    CancelStream,
    CancelTool,
    DecideNaturalStop,
    DismissPermission,
    EndTurn,
    ExecuteTool,
    LeadUnapplied,
    Persist,
    RequestModelStream,
    RequestTitle,
    ReturnDraft,
    SaveLead,
    UnsavedRecords,
)
from ..engines import ChatCompletionsStream, EngineStream
from ..errors import ProtocolError
from ..events import PromptSubmitted, TitleFailed
from ..session.vocabulary import (
    AutomaticTurnDropped,
    CancelTimer,
    DrainMidTurnQueue,
    PromptRefused,
    RunStopHooks,
    StartTimer,
    TimerFired,
)
from ..turn import Outstanding
from . import answers
from .clock import Clock, SystemClock
from .effects import Effects, StopSignal, TextSink
from .tracing import TraceWriter

__all__ = ["ANSWERS", "Closed", "Driver", "DriverClosed", "NoticeSink", "StepSink"]

S = TypeVar("S")
D = TypeVar("D", bound="Driver[Any]")

#: A notice sink: called with every notice, in order; may be a coroutine function.
NoticeSink = Callable[[Notice], "Awaitable[None] | None"]
#: A step sink: called after every step with the event and the reducer's step (its new state
#: and its commands), after the trace line and before any command is carried out (so a host
#: that saves the state there saves it ahead of the effects); may be a coroutine function.
StepSink = Callable[[Event, Step[Any]], "Awaitable[None] | None"]

#: The answering events' class names: the driver sends these, never the host.
ANSWERS = frozenset({
    "Persisted", "PersistFailed", "StreamOpened", "StreamCompleted", "StreamFailed",
    "CompactionFailed", "TokenLimitRejected", "PermissionDecided", "ToolFinished", "LeadSaved",
    "LeadSaveFailed", "TitleGenerated", "TitleFailed", "NaturalStopDecided", "MidTurnDrained",
    "TimerFired", "StopHookDecided", "StopHookFailed"})
#: How many ended turns the driver remembers for :meth:`Driver.turn_ended`.
ENDINGS_KEPT = 64


class DriverClosed(RuntimeError):
    """Input sent to a driver that is closed (or not started)."""


@attrs.frozen(kw_only=True)
class Closed:
    """What closing handed back: every notice of the closing steps, and the owed ones by kind."""

    notices: tuple[Notice, ...]

    @property
    def unsaved(self) -> tuple[UnsavedRecords, ...]:
        return tuple(n for n in self.notices if isinstance(n, UnsavedRecords))

    @property
    def refused_prompts(self) -> tuple[PromptRefused, ...]:
        return tuple(n for n in self.notices if isinstance(n, PromptRefused))

    @property
    def dropped_turns(self) -> tuple[AutomaticTurnDropped, ...]:
        return tuple(n for n in self.notices if isinstance(n, AutomaticTurnDropped))

    @property
    def unapplied_leads(self) -> tuple[LeadUnapplied, ...]:
        return tuple(n for n in self.notices if isinstance(n, LeadUnapplied))

    @property
    def drafts(self) -> tuple[ReturnDraft, ...]:
        return tuple(n for n in self.notices if isinstance(n, ReturnDraft))


class _Task:
    """One running answer: its command's class, its cancel scope, whether it was cancelled,
    and whether it counts as work in progress (:meth:`Driver.settled` waits for those)."""

    __slots__ = ("cancelled", "command", "counted", "scope", "stop")

    def __init__(self, command: type[AwaitingCommand]) -> None:
        self.command = command
        self.scope = anyio.CancelScope()
        self.cancelled = False
        self.counted = False
        self.stop: StopSignal | None = None

    def cancel(self) -> None:
        self.cancelled = True
        self.scope.cancel()


class _Receipt:
    """The host's view of one input: set once the reducer took it (or refused it)."""

    __slots__ = ("commands", "done", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.commands: tuple[Command, ...] = ()
        self.error: ProtocolError | None = None


class Driver(Generic[S]):
    """The loop both drivers share; use :class:`~agentturn.aio.TurnDriver` or
    :class:`~agentturn.aio.SessionDriver`."""

    def __init__(self, *, state: S, reduce: Callable[[S, Any], Step[S]],
                 outstanding: Callable[[S], tuple[Outstanding, ...]], effects: Effects,
                 max_output_tokens: int | None, wire: type[EngineStream] = ChatCompletionsStream,
                 on_notice: NoticeSink | None = None, on_step: StepSink | None = None,
                 on_text: TextSink | None = None, clock: Clock | None = None,
                 trace: TraceWriter, rearm: tuple[AwaitingCommand, ...] = ()) -> None:
        self._state = state
        #: Commands to carry out when the driver starts (a restored session's timers).
        self._rearm = rearm
        self._reduce = reduce
        self._outstanding = outstanding
        self._effects = effects
        self._wire = wire
        wire.start("check", max_output_tokens=max_output_tokens)  # refuses a bad limit now
        self._max_output_tokens = max_output_tokens
        self._on_notice = on_notice
        self._on_step = on_step
        self._on_text = on_text
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._trace = trace
        self._tasks: dict[tuple[str, str], _Task] = {}
        #: Effect tasks running (timers not counted) plus events queued or being reduced.
        self._busy = 0
        # (made in __aenter__: an anyio primitive belongs to the event loop that runs it)
        self._changed: anyio.Event
        self._stream_lock: anyio.Lock
        self._endings: dict[str, EndTurn] = {}
        self._closing: list[Notice] | None = None
        self._failure: BaseException | None = None
        self._refused: list[tuple[Event, ProtocolError]] = []
        self._tg: TaskGroup | None = None
        #: The driver's task group has ended: nothing runs, waiters are told.
        self._ended = False
        #: The events to reduce, in order; the loop waits on ``_wake`` only when it is empty.
        self._queue: deque[tuple[Event, _Receipt | None]] = deque()
        self._wake: anyio.Event | None = None
        #: Tasks waiting on ``_changed`` (made anew only when one waits: most steps have none).
        self._waiters = 0
        #: The loop task's id (sinks run in it: see ``_not_from_the_loop``).
        self._loop_task: int | None = None
        self._closed = False

    # --- the host's side -----------------------------------------------------------------

    @property
    def state(self) -> S:
        """The reducer's state after the last step."""
        return self._state

    @property
    def refused(self) -> tuple[tuple[Event, ProtocolError], ...]:
        """Inputs sent with :meth:`send_nowait` that the reducer refused, with its error."""
        return tuple(self._refused)

    @property
    def trace_full(self) -> bool:
        """The trace reached its line limit and was ended early."""
        return self._trace.full

    def send_nowait(self, event: Event) -> None:
        """Queue the host's input (from any task of the driver's event loop; from another
        thread, through ``anyio.from_thread.run_sync``). A refusal lands in :attr:`refused`."""
        self._put(event, None)

    async def send(self, event: Event) -> tuple[Command, ...]:
        """Queue the host's input and wait until it is reduced: the commands it gave, or the
        reducer's :class:`~agentturn.ProtocolError` raised here (nothing changed then)."""
        self._not_from_the_loop("send")
        receipt = _Receipt()
        self._put(event, receipt)
        await receipt.done.wait()
        if receipt.error is not None:
            raise receipt.error
        return receipt.commands

    def _put(self, event: Event, receipt: _Receipt | None) -> None:
        if not isinstance(event, Event):
            raise TypeError(f"send an agentturn event, not {type(event).__name__}")
        if type(event).__name__ in ANSWERS:
            raise TypeError(f"{type(event).__name__} answers a command: the driver sends it "
                            "when the effect returns")
        if not self._running or self._closed:
            raise DriverClosed("the driver is not running")
        self._enqueue(event, receipt)

    async def settled(self) -> None:
        """Wait until nothing is queued and no effect runs (timers may still wait); at once on
        a driver that has ended (nothing runs there any more)."""
        self._not_from_the_loop("settled")
        while self._busy and not self._ended:
            await self._change()

    async def run_turn(self, prompt: PromptSubmitted) -> EndTurn:
        """Send ``prompt`` and wait for its turn's end (late answers included)."""
        await self.send(prompt)
        return await self.turn_ended(prompt.turn_id)

    async def turn_ended(self, turn_id: str) -> EndTurn:
        """Wait for the end of turn ``turn_id``, and for every answer still coming (a cancelled
        stream closing, a title): the ``EndTurn`` notice. Bound it with ``anyio.fail_after``.
        Raises :class:`DriverClosed` when the driver ends (or has ended) without that turn
        ending."""
        self._not_from_the_loop("turn_ended")
        while turn_id not in self._endings:
            if self._ended or self._closed:
                raise DriverClosed(f"the driver {'ended' if self._ended else 'is closed'}; "
                                   f"turn {turn_id!r} did not end in it")
            await self._change()
        ending = self._endings[turn_id]
        await self.settled()
        return ending

    # --- running -------------------------------------------------------------------------

    async def __aenter__(self: D) -> D:
        if self._tg is not None:
            raise DriverClosed("a driver runs once: make a new one")
        self._changed = anyio.Event()
        self._stream_lock = anyio.Lock()
        self._trace.start()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._guarded, self._loop)
        for command in self._rearm:
            self._start(command)
        return self

    # (``bool | None``, not ``bool``: mypy then lets a host ``return`` inside the block; the
    # driver swallows only the cancellation its own task group caused)
    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        group = self._tg
        if group is None or self._ended:
            raise DriverClosed("the driver was never started (use `async with`)")
        # The host's own exception in the ``async with`` body (a ``fail_after`` that ran out, a
        # bug, ``KeyboardInterrupt``) ends the driver at once and comes out as it was raised,
        # never wrapped in an exception group: the task group is told of no exception of the
        # body, only that it must end. A cancellation of the body is the task group's to see.
        own = exc is not None and not isinstance(exc, anyio.get_cancelled_exc_class())
        try:
            if exc_type is None and self._failure is None and not self._closed:
                await self.aclose()
        finally:
            self._closed = True
            group.cancel_scope.cancel()
            try:
                if own:
                    suppress = await group.__aexit__(None, None, None)
                else:
                    suppress = await group.__aexit__(exc_type, exc, tb)
            finally:
                self._ended = True
                self._queue.clear()
                self._trace.end()
                self._notify()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        return True if suppress and not own else None

    async def aclose(self, reason: str = "closed by the host") -> Closed:
        """Close: end the running work as a hard stop, hand back what is owed, end every task.
        Waits for the reducer to finish (a tool that cannot stop runs to its end): bound it
        with ``anyio.fail_after`` if the host must; the notices of the close come back."""
        if self._closed or not self._running:
            raise DriverClosed("the driver is not running (closed, or never started)")
        self._not_from_the_loop("aclose")
        self._closing = []
        for (kind, key), task in list(self._tasks.items()):
            if kind == "title":
                # A title for a chat that is closing: nobody will see it. Its effect is
                # cancelled and answers as a failed naming request, which ends the wait.
                task.cancel()
                self._enqueue(TitleFailed(request_id=key, reason="the chat is closing"))
        await self._close(reason)
        await self._wait(lambda: not self._busy)
        self._closed = True
        for task in list(self._tasks.values()):
            task.cancel()  # what the reducer no longer waits for: a timer, a late title
        notices, self._closing = tuple(self._closing), None
        self._notify()
        return Closed(notices=notices)

    async def _close(self, reason: str) -> None:
        raise NotImplementedError

    @property
    def _running(self) -> bool:
        """Started (``async with``) and not ended: input and answers may be queued."""
        return self._tg is not None and not self._ended

    def _not_from_the_loop(self, what: str) -> None:
        """Refuse a wait from inside a sink: the loop awaits the sink, so a sink that awaited
        the loop in turn would wait for ever (a sink may ``send_nowait``, or start a task)."""
        if self._loop_task is not None and anyio.get_current_task().id == self._loop_task:
            raise RuntimeError(f"{what}() from inside a notice or step sink would wait for the "
                               "step the sink is part of: use send_nowait(), or do it in a "
                               "task of its own")

    async def _wait(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._change()

    async def _change(self) -> None:
        """Wait for the next :meth:`_notify`."""
        self._waiters += 1
        try:
            await self._changed.wait()
        finally:
            self._waiters -= 1

    def _notify(self) -> None:
        if self._waiters:
            self._changed.set()
            self._changed = anyio.Event()

    def _enqueue(self, event: Event, receipt: _Receipt | None = None) -> None:
        if not self._running:
            raise DriverClosed("the driver is not running")
        self._busy += 1
        self._queue.append((event, receipt))
        if self._wake is not None:
            self._wake.set()

    async def _guarded(self, job: Callable[[], Awaitable[None]]) -> None:
        """Run ``job``; anything but cancellation ends the driver (kept for ``__aexit__``)."""
        try:
            await job()
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as error:
            if self._failure is None:
                self._failure = error
            if self._tg is not None:
                self._tg.cancel_scope.cancel()

    async def _loop(self) -> None:
        self._loop_task = anyio.get_current_task().id
        while True:
            if not self._queue:
                self._wake = anyio.Event()
                try:
                    await self._wake.wait()
                finally:
                    self._wake = None
                continue
            event, receipt = self._queue.popleft()
            try:
                step = self._reduce(self._state, event)
            except ProtocolError as error:
                self._busy -= 1
                if receipt is None and type(event).__name__ in ANSWERS:
                    raise  # the driver's own answer refused: a bug, never swallowed
                if receipt is None:
                    self._refused.append((event, error))
                else:
                    receipt.error = error
                    receipt.done.set()
                self._notify()
                continue
            self._state = step.state
            self._trace.step(event, step.commands)
            if self._on_step is not None:
                result = self._on_step(event, step)
                if result is not None:
                    await result
            for command in step.commands:
                await self._carry_out(command)
            if self._tasks:
                self._release()
            if receipt is not None:
                receipt.commands = step.commands
                receipt.done.set()
            self._busy -= 1
            self._notify()

    # --- carrying out --------------------------------------------------------------------

    async def _carry_out(self, command: Command) -> None:
        if isinstance(command, AwaitingCommand):
            self._start(command)
            return
        if isinstance(command, CancelStream):
            self._cancel(("stream", command.request_id))
        elif isinstance(command, DismissPermission):
            self._cancel(("permission", command.call_id))
        elif isinstance(command, CancelTimer):
            self._cancel(("timer", command.key))
        elif isinstance(command, CancelTool):
            task = self._tasks.get(("tool", command.call_id))
            if task is not None and task.stop is not None:
                task.stop.request()
        elif isinstance(command, EndTurn):
            self._endings.pop(command.turn_id, None)
            self._endings[command.turn_id] = command
            while len(self._endings) > ENDINGS_KEPT:
                del self._endings[next(iter(self._endings))]
        if self._closing is not None and isinstance(command, Notice):
            self._closing.append(command)
        if self._on_notice is not None and isinstance(command, Notice):
            result = self._on_notice(command)
            if result is not None:
                await result

    def _release(self) -> None:
        """Let go of the tasks whose answer the reducer no longer awaits (``outstanding``): a
        title after a rename, Stop hooks after a hard stop. They are cancelled, except a drain:
        its late reply carries the client's messages, which the reducer hands back (BR-3), so
        it runs on, no longer counted as work in progress."""
        awaited = {(o.command, o.answer_id) for o in self._outstanding(self._state)}
        for (kind, key), task in list(self._tasks.items()):
            if (task.command, key) in awaited or task.cancelled:
                continue
            if kind == "drain":
                if task.counted:
                    task.counted = False
                    self._busy -= 1
            else:
                task.cancel()

    def _cancel(self, key: tuple[str, str]) -> None:
        task = self._tasks.get(key)
        if task is not None:
            task.cancel()

    def _start(self, command: AwaitingCommand) -> None:
        effects, key = self._effects, command.answer_id or ""
        job: Callable[[], Awaitable[Event | None]]
        task = _Task(type(command))
        if isinstance(command, Persist):
            kind, job = "persist", lambda: answers.persist(effects, command)
        elif isinstance(command, RequestModelStream):
            kind, job = "stream", lambda: self._stream(command, task)
        elif isinstance(command, AskPermission):
            kind, job = "permission", lambda: answers.permission(effects, command)
        elif isinstance(command, ExecuteTool):
            task.stop = StopSignal()
            stop = task.stop
            kind, job = "tool", lambda: answers.tool(effects, command, stop)
        elif isinstance(command, SaveLead):
            kind, job = "lead", lambda: answers.save_lead(effects, command)
        elif isinstance(command, RequestTitle):
            kind, job = "title", lambda: answers.title(effects, command)
        elif isinstance(command, DecideNaturalStop):
            kind, job = "stop", lambda: answers.natural_stop(effects, command)
        elif isinstance(command, RunStopHooks):
            kind, job = "hooks", lambda: answers.stop_hooks(effects, command)
        elif isinstance(command, DrainMidTurnQueue):
            kind, job = "drain", lambda: answers.drain(effects, command)
        elif isinstance(command, StartTimer):
            # The deadline is fixed now, not when the task first runs (see ``clock``).
            deadline = self._clock.time() + command.seconds
            kind, job = "timer", lambda: self._timer(command.key, deadline)
        else:
            raise TypeError(f"the driver cannot carry out {type(command).__name__}")
        previous = self._tasks.get((kind, key))
        if previous is not None:
            previous.cancel()  # a timer started again under its key replaces the old one
        self._tasks[(kind, key)] = task
        if kind != "timer":
            task.counted = True
            self._busy += 1
        if self._tg is None:
            raise DriverClosed("the driver is not running")
        self._tg.start_soon(self._guarded, lambda: self._answer(kind, key, task, job))

    async def _answer(self, kind: str, key: str, task: _Task,
                      job: Callable[[], Awaitable[Event | None]]) -> None:
        event: Event | None = None
        try:
            with task.scope:
                event = await job()
        finally:
            if self._tasks.get((kind, key)) is task:
                del self._tasks[(kind, key)]
            if task.counted:
                self._busy -= 1
            if event is not None and not task.cancelled and self._running:
                self._enqueue(event)
            self._notify()

    async def _stream(self, command: RequestModelStream, task: _Task) -> Event:
        def opened(event: Event) -> None:
            if not task.cancelled:
                self._enqueue(event)

        async with self._stream_lock:  # one model stream at a time
            return await answers.model_stream(self._effects, command, self._wire,
                                              self._max_output_tokens, opened, self._on_text)

    async def _timer(self, key: str, deadline: float) -> Event:
        await self._clock.sleep_until(deadline)
        return TimerFired(key=key)
