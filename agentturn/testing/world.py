"""The spec kit's world: an engine, storage, tools, a user and a client that record what really
happened to them, and the rules that judge it.

Theory of operation
-------------------
:class:`World` is what a host's adapter talks to inside :class:`~agentturn.testing.SessionSpec`
(it is a :class:`~agentturn.testing.WorldLike`). Nothing in it answers at once but storage: a
request to the engine, a tool run, a permission dialog, a naming request, a late drain reply or
a slow Stop hook is a *job* the world holds, and each step of a job (the stream opens, it ends,
the tool finishes, the user clicks) is a separate move of the machine, after which the machine
carries out the job's command again so the adapter reports what happened. That is what lets
Stop land while a tool runs, a Lead land while a stream is open, and the world see how many
streams are open at once.

The world keeps the truth: which calls the session asked to run and in what order, which really
ran, what each engine request carried, what storage holds. Every rule is checked where the
world sees the fact, and a broken one is *recorded* in :attr:`World.violations` (never raised:
an exception inside adapter code could be swallowed by an adapter that turns tool errors into
results, as real hosts do); the machine asserts the list is empty after every move. Each rule
has a name and the requirement it checks, and both are in the message:

=====================  ========  ============================================================
rule                   IDs       what the world checks
=====================  ========  ============================================================
``tools-as-asked``     TL-4      a tool runs only after its ``ExecuteTool``, in the order
                                 asked, one at a time; it is reported only once it finished
                                 (never skipped, never early)
``permission``         TL-3      a call that needs permission runs only after the user allowed
``cut-off``            TL-9      no call of a response that did not end normally ever runs
``engine-input``       LD-8      a request holds only saved user text, each saved Lead at most
                       TL-5      once and only from the request that gives it on, every Lead
                       TL-9      the request gives, and no call of a cut-off response
``one-stream``         TT-3      at most one model stream (generation or naming) is open
``storage``            TL-5      storage holds each record once; what the session saw
                       LD-7      acknowledged is stored, in the acknowledged order
``cancel``             TL-8      after ``CancelTool`` the adapter asks the world to stop the
                                 tool; the world's tool decides (a write is never stopped
                                 part-way), and the one result, given once the tool ended, says
                                 cancelled exactly when it was stopped
``one-retry``          TL-6      after a malformed response the engine gets at most one retry
=====================  ========  ============================================================

The machine adds the rules it sees from the session's side (``answered-once``,
``liveness``, ``no-text-lost``, ``never-stuck``, ``hard-bound``, ``accepted``; see
:mod:`agentturn.testing.machine`).

Every choice the world makes goes through ``choose``, which the machine draws from hypothesis;
the first option of each choice is the plainest one, so a failure shrinks to a plain world.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from .. import commands as c
from .. import events as e
from .._base import Event
from ..records import (
    ResponseRecord,
    ToolCall,
    UserMessageRecord,
)
from ..session import vocabulary as sv
from .adapter import EngineFailure, EngineResponse, hooks_do_not_block

__all__ = ["RAW_REASONS", "TOOLS", "WRITES", "Job", "World"]

#: Raw finish reasons as Anthropic-style and OpenAI-style engines send them, and whether each
#: means the response ended normally (the world's ground truth).
RAW_REASONS: dict[str, bool] = {"end_turn": True, "tool_use": True, "stop": True,
                                "tool_calls": True, "max_tokens": False, "length": False,
                                "refusal": False}
TOOLS = ("read_file", "write_file", "todo_write")
#: The tools that change files: never stopped part-way, whatever ``CancelTool`` asks (the
#: ``CancelTool`` contract: the host decides, and a half-done write is never what Stop means).
WRITES = frozenset({"write_file"})

#: A job's stages. A stream: requested -> open -> ended; a tool: running -> ended (or stopped).
REQUESTED, OPEN, ENDED = "requested", "open", "ended"


@attrs.define
class Job:
    """One piece of work the world holds for a command the adapter carried out."""

    command: Any
    stage: str = REQUESTED
    answer: Any = None
    #: The adapter was given the job's final answer.
    delivered: bool = False


class World:
    """The outside world the machine controls (see the module docstring)."""

    def __init__(self, choose: Callable[[Sequence[Any]], Any] | None = None) -> None:
        self.choose = choose or (lambda options: options[0])  # the plainest world by default
        #: What the adapter sends the engine for a request (the machine plugs the adapter's
        #: ``transcript`` in; ``None``: the engine-input rule is not checked).
        self.transcript_of: Callable[[c.RequestModelStream], Sequence[Any]] | None = None
        self.violations: list[str] = []
        self.saved: list[Any] = []  # every record storage holds, in order
        self.streams: dict[str, Job] = {}  # engine requests and naming requests, by id
        self.tools: dict[str, Job] = {}  # tool runs, by call id
        self.dialogs: dict[str, Job] = {}  # permission dialogs, by call id
        self.late: dict[str, Job] = {}  # drain replies and Stop-hook verdicts not given yet
        self.asked: list[str] = []  # call ids the session sent ExecuteTool for, in order
        self.started: list[str] = []  # call ids the world started, in order
        self.cut_off: set[str] = set()  # calls of responses that did not end normally
        self.unparsed: set[str] = set()  # calls of a response whose format was malformed
        self.allowed: set[str] = set()  # calls the user allowed
        self.cancel_sent: set[str] = set()  # calls the session sent CancelTool for
        self.cancel_heard: set[str] = set()  # calls the adapter asked the world to stop
        self.stopped: set[str] = set()  # calls the world stopped
        self.given_leads: set[str] = set()  # Lead ids some request gave the model
        self.lead_messages: dict[str, str] = {}  # a Lead record's message id -> Lead id
        self.malformed_streak = 0  # malformed responses in a row (TL-6)
        self.retries = 0  # engine requests after a malformed response, in a row
        self.requests = 0  # engine requests received
        self.client_holds: list[str] = []  # queued prompts the client said it holds, unsent
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def chance(self, times: int, out_of: int) -> bool:
        """``True`` ``times`` in ``out_of`` (``False``, the plain answer, first)."""
        return bool(self.choose([False] * (out_of - times) + [True] * times))

    def violate(self, rule: str, ids: str, text: str) -> None:
        self.violations.append(f"[{rule}, {ids}] {text}")

    # --- storage --------------------------------------------------------------------------------

    def store(self, records: Sequence[Any]) -> bool:
        """Save records; ``False`` when storage fails (about one write in six)."""
        if self.chance(1, 6):
            return False
        for record in records:
            if any(record == stored for stored in self.saved):
                self.violate("storage", "TL-5", f"storage already holds {record!r}: the user's "
                             "history shows it twice")
        self.saved.extend(records)
        return True

    def history(self) -> Sequence[Any]:
        return tuple(self.saved)

    # --- the engine -----------------------------------------------------------------------------

    def open_streams(self) -> list[str]:
        return [key for key, job in self.streams.items() if job.stage != ENDED]

    def _new_stream(self, key: str, command: Any) -> None:
        others = self.open_streams()
        if others:
            self.violate("one-stream", "TT-3", f"{key} opened while {others[0]} is still "
                         "streaming: model requests (naming included) run one at a time")
        self.streams[key] = Job(command)

    def stream(self, request: c.RequestModelStream | None = None) -> EngineResponse | None:
        """The engine's side of a request: ``None`` until the stream opens, then a response
        that is ``streaming``, then the complete response or a failure."""
        if request is None:
            return None
        job = self.streams.get(request.request_id)
        if job is None:
            self._new_stream(request.request_id, request)
            self._received(request)
            job = self.streams[request.request_id]
            # The plainest engine answers at once; most of the time the open and the end are
            # moves of their own (so a Stop or a Lead can land while the stream is open).
            when = self.choose(["now", "open", "later", "open"])
            if when == "later":
                return None  # the budgeting step and the open come with a later move
            job.stage = OPEN
            if when == "now":
                self.advance_stream(request.request_id)
                job.delivered = True
                answer_now: EngineResponse = job.answer
                return answer_now
        if job.stage == REQUESTED:
            return None
        if job.stage == OPEN:
            return EngineResponse(streaming=True)
        if job.answer is None:  # cancelled by the session: the engine sends nothing more
            return None
        if job.delivered:  # the adapter sends an answered request again, by itself
            self.violate("one-retry", "TL-6, TL-11", f"the adapter sent {request.request_id} to "
                         "the engine again by itself: retries are the session's (one corrective "
                         "retry after a malformed format, a ContinueTurn after an error)")
            self._new_stream(request.request_id, request)
            self._received(request)
            return None
        job.delivered = True
        answer: EngineResponse = job.answer
        return answer

    def _received(self, request: c.RequestModelStream) -> None:
        """The engine-input and one-retry rules, on what the engine received."""
        self.requests += 1
        if self.malformed_streak:
            self.retries += 1
            if self.retries > 1:
                self.violate("one-retry", "TL-6", f"{request.request_id} is retry number "
                             f"{self.retries} after a malformed response: one corrective retry "
                             "is all the engine may get")
        self.given_leads.update(request.lead_ids)
        if self.transcript_of is None:
            return
        sent = tuple(self.transcript_of(request))
        rid = request.request_id
        leads_seen: dict[str, int] = {}
        for record in sent:
            if isinstance(record, UserMessageRecord):
                if not any(record == stored for stored in self.saved):
                    self.violate("engine-input", "LD-8, TL-5", f"{rid} sent the model user text "
                                 f"storage does not hold: {record.text!r}")
                lead = self.lead_messages.get(record.message_id)
                if lead is not None:
                    leads_seen[lead] = leads_seen.get(lead, 0) + 1
                    if lead not in self.given_leads:
                        self.violate("engine-input", "LD-8", f"{rid} sent Lead {lead} before a "
                                     "request gave it (its save not acknowledged yet)")
            if isinstance(record, ResponseRecord):
                # A cut-off call never reaches the model again: its arguments may be incomplete
                # JSON a server rejects (ResponseRecord.completes_normally, TL-9).
                ran_off = [call.call_id for call in record.tool_calls
                           if call.call_id in self.cut_off]
                if ran_off:
                    self.violate("engine-input", "TL-9", f"{rid} sent the model the calls "
                                 f"{ran_off} of a response that did not end normally")
        for lead, count in leads_seen.items():
            if count > 1:
                self.violate("engine-input", "LD-16", f"{rid} sent Lead {lead} {count} times")
        for lead in request.lead_ids:
            if lead not in leads_seen:
                self.violate("engine-input", "LD-9", f"{rid} gives Lead {lead} but the model "
                             "never received its text")

    def advance_stream(self, key: str) -> None:
        """The next step of an engine or naming request: it opens (or its budgeting step or
        the API fails), then it ends (or the network fails)."""
        job = self.streams[key]
        if isinstance(job.command, c.RequestTitle):
            job.stage, job.answer = ENDED, self.choose(["A title", "Fix the parser"])
            return
        if job.stage == REQUESTED:
            failure = self.choose([None] * 5 + list(EngineFailure)[:3])
            if failure is None:
                job.stage = OPEN
            else:
                job.stage, job.answer = ENDED, EngineResponse(failure=failure)
            return
        job.stage = ENDED
        if self.chance(1, 14):
            job.answer = EngineResponse(failure=self.choose([EngineFailure.NETWORK,
                                                             EngineFailure.API]))
            return
        job.answer = self.response()

    def response(self) -> EngineResponse:
        """A complete response, drawn."""
        count = self.choose([0, 0, 1, 1, 2, 3])
        calls = tuple(ToolCall(call_id=self.fresh("c"), name=self.choose(TOOLS),
                               arguments=self.choose(["{}", '{"path": "a.py"}']),
                               needs_permission=self.chance(1, 3))
                      for _ in range(count))
        reason = self.choose(["tool_use", "tool_calls"] if calls else ["end_turn", "stop"])
        if self.chance(1, 6):
            reason = self.choose(["max_tokens", "length", "refusal"])
        malformed = bool(calls) and self.chance(1, 6)
        if not RAW_REASONS[reason]:
            self.cut_off.update(call.call_id for call in calls)
        elif malformed:  # never run; the session tells the model why (TL-6)
            self.unparsed.update(call.call_id for call in calls)
        if malformed:
            self.malformed_streak += 1
        else:
            self.malformed_streak, self.retries = 0, 0
        return EngineResponse(text=self.choose(["Working.", "Done.", ""]),
                              raw_finish_reason=reason, calls=calls,
                              malformed_tool_format=malformed)

    def turn_ended(self) -> None:
        """A turn ended: the next request is not a retry."""
        self.malformed_streak, self.retries = 0, 0

    def cancel_stream(self, request_id: str) -> None:
        """The session cancelled a stream: the engine stops sending."""
        job = self.streams.get(request_id)
        if job is not None and job.stage != ENDED:
            job.stage, job.answer = ENDED, None

    def title(self, request: c.RequestTitle) -> str | None:
        """The namer: a naming request is a model stream too."""
        job = self.streams.get(request.request_id)
        if job is None:
            self._new_stream(request.request_id, request)
            return None
        answer: str | None = job.answer
        return answer

    # --- tools and dialogs ----------------------------------------------------------------------

    def running(self) -> list[str]:
        return [key for key, job in self.tools.items() if job.stage != ENDED]

    def run(self, call: ToolCall) -> tuple[str, Any] | None:
        """Start ``call`` the first time; its result once the world finished it."""
        job = self.tools.get(call.call_id)
        if job is not None:
            answer: tuple[str, Any] | None = job.answer
            return answer
        cid = call.call_id
        due = [asked for asked in self.asked if asked not in self.started]
        if cid not in self.asked:
            self.violate("tools-as-asked", "TL-4", f"{cid} ran though the session never sent "
                         "ExecuteTool for it")
        elif due and due[0] != cid:
            self.violate("tools-as-asked", "TL-4", f"{cid} ran before {due[0]}, which the "
                         "session asked for first")
        if self.running():
            self.violate("tools-as-asked", "TL-4", f"{cid} started while {self.running()[0]} "
                         "still runs: tools run one at a time")
        if cid in self.cut_off:
            self.violate("cut-off", "TL-9", f"{cid} ran from a response the engine cut off")
        if cid in self.unparsed:
            self.violate("cut-off", "TL-6", f"{cid} ran from a response whose tool-call format "
                         "was malformed")
        if call.needs_permission and cid not in self.allowed:
            self.violate("permission", "TL-3", f"{cid} ran without the user's allow")
        self.started.append(cid)
        self.tools[cid] = job = Job(call, stage=OPEN)
        if self.choose([True, False, False]):  # the plainest tool is done at once
            self.finish_tool(cid)
            done: tuple[str, Any] = job.answer
            return done
        return None

    def finish_tool(self, call_id: str) -> None:
        """A running tool finishes."""
        job = self.tools[call_id]
        job.stage = ENDED
        if job.command.name == "todo_write":
            statuses = [self.choose(["pending", "completed"]) for _ in range(2)]
            job.answer = ("todos", {"type": "todo_list", "todos": [
                {"id": str(i), "content": f"step {i}", "status": s}
                for i, s in enumerate(statuses)]})
        else:
            job.answer = ("ok", None)

    def cancel(self, call_id: str) -> bool:
        """The host asks a running tool to stop (``CancelTool``): ``True`` when it stopped.
        A write (:data:`WRITES`) never stops part-way; two other tools in three can stop."""
        self.cancel_heard.add(call_id)
        job = self.tools.get(call_id)
        if job is None or job.stage == ENDED:
            return False
        # drawn for a write too, so that a seed walks the same moves as before writes ran on
        if not self.chance(2, 3) or job.command.name in WRITES:
            return False
        job.stage, job.answer = ENDED, ("cancelled", None)
        self.stopped.add(call_id)
        return True

    def reported(self, event: e.ToolFinished) -> None:
        """The session hears a tool's result: was it run, finished, cancelled as reported?"""
        cid = event.call_id
        job = self.tools.get(cid)
        if job is None:
            self.violate("tools-as-asked", "TL-4", f"{cid} reported finished but the world "
                         "never ran it (skipped)")
        elif job.stage != ENDED:
            self.violate("tools-as-asked", "TL-4", f"{cid} reported finished while it still "
                         "runs in the world (stopped early)")
        if cid in self.cancel_sent and cid not in self.cancel_heard:
            self.violate("cancel", "TL-8", f"the session cancelled {cid} but the adapter never "
                         "asked the world to stop it")
        if event.cancelled != (cid in self.stopped):
            said = "cancelled" if event.cancelled else "completed"
            self.violate("cancel", "TL-8", f"{cid} reported {said}, but the world "
                         f"{'stopped' if cid in self.stopped else 'ran'} it")

    def ask(self, call: ToolCall) -> e.PermissionDecision | None:
        """A permission dialog: open until the user answers (a separate move)."""
        job = self.dialogs.get(call.call_id)
        if job is None:
            self.dialogs[call.call_id] = Job(call, stage=OPEN)
            return None
        answer: e.PermissionDecision | None = job.answer
        return answer

    def answer_dialog(self, call_id: str) -> None:
        decision = self.choose([e.PermissionDecision.ALLOW, e.PermissionDecision.DENY,
                                e.PermissionDecision.ALLOW, e.PermissionDecision.CANCEL])
        job = self.dialogs[call_id]
        job.stage, job.answer = ENDED, decision
        if decision is e.PermissionDecision.ALLOW:
            self.allowed.add(call_id)

    def open_dialogs(self) -> list[str]:
        return [key for key, job in self.dialogs.items() if job.stage != ENDED]

    # --- the daemon's client and hooks ----------------------------------------------------------

    def drain(self, command: sv.DrainMidTurnQueue) -> Event | None:
        """The client's drain reply: at once, or late (a separate move)."""
        job = self.late.get(command.drain_id)
        if job is None:
            job = self.late[command.drain_id] = Job(command)
            if self.chance(1, 4):
                return None  # the reply comes late
            self.reply(command.drain_id)
        answer: Event | None = job.answer
        return answer

    def hooks(self, command: sv.RunStopHooks) -> Event | None:
        """The Stop hooks' verdict: at once or late; a block or a failure now and then."""
        job = self.late.get(command.run_id)
        if job is None:
            job = self.late[command.run_id] = Job(command)
            if self.chance(1, 5):
                return None
            self.reply(command.run_id)
        answer: Event | None = job.answer
        return answer

    def pending_replies(self) -> list[str]:
        return [key for key, job in self.late.items() if job.stage != ENDED]

    def reply(self, key: str) -> None:
        """A drain reply or a hook verdict is given."""
        job = self.late[key]
        job.stage = ENDED
        command = job.command
        if isinstance(command, sv.DrainMidTurnQueue):
            holds = self.choose([None, False, None, True])
            # The client's messages arrive in order: the prompt it holds is sent after its
            # reply reaches the session (the machine registers it then).
            job.answer = sv.MidTurnDrained(drain_id=command.drain_id, has_queued_prompt=holds)
            return
        verdict = self.choose(["pass", "fail", "pass", "block"])
        if verdict == "block":
            job.answer = sv.StopHookDecided(run_id=command.run_id, block=True,
                                            reason="The tests are failing.")
        elif verdict == "fail":
            job.answer = sv.StopHookFailed(run_id=command.run_id, error="hook crashed",
                                           timed_out=self.chance(1, 2))
        else:
            job.answer = hooks_do_not_block(command)
