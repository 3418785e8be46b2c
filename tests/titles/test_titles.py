"""Automatic chat titles, one requirement at a time (TT-1 ... TT-6), through the turn and with the
title part used alone.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence

import attrs
import pytest
from driver import Driver, call

import agentturn as at
from agentturn import titles
from agentturn.titles import TitlePhase, TitleState, TitleTrigger


def index_of(driver: Driver, command: at.Command) -> int:
    return driver.commands.index(command)


@pytest.mark.req("TT-1")
def test_title_after_the_first_usable_response_before_its_tools() -> None:
    """req: TT-1 — a response with text and calls: RequestTitle comes with it, and the first
    tool starts only after the title is back."""
    driver = Driver()
    driver.start()
    driver.respond(text="I'll read the config first.", finish_reason="tool_calls",
                   calls=[call("a")])
    assert driver.commands[-1] == at.RequestTitle(chat_id="chat", request_id="chat/title-1")
    assert driver.ack() == ()
    assert driver.state.phase is at.TurnPhase.AWAITING_TITLE
    commands = driver.named("  Read the config  ")
    assert commands == (at.SetTitle(chat_id="chat", title="Read the config"),
                        at.ExecuteTool(call=call("a")))
    assert index_of(driver, at.RequestTitle(chat_id="chat", request_id="chat/title-1")) < index_of(
        driver, at.ExecuteTool(call=call("a")))


@pytest.mark.req("TT-1")
def test_a_final_answer_is_usable_too_and_the_turn_is_not_held() -> None:
    """req: TT-1 — a text-only final answer asks for a title; the turn ends without waiting."""
    driver = Driver()
    driver.start()
    driver.respond(text="The bug was a typo.")
    driver.ack()
    assert driver.of(at.RequestTitle) == [
        at.RequestTitle(chat_id="chat", request_id="chat/title-1")]
    assert driver.last(at.EndTurn).outcome.kind is at.OutcomeKind.FINISHED  # type: ignore[attr-defined]
    assert driver.named("Typo bug") == (
        at.SetTitle(chat_id="chat", title="Typo bug"),)


@pytest.mark.req("TT-2")
def test_tool_only_responses_are_named_after_the_first_completed_tool_round() -> None:
    """req: TT-2 — no text, two calls: no title until both results are saved; then the title
    comes before the next model request."""
    driver = Driver()
    driver.start()
    driver.respond(finish_reason="tool_calls", calls=[call("a"), call("b")])
    driver.ack()
    driver.send(at.ToolFinished(call_id="a", output="1"))
    driver.ack()
    assert not driver.of(at.RequestTitle)
    driver.send(at.ToolFinished(call_id="b", output="2"))
    assert driver.ack() == (at.RequestTitle(chat_id="chat", request_id="chat/title-1"),)
    assert driver.naming_failed("offline") == (
        at.RequestModelStream(request_id="t1/r2"),)


@pytest.mark.req("TT-3")
def test_naming_never_overlaps_a_model_request() -> None:
    """req: TT-3 — while naming runs after a tool round, the next request waits; a new prompt's
    first request waits too when naming from the previous turn still runs."""
    driver = Driver()
    driver.start()
    driver.respond(text="Done already.")
    driver.ack()  # the turn ends; the naming request still runs
    driver.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="next"))
    assert driver.ack() == ()
    assert driver.state.phase is at.TurnPhase.AWAITING_TITLE
    assert len(driver.of(at.RequestModelStream)) == 1
    commands = driver.named("Quick fix")
    assert commands[-1] == at.RequestModelStream(request_id="t2/r1")


@pytest.mark.req("TT-4")
def test_no_naming_request_when_automatic_titles_are_off() -> None:
    """req: TT-4 — with the preference off, a whole turn makes no RequestTitle."""
    driver = Driver(at.TurnConfig(auto_title=False))
    driver.start()
    driver.respond(text="Reading.", finish_reason="tool_calls", calls=[call("a")])
    driver.ack()
    driver.send(at.ToolFinished(call_id="a", output="x"))
    driver.ack()
    assert not driver.of(at.RequestTitle)


@pytest.mark.req("TT-4")
def test_turning_titles_off_while_naming_runs_drops_the_result() -> None:
    """req: TT-4 — the user turns titles off while the request runs: no SetTitle."""
    driver = Driver()
    driver.start()
    driver.respond(text="Hi.")
    driver.send(at.AutoTitlePreferenceChanged(enabled=False))
    assert driver.named("Greeting") == ()


@pytest.mark.req("TT-5")
def test_a_manual_rename_is_never_replaced() -> None:
    """req: TT-5 — renamed before the first response: no naming request at all."""
    driver = Driver()
    driver.send(at.ManualRename(title="Billing bug"))
    driver.start()
    driver.respond(text="Looking.", finish_reason="tool_calls", calls=[call("a")])
    driver.ack()
    assert not driver.of(at.RequestTitle)
    assert driver.last(at.ExecuteTool) == at.ExecuteTool(call=call("a"))


@pytest.mark.req("TT-5")
def test_a_naming_result_after_a_manual_rename_is_discarded() -> None:
    """req: TT-5 — the rename lands while naming runs: the result is dropped, the tool then
    runs (naming is over), and no SetTitle is ever sent."""
    driver = Driver()
    driver.start()
    driver.respond(text="Looking.", finish_reason="tool_calls", calls=[call("a")])
    driver.ack()
    driver.send(at.ManualRename(title="Mine"))
    assert driver.named("Theirs") == (at.ExecuteTool(call=call("a")),)
    assert not driver.of(at.SetTitle)


@pytest.mark.req("TT-6")
def test_a_chat_is_named_automatically_at_most_once() -> None:
    """req: TT-6 — after one automatic title, later turns never ask again."""
    driver = Driver()
    driver.start()
    driver.respond(text="One.")
    driver.ack()
    driver.named("First")
    driver.start(turn_id="t2")
    driver.respond(text="Two.")
    driver.ack()
    assert len(driver.of(at.RequestTitle)) == 1 and len(driver.of(at.SetTitle)) == 1


@pytest.mark.req("TT-6")
def test_a_failed_naming_neither_fails_nor_blocks_and_a_later_turn_retries() -> None:
    """req: TT-6 — a failure lets the tool run and the turn finish normally; the next turn
    tries once more; after max_attempts failures no more requests are made."""
    driver = Driver(at.TurnConfig(max_title_attempts=2))
    driver.start()
    driver.respond(text="Reading.", finish_reason="tool_calls", calls=[call("a")])
    driver.ack()
    assert driver.naming_failed("timeout") == (at.ExecuteTool(call=call("a")),)
    driver.send(at.ToolFinished(call_id="a", output="x"))
    driver.ack()  # the tool round completes; this turn already tried, so no second request
    assert len(driver.of(at.RequestTitle)) == 1
    driver.open()
    driver.respond(text="Done.")
    driver.ack()
    assert driver.last(at.EndTurn).outcome.kind is at.OutcomeKind.FINISHED  # type: ignore[attr-defined]
    driver.start(turn_id="t2")
    driver.respond(text="Again.")
    driver.ack()
    assert len(driver.of(at.RequestTitle)) == 2
    driver.named("   ")  # empty counts as a failure
    driver.start(turn_id="t3")
    driver.respond(text="Third.")
    driver.ack()
    assert len(driver.of(at.RequestTitle)) == 2  # two failures: no more attempts


def test_the_title_part_works_alone() -> None:
    """Without the lifecycle: due once per turn, result shown, rename wins afterwards."""
    state = TitleState.create("c")
    state, commands = titles.request_if_due(state, TitleTrigger.TOOL_ROUND)
    assert commands == (at.RequestTitle(chat_id="c", request_id="c/title-1"),)
    assert titles.naming_in_flight(state)
    state, commands = titles.reduce(state, at.TitleGenerated(request_id="c/title-1", title="T"))
    assert commands == (at.SetTitle(chat_id="c", title="T"),)
    assert state.phase is TitlePhase.NAMED
    # a second answer to the same request is a late answer: absorbed, nothing changes
    again = titles.reduce(state, at.TitleGenerated(request_id="c/title-1", title="again"))
    assert again.state == state
    assert again.commands == (at.StaleAnswerIgnored(
        event="TitleGenerated", answer_id="c/title-1",
        reason="no longer waiting for this naming request"),)
    # an id never issued is misuse
    with pytest.raises(at.UnknownId):
        titles.reduce(state, at.TitleGenerated(request_id="c/title-2", title="forged"))


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


# --- the title part alone ---------------------------------------------------------------------


TitleEvent = at.TitleGenerated | at.TitleFailed | at.ManualRename | at.AutoTitlePreferenceChanged


def play(events: Sequence[TitleEvent], state: TitleState | None = None
         ) -> tuple[TitleState, tuple[at.Command, ...]]:
    """Reduce ``events`` from ``state`` (a new chat "c" by default); the last commands."""
    state = TitleState.create("c") if state is None else state
    commands: tuple[at.Command, ...] = ()
    for event in events:
        state, commands = titles.reduce(state, event)
    return state, commands


def asked(state: TitleState) -> TitleState:
    """``state`` after its naming request went out (it must be due)."""
    step = titles.request_if_due(state, TitleTrigger.USABLE_RESPONSE)
    assert step.commands == (at.RequestTitle(chat_id=state.chat_id,
                                             request_id=step.state.request_id),)
    return step.state


def type_problems(state: TitleState) -> list[str]:
    """The fields of ``state`` whose value is not of the declared type (bool is not int)."""
    attrs.resolve_types(TitleState)
    problems = []
    for field in attrs.fields(TitleState):
        value = getattr(state, field.name)
        kind = field.type
        assert isinstance(kind, type) and typing.get_origin(kind) is None
        if type(value) is not kind:
            problems.append(f"{field.name}={value!r} is not {kind.__name__}")
    return problems


def failed_once() -> TitleState:
    state = asked(TitleState.create("c"))
    return play([at.TitleFailed(request_id="c/title-1", reason="offline")], state)[0]


SCRIPTS: dict[str, list[TitleEvent]] = {
    "named": [at.TitleGenerated(request_id="c/title-1", title=" T ")],
    "failed": [at.TitleFailed(request_id="c/title-1", reason="offline")],
    "empty": [at.TitleGenerated(request_id="c/title-1", title=" ")],
    "off then on": [at.AutoTitlePreferenceChanged(enabled=False),
                    at.AutoTitlePreferenceChanged(enabled=True)],
    "off during naming": [at.AutoTitlePreferenceChanged(enabled=False),
                          at.TitleGenerated(request_id="c/title-1", title="T")],
    "renamed during naming": [at.ManualRename(title="Mine"),
                              at.TitleFailed(request_id="c/title-1", reason="offline")],
}


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.
# They use ``agentturn.titles`` alone (documented as usable without the turn lifecycle): real
# events from a new state, and the documented meaning of its fields.


@pytest.mark.req("TT-6")
def test_a_new_turn_only_clears_the_per_turn_try() -> None:
    """After a failed naming, a new turn may try again: the state is the failed one but for
    ``tried_this_turn``, which is ``False`` (a bool), and the next request is title-2. Kills
    ``new_turn`` storing ``None``."""
    state = failed_once()
    assert titles.new_turn(state) is not state
    fresh = titles.new_turn(state)
    assert fresh == attrs.evolve(state, tried_this_turn=False)
    assert not type_problems(fresh), type_problems(fresh)
    assert titles.new_turn(fresh) is fresh
    assert asked(fresh).request_id == "c/title-2"


@pytest.mark.req("TT-4", "TT-5", "TT-6")
@pytest.mark.parametrize("script", list(SCRIPTS), ids=str)
def test_every_title_state_keeps_its_declared_types(script: str) -> None:
    """Every field of every state a naming request's life goes through has its declared type:
    a phase, bools, ints and the chat id (kills the mutants that store ``None``)."""
    state = asked(TitleState.create("c"))
    for event in SCRIPTS[script]:
        state, _ = titles.reduce(state, event)
        assert not type_problems(state), (event, type_problems(state))
        state = titles.new_turn(state)
        assert not type_problems(state), (event, type_problems(state))


@pytest.mark.req("TT-4")
def test_turning_titles_back_on_makes_a_title_due_again() -> None:
    """Off, then on again before any naming: the next moment asks for a title (kills the
    preference change storing ``None``)."""
    state, commands = play([at.AutoTitlePreferenceChanged(enabled=False),
                            at.AutoTitlePreferenceChanged(enabled=True)])
    assert commands == () and state.enabled is True and titles.is_due(state)
    assert asked(state).request_id == "c/title-1"


@pytest.mark.req("TT-4", "TT-3")
def test_a_result_dropped_because_titles_are_off_leaves_the_chat_unnamed_and_free() -> None:
    """Titles turned off while naming ran: the result is dropped, no request is in flight any
    more (the turn goes on), the chat is UNNAMED and no failure is counted; turned back on, a
    later turn asks again. Kills the mutants that keep the phase NAMING, store ``None``, or
    return no state."""
    state = asked(TitleState.create("c"))
    state, commands = play([at.AutoTitlePreferenceChanged(enabled=False),
                            at.TitleGenerated(request_id="c/title-1", title="Greeting")], state)
    assert commands == ()
    assert isinstance(state, TitleState)
    assert state.phase is TitlePhase.UNNAMED and not titles.naming_in_flight(state)
    assert (state.failures, state.requests, state.enabled) == (0, 1, False)
    state, _ = play([at.AutoTitlePreferenceChanged(enabled=True)], state)
    assert titles.request_if_due(state, TitleTrigger.TOOL_ROUND).commands == ()  # tried
    assert asked(titles.new_turn(state)).request_id == "c/title-2"


@pytest.mark.req("TT-4", "TT-5", "TT-6")
@pytest.mark.parametrize("why", ["off", "renamed", "named", "tried", "in flight", "exhausted"])
def test_a_moment_when_no_title_is_due_changes_nothing(why: str) -> None:
    """When no title is due, ``request_if_due`` returns the very same state and no command
    (kills it returning no state)."""
    events: dict[str, list[TitleEvent]] = {
        "off": [at.AutoTitlePreferenceChanged(enabled=False)],
        "renamed": [at.ManualRename(title="Mine")],
        "named": [], "tried": [], "in flight": [], "exhausted": [],
    }
    state, _ = play(events[why], TitleState.create("c", max_attempts=1))
    if why in ("named", "tried", "in flight", "exhausted"):
        state = asked(state)
    if why == "named":
        state, _ = play([at.TitleGenerated(request_id="c/title-1", title="T")], state)
    if why in ("tried", "exhausted"):
        state, _ = play([at.TitleFailed(request_id="c/title-1", reason="offline")], state)
    if why == "exhausted":
        state = titles.new_turn(state)
    after, commands = titles.request_if_due(state, TitleTrigger.USABLE_RESPONSE)
    assert after is state and commands == ()


@pytest.mark.req("TT-6")
def test_a_chat_tries_three_naming_requests_by_default() -> None:
    """``TitleState.create`` without ``max_attempts``: after three failed requests, each in its
    own turn, no fourth is made (kills a default of 4)."""
    state = TitleState.create("c")
    for number in (1, 2, 3):
        state = asked(titles.new_turn(state))
        state, _ = play([at.TitleFailed(request_id=f"c/title-{number}", reason="x")], state)
    state = titles.new_turn(state)
    assert not titles.is_due(state)
    assert titles.request_if_due(state, TitleTrigger.USABLE_RESPONSE).commands == ()


@pytest.mark.req("TT-4")
def test_zero_attempts_is_allowed_and_never_asks() -> None:
    """``max_attempts=0`` is valid ("zero or more") and means no naming request is ever made
    (kills the bound mutated to refuse zero)."""
    state = TitleState.create("c", max_attempts=0)
    assert state.max_attempts == 0 and not titles.is_due(state)
    after, commands = titles.request_if_due(state, TitleTrigger.TOOL_ROUND)
    assert after is state and commands == ()


@pytest.mark.req("TT-6")
@pytest.mark.parametrize(("arguments", "message"), [
    ({"chat_id": ""}, "TitleState.chat_id must be a non-empty id"),
    ({"chat_id": 7}, "TitleState.chat_id must be a non-empty id"),
    ({"chat_id": "c", "enabled": 1}, "TitleState.enabled must be a bool"),
    ({"chat_id": "c", "max_attempts": -1},
     "TitleState.max_attempts must be an int that is zero or more"),
    ({"chat_id": "c", "max_attempts": True},
     "TitleState.max_attempts must be an int that is zero or more"),
    ({"chat_id": "c", "max_attempts": 2.0},
     "TitleState.max_attempts must be an int that is zero or more"),
], ids=["empty id", "int id", "int enabled", "negative", "bool attempts", "float attempts"])
def test_bad_create_arguments_raise_a_field_error_naming_the_field(
        arguments: dict[str, typing.Any], message: str) -> None:
    """``TitleState.create`` refuses each bad argument with ``FieldError`` whose message names
    the field exactly (kills the mutants of the checks and of the three messages)."""
    with pytest.raises(at.FieldError) as caught:
        TitleState.create(**arguments)
    assert str(caught.value) == message


@pytest.mark.req("TT-6")
@pytest.mark.parametrize("event", [
    at.TitleGenerated(request_id="other/title-1", title="forged"),
    at.TitleFailed(request_id="other/title-1", reason="x"),
    at.TitleGenerated(request_id="c/title-2", title="early"),
], ids=["another chat's", "another chat's failure", "never issued"])
def test_a_result_for_a_request_this_chat_never_made_is_refused_with_its_particulars(
        event: at.TitleGenerated | at.TitleFailed) -> None:
    """A naming result whose id this chat never issued (another chat's id, or a number not
    reached) is misuse: ``UnknownId`` with the part, the phase, the event and what was expected,
    and the state is unchanged. Kills ``issued`` accepting another chat's prefix and the
    mutants of the error's arguments."""
    state = asked(TitleState.create("c"))
    with pytest.raises(at.UnknownId) as caught:
        titles.reduce(state, event)
    error = caught.value
    assert (error.part, error.phase, error.event, error.expected) == (
        "titles", "NAMING", event, "a naming result for a request this chat made")
    assert titles.naming_in_flight(state) and state.request_id == "c/title-1"


@pytest.mark.req("TT-6")
def test_the_answer_to_an_earlier_request_is_absorbed() -> None:
    """With title-2 in flight, the late answer to title-1 is a ``StaleAnswerIgnored`` and
    changes nothing; title-2's answer then names the chat."""
    state = asked(titles.new_turn(failed_once()))
    late = at.TitleGenerated(request_id="c/title-1", title="late")
    after, commands = titles.reduce(state, late)
    assert after is state and commands == (at.StaleAnswerIgnored(
        event="TitleGenerated", answer_id="c/title-1",
        reason="no longer waiting for this naming request"),)
    state, commands = play([at.TitleGenerated(request_id="c/title-2", title="Now")], state)
    assert commands == (at.SetTitle(chat_id="c", title="Now"),)
    assert state.phase is TitlePhase.NAMED
