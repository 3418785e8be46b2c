"""Random session facts through the todo stop guard, with its invariants checked every step.

The machine feeds the guard random, well-formed sequences of every fact a session reports and
keeps a shadow guard that sees the same sequence with every todo text replaced: the two must
decide identically (todo text cannot influence or leak into anything, OB-4). Each step checks the
budget (SG-B1), commit-on-open (SG-B3), suspension (SG-S1), the off switch (SG-C6) and
determinism.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
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


def envelope(items: list[tuple[str, str]]) -> dict[str, Any]:
    return {"type": "todo_list",
            "todos": [{"id": f"i{n}", "content": text, "status": status}
                      for n, (text, status) in enumerate(items)]}


def redacted(event: at.Event) -> at.Event:
    """The same event with every todo text replaced by the same filler."""
    if isinstance(event, g.TodoWriteResult) and isinstance(event.envelope, dict):
        items = [(("redacted"), item["status"]) for item in event.envelope["todos"]]
        return g.TodoWriteResult(call_id=event.call_id, turn_id=event.turn_id,
                                 envelope=envelope(items), succeeded=event.succeeded,
                                 top_level=event.top_level, origin=event.origin,
                                 point=event.point)
    return event


class GuardHost(RuleBasedStateMachine):
    """A session that reports random facts to one guard."""

    @initialize(enabled=st.booleans(), plan=st.sampled_from([False] * 5 + [True]))
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
        self.streams_in_stage = 0  # committed guard-attributable streams since user input/chain
        self.suspended_since_arm = False  # suspended, and no new chain + trusted arm since
        self.pending = False

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def send(self, event: at.Event) -> tuple[at.Command, ...]:
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
        return step.commands

    def check(self, before: g.GuardState, event: at.Event,
              commands: tuple[at.Command, ...]) -> None:
        after = self.state
        if not self.config.enabled:
            assert commands == () and after == before, "SG-C6: an off guard changed something"
            return
        # SG-B3: attempts grow only when a guard stream opens, by exactly one.
        if isinstance(event, g.GuardStreamOpened):
            assert after.attempts == before.attempts + 1
            self.streams_in_stage += 1
        else:
            assert after.attempts <= before.attempts, "an attempt counted before its stream"
        # new user input or a new chain starts a new stage
        if isinstance(event, g.OrdinaryPromptStarted | g.MidTurnMessage) or any(
                isinstance(c, g.StartWorkChain) for c in commands) or (
                after.attempts == 0 and before.attempts > 0):
            self.streams_in_stage = 1 if isinstance(event, g.GuardStreamOpened) else 0
        assert self.streams_in_stage <= g.MAX_ATTEMPTS, "SG-B1: a third automatic stream"
        # SG-S1: a suspended chain continues only after a new chain and a fresh trusted arm.
        if after.phase is g.GuardPhase.SUSPENDED:
            self.suspended_since_arm = True
        if any(isinstance(c, g.StartWorkChain) for c in commands):
            self.suspended_since_arm = False
        for command in commands:
            if isinstance(command, g.ContinueWithGuardPrompt):
                assert not self.suspended_since_arm, "a suspended chain continued"
                assert g.is_guard_prompt(command.text)
            if isinstance(command, g.SendToolResults) and command.sponsor is g.Sponsor.GUARD:
                assert not self.suspended_since_arm
        # exhaustion is reported at most once per chain
        assert sum(isinstance(c, g.ReportGuardExhausted) for c in commands) <= 1

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
        moves = ["prompt", "write", "write", "write", "stop", "stop", "stop", "open", "open",
                 "not_opened", "tools", "tools", "mid_turn", "retry", "error", "hard", "trust",
                 "background", "automatic", "untrusted", "noise", "ordinary_stream"]
        getattr(self, f"move_{data.draw(st.sampled_from(moves))}")(data)

    def move_prompt(self, data: st.DataObject) -> None:
        self.turn = self.fresh("t")
        self.send(g.OrdinaryPromptStarted(turn_id=self.turn))

    def move_write(self, data: st.DataObject) -> None:
        items = data.draw(st.lists(st.tuples(TODO_TEXTS, STATUSES), max_size=4))
        call_id = data.draw(st.sampled_from([self.fresh("c"), "repeat"]))
        self.send(g.TodoWriteResult(
            call_id=call_id, turn_id=self.turn or "t0", envelope=envelope(items),
            succeeded=data.draw(st.sampled_from([True] * 5 + [False])),
            top_level=data.draw(st.sampled_from([True] * 5 + [False])),
            origin=data.draw(st.sampled_from([g.ToolOrigin.BUILTIN] * 5
                                             + [g.ToolOrigin.DISCOVERED]))))

    def move_stop(self, data: st.DataObject) -> None:
        self.send(g.NaturalStop(
            mid_turn_messages=data.draw(st.sampled_from([False] * 5 + [True])),
            queued_prompt=data.draw(st.sampled_from([False] * 7 + [True])),
            relevant_background=data.draw(st.sampled_from([False] * 5 + [True])),
            hook_reason=data.draw(st.sampled_from([None] * 4 + ["hook says no"]))))

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
        self.send(g.HardStop(kind=data.draw(st.sampled_from(g.HardStopKind))))

    def move_trust(self, data: st.DataObject) -> None:
        invalidated = data.draw(st.sampled_from([None, self.turn or None]))
        self.send(g.TrustCleared(kind=data.draw(st.sampled_from(g.TrustClearingKind)),
                                 invalidated_turn_id=invalidated))

    def move_background(self, data: st.DataObject) -> None:
        self.send(g.BackgroundResult(related=data.draw(st.booleans())))

    def move_automatic(self, data: st.DataObject) -> None:
        related = data.draw(st.booleans())
        turn = self.fresh("auto")
        if not related:
            self.turn = turn
        self.send(g.AutomaticTurnStarted(turn_id=turn, related=related,
                                         kind=data.draw(st.sampled_from(g.AutomaticTurnKind))))

    def move_untrusted(self, data: st.DataObject) -> None:
        items = data.draw(st.lists(st.tuples(TODO_TEXTS, STATUSES), max_size=3))
        kind = data.draw(st.sampled_from([g.TodoHistoryReplayed, g.TodoDiskStateLoaded,
                                          g.SubagentTodoObserved]))
        before = self.state
        assert self.send(kind(envelope=envelope(items))) == ()
        assert self.state == before, "SG-A3: an untrusted todo source changed the guard"

    def move_noise(self, data: st.DataObject) -> None:
        self.send(data.draw(st.sampled_from([
            g.ClientAttached(), g.ModelChanged(), g.SettingsChanged(todo_stop_guard=False),
            g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
            g.ApprovalModeChanged(mode=g.ApprovalMode.DEFAULT),
            g.QueuedPromptAborted(last=True), g.ForegroundPromptSettled(turn_id=self.turn or "x"),
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
TestGuardHost.settings = settings(
    settings.default, max_examples=max(settings.default.max_examples, 1000),
    stateful_step_count=max(settings.default.stateful_step_count, 60))
