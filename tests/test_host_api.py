"""The host-facing API, written from the public names only, as a host author would use it."""

from __future__ import annotations

import inspect
import typing

import attrs
import pytest
from driver import Driver, call, no_titles
from test_table import SAMPLES

import agentturn as at


def exported(base: type) -> set[type]:
    return {value for name in at.__all__
            if inspect.isclass(value := getattr(at, name)) and issubclass(value, base)
            and value not in (base, at.AwaitingCommand, at.Notice)}


def test_every_command_is_either_awaiting_or_a_notice() -> None:
    """Each command the turn family exports awaits an answer or is a notice, never both, and the
    union for an exhaustive match holds exactly those commands."""
    commands = exported(at.Command)
    for command in commands:
        assert issubclass(command, at.AwaitingCommand) != issubclass(command, at.Notice), command
    assert set(typing.get_args(at.TurnCommand)) == commands


def test_every_event_is_in_the_turn_event_union() -> None:
    """``TurnEvent`` lists every event the turn family exports."""
    assert set(typing.get_args(at.TurnEvent)) == exported(at.Event)


ECHO = {"Persisted": "key", "PersistFailed": "key", "PermissionDecided": "call_id",
        "ToolFinished": "call_id", "LeadSaved": "lead_id", "LeadSaveFailed": "lead_id",
        "TitleGenerated": "request_id", "TitleFailed": "request_id"}


def test_every_awaiting_command_names_answers_that_echo_its_id() -> None:
    """Each answering event exists and carries a field for the awaiting command's id."""
    for command in exported(at.AwaitingCommand):
        assert command.answered_by, command
        for name in command.answered_by:
            event = getattr(at, name)
            field = ECHO.get(name, "request_id")
            assert field in attrs.fields_dict(event), (command, name)


def test_outstanding_names_what_the_host_still_owes() -> None:
    """``outstanding`` lists the awaiting commands not yet answered, with the id to echo."""
    driver = Driver()
    driver.start()
    assert at.outstanding(driver.state) == (
        at.Outstanding(command=at.RequestModelStream, answer_id="t1/r1"),)
    driver.respond(text="Reading.", finish_reason="tool_calls", calls=[call("a")])
    driver.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="tabs"))
    assert at.outstanding(driver.state) == (
        at.Outstanding(command=at.Persist, answer_id="t1/p2"),
        at.Outstanding(command=at.SaveLead, answer_id="l1"),
        at.Outstanding(command=at.RequestTitle, answer_id="chat/title-1"))
    for command in driver.commands:
        if isinstance(command, at.AwaitingCommand) and command.answer_id is not None:
            assert command.answer_id  # every awaiting command carries its echo id


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda e: type(e).__name__)
def test_text_that_cannot_be_encoded_is_refused_in_every_field(sample: at.Event) -> None:
    """req: LD-6 — a lone surrogate in any str field of any event raises FieldError naming the
    class and the field, so no reducer ever sees text a host could not store."""
    text_fields = [f.name for f in attrs.fields(type(sample))
                   if isinstance(getattr(sample, f.name), str)]
    for name in text_fields:
        with pytest.raises(at.FieldError, match=rf"{type(sample).__name__}\.{name}"):
            attrs.evolve(sample, **{name: "fix \ud800 now"})


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


@pytest.mark.req("TL-3", "TL-8")
def test_a_click_after_stop_is_absorbed_never_an_allow() -> None:
    """req: TL-3, TL-8 — Stop dismisses the dialog; the user's Allow arrives a moment later:
    absorbed with a notice, nothing runs; a decision for a call never asked about raises."""
    driver = Driver(no_titles())
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("w1", "write_file", permission=True)])
    driver.ack()
    driver.send(at.StopPressed())
    driver.ack()  # the cancelled result
    ended = driver.state
    late = driver.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert driver.state is ended and not driver.of(at.ExecuteTool)
    with pytest.raises(at.ProtocolError):
        driver.send(at.PermissionDecided(call_id="zz", decision=at.PermissionDecision.ALLOW))


@pytest.mark.req("TT-5", "TT-6")
def test_a_title_for_an_earlier_request_is_absorbed() -> None:
    """req: TT-5, TT-6 — the first naming request failed; a later turn asks again; the first
    request's answer arrives late: absorbed, and only the second request's title is shown."""
    driver = Driver()
    driver.start()
    driver.respond(text="Hello.")
    driver.naming_failed("timeout")
    driver.ack()
    driver.start(turn_id="t2")
    driver.respond(text="Again.")
    late = driver.send(at.TitleGenerated(request_id="chat/title-1", title="Old"))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert driver.named("New") == (at.SetTitle(chat_id="chat", title="New"),)
    assert driver.of(at.SetTitle) == [at.SetTitle(chat_id="chat", title="New")]


def test_the_lead_permission_policy_is_named_for_what_it_governs() -> None:
    """The policy is ``LeadPermissionPolicy``, configured as ``lead_permission_policy``."""
    config = at.TurnConfig(lead_permission_policy=at.LeadPermissionPolicy.SUPERSEDE)
    assert config.lead_permission_policy is at.LeadPermissionPolicy.SUPERSEDE
    assert not hasattr(at, "PermissionPolicy")
