"""The turn lifecycle, one requirement at a time (TL-1 ... TL-11)."""

from __future__ import annotations

import pytest
from driver import Driver, call, no_titles

import agentturn as at
from agentturn import OutcomeKind, ToolResultStatus


def ended(driver: Driver) -> at.TurnOutcome:
    end = driver.last(at.EndTurn)
    assert isinstance(end, at.EndTurn)
    return end.outcome


def results(driver: Driver) -> list[at.ToolResultRecord]:
    return [record for persist in driver.of(at.Persist) for record in persist.records  # type: ignore[attr-defined]
            if isinstance(record, at.ToolResultRecord)]


def run_round(driver: Driver, round_no: int) -> None:
    driver.open()
    driver.respond(text="", finish_reason="tool_calls", calls=[call(f"c{round_no}")])
    driver.ack()
    driver.send(at.ToolFinished(call_id=f"c{round_no}", output="ok"))
    driver.ack()


@pytest.mark.req("TL-1")
def test_a_turn_runs_any_number_of_rounds_until_the_model_finishes() -> None:
    """req: TL-1 — 300 tool rounds, then a text answer: the turn finishes, never capped."""
    driver = Driver(no_titles())
    driver.send(at.PromptSubmitted(turn_id="t1", message_id="m", text="scaffold the app"))
    driver.ack()
    for round_no in range(300):
        run_round(driver, round_no)
    driver.open()
    driver.respond(text="All files are in place.")
    driver.ack()
    assert len(driver.of(at.ExecuteTool)) == 300
    assert ended(driver).kind is OutcomeKind.FINISHED
    assert driver.state.phase is at.TurnPhase.IDLE


@pytest.mark.req("TL-1")
def test_state_size_does_not_grow_with_rounds() -> None:
    """req: TL-1 — after 10,000 tool rounds the state holds what it held after 10."""
    driver = Driver(no_titles())
    driver.send(at.PromptSubmitted(turn_id="t1", message_id="m", text="go"))
    driver.ack()
    sizes = {}
    for round_no in range(10_000):
        run_round(driver, round_no)
        if round_no + 1 in (10, 10_000):
            sizes[round_no + 1] = deep_size(driver.state)
        del driver.commands[:-1]  # the driver's log, not the state, is what would grow
    assert driver.state.phase is at.TurnPhase.AWAITING_STREAM
    assert sizes[10] == sizes[10_000]


def deep_size(value: object, seen: set[int] | None = None) -> int:
    """The bytes held by ``value`` and everything it references (shared objects once)."""
    import enum
    import sys

    import attrs

    seen = set() if seen is None else seen
    if id(value) in seen or isinstance(value, enum.Enum | type):
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            size += deep_size(getattr(value, field.name), seen)
    elif isinstance(value, tuple | list):
        size += sum(deep_size(item, seen) for item in value)
    return size


@pytest.mark.req("TL-1")
def test_a_host_may_opt_in_to_an_action_budget() -> None:
    """req: TL-1 — there is no budget by default; with max_requests=2 the third request ends
    the turn with an explicit ACTION_BUDGET outcome."""
    assert at.TurnConfig().max_requests is None
    driver = Driver(at.TurnConfig(max_requests=2, auto_title=False))
    driver.send(at.PromptSubmitted(turn_id="t1", message_id="m", text="go"))
    driver.ack()
    run_round(driver, 1)
    run_round(driver, 2)
    assert len(driver.of(at.RequestModelStream)) == 2
    assert ended(driver).kind is OutcomeKind.ACTION_BUDGET
    assert "limit of 2 model requests" in ended(driver).message


@pytest.mark.req("TL-2")
def test_every_request_goes_through_budgeting_before_a_stream_opens() -> None:
    """req: TL-2 — the stream is asked for with RequestModelStream (budget, then open); events
    for the stream are refused until StreamOpened says the budgeting step passed."""
    driver = Driver(no_titles())
    driver.send(at.PromptSubmitted(turn_id="t1", message_id="m", text="go"))
    driver.ack()
    assert driver.state.phase is at.TurnPhase.AWAITING_STREAM
    with pytest.raises(at.UnexpectedEvent):
        driver.send(at.StreamCompleted(request_id="t1/r1", text="x", finish_reason="stop"))


@pytest.mark.req("TL-2")
@pytest.mark.parametrize(
    ("event", "kind"),
    [
        (at.CompactionFailed(request_id="t1/r1", reason="summary too long"),
         OutcomeKind.COMPACTION_FAILED),
        (at.TokenLimitRejected(request_id="t1/r1", reason="210k > 200k tokens"),
         OutcomeKind.TOKEN_LIMIT),
    ],
)
def test_budgeting_failures_end_the_request_with_their_own_outcome(
    event: at.Event, kind: OutcomeKind
) -> None:
    """req: TL-2 — a compaction failure or token-limit rejection ends the turn before a stream
    opens, each with its own outcome and its reason in the message."""
    driver = Driver(no_titles())
    driver.send(at.PromptSubmitted(turn_id="t1", message_id="m", text="go"))
    driver.ack()
    driver.send(event)
    outcome = ended(driver)
    assert outcome.kind is kind
    assert event.reason in outcome.message  # type: ignore[attr-defined]
    assert outcome.finish_reason is None
    assert driver.state.phase is at.TurnPhase.IDLE


def start_with_permission_call(driver: Driver) -> None:
    driver.start()
    driver.respond(text="", finish_reason="tool_calls",
                   calls=[call("w1", "write_file", permission=True), call("r2")])
    driver.ack()


@pytest.mark.req("TL-3")
def test_a_call_that_needs_permission_runs_only_after_an_explicit_allow() -> None:
    """req: TL-3 — AskPermission first; ExecuteTool only after ALLOW."""
    driver = Driver(no_titles())
    start_with_permission_call(driver)
    assert driver.of(at.AskPermission) and not driver.of(at.ExecuteTool)
    commands = driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW))
    assert commands == (at.ExecuteTool(call=call("w1", "write_file", permission=True)),)


@pytest.mark.req("TL-3")
def test_deny_gives_the_model_a_denied_result_and_the_turn_goes_on() -> None:
    """req: TL-3 — DENY persists a DENIED record and the next call runs."""
    driver = Driver(no_titles())
    start_with_permission_call(driver)
    driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.DENY))
    assert results(driver)[0].status is ToolResultStatus.DENIED
    driver.ack()
    assert driver.last(at.ExecuteTool) == at.ExecuteTool(call=call("r2"))


@pytest.mark.req("TL-3")
def test_cancelling_the_permission_request_cancels_the_turn() -> None:
    """req: TL-3 — CANCEL records both calls as cancelled and ends the turn CANCELLED."""
    driver = Driver(no_titles())
    start_with_permission_call(driver)
    driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.CANCEL))
    driver.ack()
    assert [r.status for r in results(driver)] == [ToolResultStatus.CANCELLED] * 2
    assert ended(driver).kind is OutcomeKind.CANCELLED
    assert not driver.of(at.ExecuteTool)


@pytest.mark.req("TL-3")
def test_a_client_disconnect_never_counts_as_an_allow() -> None:
    """req: TL-3 — a disconnect while permission is pending changes nothing and runs nothing."""
    driver = Driver(no_titles())
    start_with_permission_call(driver)
    before = driver.state
    assert driver.send(at.ClientDisconnected()) == ()
    assert driver.state == before
    assert driver.state.phase is at.TurnPhase.AWAITING_PERMISSION
    assert not driver.of(at.ExecuteTool)


@pytest.mark.req("TL-4")
def test_tools_run_one_at_a_time_in_the_models_order() -> None:
    """req: TL-4 — the second call starts only after the first one's result is saved."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("a"), call("b"), call("c")])
    driver.ack()
    for current, following in (("a", "b"), ("b", "c")):
        assert driver.last(at.ExecuteTool) == at.ExecuteTool(call=call(current))
        assert driver.send(at.ToolFinished(call_id=current, output="ok"))[0].__class__ is at.Persist
        with pytest.raises(at.UnexpectedEvent):
            driver.send(at.ToolFinished(call_id=following, output="too early"))
        driver.ack()
    assert [c.call.call_id for c in driver.of(at.ExecuteTool)] == ["a", "b", "c"]  # type: ignore[attr-defined]


@pytest.mark.req("TL-5")
def test_persistence_barriers_wait_for_explicit_acknowledgements() -> None:
    """req: TL-5 — prompt saved before the request; response saved before its tools; each result
    saved before the next request; a wrong or missing ack is never assumed."""
    driver = Driver(no_titles())
    first = driver.send(at.PromptSubmitted(turn_id="t1", message_id="m", text="go"))
    assert [type(c) for c in first] == [at.Persist]
    with pytest.raises(at.UnknownId):
        driver.send(at.Persisted(key="t1/p9"))
    assert driver.ack() == (at.RequestModelStream(request_id="t1/r1"),)
    driver.open()
    after_response = driver.respond(finish_reason="tool_calls", calls=[call("a")])
    assert [type(c) for c in after_response] == [at.Persist]
    assert driver.ack() == (at.ExecuteTool(call=call("a")),)
    after_tool = driver.send(at.ToolFinished(call_id="a", output="ok"))
    assert [type(c) for c in after_tool] == [at.Persist]
    assert driver.ack() == (at.RequestModelStream(request_id="t1/r2"),)


@pytest.mark.req("TL-6")
def test_one_corrective_retry_after_a_malformed_tool_format() -> None:
    """req: TL-6 — the first malformed response gets one corrective retry; its calls are
    recorded as skipped, never run."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("bad")], malformed=True)
    driver.ack()
    assert results(driver)[0].status is ToolResultStatus.SKIPPED
    driver.ack()
    assert driver.last(at.RequestModelStream) == at.RequestModelStream(
        request_id="t1/r2", corrective=True)
    assert not driver.of(at.ExecuteTool)


@pytest.mark.req("TL-6")
def test_a_second_malformed_response_in_a_row_ends_the_turn() -> None:
    """req: TL-6 — two malformed responses in a row end the turn with that error surfaced."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", malformed=True)
    driver.ack()
    driver.open()
    driver.respond(finish_reason="tool_calls", malformed=True)
    driver.ack()
    outcome = ended(driver)
    assert outcome.kind is OutcomeKind.MALFORMED_TOOL_FORMAT
    assert "malformed tool calls twice in a row" in outcome.message


@pytest.mark.req("TL-6")
def test_a_well_formed_response_resets_the_retry_allowance() -> None:
    """req: TL-6 — malformed, good, malformed: the second malformed one gets a retry again."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", malformed=True)
    driver.ack()
    driver.open()
    driver.respond(finish_reason="tool_calls", calls=[call("a")])
    driver.ack()
    driver.send(at.ToolFinished(call_id="a", output="ok"))
    driver.ack()
    driver.open()
    driver.respond(finish_reason="tool_calls", malformed=True)
    driver.ack()
    assert driver.last(at.RequestModelStream) == at.RequestModelStream(
        request_id="t1/r4", corrective=True)
    assert not driver.of(at.EndTurn)


@pytest.mark.req("TL-7")
@pytest.mark.parametrize("text", ["", "  \n\t"])
def test_an_empty_final_response_is_surfaced_as_empty(text: str) -> None:
    """req: TL-7 — no text and no tool calls ends the turn EMPTY_RESPONSE, not FINISHED."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(text=text, finish_reason="stop")
    driver.ack()
    outcome = ended(driver)
    assert outcome.kind is OutcomeKind.EMPTY_RESPONSE
    assert outcome.message == "The model ended its turn without any text or tool call."


@pytest.mark.req("TL-8")
def test_stop_while_streaming_cancels_the_stream_and_says_so() -> None:
    """req: TL-8 — Stop during a stream: CancelStream, then EndTurn(CANCELLED)."""
    driver = Driver(no_titles())
    driver.start()
    commands = driver.send(at.StopPressed())
    assert commands[0] == at.CancelStream(request_id="t1/r1")
    assert isinstance(commands[-1], at.EndTurn)
    assert commands[-1].outcome.kind is OutcomeKind.CANCELLED
    assert commands[-1].outcome.message == "Stopped by the user."


@pytest.mark.req("TL-8")
def test_stop_while_a_tool_runs_waits_for_its_result_and_records_the_rest() -> None:
    """req: TL-8 — Stop during a tool: CancelTool; the tool's own result is kept, the unstarted
    call is recorded cancelled, then the turn ends CANCELLED."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("a"), call("b")])
    driver.ack()
    assert driver.send(at.StopPressed()) == (at.CancelTool(call_id="a"),)
    assert driver.send(at.StopPressed()) == ()
    driver.send(at.ToolFinished(call_id="a", output="partial", cancelled=True))
    driver.ack()
    assert [(r.call_id, r.status) for r in results(driver)] == [
        ("a", ToolResultStatus.CANCELLED), ("b", ToolResultStatus.CANCELLED)]
    assert results(driver)[0].output == "partial"
    assert ended(driver).kind is OutcomeKind.CANCELLED


@pytest.mark.req("TL-8")
def test_stop_when_no_turn_runs_changes_nothing() -> None:
    """req: TL-8 — Stop while idle is harmless: no command, same state."""
    driver = Driver(no_titles())
    before = driver.state
    assert driver.send(at.StopPressed()) == ()
    assert driver.state == before


@pytest.mark.req("TL-9")
def test_no_tool_call_of_a_truncated_response_is_executed() -> None:
    """req: TL-9 — finish reason 'length' with calls: none runs, each is recorded skipped with
    the reason, and the turn ends OUTPUT_LIMIT telling the user why."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(text="Writing the file", finish_reason="length",
                   calls=[call("w1", "write_file"), call("w2", "write_file")])
    driver.ack()
    driver.ack()
    assert not driver.of(at.ExecuteTool)
    assert {r.status for r in results(driver)} == {ToolResultStatus.SKIPPED}
    assert "output limit" in results(driver)[0].reason
    outcome = ended(driver)
    assert outcome.kind is OutcomeKind.OUTPUT_LIMIT
    assert outcome.message == ("The response was cut at the engine's output limit (finish "
                               "reason 'length'); its 2 tool call(s) were not run.")


@pytest.mark.req("TL-9")
def test_an_output_limit_without_calls_is_surfaced_too() -> None:
    """req: TL-9 — 'max_tokens' and no calls: OUTPUT_LIMIT, not FINISHED."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(text="The answer is", finish_reason="max_tokens")
    driver.ack()
    assert ended(driver).kind is OutcomeKind.OUTPUT_LIMIT


@pytest.mark.req("TL-10")
@pytest.mark.parametrize(
    ("raw", "kind"),
    [("end_turn", at.FinishKind.STOP), ("MAX_TOKENS", at.FinishKind.LENGTH),
     ("tool_use", at.FinishKind.TOOL_CALLS), ("eos_token_42", at.FinishKind.OTHER)],
)
def test_the_finish_reason_survives_unchanged_on_record_and_outcome(
    raw: str, kind: at.FinishKind
) -> None:
    """req: TL-10 — the raw string is kept on the response record and on the outcome; an unknown
    one is typed OTHER, never a crash."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(text="Done.", finish_reason=raw)
    driver.ack()
    response = driver.of(at.Persist)[1].records[0]  # type: ignore[attr-defined]
    assert response.finish_reason == at.FinishReason(kind=kind, raw=raw)
    assert ended(driver).finish_reason == at.FinishReason(kind=kind, raw=raw)


@pytest.mark.req("TL-11")
def test_an_error_ends_the_request_and_the_turn_can_be_continued() -> None:
    """req: TL-11 — StreamFailed ends the turn ERROR (resumable, error surfaced); ContinueTurn
    asks for a new stream in the same turn, which then finishes normally."""
    driver = Driver(no_titles())
    driver.start()
    driver.send(at.StreamFailed(request_id="t1/r1", error="connection reset"))
    outcome = ended(driver)
    assert outcome.kind is OutcomeKind.ERROR and outcome.resumable
    assert "connection reset" in outcome.message
    assert driver.send(at.ContinueTurn(turn_id="t1")) == (
        at.RequestModelStream(request_id="t1/r2"),)
    driver.open()
    driver.respond(text="Recovered.")
    driver.ack()
    assert ended(driver).kind is OutcomeKind.FINISHED


@pytest.mark.req("TL-11")
def test_a_failed_write_keeps_its_records_for_the_continue() -> None:
    """req: TL-11, TL-5 — PersistFailed on a tool result ends the turn with a resumable error;
    ContinueTurn writes the same record again and the turn goes on; nothing is lost."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("a")])
    driver.ack()
    driver.send(at.ToolFinished(call_id="a", output="42"))
    failed = driver.last(at.Persist)
    driver.send(at.PersistFailed(key=failed.key, reason="disk full"))  # type: ignore[attr-defined]
    assert ended(driver).kind is OutcomeKind.ERROR
    retried = driver.send(at.ContinueTurn(turn_id="t1"))
    assert retried[0].records == failed.records  # type: ignore[attr-defined]
    assert driver.ack() == (at.RequestModelStream(request_id="t1/r2"),)


def test_continue_is_refused_when_the_turn_did_not_end_with_an_error() -> None:
    """ContinueTurn after a normal finish is host misuse: ProtocolError, nothing changes."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(text="Done.")
    driver.ack()
    before = driver.state
    with pytest.raises(at.ProtocolError):
        driver.send(at.ContinueTurn(turn_id="t1"))
    assert driver.state == before


# --- regressions found by review (issue 8) ----------------------------------------------------


@pytest.mark.req("TL-5", "TL-8")
def test_stop_then_a_failed_save_keeps_every_tool_result() -> None:
    """req: TL-5, TL-8 — c1 ran, Stop arrives while its result is being saved, and that save
    fails: c1's executed output and a result for c2 and c3 (CANCELLED, with the stop's reason)
    are owed and written first by the next prompt; each call ends with exactly one result
    record."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("c1"), call("c2"), call("c3")])
    driver.ack()
    driver.send(at.ToolFinished(call_id="c1", output="c1 output"))
    failing = driver.last(at.Persist)
    driver.send(at.StopPressed())
    driver.send(at.PersistFailed(key=failing.key, reason="disk full"))  # type: ignore[attr-defined]
    outcome = ended(driver)
    assert outcome.kind is OutcomeKind.CANCELLED
    assert "will be saved before the next prompt" in outcome.message
    first = driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="again"))
    persist = first[0]
    assert isinstance(persist, at.Persist)
    owed = [(r.call_id, r.status, r.output, r.reason) for r in persist.records
            if isinstance(r, at.ToolResultRecord)]
    stopped = "Cancelled: the user stopped the turn."
    assert owed == [("c1", ToolResultStatus.EXECUTED, "c1 output", ""),
                    ("c2", ToolResultStatus.CANCELLED, "", stopped),
                    ("c3", ToolResultStatus.CANCELLED, "", stopped)]
    assert isinstance(persist.records[-1], at.UserMessageRecord)


@pytest.mark.req("TL-9", "TL-6")
def test_a_truncated_malformed_response_is_an_output_limit_at_once() -> None:
    """req: TL-9, TL-6 — finish reason ``length`` with a malformed call ends the turn
    OUTPUT_LIMIT at once: no corrective retry is spent, the call is recorded as not run."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="length", calls=[call("w1", "write_file")], malformed=True)
    driver.ack()
    driver.ack()  # the skipped call's result record
    assert ended(driver).kind is OutcomeKind.OUTPUT_LIMIT
    assert not [r for r in driver.of(at.RequestModelStream) if r.corrective]  # type: ignore[attr-defined]
    assert [(r.call_id, r.status) for r in results(driver)] == [
        ("w1", ToolResultStatus.SKIPPED)]


@pytest.mark.req("TL-9")
@pytest.mark.parametrize(("raw", "kind"), [
    ("model_context_window_exceeded", OutcomeKind.OUTPUT_LIMIT),
    ("incomplete", OutcomeKind.OUTPUT_LIMIT),
    ("MAX_TOKENS", OutcomeKind.OUTPUT_LIMIT),
    ("SAFETY", OutcomeKind.CONTENT_FILTERED),
    ("guardrail_intervened", OutcomeKind.CONTENT_FILTERED),
    ("pause_turn", OutcomeKind.UNRECOGNIZED_FINISH),
    ("FINISH_REASON_UNSPECIFIED", OutcomeKind.UNRECOGNIZED_FINISH),
    ("eos_token_42", OutcomeKind.UNRECOGNIZED_FINISH),
])
def test_only_a_normal_completion_runs_its_tools(raw: str, kind: OutcomeKind) -> None:
    """req: TL-9, TL-10 — a cut-off, a safety stop or an unknown finish reason never runs a
    half-written call: the turn ends with its own outcome and the raw reason kept."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason=raw, calls=[call("w1", "write_file")])
    driver.ack()
    driver.ack()  # the skipped call's result record
    assert not driver.of(at.ExecuteTool)
    outcome = ended(driver)
    assert outcome.kind is kind and outcome.finish_reason is not None
    assert outcome.finish_reason.raw == raw
    assert [(r.call_id, r.status) for r in results(driver)] == [
        ("w1", ToolResultStatus.SKIPPED)]


@pytest.mark.req("TL-9")
def test_a_host_names_its_engines_finish_reasons() -> None:
    """req: TL-9 — ``TurnConfig(finish_reasons=...)`` lets an engine's own reason run tools (or
    cut them off); keys are matched case-insensitively and bad values are refused by field."""
    config = at.TurnConfig(auto_title=False, finish_reasons={
        "Done_Calling": at.FinishKind.TOOL_CALLS, "stop": at.FinishKind.OTHER})
    driver = Driver(config)
    driver.start()
    assert driver.respond(finish_reason="DONE_CALLING", calls=[call("a")])
    assert driver.ack() == (at.ExecuteTool(call=call("a")),)
    driver.send(at.ToolFinished(call_id="a", output="x"))
    driver.ack()
    driver.open()
    driver.respond(text="hm", finish_reason="stop")  # overridden: no longer a normal stop
    driver.ack()
    assert ended(driver).kind is OutcomeKind.UNRECOGNIZED_FINISH
    with pytest.raises(at.FieldError, match="finish_reasons"):
        at.TurnConfig(finish_reasons={"x": "stop"})  # type: ignore[dict-item]
    assert hash(config) == hash(at.TurnConfig(
        auto_title=False, finish_reasons={"stop": at.FinishKind.OTHER,
                                          "done_calling": at.FinishKind.TOOL_CALLS}))


@pytest.mark.req("TL-8")
def test_a_stream_that_completes_as_stop_is_pressed_is_absorbed() -> None:
    """req: TL-8 — the engine's last events for a request cancelled by Stop arrive after the
    turn ended (a race real hosts see): absorbed with a notice, the ended turn is untouched, and
    a second StreamOpened for a live request is still misuse."""
    driver = Driver(no_titles())
    driver.start()
    driver.send(at.StopPressed())
    idle = driver.state
    late = driver.send(at.StreamCompleted(request_id="t1/r1", text="x", finish_reason="stop"))
    assert late == (at.StaleAnswerIgnored(event="StreamCompleted", answer_id="t1/r1",
                                          reason="the request was cancelled"),)
    assert driver.state is idle
    driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="go"))
    driver.ack()
    driver.open()
    with pytest.raises(at.ProtocolError):
        driver.open()


@pytest.mark.req("TL-1", "TL-5")
def test_a_host_can_decide_each_natural_stop() -> None:
    """req: TL-1, TL-5 — with ``hold_natural_stops`` the turn asks at a natural stop; a
    continuation is saved as a user message before the next request includes it; ending
    gives the usual outcome; a decision for another request is misuse."""
    driver = Driver(at.TurnConfig(auto_title=False, hold_natural_stops=True))
    driver.start()
    driver.respond(text="All done.")
    assert driver.ack() == (at.DecideNaturalStop(turn_id="t1", request_id="t1/r1", empty=False),)
    assert at.outstanding(driver.state) == (
        at.Outstanding(command=at.DecideNaturalStop, answer_id="t1/r1"),)
    with pytest.raises(at.UnknownId):
        driver.send(at.NaturalStopDecided(request_id="t1/r9"))
    saved = driver.send(at.NaturalStopDecided(request_id="t1/r1", message_id="hook-1",
                                              text="Stop hook: tests still fail."))
    assert saved == (at.Persist(key="t1/p3", records=(
        at.UserMessageRecord(message_id="hook-1", text="Stop hook: tests still fail."),)),)
    assert driver.ack() == (at.RequestModelStream(request_id="t1/r2"),)
    driver.open()
    driver.respond(text="")
    assert driver.ack() == (at.DecideNaturalStop(turn_id="t1", request_id="t1/r2", empty=True),)
    driver.send(at.NaturalStopDecided(request_id="t1/r2"))
    assert ended(driver).kind is OutcomeKind.EMPTY_RESPONSE


@pytest.mark.req("SG-S3")
def test_the_host_can_halt_a_turn_with_its_own_reason() -> None:
    """req: SG-S3 — HardStopped while a tool runs: the tool is asked to cancel, its result kept,
    and the turn ends HALTED with the host's reason; with no turn it changes nothing."""
    driver = Driver(no_titles())
    assert driver.send(at.HardStopped(reason="x")) == ()
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("a"), call("b")])
    driver.ack()
    assert driver.send(at.HardStopped(reason="Loop protection: the same call repeated.")) == (
        at.CancelTool(call_id="a"),)
    driver.send(at.ToolFinished(call_id="a", output="partial", cancelled=True))
    driver.ack()
    outcome = ended(driver)
    assert outcome.kind is OutcomeKind.HALTED
    assert outcome.message == "Loop protection: the same call repeated."
    assert [(r.call_id, r.status) for r in results(driver)] == [
        ("a", ToolResultStatus.CANCELLED), ("b", ToolResultStatus.SKIPPED)]
