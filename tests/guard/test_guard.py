"""The todo stop guard part, one requirement at a time (SG-*, OB-1 ... OB-4)."""

from __future__ import annotations

from typing import Any

import pytest
from driver import Recorder

import agentturn as at
from agentturn import guard as g

ON = g.GuardConfig(todo_stop_guard=True, daemon=True)


def todos(*statuses: str, content: str = "write the parser") -> dict[str, Any]:
    return {"type": "todo_list",
            "todos": [{"id": str(i), "content": f"{content} {i}", "status": status}
                      for i, status in enumerate(statuses)]}


class Guard(Recorder):
    """A :class:`Recorder` for the guard, with the common session facts."""

    def __init__(self, config: g.GuardConfig = ON) -> None:
        super().__init__(g.reduce, g.GuardState.create(config))
        self.calls = 0

    def prompt(self, turn_id: str = "t1") -> tuple[at.Command, ...]:
        self.turn = turn_id
        return self.send(g.OrdinaryPromptStarted(turn_id=turn_id))

    def write(self, *statuses: str, **fields: Any) -> tuple[at.Command, ...]:
        """A todo-write call starts and reports its result (trusted unless ``fields`` say not)."""
        self.calls += 1
        call_id = fields.setdefault("call_id", f"todo-{self.calls}")
        turn_id = fields.setdefault("turn_id", self.turn)
        started = self.send(g.TodoWriteStarted(call_id=call_id, turn_id=turn_id))
        return started + self.report(*statuses, **fields)

    def report(self, *statuses: str, **fields: Any) -> tuple[at.Command, ...]:
        """A todo-write result alone, with no start (a duplicate or re-reported result)."""
        event = dict(call_id=f"todo-{self.calls}", turn_id=self.turn, envelope=todos(*statuses),
                     succeeded=True)
        event.update(fields)
        return self.send(g.TodoWriteResult(**event))

    def stop(self, **context: Any) -> tuple[at.Command, ...]:
        return self.send(g.NaturalStop(**context))

    def continue_once(self) -> None:
        """Natural stop, the continuation opens."""
        commands = self.stop()
        assert isinstance(commands[0], g.ContinueWithGuardPrompt), commands
        self.send(g.GuardStreamOpened())


def armed(statuses: tuple[str, ...] = ("pending", "in_progress", "completed"),
          config: g.GuardConfig = ON) -> Guard:
    guard = Guard(config)
    guard.prompt()
    guard.write(*statuses)
    return guard


def continues(commands: tuple[at.Command, ...]) -> bool:
    return any(isinstance(c, g.ContinueWithGuardPrompt) for c in commands)


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.req("SG-C1")
def test_the_setting_is_off_by_default() -> None:
    """req: SG-C1 — a default config has no guard: an armed-looking chain never continues."""
    assert g.GuardConfig().todo_stop_guard is False
    guard = armed(config=g.GuardConfig(daemon=True))
    assert guard.state.phase is g.GuardPhase.OFF
    assert guard.stop() == ()


@pytest.mark.req("SG-C2")
def test_the_setting_is_read_once_when_the_session_is_created() -> None:
    """req: SG-C2 — changing the setting later affects only new sessions."""
    off = Guard(g.GuardConfig(daemon=True))
    off.send(g.SettingsChanged(todo_stop_guard=True))
    off.prompt()
    off.write("pending")
    assert off.stop() == ()
    on = armed()
    on.send(g.SettingsChanged(todo_stop_guard=False))
    assert continues(on.stop())


@pytest.mark.req("SG-C3")
@pytest.mark.parametrize("config", [
    g.GuardConfig(todo_stop_guard=True, daemon=True, safe_mode=True),
    g.GuardConfig(todo_stop_guard=True, daemon=True, bare_mode=True),
    g.GuardConfig(todo_stop_guard=True, daemon=True, approval_mode=g.ApprovalMode.PLAN),
], ids=["safe", "bare", "plan"])
def test_forced_off_in_safe_bare_and_plan_mode(config: g.GuardConfig) -> None:
    """req: SG-C3 — safe mode, bare mode and Approval plan mode: no continuation."""
    assert not continues(armed(config=config).stop())


@pytest.mark.req("SG-C3")
def test_a_session_created_in_plan_mode_starts_in_plan() -> None:
    """req: SG-C3 — an enabled guard created in Approval plan mode starts in the PLAN phase."""
    config = g.GuardConfig(todo_stop_guard=True, daemon=True, approval_mode=g.ApprovalMode.PLAN)
    assert g.GuardState.create(config).phase is g.GuardPhase.PLAN


@pytest.mark.req("SG-C3", "SG-A12", "SG-A13")
def test_plan_mode_is_a_chain_boundary_and_leaving_it_does_not_restore_the_chain() -> None:
    """req: SG-C3, SG-A12, SG-A13 — into Plan clears trust; out of Plan the guard waits in
    NO_CHAIN, and only a new prompt plus a trusted arm continues again."""
    guard = armed()
    guard.continue_once()
    guard.send(g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN))
    assert not continues(guard.stop())
    assert guard.send(g.ApprovalModeChanged(mode=g.ApprovalMode.DEFAULT)) == ()
    assert guard.state.phase is g.GuardPhase.NO_CHAIN
    assert not continues(guard.stop())
    guard.prompt("t2")
    assert not continues(guard.stop())
    guard.write("pending")
    (command,) = guard.stop()
    assert isinstance(command, g.ContinueWithGuardPrompt) and command.attempt == 1


def _in_chain_phase(phase: g.GuardPhase) -> Guard:
    """A guard armed in t1 and then moved into ``phase`` by real events."""
    guard = armed()
    moves: dict[g.GuardPhase, list[at.Event]] = {
        g.GuardPhase.NO_CHAIN: [g.TrustCleared(kind=g.TrustClearingKind.REWIND)],
        g.GuardPhase.ACTIVE: [],
        g.GuardPhase.CONTINUING: [g.NaturalStop(hook_reason="lint")],
        g.GuardPhase.PAUSED: [g.RequestErrored(kind=g.ErrorKind.API)],
        g.GuardPhase.SUSPENDED: [g.HardStopped(kind=g.HardStopKind.USER_CANCELLED)],
        g.GuardPhase.AWAITING_PROMPT: [g.NaturalStop(queued_prompt=True)],
    }
    guard.send(*moves[phase])
    assert guard.state.phase is phase
    return guard


CHAIN_PHASES = [p for p in g.GuardPhase if p.name not in ("OFF", "PLAN")]


@pytest.mark.req("SG-C3", "SG-A12")
@pytest.mark.parametrize("phase", CHAIN_PHASES, ids=lambda p: p.name)
def test_entering_plan_mode_from_any_chain_phase_clears_trust(phase: g.GuardPhase) -> None:
    """req: SG-C3, SG-A12 — PLAN, unarmed, no attempts, nothing pending, no loop, no live turn."""
    guard = _in_chain_phase(phase)
    guard.send(g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN))
    state = guard.state
    assert state.phase is g.GuardPhase.PLAN
    assert (state.armed, state.unfinished, state.attempts, state.pending_attempt) == (
        False, 0, 0, 0)
    assert (state.loop, state.live_turn, state.open_call) == (g.LoopOwner.NONE, "", "")
    # a queued prompt the chain awaited keeps its priority over automatic turns (SO-2, BG-7)
    assert g.holds_automatic_turns(state) is (phase is g.GuardPhase.AWAITING_PROMPT)


@pytest.mark.req("SG-C3")
def test_in_plan_mode_nothing_arms_starts_sends_or_decides() -> None:
    """req: SG-C3 — a prompt or automatic turn starts no chain, a todo write does not arm, tool
    results of the guard's own loop get no guard-sponsored send, and a stop decides nothing."""
    guard = armed()
    guard.continue_once()  # the guard's tool loop is open
    guard.send(g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN))
    assert guard.send(g.ToolResultsReady()) == ()
    assert guard.prompt("t2") == ()
    assert guard.send(g.AutomaticTurnStarted(turn_id="cron", kind=g.AutomaticTurnKind.CRON,
                                             related=False)) == ()
    assert guard.write("pending") == () and not guard.state.armed
    assert g.decide(guard.state, g.NaturalStop()) == g.GuardDecision(
        decision=g.Decision.NONE, reason=g.DecisionReason.PLAN_MODE)
    assert guard.stop() == ()
    assert guard.state.phase is g.GuardPhase.PLAN


@pytest.mark.req("SG-A13")
def test_a_change_between_non_plan_modes_changes_nothing_even_mid_continuation() -> None:
    """req: SG-A13 — DEFAULT to YOLO to AUTO_EDIT while a continuation is pending: same state."""
    guard = armed()
    guard.stop()
    before = guard.state
    assert guard.send(g.ApprovalModeChanged(mode=g.ApprovalMode.YOLO),
                      g.ApprovalModeChanged(mode=g.ApprovalMode.AUTO_EDIT)) == ()
    assert guard.state == before


@pytest.mark.req("SG-C4")
def test_disable_all_hooks_does_not_disable_the_guard() -> None:
    """req: SG-C4 — the guard is built in, not an external hook."""
    config = g.GuardConfig(todo_stop_guard=True, daemon=True, disable_all_hooks=True)
    assert continues(armed(config=config).stop())


@pytest.mark.req("SG-C5")
def test_the_guard_is_daemon_only() -> None:
    """req: SG-C5 — an interactive (TUI) session never has it."""
    guard = armed(config=g.GuardConfig(todo_stop_guard=True, daemon=False))
    assert guard.state.phase is g.GuardPhase.OFF and guard.stop() == ()


@pytest.mark.req("SG-C6")
def test_with_the_setting_off_the_guard_emits_nothing_at_all() -> None:
    """req: SG-C6 — off: every kind of event, including hook, cron, notification and prompt
    facts, yields no command and no change (property-tested in test_guard_properties)."""
    guard = Guard(g.GuardConfig())
    before = guard.state
    events = [g.OrdinaryPromptStarted(turn_id="t"), g.TodoWriteResult(
        call_id="c", turn_id="t", envelope=todos("pending"), succeeded=True),
        g.NaturalStop(hook_reason="lint failed"), g.AutomaticTurnStarted(
            turn_id="cron", kind=g.AutomaticTurnKind.CRON, related=False),
        g.ToolResultsReady(), g.QueuedPromptAborted(last=True), g.TrustCleared(
            kind=g.TrustClearingKind.REWIND)]
    assert guard.send(*events) == ()
    assert guard.state == before


# --- arming and trust -------------------------------------------------------------------------


@pytest.mark.req("SG-A1")
def test_a_trusted_todo_write_result_arms_the_guard() -> None:
    """req: SG-A1 — successful, top-level, built-in, {type: 'todo_list', todos: [...]}: armed
    with 2 unfinished (pending + in_progress)."""
    guard = armed(("pending", "in_progress", "completed"))
    assert guard.state.armed and guard.state.unfinished == 2


@pytest.mark.req("SG-A1")
@pytest.mark.parametrize("envelope", [
    '{"type": "todo_list", "todos": []}',
    {"type": "todo_lists", "todos": []},
    {"type": "todo_list", "todos": ({"id": "1", "content": "x", "status": "pending"},)},
    {"type": "todo_list", "todos": [{"id": 1, "content": "x", "status": "pending"}]},
    {"type": "todo_list", "todos": [{"id": "1", "content": None, "status": "pending"}]},
    {"type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "done"}]},
    {"type": "todo_list", "todos": [{"id": "1", "content": "x"}]},
    {"type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "pending"}, "x"]},
    {"todos": [{"id": "1", "content": "x", "status": "pending"}]},
    None,
], ids=["json-string", "wrong-type", "tuple", "int-id", "no-content-str", "bad-status",
        "no-status", "bad-item", "no-type", "none"])
def test_anything_but_the_exact_envelope_is_rejected_whole(envelope: object) -> None:
    """req: SG-A1 — the strict parser rejects the whole envelope and nothing changes."""
    assert g.parse_todo_envelope(envelope) is None
    guard = Guard()
    guard.prompt()
    guard.write("pending")
    before = (guard.state.armed, guard.state.unfinished)
    if isinstance(envelope, dict) and isinstance(envelope.get("todos"), tuple):
        # not a JSON value (it would come back from a trace as a list): refused when built
        with pytest.raises(at.FieldError, match="envelope must be a JSON value"):
            guard.write(envelope=envelope)
    else:
        guard.write(envelope=envelope)
    assert (guard.state.armed, guard.state.unfinished) == before


@pytest.mark.req("SG-A2")
def test_only_the_observation_before_post_tool_use_hooks_is_trusted() -> None:
    """req: SG-A2 — a result seen after PostToolUse hooks does not arm; the trusted one, seen
    before them, does, and a PostToolUse shouldStop that follows still suspends."""
    guard = Guard()
    guard.prompt()
    guard.write("pending", point=g.ObservationPoint.AFTER_POST_TOOL_USE)
    assert not guard.state.armed
    guard.write("pending", point=g.ObservationPoint.AFTER_STATUS)
    assert guard.state.armed
    guard.send(g.HardStopped(kind=g.HardStopKind.POST_TOOL_USE_STOP))
    assert not continues(guard.stop())


@pytest.mark.req("SG-A3")
@pytest.mark.parametrize("event", [
    g.TodoArgumentsObserved(arguments=todos("pending")),
    g.TodoHistoryReplayed(envelope=todos("pending")),
    g.TodoDiskStateLoaded(envelope=todos("pending")),
    g.SubagentTodoObserved(envelope=todos("pending")),
    g.TodoWriteResult(call_id="c", turn_id="t1", envelope=todos("pending"), succeeded=False),
    g.TodoWriteResult(call_id="c", turn_id="t1", envelope=todos("pending"), succeeded=True,
                      top_level=False),
    g.TodoWriteResult(call_id="c", turn_id="t1", envelope=todos("pending"), succeeded=True,
                      origin=g.ToolOrigin.DISCOVERED),
], ids=["arguments", "replayed-history", "disk-state", "sub-agent", "failed-call",
        "not-top-level", "shadowing-discovered-tool"])
def test_untrusted_todo_sources_never_arm(event: at.Event) -> None:
    """req: SG-A3 — each untrusted source is a distinct input and never arms, even a result
    that answers the open todo-write call."""
    guard = Guard()
    guard.prompt()
    if isinstance(event, g.TodoWriteResult):
        guard.send(g.TodoWriteStarted(call_id="c", turn_id="t1"))
    before = guard.state
    assert guard.send(event) == ()
    assert guard.state.armed is False and guard.state.unfinished == before.unfinished
    assert not continues(guard.stop())


@pytest.mark.req("SG-A3")
def test_a_duplicate_todo_write_result_is_not_trusted() -> None:
    """req: SG-A3 — a second result with the same call id (a replayed duplicate) changes
    nothing: the first closed the call."""
    guard = Guard()
    guard.prompt()
    guard.write("pending", "pending", call_id="same")
    before = guard.state
    assert guard.report("completed", "completed", call_id="same") == ()
    assert guard.state == before and guard.state.unfinished == 2


@pytest.mark.req("SG-A3")
def test_a_failed_call_re_reported_as_successful_never_arms() -> None:
    """req: SG-A3 — a failed result closes the open call, so the same call id reported again
    as successful finds nothing open and does not arm."""
    guard = Guard()
    guard.prompt()
    guard.write("pending", call_id="c1", succeeded=False)
    assert guard.report("pending", call_id="c1", succeeded=True) == ()
    assert not guard.state.armed
    assert not continues(guard.stop())


@pytest.mark.req("SG-A3")
def test_a_duplicate_is_refused_however_many_writes_came_between() -> None:
    """req: SG-A3 — a duplicate of the first call after 40 other trusted writes is still
    refused, with bounded state (one open call id, no memory of old ones)."""
    guard = Guard()
    guard.prompt()
    guard.write("pending", call_id="first")
    for _ in range(40):
        guard.write("pending", "pending")
    guard.report("completed", call_id="first")
    assert guard.state.unfinished == 2
    assert not hasattr(guard.state, "seen_calls") and not hasattr(g, "SEEN_CALLS_KEPT")


@pytest.mark.req("SG-A3")
def test_a_result_for_a_call_that_never_started_is_not_trusted() -> None:
    """req: SG-A3 — without TodoWriteStarted there is no open call to answer; nor does a result
    answer a call other than the open one."""
    guard = Guard()
    guard.prompt()
    guard.report("pending", call_id="never-started")
    guard.send(g.TodoWriteStarted(call_id="open", turn_id="t1"))
    guard.report("pending", call_id="another")
    assert not guard.state.armed
    guard.report("pending", call_id="open")
    assert guard.state.armed


@pytest.mark.req("SG-A4")
def test_the_newest_result_replaces_the_count() -> None:
    """req: SG-A4 — 3 unfinished, then 1: the continuation says 1."""
    guard = armed(("pending", "pending", "in_progress"))
    guard.write("completed", "completed", "pending")
    (command,) = guard.stop()
    assert isinstance(command, g.ContinueWithGuardPrompt) and command.unfinished == 1
    assert command.text.startswith("[Todo Stop Guard] 1 todo item(s)")


@pytest.mark.req("SG-A5")
@pytest.mark.parametrize("statuses", [(), ("completed", "completed")], ids=["empty", "all-done"])
def test_an_empty_or_completed_list_disarms_at_once(statuses: tuple[str, ...]) -> None:
    """req: SG-A5 — disarmed immediately: the next stop does not continue."""
    guard = armed()
    guard.write(*statuses)
    assert not guard.state.armed and guard.state.unfinished == 0
    assert not continues(guard.stop())


@pytest.mark.req("SG-A6")
def test_disarming_does_not_cut_a_tool_loop_opened_by_a_committed_guard_stream() -> None:
    """req: SG-A6 — the guard stream completes the list (disarmed), yet its tool results are
    still sent; afterwards no new natural-stop continuation is made."""
    guard = armed(("pending",))
    guard.continue_once()
    guard.write("completed")
    assert not guard.state.armed
    assert guard.send(g.ToolResultsReady()) == (
        g.SendToolResults(sponsor=g.Sponsor.GUARD, attempt=2),)
    guard.send(g.GuardStreamOpened())
    assert not continues(guard.stop())


@pytest.mark.req("SG-A7")
def test_a_new_ordinary_prompt_starts_an_unarmed_chain() -> None:
    """req: SG-A7 — a new prompt resets the baseline (StartWorkChain) and inherits nothing."""
    guard = armed()
    assert guard.prompt("t2") == (g.StartWorkChain(chain=2), g.ReleaseAutomaticQueues())
    assert not guard.state.armed and guard.state.attempts == 0
    assert not continues(guard.stop())


@pytest.mark.req("SG-A8")
def test_retry_keeps_the_chain_only_while_trusted_unfinished_state_exists() -> None:
    """req: SG-A8 — with trusted unfinished state: same chain, no new baseline. After a
    trust-clearing event: a fresh baseline, unarmed, must arm again."""
    guard = armed()
    guard.send(g.RequestErrored(kind=g.ErrorKind.API))
    assert guard.send(g.RetryOrContinue(turn_id="t1")) == ()
    assert continues(guard.stop())
    guard.send(g.GuardStreamOpened())
    guard.send(g.TrustCleared(kind=g.TrustClearingKind.REWIND))
    assert guard.send(g.RetryOrContinue(turn_id="t1b")) == (g.StartWorkChain(chain=2),)
    assert not continues(guard.stop())
    guard.turn = "t1b"
    guard.write("pending")
    assert continues(guard.stop())


@pytest.mark.req("SG-A9")
def test_a_mid_turn_message_keeps_activation_and_starts_a_fresh_stage() -> None:
    """req: SG-A9 — after two attempts, a mid-turn message: still armed, two attempts again."""
    guard = armed()
    guard.continue_once()
    guard.continue_once()
    guard.send(g.MidTurnMessage())
    assert guard.state.armed and guard.state.attempts == 0
    guard.continue_once()
    assert guard.state.attempts == 1


@pytest.mark.req("SG-A10")
def test_cron_and_notification_turns_can_establish_their_own_chain() -> None:
    """req: SG-A10 — an unrelated cron turn starts its own chain and arms through its own todo
    write; a related notification turn keeps the armed chain and its budget."""
    guard = Guard()
    assert guard.send(g.AutomaticTurnStarted(turn_id="cron-1", kind=g.AutomaticTurnKind.CRON,
                                             related=False)) == (g.StartWorkChain(chain=1),)
    guard.turn = "cron-1"
    guard.write("pending")
    guard.continue_once()
    assert guard.send(g.AutomaticTurnStarted(
        turn_id="note-1", kind=g.AutomaticTurnKind.NOTIFICATION, related=True)) == ()
    assert guard.state.attempts == 1 and guard.state.armed
    (command,) = guard.stop()
    assert isinstance(command, g.ContinueWithGuardPrompt) and command.attempt == 2


def automatic(turn_id: str = "auto", related: bool = True,
              kind: g.AutomaticTurnKind = g.AutomaticTurnKind.NOTIFICATION
              ) -> g.AutomaticTurnStarted:
    return g.AutomaticTurnStarted(turn_id=turn_id, kind=kind, related=related)


@pytest.mark.req("SG-A10", "SG-B2")
def test_a_related_automatic_turn_during_a_pending_continuation_keeps_the_budget() -> None:
    """req: SG-A10, SG-B2 — in CONTINUING a related turn keeps the chain and its committed
    attempt (no new chain); the pending, uncommitted attempt is dropped, so the next is 2."""
    guard = armed()
    guard.continue_once()
    guard.stop()
    assert guard.state.phase is g.GuardPhase.CONTINUING
    assert guard.send(automatic("note-1")) == ()
    assert guard.state.phase is g.GuardPhase.ACTIVE and guard.state.chain == 1
    assert guard.state.attempts == 1 and guard.state.armed
    (command,) = guard.stop()
    assert isinstance(command, g.ContinueWithGuardPrompt) and command.attempt == 2


@pytest.mark.req("SG-A10", "SG-A11", "SG-B2")
@pytest.mark.parametrize("phase", [g.GuardPhase.ACTIVE, g.GuardPhase.PAUSED],
                         ids=lambda p: p.name)
def test_a_related_automatic_turn_keeps_an_active_or_paused_chain(phase: g.GuardPhase) -> None:
    """req: SG-A10, SG-A11, SG-B2 — same chain, same attempts, a pause is cleared, and the
    automatic turn's own todo writes are the live ones."""
    guard = armed()
    guard.continue_once()
    if phase is g.GuardPhase.PAUSED:
        guard.send(g.RequestErrored(kind=g.ErrorKind.NETWORK))
    assert guard.send(automatic("note-1")) == ()
    assert guard.state.phase is g.GuardPhase.ACTIVE
    assert (guard.state.chain, guard.state.attempts) == (1, 1)
    guard.write("pending", "pending", "pending", turn_id="note-1")
    assert guard.state.unfinished == 3


@pytest.mark.req("SG-A10")
def test_a_related_automatic_turn_with_no_chain_starts_one() -> None:
    """req: SG-A10 — with no chain to relate to, it starts its own unarmed chain."""
    guard = Guard()
    assert guard.send(automatic("note-1")) == (g.StartWorkChain(chain=1),)
    assert guard.state.phase is g.GuardPhase.ACTIVE and not guard.state.armed


@pytest.mark.req("SG-A11", "SG-S1")
def test_a_related_automatic_turn_never_revives_a_suspended_chain() -> None:
    """req: SG-A11, SG-S1 — suspended: no new chain, nothing held, state unchanged."""
    guard = armed()
    guard.send(g.HardStopped(kind=g.HardStopKind.USER_CANCELLED))
    before = guard.state
    assert guard.send(automatic("note-1")) == ()
    assert guard.state == before


@pytest.mark.req("SO-2", "SO-3", "BG-5")
@pytest.mark.parametrize("related", [True, False], ids=["related", "unrelated"])
def test_an_automatic_turn_waits_behind_a_queued_prompt(related: bool) -> None:
    """req: SO-2, SO-3, BG-5 — while AWAITING_PROMPT any automatic turn is deferred and the old
    chain is not revived; aborting the last queued prompt releases the queues once."""
    guard = armed()
    guard.stop(queued_prompt=True)
    before = guard.state
    assert guard.send(automatic("cron-1", related=related, kind=g.AutomaticTurnKind.CRON)) == (
        g.DeferAutomaticTurn(turn_id="cron-1", kind=g.AutomaticTurnKind.CRON),)
    assert guard.state == before
    assert guard.send(g.QueuedPromptAborted(last=True)) == (g.ReleaseAutomaticQueues(),)
    assert guard.state.phase is g.GuardPhase.NO_CHAIN and not guard.state.armed


@pytest.mark.req("SO-2", "SO-4", "BG-7")
@pytest.mark.parametrize("boundary", [
    g.TrustCleared(kind=g.TrustClearingKind.REWIND),
    g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
    g.HardStopped(kind=g.HardStopKind.USER_CANCELLED),
], ids=["rewind", "plan-mode", "hard-stop"])
def test_a_queued_prompt_keeps_its_priority_across_a_chain_boundary(boundary: at.Event) -> None:
    """req: SO-2, BG-7 — the guard alone, awaiting a queued prompt: a rewind, Plan mode or a
    hard stop ends the chain but releases nothing; automatic turns stay deferred until the
    prompt runs (an ordinary prompt starts) or the last queued prompt's abort is reported."""
    for ending in (g.OrdinaryPromptStarted(turn_id="q1"), g.QueuedPromptAborted(last=True)):
        guard = armed()
        guard.stop(queued_prompt=True)
        assert guard.send(boundary) == ()
        assert g.holds_automatic_turns(guard.state)
        assert guard.send(automatic("cron-1", related=False, kind=g.AutomaticTurnKind.CRON)) == (
            g.DeferAutomaticTurn(turn_id="cron-1", kind=g.AutomaticTurnKind.CRON),)
        assert guard.send(g.QueuedPromptAborted(last=False)) == ()
        assert g.ReleaseAutomaticQueues() in guard.send(ending)
        assert not guard.state.prompt_first
        assert not g.holds_automatic_turns(guard.state)


@pytest.mark.req("BG-5")
def test_an_unrelated_automatic_turn_waits_until_the_chain_can_no_longer_resume() -> None:
    """req: BG-5 — armed: deferred, state unchanged; once the list completes (disarmed) the
    queues are released, and the same turn then starts an independent unarmed chain."""
    guard = armed()
    before = guard.state
    cron = automatic("cron-1", related=False, kind=g.AutomaticTurnKind.CRON)
    assert guard.send(cron) == (
        g.DeferAutomaticTurn(turn_id="cron-1", kind=g.AutomaticTurnKind.CRON),)
    assert guard.state == before
    assert guard.write("completed", "completed") == (g.ReleaseAutomaticQueues(),)
    assert guard.send(cron) == (g.StartWorkChain(chain=2),)
    assert not guard.state.armed


@pytest.mark.req("SG-A15", "BG-5")
def test_automatic_turns_wait_for_an_invalidated_foreground_turn_to_settle() -> None:
    """req: SG-A15, BG-5 — between the rewind and t1 settling, an automatic turn is deferred;
    afterwards it starts its own chain."""
    guard = armed()
    guard.send(g.TrustCleared(kind=g.TrustClearingKind.REWIND, invalidated_turn_id="t1"))
    assert g.holds_automatic_turns(guard.state)
    assert isinstance(guard.send(automatic("n", related=False))[0], g.DeferAutomaticTurn)
    guard.send(g.ForegroundPromptSettled(turn_id="t1", errored=True))
    assert guard.send(automatic("n", related=False)) == (g.StartWorkChain(chain=2),)


@pytest.mark.req("SG-A11")
def test_a_related_background_result_clears_a_pause_but_not_a_suspension() -> None:
    """req: SG-A11 — paused: cleared; suspended: stays suspended."""
    guard = armed()
    guard.send(g.RequestErrored(kind=g.ErrorKind.NETWORK))
    guard.send(g.BackgroundResult(related=False))
    assert guard.state.phase is g.GuardPhase.PAUSED
    guard.send(g.BackgroundResult(related=True))
    assert guard.state.phase is g.GuardPhase.ACTIVE
    guard.send(g.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION))
    guard.send(g.BackgroundResult(related=True))
    assert guard.state.phase is g.GuardPhase.SUSPENDED


@pytest.mark.req("SG-A12")
@pytest.mark.parametrize("kind", list(g.TrustClearingKind), ids=lambda k: k.value)
def test_trust_clearing_events_drop_all_guard_state(kind: g.TrustClearingKind) -> None:
    """req: SG-A12 — rewind, history restoration, fork, working-directory change, new session,
    disk restoration, daemon and agent restart: disarmed, no continuation, nothing persisted."""
    guard = armed()
    commands = guard.send(g.TrustCleared(kind=kind))
    assert guard.state.phase is g.GuardPhase.NO_CHAIN and not guard.state.armed
    assert not continues(guard.stop())
    assert not any(isinstance(c, at.Persist) for c in guard.commands + list(commands))


@pytest.mark.req("SG-A13")
@pytest.mark.parametrize("event", [
    g.ClientAttached(client_id="c"), g.ModelChanged(),
    g.ApprovalModeChanged(mode=g.ApprovalMode.AUTO_EDIT),
    g.ApprovalModeChanged(mode=g.ApprovalMode.YOLO)], ids=["attach", "model", "auto-edit", "yolo"])
def test_attach_model_and_non_plan_mode_changes_keep_the_chain(event: at.Event) -> None:
    """req: SG-A13 — same state, no new work chain."""
    guard = armed()
    guard.continue_once()
    before = guard.state
    assert guard.send(event) == ()
    assert guard.state == before


@pytest.mark.req("SG-A14")
def test_late_results_of_an_invalidated_turn_cannot_rearm() -> None:
    """req: SG-A14 — after a rewind invalidates t1, t1's late todo write does nothing, even
    once t2 starts; t2's own result arms."""
    guard = Guard()
    guard.prompt("t1")
    guard.send(g.TrustCleared(kind=g.TrustClearingKind.REWIND, invalidated_turn_id="t1"))
    guard.write("pending")  # turn t1, late
    assert not guard.state.armed
    guard.prompt("t2")
    guard.send(g.TodoWriteResult(call_id="late", turn_id="t1", envelope=todos("pending"),
                                 succeeded=True))
    assert not guard.state.armed
    guard.write("pending")
    assert guard.state.armed


@pytest.mark.req("SG-A14")
def test_a_retry_naming_the_invalidated_turn_starts_a_fresh_chain_its_own_writes_arm() -> None:
    """req: SG-A14, SG-A8 — after a rewind invalidates t1, t1's writes never arm; a
    RetryOrContinue(t1) starts a fresh chain, where a result of a call started before the
    invalidation still cannot arm, and the retry's own new trusted write can."""
    guard = Guard()
    guard.prompt("t1")
    guard.send(g.TodoWriteStarted(call_id="before", turn_id="t1"))
    guard.send(g.TrustCleared(kind=g.TrustClearingKind.REWIND, invalidated_turn_id="t1"))
    guard.write("pending", turn_id="t1")
    assert not guard.state.armed
    assert guard.send(g.RetryOrContinue(turn_id="t1")) == (g.StartWorkChain(chain=2),)
    guard.send(g.TodoWriteResult(call_id="before", turn_id="t1", envelope=todos("pending"),
                                 succeeded=True))
    assert not guard.state.armed and not continues(guard.stop())
    guard.write("pending", turn_id="t1")
    assert guard.state.armed and continues(guard.stop())


@pytest.mark.req("SG-A15")
@pytest.mark.parametrize("errored", [False, True])
def test_deferred_queues_are_released_when_the_invalidated_prompt_settles(errored: bool) -> None:
    """req: SG-A15 — not before it settles; when it settles, even through an error path."""
    guard = armed()
    assert guard.send(g.TrustCleared(kind=g.TrustClearingKind.FORK,
                                     invalidated_turn_id="t1")) == ()
    assert guard.send(g.ForegroundPromptSettled(turn_id="other")) == ()
    assert guard.send(g.ForegroundPromptSettled(turn_id="t1", errored=errored)) == (
        g.ReleaseAutomaticQueues(),)
    assert guard.send(g.ForegroundPromptSettled(turn_id="t1")) == ()


# --- budget -----------------------------------------------------------------------------------


@pytest.mark.req("SG-B1")
def test_at_most_two_automatic_streams_per_stage() -> None:
    """req: SG-B1 — two continuations, then the third stop reports exhaustion instead."""
    guard = armed()
    guard.continue_once()
    guard.continue_once()
    commands = guard.stop()
    assert not continues(commands)
    assert len(guard.of(g.ContinueWithGuardPrompt)) == 2


@pytest.mark.req("SG-B2")
def test_retry_and_background_results_keep_the_stage_budget() -> None:
    """req: SG-B2 — one attempt, an error, a retry and a related result: the next is attempt 2
    (and then no more); a mid-turn message would have reset it (see SG-A9)."""
    guard = armed()
    guard.continue_once()
    guard.send(g.RequestErrored(kind=g.ErrorKind.API), g.BackgroundResult(related=True))
    guard.send(g.RetryOrContinue(turn_id="t1"))
    (command,) = guard.stop()
    assert isinstance(command, g.ContinueWithGuardPrompt) and command.attempt == 2


@pytest.mark.req("SG-B3")
def test_deciding_is_pure_and_commits_nothing() -> None:
    """req: SG-B3 — decide() twice gives the same attempt; the state is untouched."""
    guard = armed()
    first = g.decide(guard.state, g.NaturalStop())
    second = g.decide(guard.state, g.NaturalStop())
    assert first == second and first.attempt == 1 and guard.state.attempts == 0


@pytest.mark.req("SG-B3")
@pytest.mark.parametrize("reason", list(g.NotOpenedReason), ids=lambda r: r.value)
def test_an_attempt_that_never_opened_consumes_nothing(reason: g.NotOpenedReason) -> None:
    """req: SG-B3 — cancelled, compaction failure, token rejection before the stream opens:
    attempts stay 0 (and the chain is suspended: these are hard paths)."""
    guard = armed()
    guard.stop()
    guard.send(g.GuardStreamNotOpened(reason=reason))
    assert guard.state.attempts == 0 and not guard.of(g.EmitAgentMessageChunk)
    assert guard.state.phase is g.GuardPhase.SUSPENDED


@pytest.mark.req("SG-B3")
def test_a_stream_failure_after_it_opened_consumes_the_attempt() -> None:
    """req: SG-B3, SG-B1 — an error before opening consumes nothing, and the retry re-sends
    that same continuation, which commits attempt 1 when it opens (so the retry is not a free
    third guard stream); opened then failed: the attempt counts."""
    guard = armed()
    (first,) = guard.stop()
    guard.send(g.RequestErrored(kind=g.ErrorKind.API))  # before open
    assert guard.state.attempts == 0 and guard.state.phase is g.GuardPhase.PAUSED
    assert guard.send(g.RetryOrContinue(turn_id="t1")) == ()
    assert guard.state.phase is g.GuardPhase.CONTINUING
    (chunk,) = guard.send(g.GuardStreamOpened())
    assert isinstance(chunk, g.EmitAgentMessageChunk) and isinstance(
        first, g.ContinueWithGuardPrompt)
    assert (chunk.text, chunk.meta.attempt, guard.state.attempts) == (first.text, 1, 1)
    guard.send(g.RequestErrored(kind=g.ErrorKind.NETWORK))  # after open
    guard.send(g.RetryOrContinue(turn_id="t1"))
    assert guard.state.phase is g.GuardPhase.ACTIVE
    assert g.decide(guard.state, g.NaturalStop()).attempt == 2


@pytest.mark.req("SG-B4")
def test_a_tool_result_follow_up_of_a_guard_stream_counts() -> None:
    """req: SG-B4 — the follow-up is attempt 2 and, with todos unfinished, carries the second
    continuation's text; after it no third stream opens at the stop."""
    guard = armed()
    guard.continue_once()
    assert guard.send(g.ToolResultsReady()) == (
        g.SendToolResults(sponsor=g.Sponsor.GUARD, attempt=2,
                          text=g.continuation_text(2, guard.state.unfinished)),)
    guard.send(g.GuardStreamOpened())
    assert guard.state.attempts == 2
    assert not continues(guard.stop())


@pytest.mark.req("SG-B5")
def test_tool_calls_of_the_second_stream_run_but_no_third_stream_opens() -> None:
    """req: SG-B5 — the results are kept (KeepToolResults), no SendToolResults, exhaustion is
    reported once."""
    guard = armed()
    guard.continue_once()
    guard.continue_once()
    commands = guard.send(g.ToolResultsReady())
    assert isinstance(commands[0], g.KeepToolResults)
    assert not any(isinstance(c, g.SendToolResults) for c in commands)
    assert [type(c) for c in commands] == [g.KeepToolResults, g.ReportGuardExhausted,
                                           g.ReleaseAutomaticQueues]


@pytest.mark.req("SG-B6")
def test_completing_every_todo_lets_the_remaining_attempt_send_the_result_without_a_prompt(
) -> None:
    """req: SG-B6 — no second unfinished-todo prompt; the send commits attempt 2 with an
    empty chunk text, so the model can finish its response."""
    guard = armed(("pending",))
    guard.continue_once()
    guard.write("completed")
    guard.send(g.ToolResultsReady())
    chunk = guard.send(g.GuardStreamOpened())[0]
    assert isinstance(chunk, g.EmitAgentMessageChunk)
    assert chunk.text == "" and chunk.meta.attempt == 2
    assert len(guard.of(g.ContinueWithGuardPrompt)) == 1


@pytest.mark.req("SG-B7")
def test_mid_turn_input_sponsors_the_tool_result_send_without_using_the_attempt() -> None:
    """req: SG-B7 — mid-turn input takes priority; no guard attempt is used, and the stage
    restarts, so two guard attempts remain."""
    guard = armed()
    guard.continue_once()
    assert guard.send(g.ToolResultsReady(mid_turn_input=True)) == (
        g.SendToolResults(sponsor=g.Sponsor.MID_TURN_INPUT),)
    guard.send(g.OrdinaryStreamOpened())
    assert guard.state.attempts == 0
    assert g.decide(guard.state, g.NaturalStop()).attempt == 1


@pytest.mark.req("SG-B8")
def test_a_coalesced_hook_loop_sends_its_results_without_a_guard_attempt() -> None:
    """req: SG-B8, SO-8 — one combined continuation that completed every todo; its tool results
    go through the hook's own loop: no guard prompt, no guard attempt."""
    guard = armed(("pending",))
    (command,) = guard.stop(hook_reason="tests are failing")
    assert isinstance(command, g.ContinueWithGuardPrompt)
    assert command.hook_reason == "tests are failing" and command.attempt == 1
    guard.send(g.GuardStreamOpened())
    guard.write("completed")
    assert guard.send(g.ToolResultsReady()) == (
        g.SendToolResults(sponsor=g.Sponsor.STOP_HOOK), g.ReleaseAutomaticQueues())
    guard.send(g.OrdinaryStreamOpened())
    assert guard.state.attempts == 1


@pytest.mark.req("SG-B1", "SG-B8", "SO-8")
def test_a_coalesced_stream_that_leaves_todos_unfinished_lets_the_hook_loop_send() -> None:
    """req: SG-B8, SO-8 — a combined hook + guard stream returns tool calls with todos still
    unfinished: every follow-up is the hook's own loop (no guard prompt, no attempt), and at
    the loop's natural stop the guard has its second attempt, then no third (SG-B1)."""
    guard = armed()
    guard.stop(hook_reason="tests are failing")
    guard.send(g.GuardStreamOpened())
    assert guard.state.attempts == 1
    assert guard.send(g.ToolResultsReady()) == (g.SendToolResults(sponsor=g.Sponsor.STOP_HOOK),)
    guard.send(g.OrdinaryStreamOpened())
    assert guard.send(g.ToolResultsReady()) == ()  # the hook's loop goes on as with no guard
    assert guard.state.attempts == 1 and guard.state.phase is g.GuardPhase.ACTIVE
    (second,) = guard.stop(hook_reason="still failing")
    assert isinstance(second, g.ContinueWithGuardPrompt) and second.attempt == 2
    guard.send(g.GuardStreamOpened())
    assert guard.send(g.ToolResultsReady()) == (g.SendToolResults(sponsor=g.Sponsor.STOP_HOOK),)
    guard.send(g.OrdinaryStreamOpened())
    assert [type(c) for c in guard.stop()] == [g.ReportGuardExhausted, g.ReleaseAutomaticQueues]


@pytest.mark.req("SG-B9")
def test_a_compaction_failure_suspends_but_a_coalesced_hook_may_continue() -> None:
    """req: SG-B9 — HookMayContinue with the hook's reason; the guard chain is suspended."""
    guard = armed()
    guard.stop(hook_reason="lint")
    commands = guard.send(g.GuardStreamNotOpened(reason=g.NotOpenedReason.COMPACTION_FAILED))
    assert commands == (g.HookMayContinue(reason="lint"), g.ReleaseAutomaticQueues())
    assert guard.state.phase is g.GuardPhase.SUSPENDED
    assert not continues(guard.stop())


@pytest.mark.req("SG-B9")
@pytest.mark.parametrize("reason", ["", "   ", "\n\t"], ids=["empty", "spaces", "white"])
def test_a_blank_stop_hook_reason_is_refused_when_built(reason: str) -> None:
    """req: SG-B9 — a blank hook_reason would coalesce a hook whose reason could never be
    continued later, so NaturalStop refuses it with a FieldError naming the field."""
    with pytest.raises(at.FieldError, match=r"NaturalStop\.hook_reason"):
        g.NaturalStop(hook_reason=reason)


@pytest.mark.parametrize("build", [
    lambda: g.OrdinaryPromptStarted(turn_id="t\ud800"),
    lambda: g.TodoWriteStarted(call_id="\udfff", turn_id="t1"),
    lambda: g.NaturalStop(hook_reason="lint \ud83d failed"),
], ids=["turn_id", "call_id", "hook_reason"])
def test_a_lone_surrogate_in_a_guard_event_is_refused_when_built(build: Any) -> None:
    """A str field holding a lone surrogate cannot be sent by any host: FieldError at once."""
    with pytest.raises(at.FieldError, match="lone surrogate"):
        build()


# --- decisions, holding and releasing automatic turns ----------------------------------------


@pytest.mark.req("SO-1", "SO-2", "SO-7", "SG-A5")
@pytest.mark.parametrize(("setup", "stop", "decision", "reason"), [
    ("none", {}, "NONE", "NO_CHAIN"),
    ("prompt", {}, "NONE", "NOT_ARMED"),
    ("done", {}, "NONE", "NOTHING_UNFINISHED"),
    ("armed", {"mid_turn_messages": True, "queued_prompt": True},
     "USER_CONTINUATION", "MID_TURN_MESSAGES"),
    ("armed", {"queued_prompt": True}, "AWAIT_QUEUED_PROMPT",
     "QUEUED_PROMPT"),
    ("armed", {"relevant_background": True}, "DEFER_FOR_BACKGROUND",
     "RELEVANT_BACKGROUND"),
    ("armed", {}, "CONTINUE", "UNFINISHED_TODOS"),
    ("used-up", {}, "EXHAUSTED", "ATTEMPTS_USED_UP"),
    ("paused", {}, "NONE", "PAUSED"),
    ("suspended", {}, "NONE", "SUSPENDED"),
    ("plan", {}, "NONE", "PLAN_MODE"),
    ("off", {}, "NONE", "GUARD_OFF"),
])
def test_decide_gives_a_typed_decision_and_reason(
        setup: str, stop: dict[str, Any], decision: str, reason: str) -> None:
    """req: SO-1, SO-2, SO-7, SG-A5 — each stop situation maps to one Decision and one
    DecisionReason, in the design's stop order."""
    guard = Guard(g.GuardConfig() if setup == "off" else ON)
    if setup != "none":
        guard.prompt()
    if setup in ("armed", "used-up", "paused", "suspended", "plan", "done"):
        guard.write("pending")
    if setup == "done":
        guard.write("completed")
    if setup == "used-up":
        guard.continue_once()
        guard.continue_once()
    extra = {"paused": g.RequestErrored(kind=g.ErrorKind.API),
             "suspended": g.HardStopped(kind=g.HardStopKind.TOKEN_LIMIT),
             "plan": g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)}.get(setup)
    if extra is not None:
        guard.send(extra)
    verdict = g.decide(guard.state, g.NaturalStop(**stop))
    assert (verdict.decision, verdict.reason) == (g.Decision[decision], g.DecisionReason[reason])
    assert (verdict.attempt > 0) is (decision == "CONTINUE")


@pytest.mark.req("SO-7", "BG-2", "BG-7")
def test_relevant_background_defers_the_guard_but_the_chain_still_holds() -> None:
    """req: SO-7, BG-2, BG-7 — the stop stands (no command) and nothing is released: the chain
    can resume once the background input arrives."""
    guard = armed()
    assert guard.stop(relevant_background=True) == ()
    assert g.holds_automatic_turns(guard.state)
    guard.send(g.BackgroundResult(related=True))
    assert continues(guard.stop())


@pytest.mark.req("BG-5", "BG-7", "SG-A15")
@pytest.mark.parametrize(("script", "holds"), [
    ("off", False), ("plan", False), ("no-chain", False), ("unarmed", False),
    ("armed", True), ("continuing", True), ("paused-armed", True), ("suspended", False),
    ("awaiting", True), ("disarmed-in-guard-loop", True), ("invalidated-unsettled", True),
    ("invalidated-settled", False),
])
def test_holds_automatic_turns_while_the_chain_can_resume(script: str, holds: bool) -> None:
    """req: BG-5, BG-7, SG-A15 — true while the chain can still resume, a FIFO prompt has
    priority, a guard loop is open or an invalidated turn has not settled; false otherwise."""
    guard = Guard(g.GuardConfig() if script == "off" else ON)
    steps: dict[str, list[Any]] = {
        "off": [], "no-chain": [], "unarmed": ["prompt"],
        "plan": ["prompt", "write", g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)],
        "armed": ["prompt", "write"],
        "continuing": ["prompt", "write", g.NaturalStop()],
        "paused-armed": ["prompt", "write", g.RequestErrored(kind=g.ErrorKind.API)],
        "suspended": ["prompt", "write", g.HardStopped(kind=g.HardStopKind.USER_CANCELLED)],
        "awaiting": ["prompt", "write", g.NaturalStop(queued_prompt=True)],
        "disarmed-in-guard-loop": ["prompt", "write", g.NaturalStop(), g.GuardStreamOpened(),
                                   "complete"],
        "invalidated-unsettled": ["prompt", g.TrustCleared(
            kind=g.TrustClearingKind.REWIND, invalidated_turn_id="t1")],
        "invalidated-settled": ["prompt", g.TrustCleared(
            kind=g.TrustClearingKind.REWIND, invalidated_turn_id="t1"),
            g.ForegroundPromptSettled(turn_id="t1")],
    }
    for step in steps[script]:
        if step == "prompt":
            guard.prompt()
        elif step == "write":
            guard.write("pending")
        elif step == "complete":
            guard.write("completed")
        else:
            guard.send(step)
    assert g.holds_automatic_turns(guard.state) is holds


@pytest.mark.req("SG-A15", "SO-4", "BG-5")
@pytest.mark.parametrize("end", [
    "exhaustion", "hard-stop", "compaction-failure", "trust-cleared", "invalidated-settles",
    "last-queued-aborted", "disarmed", "plan-mode"])
def test_every_end_of_the_hold_releases_the_queues_exactly_once(end: str) -> None:
    """req: SG-A15, SO-4, BG-5 — whatever ends the guard's hold on automatic turns emits one
    ReleaseAutomaticQueues, in that step, and nothing releases again afterwards."""
    guard = armed()
    before: list[at.Event] = {
        "exhaustion": [g.NaturalStop(), g.GuardStreamOpened(), g.NaturalStop(),
                       g.GuardStreamOpened()],
        "compaction-failure": [g.NaturalStop(hook_reason="lint")],
        "invalidated-settles": [g.TrustCleared(kind=g.TrustClearingKind.REWIND,
                                               invalidated_turn_id="t1")],
        "last-queued-aborted": [g.NaturalStop(queued_prompt=True),
                                g.QueuedPromptAborted(last=False)],
    }.get(end, [])
    assert g.ReleaseAutomaticQueues() not in guard.send(*before)
    assert g.holds_automatic_turns(guard.state)
    ending: dict[str, Any] = {
        "exhaustion": lambda: guard.stop(),
        "hard-stop": lambda: guard.send(g.HardStopped(kind=g.HardStopKind.STOP_HOOK_CAP)),
        "compaction-failure": lambda: guard.send(
            g.GuardStreamNotOpened(reason=g.NotOpenedReason.COMPACTION_FAILED)),
        "trust-cleared": lambda: guard.send(g.TrustCleared(kind=g.TrustClearingKind.FORK)),
        "invalidated-settles": lambda: guard.send(g.ForegroundPromptSettled(turn_id="t1")),
        "last-queued-aborted": lambda: guard.send(g.QueuedPromptAborted(last=True)),
        "disarmed": lambda: guard.write("completed"),
        "plan-mode": lambda: guard.send(g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)),
    }
    commands = ending[end]()
    assert commands.count(g.ReleaseAutomaticQueues()) == 1
    assert commands[-1] == g.ReleaseAutomaticQueues()
    assert not g.holds_automatic_turns(guard.state)
    guard.stop()
    guard.send(g.ForegroundPromptSettled(turn_id="t1"), g.QueuedPromptAborted(last=True))
    assert guard.of(g.ReleaseAutomaticQueues) == [g.ReleaseAutomaticQueues()]


@pytest.mark.req("SG-B3", "SG-B4")
def test_the_two_stream_commands_await_answers_and_the_rest_are_notices() -> None:
    """req: SG-B3, SG-B4 — ContinueWithGuardPrompt and SendToolResults are awaiting commands
    answered by the stream events (no id: at most one is outstanding); the rest are notices."""
    for kind in (g.ContinueWithGuardPrompt, g.SendToolResults):
        assert issubclass(kind, at.AwaitingCommand)
        assert {"GuardStreamOpened", "GuardStreamNotOpened", "RequestErrored",
                "HardStopped"} <= set(kind.answered_by)
        assert set(kind.answered_by) <= set(g.__all__)
    assert "OrdinaryStreamOpened" in g.SendToolResults.answered_by
    assert g.ContinueWithGuardPrompt(attempt=1, unfinished=1, text="x").answer_id is None
    for kind in (g.StartWorkChain, g.KeepToolResults, g.EmitAgentMessageChunk,
                 g.ReportGuardExhausted, g.HookMayContinue, g.ReleaseAutomaticQueues,
                 g.DeferAutomaticTurn):
        assert issubclass(kind, at.Notice) and not issubclass(kind, at.AwaitingCommand)


# --- suspension and authority -----------------------------------------------------------------

HARD = [g.HardStopKind.USER_CANCELLED, g.HardStopKind.PERMISSION_CANCELLED,
        g.HardStopKind.POST_TOOL_USE_STOP, g.HardStopKind.LOOP_PROTECTION,
        g.HardStopKind.TOKEN_LIMIT, g.HardStopKind.STOP_HOOK_CAP]


@pytest.mark.req("SG-S1")
@pytest.mark.parametrize("kind", HARD, ids=lambda k: k.value)
def test_hard_paths_suspend_and_only_a_new_prompt_revives(kind: g.HardStopKind) -> None:
    """req: SG-S1 — suspended: retry, related results, a related automatic turn and even a
    fresh todo write do not revive; a new ordinary prompt plus a trusted arm does."""
    guard = armed()
    guard.send(g.HardStopped(kind=kind))
    guard.send(g.RetryOrContinue(turn_id="t1"), g.BackgroundResult(related=True),
               g.AutomaticTurnStarted(turn_id="n", kind=g.AutomaticTurnKind.NOTIFICATION,
                                      related=True))
    guard.write("pending")
    assert not continues(guard.stop())
    guard.prompt("t2")
    assert not continues(guard.stop())
    guard.write("pending")
    assert continues(guard.stop())


@pytest.mark.req("SG-S2")
@pytest.mark.parametrize("kind", list(g.ErrorKind), ids=lambda k: k.value)
def test_api_and_network_errors_keep_the_state_for_a_trusted_retry(kind: g.ErrorKind) -> None:
    """req: SG-S2 — paused: nothing continues at a stop; a retry resumes the same chain."""
    guard = armed()
    guard.continue_once()
    guard.send(g.RequestErrored(kind=kind))
    assert guard.state.phase is g.GuardPhase.PAUSED and guard.state.armed
    assert not continues(guard.stop())
    guard.send(g.RetryOrContinue(turn_id="t1"))
    (command,) = guard.stop()
    assert isinstance(command, g.ContinueWithGuardPrompt) and command.attempt == 2


@pytest.mark.req("SG-S3")
@pytest.mark.parametrize("kind", [g.HardStopKind.PERMISSION_CANCELLED,
                                  g.HardStopKind.GRACE_EXPIRED, g.HardStopKind.RESOURCE_LIMIT,
                                  g.HardStopKind.TOKEN_LIMIT, g.HardStopKind.LOOP_PROTECTION],
                         ids=lambda k: k.value)
def test_the_guard_never_overrides_the_authorities(kind: g.HardStopKind) -> None:
    """req: SG-S3 — permission cancellation, ACP grace expiry, daemon resource limits, token
    limits and loop protection end the work even mid-continuation; and nothing the guard emits
    can approve a permission or cancel anything."""
    guard = armed()
    guard.stop()
    guard.send(g.HardStopped(kind=kind))
    with pytest.raises(at.ProtocolError):
        guard.send(g.GuardStreamOpened())  # the pending continuation is gone
    vocabulary = {g.StartWorkChain, g.ContinueWithGuardPrompt, g.SendToolResults,
                  g.KeepToolResults, g.EmitAgentMessageChunk, g.ReportGuardExhausted,
                  g.HookMayContinue, g.ReleaseAutomaticQueues, g.DeferAutomaticTurn}
    assert {type(c) for c in guard.commands} <= vocabulary


# --- texts and telemetry ----------------------------------------------------------------------

FIRST_3 = ("[Todo Stop Guard] 3 todo item(s) are still pending or in progress. Continue executing "
           "the current task now. Do not ask the user whether to continue. If progress requires "
           "user input, use the structured question or permission flow. If progress depends on "
           "external state, report the blocker explicitly.")
FINAL = ("This is the final automatic continuation. Before ending, either complete/update the "
         "todos or report the completed progress and the exact blocker.")


@pytest.mark.req("OB-1")
def test_the_continuation_texts_are_exactly_the_documents() -> None:
    """req: OB-1 — the first text; the second also sends the final-continuation sentence."""
    guard = armed(("pending", "pending", "in_progress"))
    first = guard.stop()[0]
    guard.send(g.GuardStreamOpened())
    second = guard.stop()[0]
    assert first.text == FIRST_3  # type: ignore[attr-defined]
    assert second.text == FIRST_3 + "\n\n" + FINAL  # type: ignore[attr-defined]


@pytest.mark.req("OB-1")
@pytest.mark.parametrize(("text", "expected"), [
    (g.continuation_text(1, 1), True), (g.continuation_text(2, 40), True),
    (FIRST_3.replace(" 3 ", " 01 "), False), (FIRST_3.replace(" 3 ", " 0 "), False),
    (FIRST_3.replace(" 3 ", " 1.5 "), False), (FIRST_3.replace(" 3 ", " +1 "), False),
    (FIRST_3 + " ", False), (FIRST_3 + "\n\n" + FINAL + "!", False), ("fix the tests", False),
    (FINAL, False), (None, False)])
def test_the_recognizer_accepts_exact_guard_prompts_only(text: object, expected: bool) -> None:
    """req: OB-1 — so history and rewind never count a guard prompt as a user turn."""
    assert g.is_guard_prompt(text) is expected


@pytest.mark.req("OB-2")
def test_each_committed_continuation_emits_one_discrete_chunk_with_metadata() -> None:
    """req: OB-2 — one chunk per committed attempt, none for an uncommitted one."""
    guard = armed(("pending", "pending"))
    guard.stop()
    assert not guard.of(g.EmitAgentMessageChunk)
    (chunk,) = guard.send(g.GuardStreamOpened())
    assert isinstance(chunk, g.EmitAgentMessageChunk)
    assert chunk.meta.as_meta() == {"source": "todo_stop_guard", "qwenDiscreteMessage": True,
                                    "attempt": 1, "maxAttempts": 2, "unfinishedCount": 2}
    assert chunk.text == g.continuation_text(1, 2)


@pytest.mark.req("OB-3")
def test_exhaustion_is_reported_exactly_once_per_chain() -> None:
    """req: OB-3 — the exact text, once, however often the chain stops afterwards."""
    guard = armed(("pending", "in_progress", "pending", "pending"))
    guard.continue_once()
    guard.continue_once()
    guard.stop()
    guard.stop()
    reports = guard.of(g.ReportGuardExhausted)
    assert reports == [g.ReportGuardExhausted(
        text="[Todo Stop Guard] Automatic continuation stopped after 2 attempts; 4 todo item(s) "
             "remain unfinished.")]


@pytest.mark.req("OB-4")
def test_todo_text_never_appears_in_guard_output() -> None:
    """req: OB-4 — a distinctive todo text is nowhere in commands, state or chunk metadata."""
    secret = "migrate the billing ledger to v7"
    guard = Guard()
    guard.prompt()
    guard.write(envelope={
        "type": "todo_list", "todos": [{"id": "a", "content": secret, "status": "pending"}]})
    guard.continue_once()
    guard.continue_once()
    guard.stop()
    assert secret not in repr(guard.commands) + repr(guard.state)
    assert all(secret not in repr(c.meta.as_meta()) for c in guard.of(g.EmitAgentMessageChunk))


def test_an_unexpected_stream_open_is_host_misuse() -> None:
    """GuardStreamOpened with no continuation pending raises and changes nothing."""
    guard = armed()
    before = guard.state
    with pytest.raises(at.UnexpectedEvent):
        guard.send(g.GuardStreamOpened())
    assert guard.state == before
