"""Lead: steering an active turn, one requirement at a time (LD-1 ... LD-16), through the turn
and with the Lead queue used alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from driver import Driver, call, no_titles

import agentturn as at
from agentturn import OutcomeKind, ToolResultStatus, lead
from agentturn.lead import Admission, LeadQueue


def submit(driver: Driver, lead_id: str, text: str = "use tabs", chat_id: str = "chat",
           attachments: tuple[str, ...] = ()) -> tuple[at.Command, ...]:
    return driver.send(at.LeadSubmitted(chat_id=chat_id, lead_id=lead_id, text=text,
                                        attachment_ids=attachments))


def refusal(commands: tuple[at.Command, ...]) -> at.ReturnDraft:
    (refused,) = commands
    assert isinstance(refused, at.ReturnDraft)
    return refused


def busy_with_a_write(driver: Driver) -> None:
    """A turn whose first call (a file write) runs, with a second call not yet started."""
    driver.start()
    driver.respond(text="", finish_reason="tool_calls",
                   calls=[call("w1", "write_file"), call("r2", "run_tests")])
    driver.ack()
    assert driver.state.phase is at.TurnPhase.RUNNING_TOOL


@pytest.mark.req("LD-1")
def test_lead_is_refused_when_no_turn_is_active() -> None:
    """req: LD-1 — with no turn running, a Lead is refused NOT_ACTIVE and the draft comes back."""
    driver = Driver(no_titles())
    refused = refusal(submit(driver, "l1", "hello"))
    assert refused.reason is at.DraftReason.NOT_ACTIVE and refused.draft == "hello"


@pytest.mark.req("LD-1")
def test_lead_accepts_text_only() -> None:
    """req: LD-1 — the event type holds text only: anything but a str is refused on building."""
    with pytest.raises(at.FieldError, match=r"LeadSubmitted\.text"):
        at.LeadSubmitted(chat_id="chat", lead_id="l1", text=["an", "image"])  # type: ignore[arg-type]


@pytest.mark.req("LD-2")
def test_only_the_owning_chat_accepts_lead() -> None:
    """req: LD-2 — a Lead typed in another chat is refused NOT_OWNER, with its draft."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    refused = refusal(submit(driver, "l1", "stop", chat_id="other-chat"))
    assert refused.reason is at.DraftReason.NOT_OWNER and refused.draft == "stop"
    assert "chat whose turn is running" in refused.message


@pytest.mark.req("LD-3")
def test_an_accepted_lead_is_saved_as_a_user_message_of_the_same_turn() -> None:
    """req: LD-3 — LeadAccepted then SaveLead with a user-message record; no new turn starts
    (no PromptSubmitted needed, the same turn id continues)."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    commands = submit(driver, "l1", "use tabs")
    assert commands == (
        at.LeadAccepted(lead_id="l1"),
        at.SaveLead(lead_id="l1", record=at.UserMessageRecord(message_id="l1", text="use tabs")),
    )
    driver.send(at.LeadSaved(lead_id="l1"))
    driver.send(at.ToolFinished(call_id="w1", output="written"))
    driver.ack()
    driver.ack()
    request = driver.last(at.RequestModelStream)
    assert request == at.RequestModelStream(request_id="t1/r2", lead_ids=("l1",))
    assert not driver.of(at.EndTurn)


@pytest.mark.req("LD-4")
def test_saves_are_serialized_in_submission_order() -> None:
    """req: LD-4 — the second SaveLead goes out only after the first is acknowledged."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    submit(driver, "l1", "one")
    assert submit(driver, "l2", "two") == (at.LeadAccepted(lead_id="l2"),)
    assert submit(driver, "l3", "three") == (at.LeadAccepted(lead_id="l3"),)
    with pytest.raises(at.UnknownId):
        driver.send(at.LeadSaved(lead_id="l2"))  # not in flight yet
    assert [c.lead_id for c in driver.send(at.LeadSaved(lead_id="l1"))] == ["l2"]  # type: ignore[attr-defined]
    assert [c.lead_id for c in driver.send(at.LeadSaved(lead_id="l2"))] == ["l3"]  # type: ignore[attr-defined]


@pytest.mark.req("LD-5")
def test_at_most_eight_pending_instructions() -> None:
    """req: LD-5 — eight are admitted; the ninth is refused QUEUE_FULL with its draft."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    for number in range(at.MAX_PENDING):
        assert isinstance(submit(driver, f"l{number}", f"note {number}")[0], at.LeadAccepted)
    refused = refusal(submit(driver, "l9", "ninth"))
    assert refused.reason is at.DraftReason.QUEUE_FULL and refused.draft == "ninth"
    driver.send(at.LeadSaved(lead_id="l0"))  # saved but unapplied still counts as pending
    assert refusal(submit(driver, "l10", "tenth")).reason is at.DraftReason.QUEUE_FULL


@pytest.mark.req("LD-6")
def test_size_limit_is_32768_bytes_of_utf8() -> None:
    """req: LD-6 — 32,768 bytes (16,384 two-byte characters) pass; 32,769 bytes are refused."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    exactly = "é" * 16_384
    assert len(exactly) == 16_384 and len(exactly.encode()) == 32_768
    assert isinstance(submit(driver, "ok", exactly)[0], at.LeadAccepted)
    over = "é" * 16_384 + "x"
    refused = refusal(submit(driver, "big", over))
    assert refused.reason is at.DraftReason.TOO_LONG and refused.draft == over
    assert "32768 bytes" in refused.message and "32769" in refused.message


@pytest.mark.req("LD-6")
@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_or_whitespace_lead_is_refused(text: str) -> None:
    """req: LD-6 — blank text is refused EMPTY with its draft."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    refused = refusal(submit(driver, "l1", text))
    assert refused.reason is at.DraftReason.EMPTY and refused.draft == text


@pytest.mark.req("LD-7")
def test_a_failed_save_keeps_the_draft_and_leaves_the_others_in_order() -> None:
    """req: LD-7 — l2's save fails: its draft comes back; l1 and l3 stay, in order, and reach
    the model together."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    for lead_id in ("l1", "l2", "l3"):
        submit(driver, lead_id, f"text {lead_id}")
    driver.send(at.LeadSaved(lead_id="l1"))
    commands = driver.send(at.LeadSaveFailed(lead_id="l2", reason="database locked"))
    assert commands[0] == at.ReturnDraft(
        lead_id="l2", reason=at.DraftReason.SAVE_FAILED, draft="text l2",
        message="Saving the Lead instruction failed (database locked); the text is back in "
                "the composer.")
    assert commands[1] == at.SaveLead(
        lead_id="l3", record=at.UserMessageRecord(message_id="l3", text="text l3"))
    driver.send(at.LeadSaved(lead_id="l3"))
    driver.send(at.ToolFinished(call_id="w1", output="ok"))
    driver.ack()
    driver.ack()
    assert driver.last(at.RequestModelStream).lead_ids == ("l1", "l3")  # type: ignore[attr-defined]


@pytest.mark.req("LD-8")
def test_no_request_includes_an_unacknowledged_save() -> None:
    """req: LD-8 — at a boundary with a save in flight the turn waits; the request goes out only
    after the ack, and never lists a lead whose save failed."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    submit(driver, "l1", "keep going")
    driver.send(at.ToolFinished(call_id="w1", output="ok"))
    assert driver.ack() == ()
    assert driver.state.phase is at.TurnPhase.AWAITING_LEAD_SAVES
    assert not [r for r in driver.of(at.RequestModelStream) if r.lead_ids]  # type: ignore[attr-defined]
    commands = driver.send(at.LeadSaveFailed(lead_id="l1", reason="io"))
    assert isinstance(commands[0], at.ReturnDraft)
    assert commands[0].reason is at.DraftReason.SAVE_FAILED
    # nothing saved: the turn goes on as if no Lead had come (the next call runs)
    assert commands[1] == at.ExecuteTool(call=call("r2", "run_tests"))


@pytest.mark.req("LD-9")
def test_lead_applies_at_the_next_safe_boundary() -> None:
    """req: LD-9 — the running write finishes and is saved; the unstarted call is recorded as
    skipped (the model is told why); then the instruction goes to the model before anything
    else runs."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    submit(driver, "l1", "use tabs")
    driver.send(at.LeadSaved(lead_id="l1"))
    driver.send(at.ToolFinished(call_id="w1", output="written"))
    skipped = driver.ack()
    (persist,) = skipped
    assert isinstance(persist, at.Persist)
    assert persist.records == (at.ToolResultRecord(
        call_id="r2", name="run_tests", status=ToolResultStatus.SKIPPED,
        reason="Skipped: the user sent a Lead instruction before this call started."),)
    assert driver.ack() == (at.RequestModelStream(request_id="t1/r2", lead_ids=("l1",)),)
    assert [c.call.call_id for c in driver.of(at.ExecuteTool)] == ["w1"]  # type: ignore[attr-defined]


@pytest.mark.req("LD-9")
def test_lead_during_a_stream_waits_for_the_response_then_skips_its_calls() -> None:
    """req: LD-9 — a Lead saved while the model streams: the response completes and is saved,
    none of its calls start, they are recorded skipped, and the instruction is sent."""
    driver = Driver(no_titles())
    driver.start()
    submit(driver, "l1", "actually, only fix the test")
    driver.send(at.LeadSaved(lead_id="l1"))
    driver.respond(text="I'll refactor", finish_reason="tool_calls", calls=[call("a"), call("b")])
    driver.ack()
    driver.ack()
    assert not driver.of(at.ExecuteTool)
    assert driver.last(at.RequestModelStream).lead_ids == ("l1",)  # type: ignore[attr-defined]


@pytest.mark.req("LD-10")
def test_lead_never_cancels_an_in_flight_file_write() -> None:
    """req: LD-10 — while a write runs, submitting and saving Leads sends no CancelTool and
    the turn keeps waiting for the write's own result."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    commands = submit(driver, "l1", "stop, wrong file") + driver.send(at.LeadSaved(lead_id="l1"))
    assert not any(isinstance(c, at.CancelTool | at.CancelStream) for c in commands)
    assert driver.state.phase is at.TurnPhase.RUNNING_TOOL
    driver.send(at.ToolFinished(call_id="w1", output="written"))
    assert driver.last(at.Persist).records[0].status is ToolResultStatus.EXECUTED  # type: ignore[attr-defined]


def wait_for_permission(driver: Driver) -> None:
    driver.start()
    driver.respond(finish_reason="tool_calls",
                   calls=[call("w1", "write_file", permission=True), call("r2")])
    driver.ack()
    assert driver.state.phase is at.TurnPhase.AWAITING_PERMISSION


@pytest.mark.req("LD-11")
def test_by_default_a_pending_permission_stays_open_and_lead_waits_for_the_action() -> None:
    """req: LD-11 — KEEP_OPEN (the default): the dialog stays; on ALLOW the write runs, then
    the rest is skipped and the Lead applies."""
    assert at.TurnConfig().lead_permission_policy is at.LeadPermissionPolicy.KEEP_OPEN
    driver = Driver(no_titles())
    wait_for_permission(driver)
    commands = submit(driver, "l1", "also add a test") + driver.send(at.LeadSaved(lead_id="l1"))
    assert not any(isinstance(c, at.DismissPermission) for c in commands)
    assert driver.state.phase is at.TurnPhase.AWAITING_PERMISSION
    driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW))
    driver.send(at.ToolFinished(call_id="w1", output="written"))
    driver.ack()
    driver.ack()
    assert [c.call.call_id for c in driver.of(at.ExecuteTool)] == ["w1"]  # type: ignore[attr-defined]
    assert driver.last(at.RequestModelStream).lead_ids == ("l1",)  # type: ignore[attr-defined]


@pytest.mark.req("LD-11")
def test_keep_open_then_deny_still_applies_the_lead() -> None:
    """req: LD-11 — the decision is DENY: the denied result is saved, then the Lead applies."""
    driver = Driver(no_titles())
    wait_for_permission(driver)
    submit(driver, "l1", "never mind that file")
    driver.send(at.LeadSaved(lead_id="l1"))
    driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.DENY))
    driver.ack()
    driver.ack()
    assert driver.last(at.RequestModelStream).lead_ids == ("l1",)  # type: ignore[attr-defined]
    assert not driver.of(at.ExecuteTool)


@pytest.mark.req("LD-12")
def test_supersede_policy_dismisses_the_dialog_and_records_superseded_not_denied() -> None:
    """req: LD-12 — SUPERSEDE: once the Lead is saved the dialog is dismissed, the call is
    recorded SUPERSEDED (not DENIED), the rest skipped, and the Lead applies at once."""
    driver = Driver(at.TurnConfig(lead_permission_policy=at.LeadPermissionPolicy.SUPERSEDE,
                                  auto_title=False))
    wait_for_permission(driver)
    assert submit(driver, "l1", "do it differently")[-1].__class__ is at.SaveLead
    commands = driver.send(at.LeadSaved(lead_id="l1"))
    assert commands[0] == at.DismissPermission(call_id="w1",
                                               recorded_as=ToolResultStatus.SUPERSEDED)
    persist = commands[1]
    assert isinstance(persist, at.Persist)
    assert [(r.call_id, r.status) for r in persist.records] == [  # type: ignore[union-attr]
        ("w1", ToolResultStatus.SUPERSEDED), ("r2", ToolResultStatus.SKIPPED)]
    assert driver.ack() == (at.RequestModelStream(request_id="t1/r2", lead_ids=("l1",)),)
    # the user clicks Allow on the dialog that was just dismissed: absorbed, never run
    before = driver.state
    late = driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW))
    assert late == (at.StaleAnswerIgnored(event="PermissionDecided", answer_id="w1",
                                          reason="the permission dialog was already dismissed"),)
    assert driver.state is before


@pytest.mark.req("LD-13")
def test_stop_reports_saved_unapplied_instructions_and_starts_nothing() -> None:
    """req: LD-13 — Stop with one saved and one saving instruction: the tool is cancelled, the
    turn waits for the save, reports both saved ones as unapplied, and requests nothing."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    submit(driver, "l1", "first")
    driver.send(at.LeadSaved(lead_id="l1"))
    submit(driver, "l2", "second")
    driver.send(at.StopPressed())
    driver.send(at.ToolFinished(call_id="w1", output="written"))
    driver.ack()
    assert not driver.of(at.EndTurn)  # the save of l2 is still in flight
    commands = driver.send(at.LeadSaved(lead_id="l2"))
    assert commands[:2] == (at.LeadUnapplied(lead_id="l1"), at.LeadUnapplied(lead_id="l2"))
    end = commands[2]
    assert isinstance(end, at.EndTurn)
    assert end.outcome.kind is OutcomeKind.CANCELLED
    assert len(driver.of(at.LeadUnapplied)) == 2  # reported once each, by the command only
    assert len(driver.of(at.RequestModelStream)) == 1
    assert driver.state.phase is at.TurnPhase.IDLE


@pytest.mark.req("LD-14")
def test_admission_closes_before_final_lifecycle_work() -> None:
    """req: LD-14 — once the turn ends (here: Stop while a tool runs), a new Lead is refused
    TURN_ENDING with its draft; an instruction queued behind a save goes back as a draft."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    submit(driver, "l1", "saving")
    submit(driver, "l2", "queued")
    commands = driver.send(at.StopPressed())
    assert at.ReturnDraft(lead_id="l2", reason=at.DraftReason.TURN_ENDED_BEFORE_SAVE,
                          draft="queued",
                          message="The turn ended before this Lead instruction was saved; the "
                                  "text is back in the composer.") in commands
    refused = refusal(submit(driver, "l3", "too late"))
    assert refused.reason is at.DraftReason.TURN_ENDING and refused.draft == "too late"


@pytest.mark.req("LD-14")
def test_a_natural_finish_takes_a_lead_that_arrives_before_it_ends() -> None:
    """req: LD-14, LD-3 — a Lead saved while the final answer is being saved joins the turn:
    the turn continues with it instead of ending."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(text="All done.")
    submit(driver, "l1", "one more thing")
    driver.send(at.LeadSaved(lead_id="l1"))
    driver.ack()
    assert driver.last(at.RequestModelStream).lead_ids == ("l1",)  # type: ignore[attr-defined]
    assert not driver.of(at.EndTurn)


@pytest.mark.req("LD-15")
def test_lead_never_consumes_composer_attachments() -> None:
    """req: LD-15 — LeadAccepted lists the attachments as kept; none goes into the save."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    commands = submit(driver, "l1", "see the screenshot", attachments=("img-1", "log-2"))
    assert commands[0] == at.LeadAccepted(lead_id="l1", kept_attachment_ids=("img-1", "log-2"))
    save = commands[1]
    assert isinstance(save, at.SaveLead)
    assert save.record == at.UserMessageRecord(message_id="l1", text="see the screenshot")


@pytest.mark.req("LD-16")
def test_instructions_reaching_one_boundary_apply_together_in_save_order() -> None:
    """req: LD-16 — three saved instructions go out in one request, in save order."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    for lead_id in ("l1", "l2", "l3"):
        submit(driver, lead_id, lead_id)
        driver.send(at.LeadSaved(lead_id=lead_id))
    driver.send(at.ToolFinished(call_id="w1", output="ok"))
    driver.ack()
    driver.ack()
    assert driver.of(at.RequestModelStream)[-1] == at.RequestModelStream(
        request_id="t1/r2", lead_ids=("l1", "l2", "l3"))
    assert len(driver.of(at.RequestModelStream)) == 2


@pytest.mark.req("LD-4", "LD-7")
def test_a_resent_lead_is_absorbed_and_a_reused_id_refused() -> None:
    """req: LD-4, LD-7 — a client's resend (same id, same text) is absorbed, never saved twice;
    the same id with another text comes back as a draft; the queue is unchanged either way."""
    queue = lead.open_admission(lead.LeadQueue.create("c"))
    queue = lead.reduce(queue, at.LeadSubmitted(chat_id="c", lead_id="l", text="a")).state
    again = lead.reduce(queue, at.LeadSubmitted(chat_id="c", lead_id="l", text="a"))
    assert again.state is queue
    assert again.commands == (at.StaleAnswerIgnored(
        event="LeadSubmitted", answer_id="l", reason="this instruction was already received"),)
    other = lead.reduce(queue, at.LeadSubmitted(chat_id="c", lead_id="l", text="b"))
    assert other.state is queue
    assert other.commands == (at.ReturnDraft(
        lead_id="l", reason=at.DraftReason.DUPLICATE_ID, draft="b",
        message="Another Lead instruction already has this id; your text was not sent."),)
    taken, _ = lead.take_saved(lead.reduce(queue, at.LeadSaved(lead_id="l")).state)
    late = lead.reduce(taken, at.LeadSubmitted(chat_id="c", lead_id="l", text="a"))
    assert late.state is taken and isinstance(late.commands[0], at.StaleAnswerIgnored)


# --- regressions found by review (issue 8) ----------------------------------------------------


@pytest.mark.req("LD-3", "LD-13", "TL-11")
def test_a_lead_saved_at_a_resumable_error_rides_the_continue() -> None:
    """req: LD-3, LD-13, TL-11 — the stream fails while a Lead is saved but not yet applied: the
    ending does not call it unapplied; ContinueTurn's first request gives it to the model."""
    driver = Driver(no_titles())
    driver.start()
    submit(driver, "l1", "also update the docs")
    driver.send(at.LeadSaved(lead_id="l1"))
    driver.send(at.StreamFailed(request_id="t1/r1", error="connection reset"))
    end = driver.last(at.EndTurn)
    assert end.outcome.resumable  # type: ignore[attr-defined]
    assert not driver.of(at.LeadUnapplied)
    assert driver.send(at.ContinueTurn(turn_id="t1")) == (
        at.RequestModelStream(request_id="t1/r2", lead_ids=("l1",)),)


@pytest.mark.req("LD-13")
def test_a_new_prompt_after_a_resumable_error_reports_the_saved_lead_unapplied() -> None:
    """req: LD-13, LD-3 — the user does not continue but sends a new prompt: the saved
    instruction is reported unapplied once, and never joins the new turn."""
    driver = Driver(no_titles())
    driver.start()
    submit(driver, "l1", "also update the docs")
    driver.send(at.LeadSaved(lead_id="l1"))
    driver.send(at.StreamFailed(request_id="t1/r1", error="connection reset"))
    commands = driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="new task"))
    assert commands[0] == at.LeadUnapplied(lead_id="l1")
    driver.ack()
    assert driver.last(at.RequestModelStream) == at.RequestModelStream(request_id="t2/r1")
    assert len(driver.of(at.LeadUnapplied)) == 1


@pytest.mark.req("LD-4", "LD-7")
def test_late_save_answers_are_absorbed_and_unknown_ones_refused() -> None:
    """req: LD-4, LD-7 — a second ack of a saved instruction and an ack after its save was
    reported failed are absorbed with a notice; an id never admitted is misuse."""
    driver = Driver(no_titles())
    busy_with_a_write(driver)
    submit(driver, "l1", "one")
    submit(driver, "l2", "two")
    driver.send(at.LeadSaved(lead_id="l1"))
    before = driver.state
    assert driver.send(at.LeadSaved(lead_id="l1")) == (at.StaleAnswerIgnored(
        event="LeadSaved", answer_id="l1", reason="this instruction's save is not in flight"),)
    assert driver.state is before
    driver.send(at.LeadSaveFailed(lead_id="l2", reason="io"))
    late = driver.send(at.LeadSaved(lead_id="l2"))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    with pytest.raises(at.UnknownId):
        driver.send(at.LeadSaved(lead_id="never-admitted"))


@pytest.mark.req("LD-1")
def test_the_lead_control_is_offered_only_while_admission_is_open() -> None:
    """req: LD-1, LD-14 — ``lead_offered`` is false between turns and during final lifecycle
    work, true while the turn runs."""
    driver = Driver(no_titles())
    assert not driver.state.lead_offered
    busy_with_a_write(driver)
    assert driver.state.lead_offered
    driver.send(at.StopPressed())
    assert not driver.state.lead_offered  # ending: admission closed
    driver.send(at.ToolFinished(call_id="w1", output="ok"))
    driver.ack()
    assert not driver.state.lead_offered and driver.state.phase is at.TurnPhase.IDLE


# --- the Lead queue alone ---------------------------------------------------------------------


LeadEvent = at.LeadSubmitted | at.LeadSaved | at.LeadSaveFailed


def submitted(lead_id: str, text: str = "use tabs", chat_id: str = "chat") -> at.LeadSubmitted:
    return at.LeadSubmitted(chat_id=chat_id, lead_id=lead_id, text=text)


def feed(queue: LeadQueue, events: Sequence[LeadEvent]
         ) -> tuple[LeadQueue, tuple[at.Command, ...]]:
    """Reduce ``events`` from ``queue``; the last step's commands."""
    commands: tuple[at.Command, ...] = ()
    for event in events:
        queue, commands = lead.reduce(queue, event)
    return queue, commands


def busy_queue() -> LeadQueue:
    """An open queue with l1 saved, l2 saving and l3 queued behind it."""
    queue = lead.open_admission(LeadQueue.create("chat"))
    queue, _ = feed(queue, [submitted("l1", "one"), at.LeadSaved(lead_id="l1"),
                            submitted("l2", "two"), submitted("l3", "three")])
    assert (lead.saved_ids(queue), lead.saving_id(queue)) == (("l1",), "l2")
    return queue


def ended_before_save(lead_id: str, text: str) -> at.ReturnDraft:
    return at.ReturnDraft(
        lead_id=lead_id, reason=at.DraftReason.TURN_ENDED_BEFORE_SAVE, draft=text,
        message="The turn ended before this Lead instruction was saved; the text is back in "
                "the composer.")


def stale_save(lead_id: str, event: str = "LeadSaved") -> at.StaleAnswerIgnored:
    return at.StaleAnswerIgnored(event=event, answer_id=lead_id,
                                 reason="this instruction's save is not in flight")


def raised(queue: LeadQueue, event: LeadEvent) -> at.ProtocolError:
    with pytest.raises(at.UnknownId) as caught:
        lead.reduce(queue, event)
    return caught.value


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.
# They use ``agentturn.lead`` alone (documented as usable without the turn lifecycle): real
# events from a new queue, and the documented meaning of its fields.


@pytest.mark.req("LD-1", "LD-2", "LD-5", "LD-6", "LD-14")
@pytest.mark.parametrize(("admission", "event", "reason", "message"), [
    (Admission.OPEN, submitted("x", chat_id="other"), at.DraftReason.NOT_OWNER,
     "Lead can only steer the chat whose turn is running."),
    (Admission.CLOSED, submitted("x"), at.DraftReason.NOT_ACTIVE,
     "No turn is running in this chat; send the text as a new message."),
    (Admission.ENDING, submitted("x"), at.DraftReason.TURN_ENDING,
     "The turn is finishing; your text is kept for an ordinary send."),
    (Admission.OPEN, submitted("x", " \n"), at.DraftReason.EMPTY,
     "A Lead instruction needs some text."),
    (Admission.OPEN, submitted("x", "x" * (lead.MAX_LEAD_BYTES + 1)), at.DraftReason.TOO_LONG,
     "A Lead instruction holds at most 32768 bytes; this one has 32769."),
], ids=["NOT_OWNER", "NOT_ACTIVE", "TURN_ENDING", "EMPTY", "TOO_LONG"])
def test_each_refusal_says_exactly_why(admission: Admission, event: at.LeadSubmitted,
                                       reason: at.DraftReason, message: str) -> None:
    """A refused Lead comes back as one ``ReturnDraft`` with its typed reason, its draft and the
    documented message, and the queue is unchanged. Kills the mutants that alter the NOT_OWNER,
    NOT_ACTIVE, TURN_ENDING and EMPTY messages."""
    queue = LeadQueue.create("chat")
    if admission is not Admission.CLOSED:
        queue = lead.open_admission(queue)
    if admission is Admission.ENDING:
        queue, _ = lead.close_admission(queue)
    after, commands = lead.reduce(queue, event)
    assert after is queue
    assert commands == (at.ReturnDraft(lead_id="x", reason=reason, draft=event.text,
                                       message=message),)


@pytest.mark.req("LD-5")
def test_a_ninth_instruction_is_refused_with_the_documented_message() -> None:
    """Eight pending instructions (saved or not): the ninth is refused QUEUE_FULL with the exact
    message (kills the mutants that alter its second sentence)."""
    queue = lead.open_admission(LeadQueue.create("chat"))
    queue, _ = feed(queue, [submitted(f"l{n}") for n in range(lead.MAX_PENDING)])
    _, commands = lead.reduce(queue, submitted("l9", "ninth"))
    assert commands == (at.ReturnDraft(
        lead_id="l9", reason=at.DraftReason.QUEUE_FULL, draft="ninth",
        message="8 Lead instructions are already waiting; send this one after they are "
                "applied."),)


@pytest.mark.req("LD-4")
@pytest.mark.parametrize("event", [at.LeadSaved(lead_id="l9"),
                                   at.LeadSaveFailed(lead_id="l9", reason="io"),
                                   at.LeadSaved(lead_id="l3")], ids=["saved", "failed", "queued"])
def test_an_ack_for_no_save_in_flight_is_refused_with_its_particulars(event: LeadEvent) -> None:
    """An acknowledgement for an id never admitted, or for one still queued behind the save in
    flight, is misuse: ``UnknownId`` naming the part, the phase, the event and what was expected
    (STYLE 6). Kills the mutants of ``_saving_index``'s error arguments."""
    error = raised(busy_queue(), event)
    assert (error.part, error.phase, error.event, error.expected) == (
        "lead", "OPEN", event,
        "an acknowledgement of the instruction whose save is in flight")
    assert str(error) == (
        f"lead: can't handle {type(event).__name__} in phase OPEN; expected an "
        "acknowledgement of the instruction whose save is in flight")


@pytest.mark.req("LD-4")
def test_a_repeated_lead_id_is_refused_with_its_particulars() -> None:
    """A second pending instruction with the id of one already pending and another text: its
    draft comes back with ``DUPLICATE_ID`` and the exact message; the same text is a resend,
    absorbed with its reason; the queue is unchanged either way."""
    queue = busy_queue()
    event = submitted("l2", "again")
    assert lead.reduce(queue, event) == at.Step(queue, (at.ReturnDraft(
        lead_id="l2", reason=at.DraftReason.DUPLICATE_ID, draft="again",
        message="Another Lead instruction already has this id; your text was not sent."),))
    assert lead.reduce(queue, submitted("l2", "two")) == at.Step(queue, (at.StaleAnswerIgnored(
        event="LeadSubmitted", answer_id="l2", reason="this instruction was already received"),))
    other_chat = submitted("l2", "two", chat_id="elsewhere")
    assert lead.reduce(queue, other_chat).commands[0].reason is at.DraftReason.NOT_OWNER


@pytest.mark.req("LD-9", "LD-16", "LD-4")
def test_a_second_ack_after_the_instruction_was_applied_is_a_late_answer() -> None:
    """Instructions handed to the model at a boundary have left the queue; a repeated
    acknowledgement of one of them is absorbed, not misuse (kills ``take_saved`` forgetting the
    ids it handed over)."""
    queue = lead.open_admission(LeadQueue.create("chat"))
    queue, _ = feed(queue, [submitted("l1"), at.LeadSaved(lead_id="l1"),
                            submitted("l2"), at.LeadSaved(lead_id="l2")])
    queue, taken = lead.take_saved(queue)
    assert taken == ("l1", "l2") and queue.entries == ()
    for lead_id in taken:
        after, commands = lead.reduce(queue, at.LeadSaved(lead_id=lead_id))
        assert after is queue and commands == (stale_save(lead_id),)


@pytest.mark.req("LD-13", "LD-4")
def test_release_reports_saved_ones_and_returns_unsaved_ones_as_drafts() -> None:
    """Released early, with a save still in flight and one queued behind it: the saved
    instruction is reported unapplied, the two unsaved ones come back as drafts, in queue order;
    the queue is closed and empty, and the late acknowledgement of any of the three is absorbed
    (kills ``release`` dropping a draft and forgetting the ids that left)."""
    queue, commands = lead.release(busy_queue())
    assert commands == (at.LeadUnapplied(lead_id="l1"), ended_before_save("l2", "two"),
                        ended_before_save("l3", "three"))
    assert queue.admission is Admission.CLOSED and queue.entries == ()
    assert not lead.has_unsaved(queue) and not lead.is_offered(queue)
    for lead_id in ("l1", "l2", "l3"):
        assert lead.reduce(queue, at.LeadSaved(lead_id=lead_id)).commands == (
            stale_save(lead_id),)


@pytest.mark.req("LD-13", "LD-14", "TL-11")
def test_suspend_keeps_saved_ones_and_returns_unsaved_ones_as_drafts() -> None:
    """Suspended early (a resumable error), with a save in flight and one queued: the saved
    instruction stays pending, unreported; the unsaved ones come back as drafts and leave the
    queue, whose late acknowledgements are absorbed. Reopened by ``ContinueTurn``, the saved
    one is what the next boundary takes (kills ``suspend`` dropping or breaking the drafts,
    keeping the unsaved entries and forgetting the ids that left)."""
    queue, commands = lead.suspend(busy_queue())
    assert commands == (ended_before_save("l2", "two"), ended_before_save("l3", "three"))
    assert queue.admission is Admission.CLOSED
    assert [entry.lead_id for entry in queue.entries] == ["l1"]
    assert lead.saved_ids(queue) == ("l1",) and not lead.has_unsaved(queue)
    for lead_id in ("l2", "l3"):
        assert lead.reduce(queue, at.LeadSaveFailed(lead_id=lead_id, reason="io")).commands == (
            stale_save(lead_id, "LeadSaveFailed"),)
    reopened = lead.open_admission(queue)
    assert lead.take_saved(reopened)[1] == ("l1",)


@pytest.mark.req("LD-14", "LD-4")
def test_closing_admission_returns_queued_drafts_and_keeps_the_save_in_flight() -> None:
    """Admission closes: the queued instruction comes back as a draft and has left the queue
    (an acknowledgement naming it is absorbed, like any id that left); the one saving stays and
    its acknowledgement is taken; the saved one stays (kills ``close_admission`` remembering the
    wrong ids, or none)."""
    queue, commands = lead.close_admission(busy_queue())
    assert commands == (ended_before_save("l3", "three"),)
    assert queue.admission is Admission.ENDING
    assert [(e.lead_id, e.status) for e in queue.entries] == [
        ("l1", lead.LeadStatus.SAVED), ("l2", lead.LeadStatus.SAVING)]
    assert lead.reduce(queue, at.LeadSaved(lead_id="l3")).commands == (stale_save("l3"),)
    queue, commands = lead.reduce(queue, at.LeadSaved(lead_id="l2"))
    assert commands == () and lead.saved_ids(queue) == ("l1", "l2")


@pytest.mark.req("LD-4")
def test_the_queue_remembers_the_last_eight_ids_that_left_it() -> None:
    """``recent`` holds the ids that left the queue, the newest eight, oldest first: those
    still get a late-answer notice; older ones are misuse again. Checked after a close, a
    boundary and a release (kills each of them recording the wrong ids)."""
    queue = lead.open_admission(LeadQueue.create("chat"))
    names = [f"l{n}" for n in range(6)]
    queue, _ = feed(queue, [submitted(n) for n in names])  # l0 saving, the rest queued
    queue, _ = lead.close_admission(queue)  # l1..l5 leave
    assert queue.recent == ("l1", "l2", "l3", "l4", "l5")
    queue, _ = feed(queue, [at.LeadSaved(lead_id="l0")])
    queue = lead.open_admission(queue)
    queue, _ = lead.take_saved(queue)  # l0 leaves
    queue, _ = feed(queue, [submitted("m1"), at.LeadSaved(lead_id="m1"), submitted("m2"),
                            submitted("m3")])
    queue, _ = lead.release(queue)  # m1 (saved), m2 (saving), m3 (queued) leave
    assert queue.recent == ("l2", "l3", "l4", "l5", "l0", "m1", "m2", "m3")
    assert lead.reduce(queue, at.LeadSaved(lead_id="l2")).commands == (stale_save("l2"),)
    with pytest.raises(at.UnknownId):
        lead.reduce(queue, at.LeadSaved(lead_id="l1"))


# --- the host-facing names --------------------------------------------------------------------


@pytest.mark.req("LD-6")
def test_a_lone_surrogate_in_a_lead_never_reaches_the_reducer() -> None:
    """req: LD-6 — the review's crash: the Lead text with a lone surrogate fails at
    construction, and the same text with a valid emoji is admitted."""
    with pytest.raises(at.FieldError, match=r"LeadSubmitted\.text"):
        at.LeadSubmitted(chat_id="chat", lead_id="l1", text="fix \ud800")
    driver = Driver(no_titles())
    driver.start()
    accepted = driver.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="fix \U0001f600"))
    assert isinstance(accepted[0], at.LeadAccepted)


def test_the_lead_permission_policy_is_named_for_what_it_governs() -> None:
    """The policy is ``LeadPermissionPolicy``, configured as ``lead_permission_policy``."""
    config = at.TurnConfig(lead_permission_policy=at.LeadPermissionPolicy.SUPERSEDE)
    assert config.lead_permission_policy is at.LeadPermissionPolicy.SUPERSEDE
    assert not hasattr(at, "PermissionPolicy")
