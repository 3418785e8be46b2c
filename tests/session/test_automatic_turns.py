"""Background work and automatic turns in a session (BG-1 ... BG-7): the baseline and what is
relevant to a chain, automatic turns held while a chain can resume, coalesced, bounded, evicted or
handed back with the reason, and never given Stop hooks.
"""

from __future__ import annotations

import pytest
from checked_host import Checked, cron, prompt
from session_host import PROMPT, Host, say, todo_call, todos
from session_scenes import armed_host, armed_script, due_notification
from strict_host import (
    EXHAUSTED,
    GUARD_1,
    StrictHost,
    ends,
    of,
    secret_todos,
    texts_published,
    user_texts,
)

import agentturn as at
from agentturn import guard as g
from agentturn import session as se


@pytest.mark.req("BG-3")
def test_inherited_background_work_does_not_block_a_new_request() -> None:
    """req: BG-3 — an agent still running from an older request is in the new chain's
    baseline: the new chain's guard continues as usual."""
    host = armed_host(say("More."), say("Even more."))
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.AGENT, item_id="agent-1"))
    host.send(PROMPT)
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2


@pytest.mark.req("BG-4")
def test_automatic_turns_never_run_stop_hooks() -> None:
    """req: BG-4 — a cron turn with Stop hooks configured ends without running them."""
    host = Host(stop_hooks=True)
    host.responses.append(say("Nightly report written."))
    host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cm", text="nightly report",
                                  kind=se.AutomaticKind.CRON, source_id="task-1"))
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert not host.commands(se.RunStopHooks)


@pytest.mark.req("BG-5", "BG-6")
def test_unrelated_cron_fires_wait_and_recurring_ones_coalesce() -> None:
    """req: BG-5, BG-6 — while a turn runs, two fires of one recurring task are held as one;
    when the turn ends it runs once, as an unarmed chain."""
    host = Host()
    host.send(PROMPT)  # no responses scripted: the request is held, the turn runs
    for number in (1, 2):
        host.send(se.AutomaticTurnDue(turn_id=f"cron-{number}", message_id=f"cm{number}",
                                      text="hourly check", kind=se.AutomaticKind.CRON,
                                      source_id="task-h", recurring=True))
    deferred = host.commands(se.AutomaticTurnDeferred)
    assert deferred == [se.AutomaticTurnDeferred(turn_id="cron-1"),
                        se.AutomaticTurnDeferred(turn_id="cron-2", coalesced_into="cron-1")]
    assert len(host.state.deferred.turns) == 1
    host.responses.extend([say("Done."), say("Checked.")])
    host.answer(host.held.pop())
    host.send()
    assert host.user_messages().count("hourly check") == 1
    assert host.outcomes() == [at.OutcomeKind.FINISHED, at.OutcomeKind.FINISHED]


def _idle_armed_waiting_for_build() -> Host:
    host = Host()
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending")}
    host.send(PROMPT, se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="build"))
    host.responses.append(say("Waiting for the build."))
    host.answer(host.held.pop())
    host.send()
    return host


@pytest.mark.req("BG-1", "BG-2")
def test_background_ended_can_queue_its_terminal_notification_in_the_same_step() -> None:
    """req: BG-1, BG-2 — ``BackgroundEnded(notification_id=...)`` is the item's end and its
    notification at once, so an idle chain waiting for the item never sees a step with nothing
    left to wait for; ``waiting_for`` names the notification, and the related turn runs."""
    host = _idle_armed_waiting_for_build()
    assert [(w.kind, w.answer_id) for w in se.waiting_for(host.state)] == [
        (se.WaitKind.BACKGROUND, "build")]
    host.send(se.BackgroundEnded(item_id="build", notification_id="n1"))
    assert [(w.kind, w.answer_id) for w in se.waiting_for(host.state)] == [
        (se.WaitKind.BACKGROUND, "n1")]
    assert host.state.guard.armed
    host.responses.append(say("The build passed."))
    host.send(se.AutomaticTurnDue(turn_id="n-1", message_id="nm", text="build ok",
                                  kind=se.AutomaticKind.NOTIFICATION, source_id="build"))
    assert "build ok" in host.user_messages()


@pytest.mark.req("BG-2", "SG-A11")
def test_an_items_end_cannot_be_reported_without_saying_whether_a_notification_follows(
        ) -> None:
    """req: BG-2 — the order that ends an idle chain for good (the end, then its notification
    in a later event) cannot be sent unnoticed: ``notification_id`` is required, ``None``
    included; both orders the docstring gives leave the chain armed with the notification as
    its relevant input."""
    with pytest.raises(TypeError, match="notification_id"):
        se.BackgroundEnded(item_id="build")  # type: ignore[call-arg]
    one_step = _idle_armed_waiting_for_build()
    one_step.send(se.BackgroundEnded(item_id="build", notification_id="n1"))
    first = _idle_armed_waiting_for_build()
    first.send(se.NotificationQueued(notification_id="n1", source_id="build"),
               se.BackgroundEnded(item_id="build", notification_id=None))
    for host in (one_step, first):
        assert host.state.guard.armed
        assert host.state.guard.phase is g.GuardPhase.ACTIVE
        assert [(w.kind, w.answer_id) for w in se.waiting_for(host.state)] == [
            (se.WaitKind.BACKGROUND, "n1")]
    assert one_step.state.background == first.state.background


# The session-composition defects of issue 18 (``settle_spec.md``): each ``test_dNN_...``
# pins the fixed behaviour of defect NN.


@pytest.mark.req("BG-6")
def test_d15_a_related_turn_with_no_room_while_a_turn_runs_is_handed_back_with_its_text(
        ) -> None:
    """While a turn runs and the held queue is full of related turns, one more related
    automatic turn is handed back in ``AutomaticTurnDropped`` with its text. req: BG-6"""
    host = Host(max_deferred=2)
    host.send(PROMPT)  # the request is held: the turn runs
    for number in (1, 2, 3):
        host.send(se.BackgroundStarted(kind=se.BackgroundKind.AGENT, item_id=f"a{number}"))
    for number in (1, 2):
        assert host.send(se.AutomaticTurnDue(
            turn_id=f"n{number}", message_id=f"n{number}m", text=f"agent {number} done",
            kind=se.AutomaticKind.NOTIFICATION, source_id=f"a{number}")) == [
            se.AutomaticTurnDeferred(turn_id=f"n{number}")]
    dropped = host.send(se.AutomaticTurnDue(
        turn_id="n3", message_id="n3m", text="agent 3 done",
        kind=se.AutomaticKind.NOTIFICATION, source_id="a3"))
    assert [type(c) for c in dropped] == [se.AutomaticTurnDropped]
    assert [(c.turn_id, c.message_id, c.text) for c in dropped] == [
        ("n3", "n3m", "agent 3 done")]


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


@pytest.mark.req("BG-2")
@pytest.mark.req("SG-A10")
@pytest.mark.req("BG-6")
def test_background_defers_the_guard_and_its_result_keeps_the_chain() -> None:
    host = StrictHost()
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="old"))  # inherited
    host.prompt()
    host.todo_round(secret_todos("pending", "in_progress"))
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="build"))
    host.open_and_complete(text="waiting for the build")
    cmds = host.drain()
    assert ends(cmds) and not any(g.is_guard_prompt(t) for t in user_texts(cmds))
    assert of(cmds, se.SuppressFollowUpSuggestions)
    # unrelated recurring cron fires wait and coalesce
    d1 = host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1/m", text="tick",
                                      kind=se.AutomaticKind.CRON, source_id="task",
                                      recurring=True))
    d2 = host.send(se.AutomaticTurnDue(turn_id="cron-2", message_id="cron-2/m", text="tick",
                                      kind=se.AutomaticKind.CRON, source_id="task",
                                      recurring=True))
    assert d1 == (se.AutomaticTurnDeferred(turn_id="cron-1"),)
    assert d2 == (se.AutomaticTurnDeferred(turn_id="cron-2", coalesced_into="cron-1"),)
    # the related result runs at once, within the chain: the guard continues it
    host.send(se.BackgroundEnded(item_id="build", notification_id="n1"))
    run = host.send(se.AutomaticTurnDue(turn_id="n-1", message_id="n-1/m", text="build ok",
                                       kind=se.AutomaticKind.NOTIFICATION, source_id="build"))
    assert user_texts(run) == ["build ok"]
    host.ack_persists()
    host.send(se.NotificationConsumed(notification_id="n1"))
    host.open_and_complete(text="now the todos")
    cmds = host.drain()
    assert user_texts(cmds) == [GUARD_1.format(n=2)]
    # run the chain out; the held cron starts only after, once (coalesced)
    for i in range(2):
        host.ack_persists()
        host.open_and_complete(text=f"more {i}")
        cmds = host.drain()
    assert EXHAUSTED.format(n=2) in texts_published(cmds)
    assert user_texts(cmds)[-1] == "tick"
    assert sum(t == "tick" for t in user_texts(host.all_commands())) == 1


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


def test_automatic_turn_runs_guard_only_never_stop_hooks():
    """A cron turn that writes its own unfinished todos arms its own chain and is continued by the
    guard, with no external Stop-hook run (req: BG-4, SG-A10).
    """
    h = Checked(stop_hooks=True)
    h.tool_results["ctw"] = {"output": "ok", "structured": todos("pending")}
    h.responses.extend([say("cron work", todo_call("ctw")), say("s"), say("a"), say("b")])
    h.send(cron("c1"))
    assert h.commands(se.RunStopHooks) == []
    assert h.guard_attempts() == [1, 2]
    assert h.commands(at.EndTurn)[0].origin is at.TurnOrigin.CRON
    h.clean()


def test_recurring_fires_coalesce_and_queue_bound_hands_back_text():
    """Deferred recurring fires of one task coalesce into one; when the bounded queue overflows the
    oldest unrelated turn is handed back with its text (req: BG-6).
    """
    h = Checked(max_deferred=3)
    h.send(prompt())
    outs = [h.send(cron(f"r{i}", source="REC", recurring=True)) for i in range(3)]
    assert outs[1][0].coalesced_into == "r0" and outs[2][0].coalesced_into == "r0"
    for i in range(3):
        h.send(cron(f"o{i}", source=f"T{i}"))
    dropped = h.commands(se.AutomaticTurnDropped)
    assert [d.turn_id for d in dropped] == ["r0", "o0"][:len(dropped)]
    assert dropped[0].text == "r0 text"
    assert len(se.held(h.state)) == 3
    h.clean()


def _awaiting_a_reported_prompt(max_deferred: int) -> Host:
    """An armed chain whose stop yields to a prompt the client reported queued (BR-1): the
    turn ends and the chain awaits that prompt, with a shell the chain started still live."""
    host = armed_script(Host(max_deferred=max_deferred))
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, has_queued_prompt=True)
    host.send(PROMPT, se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="sh1"))
    assert host.state.phase is se.SessionPhase.IDLE
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    return host


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


@pytest.mark.req("BG-5", "BG-6")
def test_a_full_queue_evicts_its_oldest_unrelated_turn_and_forgets_its_prompt() -> None:
    """With room for one held turn, a second unrelated one while a turn runs evicts the first
    with the exact reason; when the turn ends only the survivor runs, with its own text."""
    host = Host(max_deferred=1)
    host.send(PROMPT)  # no response scripted: the turn runs
    assert host.send(due_notification("a1", "n1")) == [se.AutomaticTurnDeferred(turn_id="a1")]
    assert host.send(due_notification("a2", "n2")) == [
        se.AutomaticTurnDeferred(turn_id="a2"),
        se.AutomaticTurnDropped(turn_id="a1", message_id="a1-m", text="run a1",
                                reason="the deferred queue is full; the oldest unrelated "
                                       "automatic turn made room")]
    # The evicted turn's prompt goes with it (kills ``_forget_prompt`` of ``None`` in ``_hold``).
    assert host.state.deferred_prompts == (("a2", "a2-m", "run a2"),)
    host.responses.extend([say("Done."), say("Ran a2.")])
    host.answer(host.held.pop())
    host.send()
    assert host.user_messages() == ["Port the parser", "run a2"]
    assert host.outcomes() == [at.OutcomeKind.FINISHED, at.OutcomeKind.FINISHED]


@pytest.mark.req("BG-5", "BG-6", "SO-2")
def test_a_full_queue_of_related_turns_drops_an_unrelated_one_by_name() -> None:
    """The queue holds one related turn (its source is the chain's shell); an unrelated turn
    that finds it full is the one dropped, named, with the exact reason."""
    host = _awaiting_a_reported_prompt(1)
    assert host.send(due_notification("r1", "sh1")) == [se.AutomaticTurnDeferred(turn_id="r1")]
    assert host.send(due_notification("u1", "elsewhere")) == [se.AutomaticTurnDropped(
        turn_id="u1", message_id="u1-m", text="run u1",
        reason="the deferred queue is full of turns related to the live work chain; deliver it "
               "again once one has run")]
    assert [t.turn_id for t in host.state.deferred.turns] == ["r1"]


@pytest.mark.req("BG-5", "BG-6", "SO-2")
def test_a_related_turn_with_no_room_that_may_not_run_now_is_dropped_with_the_reason() -> None:
    """A related turn finds the queue full of related turns while the idle chain awaits a
    queued prompt: the queue keeps its bound, the turn may not start before that prompt, so it
    is handed back whole with the exact reason; the held related turn keeps its place."""
    host = _awaiting_a_reported_prompt(1)
    host.send(due_notification("r1", "sh1"))
    assert host.send(due_notification("r2", "sh1")) == [se.AutomaticTurnDropped(
        turn_id="r2", message_id="r2-m", text="run r2",
        reason="the deferred queue is full of turns related to the live work chain; deliver it "
               "again once one has run")]
    assert [t.turn_id for t in host.state.deferred.turns] == ["r1"]
    assert host.state.phase is se.SessionPhase.IDLE


@pytest.mark.req("BG-6")
def test_an_automatic_turn_due_again_while_held_is_absorbed_with_the_reason() -> None:
    """The same automatic turn due twice while a turn runs: held once, the second is absorbed
    with exactly "this automatic turn is already held"."""
    host = Host()
    host.send(PROMPT)  # no response scripted: the turn runs
    assert host.send(due_notification("a1", "n1")) == [se.AutomaticTurnDeferred(turn_id="a1")]
    assert host.send(due_notification("a1", "n1")) == [at.StaleAnswerIgnored(
        event="AutomaticTurnDue", answer_id="a1", reason="this automatic turn is already held")]
