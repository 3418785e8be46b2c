"""The turn and Lead inside a session: answers that arrive after Stop, a disconnect that never
approves, races between a Lead save and Stop, text kept verbatim, and ids a turn or a Lead has
already used.
"""

from __future__ import annotations

import pytest
from checked_host import Checked, prompt
from session_host import PROMPT, say
from strict_host import StrictHost, ends, of, texts_published, user_texts, with_permission_call

import agentturn as at
from agentturn import session as se


def _lead_in_a_request() -> at.TurnState:
    """The turn alone: a Lead saved during the first stream is carried by request ``t1/r2``,
    which has not opened yet."""
    state = at.TurnState.create("chat", at.TurnConfig(auto_title=False))
    for event in (PROMPT, at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
                  at.LeadSubmitted(chat_id="chat", lead_id="L1", text="use tabs"),
                  at.LeadSaved(lead_id="L1"),
                  at.StreamCompleted(request_id="t1/r1", text="Done.", finish_reason="stop")):
        state, _ = at.reduce(state, event)
    state, commands = at.reduce(state, at.Persisted(key="t1/p2"))
    assert commands == (at.RequestModelStream(request_id="t1/r2", lead_ids=("L1",)),)
    return state


# The session-composition defects of issue 18 (``settle_spec.md``): each ``test_dNN_...``
# pins the fixed behaviour of defect NN.


@pytest.mark.req("LD-13")
@pytest.mark.parametrize("events", [
    [at.TokenLimitRejected(request_id="t1/r2", reason="too big")],
    [at.CompactionFailed(request_id="t1/r2", reason="too long")],
    [at.StopPressed()],
    [at.StreamFailed(request_id="t1/r2", error="overloaded"),
     at.PromptSubmitted(turn_id="t2", message_id="m2", text="something else")],
], ids=["token-limit", "compaction", "stop", "stream-failed-then-new-prompt"])
def test_d13_a_lead_taken_into_a_request_that_never_opened_is_reported_unapplied(
        events: list[object]) -> None:
    """A saved Lead whose request never opened (token limit, compaction failure, Stop before
    the stream, or a stream failure followed by a new prompt) is reported with
    ``LeadUnapplied``, once. req: LD-13"""
    state = _lead_in_a_request()
    commands: list[at.Command] = []
    for event in events:
        state, step = at.reduce(state, event)
        commands.extend(step)
    assert [c for c in commands if isinstance(c, at.LeadUnapplied)] == [
        at.LeadUnapplied(lead_id="L1")]


@pytest.mark.req("LD-13", "TL-11")
def test_d13_continue_after_a_failure_before_open_carries_the_lead_again() -> None:
    """A saved Lead whose request failed before opening (``StreamFailed``) is carried again
    by the next request after ``ContinueTurn``. req: LD-13"""
    state = _lead_in_a_request()
    state, failed = at.reduce(state, at.StreamFailed(request_id="t1/r2", error="overloaded"))
    assert not [c for c in failed if isinstance(c, at.LeadUnapplied)]
    state, continued = at.reduce(state, at.ContinueTurn(turn_id="t1"))
    assert [c.lead_ids for c in continued if isinstance(c, at.RequestModelStream)] == [
        ("L1",)]


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


@pytest.mark.req("TL-3")
def test_permission_click_after_stop_is_absorbed_and_never_runs_the_tool() -> None:
    host = StrictHost()
    with_permission_call(host)
    cmds = host.send(at.StopPressed())
    assert of(cmds, at.DismissPermission)[0].call_id == "c1"
    before = host.state
    late = host.send(at.PermissionDecided(call_id="c1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert host.state == before
    host.ack_persists()
    assert ends(host.all_commands())[0].outcome.kind is at.OutcomeKind.CANCELLED
    again = host.send(at.PermissionDecided(call_id="c1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in again] == [at.StaleAnswerIgnored]
    assert not of(host.all_commands(), at.ExecuteTool)


@pytest.mark.req("TL-8")
def test_engine_events_after_stop_are_absorbed() -> None:
    host = StrictHost()
    host.prompt()
    host.send(at.StreamOpened(request_id="t1/r1"))
    cmds = host.send(at.StopPressed())
    assert of(cmds, at.CancelStream) == [at.CancelStream(request_id="t1/r1")]
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.CANCELLED
    for late in (at.StreamCompleted(request_id="t1/r1", text="late", finish_reason="stop"),
                 at.StreamFailed(request_id="t1/r1", error="reset")):
        before = host.state
        assert [type(c) for c in host.send(late)] == [at.StaleAnswerIgnored]
        assert host.state == before


@pytest.mark.req("LD-3")
def test_a_lead_save_acknowledged_twice_is_absorbed_and_delivered_once() -> None:
    host = StrictHost()
    host.prompt()
    rid = host.pending(at.RequestModelStream)
    host.send(at.StreamOpened(request_id=rid))
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="use tabs"))
    assert host.send(at.LeadSaved(lead_id="L1")) == ()
    before = host.state
    for dup in (at.LeadSaved(lead_id="L1"), at.LeadSaveFailed(lead_id="L1", reason="late")):
        assert [type(c) for c in host.send(dup)] == [at.StaleAnswerIgnored]
        assert host.state == before
    host.send(at.StreamCompleted(request_id=rid, text="ok", finish_reason="stop"))
    host.ack_persists()
    host.answer_titles()
    requests = of(host.all_commands(), at.RequestModelStream)
    assert [r.lead_ids for r in requests].count(("L1",)) == 1
    assert not of(host.all_commands(), at.ReturnDraft)


@pytest.mark.req("TL-3")
def test_a_disconnect_alone_never_approves() -> None:
    host = StrictHost()
    with_permission_call(host)
    assert host.send(at.ClientDisconnected()) == ()
    host.send(se.ClientDetached(client_id="ui"))
    assert host.pending(at.AskPermission) == "c1"
    assert not of(host.all_commands(), at.ExecuteTool)


@pytest.mark.req("LD-13")
def test_stop_during_a_lead_save_reports_it_saved_and_unapplied_once() -> None:
    host = StrictHost()
    host.prompt()
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="use tabs"))
    cmds = host.send(at.StopPressed())
    assert not ends(cmds), "the turn must wait for the save in flight"
    assert host.pending(at.SaveLead) == "L1"
    done = host.send(at.LeadSaved(lead_id="L1"))
    assert of(done, at.LeadUnapplied) == [at.LeadUnapplied(lead_id="L1")]
    assert ends(done)[0].outcome.kind is at.OutcomeKind.CANCELLED
    assert host.state.phase is se.SessionPhase.IDLE
    assert len(of(host.all_commands(), at.LeadUnapplied)) == 1
    # no new turn was started for it (LD-13)
    assert not of(done, at.Persist) and not of(done, at.RequestModelStream)


@pytest.mark.req("LD-7")
def test_stop_during_a_lead_save_that_fails_hands_every_draft_back() -> None:
    host = StrictHost()
    host.prompt()
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="first"))
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L2", text="second"))
    host.send(at.StopPressed())
    host.send(at.LeadSaveFailed(lead_id="L1", reason="disk full"))
    drafts = {c.lead_id: (c.draft, c.reason) for c in of(host.all_commands(), at.ReturnDraft)}
    assert drafts == {"L1": ("first", at.DraftReason.SAVE_FAILED),
                      "L2": ("second", at.DraftReason.TURN_ENDED_BEFORE_SAVE)}
    assert not of(host.all_commands(), at.LeadUnapplied)
    assert host.state.phase is se.SessionPhase.IDLE


@pytest.mark.req("TL-8")
def test_stop_keeps_the_dismiss_notice_and_the_record_in_agreement() -> None:
    host = StrictHost()
    with_permission_call(host)
    cmds = host.send(at.StopPressed())
    notice = of(cmds, at.DismissPermission)[0]
    record = next(r for p in of(cmds, at.Persist) for r in p.records
                  if isinstance(r, at.ToolResultRecord) and r.call_id == "c1")
    assert record.status is notice.recorded_as is at.ToolResultStatus.CANCELLED


@pytest.mark.req("LD-6")
@pytest.mark.parametrize(("text", "reason"), [
    ("", at.DraftReason.EMPTY),
    (" \t\n\u3000", at.DraftReason.EMPTY),
    ("x" * 32769, at.DraftReason.TOO_LONG),
    ("é" * 16385, at.DraftReason.TOO_LONG),          # 32,770 bytes of UTF-8
    ("😀" * 8193, at.DraftReason.TOO_LONG),          # 32,772 bytes
])
def test_a_refused_lead_comes_back_verbatim(text: str, reason: at.DraftReason) -> None:
    host = StrictHost()
    host.prompt()
    cmds = host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text=text,
                                      attachment_ids=("img-1",)))
    back = of(cmds, at.ReturnDraft)
    assert len(back) == 1 and back[0].draft == text and back[0].reason is reason
    assert back[0].message
    assert not of(cmds, at.SaveLead)


@pytest.mark.req("LD-6")
@pytest.mark.parametrize("text", ["x" * 32768, "é" * 16384, "😀" * 8192,
                                  "\u200b", "a\x00b", "RTL \u202e txt", "e\u0301" * 10])
def test_a_lead_at_the_limit_or_with_odd_unicode_is_saved_verbatim(text: str) -> None:
    host = StrictHost()
    host.prompt()
    cmds = host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text=text,
                                      attachment_ids=("img-1",)))
    assert of(cmds, at.LeadAccepted) == [at.LeadAccepted(lead_id="L1",
                                                         kept_attachment_ids=("img-1",))]
    assert of(cmds, at.SaveLead)[0].record.text == text


def test_huge_and_odd_prompts_and_answers_are_kept_verbatim() -> None:
    host = StrictHost()
    prompt = "🙂 " * 200_000 + "\r\n\t\x00"
    host.prompt(text=prompt)
    assert user_texts(host.all_commands()) == [prompt]
    answer = "ünïcødé \u202e" * 50_000
    cmds = host.open_and_complete(text=answer)
    assert of(cmds, at.Persist)[0].records[0].text == answer
    assert texts_published(cmds) == [answer]


def test_a_repeated_pending_lead_id_is_handed_back_and_changes_nothing() -> None:
    """A resend with the same text is absorbed; the same id with another text comes back as a
    draft (DUPLICATE_ID); neither changes the session (issue 18: idempotent resends)."""
    host = StrictHost()
    host.prompt()
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="a"))
    before = host.state
    assert of(host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="a")),
              at.StaleAnswerIgnored)
    assert [(c.reason, c.draft) for c in of(host.send(at.LeadSubmitted(
        chat_id="chat-1", lead_id="L1", text="b")), at.ReturnDraft)] == [
        (at.DraftReason.DUPLICATE_ID, "b")]
    assert host.state == before


def test_a_lead_for_another_chat_keeps_the_draft() -> None:
    host = StrictHost()
    host.prompt()
    cmds = host.send(at.LeadSubmitted(chat_id="chat-2", lead_id="L1", text="wrong chat"))
    assert [(c.reason, c.draft) for c in of(cmds, at.ReturnDraft)] == [
        (at.DraftReason.NOT_OWNER, "wrong chat")]


def test_a_second_stream_for_one_request_is_a_protocol_error() -> None:
    host = StrictHost()
    host.prompt()
    host.send(at.StreamOpened(request_id="t1/r1"))
    host.refused(at.StreamOpened(request_id="t1/r1"))


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


def test_double_continue_is_absorbed():
    """A second ContinueTurn for a turn the first one already resumed is absorbed, not a
    ProtocolError (req: TL-11).
    """
    h = Checked()
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.send(at.StreamFailed(request_id=request.request_id, error="x", network=True))
    h.send(at.ContinueTurn(turn_id="t1"))
    out = h.send(at.ContinueTurn(turn_id="t1"))
    assert h.refused == []
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]


def test_continue_naming_another_turn_while_one_runs_is_refused_with_its_details():
    """A ContinueTurn for another turn while one runs is host misuse: an UnexpectedEvent that
    names the session, its phase and what it expected, and the state is unchanged (req: TL-11).
    """
    h = Checked()
    h.send(prompt())
    h.take(at.RequestModelStream)
    before = h.state
    with pytest.raises(at.UnexpectedEvent) as raised:
        se.reduce(before, at.ContinueTurn(turn_id="t-other"))
    error = raised.value
    assert (error.part, error.phase, error.expected) == (
        "session", "TURN", "ContinueTurn while the session is idle")
    assert h.state is before


def test_lead_waiting_on_open_permission_then_stop_reports_unapplied():
    """A Lead saved while a dialog is open keeps the dialog (ADR-0067); Stop then cancels it,
    records every call, reports the Lead unapplied, and a late allow runs nothing (req: LD-11,
    LD-13, TL-3).
    """
    h = Checked()
    h.responses.append(say("perm", at.ToolCall(call_id="w1", name="write_file",
                                               needs_permission=True),
                           at.ToolCall(call_id="w2", name="write_file")))
    h.send(prompt())
    out = h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead"))
    assert not any(isinstance(c, at.DismissPermission) for c in out)
    h.send(at.StopPressed())
    assert h.commands(at.DismissPermission)[0].recorded_as is at.ToolResultStatus.CANCELLED
    recorded = {r.call_id for c in h.commands(at.Persist) for r in c.records
                if isinstance(r, at.ToolResultRecord)}
    assert recorded == {"w1", "w2"}
    assert [c.lead_id for c in h.commands(at.LeadUnapplied)] == ["L1"]
    out = h.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert h.commands(at.ExecuteTool) == []
    h.clean()
