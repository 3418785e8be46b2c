"""What every step of the session promises: only a ProtocolError escapes and a refusal changes
nothing, the same events give the same commands, its state keeps its documented shape, and the
checks of ``agentturn.session.invariants`` catch what they are for.
"""

from __future__ import annotations

import pytest
from checked_host import Checked, cron, prompt, script_todos
from checks import refused
from session_host import ON, PROMPT, Host, say
from session_scenes import CheckedHost, armed_script, third_guard_stream_withheld
from strict_host import StrictHost, daemon_config

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn.session import invariants


def test_the_session_refuses_a_prompt_while_a_turn_runs_and_changes_nothing() -> None:
    """A second PromptSubmitted while a turn runs is misuse (a daemon queues it)."""
    host = Host()
    host.send(PROMPT)
    before = host.state
    with pytest.raises(at.ProtocolError):
        se.reduce(host.state, at.PromptSubmitted(turn_id="t2", message_id="m2", text="x"))
    assert host.state is before


GARBAGE = [
    None, object(), 42, "PromptSubmitted", g.NaturalStop(), g.GuardStreamOpened(),
    g.OrdinaryPromptStarted(turn_id="t"), g.MidTurnMessage(), at.ContinueTurn(turn_id="zz"),
    at.NaturalStopDecided(request_id="r"), at.PersistFailed(key="k", reason="r"),
    se.TimerFired(key="nope"), se.StopHookDecided(run_id="nope", block=False),
    se.MidTurnDrained(drain_id="nope"), at.TitleGenerated(request_id="nope", title="x"),
    at.Persisted(key="t1/p1"), at.ToolFinished(call_id="c1", output=""),
    at.PermissionDecided(call_id="never-asked", decision=at.PermissionDecision.ALLOW),
    at.LeadSaved(lead_id="never-issued"), se.PromptCompleted(prompt_id="never-queued"),
]


# Written from the host author's chair, with the public API only: every step goes through
# StrictHost (tests/strict_host.py), which checks the reducer's promises on each call.


@pytest.mark.parametrize("event", GARBAGE, ids=lambda e: type(e).__name__)
def test_garbage_on_a_fresh_session_is_refused_and_changes_nothing(event: object) -> None:
    host = StrictHost()
    host.refused(event)


@pytest.mark.parametrize("event", GARBAGE, ids=lambda e: type(e).__name__)
def test_garbage_in_the_middle_of_a_guarded_turn_is_refused_and_changes_nothing(
        event: object) -> None:
    host = StrictHost(daemon_config(stop_hooks=True))
    host.armed_natural_stop()
    host.refused(event)
    host.drain()                       # the session still works after the refusal
    assert host.pending(se.RunStopHooks)


@pytest.mark.parametrize("bad_state", [None, "state", at.TurnState.create("chat-1"),
                                       g.GuardState.create()],
                         ids=lambda v: type(v).__name__)
def test_a_wrong_state_object_raises_protocol_error(bad_state: object) -> None:
    with pytest.raises(at.WrongState, match="expected a SessionState as the state"):
        se.reduce(bad_state, at.StopPressed())  # type: ignore[arg-type]


def test_every_command_of_a_long_run_is_reproduced_from_the_recorded_events() -> None:
    """Determinism over a whole run: replaying the events gives the same commands."""
    host = StrictHost(daemon_config(stop_hooks=True))
    host.armed_natural_stop()
    host.drain()
    host.send(se.StopHookDecided(run_id=host.pending(se.RunStopHooks), block=True,
                                reason="Run the tests"))
    host.ack_persists()
    host.open_and_complete(text="ran them")
    replay = se.Session.create(host.state.config)
    for event, commands in host.log:
        replay, again = se.reduce(replay, event)
        assert tuple(again) == commands
    assert replay == host.state


# Written by an outside host author trying to break the session through its public API:
# Checked (tests/checked_host.py) checks every step from outside; the assertions read only
# commands, ``waiting_for`` and ``held``.


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
        script_todos(h, "pending", "in_progress")
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


def _drain_held_then_hard_stop() -> CheckedHost:
    """A hard stop while the drain is out and a Lead instruction is still being saved: the turn
    waits for that save before it ends, so the session is back in TURN with no drain."""
    host = armed_script(CheckedHost())
    host.drain = lambda c: None  # the client never answers the drain
    return _hard_stop_with_a_lead_unsaved(host, se.SessionPhase.DRAINING)


def _hard_stop_with_a_lead_unsaved(host: CheckedHost, phase: se.SessionPhase) -> CheckedHost:
    """Run the prompt into ``phase``, then a Lead instruction and a hard stop in one go."""
    host.send(PROMPT)
    assert host.state.phase is phase
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"),
              se.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION, reason="Loop protection."))
    assert host.outcomes() == [at.OutcomeKind.HALTED]
    return host


def _hooks_block_then_cap() -> CheckedHost:
    host = armed_script(CheckedHost(stop_hooks=True, stop_hook_cap=1), say("Again."), say("Again."))
    host.hooks = lambda c: se.StopHookDecided(run_id=c.run_id, block=True, reason="Tests fail.")
    host.send(PROMPT)
    return host


def _automatic_after_hook_blocks() -> CheckedHost:
    host = armed_script(CheckedHost(stop_hooks=True), say("Fixed."), say("Done."))
    blocks = iter([True])
    host.hooks = lambda c: se.StopHookDecided(
        run_id=c.run_id, block=next(blocks, False), reason="Tests fail.")
    host.send(PROMPT)
    host.responses.append(say("Nightly report written."))
    host.send(se.AutomaticTurnDue(turn_id="cron-1", message_id="cm", text="nightly report",
                                  kind=se.AutomaticKind.CRON, source_id="task-1"))
    return host


def _hooks_let_the_stop_through_with_a_lead_saved(queued: bool) -> CheckedHost:
    """The hooks let a stop through, while a complete prompt is queued (SO-2's order) or not
    (the guard, not armed, decides nothing): no continuation; a Lead instruction saved while
    they ran makes the turn go on with it."""
    host = CheckedHost(stop_hooks=True)
    host.responses.append(say("Done."))
    host.hooks = lambda c: None  # the hooks answer later
    host.send(PROMPT)
    [run] = host.commands(se.RunStopHooks)
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"),
              *([se.PromptQueued(prompt_id="q1", message_id="mq", text="queued")] if queued
                else []),
              se.StopHookDecided(run_id=run.run_id, block=False))
    assert host.state.continuation is se.Continuation.NONE
    assert host.user_messages()[-1] == "use tabs"
    return host


def _hook_continuation_fails() -> CheckedHost:
    """The hooks block the stop; the request of the hook's continuation fails before its stream
    opens, so the turn ends on that error with the request attributed to the hook."""
    host = CheckedHost(stop_hooks=True)
    host.responses.append(say("Done."))
    host.hooks = lambda c: se.StopHookDecided(run_id=c.run_id, block=True, reason="Tests fail.")
    host.send(PROMPT)
    request = host.commands(at.RequestModelStream)[-1]
    assert host.state.hook_request == request.request_id
    host.send(at.StreamFailed(request_id=request.request_id, error="reset"))
    assert host.outcomes() == [at.OutcomeKind.ERROR]
    return host


def _stopped_during_a_guard_request() -> CheckedHost:
    """Stop while the guard continuation's request is out and a Lead instruction is still
    being saved: the turn ends only after that save; meanwhile the guard has heard its stream
    was not opened and suspended the chain."""
    host = armed_script(CheckedHost())
    host.send(PROMPT)
    assert host.state.guard_request == host.held[-1].request_id
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"), at.StopPressed())
    assert host.outcomes() == [at.OutcomeKind.CANCELLED]
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED
    return host


def _hard_stop_while_the_hooks_run() -> CheckedHost:
    """A hard stop while the Stop hooks still run and a Lead instruction is still being saved:
    the turn waits for that save before it ends, so the session is back in TURN with no run."""
    host = CheckedHost(stop_hooks=True)
    host.responses.append(say("Done."))
    host.hooks = lambda c: None  # the hooks never answer
    return _hard_stop_with_a_lead_unsaved(host, se.SessionPhase.HOOKS)


SESSION_SCRIPTS = {
    "hard stop while the hooks run": _hard_stop_while_the_hooks_run,
    "a hook continuation's request fails": _hook_continuation_fails,
    "closed while the prompt is saved": lambda: CheckedHost().send(PROMPT, se.CloseRequested()),
    "stopped while the prompt is saved": lambda: CheckedHost().send(PROMPT, at.StopPressed()),
    "the only queued prompt aborted": lambda: CheckedHost().send(
        PROMPT, se.PromptQueued(prompt_id="q1", message_id="mq", text="later"),
        se.PromptAborted(prompt_id="q1")),
    "hooks yield to a queued prompt": lambda: _hooks_let_the_stop_through_with_a_lead_saved(True),
    "hooks let the stop through": lambda: _hooks_let_the_stop_through_with_a_lead_saved(False),
    "stopped during a guard continuation's request": _stopped_during_a_guard_request,
    "hard stop while draining": _drain_held_then_hard_stop,
    "hooks block up to the cap": _hooks_block_then_cap,
    "automatic turn after hook blocks": _automatic_after_hook_blocks,
    "third guard stream withheld": third_guard_stream_withheld,
    "drains answered": lambda: armed_script(CheckedHost(), say("More."), say("Done?")).send(PROMPT),
}


REFUSALS: dict[str, tuple[at.Event, str]] = {
    "hook answer": (se.StopHookDecided(run_id="t1/hooks-1", block=False),
                    "the answer of a Stop-hook run this session asked for"),
    "prompt completed": (se.PromptCompleted(prompt_id="q9"), "a queued prompt's id"),
    "timer": (se.TimerFired(key="t1/drain-1"), "a timer this session started"),
    "drain reply": (se.MidTurnDrained(drain_id="t1/drain-1"),
                    "the reply to a drain this session asked for"),
}


# Pinned after mutation testing (benchmarks/EVIDENCE.md, Item 5): each test names the rule
# it pins and the surviving mutants it kills.


@pytest.mark.req("SO-1", "SO-6", "SG-B5", "BG-4")
@pytest.mark.parametrize("script", list(SESSION_SCRIPTS), ids=str)
def test_every_session_state_keeps_its_documented_shape(script: str) -> None:
    """After every step: each ``str``/``bool``/``int``/enum field holds that type; a drain id
    is kept only while the session drains (``DRAINING``) and a Stop-hook run id only while the
    hooks run (``HOOKS``); an automatic turn has had no Stop-hook block. Kills the mutants that
    leave ``drain_id`` set after a drain's answer or a hard stop (or ``hook_run`` after a hard
    stop while the hooks run), set ``withheld_request`` to
    ``None``, start an automatic turn with a Stop-hook block counted, set a ``hook_run`` on
    Stop or when closing, store a ``None`` continuation at a turn's end or when yielding to a
    queued prompt or when the guard decides nothing, or a ``None`` FIFO priority when the last
    queued prompt is aborted, or keep the todo call once its result is handed over (its doc:
    "the todo-write call running now"); a request is attributed to the guard, a hook or the
    withholding only while it is the running turn's (kills a ``guard_request`` set by an
    ordinary stream, a ``hook_request`` kept after the turn ended, and a ``guard_request`` of
    ``None`` or another id left when Stop cancels a guard continuation's request)."""
    SESSION_SCRIPTS[script]()


@pytest.mark.req("SO-6", "BR-1", "BR-3")
@pytest.mark.parametrize("case", list(REFUSALS), ids=str)
def test_an_answer_the_session_never_asked_for_is_refused_with_its_particulars(case: str) -> None:
    """A Stop-hook answer (SO-6), a prompt completion (BR-1), a drain timer or a drain reply
    (BR-3) the session never issued: ``UnknownId`` from the session, naming the phase, the
    event and what it waits on (kills ``part=None``, ``phase=None``, ``expected=None`` and the
    upper-cased drain text)."""
    event, expected = REFUSALS[case]
    with pytest.raises(at.UnknownId) as raised:
        se.reduce(Host().state, event)
    assert refused(raised.value) == (at.UnknownId, "session", "IDLE", event, expected)


def test_an_event_the_session_does_not_take_is_refused_with_its_particulars() -> None:
    """An object that is no session event, and a prompt while a turn runs: ``UnexpectedEvent``
    from the session with the exact part, phase and event; the first expects exactly "a session
    event", the second names what the phase takes instead (kills the upper-cased part and the
    type check that no longer looks at the event). STYLE 6: host misuse has no requirement ID."""
    stranger = object()
    with pytest.raises(at.UnexpectedEvent) as raised:
        se.reduce(Host().state, stranger)
    assert refused(raised.value) == (at.UnexpectedEvent, "session", "IDLE", stranger,
                                     "a session event")
    host = Host()
    host.send(PROMPT)  # no response scripted: the turn runs
    second = at.PromptSubmitted(turn_id="t2", message_id="m2", text="more")
    with pytest.raises(at.UnexpectedEvent) as raised:
        se.reduce(host.state, second)
    assert refused(raised.value) == (at.UnexpectedEvent, "session", "TURN", second,
                                     "PromptQueued while a turn runs")


def _step(state: se.SessionState, event: object) -> tuple[se.SessionState, tuple[at.Command, ...]]:
    new, commands = se.reduce(state, event)
    return new, commands


def _advance_turn(state: se.SessionState) -> se.SessionState:
    """``state`` with a different turn object (as a step that moved the turn leaves it)."""
    import attrs

    return attrs.evolve(state, turn=attrs.evolve(state.turn))


# The invariants' checks catch what they are for: each test plants a bug and shows that the
# check that must catch it does.


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
