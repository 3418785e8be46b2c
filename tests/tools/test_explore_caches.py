"""The explorer's and the fuzzer's cheaper checks answer as the plain ones do.

The per-step checks remember answers for the parts of a state a step kept (by identity, see
``agentturn._memo``) and skip work a step cannot need (no text can be lost from a part that is
the very same object; nothing can go wrong with what is outstanding when nothing was handed
out, cancelled or changed). Each test here computes the same answer the plain way, on every
step from the states a short walk reaches, and requires equal answers: a copy of a state made
by pickling shares no part with the original, so no remembered answer can serve it.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator

import attrs

from agentturn._base import Command, Event
from agentturn._memo import remember_recent
from agentturn.errors import ProtocolError
from agentturn.session import SessionState, waiting_for
from agentturn.session import consistency as consistency_part
from agentturn.session import invariants as session_invariants
from agentturn.session.waiting import WaitKind
from agentturn.tools import explore

alphabet_module = sys.modules["agentturn.tools.explore.alphabet"]
rules = sys.modules["agentturn.tools.explore.invariants"]

Step = tuple[SessionState, Event, SessionState, tuple[Command, ...]]


def _copy(state: SessionState) -> SessionState:
    """An equal state that shares no part with ``state``."""
    copied: SessionState = pickle.loads(pickle.dumps(state))
    return copied


def _states() -> list[SessionState]:
    return [state for start in explore.STARTS
            for state in explore.reachable(2, "daemon", start)]


def _steps() -> Iterator[Step]:
    for state in _states():
        for move in explore.alphabet(state):
            try:
                step = explore.reduce(state, move.event)
            except ProtocolError:
                continue
            yield state, move.event, step.state, step.commands


def test_remembered_answers_of_one_and_two_arguments_go_by_identity() -> None:
    """The written-out paths of ``remember_recent`` (one argument, two arguments) reuse an
    answer only for the very same objects, as the general path does."""
    calls: list[tuple[object, ...]] = []

    @remember_recent(1)
    def one(value: object) -> int:
        calls.append((value,))
        return len(calls)

    @remember_recent(2)
    def two(first: object, second: object) -> int:
        calls.append((first, second))
        return len(calls)

    a, b = [1], [1]                    # equal, not identical
    assert one(a) == one(a) == 1 and one(b) == 2 and one(a) == 3
    calls.clear()
    assert two(a, b) == two(a, b) == 1
    assert two(b, a) == 2 and two(a, b) == 1   # two answers kept
    assert two(a, a) == 3 and two(b, a) == 2 and two(a, b) == 4


def test_the_state_checks_answer_alike_for_a_state_and_a_copy_sharing_nothing() -> None:
    """``check_state``, ``inconsistencies``, ``stuck`` and the alphabet remember answers for a
    state's parts: a copy that shares no part gets the same answers, in any order."""
    states = _states()
    assert len(states) > 100
    for state in states + states[::-1]:
        copy = _copy(state)
        assert consistency_part.inconsistencies(state) == consistency_part.inconsistencies(copy)
        assert explore.check_state(state) == explore.check_state(copy)
        assert session_invariants.stuck(state) == session_invariants.stuck(copy) == _stuck(state)
        assert explore.alphabet(state) == explore.alphabet(copy)


def _stuck(state: SessionState) -> list[str]:
    """*Never stuck* as it was written on ``waiting_for`` before the check built no values."""
    if state.phase is state.phase.CLOSED:
        return []
    waiting = waiting_for(state)
    answers = [w for w in waiting if w.kind is WaitKind.ANSWER]
    problems: list[str] = []
    if state.phase is not state.phase.IDLE and not answers:
        problems.append(f"never stuck: a {state.phase.name} session awaits no answer")
    if state.phase is state.phase.IDLE:
        if any(entry.complete for entry in state.fifo):
            problems.append("never stuck: a complete queued prompt waits while idle")
        if state.deferred.turns and not waiting:
            problems.append("never stuck: automatic turns are held and nothing can wake them")
    for item in waiting:
        if item.kind is WaitKind.BACKGROUND and not (
                any(live.item_id == item.answer_id for live in state.background.live)
                or any(note.notification_id == item.answer_id
                       for note in state.background.queued)):
            problems.append(f"never stuck: waits for background {item.answer_id!r} that is gone")
        if item.kind is WaitKind.RETRY and state.turn.resume_phase is None:
            problems.append("never stuck: waits for a retry no turn offers")
    if len({(w.command, w.answer_id) for w in answers}) != len(answers):
        problems.append("never stuck: an awaiting command is outstanding twice")
    return problems


def _lost(before: SessionState, event: Event, after: SessionState,
          commands: tuple[Command, ...]) -> set[tuple[str, str]]:
    """What *no text lost* finds missing, the plain way: every held text, before and after."""
    held = session_invariants.held_texts
    return ((held(before) | session_invariants._brought(event, commands)) - held(after)
            - session_invariants._fates(before, event, commands))


def test_no_text_lost_looks_only_where_a_text_can_go_and_finds_what_the_plain_check_finds(
        ) -> None:
    """``lost_texts`` looks only at the texts brought and those of the parts a step replaced;
    on every step it says what the plain set difference says, and so it does for the same step
    made of copies (every part replaced). A text taken out of a queue is found missing."""
    steps = 0
    for before, event, after, commands in _steps():
        plain = _lost(before, event, after, commands)
        expected = [f"no text lost: {sorted(plain)} vanished"] if plain else []
        found = session_invariants.lost_texts(before, event, after, commands)
        assert found[:1] == expected
        assert session_invariants.lost_texts(_copy(before), event, _copy(after), commands) == found
        steps += 1
    assert steps > 1000
    queued = next(state for state in _states() if state.fifo)
    emptied = attrs.evolve(queued, fifo=())
    assert session_invariants.lost_texts(queued, explore.alphabet(queued)[0].event, emptied, ())


def test_what_is_outstanding_is_checked_in_full_whenever_it_can_break() -> None:
    """``check_step`` skips the outstanding rules when no command hands out or cancels
    anything and the same items are outstanding: on every step, what it reports under
    "outstanding" is what the full check reports."""
    for state in _states():
        for move in explore.alphabet(state):
            result = explore.check_step(state, session_invariants.HardBound(), move,
                                        recheck=False)
            if result.outcome == "refused":
                continue
            full = rules._check_outstanding(state, alphabet_module.awaited(result.state),
                                            move.event, result.commands)
            assert [p for p in result.problems if p[0] == "outstanding"] == full


def test_a_walk_leaves_no_cyclic_garbage_so_the_collector_may_rest() -> None:
    """The explorer and the fuzzer turn the cycle collector off while they walk
    (checker.collector_resting): that is only safe while a walk makes no reference cycles,
    which this checks (and that the collector is back on, or stays off if it was)."""
    import gc

    from agentturn.tools.explore import explore, fuzz

    gc.collect()
    seen: list[bool] = []
    explore(3, "daemon", "armed", progress=lambda *_: seen.append(gc.isenabled()))
    fuzz(3_000, seed=5, clock=lambda: seen.append(gc.isenabled()) or 0.0)
    assert seen and not any(seen)  # off during the walks
    assert gc.isenabled()
    assert gc.collect() == 0
    gc.disable()
    try:
        explore(3, "interactive", "draining", workers=2)
        fuzz(500, seed=6)
        assert not gc.isenabled()  # a host's choice stays
    finally:
        gc.enable()
    assert gc.collect() == 0


def test_the_responses_copied_from_a_template_equal_those_built_directly() -> None:
    module = sys.modules["agentturn.tools.explore.alphabet"]  # (the package hides its name)
    for request_id in ("t0/r1", "t12.3/r7", "t1/r2"):
        copied = [(move.weight, move.event) for move in module._responses(request_id)]
        built = list(module._built_responses(request_id))
        assert copied == built
        assert [repr(event) for _, event in copied] == [repr(event) for _, event in built]
