"""Behaviour sampled mutation runs of the turn and session reducers found unchecked.

See benchmarks/EVIDENCE.md ("Item 5: mutation testing"): four disjoint uniform random samples
of the mutants of ``agentturn/turn.py`` and ``agentturn/session/reducer.py`` were run, and each
survivor either got a test here or was shown equivalent. Each test names the rule it pins and
the surviving mutants it kills. They use the public API only: real events, the states and
commands that come back, the exact texts and reasons, and the particulars of a
``ProtocolError``.
"""

from __future__ import annotations

import enum
import typing
from typing import Any

import attrs
import pytest
from driver import Driver, call, no_titles
from session_host import Host, say, todo_call, todos

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn.records import ToolResultStatus

STOPPED = "Cancelled: the user stopped the turn."


def results(driver: Driver) -> list[at.ToolResultRecord]:
    """Every tool-result record the turn asked to save, in order."""
    return [record for persist in driver.of(at.Persist) for record in persist.records  # type: ignore[attr-defined]
            if isinstance(record, at.ToolResultRecord)]


def refused(error: at.ProtocolError) -> tuple[object, ...]:
    """The particulars of a refusal: its class, part, phase, event and what was expected."""
    return (type(error), error.part, error.phase, error.event, error.expected)


# --- the turn: late answers and misuse ----------------------------------------------------------


def _stopped_then_restarted() -> Driver:
    """Turn t1's stream t1/r1 is cancelled by Stop; turn t2 then waits for its own t2/r1."""
    driver = Driver(no_titles())
    driver.start()
    driver.send(at.StopPressed())
    driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="again"))
    driver.ack()
    assert driver.state.phase is at.TurnPhase.AWAITING_STREAM
    return driver


@pytest.mark.req("TL-8")
def test_a_cancelled_requests_stream_events_are_absorbed_while_a_new_request_runs() -> None:
    """The engine's events for a request Stop cancelled may arrive after the next turn has
    asked for its own stream: each gives one ``StaleAnswerIgnored`` naming the event, the
    cancelled request and why, and the running turn is left exactly as it was. Kills the
    mutants that hand ``None`` to ``_is_late`` in ``_on_stream_opened`` and
    ``_on_stream_completed``, or to ``_late_answer``/``_absorb`` in ``_is_late``."""
    driver = _stopped_then_restarted()
    waiting = driver.state
    assert driver.send(at.StreamOpened(request_id="t1/r1")) == (
        at.StaleAnswerIgnored(event="StreamOpened", answer_id="t1/r1",
                              reason="the request was cancelled"),)
    assert driver.state is waiting
    driver.open()
    streaming = driver.state
    for late in (at.StreamCompleted(request_id="t1/r1", text="x", finish_reason="stop"),
                 at.StreamFailed(request_id="t1/r1", error="reset")):
        assert driver.send(late) == (
            at.StaleAnswerIgnored(event=type(late).__name__, answer_id="t1/r1",
                                  reason="the request was cancelled"),)
        assert driver.state is streaming


@pytest.mark.req("TL-8")
def test_a_stream_event_for_a_request_never_issued_is_refused_with_its_particulars() -> None:
    """An id the turn never issued is misuse, not a late answer: ``UnknownId`` from the turn,
    naming the phase, the event itself and the request the turn waits on (kills ``part=None``
    in ``_unknown`` and the mutants that lose the event on the way)."""
    driver = _stopped_then_restarted()
    for event in (at.StreamOpened(request_id="t9/r9"),
                  at.StreamCompleted(request_id="t9/r9", text="", finish_reason="stop")):
        if isinstance(event, at.StreamCompleted):
            driver.open()
        with pytest.raises(at.UnknownId) as raised:
            driver.send(event)
        phase = "AWAITING_STREAM" if isinstance(event, at.StreamOpened) else "STREAMING"
        assert refused(raised.value) == (at.UnknownId, "turn", phase, event,
                                         "an event for request 't2/r1'")


@pytest.mark.req("TL-11")
def test_continue_without_a_resumable_error_is_refused_with_its_particulars() -> None:
    """``ContinueTurn`` after a normal finish, or naming another turn after an error, is
    refused by the turn with the event itself and what it would have taken (kills the mutant
    that reports ``event=None``)."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(text="Done.")
    driver.ack()
    event = at.ContinueTurn(turn_id="t1")
    with pytest.raises(at.UnknownId) as raised:
        driver.send(event)
    expected = "ContinueTurn for the turn that ended with a resumable error"
    assert refused(raised.value) == (at.UnknownId, "turn", "IDLE", event, expected)
    driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="go"))
    driver.ack()
    driver.open()
    driver.send(at.StreamFailed(request_id="t2/r1", error="reset"))
    other = at.ContinueTurn(turn_id="t1")
    with pytest.raises(at.UnknownId) as raised:
        driver.send(other)
    assert refused(raised.value) == (at.UnknownId, "turn", "IDLE", other, expected)


def test_an_object_that_is_no_agentturn_event_is_refused_with_its_particulars() -> None:
    """Anything that is not one of agentturn's events: ``UnexpectedEvent`` naming the part, the
    phase, the object and exactly "an agentturn event" (kills the upper-cased text). STYLE 6:
    no requirement ID of REQUIREMENTS.md covers host misuse."""
    stranger = object()
    with pytest.raises(at.UnexpectedEvent) as raised:
        at.reduce(at.TurnState.create("chat", no_titles()), stranger)
    assert refused(raised.value) == (at.UnexpectedEvent, "turn", "IDLE", stranger,
                                     "an agentturn event")


def _two_writes_awaiting_permission(config: at.TurnConfig | None = None) -> Driver:
    """A response of two calls that each need permission; the turn asks about ``w1``."""
    driver = Driver(config or no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("w1", "write_file", permission=True),
                                                      call("w2", "write_file", permission=True)])
    driver.ack()
    assert driver.state.phase is at.TurnPhase.AWAITING_PERMISSION
    return driver


@pytest.mark.req("TL-3")
def test_a_second_decision_for_a_decided_call_is_absorbed_and_says_so() -> None:
    """A permission decision repeated for a call already allowed, whether that call still runs
    or the next call now waits for its own decision, is absorbed with the exact reason "this
    call was already decided" and changes nothing."""
    driver = _two_writes_awaiting_permission()
    allow = at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW)
    notice = at.StaleAnswerIgnored(event="PermissionDecided", answer_id="w1",
                                   reason="this call was already decided")
    driver.send(allow)
    running = driver.state
    assert driver.send(allow) == (notice,)
    assert driver.state is running
    driver.send(at.ToolFinished(call_id="w1", output="written"))
    driver.ack()
    asking = driver.state
    assert asking.phase is at.TurnPhase.AWAITING_PERMISSION
    assert driver.send(allow) == (notice,)
    assert driver.state is asking


# --- the turn: what Stop records -----------------------------------------------------------------


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
@pytest.mark.parametrize(("decision", "phase"), [
    (at.PermissionDecision.ALLOW, "RUNNING_TOOL"), (at.PermissionDecision.DENY, "SAVING_RESULTS")],
    ids=["allowed", "denied"])
def test_a_decision_for_a_call_not_asked_about_yet_is_refused_while_a_tool_runs(
        decision: at.PermissionDecision, phase: str) -> None:
    """While the allowed ``w1`` runs, or the denied ``w1``'s record is being saved, a decision
    for ``w2`` answers a question the turn has not asked: misuse, refused as an event the phase
    does not take, and nothing changes. Only the running call counts as decided, and with no
    call running only those before ``next_call`` (kills ``next_call + 2`` in ``_late_answer``,
    and ``next_call + 1`` taken whether a tool runs or not)."""
    driver = _two_writes_awaiting_permission()
    driver.send(at.PermissionDecided(call_id="w1", decision=decision))
    running = driver.state
    early = at.PermissionDecided(call_id="w2", decision=at.PermissionDecision.ALLOW)
    with pytest.raises(at.UnexpectedEvent) as raised:
        driver.send(early)
    assert refused(raised.value)[:4] == (at.UnexpectedEvent, "turn", phase, early)
    assert driver.state is running


@pytest.mark.req("TL-3")
def test_a_decision_for_a_call_never_asked_about_is_refused_naming_the_asked_call() -> None:
    """A decision naming a call of no response, while the turn asks about ``w1``:
    ``UnknownId`` expecting exactly "a decision for call 'w1'" (kills the text for a stream
    event given instead)."""
    driver = _two_writes_awaiting_permission()
    stranger = at.PermissionDecided(call_id="zz", decision=at.PermissionDecision.ALLOW)
    with pytest.raises(at.UnknownId) as raised:
        driver.send(stranger)
    assert refused(raised.value) == (at.UnknownId, "turn", "AWAITING_PERMISSION", stranger,
                                     "a decision for call 'w1'")


@pytest.mark.req("TL-3")
def test_a_cancelled_permission_request_cancels_the_turn_with_the_exact_message() -> None:
    """Cancelling the permission request for ``w1`` cancels the turn: its outcome says exactly
    "The permission request was cancelled, so the turn was cancelled." (kills the lower-cased
    text)."""
    driver = _two_writes_awaiting_permission()
    driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.CANCEL))
    driver.ack()
    [end] = driver.of(at.EndTurn)
    assert (end.outcome.kind, end.outcome.message) == (
        at.OutcomeKind.CANCELLED, "The permission request was cancelled, so the turn was "
                                  "cancelled.")


@pytest.mark.parametrize(("wrong", "name"), [(None, "NoneType"), (no_titles(), "TurnConfig")],
                         ids=["None", "a config"])
def test_a_state_that_is_no_turn_state_is_refused_with_its_particulars(
        wrong: object, name: str) -> None:
    """``None``, or a turn's config, handed to the turn's reducer as its state: ``WrongState``
    naming the turn, what it got and what it takes, never a ``TypeError`` (kills the check
    against ``None``, and ``None`` checked in place of the state given). STYLE 6: host misuse
    has no requirement ID."""
    with pytest.raises(at.WrongState) as raised:
        at.reduce(wrong, PROMPT)  # type: ignore[arg-type]
    assert refused(raised.value) == (at.WrongState, "turn", f"<not a TurnState: {name}>",
                                     PROMPT, "a TurnState as the state")


@pytest.mark.req("TL-3")
def test_a_denied_call_is_recorded_under_its_id_with_the_exact_reason() -> None:
    """Deny, twice: each call is saved DENIED under its own id and name, with no output and
    exactly "Denied: the user did not allow this call.", the turn asks about each call once,
    then sends the results to the model (kills ``call_id=None``, the dropped and the
    upper-cased reason, and ``next_call - 1``)."""
    driver = _two_writes_awaiting_permission()
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
    driver = _two_writes_awaiting_permission(at.TurnConfig(
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


@pytest.mark.req("TL-4")
def test_a_tool_result_the_turn_does_not_wait_for_is_refused_with_what_it_waits_on() -> None:
    """A result naming another call while ``c1`` runs, and a result after Stop while only a
    write is in flight: ``UnknownId`` from the turn with the exact text of what it waits on."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("c1"), call("c2")])
    driver.ack()
    wrong = at.ToolFinished(call_id="c2", output="x")
    with pytest.raises(at.UnknownId) as raised:
        driver.send(wrong)
    assert refused(raised.value) == (at.UnknownId, "turn", "RUNNING_TOOL", wrong,
                                     "the result of the running call 'c1'")
    driver.send(at.ToolFinished(call_id="c1", output="done"), at.StopPressed())
    again = at.ToolFinished(call_id="c1", output="again")
    with pytest.raises(at.UnknownId) as raised:
        driver.send(again)
    assert refused(raised.value) == (at.UnknownId, "turn", "ENDING", again,
                                     "the result of the running call")


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


def test_a_stop_decision_for_another_request_is_refused_naming_the_awaited_one() -> None:
    """A host that holds natural stops answers for a request that is not the one stopping:
    ``UnknownId`` expecting exactly "the decision for the stop of 't1/r1'" (kills
    ``expected=None``). STYLE 6: host misuse has no requirement ID. The right request's
    decision with a continuation is then saved and asked for, the turn's shape kept at every
    step (kills ``next_step=None`` stored while the continuation is saved)."""
    driver = CheckedDriver(at.TurnConfig(auto_title=False, hold_natural_stops=True))
    driver.start()
    driver.respond(text="Done.")
    driver.ack()
    wrong = at.NaturalStopDecided(request_id="t1/r9")
    with pytest.raises(at.UnknownId) as raised:
        driver.send(wrong)
    assert refused(raised.value) == (at.UnknownId, "turn", "AWAITING_STOP_DECISION", wrong,
                                     "the decision for the stop of 't1/r1'")
    driver.send(at.NaturalStopDecided(request_id="t1/r1", message_id="c1", text="Go on."))
    assert driver.state.phase is at.TurnPhase.SAVING_PROMPT
    assert driver.ack() == (at.RequestModelStream(request_id="t1/r2"),)


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


def turn_shape_problems(state: at.TurnState) -> list[str]:
    """What breaks the documented shape of a turn state: a field of the wrong type, records
    in ``batch`` ("the records of the write in flight") with no write in flight and no failed
    write kept for ``ContinueTurn``, an ``ending`` ("the outcome decided while final
    lifecycle work drains") kept once the turn is no longer ending, or ``calls`` ("the current
    response's tool calls") kept once the turn has ended with nothing to continue."""
    problems = field_type_problems(state)
    if state.batch and not state.persisting and state.resume_phase is None:
        problems.append(f"batch {state.batch!r} kept with no write in flight")
    if state.calls and state.phase is at.TurnPhase.IDLE and state.resume_phase is None:
        problems.append(f"calls {state.calls!r} kept after the turn ended")
    if state.ending is not None and state.phase is not at.TurnPhase.ENDING:
        problems.append(f"ending {state.ending!r} kept in {state.phase.name}")
    return problems


class CheckedDriver(Driver):
    """The turn driver, checking the turn's shape after every single step."""

    def send(self, *events: at.Event) -> tuple[at.Command, ...]:
        commands: list[at.Command] = []
        for event in events:
            commands.extend(super().send(event))
            assert not turn_shape_problems(self.state), (event, turn_shape_problems(self.state))
        return tuple(commands)


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


# --- the session: its state keeps its documented shape -------------------------------------------

PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser")


def field_type_problems(state: Any) -> list[str]:
    """Each ``str``, ``bool``, ``int``, enum or tuple field of a state that holds another type."""
    kind = type(state)
    # Resolved here, so the check never depends on whether another test resolved them first.
    attrs.resolve_types(kind)
    problems = []
    for field in attrs.fields(kind):
        declared = typing.get_origin(field.type) or field.type
        if (isinstance(declared, type)
                and (declared in (str, bool, int, tuple) or issubclass(declared, enum.Enum))
                and type(getattr(state, field.name)) is not declared):
            problems.append(f"{field.name}={getattr(state, field.name)!r} is not {field.type}")
    return problems


def session_shape_problems(state: se.SessionState) -> list[str]:
    """What breaks the documented shape of a session state (an empty list when nothing does)."""
    problems = field_type_problems(state)
    phase = state.phase
    if bool(state.drain_id) != (phase is se.SessionPhase.DRAINING):
        problems.append(f"drain in flight {state.drain_id!r} in {phase.name}")
    if bool(state.hook_run) != (phase is se.SessionPhase.HOOKS):
        problems.append(f"Stop-hook run in flight {state.hook_run!r} in {phase.name}")
    if state.automatic and phase is not se.SessionPhase.IDLE and state.hook_blocks:
        problems.append(f"an automatic turn counts {state.hook_blocks} Stop-hook block(s)")
    turn = state.turn
    if state.todo_call and not (turn.tool_in_flight
                                and turn.calls[turn.next_call].call_id == state.todo_call):
        problems.append(f"todo call {state.todo_call!r} kept while it does not run")
    for name in ("guard_request", "hook_request", "withheld_request"):
        request = getattr(state, name)
        if request and (phase in (se.SessionPhase.IDLE, se.SessionPhase.CLOSED)
                        or request != turn.request_id):
            problems.append(f"{name}={request!r} is not the running turn's request")
    return problems


class CheckedHost(Host):
    """The scripted host, checking the session's shape after every single step."""

    def stepped(self, event: at.Event) -> None:
        problems = session_shape_problems(self.state)
        assert not problems, (event, problems)


def armed(host: Host, *more: dict[str, Any]) -> Host:
    """Script ``host``: the first response writes one unfinished todo, the next stops."""
    host.responses.extend([say("Planning.", todo_call("tw1")), say("Stopping here."), *more])
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending", "completed")}
    return host


def _drain_held_then_hard_stop() -> CheckedHost:
    """A hard stop while the drain is out and a Lead instruction is still being saved: the turn
    waits for that save before it ends, so the session is back in TURN with no drain."""
    host = armed(CheckedHost())
    host.drain = lambda c: None  # the client never answers the drain
    return _hard_stop_with_a_lead_unsaved(host, se.SessionPhase.DRAINING)


def _hard_stop_with_a_lead_unsaved(host: CheckedHost, phase: se.SessionPhase) -> CheckedHost:
    """Run the prompt into ``phase``, then a Lead instruction and a hard stop in one go."""
    host.send(PROMPT)
    assert host.state.phase is phase
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"),
              se.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="Loop protection."))
    assert host.outcomes() == [at.OutcomeKind.HALTED]
    return host


def _hooks_block_then_cap() -> CheckedHost:
    host = armed(CheckedHost(stop_hooks=True, stop_hook_cap=1), say("Again."), say("Again."))
    host.hooks = lambda c: se.StopHookDecided(run_id=c.run_id, block=True, reason="Tests fail.")
    host.send(PROMPT)
    return host


def _automatic_after_hook_blocks() -> CheckedHost:
    host = armed(CheckedHost(stop_hooks=True), say("Fixed."), say("Done."))
    blocks = iter([True])
    host.hooks = lambda c: se.StopHookDecided(
        run_id=c.run_id, block=next(blocks, False), reason="Tests fail.")
    host.send(PROMPT)
    host.responses.append(say("Nightly report written."))
    host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cm", text="nightly report",
                                  kind=se.AutomaticKind.CRON, source_id="task-1"))
    return host


def _third_guard_stream_withheld() -> CheckedHost:
    host = armed(CheckedHost(), say("Working."),
                 say("Reading.", at.ToolCall(call_id="r1", name="read_file")), say("never sent"))
    host.send(PROMPT)
    return host


def _hooks_let_the_stop_through_with_a_lead_saved(queued: bool) -> CheckedHost:
    """The hooks let a stop through, while a complete prompt is queued (SO-2's order) or not
    (the guard, not armed, decides nothing): no continuation; a Lead instruction saved while
    they ran makes the turn go on with it."""
    host = CheckedHost(stop_hooks=True)
    host.responses.append(say("Done."))
    host.hooks = lambda c: None  # the hooks answer later
    host.send(PROMPT)
    [run] = host.commands(se.RunStopHooks)
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"),
              *([se.PromptQueued(prompt_id="q1", message_id="mq", text="queued")] if queued
                else []),
              se.StopHookDecided(run_id=run.run_id, block=False))
    assert host.state.continuation is se.Continuation.NONE
    assert host.user_messages()[-1] == "use tabs"
    return host


def _hook_continuation_fails() -> CheckedHost:
    """The hooks block the stop; the request of the hook's continuation fails before its stream
    opens, so the turn ends on that error with the request attributed to the hook."""
    host = CheckedHost(stop_hooks=True)
    host.responses.append(say("Done."))
    host.hooks = lambda c: se.StopHookDecided(run_id=c.run_id, block=True, reason="Tests fail.")
    host.send(PROMPT)
    request = host.commands(at.RequestModelStream)[-1]
    assert host.state.hook_request == request.request_id
    host.send(at.StreamFailed(request_id=request.request_id, error="reset"))
    assert host.outcomes() == [at.OutcomeKind.ERROR]
    return host


def _stopped_during_a_guard_request() -> CheckedHost:
    """Stop while the guard continuation's request is out and a Lead instruction is still
    being saved: the turn ends only after that save; meanwhile the guard has heard its stream
    was not opened and suspended the chain."""
    host = armed(CheckedHost())
    host.send(PROMPT)
    assert host.state.guard_request == host.held[-1].request_id
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"), at.StopPressed())
    assert host.outcomes() == [at.OutcomeKind.CANCELLED]
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED
    return host


def _hard_stop_while_the_hooks_run() -> CheckedHost:
    """A hard stop while the Stop hooks still run and a Lead instruction is still being saved:
    the turn waits for that save before it ends, so the session is back in TURN with no run."""
    host = CheckedHost(stop_hooks=True)
    host.responses.append(say("Done."))
    host.hooks = lambda c: None  # the hooks never answer
    return _hard_stop_with_a_lead_unsaved(host, se.SessionPhase.HOOKS)


SESSION_SCRIPTS = {
    "hard stop while the hooks run": _hard_stop_while_the_hooks_run,
    "a hook continuation's request fails": _hook_continuation_fails,
    "closed while the prompt is saved": lambda: CheckedHost().send(PROMPT, se.CloseRequested()),
    "stopped while the prompt is saved": lambda: CheckedHost().send(PROMPT, at.StopPressed()),
    "the only queued prompt aborted": lambda: CheckedHost().send(
        PROMPT, se.PromptQueued(prompt_id="q1", message_id="mq", text="later"),
        se.PromptAborted(prompt_id="q1")),
    "hooks yield to a queued prompt": lambda: _hooks_let_the_stop_through_with_a_lead_saved(True),
    "hooks let the stop through": lambda: _hooks_let_the_stop_through_with_a_lead_saved(False),
    "stopped during a guard continuation's request": _stopped_during_a_guard_request,
    "hard stop while draining": _drain_held_then_hard_stop,
    "hooks block up to the cap": _hooks_block_then_cap,
    "automatic turn after hook blocks": _automatic_after_hook_blocks,
    "third guard stream withheld": _third_guard_stream_withheld,
    "drains answered": lambda: armed(CheckedHost(), say("More."), say("Done?")).send(PROMPT),
}


@pytest.mark.req("SO-1", "SO-6", "SG-B5", "BG-4")
@pytest.mark.parametrize("script", list(SESSION_SCRIPTS), ids=str)
def test_every_session_state_keeps_its_documented_shape(script: str) -> None:
    """After every step: each ``str``/``bool``/``int``/enum field holds that type; a drain id
    is kept only while the session drains (``DRAINING``) and a Stop-hook run id only while the
    hooks run (``HOOKS``); an automatic turn has had no Stop-hook block. Kills the mutants that
    leave ``drain_id`` set after a drain's answer or a hard stop (or ``hook_run`` after a hard
    stop while the hooks run), set ``withheld_request`` to
    ``None``, start an automatic turn with a Stop-hook block counted, set a ``hook_run`` on
    Stop or when closing, store a ``None`` continuation at a turn's end or when yielding to a
    queued prompt or when the guard decides nothing, or a ``None`` FIFO priority when the last
    queued prompt is aborted, or keep the todo call once its result is handed over (its doc:
    "the todo-write call running now"); a request is attributed to the guard, a hook or the
    withholding only while it is the running turn's (kills a ``guard_request`` set by an
    ordinary stream, a ``hook_request`` kept after the turn ended, and a ``guard_request`` of
    ``None`` or another id left when Stop cancels a guard continuation's request)."""
    SESSION_SCRIPTS[script]()


# --- the session: held automatic turns (BG-5, BG-6) ----------------------------------------------


def _due(turn_id: str, source_id: str) -> se.AutomaticTurnDue:
    return se.AutomaticTurnDue(turn_id=turn_id, message_id=f"{turn_id}-m", text=f"run {turn_id}",
                               kind=se.AutomaticKind.NOTIFICATION, source_id=source_id)


@pytest.mark.req("BG-5", "BG-6")
def test_a_full_queue_evicts_its_oldest_unrelated_turn_and_forgets_its_prompt() -> None:
    """With room for one held turn, a second unrelated one while a turn runs evicts the first
    with the exact reason; when the turn ends only the survivor runs, with its own text."""
    host = Host(max_deferred=1)
    host.send(PROMPT)  # no response scripted: the turn runs
    assert host.send(_due("a1", "n1")) == [se.AutomaticTurnDeferred(turn_id="a1")]
    assert host.send(_due("a2", "n2")) == [
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


def _awaiting_a_reported_prompt(max_deferred: int) -> Host:
    """An armed chain whose stop yields to a prompt the client reported queued (BR-1): the
    turn ends and the chain awaits that prompt, with a shell the chain started still live."""
    host = armed(Host(max_deferred=max_deferred))
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, has_queued_prompt=True)
    host.send(PROMPT, se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="sh1"))
    assert host.state.phase is se.SessionPhase.IDLE
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    return host


@pytest.mark.req("BG-5", "BG-6", "SO-2")
def test_a_full_queue_of_related_turns_drops_an_unrelated_one_by_name() -> None:
    """The queue holds one related turn (its source is the chain's shell); an unrelated turn
    that finds it full is the one dropped, named, with the exact reason."""
    host = _awaiting_a_reported_prompt(1)
    assert host.send(_due("r1", "sh1")) == [se.AutomaticTurnDeferred(turn_id="r1")]
    assert host.send(_due("u1", "elsewhere")) == [se.AutomaticTurnDropped(
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
    host.send(_due("r1", "sh1"))
    assert host.send(_due("r2", "sh1")) == [se.AutomaticTurnDropped(
        turn_id="r2", message_id="r2-m", text="run r2",
        reason="the deferred queue is full of turns related to the live work chain; deliver it "
               "again once one has run")]
    assert [t.turn_id for t in host.state.deferred.turns] == ["r1"]
    assert host.state.phase is se.SessionPhase.IDLE


@pytest.mark.req("BG-5", "SG-S1", "SG-B9")
def test_a_compaction_failure_that_suspends_the_chain_starts_a_held_turn_at_once() -> None:
    """An ordinary request of an armed chain fails compaction while an unrelated cron turn is
    held: the turn ends COMPACTION_FAILED, the chain is suspended, and in the same step the held
    turn starts (its prompt saved, its request sent) as a new chain."""
    host = armed(Host())
    host.responses.pop()  # the request after the todo write is held
    host.send(PROMPT)
    request = host.held.pop()
    host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cm", text="hourly",
                                  kind=se.AutomaticKind.CRON, source_id="task-1"))
    commands = host.send(at.CompactionFailed(request_id=request.request_id, reason="too long"))
    assert host.outcomes() == [at.OutcomeKind.COMPACTION_FAILED]
    assert at.Persist(key="cron-1/p1", records=(
        at.UserMessageRecord(message_id="cm", text="hourly"),)) in commands
    assert at.RequestModelStream(request_id="cron-1/r1") in commands
    assert host.state.turn.turn_id == "cron-1" and host.state.automatic


# --- the session: what the host is told ----------------------------------------------------------


@pytest.mark.req("OB-3", "OB-6")
def test_the_exhaustion_entry_carries_the_exact_guard_metadata() -> None:
    """The exhaustion message is published once, under the turn's id, as a discrete guard
    entry with its kind, the attempt count, the maximum and the unfinished count."""
    host = armed(Host(), say("Still working."), say("Still not done."))
    host.send(PROMPT)
    [entry] = host.published(se.EntryKind.GUARD_EXHAUSTED)
    assert (entry.message_id, entry.text) == ("t1", g.exhaustion_text(1))
    assert dict(entry.meta or {}) == {"source": "todo_stop_guard", g.DISCRETE_MARKER: True,
                                      "kind": "exhausted", "attempt": 2, "maxAttempts": 2,
                                      "unfinishedCount": 1}


@pytest.mark.req("SG-B5")
def test_the_host_is_never_asked_to_cancel_the_request_it_was_not_sent() -> None:
    """The third guard-attributable request is withheld and the turn halted: the host gets
    neither that request nor a ``CancelStream`` for it."""
    host = _third_guard_stream_withheld()
    assert host.outcomes() == [at.OutcomeKind.HALTED]
    assert host.commands(at.CancelStream) == []
    assert len(host.commands(at.RequestModelStream)) == host.state.usage.model_calls == 4
    assert [r["text"] for r in host.responses] == ["never sent"]
    assert host.state.withheld_request == ""


@pytest.mark.req("OB-6")
def test_a_response_is_published_under_its_request_id() -> None:
    """The text of a completed response goes into the ring as a message chunk under the id of
    its request, not the chat's (kills ``message_id=None``)."""
    host = Host()
    host.responses.append(say("Done."))
    host.send(PROMPT)
    assert [(e.message_id, e.text) for e in host.published(se.EntryKind.MESSAGE_CHUNK)] == [
        ("t1/r1", "Done.")]


@pytest.mark.req("BG-6")
def test_an_automatic_turn_due_again_while_held_is_absorbed_with_the_reason() -> None:
    """The same automatic turn due twice while a turn runs: held once, the second is absorbed
    with exactly "this automatic turn is already held"."""
    host = Host()
    host.send(PROMPT)  # no response scripted: the turn runs
    assert host.send(_due("a1", "n1")) == [se.AutomaticTurnDeferred(turn_id="a1")]
    assert host.send(_due("a1", "n1")) == [at.StaleAnswerIgnored(
        event="AutomaticTurnDue", answer_id="a1", reason="this automatic turn is already held")]


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


@pytest.mark.req("BR-4", "BG-6")
def test_closing_hands_back_every_held_turn_and_queued_prompt_with_the_reason() -> None:
    """Closing while a turn runs: the turn is halted, then each queued prompt is refused and
    each held automatic turn dropped, with the exact reasons, before ``CloseSession``."""
    host = Host()
    host.send(PROMPT, se.PromptQueued(prompt_id="q1", message_id="mq", text="later"),
              _due("a1", "n1"))
    commands = host.send(se.CloseRequested())
    closing = [c for c in commands if isinstance(
        c, se.PromptRefused | se.AutomaticTurnDropped | se.CloseSession)]
    assert closing == [
        se.PromptRefused(prompt_id="q1", text="later",
                         reason="the session closed before this prompt ran"),
        se.AutomaticTurnDropped(turn_id="a1", message_id="a1-m", text="run a1",
                                reason="the session closed"),
        se.CloseSession(reason="The session was closed.")]


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
        due = _due(prompt_id, "n1")
        before = host.state
        assert host.send(due) == [se.AutomaticTurnDropped(
            turn_id=prompt_id, message_id=due.message_id, text=due.text,
            reason="this turn id is already in use")]
        assert host.state == before


REFUSALS: dict[str, tuple[at.Event, str]] = {
    "hook answer": (se.StopHookDecided(run_id="t1/hooks-1", block=False),
                    "the answer of a Stop-hook run this session asked for"),
    "prompt completed": (se.PromptCompleted(prompt_id="q9"), "a queued prompt's id"),
    "timer": (se.TimerFired(key="t1/drain-1"), "a timer this session started"),
    "drain reply": (se.MidTurnDrained(drain_id="t1/drain-1"),
                    "the reply to a drain this session asked for"),
}


@pytest.mark.req("SO-6", "BR-1", "BR-3")
@pytest.mark.parametrize("case", list(REFUSALS), ids=str)
def test_an_answer_the_session_never_asked_for_is_refused_with_its_particulars(case: str) -> None:
    """A Stop-hook answer (SO-6), a prompt completion (BR-1), a drain timer or a drain reply
    (BR-3) the session never issued: ``UnknownId`` from the session, naming the phase, the
    event and what it waits on (kills ``part=None``, ``phase=None``, ``expected=None`` and the
    upper-cased drain text)."""
    event, expected = REFUSALS[case]
    with pytest.raises(at.UnknownId) as raised:
        se.reduce(Host().state, event)
    assert refused(raised.value) == (at.UnknownId, "session", "IDLE", event, expected)


def test_an_event_the_session_does_not_take_is_refused_with_its_particulars() -> None:
    """An object that is no session event, and a prompt while a turn runs: ``UnexpectedEvent``
    from the session with the exact part, phase and event; the first expects exactly "a session
    event", the second names what the phase takes instead (kills the upper-cased part and the
    type check that no longer looks at the event). STYLE 6: host misuse has no requirement ID."""
    stranger = object()
    with pytest.raises(at.UnexpectedEvent) as raised:
        se.reduce(Host().state, stranger)
    assert refused(raised.value) == (at.UnexpectedEvent, "session", "IDLE", stranger,
                                     "a session event")
    host = Host()
    host.send(PROMPT)  # no response scripted: the turn runs
    second = at.PromptSubmitted(turn_id="t2", message_id="m2", text="more")
    with pytest.raises(at.UnexpectedEvent) as raised:
        se.reduce(host.state, second)
    assert refused(raised.value) == (at.UnexpectedEvent, "session", "TURN", second,
                                     "PromptQueued while a turn runs")


@pytest.mark.req("SO-6", "SO-3")
def test_late_hook_answers_and_aborts_of_prompts_not_queued_are_absorbed_with_the_reason() -> None:
    """A second answer of a Stop-hook run already answered, and an abort of a prompt that is not
    queued: each gives one ``StaleAnswerIgnored`` with the exact reason."""
    host = Host(stop_hooks=True)
    host.responses.append(say("Done."))
    host.send(PROMPT)  # the hooks let the stop through; the turn ends
    assert host.send(se.StopHookDecided(run_id="t1/hooks-1", block=True, reason="x")) == [
        at.StaleAnswerIgnored(event="StopHookDecided", answer_id="t1/hooks-1",
                              reason="the Stop hooks' answer is no longer awaited")]
    assert host.send(se.PromptAborted(prompt_id="q9")) == [
        at.StaleAnswerIgnored(event="PromptAborted", answer_id="q9",
                              reason="this prompt is not queued here")]


def _late_drain() -> Host:
    """An armed chain's stop whose drain timed out: the guard's continuation runs (its request
    unanswered) and the drain's reply is awaited as late."""
    host = armed(Host())
    host.drain = lambda c: None  # the drain is never answered in time
    host.send(PROMPT)
    host.send(se.TimerFired(key="t1/drain-1"))
    assert host.state.late_drain == "t1/drain-1"
    assert host.state.guard.phase is g.GuardPhase.CONTINUING
    return host


@pytest.mark.req("BR-3")
def test_a_late_drains_messages_come_back_under_its_id_once_the_turn_ends() -> None:
    """The late drain's reply comes while the stopped turn waits for a Lead save to end: Lead
    admission is closed, so its messages are handed back to the client under that drain's id
    (kills ``drain_id=None`` in that ``RestoreMidTurnMessages``)."""
    host = _late_drain()
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
    host = _late_drain()
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


@pytest.mark.req("BR-4")
def test_a_detach_of_a_client_not_attached_is_absorbed_with_the_reason() -> None:
    """``ClientDetached`` for a client the session does not have: one ``StaleAnswerIgnored``
    with exactly "this client is not attached", and no grace period starts."""
    host = Host()
    assert host.send(se.ClientDetached(client_id="c9")) == [
        at.StaleAnswerIgnored(event="ClientDetached", answer_id="c9",
                              reason="this client is not attached")]
    assert not host.state.grace


# --- the session: Stop hooks and trust -----------------------------------------------------------


@pytest.mark.req("SO-3", "SO-6")
def test_once_the_last_queued_prompt_is_aborted_the_stop_runs_the_hooks() -> None:
    """A prompt queued and aborted while the turn runs: no prompt waits, so the turn's stop
    yields to none and the Stop hooks run (kills a FIFO priority kept, set to true, when the
    last queued prompt is aborted)."""
    host = Host(stop_hooks=True)
    host.send(PROMPT, se.PromptQueued(prompt_id="q1", message_id="mq", text="later"),
              se.PromptAborted(prompt_id="q1"))
    host.responses.append(say("Done."))
    host.answer(host.held.pop())
    host.send()
    assert [run.run_id for run in host.commands(se.RunStopHooks)] == ["t1/hooks-1"]
    assert host.outcomes() == [at.OutcomeKind.FINISHED]


@pytest.mark.req("SG-S1", "TL-3")
@pytest.mark.parametrize("decision", [at.PermissionDecision.ALLOW, at.PermissionDecision.CANCEL],
                         ids=lambda decision: decision.name)
def test_only_a_cancelled_permission_request_suspends_the_chain(
        decision: at.PermissionDecision) -> None:
    """An armed chain's turn asks permission for a write. Allowed, the write runs and the chain
    stays live: its stop gets the guard's continuation. Cancelled, the turn is cancelled and the
    chain suspended (kills the inverted decision test in the session's ``_on_permission``)."""
    host = armed(Host())
    host.responses.insert(1, say("Writing.", at.ToolCall(call_id="w1", name="write_file",
                                                         needs_permission=True)))
    host.send(PROMPT)
    assert [type(command) for command in host.held] == [at.AskPermission]
    host.held.clear()
    host.send(at.PermissionDecided(call_id="w1", decision=decision))
    if decision is at.PermissionDecision.ALLOW:
        assert host.outcomes() == []
        assert host.state.guard.phase is g.GuardPhase.CONTINUING
        assert host.state.guard_request == host.held[-1].request_id
    else:
        assert host.outcomes() == [at.OutcomeKind.CANCELLED]
        assert host.state.guard.phase is g.GuardPhase.SUSPENDED


@pytest.mark.req("SO-5", "SO-6", "OB-5")
def test_a_hook_continuation_with_a_prompt_queued_is_counted_as_a_hook_call() -> None:
    """The hooks block while a complete prompt was queued behind them: the hook's reason goes
    alone, the state records that the queued prompt keeps its priority at the next stop, and
    the continuation's stream is counted as a hook call, not a guard call."""
    host = armed(Host(stop_hooks=True))
    host.hooks = lambda c: None  # the hooks answer later
    host.send(PROMPT)
    [run] = host.held
    host.held.clear()
    host.send(se.PromptQueued(prompt_id="q1", message_id="mq", text="queued"))
    host.send(se.StopHookDecided(run_id=run.run_id, block=True, reason="Tests fail."))
    assert host.user_messages()[-1] == "Tests fail."
    assert host.state.fifo_priority
    host.responses.extend([say("Fixed the tests."), say("Next turn.")])
    host.answer(host.held.pop())
    host.send()
    assert host.state.usage == se.Usage(model_calls=4, guard_calls=0, hook_calls=1)
    assert host.user_messages()[-1] == "queued"


@pytest.mark.req("SO-6", "SO-1")
def test_a_lead_saved_while_the_hooks_run_sets_their_answer_aside() -> None:
    """With a cap of one block, the hooks block once (its reason continues the turn); a Lead
    instruction saved while the second run runs is mid-turn input (SO-1): that run's block is
    set aside, unsaved and uncounted, and the turn goes on with the Lead; at the next stop a
    block is the second in a row, the cap: one ``Warn`` and the turn ends."""
    host = Host(stop_hooks=True, stop_hook_cap=1)
    host.responses.extend([say("One."), say("Two."), say("Three."), say("Four.")])
    host.hooks = lambda c: None  # each run is answered by the test
    host.send(PROMPT)
    block = se.StopHookDecided(run_id="t1/hooks-1", block=True, reason="Tests fail.")
    host.send(block)
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"),
              attrs.evolve(block, run_id="t1/hooks-2"))
    host.send(attrs.evolve(block, run_id="t1/hooks-3"))
    assert [w.text for w in host.commands(se.Warn)] == [
        "The Stop hook blocked 1 time in a row; the turn ends here."]
    assert host.user_messages() == ["Port the parser", "Tests fail.", "use tabs"]
    assert [(c.consecutive_blocks, c.cap) for c in host.commands(se.RunStopHooks)] == [
        (0, 1), (1, 1), (1, 1)]


@pytest.mark.req("SG-S1", "SG-B3", "TL-2")
def test_a_guard_continuation_rejected_by_the_token_limit_suspends_the_chain_unconsumed() -> None:
    """The guard's continuation request is rejected as over the token limit before a stream
    opens: the turn ends TOKEN_LIMIT, the guard hears the stream was not opened for that reason
    (no attempt consumed, nothing published) and suspends the chain."""
    host = armed(Host())
    host.send(PROMPT)
    request = host.commands(at.RequestModelStream)[-1]
    assert host.held == [request] and host.state.guard_request == request.request_id
    host.send(at.TokenLimitRejected(request_id=request.request_id, reason="too long"))
    assert host.outcomes() == [at.OutcomeKind.TOKEN_LIMIT]
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED
    assert host.state.guard.attempts == 0
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert host.state.usage.guard_calls == 0


@pytest.mark.req("SG-A12", "SG-A14")
def test_a_continue_naming_a_turn_rewound_while_it_ran_starts_a_fresh_chain() -> None:
    """The running turn is rewound, then its request fails and the host continues it: the
    continue starts a fresh chain (SG-A8), which the continued turn's own new todo write arms,
    so its stop gets a guard continuation (issue 18, defect 20)."""
    host = armed(Host())
    host.responses.pop()
    host.send(PROMPT)
    request = host.held.pop()
    host.send(se.LifecycleChanged(kind=g.TrustClearingKind.REWIND))
    host.send(at.StreamFailed(request_id=request.request_id, error="reset"))
    host.tool_results["tw2"] = {"output": "1 todo", "structured": todos("pending")}
    host.responses.extend([say("Again.", todo_call("tw2")), say("Stopping.")])
    chain = host.state.guard.chain
    host.send(at.ContinueTurn(turn_id="t1"))
    assert host.outcomes() == [at.OutcomeKind.ERROR]
    assert host.state.guard.chain == chain + 1 and host.state.guard.armed
    assert g.is_guard_prompt(host.user_messages()[-1])


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
