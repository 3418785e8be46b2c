"""An outsider's host-author tests of ``agentturn.session``: stale answers, races, odd text,
repeated ids, closed sessions, guard continuations, background work and clients.

Only the public API is used: ``agentturn``, ``agentturn.session``, ``agentturn.guard``.
Every step goes through :class:`Host`, which checks the reducer's promises on each call:
deterministic (the same input gives the same output twice), the input state is never changed,
a refusal is a ``ProtocolError`` (never another exception) and leaves the state as it was.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterable
from typing import Any

import pytest

import agentturn as at
from agentturn import guard as g
from agentturn import session as s

GUARD_1 = (
    "[Todo Stop Guard] {n} todo item(s) are still pending or in progress. Continue executing the "
    "current task now. Do not ask the user whether to continue. If progress requires user input, "
    "use the structured question or permission flow. If progress depends on external state, "
    "report the blocker explicitly."
)
FINAL = (
    "This is the final automatic continuation. Before ending, either complete/update the todos "
    "or report the completed progress and the exact blocker."
)
EXHAUSTED = (
    "[Todo Stop Guard] Automatic continuation stopped after 2 attempts; "
    "{n} todo item(s) remain unfinished."
)


def todos(*statuses: str) -> dict[str, Any]:
    return {"type": "todo_list", "todos": [
        {"id": str(i), "content": f"secret item {i}", "status": st}
        for i, st in enumerate(statuses, 1)]}


def daemon_config(**kw: Any) -> s.SessionConfig:
    return s.SessionConfig(
        chat_id="chat-1", guard=g.GuardConfig(todo_stop_guard=True, daemon=True), **kw)


class Host:
    """A host loop around one session that checks the reducer's promises on every step."""

    def __init__(self, config: s.SessionConfig | None = None) -> None:
        self.state = s.Session.create(config or daemon_config())
        self.log: list[tuple[object, tuple[at.Command, ...]]] = []

    def send(self, event: object) -> tuple[at.Command, ...]:
        before = self.state
        frozen = pickle.dumps(before)
        try:
            first = s.reduce(before, event)
        except at.ProtocolError:
            assert self.state == before
            assert pickle.dumps(before) == frozen
            # deterministic refusals too
            with pytest.raises(at.ProtocolError):
                s.reduce(before, event)
            raise
        except Exception as error:  # pragma: no cover - a broken promise
            raise AssertionError(f"non-ProtocolError escaped: {error!r}") from error
        second = s.reduce(copy.deepcopy(before), event)
        assert first.state == second.state, "reduce is not deterministic"
        assert tuple(first.commands) == tuple(second.commands), "reduce is not deterministic"
        assert pickle.dumps(before) == frozen, "reduce changed its input state"
        self.state = first.state
        self.log.append((event, tuple(first.commands)))
        return tuple(first.commands)

    def refused(self, event: object) -> at.ProtocolError:
        before = self.state
        with pytest.raises(at.ProtocolError) as info:
            self.send(event)
        assert self.state == before
        return info.value

    # --- helpers -------------------------------------------------------------------------
    def all_commands(self) -> list[at.Command]:
        return [c for _, cmds in self.log for c in cmds]

    def outstanding_ids(self, kind: type) -> list[str]:
        return [o.answer_id for o in s.outstanding(self.state) if o.command is kind]

    def pending(self, kind: type) -> str:
        ids = self.outstanding_ids(kind)
        assert len(ids) == 1, (kind, s.outstanding(self.state))
        return ids[0]

    def ack_persists(self) -> tuple[at.Command, ...]:
        out: tuple[at.Command, ...] = ()
        while self.outstanding_ids(at.Persist):
            out += self.send(at.Persisted(key=self.pending(at.Persist)))
        return out

    def open_and_complete(self, text: str = "", finish: str = "end_turn",
                          calls: Iterable[at.ToolCall] = ()) -> tuple[at.Command, ...]:
        rid = self.pending(at.RequestModelStream)
        out = self.send(at.StreamOpened(request_id=rid))
        out += self.send(at.StreamCompleted(request_id=rid, text=text, finish_reason=finish,
                                            tool_calls=tuple(calls)))
        return out + self.ack_persists()

    def answer_titles(self) -> tuple[at.Command, ...]:
        out: tuple[at.Command, ...] = ()
        for rid in self.outstanding_ids(at.RequestTitle):
            out += self.send(at.TitleGenerated(request_id=rid, title="A title"))
        return out

    def drain(self, messages: tuple[str, ...] = (), queued: bool | None = None
              ) -> tuple[at.Command, ...]:
        return self.send(s.MidTurnDrained(drain_id=self.pending(s.DrainMidTurnQueue),
                                          messages=messages, has_queued_prompt=queued))

    def prompt(self, turn_id: str = "t1", text: str = "Port the parser") -> tuple[at.Command, ...]:
        out = self.send(at.PromptSubmitted(turn_id=turn_id, message_id=f"{turn_id}/m",
                                           text=text))
        return out + self.ack_persists()

    def todo_round(self, envelope: Any, call_id: str = "tw1", text: str = ""
                   ) -> tuple[at.Command, ...]:
        out = self.open_and_complete(text=text, finish="tool_use", calls=(
            at.ToolCall(call_id=call_id, name="todo_write", arguments="{}"),))
        out += self.answer_titles()
        out += self.send(at.ToolFinished(call_id=call_id, output="ok", structured=envelope))
        out += self.ack_persists()
        return out + self.answer_titles()

    def armed_natural_stop(self, n_unfinished: int = 2) -> tuple[at.Command, ...]:
        """Prompt, a trusted todo write with ``n`` unfinished items, then a natural stop."""
        self.prompt()
        self.todo_round(todos(*(["pending"] * n_unfinished)))
        return self.open_and_complete(text="I stop here.")


def of(commands: Iterable[object], kind: type) -> list[Any]:
    return [c for c in commands if isinstance(c, kind)]


def texts_published(commands: Iterable[object]) -> list[str]:
    return [c.entry.text for c in of(commands, s.Publish)]


def user_texts(commands: Iterable[object]) -> list[str]:
    return [r.text for p in of(commands, at.Persist) for r in p.records
            if isinstance(r, at.UserMessageRecord)]


def ends(commands: Iterable[object]) -> list[at.EndTurn]:
    return of(commands, at.EndTurn)


def with_permission_call(host: Host, *, queued: bool = False) -> None:
    """A prompt whose response asks for a guarded call ``c1`` and then an unguarded ``c2``."""
    host.send(s.ClientAttached(client_id="ui"))
    host.prompt()
    if queued:
        host.send(s.PromptQueued(prompt_id="q1", message_id="q1/m", text="queued one"))
        host.send(s.PromptQueued(prompt_id="q2", message_id="q2/m", text="partial", complete=False))
    host.open_and_complete(text="I will delete it.", finish="tool_use", calls=(
        at.ToolCall(call_id="c1", name="rm", arguments='{"path": "x"}', needs_permission=True),
        at.ToolCall(call_id="c2", name="ls")))
    host.answer_titles()
    assert host.pending(at.AskPermission) == "c1"


# ---------------------------------------------------------------------------------------------
# Totality: whatever a host feeds, a ProtocolError (never another exception) and no change.
# ---------------------------------------------------------------------------------------------

GARBAGE = [
    None, object(), 42, "PromptSubmitted", g.NaturalStop(), g.GuardStreamOpened(),
    g.OrdinaryPromptStarted(turn_id="t"), g.MidTurnMessage(), at.ContinueTurn(turn_id="zz"),
    at.NaturalStopDecided(request_id="r"), at.PersistFailed(key="k", reason="r"),
    s.TimerFired(key="nope"), s.StopHookDecided(run_id="nope", block=False),
    s.MidTurnDrained(drain_id="nope"), at.TitleGenerated(request_id="nope", title="x"),
    at.Persisted(key="t1/p1"), at.ToolFinished(call_id="c1", output=""),
    at.PermissionDecided(call_id="never-asked", decision=at.PermissionDecision.ALLOW),
    at.LeadSaved(lead_id="never-issued"), s.PromptCompleted(prompt_id="never-queued"),
]


@pytest.mark.parametrize("event", GARBAGE, ids=lambda e: type(e).__name__)
def test_garbage_on_a_fresh_session_is_refused_and_changes_nothing(event: object) -> None:
    host = Host()
    host.refused(event)


@pytest.mark.parametrize("event", GARBAGE, ids=lambda e: type(e).__name__)
def test_garbage_in_the_middle_of_a_guarded_turn_is_refused_and_changes_nothing(
        event: object) -> None:
    host = Host(daemon_config(stop_hooks=True))
    host.armed_natural_stop()
    host.refused(event)
    host.drain()                       # the session still works after the refusal
    assert host.pending(s.RunStopHooks)


@pytest.mark.parametrize("bad_state", [None, "state", at.TurnState.create("chat-1"),
                                       g.GuardState.create()],
                         ids=lambda v: type(v).__name__)
def test_a_wrong_state_object_raises_protocol_error(bad_state: object) -> None:
    with pytest.raises(at.WrongState, match="expected a SessionState as the state"):
        s.reduce(bad_state, at.StopPressed())  # type: ignore[arg-type]


def test_every_command_of_a_long_run_is_reproduced_from_the_recorded_events() -> None:
    """Determinism over a whole run: replaying the events gives the same commands."""
    host = Host(daemon_config(stop_hooks=True))
    host.armed_natural_stop()
    host.drain()
    host.send(s.StopHookDecided(run_id=host.pending(s.RunStopHooks), block=True,
                                reason="Run the tests"))
    host.ack_persists()
    host.open_and_complete(text="ran them")
    replay = s.Session.create(host.state.config)
    for event, commands in host.log:
        replay, again = s.reduce(replay, event)
        assert tuple(again) == commands
    assert replay == host.state


# ---------------------------------------------------------------------------------------------
# Stale answers a real UI and engine produce by timing alone.
# ---------------------------------------------------------------------------------------------

@pytest.mark.req("TL-3")
def test_permission_click_after_stop_is_absorbed_and_never_runs_the_tool() -> None:
    host = Host()
    with_permission_call(host)
    cmds = host.send(at.StopPressed())
    assert of(cmds, at.DismissPermission)[0].call_id == "c1"
    before = host.state
    late = host.send(at.PermissionDecided(call_id="c1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert host.state == before
    host.ack_persists()
    assert ends(host.all_commands())[0].outcome.kind is at.OutcomeKind.CANCELLED
    again = host.send(at.PermissionDecided(call_id="c1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in again] == [at.StaleAnswerIgnored]
    assert not of(host.all_commands(), at.ExecuteTool)


@pytest.mark.req("TL-8")
def test_engine_events_after_stop_are_absorbed() -> None:
    host = Host()
    host.prompt()
    host.send(at.StreamOpened(request_id="t1/r1"))
    cmds = host.send(at.StopPressed())
    assert of(cmds, at.CancelStream) == [at.CancelStream(request_id="t1/r1")]
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.CANCELLED
    for late in (at.StreamCompleted(request_id="t1/r1", text="late", finish_reason="stop"),
                 at.StreamFailed(request_id="t1/r1", error="reset")):
        before = host.state
        assert [type(c) for c in host.send(late)] == [at.StaleAnswerIgnored]
        assert host.state == before


@pytest.mark.req("LD-3")
def test_a_lead_save_acknowledged_twice_is_absorbed_and_delivered_once() -> None:
    host = Host()
    host.prompt()
    rid = host.pending(at.RequestModelStream)
    host.send(at.StreamOpened(request_id=rid))
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="use tabs"))
    assert host.send(at.LeadSaved(lead_id="L1")) == ()
    before = host.state
    for dup in (at.LeadSaved(lead_id="L1"), at.LeadSaveFailed(lead_id="L1", reason="late")):
        assert [type(c) for c in host.send(dup)] == [at.StaleAnswerIgnored]
        assert host.state == before
    host.send(at.StreamCompleted(request_id=rid, text="ok", finish_reason="stop"))
    host.ack_persists()
    host.answer_titles()
    requests = of(host.all_commands(), at.RequestModelStream)
    assert [r.lead_ids for r in requests].count(("L1",)) == 1
    assert not of(host.all_commands(), at.ReturnDraft)


@pytest.mark.req("BR-3")
def test_a_drain_reply_after_its_timeout_while_idle_restores_messages() -> None:
    host = Host()
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    drain = host.pending(s.DrainMidTurnQueue)
    assert ends(host.send(s.TimerFired(key=drain)))
    late = host.send(s.MidTurnDrained(drain_id=drain, messages=("steer it", "ünïcode ✓"),
                                      has_queued_prompt=True))
    assert s.RestoreMidTurnMessages(drain_id=drain, messages=("steer it", "ünïcode ✓")) in late
    # the stale queued-prompt snapshot is discarded: nothing waits for a prompt
    assert not of(late, at.Persist)


@pytest.mark.req("BR-3")
def test_a_late_drain_reply_during_the_next_turn_is_restored_not_applied() -> None:
    host = Host()
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    drain = host.pending(s.DrainMidTurnQueue)
    host.send(s.TimerFired(key=drain))
    host.prompt("t2", "next task")
    late = host.send(s.MidTurnDrained(drain_id=drain, messages=("for t1",),
                                      has_queued_prompt=True))
    assert late == (s.RestoreMidTurnMessages(drain_id=drain, messages=("for t1",)),)


@pytest.mark.req("BR-3")
def test_a_duplicate_drain_reply_does_not_duplicate_its_messages() -> None:
    host = Host()
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    drain = host.pending(s.DrainMidTurnQueue)
    first = host.send(s.MidTurnDrained(drain_id=drain, messages=("use tabs",)))
    assert len(of(first, at.SaveLead)) == 1
    dup = host.send(s.MidTurnDrained(drain_id=drain, messages=("use tabs",)))
    assert not of(dup, s.RestoreMidTurnMessages)


@pytest.mark.req("BR-4")
def test_grace_timer_firing_after_reattach_is_absorbed_and_the_dialog_stays_open() -> None:
    host = Host()
    with_permission_call(host)
    cmds = host.send(s.ClientDetached(client_id="ui"))
    grace = of(cmds, s.StartTimer)[0]
    assert grace.seconds == 10.0
    assert not of(cmds, at.DismissPermission)
    back = host.send(s.ClientAttached(client_id="ui", last_seq=0))
    assert s.CancelTimer(key=grace.key) in back
    replay = of(back, s.ReplayEvents)[0]
    assert [e.text for e in replay.entries] == ["I will delete it."]
    late = host.send(s.TimerFired(key=grace.key))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert host.pending(at.AskPermission) == "c1"
    run = host.send(at.PermissionDecided(call_id="c1", decision=at.PermissionDecision.ALLOW))
    assert of(run, at.ExecuteTool)[0].call.call_id == "c1"


@pytest.mark.req("TL-3")
def test_a_disconnect_alone_never_approves() -> None:
    host = Host()
    with_permission_call(host)
    assert host.send(at.ClientDisconnected()) == ()
    host.send(s.ClientDetached(client_id="ui"))
    assert host.pending(at.AskPermission) == "c1"
    assert not of(host.all_commands(), at.ExecuteTool)


@pytest.mark.req("BR-3")
def test_a_late_drain_reply_while_the_guard_continues_the_same_turn_is_not_lost() -> None:
    """Judgment: the drain timed out, the guard continued the same turn, then the reply came.
    The session joins its messages to that turn as Lead instructions; none is dropped."""
    host = Host()
    host.armed_natural_stop()
    drain = host.pending(s.DrainMidTurnQueue)
    host.send(s.TimerFired(key=drain))
    late = host.send(s.MidTurnDrained(drain_id=drain, messages=("steer it", "ünïcode ✓"),
                                      has_queued_prompt=True))
    accepted = {c.lead_id for c in of(late, at.LeadAccepted)}
    restored = [m for c in of(late, s.RestoreMidTurnMessages) for m in c.messages]
    assert len(accepted) + len(restored) == 2
    assert host.state.guard.phase is not g.GuardPhase.AWAITING_PROMPT


# ---------------------------------------------------------------------------------------------
# Races.
# ---------------------------------------------------------------------------------------------

@pytest.mark.req("LD-13")
def test_stop_during_a_lead_save_reports_it_saved_and_unapplied_once() -> None:
    host = Host()
    host.prompt()
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="use tabs"))
    cmds = host.send(at.StopPressed())
    assert not ends(cmds), "the turn must wait for the save in flight"
    assert host.pending(at.SaveLead) == "L1"
    done = host.send(at.LeadSaved(lead_id="L1"))
    assert of(done, at.LeadUnapplied) == [at.LeadUnapplied(lead_id="L1")]
    assert ends(done)[0].outcome.kind is at.OutcomeKind.CANCELLED
    assert host.state.phase is s.SessionPhase.IDLE
    assert len(of(host.all_commands(), at.LeadUnapplied)) == 1
    # no new turn was started for it (LD-13)
    assert not of(done, at.Persist) and not of(done, at.RequestModelStream)


@pytest.mark.req("LD-7")
def test_stop_during_a_lead_save_that_fails_hands_every_draft_back() -> None:
    host = Host()
    host.prompt()
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="first"))
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L2", text="second"))
    host.send(at.StopPressed())
    host.send(at.LeadSaveFailed(lead_id="L1", reason="disk full"))
    drafts = {c.lead_id: (c.draft, c.reason) for c in of(host.all_commands(), at.ReturnDraft)}
    assert drafts == {"L1": ("first", at.DraftReason.SAVE_FAILED),
                      "L2": ("second", at.DraftReason.TURN_ENDED_BEFORE_SAVE)}
    assert not of(host.all_commands(), at.LeadUnapplied)
    assert host.state.phase is s.SessionPhase.IDLE


@pytest.mark.req("BR-4")
def test_close_during_a_permission_prompt_halts_and_hands_everything_back() -> None:
    host = Host()
    with_permission_call(host, queued=True)
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="be careful"))
    host.send(at.LeadSaved(lead_id="L1"))
    cmds = host.send(s.CloseRequested())
    assert of(cmds, at.DismissPermission)[0].call_id == "c1"
    cmds += host.ack_persists()
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.HALTED
    assert of(cmds, at.LeadUnapplied) == [at.LeadUnapplied(lead_id="L1")]
    refused = {c.prompt_id: c.text for c in of(cmds, s.PromptRefused)}
    assert refused == {"q1": "queued one", "q2": "partial"}
    assert of(cmds, s.CloseSession)
    assert host.state.phase is s.SessionPhase.CLOSED
    late = host.send(at.PermissionDecided(call_id="c1", decision=at.PermissionDecision.ALLOW))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]
    assert not of(host.all_commands(), at.ExecuteTool)
    # every tool call of the response has exactly one result record
    records = [r for p in of(host.all_commands(), at.Persist) for r in p.records
               if isinstance(r, at.ToolResultRecord)]
    assert sorted(r.call_id for r in records) == ["c1", "c2"]


@pytest.mark.req("BR-4")
@pytest.mark.parametrize("halt", ["close", "grace", "hard_stop"])
def test_a_dismissed_dialog_is_recorded_as_the_notice_says(halt: str) -> None:
    host = Host()
    with_permission_call(host)
    if halt == "close":
        cmds = host.send(s.CloseRequested())
    elif halt == "grace":
        host.send(s.ClientDetached(client_id="ui"))
        cmds = host.send(s.TimerFired(key=host.pending(s.StartTimer)))
    else:
        cmds = host.send(s.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="loop"))
    notice = of(cmds, at.DismissPermission)[0]
    record = next(r for p in of(cmds, at.Persist) for r in p.records
                  if isinstance(r, at.ToolResultRecord) and r.call_id == "c1")
    assert record.status is notice.recorded_as


@pytest.mark.req("TL-8")
def test_stop_keeps_the_dismiss_notice_and_the_record_in_agreement() -> None:
    host = Host()
    with_permission_call(host)
    cmds = host.send(at.StopPressed())
    notice = of(cmds, at.DismissPermission)[0]
    record = next(r for p in of(cmds, at.Persist) for r in p.records
                  if isinstance(r, at.ToolResultRecord) and r.call_id == "c1")
    assert record.status is notice.recorded_as is at.ToolResultStatus.CANCELLED


@pytest.mark.req("SO-6")
def test_a_prompt_queued_while_stop_hooks_run_survives_a_hook_block() -> None:
    """Judgment: the prompt came after the drain; the hook's block continues the turn first,
    and the prompt runs at the next stop. It is never lost."""
    host = Host(daemon_config(stop_hooks=True))
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    host.drain(queued=False)
    assert host.send(s.PromptQueued(prompt_id="q1", message_id="q1/m",
                                    text="queued while hooks run")) == ()
    cont = host.send(s.StopHookDecided(run_id=host.pending(s.RunStopHooks), block=True,
                                       reason="tests fail — fix them 🙂"))
    assert of(cont, at.Persist)[0].records[0].text == "tests fail — fix them 🙂"
    host.ack_persists()
    host.open_and_complete(text="fixed")
    cmds = host.drain()
    assert ends(cmds)[0].turn_id == "t1"
    assert of(cmds, s.SuppressFollowUpSuggestions)
    started = of(cmds, at.Persist)[-1].records[0]
    assert started == at.UserMessageRecord(message_id="q1/m", text="queued while hooks run")


@pytest.mark.req("SO-2")
def test_a_prompt_queued_while_hooks_run_wins_over_the_guard() -> None:
    host = Host(daemon_config(stop_hooks=True))
    host.armed_natural_stop()
    host.drain()
    host.send(s.PromptQueued(prompt_id="q1", message_id="q1/m", text="next"))
    cmds = host.send(s.StopHookDecided(run_id=host.pending(s.RunStopHooks), block=False))
    assert ends(cmds)[0].turn_id == "t1"
    assert not any(g.is_guard_prompt(t) for t in user_texts(cmds))
    assert of(cmds, at.Persist)[-1].records[0].text == "next"


@pytest.mark.req("SO-5")
def test_mid_turn_message_runs_first_then_the_queued_prompt_keeps_priority() -> None:
    host = Host()
    host.armed_natural_stop()
    host.send(s.PromptQueued(prompt_id="q1", message_id="q1/m", text="queued"))
    cmds = host.drain(messages=("finish quickly",), queued=True)
    assert not ends(cmds)
    lead = host.pending(at.SaveLead)
    host.send(at.LeadSaved(lead_id=lead))
    assert host.pending(at.RequestModelStream)
    # the continuation completes every todo, still FIFO priority holds
    host.todo_round(todos("completed", "completed"), call_id="tw2")
    host.open_and_complete(text="all done")
    cmds = host.drain(queued=True)
    assert ends(cmds)[0].turn_id == "t1"
    assert of(cmds, at.Persist)[-1].records[0].text == "queued"
    assert not any(g.is_guard_prompt(t) for t in user_texts(host.all_commands()))


@pytest.mark.req("SG-B3")
def test_stop_before_the_guard_stream_opens_consumes_no_attempt() -> None:
    host = Host()
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
    assert not any(c.entry.kind is s.EntryKind.GUARD_CHUNK for c in of(cmds, s.Publish))
    late = host.send(at.StreamOpened(request_id=rid))
    assert [type(c) for c in late] == [at.StaleAnswerIgnored]


# ---------------------------------------------------------------------------------------------
# Odd text.
# ---------------------------------------------------------------------------------------------

@pytest.mark.req("LD-6")
@pytest.mark.parametrize(("text", "reason"), [
    ("", at.DraftReason.EMPTY),
    (" \t\n\u3000", at.DraftReason.EMPTY),
    ("x" * 32769, at.DraftReason.TOO_LONG),
    ("é" * 16385, at.DraftReason.TOO_LONG),          # 32,770 bytes of UTF-8
    ("😀" * 8193, at.DraftReason.TOO_LONG),          # 32,772 bytes
])
def test_a_refused_lead_comes_back_verbatim(text: str, reason: at.DraftReason) -> None:
    host = Host()
    host.prompt()
    cmds = host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text=text,
                                      attachment_ids=("img-1",)))
    back = of(cmds, at.ReturnDraft)
    assert len(back) == 1 and back[0].draft == text and back[0].reason is reason
    assert back[0].message
    assert not of(cmds, at.SaveLead)


@pytest.mark.req("LD-6")
@pytest.mark.parametrize("text", ["x" * 32768, "é" * 16384, "😀" * 8192,
                                  "\u200b", "a\x00b", "RTL \u202e txt", "e\u0301" * 10])
def test_a_lead_at_the_limit_or_with_odd_unicode_is_saved_verbatim(text: str) -> None:
    host = Host()
    host.prompt()
    cmds = host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text=text,
                                      attachment_ids=("img-1",)))
    assert of(cmds, at.LeadAccepted) == [at.LeadAccepted(lead_id="L1",
                                                         kept_attachment_ids=("img-1",))]
    assert of(cmds, at.SaveLead)[0].record.text == text


@pytest.mark.parametrize("make", [
    lambda: at.PromptSubmitted(turn_id="t1", message_id="m", text="a\ud800b"),
    lambda: at.LeadSubmitted(chat_id="chat-1", lead_id="L", text="\udfff"),
    lambda: s.PromptQueued(prompt_id="q", message_id="m", text="\ud83d"),
    lambda: s.MidTurnDrained(drain_id="d", messages=("ok", "\udc80")),
    lambda: s.StopHookDecided(run_id="r", block=True, reason="\ud800"),
    lambda: s.AutomaticTurnDue(turn_id="a", message_id="m", text="\ud800",
                               kind=s.AutomaticKind.CRON, source_id="c"),
    lambda: at.StreamCompleted(request_id="r", text="\ud800", finish_reason="stop"),
    lambda: at.ToolFinished(call_id="c", output="\ud800"),
])
def test_lone_surrogates_are_refused_when_the_event_is_built(make: Any) -> None:
    with pytest.raises(at.FieldError):
        make()


def test_huge_and_odd_prompts_and_answers_are_kept_verbatim() -> None:
    host = Host()
    prompt = "🙂 " * 200_000 + "\r\n\t\x00"
    host.prompt(text=prompt)
    assert user_texts(host.all_commands()) == [prompt]
    answer = "ünïcødé \u202e" * 50_000
    cmds = host.open_and_complete(text=answer)
    assert of(cmds, at.Persist)[0].records[0].text == answer
    assert texts_published(cmds) == [answer]


@pytest.mark.req("SO-8")
def test_a_unicode_hook_reason_and_the_guard_text_become_one_message() -> None:
    host = Host(daemon_config(stop_hooks=True))
    host.armed_natural_stop(n_unfinished=3)
    host.drain()
    reason = "Tests fail: ✗ 测试 — run `pytest`"
    cmds = host.send(s.StopHookDecided(run_id=host.pending(s.RunStopHooks), block=True,
                                       reason=reason))
    assert user_texts(cmds) == [reason + "\n\n" + GUARD_1.format(n=3)]
    assert s.combined_continuation(reason, GUARD_1.format(n=3)) == user_texts(cmds)[0]
    host.ack_persists()
    rid = host.pending(at.RequestModelStream)
    host.send(at.StreamOpened(request_id=rid))
    assert host.state.usage == s.Usage(model_calls=3, guard_calls=1, hook_calls=1)


@pytest.mark.req("SO-6")
@pytest.mark.parametrize("reason", [None, "", "   \n"])
def test_a_hook_block_without_a_real_reason_is_refused(reason: str | None) -> None:
    host = Host(daemon_config(stop_hooks=True))
    host.prompt()
    host.open_and_complete(text="done")
    host.drain()
    run = host.pending(s.RunStopHooks)
    with pytest.raises((at.ProtocolError, at.FieldError)):
        host.send(s.StopHookDecided(run_id=run, block=True, reason=reason))
    assert host.pending(s.RunStopHooks) == run


@pytest.mark.req("LD-5")
def test_a_drain_with_more_messages_than_lead_can_hold_hands_the_rest_back() -> None:
    host = Host()
    host.prompt()
    host.open_and_complete(text="done")
    host.answer_titles()
    messages = (*(f"msg {i}" for i in range(10)), "", "  ", "y" * 40_000)
    cmds = host.drain(messages=messages)
    saved = [c.record.text for c in of(cmds, at.SaveLead)]
    accepted = [c.lead_id for c in of(cmds, at.LeadAccepted)]
    back = [c.draft for c in of(cmds, at.ReturnDraft)]
    assert len(accepted) == 8
    assert saved == ["msg 0"]                  # one save at a time (LD-4)
    assert sorted(back) == sorted(["msg 8", "msg 9", "", "  ", "y" * 40_000])
    # every accepted one is saved in order, then all go to the model together (LD-16)
    texts = ["msg 0"]
    for _ in range(7):
        cmds = host.send(at.LeadSaved(lead_id=host.pending(at.SaveLead)))
        texts += [c.record.text for c in of(cmds, at.SaveLead)]
    cmds = host.send(at.LeadSaved(lead_id=host.pending(at.SaveLead)))
    assert texts == [f"msg {i}" for i in range(8)]
    assert of(cmds, at.RequestModelStream)[0].lead_ids == tuple(accepted)


# ---------------------------------------------------------------------------------------------
# Repeated ids.
# ---------------------------------------------------------------------------------------------

def test_queued_prompts_with_repeated_ids_or_past_the_bound_come_back() -> None:
    host = Host()
    host.prompt()
    refused = []
    refused += of(host.send(s.PromptQueued(prompt_id="t1", message_id="a", text="same as turn")),
                  s.PromptRefused)
    host.send(s.PromptQueued(prompt_id="q0", message_id="b", text="first"))
    refused += of(host.send(s.PromptQueued(prompt_id="q0", message_id="c", text="again")),
                  s.PromptRefused)
    for i in range(1, 40):
        refused += of(host.send(s.PromptQueued(prompt_id=f"q{i}", message_id=f"m{i}",
                                               text=f"p{i}")), s.PromptRefused)
    assert [(r.prompt_id, r.text) for r in refused][:2] == [("t1", "same as turn"),
                                                            ("q0", "again")]
    assert len(host.state.fifo) + len(refused) == 42
    assert len(host.state.fifo) == 32


def test_a_repeated_pending_lead_id_is_handed_back_and_changes_nothing() -> None:
    """A resend with the same text is absorbed; the same id with another text comes back as a
    draft (DUPLICATE_ID); neither changes the session (issue 18: idempotent resends)."""
    host = Host()
    host.prompt()
    host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="a"))
    before = host.state
    assert of(host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L1", text="a")),
              at.StaleAnswerIgnored)
    assert [(c.reason, c.draft) for c in of(host.send(at.LeadSubmitted(
        chat_id="chat-1", lead_id="L1", text="b")), at.ReturnDraft)] == [
        (at.DraftReason.DUPLICATE_ID, "b")]
    assert host.state == before


def test_a_lead_for_another_chat_keeps_the_draft() -> None:
    host = Host()
    host.prompt()
    cmds = host.send(at.LeadSubmitted(chat_id="chat-2", lead_id="L1", text="wrong chat"))
    assert [(c.reason, c.draft) for c in of(cmds, at.ReturnDraft)] == [
        (at.DraftReason.NOT_OWNER, "wrong chat")]


def test_a_repeated_call_id_in_one_response_is_refused_when_built() -> None:
    with pytest.raises(at.FieldError):
        at.StreamCompleted(request_id="t1/r1", text="", finish_reason="tool_use", tool_calls=(
            at.ToolCall(call_id="c", name="a"), at.ToolCall(call_id="c", name="b")))


def test_a_second_stream_for_one_request_is_a_protocol_error() -> None:
    host = Host()
    host.prompt()
    host.send(at.StreamOpened(request_id="t1/r1"))
    host.refused(at.StreamOpened(request_id="t1/r1"))


def test_a_prompt_with_an_already_used_turn_id_is_refused() -> None:
    host = Host()
    host.prompt()
    host.send(at.StreamOpened(request_id="t1/r1"))
    host.send(at.StopPressed())                          # t1/r1 cancelled, its engine may
    assert host.state.phase is s.SessionPhase.IDLE       # still answer later
    with pytest.raises(at.ProtocolError):
        host.send(at.PromptSubmitted(turn_id="t1", message_id="m2", text="again"))


# ---------------------------------------------------------------------------------------------
# A closed session.
# ---------------------------------------------------------------------------------------------

def closed_host() -> Host:
    host = Host()
    host.send(s.ClientAttached(client_id="ui"))
    cmds = host.send(s.CloseRequested())
    assert of(cmds, s.CloseSession)
    assert host.state.phase is s.SessionPhase.CLOSED
    return host


@pytest.mark.parametrize("event", [
    at.PromptSubmitted(turn_id="t9", message_id="m", text="after close"),
    s.ClientAttached(client_id="ui", last_seq=0),
    s.AutomaticTurnDue(turn_id="a1", message_id="m", text="cron", kind=s.AutomaticKind.CRON,
                       source_id="task"),
    s.TimerFired(key="t1/drain-1"),
    at.ContinueTurn(turn_id="t1"),
], ids=lambda e: type(e).__name__)
def test_events_racing_the_close_are_absorbed_or_handed_back_without_change(event: object
                                                                           ) -> None:
    """A race a real UI produces after close is never a ProtocolError: its text comes back
    (PromptRefused, AutomaticTurnDropped) or it is absorbed (StaleAnswerIgnored); nothing
    changes (issue 18, defect 16)."""
    host = closed_host()
    before = host.state
    cmds = host.send(event)
    assert host.state == before
    assert [type(c) for c in cmds] in ([s.PromptRefused], [s.AutomaticTurnDropped],
                                       [at.StaleAnswerIgnored])
    text = getattr(event, "text", None)
    if text is not None:
        assert [c.text for c in cmds] == [text]


@pytest.mark.req("BR-4")
@pytest.mark.req("BR-4")
def test_a_grace_timer_that_was_never_started_is_absorbed_as_late() -> None:
    """Judgment, kept: the grace timer has one fixed key, so the session cannot tell a firing it
    never asked for from the late firing of one it cancelled when the client came back; it
    absorbs both (StaleAnswerIgnored, nothing changes) rather than call a likely race misuse."""
    host = Host()
    assert host.send(s.TimerFired(key="grace")) == (at.StaleAnswerIgnored(
        event="TimerFired", answer_id="grace", reason="this timer is no longer running"),)
    assert host.state == s.Session.create(daemon_config())


@pytest.mark.req("LD-14")
def test_text_sent_to_a_closed_session_is_never_swallowed() -> None:
    host = closed_host()
    cmds = host.send(at.LeadSubmitted(chat_id="chat-1", lead_id="L9", text="after close"))
    assert [c.draft for c in of(cmds, at.ReturnDraft)] == ["after close"]
    # A prompt racing the close comes back with its text (not an error).
    assert host.send(s.PromptQueued(prompt_id="q9", message_id="m", text="after close")) == (
        s.PromptRefused(prompt_id="q9", text="after close", reason="the session is closed"),)
    for harmless in (at.StopPressed(), s.CloseRequested()):
        assert not [c for c in host.send(harmless) if not isinstance(c, at.StaleAnswerIgnored)]


# ---------------------------------------------------------------------------------------------
# The guard: exact texts, budget, telemetry.
# ---------------------------------------------------------------------------------------------

def run_guard_to_exhaustion(host: Host, n: int = 2) -> tuple[at.Command, ...]:
    host.armed_natural_stop(n_unfinished=n)
    out = host.drain()
    for i in range(2):
        out += host.ack_persists()
        out += host.open_and_complete(text=f"still working {i}")
        out += host.drain()
    return out


@pytest.mark.req("OB-1")
@pytest.mark.req("OB-3")
def test_guard_texts_are_exact_and_it_stops_after_two() -> None:
    host = Host()
    host.send(s.ClientAttached(client_id="ui"))
    cmds = run_guard_to_exhaustion(host, n=3)
    continuations = [t for t in user_texts(cmds) if g.is_guard_prompt(t)]
    assert continuations == [GUARD_1.format(n=3), GUARD_1.format(n=3) + "\n\n" + FINAL]
    exhausted = [c.entry for c in of(cmds, s.Publish)
                 if c.entry.kind is s.EntryKind.GUARD_EXHAUSTED]
    assert [e.text for e in exhausted] == [EXHAUSTED.format(n=3)]
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.FINISHED
    assert host.state.usage == s.Usage(model_calls=4, guard_calls=2, hook_calls=0)
    assert len(of(host.all_commands(), at.RequestModelStream)) == 4


@pytest.mark.req("OB-2")
@pytest.mark.req("OB-4")
def test_guard_chunks_carry_exact_meta_and_never_todo_text() -> None:
    host = Host()
    cmds = run_guard_to_exhaustion(host, n=2)
    guard_entries = [c.entry for c in of(host.all_commands(), s.Publish)
                     if c.entry.kind is s.EntryKind.GUARD_CHUNK]
    metas = [dict(e.meta.pairs) for e in guard_entries]  # type: ignore[union-attr]
    assert metas == [
        {"source": "todo_stop_guard", "qwenDiscreteMessage": True, "attempt": a,
         "maxAttempts": 2, "unfinishedCount": 2} for a in (1, 2)]
    assert all(e.discrete for e in guard_entries)
    for c in host.all_commands():
        if isinstance(c, s.Publish):
            assert "secret item" not in repr(c)
    assert cmds


@pytest.mark.req("SG-A9")
def test_a_lead_during_the_last_guard_stream_starts_a_fresh_stage() -> None:
    host = Host()
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
    host = Host()
    host.armed_natural_stop()
    host.send(s.PromptQueued(prompt_id="t2", message_id="t2/m", text="unrelated"))
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
    host = Host()
    host.prompt()
    host.open_and_complete(finish="tool_use", calls=(
        at.ToolCall(call_id="tw", name="todo_write", arguments="{}"),))
    host.answer_titles()
    host.send(at.ToolFinished(call_id="tw", output="boom", structured=todos("pending"),
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
    host = Host()
    host.prompt()
    host.todo_round(envelope)
    host.open_and_complete(text="stop")
    cmds = host.drain()
    assert ends(cmds)
    assert not any(g.is_guard_prompt(t) for t in user_texts(cmds))


@pytest.mark.req("SG-C5")
def test_an_interactive_session_has_no_drain_and_no_guard() -> None:
    host = Host(s.SessionConfig(chat_id="chat-1",
                                guard=g.GuardConfig(todo_stop_guard=True, daemon=False)))
    host.armed_natural_stop()
    cmds = host.log[-1][1] + host.log[-2][1]
    assert not of(host.all_commands(), s.DrainMidTurnQueue)
    assert ends(host.all_commands())
    assert not any(g.is_guard_prompt(t) for t in user_texts(host.all_commands()))
    assert cmds


# ---------------------------------------------------------------------------------------------
# Background work and automatic turns.
# ---------------------------------------------------------------------------------------------

@pytest.mark.req("BG-2")
@pytest.mark.req("SG-A10")
@pytest.mark.req("BG-6")
def test_background_defers_the_guard_and_its_result_keeps_the_chain() -> None:
    host = Host()
    host.send(s.BackgroundStarted(kind=s.BackgroundKind.SHELL, item_id="old"))  # inherited
    host.prompt()
    host.todo_round(todos("pending", "in_progress"))
    host.send(s.BackgroundStarted(kind=s.BackgroundKind.SHELL, item_id="build"))
    host.open_and_complete(text="waiting for the build")
    cmds = host.drain()
    assert ends(cmds) and not any(g.is_guard_prompt(t) for t in user_texts(cmds))
    assert of(cmds, s.SuppressFollowUpSuggestions)
    # unrelated recurring cron fires wait and coalesce
    d1 = host.send(s.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1/m", text="tick",
                                      kind=s.AutomaticKind.CRON, source_id="task",
                                      recurring=True))
    d2 = host.send(s.AutomaticTurnDue(turn_id="cron-2", message_id="cron-2/m", text="tick",
                                      kind=s.AutomaticKind.CRON, source_id="task",
                                      recurring=True))
    assert d1 == (s.AutomaticTurnDeferred(turn_id="cron-1"),)
    assert d2 == (s.AutomaticTurnDeferred(turn_id="cron-2", coalesced_into="cron-1"),)
    # the related result runs at once, within the chain: the guard continues it
    host.send(s.BackgroundEnded(item_id="build", notification_id="n1"))
    run = host.send(s.AutomaticTurnDue(turn_id="n-1", message_id="n-1/m", text="build ok",
                                       kind=s.AutomaticKind.NOTIFICATION, source_id="build"))
    assert user_texts(run) == ["build ok"]
    host.ack_persists()
    host.send(s.NotificationConsumed(notification_id="n1"))
    host.open_and_complete(text="now the todos")
    cmds = host.drain()
    assert user_texts(cmds) == [GUARD_1.format(n=2)]
    # run the chain out; the held cron starts only after, once (coalesced)
    for i in range(2):
        host.ack_persists()
        host.open_and_complete(text=f"more {i}")
        cmds = host.drain()
    assert EXHAUSTED.format(n=2) in texts_published(cmds)
    assert user_texts(cmds)[-1] == "tick"
    assert sum(t == "tick" for t in user_texts(host.all_commands())) == 1


@pytest.mark.req("SO-4")
def test_aborting_the_clients_only_queued_prompt_releases_held_automatic_turns() -> None:
    host = Host()
    host.armed_natural_stop()
    host.drain(queued=True)                      # the client's list has a prompt in upload
    assert host.send(s.AutomaticTurnDue(
        turn_id="cron-1", message_id="cron-1/m", text="tick", kind=s.AutomaticKind.CRON,
        source_id="task")) == (s.AutomaticTurnDeferred(turn_id="cron-1"),)
    cmds = host.send(s.PromptAborted(prompt_id="p-in-upload"))   # the user cancels it
    assert user_texts(cmds) == ["tick"]


@pytest.mark.req("SO-4")
def test_aborting_the_last_queued_prompt_releases_held_automatic_turns() -> None:
    host = Host()
    host.armed_natural_stop()
    host.send(s.PromptQueued(prompt_id="q1", message_id="q1/m", text="later", complete=False))
    host.drain(queued=True)
    assert host.state.guard.phase is g.GuardPhase.AWAITING_PROMPT
    host.send(s.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1/m", text="tick",
                                 kind=s.AutomaticKind.CRON, source_id="task"))
    cmds = host.send(s.PromptAborted(prompt_id="q1"))
    assert user_texts(cmds) == ["tick"]
    # SO-3: the aborted prompt never comes back
    assert "later" not in user_texts(host.all_commands())


@pytest.mark.req("SG-C6")
def test_with_the_setting_off_nothing_is_held_and_no_guard_text_appears() -> None:
    host = Host(s.SessionConfig(chat_id="chat-1", guard=g.GuardConfig(daemon=True)))
    host.armed_natural_stop()
    cmds = host.drain()
    assert ends(cmds) and of(cmds, s.OfferFollowUpSuggestions)
    run = host.send(s.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1/m", text="tick",
                                       kind=s.AutomaticKind.CRON, source_id="task"))
    assert user_texts(run) == ["tick"]
    assert not any(g.is_guard_prompt(t) for t in user_texts(host.all_commands()))


# ---------------------------------------------------------------------------------------------
# Clients detaching and reattaching; the ring.
# ---------------------------------------------------------------------------------------------

@pytest.mark.req("BR-5")
@pytest.mark.req("OB-6")
def test_a_late_client_gets_guard_events_even_after_rollover() -> None:
    host = Host(daemon_config(ring_capacity=2, ring_pinned=2))
    run_guard_to_exhaustion(host, n=1)
    for i in range(2, 5):                        # more turns push the ring over
        host.send(at.PromptSubmitted(turn_id=f"t{i}", message_id=f"m{i}", text="hi"))
        host.ack_persists()
        host.answer_titles()
        host.open_and_complete(text=f"answer {i}")
        host.drain()
    cmds = host.send(s.ClientAttached(client_id="late", last_seq=None))
    replay = of(cmds, s.ReplayEvents)[0]
    assert replay.gap
    kept = [dict(e.meta.pairs).get("attempt") for e in replay.entries  # type: ignore[union-attr]
            if e.discrete]
    assert 1 in kept or 2 in kept
    assert any(e.kind is s.EntryKind.GUARD_CHUNK for e in replay.entries)


@pytest.mark.req("BR-4")
def test_grace_expiry_halts_the_turn_and_hands_queued_prompts_back() -> None:
    host = Host()
    with_permission_call(host, queued=True)
    host.send(s.ClientDetached(client_id="ui"))
    cmds = host.send(s.TimerFired(key=host.pending(s.StartTimer)))
    cmds += host.ack_persists()
    assert ends(cmds)[0].outcome.kind is at.OutcomeKind.HALTED
    assert {c.prompt_id for c in of(cmds, s.PromptRefused)} == {"q1", "q2"}
    # the close says why, once the halted turn has ended
    assert of(cmds, s.CloseSession) == [
        s.CloseSession(reason="The client did not come back within the grace period.")]
    assert not of(host.all_commands(), at.ExecuteTool)


@pytest.mark.req("SG-A13")
def test_reattaching_keeps_the_guard_armed() -> None:
    host = Host()
    host.send(s.ClientAttached(client_id="ui"))
    host.prompt()
    host.todo_round(todos("pending"))
    host.send(s.ClientDetached(client_id="ui"))
    host.send(s.ClientAttached(client_id="ui", last_seq=1))
    host.open_and_complete(text="stop")
    cmds = host.drain()
    assert user_texts(cmds) == [GUARD_1.format(n=1)]


@pytest.mark.req("SG-A12")
def test_a_lifecycle_change_clears_trust_and_late_results_do_not_rearm() -> None:
    host = Host()
    host.prompt()
    host.open_and_complete(finish="tool_use", calls=(
        at.ToolCall(call_id="tw", name="todo_write", arguments="{}"),))
    host.answer_titles()
    host.send(s.LifecycleChanged(kind=g.TrustClearingKind.REWIND))
    host.send(at.ToolFinished(call_id="tw", output="ok", structured=todos("pending")))
    host.ack_persists()
    host.answer_titles()
    host.open_and_complete(text="stop")
    cmds = host.drain()
    assert not any(g.is_guard_prompt(t) for t in user_texts(cmds))
