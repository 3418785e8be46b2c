"""The session as a host author meets it (issue 18, item 5), and the three invariants' checks.

Each test names the behaviour it pins; the invariant tests plant a bug and show the check that
must catch it does.
"""

from __future__ import annotations

import math

import pytest
from session_host import ON, Host, say, todo_call, todos

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn.session import invariants

PROMPT = at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser")


# --- one name per concept ------------------------------------------------------------------------


def test_one_class_per_concept_across_the_parts() -> None:
    """``HardStopped`` and ``ClientAttached`` are each one class, whichever part's namespace a
    host imports them from; ``HardStopKind`` is one enum."""
    assert at.HardStopped is se.HardStopped is g.HardStopped
    assert se.ClientAttached is g.ClientAttached
    assert at.HardStopKind is g.HardStopKind
    assert not hasattr(at, "HaltTurn") and not hasattr(g, "HardStop")


@pytest.mark.req("SG-S1", "SG-S3")
def test_a_halted_turn_says_which_authority_halted_it() -> None:
    """req: SG-S1, SG-S3 — a ``HardStopped`` the host sends halts the running turn with a
    ``HALTED`` outcome whose ``halt_kind`` is the stop's kind and whose message is its reason."""
    host = Host()
    host.send(PROMPT)  # no response scripted: the request waits
    host.send(at.HardStopped(kind=at.HardStopKind.LOOP_PROTECTION, reason="Loop protection."))
    (end,) = host.commands(at.EndTurn)
    assert (end.outcome.kind, end.outcome.halt_kind, end.outcome.message) == (
        at.OutcomeKind.HALTED, at.HardStopKind.LOOP_PROTECTION, "Loop protection.")
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED


# --- where a turn came from ----------------------------------------------------------------------


@pytest.mark.req("BG-4")
def test_end_turn_says_where_the_turn_came_from() -> None:
    """req: BG-4 — a prompt, a queued prompt and a cron turn each end with their origin; a
    continued turn keeps the origin of the turn it continues."""
    host = Host(guard=g.GuardConfig(daemon=True))
    host.send(PROMPT)  # its request waits
    host.send(se.PromptQueued(prompt_id="q1", message_id="mq", text="queued"),
              se.AutomaticTurnDue(turn_id="c1", message_id="mc", text="cron",
                                  kind=se.AutomaticKind.CRON, source_id="task"))
    host.responses.extend([say("one"), say("two"), say("three")])
    host.answer(host.held.pop())
    host.send()
    assert [(c.turn_id, c.origin) for c in host.commands(at.EndTurn)] == [
        ("t1", at.TurnOrigin.PROMPT), ("q1", at.TurnOrigin.QUEUED_PROMPT),
        ("c1", at.TurnOrigin.CRON)]


# --- Stop hooks tell their count -----------------------------------------------------------------


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


# --- resends are idempotent ----------------------------------------------------------------------


@pytest.mark.req("BR-1", "LD-4")
def test_a_resend_is_absorbed_and_a_reused_id_with_other_text_handed_back() -> None:
    """req: BR-1, LD-4 — the same queued prompt, automatic turn or prompt sent again (a retry
    after a network blip) is absorbed, never run twice; a queued prompt's id with another text
    comes back in ``PromptRefused``; nothing changes."""
    host = Host()
    host.send(PROMPT)
    queued = se.PromptQueued(prompt_id="q1", message_id="mq", text="next")
    due = se.AutomaticTurnDue(turn_id="c1", message_id="mc", text="cron",
                              kind=se.AutomaticKind.CRON, source_id="task")
    host.send(queued, due)
    before = host.state
    assert [type(c) for c in host.send(queued, due)] == [at.StaleAnswerIgnored] * 2
    assert host.state == before
    assert host.send(se.PromptQueued(prompt_id="q1", message_id="mq", text="other")) == [
        se.PromptRefused(prompt_id="q1", text="other", reason="this prompt id is already in use")]
    idle = Host()
    idle.responses.append(say("Done."))
    idle.send(PROMPT)
    after = idle.state
    assert [type(c) for c in idle.send(PROMPT)] == [at.StaleAnswerIgnored]
    assert idle.state == after


# --- waiting_for and held -------------------------------------------------------------------------


def test_waiting_for_names_answers_the_client_held_prompt_and_a_retry() -> None:
    """``waiting_for`` lists outstanding answers as ``ANSWER`` entries (the same as
    ``outstanding``), a prompt the client reported holding, a queued prompt still arriving, and
    the user's retry of a turn that ended with a resumable error; ``held`` lists what waits."""
    host = Host(retry_window=math.inf)
    host.send(PROMPT)
    request = host.held.pop()
    waits = se.waiting_for(host.state)
    assert [(w.kind, w.command, w.answer_id) for w in waits] == [
        (se.WaitKind.ANSWER, at.RequestModelStream, "t1/r1")]
    host.send(se.PromptQueued(prompt_id="q1", message_id="mq", text="part", complete=False),
              at.StreamFailed(request_id=request.request_id, error="503"))
    assert {(w.kind, w.answer_id) for w in se.waiting_for(host.state)} == {
        (se.WaitKind.PROMPT_CONTENT, "q1"), (se.WaitKind.RETRY, "t1")}
    assert se.held(host.state) == (se.Held(turn_id="q1", kind="queued_prompt"),)


@pytest.mark.req("BG-1", "BG-2")
def test_background_ended_can_queue_its_terminal_notification_in_the_same_step() -> None:
    """req: BG-1, BG-2 — ``BackgroundEnded(notification_id=...)`` is the item's end and its
    notification at once, so an idle chain waiting for the item never sees a step with nothing
    left to wait for; ``waiting_for`` names the notification, and the related turn runs."""
    host = Host()
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending")}
    host.send(PROMPT, se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="build"))
    host.responses.append(say("Waiting for the build."))
    host.answer(host.held.pop())
    host.send()
    assert [(w.kind, w.answer_id) for w in se.waiting_for(host.state)] == [
        (se.WaitKind.BACKGROUND, "build")]
    host.send(se.BackgroundEnded(item_id="build", notification_id="n1"))
    assert [(w.kind, w.answer_id) for w in se.waiting_for(host.state)] == [
        (se.WaitKind.BACKGROUND, "n1")]
    assert host.state.guard.armed
    host.responses.append(say("The build passed."))
    host.send(se.AutomaticTurnDue(turn_id="n-1", message_id="nm", text="build ok",
                                  kind=se.AutomaticKind.NOTIFICATION, source_id="build"))
    assert "build ok" in host.user_messages()


# --- the invariants' checks catch what they are for -----------------------------------------------


def _step(state: se.SessionState, event: object) -> tuple[se.SessionState, tuple[at.Command, ...]]:
    new, commands = se.reduce(state, event)
    return new, commands


def test_no_text_lost_catches_a_close_that_forgets_what_the_turn_owed() -> None:
    """A planted bug: the commands of a close with the ``UnsavedRecords`` taken out. The check
    names the records that vanished; with the real commands it finds nothing."""
    state = se.Session.create(se.SessionConfig(chat_id="chat", guard=ON))
    for event in (PROMPT, at.PersistFailed(key="t1/p1", reason="disk full")):
        state, _ = _step(state, event)
    closed, commands = _step(state, se.CloseRequested())
    assert invariants.lost_texts(state, se.CloseRequested(), closed, commands) == []
    planted = tuple(c for c in commands if not isinstance(c, at.UnsavedRecords))
    assert invariants.lost_texts(state, se.CloseRequested(), closed, planted) == [
        "no text lost: [('user', 'm1')] vanished"]


def test_never_stuck_catches_held_turns_nothing_can_wake() -> None:
    """A planted bug: an idle session holding an automatic turn while its guard holds nothing
    (what a settle that forgot to start it would leave). The check says so; the real session,
    given the same event, starts the turn."""
    config = se.SessionConfig(chat_id="chat", guard=ON)
    due = se.AutomaticTurnDue(turn_id="c1", message_id="mc", text="cron",
                              kind=se.AutomaticKind.CRON, source_id="task")
    running, _ = _step(se.Session.create(config), PROMPT)
    holding, _ = _step(running, due)
    assert len(holding.deferred.turns) == 1
    wedged = holding.__class__(**{**{f: getattr(holding, f) for f in (
        "config", "turn", "guard", "deferred", "deferred_prompts", "ring")},
        "phase": se.SessionPhase.IDLE, "turn": se.Session.create(config).turn})
    assert invariants.stuck(wedged) == [
        "never stuck: automatic turns are held and nothing can wake them"]
    started, _ = _step(se.Session.create(config), due)
    assert started.phase is se.SessionPhase.TURN and invariants.stuck(started) == []


@pytest.mark.req("SG-B1", "SG-B4")
def test_the_hard_bound_counts_guard_follow_ups_and_catches_a_third_stream() -> None:
    """req: SG-B1, SG-B4 — the monitor counts a guard continuation and the follow-up that sends
    its tool results; a third guard-attributable stream without user input is reported."""
    bound = invariants.HardBound(streams=2, loop_open=True, follow_ups=frozenset({"t1/r9"}))
    state = se.Session.create(se.SessionConfig(chat_id="chat", guard=ON))
    running, _ = _step(state, PROMPT)
    _, broken = bound.step(running, at.StreamOpened(request_id="t1/r9"),
                           _advance_turn(running), ())
    assert broken == ["the hard bound: 3 guard-attributable streams without new user input"]
    lead = at.RequestModelStream(request_id="t1/r10", lead_ids=("L1",))
    reset, broken = bound.step(running, at.Persisted(key="t1/p9"), running, (lead,))
    assert reset == invariants.HardBound() and broken == []


def _advance_turn(state: se.SessionState) -> se.SessionState:
    """``state`` with a different turn object (as a step that moved the turn leaves it)."""
    import attrs

    return attrs.evolve(state, turn=attrs.evolve(state.turn))


# --- the shape of a step --------------------------------------------------------------------------


def test_only_the_message_loop_calls_a_parts_reducer() -> None:
    """No handler of the session re-enters a part: the package's only calls of the turn's or
    the guard's reducers are the two in ``translate.run`` (the message loop), so the order in
    which parts hear things is the inbox's order. (A source scan: it fails if anyone adds a
    direct call.)"""
    import ast
    from pathlib import Path

    root = Path(se.__file__).parent
    calls: list[str] = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in ("reduce_into", "guard_into", "reduce") and path.name != "__init__.py":
                    owner = getattr(func, "value", None)
                    calls.append(f"{path.name}:{name}:{getattr(owner, 'id', '')}")
    assert sorted(calls) == ["translate.py:guard_into:", "translate.py:reduce_into:turn_part"]


class FailingLeadSaves(Host):
    """A host whose storage refuses every Lead save."""

    def answer(self, command: at.Command) -> None:
        if isinstance(command, at.SaveLead):
            self.queue.append(at.LeadSaveFailed(lead_id=command.lead_id, reason="io"))
        else:
            super().answer(command)


@pytest.mark.req("SG-B1", "SO-1", "LD-7")
def test_a_drained_message_whose_save_fails_resets_no_budget() -> None:
    """req: SG-B1, SO-1, LD-7 — after the guard's first continuation, a drained message whose save
    fails comes back as a draft and never reaches the model, so it is no new user input: the
    stop is decided again with the budget it had, and the chain gets one more guard stream, not
    two (found by the fuzzer: three guard-attributable streams)."""
    host = FailingLeadSaves()
    drains = iter([(), ("and the docs",)])  # the second stop's drain brings the message
    host.drain = lambda c: se.MidTurnDrained(drain_id=c.drain_id, messages=next(drains, ()))
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending")}
    host.responses.extend([say("Stopping."), say("Still going."),
                           say("Reading.", at.ToolCall(call_id="r1", name="read_file")),
                           say("never sent")])
    host.send(PROMPT)
    assert [c.draft for c in host.commands(at.ReturnDraft)] == ["and the docs"]
    assert len(host.published(se.EntryKind.GUARD_CHUNK)) == 2
    (end,) = host.commands(at.EndTurn)
    assert (end.outcome.kind, end.outcome.halt_kind) == (at.OutcomeKind.HALTED,
                                                         at.HardStopKind.GUARD_BUDGET)
