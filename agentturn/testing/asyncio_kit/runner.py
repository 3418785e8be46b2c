"""The async kit's runner: the host's real effects, the real driver, a schedule, the rules.

Theory of operation
-------------------
:class:`Run` plays one schedule. It builds the world (:class:`AsyncWorld`), asks the host for
its effects against it (``spec.make_effects(world)``), wraps each effect so the kit knows which
command every running piece of host code works for (:data:`~.world.CURRENT`), and runs the
driver the host runs on asyncio with the world's :class:`~agentturn.aio.ManualClock`: an
:class:`agentturn.aio.SessionDriver` for a :class:`~agentturn.session.SessionConfig`, an
:class:`agentturn.aio.TurnDriver` for a :class:`~agentturn.TurnConfig` (a chat with no
session around it: the user's prompt starts a turn when none runs, and there are no clients,
Stop hooks or guard).
Then, over and over: wait until every task is blocked (:func:`~.schedule.settle`), check the
rules, and make one move the chooser picks (end a pending job with an outcome, a user action,
time passing). After the last move the world turns *calm* — every pending job ends plainly,
time runs out every timer — until the session rests; then the driver closes, and nothing may
still run.

Rules checked at every quiescent point, beyond the world's own (:mod:`.world`):

* ``liveness`` (never stuck): every effect still running waits on a job the world holds (an
  effect that swallowed an exception and waits on nothing hangs the turn forever); everything
  the session awaits (``agentturn.session.outstanding``) has an effect running for it, or a
  timer armed;
* ``cancel`` (TL-2, TL-3): after ``CancelStream`` the model effect has ended (a task that
  shields itself keeps the stream open and holds the driver's one-stream lock), after
  ``DismissPermission`` the dialog's effect has ended;
* ``host-error`` (TL-11): an effect raises only what a client of the world raised, or an
  exception raised from one; anything else (a ``KeyError`` in the host's bookkeeping) is a bug
  of the host's own, which the driver can only report as the command's failure: the turn ends
  on an error no service made, and a retry meets it again;
* ``effects-ended``: no job runs for an effect that already returned (a task the host spawned
  and let run: a tool result that lands after its turn ended, a write acknowledged before it
  is durable);
* ``storage`` (TL-5, LD-7): when the session hears ``Persisted`` or ``LeadSaved``, storage
  holds every record of that write;
* ``cancel`` (TL-8): a ``ToolFinished`` says cancelled exactly when the world's tool stopped,
  and only once the tool ended;
* ``timers``: each ``TimerFired`` comes once, when the clock reaches the timer's deadline;
* ``no-text-lost`` (LD-7, LD-13), ``session-invariant``, ``hard-bound`` (SG-B4): as in the
  synchronous kit (:mod:`agentturn.session.invariants` on every step the driver takes); on a
  turn driver, *no text lost* end to end (every text typed is saved, handed back, or still
  held by the turn) and *never stuck* (a running turn awaits an answer, none twice).

A broken rule stops the run; the runner reports the rules and the program that broke them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio
import attrs

from ... import commands as c
from ... import events as e
from ..._base import Event, Step
from ...aio import Clock, Effects, SessionDriver, TurnDriver
from ...guard import GuardConfig
from ...records import UserMessageRecord
from ...session import outstanding
from ...session import vocabulary as sv
from ...session.invariants import HardBound, held_texts, lost_texts, stuck
from ...session.state import SessionConfig, SessionPhase, SessionState
from ...session.waiting import WaitKind, waiting_for
from ...turn import outstanding as turn_outstanding
from ...turn.state import TurnConfig, TurnPhase, TurnState
from ..received import READERS, Reader
from .schedule import Chooser, Move, ProgramMismatch, answer, settle, tick, user
from .world import CURRENT, OUTCOMES, TOOLS, AsyncWorld, EffectRun, WorldTool

__all__ = ["TABLE", "AsyncSpec", "Run"]

#: The effect kinds, by the command they carry out.
KIND = {c.Persist: "persist", c.RequestModelStream: "model", c.AskPermission: "permission",
        c.ExecuteTool: "tool", c.SaveLead: "lead", c.RequestTitle: "title",
        sv.RunStopHooks: "hooks", sv.DrainMidTurnQueue: "drain"}
#: What each effect must return, when the driver reads its value: a class, or a description and
#: the attributes the driver reads.
RETURNS: dict[str, tuple[type | str, tuple[str, ...]]] = {
    "permission": (e.PermissionDecision, ()), "title": (str, ()),
    "tool": ("a ToolResult", ("output", "error", "cancelled", "structured", "ends_task")),
    "hooks": ("a HookVerdict", ("block", "reason")),
    "drain": ("a DrainReply", ("messages", "has_queued_prompt"))}
#: Moves that finish the world calmly: the plainest outcome that ends a turn.
CALM = {"engine-open": "text", "dialog": "allow"}
#: Every kind of move, each as often as its weight: a drawn move names its kind through this
#: fixed table (see :class:`~.schedule.Drawn`).
TABLE = tuple(
    [f"{stage}:{outcome}" for stage, outcomes in OUTCOMES.items()
     for outcome, weight in outcomes for _ in range(weight)]
    + [f"user:{action}" for action, weight in (("prompt", 4), ("lead", 2), ("stop", 3),
                                               ("rename", 1), ("detach", 1), ("attach", 4),
                                               ("continue", 3)) for _ in range(weight)]
    + ["tick"])
#: Wall-clock seconds a run may take at most (a host hung outside the world's jobs).
SAFETY_SECONDS = 20.0


def default_config() -> SessionConfig:
    """What the kit checks by default: titles, Stop hooks, the daemon with the stop guard."""
    return SessionConfig(chat_id="chat", turn=TurnConfig(auto_title=True), stop_hooks=True,
                         guard=GuardConfig(todo_stop_guard=True, daemon=True))


def _a_function(spec: AsyncSpec, field: attrs.Attribute[Any], value: Any) -> None:
    if not callable(value):
        hint = (" (a printed test leaves a value it cannot write as ...: fill it in)"
                if value is Ellipsis else "")
        raise TypeError(f"{field.name} must be a function of the world, got "
                        f"{type(value).__name__}{hint}")


def _known_format(spec: AsyncSpec, field: attrs.Attribute[Any], value: str | Reader) -> None:
    if isinstance(value, str) and value not in READERS:
        raise ValueError(f"request_format must be one of {sorted(READERS)} or a reader "
                         f"function, got {value!r}")
    if not isinstance(value, str) and not callable(value):
        raise TypeError(f"request_format must be a name or a reader function, got "
                        f"{type(value).__name__}")


def _every_tool(spec: AsyncSpec, field: attrs.Attribute[Any],
                tools: Mapping[str, WorldTool]) -> None:
    if set(tools) != set(TOOLS):
        raise ValueError(f"tools must map each of the world's tools {sorted(TOOLS)} to a "
                         f"WorldTool; got {sorted(tools)}")


@attrs.frozen(kw_only=True)
class AsyncSpec:
    """A host to check: its effects against the world, and how its requests read."""

    #: The host's effects, written against the world's clients.
    make_effects: Callable[[AsyncWorld], Effects] = attrs.field(validator=_a_function)
    #: The format of the message list the host sends the engine (a name of
    #: :data:`agentturn.testing.received.READERS`, or a reader of the host's own).
    request_format: str | Reader = attrs.field(default="openai-chat", validator=_known_format)
    #: A session's configuration (the kit runs a :class:`~agentturn.aio.SessionDriver`) or a
    #: turn's (a :class:`~agentturn.aio.TurnDriver`, for the chat :attr:`chat_id`).
    config: SessionConfig | TurnConfig = attrs.field(factory=default_config)
    chat_id: str = "chat"
    #: How the engine calls the world's tools in the host's vocabulary (:class:`WorldTool`).
    tools: Mapping[str, WorldTool] = attrs.field(factory=lambda: dict(TOOLS),
                                                 validator=_every_tool)
    #: The clock the driver's timers wait on (a host's own :class:`agentturn.aio.Clock`
    #: built on the world's); the world's :class:`~agentturn.aio.ManualClock` by default.
    make_clock: Callable[[AsyncWorld], Clock] | None = attrs.field(
        default=None, validator=attrs.validators.optional(_a_function))
    max_output_tokens: int | None = 1024


class _Found(Exception):
    """A rule broke: the run ends here."""


class _Refused(Exception):
    """The spec cannot be run (``error`` says why, naming the field)."""

    def __init__(self, error: ValueError | TypeError) -> None:
        super().__init__(str(error))
        self.error = error


class _Tracked:
    """The host's model iterator, watched: the effect run ends when the iterator does."""

    def __init__(self, run: EffectRun, inner: AsyncIterator[Mapping[str, Any]],
                 raised: Callable[[EffectRun, Exception], None],
                 wrong: Callable[[EffectRun, Any], None]) -> None:
        self._run, self._inner, self._raised, self._wrong = run, inner, raised, wrong

    def __aiter__(self) -> _Tracked:
        return self

    async def __anext__(self) -> Mapping[str, Any]:
        try:
            wire_object = await self._inner.__anext__()
        except StopAsyncIteration:
            self._run.ended = True
            raise
        except Exception as error:
            self._run.ended = True
            self._raised(self._run, error)
            raise
        except BaseException:
            self._run.ended = True
            raise
        if not isinstance(wire_object, Mapping):
            self._wrong(self._run, wire_object)
        return wire_object

    async def aclose(self) -> None:
        try:
            close = getattr(self._inner, "aclose", None)
            if close is not None:
                await close()
        finally:
            self._run.ended = True


class Run:
    """One schedule played against the host (see the module docstring)."""

    def __init__(self, spec: AsyncSpec, chooser: Chooser, steps: int, verbose: bool) -> None:
        self.spec, self.chooser, self.steps, self.verbose = spec, chooser, steps, verbose
        self.world = AsyncWorld(spec.request_format, spec.tools)
        self.turn_only = isinstance(spec.config, TurnConfig)
        self.state: Any = (TurnState.create(spec.chat_id, spec.config)
                           if isinstance(spec.config, TurnConfig)
                           else SessionState.create(spec.config))
        self.program: list[Move] = []
        self.log: list[str] = []
        self.runs: list[EffectRun] = []
        self.monitor = HardBound()
        self.writes: dict[str, tuple[Any, ...]] = {}
        self.timers: dict[str, float] = {}
        self.typed: set[tuple[str, str]] = set()
        self.fates: set[tuple[str, str]] = set()
        self.lead_messages: dict[str, str] = {}
        self.cancelled: set[tuple[str, str]] = set()
        self.number = 0
        self.attached = True
        self.driver: SessionDriver | TurnDriver | None = None
        #: A program that no longer applies, or a spec the kit cannot run: raised by play.
        self.mismatch: ProgramMismatch | ValueError | TypeError | None = None

    # --- playing --------------------------------------------------------------------------

    def play(self) -> list[str]:
        """Run the schedule; the broken rules (none: the host passed)."""
        anyio.run(self._main, backend="asyncio")
        if self.mismatch is not None:
            raise self.mismatch
        return self.world.violations

    async def _main(self) -> None:
        world = self.world
        self.sweeping = anyio.Event()
        clock = self.spec.make_clock(world) if self.spec.make_clock else world.clock
        if not (callable(getattr(clock, "time", None))
                and callable(getattr(clock, "sleep_until", None))):
            raise TypeError(f"AsyncSpec.make_clock(world) must return an aio.Clock (time(), "
                            f"sleep_until(deadline)), got {type(clock).__name__}")
        # A bounded wall-clock net, for a host that hangs on something outside the world.
        with anyio.move_on_after(SAFETY_SECONDS) as net:
            async with anyio.create_task_group() as janitor:
                janitor.start_soon(self._sweep)
                try:
                    await self._drive(clock)
                except _Found:
                    pass
                except (ProgramMismatch, _Refused) as mismatch:
                    self.mismatch = (mismatch.error if isinstance(mismatch, _Refused)
                                     else mismatch)
                except Exception as error:  # the driver ended on a bug (an answer refused ...)
                    world.violate("accepted", "protocol", f"the driver ended: "
                                  f"{type(error).__name__}: {error}")
                    world.frozen = True
                janitor.cancel_scope.cancel()
        if net.cancelled_caught:
            world.violate("liveness", "never stuck", "the host did not end when the driver "
                          f"closed (still running after {SAFETY_SECONDS} s of wall clock)")
        world.frozen = True

    def _driver(self, clock: Clock) -> SessionDriver | TurnDriver:
        """The driver the spec asks for; a spec it cannot be built from is refused (raised from
        :meth:`play` as a ``TypeError`` or ``ValueError`` naming the field), not a finding."""
        spec = self.spec
        try:
            effects = spec.make_effects(self.world)
        except Exception as error:
            raise _Refused(ValueError(f"AsyncSpec.make_effects(world) raised "
                                      f"{type(error).__name__}: {error}")) from error
        if not isinstance(effects, Effects):
            raise _Refused(TypeError(f"AsyncSpec.make_effects(world) must return aio.Effects, "
                                     f"got {type(effects).__name__}"))
        effects = self._wrap(effects)
        try:
            if isinstance(spec.config, TurnConfig):
                return TurnDriver(spec.chat_id, spec.config, effects,
                                  max_output_tokens=spec.max_output_tokens, clock=clock,
                                  on_step=self._stepped)
            return SessionDriver(spec.config, effects, max_output_tokens=spec.max_output_tokens,
                                 clock=clock, on_step=self._stepped)
        except (TypeError, ValueError) as error:
            raise _Refused(ValueError(f"the driver refuses the spec (AsyncSpec.config, "
                                      f"max_output_tokens or make_effects): {error}")) from error

    async def _drive(self, clock: Clock) -> None:
        async with self._driver(clock) as driver:
            self.driver = driver
            try:
                if not self.turn_only:
                    driver.send_nowait(sv.ClientAttached(client_id="ui"))
                await self._quiet()
                while len(self.program) < self.steps and self.chooser.more():
                    options = self._possible()
                    if not options:  # the session closed: nothing more can happen
                        break
                    move = self.chooser.pick(options)
                    self.program.append(move)
                    self._note(lambda move=move: f"move {len(self.program)}: {move!r}")  # type: ignore[misc]
                    self._make(move)
                    await self._quiet()
                await self._calm()
                await self._close(driver)
            except BaseException:
                # Whatever still waits on the world is answered plainly from now on, so the
                # driver's exit (which cancels every task) is not held by a shielded wait.
                self.sweeping.set()
                raise
        self._ended()

    async def _sweep(self) -> None:
        """Once the run ends early, answer every pending job plainly until the driver exits."""
        await self.sweeping.wait()
        while True:
            for job in self.world.pending():
                if not job.answers:
                    job.answer(job.options[0][0])
            await anyio.sleep(0)

    def _note(self, text: Callable[[], str]) -> None:
        if self.verbose:
            self.log.append(text())

    async def _quiet(self) -> None:
        """Wait for quiescence, then check every rule; a broken one ends the run."""
        if not await settle():
            self.world.violate("liveness", "never stuck", "the host's tasks never all block: "
                               "a task polls, or swallows its own cancellation")
        else:
            self._check()
        if self.world.violations:
            self.world.frozen = True
            raise _Found

    # --- the effects, watched ---------------------------------------------------------------

    def _begin(self, kind: str, command: Any) -> EffectRun:
        run = EffectRun(kind, command, str(command.answer_id or ""))
        CURRENT.set(run)  # in the effect's own task: its context only
        self.runs.append(run)
        return run

    def _wrap(self, effects: Effects) -> Effects:
        def plain(kind: str, effect: Any) -> Any:
            if effect is None:
                return None

            async def run(command: Any, *rest: Any) -> Any:
                started = self._begin(kind, command)
                try:
                    result = await effect(command, *rest)
                except Exception as error:
                    self._raised(started, error)
                    raise
                finally:
                    started.ended = True
                self._returned(started, result)
                return result

            return run

        model = effects.model

        def watched_model(command: c.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
            return _Tracked(self._begin("model", command), model(command), self._raised,
                            self._yielded)

        return attrs.evolve(
            effects, persist=plain("persist", effects.persist), model=watched_model,
            permission=plain("permission", effects.permission),
            tool=plain("tool", effects.tool), save_lead=plain("lead", effects.save_lead),
            title=plain("title", effects.title), stop_hooks=plain("hooks", effects.stop_hooks),
            drain=plain("drain", effects.drain))

    def _returned(self, run: EffectRun, result: Any) -> None:
        wanted = RETURNS.get(run.kind)
        if wanted is None:
            return
        kind, fields = wanted
        if isinstance(kind, type):
            wrong, named = not isinstance(result, kind), f"a {kind.__name__}"
        else:
            wrong, named = not all(hasattr(result, name) for name in fields), kind
        if wrong:
            self.world.violate("host-error", "TL-11", f"the {run.kind} effect for {run.key} "
                               f"returned {result!r}, not {named}: the driver reports it as "
                               "the command's failure")

    def _yielded(self, run: EffectRun, wire_object: Any) -> None:
        self.world.violate("host-error", "TL-11", f"the model effect for {run.key} yielded "
                           f"{type(wire_object).__name__}, not a wire object (a mapping, as an "
                           "SDK object's model_dump() gives): the driver fails the stream")

    def _raised(self, run: EffectRun, error: Exception) -> None:
        if not self.world.raised(error):
            self.world.violate("host-error", "TL-11", f"the {run.kind} effect for {run.key} "
                               f"raised {type(error).__name__}: {error} (no client of the world "
                               "raised it: a bug in the host's own code, reported to the "
                               "session as the command's failure)")

    # --- what the session hears -------------------------------------------------------------

    def _stepped(self, event: Event, step: Step[Any]) -> None:
        before, after, commands, world = self.state, step.state, step.commands, self.world
        self.state = after
        self._note(lambda: f"   -> {event!r}")
        if self.turn_only:
            for problem in _turn_stuck(after):
                world.violate("session-invariant", "never stuck", problem)
        else:
            for problem in (*lost_texts(before, event, after, commands), *stuck(after)):
                world.violate("session-invariant", "no text lost / never stuck", problem)
            self.monitor, problems = self.monitor.step(before, event, after, commands)
            for problem in problems:
                world.violate("hard-bound", "SG-B4", problem)
        if isinstance(event, sv.MidTurnDrained) and event.drain_id in world.drained:
            given = world.drained.pop(event.drain_id)
            if tuple(event.messages) != given:
                world.violate("drain", "SO-1", f"the client's drain {event.drain_id} gave "
                              f"{list(given)}, the session heard {list(event.messages)}: a "
                              "message typed mid-turn never reaches the turn")
        if isinstance(event, e.StreamFailed) and event.request_id in world.too_long:
            world.violate("token-limit", "TL-2", f"{event.request_id} was refused for its "
                          "length, but the session heard StreamFailed: raise "
                          "aio.TokenLimitError from the SDK's error before the effect yields "
                          "anything (aio.OPENED included), so the request ends with its own "
                          "outcome (a retry is refused the same way)")
        if isinstance(event, e.Persisted | e.LeadSaved):
            key = event.key if isinstance(event, e.Persisted) else event.lead_id
            missing = [r for r in self.writes.pop(key, ()) if r not in world.saved]
            if missing:
                world.violate("storage", "TL-5, LD-7", f"the session heard {event!r} but "
                              f"storage does not hold {missing[0]!r}: acknowledged before the "
                              "write completed")
        elif isinstance(event, e.ToolFinished):
            self._tool_reported(event)
        elif isinstance(event, sv.TimerFired):
            due = self.timers.pop(event.key, None)
            if due is None:
                world.violate("timers", "never stuck", f"TimerFired {event.key!r} with no timer "
                              "running under that key (armed twice?)")
            elif world.clock.now < due:
                world.violate("timers", "never stuck", f"{event.key!r} fired at "
                              f"{world.clock.now}, before its deadline {due}")
        for command in commands:
            self._note(lambda command=command: f"   <- {command!r}")  # type: ignore[misc]
            self._observe(command)

    def _observe(self, command: Any) -> None:
        world = self.world
        if isinstance(command, c.Persist):
            self.writes[command.key] = command.records
        elif isinstance(command, c.SaveLead):
            self.writes[command.lead_id] = (command.record,)
            world.lead_texts[command.record.text] = command.lead_id
            self.lead_messages[command.record.message_id] = command.lead_id
        elif isinstance(command, sv.StartTimer):
            self.timers[command.key] = world.clock.now + command.seconds
        elif isinstance(command, sv.CancelTimer):
            self.timers.pop(command.key, None)
        elif isinstance(command, c.CancelStream):
            self.cancelled.add(("model", command.request_id))
        elif isinstance(command, c.DismissPermission):
            self.cancelled.add(("permission", command.call_id))
        elif isinstance(command, c.ReturnDraft | c.LeadUnapplied):
            self.fates.add(("lead", command.lead_id))
        elif isinstance(command, sv.PromptRefused):
            self.fates.add(("user", f"{command.prompt_id}-m"))
        elif isinstance(command, sv.AutomaticTurnDropped):
            self.fates.add(("user", command.message_id))
        elif isinstance(command, c.UnsavedRecords):
            self.fates.update(("user", r.message_id) for r in command.records
                              if isinstance(r, UserMessageRecord))

    def _tool_reported(self, event: e.ToolFinished) -> None:
        world, cid = self.world, event.call_id
        jobs = [job for job in world.jobs if job.kind == "tool" and job.payload.call_id == cid]
        if not jobs:
            if not event.error:
                world.violate("tools-as-asked", "TL-4", f"{cid} reported finished but the "
                              "world never ran it (skipped)")
            return
        job = jobs[-1]
        if job.state == "pending":
            world.violate("tools-as-asked", "TL-4", f"{cid} reported finished while it still "
                          "runs in the world")
        elif event.cancelled != (job.state == "stopped"):
            said = "cancelled" if event.cancelled else "completed"
            world.violate("cancel", "TL-8", f"{cid} reported {said}, but the world "
                          f"{'stopped' if job.state == 'stopped' else 'ran'} it")

    # --- the rules at a quiescent point -------------------------------------------------------

    def _check(self) -> None:
        world = self.world
        pending = world.pending()
        # nothing left to answer: no job pending, no sleep on the world's clock to end
        settled = not pending and self._next_due() is None
        for job in pending:
            # (a job of a task started outside every effect, a long-lived writer, say, belongs
            # to none: it is judged when the driver has closed)
            if job.run is not None and job.run.ended:
                world.violate("effects-ended", "TL-4, TL-5", f"{job.name} still runs after "
                              f"the {job.run.kind} effect that started it ended "
                              f"({job.run.key}): its result lands after the driver was "
                              "answered (a task started inside an effect belongs to it; "
                              "start a long-lived one, a writer, in make_effects)")
        for run in self.runs:
            if run.ended:
                continue
            if (run.kind, run.key) in self.cancelled:
                world.violate("cancel", "TL-2, TL-3", f"the {run.kind} effect for {run.key} "
                              "still runs after the session cancelled it (does it shield "
                              "itself from cancellation?)")
            elif settled:
                # An effect may wait on another's work (a lock, a queue to a writer task) or on
                # the world's clock while the world still has a job to answer or a sleep to
                # end; with neither left, nothing can free it.
                world.violate("liveness", "never stuck", f"the {run.kind} effect for {run.key} "
                              "waits, and the world has nothing left to answer: an exception "
                              "swallowed, or a wait outside the world (a sleep on the real "
                              "clock, a lock never released)? The session waits forever")
        running = {(run.kind, run.key) for run in self.runs if not run.ended}
        for owed in (turn_outstanding if self.turn_only else outstanding)(self.state):
            if owed.command is sv.StartTimer:
                if owed.answer_id not in self.timers:
                    world.violate("liveness", "never stuck", f"the session waits on timer "
                                  f"{owed.answer_id!r}, which is not running")
            elif (KIND.get(owed.command, "?"), owed.answer_id) not in running:
                world.violate("liveness", "never stuck", f"the session waits for the answer to "
                              f"{owed.command.__name__} {owed.answer_id!r}; no effect runs for "
                              "it")
        for key, due in self.timers.items():
            if due <= world.clock.now:
                world.violate("timers", "never stuck", f"the timer {key!r} was due at {due} "
                              f"(now {world.clock.now}) and never fired")
        saved = {("user", r.message_id) for r in world.saved if isinstance(r, UserMessageRecord)}
        saved.update(("lead", lead) for message, lead in self.lead_messages.items()
                     if ("user", message) in saved)
        held = _turn_held(self.state) if self.turn_only else held_texts(self.state)
        lost = self.typed - saved - self.fates - held
        if lost:
            world.violate("no-text-lost", "LD-7, LD-13", f"typed and gone: {sorted(lost)}")

    def _ended(self) -> None:
        """After the driver closed: nothing of the world may still run."""
        for job in self.world.pending():
            self.world.violate("effects-ended", "TL-4, TL-5", f"{job.name} still runs after the "
                               "driver closed")

    # --- the moves ----------------------------------------------------------------------------

    def _possible(self) -> list[tuple[Move, int, str]]:
        """The moves possible now, with their weights and kinds (see :data:`TABLE`)."""
        options: list[tuple[Move, int, str]] = []
        for job in self.world.pending():
            stage = "engine-open" if job.stage == "open" else job.kind
            options.extend((answer(job.name, outcome), weight, f"{stage}:{outcome}")
                           for outcome, weight in job.options)
        phase = self.state.phase
        tool_runs = bool(self.world.running("tool"))
        if self.turn_only:  # a prompt starts a turn when none runs; no clients
            runs = phase is not TurnPhase.IDLE
            retry = self.state.resume_phase is not None
            prompt = (4, not runs)
        else:
            runs = phase not in (SessionPhase.IDLE, SessionPhase.CLOSED)
            retry = any(w.kind is WaitKind.RETRY for w in waiting_for(self.state))
            prompt = (1 if runs else 4, phase is not SessionPhase.CLOSED)
        for action, weight, possible in (
                ("prompt", *prompt),
                ("lead", 2, runs),
                ("stop", 4 if tool_runs else 1, runs),
                ("rename", 1, runs),
                ("detach", 1, self.attached and runs and not self.turn_only),
                ("attach", 4, not self.attached),
                ("continue", 3, retry)):
            if possible:
                options.append((user(action), weight, f"user:{action}"))
        if self._next_due() is not None:
            options.append((tick(), 1, "tick"))
        return options

    def _next_due(self) -> float | None:
        """When time next matters: a timer the session started, or a sleep on the world's
        clock (a host's own back-off)."""
        dues = list(self.timers.values())
        sleep = self.world.clock.next_deadline()
        if sleep is not None:
            dues.append(sleep)
        return min(dues, default=None)

    def _make(self, move: Move) -> None:
        if move.kind == "answer":
            job = next(job for job in self.world.pending() if job.name == move.target)
            job.answer(move.outcome)
        elif move.kind == "tick":
            self._tick()
        else:
            self._act(move.target)

    def _tick(self) -> None:
        clock = self.world.clock
        due = self._next_due()
        clock.advance(max((clock.now if due is None else due) - clock.now, 0.0))

    def _act(self, action: str) -> None:
        assert self.driver is not None
        self.number += 1
        config = self.spec.config
        n, chat = self.number, (self.spec.chat_id if isinstance(config, TurnConfig)
                                else config.chat_id)
        event: Event
        if action == "prompt":
            self.typed.add(("user", f"p{n}-m"))
            event = (e.PromptSubmitted(turn_id=f"p{n}", message_id=f"p{n}-m", text=f"prompt {n}")
                     if self.turn_only else
                     sv.PromptQueued(prompt_id=f"p{n}", message_id=f"p{n}-m", text=f"prompt {n}"))
        elif action == "lead":
            self.typed.add(("lead", f"L{n}"))
            event = e.LeadSubmitted(chat_id=chat, lead_id=f"L{n}", text=f"lead {n}")
        elif action == "stop":
            event = e.StopPressed()
        elif action == "rename":
            event = e.ManualRename(title=f"name {n}")
        elif action == "detach":
            self.attached = False
            event = sv.ClientDetached(client_id="ui")
        elif action == "attach":
            self.attached = True
            event = sv.ClientAttached(client_id="ui")
        else:
            turn = self.state if self.turn_only else self.state.turn
            event = e.ContinueTurn(turn_id=turn.turn_id)
        self.driver.send_nowait(event)

    async def _calm(self) -> None:
        """The world stops hanging: every job ends plainly, time runs out every timer, until
        the session rests (what it then waits for is the user's or the client's)."""
        for _ in range(400):
            pending = self.world.pending()
            if pending:
                job = pending[0]
                job.answer(CALM.get("engine-open" if job.stage == "open" else job.kind,
                                    job.options[0][0]))
            elif self._next_due() is not None and self.state.phase is not SessionPhase.CLOSED:
                self._tick()
            else:
                return
            await self._quiet()
        self.world.violate("liveness", "never stuck", "the session never came to rest in a calm "
                           "world")
        raise _Found

    async def _close(self, driver: SessionDriver | TurnDriver) -> None:
        """Close the driver while the calm world answers what closing still needs."""
        closed = False

        async def closing() -> None:
            nonlocal closed
            await driver.aclose()
            closed = True

        async with anyio.create_task_group() as group:
            group.start_soon(closing)
            for _ in range(400):
                if not await settle():
                    break
                if closed:
                    return
                pending = self.world.pending()
                if pending:
                    pending[0].answer(pending[0].options[0][0])
                elif self._next_due() is not None:
                    self._tick()
                else:
                    break
            group.cancel_scope.cancel()
        self.world.violate("liveness", "never stuck", "closing the driver never ended")
        raise _Found


def _turn_held(state: TurnState) -> set[tuple[str, str]]:
    """What a turn (with no session around it) still holds of the texts typed: the records it
    has to write or owes, its Lead instructions."""
    held = {("user", record.message_id) for record in (*state.batch, *state.owed)
            if isinstance(record, UserMessageRecord)}
    held.update(("lead", entry.lead_id) for entry in (*state.lead.entries, *state.request_leads))
    return held


def _turn_stuck(state: TurnState) -> list[str]:
    """*Never stuck* for a turn: a running turn awaits an answer, and no answer twice."""
    answers = turn_outstanding(state)
    problems = []
    if state.phase is not TurnPhase.IDLE and not answers:
        problems.append(f"never stuck: a {state.phase.name} turn awaits no answer")
    if len({(o.command, o.answer_id) for o in answers}) != len(answers):
        problems.append("never stuck: an awaiting command is outstanding twice")
    return problems
