"""Values: states, events and commands are frozen, slotted, keyword-only attrs classes, and an
invalid one never exists (building it raises FieldError naming the class and the field).
"""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest
from test_table import SAMPLES

import agentturn as at
from agentturn import session as se


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: at.PromptSubmitted(turn_id="t", message_id="m", text=3), "PromptSubmitted.text"),
        (lambda: at.PromptSubmitted(turn_id="", message_id="m", text="x"),
         "PromptSubmitted.turn_id"),
        (lambda: at.LeadSubmitted(chat_id="c", lead_id="l", text=b"bytes"), "LeadSubmitted.text"),
        (lambda: at.StreamCompleted(request_id="r", text="", finish_reason=None),
         "StreamCompleted.finish_reason"),
        (lambda: at.StreamCompleted(
            request_id="r", text="", finish_reason="stop",
            tool_calls=(at.ToolCall(call_id="a", name="x"), at.ToolCall(call_id="a", name="y"))),
         "StreamCompleted.tool_calls"),
        (lambda: at.StreamCompleted(request_id="r", text="", finish_reason="stop",
                                    tool_calls=["not a tuple"]), "StreamCompleted.tool_calls"),
        (lambda: at.ToolFinished(call_id="c", output="", cancelled="yes"),
         "ToolFinished.cancelled"),
        (lambda: at.PermissionDecided(call_id="c", decision="allow"), "PermissionDecided.decision"),
        (lambda: at.TurnConfig(max_requests=-1), "TurnConfig.max_requests"),
        (lambda: at.TurnConfig(max_requests=0), "TurnConfig.max_requests"),
        (lambda: at.TurnConfig(max_title_attempts=True), "TurnConfig.max_title_attempts"),
        (lambda: at.LeadSubmitted(chat_id="c", lead_id="l", text="x", attachment_ids=("a", "a")),
         "LeadSubmitted.attachment_ids"),
    ],
)
def test_bad_fields_are_refused_on_construction_naming_the_field(build, field: str) -> None:  # type: ignore[no-untyped-def]
    """An invalid event never exists: building one raises FieldError naming class and field."""
    with pytest.raises(at.FieldError, match=re.escape(field)):
        build()


@pytest.mark.parametrize("cls", [at.PromptSubmitted, at.StreamCompleted, at.Persist, at.TurnState,
                                 at.LeadQueue, at.TitleState, at.TurnOutcome])
def test_values_are_frozen_slotted_and_keyword_only(cls: type) -> None:
    """States, events and commands are frozen, slotted, keyword-only attrs classes."""
    assert attrs.has(cls)
    assert "__slots__" in cls.__dict__
    assert all(field.kw_only for field in attrs.fields(cls))
    assert cls.__setattr__ is not object.__setattr__


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda e: type(e).__name__)
def test_text_that_cannot_be_encoded_is_refused_in_every_field(sample: at.Event) -> None:
    """req: LD-6 — a lone surrogate in any str field of any event raises FieldError naming the
    class and the field, so no reducer ever sees text a host could not store."""
    text_fields = [f.name for f in attrs.fields(type(sample))
                   if isinstance(getattr(sample, f.name), str)]
    for name in text_fields:
        with pytest.raises(at.FieldError, match=rf"{type(sample).__name__}\.{name}"):
            attrs.evolve(sample, **{name: "fix \ud800 now"})


# Written from the host author's chair, with the public API only: these two build events and
# nothing else.


@pytest.mark.parametrize("make", [
    lambda: at.PromptSubmitted(turn_id="t1", message_id="m", text="a\ud800b"),
    lambda: at.LeadSubmitted(chat_id="chat-1", lead_id="L", text="\udfff"),
    lambda: se.PromptQueued(prompt_id="q", message_id="m", text="\ud83d"),
    lambda: se.MidTurnDrained(drain_id="d", messages=("ok", "\udc80")),
    lambda: se.StopHookDecided(run_id="r", block=True, reason="\ud800"),
    lambda: se.AutomaticTurnDue(turn_id="a", message_id="m", text="\ud800",
                               kind=se.AutomaticKind.CRON, source_id="c"),
    lambda: at.StreamCompleted(request_id="r", text="\ud800", finish_reason="stop"),
    lambda: at.ToolFinished(call_id="c", output="\ud800"),
])
def test_lone_surrogates_are_refused_when_the_event_is_built(make: Any) -> None:
    with pytest.raises(at.FieldError):
        make()


def test_a_repeated_call_id_in_one_response_is_refused_when_built() -> None:
    with pytest.raises(at.FieldError):
        at.StreamCompleted(request_id="t1/r1", text="", finish_reason="tool_use", tool_calls=(
            at.ToolCall(call_id="c", name="a"), at.ToolCall(call_id="c", name="b")))
