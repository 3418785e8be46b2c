"""The daemon's FIFO of queued prompts (BR-1, SO-3, SO-4): complete and incomplete prompts,
aborts, its bound, ids already in use and resends, each refused prompt handed back with its
text.
"""

from __future__ import annotations

import pytest
from checked_host import Checked, cron, prompt
from session_host import PROMPT, Host, say, todo_call
from session_scenes import CRON, PENDING, armed_host, due_notification, resume
from strict_host import StrictHost, of

import agentturn as at
from agentturn import guard as g
from agentturn import session as se


@pytest.mark.req("BR-1")
def test_an_incomplete_queued_prompt_has_no_priority() -> None:
    """req: BR-1 — a queued prompt still uploading is not a complete entry: the guard
    continues; once complete, it runs after the turn."""
    host = armed_host(say("Go on."), say("And on."), say("Queued ran."))
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="later", complete=False))
    host.send(PROMPT)
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2
    host.send(se.PromptCompleted(prompt_id="q1"))
    assert host.user_messages()[-1] == "later"


@pytest.mark.req("BR-1", "LD-4")
def test_a_resend_is_absorbed_and_a_reused_id_with_other_text_handed_back() -> None:
    """req: BR-1, LD-4 — the same queued prompt, automatic turn or prompt sent again (a retry
    after a network blip) is absorbed, never run twice; a queued prompt's id with another text
    comes back in ``PromptRefused``; nothing changes."""
    host = Host()
    host.send(PROMPT)
    queued = se.PromptQueued(prompt_id="q1", message_id="mq", text="next")
    due = se.AutomaticTurnDue(turn_id="c1", message_id="mc", text="cron",
                              kind=se.AutomaticKind.CRON, source_id="task")
    host.send(queued, due)
    before = host.state
    assert [type(c) for c in host.send(queued, due)] == [at.StaleAnswerIgnored] * 2
    assert host.state == before
    assert host.send(se.PromptQueued(prompt_id="q1", message_id="mq", text="other")) == [
        se.PromptRefused(prompt_id="q1", text="other", reason="this prompt id is already in use")]
    idle = Host()
    idle.responses.append(say("Done."))
    idle.send(PROMPT)
    after = idle.state
    assert [type(c) for c in idle.send(PROMPT)] == [at.StaleAnswerIgnored]
    assert idle.state == after


# The session-composition defects of issue 18 (``settle_spec.md``): each ``test_dNN_...``
# pins the fixed behaviour of defect NN.


@pytest.mark.req("SO-4", "SO-3")
def test_d04_aborting_a_prompt_that_already_ran_does_not_end_the_wait() -> None:
    """``PromptAborted`` for a FIFO prompt that already started as a turn is absorbed
    (``StaleAnswerIgnored``) and does not end the chain's wait for a different, client-held
    prompt. req: SO-4"""
    host = Host()
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = PENDING
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="Port the parser"))
    assert host.state.turn.turn_id == "q1"  # it ran at once, as a turn
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, has_queued_prompt=True)
    resume(host, say("Stopping here."))
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    late = host.send(se.PromptAborted(prompt_id="q1"))
    assert [(type(c), c.event, c.answer_id) for c in late] == [
        (at.StaleAnswerIgnored, "PromptAborted", "q1")]
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]


@pytest.mark.req("BR-1", "BG-6")
def test_d11_a_held_automatic_turns_id_is_taken() -> None:
    """A ``PromptQueued`` reusing a held automatic turn's id is refused (its text handed back,
    nothing else changes); an ``AutomaticTurnDue`` reusing it is handed back the same way
    (``AutomaticTurnDropped`` with its text). req: BR-1"""
    host = Host()
    host.send(PROMPT)  # the request is held: the turn runs
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]
    before = host.state
    refused = host.send(se.PromptQueued(prompt_id="cron-1", message_id="qm", text="typed"))
    assert [(type(c), c.prompt_id, c.text) for c in refused] == [
        (se.PromptRefused, "cron-1", "typed")]
    assert host.state.fifo == before.fifo == ()
    assert host.state.deferred == before.deferred
    again = host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1m2", text="again",
                                          kind=se.AutomaticKind.CRON, source_id="task-2"))
    assert [(type(c), c.turn_id, c.text) for c in again] == [
        (se.AutomaticTurnDropped, "cron-1", "again")]
    assert host.state.deferred == before.deferred


@pytest.mark.req("BR-1")
def test_d11_a_queued_prompts_id_is_taken() -> None:
    """With the session idle and a queued prompt still uploading, a ``PromptSubmitted`` or an
    ``AutomaticTurnDue`` reusing its id is refused at admission, its text handed back
    (``PromptRefused``, ``AutomaticTurnDropped``), and nothing changes. req: BR-1"""
    host = Host()
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="upl", complete=False))
    assert host.state.phase is se.SessionPhase.IDLE
    before = host.state
    assert se.reduce(before, at.PromptSubmitted(turn_id="q1", message_id="m9", text="typed")) == (
        at.Step(before, (se.PromptRefused(prompt_id="q1", text="typed",
                                          reason="this prompt id is already in use"),)))
    step = se.reduce(before, se.AutomaticTurnDue(turn_id="q1", message_id="m8", text="cron",
                                                 kind=se.AutomaticKind.CRON, source_id="task"))
    assert step.state == before and [(type(c), c.text) for c in step.commands] == [
        (se.AutomaticTurnDropped, "cron")]
    assert host.state.phase is se.SessionPhase.IDLE
    assert [p.prompt_id for p in host.state.fifo] == ["q1"]


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


def test_queued_prompts_with_repeated_ids_or_past_the_bound_come_back() -> None:
    host = StrictHost()
    host.prompt()
    refused = []
    refused += of(host.send(se.PromptQueued(prompt_id="t1", message_id="a", text="same as turn")),
                  se.PromptRefused)
    host.send(se.PromptQueued(prompt_id="q0", message_id="b", text="first"))
    refused += of(host.send(se.PromptQueued(prompt_id="q0", message_id="c", text="again")),
                  se.PromptRefused)
    for i in range(1, 40):
        refused += of(host.send(se.PromptQueued(prompt_id=f"q{i}", message_id=f"m{i}",
                                               text=f"p{i}")), se.PromptRefused)
    assert [(r.prompt_id, r.text) for r in refused][:2] == [("t1", "same as turn"),
                                                            ("q0", "again")]
    assert len(host.state.fifo) + len(refused) == 42
    assert len(host.state.fifo) == 32


def test_a_prompt_with_an_already_used_turn_id_is_refused() -> None:
    host = StrictHost()
    host.prompt()
    host.send(at.StreamOpened(request_id="t1/r1"))
    host.send(at.StopPressed())                          # t1/r1 cancelled, its engine may
    assert host.state.phase is se.SessionPhase.IDLE       # still answer later
    with pytest.raises(at.ProtocolError):
        host.send(at.PromptSubmitted(turn_id="t1", message_id="m2", text="again"))


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


def test_resends_of_queued_prompt_lead_and_automatic_turn_are_idempotent():
    """A queued prompt, a Lead and an automatic turn sent twice with the same id and text are
    absorbed; a queued prompt or Lead reusing the id with other text is handed back (req: BR-1,
    LD-7).
    """
    h = Checked()
    h.send(prompt())
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="q"))
    assert [type(c) for c in h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="q"))] \
        == [at.StaleAnswerIgnored]
    out = h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="q2"))
    assert [(type(c), c.text) for c in out] == [(se.PromptRefused, "q2")]
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead"))
    assert [type(c) for c in h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1",
                                                     text="lead"))] == [at.StaleAnswerIgnored]
    out = h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead2"))
    assert [(c.reason, c.draft) for c in out] == [(at.DraftReason.DUPLICATE_ID, "lead2")]
    h.send(cron("c1"))
    assert [type(c) for c in h.send(cron("c1"))] == [at.StaleAnswerIgnored]
    assert len(h.commands(at.SaveLead)) == 1
    h.clean()


def test_automatic_turn_resend_with_other_text_is_handed_back():
    """An automatic turn resent with the id of a held one but another text is handed back with that
    text, not refused as misuse (req: BG-6, BG-5).
    """
    h = Checked()
    h.send(prompt())
    h.send(cron("c1"))
    out = h.send(cron("c1", text="changed text"))
    assert h.refused == []
    assert [(type(c), c.text) for c in out] == [(se.AutomaticTurnDropped, "changed text")]


def test_prompt_resend_while_its_turn_runs_is_absorbed():
    """A prompt resent with the same id and text while its own turn runs is absorbed, as it is once
    the turn has ended (req: BR-4).
    """
    h = Checked()
    h.send(prompt())
    assert h.state.phase is not se.SessionPhase.IDLE
    out = h.send(prompt())
    assert h.refused == []
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]


def test_prompt_resend_after_turn_ended_is_absorbed():
    """A prompt resent with the same id and text after its turn ended is absorbed without a second
    turn (req: BR-4).
    """
    h = Checked()
    h.responses.append(say("hi"))
    h.send(prompt())
    out = h.send(prompt())
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert len(h.commands(at.EndTurn)) == 1
    h.clean()


def test_aborted_queued_prompt_keeps_no_text_lost_invariant():
    """Aborting a queued prompt before it runs satisfies the session's own no-text-lost invariant
    (req: SO-3, SO-4).
    """
    h = Checked()
    h.send(prompt())
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="complete"))
    h.send(se.PromptAborted(prompt_id="q1"))
    assert se.held(h.state) == ()
    h.clean()


def test_incomplete_queued_prompt_waits_for_content_then_runs():
    """An incomplete queued prompt is named as the idle session's wait (PROMPT_CONTENT) and runs
    with its final text once completed (req: BR-1, SO-2).
    """
    h = Checked()
    h.hold.append(lambda c: isinstance(c, at.RequestModelStream))
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.hold.clear()
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="part", complete=False))
    h.send(at.StreamOpened(request_id=request.request_id),
           at.StreamCompleted(request_id=request.request_id, **say("s")))
    assert [(w.kind, w.answer_id) for w in se.waiting_for(h.state)] == [
        (se.WaitKind.PROMPT_CONTENT, "q1")]
    h.responses.append(say("q"))
    h.send(se.PromptCompleted(prompt_id="q1", text="part and rest"))
    assert "part and rest" in h.user_messages()
    assert [c.turn_id for c in h.commands(at.EndTurn)] == ["t1", "q1"]
    h.clean()


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


@pytest.mark.req("BR-1")
def test_a_prompt_beyond_the_fifo_bound_is_refused_with_the_bound() -> None:
    """With 32 prompts queued behind a running turn, the 33rd is handed back with exactly "32
    prompts are already queued" (kills the in-use reason given for every refusal)."""
    host = Host()
    host.send(PROMPT)
    for number in range(32):
        host.send(se.PromptQueued(prompt_id=f"q{number}", message_id=f"m{number}", text="later"))
    assert host.send(se.PromptQueued(prompt_id="q32", message_id="m32", text="one more")) == [
        se.PromptRefused(prompt_id="q32", text="one more",
                         reason="32 prompts are already queued")]


@pytest.mark.req("BR-1")
def test_a_prompt_id_already_in_use_is_refused_with_the_reason() -> None:
    """A queued prompt reusing the running turn's id, or a queued prompt's id, is handed back
    with exactly "this prompt id is already in use"; an automatic turn due under such an id is
    handed back too (``AutomaticTurnDropped`` with its text and exactly "this turn id is already
    in use"), nothing changed (issue 18: a reused id is refused at admission)."""
    host = Host()
    host.send(PROMPT, se.PromptQueued(prompt_id="q1", message_id="mq", text="later"))
    for prompt_id in ("t1", "q1"):
        assert host.send(se.PromptQueued(prompt_id=prompt_id, message_id="mx", text="again")) == [
            se.PromptRefused(prompt_id=prompt_id, text="again",
                             reason="this prompt id is already in use")]
        due = due_notification(prompt_id, "n1")
        before = host.state
        assert host.send(due) == [se.AutomaticTurnDropped(
            turn_id=prompt_id, message_id=due.message_id, text=due.text,
            reason="this turn id is already in use")]
        assert host.state == before
