"""The mid-turn drain (BR-2, BR-3): the client's reply and its queued-prompt flag, and replies
that come late, twice, for another drain, after the turn or after the session closed; their
messages join the running turn as Lead instructions or are handed back, never lost.
"""

from __future__ import annotations

import pytest
from checked_host import Checked, prompt, script_todos
from session_host import PROMPT, Host, say, todo_call, todos
from session_scenes import CRON, armed_host, armed_script, held, persisted_texts, waits
from strict_host import StrictHost, ends, of

import agentturn as at
from agentturn import guard as g
from agentturn import session as se


@pytest.mark.req("BR-2")
def test_an_omitted_queued_prompt_flag_reads_as_false() -> None:
    """req: BR-2 — an older client omits ``has_queued_prompt``: the guard continues."""
    host = armed_host(say("Go on."), say("And on."))
    host.send(PROMPT)
    assert all(reply.has_queued_prompt is None for reply in host.events(se.MidTurnDrained))
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2


@pytest.mark.req("BR-3")
def test_a_late_drain_restores_its_messages_and_discards_its_snapshot() -> None:
    """req: BR-3 — the drain times out (the guard goes on without it); the late reply's message
    joins the running turn as a Lead, and its stale ``has_queued_prompt`` changes nothing."""
    host = armed_host(say("Continuing."), say("Read your note."), say("Done."))
    drains: list[se.DrainMidTurnQueue] = []
    host.drain = lambda c: (drains.append(c), None)[1]
    host.send(PROMPT)
    first = drains[0]
    host.send(se.TimerFired(key=first.drain_id))
    assert host.published(se.EntryKind.GUARD_CHUNK)  # went on without the drain
    host.send(se.MidTurnDrained(drain_id=first.drain_id, messages=("check the docs",),
                                has_queued_prompt=True))
    assert "check the docs" in host.user_messages()
    assert host.state.guard.phase is not g.GuardPhase.AWAITING_PROMPT


@pytest.mark.req("BR-3")
def test_a_late_drain_after_the_turn_hands_its_messages_back() -> None:
    """req: BR-3 — no turn runs when the late reply comes: the messages are restored, never
    dropped."""
    host = Host(guard=g.GuardConfig(daemon=True))
    host.responses.append(say("Done."))
    drains: list[se.DrainMidTurnQueue] = []
    host.drain = lambda c: (drains.append(c), None)[1]
    host.send(PROMPT)
    host.send(se.TimerFired(key=drains[0].drain_id))
    late = host.send(se.MidTurnDrained(drain_id=drains[0].drain_id, messages=("one", "two")))
    assert late == [se.RestoreMidTurnMessages(drain_id=drains[0].drain_id,
                                              messages=("one", "two"))]


class FailingLeadSaves(Host):
    """A host whose storage refuses every Lead save."""

    def answer(self, command: at.Command) -> None:
        if isinstance(command, at.SaveLead):
            self.queue.append(at.LeadSaveFailed(lead_id=command.lead_id, reason="io"))
        else:
            super().answer(command)


@pytest.mark.req("SG-B1", "SO-1", "LD-7")
def test_a_drained_message_whose_save_fails_resets_no_budget() -> None:
    """req: SG-B1, SO-1, LD-7 — after the guard's first continuation, a drained message whose save
    fails comes back as a draft and never reaches the model, so it is no new user input: the
    stop is decided again with the budget it had, and the chain gets one more guard stream, not
    two (found by the fuzzer: three guard-attributable streams)."""
    host = FailingLeadSaves()
    drains = iter([(), ("and the docs",)])  # the second stop's drain brings the message
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, messages=next(drains, ()))
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending")}
    host.responses.extend([say("Stopping."), say("Still going."),
                           say("Reading.", at.ToolCall(call_id="r1", name="read_file")),
                           say("never sent")])
    host.send(PROMPT)
    assert [c.draft for c in host.commands(at.ReturnDraft)] == ["and the docs"]
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2
    (end,) = host.commands(at.EndTurn)
    assert (end.outcome.kind, end.outcome.halt_kind) == (at.OutcomeKind.HALTED,
                                                         at.HardStopKind.GUARD_BUDGET)
    # the guard's own reason reaches the outcome (a mutant that dropped it survived a sample)
    assert end.outcome.message == ("The todo stop guard used its 2 automatic continuations; "
                                   "no further stream opens.")


# The session-composition defects of issue 18 (``settle_spec.md``): each ``test_dNN_...``
# pins the fixed behaviour of defect NN.


@pytest.mark.req("SO-4", "BR-3")
def test_d04_an_abort_during_the_drain_makes_its_queued_prompt_flag_stale() -> None:
    """``PromptAborted`` for an id the session does not know, while a drain is outstanding,
    makes that drain's ``has_queued_prompt=True`` stale: no wait starts, and an automatic turn
    runs afterwards. req: SO-4"""
    host = Host()
    host.responses.append(say("Done."))
    host.drain = lambda c: None  # the drain's reply is held
    host.send(PROMPT)
    drain = held(host, se.DrainMidTurnQueue)
    host.send(se.PromptAborted(prompt_id="p-client"))
    host.send(se.MidTurnDrained(drain_id=drain.drain_id, has_queued_prompt=True))
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert host.state.guard.phase is not g.GuardPhase.AWAITING_PROMPT
    host.responses.append(say("Nightly report written."))
    ran = host.send(CRON)
    assert "nightly report" in persisted_texts(ran)
    assert se.WaitKind.CLIENT_PROMPT not in waits(host.state)


@pytest.mark.req("BR-3")
def test_d22_drain_ids_are_numbered_per_turn_and_unknown_ones_are_refused() -> None:
    """Drain ids count per turn (``t1/drain-1``, ``t1/drain-2``, then ``t2/drain-1``); a reply
    for a drain never issued is ``UnknownId`` (state unchanged), one for an issued drain no
    longer awaited is absorbed. req: BR-3"""
    host = Host(guard=g.GuardConfig(daemon=True))
    replies = iter([("use tabs",)])
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id,
                                             messages=next(replies, ()))
    host.responses.extend([say("Done."), say("Tabs it is."), say("Hi.")])
    host.send(PROMPT)
    host.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="hello"))
    assert host.outcomes() == [at.OutcomeKind.FINISHED, at.OutcomeKind.FINISHED]
    assert [c.drain_id for c in host.commands(se.DrainMidTurnQueue)] == [
        "t1/drain-1", "t1/drain-2", "t2/drain-1"]
    assert [c.key for c in host.commands(se.StartTimer)] == [
        "t1/drain-1", "t1/drain-2", "t2/drain-1"]
    before = host.state
    for never in ("t2/drain-2", "t1/drain-9", "zzz"):
        with pytest.raises(at.UnknownId):
            se.reduce(before, se.MidTurnDrained(drain_id=never))
    late = host.send(se.MidTurnDrained(drain_id="t1/drain-2"))
    assert [(type(c), c.answer_id) for c in late] == [(at.StaleAnswerIgnored, "t1/drain-2")]


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


@pytest.mark.req("BR-3")
def test_a_drain_reply_after_its_timeout_while_idle_restores_messages() -> None:
    host = StrictHost()
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    drain = host.pending(se.DrainMidTurnQueue)
    assert ends(host.send(se.TimerFired(key=drain)))
    late = host.send(se.MidTurnDrained(drain_id=drain, messages=("steer it", "ünïcode ✓"),
                                      has_queued_prompt=True))
    assert se.RestoreMidTurnMessages(drain_id=drain, messages=("steer it", "ünïcode ✓")) in late
    # the stale queued-prompt snapshot is discarded: nothing waits for a prompt
    assert not of(late, at.Persist)


@pytest.mark.req("BR-3")
def test_a_late_drain_reply_during_the_next_turn_is_restored_not_applied() -> None:
    host = StrictHost()
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    drain = host.pending(se.DrainMidTurnQueue)
    host.send(se.TimerFired(key=drain))
    host.prompt("t2", "next task")
    late = host.send(se.MidTurnDrained(drain_id=drain, messages=("for t1",),
                                      has_queued_prompt=True))
    assert late == (se.RestoreMidTurnMessages(drain_id=drain, messages=("for t1",)),)


@pytest.mark.req("BR-3")
def test_a_duplicate_drain_reply_does_not_duplicate_its_messages() -> None:
    host = StrictHost()
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    drain = host.pending(se.DrainMidTurnQueue)
    first = host.send(se.MidTurnDrained(drain_id=drain, messages=("use tabs",)))
    assert len(of(first, at.SaveLead)) == 1
    dup = host.send(se.MidTurnDrained(drain_id=drain, messages=("use tabs",)))
    assert not of(dup, se.RestoreMidTurnMessages)


@pytest.mark.req("BR-3")
def test_a_late_drain_reply_while_the_guard_continues_the_same_turn_is_not_lost() -> None:
    """Judgment: the drain timed out, the guard continued the same turn, then the reply came.
    The session joins its messages to that turn as Lead instructions; none is dropped."""
    host = StrictHost()
    host.armed_natural_stop()
    drain = host.pending(se.DrainMidTurnQueue)
    host.send(se.TimerFired(key=drain))
    late = host.send(se.MidTurnDrained(drain_id=drain, messages=("steer it", "ünïcode ✓"),
                                      has_queued_prompt=True))
    accepted = {c.lead_id for c in of(late, at.LeadAccepted)}
    restored = [m for c in of(late, se.RestoreMidTurnMessages) for m in c.messages]
    assert len(accepted) + len(restored) == 2
    assert host.state.guard.phase is not g.GuardPhase.AWAITING_PROMPT


@pytest.mark.req("LD-5")
def test_a_drain_with_more_messages_than_lead_can_hold_hands_the_rest_back() -> None:
    host = StrictHost()
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    messages = (*(f"msg {i}" for i in range(10)), "", "  ", "y" * 40_000)
    cmds = host.drain(messages=messages)
    saved = [c.record.text for c in of(cmds, at.SaveLead)]
    accepted = [c.lead_id for c in of(cmds, at.LeadAccepted)]
    back = [c.draft for c in of(cmds, at.ReturnDraft)]
    assert len(accepted) == 8
    assert saved == ["msg 0"]                  # one save at a time (LD-4)
    assert sorted(back) == sorted(["msg 8", "msg 9", "", "  ", "y" * 40_000])
    # every accepted one is saved in order, then all go to the model together (LD-16)
    texts = ["msg 0"]
    for _ in range(7):
        cmds = host.send(at.LeadSaved(lead_id=host.pending(at.SaveLead)))
        texts += [c.record.text for c in of(cmds, at.SaveLead)]
    cmds = host.send(at.LeadSaved(lead_id=host.pending(at.SaveLead)))
    assert texts == [f"msg {i}" for i in range(8)]
    assert of(cmds, at.RequestModelStream)[0].lead_ids == tuple(accepted)


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


def test_stop_during_drain_hands_late_messages_back():
    """Stop while the drain is out ends the turn CANCELLED; the late reply's text is restored and
    its timer is absorbed (req: SO-1, BR-3, TL-8).
    """
    h = Checked()
    script_todos(h)
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(at.StopPressed())
    assert h.outcomes() == [at.OutcomeKind.CANCELLED]
    out = h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("late",),
                                   has_queued_prompt=True))
    assert [type(c) for c in out] == [se.RestoreMidTurnMessages]
    assert out[0].messages == ("late",)
    out = h.send(se.TimerFired(key=drain.drain_id))
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert se.waiting_for(h.state) == () and se.held(h.state) == ()
    h.clean()


def test_drain_timeout_then_late_reply_joins_as_lead_snapshot_stale():
    """A drain that timed out lets the stop go on; its late reply's messages join the still-running
    turn and its hasQueuedPrompt is discarded (req: BR-3, SO-1).
    """
    h = Checked()
    script_todos(h, "pending")
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.TimerFired(key=drain.drain_id))
    h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("late one",),
                             has_queued_prompt=True))
    h.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    h.responses.extend([say("a"), say("b"), say("c"), say("d")])
    h.answer(h.take(at.RequestModelStream))
    h.send()
    assert any(r.lead_ids == ("t1/drain-1/m1",) for r in h.commands(at.RequestModelStream))
    assert se.waiting_for(h.state) == ()
    assert h.outcomes() == [at.OutcomeKind.FINISHED]
    h.clean()


def test_abort_crossing_drain_makes_snapshot_stale():
    """An abort that crosses a drain in flight makes that reply's hasQueuedPrompt stale: the session
    does not wait for a prompt that will never come (req: SO-4, BR-3).
    """
    h = Checked()
    script_todos(h, "pending")
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.PromptAborted(prompt_id="client-side"))
    h.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    h.responses.extend([say("g1"), say("g2")])
    h.send(se.MidTurnDrained(drain_id=drain.drain_id, has_queued_prompt=True))
    assert h.guard_attempts() == [1, 2]
    assert se.waiting_for(h.state) == ()
    h.clean()


def test_hard_stop_while_draining_halts_and_restores_late_reply():
    """A host hard stop (PostToolUse shouldStop) while the drain is out halts the turn; the drain's
    late text is restored (req: SG-S1, BR-3).
    """
    h = Checked()
    script_todos(h, "pending")
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.HardStopped(kind=at.HardStopKind.POST_TOOL_USE_STOP, reason="stop"))
    assert h.commands(at.EndTurn)[0].outcome.halt_kind is at.HardStopKind.POST_TOOL_USE_STOP
    out = h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("hi",),
                                   has_queued_prompt=True))
    assert [type(c) for c in out] == [se.RestoreMidTurnMessages]
    assert se.waiting_for(h.state) == () and h.guard_attempts() == []
    h.clean()


def test_late_drain_reply_after_grace_close_is_restored():
    """A drain reply that arrives after grace expiry closed the session is restored to the user, not
    refused (req: BR-3, BR-4).
    """
    h = Checked()
    script_todos(h, "pending")
    h.drain = lambda c: None
    h.send(se.ClientAttached(client_id="A"), prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.ClientDetached(client_id="A"), se.TimerFired(key="grace"))
    assert h.state.phase is se.SessionPhase.CLOSED
    out = h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("typed",)))
    assert [(type(c), c.messages) for c in out] == [(se.RestoreMidTurnMessages, ("typed",))]
    h.clean()


def host_with_a_late_drain() -> Host:
    """An armed chain's stop whose drain timed out: the guard's continuation runs (its request
    unanswered) and the drain's reply is awaited as late."""
    host = armed_script(Host())
    host.drain = lambda c: None  # the drain is never answered in time
    host.send(PROMPT)
    host.send(se.TimerFired(key="t1/drain-1"))
    assert host.state.late_drain == "t1/drain-1"
    assert host.state.guard.phase is g.GuardPhase.CONTINUING
    return host


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


@pytest.mark.req("BR-3")
def test_a_late_drains_messages_come_back_under_its_id_once_the_turn_ends() -> None:
    """The late drain's reply comes while the stopped turn waits for a Lead save to end: Lead
    admission is closed, so its messages are handed back to the client under that drain's id
    (kills ``drain_id=None`` in that ``RestoreMidTurnMessages``)."""
    host = host_with_a_late_drain()
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"), at.StopPressed(),
              se.MidTurnDrained(drain_id="t1/drain-1", messages=("late",)))
    assert host.commands(se.RestoreMidTurnMessages) == [
        se.RestoreMidTurnMessages(drain_id="t1/drain-1", messages=("late",))]
    assert host.outcomes() == [at.OutcomeKind.CANCELLED]


@pytest.mark.req("BR-3")
def test_a_reply_to_another_drain_leaves_the_late_drain_awaited() -> None:
    """The drain of an armed chain's stop times out and the guard's continuation runs, so that
    drain's reply is awaited as late. A reply naming another drain, with no messages, is
    absorbed with exactly "the drain is no longer awaited" and leaves the late one awaited: its
    messages, when they come, still join the running turn as Lead instructions (kills ``or``
    for ``and`` in ``_on_drained`` and the altered reason)."""
    host = host_with_a_late_drain()
    before = host.state
    with pytest.raises(at.UnknownId):  # a drain this session never issued (issue 18, defect 22)
        se.reduce(before, se.MidTurnDrained(drain_id="t0/drain-1"))
    assert host.state is before and host.state.late_drain == "t1/drain-1"
    host.send(se.MidTurnDrained(drain_id="t1/drain-1", messages=("late",)))
    assert host.user_messages()[-1] == "late"
    assert not host.commands(se.RestoreMidTurnMessages)
    # A second copy of that reply (at-least-once delivery): absorbed with the exact reason.
    assert host.send(se.MidTurnDrained(drain_id="t1/drain-1", messages=("late",))) == [
        at.StaleAnswerIgnored(event="MidTurnDrained", answer_id="t1/drain-1",
                              reason="this drain's reply was already taken")]
