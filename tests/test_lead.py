"""Lead: steering an active turn, one requirement at a time (LD-1 ... LD-16)."""

from __future__ import annotations

import pytest
from driver import Driver, call, no_titles

import agentturn as at
from agentturn import lead
from agentturn.records import OutcomeKind, ToolResultStatus


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
