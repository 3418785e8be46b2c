"""The bounded exhaustive explorer and the fuzzer: what CI runs of them, and the bugs they found.

``agentturn explore --depth N`` checks every session state reachable in N moves from five
starting points; CI runs depth 4 (about 20,000 states) in two worker processes, with its
coverage report of the declared (phase, event) edges. ``agentturn fuzz --steps N --seed S``
walks at random; CI runs a few thousand steps. The deeper runs and their figures are in
``benchmarks/EVIDENCE.md``. The model checker's own machinery is tested last: the same result
for any number of workers, a planted bug's shortest counterexample (a trace ``agentturn check``
rejects), *never stuck* as its own rule, and the coverage report.

The reducer bugs they found are pinned below by their shortest sequences: each open one as an
``xfail(strict=True)`` test (a fix makes it pass, and the marker and the entry in
``agentturn.tools.explore.KNOWN_BUGS`` must then go), each fixed one as a plain regression test.
"""

from __future__ import annotations

import pathlib

import attrs
import pytest
from conftest import PROFILE

import agentturn as at
from agentturn import guard as g
from agentturn import session as S
from agentturn.session.fifo import QueuedPrompt
from agentturn.tools import explore
from agentturn.tools.cli import main

#: The depth CI explores from every starting point (under a minute on the CI machine); the
#: lighter profiles (the other Pythons in CI, and mutation testing, which runs these tests once
#: per mutant) go one level less deep.
CI_DEPTH = 3 if PROFILE in ("compat", "mutation") else 4


@pytest.mark.req("SG-B1", "SO-2", "BG-6", "OB-5", "OB-6", "BR-3")
def test_every_state_within_the_ci_depth_keeps_every_rule() -> None:
    """From each starting point, every session state reachable in four moves over the derived
    alphabet keeps the invariants, and every phase of the session, the turn and the guard is
    visited; violations are only the known, pinned bugs."""
    seen: dict[str, set[str]] = {"session": set(), "turn": set(), "guard": set()}
    states = 0
    runs = [(config, start, CI_DEPTH) for config in ("daemon",) for start in explore.STARTS]
    runs.append(("interactive", "draining", CI_DEPTH - 1))
    covered: explore.Coverage | None = None
    for config, start, depth in runs:
        report = explore.explore(depth, config, start, workers=2)
        assert report.reached == depth
        assert not report.new_violations, "\n".join(
            v.describe() for v in report.new_violations)
        assert report.coverage is not None
        covered = report.coverage if covered is None else covered.merge(report.coverage)
        states += report.states
        seen["session"] |= set(report.session_phases)
        seen["turn"] |= set(report.turn_phases)
        seen["guard"] |= set(report.guard_phases)
    assert states > (15_000 if CI_DEPTH == 4 else 2_500)
    assert seen["session"] == {p.name for p in S.SessionPhase}
    assert seen["turn"] == {p.name for p in at.TurnPhase}
    assert seen["guard"] == {p.name for p in g.GuardPhase}
    # The coverage report (printed by `agentturn explore --coverage`): the walks leave every
    # phase of the session and of the turn by at least one declared edge.
    assert covered is not None
    assert {phase for phase, _ in covered.reached["session"]} == {p.name for p in S.SessionPhase}
    assert {phase for phase, _ in covered.reached["turn"]} == {p.name for p in at.TurnPhase}


@pytest.mark.req("SG-B1", "OB-5", "TL-5")
def test_a_short_fuzz_run_keeps_every_rule() -> None:
    """A few thousand random steps through all three configurations break no rule that no known
    bug explains, and reach the guard's continuations."""
    steps = 1000 if PROFILE in ("compat", "mutation") else 20000
    report = explore.fuzz(steps, seed=0)
    assert report.steps == steps
    assert not report.new_violations, "\n".join(v.describe() for v in report.new_violations)
    assert report.event_kinds >= 28
    assert report.guard_chunks > 0


def test_the_fuzzer_is_reproducible_from_its_seed() -> None:
    """The same seed walks the same way."""
    first, second = explore.fuzz(300, seed=7), explore.fuzz(300, seed=7)
    assert (first.outcomes, first.turn_outcomes, first.session_phases) == (
        second.outcomes, second.turn_outcomes, second.session_phases)


def test_a_broken_rule_is_reported_with_a_short_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks bite: a session that forgets to count model calls is caught, and the
    sequence reported reproduces it from a new session and is short."""
    real = explore.reduce

    def forgetful(state: S.SessionState, event: object) -> at.Step[S.SessionState]:
        step = real(state, event)
        if isinstance(event, at.StreamOpened) and step.state.usage.model_calls > 1:
            return at.Step(attrs.evolve(step.state, usage=state.usage), step.commands)
        return step

    monkeypatch.setattr(explore, "reduce", forgetful)
    report = explore.fuzz(1500, seed=1, configs=["daemon"])
    usage = [v for v in report.new_violations if v.rule == "usage"]
    assert usage, "the model-call count was never checked"
    assert len(usage[0].events) <= 16
    assert sum(isinstance(e, at.StreamOpened) for e in usage[0].events) == 2


def test_the_commands_exit_zero_when_only_known_bugs_show(
        capsys: pytest.CaptureFixture[str]) -> None:
    """``agentturn explore`` and ``agentturn fuzz`` print their figures and exit 0."""
    assert main(["explore", "--depth", "2", "--start", "new"]) == 0
    assert main(["fuzz", "--steps", "300", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "states" in out and "steps" in out


def test_a_violation_matching_a_known_bug_is_named_and_any_other_is_new(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``known_bug`` names an entry of ``KNOWN_BUGS`` by its rule and pattern, nothing else."""
    monkeypatch.setitem(explore.KNOWN_BUGS, "BUG-99",
                        ("table", r"^IDLE --HardStopped--> TURN ", "an undeclared edge"))
    event = S.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="loop")
    assert explore.known_bug("table", "IDLE --HardStopped--> TURN (x)", event) == (
        "BUG-99: an undeclared edge")
    assert explore.known_bug("refused", "IDLE --HardStopped--> TURN (x)", event) == ""
    assert explore.known_bug("table", "TURN --HardStopped--> IDLE (x)", event) == ""


# --- the bugs, pinned by their shortest sequences -----------------------------------------------


def _daemon() -> S.SessionState:
    return S.Session.create(S.SessionConfig(
        chat_id="chat", turn=at.TurnConfig(auto_title=False),
        guard=g.GuardConfig(todo_stop_guard=True, daemon=True)))


def _play(state: S.SessionState, events: list[at.Event]
          ) -> tuple[S.SessionState, tuple[at.Command, ...]]:
    commands: tuple[at.Command, ...] = ()
    for event in events:
        state, commands = S.reduce(state, event)
    return state, commands


TODOS_LEFT = {"type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "pending"}]}


def _armed() -> list[at.Event]:
    """A prompt whose todo-write left work: the guard is armed; the second stream is open."""
    return [at.PromptSubmitted(turn_id="t1", message_id="m1", text="port it"),
            at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
            at.StreamCompleted(request_id="t1/r1", text="", finish_reason="tool_use",
                               tool_calls=(at.ToolCall(call_id="w1", name="todo_write",
                                                       arguments="{}"),)),
            at.Persisted(key="t1/p2"),
            at.ToolFinished(call_id="w1", output="todos", structured=TODOS_LEFT),
            at.Persisted(key="t1/p3"), at.StreamOpened(request_id="t1/r2")]


HELD_THEN = [
    g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
    S.LifecycleChanged(kind=g.TrustClearingKind.REWIND),
    S.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="loop"),
]


@pytest.mark.req("BG-5")
@pytest.mark.parametrize("event", HELD_THEN, ids=lambda e: type(e).__name__)
def test_an_event_that_releases_a_held_automatic_turn_is_a_declared_transition(
        event: at.Event) -> None:
    """The armed chain defers its natural stop for its own background work, so it holds a cron
    turn; an event that ends the hold starts that turn: IDLE -> TURN, which the session's table
    must declare."""
    state, _ = _play(_daemon(), [
        *_armed(), S.BackgroundStarted(kind=S.BackgroundKind.SHELL, item_id="build"),
        at.StreamCompleted(request_id="t1/r2", text="Waiting.", finish_reason="stop"),
        at.Persisted(key="t1/p4"), S.MidTurnDrained(drain_id="t1/drain-1"),
        S.AutomaticTurnDue(turn_id="a1", message_id="a1-m", text="nightly",
                           kind=S.AutomaticKind.CRON, source_id="cron-a")])
    assert state.phase is S.SessionPhase.IDLE and len(state.deferred.turns) == 1
    after, _ = S.reduce(state, event)
    assert after.phase is S.SessionPhase.TURN  # the held turn started (BG-5)
    assert after.phase in S.SESSION_GRAPH.table[(S.SessionPhase.IDLE, type(event).__name__)]


@pytest.mark.req("BR-3")
def test_an_earlier_drains_reply_during_another_drain_is_a_declared_transition() -> None:
    """A drain that timed out is answered while the next turn's natural stop drains: its
    messages come back to the client (they were typed during the other turn, so they are not
    joined to this one) and the session keeps draining, which its table must declare."""
    state, _ = _play(_daemon(), [
        at.PromptSubmitted(turn_id="t1", message_id="m1", text="fix it"),
        at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
        at.StreamCompleted(request_id="t1/r1", text="Done.", finish_reason="stop"),
        at.Persisted(key="t1/p2"), S.TimerFired(key="t1/drain-1"),
        at.PromptSubmitted(turn_id="t2", message_id="m2", text="next"),
        at.Persisted(key="t2/p1"), at.StreamOpened(request_id="t2/r1"),
        at.StreamCompleted(request_id="t2/r1", text="Done.", finish_reason="stop"),
        at.Persisted(key="t2/p2")])
    assert state.phase is S.SessionPhase.DRAINING and state.drain_id == "t2/drain-1"
    after, commands = S.reduce(state, S.MidTurnDrained(drain_id="t1/drain-1",
                                                       messages=("typed during t1",)))
    assert commands == (S.RestoreMidTurnMessages(drain_id="t1/drain-1",
                                                 messages=("typed during t1",)),)
    assert after.phase is S.SessionPhase.DRAINING
    assert after.phase in S.SESSION_GRAPH.table[(S.SessionPhase.DRAINING, "MidTurnDrained")]


@pytest.mark.req("SG-S2", "TL-11", "SG-B3")
def test_a_turn_whose_guard_continuation_failed_to_save_can_be_continued() -> None:
    """The guard decides a continuation; saving its message fails, so the turn ends with a
    resumable error. ContinueTurn is accepted (TL-11) and the chain resumes: the attempt never
    opened a stream, so nothing was spent (SG-B3), and the retry re-sends that continuation,
    pending again until its stream opens. (BUG-8, fixed: the guard was left CONTINUING and
    refused the retry.)"""
    state, commands = _play(_daemon(), [
        *_armed(), at.StreamCompleted(request_id="t1/r2", text="Done.", finish_reason="stop"),
        at.Persisted(key="t1/p4"), S.MidTurnDrained(drain_id="t1/drain-1"),
        at.PersistFailed(key="t1/p5", reason="disk full")])
    assert any(isinstance(c, at.EndTurn) and c.outcome.resumable for c in commands)
    after, _ = S.reduce(state, at.ContinueTurn(turn_id="t1"))
    assert after.phase is S.SessionPhase.TURN
    assert after.guard.phase is g.GuardPhase.CONTINUING and after.guard.attempts == 0
    assert after.guard.pending_attempt == 1


WITHDRAWING = [
    S.LifecycleChanged(kind=g.TrustClearingKind.REWIND),
    g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
]


@pytest.mark.req("SG-A12", "SG-C3", "SG-B3", "TL-8")
@pytest.mark.parametrize("event", WITHDRAWING, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("answer", [at.StreamOpened(request_id="t1/r3"), at.StopPressed()],
                         ids=lambda e: type(e).__name__)
def test_a_continuation_whose_chain_ended_can_still_open_or_be_stopped(
        event: at.Event, answer: at.Event) -> None:
    """The guard continues; its message is saved and its request is out. A rewind (or Plan
    mode) ends the chain before the stream opens: the request is still outstanding, so the
    host can report its stream opening, or press Stop. (BUG-10, fixed: both were refused,
    because the session reported them to a guard that had no pending continuation.)"""
    state, _ = _play(_daemon(), [
        *_armed(), at.StreamCompleted(request_id="t1/r2", text="Done.", finish_reason="stop"),
        at.Persisted(key="t1/p4"), S.MidTurnDrained(drain_id="t1/drain-1"),
        at.Persisted(key="t1/p5"), event])
    assert (at.RequestModelStream, "t1/r3") in {(o.command, o.answer_id)
                                                for o in S.outstanding(state)}
    S.reduce(state, answer)


@pytest.mark.req("SG-S1", "TL-8")
def test_stop_after_a_hard_stop_of_a_guard_continuation_is_accepted() -> None:
    """A hard stop halts the turn while its guard continuation's request is out; the turn
    still waits for a Lead save. Pressing Stop then is accepted. (BUG-10, fixed.)"""
    state, _ = _play(_daemon(), [
        *_armed(), at.StreamCompleted(request_id="t1/r2", text="Done.", finish_reason="stop"),
        at.Persisted(key="t1/p4"), S.MidTurnDrained(drain_id="t1/drain-1"),
        at.Persisted(key="t1/p5"), at.LeadSubmitted(chat_id="chat", lead_id="L1", text="tabs"),
        S.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="loop")])
    assert state.turn.phase is at.TurnPhase.ENDING
    S.reduce(state, at.StopPressed())


@pytest.mark.req("BR-4")
def test_a_closing_session_starts_no_grace_timer_and_closes_with_none_running() -> None:
    """Close while a Lead save runs; the last client leaves while the session is closing: no
    grace period starts (the session ends when its turn has), so when the save ends the halted
    turn and the session closes, no timer is left running. (BUG-5b, fixed: a grace timer
    started while CLOSING was forgotten without CancelTimer when the close completed.)"""
    state, commands = _play(_daemon(), [
        at.PromptSubmitted(turn_id="t1", message_id="m1", text="fix it"),
        at.Persisted(key="t1/p1"),
        at.LeadSubmitted(chat_id="chat", lead_id="L1", text="use tabs"),
        S.CloseRequested(), S.ClientAttached(client_id="desk")])
    state, commands = S.reduce(state, S.ClientDetached(client_id="desk"))
    assert state.phase is S.SessionPhase.CLOSING and not state.grace
    assert not any(isinstance(c, S.StartTimer) for c in commands)
    state, commands = S.reduce(state, at.LeadSaved(lead_id="L1"))
    assert state.phase is S.SessionPhase.CLOSED
    assert any(isinstance(c, S.CloseSession) for c in commands)
    assert S.outstanding(state) == ()


@pytest.mark.req("TT-1", "BR-4")
def test_a_closed_session_still_hears_what_it_asked_for_before_closing() -> None:
    """A naming request still runs when the session closes: it stays outstanding and its
    answer names the chat; a Lead typed after the close gets its draft back (saying the chat is
    closed), and an answer nobody asked for is still misuse. (BUG-9, fixed: the session listed
    the request as outstanding but refused its answer.)"""
    state, _ = _play(S.Session.create(S.SessionConfig(
        chat_id="chat", guard=g.GuardConfig(todo_stop_guard=True, daemon=True))), [
        at.PromptSubmitted(turn_id="t1", message_id="m1", text="fix it"),
        at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
        at.StreamCompleted(request_id="t1/r1", text="Reading first.", finish_reason="tool_use",
                           tool_calls=(at.ToolCall(call_id="r1", name="read_file",
                                                   arguments="{}"),)),
        at.Persisted(key="t1/p2"), S.CloseRequested(), at.Persisted(key="t1/p3")])
    assert state.phase is S.SessionPhase.CLOSED
    assert [(o.command, o.answer_id) for o in S.outstanding(state)] == [
        (at.RequestTitle, "chat/title-1")]
    named, commands = S.reduce(state, at.TitleGenerated(request_id="chat/title-1", title="Fix"))
    assert commands == (at.SetTitle(chat_id="chat", title="Fix"),)
    assert named.phase is S.SessionPhase.CLOSED and S.outstanding(named) == ()
    kept, commands = S.reduce(state, at.LeadSubmitted(chat_id="chat", lead_id="L9", text="more"))
    assert commands == (at.ReturnDraft(
        lead_id="L9", reason=at.DraftReason.NOT_ACTIVE, draft="more",
        message="This chat is closed; your text was not sent and is kept as a draft."),)
    assert kept is state
    _, (refused,) = S.reduce(state, at.LeadSubmitted(chat_id="other", lead_id="L9", text="x"))
    assert isinstance(refused, at.ReturnDraft) and refused.reason is at.DraftReason.NOT_OWNER
    with pytest.raises(at.ProtocolError):
        S.reduce(state, at.PermissionDecided(call_id="r1",
                                             decision=at.PermissionDecision.ALLOW))


# --- bugs found by the sampled mutation run (benchmarks/EVIDENCE.md, Item 5), fixed ----------


@pytest.mark.req("BG-7", "SG-S1")
def test_a_compaction_failure_that_suspends_the_chain_offers_follow_ups() -> None:
    """The armed chain's next request fails compaction: the guard suspends (it can no longer
    resume), so the turn's end offers follow-up suggestions, as Stop at the same point does."""
    state, commands = _play(_daemon(), [
        *_armed()[:-1],  # the second request is asked for, not yet open
        at.CompactionFailed(request_id="t1/r2", reason="too long")])
    assert state.guard.phase is g.GuardPhase.SUSPENDED
    assert any(isinstance(c, S.OfferFollowUpSuggestions) for c in commands)


@pytest.mark.req("SG-B9", "SO-8")
def test_a_combined_continuation_that_fails_compaction_continues_with_the_hook_alone() -> None:
    """A Stop hook and the guard both continue one stop; that combined request fails
    compaction: the guard is suspended and the session itself saves the hook's reason alone
    and asks again (no HookMayContinue dead end, issue 18)."""
    state = S.Session.create(S.SessionConfig(
        chat_id="chat", turn=at.TurnConfig(auto_title=False), stop_hooks=True,
        guard=g.GuardConfig(todo_stop_guard=True, daemon=True)))
    _, commands = _play(state, [
        *_armed(),
        at.StreamCompleted(request_id="t1/r2", text="Stopping here.", finish_reason="end_turn"),
        at.Persisted(key="t1/p4"), S.MidTurnDrained(drain_id="t1/drain-1"),
        S.StopHookDecided(run_id="t1/hooks-1", block=True, reason="Tests fail."),
        at.Persisted(key="t1/p5"), at.CompactionFailed(request_id="t1/r3", reason="too long")])
    assert not any(isinstance(c, g.HookMayContinue | at.EndTurn) for c in commands)
    assert [r.text for c in commands if isinstance(c, at.Persist) for r in c.records] == [
        "Tests fail."]


# --- the model checker: workers, fingerprints, counterexamples, coverage ------------------------


def test_the_walk_is_the_same_whatever_the_number_of_workers() -> None:
    """Sharding by fingerprint over two worker processes finds exactly what one finds: the same
    nodes per level, states, transitions, outcomes and phases."""
    one = explore.explore(3, "daemon", "armed", workers=1)
    two = explore.explore(3, "daemon", "armed", workers=2)
    assert (one.per_level, one.states, one.nodes, one.transitions, one.outcomes,
            one.session_phases, one.turn_phases, one.guard_phases, one.coverage) == (
        two.per_level, two.states, two.nodes, two.transitions, two.outcomes,
        two.session_phases, two.turn_phases, two.guard_phases, two.coverage)
    assert two.workers == 2 and one.nodes > 1000
    assert 0 < one.collision < 1e-9


def _forgets_the_prompt_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a bug: the session drops the commands of a prompt it accepts (the write of the
    prompt is never asked for, yet the session awaits its answer)."""
    real = explore.reduce

    def forgetful(state: S.SessionState, event: object) -> at.Step[S.SessionState]:
        step = real(state, event)
        if isinstance(event, at.PromptSubmitted):
            return at.Step(step.state, ())
        return step

    monkeypatch.setattr(explore, "reduce", forgetful)


def test_a_planted_bug_gives_a_shortest_counterexample_that_check_rejects(
        monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Breadth first, the counterexample is the shortest: one prompt. Written as a trace,
    ``agentturn check`` replays it with the library's reducer and fails (the recorded commands
    are not the spec's) and ``explain`` tells it; printed as a program, it runs."""
    _forgets_the_prompt_write(monkeypatch)
    report = explore.explore(2, "daemon", "new", workers=2)
    outstanding = [v for v in report.new_violations if v.rule == "outstanding"]
    assert outstanding, [v.rule for v in report.violations]
    assert [type(x).__name__ for x in outstanding[0].events] == ["PromptSubmitted"]
    path = tmp_path / "counterexample.jsonl"
    assert main(["explore", "--depth", "1", "--start", "new", "--workers", "1",
                 "--counterexample", str(path)]) == 1
    out = capsys.readouterr().out
    assert "Falsifying example: outstanding" in out and str(path) in out
    assert main(["check", str(path)]) == 1
    assert main(["explain", str(path)]) == 0
    program = explore.program(outstanding[0])
    assert "reduce(state, PromptSubmitted(turn_id='t1.1'" in program
    exec(compile(program, "<counterexample>", "exec"), {})  # the library's reducer: it runs


def test_a_stuck_state_is_reported_as_a_liveness_violation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """*Never stuck* is checked on every new state, under its own name: a session that
    forgets a queued prompt while it idles is caught."""
    real = explore.reduce

    def stalls(state: S.SessionState, event: object) -> at.Step[S.SessionState]:
        step = real(state, event)
        if isinstance(event, S.PromptQueued) and state.phase is S.SessionPhase.IDLE:
            held = QueuedPrompt(prompt_id=event.prompt_id, message_id=event.message_id,
                                text=event.text)
            return at.Step(attrs.evolve(state, fifo=(held,)), ())
        return step

    monkeypatch.setattr(explore, "reduce", stalls)
    report = explore.explore(2, "daemon", "new", workers=1)
    assert "never stuck" in {v.rule for v in report.new_violations}


def test_the_coverage_lists_every_declared_edge_reached_or_not() -> None:
    """Every declared (phase, event) edge of every part is either reached or listed as never
    reached, and a walk reaches edges of every part (the turn's, the guard's and the Lead
    queue's through the session)."""
    report = explore.explore(2, "daemon", "armed", workers=1)
    assert report.coverage is not None
    for part, graph in explore.coverage.__globals__["PARTS"]:
        every = {(phase.name, trigger) for phase, trigger in graph.table}
        reached, missed = report.coverage.reached[part], report.coverage.missed[part]
        assert reached | missed == every and not reached & missed
    for part in ("session", "turn", "guard", "lead"):
        assert report.coverage.reached[part], part
    assert ("TURN", "StopPressed") in report.coverage.reached["session"]
    text = report.coverage.summary()
    assert "never reached from CLOSED:" in text


def test_the_frontier_is_shared_out_equally_moving_as_few_nodes_as_possible() -> None:
    """Workers keep the nodes they made; only a surplus over an equal share moves."""
    from agentturn.tools.explore.checker import _balance

    assert _balance([[0] * 5, [], [0]]) == [[(1, 2), (2, 1)], [], []]
    assert _balance([[0] * 3, [0] * 3]) == [[], []]
    assert _balance([[], [0] * 7]) == [[], [(0, 4)]]  # shares 4 and 3


def test_a_value_hashes_once_and_equal_values_hash_alike() -> None:
    """The fingerprint's ground: a value's hash is kept after the first ``hash()``, equal
    values (however built: a reducer's trusted copy, a pickle) hash alike, and a value is equal
    to itself at once."""
    import pickle

    state, _ = explore.start_state("daemon", "armed")
    first = hash(state)
    assert state._cached_hash == first and hash(state) == first
    again = pickle.loads(pickle.dumps(state))
    assert again == state and again is not state and hash(again) == first
    copy = attrs.evolve(state, stops=state.stops)
    assert copy == state and hash(copy) == first
    other = attrs.evolve(state, stops=state.stops + 1)
    assert other != state and hash(other) != first
