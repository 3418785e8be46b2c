"""How a turn ends and what it records on the way: the exact message of each outcome, the result
record of every call (executed, cancelled by Stop, denied, superseded), the final write, and a
turn continued after an error.
"""

from __future__ import annotations

import pytest
from checks import CheckedDriver, two_writes_awaiting_permission
from driver import Driver, call, no_titles

import agentturn as at
from agentturn import ToolResultStatus

STOPPED = "Cancelled: the user stopped the turn."


def results(driver: Driver) -> list[at.ToolResultRecord]:
    """Every tool-result record the turn asked to save, in order."""
    return [record for persist in driver.of(at.Persist) for record in persist.records  # type: ignore[attr-defined]
            if isinstance(record, at.ToolResultRecord)]


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


@pytest.mark.req("TL-8", "TL-5")
def test_a_tool_cancelled_by_stop_is_recorded_with_the_stop_reason() -> None:
    """A tool that reports it was cancelled is saved CANCELLED with exactly "Cancelled: the user
    stopped the turn." and its partial output; a tool that ran to the end has no reason."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("a"), call("b")])
    driver.ack()
    driver.send(at.ToolFinished(call_id="a", output="all of it"))
    driver.ack()
    driver.send(at.StopPressed())
    driver.send(at.ToolFinished(call_id="b", output="half", cancelled=True))
    assert [(r.call_id, r.status, r.output, r.reason) for r in results(driver)] == [
        ("a", ToolResultStatus.EXECUTED, "all of it", ""),
        ("b", ToolResultStatus.CANCELLED, "half", STOPPED)]


@pytest.mark.req("TL-3")
def test_a_cancelled_permission_request_cancels_the_turn_with_the_exact_message() -> None:
    """Cancelling the permission request for ``w1`` cancels the turn: its outcome says exactly
    "The permission request was cancelled, so the turn was cancelled." (kills the lower-cased
    text)."""
    driver = two_writes_awaiting_permission()
    driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.CANCEL))
    driver.ack()
    [end] = driver.of(at.EndTurn)
    assert (end.outcome.kind, end.outcome.message) == (
        at.OutcomeKind.CANCELLED, "The permission request was cancelled, so the turn was "
                                  "cancelled.")


@pytest.mark.req("TL-3")
def test_a_denied_call_is_recorded_under_its_id_with_the_exact_reason() -> None:
    """Deny, twice: each call is saved DENIED under its own id and name, with no output and
    exactly "Denied: the user did not allow this call.", the turn asks about each call once,
    then sends the results to the model (kills ``call_id=None``, the dropped and the
    upper-cased reason, and ``next_call - 1``)."""
    driver = two_writes_awaiting_permission()
    for call_id in ("w1", "w2"):
        driver.send(at.PermissionDecided(call_id=call_id, decision=at.PermissionDecision.DENY))
        driver.ack()
    assert [(r.call_id, r.name, r.status, r.output, r.reason) for r in results(driver)] == [
        (call_id, "write_file", ToolResultStatus.DENIED, "",
         "Denied: the user did not allow this call.") for call_id in ("w1", "w2")]
    assert [asked.call.call_id for asked in driver.of(at.AskPermission)] == ["w1", "w2"]
    assert isinstance(driver.commands[-1], at.RequestModelStream)


@pytest.mark.req("LD-12", "TL-5")
def test_a_lead_that_supersedes_the_second_call_records_only_that_call() -> None:
    """SUPERSEDE: ``w1`` ran; a Lead instruction saved while the turn asks about ``w2``
    dismisses that dialog and records ``w2`` SUPERSEDED with the exact reason, and nothing
    else: every call ends with exactly one result record (kills ``next_call - 1``, which
    records ``w1`` and ``w2`` again as skipped)."""
    driver = two_writes_awaiting_permission(at.TurnConfig(
        auto_title=False, lead_permission_policy=at.LeadPermissionPolicy.SUPERSEDE))
    driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW),
                at.ToolFinished(call_id="w1", output="written"))
    driver.ack()
    driver.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="stop writing"),
                at.LeadSaved(lead_id="l1"))
    assert [(r.call_id, r.status, r.reason) for r in results(driver)] == [
        ("w1", ToolResultStatus.EXECUTED, ""),
        ("w2", ToolResultStatus.SUPERSEDED, "Superseded: the user sent a Lead instruction "
                                            "while this call waited for permission.")]


@pytest.mark.req("TL-6", "TL-10")
def test_a_second_malformed_response_ends_the_turn_with_its_raw_finish_reason() -> None:
    """Two malformed responses in a row: the turn ends MALFORMED_TOOL_FORMAT with the exact
    message, and the outcome carries the second response's finish reason unchanged, as its
    record does (kills ``finish_reason=None`` in that outcome and the lower-cased message)."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("m1")], malformed=True)
    driver.ack()
    driver.ack()
    driver.open()
    driver.respond(finish_reason="tool_calls", calls=[call("m2")], malformed=True)
    while not driver.of(at.EndTurn):
        driver.ack()
    [end] = driver.of(at.EndTurn)
    [response] = [r for p in driver.of(at.Persist) for r in p.records
                  if isinstance(r, at.ResponseRecord) and r.request_id == "t1/r2"]
    assert end.outcome.kind is at.OutcomeKind.MALFORMED_TOOL_FORMAT
    assert end.outcome.message == ("The model sent malformed tool calls twice in a row; "
                                   "the turn stopped.")
    assert end.outcome.finish_reason == response.finish_reason
    assert end.outcome.finish_reason.raw == "tool_calls"


@pytest.mark.req("TL-9", "TL-1")
@pytest.mark.parametrize(("finish_reason", "message"), [
    ("length", "The response was cut at the engine's output limit (finish reason 'length')."),
    ("stop", "The agent finished.")], ids=["cut", "finished"])
def test_a_response_without_tool_calls_ends_with_the_exact_sentence(
        finish_reason: str, message: str) -> None:
    """A response with text and no tool call, cut at the output limit or finished: the
    outcome's message is exactly its sentence; the cut one with the raw reason and a full stop,
    no count of calls (kills the count always added, and the altered "The agent finished.").
    The finish reason is the last response's "of this turn" (TL-10): the next turn, stopped
    before any response, ends with none (kills the reason a new prompt keeps)."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(text="some text", finish_reason=finish_reason)
    driver.ack()
    [end] = driver.of(at.EndTurn)
    assert end.outcome.message == message
    assert end.outcome.finish_reason.raw == finish_reason
    driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="again"), at.StopPressed())
    driver.ack()
    assert [(e.outcome.kind, e.outcome.finish_reason) for e in driver.of(at.EndTurn)[1:]] == [
        (at.OutcomeKind.CANCELLED, None)]


@pytest.mark.req("TL-11", "LD-1")
def test_a_continued_turn_takes_lead_instructions_again() -> None:
    """The end of a turn closes Lead admission; ``ContinueTurn`` reopens it, so an instruction
    sent while the continued turn runs is saved, not refused."""
    driver = Driver(no_titles())
    driver.start()
    driver.send(at.StreamFailed(request_id="t1/r1", error="reset"),
                at.ContinueTurn(turn_id="t1"))
    assert driver.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs")) == (
        at.LeadAccepted(lead_id="l1"),
        at.SaveLead(lead_id="l1", record=at.UserMessageRecord(message_id="l1", text="use tabs")))


@pytest.mark.req("TL-5")
def test_a_new_prompt_forgets_the_calls_of_the_turn_it_did_not_continue() -> None:
    """A turn ends on a failed write with ``c2`` unstarted; the next prompt's write records
    ``c2`` as not continued. Stop while that write is out then ends the new turn at once: the
    old calls are not recorded a second time."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("c1"), call("c2")])
    driver.ack()
    driver.send(at.ToolFinished(call_id="c1", output="done"))
    failing = driver.last(at.Persist)
    driver.send(at.PersistFailed(key=failing.key, reason="disk full"),  # type: ignore[attr-defined]
                at.PromptSubmitted(turn_id="t2", message_id="m2", text="next"),
                at.StopPressed())
    assert [type(command) for command in driver.ack()] == [at.EndTurn]


@pytest.mark.req("TL-5", "LD-13")
@pytest.mark.parametrize("saved", [True, False], ids=["acknowledged", "failed"])
def test_a_final_write_answered_while_a_lead_save_holds_the_end_leaves_no_batch(
        saved: bool) -> None:
    """Stop while ``c1`` runs and a Lead instruction is still being saved: the final write
    records ``c1`` and the unstarted ``c2``; once it is acknowledged, or has failed (its records
    owed), the turn waits for the save with no write in flight and an empty ``batch``, then
    ends, ``persisting`` a bool throughout and no outcome kept once it has ended (kills
    ``persisting=None`` and the kept ``batch`` in ``_on_persisted``, ``batch=None`` in
    ``_on_persist_failed``, and the ``ending`` and the ``calls`` ``_finalize`` keeps)."""
    driver = CheckedDriver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("c1"), call("c2")])
    driver.ack()
    driver.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"),
                at.StopPressed(), at.ToolFinished(call_id="c1", output="half", cancelled=True))
    final = driver.last(at.Persist)
    driver.send(at.Persisted(key=final.key) if saved  # type: ignore[attr-defined]
                else at.PersistFailed(key=final.key, reason="disk full"))  # type: ignore[attr-defined]
    assert len(driver.state.owed) == (0 if saved else 2)
    assert driver.state.phase is at.TurnPhase.ENDING and not driver.of(at.EndTurn)
    driver.send(at.LeadSaved(lead_id="l1"))
    assert [end.outcome.kind for end in driver.of(at.EndTurn)] == [at.OutcomeKind.CANCELLED]


# Issue 32, item 4: a cancelled or never-started call is recorded with the true reason.


def _two_reads_first_running() -> Driver:
    """A response of two calls; ``a`` runs, ``b`` waits behind it."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("a"), call("b")])
    driver.ack()
    assert driver.state.phase is at.TurnPhase.RUNNING_TOOL
    return driver


@pytest.mark.req("SG-S3", "TL-5")
@pytest.mark.parametrize(("kind", "reason", "running", "waiting"), [
    (at.HardStopKind.LOOP_PROTECTION, "The same call five times.",
     "Cancelled: loop protection stopped the turn (The same call five times) while this call "
     "ran.",
     "Not run: loop protection stopped the turn (The same call five times) before this call "
     "started."),
    (at.HardStopKind.POST_TOOL_USE_STOP, "",
     "Cancelled: a PostToolUse hook stopped the turn while this call ran.",
     "Not run: a PostToolUse hook stopped the turn before this call started."),
    (at.HardStopKind.RESOURCE_LIMIT, "Memory limit reached.",
     "Cancelled: a resource limit of the host stopped the turn (Memory limit reached) while "
     "this call ran.",
     "Not run: a resource limit of the host stopped the turn (Memory limit reached) before this "
     "call started."),
    (at.HardStopKind.SESSION_CLOSED, "The session was closed.",
     "Cancelled: the session closed while this call ran.",
     "Not run: the session closed before this call started."),
    (at.HardStopKind.GRACE_EXPIRED, "The client did not come back within the grace period.",
     "Cancelled: the client disconnected and did not come back in time while this call ran.",
     "Not run: the client disconnected and did not come back in time before this call "
     "started."),
])
def test_a_tool_cancelled_by_a_hard_stop_is_recorded_with_the_authority_not_the_user(
        kind: at.HardStopKind, reason: str, running: str, waiting: str) -> None:
    """A hard stop (loop protection, a PostToolUse stop, a resource limit, the session closing,
    grace expiring) cancels the running tool: its record and the unstarted call's name that
    authority, never "the user stopped the turn"."""
    driver = _two_reads_first_running()
    driver.send(at.HardStopped(kind=kind, reason=reason))
    driver.send(at.ToolFinished(call_id="a", output="half", cancelled=True))
    assert [(r.call_id, r.status, r.output, r.reason) for r in results(driver)] == [
        ("a", ToolResultStatus.CANCELLED, "half", running),
        ("b", ToolResultStatus.SKIPPED, "", waiting)]
    driver.ack()
    [end] = driver.of(at.EndTurn)
    assert (end.outcome.kind, end.outcome.halt_kind) == (at.OutcomeKind.HALTED, kind)


@pytest.mark.req("TL-8")
@pytest.mark.parametrize("reason", ["", "   ", "\n"], ids=["empty", "spaces", "newline"])
@pytest.mark.parametrize("kind", list(at.HardStopKind), ids=lambda kind: kind.value)
def test_a_hard_stop_without_words_still_tells_the_user_which_authority_halted(
        kind: at.HardStopKind, reason: str) -> None:
    """``HardStopped`` with an empty or blank reason: the outcome's message is never empty; it
    names the authority, and the records name it once, without quoting the filler."""
    driver = _two_reads_first_running()
    driver.send(at.HardStopped(kind=kind, reason=reason))
    driver.send(at.ToolFinished(call_id="a", output="half", cancelled=True))
    driver.ack()
    [end] = driver.of(at.EndTurn)
    message = end.outcome.message
    assert message.startswith("The turn was halted: ") and message.endswith(".")
    authority = message[len("The turn was halted: "):-1]
    assert authority and authority[0].islower()
    assert [r.reason for r in results(driver)][1] == (
        f"Not run: {authority} before this call started.")


@pytest.mark.req("TL-4", "TL-1")
def test_a_tool_that_cancels_itself_while_the_turn_goes_on_says_so() -> None:
    """A tool that reports ``cancelled`` on its own (a timeout) while nothing stopped the turn
    is recorded CANCELLED as having stopped itself, and the turn goes on to the next call."""
    driver = _two_reads_first_running()
    driver.send(at.ToolFinished(call_id="a", output="timed out after 60 s", cancelled=True))
    assert [(r.call_id, r.status, r.reason) for r in results(driver)] == [
        ("a", ToolResultStatus.CANCELLED,
         "Cancelled: the tool stopped before it finished (for example, it timed out).")]
    driver.ack()
    assert driver.last(at.ExecuteTool) == at.ExecuteTool(call=call("b"))
    assert not driver.of(at.EndTurn)


@pytest.mark.req("TL-3")
def test_a_cancelled_permission_request_records_the_cancel_for_each_call() -> None:
    """Cancelling ``w1``'s permission request records ``w1`` as the user cancelling its request
    and ``w2`` as cancelled by that, not as "the user stopped the turn"."""
    driver = two_writes_awaiting_permission()
    driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.CANCEL))
    assert [(r.call_id, r.status, r.reason) for r in results(driver)] == [
        ("w1", ToolResultStatus.CANCELLED,
         "Cancelled: the user cancelled the permission request for this call."),
        ("w2", ToolResultStatus.CANCELLED,
         "Cancelled: the user cancelled the permission request of an earlier call, which "
         "cancelled the turn.")]


@pytest.mark.req("TL-5", "SG-S3")
def test_records_owed_after_a_failed_final_write_keep_the_true_reason() -> None:
    """The final write of a halted turn fails: the results owed to the next prompt still name
    the authority that halted it."""
    driver = _two_reads_first_running()
    driver.send(at.HardStopped(kind=at.HardStopKind.SESSION_CLOSED))
    persist = driver.last(at.Persist)
    assert isinstance(persist, at.Persist)
    driver.send(at.ToolFinished(call_id="a", output="", cancelled=True))
    persist = driver.last(at.Persist)
    assert isinstance(persist, at.Persist)
    driver.send(at.PersistFailed(key=persist.key, reason="disk full"))
    assert [(r.call_id, r.reason) for r in driver.state.owed
            if isinstance(r, at.ToolResultRecord)] == [
        ("a", "Cancelled: the session closed while this call ran."),
        ("b", "Not run: the session closed before this call started.")]
