"""The session: stop ordering, the daemon FIFO, Stop hooks, background work, clients and replay.

Each test drives :mod:`agentturn.session` through the scripted daemon host of
``session_host.py`` (which answers every awaiting command) and reads what came out.
"""

from __future__ import annotations

import math

import pytest
from session_host import ON, Host, say, todo_call, todos

import agentturn as at
from agentturn import guard as g
from agentturn import session as se

PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser")
GUARD_PROMPT = "[Todo Stop Guard] 1 todo item(s) are still pending"


def armed_host(*more: dict[str, object], **config: object) -> Host:
    """A daemon whose first response writes one unfinished todo, then stops, then ``more``."""
    host = Host(**config)  # type: ignore[arg-type]
    host.responses.extend([say("Planning.", todo_call("tw1")), say("Stopping here.")])
    host.responses.extend(more)
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending", "completed")}
    return host


# --- stop ordering --------------------------------------------------------------------------


@pytest.mark.req("SO-7", "OB-1", "OB-2", "SG-B3")
def test_an_armed_daemon_continues_twice_then_reports_exhaustion() -> None:
    """req: SO-7, OB-1, OB-2, OB-3, SG-B1 — two continuations with the exact texts, each a
    discrete replayable chunk with its metadata, then the exhaustion message, once."""
    host = armed_host(say("Still working."), say("Still not done."))
    host.send(PROMPT)
    chunks = host.published(se.EntryKind.GUARD_CHUNK)
    assert [dict(c.meta or {})["attempt"] for c in chunks] == [1, 2]
    assert all(dict(c.meta or {})["source"] == "todo_stop_guard" for c in chunks)
    assert chunks[0].text == g.continuation_text(1, 1)
    assert chunks[1].text == g.continuation_text(2, 1)
    exhausted = host.published(se.EntryKind.GUARD_EXHAUSTED)
    assert [e.text for e in exhausted] == [g.exhaustion_text(1)]
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert host.state.usage == se.Usage(model_calls=4, guard_calls=2, hook_calls=0)


@pytest.mark.req("SO-1", "SG-A9", "SG-B2")
def test_mid_turn_messages_run_first_and_reset_the_budget() -> None:
    """req: SO-1, SG-A9, SG-B2 — at the second stop the drain holds a message: it becomes a
    Lead, the next request carries it, no guard prompt is sent at that stop, and the guard has
    two fresh attempts afterwards."""
    host = armed_host(say("Working."), say("Read it."), say("More."), say("Done?"))
    replies = iter([(), ("use tabs, not spaces",), (), (), ()])
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, messages=next(replies))
    host.send(PROMPT)
    requests = host.commands(at.RequestModelStream)
    with_lead = [r for r in requests if r.lead_ids]
    assert len(with_lead) == 1
    assert "use tabs, not spaces" in host.user_messages()
    attempts = [dict(c.meta or {})["attempt"] for c in host.published(se.EntryKind.GUARD_CHUNK)]
    assert attempts == [1, 1, 2]  # one before the message, a fresh stage of two after it
    assert not host.commands(se.RunStopHooks)


@pytest.mark.req("SO-2", "BR-1")
def test_a_complete_queued_prompt_wins_over_the_guard() -> None:
    """req: SO-2, BR-1 — the drain reports a queued prompt: the turn finishes without a guard
    continuation and the queued prompt runs next, in a new unarmed chain."""
    host = armed_host(say("Next task done."))
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, has_queued_prompt=True)
    host.send(se.PromptQueued(prompt_id="q0", message_id="q0m", text="first"))
    assert host.state.turn.turn_id == "q0"
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="then this"))
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert host.outcomes() == [at.OutcomeKind.FINISHED, at.OutcomeKind.FINISHED]
    assert host.user_messages() == ["first", "then this"]
    assert host.state.phase is se.SessionPhase.IDLE


@pytest.mark.req("SO-3", "SO-4", "BG-5")
def test_aborting_the_last_queued_prompt_ends_the_awaiting_chain() -> None:
    """req: SO-3, SO-4, BG-5 — the chain awaits a queued prompt that is still uploading; the
    user aborts it: the awaiting chain ends, a held automatic turn is released and runs, and no
    background result revives the old chain."""
    host = armed_host(say("Cron ran."))
    host.send(se.PromptQueued(prompt_id="q9", message_id="q9m", text="draft", complete=False))
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, has_queued_prompt=True)
    host.send(PROMPT)
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cm", text="nightly",
                                  kind=se.AutomaticKind.CRON, source_id="task-1"))
    assert host.commands(se.AutomaticTurnDeferred)
    host.send(se.PromptAborted(prompt_id="q9"))
    assert "nightly" in host.user_messages()
    assert "draft" not in host.user_messages()
    assert not host.published(se.EntryKind.GUARD_CHUNK)


@pytest.mark.req("SO-5")
def test_fifo_priority_survives_the_mid_turn_continuation() -> None:
    """req: SO-5 — one drain sees a message and a queued prompt: the message runs first; at the
    next stop the queued prompt wins although the chain is still armed with unfinished todos."""
    host = armed_host(say("Tabs it is."), say("Queued one."))
    first = iter([True])

    def drain(command: se.DrainMidTurnQueue) -> at.Event:
        if next(first, False):
            return se.MidTurnDrained(drain_id=command.drain_id, messages=("use tabs",),
                                     has_queued_prompt=True)
        return se.MidTurnDrained(drain_id=command.drain_id)  # the flag omitted now

    host.drain = drain
    host.send(se.PromptQueued(prompt_id="t1", message_id="m1", text="first"))
    host.send(se.PromptQueued(prompt_id="q2", message_id="q2m", text="queued"))
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert host.user_messages() == ["first", "use tabs", "queued"]


@pytest.mark.req("SO-6", "SO-8", "OB-5")
def test_a_hook_block_and_the_guard_make_one_combined_call() -> None:
    """req: SO-6, SO-8, OB-5 — the Stop hook blocks the same stop the guard continues: one
    continuation message holds both reasons; the counters stay apart; usage counts the call
    for both."""
    host = armed_host(say("Fixed."), stop_hooks=True)
    blocks = iter([True])
    host.hooks = lambda c: (se.StopHookDecided(run_id=c.run_id, block=True, reason="Tests fail.")
                            if next(blocks, False) else
                            se.StopHookDecided(run_id=c.run_id, block=False))
    host.send(PROMPT)
    combined = se.combined_continuation("Tests fail.", g.continuation_text(1, 1))
    assert combined == "Tests fail.\n\n" + g.continuation_text(1, 1)
    assert combined in host.user_messages()
    assert host.state.usage.guard_calls >= 1 and host.state.usage.hook_calls == 1
    assert host.state.hook_blocks == 0  # the next stop was not blocked: the streak ended


@pytest.mark.req("SO-6", "SG-S1")
def test_the_stop_hook_cap_ends_the_turn_with_a_warning_and_suspends_the_guard() -> None:
    """req: SO-6, SG-S1 — a hook that blocks every stop: after ``stop_hook_cap`` continuations
    the next block ends the turn with a warning, and the guard's chain is suspended."""
    host = Host(stop_hooks=True, stop_hook_cap=2, guard=ON)
    host.responses.extend([say("a"), say("b"), say("c"), say("d")])
    host.hooks = lambda c: se.StopHookDecided(run_id=c.run_id, block=True, reason="Not yet.")
    host.send(PROMPT)
    assert host.user_messages().count("Not yet.") == 2
    assert [w.text for w in host.commands(se.Warn)] == [
        "The Stop hook blocked 2 times in a row; the turn ends here."]
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED


@pytest.mark.req("SO-6")
@pytest.mark.parametrize("cap", [math.nan, math.inf, 0, -3, 0.5, "8"])
def test_a_nonsense_hook_cap_falls_back_to_eight(cap: object) -> None:
    """req: SO-6 — a non-finite, below-1 or non-numeric cap is the default, 8."""
    assert se.SessionConfig(chat_id="c", stop_hook_cap=cap).stop_hook_cap == 8  # type: ignore[arg-type]


@pytest.mark.req("SO-6")
def test_a_hook_that_errors_or_times_out_does_not_block() -> None:
    """req: SO-6 — StopHookFailed never blocks: with the guard off the turn ends."""
    host = Host(stop_hooks=True, guard=g.GuardConfig(daemon=True))
    host.responses.append(say("Done."))
    host.hooks = lambda c: se.StopHookFailed(run_id=c.run_id, error="hook crashed", timed_out=True)
    host.send(PROMPT)
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert len(host.commands(at.RequestModelStream)) == 1


@pytest.mark.req("SO-7", "BG-2", "BG-1")
def test_relevant_background_input_defers_the_guard() -> None:
    """req: SO-7, BG-1, BG-2 — a shell started during the chain is still live at the stop: the
    guard waits for it instead of continuing; one started before the chain does not count."""
    host = armed_host()
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="old-shell"))
    host.send(PROMPT)  # runs to the stop: old-shell is inherited, so the guard continues
    assert any(text.startswith(GUARD_PROMPT) for text in host.user_messages())
    fresh = armed_host()
    fresh.responses.clear()
    fresh.responses.append(say("Planning.", todo_call("tw1")))
    fresh.send(PROMPT)  # the request after the todo write is held
    request = fresh.held.pop()
    fresh.send(se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="build"))
    fresh.responses.append(say("Waiting for the build."))
    fresh.answer(request)
    fresh.send()
    assert not any(text.startswith(GUARD_PROMPT) for text in fresh.user_messages())
    assert fresh.outcomes() == [at.OutcomeKind.FINISHED]
    assert g.decide(fresh.state.guard, g.NaturalStop(relevant_background=True)).decision is (
        g.Decision.DEFER_FOR_BACKGROUND)


@pytest.mark.req("BG-3")
def test_inherited_background_work_does_not_block_a_new_request() -> None:
    """req: BG-3 — an agent still running from an older request is in the new chain's
    baseline: the new chain's guard continues as usual."""
    host = armed_host(say("More."), say("Even more."))
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.AGENT, item_id="agent-1"))
    host.send(PROMPT)
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2


@pytest.mark.req("BG-4")
def test_automatic_turns_never_run_stop_hooks() -> None:
    """req: BG-4 — a cron turn with Stop hooks configured ends without running them."""
    host = Host(stop_hooks=True)
    host.responses.append(say("Nightly report written."))
    host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cm", text="nightly report",
                                  kind=se.AutomaticKind.CRON, source_id="task-1"))
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert not host.commands(se.RunStopHooks)


@pytest.mark.req("BG-5", "BG-6")
def test_unrelated_cron_fires_wait_and_recurring_ones_coalesce() -> None:
    """req: BG-5, BG-6 — while a turn runs, two fires of one recurring task are held as one;
    when the turn ends it runs once, as an unarmed chain."""
    host = Host()
    host.send(PROMPT)  # no responses scripted: the request is held, the turn runs
    for number in (1, 2):
        host.send(se.AutomaticTurnDue(turn_id=f"cron-{number}", message_id=f"cm{number}",
                                      text="hourly check", kind=se.AutomaticKind.CRON,
                                      source_id="task-h", recurring=True))
    deferred = host.commands(se.AutomaticTurnDeferred)
    assert deferred == [se.AutomaticTurnDeferred(turn_id="cron-1"),
                        se.AutomaticTurnDeferred(turn_id="cron-2", coalesced_into="cron-1")]
    assert len(host.state.deferred.turns) == 1
    host.responses.extend([say("Done."), say("Checked.")])
    host.answer(host.held.pop())
    host.send()
    assert host.user_messages().count("hourly check") == 1
    assert host.outcomes() == [at.OutcomeKind.FINISHED, at.OutcomeKind.FINISHED]


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


# --- the bridge: drain replies, FIFO, clients, replay ------------------------------------------


@pytest.mark.req("BR-2")
def test_an_omitted_queued_prompt_flag_reads_as_false() -> None:
    """req: BR-2 — an older client omits ``has_queued_prompt``: the guard continues."""
    host = armed_host(say("Go on."), say("And on."))
    host.send(PROMPT)
    assert all(reply.has_queued_prompt is None for reply in host.events(se.MidTurnDrained))
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2


@pytest.mark.req("BR-1")
def test_an_incomplete_queued_prompt_has_no_priority() -> None:
    """req: BR-1 — a queued prompt still uploading is not a complete entry: the guard
    continues; once complete, it runs after the turn."""
    host = armed_host(say("Go on."), say("And on."), say("Queued ran."))
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="later", complete=False))
    host.send(PROMPT)
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2
    host.send(se.PromptCompleted(prompt_id="q1"))
    assert host.user_messages()[-1] == "later"


@pytest.mark.req("BR-3")
def test_a_late_drain_restores_its_messages_and_discards_its_snapshot() -> None:
    """req: BR-3 — the drain times out (the guard goes on without it); the late reply's message
    joins the running turn as a Lead, and its stale ``has_queued_prompt`` changes nothing."""
    host = armed_host(say("Continuing."), say("Read your note."), say("Done."))
    drains: list[se.DrainMidTurnQueue] = []
    host.drain = lambda c: (drains.append(c), None)[1]
    host.send(PROMPT)
    first = drains[0]
    host.send(se.TimerFired(key=first.drain_id))
    assert host.published(se.EntryKind.GUARD_CHUNK)  # went on without the drain
    host.send(se.MidTurnDrained(drain_id=first.drain_id, messages=("check the docs",),
                                has_queued_prompt=True))
    assert "check the docs" in host.user_messages()
    assert host.state.guard.phase is not g.GuardPhase.AWAITING_PROMPT


@pytest.mark.req("BR-3")
def test_a_late_drain_after_the_turn_hands_its_messages_back() -> None:
    """req: BR-3 — no turn runs when the late reply comes: the messages are restored, never
    dropped."""
    host = Host(guard=g.GuardConfig(daemon=True))
    host.responses.append(say("Done."))
    drains: list[se.DrainMidTurnQueue] = []
    host.drain = lambda c: (drains.append(c), None)[1]
    host.send(PROMPT)
    host.send(se.TimerFired(key=drains[0].drain_id))
    late = host.send(se.MidTurnDrained(drain_id=drains[0].drain_id, messages=("one", "two")))
    assert late == [se.RestoreMidTurnMessages(drain_id=drains[0].drain_id,
                                              messages=("one", "two"))]


@pytest.mark.req("BR-4", "TL-3", "SG-S3")
def test_grace_expiry_halts_the_turn_and_never_approves() -> None:
    """req: BR-4, TL-3, SG-S3 — the only client leaves during a permission prompt: the grace
    timer starts; it expires: the dialog is dismissed (never approved), the turn halts, the
    queued prompt is handed back, and the session closes."""
    host = Host(guard=g.GuardConfig(daemon=True))
    write = at.ToolCall(call_id="w1", name="write_file", needs_permission=True)
    host.responses.append(say("Writing.", write))
    host.send(se.ClientAttached(client_id="desktop"))
    host.send(PROMPT)
    assert host.held and isinstance(host.held[-1], at.AskPermission)
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="after"))
    assert host.send(se.ClientDetached(client_id="desktop"))[0] == se.StartTimer(
        key="grace", seconds=10.0)
    commands = host.send(se.TimerFired(key="grace"))
    assert not host.commands(at.ExecuteTool)
    # the dialog is dismissed, and the notice says what the record written for the call says
    assert at.DismissPermission(call_id="w1", recorded_as=at.ToolResultStatus.SKIPPED) in commands
    assert [(r.call_id, r.status, r.reason) for c in commands if isinstance(c, at.Persist)
            for r in c.records] == [("w1", at.ToolResultStatus.SKIPPED,
                                     "Not run: the turn ended first.")]
    assert host.outcomes() == [at.OutcomeKind.HALTED]
    assert se.PromptRefused(prompt_id="q1", text="after",
                            reason="the session closed before this prompt ran") in commands
    assert host.state.phase is se.SessionPhase.CLOSED
    # a prompt racing the close comes back with its text (issue 18, defect 16)
    assert host.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="hello?")) == [
        se.PromptRefused(prompt_id="t2", text="hello?", reason="the session is closed")]


@pytest.mark.req("BR-4")
def test_reattaching_within_grace_keeps_the_session() -> None:
    """req: BR-4 — the client comes back before the grace period ends: the timer is cancelled
    and a late TimerFired is absorbed."""
    host = Host(guard=g.GuardConfig(daemon=True))
    host.send(se.ClientAttached(client_id="a"), se.ClientDetached(client_id="a"))
    commands = host.send(se.ClientAttached(client_id="a"))
    assert commands[0] == se.CancelTimer(key="grace")
    late = host.send(se.TimerFired(key="grace"))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert host.state.phase is se.SessionPhase.IDLE


@pytest.mark.req("BR-5", "OB-6")
def test_attempts_published_with_no_subscriber_replay_after_rollover() -> None:
    """req: BR-5, OB-6 — nobody is attached; the guard continues twice while a tiny ring rolls
    over many times; a client attaching later still gets both attempts, separate, with their
    metadata."""
    chatty = [say("x" * 10) for _ in range(2)]
    host = armed_host(*chatty, ring_capacity=3, ring_pinned=4)
    host.send(PROMPT)
    for number in range(20):
        host.send(se.NotificationQueued(notification_id=f"n{number}", source_id="nobody"))
    commands = host.send(se.ClientAttached(client_id="late-client", last_seq=None))
    replayed = commands[0]
    assert isinstance(replayed, se.ReplayEvents)
    guard_entries = [e for e in replayed.entries if e.kind is se.EntryKind.GUARD_CHUNK]
    assert [dict(e.meta or {})["attempt"] for e in guard_entries] == [1, 2]


# --- the guard's inputs come from the session, once -------------------------------------------


@pytest.mark.req("SG-A3", "SG-A1")
def test_a_discovered_tool_named_todo_write_never_arms() -> None:
    """req: SG-A1, SG-A3 — a discovered (MCP) tool with the built-in's wire name is not trusted:
    no continuation."""
    host = Host()
    shadow = at.ToolCall(call_id="tw1", name="todo_write", discovered=True)
    host.responses.extend([say("Planning.", shadow), say("Stopping.")])
    host.tool_results["tw1"] = {"output": "ok", "structured": todos("pending")}
    host.send(PROMPT)
    assert not host.published(se.EntryKind.GUARD_CHUNK)


@pytest.mark.req("SG-B3", "SG-B9")
def test_a_compaction_failure_before_the_guard_stream_consumes_nothing() -> None:
    """req: SG-B3, SG-B9 — the continuation's request fails compaction: no attempt is spent,
    the chain is suspended, and the turn ends with the compaction outcome."""
    host = armed_host()
    host.send(PROMPT)
    request = host.held.pop()
    assert isinstance(request, at.RequestModelStream)
    host.send(at.CompactionFailed(request_id=request.request_id, reason="too long"))
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED
    assert host.state.guard.attempts == 0
    assert host.outcomes() == [at.OutcomeKind.COMPACTION_FAILED]
    assert host.state.usage.guard_calls == 0


@pytest.mark.req("SG-B5", "SG-B4")
def test_no_third_guard_stream_after_the_second_returns_tools() -> None:
    """req: SG-B4, SG-B5 — the second guard stream calls a tool: it runs and its result is
    saved, but no third guard-attributable request goes out; the turn ends HALTED."""
    read = at.ToolCall(call_id="r1", name="read_file")
    host = armed_host(say("Working."), say("Reading.", read), say("never sent"))
    host.send(PROMPT)
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2
    assert host.events(at.ToolFinished)[-1].call_id == "r1"
    assert host.outcomes() == [at.OutcomeKind.HALTED]
    assert len(host.responses) == 1  # the third guard stream never opened


@pytest.mark.req("SG-A14", "SG-A15")
def test_a_rewind_during_the_turn_blocks_its_late_todo_results() -> None:
    """req: SG-A12, SG-A14, SG-A15 — the user rewinds while the todo write runs: its result
    cannot arm the guard, and no continuation follows."""
    host = Host()
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending")}
    host.send(PROMPT)
    request = host.held.pop()
    # rewind after the todo write was announced but before the model stops
    host.send(se.LifecycleChanged(kind=g.TrustClearingKind.REWIND))
    host.responses.append(say("Stopping."))
    host.answer(request)
    host.send()
    assert not host.published(se.EntryKind.GUARD_CHUNK)


@pytest.mark.req("SG-C5", "SG-C6")
def test_an_interactive_session_has_no_drain_and_no_guard() -> None:
    """req: SG-C5, SG-C6 — an interactive session with the setting on: no drain, no guard."""
    host = Host(guard=g.GuardConfig(todo_stop_guard=True, daemon=False))
    host.responses.extend([say("Planning.", todo_call("tw1")), say("Stopping.")])
    host.tool_results["tw1"] = {"output": "ok", "structured": todos("pending")}
    host.send(PROMPT)
    assert not host.commands(se.DrainMidTurnQueue)
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert host.outcomes() == [at.OutcomeKind.FINISHED]


def test_the_session_refuses_a_prompt_while_a_turn_runs_and_changes_nothing() -> None:
    """A second PromptSubmitted while a turn runs is misuse (a daemon queues it)."""
    host = Host()
    host.send(PROMPT)
    before = host.state
    with pytest.raises(at.ProtocolError):
        se.reduce(host.state, at.PromptSubmitted(turn_id="t2", message_id="m2", text="x"))
    assert host.state is before


def test_the_session_graph_is_drawn_from_its_table() -> None:
    """``agentturn diagram session`` draws the declared graph."""
    from agentturn.tools.cli import main

    assert main(["diagram", "session"]) == 0


def _queue_while_hooks_run(host: Host, block: bool) -> None:
    """The Stop hooks answer only after a complete prompt was queued behind them."""
    def hooks(command: se.RunStopHooks) -> at.Event:
        if not host.events(se.PromptQueued):
            host.queue.append(se.PromptQueued(prompt_id="q1", message_id="mq", text="queued"))
            host.queue.append(se.PromptCompleted(prompt_id="q1"))
        return (se.StopHookDecided(run_id=command.run_id, block=True, reason="Tests fail.")
                if block and len(host.commands(se.RunStopHooks)) == 1
                else se.StopHookDecided(run_id=command.run_id, block=False))
    host.hooks = hooks  # type: ignore[assignment]


@pytest.mark.req("SO-2", "SO-6", "SO-7")
def test_a_prompt_queued_while_the_hooks_run_wins_over_the_guard() -> None:
    """req: SO-2, SO-7 — the FIFO was empty when the hooks started; a complete prompt queued
    before they answered still has priority: the guard does not continue, its chain awaits the
    prompt, and the prompt runs next."""
    host = armed_host(say("Next turn."), stop_hooks=True)
    _queue_while_hooks_run(host, block=False)
    host.send(PROMPT)
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert host.user_messages()[-1] == "queued"
    assert host.outcomes()[0] is at.OutcomeKind.FINISHED


@pytest.mark.req("SO-2", "SO-5", "SO-6")
def test_a_hook_block_with_a_prompt_queued_meanwhile_continues_alone_then_yields() -> None:
    """req: SO-6, SO-5 — the hook blocked the stop while a prompt was queued: its continuation
    runs (alone: the guard is not asked at that stop), and at the next stop the queued prompt
    wins, so no guard continuation runs before it."""
    host = armed_host(say("Fixed the tests."), say("Next turn."), stop_hooks=True)
    _queue_while_hooks_run(host, block=True)
    host.send(PROMPT)
    messages = host.user_messages()
    assert "Tests fail." in messages
    assert messages.index("Tests fail.") < messages.index("queued")
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    # t1's second stop yields before any hook runs; q1 then has hooks of its own
    assert [c.turn_id for c in host.commands(se.RunStopHooks)] == ["t1", "q1"]
