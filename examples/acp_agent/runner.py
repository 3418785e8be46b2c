"""The session loop of one ACP session: feed ``agentturn.session`` events, carry out commands.

Theory of operation
-------------------
A :class:`SessionRunner` holds one :class:`agentturn.session.SessionState` (a daemon session with
the todo stop guard on and no Stop hooks). :meth:`SessionRunner.step` reduces one event from
outside (a prompt, a cancel, a Lead, a tool or permission answer, a timer) and then every answer
the runner gives at once (writes to the in-memory transcript, the scripted model, the drain
reply), in order, the way an event loop delivers them. Work that takes time runs in tasks that
come back through ``step``: a tool, a permission request, a timer. ``step`` is synchronous, so a
session's state changes in one place and never interleaves.

What the client sees goes through one :class:`Outbox`, sent in the order the session produced
it, so a permission request follows the tool call it is about and a prompt's response is sent
only after everything its turn produced.

What the session persists goes to a :class:`store.SessionStore` as well as to the in-memory
transcript, with every message chunk the client was sent and the title; after every step the
last idle state is saved with the id counters. :meth:`SessionRunner.replay` sends that log back to a
client as ``session/update`` notifications (``session/load``); a runner made from a saved
session (:meth:`SessionRunner.restored`) starts from the saved state with a new guard.

Rules this module keeps: every decision is the session's (the runner only answers what it is
asked, with what it has); a permission answer is an allow only when the client chose the allow
option, a cancel only when the client answered ``cancelled`` (or the session dismissed the
dialog), and a deny otherwise (a failed request, an answer that does not read), logged with what
came; a dismissed request is no longer awaited.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import acp
import scripted_model as model
import tools
import wire
from store import SavedSession, SessionStore

import agentturn as at
from agentturn import guard
from agentturn import session as se

__all__ = ["DRAFT_RETURNED", "LEAD_UNAPPLIED", "Outbox", "SessionRunner"]

#: Notifications about a Lead after its request was answered (``_agentturn/...`` on the wire).
LEAD_UNAPPLIED = "agentturn/lead_unapplied"
DRAFT_RETURNED = "agentturn/draft_returned"

log = logging.getLogger("agentturn.acp_agent")

Send = Callable[[], Awaitable[None]]


class Outbox:
    """Everything that goes to the client, sent one at a time in the order it was put."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Send] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None

    def put(self, send: Send) -> None:
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._run())
        self._queue.put_nowait(send)

    async def flushed(self) -> None:
        """Return once everything put so far has been sent."""
        await self._queue.join()

    async def _run(self) -> None:
        while True:
            send = await self._queue.get()
            try:
                await send()
            except Exception:
                log.exception("sending to the client failed")
            finally:
                self._queue.task_done()


def _brief(error: Exception) -> str:
    """An exception in a few words for a log line (a JSON-RPC error's code and message)."""
    if isinstance(error, acp.RequestError):
        return f"JSON-RPC error {error.code}: {error}"
    return f"{type(error).__name__}: {error}"


def _title_of(text: str) -> str:
    words = text.split()[:6]
    return " ".join(words).capitalize() if words else "New chat"


class SessionRunner:
    """One ACP session: its agentturn session, and the effects the session asks for."""

    def __init__(self, session_id: str, folder: pathlib.Path, conn: acp.Client,
                 outbox: Outbox, store: SessionStore,
                 saved: SavedSession | None = None) -> None:
        self.session_id = session_id
        #: Where the tools write (absolute).
        self.folder = folder
        self.state = saved.state if saved is not None else se.Session.create(se.SessionConfig(
            chat_id=session_id,
            guard=guard.GuardConfig(todo_stop_guard=True, daemon=True),
            stop_hooks=False))
        self._store = store
        #: The state as of the last step that left the session idle: what is saved.
        self._idle_state = self.state
        #: The in-memory transcript: every record the session had persisted, in order.
        self.transcript: list[at.Record] = []
        self._conn = conn
        self._outbox = outbox
        self._answers: deque[at.Event] = deque()
        self._announce: list[at.ToolCall] = []
        self._busy = False
        self._next_turn = saved.next_turn if saved is not None else 1
        self._next_call = saved.next_call if saved is not None else 1
        self._turns: dict[str, asyncio.Future[at.TurnOutcome]] = {}
        self._prompts: dict[str, str] = dict(saved.prompts) if saved is not None else {}
        self._continued: set[str] = set()
        self._permission_notes: dict[str, str] = {}
        self._rounds: dict[str, int] = {}
        self._last_user_text = ""
        self._results: list[tuple[str, str]] = []
        self._lead_texts: dict[str, str] = {}
        self._lead_replies: dict[str, dict[str, Any]] = {}
        self._leads_asked: set[str] = set()
        self._failed_calls: set[str] = set()
        self._stops: dict[str, asyncio.Event] = {}
        self._asking: dict[str, asyncio.Task[None]] = {}
        self._dismissed: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        if saved is None:
            self._save()

    @classmethod
    def restored(cls, session_id: str, folder: pathlib.Path, conn: acp.Client, outbox: Outbox,
                 store: SessionStore) -> SessionRunner:
        """The session ``session_id`` as it was saved, with a new guard (trust cleared, as after
        any restart: SG-A12); ``folder`` is where it works from now on."""
        return cls(session_id, folder, conn, outbox, store, store.load(session_id))

    def move_to(self, folder: pathlib.Path) -> None:
        """The session works in ``folder`` from now on; a change of folder clears the guard's
        trust (SG-A12: a successful working-directory change)."""
        if folder != self.folder:
            self.folder = folder
            self.step(se.LifecycleChanged(
                kind=guard.TrustClearingKind.WORKING_DIRECTORY_CHANGED))

    def replay(self) -> None:
        """Send the saved conversation as ``session/update`` notifications (``session/load``)."""
        for update in wire.replayed(self._store.log(self.session_id), self.folder):
            self._send(update)

    # --- what the client asks ---------------------------------------------------------------

    async def prompt(self, text: str) -> at.TurnOutcome:
        """Run ``text`` as a turn (queued in the session's FIFO if one runs); its outcome."""
        number, self._next_turn = self._next_turn, self._next_turn + 1
        turn_id, message_id = f"t{number}", f"m{number}"
        future: asyncio.Future[at.TurnOutcome] = asyncio.get_running_loop().create_future()
        self._turns[turn_id] = future
        self._prompts[turn_id] = text
        try:
            if self.state.phase is se.SessionPhase.IDLE:
                self.step(at.PromptSubmitted(turn_id=turn_id, message_id=message_id, text=text))
            else:
                self.step(se.PromptQueued(prompt_id=turn_id, message_id=message_id, text=text))
            return await future
        finally:
            self._turns.pop(turn_id, None)

    async def continue_turn(self) -> at.TurnOutcome:
        """Continue the turn that ended with a resumable error (``ContinueTurn``, TL-11); its
        outcome. Raises ``LookupError`` when there is none to continue."""
        turn_id = self.state.turn.turn_id
        if self.state.turn.resume_phase is None or not turn_id:
            raise LookupError("no turn to continue: the last turn did not end with a "
                                   "resumable error, or it was withdrawn")
        future: asyncio.Future[at.TurnOutcome] = asyncio.get_running_loop().create_future()
        self._turns[turn_id] = future
        self._continued.add(turn_id)
        try:
            self.step(at.ContinueTurn(turn_id=turn_id))
            return await future
        finally:
            self._turns.pop(turn_id, None)

    def stop(self) -> None:
        """``session/cancel``: the user pressed Stop."""
        self._answer(at.StopPressed())

    def lead(self, lead_id: str, text: str) -> dict[str, Any]:
        """A Lead typed while the agent works; the session's answer, at once. Raises
        :class:`agentturn.ProtocolError` (nothing changed) for a lead id already pending."""
        self._leads_asked.add(lead_id)
        try:
            self.step(at.LeadSubmitted(chat_id=self.state.config.chat_id, lead_id=lead_id,
                                       text=text))
        finally:
            self._leads_asked.discard(lead_id)
        return self._lead_replies.pop(lead_id, {"accepted": False, "reason": "unanswered"})

    # --- the loop ---------------------------------------------------------------------------

    def step(self, event: at.Event) -> tuple[at.Command, ...]:
        """Reduce ``event``, carry out its commands, then every answer given at once, in order.

        Raises the session's :class:`agentturn.ProtocolError` for ``event`` itself (the state
        is unchanged); a refused answer of the agent's own is logged (it would be a bug here).
        """
        if self._busy:
            raise RuntimeError("SessionRunner.step is not re-entrant")
        self._busy = True
        try:
            commands: tuple[at.Command, ...]
            self.state, commands = se.reduce(self.state, event)
            self._carry_out_all(event, commands)
            while self._answers:
                answer = self._answers.popleft()
                try:
                    self.state, more = se.reduce(self.state, answer)
                except at.ProtocolError:
                    log.exception("the session refused the agent's answer %r", answer)
                    continue
                self._carry_out_all(answer, more)
            if self.state.phase is se.SessionPhase.IDLE:
                self._idle_state = self.state
            self._save()
        finally:
            self._busy = False
        return commands

    def _save(self) -> None:
        """The last idle state and the id counters to disk (the counters as they are now, so
        an agent killed mid-turn never hands out that turn's ids again); a failure is logged
        (the live session goes on)."""
        idle = self._idle_state
        resumable = idle.turn.turn_id if idle.turn.resume_phase is not None else None
        try:
            self._store.save(self.session_id, SavedSession(
                cwd=str(self.folder), state=idle, next_turn=self._next_turn,
                next_call=self._next_call,
                prompts={turn_id: text for turn_id, text in self._prompts.items()
                         if turn_id == resumable}))
        except OSError:
            log.exception("saving session %s failed", self.session_id)

    def _log(self, line: Any) -> None:
        try:
            self._store.append(self.session_id, line)
        except OSError:
            log.exception("writing the log of session %s failed", self.session_id)

    def _carry_out_all(self, event: at.Event, commands: tuple[at.Command, ...]) -> None:
        log.debug("%s -> %s", event, commands)
        for command in commands:
            self._carry_out(command)
        self._announce_calls()

    def _announce_calls(self) -> None:
        """A saved response's calls go out after the response's text, which the session
        publishes right after the save, in the same step; always before their own updates."""
        for call in self._announce:
            self._send(wire.tool_call_started(call, self.folder))
        self._announce.clear()

    def _answer(self, event: at.Event) -> None:
        """An answer that arrives later (a task, a timer, the client): one ``step``."""
        try:
            self.step(event)
        except at.ProtocolError as error:
            log.warning("the session refused %r: %s", event, error)

    def _timer_fired(self, key: str) -> None:
        self._timers.pop(key, None)
        self._answer(se.TimerFired(key=key))

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send(self, update: Any) -> None:
        self._outbox.put(lambda: self._conn.session_update(session_id=self.session_id,
                                                           update=update))

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        self._outbox.put(lambda: self._conn.ext_notification(method, params))

    # --- carrying out -----------------------------------------------------------------------

    def _carry_out(self, command: at.Command) -> None:
        match command:
            case at.Persist():
                for record in command.records:
                    self._keep(record)
                self._answers.append(at.Persisted(key=command.key))
            case at.SaveLead():
                self._lead_texts[command.lead_id] = command.record.text
                self._keep(command.record)
                self._answers.append(at.LeadSaved(lead_id=command.lead_id))
            case at.RequestModelStream():
                self._model(command)
            case at.AskPermission():
                call = command.call
                self._outbox.put(lambda: self._start_asking(call))
            case at.ExecuteTool():
                self._announce_calls()
                self._send(wire.tool_call_running(command.call.call_id))
                stop = self._stops[command.call.call_id] = asyncio.Event()
                self._spawn(self._run_tool(command.call, stop))
            case at.RequestTitle():
                prompt = self._prompts.get(self.state.turn.turn_id, "")
                self._answers.append(at.TitleGenerated(request_id=command.request_id,
                                                       title=_title_of(prompt)))
            case se.DrainMidTurnQueue():
                # Leads go to the session as they arrive: the agent holds none to hand over.
                self._answers.append(se.MidTurnDrained(drain_id=command.drain_id))
            case se.StartTimer():
                self._timers[command.key] = asyncio.get_running_loop().call_later(
                    command.seconds, self._timer_fired, command.key)
            case se.CancelTimer():
                timer = self._timers.pop(command.key, None)
                if timer is not None:
                    timer.cancel()
            case se.RunStopHooks():  # unreachable: stop_hooks=False; a hook that never blocks
                self._answers.append(se.StopHookDecided(run_id=command.run_id, block=False))
            case se.Publish():
                chunk = wire.published(command.entry)
                if chunk is not None:
                    text = getattr(chunk.content, "text", "")
                    self._log((chunk.message_id or "", text, chunk.field_meta))
                    self._send(chunk)
            case at.SetTitle():
                self._log(command.title)
                self._send(wire.title(command.title))
            case at.DismissPermission():
                self._dismiss(command.call_id)
            case at.CancelTool():
                running = self._stops.get(command.call_id)
                if running is not None:
                    running.set()
            case at.LeadAccepted():
                self._lead_replies[command.lead_id] = {"accepted": True}
            case at.ReturnDraft():
                reply = {"accepted": False, "reason": command.reason.value,
                         "message": command.message, "draft": command.draft}
                if command.lead_id in self._leads_asked:
                    self._lead_replies[command.lead_id] = reply
                else:
                    self._notify(DRAFT_RETURNED, {"sessionId": self.session_id,
                                                  "leadId": command.lead_id, **reply})
            case at.LeadUnapplied():
                self._notify(LEAD_UNAPPLIED, {"sessionId": self.session_id,
                                              "leadId": command.lead_id})
            case at.EndTurn():
                self._turn_ended(command)
            case se.PromptRefused():
                future = self._turns.get(command.prompt_id)
                if future is not None and not future.done():
                    future.set_exception(acp.RequestError.invalid_request(
                        {"reason": command.reason}))
            case _:
                # CancelStream (the scripted model has answered already), StaleAnswerIgnored,
                # follow-up suggestions, guard notices...: nothing to do, nothing on the wire.
                log.debug("no effect: %r", command)

    def _keep(self, record: at.Record) -> None:
        """Persist and SaveLead: the transcript; a response's calls and a result's end go out."""
        self.transcript.append(record)
        self._log(record)
        if isinstance(record, at.UserMessageRecord):
            self._last_user_text = record.text
        elif isinstance(record, at.ResponseRecord):
            self._announce.extend(record.tool_calls)
        else:
            self._results.append((record.name, record.status.value))
            self._announce_calls()
            self._send(wire.tool_call_ended(record, failed=record.call_id in self._failed_calls,
                                            permission=self._permission_notes.pop(
                                                record.call_id, None)))

    def _model(self, request: at.RequestModelStream) -> None:
        """The scripted model: it answers at once, from what it was given."""
        turn_id = self.state.turn.turn_id
        self._rounds[turn_id] = self._rounds.get(turn_id, 0) + 1
        reply = model.respond(model.Context(
            prompt=self._prompts.get(turn_id, ""), round=self._rounds[turn_id],
            leads=tuple(self._lead_texts[lead_id] for lead_id in request.lead_ids
                        if lead_id in self._lead_texts),
            after_guard_prompt=guard.is_guard_prompt(self._last_user_text),
            results=tuple(self._results), continued=turn_id in self._continued))
        self._results.clear()
        self._answers.append(at.StreamOpened(request_id=request.request_id))
        if reply.failure is not None:
            self._answers.append(at.StreamFailed(request_id=request.request_id,
                                                 error=reply.failure, network=True))
            return
        first, self._next_call = self._next_call, self._next_call + len(reply.calls)
        calls = tuple(at.ToolCall(call_id=f"call-{first + index}", name=call.name,
                                  arguments=json.dumps(call.arguments),
                                  needs_permission=call.needs_permission)
                      for index, call in enumerate(reply.calls))
        self._answers.append(at.StreamCompleted(request_id=request.request_id, text=reply.text,
                                                finish_reason=reply.finish_reason,
                                                tool_calls=calls))

    async def _run_tool(self, call: at.ToolCall, stop: asyncio.Event) -> None:
        result = await tools.run_tool(self.folder, call.name, call.arguments, stop)
        self._stops.pop(call.call_id, None)
        if result.error:
            self._failed_calls.add(call.call_id)
        if call.name == "todo_write" and isinstance(result.structured, dict):
            self._send(wire.plan(result.structured["todos"]))
        self._answer(at.ToolFinished(call_id=call.call_id, output=result.output,
                                     error=result.error, cancelled=result.cancelled,
                                     structured=result.structured))

    async def _start_asking(self, call: at.ToolCall) -> None:
        """Sent by the outbox, so the request follows the updates before it."""
        if call.call_id not in self._dismissed:
            task = asyncio.get_running_loop().create_task(self._ask(call))
            self._asking[call.call_id] = task

    async def _ask(self, call: at.ToolCall) -> None:
        try:
            response = await self._conn.request_permission(
                session_id=self.session_id, tool_call=wire.permission_subject(call, self.folder),
                options=list(wire.PERMISSION_OPTIONS))
            decision, why = wire.decision_of(response)
        except Exception as error:
            # Never an allow (TL-3, BR-4); and no session/cancel came, so not a cancel either:
            # the model is told the call was not permitted and the turn goes on.
            decision = at.PermissionDecision.DENY
            why = f"the permission request failed ({_brief(error)}): denied"
        self._asking.pop(call.call_id, None)
        if decision is not at.PermissionDecision.ALLOW:
            self._permission_notes[call.call_id] = why
            log.warning("permission for %s (%s): %s", call.call_id, call.name, why)
        self._answer(at.PermissionDecided(call_id=call.call_id, decision=decision))

    def _dismiss(self, call_id: str) -> None:
        """The session closed the dialog (Stop): the client's answer, if any, is not awaited."""
        self._dismissed.add(call_id)
        task = self._asking.pop(call_id, None)
        if task is not None:
            task.cancel()

    def _turn_ended(self, end: at.EndTurn) -> None:
        self._rounds.pop(end.turn_id, None)
        self._continued.discard(end.turn_id)
        if not end.outcome.resumable:  # a resumable turn's prompt is kept for its continuation
            self._prompts.pop(end.turn_id, None)
        self._results.clear()
        future = self._turns.get(end.turn_id)
        if future is not None and not future.done():
            future.set_result(end.outcome)
