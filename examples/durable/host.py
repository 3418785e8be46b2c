"""The session host: the ``agentturn.session`` loop, deterministic, with every effect behind a port.

:class:`SessionHost` is what runs inside the DBOS workflow. It holds the session state, an event
queue and a few counters, and it does nothing by itself: every effect goes through
:class:`Effects` (each method is one DBOS step in the durable engine, a plain call in the
reference runner) and all outside input through :class:`Inbox` (``DBOS.recv`` / ``DBOS.set_event``
in the engine). Given the same step results and the same input, it takes the same decisions in
the same order: that is what lets DBOS replay it.

Restarts
--------
Every step result carries the *boot id* of the process that ran the step. The first step of a
session (``start``) records it; when a later step reports another boot id, the process changed
in between (a crash and a recovery, or another worker taking the session over). The host then
feeds ``LifecycleChanged(kind=DAEMON_RESTART)``, queued just before that step's answer, so the
session clears the guard's trust (SG-A12), as the design asks after a daemon restart.

This interacts with replay in one way only, and deterministically. After a crash DBOS runs the
workflow again from its start: the steps that completed return their *recorded* results, boot
ids included, so the host takes exactly the decisions it took before and feeds no notice for
them (the notice of an earlier restart is derived from recorded results too, and is fed again
at the same place). The first step that really runs in the new process records the new boot
id: that is where the notice goes, and from then on it is part of the record as well. A
session killed twice gets two notices; a session that was never interrupted gets none.

A restart noticed while the guard's continuation is decided and its stream has not opened
(the guard ``CONTINUING``) drops that attempt: the guard forgets its chain (``NO_CHAIN``), and the
continuation's stream, already asked for, opens as an ordinary one (the attempt is never
committed, SG-B3). The host needs no special case for it.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn import trace

Json = dict[str, Any]

__all__ = ["IDLE_WAIT", "Effects", "Inbox", "SessionHost", "session_config"]

#: How long one wait for input lasts before the host waits again (seconds).
IDLE_WAIT = 3600.0
_RESTART = se.LifecycleChanged(kind=g.TrustClearingKind.DAEMON_RESTART)


class Effects(Protocol):
    """The steps. Every result holds ``"boot"``: the id of the process that ran the step."""

    def start(self) -> Json: ...
    def persist(self, seq: int, key: str, kind: str, records: list[Json]) -> Json: ...
    def model(self, request_id: str, lead_ids: list[str]) -> Json: ...
    def tool(self, call: Json) -> Json: ...
    def title(self, request_id: str) -> Json: ...
    def save_title(self, text: str) -> Json: ...
    def save_trace(self, lines: list[str]) -> Json: ...


class Inbox(Protocol):
    """Outside input and progress."""

    def poll(self) -> list[Json]:
        """Everything that has arrived, without waiting."""

    def wait(self, timeout: float) -> Json | None:
        """The next message, or None after ``timeout`` seconds."""

    def status(self, status: Json) -> None:
        """Publish where the session stands (a client waits on it)."""

    def publish(self, entries: list[Json]) -> None:
        """Send event-ring entries to live subscribers (a batch per wait)."""


def session_config(script: Json) -> se.SessionConfig:
    """The session's configuration: a daemon session, with the todo stop guard unless the
    script turns it off."""
    guard_on = bool(script.get("guard", True))
    return se.SessionConfig(
        chat_id=str(script.get("chat_id", "chat")),
        guard=g.GuardConfig(todo_stop_guard=guard_on, daemon=True),
        turn=at.TurnConfig(auto_title=bool(script.get("auto_title", True))))


def _plain(value: object) -> Json:
    """A record or tool call as JSON, with its class name."""
    data: Json = trace.converter().unstructure(value)
    return {"type": type(value).__name__, **data}


class SessionHost:
    """One session, run to its close. Build it, then :meth:`run` it."""

    def __init__(self, script: Json, effects: Effects, inbox: Inbox) -> None:
        self.script = script
        self.effects = effects
        self.inbox = inbox
        self.config = session_config(script)
        self.state = se.Session.create(self.config)
        #: Events to feed, in arrival order; ``True`` marks outside input (refusable).
        self.queue: deque[tuple[at.Event | Json, bool]] = deque()
        self.timers: dict[str, float] = {}
        self.dialogs: list[str] = []
        self.prompts = 0
        self.leads = 0
        self.inputs = 0
        self.seq = 0
        self.steps = 0
        self.boot: str | None = None
        self.restarts: list[int] = []
        self.title = ""
        self.outcomes: list[Json] = []
        self.notices: list[str] = []
        self.closed = False
        self.trace: list[tuple[at.Event, tuple[at.Command, ...]]] = []
        self.published: list[Json] = []

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> Json:
        """Feed events and carry out commands until the session closes; a summary."""
        self._observe(self.effects.start())
        while not self.closed:
            if self.queue:
                item, outside = self.queue.popleft()
                self._feed(item, outside)
            else:
                self._wait()
        lines = list(trace.write_trace("session", self.config, self.trace))
        self._observe(self.effects.save_trace(lines))
        self._flush()
        self.inbox.status(self._status(waiting=False))
        return {"title": self.title, "outcomes": self.outcomes, "notices": self.notices,
                "restarts": self.restarts, "inputs": self.inputs, "steps": self.steps}

    def _observe(self, result: Json) -> Json:
        """Count a step; notice a restart from its boot id (see the module docstring)."""
        self.steps += 1
        boot = str(result["boot"])
        if self.boot is not None and boot != self.boot and not self.closed:
            self.restarts.append(self.steps)
            self.queue.append((_RESTART, False))
        self.boot = boot
        return result

    def _flush(self) -> None:
        if self.published:
            self.inbox.publish(self.published)
            self.published = []

    def _wait(self) -> None:
        self._flush()
        self.inbox.status(self._status(waiting=True))
        timeout = min(self.timers.values()) if self.timers else IDLE_WAIT
        message = self.inbox.wait(timeout)
        if message is not None:
            self._accept(message)
        elif self.timers:
            key = min(self.timers, key=lambda k: self.timers[k])
            del self.timers[key]
            self.queue.append((se.TimerFired(key=key), False))

    def _poll(self) -> None:
        for message in self.inbox.poll():
            self._accept(message)

    def _accept(self, message: Json) -> None:
        self.inputs += 1
        self.queue.append((message, True))

    def _status(self, waiting: bool) -> Json:
        if self.closed:
            waiting_for = "nothing: closed"
        elif self.dialogs:
            waiting_for = f"a permission decision for {', '.join(self.dialogs)}"
        elif self.state.phase is se.SessionPhase.IDLE:
            waiting_for = "a prompt or a close"
        else:
            waiting_for = "input"
        return {"waiting": waiting, "inputs": self.inputs, "for": waiting_for,
                "phase": self.state.phase.value, "title": self.title,
                "outcomes": self.outcomes, "restarts": len(self.restarts),
                "closed": self.closed}

    # --- feeding -------------------------------------------------------------------------------

    def _feed(self, item: at.Event | Json, outside: bool) -> None:
        if isinstance(item, dict):
            converted = self._event_of(item)
            if converted is None:
                return
            item = converted
        try:
            self.state, commands = se.reduce(self.state, item)
        except at.ProtocolError as error:
            if not outside:
                raise  # the host's own answers are never refused: that is a bug
            self.notices.append(f"refused {type(item).__name__}: {error}")
            return
        self.trace.append((item, commands))
        if isinstance(item, at.PermissionDecided):
            self._close_dialog(item.call_id)
        for command in commands:
            self._carry_out(command)

    def _event_of(self, message: Json) -> at.Event | None:
        """Outside input as an event; ids are the host's (deterministic counters)."""
        kind = message.get("kind")
        try:
            if kind == "prompt":
                self.prompts += 1
                turn_id = f"t{self.prompts}"
                text = message["text"]
                if self.state.phase is se.SessionPhase.IDLE:
                    return at.PromptSubmitted(turn_id=turn_id, message_id=f"{turn_id}/user",
                                              text=text)
                return se.PromptQueued(prompt_id=turn_id, message_id=f"{turn_id}/user",
                                       text=text)
            if kind == "lead":
                self.leads += 1
                return at.LeadSubmitted(chat_id=self.config.chat_id, lead_id=f"lead-{self.leads}",
                                        text=message["text"])
            if kind == "permission":
                return at.PermissionDecided(
                    call_id=message["call_id"],
                    decision=at.PermissionDecision(message["decision"]))
            if kind == "stop":
                return at.StopPressed()
            if kind == "close":
                return se.CloseRequested()
        except (at.FieldError, ValueError, KeyError) as error:
            self.notices.append(f"refused input {message!r}: {error}")
            return None
        self.notices.append(f"refused input {message!r}: unknown kind")
        return None

    # --- carrying out --------------------------------------------------------------------------

    def _carry_out(self, command: at.Command) -> None:
        answer = self.queue.append
        if isinstance(command, at.Persist | at.SaveLead):
            records = command.records if isinstance(command, at.Persist) else (command.record,)
            kind = "persist" if isinstance(command, at.Persist) else "lead"
            self.seq += 1
            self._observe(self.effects.persist(self.seq, command.answer_id, kind,
                                               [_plain(r) for r in records]))
            answer((at.Persisted(key=command.key) if isinstance(command, at.Persist)
                    else at.LeadSaved(lead_id=command.lead_id), False))
        elif isinstance(command, at.RequestModelStream):
            reply = self._observe(self.effects.model(command.request_id, list(command.lead_ids)))
            request_id = command.request_id
            if reply.get("error"):
                answer((at.StreamFailed(request_id=request_id, error=str(reply["error"]),
                                        network=bool(reply.get("network"))), False))
                return
            answer((at.StreamOpened(request_id=request_id), False))
            calls = tuple(at.ToolCall(**call) for call in reply.get("tool_calls", ()))
            answer((at.StreamCompleted(request_id=request_id, text=str(reply.get("text", "")),
                                       finish_reason=str(reply.get("finish_reason", "end_turn")),
                                       tool_calls=calls), False))
        elif isinstance(command, at.ExecuteTool):
            result = self._observe(self.effects.tool(_plain(command.call)))
            self._poll()  # a Lead typed while the tool ran arrives before its result
            answer((at.ToolFinished(call_id=command.call.call_id, output=str(result["output"]),
                                    error=bool(result.get("error")),
                                    structured=result.get("structured")), False))
        elif isinstance(command, at.RequestTitle):
            named = self._observe(self.effects.title(command.request_id))
            answer((at.TitleGenerated(request_id=command.request_id, title=named["title"]), False))
        elif isinstance(command, at.SetTitle):
            self._observe(self.effects.save_title(command.title))
            self.title = command.title
        elif isinstance(command, at.AskPermission):
            self.dialogs.append(command.call.call_id)  # shown by the status at the next wait
        elif isinstance(command, at.DismissPermission):
            self._close_dialog(command.call_id)
            self.notices.append(f"permission dialog for {command.call_id} dismissed")
        elif isinstance(command, se.DrainMidTurnQueue):
            self._poll()  # this client keeps no mid-turn messages: Leads come as Leads
            answer((se.MidTurnDrained(drain_id=command.drain_id), False))
        elif isinstance(command, se.StartTimer):
            self.timers[command.key] = command.seconds
        elif isinstance(command, se.CancelTimer):
            self.timers.pop(command.key, None)
        elif isinstance(command, se.RunStopHooks):
            answer((se.StopHookDecided(run_id=command.run_id, block=False), False))
        elif isinstance(command, se.Publish):
            self.published.append(_plain(command.entry))  # sent at the next wait, in one batch
        elif isinstance(command, at.EndTurn):
            outcome = command.outcome
            self.outcomes.append({"turn_id": command.turn_id, "kind": outcome.kind.value,
                                  "message": outcome.message})
        elif isinstance(command, se.CloseSession):
            self.closed = True
            self.notices.append(f"closed: {command.reason}")
        elif isinstance(command, at.ReturnDraft):
            self.notices.append(f"draft {command.lead_id} back ({command.reason.value}): "
                                f"{command.draft}")
        elif isinstance(command, se.PromptRefused):
            self.notices.append(f"prompt {command.prompt_id} handed back: {command.text}")
        elif isinstance(command, at.LeadUnapplied):
            self.notices.append(f"{command.lead_id} saved, not applied")
        elif isinstance(command, se.Warn):
            self.notices.append(f"warning: {command.text}")
        # The rest only informs (LeadAccepted, CancelStream, CancelTool, StaleAnswerIgnored,
        # follow-up suggestions, ...): every step here is synchronous, so nothing is left to
        # cancel when a cancel arrives; the trace keeps them all.

    def _close_dialog(self, call_id: str) -> None:
        if call_id in self.dialogs:
            self.dialogs.remove(call_id)
