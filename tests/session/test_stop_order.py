"""The order at a turn's stop (SO-1 ... SO-8): mid-turn messages run first, then a complete
queued prompt, then the Stop hooks and the guard's continuation, alone or as one combined
message; the hooks' count and cap, and what happens when a Lead or Stop comes while they run.
"""

from __future__ import annotations

import math

import attrs
import pytest
from checked_host import Checked, cron, prompt, replies_with_queued, script_todos
from session_host import ON, PROMPT, Host, say, todo_call, todos
from session_scenes import (
    armed_host,
    armed_script,
    held,
    hooks_block_once,
    persisted_texts,
    resume,
    start_armed,
)
from strict_host import GUARD_1, StrictHost, daemon_config, ends, of, secret_todos, user_texts

import agentturn as at
from agentturn import guard as g
from agentturn import session as se


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
        "The Stop hook blocked 3 times in a row, past its cap of 2; the turn ends here."]
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


GUARD_PROMPT = "[Todo Stop Guard] 1 todo item(s) are still pending"


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
def test_a_hook_block_with_a_prompt_queued_meanwhile_is_set_aside_for_the_prompt() -> None:
    """req: SO-2, SO-6 — the hook blocked the stop, but a complete prompt was queued while it
    ran: rule 2 is checked again after the hooks, the block is set aside (no continuation, not
    counted), the chain awaits the prompt, and the prompt runs next."""
    host = armed_host(say("Next turn."), stop_hooks=True)
    _queue_while_hooks_run(host, block=True)
    host.send(PROMPT)
    messages = host.user_messages()
    assert "Tests fail." not in messages
    assert messages[-1] == "queued"
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert [c.turn_id for c in host.commands(se.RunStopHooks)] == ["t1", "q1"]
    # q1's hooks start a streak of their own: t1's set-aside block was not counted
    assert [c.consecutive_blocks for c in host.commands(se.RunStopHooks)] == [0, 0]


@pytest.mark.req("SO-6")
def test_run_stop_hooks_carries_the_consecutive_blocks_and_the_cap() -> None:
    """req: SO-6 — each run says how many times in a row the hooks blocked before it and the
    configured cap, so a host can tell its hooks."""
    host = Host(stop_hooks=True, stop_hook_cap=3)
    blocks = iter([True, True, False])
    host.hooks = lambda c: se.StopHookDecided(run_id=c.run_id, block=next(blocks),
                                              reason="Tests fail.")
    host.responses.extend([say("a"), say("b"), say("c")])
    host.send(PROMPT)
    assert [(c.run_id, c.consecutive_blocks, c.cap) for c in host.commands(se.RunStopHooks)] == [
        ("t1/hooks-1", 0, 3), ("t1/hooks-2", 1, 3), ("t1/hooks-3", 2, 3)]


# The session-composition defects of issue 18 (``settle_spec.md``): each ``test_dNN_...``
# pins the fixed behaviour of defect NN.


@pytest.mark.req("SO-1", "SG-A9")
def test_d03_a_lead_saved_while_the_stop_hooks_run_is_new_input_not_a_continuation() -> None:
    """A Lead saved while the Stop hooks run is mid-turn input: a blocking hook's reason is
    not saved as a user message, the guard does not continue, the next request carries the
    Lead and opens as an ordinary stream, and the guard's stage resets. req: SO-1"""
    host = Host(stop_hooks=True)
    host.hooks = lambda c: None  # the hooks' answer is held
    start_armed(host)
    resume(host, say("Stopping here."))
    run = held(host, se.RunStopHooks)
    submitted = host.send(at.LeadSubmitted(chat_id="chat", lead_id="L1",
                                           text="also update the docs"))
    assert at.LeadSaved(lead_id="L1") in host.events(at.LeadSaved)
    assert any(isinstance(c, at.SaveLead) for c in submitted)
    decided = host.send(se.StopHookDecided(run_id=run.run_id, block=True, reason="Tests fail."))
    # Whether the Lead's request goes out at its save or at the hooks' answer is the fix's
    # choice: both steps are read together.
    requests = [c for c in [*submitted, *decided] if isinstance(c, at.RequestModelStream)]
    assert [r.lead_ids for r in requests] == [("L1",)]
    assert host.user_messages() == ["Port the parser", "also update the docs"]
    opened = host.send(at.StreamOpened(request_id=requests[0].request_id))
    assert not [c for c in opened if isinstance(c, se.Publish)
                and c.entry.kind is se.EntryKind.GUARD_CHUNK]
    assert host.state.usage.guard_calls == 0
    assert host.state.guard.phase is g.GuardPhase.ACTIVE
    assert host.state.guard.attempts == 0
    assert host.state.guard.armed


@pytest.mark.req("SO-8", "OB-1")
def test_d18_a_combined_continuation_is_a_guard_prompt() -> None:
    """The combined hook + guard continuation message is recognized as a guard prompt.
    req: SO-8"""
    for attempt in (1, 2):
        combined = se.combined_continuation("Tests fail.", g.continuation_text(attempt, 3))
        assert combined == "Tests fail.\n\n" + g.continuation_text(attempt, 3)
        assert g.is_guard_prompt(combined)


@pytest.mark.req("SG-B9", "SO-8")
def test_d19_a_compaction_failure_of_the_combined_request_sends_the_hook_reason_alone(
        ) -> None:
    """The combined hook + guard continuation's request fails compaction: the session itself
    saves the hook's reason alone as a new user message and requests again; the turn goes on,
    the guard is suspended, and no ``HookMayContinue`` dead end reaches the host.
    req: SG-B9"""
    host = hooks_block_once()
    start_armed(host)
    resume(host, say("Stopping here."))
    combined = se.combined_continuation("Tests fail.", g.continuation_text(1, 1))
    assert host.user_messages()[-1] == combined
    request = held(host, at.RequestModelStream)
    failed = host.send(at.CompactionFailed(request_id=request.request_id, reason="too long"))
    assert not [c for c in failed if isinstance(c, (at.EndTurn, g.HookMayContinue))]
    assert persisted_texts(failed) == ["Tests fail."]
    saved = next(i for i, c in enumerate(failed) if isinstance(c, at.Persist))
    assert [c for c in failed[saved:] if isinstance(c, at.RequestModelStream)]
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED
    assert host.state.phase is se.SessionPhase.TURN


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


@pytest.mark.req("SO-2", "SO-6")
def test_a_prompt_queued_while_stop_hooks_run_wins_over_a_hook_block() -> None:
    """Decided (issue 32): the design puts a complete queued prompt ahead of the hooks, so a
    prompt queued after the drain but before the hooks answered wins as it would have before
    them; the hook's block is set aside and the prompt starts at once. It is never lost."""
    host = StrictHost(daemon_config(stop_hooks=True))
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    host.drain(queued=False)
    assert host.send(se.PromptQueued(prompt_id="q1", message_id="q1/m",
                                    text="queued while hooks run")) == ()
    cmds = host.send(se.StopHookDecided(run_id=host.pending(se.RunStopHooks), block=True,
                                       reason="tests fail — fix them 🙂"))
    assert ends(cmds)[0].turn_id == "t1"
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.FINISHED
    assert of(cmds, se.SuppressFollowUpSuggestions)
    texts = [r.text for c in of(cmds, at.Persist) for r in c.records
             if isinstance(r, at.UserMessageRecord)]
    assert texts == ["queued while hooks run"]


@pytest.mark.req("SO-2")
def test_a_prompt_queued_while_hooks_run_wins_over_the_guard() -> None:
    host = StrictHost(daemon_config(stop_hooks=True))
    host.armed_natural_stop()
    host.drain()
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1/m", text="next"))
    cmds = host.send(se.StopHookDecided(run_id=host.pending(se.RunStopHooks), block=False))
    assert ends(cmds)[0].turn_id == "t1"
    assert not any(g.is_guard_prompt(t) for t in user_texts(cmds))
    assert of(cmds, at.Persist)[-1].records[0].text == "next"


@pytest.mark.req("SO-5")
def test_mid_turn_message_runs_first_then_the_queued_prompt_keeps_priority() -> None:
    host = StrictHost()
    host.armed_natural_stop()
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1/m", text="queued"))
    cmds = host.drain(messages=("finish quickly",), queued=True)
    assert not ends(cmds)
    lead = host.pending(at.SaveLead)
    host.send(at.LeadSaved(lead_id=lead))
    assert host.pending(at.RequestModelStream)
    # the continuation completes every todo, still FIFO priority holds
    host.todo_round(secret_todos("completed", "completed"), call_id="tw2")
    host.open_and_complete(text="all done")
    cmds = host.drain(queued=True)
    assert ends(cmds)[0].turn_id == "t1"
    assert of(cmds, at.Persist)[-1].records[0].text == "queued"
    assert not any(g.is_guard_prompt(t) for t in user_texts(host.all_commands()))


@pytest.mark.req("SO-8")
def test_a_unicode_hook_reason_and_the_guard_text_become_one_message() -> None:
    host = StrictHost(daemon_config(stop_hooks=True))
    host.armed_natural_stop(n_unfinished=3)
    host.drain()
    reason = "Tests fail: ✗ 测试 — run `pytest`"
    cmds = host.send(se.StopHookDecided(run_id=host.pending(se.RunStopHooks), block=True,
                                       reason=reason))
    assert user_texts(cmds) == [reason + "\n\n" + GUARD_1.format(n=3)]
    assert se.combined_continuation(reason, GUARD_1.format(n=3)) == user_texts(cmds)[0]
    host.ack_persists()
    rid = host.pending(at.RequestModelStream)
    host.send(at.StreamOpened(request_id=rid))
    assert host.state.usage == se.Usage(model_calls=3, guard_calls=1, hook_calls=1)


@pytest.mark.req("SO-6")
@pytest.mark.parametrize("reason", [None, "", "   \n"])
def test_a_hook_block_without_a_real_reason_is_refused(reason: str | None) -> None:
    host = StrictHost(daemon_config(stop_hooks=True))
    host.prompt()
    host.open_and_complete(text="done")
    host.drain()
    run = host.pending(se.RunStopHooks)
    with pytest.raises((at.ProtocolError, at.FieldError)):
        host.send(se.StopHookDecided(run_id=run, block=True, reason=reason))
    assert host.pending(se.RunStopHooks) == run


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


def test_lead_during_drain_joins_turn_with_drained_messages():
    """A Lead typed while the drain is out and the drain's own messages both join the turn, in
    order, and the guard is skipped for that stop (req: SO-1).
    """
    h = Checked()
    script_todos(h, "pending", "pending")
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="also do X"))
    h.responses.append(say("steered"))
    h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("from client",)))
    requests = h.commands(at.RequestModelStream)
    assert requests[-1].lead_ids == ("L1", "t1/stop-1/m1")
    assert h.guard_attempts() == []  # the continuation was the user's, not the guard's
    h.clean()


def test_stop_during_hooks_absorbs_late_block():
    """Stop while the Stop hooks run ends the turn; the hooks' late block is absorbed, not a
    continuation (req: SO-6, TL-8).
    """
    h = Checked(stop_hooks=True)
    script_todos(h)
    h.hooks = lambda c: None
    h.send(prompt())
    run = h.take(se.RunStopHooks)
    h.send(at.StopPressed())
    out = h.send(se.StopHookDecided(run_id=run.run_id, block=True, reason="go on"))
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert h.outcomes() == [at.OutcomeKind.CANCELLED]
    assert len(h.commands(at.RequestModelStream)) == 2
    h.clean()


def test_lead_during_hooks_is_mid_turn_input():
    """A Lead saved while the Stop hooks run makes the stop a user continuation: the hook's block is
    not sent and the guard does not continue (req: SO-1).
    """
    h = Checked(stop_hooks=True)
    script_todos(h, "pending")
    h.hooks = lambda c: None
    h.send(prompt())
    run = h.take(se.RunStopHooks)
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="steer"))
    h.responses.append(say("after lead"))
    h.send(se.StopHookDecided(run_id=run.run_id, block=True, reason="HOOK"))
    request = h.commands(at.RequestModelStream)[-1]
    assert request.lead_ids == ("L1",)
    assert not any("HOOK" in t for t in h.user_messages())
    assert h.guard_attempts() == []
    h.clean()


def test_fifo_prompt_wins_over_guard_even_when_client_omits_flag():
    """A complete queued prompt the session holds has priority over the guard at a natural stop
    though the drain reply omits hasQueuedPrompt (req: SO-2, BR-2).
    """
    h = Checked()
    script_todos(h, "pending")
    h.hold.append(lambda c: isinstance(c, at.RequestModelStream) and c.request_id == "t1/r2")
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.hold.clear()
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="next please"))
    h.responses.clear()
    h.responses.append(say("q1 answer"))
    h.send(at.StreamOpened(request_id=request.request_id),
           at.StreamCompleted(request_id=request.request_id, **say("stopping")))
    assert h.guard_attempts() == []
    assert [c.turn_id for c in h.commands(at.EndTurn)][:2] == ["t1", "q1"]
    assert h.commands(at.EndTurn)[1].origin is at.TurnOrigin.QUEUED_PROMPT
    assert h.commands(se.SuppressFollowUpSuggestions)[0].turn_id == "t1"
    h.clean()


def test_mid_turn_message_first_then_fifo_priority_after_todos_complete():
    """One drain with a mid-turn message and a queued prompt: the message runs first, and after that
    continuation completes the todos no guard or hook runs; the session awaits the prompt (req:
    SO-5).
    """
    h = Checked(stop_hooks=True)
    script_todos(h, "pending", "pending")
    h.drain = replies_with_queued(messages=("user msg",))
    h.tool_results["tw2"] = {"output": "ok", "structured": todos("completed", "completed")}
    h.responses.extend([say("finishing", todo_call("tw2")), say("all done")])
    h.send(prompt())
    assert h.commands(at.RequestModelStream)[2].lead_ids == ("t1/stop-1/m1",)
    assert h.commands(se.RunStopHooks) == []
    assert h.outcomes() == [at.OutcomeKind.FINISHED]
    assert [w.kind for w in se.waiting_for(h.state)] == [se.WaitKind.CLIENT_PROMPT]
    assert h.commands(se.OfferFollowUpSuggestions) == []
    h.clean()


def test_mid_turn_message_then_hard_stop_keeps_fifo_priority():
    """A mid-turn continuation that hard-stops still leaves the queued prompt first: it runs before
    a deferred cron (req: SO-5, SG-S1).
    """
    h = Checked()
    script_todos(h, "pending")
    h.drain = replies_with_queued(messages=("user msg",))
    h.send(prompt())
    h.send(cron("c1"))
    h.send(se.HardStopped(kind=at.HardStopKind.LOOP_PROTECTION, reason="loop"))
    assert h.outcomes() == [at.OutcomeKind.HALTED]
    assert [w.kind for w in se.waiting_for(h.state)] == [se.WaitKind.CLIENT_PROMPT]
    h.responses.extend([say("q"), say("c")])
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="queued"))
    assert [c.turn_id for c in h.commands(at.EndTurn)] == ["t1", "q1", "c1"]
    h.clean()


def test_combined_hook_and_guard_continuation_counters_independent():
    """A blocking hook and the guard make one continuation (hook reason, blank line, guard text);
    the guard stops at 2 while the hook goes on to its cap (req: SO-8, SG-S1).
    """
    h = Checked(stop_hooks=True)
    script_todos(h, "pending", "pending")
    h.hooks = lambda c: se.StopHookDecided(run_id=c.run_id, block=True, reason="HOOK says go")
    h.responses.extend([say(f"r{i}") for i in range(12)])
    h.send(prompt())
    texts = h.user_messages()
    assert texts[1].startswith("HOOK says go\n\n[Todo Stop Guard] 2 todo item(s)")
    assert h.guard_attempts() == [1, 2]
    assert len(h.published(se.EntryKind.GUARD_EXHAUSTED)) == 1
    assert texts[3:] == ["HOOK says go"] * (len(texts) - 3)
    assert len(h.commands(se.Warn)) == 1
    assert h.state.usage.guard_calls == 2
    h.clean()


def test_failed_lead_at_natural_stop_lets_guard_decide():
    """A Lead whose save fails at the natural stop, before the drain, hands its draft back and the
    stop goes on to the guard (req: LD-7, SO-7).
    """
    h = Checked()
    script_todos(h, "pending")
    h.hold.append(lambda c: isinstance(c, at.SaveLead) or (
        isinstance(c, at.RequestModelStream) and c.request_id == "t1/r2"))
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="steer"))
    h.take(at.SaveLead)
    h.hold.clear()
    h.responses.clear()
    h.responses.extend([say("g1"), say("g2")])
    h.send(at.StreamOpened(request_id=request.request_id),
           at.StreamCompleted(request_id=request.request_id, **say("s")))
    out = h.send(at.LeadSaveFailed(lead_id="L1", reason="disk"))
    assert [(c.reason, c.draft) for c in out if isinstance(c, at.ReturnDraft)] == [
        (at.DraftReason.SAVE_FAILED, "steer")]
    assert h.guard_attempts() == [1, 2]
    h.clean()


def test_failed_lead_during_drain_still_runs_hooks_and_guard():
    """A Lead typed during the drain whose save fails hands its draft back and the stop still runs
    the Stop hooks and then the guard (req: SO-1, SO-6, SO-7, LD-7).
    """
    h = Checked(stop_hooks=True)
    script_todos(h, "pending")
    h.drain = lambda c: None
    h.hold.append(lambda c: isinstance(c, at.SaveLead))
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="steer"))
    h.take(at.SaveLead)
    h.hold.clear()
    h.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    h.responses.extend([say("g1"), say("g2")])
    h.send(se.MidTurnDrained(drain_id=drain.drain_id))
    h.send(at.LeadSaveFailed(lead_id="L1", reason="disk"))
    assert [c.draft for c in h.commands(at.ReturnDraft)] == ["steer"]
    assert h.commands(se.RunStopHooks) != []
    assert h.guard_attempts() == [1, 2]


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


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


@pytest.mark.req("SO-2", "SO-6", "OB-5")
def test_a_hook_block_set_aside_for_a_queued_prompt_opens_no_stream() -> None:
    """The hooks block while a complete prompt was queued behind them: the block is set aside,
    no hook continuation is saved or streamed (usage counts no hook call), and the queued
    prompt runs next."""
    host = armed_script(Host(stop_hooks=True))
    host.hooks = lambda c: None  # the hooks answer later
    host.send(PROMPT)
    [run] = host.held
    host.held.clear()
    host.send(se.PromptQueued(prompt_id="q1", message_id="mq", text="queued"))
    host.send(se.StopHookDecided(run_id=run.run_id, block=True, reason="Tests fail."))
    assert "Tests fail." not in host.user_messages()
    assert not host.state.fifo_priority
    assert host.user_messages()[-1] == "queued"
    assert host.state.usage.hook_calls == 0
    assert host.outcomes()[0] is at.OutcomeKind.FINISHED


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
        "The Stop hook blocked 2 times in a row, past its cap of 1; the turn ends here."]
    assert host.user_messages() == ["Port the parser", "Tests fail.", "use tabs"]
    assert [(c.consecutive_blocks, c.cap) for c in host.commands(se.RunStopHooks)] == [
        (0, 1), (1, 1), (1, 1)]


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
