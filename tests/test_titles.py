"""Automatic chat titles, one requirement at a time (TT-1 ... TT-6)."""

from __future__ import annotations

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
