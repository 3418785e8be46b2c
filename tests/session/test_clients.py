"""Clients and closing (BR-4, BR-5, OB-6): clients attaching and leaving, the grace timer, what
the ring replays to a client, and what a closing or closed session hands back.
"""

from __future__ import annotations

from typing import Any

import pytest
from checked_host import Checked, cron, prompt, script_todos
from session_host import PROMPT, Host, say
from session_scenes import CRON, READ, ScriptHost, armed_host, due_notification, held
from strict_host import (
    GUARD_1,
    StrictHost,
    daemon_config,
    ends,
    of,
    run_guard_to_exhaustion,
    secret_todos,
    user_texts,
    with_permission_call,
)

import agentturn as at
from agentturn import guard as g
from agentturn import session as se


@pytest.mark.req("BR-4", "TL-3", "SG-S3")
def test_grace_expiry_halts_the_turn_and_never_approves() -> None:
    """req: BR-4, TL-3, SG-S3 — the only client leaves during a permission prompt: the grace
    timer starts; it expires: the dialog is dismissed (never approved), the turn halts, the
    queued prompt is handed back, and the session closes."""
    host = Host(guard=g.GuardConfig(daemon=True))
    write = at.ToolCall(call_id="w1", name="write_file", needs_permission=True)
    host.responses.append(say("Writing.", write))
    host.send(se.ClientAttached(client_id="desktop"))
    host.send(PROMPT)
    assert host.held and isinstance(host.held[-1], at.AskPermission)
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="after"))
    assert host.send(se.ClientDetached(client_id="desktop"))[0] == se.StartTimer(
        key="grace", seconds=10.0)
    commands = host.send(se.TimerFired(key="grace"))
    assert not host.commands(at.ExecuteTool)
    # the dialog is dismissed, and the notice says what the record written for the call says
    assert at.DismissPermission(call_id="w1", recorded_as=at.ToolResultStatus.SKIPPED) in commands
    assert [(r.call_id, r.status, r.reason) for c in commands if isinstance(c, at.Persist)
            for r in c.records] == [("w1", at.ToolResultStatus.SKIPPED,
                                     "Not run: the client disconnected and did not come "
                                     "back in time before this call started.")]
    assert host.outcomes() == [at.OutcomeKind.HALTED]
    assert se.PromptRefused(prompt_id="q1", text="after",
                            reason="the session closed before this prompt ran") in commands
    assert host.state.phase is se.SessionPhase.CLOSED
    # a prompt racing the close comes back with its text (issue 18, defect 16)
    assert host.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="hello?")) == [
        se.PromptRefused(prompt_id="t2", text="hello?", reason="the session is closed")]


@pytest.mark.req("BR-4")
def test_reattaching_within_grace_keeps_the_session() -> None:
    """req: BR-4 — the client comes back before the grace period ends: the timer is cancelled
    and a late TimerFired is absorbed."""
    host = Host(guard=g.GuardConfig(daemon=True))
    host.send(se.ClientAttached(client_id="a"), se.ClientDetached(client_id="a"))
    commands = host.send(se.ClientAttached(client_id="a"))
    assert commands[0] == se.CancelTimer(key="grace")
    late = host.send(se.TimerFired(key="grace"))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert host.state.phase is se.SessionPhase.IDLE


@pytest.mark.req("BR-5", "OB-6")
def test_attempts_published_with_no_subscriber_replay_after_rollover() -> None:
    """req: BR-5, OB-6 — nobody is attached; the guard continues twice while a tiny ring rolls
    over many times; a client attaching later still gets both attempts, separate, with their
    metadata."""
    chatty = [say("x" * 10) for _ in range(2)]
    host = armed_host(*chatty, ring_capacity=3, ring_pinned=4)
    host.send(PROMPT)
    for number in range(20):
        host.send(se.NotificationQueued(notification_id=f"n{number}", source_id="nobody"))
    commands = host.send(se.ClientAttached(client_id="late-client", last_seq=None))
    replayed = commands[0]
    assert isinstance(replayed, se.ReplayEvents)
    guard_entries = [e for e in replayed.entries if e.kind is se.EntryKind.GUARD_CHUNK]
    assert [dict(e.meta or {})["attempt"] for e in guard_entries] == [1, 2]


def _kinds(commands: list[at.Command]) -> list[str]:
    return [type(c).__name__ for c in commands]


def _closing_host() -> Host:
    """A session closed while a tool runs: CLOSING until the tool's result comes."""
    host = ScriptHost(hold=(at.ExecuteTool,))
    host.responses.append(say("Reading.", READ))
    host.send(PROMPT)
    host.send(se.CloseRequested())
    assert host.state.phase is se.SessionPhase.CLOSING
    return host


def _closed_host() -> Host:
    host = Host()
    host.send(se.CloseRequested())
    assert host.state.phase is se.SessionPhase.CLOSED
    return host


# The session-composition defects of issue 18 (``settle_spec.md``): each ``test_dNN_...``
# pins the fixed behaviour of defect NN.


@pytest.mark.req("BR-4", "TL-5")
def test_d12_close_after_a_failed_final_write_hands_the_tool_result_back() -> None:
    """Stop while a tool runs, the tool's result is kept, its write fails; the session is
    closed: the executed result record comes back in ``UnsavedRecords`` before
    ``CloseSession``. req: BR-4"""
    host = ScriptHost(hold=(at.ExecuteTool,), fail_keys=("t1/p3",))
    host.responses.append(say("Reading.", READ))
    host.send(PROMPT)
    held(host, at.ExecuteTool)
    host.send(at.StopPressed())
    ended = host.send(at.ToolFinished(call_id="r1", output="the file's text"))
    assert at.PersistFailed(key="t1/p3", reason="disk full") in host.events(at.PersistFailed)
    assert [c.outcome.kind for c in ended if isinstance(c, at.EndTurn)] == [
        at.OutcomeKind.CANCELLED]
    closed = host.send(se.CloseRequested())
    kinds = _kinds(closed)
    assert "UnsavedRecords" in kinds and kinds.index("UnsavedRecords") < kinds.index(
        "CloseSession")
    unsaved = [c for c in closed if isinstance(c, se.UnsavedRecords)]
    assert len(unsaved) == 1
    results = [r for r in unsaved[0].records if isinstance(r, at.ToolResultRecord)]
    assert [(r.call_id, r.status, r.output) for r in results] == [
        ("r1", at.ToolResultStatus.EXECUTED, "the file's text")]


@pytest.mark.req("BR-4", "TL-5")
@pytest.mark.parametrize("closing", ["close", "grace"])
def test_a_close_whose_final_write_fails_says_the_records_come_back(closing: str) -> None:
    """A close (or grace expiry) halts a running tool; the turn's final write then fails: what
    the user is told is true: the records are handed back unsaved as the session closes (they
    come back in ``UnsavedRecords``), not "saved before the next prompt", since no prompt
    comes. req: TL-5"""
    host = ScriptHost(hold=(at.ExecuteTool,), fail_keys=("t1/p3",))
    host.responses.append(say("Reading.", READ))
    host.send(se.ClientAttached(client_id="ui"), PROMPT)
    held(host, at.ExecuteTool)
    if closing == "close":
        host.send(se.CloseRequested())
    else:
        host.send(se.ClientDetached(client_id="ui"), se.TimerFired(key="grace"))
    ended = host.send(at.ToolFinished(call_id="r1", output="partial", cancelled=True))
    [end] = [c for c in ended if isinstance(c, at.EndTurn)]
    assert end.outcome.kind is at.OutcomeKind.HALTED
    assert "handed back unsaved" in end.outcome.message
    assert "before the next prompt" not in end.outcome.message
    [unsaved] = [c for c in ended if isinstance(c, se.UnsavedRecords)]
    assert [r.call_id for r in unsaved.records if isinstance(r, at.ToolResultRecord)] == ["r1"]
    assert isinstance(ended[-1], se.CloseSession)


@pytest.mark.req("BR-4", "LD-13")
def test_d12_grace_expiry_after_a_failed_prompt_save_hands_the_prompt_and_lead_back() -> None:
    """The prompt's own save fails (a resumable error) after a Lead was saved; the grace
    period expires: the Lead is reported ``LeadUnapplied`` and the prompt's record comes back
    in ``UnsavedRecords``, both before ``CloseSession``. req: BR-4"""
    state = se.Session.create(se.SessionConfig(
        chat_id="chat", guard=g.GuardConfig(todo_stop_guard=True, daemon=True),
        turn=at.TurnConfig(auto_title=False)))
    for event in (se.ClientAttached(client_id="ui"), PROMPT,
                  at.LeadSubmitted(chat_id="chat", lead_id="L1", text="use tabs"),
                  at.LeadSaved(lead_id="L1")):
        state, _ = se.reduce(state, event)
    state, failed = se.reduce(state, at.PersistFailed(key="t1/p1", reason="disk full"))
    assert [c.outcome.resumable for c in failed if isinstance(c, at.EndTurn)] == [True]
    state, _ = se.reduce(state, se.ClientDetached(client_id="ui"))
    state, expired = se.reduce(state, se.TimerFired(key="grace"))
    commands = list(expired)
    kinds = _kinds(commands)
    assert at.LeadUnapplied(lead_id="L1") in commands
    assert commands.index(at.LeadUnapplied(lead_id="L1")) < kinds.index("CloseSession")
    assert "UnsavedRecords" in kinds and kinds.index("UnsavedRecords") < kinds.index(
        "CloseSession")
    unsaved = next(c for c in commands if isinstance(c, se.UnsavedRecords))
    assert at.UserMessageRecord(message_id="m1", text="Port the parser") in unsaved.records


@pytest.mark.req("BR-4")
@pytest.mark.parametrize(("make", "event", "returned"), [
    (_closing_host, CRON, (se.AutomaticTurnDropped, "cron-1", "nightly report")),
    (_closed_host, CRON, (se.AutomaticTurnDropped, "cron-1", "nightly report")),
    (_closed_host, at.PromptSubmitted(turn_id="t9", message_id="m9", text="hello?"),
     (se.PromptRefused, "t9", "hello?")),
], ids=["due-while-closing", "due-while-closed", "prompt-while-closed"])
def test_d16_text_racing_the_close_is_handed_back(make: Any, event: object,
                                                  returned: tuple[type, str, str]) -> None:
    """An automatic turn due while closing or closed, or a prompt submitted to a closed
    session, never raises: its text comes back (``AutomaticTurnDropped`` /
    ``PromptRefused``). req: BR-4"""
    host = make()
    phase = host.state.phase
    commands = host.send(event)
    kind, turn_id, text = returned
    back = [c for c in commands if isinstance(c, kind)]
    ident = (lambda c: c.turn_id) if kind is se.AutomaticTurnDropped else (
        lambda c: c.prompt_id)
    assert [(ident(c), c.text) for c in back] == [(turn_id, text)]
    assert host.state.phase is phase


@pytest.mark.req("BR-4")
@pytest.mark.parametrize("event", [
    se.ClientAttached(client_id="ui-2"),
    se.PromptAborted(prompt_id="q1"),
    se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="sh"),
    se.BackgroundEnded(item_id="sh", notification_id=None),
    se.NotificationQueued(notification_id="n1", source_id="sh"),
    se.NotificationConsumed(notification_id="n1"),
    se.LifecycleChanged(kind=g.TrustClearingKind.REWIND),
    se.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="loop"),
    se.PromptCompleted(prompt_id="q1"),
], ids=lambda e: type(e).__name__)
def test_d16_racing_events_after_close_are_absorbed(event: object) -> None:
    """Client, FIFO, background, lifecycle and hard-stop events that race the close are
    absorbed by a closed session: no exception, it stays closed, nothing is asked of the
    host. req: BR-4"""
    host = _closed_host()
    commands = host.send(event)
    assert host.state.phase is se.SessionPhase.CLOSED
    assert not [c for c in commands if isinstance(c, at.AwaitingCommand)]
    if isinstance(event, se.ClientAttached):  # the notice says why, in the host's words
        assert at.StaleAnswerIgnored(event="ClientAttached", answer_id="ui-2",
                                     reason="the session is closed") in commands


def closed_host() -> StrictHost:
    host = StrictHost()
    host.send(se.ClientAttached(client_id="ui"))
    cmds = host.send(se.CloseRequested())
    assert of(cmds, se.CloseSession)
    assert host.state.phase is se.SessionPhase.CLOSED
    return host


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


@pytest.mark.req("BR-4")
def test_grace_timer_firing_after_reattach_is_absorbed_and_the_dialog_stays_open() -> None:
    host = StrictHost()
    with_permission_call(host)
    cmds = host.send(se.ClientDetached(client_id="ui"))
    grace = of(cmds, se.StartTimer)[0]
    assert grace.seconds == 10.0
    assert not of(cmds, at.DismissPermission)
    back = host.send(se.ClientAttached(client_id="ui", last_seq=0))
    assert se.CancelTimer(key=grace.key) in back
    replay = of(back, se.ReplayEvents)[0]
    assert [e.text for e in replay.entries] == ["I will delete it."]
    late = host.send(se.TimerFired(key=grace.key))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert host.pending(at.AskPermission) == "c1"
    run = host.send(at.PermissionDecided(call_id="c1", decision=at.PermissionDecision.ALLOW))
    assert of(run, at.ExecuteTool)[0].call.call_id == "c1"


@pytest.mark.req("BR-4")
def test_close_during_a_permission_prompt_halts_and_hands_everything_back() -> None:
    host = StrictHost()
    with_permission_call(host, queued=True)
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="be careful"))
    host.send(at.LeadSaved(lead_id="L1"))
    cmds = host.send(se.CloseRequested())
    assert of(cmds, at.DismissPermission)[0].call_id == "c1"
    cmds += host.ack_persists()
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.HALTED
    assert of(cmds, at.LeadUnapplied) == [at.LeadUnapplied(lead_id="L1")]
    refused = {c.prompt_id: c.text for c in of(cmds, se.PromptRefused)}
    assert refused == {"q1": "queued one", "q2": "partial"}
    assert of(cmds, se.CloseSession)
    assert host.state.phase is se.SessionPhase.CLOSED
    late = host.send(at.PermissionDecided(call_id="c1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert not of(host.all_commands(), at.ExecuteTool)
    # every tool call of the response has exactly one result record
    records = [r for p in of(host.all_commands(), at.Persist) for r in p.records
               if isinstance(r, at.ToolResultRecord)]
    assert sorted(r.call_id for r in records) == ["c1", "c2"]


@pytest.mark.req("BR-4")
@pytest.mark.parametrize("halt", ["close", "grace", "hard_stop"])
def test_a_dismissed_dialog_is_recorded_as_the_notice_says(halt: str) -> None:
    host = StrictHost()
    with_permission_call(host)
    if halt == "close":
        cmds = host.send(se.CloseRequested())
    elif halt == "grace":
        host.send(se.ClientDetached(client_id="ui"))
        cmds = host.send(se.TimerFired(key=host.pending(se.StartTimer)))
    else:
        cmds = host.send(se.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="loop"))
    notice = of(cmds, at.DismissPermission)[0]
    record = next(r for p in of(cmds, at.Persist) for r in p.records
                  if isinstance(r, at.ToolResultRecord) and r.call_id == "c1")
    assert record.status is notice.recorded_as


@pytest.mark.parametrize("event", [
    at.PromptSubmitted(turn_id="t9", message_id="m", text="after close"),
    se.ClientAttached(client_id="ui", last_seq=0),
    se.AutomaticTurnDue(turn_id="a1", message_id="m", text="cron", kind=se.AutomaticKind.CRON,
                       source_id="task"),
    se.TimerFired(key="t1/drain-1"),
    at.ContinueTurn(turn_id="t1"),
], ids=lambda e: type(e).__name__)
def test_events_racing_the_close_are_absorbed_or_handed_back_without_change(event: object
                                                                           ) -> None:
    """A race a real UI produces after close is never a ProtocolError: its text comes back
    (PromptRefused, AutomaticTurnDropped) or it is absorbed (StaleAnswerIgnored); nothing
    changes (issue 18, defect 16)."""
    host = closed_host()
    before = host.state
    cmds = host.send(event)
    assert host.state == before
    assert [type(c) for c in cmds] in ([se.PromptRefused], [se.AutomaticTurnDropped],
                                       [at.StaleAnswerIgnored])
    text = getattr(event, "text", None)
    if text is not None:
        assert [c.text for c in cmds] == [text]


@pytest.mark.req("BR-4")
@pytest.mark.req("BR-4")
def test_a_grace_timer_that_was_never_started_is_absorbed_as_late() -> None:
    """Judgment, kept: the grace timer has one fixed key, so the session cannot tell a firing it
    never asked for from the late firing of one it cancelled when the client came back; it
    absorbs both (StaleAnswerIgnored, nothing changes) rather than call a likely race misuse."""
    host = StrictHost()
    assert host.send(se.TimerFired(key="grace")) == (at.StaleAnswerIgnored(
        event="TimerFired", answer_id="grace", reason="this timer is no longer running"),)
    assert host.state == se.Session.create(daemon_config())


@pytest.mark.req("LD-14")
def test_text_sent_to_a_closed_session_is_never_swallowed() -> None:
    host = closed_host()
    cmds = host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L9", text="after close"))
    assert [c.draft for c in of(cmds, at.ReturnDraft)] == ["after close"]
    # A prompt racing the close comes back with its text (not an error).
    assert host.send(se.PromptQueued(prompt_id="q9", message_id="m", text="after close")) == (
        se.PromptRefused(prompt_id="q9", text="after close", reason="the session is closed"),)
    for harmless in (at.StopPressed(), se.CloseRequested()):
        assert not [c for c in host.send(harmless) if not isinstance(c, at.StaleAnswerIgnored)]


@pytest.mark.req("BR-5")
@pytest.mark.req("OB-6")
def test_a_late_client_gets_guard_events_even_after_rollover() -> None:
    host = StrictHost(daemon_config(ring_capacity=2, ring_pinned=2))
    run_guard_to_exhaustion(host, n=1)
    for i in range(2, 5):                        # more turns push the ring over
        host.send(at.PromptSubmitted(turn_id=f"t{i}", message_id=f"m{i}", text="hi"))
        host.ack_persists()
        host.answer_titles()
        host.open_and_complete(text=f"answer {i}")
        host.drain()
    cmds = host.send(se.ClientAttached(client_id="late", last_seq=None))
    replay = of(cmds, se.ReplayEvents)[0]
    assert replay.gap
    kept = [dict(e.meta.pairs).get("attempt") for e in replay.entries  # type: ignore[union-attr]
            if e.discrete]
    assert 1 in kept or 2 in kept
    assert any(e.kind is se.EntryKind.GUARD_CHUNK for e in replay.entries)


@pytest.mark.req("BR-4")
def test_grace_expiry_halts_the_turn_and_hands_queued_prompts_back() -> None:
    host = StrictHost()
    with_permission_call(host, queued=True)
    host.send(se.ClientDetached(client_id="ui"))
    cmds = host.send(se.TimerFired(key=host.pending(se.StartTimer)))
    cmds += host.ack_persists()
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.HALTED
    assert {c.prompt_id for c in of(cmds, se.PromptRefused)} == {"q1", "q2"}
    # the close says why, once the halted turn has ended
    assert of(cmds, se.CloseSession) == [
        se.CloseSession(reason="The client did not come back within the grace period.")]
    assert not of(host.all_commands(), at.ExecuteTool)


@pytest.mark.req("SG-A13")
def test_reattaching_keeps_the_guard_armed() -> None:
    host = StrictHost()
    host.send(se.ClientAttached(client_id="ui"))
    host.prompt()
    host.todo_round(secret_todos("pending"))
    host.send(se.ClientDetached(client_id="ui"))
    host.send(se.ClientAttached(client_id="ui", last_seq=1))
    host.open_and_complete(text="stop")
    cmds = host.drain()
    assert user_texts(cmds) == [GUARD_1.format(n=1)]


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


def test_grace_expiry_during_permission_never_approves():
    """Grace expiry with a dialog open halts the turn, dismisses the dialog as skipped, reports a
    pending Lead unapplied and closes; a late allow is absorbed and nothing runs (req: BR-4, TL-3,
    LD-13).
    """
    h = Checked()
    h.responses.append(say("perm", at.ToolCall(call_id="w1", name="write_file",
                                               needs_permission=True)))
    h.send(se.ClientAttached(client_id="A"), prompt())
    h.send(se.ClientDetached(client_id="A"))
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead"))
    h.send(se.TimerFired(key="grace"))
    assert h.outcomes() == [at.OutcomeKind.HALTED]
    assert h.commands(at.DismissPermission)[0].recorded_as is at.ToolResultStatus.SKIPPED
    assert [c.lead_id for c in h.commands(at.LeadUnapplied)] == ["L1"]
    assert len(h.commands(se.CloseSession)) == 1
    out = h.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert h.commands(at.ExecuteTool) == []
    h.clean()


def test_reattach_within_grace_keeps_turn_and_guard():
    """A client that comes back within the grace window cancels the timer, gets a replay, and the
    armed guard still continues (req: BR-4, SG-A13).
    """
    h = Checked()
    script_todos(h, "pending")
    h.drain = lambda c: None
    h.send(se.ClientAttached(client_id="A"), prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.ClientDetached(client_id="A"))
    out = h.send(se.ClientAttached(client_id="A", last_seq=0))
    assert any(isinstance(c, se.CancelTimer) and c.key == "grace" for c in out)
    assert any(isinstance(c, se.ReplayEvents) for c in out)
    assert [type(c) for c in h.send(se.TimerFired(key="grace"))] == [at.StaleAnswerIgnored]
    h.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    h.responses.extend([say("a"), say("b")])
    h.send(se.MidTurnDrained(drain_id=drain.drain_id))
    assert h.guard_attempts() == [1, 2]
    h.clean()


def test_no_subscriber_prompt_then_replay_of_guard_attempts():
    """A prompt runs with no client attached; a client attaching later gets both guard attempts and
    the exhaustion notice replayed (req: BR-5, OB-6).
    """
    h = Checked()
    script_todos(h, "pending")
    h.responses.extend([say("a"), say("b")])
    h.send(prompt())
    out = h.send(se.ClientAttached(client_id="late", last_seq=None))
    replay = next(c for c in out if isinstance(c, se.ReplayEvents))
    kinds = [e.kind for e in replay.entries]
    assert kinds.count(se.EntryKind.GUARD_CHUNK) == 2
    assert kinds.count(se.EntryKind.GUARD_EXHAUSTED) == 1
    h.clean()


def test_close_with_work_in_flight_hands_everything_back():
    """Close while a write runs: the tool's result is kept, the pending Lead is reported unapplied,
    the queued prompt and held cron come back with their texts, then the session closes (req: BR-4,
    LD-13, TL-5).
    """
    h = Checked()
    h.responses.append(say("working", at.ToolCall(call_id="w1", name="write_file")))
    h.hold.append(lambda c: isinstance(c, (at.ExecuteTool, at.SaveLead)))
    h.send(prompt())
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="queued one"), cron("c1"))
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead text"))
    h.send(se.CloseRequested())
    assert h.commands(se.CloseSession) == []  # waits for the write
    h.hold.clear()
    h.send(at.ToolFinished(call_id="w1", output="wrote"), at.LeadSaved(lead_id="L1"))
    saved = [r for c in h.commands(at.Persist) for r in c.records
             if isinstance(r, at.ToolResultRecord)]
    assert [(r.call_id, r.output) for r in saved] == [("w1", "wrote")]
    assert [c.lead_id for c in h.commands(at.LeadUnapplied)] == ["L1"]
    assert [(c.prompt_id, c.text) for c in h.commands(se.PromptRefused)] == [("q1", "queued one")]
    assert [(c.turn_id, c.text) for c in h.commands(se.AutomaticTurnDropped)] == [("c1", "c1 text")]
    assert len(h.commands(se.CloseSession)) == 1
    h.clean()


def test_events_after_close_are_handed_back_or_absorbed():
    """After close, prompts, queued prompts, Leads and automatic turns come back with their text,
    and late clicks are absorbed, never a ProtocolError (req: BR-4).
    """
    h = Checked()
    h.responses.append(say("hi"))
    h.send(prompt(), se.CloseRequested())
    assert h.state.phase is se.SessionPhase.CLOSED
    late = [prompt("t9", "after close"),
            se.PromptQueued(prompt_id="q9", message_id="qm9", text="q after"),
            at.LeadSubmitted(chat_id="chat", lead_id="L9", text="lead after"),
            cron("c9"), at.StopPressed(), se.CloseRequested(), se.TimerFired(key="grace"),
            se.ClientAttached(client_id="x"), se.PromptAborted(prompt_id="q9"),
            se.HardStopped(), se.LifecycleChanged(kind=g.TrustClearingKind.FORK)]
    for event in late:
        h.send(event)
    assert [c.text for c in h.commands(se.PromptRefused)] == ["after close", "q after"]
    assert [c.draft for c in h.commands(at.ReturnDraft)] == ["lead after"]
    assert [c.text for c in h.commands(se.AutomaticTurnDropped)] == ["c9 text"]
    h.clean()


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


@pytest.mark.req("OB-6")
def test_a_response_is_published_under_its_request_id() -> None:
    """The text of a completed response goes into the ring as a message chunk under the id of
    its request, not the chat's (kills ``message_id=None``)."""
    host = Host()
    host.responses.append(say("Done."))
    host.send(PROMPT)
    assert [(e.message_id, e.text) for e in host.published(se.EntryKind.MESSAGE_CHUNK)] == [
        ("t1/r1", "Done.")]


@pytest.mark.req("BR-4", "BG-6")
def test_closing_hands_back_every_held_turn_and_queued_prompt_with_the_reason() -> None:
    """Closing while a turn runs: the turn is halted, then each queued prompt is refused and
    each held automatic turn dropped, with the exact reasons, before ``CloseSession``."""
    host = Host()
    host.send(PROMPT, se.PromptQueued(prompt_id="q1", message_id="mq", text="later"),
              due_notification("a1", "n1"))
    commands = host.send(se.CloseRequested())
    closing = [c for c in commands if isinstance(
        c, se.PromptRefused | se.AutomaticTurnDropped | se.CloseSession)]
    assert closing == [
        se.PromptRefused(prompt_id="q1", text="later",
                         reason="the session closed before this prompt ran"),
        se.AutomaticTurnDropped(turn_id="a1", message_id="a1-m", text="run a1",
                                reason="the session closed"),
        se.CloseSession(reason="The session was closed.")]


@pytest.mark.req("BR-4")
def test_a_detach_of_a_client_not_attached_is_absorbed_with_the_reason() -> None:
    """``ClientDetached`` for a client the session does not have: one ``StaleAnswerIgnored``
    with exactly "this client is not attached", and no grace period starts."""
    host = Host()
    assert host.send(se.ClientDetached(client_id="c9")) == [
        at.StaleAnswerIgnored(event="ClientDetached", answer_id="c9",
                              reason="this client is not attached")]
    assert not host.state.grace


@pytest.mark.req("BR-4", "OB-6")
def test_a_client_that_attaches_again_is_replayed_only_what_it_has_not_seen() -> None:
    """A client attaching with ``last_seq`` gets exactly the ring entries after it, no gap;
    without one it gets them all (kills ``last_seq`` dropped from the ``replay``)."""
    host = Host()
    host.responses.append(say("Done."))
    host.send(PROMPT)
    entries = [c.entry for c in host.commands(se.Publish)]
    assert len(entries) > 1
    [everything] = [c for c in host.send(se.ClientAttached(client_id="c1"))
                    if isinstance(c, se.ReplayEvents)]
    assert everything.entries == tuple(entries)
    [rest] = [c for c in host.send(se.ClientAttached(client_id="c1", last_seq=entries[0].seq))
              if isinstance(c, se.ReplayEvents)]
    assert (rest.entries, rest.gap) == (tuple(entries[1:]), False)
