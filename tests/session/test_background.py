"""The session's background bookkeeping and deferred automatic turns (BG-1 … BG-7)."""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, note

from agentturn import FieldError
from agentturn.session.background import (
    DEFAULT_MAX_DEFERRED,
    AutomaticKind,
    AutomaticTurn,
    Background,
    BackgroundKind,
    Baseline,
    Deferral,
    Deferred,
    defer,
    ended,
    is_related,
    notification_consumed,
    notification_queued,
    pop_next,
    release,
    relevant_input,
    snapshot_baseline,
    started,
    suppress_follow_ups,
)

AGENT, SHELL, MONITOR, WAKEUP = (BackgroundKind.AGENT, BackgroundKind.SHELL,
                                 BackgroundKind.MONITOR, BackgroundKind.WAKEUP)
CRON, NOTE, WAKE = AutomaticKind.CRON, AutomaticKind.NOTIFICATION, AutomaticKind.WAKEUP


def cron(turn_id: str, task: str, *, related: bool = False,
         recurring: bool = True) -> AutomaticTurn:
    return AutomaticTurn(turn_id=turn_id, kind=CRON, source_id=task, recurring=recurring,
                         related=related)


def note_turn(turn_id: str, source: str, *, related: bool = False) -> AutomaticTurn:
    return AutomaticTurn(turn_id=turn_id, kind=NOTE, source_id=source, related=related)


def held_ids(queue: Deferred) -> list[str]:
    return [turn.turn_id for turn in queue.turns]


def defer_all(queue: Deferred, *turns: AutomaticTurn) -> Deferred:
    for turn in turns:
        queue, _ = defer(queue, turn)
    return queue


# BG-1: the baseline ------------------------------------------------------------------------------


@pytest.mark.req("BG-1")
def test_baseline_holds_live_items_and_already_queued_notifications() -> None:
    """The boundary snapshot takes every live item id and every queued notification id."""
    bg = started(Background(), AGENT, "a1")
    bg = started(bg, WAKEUP, "w1")
    bg = started(bg, SHELL, "s1")
    bg = ended(bg, "s1")
    bg = notification_queued(bg, "n-s1", "s1")
    bg = snapshot_baseline(bg)
    assert bg.baseline == Baseline(item_ids=frozenset({"a1", "w1"}),
                                   notification_ids=frozenset({"n-s1"}))
    assert bg.chain_items == frozenset()
    assert not relevant_input(bg)


@pytest.mark.req("BG-1")
def test_a_new_boundary_replaces_the_old_baseline() -> None:
    """A second snapshot takes what is live and queued then, and forgets the old chain's items."""
    bg = snapshot_baseline(started(Background(), AGENT, "old"))
    bg = started(bg, MONITOR, "m1")
    assert relevant_input(bg) and is_related(bg, "m1")
    bg = snapshot_baseline(notification_queued(ended(bg, "old"), "n1", "m1"))
    assert bg.baseline == Baseline(item_ids=frozenset({"m1"}),
                                   notification_ids=frozenset({"n1"}))
    assert not is_related(bg, "m1")
    assert not relevant_input(bg)


# BG-2: relevance ---------------------------------------------------------------------------------


@pytest.mark.req("BG-2")
def test_only_items_started_after_the_boundary_are_relevant() -> None:
    """A live item is relevant input exactly when its id is not in the chain's baseline."""
    bg = snapshot_baseline(started(Background(), AGENT, "before"))
    assert not relevant_input(bg)
    for kind in BackgroundKind:
        with_new = started(bg, kind, f"new-{kind.value}")
        assert relevant_input(with_new), kind
        assert not relevant_input(ended(with_new, f"new-{kind.value}")), kind


@pytest.mark.req("BG-2")
def test_notification_relevance_follows_its_source_and_the_boundary() -> None:
    """A queued notification is relevant only when its source is the chain's and it is new."""
    bg = started(Background(), SHELL, "inherited")
    bg = snapshot_baseline(bg)
    bg = ended(started(bg, AGENT, "mine"), "mine")
    assert not relevant_input(bg)  # the chain's item ended and left nothing yet
    from_inherited = notification_queued(bg, "n-old", "inherited")
    assert not relevant_input(from_inherited)
    from_mine = notification_queued(bg, "n-mine", "mine")
    assert relevant_input(from_mine)
    assert not relevant_input(notification_consumed(from_mine, "n-mine"))


@pytest.mark.req("BG-2")
def test_a_notification_queued_at_the_boundary_is_never_relevant() -> None:
    """A notification id in the baseline stays irrelevant even if its source id starts again."""
    bg = ended(started(Background(), SHELL, "s"), "s")
    bg = snapshot_baseline(notification_queued(bg, "n1", "s"))
    bg = ended(started(bg, SHELL, "s"), "s")  # the same id, now started in this chain
    assert is_related(bg, "s")
    assert not relevant_input(bg)
    assert relevant_input(notification_queued(bg, "n2", "s"))


@pytest.mark.req("BG-2")
def test_an_id_in_the_baseline_never_becomes_the_chains() -> None:
    """An item that ends and restarts under a baseline id is still not relevant (BG-2 names ids)."""
    bg = snapshot_baseline(started(Background(), AGENT, "a"))
    bg = started(ended(bg, "a"), AGENT, "a")
    assert not relevant_input(bg)
    assert not is_related(bg, "a")
    assert not relevant_input(notification_queued(bg, "n", "a"))


@pytest.mark.req("BG-2")
@pytest.mark.req("SG-A10")
def test_is_related_is_true_exactly_for_sources_the_chain_started() -> None:
    """Automatic turns from items started in this chain are related, live or ended; others not."""
    bg = snapshot_baseline(started(Background(), MONITOR, "old"))
    bg = started(started(bg, WAKEUP, "w"), AGENT, "a")
    bg = ended(bg, "w")
    assert is_related(bg, "w") and is_related(bg, "a")
    assert not is_related(bg, "old")
    assert not is_related(bg, "cron-task-7")  # cron tasks are not background items
    assert not is_related(snapshot_baseline(bg), "a")


@pytest.mark.req("BG-2")
def test_work_before_the_first_boundary_and_a_chains_wakeup() -> None:
    """Before any boundary everything is new; after it, the chain's fired wakeup is relevant."""
    bg = started(Background(), AGENT, "x")
    bg = notification_queued(bg, "nx", "x")
    assert relevant_input(bg)  # before the first boundary the session's work is its own
    bg = snapshot_baseline(bg)
    assert not relevant_input(bg)
    bg = notification_queued(started(bg, WAKEUP, "w"), "nw", "w")
    assert [item.item_id for item in bg.live] == ["x", "w"]
    assert [(n.notification_id, n.source_id) for n in bg.queued] == [("nx", "x"), ("nw", "w")]
    assert relevant_input(ended(bg, "w"))


# BG-3: inherited work ----------------------------------------------------------------------------


@pytest.mark.req("BG-3")
def test_inherited_work_does_not_block_a_new_request() -> None:
    """Items, wakeups and notifications from an older request never make input relevant."""
    bg = started(started(Background(), AGENT, "agent"), WAKEUP, "wake")
    bg = started(bg, SHELL, "done-before")
    bg = ended(bg, "done-before")  # ends before the new request, notifies after it
    assert relevant_input(bg)
    bg = snapshot_baseline(bg)  # a new ordinary prompt
    assert not relevant_input(bg)
    bg = notification_queued(ended(bg, "wake"), "fired", "wake")
    bg = notification_queued(bg, "late", "done-before")
    bg = notification_queued(bg, "stranger", "never-seen")
    assert not relevant_input(bg)
    assert not any(is_related(bg, source) for source in ("agent", "wake", "done-before"))


# Absorbed timing and refused malformed input -------------------------------------------------


@pytest.mark.req("BG-2")
def test_unknown_or_repeated_ids_are_absorbed_unchanged() -> None:
    """Ending, consuming or re-reporting what the state does not expect returns it as it was."""
    bg = notification_queued(started(Background(), AGENT, "a"), "n", "a")
    assert ended(bg, "nope") is bg
    assert notification_consumed(bg, "nope") is bg
    assert started(bg, SHELL, "a") is bg
    assert notification_queued(bg, "n", "other") is bg
    assert ended(ended(bg, "a"), "a") == ended(bg, "a")


@pytest.mark.req("BG-2")
def test_malformed_input_raises_a_field_error() -> None:
    """A bad kind or a non-str or empty id is refused with a FieldError naming the field."""
    bg = Background()
    bad: list[Any] = [
        lambda: started(bg, "agent", "a"), lambda: started(bg, AGENT, ""),
        lambda: ended(bg, 3), lambda: notification_queued(bg, "n", ""),
        lambda: notification_consumed(bg, None), lambda: is_related(bg, ""),
    ]
    for call in bad:
        with pytest.raises(FieldError):
            call()


# BG-6, BG-5: the deferred queue ----------------------------------------------------------------


@pytest.mark.req("BG-6")
def test_recurring_cron_fires_coalesce_per_task_in_place() -> None:
    """A second held fire of one task merges into the first, which keeps its place and counts."""
    queue = defer_all(Deferred(), cron("c1", "A"), note_turn("n1", "x"), cron("c2", "B"))
    queue, outcome = defer(queue, cron("c3", "A"))
    assert outcome.result is Deferral.COALESCED
    assert outcome.into is not None and outcome.into.turn_id == "c1"
    queue, _ = defer(queue, cron("c4", "A"))
    assert held_ids(queue) == ["c1", "n1", "c2"]
    assert [turn.coalesced for turn in queue.turns] == [2, 0, 0]


@pytest.mark.req("BG-6")
def test_only_recurring_cron_fires_of_the_same_task_and_relation_coalesce() -> None:
    """One-shot fires, notifications, other tasks and a different relation are each held."""
    queue = defer_all(Deferred(), cron("c1", "A"), cron("c2", "A", recurring=False),
                      cron("c3", "B"), cron("c4", "A", related=True), note_turn("n1", "A"),
                      note_turn("n2", "A"))
    assert held_ids(queue) == ["c1", "c2", "c3", "c4", "n1", "n2"]
    assert all(turn.coalesced == 0 for turn in queue.turns)


@pytest.mark.req("BG-6")
def test_a_stalled_recurring_cron_never_grows_the_queue() -> None:
    """A thousand fires of one task while held stay one entry."""
    queue = Deferred(max_deferred=2)
    for n in range(1000):
        queue, outcome = defer(queue, cron(f"c{n}", "tick"))
        assert outcome.result is (Deferral.QUEUED if n == 0 else Deferral.COALESCED)
    assert held_ids(queue) == ["c0"]
    assert queue.turns[0].coalesced == 999


@pytest.mark.req("BG-6")
def test_a_full_queue_evicts_its_oldest_unrelated_turn() -> None:
    """At the bound the oldest unrelated turn goes, is reported, and related turns stay."""
    queue = defer_all(Deferred(max_deferred=3), note_turn("r1", "a", related=True),
                      cron("u1", "A"), note_turn("u2", "b"))
    queue, outcome = defer(queue, note_turn("u3", "c"))
    assert (outcome.result, outcome.evicted) == (Deferral.QUEUED, cron("u1", "A"))
    assert held_ids(queue) == ["r1", "u2", "u3"]
    queue, outcome = defer(queue, note_turn("r2", "d", related=True))
    assert outcome.evicted is not None and outcome.evicted.turn_id == "u2"
    assert held_ids(queue) == ["r1", "u3", "r2"]
    assert len(queue.turns) == queue.max_deferred


@pytest.mark.req("BG-5")
def test_a_queue_full_of_related_turns_never_loses_one() -> None:
    """Full of related turns, an unrelated newcomer is dropped and a related one is handed back."""
    queue = defer_all(Deferred(max_deferred=2), note_turn("r1", "a", related=True),
                      cron("r2", "T", related=True))
    after, outcome = defer(queue, note_turn("u", "b"))
    assert (after, outcome.result, outcome.turn.turn_id) == (queue, Deferral.DROPPED, "u")
    after, outcome = defer(queue, note_turn("r3", "c", related=True))
    assert (after, outcome.result, outcome.turn.turn_id) == (queue, Deferral.REFUSED, "r3")
    after, outcome = defer(queue, cron("r4", "T", related=True))
    assert outcome.result is Deferral.COALESCED and held_ids(after) == ["r1", "r2"]


@pytest.mark.req("BG-5")
def test_release_and_pop_hand_turns_back_in_fifo_order() -> None:
    """Release returns every held turn oldest first and empties the queue; pop takes the front."""
    queue = defer_all(Deferred(max_deferred=5), cron("c1", "A"), note_turn("n1", "x"),
                      AutomaticTurn(turn_id="w1", kind=WAKE, source_id="w", related=True))
    popped_queue, first = pop_next(queue)
    assert first is not None and first.turn_id == "c1"
    assert held_ids(popped_queue) == ["n1", "w1"]
    empty, turns = release(queue)
    assert [turn.turn_id for turn in turns] == ["c1", "n1", "w1"]
    assert empty == Deferred(max_deferred=5)
    assert pop_next(empty) == (empty, None)
    assert release(empty) == (empty, ())


@pytest.mark.req("BG-5")
def test_a_turn_id_already_held_is_not_held_twice() -> None:
    """Deferring the same turn id again is reported as a duplicate and changes nothing."""
    queue = defer_all(Deferred(), note_turn("n1", "x"))
    after, outcome = defer(queue, note_turn("n1", "y"))
    assert (after, outcome.result) == (queue, Deferral.DUPLICATE)


@pytest.mark.req("BG-6")
def test_bad_bounds_and_turns_are_refused() -> None:
    """The bound is an int of at least 1, only cron turns recur, and defer takes turns only."""
    flag_like_turn: Any = "turn"
    assert Deferred().max_deferred == DEFAULT_MAX_DEFERRED == 32
    for bound in (0, -1, True, 2.0):
        with pytest.raises(FieldError):
            Deferred(max_deferred=bound)
    with pytest.raises(FieldError):
        AutomaticTurn(turn_id="n", kind=NOTE, source_id="x", recurring=True)
    with pytest.raises(FieldError):
        AutomaticTurn(turn_id="", kind=CRON, source_id="x")
    with pytest.raises(FieldError):
        defer(Deferred(), flag_like_turn)


# The queue's invariants over random histories (BG-5, BG-6) --------------------------------------

_turn_specs = st.tuples(st.sampled_from([CRON, CRON, NOTE, WAKE]), st.sampled_from("AB"),
                        st.booleans(), st.booleans())
_queue_ops = st.lists(st.one_of(  # "defer" twice: it is the step worth drawing most often
    st.tuples(st.just("defer"), _turn_specs, st.integers(0, 9)),
    st.tuples(st.just("defer"), _turn_specs, st.integers(0, 9)),
    st.tuples(st.just("release")), st.tuples(st.just("pop"))), min_size=1, max_size=60)


@pytest.mark.req("BG-6")
@pytest.mark.req("BG-5")
@given(bound=st.integers(1, 3), ops=_queue_ops)
def test_the_queue_is_bounded_fifo_and_loses_nothing_silently(
        bound: int, ops: list[tuple[Any, ...]]) -> None:
    """Whatever is deferred, released or popped: bounded, FIFO, related kept, all accounted."""
    queue = Deferred(max_deferred=bound)
    fate: dict[str, str] = {}  # turn id -> held | into:<id> | out | evicted | dropped | refused
    admitted: dict[str, int] = {}  # turn id -> admission order
    related: dict[str, bool] = {}
    handed_back: list[str] = []
    serial = 0
    for op in ops:
        note(repr(op))
        before = queue
        if op[0] == "defer":
            (kind, source, recurring, is_rel), reuse = op[1], op[2]
            held_now = held_ids(queue)
            turn_id = (held_now[reuse % len(held_now)] if held_now and reuse == 0
                       else f"t{serial}")
            serial += 1
            turn = AutomaticTurn(turn_id=turn_id, kind=kind, source_id=source,
                                 recurring=recurring and kind is CRON, related=is_rel)
            queue, outcome = defer(queue, turn)
            assert outcome.turn == turn
            twin = [t for t in before.turns if t.recurring and turn.recurring
                    and t.source_id == turn.source_id and t.related == turn.related]
            if turn_id in fate:
                assert outcome.result is Deferral.DUPLICATE and queue == before
                continue
            related[turn_id] = is_rel
            if twin:
                assert outcome.result is Deferral.COALESCED and outcome.into is not None
                assert outcome.into.turn_id == twin[0].turn_id
                assert held_ids(queue) == held_ids(before)
                fate[turn_id] = f"into:{twin[0].turn_id}"
            elif not before.full:
                assert outcome.result is Deferral.QUEUED and outcome.evicted is None
                fate[turn_id], admitted[turn_id] = "held", serial
            elif any(not t.related for t in before.turns):
                oldest = next(t for t in before.turns if not t.related)
                assert outcome.result is Deferral.QUEUED and outcome.evicted == oldest
                fate[oldest.turn_id] = "evicted"
                fate[turn_id], admitted[turn_id] = "held", serial
            else:
                expected = Deferral.REFUSED if is_rel else Deferral.DROPPED
                assert outcome.result is expected and queue == before
                fate[turn_id] = expected.value
        elif op[0] == "release":
            queue, turns = release(queue)
            assert turns == before.turns and not queue.turns
            handed_back += [t.turn_id for t in turns]
        else:
            queue, turn = pop_next(queue)
            assert turn == (before.turns[0] if before.turns else None)
            handed_back += [turn.turn_id] if turn else []
        for turn_id in handed_back:
            fate[turn_id] = "out"
        # The invariants, after every step.
        assert queue.max_deferred == bound and len(queue.turns) <= bound
        assert set(held_ids(queue)) == {t for t, f in fate.items() if f == "held"}
        assert [admitted[t] for t in held_ids(queue)] == sorted(admitted[t]
                                                                for t in held_ids(queue))
        assert [admitted[t] for t in handed_back] == sorted(admitted[t] for t in handed_back)
        assert not [t for t, f in fate.items() if related[t] and f in ("evicted", "dropped")]
        merged_into = [f[5:] for f in fate.values() if f.startswith("into:")]
        for turn in queue.turns:
            assert turn.coalesced == merged_into.count(turn.turn_id)
        for target in merged_into:
            assert fate[target] in ("held", "out", "evicted")


# BG-1, BG-2, BG-3 over random histories --------------------------------------------------------

_ids = st.sampled_from(["a", "b"])
_bg_ops = st.lists(st.one_of(
    st.tuples(st.just("start"), st.sampled_from(list(BackgroundKind)), _ids),
    st.tuples(st.just("end"), _ids),
    st.tuples(st.just("queue"), st.sampled_from(["n1", "n2"]), _ids),
    st.tuples(st.just("consume"), st.sampled_from(["n1", "n2"])),
    st.tuples(st.just("boundary"),)), min_size=1, max_size=40)


@pytest.mark.req("BG-2")
@pytest.mark.req("BG-3")
@given(ops=_bg_ops)
def test_relevance_matches_the_rule_over_any_history(ops: list[tuple[Any, ...]]) -> None:
    """Relevance and relation agree with BG-2 read off the history since the last boundary."""
    bg = Background()
    history: list[tuple[Any, ...]] = []
    for op in ops:
        if op[0] == "start":
            bg = started(bg, op[1], op[2])
        elif op[0] == "end":
            bg = ended(bg, op[1])
        elif op[0] == "queue":
            bg = notification_queued(bg, op[1], op[2])
        elif op[0] == "consume":
            bg = notification_consumed(bg, op[1])
        else:
            bg = snapshot_baseline(bg)
        history.append(op)
        # The model: replay the history with plain sets.
        live: dict[str, BackgroundKind] = {}
        queued: dict[str, str] = {}
        base_items: set[str] = set()
        base_notes: set[str] = set()
        owned: set[str] = set()
        for step in history:
            if step[0] == "start" and step[2] not in live:
                live[step[2]] = step[1]
                if step[2] not in base_items:
                    owned.add(step[2])
            elif step[0] == "end":
                live.pop(step[1], None)
            elif step[0] == "queue":
                queued.setdefault(step[1], step[2])
            elif step[0] == "consume":
                queued.pop(step[1], None)
            elif step[0] == "boundary":
                base_items, base_notes, owned = set(live), set(queued), set()
        assert {(i.item_id, i.kind) for i in bg.live} == set(live.items())
        assert {(n.notification_id, n.source_id) for n in bg.queued} == set(queued.items())
        assert bg.baseline == Baseline(item_ids=frozenset(base_items),
                                       notification_ids=frozenset(base_notes))
        expected = (any(item not in base_items for item in live)
                    or any(nid not in base_notes and source in owned
                           for nid, source in queued.items()))
        assert relevant_input(bg) is expected
        for source in "ab":
            assert is_related(bg, source) is (source in owned)
            assert not (source in base_items and is_related(bg, source))


# BG-7: follow-up suggestions ---------------------------------------------------------------------


@pytest.mark.req("BG-7")
def test_follow_ups_are_suppressed_while_the_chain_can_resume_or_a_prompt_waits() -> None:
    """Suggestions run only when no guard chain can resume and no complete FIFO prompt waits."""
    assert suppress_follow_ups(chain_can_resume=True, queued_prompt_has_priority=False)
    assert suppress_follow_ups(chain_can_resume=False, queued_prompt_has_priority=True)
    assert suppress_follow_ups(chain_can_resume=True, queued_prompt_has_priority=True)
    assert not suppress_follow_ups(chain_can_resume=False, queued_prompt_has_priority=False)
    flag: Any = 1
    with pytest.raises(FieldError):
        suppress_follow_ups(chain_can_resume=flag, queued_prompt_has_priority=False)
