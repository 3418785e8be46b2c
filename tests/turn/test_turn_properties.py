"""Random interleavings of every turn, Lead and naming event, with invariants checked each step.

The machine below plays a host: it keeps a model of what the reducer has asked for (the write in
flight, the request, the running tool, the Lead save, the naming request) and only sends events a
real host could send, late answers a real UI produces by timing alone (which must be absorbed with
one ``StaleAnswerIgnored`` and change nothing), text no host could store (which must fail at
construction), plus deliberate misuse that must raise ``ProtocolError``. Every command the reducer
returns is checked against the rules of TL, LD and TT as it arrives.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import note, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import agentturn as at
from agentturn import OutcomeKind

TEXTS = st.sampled_from(["", "   ", "Working on it.", "Done.", "Let me check the tests."])
REASONS = st.sampled_from(["stop", "end_turn", "tool_calls", "tool_calls", "tool_calls",
                           "length", "max_tokens", "model_context_window_exceeded", "SAFETY",
                           "weird"])
#: The outcomes of a response that did not complete normally (TL-9).
CUT_OFF = {OutcomeKind.OUTPUT_LIMIT, OutcomeKind.CONTENT_FILTERED, OutcomeKind.UNRECOGNIZED_FINISH}
#: Admission refusals: answered at once to the LeadSubmitted that caused them.
ADMISSION = {at.DraftReason.NOT_OWNER, at.DraftReason.NOT_ACTIVE, at.DraftReason.EMPTY,
             at.DraftReason.TOO_LONG, at.DraftReason.QUEUE_FULL, at.DraftReason.TURN_ENDING}
#: Text no host can store: a lone surrogate, as a broken UI or JSON decoder produces.
UNENCODABLE = st.sampled_from(["\ud800", "fix \udfff now", "\ud83d", "ok\udc80"])
LEAD_TEXTS = st.sampled_from(["use tabs", "stop editing main", "also run the linter",
                              "keep the API", "", " \n ", "é" * 16384, "é" * 16384 + "x",
                              "\u0000 odd \U0001f600"])


class TurnHost(RuleBasedStateMachine):
    """A host that drives one chat's turns through :func:`agentturn.reduce`."""

    def __init__(self) -> None:
        super().__init__()
        self.counter = 0
        self.events: list[at.Event] = []
        self.log: list[tuple[at.Command, ...]] = []

    @initialize(policy=st.sampled_from(at.LeadPermissionPolicy), auto_title=st.booleans(),
                max_requests=st.one_of(st.none(), st.integers(2, 6)), hold=st.booleans())
    def create(self, policy: at.LeadPermissionPolicy, auto_title: bool,
               max_requests: int | None, hold: bool) -> None:
        self.config = at.TurnConfig(lead_permission_policy=policy, auto_title=auto_title,
                                    max_requests=max_requests, hold_natural_stops=hold)
        self.deciding: str | None = None  # the request whose natural stop awaits a decision
        self.state = at.TurnState.create("chat", self.config)
        # the host's model of what is outstanding
        self.turn_id: str | None = None
        self.active = False
        self.resumable = False
        self.persist: at.Persist | None = None
        self.persist_own: list[str] = []
        self.title_pref = auto_title
        self.request: at.RequestModelStream | None = None
        self.stream_open = False
        self.permission: at.ToolCall | None = None
        self.tool: at.ToolCall | None = None
        self.save: at.SaveLead | None = None
        self.naming: str | None = None  # the request id of the naming request in flight
        # late answers a real UI can still send
        self.titles_asked: list[str] = []
        self.decided: list[str] = []  # calls whose dialog was answered or dismissed
        self.cancelled: list[str] = []  # requests cancelled by Stop
        # what the rules are checked against
        self.unrecorded: list[str] = []  # calls of acked responses with no result record yet
        self.truncated: set[str] = set()
        self.malformed_calls: set[str] = set()
        self.last_finish: at.FinishReason | None = None
        self.malformed_prev = False
        self.must_end_malformed = False
        self.must_end_cut = False
        self.lost_write = False
        self.refused: dict[str, str] = {}  # call id -> the host's refusal (review_calls)
        self.ended_task = False  # a tool of this turn said it ended the task
        self.leads: dict[str, str] = {}  # lead id -> text, for leads accepted and not resolved
        #: Leads the current request carries: applied once its stream opens, back to ``leads``
        #: if it never does (LD-13).
        self.carried: dict[str, str] = {}
        self.lead_saved: set[str] = set()
        self.resolved: dict[str, str] = {}  # lead id -> how it ended
        self.admission_closed = False
        self.renamed = False
        self.titles_set = 0
        self.current: at.Event | None = None

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # --- sending ------------------------------------------------------------------------------

    def send(self, event: at.Event) -> tuple[at.Command, ...]:
        """Send a valid event: it must be accepted; every command is checked."""
        note(f"-> {event!r}")
        self.current = event
        try:
            step = at.reduce(self.state, event)
        except at.ProtocolError as error:  # pragma: no cover - a failing run shows it
            raise AssertionError(f"valid event refused: {error}") from error
        self.state = step.state
        self.events.append(event)
        self.log.append(step.commands)
        self.observe_event(event)
        for command in step.commands:
            note(f"   <- {command!r}")
            self.observe_command(command)
        if isinstance(event, at.LeadSubmitted) and event.lead_id not in self.leads:
            assert event.lead_id in self.resolved, "a submitted Lead got no answer"
        return step.commands

    def late(self, event: at.Event) -> None:
        """Send a late answer: absorbed with one notice, the state untouched."""
        note(f"-> (late) {event!r}")
        before = self.state
        step = at.reduce(self.state, event)
        assert [type(c) for c in step.commands] == [at.StaleAnswerIgnored], step.commands
        assert step.state == before, "a late answer changed the state"
        self.events.append(event)
        self.log.append(step.commands)

    def misuse(self, event: at.Event) -> None:
        """Send an event the host must not send now: only ProtocolError, nothing changes."""
        before = self.state
        try:
            at.reduce(self.state, event)
        except at.ProtocolError:
            pass
        else:
            raise AssertionError(f"misuse accepted: {event!r} in {self.state.phase}")
        assert self.state is before

    # --- the model: what each event and command means -----------------------------------------

    def observe_event(self, event: at.Event) -> None:
        if isinstance(event, at.PromptSubmitted):
            self.active, self.turn_id, self.resumable = True, event.turn_id, False
            self.last_finish, self.malformed_prev, self.must_end_malformed = None, False, False
            self.must_end_cut = False
            self.admission_closed, self.lost_write = False, False
            self.ended_task = False
        elif isinstance(event, at.ContinueTurn):
            self.active, self.resumable, self.admission_closed = True, False, False
        elif isinstance(event, at.Persisted):
            assert self.persist is not None
            self.unrecorded.extend(self.persist_own)
            self.persist = None
        elif isinstance(event, at.PersistFailed):
            assert self.persist is not None
            # unsaved result records of earlier responses: those calls have no record again
            saved_with = {c.call_id for r in self.persist.records
                          if isinstance(r, at.ResponseRecord) for c in r.tool_calls}
            lost = [r.call_id for r in self.persist.records
                    if isinstance(r, at.ToolResultRecord) and r.call_id not in saved_with]
            self.unrecorded = lost + self.unrecorded
            self.lost_write = True
            self.persist = None
        elif isinstance(event, at.StreamOpened):
            self.stream_open = True
            for lead_id in list(self.carried):
                self.carried.pop(lead_id)
                self.resolve(lead_id, "applied")
        elif isinstance(event, at.StreamCompleted):
            self.request, self.stream_open = None, False
            self.last_finish = self.config.finish_reason(event.finish_reason)
            if not self.last_finish.completes_normally:
                self.must_end_cut = True  # TL-9 before TL-6: truncation explains the format
            elif event.malformed_tool_format and self.malformed_prev:
                self.must_end_malformed = True
            self.malformed_prev = event.malformed_tool_format
            self.refused.update((c.call_id, c.refusal) for c in event.tool_calls if c.refusal)
        elif isinstance(event, at.StreamFailed | at.CompactionFailed | at.TokenLimitRejected):
            self.request, self.stream_open = None, False
            self.uncarry()
        elif isinstance(event, at.PermissionDecided):
            self.permission = None
            self.decided.append(event.call_id)
        elif isinstance(event, at.ToolFinished):
            self.tool = None
            self.ended_task = self.ended_task or event.ends_task
        elif isinstance(event, at.LeadSaved):
            self.save = None
            self.lead_saved.add(event.lead_id)
        elif isinstance(event, at.LeadSaveFailed):
            self.save = None
        elif isinstance(event, at.TitleGenerated | at.TitleFailed):
            self.naming = None
        elif isinstance(event, at.ManualRename):
            self.renamed = True
        elif isinstance(event, at.AutoTitlePreferenceChanged):
            self.title_pref = event.enabled

    def uncarry(self) -> None:
        """The request never opened: the Leads it carried are pending again (LD-13)."""
        self.leads = {**self.carried, **self.leads}
        self.carried = {}

    def resolve(self, lead_id: str, how: str) -> None:
        assert lead_id not in self.resolved, f"Lead {lead_id} answered twice"
        self.resolved[lead_id] = how
        self.leads.pop(lead_id, None)

    def observe_command(self, command: at.Command) -> None:
        if isinstance(command, at.Persist):
            assert self.persist is None, "TL-5: two writes in flight"
            own: list[str] = []  # calls of a response saved in this very write
            for record in command.records:
                if isinstance(record, at.ResponseRecord):
                    ids = [c.call_id for c in record.tool_calls]
                    own.extend(ids)
                    if not record.finish_reason.completes_normally:
                        self.truncated.update(ids)
                    if record.malformed_tool_format:
                        self.malformed_calls.update(ids)
                elif isinstance(record, at.ToolResultRecord):
                    if record.call_id in own:
                        own.remove(record.call_id)
                    else:
                        assert record.call_id in self.unrecorded, \
                            "a result for a call that has one, or whose response is unsaved"
                        self.unrecorded.remove(record.call_id)
                    if record.status is at.ToolResultStatus.EXECUTED:
                        assert record.call_id not in self.truncated | self.malformed_calls
                        assert record.call_id not in self.refused, "a refused call ran"
                    if record.status is at.ToolResultStatus.REFUSED:
                        assert record.reason == self.refused.get(record.call_id), \
                            "a REFUSED record without the host's reason"
            self.persist, self.persist_own = command, own
        elif isinstance(command, at.RequestModelStream):
            assert self.persist is None, "TL-5: request before a write was acknowledged"
            assert self.tool is None, "request while a tool runs"
            assert not self.naming, "TT-3: request while naming runs"
            assert self.request is None, "two requests at once"
            assert not self.unrecorded, "request before every call of the response has a result"
            assert not self.must_end_malformed, "TL-6: a request after two malformed responses"
            for lead_id in command.lead_ids:
                assert lead_id in self.lead_saved, "LD-8: an unsaved Lead reached the model"
                self.carried[lead_id] = self.leads.pop(lead_id)
            assert not self.lead_saved & set(self.leads), \
                "LD-16: a saved Lead was left out of the request"
            self.request = command
        elif isinstance(command, at.ExecuteTool | at.AskPermission):
            call_id = command.call.call_id
            assert self.tool is None and self.persist is None and self.request is None
            assert not self.naming, "TT-3: a tool started while naming runs"
            assert self.unrecorded and self.unrecorded[0] == call_id, "TL-4: out of order"
            assert call_id not in self.truncated, "TL-9: a call of a truncated response ran"
            assert call_id not in self.malformed_calls, "TL-6: a malformed call ran"
            assert call_id not in self.refused, "a refused call ran or was asked about"
            if isinstance(command, at.ExecuteTool):
                self.tool = command.call
            else:
                self.permission = command.call
        elif isinstance(command, at.DismissPermission):
            assert self.permission is not None
            self.decided.append(self.permission.call_id)
            self.permission = None
        elif isinstance(command, at.CancelTool):
            assert isinstance(self.current, at.StopPressed | at.HardStopped), \
                "LD-10: only Stop (or the host's halt) cancels a tool"
            assert self.tool is not None and self.tool.call_id == command.call_id
        elif isinstance(command, at.CancelStream):
            assert isinstance(self.current, at.StopPressed | at.HardStopped)
            assert self.request is not None and command.request_id == self.request.request_id
            self.cancelled.append(command.request_id)
            self.request, self.stream_open = None, False
            self.uncarry()
        elif isinstance(command, at.EndTurn):
            self.check_end(command)
            self.deciding = None
        elif isinstance(command, at.DecideNaturalStop):
            assert self.config.hold_natural_stops, "asked to decide a stop nobody holds"
            assert self.persist is None and self.tool is None and self.request is None
            assert not self.unrecorded, "a natural stop with calls still without a result"
            assert not self.ended_task, "a tool ended the task, yet a natural stop is decided"
            self.deciding = command.request_id
        elif isinstance(command, at.LeadAccepted):
            assert self.active, "LD-1: Lead admitted with no active turn"
            assert not self.admission_closed, "LD-14: Lead admitted after admission closed"
            assert isinstance(self.current, at.LeadSubmitted)
            self.leads[command.lead_id] = self.current.text
            assert len(self.leads) <= at.MAX_PENDING, "LD-5: more than 8 pending"
            assert command.kept_attachment_ids == self.current.attachment_ids, "LD-15"
        elif isinstance(command, at.ReturnDraft) and command.reason in ADMISSION:
            assert isinstance(self.current, at.LeadSubmitted)
            assert command.lead_id == self.current.lead_id
            assert command.draft == self.current.text, "a refusal must hand the draft back"
            self.check_refusal(command, self.current)
            self.resolve(command.lead_id, "refused")
        elif isinstance(command, at.SaveLead):
            assert self.save is None, "LD-4: two saves in flight"
            assert command.record.text == self.leads[command.lead_id]
            self.save = command
        elif isinstance(command, at.ReturnDraft):
            assert command.draft == self.leads[command.lead_id]
            assert command.lead_id not in self.lead_saved
            if command.reason is at.DraftReason.SAVE_FAILED:
                assert isinstance(self.current, at.LeadSaveFailed)
            else:
                assert command.reason is at.DraftReason.TURN_ENDED_BEFORE_SAVE
                self.admission_closed = True
            self.resolve(command.lead_id, "draft returned")
        elif isinstance(command, at.LeadUnapplied):
            assert command.lead_id in self.lead_saved
            self.resolve(command.lead_id, "unapplied")
        elif isinstance(command, at.RequestTitle):
            assert not self.naming and self.request is None, "TT-3: naming beside a request"
            assert self.title_pref, "TT-4: naming with the preference off"
            assert not self.renamed, "TT-5: naming after a manual rename"
            assert command.request_id not in self.titles_asked, "a naming request id reused"
            self.titles_asked.append(command.request_id)
            self.naming = command.request_id
        elif isinstance(command, at.SetTitle):
            assert not self.renamed, "TT-5: automatic title over a manual rename"
            self.titles_set += 1
            assert self.titles_set <= 1, "TT-6: named automatically twice"

    def check_refusal(self, refused: at.ReturnDraft, event: at.LeadSubmitted) -> None:
        if event.chat_id != "chat":
            assert refused.reason is at.DraftReason.NOT_OWNER
        elif not self.active:
            assert refused.reason is at.DraftReason.NOT_ACTIVE
        elif refused.reason is at.DraftReason.TURN_ENDING:
            self.admission_closed = True
        elif not event.text.strip():
            assert refused.reason is at.DraftReason.EMPTY
        elif len(event.text.encode()) > at.MAX_LEAD_BYTES:
            assert refused.reason is at.DraftReason.TOO_LONG
        else:
            assert refused.reason is at.DraftReason.QUEUE_FULL
            assert len(self.leads) == at.MAX_PENDING

    def check_end(self, end: at.EndTurn) -> None:
        assert self.active and end.turn_id == self.turn_id
        outcome = end.outcome
        assert outcome.finish_reason == self.last_finish, "the outcome lost the finish reason"
        assert self.persist is None and self.tool is None and self.save is None
        if self.must_end_cut:
            assert outcome.kind in CUT_OFF, outcome
        elif self.must_end_malformed:
            assert outcome.kind is OutcomeKind.MALFORMED_TOOL_FORMAT
        if not outcome.resumable:
            # TL-5: a call without a result is allowed only when its write failed at the end;
            # then the records are owed, and the next prompt's write must hold them.
            assert not self.unrecorded or self.lost_write, "a call ended without a result"
            if self.unrecorded:
                closing = outcome.halt_kind in (at.HardStopKind.SESSION_CLOSED,
                                                at.HardStopKind.GRACE_EXPIRED)
                assert ("are handed back unsaved" if closing
                        else "will be saved before the next prompt") in outcome.message
        if outcome.kind is OutcomeKind.ERROR:
            assert outcome.resumable
        if outcome.kind is OutcomeKind.ENDED_BY_TOOL:
            assert self.ended_task and not outcome.resumable, "ENDED_BY_TOOL with no such tool"
        elif self.ended_task:
            # a Stop or a hard stop came first: the first decided ending stands
            assert outcome.kind in (OutcomeKind.CANCELLED, OutcomeKind.HALTED), outcome
        self.active, self.resumable = False, outcome.resumable
        self.admission_closed = False

    @invariant()
    def every_lead_answered_once_its_turn_ends(self) -> None:
        if not self.active:
            if self.resumable:
                # TL-11: saved instructions wait for ContinueTurn or a new prompt's report
                assert set(self.leads) <= self.lead_saved, "an unsaved Lead outlived its turn"
            else:
                assert not self.leads, f"LD-13: Leads left without an answer: {self.leads}"

    @invariant()
    def phase_matches_the_hosts_view(self) -> None:
        if hasattr(self, "state"):
            assert (self.state.phase is at.TurnPhase.IDLE) == (not self.active)

    # --- the user ---------------------------------------------------------------------------

    # --- one rule: the host's next move -------------------------------------------------------
    #
    # A single rule draws the next move with explicit weights. Separate rules would be picked
    # uniformly (and switched off at random by hypothesis' swarm testing), so the always-possible
    # user moves would crowd out the answers that keep a turn moving.

    @rule(data=st.data())
    def act(self, data: st.DataObject) -> None:
        moves: list[tuple[int, str]] = []
        if not self.active:
            moves.append((3, "prompt"))
            if self.resumable:
                moves.append((2, "continue"))
        if self.persist is not None:
            moves.append((6, "write"))
        if self.request is not None and not self.stream_open:
            moves.append((6, "request"))
        if self.stream_open:
            moves.append((6, "stream"))
        if self.tool is not None:
            moves.append((6, "tool"))
        if self.permission is not None:
            moves.append((4, "permission"))
        if self.save is not None:
            moves.append((4, "lead_save"))
        if self.naming:
            moves.append((3, "naming"))
        if self.deciding is not None:
            moves.append((4, "decide"))
        moves.extend([(3 if self.active else 1, "lead"), (1, "noise"), (1, "misuse"),
                      (1, "late"), (1, "odd_text")])
        if data.draw(st.sampled_from([False] * 24 + [True])):
            moves = [(1, "stop")]  # Stop ends turns: rarer than everything else
        move = data.draw(st.sampled_from([name for weight, name in moves for _ in range(weight)]))
        getattr(self, f"move_{move}")(data)

    def move_prompt(self, data: st.DataObject) -> None:
        turn_id = self.fresh("t")
        self.send(at.PromptSubmitted(turn_id=turn_id, message_id=f"{turn_id}-m",
                                     text=data.draw(TEXTS)))

    def move_continue(self, data: st.DataObject) -> None:
        assert self.turn_id is not None
        self.send(at.ContinueTurn(turn_id=self.turn_id))

    def move_write(self, data: st.DataObject) -> None:
        assert self.persist is not None
        if data.draw(st.sampled_from([True] * 11 + [False])):
            self.send(at.Persisted(key=self.persist.key))
        else:
            self.send(at.PersistFailed(key=self.persist.key, reason="disk full"))

    def move_request(self, data: st.DataObject) -> None:
        assert self.request is not None
        request_id = self.request.request_id
        outcome = data.draw(st.sampled_from(["open"] * 17 + ["compaction", "tokens", "error"]))
        if outcome == "open":
            self.send(at.StreamOpened(request_id=request_id))
        elif outcome == "compaction":
            self.send(at.CompactionFailed(request_id=request_id, reason="too long"))
        elif outcome == "tokens":
            self.send(at.TokenLimitRejected(request_id=request_id, reason="over 200k"))
        else:
            self.send(at.StreamFailed(request_id=request_id, error="503"))

    def move_stream(self, data: st.DataObject) -> None:
        assert self.request is not None
        if data.draw(st.sampled_from([False] * 19 + [True])):
            self.send(at.StreamFailed(request_id=self.request.request_id, error="reset"))
            return
        calls = data.draw(st.sampled_from([0, 1, 1, 2, 2, 3]))
        needs = data.draw(st.lists(st.sampled_from([False, False, True]), min_size=3, max_size=3))
        refusals = data.draw(st.lists(st.sampled_from([""] * 5 + ["No tool named 'wirte'."]),
                                      min_size=3, max_size=3))
        tool_calls = tuple(at.ToolCall(call_id=self.fresh("c"), name="write_file",
                                       needs_permission=needs[i], refusal=refusals[i])
                           for i in range(calls))
        self.send(at.StreamCompleted(
            request_id=self.request.request_id, text=data.draw(TEXTS),
            finish_reason=data.draw(REASONS), tool_calls=tool_calls,
            malformed_tool_format=data.draw(st.sampled_from([False] * 7 + [True]))))

    def move_tool(self, data: st.DataObject) -> None:
        assert self.tool is not None
        cancelled = data.draw(st.sampled_from([False] * 4 + [True]))
        ends_task = not cancelled and data.draw(st.sampled_from([False] * 9 + [True]))
        self.send(at.ToolFinished(call_id=self.tool.call_id, output="ok", cancelled=cancelled,
                                  ends_task=ends_task))

    def move_permission(self, data: st.DataObject) -> None:
        assert self.permission is not None
        decision = data.draw(st.sampled_from([at.PermissionDecision.ALLOW] * 3
                                             + [at.PermissionDecision.DENY,
                                                at.PermissionDecision.CANCEL]))
        self.send(at.PermissionDecided(call_id=self.permission.call_id, decision=decision))

    def move_lead_save(self, data: st.DataObject) -> None:
        assert self.save is not None
        if data.draw(st.sampled_from([True] * 4 + [False])):
            self.send(at.LeadSaved(lead_id=self.save.lead_id))
        else:
            self.send(at.LeadSaveFailed(lead_id=self.save.lead_id, reason="database locked"))

    def move_naming(self, data: st.DataObject) -> None:
        assert self.naming is not None
        title = data.draw(st.sampled_from(["Fix the login bug", "Fix the login bug", "", None]))
        if title is None:
            self.send(at.TitleFailed(request_id=self.naming, reason="naming model offline"))
        else:
            self.send(at.TitleGenerated(request_id=self.naming, title=title))

    def move_late(self, data: st.DataObject) -> None:
        """What real UIs send by timing alone: each is absorbed, nothing changes."""
        candidates: list[at.Event] = []
        old_titles = [rid for rid in self.titles_asked if rid != self.naming]
        if old_titles:
            candidates.append(at.TitleGenerated(request_id=data.draw(st.sampled_from(old_titles)),
                                                title="Late title"))
        pending = self.permission.call_id if self.permission else None
        old_calls = [cid for cid in self.decided if cid != pending]
        if old_calls and self.state.dismissed_call in old_calls:
            candidates.append(at.PermissionDecided(call_id=self.state.dismissed_call,
                                                   decision=at.PermissionDecision.ALLOW))
        if self.cancelled and self.state.cancelled_request == self.cancelled[-1]:
            candidates.append(at.StreamCompleted(request_id=self.cancelled[-1], text="late",
                                                 finish_reason="stop"))
        saved = [lid for lid in self.lead_saved if lid in self.leads]
        if saved:
            candidates.append(at.LeadSaved(lead_id=data.draw(st.sampled_from(sorted(saved)))))
        if candidates:
            self.late(data.draw(st.sampled_from(candidates)))

    def move_odd_text(self, data: st.DataObject) -> None:
        """Text no host can store never becomes an event; odd but valid text is fine."""
        bad = data.draw(UNENCODABLE)
        for build in (lambda: at.LeadSubmitted(chat_id="chat", lead_id="L-odd", text=bad),
                      lambda: at.PromptSubmitted(turn_id="t-odd", message_id="m", text=bad),
                      lambda: at.ManualRename(title=bad),
                      lambda: at.ToolFinished(call_id="c", output=bad)):
            try:
                build()
            except at.FieldError:
                continue
            raise AssertionError(f"an unencodable text was accepted: {bad!r}")

    def move_lead(self, data: st.DataObject) -> None:
        own_chat = data.draw(st.sampled_from([True] * 7 + [False]))
        self.send(at.LeadSubmitted(chat_id="chat" if own_chat else "other",
                                   lead_id=self.fresh("L"), text=data.draw(LEAD_TEXTS),
                                   attachment_ids=data.draw(st.sampled_from([(), ("img1",)]))))

    def move_stop(self, data: st.DataObject) -> None:
        if data.draw(st.sampled_from([True, True, False])):
            self.send(at.StopPressed())
        else:
            self.send(at.HardStopped(reason="Loop protection stopped the turn."))
        self.deciding = None  # a stop being decided is decided by Stop

    def move_decide(self, data: st.DataObject) -> None:
        assert self.deciding is not None
        request_id, self.deciding = self.deciding, None
        if data.draw(st.booleans()):
            self.send(at.NaturalStopDecided(request_id=request_id))
        else:
            self.send(at.NaturalStopDecided(request_id=request_id, message_id=self.fresh("k"),
                                            text="[Todo Stop Guard] 1 todo item(s) ..."))

    def move_noise(self, data: st.DataObject) -> None:
        which = data.draw(st.sampled_from(["disconnect", "rename", "on", "off"]))
        if which == "disconnect":
            assert self.send(at.ClientDisconnected()) == (), "TL-3: a disconnect does nothing"
        elif which == "rename":
            self.send(at.ManualRename(title="My name"))
        else:
            self.send(at.AutoTitlePreferenceChanged(enabled=which == "on"))

    def move_misuse(self, data: st.DataObject) -> None:
        self.host_misuse(data.draw(st.integers(0, 8)))

    def host_misuse(self, which: int) -> None:
        """Events a host must not send now: each raises ProtocolError and changes nothing."""
        candidates: list[at.Event] = [
            at.StreamOpened(request_id="bogus"),
            at.Persisted(key="bogus"),
            at.ToolFinished(call_id="bogus", output=""),
            at.PermissionDecided(call_id="bogus", decision=at.PermissionDecision.ALLOW),
            at.LeadSaved(lead_id="bogus"),
            at.ContinueTurn(turn_id="bogus"),
        ]
        if self.active:
            candidates.append(at.PromptSubmitted(turn_id="again", message_id="m", text="x"))
        if self.stream_open:
            assert self.request is not None
            candidates.append(at.StreamOpened(request_id=self.request.request_id))
        candidates.append(at.TitleGenerated(request_id="chat/title-99", title="forged"))
        self.misuse(candidates[which % len(candidates)])

    def teardown(self) -> None:
        """Determinism: the same events from the same start give the same commands."""
        if not hasattr(self, "config"):
            return
        state = at.TurnState.create("chat", self.config)
        replayed = []
        for event in self.events:
            state, commands = at.reduce(state, event)
            replayed.append(commands)
        assert replayed == self.log
        assert state == self.state


TestTurnHost = TurnHost.TestCase
TestTurnHost.settings = settings(
    settings.default, max_examples=max(settings.default.max_examples, 1000),
    stateful_step_count=max(settings.default.stateful_step_count, 80))
