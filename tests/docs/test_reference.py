"""The generated API reference (``docs/_ext/agentturn_reference.py``) reads what the code says.

Needs Sphinx (the ``docs`` extra): skipped, and listed at the end of the run, without it.
"""

from __future__ import annotations

import sys

import pytest
from code_blocks import ROOT

from agentturn import registry
from agentturn._base import AwaitingCommand, Notice

pytest.importorskip("sphinx")
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import agentturn_reference as reference


def test_every_awaiting_command_names_events_that_exist_and_echo_its_id() -> None:
    """Each ``answered_by`` names an event of some part, and the field the command's
    ``answer_id`` reads is a field of every answer that carries an id."""
    import attrs

    commands = [cls for cls in registry.command_types() if issubclass(cls, AwaitingCommand)]
    assert {cls.__name__ for cls in commands} >= {"Persist", "DecideNaturalStop",
                                                  "DrainMidTurnQueue", "SendToolResults"}
    for cls in commands:
        path = reference.echoed(cls)
        for name in cls.answered_by:
            event = reference.registry_event(name)
            if path is not None:
                assert path.rsplit(".", 1)[-1] in attrs.fields_dict(event), (cls, name)


def test_the_answers_are_the_inverse_of_answered_by() -> None:
    answers = reference.answered_commands()
    assert [cls.__name__ for cls in answers["NaturalStopDecided"]] == ["DecideNaturalStop"]
    assert [cls.__name__ for cls in answers["Persisted"]] == ["Persist"]


def test_an_entry_shows_fields_answers_and_who_returns_it() -> None:
    from agentturn import commands, events

    where = reference.sections("agentturn.events")
    assert where["PromptSubmitted"] == "the user" and where["Persisted"] == "storage"
    text = "\n".join(reference.entry(commands.RequestModelStream, "turn",
                                     reference.answered_commands(), where))
    assert ".. py:class:: RequestModelStream(*, request_id, lead_ids, corrective)" in text
    assert "**Awaiting command**, returned by ``agentturn.reduce``" in text
    assert ":py:class:`~agentturn.StreamOpened`" in text and "``request_id``" in text
    assert "Saved Lead instructions this request gives the model" in text  # a field's #: comment
    text = "\n".join(reference.entry(events.Persisted, "turn", reference.answered_commands(),
                                     where))
    assert "**Answers** :py:class:`~agentturn.Persist`" in text
    notice = next(cls for cls in registry.command_types() if issubclass(cls, Notice))
    assert "Nothing answers it" in "\n".join(
        reference.entry(notice, registry.part_of(notice), {}, {}))


def test_a_field_entry_says_what_its_validator_checks() -> None:
    """Read from the validator: its docstring (``is_id``), or the ``FieldError`` message of one
    without a docstring; validators that only repeat the type add nothing."""
    import attrs

    from agentturn import events
    from agentturn.session import vocabulary

    def checked(cls: type, name: str) -> list[str]:
        return reference.checks(attrs.fields_dict(cls)[name].validator)

    assert checked(events.StreamCompleted, "request_id") == ["it is a non-empty ``str`` identifier"]
    assert checked(events.StreamCompleted, "text") == [
        "it is a ``str`` that can be encoded as UTF-8 (empty allowed)"]
    assert checked(events.StreamCompleted, "tool_calls") == [
        "refused if it holds a repeated call_id"]
    assert checked(events.StreamCompleted, "cut_off") == []  # optional(one_of(...)): the type
    assert checked(vocabulary.StartTimer, "seconds") == ["it must be a number >= 0"]
    text = "\n".join(reference.entry(events.StreamCompleted, "turn", {}, {}))
    assert "**Checked:** it is a non-empty ``str`` identifier." in text


def test_the_session_page_names_the_other_parts_events_it_takes() -> None:
    """The session takes ClientAttached (the guard's) and HardStopped (the turn's): the session
    page says so, and their own entries say the session accepts them."""
    from agentturn import events, guard

    text = "\n".join(reference.other_parts_events())
    assert ":py:class:`~agentturn.guard.ClientAttached`" in text
    assert ":py:class:`~agentturn.HardStopped`" in text
    assert ":py:class:`~agentturn.guard.ModelChanged`" in text
    assert ":py:class:`~agentturn.guard.NaturalStop`" not in text  # the session derives it
    for cls, part in ((guard.ClientAttached, "guard"), (events.HardStopped, "turn")):
        entry = "\n".join(reference.entry(cls, part, {}, reference.sections(cls.__module__)))
        assert "and ``agentturn.session.reduce``" in entry and "**Sent by** the host" in entry
    entry = "\n".join(reference.entry(guard.NaturalStop, "guard", {},
                                      reference.sections(guard.NaturalStop.__module__)))
    assert "session.reduce" not in entry.split("\n\n")[1]
