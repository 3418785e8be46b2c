"""A host's own rules about calls (``review_calls``, ``ToolCall.refusal``) and a tool that
ends the task (``ToolFinished(ends_task=True)``), issue 32, items 10b and 10c."""

from __future__ import annotations

import re
from typing import Any

import pytest
from driver import Driver, call, no_titles

import agentturn as at
from agentturn import OutcomeKind, ToolResultStatus
from agentturn.tools.check import check
from agentturn.trace import read_trace, write_trace


def results(driver: Driver) -> list[at.ToolResultRecord]:
    """Every tool-result record the turn asked to save, in order."""
    return [record for persist in driver.of(at.Persist) for record in persist.records  # type: ignore[attr-defined]
            if isinstance(record, at.ToolResultRecord)]


def response(*calls: at.ToolCall, finish_reason: str = "tool_calls") -> at.StreamCompleted:
    return at.StreamCompleted(request_id="t1/r1", text="", finish_reason=finish_reason,
                              tool_calls=calls)


# --- 10b: the host's own rules about calls ----------------------------------------------------


@pytest.mark.req("TL-3", "TL-4")
def test_review_calls_marks_refusals_and_permissions_by_call_id() -> None:
    """``review_calls`` returns a new event with the named calls refused (with the host's
    reason) or needing permission, leaves the others and the original as they were, and
    returns the event itself when there is nothing to mark."""
    original = response(call("a", "serach"), call("b", "write_file"), call("c"))
    reviewed = at.review_calls(original, refuse={"a": "No tool named 'serach'."},
                               needs_permission=["b"])
    assert [(c.call_id, c.refusal, c.needs_permission) for c in reviewed.tool_calls] == [
        ("a", "No tool named 'serach'.", False), ("b", "", True), ("c", "", False)]
    assert all(not c.refusal and not c.needs_permission for c in original.tool_calls)
    assert (reviewed.request_id, reviewed.finish_reason) == ("t1/r1", "tool_calls")
    assert at.review_calls(original) is original


@pytest.mark.parametrize(("refuse", "needs_permission", "message"), [
    ({"x": "no"}, (), "review_calls(refuse=...) names call ids the response does not hold: x"),
    ({}, ("y",), "review_calls(needs_permission=...) names call ids the response does not "
                 "hold: y"),
    ({"a": "  "}, (), "review_calls(refuse=...)['a'] must be a non-empty str reason"),
])
def test_review_calls_refuses_unknown_ids_and_empty_reasons(
        refuse: dict[str, str], needs_permission: tuple[str, ...], message: str) -> None:
    """A call id the response does not hold, or an empty reason, raises a ``FieldError``
    naming the argument: a typo never lets a call the host meant to refuse run."""
    with pytest.raises(at.FieldError, match=re.escape(message)):
        at.review_calls(response(call("a")), refuse=refuse, needs_permission=needs_permission)


@pytest.mark.req("TL-4", "TL-1", "TL-5")
def test_a_refused_call_never_runs_and_the_model_reads_the_host_s_reason() -> None:
    """A refused call is never run nor asked about, even with ``needs_permission``: in the
    model's order its result is saved REFUSED with the host's reason, the next call runs, and
    the turn asks the model again with the results."""
    driver = Driver(no_titles())
    driver.start()
    guarded = at.ToolCall(call_id="a", name="rm", arguments="{}", needs_permission=True)
    driver.send(at.review_calls(response(guarded, call("b")),
                                refuse={"a": "rm needs a 'path' argument."}))
    driver.ack()  # the response
    assert not driver.of(at.ExecuteTool) and not driver.of(at.AskPermission)
    assert [(r.call_id, r.status, r.reason) for r in results(driver)] == [
        ("a", ToolResultStatus.REFUSED, "rm needs a 'path' argument.")]
    driver.ack()  # the refusal
    assert [c.call.call_id for c in driver.of(at.ExecuteTool)] == ["b"]
    driver.send(at.ToolFinished(call_id="b", output="ok"))
    driver.ack()
    assert driver.last(at.RequestModelStream) == at.RequestModelStream(request_id="t1/r2")


@pytest.mark.req("TL-9")
def test_a_refused_call_of_a_cut_response_is_recorded_as_cut() -> None:
    """A refusal does not outrank the output limit: a cut response's refused call is recorded
    not run for the cut, like every call of that response."""
    driver = Driver(no_titles())
    driver.start()
    driver.send(at.review_calls(response(call("a"), finish_reason="length"),
                                refuse={"a": "Unknown tool."}))
    driver.ack()
    assert [(r.status, r.reason) for r in results(driver)] == [
        (ToolResultStatus.SKIPPED, "Not run: the response was cut at the engine's output "
                                   "limit, so this call may be incomplete.")]


@pytest.mark.req("TL-4")
def test_a_refusal_is_in_the_trace_and_replays() -> None:
    """The refusal travels in the traced ``StreamCompleted``: a trace of the turn reads back
    with it and its replay gives the same commands."""
    driver = Driver(no_titles())
    events: list[at.Event] = [at.PromptSubmitted(turn_id="t1", message_id="m", text="go"),
                              at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
                              at.review_calls(response(call("a")), refuse={"a": "Not allowed."}),
                              at.Persisted(key="t1/p2"), at.Persisted(key="t1/p3")]
    steps = [(event, driver.send(event)) for event in events]
    trace = read_trace("\n".join(write_trace("turn", no_titles(), steps, "chat")))
    completed = trace.steps[3].event
    assert isinstance(completed, at.StreamCompleted)
    assert completed.tool_calls[0].refusal == "Not allowed."
    assert check(trace).ok


# --- 10c: a tool that ends the task -----------------------------------------------------------


def submitting(config: at.TurnConfig | None = None) -> Driver:
    """A response of a submit call and a read after it; the submit runs."""
    driver = Driver(config or no_titles())
    driver.start()
    driver.send(response(call("s", "submit"), call("r")))
    driver.ack()
    assert driver.last(at.ExecuteTool) == at.ExecuteTool(call=call("s", "submit"))
    return driver


@pytest.mark.req("TL-5", "TL-10")
def test_a_tool_that_ends_the_task_ends_the_turn_cleanly_after_its_result_is_saved() -> None:
    """A submit that ends the task: its result is saved EXECUTED first, the later call is
    recorded not run with that reason, no model request follows, and the turn ends
    ``ENDED_BY_TOOL`` (not resumable) with the raw finish reason kept."""
    driver = submitting()
    commands = driver.send(at.ToolFinished(call_id="s", output="submitted", ends_task=True))
    assert [type(c) for c in commands] == [at.Persist]
    assert [(r.call_id, r.status, r.output) for r in results(driver)] == [
        ("s", ToolResultStatus.EXECUTED, "submitted")]
    assert [type(c) for c in driver.ack()] == [at.Persist]
    assert [(r.call_id, r.status, r.reason) for r in results(driver)][1:] == [
        ("r", ToolResultStatus.SKIPPED, "Not run: an earlier call of this response ended the "
                                        "task.")]
    assert [type(c) for c in driver.ack()] == [at.EndTurn]
    end = driver.last(at.EndTurn)
    assert isinstance(end, at.EndTurn)
    assert end.outcome == at.TurnOutcome(kind=OutcomeKind.ENDED_BY_TOOL,
                                         finish_reason=at.FinishReason.of("tool_calls"),
                                         message="submit (s) ended the task.")
    assert len(driver.of(at.RequestModelStream)) == 1
    assert driver.state.phase is at.TurnPhase.IDLE


def test_ends_task_needs_a_tool_that_completed() -> None:
    """``ends_task`` with ``cancelled`` or ``error`` is refused on construction, naming the
    field."""
    for flag in ("cancelled", "error"):
        with pytest.raises(at.FieldError, match=r"ToolFinished\.ends_task"):
            at.ToolFinished(call_id="s", output="", ends_task=True, **{flag: True})


@pytest.mark.req("TL-8")
def test_after_stop_a_tool_ending_the_task_keeps_the_stop_outcome() -> None:
    """Stop came first: the submit's result is still saved EXECUTED, and the turn ends
    ``CANCELLED`` as the user asked."""
    driver = submitting()
    driver.send(at.StopPressed())
    driver.send(at.ToolFinished(call_id="s", output="submitted", ends_task=True))
    assert [(r.call_id, r.status) for r in results(driver)] == [
        ("s", ToolResultStatus.EXECUTED), ("r", ToolResultStatus.CANCELLED)]
    driver.ack()
    end = driver.last(at.EndTurn)
    assert isinstance(end, at.EndTurn) and end.outcome.kind is OutcomeKind.CANCELLED


@pytest.mark.req("LD-13", "SO-1")
def test_a_tool_ending_the_task_is_no_natural_stop_and_reports_saved_leads_unapplied() -> None:
    """With natural stops held for a stop order, a submit asks for no stop decision; a Lead
    saved meanwhile is reported saved and unapplied instead of starting another request."""
    driver = submitting(at.TurnConfig(auto_title=False, hold_natural_stops=True))
    driver.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="also add tests"),
                at.LeadSaved(lead_id="l1"))
    driver.send(at.ToolFinished(call_id="s", output="submitted", ends_task=True))
    driver.ack()
    driver.ack()
    assert not driver.of(at.DecideNaturalStop)
    assert at.LeadUnapplied(lead_id="l1") in driver.commands
    assert len(driver.of(at.RequestModelStream)) == 1
    end = driver.last(at.EndTurn)
    assert isinstance(end, at.EndTurn) and end.outcome.kind is OutcomeKind.ENDED_BY_TOOL


@pytest.mark.req("TL-4")
@pytest.mark.parametrize("arguments", [
    {"refuse": "c1"}, {"refuse": ["c1"]}, {"needs_permission": "c1"},
    {"needs_permission": None}, {"needs_permission": [["c1"]]}, {"needs_permission": [1]},
    {"refuse": {"c1": "\ud800 lone"}}, {"refuse": {"c1": None}},
], ids=["refuse-str", "refuse-list", "needs-str", "needs-none", "needs-nested", "needs-int",
        "reason-surrogate", "reason-none"])
def test_review_calls_refuses_bad_arguments_with_a_field_error(arguments: dict[str, Any]
                                                                ) -> None:
    """Bad arguments to ``review_calls`` raise ``FieldError`` naming the argument, never a
    plain ``TypeError``/``ValueError``, and a string is never read as its characters."""
    completed = at.StreamCompleted(request_id="t1/r1", text="", finish_reason="tool_calls",
                                   tool_calls=(at.ToolCall(call_id="c1", name="read_file"),))
    with pytest.raises(at.FieldError, match="review_calls"):
        at.review_calls(completed, **arguments)


@pytest.mark.req("TL-4")
@pytest.mark.parametrize("reason", ["   ", "\n", "\t \n"])
def test_a_blank_refusal_is_refused_when_the_call_is_built(reason: str) -> None:
    """A refusal the model would read as nothing is refused at construction, naming the
    field; "" means no refusal."""
    with pytest.raises(at.FieldError, match=r"ToolCall\.refusal"):
        at.ToolCall(call_id="c1", name="read_file", refusal=reason)
    assert at.ToolCall(call_id="c1", name="read_file", refusal="").refusal == ""
