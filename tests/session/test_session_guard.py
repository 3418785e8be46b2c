"""The todo stop guard inside a session: the todo writes it may trust (SG-A1, SG-A3), what clears
that trust (rewinds, lifecycle changes, Plan mode), its two continuations per stage through real
turns (SG-B*), the interactive session and the setting off (SG-C5, SG-C6), and its exact texts
and telemetry (OB-1 ... OB-4).
"""

from __future__ import annotations

from typing import Any

import pytest
from checked_host import Checked, cron, prompt, script_todos
from session_host import PROMPT, Host, say, todo_call, todos
from session_scenes import (
    PENDING,
    READ,
    armed_host,
    armed_script,
    held,
    hooks_block_once,
    resume,
    start_armed,
    third_guard_stream_withheld,
)
from strict_host import (
    EXHAUSTED,
    GUARD_1,
    StrictHost,
    ends,
    of,
    run_guard_to_exhaustion,
    secret_todos,
    user_texts,
)

import agentturn as at
from agentturn import guard as g
from agentturn import session as se


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


def guard_attempts(host: Host) -> list[object]:
    return [dict(e.meta or {})["attempt"] for e in host.published(se.EntryKind.GUARD_CHUNK)]


# The session-composition defects of issue 18 (``settle_spec.md``): each ``test_dNN_...``
# pins the fixed behaviour of defect NN.


@pytest.mark.req("SG-B1", "SG-B8")
def test_d05_the_tool_loop_of_a_combined_hook_and_guard_stream_is_the_hooks() -> None:
    """A hook block and a guard continuation share one stream, which calls a tool with todos
    still unfinished: its follow-up is the hook's own loop (no guard prompt, no attempt), the
    model finishes its answer as it would with the guard off, and only then does the guard
    use its second attempt; no third guard-attributable stream opens. req: SG-B8"""
    host = hooks_block_once()
    start_armed(host)
    resume(host, say("Stopping here."), say("Reading.", READ), say("Read it."),
           say("Still stuck."), say("never sent"))
    combined = se.combined_continuation("Tests fail.", g.continuation_text(1, 1))
    assert host.user_messages() == ["Port the parser", combined, g.continuation_text(2, 1)]
    assert guard_attempts(host) == [1, 2]
    assert host.state.usage.guard_calls == 2
    # the todo write's, the first stop's, the combined one, the hook loop's follow-up that
    # sends the read's result, the guard's second attempt: no third guard call
    assert len(host.commands(at.RequestModelStream)) == 5
    assert [r.text for r in host.published(se.EntryKind.GUARD_EXHAUSTED)] == [
        g.exhaustion_text(1)]
    assert [r["text"] for r in host.responses] == ["never sent"]
    assert host.outcomes() == [at.OutcomeKind.FINISHED]


@pytest.mark.req("SG-B1", "SG-B2", "SG-B3")
def test_a_continuation_that_failed_before_it_opened_is_retried_as_the_same_attempt() -> None:
    """The guard's first continuation request fails before its stream opens (nothing is
    consumed, SG-B3); the user's Continue re-sends it, and that stream commits attempt 1 as it
    opens, so the stage has one more guard stream, not two: the model reads each guard prompt
    once and no third guard-prompted stream opens without new user input. req: SG-B1"""
    host = Host()
    start_armed(host)
    resume(host, say("Stopping here."))
    request = held(host, at.RequestModelStream)
    failed = host.send(at.StreamFailed(request_id=request.request_id, error="overloaded"))
    assert [c.outcome.kind for c in failed if isinstance(c, at.EndTurn)] == [
        at.OutcomeKind.ERROR]
    assert guard_attempts(host) == []
    host.responses.extend([say("Working on it."), say("Still stuck."), say("never sent")])
    host.send(at.ContinueTurn(turn_id="t1"))
    assert guard_attempts(host) == [1, 2]
    assert host.state.usage.guard_calls == 2
    assert host.user_messages() == ["Port the parser", g.continuation_text(1, 1),
                                    g.continuation_text(2, 1)]
    assert [r.text for r in host.published(se.EntryKind.GUARD_EXHAUSTED)] == [
        g.exhaustion_text(1)]
    assert [r["text"] for r in host.responses] == ["never sent"]


@pytest.mark.req("SG-B4")
def test_d06_a_guard_sponsored_follow_up_at_attempt_two_sends_the_final_prompt() -> None:
    """The first guard continuation's stream calls a tool with todos still unfinished: its
    tool-result follow-up (attempt 2) is preceded by a saved user message with the exact
    second-continuation text. req: SG-B4"""
    host = Host()
    start_armed(host)
    resume(host, say("Stopping here."), say("Reading.", READ), say("Read it."),
           say("never sent"))
    second = g.continuation_text(2, 1)
    assert "This is the final automatic continuation." in second
    assert host.user_messages() == ["Port the parser", g.continuation_text(1, 1), second]
    saved = host.position(lambda c: isinstance(c, at.Persist) and any(
        isinstance(r, at.UserMessageRecord) and r.text == second for r in c.records))
    # the turn's own follow-up request (t1/r4) is withheld and amended, so the host's next
    # request is t1/r5, and it comes after the saved prompt
    follow_up = host.position(lambda c: isinstance(c, at.RequestModelStream)
                              and c.request_id == "t1/r5")
    assert not any(isinstance(c, at.RequestModelStream) and c.request_id == "t1/r4"
                   for c in host.commands())
    assert saved < follow_up
    assert guard_attempts(host) == [1, 2]


@pytest.mark.req("SG-A14", "TL-11")
def test_d20_continue_after_a_rewind_and_an_error_starts_a_chain_that_can_arm() -> None:
    """A rewind during a turn that then fails with ``StreamFailed``; ``ContinueTurn`` for it
    starts a fresh chain, and a todo write of the continued turn (a new call) arms it.
    req: SG-A14"""
    host = Host()
    host.send(PROMPT)
    request = held(host, at.RequestModelStream)
    host.send(se.LifecycleChanged(kind=g.TrustClearingKind.REWIND))
    host.send(at.StreamFailed(request_id=request.request_id, error="overloaded"))
    chain = host.state.guard.chain
    host.responses.append(say("Planning again.", todo_call("tw2")))
    host.tool_results["tw2"] = PENDING
    host.send(at.ContinueTurn(turn_id="t1"))
    assert host.state.guard.chain == chain + 1
    assert host.state.guard.phase is g.GuardPhase.ACTIVE
    assert host.state.guard.armed


FINAL = (
    "This is the final automatic continuation. Before ending, either complete/update the todos "
    "or report the completed progress and the exact blocker."
)


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


@pytest.mark.req("SG-B3")
def test_stop_before_the_guard_stream_opens_consumes_no_attempt() -> None:
    host = StrictHost()
    host.armed_natural_stop()
    host.drain()
    host.ack_persists()
    assert host.state.guard.phase is g.GuardPhase.CONTINUING
    rid = host.pending(at.RequestModelStream)
    cmds = host.send(at.StopPressed())
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.CANCELLED
    assert host.state.guard.attempts == 0
    assert host.state.usage.guard_calls == 0
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED
    assert not any(c.entry.kind is se.EntryKind.GUARD_CHUNK for c in of(cmds, se.Publish))
    late = host.send(at.StreamOpened(request_id=rid))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]


@pytest.mark.req("OB-1")
@pytest.mark.req("OB-3")
def test_guard_texts_are_exact_and_it_stops_after_two() -> None:
    host = StrictHost()
    host.send(se.ClientAttached(client_id="ui"))
    cmds = run_guard_to_exhaustion(host, n=3)
    continuations = [t for t in user_texts(cmds) if g.is_guard_prompt(t)]
    assert continuations == [GUARD_1.format(n=3), GUARD_1.format(n=3) + "\n\n" + FINAL]
    exhausted = [c.entry for c in of(cmds, se.Publish)
                 if c.entry.kind is se.EntryKind.GUARD_EXHAUSTED]
    assert [e.text for e in exhausted] == [EXHAUSTED.format(n=3)]
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.FINISHED
    assert host.state.usage == se.Usage(model_calls=4, guard_calls=2, hook_calls=0)
    assert len(of(host.all_commands(), at.RequestModelStream)) == 4


@pytest.mark.req("OB-2")
@pytest.mark.req("OB-4")
def test_guard_chunks_carry_exact_meta_and_never_todo_text() -> None:
    host = StrictHost()
    cmds = run_guard_to_exhaustion(host, n=2)
    guard_entries = [c.entry for c in of(host.all_commands(), se.Publish)
                     if c.entry.kind is se.EntryKind.GUARD_CHUNK]
    metas = [dict(e.meta.pairs) for e in guard_entries]  # type: ignore[union-attr]
    assert metas == [
        {"source": "todo_stop_guard", "qwenDiscreteMessage": True, "attempt": a,
         "maxAttempts": 2, "unfinishedCount": 2} for a in (1, 2)]
    assert all(e.discrete for e in guard_entries)
    for c in host.all_commands():
        if isinstance(c, se.Publish):
            assert "secret item" not in repr(c)
    assert cmds


@pytest.mark.req("SG-A9")
def test_a_lead_during_the_last_guard_stream_starts_a_fresh_stage() -> None:
    host = StrictHost()
    host.armed_natural_stop()
    host.drain()
    host.ack_persists()
    host.open_and_complete(text="c1")
    host.drain()
    host.ack_persists()
    rid = host.pending(at.RequestModelStream)
    host.send(at.StreamOpened(request_id=rid))                # attempt 2 committed
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="also do X"))
    host.send(at.LeadSaved(lead_id="L1"))
    host.send(at.StreamCompleted(request_id=rid, text="c2", finish_reason="stop"))
    host.ack_persists()
    assert of(host.log[-1][1], at.RequestModelStream)[0].lead_ids == ("L1",)
    host.open_and_complete(text="read the lead")
    cmds = host.drain()
    assert user_texts(cmds) == [GUARD_1.format(n=2)]           # attempt 1 of a new stage


@pytest.mark.req("SG-A7")
def test_a_new_prompt_never_inherits_the_old_chains_todos() -> None:
    host = StrictHost()
    host.armed_natural_stop()
    host.send(se.PromptQueued(prompt_id="t2", message_id="t2/m", text="unrelated"))
    host.drain(queued=True)
    host.ack_persists()
    host.answer_titles()
    cmds = host.open_and_complete(text="answered")
    cmds += host.drain()
    assert ends(cmds)[0].turn_id == "t2"
    assert not any(g.is_guard_prompt(t) for t in user_texts(host.all_commands()))


@pytest.mark.req("SG-A3")
@pytest.mark.parametrize("finished", [
    {"error": True}, {"cancelled": True},
], ids=["error", "cancelled"])
def test_a_failed_todo_write_never_arms(finished: dict[str, bool]) -> None:
    host = StrictHost()
    host.prompt()
    host.open_and_complete(finish="tool_use", calls=(
        at.ToolCall(call_id="tw", name="todo_write", arguments="{}"),))
    host.answer_titles()
    host.send(at.ToolFinished(call_id="tw", output="boom", structured=secret_todos("pending"),
                              **finished))
    host.ack_persists()
    host.answer_titles()
    host.open_and_complete(text="stop")
    cmds = host.drain()
    assert ends(cmds)
    assert not any(g.is_guard_prompt(t) for t in user_texts(cmds))


@pytest.mark.req("SG-A3")
@pytest.mark.parametrize("envelope", [
    '{"type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "pending"}]}',
    {"type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "PENDING"}]},
    {"type": "todo", "todos": [{"id": "1", "content": "x", "status": "pending"}]},
    {"type": "todo_list", "todos": "1 pending"},
    None,
], ids=["json-string", "bad-status", "bad-type", "todos-not-list", "none"])
def test_a_malformed_envelope_never_arms(envelope: Any) -> None:
    host = StrictHost()
    host.prompt()
    host.todo_round(envelope)
    host.open_and_complete(text="stop")
    cmds = host.drain()
    assert ends(cmds)
    assert not any(g.is_guard_prompt(t) for t in user_texts(cmds))


@pytest.mark.req("SG-C5")
def test_an_interactive_session_with_unfinished_todos_sends_no_guard_prompt() -> None:
    host = StrictHost(se.SessionConfig(chat_id="chat-1",
                                guard=g.GuardConfig(todo_stop_guard=True, daemon=False)))
    host.armed_natural_stop()
    cmds = host.log[-1][1] + host.log[-2][1]
    assert not of(host.all_commands(), se.DrainMidTurnQueue)
    assert ends(host.all_commands())
    assert not any(g.is_guard_prompt(t) for t in user_texts(host.all_commands()))
    assert cmds


@pytest.mark.req("SG-C6")
def test_with_the_setting_off_nothing_is_held_and_no_guard_text_appears() -> None:
    host = StrictHost(se.SessionConfig(chat_id="chat-1", guard=g.GuardConfig(daemon=True)))
    host.armed_natural_stop()
    cmds = host.drain()
    assert ends(cmds) and of(cmds, se.OfferFollowUpSuggestions)
    run = host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1/m", text="tick",
                                       kind=se.AutomaticKind.CRON, source_id="task"))
    assert user_texts(run) == ["tick"]
    assert not any(g.is_guard_prompt(t) for t in user_texts(host.all_commands()))


@pytest.mark.req("SG-A12")
def test_a_lifecycle_change_clears_trust_and_late_results_do_not_rearm() -> None:
    host = StrictHost()
    host.prompt()
    host.open_and_complete(finish="tool_use", calls=(
        at.ToolCall(call_id="tw", name="todo_write", arguments="{}"),))
    host.answer_titles()
    host.send(se.LifecycleChanged(kind=g.TrustClearingKind.REWIND))
    host.send(at.ToolFinished(call_id="tw", output="ok", structured=secret_todos("pending")))
    host.ack_persists()
    host.answer_titles()
    host.open_and_complete(text="stop")
    cmds = host.drain()
    assert not any(g.is_guard_prompt(t) for t in user_texts(cmds))


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


def test_second_guard_stream_tool_calls_run_but_no_third_stream():
    """If the second guard stream returns tool calls they run and their results are kept, but no
    third guard-attributable stream opens (req: SG-B5, SG-B1).
    """
    h = Checked()
    script_todos(h, "pending")
    h.responses.extend([say("g1"), say("g2", at.ToolCall(call_id="x1", name="read_file"))])
    h.send(prompt())
    assert h.guard_attempts() == [1, 2]
    assert [c.call.call_id for c in h.commands(at.ExecuteTool)] == ["tw1", "x1"]
    saved = [r for c in h.commands(at.Persist) for r in c.records
             if isinstance(r, at.ToolResultRecord) and r.call_id == "x1"]
    assert saved and saved[0].status is at.ToolResultStatus.EXECUTED
    assert len(h.commands(at.RequestModelStream)) == 4
    assert se.waiting_for(h.state) == ()
    h.clean()


def test_failed_guard_stream_then_continue_keeps_stage_budget():
    """A guard stream that fails after opening consumes its attempt; the user's Continue keeps the
    stage, so only one more guard stream follows (req: SG-B3, SG-B2, SG-S2).
    """
    h = Checked()
    script_todos(h, "pending")
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.send(at.StreamOpened(request_id=request.request_id),
           at.StreamFailed(request_id=request.request_id, error="net", network=True))
    assert h.outcomes() == [at.OutcomeKind.ERROR]
    h.responses.extend([say("a"), say("b"), say("c")])
    h.send(at.ContinueTurn(turn_id="t1"))
    assert h.guard_attempts() == [1, 2]
    assert len(h.published(se.EntryKind.GUARD_EXHAUSTED)) == 1
    h.clean()


def test_stop_before_guard_stream_opens_commits_nothing():
    """Stop while the guard's continuation request waits for its stream commits no attempt and emits
    no guard chunk (req: SG-B3, TL-8).
    """
    h = Checked()
    script_todos(h, "pending")
    h.send(prompt())
    h.take(at.RequestModelStream)
    h.send(at.StopPressed())
    out = h.send(at.StreamOpened(request_id="t1/r3"))
    assert all(isinstance(c, (at.StaleAnswerIgnored, at.CancelStream)) for c in out)
    assert h.guard_attempts() == []
    assert h.state.usage.guard_calls == 0
    h.clean()


def test_lead_during_guard_tool_loop_sponsors_send():
    """A Lead saved while a tool of the first guard stream runs sponsors the tool-result send (no
    guard chunk) and starts a fresh stage (req: SG-B7, SG-A9).
    """
    h = Checked()
    script_todos(h, "pending")
    h.responses.append(say("guard does tool", at.ToolCall(call_id="x1", name="read_file")))
    h.hold.append(lambda c: isinstance(c, at.ExecuteTool) and c.call.call_id == "x1")
    h.send(prompt())
    h.take(at.ExecuteTool)
    h.hold.clear()
    h.responses.extend([say("after lead"), say("a"), say("b")])
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead now"),
           at.ToolFinished(call_id="x1", output="r"))
    sponsored = [r for r in h.commands(at.RequestModelStream) if r.lead_ids == ("L1",)]
    assert len(sponsored) == 1
    chunks = [e.message_id for e in h.published(se.EntryKind.GUARD_CHUNK)]
    assert sponsored[0].request_id not in chunks
    assert h.guard_attempts() == [1, 1, 2]
    h.clean()


def test_lead_during_guard_prompt_save_sponsors_send():
    """A Lead saved while the guard's tool-loop follow-up prompt is still being written sponsors
    that send instead of consuming the remaining attempt (req: SG-B7, SG-A9).
    """
    h = Checked()
    script_todos(h, "pending")
    h.responses.append(say("guard does tool", at.ToolCall(call_id="x1", name="read_file")))
    h.hold.append(lambda c: isinstance(c, at.Persist) and any(
        isinstance(r, at.UserMessageRecord) and r.message_id.startswith("t1/r4")
        for r in c.records))
    h.send(prompt())
    save = h.take(at.Persist)
    h.hold.clear()
    h.responses.extend([say("after lead"), say("a"), say("b")])
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead now"))
    h.send(at.Persisted(key=save.key))
    sponsored = [r for r in h.commands(at.RequestModelStream) if "L1" in r.lead_ids]
    assert len(sponsored) == 1
    assert sponsored[0].request_id not in [
        e.message_id for e in h.published(se.EntryKind.GUARD_CHUNK)]
    # new user input: the stop after the Lead's stream opens a fresh stage
    assert h.guard_attempts() == [1, 1, 2]


def test_first_guard_stream_completing_todos_sends_results_without_prompt():
    """When the first guard stream completes every todo through a tool call, the result is sent
    without another unfinished-todo prompt and the turn then ends (req: SG-B6, SG-A5).
    """
    h = Checked()
    script_todos(h, "pending")
    h.tool_results["tw2"] = {"output": "ok", "structured": todos("completed")}
    h.responses.extend([say("finishing", todo_call("tw2")), say("all done")])
    h.send(prompt())
    # the follow-up is the remaining attempt (SG-B4) but carries no prompt
    assert h.guard_attempts() == [1, 2]
    guard_prompts = [t for t in h.user_messages() if g.is_guard_prompt(t)]
    assert len(guard_prompts) == 1
    assert h.published(se.EntryKind.GUARD_CHUNK)[1].text == ""
    assert h.published(se.EntryKind.GUARD_EXHAUSTED) == []
    assert h.outcomes() == [at.OutcomeKind.FINISHED]
    assert len(h.commands(se.OfferFollowUpSuggestions)) == 1
    h.clean()


def test_rewind_mid_todo_write_blocks_late_arming_and_releases_cron():
    """A rewind while the todo write runs: its late result does not arm, the stop does not continue,
    and the deferred cron runs once the prompt settles (req: SG-A14, SG-A15).
    """
    h = Checked()
    h.tool_results["tw1"] = {"output": "ok", "structured": todos("pending")}
    h.responses.extend([say("working", todo_call("tw1")), say("stop"), say("cron ran")])
    h.hold.append(lambda c: isinstance(c, at.ExecuteTool))
    h.send(prompt())
    h.take(at.ExecuteTool)
    h.hold.clear()
    h.send(cron("c1"))
    h.send(se.LifecycleChanged(kind=g.TrustClearingKind.REWIND))
    h.send(at.ToolFinished(call_id="tw1", output="ok", structured=todos("pending")))
    assert h.guard_attempts() == []
    assert [c.turn_id for c in h.commands(at.EndTurn)] == ["t1", "c1"]
    h.clean()


def test_compaction_failure_on_guard_continuation_releases_cron():
    """A compaction failure before the guard's stream opens ends the turn, consumes no attempt,
    suspends the chain and releases the deferred cron (req: SG-B9, SG-B3).
    """
    h = Checked()
    script_todos(h, "pending")
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.send(cron("c1"))
    h.responses.append(say("cron reply"))
    h.send(at.CompactionFailed(request_id=request.request_id, reason="too big"))
    assert h.outcomes() == [at.OutcomeKind.COMPACTION_FAILED, at.OutcomeKind.FINISHED]
    assert h.guard_attempts() == [] and h.state.usage.guard_calls == 0
    h.clean()


def test_plan_mode_mid_turn_disarms_and_releases_cron():
    """Entering Approval plan mode while an armed turn runs: the stop does not continue and the
    deferred cron runs once the turn ends (req: SG-C3, SO-7, BG-5).
    """
    h = Checked()
    script_todos(h, "pending")
    h.hold.append(lambda c: isinstance(c, at.RequestModelStream) and c.request_id == "t1/r2")
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.hold.clear()
    h.send(cron("c1"))
    h.send(g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN))
    h.responses.clear()
    h.responses.append(say("cron"))
    h.send(at.StreamOpened(request_id=request.request_id),
           at.StreamCompleted(request_id=request.request_id, **say("s")))
    assert h.guard_attempts() == []
    assert [c.turn_id for c in h.commands(at.EndTurn)] == ["t1", "c1"]
    h.clean()


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


@pytest.mark.req("OB-3", "OB-6")
def test_the_exhaustion_entry_carries_the_exact_guard_metadata() -> None:
    """The exhaustion message is published once, under the turn's id, as a discrete guard
    entry with its kind, the attempt count, the maximum and the unfinished count."""
    host = armed_script(Host(), say("Still working."), say("Still not done."))
    host.send(PROMPT)
    [entry] = host.published(se.EntryKind.GUARD_EXHAUSTED)
    assert (entry.message_id, entry.text) == ("t1", g.exhaustion_text(1))
    assert dict(entry.meta or {}) == {"source": "todo_stop_guard", g.DISCRETE_MARKER: True,
                                      "kind": "exhausted", "attempt": 2, "maxAttempts": 2,
                                      "unfinishedCount": 1}


@pytest.mark.req("SG-B5")
def test_the_host_is_never_asked_to_cancel_the_request_it_was_not_sent() -> None:
    """The third guard-attributable request is withheld and the turn halted: the host gets
    neither that request nor a ``CancelStream`` for it."""
    host = third_guard_stream_withheld()
    assert host.outcomes() == [at.OutcomeKind.HALTED]
    assert host.commands(at.CancelStream) == []
    assert len(host.commands(at.RequestModelStream)) == host.state.usage.model_calls == 4
    assert [r["text"] for r in host.responses] == ["never sent"]
    assert host.state.withheld_request == ""


@pytest.mark.req("SG-S1", "TL-3")
@pytest.mark.parametrize("decision", [at.PermissionDecision.ALLOW, at.PermissionDecision.CANCEL],
                         ids=lambda decision: decision.name)
def test_only_a_cancelled_permission_request_suspends_the_chain(
        decision: at.PermissionDecision) -> None:
    """An armed chain's turn asks permission for a write. Allowed, the write runs and the chain
    stays live: its stop gets the guard's continuation. Cancelled, the turn is cancelled and the
    chain suspended (kills the inverted decision test in the session's ``_on_permission``)."""
    host = armed_script(Host())
    host.responses.insert(1, say("Writing.", at.ToolCall(call_id="w1", name="write_file",
                                                         needs_permission=True)))
    host.send(PROMPT)
    assert [type(command) for command in host.held] == [at.AskPermission]
    host.held.clear()
    host.send(at.PermissionDecided(call_id="w1", decision=decision))
    if decision is at.PermissionDecision.ALLOW:
        assert host.outcomes() == []
        assert host.state.guard.phase is g.GuardPhase.CONTINUING
        assert host.state.guard_request == host.held[-1].request_id
    else:
        assert host.outcomes() == [at.OutcomeKind.CANCELLED]
        assert host.state.guard.phase is g.GuardPhase.SUSPENDED


@pytest.mark.req("SG-S1", "SG-B3", "TL-2")
def test_a_guard_continuation_rejected_by_the_token_limit_suspends_the_chain_unconsumed() -> None:
    """The guard's continuation request is rejected as over the token limit before a stream
    opens: the turn ends TOKEN_LIMIT, the guard hears the stream was not opened for that reason
    (no attempt consumed, nothing published) and suspends the chain."""
    host = armed_script(Host())
    host.send(PROMPT)
    request = host.commands(at.RequestModelStream)[-1]
    assert host.held == [request] and host.state.guard_request == request.request_id
    host.send(at.TokenLimitRejected(request_id=request.request_id, reason="too long"))
    assert host.outcomes() == [at.OutcomeKind.TOKEN_LIMIT]
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED
    assert host.state.guard.attempts == 0
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert host.state.usage.guard_calls == 0


@pytest.mark.req("SG-A12", "SG-A14")
def test_a_continue_naming_a_turn_rewound_while_it_ran_starts_a_fresh_chain() -> None:
    """The running turn is rewound, then its request fails and the host continues it: the
    continue starts a fresh chain (SG-A8), which the continued turn's own new todo write arms,
    so its stop gets a guard continuation (issue 18, defect 20)."""
    host = armed_script(Host())
    host.responses.pop()
    host.send(PROMPT)
    request = host.held.pop()
    host.send(se.LifecycleChanged(kind=g.TrustClearingKind.REWIND))
    host.send(at.StreamFailed(request_id=request.request_id, error="reset"))
    host.tool_results["tw2"] = {"output": "1 todo", "structured": todos("pending")}
    host.responses.extend([say("Again.", todo_call("tw2")), say("Stopping.")])
    chain = host.state.guard.chain
    host.send(at.ContinueTurn(turn_id="t1"))
    assert host.outcomes() == [at.OutcomeKind.ERROR]
    assert host.state.guard.chain == chain + 1 and host.state.guard.armed
    assert g.is_guard_prompt(host.user_messages()[-1])
