"""An outside host author trying to break the rebuilt session through its public API only.

Every test drives ``agentturn.session.reduce`` with the scripted ``Host`` (tests/session_host.py),
wrapped so that each step is also checked from the outside: only ``ProtocolError`` may escape, a
refused step leaves the state as it was, and the session's own published invariants
(``agentturn.session.invariants``) hold on every accepted step. The assertions themselves read
only commands, ``waiting_for`` and ``held``. Seven of these tests found defects when they were
written (a Lead riding a guard prompt's request, an invalidated turn's retry window, resends of
automatic turns, prompts and Continue, a failed Lead save during the drain, an aborted queued
prompt's fate); they pin the fixes.
"""

from __future__ import annotations

from typing import Any

import pytest
from session_host import Host, say, todo_call, todos

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn.session import invariants as inv


class Checked(Host):
    """The scripted host, checking every step from outside and keeping refusals apart."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self.bound = inv.HardBound()
        self.refused: list[tuple[at.Event, at.ProtocolError]] = []
        self.broken: list[tuple[at.Event, list[str]]] = []
        self.hold: list[Any] = []  # predicates: awaiting commands the test answers itself

    def send(self, *events: at.Event) -> list[at.Command]:
        start = len(self.log)
        self.queue.extend(events)
        while self.queue:
            event = self.queue.popleft()
            self.log.append(("event", event))
            before = self.state
            try:
                self.state, commands = se.reduce(before, event)
            except at.ProtocolError as error:  # anything else propagates and fails the test
                assert self.state is before
                self.refused.append((event, error))
                continue
            problems = inv.lost_texts(before, event, self.state, commands)
            problems += inv.stuck(self.state)
            self.bound, broke = self.bound.step(before, event, self.state, commands)
            problems += broke
            if problems:
                self.broken.append((event, problems))
            for command in commands:
                self.log.append(("command", command))
                if any(p(command) for p in self.hold):
                    self.held.append(command)
                else:
                    self.answer(command)
        return [item for kind, item in self.log[start:] if kind == "command"]

    def take(self, kind: type) -> Any:
        """The last held awaiting command of ``kind`` (removed from the held list)."""
        for index in range(len(self.held) - 1, -1, -1):
            if isinstance(self.held[index], kind):
                return self.held.pop(index)
        raise AssertionError(f"no held {kind.__name__}")

    def guard_attempts(self) -> list[int]:
        return [dict(e.meta.pairs)["attempt"] for e in self.published(se.EntryKind.GUARD_CHUNK)]

    def clean(self) -> None:
        assert self.refused == [], self.refused
        assert self.broken == [], self.broken


def armed(h: Checked, *statuses: str, turn: str = "t1") -> None:
    """Script a first response that writes a todo list with ``statuses``, then stops."""
    h.tool_results["tw1"] = {"output": "ok", "structured": todos(*(statuses or ("pending",)))}
    h.responses.extend([say("working", todo_call("tw1")), say("stopping")])


def prompt(turn: str = "t1", text: str = "do it") -> at.PromptSubmitted:
    return at.PromptSubmitted(turn_id=turn, message_id=f"{turn}-m", text=text)


def cron(turn: str, source: str = "task", recurring: bool = False,
         kind: se.AutomaticKind = se.AutomaticKind.CRON,
         text: str | None = None) -> se.AutomaticTurnDue:
    return se.AutomaticTurnDue(turn_id=turn, message_id=f"{turn}-m", text=text or f"{turn} text",
                               kind=kind, source_id=source, recurring=recurring)


def replies_with_queued(drain_id: str = "t1/drain-1", messages: tuple[str, ...] = ()):
    """A drain policy: the reply to ``drain_id`` carries ``messages`` and a queued prompt."""
    def reply(c: se.DrainMidTurnQueue) -> at.Event:
        if c.drain_id == drain_id:
            return se.MidTurnDrained(drain_id=c.drain_id, messages=messages, has_queued_prompt=True)
        return se.MidTurnDrained(drain_id=c.drain_id)
    return reply


# --- SO: the stop order ---------------------------------------------------------------------


def test_lead_during_drain_joins_turn_with_drained_messages():
    """A Lead typed while the drain is out and the drain's own messages both join the turn, in
    order, and the guard is skipped for that stop (req: SO-1).
    """
    h = Checked()
    armed(h, "pending", "pending")
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


def test_stop_during_drain_hands_late_messages_back():
    """Stop while the drain is out ends the turn CANCELLED; the late reply's text is restored and
    its timer is absorbed (req: SO-1, BR-3, TL-8).
    """
    h = Checked()
    armed(h)
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(at.StopPressed())
    assert h.outcomes() == [at.OutcomeKind.CANCELLED]
    out = h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("late",),
                                   has_queued_prompt=True))
    assert [type(c) for c in out] == [se.RestoreMidTurnMessages]
    assert out[0].messages == ("late",)
    out = h.send(se.TimerFired(key=drain.drain_id))
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert se.waiting_for(h.state) == () and se.held(h.state) == ()
    h.clean()


def test_stop_during_hooks_absorbs_late_block():
    """Stop while the Stop hooks run ends the turn; the hooks' late block is absorbed, not a
    continuation (req: SO-6, TL-8).
    """
    h = Checked(stop_hooks=True)
    armed(h)
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
    armed(h, "pending")
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
    armed(h, "pending")
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


def test_client_held_prompt_waits_then_abort_releases_automatic_turns():
    """When the drain says the client holds a prompt, the idle session names that wait; aborting it
    ends the awaiting chain and runs the deferred cron turn (req: SO-2, SO-4, BG-5).
    """
    h = Checked()
    armed(h, "pending")
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


def test_mid_turn_message_first_then_fifo_priority_after_todos_complete():
    """One drain with a mid-turn message and a queued prompt: the message runs first, and after that
    continuation completes the todos no guard or hook runs; the session awaits the prompt (req:
    SO-5).
    """
    h = Checked(stop_hooks=True)
    armed(h, "pending", "pending")
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
    armed(h, "pending")
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
    armed(h, "pending", "pending")
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


def test_drain_timeout_then_late_reply_joins_as_lead_snapshot_stale():
    """A drain that timed out lets the stop go on; its late reply's messages join the still-running
    turn and its hasQueuedPrompt is discarded (req: BR-3, SO-1).
    """
    h = Checked()
    armed(h, "pending")
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.TimerFired(key=drain.drain_id))
    h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("late one",),
                             has_queued_prompt=True))
    h.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    h.responses.extend([say("a"), say("b"), say("c"), say("d")])
    h.answer(h.take(at.RequestModelStream))
    h.send()
    assert any(r.lead_ids == ("t1/drain-1/m1",) for r in h.commands(at.RequestModelStream))
    assert se.waiting_for(h.state) == ()
    assert h.outcomes() == [at.OutcomeKind.FINISHED]
    h.clean()


def test_abort_crossing_drain_makes_snapshot_stale():
    """An abort that crosses a drain in flight makes that reply's hasQueuedPrompt stale: the session
    does not wait for a prompt that will never come (req: SO-4, BR-3).
    """
    h = Checked()
    armed(h, "pending")
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.PromptAborted(prompt_id="client-side"))
    h.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    h.responses.extend([say("g1"), say("g2")])
    h.send(se.MidTurnDrained(drain_id=drain.drain_id, has_queued_prompt=True))
    assert h.guard_attempts() == [1, 2]
    assert se.waiting_for(h.state) == ()
    h.clean()


# --- SG: budget and the hard bound ----------------------------------------------------------


def test_second_guard_stream_tool_calls_run_but_no_third_stream():
    """If the second guard stream returns tool calls they run and their results are kept, but no
    third guard-attributable stream opens (req: SG-B5, SG-B1).
    """
    h = Checked()
    armed(h, "pending")
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
    armed(h, "pending")
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
    armed(h, "pending")
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
    armed(h, "pending")
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
    armed(h, "pending")
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
    armed(h, "pending")
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


# --- SG-A: trust and lifecycle --------------------------------------------------------------


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


def test_invalidated_prompt_ending_in_error_releases_deferred_queue():
    """A foreground prompt invalidated by a rewind that ends in an error releases the deferred
    automatic queue (req: SG-A15).
    """
    h = Checked()
    armed(h, "pending")
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


def test_related_result_runs_after_retry_window_and_keeps_budget():
    """A related background result held through the retry window then runs as a trusted continuation
    of the paused chain: the guard continues with the chain's budget (req: SG-A11, BG-5).
    """
    h = paused_with_background(se.BackgroundKind.AGENT, "bg1")
    assert se.WaitKind.RETRY in [w.kind for w in se.waiting_for(h.state)]
    h.send(se.BackgroundEnded(item_id="bg1", notification_id="n1"),
           cron("a1", source="bg1", kind=se.AutomaticKind.NOTIFICATION))
    assert se.held(h.state)[0].related
    h.send(se.TimerFired(key="t1/retry"))
    h.send(se.NotificationConsumed(notification_id="n1"))
    h.responses.extend([say("processed"), say("a"), say("b")])
    h.answer(h.take(at.RequestModelStream))
    h.send()
    assert h.guard_attempts() == [1, 2]
    assert h.commands(at.EndTurn)[-1].origin is at.TurnOrigin.NOTIFICATION
    h.clean()


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


def test_compaction_failure_on_guard_continuation_releases_cron():
    """A compaction failure before the guard's stream opens ends the turn, consumes no attempt,
    suspends the chain and releases the deferred cron (req: SG-B9, SG-B3).
    """
    h = Checked()
    armed(h, "pending")
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.send(cron("c1"))
    h.responses.append(say("cron reply"))
    h.send(at.CompactionFailed(request_id=request.request_id, reason="too big"))
    assert h.outcomes() == [at.OutcomeKind.COMPACTION_FAILED, at.OutcomeKind.FINISHED]
    assert h.guard_attempts() == [] and h.state.usage.guard_calls == 0
    h.clean()


# --- BG: automatic turns --------------------------------------------------------------------


def test_automatic_turn_runs_guard_only_never_stop_hooks():
    """A cron turn that writes its own unfinished todos arms its own chain and is continued by the
    guard, with no external Stop-hook run (req: BG-4, SG-A10).
    """
    h = Checked(stop_hooks=True)
    h.tool_results["ctw"] = {"output": "ok", "structured": todos("pending")}
    h.responses.extend([say("cron work", todo_call("ctw")), say("s"), say("a"), say("b")])
    h.send(cron("c1"))
    assert h.commands(se.RunStopHooks) == []
    assert h.guard_attempts() == [1, 2]
    assert h.commands(at.EndTurn)[0].origin is at.TurnOrigin.CRON
    h.clean()


def test_recurring_fires_coalesce_and_queue_bound_hands_back_text():
    """Deferred recurring fires of one task coalesce into one; when the bounded queue overflows the
    oldest unrelated turn is handed back with its text (req: BG-6).
    """
    h = Checked(max_deferred=3)
    h.send(prompt())
    outs = [h.send(cron(f"r{i}", source="REC", recurring=True)) for i in range(3)]
    assert outs[1][0].coalesced_into == "r0" and outs[2][0].coalesced_into == "r0"
    for i in range(3):
        h.send(cron(f"o{i}", source=f"T{i}"))
    dropped = h.commands(se.AutomaticTurnDropped)
    assert [d.turn_id for d in dropped] == ["r0", "o0"][:len(dropped)]
    assert dropped[0].text == "r0 text"
    assert len(se.held(h.state)) == 3
    h.clean()


def test_follow_ups_suppressed_while_chain_can_resume():
    """After a resumable error with an armed chain the session suppresses follow-up suggestions and
    names the retry it waits for (req: BG-7, SG-S2).
    """
    h = Checked()
    armed(h, "pending")
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


# --- BR: clients, grace, close --------------------------------------------------------------


def test_grace_expiry_during_permission_never_approves():
    """Grace expiry with a dialog open halts the turn, dismisses the dialog as skipped, reports a
    pending Lead unapplied and closes; a late allow is absorbed and nothing runs (req: BR-4, TL-3,
    LD-13).
    """
    h = Checked()
    h.responses.append(say("perm", at.ToolCall(call_id="w1", name="write_file",
                                               needs_permission=True)))
    h.send(se.ClientAttached(client_id="A"), prompt())
    h.send(se.ClientDetached(client_id="A"))
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead"))
    h.send(se.TimerFired(key="grace"))
    assert h.outcomes() == [at.OutcomeKind.HALTED]
    assert h.commands(at.DismissPermission)[0].recorded_as is at.ToolResultStatus.SKIPPED
    assert [c.lead_id for c in h.commands(at.LeadUnapplied)] == ["L1"]
    assert len(h.commands(se.CloseSession)) == 1
    out = h.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert h.commands(at.ExecuteTool) == []
    h.clean()


def test_reattach_within_grace_keeps_turn_and_guard():
    """A client that comes back within the grace window cancels the timer, gets a replay, and the
    armed guard still continues (req: BR-4, SG-A13).
    """
    h = Checked()
    armed(h, "pending")
    h.drain = lambda c: None
    h.send(se.ClientAttached(client_id="A"), prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.ClientDetached(client_id="A"))
    out = h.send(se.ClientAttached(client_id="A", last_seq=0))
    assert any(isinstance(c, se.CancelTimer) and c.key == "grace" for c in out)
    assert any(isinstance(c, se.ReplayEvents) for c in out)
    assert [type(c) for c in h.send(se.TimerFired(key="grace"))] == [at.StaleAnswerIgnored]
    h.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id)
    h.responses.extend([say("a"), say("b")])
    h.send(se.MidTurnDrained(drain_id=drain.drain_id))
    assert h.guard_attempts() == [1, 2]
    h.clean()


def test_no_subscriber_prompt_then_replay_of_guard_attempts():
    """A prompt runs with no client attached; a client attaching later gets both guard attempts and
    the exhaustion notice replayed (req: BR-5, OB-6).
    """
    h = Checked()
    armed(h, "pending")
    h.responses.extend([say("a"), say("b")])
    h.send(prompt())
    out = h.send(se.ClientAttached(client_id="late", last_seq=None))
    replay = next(c for c in out if isinstance(c, se.ReplayEvents))
    kinds = [e.kind for e in replay.entries]
    assert kinds.count(se.EntryKind.GUARD_CHUNK) == 2
    assert kinds.count(se.EntryKind.GUARD_EXHAUSTED) == 1
    h.clean()


def test_close_with_work_in_flight_hands_everything_back():
    """Close while a write runs: the tool's result is kept, the pending Lead is reported unapplied,
    the queued prompt and held cron come back with their texts, then the session closes (req: BR-4,
    LD-13, TL-5).
    """
    h = Checked()
    h.responses.append(say("working", at.ToolCall(call_id="w1", name="write_file")))
    h.hold.append(lambda c: isinstance(c, (at.ExecuteTool, at.SaveLead)))
    h.send(prompt())
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="queued one"), cron("c1"))
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead text"))
    h.send(se.CloseRequested())
    assert h.commands(se.CloseSession) == []  # waits for the write
    h.hold.clear()
    h.send(at.ToolFinished(call_id="w1", output="wrote"), at.LeadSaved(lead_id="L1"))
    saved = [r for c in h.commands(at.Persist) for r in c.records
             if isinstance(r, at.ToolResultRecord)]
    assert [(r.call_id, r.output) for r in saved] == [("w1", "wrote")]
    assert [c.lead_id for c in h.commands(at.LeadUnapplied)] == ["L1"]
    assert [(c.prompt_id, c.text) for c in h.commands(se.PromptRefused)] == [("q1", "queued one")]
    assert [(c.turn_id, c.text) for c in h.commands(se.AutomaticTurnDropped)] == [("c1", "c1 text")]
    assert len(h.commands(se.CloseSession)) == 1
    h.clean()


def test_events_after_close_are_handed_back_or_absorbed():
    """After close, prompts, queued prompts, Leads and automatic turns come back with their text,
    and late clicks are absorbed, never a ProtocolError (req: BR-4).
    """
    h = Checked()
    h.responses.append(say("hi"))
    h.send(prompt(), se.CloseRequested())
    assert h.state.phase is se.SessionPhase.CLOSED
    late = [prompt("t9", "after close"),
            se.PromptQueued(prompt_id="q9", message_id="qm9", text="q after"),
            at.LeadSubmitted(chat_id="chat", lead_id="L9", text="lead after"),
            cron("c9"), at.StopPressed(), se.CloseRequested(), se.TimerFired(key="grace"),
            se.ClientAttached(client_id="x"), se.PromptAborted(prompt_id="q9"),
            se.HardStopped(), se.LifecycleChanged(kind=g.TrustClearingKind.FORK)]
    for event in late:
        h.send(event)
    assert [c.text for c in h.commands(se.PromptRefused)] == ["after close", "q after"]
    assert [c.draft for c in h.commands(at.ReturnDraft)] == ["lead after"]
    assert [c.text for c in h.commands(se.AutomaticTurnDropped)] == ["c9 text"]
    h.clean()


def test_late_drain_reply_after_grace_close_is_restored():
    """A drain reply that arrives after grace expiry closed the session is restored to the user, not
    refused (req: BR-3, BR-4).
    """
    h = Checked()
    armed(h, "pending")
    h.drain = lambda c: None
    h.send(se.ClientAttached(client_id="A"), prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.ClientDetached(client_id="A"), se.TimerFired(key="grace"))
    assert h.state.phase is se.SessionPhase.CLOSED
    out = h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("typed",)))
    assert [(type(c), c.messages) for c in out] == [(se.RestoreMidTurnMessages, ("typed",))]
    h.clean()


# --- resends and refusals -------------------------------------------------------------------


def test_resends_of_queued_prompt_lead_and_automatic_turn_are_idempotent():
    """A queued prompt, a Lead and an automatic turn sent twice with the same id and text are
    absorbed; a queued prompt or Lead reusing the id with other text is handed back (req: BR-1,
    LD-7).
    """
    h = Checked()
    h.send(prompt())
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="q"))
    assert [type(c) for c in h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="q"))] \
        == [at.StaleAnswerIgnored]
    out = h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="q2"))
    assert [(type(c), c.text) for c in out] == [(se.PromptRefused, "q2")]
    h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead"))
    assert [type(c) for c in h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1",
                                                     text="lead"))] == [at.StaleAnswerIgnored]
    out = h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead2"))
    assert [(c.reason, c.draft) for c in out] == [(at.DraftReason.DUPLICATE_ID, "lead2")]
    h.send(cron("c1"))
    assert [type(c) for c in h.send(cron("c1"))] == [at.StaleAnswerIgnored]
    assert len(h.commands(at.SaveLead)) == 1
    h.clean()


def test_automatic_turn_resend_with_other_text_is_handed_back():
    """An automatic turn resent with the id of a held one but another text is handed back with that
    text, not refused as misuse (req: BG-6, BG-5).
    """
    h = Checked()
    h.send(prompt())
    h.send(cron("c1"))
    out = h.send(cron("c1", text="changed text"))
    assert h.refused == []
    assert [(type(c), c.text) for c in out] == [(se.AutomaticTurnDropped, "changed text")]


def test_prompt_resend_while_its_turn_runs_is_absorbed():
    """A prompt resent with the same id and text while its own turn runs is absorbed, as it is once
    the turn has ended (req: BR-4).
    """
    h = Checked()
    h.send(prompt())
    assert h.state.phase is not se.SessionPhase.IDLE
    out = h.send(prompt())
    assert h.refused == []
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]


def test_prompt_resend_after_turn_ended_is_absorbed():
    """A prompt resent with the same id and text after its turn ended is absorbed without a second
    turn (req: BR-4).
    """
    h = Checked()
    h.responses.append(say("hi"))
    h.send(prompt())
    out = h.send(prompt())
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert len(h.commands(at.EndTurn)) == 1
    h.clean()


def test_double_continue_is_absorbed():
    """A second ContinueTurn for a turn the first one already resumed is absorbed, not a
    ProtocolError (req: TL-11).
    """
    h = Checked()
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.send(at.StreamFailed(request_id=request.request_id, error="x", network=True))
    h.send(at.ContinueTurn(turn_id="t1"))
    out = h.send(at.ContinueTurn(turn_id="t1"))
    assert h.refused == []
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]


def test_refused_step_changes_nothing_and_only_protocol_error_escapes():
    """Misuse (a result for a tool never started, an unknown drain id) raises a ProtocolError and
    leaves the state identical (req: TL-5).
    """
    h = Checked()
    h.send(prompt())
    before = h.state
    for bad in (at.ToolFinished(call_id="nope", output="x"),
                se.MidTurnDrained(drain_id="t1/drain-9"),
                se.StopHookDecided(run_id="t1/hooks-9", block=False)):
        with pytest.raises(at.ProtocolError):
            se.reduce(h.state, bad)
        assert h.state is before
    h.clean()


def test_same_events_give_same_commands():
    """Replaying a recorded interleaving (Lead, queued prompt, cron, hooks, guard, close) on a fresh
    session gives the same commands byte for byte (req: SO-8, BR-5).
    """
    def run() -> list[at.Command]:
        h = Checked(stop_hooks=True)
        armed(h, "pending", "in_progress")
        h.hooks = lambda c: se.StopHookDecided(run_id=c.run_id, block=c.consecutive_blocks < 1,
                                               reason="H" if c.consecutive_blocks < 1 else None)
        h.responses.extend([say("a"), say("b"), say("c"), say("d")])
        h.send(prompt(), at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead"),
               se.PromptQueued(prompt_id="q1", message_id="qm1", text="q"), cron("c1"))
        h.send(se.CloseRequested())
        h.clean()
        return h.commands()
    first, second = run(), run()
    assert first == second
    assert repr(first) == repr(second)


# --- found late: a failed Lead save during the drain, an aborted queued prompt ---------------


def test_failed_lead_at_natural_stop_lets_guard_decide():
    """A Lead whose save fails at the natural stop, before the drain, hands its draft back and the
    stop goes on to the guard (req: LD-7, SO-7).
    """
    h = Checked()
    armed(h, "pending")
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
    armed(h, "pending")
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


def test_aborted_queued_prompt_keeps_no_text_lost_invariant():
    """Aborting a queued prompt before it runs satisfies the session's own no-text-lost invariant
    (req: SO-3, SO-4).
    """
    h = Checked()
    h.send(prompt())
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="complete"))
    h.send(se.PromptAborted(prompt_id="q1"))
    assert se.held(h.state) == ()
    h.clean()


def test_incomplete_queued_prompt_waits_for_content_then_runs():
    """An incomplete queued prompt is named as the idle session's wait (PROMPT_CONTENT) and runs
    with its final text once completed (req: BR-1, SO-2).
    """
    h = Checked()
    h.hold.append(lambda c: isinstance(c, at.RequestModelStream))
    h.send(prompt())
    request = h.take(at.RequestModelStream)
    h.hold.clear()
    h.send(se.PromptQueued(prompt_id="q1", message_id="qm1", text="part", complete=False))
    h.send(at.StreamOpened(request_id=request.request_id),
           at.StreamCompleted(request_id=request.request_id, **say("s")))
    assert [(w.kind, w.answer_id) for w in se.waiting_for(h.state)] == [
        (se.WaitKind.PROMPT_CONTENT, "q1")]
    h.responses.append(say("q"))
    h.send(se.PromptCompleted(prompt_id="q1", text="part and rest"))
    assert "part and rest" in h.user_messages()
    assert [c.turn_id for c in h.commands(at.EndTurn)] == ["t1", "q1"]
    h.clean()


def test_hard_stop_while_draining_halts_and_restores_late_reply():
    """A host hard stop (PostToolUse shouldStop) while the drain is out halts the turn; the drain's
    late text is restored (req: SG-S1, BR-3).
    """
    h = Checked()
    armed(h, "pending")
    h.drain = lambda c: None
    h.send(prompt())
    drain = h.take(se.DrainMidTurnQueue)
    h.send(se.HardStopped(kind=at.HardStopKind.POST_TOOL_USE_STOP, reason="stop"))
    assert h.commands(at.EndTurn)[0].outcome.halt_kind is at.HardStopKind.POST_TOOL_USE_STOP
    out = h.send(se.MidTurnDrained(drain_id=drain.drain_id, messages=("hi",),
                                   has_queued_prompt=True))
    assert [type(c) for c in out] == [se.RestoreMidTurnMessages]
    assert se.waiting_for(h.state) == () and h.guard_attempts() == []
    h.clean()


def test_plan_mode_mid_turn_disarms_and_releases_cron():
    """Entering Approval plan mode while an armed turn runs: the stop does not continue and the
    deferred cron runs once the turn ends (req: SG-C3, SO-7, BG-5).
    """
    h = Checked()
    armed(h, "pending")
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


def test_lead_waiting_on_open_permission_then_stop_reports_unapplied():
    """A Lead saved while a dialog is open keeps the dialog (ADR-0067); Stop then cancels it,
    records every call, reports the Lead unapplied, and a late allow runs nothing (req: LD-11,
    LD-13, TL-3).
    """
    h = Checked()
    h.responses.append(say("perm", at.ToolCall(call_id="w1", name="write_file",
                                               needs_permission=True),
                           at.ToolCall(call_id="w2", name="write_file")))
    h.send(prompt())
    out = h.send(at.LeadSubmitted(chat_id="chat", lead_id="L1", text="lead"))
    assert not any(isinstance(c, at.DismissPermission) for c in out)
    h.send(at.StopPressed())
    assert h.commands(at.DismissPermission)[0].recorded_as is at.ToolResultStatus.CANCELLED
    recorded = {r.call_id for c in h.commands(at.Persist) for r in c.records
                if isinstance(r, at.ToolResultRecord)}
    assert recorded == {"w1", "w2"}
    assert [c.lead_id for c in h.commands(at.LeadUnapplied)] == ["L1"]
    out = h.send(at.PermissionDecided(call_id="w1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in out] == [at.StaleAnswerIgnored]
    assert h.commands(at.ExecuteTool) == []
    h.clean()
