"""Regression tests for the 22 session-composition defects of issue 18 (``settle_spec.md``).

Each test pins the FIXED behaviour of one defect (``test_dNN_...``). New public API the fixed
library will have (``se.waiting_for``, ``se.WaitKind``, ``se.RetryWithdrawn``,
``se.UnsavedRecords`` ...) is reached by attribute access inside the test bodies, so a name that
is missing fails only the tests that use it, never the module's collection.
"""

from __future__ import annotations

from typing import Any

import pytest
from session_host import Host, say, todo_call, todos

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn import trace

PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser")
PENDING = {"output": "1 todo", "structured": todos("pending")}
READ = at.ToolCall(call_id="r1", name="read_file", arguments='{"path": "a.py"}')
CRON = se.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1m", text="nightly report",
                           kind=se.AutomaticKind.CRON, source_id="task-1")


class ScriptHost(Host):
    """The scripted host, which can also hold chosen awaiting commands unanswered and fail
    chosen writes (``PersistFailed`` instead of ``Persisted``)."""

    def __init__(self, config: se.SessionConfig | None = None, *,
                 hold: tuple[type, ...] = (), fail_keys: tuple[str, ...] = (),
                 **fields: Any) -> None:
        super().__init__(config, **fields)
        self.hold_kinds = hold
        self.fail_keys = set(fail_keys)

    def answer(self, command: at.Command) -> None:
        if isinstance(command, at.Persist) and command.key in self.fail_keys:
            self.fail_keys.discard(command.key)
            self.queue.append(at.PersistFailed(key=command.key, reason="disk full"))
            return
        if self.hold_kinds and isinstance(command, self.hold_kinds):
            self.held.append(command)
            return
        super().answer(command)


def held(host: Host, kind: type) -> Any:
    """Take the last held command of ``kind`` out of ``host.held``."""
    command = next(c for c in reversed(host.held) if isinstance(c, kind))
    host.held.remove(command)
    return command


def resume(host: Host, *responses: dict[str, Any]) -> list[at.Command]:
    """Answer the held model request with ``responses`` (one per request from now on)."""
    request = held(host, at.RequestModelStream)
    host.responses.extend(responses)
    host.answer(request)
    return host.send()


def start_armed(host: Host) -> None:
    """``PROMPT``: its first response writes one unfinished todo; the next request is held."""
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = PENDING
    host.send(PROMPT)
    assert isinstance(host.held[-1], at.RequestModelStream)


def hooks_block_once() -> Host:
    """A host whose Stop hooks block once (reason "Tests fail."), then let stops through."""
    host = Host(stop_hooks=True)
    blocks = iter([True])
    host.hooks = lambda c: (
        se.StopHookDecided(run_id=c.run_id, block=True, reason="Tests fail.")
        if next(blocks, False) else se.StopHookDecided(run_id=c.run_id, block=False))
    return host


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


def persisted_texts(commands: list[at.Command]) -> list[str]:
    return [r.text for c in commands if isinstance(c, at.Persist) for r in c.records
            if isinstance(r, at.UserMessageRecord)]


def guard_attempts(host: Host) -> list[object]:
    return [dict(e.meta or {})["attempt"] for e in host.published(se.EntryKind.GUARD_CHUNK)]


def waits(state: se.SessionState) -> list[Any]:
    return [w.kind for w in se.waiting_for(state)]


# --- 1 -------------------------------------------------------------------------------------


@pytest.mark.req("BG-5")
def test_d01_a_related_notification_held_during_the_turn_starts_when_the_turn_ends() -> None:
    """A notification of background work the chain started, due while the chain's turn runs,
    is held, and starts as its own turn (prompt saved, request sent) when that turn ends
    deferring for it: the session does not idle. req: BG-5"""
    host = Host()
    start_armed(host)
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="build"))
    host.send(se.BackgroundEnded(item_id="build"),
              se.NotificationQueued(notification_id="nb", source_id="build"))
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


@pytest.mark.req("BG-5", "TL-11")
def test_d01_a_related_turn_held_by_the_retry_window_starts_when_its_timer_fires() -> None:
    """After an API error pauses the chain, a related automatic turn that comes due is held
    while the retry window is open, and starts once the window's timer fires. req: BG-5"""
    host = Host()
    start_armed(host)
    host.send(se.BackgroundStarted(kind=se.BackgroundKind.AGENT, item_id="agent-1"))
    request = held(host, at.RequestModelStream)
    failed = host.send(at.StreamFailed(request_id=request.request_id, error="overloaded"))
    assert [c.outcome.kind for c in failed if isinstance(c, at.EndTurn)] == [
        at.OutcomeKind.ERROR]
    host.send(se.BackgroundEnded(item_id="agent-1"),
              se.NotificationQueued(notification_id="na", source_id="agent-1"))
    due = se.AutomaticTurnDue(turn_id="n1", message_id="n1m", text="the agent finished",
                              kind=se.AutomaticKind.NOTIFICATION, source_id="agent-1")
    assert host.send(due) == [se.AutomaticTurnDeferred(turn_id="n1")]
    assert "the agent finished" not in host.user_messages()
    assert se.StartTimer(key="t1/retry", seconds=300.0) in failed
    fired = host.send(se.TimerFired(key="t1/retry"))
    assert "the agent finished" in persisted_texts(fired)
    assert host.state.turn.turn_id == "n1"


# --- 2 -------------------------------------------------------------------------------------


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


# --- 3 -------------------------------------------------------------------------------------


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


# --- 4 -------------------------------------------------------------------------------------


@pytest.mark.req("SO-4", "SO-3")
def test_d04_aborting_a_prompt_that_already_ran_does_not_end_the_wait() -> None:
    """``PromptAborted`` for a FIFO prompt that already started as a turn is absorbed
    (``StaleAnswerIgnored``) and does not end the chain's wait for a different, client-held
    prompt. req: SO-4"""
    host = Host()
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = PENDING
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="Port the parser"))
    assert host.state.turn.turn_id == "q1"  # it ran at once, as a turn
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, has_queued_prompt=True)
    resume(host, say("Stopping here."))
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    late = host.send(se.PromptAborted(prompt_id="q1"))
    assert [(type(c), c.event, c.answer_id) for c in late] == [
        (at.StaleAnswerIgnored, "PromptAborted", "q1")]
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]


@pytest.mark.req("SO-4", "BR-3")
def test_d04_an_abort_during_the_drain_makes_its_queued_prompt_flag_stale() -> None:
    """``PromptAborted`` for an id the session does not know, while a drain is outstanding,
    makes that drain's ``has_queued_prompt=True`` stale: no wait starts, and an automatic turn
    runs afterwards. req: SO-4"""
    host = Host()
    host.responses.append(say("Done."))
    host.drain = lambda c: None  # the drain's reply is held
    host.send(PROMPT)
    drain = held(host, se.DrainMidTurnQueue)
    host.send(se.PromptAborted(prompt_id="p-client"))
    host.send(se.MidTurnDrained(drain_id=drain.drain_id, has_queued_prompt=True))
    assert host.outcomes() == [at.OutcomeKind.FINISHED]
    assert host.state.guard.phase is not g.GuardPhase.AWAITING_PROMPT
    host.responses.append(say("Nightly report written."))
    ran = host.send(CRON)
    assert "nightly report" in persisted_texts(ran)
    assert se.WaitKind.CLIENT_PROMPT not in waits(host.state)


# --- 5 -------------------------------------------------------------------------------------


@pytest.mark.req("SG-B1", "SG-B4", "SG-B8")
def test_d05_the_follow_up_of_a_combined_hook_and_guard_stream_counts_as_attempt_two() -> None:
    """A hook block and a guard continuation share one stream, which calls a tool with todos
    still unfinished: its tool-result follow-up is the guard's attempt 2, and no third
    guard-attributable stream opens without user input. req: SG-B1"""
    host = hooks_block_once()
    start_armed(host)
    resume(host, say("Stopping here."), say("Reading.", READ), say("Read it."),
           say("never sent"))
    assert se.combined_continuation("Tests fail.", g.continuation_text(1, 1)) in (
        host.user_messages())
    assert guard_attempts(host) == [1, 2]
    assert host.state.usage.guard_calls == 2
    # the todo write's, the first stop's, the combined one, its follow-up: no third guard call
    assert len(host.commands(at.RequestModelStream)) == 4
    assert [r.text for r in host.published(se.EntryKind.GUARD_EXHAUSTED)] == [
        g.exhaustion_text(1)]
    assert [r["text"] for r in host.responses] == ["never sent"]


# --- 6 -------------------------------------------------------------------------------------


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


# --- 7 -------------------------------------------------------------------------------------


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


# --- 8 -------------------------------------------------------------------------------------


def _malformed(call_id: str) -> dict[str, Any]:
    return {"text": "", "finish_reason": "tool_use", "malformed_tool_format": True,
            "tool_calls": (at.ToolCall(call_id=call_id, name="read_file", arguments="{"),)}


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


# --- 9 -------------------------------------------------------------------------------------


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


# --- 10 ------------------------------------------------------------------------------------


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


# --- 11 ------------------------------------------------------------------------------------


@pytest.mark.req("BR-1", "BG-6")
def test_d11_a_held_automatic_turns_id_is_taken() -> None:
    """A ``PromptQueued`` reusing a held automatic turn's id is refused (its text handed back,
    nothing else changes); an ``AutomaticTurnDue`` reusing it is handed back the same way
    (``AutomaticTurnDropped`` with its text). req: BR-1"""
    host = Host()
    host.send(PROMPT)  # the request is held: the turn runs
    assert host.send(CRON) == [se.AutomaticTurnDeferred(turn_id="cron-1")]
    before = host.state
    refused = host.send(se.PromptQueued(prompt_id="cron-1", message_id="qm", text="typed"))
    assert [(type(c), c.prompt_id, c.text) for c in refused] == [
        (se.PromptRefused, "cron-1", "typed")]
    assert host.state.fifo == before.fifo == ()
    assert host.state.deferred == before.deferred
    again = host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1m2", text="again",
                                          kind=se.AutomaticKind.CRON, source_id="task-2"))
    assert [(type(c), c.turn_id, c.text) for c in again] == [
        (se.AutomaticTurnDropped, "cron-1", "again")]
    assert host.state.deferred == before.deferred


@pytest.mark.req("BR-1")
def test_d11_a_queued_prompts_id_is_taken() -> None:
    """With the session idle and a queued prompt still uploading, a ``PromptSubmitted`` or an
    ``AutomaticTurnDue`` reusing its id is refused at admission, its text handed back
    (``PromptRefused``, ``AutomaticTurnDropped``), and nothing changes. req: BR-1"""
    host = Host()
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="upl", complete=False))
    assert host.state.phase is se.SessionPhase.IDLE
    before = host.state
    assert se.reduce(before, at.PromptSubmitted(turn_id="q1", message_id="m9", text="typed")) == (
        at.Step(before, (se.PromptRefused(prompt_id="q1", text="typed",
                                          reason="this prompt id is already in use"),)))
    step = se.reduce(before, se.AutomaticTurnDue(turn_id="q1", message_id="m8", text="cron",
                                                 kind=se.AutomaticKind.CRON, source_id="task"))
    assert step.state == before and [(type(c), c.text) for c in step.commands] == [
        (se.AutomaticTurnDropped, "cron")]
    assert host.state.phase is se.SessionPhase.IDLE
    assert [p.prompt_id for p in host.state.fifo] == ["q1"]


# --- 12 ------------------------------------------------------------------------------------


def _kinds(commands: list[at.Command]) -> list[str]:
    return [type(c).__name__ for c in commands]


@pytest.mark.req("BR-4", "TL-5")
def test_d12_close_after_a_failed_final_write_hands_the_tool_result_back() -> None:
    """Stop while a tool runs, the tool's result is kept, its write fails; the session is
    closed: the executed result record comes back in ``UnsavedRecords`` before
    ``CloseSession``. req: BR-4"""
    host = ScriptHost(hold=(at.ExecuteTool,), fail_keys=("t1/p3",))
    host.responses.append(say("Reading.", READ))
    host.send(PROMPT)
    held(host, at.ExecuteTool)
    host.send(at.StopPressed())
    ended = host.send(at.ToolFinished(call_id="r1", output="the file's text"))
    assert at.PersistFailed(key="t1/p3", reason="disk full") in host.events(at.PersistFailed)
    assert [c.outcome.kind for c in ended if isinstance(c, at.EndTurn)] == [
        at.OutcomeKind.CANCELLED]
    closed = host.send(se.CloseRequested())
    kinds = _kinds(closed)
    assert "UnsavedRecords" in kinds and kinds.index("UnsavedRecords") < kinds.index(
        "CloseSession")
    unsaved = [c for c in closed if isinstance(c, se.UnsavedRecords)]
    assert len(unsaved) == 1
    results = [r for r in unsaved[0].records if isinstance(r, at.ToolResultRecord)]
    assert [(r.call_id, r.status, r.output) for r in results] == [
        ("r1", at.ToolResultStatus.EXECUTED, "the file's text")]


@pytest.mark.req("BR-4", "LD-13")
def test_d12_grace_expiry_after_a_failed_prompt_save_hands_the_prompt_and_lead_back() -> None:
    """The prompt's own save fails (a resumable error) after a Lead was saved; the grace
    period expires: the Lead is reported ``LeadUnapplied`` and the prompt's record comes back
    in ``UnsavedRecords``, both before ``CloseSession``. req: BR-4"""
    state = se.Session.create(se.SessionConfig(
        chat_id="chat", guard=g.GuardConfig(todo_stop_guard=True, daemon=True),
        turn=at.TurnConfig(auto_title=False)))
    for event in (se.ClientAttached(client_id="ui"), PROMPT,
                  at.LeadSubmitted(chat_id="chat", lead_id="L1", text="use tabs"),
                  at.LeadSaved(lead_id="L1")):
        state, _ = se.reduce(state, event)
    state, failed = se.reduce(state, at.PersistFailed(key="t1/p1", reason="disk full"))
    assert [c.outcome.resumable for c in failed if isinstance(c, at.EndTurn)] == [True]
    state, _ = se.reduce(state, se.ClientDetached(client_id="ui"))
    state, expired = se.reduce(state, se.TimerFired(key="grace"))
    commands = list(expired)
    kinds = _kinds(commands)
    assert at.LeadUnapplied(lead_id="L1") in commands
    assert commands.index(at.LeadUnapplied(lead_id="L1")) < kinds.index("CloseSession")
    assert "UnsavedRecords" in kinds and kinds.index("UnsavedRecords") < kinds.index(
        "CloseSession")
    unsaved = next(c for c in commands if isinstance(c, se.UnsavedRecords))
    assert at.UserMessageRecord(message_id="m1", text="Port the parser") in unsaved.records


# --- 13 ------------------------------------------------------------------------------------


def _lead_in_a_request() -> at.TurnState:
    """The turn alone: a Lead saved during the first stream is carried by request ``t1/r2``,
    which has not opened yet."""
    state = at.TurnState.create("chat", at.TurnConfig(auto_title=False))
    for event in (PROMPT, at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
                  at.LeadSubmitted(chat_id="chat", lead_id="L1", text="use tabs"),
                  at.LeadSaved(lead_id="L1"),
                  at.StreamCompleted(request_id="t1/r1", text="Done.", finish_reason="stop")):
        state, _ = at.reduce(state, event)
    state, commands = at.reduce(state, at.Persisted(key="t1/p2"))
    assert commands == (at.RequestModelStream(request_id="t1/r2", lead_ids=("L1",)),)
    return state


@pytest.mark.req("LD-13")
@pytest.mark.parametrize("events", [
    [at.TokenLimitRejected(request_id="t1/r2", reason="too big")],
    [at.CompactionFailed(request_id="t1/r2", reason="too long")],
    [at.StopPressed()],
    [at.StreamFailed(request_id="t1/r2", error="overloaded"),
     at.PromptSubmitted(turn_id="t2", message_id="m2", text="something else")],
], ids=["token-limit", "compaction", "stop", "stream-failed-then-new-prompt"])
def test_d13_a_lead_taken_into_a_request_that_never_opened_is_reported_unapplied(
        events: list[object]) -> None:
    """A saved Lead whose request never opened (token limit, compaction failure, Stop before
    the stream, or a stream failure followed by a new prompt) is reported with
    ``LeadUnapplied``, once. req: LD-13"""
    state = _lead_in_a_request()
    commands: list[at.Command] = []
    for event in events:
        state, step = at.reduce(state, event)
        commands.extend(step)
    assert [c for c in commands if isinstance(c, at.LeadUnapplied)] == [
        at.LeadUnapplied(lead_id="L1")]


@pytest.mark.req("LD-13", "TL-11")
def test_d13_continue_after_a_failure_before_open_carries_the_lead_again() -> None:
    """A saved Lead whose request failed before opening (``StreamFailed``) is carried again
    by the next request after ``ContinueTurn``. req: LD-13"""
    state = _lead_in_a_request()
    state, failed = at.reduce(state, at.StreamFailed(request_id="t1/r2", error="overloaded"))
    assert not [c for c in failed if isinstance(c, at.LeadUnapplied)]
    state, continued = at.reduce(state, at.ContinueTurn(turn_id="t1"))
    assert [c.lead_ids for c in continued if isinstance(c, at.RequestModelStream)] == [
        ("L1",)]


# --- 14 ------------------------------------------------------------------------------------


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


# --- 15 ------------------------------------------------------------------------------------


@pytest.mark.req("BG-6")
def test_d15_a_related_turn_with_no_room_while_a_turn_runs_is_handed_back_with_its_text(
        ) -> None:
    """While a turn runs and the held queue is full of related turns, one more related
    automatic turn is handed back in ``AutomaticTurnDropped`` with its text. req: BG-6"""
    host = Host(max_deferred=2)
    host.send(PROMPT)  # the request is held: the turn runs
    for number in (1, 2, 3):
        host.send(se.BackgroundStarted(kind=se.BackgroundKind.AGENT, item_id=f"a{number}"))
    for number in (1, 2):
        assert host.send(se.AutomaticTurnDue(
            turn_id=f"n{number}", message_id=f"n{number}m", text=f"agent {number} done",
            kind=se.AutomaticKind.NOTIFICATION, source_id=f"a{number}")) == [
            se.AutomaticTurnDeferred(turn_id=f"n{number}")]
    dropped = host.send(se.AutomaticTurnDue(
        turn_id="n3", message_id="n3m", text="agent 3 done",
        kind=se.AutomaticKind.NOTIFICATION, source_id="a3"))
    assert [type(c) for c in dropped] == [se.AutomaticTurnDropped]
    assert [(c.turn_id, c.message_id, c.text) for c in dropped] == [
        ("n3", "n3m", "agent 3 done")]


# --- 16 ------------------------------------------------------------------------------------


def _closing_host() -> Host:
    """A session closed while a tool runs: CLOSING until the tool's result comes."""
    host = ScriptHost(hold=(at.ExecuteTool,))
    host.responses.append(say("Reading.", READ))
    host.send(PROMPT)
    host.send(se.CloseRequested())
    assert host.state.phase is se.SessionPhase.CLOSING
    return host


def _closed_host() -> Host:
    host = Host()
    host.send(se.CloseRequested())
    assert host.state.phase is se.SessionPhase.CLOSED
    return host


@pytest.mark.req("BR-4")
@pytest.mark.parametrize(("make", "event", "returned"), [
    (_closing_host, CRON, (se.AutomaticTurnDropped, "cron-1", "nightly report")),
    (_closed_host, CRON, (se.AutomaticTurnDropped, "cron-1", "nightly report")),
    (_closed_host, at.PromptSubmitted(turn_id="t9", message_id="m9", text="hello?"),
     (se.PromptRefused, "t9", "hello?")),
], ids=["due-while-closing", "due-while-closed", "prompt-while-closed"])
def test_d16_text_racing_the_close_is_handed_back(make: Any, event: object,
                                                  returned: tuple[type, str, str]) -> None:
    """An automatic turn due while closing or closed, or a prompt submitted to a closed
    session, never raises: its text comes back (``AutomaticTurnDropped`` /
    ``PromptRefused``). req: BR-4"""
    host = make()
    phase = host.state.phase
    commands = host.send(event)
    kind, turn_id, text = returned
    back = [c for c in commands if isinstance(c, kind)]
    ident = (lambda c: c.turn_id) if kind is se.AutomaticTurnDropped else (
        lambda c: c.prompt_id)
    assert [(ident(c), c.text) for c in back] == [(turn_id, text)]
    assert host.state.phase is phase


@pytest.mark.req("BR-4")
@pytest.mark.parametrize("event", [
    se.ClientAttached(client_id="ui-2"),
    se.PromptAborted(prompt_id="q1"),
    se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="sh"),
    se.BackgroundEnded(item_id="sh"),
    se.NotificationQueued(notification_id="n1", source_id="sh"),
    se.NotificationConsumed(notification_id="n1"),
    se.LifecycleChanged(kind=g.TrustClearingKind.REWIND),
    se.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="loop"),
    se.PromptCompleted(prompt_id="q1"),
], ids=lambda e: type(e).__name__)
def test_d16_racing_events_after_close_are_absorbed(event: object) -> None:
    """Client, FIFO, background, lifecycle and hard-stop events that race the close are
    absorbed by a closed session: no exception, it stays closed, nothing is asked of the
    host. req: BR-4"""
    host = _closed_host()
    commands = host.send(event)
    assert host.state.phase is se.SessionPhase.CLOSED
    assert not [c for c in commands if isinstance(c, at.AwaitingCommand)]


# --- 17 ------------------------------------------------------------------------------------


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


# --- 18 ------------------------------------------------------------------------------------


@pytest.mark.req("SO-8", "OB-1")
def test_d18_a_combined_continuation_is_a_guard_prompt() -> None:
    """The combined hook + guard continuation message is recognized as a guard prompt.
    req: SO-8"""
    for attempt in (1, 2):
        combined = se.combined_continuation("Tests fail.", g.continuation_text(attempt, 3))
        assert combined == "Tests fail.\n\n" + g.continuation_text(attempt, 3)
        assert g.is_guard_prompt(combined)


# --- 19 ------------------------------------------------------------------------------------


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


# --- 20 ------------------------------------------------------------------------------------


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


# --- 21 ------------------------------------------------------------------------------------


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
    host.send(se.BackgroundEnded(item_id="agent-1"),
              se.NotificationQueued(notification_id="na", source_id="agent-1"))
    host.send(se.AutomaticTurnDue(turn_id="n1", message_id="n1m", text="the agent finished",
                                  kind=se.AutomaticKind.NOTIFICATION, source_id="agent-1"))
    assert host.state.turn.turn_id == "n1"
    assert host.state.guard.chain == chain + 1
    assert host.state.guard.phase is g.GuardPhase.ACTIVE
    assert not host.state.guard.armed
    resume(host, say("Read the agent's result."), say("never sent"))
    assert not host.published(se.EntryKind.GUARD_CHUNK)
    assert [r["text"] for r in host.responses] == ["never sent"]


# --- 22 ------------------------------------------------------------------------------------


@pytest.mark.req("BR-3")
def test_d22_drain_ids_are_numbered_per_turn_and_unknown_ones_are_refused() -> None:
    """Drain ids count per turn (``t1/drain-1``, ``t1/drain-2``, then ``t2/drain-1``); a reply
    for a drain never issued is ``UnknownId`` (state unchanged), one for an issued drain no
    longer awaited is absorbed. req: BR-3"""
    host = Host(guard=g.GuardConfig(daemon=True))
    replies = iter([("use tabs",)])
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id,
                                             messages=next(replies, ()))
    host.responses.extend([say("Done."), say("Tabs it is."), say("Hi.")])
    host.send(PROMPT)
    host.send(at.PromptSubmitted(turn_id="t2", message_id="m2", text="hello"))
    assert host.outcomes() == [at.OutcomeKind.FINISHED, at.OutcomeKind.FINISHED]
    assert [c.drain_id for c in host.commands(se.DrainMidTurnQueue)] == [
        "t1/drain-1", "t1/drain-2", "t2/drain-1"]
    assert [c.key for c in host.commands(se.StartTimer)] == [
        "t1/drain-1", "t1/drain-2", "t2/drain-1"]
    before = host.state
    for never in ("t2/drain-2", "t1/drain-9", "zzz"):
        with pytest.raises(at.UnknownId):
            se.reduce(before, se.MidTurnDrained(drain_id=never))
    late = host.send(se.MidTurnDrained(drain_id="t1/drain-2"))
    assert [(type(c), c.answer_id) for c in late] == [(at.StaleAnswerIgnored, "t1/drain-2")]
