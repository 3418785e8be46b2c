"""What the turn refuses or absorbs: late answers (a cancelled request's stream events, a second
decision for a decided call) and host misuse, each refused with its particulars (the part, the
phase, the event and what the turn waits for).
"""

from __future__ import annotations

import pytest
from checks import CheckedDriver, refused, two_writes_awaiting_permission
from driver import Driver, call, no_titles

import agentturn as at


def _stopped_then_restarted() -> Driver:
    """Turn t1's stream t1/r1 is cancelled by Stop; turn t2 then waits for its own t2/r1."""
    driver = Driver(no_titles())
    driver.start()
    driver.send(at.StopPressed())
    driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="again"))
    driver.ack()
    assert driver.state.phase is at.TurnPhase.AWAITING_STREAM
    return driver


PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser")


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


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


@pytest.mark.req("TL-3")
def test_a_second_decision_for_a_decided_call_is_absorbed_and_says_so() -> None:
    """A permission decision repeated for a call already allowed, whether that call still runs
    or the next call now waits for its own decision, is absorbed with the exact reason "this
    call was already decided" and changes nothing."""
    driver = two_writes_awaiting_permission()
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
    driver = two_writes_awaiting_permission()
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
    driver = two_writes_awaiting_permission()
    stranger = at.PermissionDecided(call_id="zz", decision=at.PermissionDecision.ALLOW)
    with pytest.raises(at.UnknownId) as raised:
        driver.send(stranger)
    assert refused(raised.value) == (at.UnknownId, "turn", "AWAITING_PERMISSION", stranger,
                                     "a decision for call 'w1'")


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
