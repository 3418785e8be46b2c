"""The turn's host-facing API, written from the public names only, as a host author would use it:
the exported unions, the awaiting commands and their answers, ``outstanding``, and a late click.
"""

from __future__ import annotations

import inspect
import typing

import attrs
import pytest
from driver import Driver, call, no_titles

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
