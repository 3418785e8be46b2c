"""What the todo stop guard's state keeps and forgets: its documented shape, a new chain that
inherits nothing, the tool loop it owns, Plan mode and trust, todo-write calls and retries.

Pinned after the mutation run of the guard (see benchmarks/EVIDENCE.md): each test names the rule
it pins and says which surviving mutants it kills. They use the public guard API only: real
events from a new guard, and the documented meaning of its state's fields.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence

import attrs
import pytest

import agentturn as at
from agentturn import guard as g
from agentturn.tools import explore

ON = g.GuardConfig(todo_stop_guard=True, daemon=True)
LEFT = {"type": "todo_list", "todos": [{"id": "1", "content": "port it", "status": "pending"}]}
DONE = {"type": "todo_list", "todos": [{"id": "1", "content": "port it", "status": "completed"}]}


def play(events: Sequence[at.Event], state: g.GuardState | None = None
         ) -> tuple[g.GuardState, tuple[at.Command, ...]]:
    """Reduce ``events`` from ``state`` (a new, enabled guard by default); the last commands."""
    state = g.GuardState.create(ON) if state is None else state
    commands: tuple[at.Command, ...] = ()
    for event in events:
        state, commands = g.reduce(state, event)
    return state, commands


def armed(turn: str = "t1", call: str = "w1") -> list[at.Event]:
    """A chain of ``turn`` armed by its todo-write result with work left."""
    return [g.OrdinaryPromptStarted(turn_id=turn), g.TodoWriteStarted(call_id=call, turn_id=turn),
            g.TodoWriteResult(call_id=call, turn_id=turn, envelope=LEFT, succeeded=True)]


def continued(attempts: int) -> list[at.Event]:
    """The armed chain's natural stops, each continued and its stream opened."""
    return [event for _ in range(attempts) for event in (g.NaturalStop(), g.GuardStreamOpened())]


# --- the state keeps its documented shape --------------------------------------------------------

#: Scripts that reach every handler that resets a field: exhaustion, a stream that never opened,
#: each tool-loop sponsor, errors, Plan mode, trust cleared (also in Plan mode), related
#: automatic turns and retries, each from a chain with a guard loop open.
SCRIPTS: dict[str, list[at.Event]] = {
    "exhausted": [*armed(), *continued(2), g.NaturalStop(), g.NaturalStop()],
    "not opened": [*armed(), g.NaturalStop(hook_reason="tests fail"),
                   g.GuardStreamNotOpened(reason=g.NotOpenedReason.COMPACTION_FAILED)],
    "second not opened": [*armed(), *continued(1), g.NaturalStop(),
                          g.GuardStreamNotOpened(reason=g.NotOpenedReason.CANCELLED)],
    "mid-turn results": [*armed(), *continued(1), g.ToolResultsReady(mid_turn_input=True)],
    "hook results": [*armed(), g.NaturalStop(hook_reason="tests fail"), g.GuardStreamOpened(),
                     g.TodoWriteStarted(call_id="w8", turn_id="t1"),
                     g.TodoWriteResult(call_id="w8", turn_id="t1", envelope=DONE,
                                       succeeded=True),
                     g.ToolResultsReady()],
    "guard results": [*armed(), *continued(1), g.ToolResultsReady(), g.GuardStreamOpened(),
                      g.ToolResultsReady()],
    "error in a loop": [*armed(), *continued(1), g.RequestErrored(kind=g.ErrorKind.API),
                        g.RetryOrContinue(turn_id="t2")],
    "plan in a loop": [*armed(), *continued(1), g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
                       g.TrustCleared(kind=g.TrustClearingKind.FORK, invalidated_turn_id="t1"),
                       g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
                       g.ApprovalModeChanged(mode=g.ApprovalMode.DEFAULT)],
    "rewind in a loop": [*armed(), *continued(1), g.TodoWriteStarted(call_id="w2", turn_id="t1"),
                         g.TrustCleared(kind=g.TrustClearingKind.REWIND,
                                        invalidated_turn_id="t1")],
    "related turn": [*armed(), *continued(1), g.TodoWriteStarted(call_id="w2", turn_id="t1"),
                     g.AutomaticTurnStarted(turn_id="a1", kind=g.AutomaticTurnKind.CRON,
                                            related=True)],
    "hard stop": [*armed(), *continued(1), g.HardStopped(kind=g.HardStopKind.USER_CANCELLED),
                  g.NaturalStop()],
    "awaiting prompt": [*armed(), *continued(1), g.NaturalStop(queued_prompt=True),
                        g.QueuedPromptAborted(last=True)],
    "mid-turn stop": [*armed(), *continued(1), g.NaturalStop(mid_turn_messages=True),
                      g.OrdinaryStreamOpened(), g.HardStopped(kind=g.HardStopKind.TOKEN_LIMIT)],
    "prompt while continuing": [*armed(), g.NaturalStop(hook_reason="tests fail"),
                                g.OrdinaryPromptStarted(turn_id="t2")],
    "settled": [*armed(), g.TrustCleared(kind=g.TrustClearingKind.REWIND,
                                         invalidated_turn_id="t1"),
                g.ForegroundPromptSettled(turn_id="t1", errored=True)],
}


def _type_problems(state: g.GuardState) -> list[str]:
    problems = []
    attrs.resolve_types(g.GuardState)
    for field in attrs.fields(g.GuardState):
        value = getattr(state, field.name)
        allowed = typing.get_args(field.type) if typing.get_origin(field.type) in (
            typing.Union, types.UnionType) else (field.type,)
        kinds = tuple(type(None) if kind is None else kind for kind in allowed)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            problems.append(f"{field.name}={value!r} is not {field.type}")
    return problems


def shape_problems(state: g.GuardState) -> list[str]:
    """What breaks the documented shape of a guard state (an empty list when nothing does)."""
    problems = _type_problems(state)
    phase = state.phase
    if state.loop is not g.LoopOwner.NONE and phase not in (g.GuardPhase.ACTIVE,
                                                            g.GuardPhase.CONTINUING):
        problems.append(f"a tool loop is owned in {phase.name}: only a primary stream has one")
    pending = (state.pending_attempt, state.pending_text, state.pending_owner,
               state.pending_hook_reason)
    # (a paused chain keeps the continuation whose request failed before it opened, for the
    # retry that re-sends it)
    if phase not in (g.GuardPhase.CONTINUING, g.GuardPhase.PAUSED) and pending != (
            0, "", g.LoopOwner.NONE, None):
        problems.append(f"a pending continuation in {phase.name}: {pending}")
    if phase in (g.GuardPhase.NO_CHAIN, g.GuardPhase.PLAN):
        kept = (state.live_turn, state.open_call, state.listed, state.unfinished,
                state.attempts)
        if kept != ("", "", False, 0, 0):
            problems.append(f"{phase.name} still trusts something of a chain: {kept}")
    return problems


@pytest.mark.req("SG-A12", "SG-C3", "SG-S1", "SG-S2", "SG-B6")
@pytest.mark.parametrize("script", list(SCRIPTS), ids=str)
def test_every_guard_state_keeps_its_documented_shape(script: str) -> None:
    """Every field keeps its declared type; a tool loop is owned only while a chain's stream
    runs (ACTIVE or CONTINUING); a pending continuation exists only while CONTINUING; without a
    chain (NO_CHAIN, PLAN) nothing of one is trusted. Kills the mutants that reset ``loop``,
    ``open_call``, ``live_turn``, ``superseded_turn`` or ``release_on_settle`` to ``None``, or
    forget to reset ``loop``, ``listed``, ``attempts`` or ``open_call``."""
    state = g.GuardState.create(ON)
    for event in SCRIPTS[script]:
        state, _ = g.reduce(state, event)
        assert not shape_problems(state), (event, shape_problems(state))


def test_every_guard_state_the_explorer_reaches_keeps_its_shape() -> None:
    """The same shape over every guard state within three moves of the explorer's starting
    points (sessions drive the guard the way a daemon does)."""
    seen = 0
    for start in explore.STARTS:
        for state in explore.reachable(3, "daemon", start):
            assert not shape_problems(state.guard), shape_problems(state.guard)
            seen += 1
    assert seen > 1000


# --- a new chain starts from nothing -------------------------------------------------------------


@pytest.mark.req("SG-A7", "SG-B1", "SG-A3")
def test_a_new_prompt_starts_a_chain_that_inherits_nothing() -> None:
    """A new ordinary prompt after a chain that spent both attempts, owned a tool loop, had
    been listed and had a todo-write call open: the new chain is unarmed with reason NOT_ARMED,
    owns no loop, never trusts the old call's result, and once armed has both attempts again."""
    state, _ = play([*armed(), *continued(2), g.TodoWriteStarted(call_id="w2", turn_id="t1"),
                     g.OrdinaryPromptStarted(turn_id="t2")])
    assert (state.attempts, state.listed, state.open_call, state.loop) == (
        0, False, "", g.LoopOwner.NONE)
    assert g.decide(state, g.NaturalStop()).reason is g.DecisionReason.NOT_ARMED
    assert g.reduce(state, g.ToolResultsReady()).commands == ()
    late, _ = g.reduce(state, g.TodoWriteResult(call_id="w2", turn_id="t2", envelope=LEFT,
                                                succeeded=True))
    assert late == state
    state, commands = play([*armed("t2", "w3")[1:], g.NaturalStop()], state)
    assert [(type(c), getattr(c, "attempt", None)) for c in commands] == [
        (g.ContinueWithGuardPrompt, 1)]


@pytest.mark.req("SG-C6")
def test_an_event_the_guard_does_not_take_is_refused_with_its_particulars() -> None:
    """A ProtocolError names the part, the phase, the event and what was expected (STYLE 6)."""
    event = at.StopPressed()
    with pytest.raises(at.UnexpectedEvent) as raised:
        g.reduce(g.GuardState.create(ON), event)
    error = raised.value
    assert (error.part, error.phase, error.event, error.expected) == (
        "todo_stop_guard", "NO_CHAIN", event, "a todo stop guard event")


# --- tool loops ----------------------------------------------------------------------------------


@pytest.mark.req("SG-B6")
@pytest.mark.parametrize("mid_turn_input", [False, True])
def test_tool_results_of_a_loop_the_guard_does_not_own_get_nothing(mid_turn_input: bool) -> None:
    """An active chain whose primary stream is not the guard's sends its tool results the
    ordinary way: no command, no change (kills ``... is not ACTIVE and loop is NONE``)."""
    state, _ = play(armed())
    after, commands = g.reduce(state, g.ToolResultsReady(mid_turn_input=mid_turn_input))
    assert commands == () and after == state


@pytest.mark.req("SG-B7", "SG-B8")
@pytest.mark.parametrize("script", ["mid-turn results", "hook results"])
def test_a_loop_whose_results_another_sponsor_sent_is_no_longer_the_guards(script: str) -> None:
    """Once mid-turn input or the Stop hook sponsored the send, the guard owns no loop: more
    results give nothing, and a disarmed chain no longer holds automatic turns."""
    state, commands = play(SCRIPTS[script])
    assert [type(c) for c in commands][:1] == [g.SendToolResults]
    assert state.loop is g.LoopOwner.NONE
    assert g.reduce(state, g.ToolResultsReady()).commands == ()
    disarmed, _ = play([g.TodoWriteStarted(call_id="w9", turn_id="t1"),
                        g.TodoWriteResult(call_id="w9", turn_id="t1", envelope=DONE,
                                          succeeded=True)], state)
    assert not g.holds_automatic_turns(disarmed)


def _disarm(state: g.GuardState) -> g.GuardState:
    return play([g.TodoWriteStarted(call_id="w9", turn_id=state.live_turn),
                 g.TodoWriteResult(call_id="w9", turn_id=state.live_turn, envelope=DONE,
                                   succeeded=True)], state)[0]


@pytest.mark.req("SG-B6", "BG-5")
@pytest.mark.parametrize("ending", [g.OrdinaryStreamOpened(), g.NaturalStop()],
                         ids=lambda e: type(e).__name__)
def test_an_ordinary_stream_or_a_plain_stop_ends_the_guards_loop(ending: at.Event) -> None:
    """The guard owns the tool loop of its own stream only: an ordinary stream opening, or a
    natural stop with nothing left to continue, ends it, so a disarmed chain releases held
    automatic turns and later tool results get nothing from the guard."""
    state = _disarm(play([*armed(), *continued(1)])[0])
    assert state.loop is g.LoopOwner.GUARD and g.holds_automatic_turns(state)
    after, commands = g.reduce(state, ending)
    assert after.loop is g.LoopOwner.NONE
    assert commands == (g.ReleaseAutomaticQueues(),)
    assert g.reduce(after, g.ToolResultsReady()).commands == ()


@pytest.mark.req("SG-B2", "SG-A9", "SO-1")
def test_mid_turn_messages_at_a_stop_start_a_new_stage_and_end_the_guards_loop() -> None:
    """Both attempts spent, mid-turn messages at a natural stop run first and reset the stage:
    the next stop continues with attempt 1 again, and the guard's loop has ended."""
    state, _ = play([*armed(), *continued(2), g.NaturalStop(mid_turn_messages=True)])
    assert state.attempts == 0 and state.loop is g.LoopOwner.NONE
    assert g.reduce(state, g.ToolResultsReady()).commands == ()
    _, commands = g.reduce(state, g.NaturalStop())
    assert [(type(c), getattr(c, "attempt", None)) for c in commands] == [
        (g.ContinueWithGuardPrompt, 1)]


@pytest.mark.req("SG-B5")
def test_the_results_kept_after_the_last_attempt_say_exactly_why() -> None:
    """The third guard-attributable stream is refused with the exact documented reason."""
    state, commands = play([*armed(), *continued(2), g.ToolResultsReady()])
    assert commands[0] == g.KeepToolResults(
        reason="The todo stop guard used its 2 automatic continuations; no further stream "
               "opens.")
    assert state.phase is g.GuardPhase.SUSPENDED and state.loop is g.LoopOwner.NONE


@pytest.mark.req("SG-S2", "BG-5")
def test_an_error_ends_the_guards_loop_so_a_disarmed_chain_releases_automatic_turns() -> None:
    """A disarmed chain holds automatic turns only while the guard's tool loop runs; an API
    error ends that stream, so the pause releases them (kills "the error keeps the loop")."""
    state, _ = play([*armed(), *continued(1), g.TodoWriteStarted(call_id="w2", turn_id="t1"),
                     g.TodoWriteResult(call_id="w2", turn_id="t1", envelope=DONE,
                                       succeeded=True)])
    assert g.holds_automatic_turns(state) and not state.armed
    paused, commands = g.reduce(state, g.RequestErrored(kind=g.ErrorKind.NETWORK))
    assert paused.phase is g.GuardPhase.PAUSED
    assert commands == (g.ReleaseAutomaticQueues(),)
    assert not g.holds_automatic_turns(paused)


@pytest.mark.req("SG-A10", "SG-B4")
def test_a_related_automatic_turn_does_not_inherit_the_guards_tool_loop() -> None:
    """The automatic turn's stream is its own: its tool results are not a guard follow-up, so
    they spend no attempt and the guard sends nothing."""
    state, _ = play([*armed(), *continued(1)])
    assert state.loop is g.LoopOwner.GUARD
    state, _ = g.reduce(state, g.AutomaticTurnStarted(
        turn_id="a1", kind=g.AutomaticTurnKind.CRON, related=True))
    after, commands = g.reduce(state, g.ToolResultsReady())
    assert commands == () and after == state and state.attempts == 1


# --- Plan mode and trust -------------------------------------------------------------------------


@pytest.mark.req("SG-C3", "SG-A13")
def test_switching_into_plan_mode_twice_stays_in_plan_mode() -> None:
    """Plan -> Plan changes nothing; only leaving Plan mode leaves it."""
    state, _ = play([g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)])
    again, commands = g.reduce(state, g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN))
    assert again is state and commands == ()


@pytest.mark.req("SG-C3", "SG-A15", "BG-5")
def test_leaving_plan_mode_holds_no_automatic_turn_back() -> None:
    """A rewind of a running turn holds automatic turns until that turn settles; entering Plan
    mode releases them and forgets the wait, so after Plan mode an unrelated cron turn starts
    a chain instead of being deferred."""
    state, _ = play([*armed(), g.TrustCleared(kind=g.TrustClearingKind.REWIND,
                                              invalidated_turn_id="t1")])
    assert g.holds_automatic_turns(state)
    state, commands = play([g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
                            g.ApprovalModeChanged(mode=g.ApprovalMode.DEFAULT)], state)
    assert state.release_on_settle == "" and not g.holds_automatic_turns(state)
    _, commands = g.reduce(state, g.AutomaticTurnStarted(
        turn_id="a1", kind=g.AutomaticTurnKind.CRON, related=False))
    assert [type(c) for c in commands] == [g.StartWorkChain]


@pytest.mark.req("SG-A12", "SG-A14")
def test_a_turn_invalidated_in_plan_mode_is_retried_as_a_fresh_chain() -> None:
    """Trust cleared while in Plan mode still remembers the invalidated turn, so its own writes
    never arm; after Plan mode a retry naming it starts a fresh chain that the retry's new
    trusted write arms (issue 18, defect 20)."""
    state, _ = play([*armed(), g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN),
                     g.TrustCleared(kind=g.TrustClearingKind.HISTORY_RESTORED,
                                    invalidated_turn_id="t1"),
                     g.ApprovalModeChanged(mode=g.ApprovalMode.DEFAULT)])
    assert state.superseded_turn == "t1"
    state, _ = play([g.TodoWriteStarted(call_id="w4", turn_id="t1"),
                     g.TodoWriteResult(call_id="w4", turn_id="t1", envelope=LEFT,
                                       succeeded=True)], state)
    assert not state.armed and not state.listed
    state, _ = play([g.RetryOrContinue(turn_id="t1"),
                     g.TodoWriteStarted(call_id="w5", turn_id="t1"),
                     g.TodoWriteResult(call_id="w5", turn_id="t1", envelope=LEFT,
                                       succeeded=True)], state)
    assert state.superseded_turn == "" and state.armed


@pytest.mark.req("SG-A12")
def test_a_trust_clearing_event_forgets_everything_the_chain_trusted() -> None:
    """After a rewind the guard is a new guard but for the chain count, the invalidated turn
    and the wait for it to settle."""
    state, _ = play([*armed(), *continued(1), g.TodoWriteStarted(call_id="w2", turn_id="t1"),
                     g.TrustCleared(kind=g.TrustClearingKind.REWIND, invalidated_turn_id="t1")])
    fresh = attrs.evolve(g.GuardState.create(ON), chain=state.chain, superseded_turn="t1",
                         release_on_settle="t1")
    assert state == fresh


# --- todo-write calls and retries ----------------------------------------------------------------


@pytest.mark.req("SG-A3", "SG-A10")
def test_a_related_automatic_turn_does_not_inherit_an_open_todo_write_call() -> None:
    """A todo-write call started in the previous turn is not the automatic turn's: its late
    result never arms, and no call is open once the automatic turn starts."""
    state, _ = play([g.OrdinaryPromptStarted(turn_id="t1"),
                     g.TodoWriteStarted(call_id="w1", turn_id="t1"),
                     g.AutomaticTurnStarted(turn_id="a1", kind=g.AutomaticTurnKind.NOTIFICATION,
                                            related=True)])
    assert state.open_call == ""
    after, _ = g.reduce(state, g.TodoWriteResult(call_id="w1", turn_id="a1", envelope=LEFT,
                                                 succeeded=True))
    assert after == state and not after.armed


UNTRUSTED_STARTS = {
    "another turn": [g.OrdinaryPromptStarted(turn_id="t1")],
    "plan mode": [g.ApprovalModeChanged(mode=g.ApprovalMode.PLAN)],
    "no chain": [],
    "suspended": [g.OrdinaryPromptStarted(turn_id="t0"),
                  g.HardStopped(kind=g.HardStopKind.LOOP_PROTECTION)],
}


@pytest.mark.req("SG-A3", "SG-A14", "SG-C3")
@pytest.mark.parametrize("where", list(UNTRUSTED_STARTS), ids=str)
def test_a_todo_write_call_the_guard_cannot_trust_opens_nothing(where: str) -> None:
    """A call of a turn that is not the live one, or outside an active chain, leaves the
    guard exactly as it was: no call is open, so no result can ever answer it."""
    state, _ = play(UNTRUSTED_STARTS[where])
    after, commands = g.reduce(state, g.TodoWriteStarted(call_id="w1", turn_id="t0"))
    assert after == state and after.open_call == "" and commands == ()


@pytest.mark.req("SG-A3")
def test_no_todo_write_call_is_open_once_its_result_came() -> None:
    """The result closes the call: ``open_call`` is "" and a duplicate changes nothing."""
    state, _ = play(armed())
    assert state.open_call == ""
    duplicate, _ = g.reduce(state, g.TodoWriteResult(call_id="w1", turn_id="t1", envelope=DONE,
                                                     succeeded=True))
    assert duplicate == state


@pytest.mark.req("SG-A8", "SG-A14")
def test_a_retry_naming_the_invalidated_turn_starts_an_unarmed_chain() -> None:
    """Even when the current chain is armed, a retry naming the one invalidated turn never
    keeps it: a new, unarmed chain starts."""
    state, _ = play([g.TrustCleared(kind=g.TrustClearingKind.FORK, invalidated_turn_id="t0"),
                     *armed("t1")])
    assert state.armed
    after, commands = g.reduce(state, g.RetryOrContinue(turn_id="t0"))
    assert [type(c) for c in commands] == [g.StartWorkChain]
    assert not after.armed and after.chain == state.chain + 1


@pytest.mark.req("SG-A8", "SG-S2")
def test_a_retried_turn_is_the_live_one_and_its_todo_list_is_trusted() -> None:
    """After an error, a retry in a new turn keeps the chain and its budget, and that turn's
    todo-write results are the trusted ones: an all-done list disarms."""
    state, _ = play([*armed(), g.RequestErrored(kind=g.ErrorKind.API),
                     g.RetryOrContinue(turn_id="t2")])
    assert state.live_turn == "t2" and state.open_call == "" and state.armed
    state, _ = play([g.TodoWriteStarted(call_id="w2", turn_id="t2"),
                     g.TodoWriteResult(call_id="w2", turn_id="t2", envelope=DONE,
                                       succeeded=True)], state)
    assert state.listed and not state.armed


@pytest.mark.req("SG-A3", "SG-A8")
def test_a_retry_forgets_the_todo_write_call_the_failed_request_left_open() -> None:
    """A call started before the error never gets a trusted result after the retry."""
    state, _ = play([*armed(), g.TodoWriteStarted(call_id="w2", turn_id="t1"),
                     g.RequestErrored(kind=g.ErrorKind.API), g.RetryOrContinue(turn_id="t2"),
                     g.TodoWriteResult(call_id="w2", turn_id="t2", envelope=DONE,
                                       succeeded=True)])
    assert state.armed and state.unfinished == 1
