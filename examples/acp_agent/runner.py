"""One ACP session on :class:`agentturn.aio.SessionDriver`: the driver runs the loop, this module
holds the agent's effects.

Theory of operation
-------------------
A :class:`SessionRunner` owns one :class:`agentturn.aio.SessionDriver` (a daemon session with
the todo stop guard on and no Stop hooks), run in a task of its own for as long as the agent
serves (:meth:`SessionRunner.start`). The driver reduces every event, starts a task per awaited
answer, cancels what the session cancels, runs the timers, and turns a raising effect into its
failure event; the runner gives it the agent's effects and takes its notices:

* ``persist`` / ``save_lead``: the in-memory transcript and the session's log on disk; a saved
  response's calls go out as ``tool_call`` (``pending``), a tool result as its
  ``tool_call_update``;
* ``model``: the scripted model, its reply as OpenAI Chat Completions chunks (the driver's
  accumulator reads them); ``review``: which of those calls need permission (the script says);
* ``permission``: ``session/request_permission``, sent after every update before it;
* ``tool``: the tools, stopped by the driver's :class:`agentturn.aio.StopSignal`;
* ``title``: the prompt's first words;
* the notices (``Publish``, ``SetTitle``, the Lead's answers, ``EndTurn``, ``PromptRefused``)
  become what the client is sent, or answer the request waiting for them.

What the client sees goes through one :class:`Outbox`, sent in the order the session produced
it, so a permission request follows the tool call it is about and a prompt's response is sent
only after everything its turn produced.

What the session persists goes to a :class:`store.SessionStore` as well as to the in-memory
transcript, with every message chunk the client was sent and the title; the last idle state is
saved with the id counters whenever the session is idle after a notice, and the counters as
soon as they move (so an agent killed mid-turn never hands out that turn's ids again).
:meth:`SessionRunner.replay` sends that log back to a client as ``session/update``
notifications (``session/load``); a runner made from a saved session
(:meth:`SessionRunner.restored`) starts from the saved state with a new guard.

Rules this module keeps: every decision is the session's (the runner only answers what it is
asked, with what it has); a permission answer is an allow only when the client chose the allow
option, a cancel only when the client answered ``cancelled`` (or the session dismissed the
dialog: the driver cancels the request), and a deny otherwise (a failed request, an answer that
does not read), logged with what came.

Loop-and-glue lines (code lines, no blank, comment or docstring line, that drive the reducer
rather than do an effect's work), counted by hand: **159 before** the driver (``step`` and its
queue of answers, the re-entrance guard, the command ``match`` with every answering event built
by hand, ``StreamOpened``, the tool, permission and timer tasks and their cancelling), **98
after** (the driver's task and construction, the notice sink, sending input and waiting for a
turn's end, the restored state, the reply as wire chunks). All code lines of this file: 348
before, 297 after (README.md has the breakdown).
"""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import acp
import scripted_model as model
import tools
import wire
from store import SavedSession, SessionStore

import agentturn as at
from agentturn import aio, guard
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


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class SessionRunner:
    """One ACP session: its session driver, and the effects the session asks for."""

    def __init__(self, session_id: str, folder: pathlib.Path, conn: acp.Client,
                 outbox: Outbox, store: SessionStore,
                 saved: SavedSession | None = None) -> None:
        self.session_id = session_id
        #: Where the tools write (absolute).
        self.folder = folder
        state = saved.state if saved is not None else se.Session.create(se.SessionConfig(
            chat_id=session_id,
            guard=guard.GuardConfig(todo_stop_guard=True, daemon=True),
            stop_hooks=False))
        self._store = store
        #: The state as of the last notice that left the session idle: what is saved.
        self._idle_state = state
        #: The in-memory transcript: every record the session had persisted, in order.
        self.transcript: list[at.Record] = []
        self._conn = conn
        self._outbox = outbox
        self._next_turn = saved.next_turn if saved is not None else 1
        self._next_call = saved.next_call if saved is not None else 1
        self._turns: dict[str, asyncio.Future[at.TurnOutcome]] = {}
        self._prompts: dict[str, str] = dict(saved.prompts) if saved is not None else {}
        self._continued: set[str] = set()
        self._permission_notes: dict[str, str] = {}
        self._needs_permission: dict[str, bool] = {}
        self._rounds: dict[str, int] = {}
        self._last_user_text = ""
        self._results: list[tuple[str, str]] = []
        self._lead_texts: dict[str, str] = {}
        self._leads_asked: set[str] = set()
        self._failed_calls: set[str] = set()
        self._driver = aio.SessionDriver(state.config, aio.Effects(
            persist=self._persist, model=self._model, review=self._review,
            permission=self._permission, tool=self._tool, save_lead=self._save_lead,
            title=self._title), max_output_tokens=None, on_notice=self._on_notice, state=state)
        self._task: asyncio.Task[None] | None = None
        if saved is None:
            self._save()

    @classmethod
    def restored(cls, session_id: str, folder: pathlib.Path, conn: acp.Client, outbox: Outbox,
                 store: SessionStore) -> SessionRunner:
        """The session ``session_id`` as it was saved, with a new guard (trust cleared, as after
        any restart: SG-A12); ``folder`` is where it works from now on."""
        return cls(session_id, folder, conn, outbox, store, store.load(session_id))

    async def start(self) -> SessionRunner:
        """Run the session's driver in a task of its own, until the agent ends."""
        running = asyncio.get_running_loop().create_future()

        async def run() -> None:
            async with self._driver:
                running.set_result(None)
                await asyncio.Event().wait()  # the driver lives as long as the agent

        self._task = asyncio.get_running_loop().create_task(run())
        await running
        return self

    @property
    def state(self) -> se.SessionState:
        """The session's state after the driver's last step."""
        return self._driver.state

    async def move_to(self, folder: pathlib.Path) -> None:
        """The session works in ``folder`` from now on; a change of folder clears the guard's
        trust (SG-A12: a successful working-directory change)."""
        if folder != self.folder:
            self.folder = folder
            await self._driver.send(se.LifecycleChanged(
                kind=guard.TrustClearingKind.WORKING_DIRECTORY_CHANGED))
            self._save_if_idle()

    def replay(self) -> None:
        """Send the saved conversation as ``session/update`` notifications (``session/load``)."""
        for update in wire.replayed(self._store.log(self.session_id), self.folder):
            self._send(update)

    # --- what the client asks ---------------------------------------------------------------

    async def prompt(self, text: str) -> at.TurnOutcome:
        """Run ``text`` as a turn (queued in the session's FIFO if one runs); its outcome."""
        number, self._next_turn = self._next_turn, self._next_turn + 1
        turn_id, message_id = f"t{number}", f"m{number}"
        self._prompts[turn_id] = text
        self._save()
        if self.state.phase is se.SessionPhase.IDLE:
            event: at.Event = at.PromptSubmitted(turn_id=turn_id, message_id=message_id,
                                                 text=text)
        else:
            event = se.PromptQueued(prompt_id=turn_id, message_id=message_id, text=text)
        return await self._run(turn_id, event)

    async def continue_turn(self) -> at.TurnOutcome:
        """Continue the turn that ended with a resumable error (``ContinueTurn``, TL-11); its
        outcome. Raises ``LookupError`` when there is none to continue."""
        turn_id = self.state.turn.turn_id
        if self.state.turn.resume_phase is None or not turn_id:
            raise LookupError("no turn to continue: the last turn did not end with a "
                              "resumable error, or it was withdrawn")
        self._continued.add(turn_id)
        return await self._run(turn_id, at.ContinueTurn(turn_id=turn_id))

    async def _run(self, turn_id: str, event: at.Event) -> at.TurnOutcome:
        future: asyncio.Future[at.TurnOutcome] = asyncio.get_running_loop().create_future()
        self._turns[turn_id] = future
        try:
            await self._driver.send(event)
            return await future
        finally:
            self._turns.pop(turn_id, None)

    def stop(self) -> None:
        """``session/cancel``: the user pressed Stop."""
        self._driver.send_nowait(at.StopPressed())

    async def lead(self, lead_id: str, text: str) -> dict[str, Any]:
        """A Lead typed while the agent works; the session's answer, at once. Raises
        :class:`agentturn.ProtocolError` (nothing changed) for a lead id already pending."""
        self._leads_asked.add(lead_id)
        try:
            commands = await self._driver.send(at.LeadSubmitted(
                chat_id=self.state.config.chat_id, lead_id=lead_id, text=text))
        finally:
            self._leads_asked.discard(lead_id)
        for command in commands:
            if isinstance(command, at.LeadAccepted) and command.lead_id == lead_id:
                return {"accepted": True}
            if isinstance(command, at.ReturnDraft) and command.lead_id == lead_id:
                return {"accepted": False, "reason": command.reason.value,
                        "message": command.message, "draft": command.draft}
        return {"accepted": False, "reason": "unanswered"}

    # --- the notices ------------------------------------------------------------------------

    def _on_notice(self, notice: at.Notice) -> None:
        match notice:
            case se.Publish():
                chunk = wire.published(notice.entry)
                if chunk is not None:
                    text = getattr(chunk.content, "text", "")
                    self._log((chunk.message_id or "", text, chunk.field_meta))
                    self._send(chunk)
            case at.SetTitle():
                self._log(notice.title)
                self._send(wire.title(notice.title))
            case at.ReturnDraft() if notice.lead_id not in self._leads_asked:
                self._notify(DRAFT_RETURNED, {
                    "sessionId": self.session_id, "leadId": notice.lead_id, "accepted": False,
                    "reason": notice.reason.value, "message": notice.message,
                    "draft": notice.draft})
            case at.LeadUnapplied():
                self._notify(LEAD_UNAPPLIED, {"sessionId": self.session_id,
                                              "leadId": notice.lead_id})
            case at.EndTurn():
                self._turn_ended(notice)
            case se.PromptRefused():
                future = self._turns.get(notice.prompt_id)
                if future is not None and not future.done():
                    future.set_exception(acp.RequestError.invalid_request(
                        {"reason": notice.reason}))
            case _:
                log.debug("no effect: %r", notice)
        self._save_if_idle()

    def _turn_ended(self, end: at.EndTurn) -> None:
        self._rounds.pop(end.turn_id, None)
        self._continued.discard(end.turn_id)
        if not end.outcome.resumable:  # a resumable turn's prompt is kept for its continuation
            self._prompts.pop(end.turn_id, None)
        self._results.clear()
        future = self._turns.get(end.turn_id)
        if future is not None and not future.done():
            future.set_result(end.outcome)

    # --- saving and sending -----------------------------------------------------------------

    def _save_if_idle(self) -> None:
        if self.state.phase is se.SessionPhase.IDLE:
            self._idle_state = self.state
            self._save()

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

    def _send(self, update: Any) -> None:
        self._outbox.put(lambda: self._conn.session_update(session_id=self.session_id,
                                                           update=update))

    def _notify(self, method: str, params: dict[str, Any]) -> None:
        self._outbox.put(lambda: self._conn.ext_notification(method, params))

    # --- the effects ------------------------------------------------------------------------

    async def _persist(self, command: at.Persist) -> None:
        """The transcript; a response's calls and a result's end go out."""
        for record in command.records:
            self._keep(record)

    async def _save_lead(self, command: at.SaveLead) -> None:
        self._lead_texts[command.lead_id] = command.record.text
        self._keep(command.record)

    def _keep(self, record: at.Record) -> None:
        self.transcript.append(record)
        self._log(record)
        if isinstance(record, at.UserMessageRecord):
            self._last_user_text = record.text
        elif isinstance(record, at.ResponseRecord):
            for call in record.tool_calls:
                self._send(wire.tool_call_started(call, self.folder))
        else:
            self._results.append((record.name, record.status.value))
            self._send(wire.tool_call_ended(record, failed=record.call_id in self._failed_calls,
                                            permission=self._permission_notes.pop(
                                                record.call_id, None)))

    async def _model(self, request: at.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
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
        if reply.failure is not None:
            yield {"object": "chat.completion.chunk", "choices": []}  # the stream opened
            raise aio.StreamError(reply.failure, network=True)
        first, self._next_call = self._next_call, self._next_call + len(reply.calls)
        if reply.calls:
            self._save()
        calls = []
        for index, call in enumerate(reply.calls):
            call_id = f"call-{first + index}"
            self._needs_permission[call_id] = call.needs_permission
            calls.append({"index": index, "id": call_id, "type": "function", "function": {
                "name": call.name, "arguments": json.dumps(call.arguments)}})
        yield _chunk({"content": reply.text, **({"tool_calls": calls} if calls else {})},
                     reply.finish_reason)

    def _review(self, call: at.ToolCall) -> aio.CallReview:
        return aio.CallReview(needs_permission=self._needs_permission.pop(call.call_id, False))

    async def _title(self, command: at.RequestTitle) -> str:
        return _title_of(self._prompts.get(self.state.turn.turn_id, ""))

    async def _tool(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        call = command.call
        self._send(wire.tool_call_running(call.call_id))
        result = await tools.run_tool(self.folder, call.name, call.arguments, stop)
        if result.error:
            self._failed_calls.add(call.call_id)
        if call.name == "todo_write" and isinstance(result.structured, dict):
            self._send(wire.plan(result.structured["todos"]))
        return aio.ToolResult(output=result.output, error=result.error,
                              cancelled=result.cancelled, structured=result.structured)

    async def _permission(self, command: at.AskPermission) -> at.PermissionDecision:
        """``session/request_permission``, once every update before it has been sent; the
        driver cancels it when the session dismisses the dialog."""
        call = command.call
        sent = asyncio.get_running_loop().create_future()

        async def reached() -> None:
            if not sent.done():
                sent.set_result(None)

        self._outbox.put(reached)
        await sent
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
        if decision is not at.PermissionDecision.ALLOW:
            self._permission_notes[call.call_id] = why
            log.warning("permission for %s (%s): %s", call.call_id, call.name, why)
        return decision
