"""Random session facts through the todo stop guard, with its invariants checked every step.

The machine feeds the guard random, well-formed sequences of every fact a session reports and
keeps a shadow guard that sees the same sequence with every todo text replaced: the two must
decide identically (todo text cannot influence or leak into anything, OB-4). It also feeds what a
real host produces by timing or by bugs: duplicate and failed-then-succeeded todo-write results,
late writes of an invalidated turn, retries naming it, Plan-mode switches and related automatic
turns in every phase, hostile envelopes, and ids and reasons with odd Unicode (a lone surrogate,
an empty or blank string is refused with ``FieldError`` when the event is built, never later).

Each step checks the budget (SG-B1: never more than two committed attempts per stage),
commit-on-open (SG-B3), suspension (SG-S1), the off switch (SG-C6), Plan mode (SG-C3: nothing
arms, starts or continues), duplicates (SG-A3: never change the state), invalidated turns
(SG-A14), the one release rule (a ``ReleaseAutomaticQueues`` exactly when
``holds_automatic_turns`` goes from true to false), deferral (``DeferAutomaticTurn`` changes
nothing), and determinism.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import note, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import agentturn as at
from agentturn import guard as g

#: Todo texts chosen to collide with what the guard does print: numbers and its own words.
TODO_TEXTS = st.one_of(
    st.sampled_from(["1", "2", "todo_stop_guard", "[Todo Stop Guard]", "attempt", "pending"]),
    st.text(min_size=1, max_size=12),
)
STATUSES = st.sampled_from(["pending", "in_progress", "completed"])
#: Odd Unicode for ids and reasons: lone surrogates, blanks, zero-width, combining, bidi.
ODD = st.one_of(
    st.sampled_from(["", "\ud800", "a\udfff", " ", "\t", "\u200b", "\ufeff", "e\u0301", "🙂",
                     "\x00", "\u202e", "ǅ", "\U0010ffff"]),
    st.text(alphabet=st.characters(exclude_categories=()), max_size=4),
)


class BrokenMapping(Mapping[str, Any]):
    """A mapping whose lookups raise: the parser must reject it, not raise."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("broken mapping")

    def __iter__(self) -> Iterator[str]:
        return iter(["type", "todos"])

    def __len__(self) -> int:
        return 2


#: Envelopes that are JSON but not a todo list (a broken mapping is not JSON: it is refused
#: when the event is built, see the test below).
ODD_ENVELOPES = st.sampled_from([
    None, '{"type": "todo_list", "todos": []}', {"type": "todo_list"}, {"type": 1, "todos": []},
    {"type": "todo_list", "todos": [None]}, {"type": "todo_list", "todos": [[]]},
])


def test_a_mapping_that_is_not_json_is_refused_when_built_and_by_the_parser() -> None:
    """SG-A1: the parser rejects a mapping whose lookups raise (it never raises itself), and a
    host cannot even build a todo-write event from one: it is not a JSON value."""
    for odd in (BrokenMapping(), {"type": "todo_list", "todos": [BrokenMapping()]}):
        assert g.parse_todo_envelope(odd) is None
        with pytest.raises(at.FieldError, match="envelope must be a JSON value"):
            g.TodoWriteResult(call_id="c", turn_id="t", succeeded=True, envelope=odd)


def envelope(items: list[tuple[str, str]]) -> dict[str, Any]:
    return {"type": "todo_list",
            "todos": [{"id": f"i{n}", "content": text, "status": status}
                      for n, (text, status) in enumerate(items)]}


def redacted(event: at.Event) -> at.Event:
    """The same event with every todo text (a str ``content``) replaced by the same filler."""
    if not isinstance(event, g.TodoWriteResult) or type(event.envelope) is not dict:
        return event
    todos = event.envelope.get("todos")
    if type(todos) is not list:
        return event
    filled = [{**item, "content": "redacted"}
              if type(item) is dict and type(item.get("content")) is str else item
              for item in todos]
    return g.TodoWriteResult(call_id=event.call_id, turn_id=event.turn_id,
                             envelope={**event.envelope, "todos": filled},
                             succeeded=event.succeeded, top_level=event.top_level,
                             origin=event.origin, point=event.point)


def acceptable(value: str, rule: str) -> bool:
    """Whether a str field's validator accepts ``value``: ``id`` non-empty, ``reason`` not blank."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return bool(value.strip()) if rule == "reason" else bool(value)


class GuardHost(RuleBasedStateMachine):
    """A session reports random facts to one guard, and every step keeps the invariants."""

    @initialize(enabled=st.sampled_from([True] * 4 + [False]),
                plan=st.sampled_from([False] * 7 + [True]))
    def create(self, enabled: bool, plan: bool) -> None:
        self.config = g.GuardConfig(
            todo_stop_guard=enabled, daemon=True,
            approval_mode=g.ApprovalMode.PLAN if plan else g.ApprovalMode.DEFAULT)
        self.state = g.GuardState.create(self.config)
        self.shadow = g.GuardState.create(self.config)
        self.events: list[at.Event] = []
        self.log: list[tuple[at.Command, ...]] = []
        self.counter = 0
        self.turn = ""
        self.invalidated = ""
        self.results: list[g.TodoWriteResult] = []  # every result reported so far
        self.streams_in_stage = 0  # committed guard-attributable streams since user input/chain
        self.suspended_since_arm = False  # suspended, and no new chain + trusted arm since
        self.prompt_waiting = False  # a queued prompt the guard yielded to has not run

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def build(self, kind: type[at.Event], rules: dict[str, str], **fields: Any) -> Any:
        """``kind(**fields)``, or ``None`` when a str field is refused, as ``rules`` predict."""
        expected = all(acceptable(fields[name], rule) for name, rule in rules.items()
                       if fields[name] is not None)
        try:
            event = kind(**fields)
        except at.FieldError:
            assert not expected, f"{kind.__name__} refused acceptable fields {fields!r}"
            return None
        assert expected, f"{kind.__name__} accepted refused fields {fields!r}"
        return event

    def send(self, event: at.Event | None) -> tuple[at.Command, ...]:
        if event is None:
            return ()
        note(f"-> {event!r}")
        before = self.state
        try:
            step = g.reduce(self.state, event)
        except at.ProtocolError:
            assert self.state is before
            return ()
        shadow = g.reduce(self.shadow, redacted(event))
        assert shadow.commands == step.commands, "OB-4: todo text changed a decision"
        self.state, self.shadow = step.state, shadow.state
        self.events.append(event)
        self.log.append(step.commands)
        for command in step.commands:
            note(f"   <- {command!r}")
        self.check(before, event, step.commands)
        if isinstance(event, g.TodoWriteResult):
            self.results.append(event)
        return step.commands

    def check(self, before: g.GuardState, event: at.Event,
              commands: tuple[at.Command, ...]) -> None:
        after = self.state
        if not self.config.enabled:
            assert commands == () and after == before, "SG-C6: an off guard changed something"
            return
        kinds = [type(c) for c in commands]
        # SG-B3: attempts grow only when a guard stream opens, by exactly one.
        if isinstance(event, g.GuardStreamOpened):
            assert after.attempts == before.attempts + 1
            self.streams_in_stage += 1
        else:
            assert after.attempts <= before.attempts, "an attempt counted before its stream"
        # SG-B1: never more than two committed attempts per stage.
        assert after.attempts <= g.MAX_ATTEMPTS
        # new user input or a new chain starts a new stage
        if isinstance(event, g.OrdinaryPromptStarted | g.MidTurnMessage) or any(
                isinstance(c, g.StartWorkChain) for c in commands) or (
                after.attempts == 0 and before.attempts > 0):
            self.streams_in_stage = 1 if isinstance(event, g.GuardStreamOpened) else 0
        assert self.streams_in_stage <= g.MAX_ATTEMPTS, "SG-B1: a third automatic stream"
        # SG-S1: a suspended chain continues only after a new chain and a fresh trusted arm.
        if after.phase is g.GuardPhase.SUSPENDED:
            self.suspended_since_arm = True
        if g.StartWorkChain in kinds:
            self.suspended_since_arm = False
        for command in commands:
            if isinstance(command, g.ContinueWithGuardPrompt):
                assert not self.suspended_since_arm, "a suspended chain continued"
                assert g.is_guard_prompt(command.text)
            if isinstance(command, g.SendToolResults) and command.sponsor is g.Sponsor.GUARD:
                assert not self.suspended_since_arm
        # exhaustion is reported at most once per chain
        assert kinds.count(g.ReportGuardExhausted) <= 1
        # SG-C3: in Plan mode nothing arms, no chain starts, nothing is sent or deferred.
        if after.phase is g.GuardPhase.PLAN:
            assert (after.unfinished, after.listed, after.attempts, after.pending_attempt) == (
                0, False, 0, 0), "SG-C3: something armed or stayed pending in Plan mode"
            assert (after.live_turn, after.open_call, after.loop) == ("", "", g.LoopOwner.NONE)
        if before.phase is g.GuardPhase.PLAN:
            # (a queued prompt the chain awaited before Plan mode still holds automatic turns)
            allowed = {g.ReleaseAutomaticQueues} | (
                {g.DeferAutomaticTurn} if before.prompt_first else set())
            assert set(kinds) <= allowed, "SG-C3: Plan mode acted"
        # SG-A3: a second report of a call already reported never changes anything.
        if isinstance(event, g.TodoWriteResult) and any(
                r.call_id == event.call_id for r in self.results):
            assert after == before and commands == (), "SG-A3: a duplicate result counted"
        # SG-A14: a todo write naming the invalidated turn never arms.
        if isinstance(event, g.TodoWriteResult) and event.turn_id == before.superseded_turn:
            assert (after.unfinished, after.listed) == (before.unfinished, before.listed)
        if isinstance(event, g.TodoWriteStarted) and event.turn_id == before.superseded_turn:
            assert after.open_call == ""
        # SO-2, BG-7: a queued prompt the guard yielded to holds automatic turns, whatever
        # becomes of the chain, until an ordinary prompt starts or the last abort is reported.
        if isinstance(event, g.NaturalStop) and before.phase is g.GuardPhase.ACTIVE and (
                event.queued_prompt and not event.mid_turn_messages):
            self.prompt_waiting = True
        if isinstance(event, g.OrdinaryPromptStarted) or (
                isinstance(event, g.QueuedPromptAborted) and event.last):
            self.prompt_waiting = False
        if self.prompt_waiting:
            assert g.holds_automatic_turns(after), "a queued prompt lost its priority"
        # The one release rule: ReleaseAutomaticQueues exactly when the hold ends.
        ended = g.holds_automatic_turns(before) and not g.holds_automatic_turns(after)
        assert kinds.count(g.ReleaseAutomaticQueues) == int(ended), "release rule broken"
        # A deferred automatic turn changes nothing, and only happens while the guard holds.
        if g.DeferAutomaticTurn in kinds:
            assert isinstance(event, g.AutomaticTurnStarted)
            assert after == before and commands == (
                g.DeferAutomaticTurn(turn_id=event.turn_id, kind=event.kind),)
            assert g.holds_automatic_turns(before) or before.phase is g.GuardPhase.AWAITING_PROMPT

    @invariant()
    def exhaustion_once_per_chain(self) -> None:
        if not hasattr(self, "log"):
            return
        per_chain: dict[int, int] = {}
        chain = 0
        for commands in self.log:
            for command in commands:
                if isinstance(command, g.StartWorkChain):
                    chain = command.chain
                if isinstance(command, g.ReportGuardExhausted):
                    per_chain[chain] = per_chain.get(chain, 0) + 1
        assert all(count == 1 for count in per_chain.values()), "OB-3: reported twice"

    # --- the session's facts --------------------------------------------------------------

    @rule(data=st.data())
    def act(self, data: st.DataObject) -> None:
        moves = ["prompt", "write", "write", "write", "write", "stop", "stop", "stop", "stop",
                 "open", "open", "open", "not_opened", "tools", "tools", "mid_turn", "retry",
                 "error", "hard", "trust", "background", "automatic", "automatic", "untrusted",
                 "noise", "ordinary_stream", "duplicate", "late", "plan"]
        getattr(self, f"move_{data.draw(st.sampled_from(moves))}")(data)

    def move_prompt(self, data: st.DataObject) -> None:
        turn = self.fresh("t") + data.draw(st.sampled_from([""] * 4 + [data.draw(ODD)]))
        event = self.build(g.OrdinaryPromptStarted, {"turn_id": "id"}, turn_id=turn)
        if event is not None:
            self.turn = turn
        self.send(event)

    def move_write(self, data: st.DataObject, turn: str | None = None) -> None:
        call_id = self.fresh("c") + data.draw(st.sampled_from([""] * 4 + [data.draw(ODD)]))
        turn_id = turn or self.turn or "t0"
        self.send(self.build(g.TodoWriteStarted, {"call_id": "id", "turn_id": "id"},
                             call_id=call_id, turn_id=turn_id))
        if data.draw(st.sampled_from([True] * 9 + [False])):
            items = data.draw(st.lists(st.tuples(TODO_TEXTS, STATUSES), max_size=4))
            body = envelope(items)
        else:
            body = data.draw(ODD_ENVELOPES)
        self.send(self.build(
            g.TodoWriteResult, {"call_id": "id", "turn_id": "id"},
            call_id=call_id, turn_id=turn_id, envelope=body,
            succeeded=data.draw(st.sampled_from([True] * 9 + [False])),
            top_level=data.draw(st.sampled_from([True] * 9 + [False])),
            origin=data.draw(st.sampled_from([g.ToolOrigin.BUILTIN] * 9
                                             + [g.ToolOrigin.DISCOVERED])),
            point=data.draw(st.sampled_from([g.ObservationPoint.AFTER_STATUS] * 9
                                            + [g.ObservationPoint.AFTER_POST_TOOL_USE]))))

    def move_duplicate(self, data: st.DataObject) -> None:
        """The same call reported again: re-sent as is, or a failure re-reported as success."""
        if not self.results:
            return
        earlier = data.draw(st.sampled_from(self.results))
        items = data.draw(st.lists(st.tuples(TODO_TEXTS, STATUSES), max_size=3))
        self.send(g.TodoWriteResult(
            call_id=earlier.call_id, turn_id=earlier.turn_id,
            envelope=data.draw(st.sampled_from([earlier.envelope, envelope(items)])),
            succeeded=data.draw(st.booleans()), top_level=earlier.top_level,
            origin=earlier.origin, point=earlier.point))

    def move_late(self, data: st.DataObject) -> None:
        """A late todo write of the invalidated turn, or a retry naming it."""
        if not self.invalidated:
            return
        if data.draw(st.booleans()):
            self.move_write(data, turn=self.invalidated)
        else:
            self.turn = self.invalidated
            self.send(g.RetryOrContinue(turn_id=self.invalidated))

    def move_plan(self, data: st.DataObject) -> None:
        self.send(g.ApprovalModeChanged(mode=data.draw(st.sampled_from(g.ApprovalMode))))

    def move_stop(self, data: st.DataObject) -> None:
        reason = data.draw(st.sampled_from([None] * 6 + ["hook says no", data.draw(ODD)]))
        self.send(self.build(
            g.NaturalStop, {"hook_reason": "reason"},
            mid_turn_messages=data.draw(st.sampled_from([False] * 5 + [True])),
            queued_prompt=data.draw(st.sampled_from([False] * 7 + [True])),
            relevant_background=data.draw(st.sampled_from([False] * 5 + [True])),
            hook_reason=reason))

    def move_open(self, data: st.DataObject) -> None:
        self.send(g.GuardStreamOpened())

    def move_not_opened(self, data: st.DataObject) -> None:
        self.send(g.GuardStreamNotOpened(reason=data.draw(st.sampled_from(g.NotOpenedReason))))

    def move_tools(self, data: st.DataObject) -> None:
        self.send(g.ToolResultsReady(mid_turn_input=data.draw(st.sampled_from([False] * 4
                                                                              + [True]))))

    def move_mid_turn(self, data: st.DataObject) -> None:
        self.send(g.MidTurnMessage())

    def move_retry(self, data: st.DataObject) -> None:
        self.send(g.RetryOrContinue(turn_id=self.turn or self.fresh("t")))

    def move_error(self, data: st.DataObject) -> None:
        self.send(g.RequestErrored(kind=data.draw(st.sampled_from(g.ErrorKind))))

    def move_hard(self, data: st.DataObject) -> None:
        self.send(g.HardStopped(kind=data.draw(st.sampled_from(g.HardStopKind))))

    def move_trust(self, data: st.DataObject) -> None:
        invalidated = data.draw(st.sampled_from([None, self.turn or None]))
        self.send(g.TrustCleared(kind=data.draw(st.sampled_from(g.TrustClearingKind)),
                                 invalidated_turn_id=invalidated))
        if invalidated is not None:
            self.invalidated = invalidated

    def move_background(self, data: st.DataObject) -> None:
        self.send(g.BackgroundResult(related=data.draw(st.booleans())))

    def move_automatic(self, data: st.DataObject) -> None:
        related = data.draw(st.booleans())
        turn = self.fresh("auto")
        commands = self.send(g.AutomaticTurnStarted(
            turn_id=turn, related=related, kind=data.draw(st.sampled_from(g.AutomaticTurnKind))))
        if not any(isinstance(c, g.DeferAutomaticTurn) for c in commands):
            self.turn = turn

    def move_untrusted(self, data: st.DataObject) -> None:
        items = data.draw(st.lists(st.tuples(TODO_TEXTS, STATUSES), max_size=3))
        kind = data.draw(st.sampled_from([g.TodoHistoryReplayed, g.TodoDiskStateLoaded,
                                          g.SubagentTodoObserved]))
        before = self.state
        assert self.send(kind(envelope=envelope(items))) == ()
        assert self.state == before, "SG-A3: an untrusted todo source changed the guard"

    def move_noise(self, data: st.DataObject) -> None:
        self.send(data.draw(st.sampled_from([
            g.ClientAttached(client_id="c"), g.ModelChanged(),
            g.SettingsChanged(todo_stop_guard=False),
            g.QueuedPromptAborted(last=True), g.QueuedPromptAborted(last=False),
            g.ForegroundPromptSettled(turn_id=self.turn or "x"),
            g.ForegroundPromptSettled(turn_id=self.invalidated or "x", errored=True),
        ])))

    def move_ordinary_stream(self, data: st.DataObject) -> None:
        self.send(g.OrdinaryStreamOpened())

    def teardown(self) -> None:
        if not hasattr(self, "config"):
            return
        state = g.GuardState.create(self.config)
        replayed = []
        for event in self.events:
            state, commands = g.reduce(state, event)
            replayed.append(commands)
        assert replayed == self.log and state == self.state, "not deterministic"


TestGuardHost = GuardHost.TestCase
#: Five times the profile's examples (ci: 1000, dev: 500), but never more than the deep profile's.
TestGuardHost.settings = settings(
    settings.default, max_examples=min(settings.default.max_examples * 5,
                                       max(settings.default.max_examples, 1000)),
    stateful_step_count=max(settings.default.stateful_step_count, 60))
TestGuardHost = pytest.mark.req(
    "SG-A3", "SG-A14", "SG-B1", "SG-B3", "SG-C3", "SG-C6", "SG-S1", "SG-A15", "BG-5", "OB-4",
)(TestGuardHost)
