"""What runs next once a step's messages are delivered (the settle loop: BG-5, BG-7, SO-2,
TL-11): held automatic turns start when nothing holds them back any more, the retry window keeps
the chat for the user's retry, a prompt only the client holds is waited for, and follow-up
suggestions come only when nothing has priority.
"""

from __future__ import annotations

from typing import Any

import pytest
from checked_host import Checked, cron, prompt, replies_with_queued, script_todos
from session_host import PROMPT, Host, say, todo_call, todos
from session_scenes import (
    CRON,
    PENDING,
    READ,
    ScriptHost,
    armed_host,
    armed_script,
    held,
    persisted_texts,
    resume,
    start_armed,
    waits,
)
from strict_host import StrictHost, user_texts

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn import trace


@pytest.mark.req("BG-7")
def test_follow_up_suggestions_only_when_nothing_has_priority() -> None:
    """req: BG-7 — suppressed after a turn whose chain can resume (awaiting background), offered
    after a plain finished turn."""
    host = Host()
    host.responses.append(say("Hello."))
    host.send(PROMPT)
    assert host.commands(se.OfferFollowUpSuggestions) == [
        se.OfferFollowUpSuggestions(turn_id="t1")]
    busy = armed_host()
    busy.responses.clear()
    busy.responses.append(say("Planning.", todo_call("tw1")))
    busy.send(PROMPT)
    request = busy.held.pop()
    busy.send(se.BackgroundStarted(kind=se.BackgroundKind.MONITOR, item_id="mon"))
    busy.responses.append(say("Watching."))
    busy.answer(request)
    busy.send()
    assert [c.reason for c in busy.commands(se.SuppressFollowUpSuggestions)] == [
        "a work chain can still resume"]


def idle_holding_cron() -> Host:
    """An armed chain ended deferring for background work it started (the guard holds
    automatic turns), and a cron fire came: the session is idle with the cron held."""
    host = Host()
    start_armed(host)
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="build"))
    resume(host, say("Waiting for the build."))
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert host.state.phase is se.SessionPhase.IDLE
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]
    return host


def awaiting_client_prompt() -> Host:
    """An armed chain whose drain reply said the client holds a queued prompt (the session's
    FIFO is empty): the chain awaits it; a cron fire is held behind it."""
    host = Host()
    start_armed(host)
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, has_queued_prompt=True)
    resume(host, say("Stopping here."))
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]
    return host


def _malformed(call_id: str) -> dict[str, Any]:
    return {"text": "", "finish_reason": "tool_use", "malformed_tool_format": True,
            "tool_calls": (at.ToolCall(call_id=call_id, name="read_file", arguments="{"),)}


# The session-composition defects of issue 18 (``settle_spec.md``): each ``test_dNN_...``
# pins the fixed behaviour of defect NN.


@pytest.mark.req("BG-5")
def test_d01_a_related_notification_held_during_the_turn_starts_when_the_turn_ends() -> None:
    """A notification of background work the chain started, due while the chain's turn runs,
    is held, and starts as its own turn (prompt saved, request sent) when that turn ends
    deferring for it: the session does not idle. req: BG-5"""
    host = Host()
    start_armed(host)
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="build"))
    host.send(se.BackgroundEnded(item_id="build", notification_id="nb"))
    due = se.AutomaticTurnDue(turn_id="n1", message_id="n1m", text="the build finished",
                              kind=se.AutomaticKind.NOTIFICATION, source_id="build")
    assert host.send(due) == [se.AutomaticTurnDeferred(turn_id="n1")]
    commands = resume(host, say("Waiting for the build."))  # no response for n1: it stays open
    ends = [c for c in commands if isinstance(c, at.EndTurn)]
    assert [e.turn_id for e in ends] == ["t1"]
    assert not any(g.is_guard_prompt(t) for t in host.user_messages())  # deferred for it
    after = commands[commands.index(ends[0]):]
    assert at.Persist(key="n1/p1", records=(
        at.UserMessageRecord(message_id="n1m", text="the build finished"),)) in after
    assert host.state.phase is se.SessionPhase.TURN
    assert host.state.turn.turn_id == "n1"
    assert isinstance(host.held[-1], at.RequestModelStream)
    assert host.held[-1].request_id == "n1/r1"


@pytest.mark.req("SG-A11", "BG-5", "TL-11")
def test_d01_a_related_turn_clears_the_retry_pause_and_runs_at_once() -> None:
    """After an API error pauses the chain, a related automatic turn that comes due is a
    trusted continuation: it runs at once instead of waiting for the retry window, the retry
    is withdrawn with a notice and its timer cancelled, and the chain keeps its budget.
    req: SG-A11"""
    host = Host()
    start_armed(host)
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.AGENT, item_id="agent-1"))
    request = held(host, at.RequestModelStream)
    failed = host.send(at.StreamFailed(request_id=request.request_id, error="overloaded"))
    assert [c.outcome.kind for c in failed if isinstance(c, at.EndTurn)] == [
        at.OutcomeKind.ERROR]
    assert se.StartTimer(key="t1/retry", seconds=300.0) in failed
    chain = host.state.guard.chain
    host.send(se.BackgroundEnded(item_id="agent-1", notification_id="na"))
    due = se.AutomaticTurnDue(turn_id="n1", message_id="n1m", text="the agent finished",
                              kind=se.AutomaticKind.NOTIFICATION, source_id="agent-1")
    started = host.send(due)
    assert se.CancelTimer(key="t1/retry") in started
    [withdrawn] = [c for c in started if isinstance(c, se.RetryWithdrawn)]
    assert withdrawn.turn_id == "t1" and "related automatic turn" in withdrawn.reason
    assert "the agent finished" in persisted_texts(started)
    assert host.state.turn.turn_id == "n1"
    assert host.state.guard.chain == chain and host.state.guard.armed
    assert host.state.guard.phase is g.GuardPhase.ACTIVE
    # the timer was cancelled; a firing that crossed the cancel is absorbed
    assert isinstance(host.send(se.TimerFired(key="t1/retry"))[0], at.StaleAnswerIgnored)


@pytest.mark.req("TL-11", "BG-5")
def test_an_unrelated_turn_still_waits_for_the_retry_window() -> None:
    """Only a related automatic turn clears the retry pause: an unrelated cron turn is held
    while the resumable turn keeps the chat, and starts when the window runs out. req: TL-11"""
    host = Host()
    start_armed(host)
    request = held(host, at.RequestModelStream)
    host.send(at.StreamFailed(request_id=request.request_id, error="overloaded"))
    cron_due = se.AutomaticTurnDue(turn_id="c1", message_id="c1m", text="nightly",
                                   kind=se.AutomaticKind.CRON, source_id="nightly")
    assert host.send(cron_due) == [se.AutomaticTurnDeferred(turn_id="c1")]
    fired = host.send(se.TimerFired(key="t1/retry"))
    assert "nightly" in persisted_texts(fired)
    assert host.state.turn.turn_id == "c1"


@pytest.mark.req("SG-S1", "BG-5")
def test_d02_a_hard_stop_while_idle_does_not_halt_the_held_turn_it_releases() -> None:
    """``HardStopped`` while idle with a held automatic turn: the held turn starts after it
    and runs to its end (its request is sent, the model answers); it is not halted.
    req: SG-S1"""
    host = idle_holding_cron()
    host.responses.append(say("Nightly report written."))
    commands = host.send(se.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION,
                                        reason="loop protection"))
    assert "nightly report" in persisted_texts(commands)
    assert [c.request_id for c in commands if isinstance(c, at.RequestModelStream)] == [
        "cron-1/r1"]
    assert [(c.turn_id, c.outcome.kind) for c in commands if isinstance(c, at.EndTurn)] == [
        ("cron-1", at.OutcomeKind.FINISHED)]
    assert not host.responses  # the model ran


@pytest.mark.req("SO-2", "BG-5", "BG-7")
@pytest.mark.parametrize("event", [
    se.LifecycleChanged(kind=g.TrustClearingKind.REWIND),
    g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
    se.LifecycleChanged(kind=g.TrustClearingKind.WORKING_DIRECTORY_CHANGED),
    se.HardStopped(kind=g.HardStopKind.RESOURCE_LIMIT, reason="memory"),
], ids=["rewind", "plan", "cwd", "hard-stop"])
def test_d07_the_wait_for_a_client_held_prompt_survives_what_clears_the_chain(
        event: object) -> None:
    """The wait for a prompt only the client holds survives a rewind, Plan mode, a working
    directory change and a hard stop: the held automatic turn does not run ahead of it, no
    follow-ups are offered, and it runs only after the prompt did. req: SO-2"""
    host = awaiting_client_prompt()
    host.responses.extend([say("Queued one done."), say("Nightly report written.")])
    commands = host.send(event)
    assert "nightly report" not in host.user_messages()
    assert not [c for c in commands if isinstance(c, se.OfferFollowUpSuggestions)]
    assert se.WaitKind.CLIENT_PROMPT in waits(host.state)
    before = len(host.user_messages())
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="the queued one"))
    assert host.user_messages()[before:][:1] == ["the queued one"]


@pytest.mark.req("SO-2", "SO-5", "BG-7")
def test_d07_the_wait_for_a_client_held_prompt_survives_stop() -> None:
    """A drain reply said the client holds a queued prompt (FIFO empty) while mid-turn
    messages continue the turn; the user presses Stop: the held automatic turn does not run
    ahead of the prompt and no follow-ups are offered. req: SO-2"""
    # Reading: the drain reply's has_queued_prompt=True starts the wait, even when its
    # messages run first (SO-5); Stop on that continuation does not make the prompt vanish.
    host = Host()
    start_armed(host)
    replies = iter([se.MidTurnDrained(drain_id="t1/drain-1", messages=("use tabs",),
                                      has_queued_prompt=True)])
    host.drain = lambda c: next(replies, se.MidTurnDrained(drain_id=c.drain_id))
    resume(host, say("Stopping here."))
    lead_request = host.held[-1]
    assert isinstance(lead_request, at.RequestModelStream) and lead_request.lead_ids
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]
    host.responses.append(say("Nightly report written."))
    stopped = host.send(at.StopPressed())
    assert [c.outcome.kind for c in stopped if isinstance(c, at.EndTurn)
            and c.turn_id == "t1"] == [at.OutcomeKind.CANCELLED]
    assert "nightly report" not in host.user_messages()
    assert not [c for c in stopped if isinstance(c, se.OfferFollowUpSuggestions)]
    assert se.WaitKind.CLIENT_PROMPT in waits(host.state)


@pytest.mark.req("BG-5", "SG-S1")
@pytest.mark.parametrize(("turn", "ending", "kind"), [
    ({}, [{"text": "cut", "finish_reason": "length", "tool_calls": ()}],
     at.OutcomeKind.OUTPUT_LIMIT),
    ({}, [{"text": "withheld", "finish_reason": "content_filter", "tool_calls": ()}],
     at.OutcomeKind.CONTENT_FILTERED),
    ({}, [{"text": "odd", "finish_reason": "weird_reason", "tool_calls": ()}],
     at.OutcomeKind.UNRECOGNIZED_FINISH),
    ({}, [_malformed("c8"), _malformed("c9")], at.OutcomeKind.MALFORMED_TOOL_FORMAT),
    ({"max_requests": 2}, [say("Reading.", READ)], at.OutcomeKind.ACTION_BUDGET),
], ids=["length", "content-filter", "unrecognized", "malformed-twice", "action-budget"])
def test_d08_a_chain_ended_by_a_hard_ending_no_longer_holds_automatic_turns(
        turn: dict[str, Any], ending: list[dict[str, Any]], kind: at.OutcomeKind) -> None:
    """A chain whose turn ends on an output limit, a content filter, an unrecognized finish
    reason, a second malformed format or the action budget cannot resume: the held cron turn
    starts right after that end, and the guard no longer holds automatic turns. req: BG-5"""
    host = Host(turn=at.TurnConfig(auto_title=False, **turn))
    start_armed(host)
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]
    commands = resume(host, *ending)  # no response for the cron: its request stays open
    ends = [c for c in commands if isinstance(c, at.EndTurn)]
    assert [(e.turn_id, e.outcome.kind) for e in ends] == [("t1", kind)]
    after = commands[commands.index(ends[0]):]
    assert "nightly report" in persisted_texts(after)
    assert host.state.turn.turn_id == "cron-1"
    assert not g.holds_automatic_turns(host.state.guard)


@pytest.mark.req("SG-S2", "TL-11")
def test_d09_a_stream_failure_does_not_pause_the_queued_prompt_that_starts_after_it() -> None:
    """The guard hears a ``StreamFailed`` before the queued prompt it lets start: the new
    prompt's chain is active, not paused, and its own todo write arms it. req: SG-S2"""
    host = Host()
    host.send(PROMPT)
    request = held(host, at.RequestModelStream)
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="next task"))
    host.responses.append(say("Planning.", todo_call("tw9")))
    host.tool_results["tw9"] = PENDING
    failed = host.send(at.StreamFailed(request_id=request.request_id, error="overloaded"))
    assert [(c.turn_id, c.outcome.kind) for c in failed if isinstance(c, at.EndTurn)] == [
        ("t1", at.OutcomeKind.ERROR)]
    assert host.state.turn.turn_id == "q1"
    assert host.state.guard.phase is g.GuardPhase.ACTIVE
    assert host.state.guard.armed


@pytest.mark.req("TL-11", "BG-5")
def test_d10_after_a_resumable_error_an_automatic_turn_waits_for_the_users_retry() -> None:
    """After a resumable API error the chat is the user's retry: a retry window opens
    (``StartTimer``), an automatic turn that comes due is held, and ``ContinueTurn`` within
    the window still works and closes it (``CancelTimer``). req: TL-11"""
    host = Host()
    host.send(PROMPT)
    request = held(host, at.RequestModelStream)
    failed = host.send(at.StreamFailed(request_id=request.request_id, error="overloaded"))
    assert [c.outcome.resumable for c in failed if isinstance(c, at.EndTurn)] == [True]
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]
    assert "nightly report" not in host.user_messages()
    assert se.StartTimer(key="t1/retry", seconds=300.0) in failed
    continued = host.send(at.ContinueTurn(turn_id="t1"))
    assert se.CancelTimer(key="t1/retry") in continued
    assert [c.request_id for c in continued if isinstance(c, at.RequestModelStream)] == [
        "t1/r2"]


@pytest.mark.req("TL-11", "BG-5")
def test_d10_when_the_retry_window_runs_out_the_held_turn_runs_and_the_retry_is_withdrawn(
        ) -> None:
    """The retry window's ``TimerFired``: the held automatic turn takes over the chat, and
    ``RetryWithdrawn`` for the resumable turn comes before that turn's commands. req: TL-11"""
    host = Host()
    host.send(PROMPT)
    request = held(host, at.RequestModelStream)
    host.send(at.StreamFailed(request_id=request.request_id, error="overloaded"))
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]
    fired = host.send(se.TimerFired(key="t1/retry"))
    withdrawn = [c for c in fired if isinstance(c, se.RetryWithdrawn)]
    assert [c.turn_id for c in withdrawn] == ["t1"]
    prompt = next(c for c in fired if isinstance(c, at.Persist)
                  and "nightly report" in persisted_texts([c]))
    assert fired.index(withdrawn[0]) < fired.index(prompt)
    assert host.state.turn.turn_id == "cron-1"


@pytest.mark.req("BG-5", "SG-A12")
@pytest.mark.parametrize("event", [
    se.LifecycleChanged(kind=g.TrustClearingKind.DAEMON_RESTART),
    se.BackgroundStarted(kind=se.BackgroundKind.MONITOR, item_id="mon"),
], ids=["daemon-restart", "background-started"])
def test_d14_after_a_restore_the_next_event_starts_the_first_held_turn(event: object) -> None:
    """An idle session holding an automatic turn is saved and restored (the guard comes back
    fresh): the next event starts the held turn. req: BG-5"""
    host = idle_holding_cron()
    host.state = trace.load_state(trace.dump_state(host.state))
    assert host.state.guard.phase is g.GuardPhase.NO_CHAIN
    commands = host.send(event)
    assert "nightly report" in persisted_texts(commands)
    assert host.state.turn.turn_id == "cron-1"
    assert host.state.phase is se.SessionPhase.TURN


@pytest.mark.req("BG-7", "TT-3")
def test_d17_follow_ups_wait_for_the_naming_request() -> None:
    """``OfferFollowUpSuggestions`` is not emitted while a naming request is unanswered; it
    comes once the title arrives, nothing else having started. req: BG-7"""
    host = ScriptHost(hold=(at.RequestTitle,), turn=at.TurnConfig(auto_title=True))
    host.responses.append(say("Hello there."))
    ended = host.send(PROMPT)
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    title = held(host, at.RequestTitle)
    assert not [c for c in ended if isinstance(c, se.OfferFollowUpSuggestions)]
    named = host.send(at.TitleGenerated(request_id=title.request_id, title="Greeting"))
    assert [c for c in named if isinstance(c, se.OfferFollowUpSuggestions)] == [
        se.OfferFollowUpSuggestions(turn_id="t1")]


@pytest.mark.req("SO-3", "SO-4", "SG-S1")
def test_d21_after_the_awaited_prompt_is_aborted_the_old_chains_result_starts_afresh(
        ) -> None:
    """The chain awaits a client-held prompt (a hard stop comes meanwhile), then that prompt
    is aborted: the old chain's own background result runs a turn that starts a new, unarmed
    chain, which earns no guard continuation. req: SO-3"""
    # Without the hard stop in between the current code already does this (the abort forgets
    # the chain); the hard stop is what shows the defect: the wait survives it (defect 7) and
    # the abort must still end the old chain for good.
    host = Host()
    start_armed(host)
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.AGENT, item_id="agent-1"))
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, has_queued_prompt=True)
    resume(host, say("Stopping here."))
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    host.send(se.HardStopped(kind=g.HardStopKind.RESOURCE_LIMIT, reason="memory"))
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    host.send(se.PromptAborted(prompt_id="p-client"))
    chain = host.state.guard.chain
    host.send(se.BackgroundEnded(item_id="agent-1", notification_id="na"))
    host.send(se.AutomaticTurnDue(turn_id="n1", message_id="n1m", text="the agent finished",
                                  kind=se.AutomaticKind.NOTIFICATION, source_id="agent-1"))
    assert host.state.turn.turn_id == "n1"
    assert host.state.guard.chain == chain + 1
    assert host.state.guard.phase is g.GuardPhase.ACTIVE
    assert not host.state.guard.armed
    resume(host, say("Read the agent's result."), say("never sent"))
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert [r["text"] for r in host.responses] == ["never sent"]


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


@pytest.mark.req("SO-4")
def test_aborting_the_clients_only_queued_prompt_releases_held_automatic_turns() -> None:
    host = StrictHost()
    host.armed_natural_stop()
    host.drain(queued=True)                      # the client's list has a prompt in upload
    assert host.send(se.AutomaticTurnDue(
        turn_id="cron-1", message_id="cron-1/m", text="tick", kind=se.AutomaticKind.CRON,
        source_id="task")) == (se.AutomaticTurnDeferred(turn_id="cron-1"),)
    cmds = host.send(se.PromptAborted(prompt_id="p-in-upload"))   # the user cancels it
    assert user_texts(cmds) == ["tick"]


@pytest.mark.req("SO-4")
def test_aborting_the_last_queued_prompt_releases_held_automatic_turns() -> None:
    host = StrictHost()
    host.armed_natural_stop()
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1/m", text="later", complete=False))
    host.drain(queued=True)
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1/m", text="tick",
                                 kind=se.AutomaticKind.CRON, source_id="task"))
    cmds = host.send(se.PromptAborted(prompt_id="q1"))
    assert user_texts(cmds) == ["tick"]
    # SO-3: the aborted prompt never comes back
    assert "later" not in user_texts(host.all_commands())


def paused_with_background(kind: se.BackgroundKind, item_id: str) -> Checked:
    """An armed chain that started background item ``item_id``, then whose request failed with
    a network error: the chain is paused and the turn keeps the chat for its retry."""
    h = Checked()
    h.tool_results["tw1"] = {"output": "ok", "structured": todos("pending")}
    h.responses.append(say("working", todo_call("tw1")))
    h.send(prompt())
    h.send(se.BackgroundStarted(kind=kind, item_id=item_id))
    request = h.take(at.RequestModelStream)
    h.send(at.StreamOpened(request_id=request.request_id),
           at.StreamFailed(request_id=request.request_id, error="503", network=True))
    return h


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


def test_client_held_prompt_waits_then_abort_releases_automatic_turns():
    """When the drain says the client holds a prompt, the idle session names that wait; aborting it
    ends the awaiting chain and runs the deferred cron turn (req: SO-2, SO-4, BG-5).
    """
    h = Checked()
    script_todos(h, "pending")
    h.drain = replies_with_queued()
    h.send(prompt())
    assert [w.kind for w in se.waiting_for(h.state)] == [se.WaitKind.CLIENT_PROMPT]
    out = h.send(cron("c1"))
    assert [type(c) for c in out] == [se.AutomaticTurnDeferred]
    h.responses.append(say("cron ran"))
    h.send(se.PromptAborted(prompt_id="client-side"))
    assert [c.turn_id for c in h.commands(at.EndTurn)] == ["t1", "c1"]
    assert h.guard_attempts() == []
    h.clean()


def test_aborted_queued_prompt_cannot_let_background_revive_old_chain():
    """After the awaited queued prompt is aborted, a result of background work the old chain started
    runs unarmed: no guard continuation (req: SO-3).
    """
    h = Checked()
    h.tool_results["tw1"] = {"output": "ok", "structured": todos("pending")}
    h.responses.append(say("working", todo_call("tw1")))
    h.drain = replies_with_queued()
    h.send(prompt())
    h.send(se.BackgroundStarted(kind=se.BackgroundKind.AGENT, item_id="bg1"))
    h.responses.append(say("stopping"))
    h.answer(h.take(at.RequestModelStream))
    h.send()
    h.send(se.PromptAborted(prompt_id="client-side"))
    h.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    h.hold.append(lambda c: isinstance(c, at.RequestModelStream) and c.request_id == "a1/r1")
    h.send(se.BackgroundEnded(item_id="bg1", notification_id="n1"),
           cron("a1", source="bg1", kind=se.AutomaticKind.NOTIFICATION))
    h.send(se.NotificationConsumed(notification_id="n1"))
    h.hold.clear()
    h.responses.extend([say("processed"), say("x"), say("y")])
    h.answer(h.take(at.RequestModelStream))
    h.send()
    assert [c.turn_id for c in h.commands(at.EndTurn)] == ["t1", "a1"]
    assert h.guard_attempts() == []
    h.clean()


def test_invalidated_prompt_ending_in_error_releases_deferred_queue():
    """A foreground prompt invalidated by a rewind that ends in an error releases the deferred
    automatic queue (req: SG-A15).
    """
    h = Checked()
    script_todos(h, "pending")
    h.responses.clear()
    h.responses.append(say("working", todo_call("tw1")))
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.send(cron("c1"))
    h.send(se.LifecycleChanged(kind=g.TrustClearingKind.REWIND))
    h.responses.append(say("cron ran"))
    h.send(at.StreamOpened(request_id=request.request_id),
           at.StreamFailed(request_id=request.request_id, error="boom", network=True))
    assert [c.turn_id for c in h.commands(at.EndTurn)] == ["t1", "c1"]


def test_related_result_runs_during_the_retry_window_and_keeps_budget():
    """A related background result does not wait for the retry window: it runs at once as a
    trusted continuation of the paused chain, and the guard continues with the chain's budget
    (req: SG-A11, BG-5).
    """
    h = paused_with_background(se.BackgroundKind.AGENT, "bg1")
    assert se.WaitKind.RETRY in [w.kind for w in se.waiting_for(h.state)]
    h.send(se.BackgroundEnded(item_id="bg1", notification_id="n1"),
           cron("a1", source="bg1", kind=se.AutomaticKind.NOTIFICATION))
    assert not se.held(h.state)
    assert se.WaitKind.RETRY not in [w.kind for w in se.waiting_for(h.state)]
    h.send(se.NotificationConsumed(notification_id="n1"))
    h.responses.extend([say("processed"), say("a"), say("b")])
    h.answer(h.take(at.RequestModelStream))
    h.send()
    assert h.guard_attempts() == [1, 2]
    assert h.commands(at.EndTurn)[-1].origin is at.TurnOrigin.NOTIFICATION
    h.clean()


@pytest.mark.req("SG-A11", "SG-S1", "TL-11")
def test_a_related_turn_of_a_suspended_chain_waits_for_the_retry_window():
    """A hard stop while idle suspends the paused chain: a related result can no longer
    continue it, so its turn is held like an unrelated one and the user's retry is kept
    until the window runs out (no RetryWithdrawn claiming the chain continues) (req: SG-A11).
    """
    h = paused_with_background(se.BackgroundKind.SHELL, "sh1")
    h.send(se.HardStopped(kind=at.HardStopKind.LOOP_PROTECTION, reason="loop"))
    out = h.send(se.BackgroundEnded(item_id="sh1", notification_id="n1"),
                 cron("a1", source="sh1", kind=se.AutomaticKind.NOTIFICATION))
    assert not any(isinstance(c, se.RetryWithdrawn) for c in out)
    assert [held.turn_id for held in se.held(h.state)] == ["a1"]
    assert se.WaitKind.RETRY in [w.kind for w in se.waiting_for(h.state)]
    fired = h.send(se.TimerFired(key="t1/retry"))
    [withdrawn] = [c for c in fired if isinstance(c, se.RetryWithdrawn)]
    assert "window ran out" in withdrawn.reason


@pytest.mark.req("TL-11")
@pytest.mark.parametrize("withdrawal", ["window", "related turn", "new prompt"])
def test_a_continue_click_that_crosses_the_withdrawal_of_its_retry_is_absorbed(
        withdrawal: str):
    """The retry was withdrawn (its window ran out, a related automatic turn or a new prompt
    took the chat); a Continue click naming it, sent before the UI heard, is a race: absorbed
    with ``StaleAnswerIgnored``, nothing changed (req: TL-11)."""
    h = paused_with_background(se.BackgroundKind.AGENT, "bg1")
    if withdrawal == "window":
        h.send(se.TimerFired(key="t1/retry"))
    elif withdrawal == "related turn":
        h.send(se.BackgroundEnded(item_id="bg1", notification_id="n1"),
               cron("a1", source="bg1", kind=se.AutomaticKind.NOTIFICATION))
        assert h.state.turn.turn_id == "a1"
    else:
        h.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="something else"))
        assert h.state.turn.turn_id == "t2"
    before = h.state
    absorbed = se.reduce(before, at.ContinueTurn(turn_id="t1"))
    assert [type(c) for c in absorbed.commands] == [at.StaleAnswerIgnored]
    assert absorbed.state == before


def test_hard_stop_while_idle_is_not_cleared_by_related_result():
    """A hard stop arriving while idle suspends the paused chain; a later related result runs but
    never continues the guard (req: SG-A11, SG-S1).
    """
    h = paused_with_background(se.BackgroundKind.SHELL, "sh1")
    out = h.send(se.HardStopped(kind=at.HardStopKind.RESOURCE_LIMIT, reason="mem"))
    assert not any(isinstance(c, at.EndTurn) for c in out)
    h.send(se.BackgroundEnded(item_id="sh1", notification_id="n1"),
           cron("a1", source="sh1", kind=se.AutomaticKind.NOTIFICATION))
    h.send(se.TimerFired(key="t1/retry"))
    h.send(se.NotificationConsumed(notification_id="n1"))
    h.responses.extend([say("p"), say("q"), say("r")])
    h.answer(h.take(at.RequestModelStream))
    h.send()
    assert h.guard_attempts() == []
    assert h.commands(at.EndTurn)[-1].turn_id == "a1"
    h.clean()


def test_follow_ups_suppressed_while_chain_can_resume():
    """After a resumable error with an armed chain the session suppresses follow-up suggestions and
    names the retry it waits for (req: BG-7, SG-S2).
    """
    h = Checked()
    script_todos(h, "pending")
    h.responses.clear()
    h.responses.append(say("working", todo_call("tw1")))
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.send(at.StreamFailed(request_id=request.request_id, error="x", network=True))
    assert h.commands(se.OfferFollowUpSuggestions) == []
    assert h.commands(se.SuppressFollowUpSuggestions)[0].turn_id == "t1"
    kinds = [w.kind for w in se.waiting_for(h.state)]
    assert se.WaitKind.RETRY in kinds
    h.clean()


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


@pytest.mark.req("BG-5", "SG-S1", "SG-B9")
def test_a_compaction_failure_that_suspends_the_chain_starts_a_held_turn_at_once() -> None:
    """An ordinary request of an armed chain fails compaction while an unrelated cron turn is
    held: the turn ends COMPACTION_FAILED, the chain is suspended, and in the same step the held
    turn starts (its prompt saved, its request sent) as a new chain."""
    host = armed_script(Host())
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
