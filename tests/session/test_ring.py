"""The session's event ring, one requirement at a time (OB-5, OB-6, BR-5), and its invariants."""

from __future__ import annotations

import math
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, note
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from agentturn import FieldError
from agentturn.guard import (
    DISCRETE_MARKER,
    GUARD_SOURCE,
    GuardChunkMeta,
    continuation_text,
    exhaustion_text,
)
from agentturn.session.ring import (
    DEFAULT_CAPACITY,
    DEFAULT_PINNED_CAPACITY,
    EntryKind,
    EventRing,
    Meta,
    RingEntry,
    Usage,
    count_model_call,
    is_discrete,
    publish,
    replay,
)

CHUNK = EntryKind.MESSAGE_CHUNK
GUARD = EntryKind.GUARD_CHUNK


def guard_meta(attempt: int, unfinished: int = 3) -> dict[str, object]:
    return GuardChunkMeta(attempt=attempt, unfinished=unfinished).as_meta()


def feed(ring: EventRing, *items: tuple[Any, ...]) -> tuple[EventRing, list[RingEntry]]:
    """Publish each ``(kind, message_id, text[, meta])`` in turn."""
    published = []
    for item in items:
        ring, entry = publish(ring, *item)
        published.append(entry)
    return ring, published


def chunks(message_id: str, *texts: str) -> list[tuple[Any, ...]]:
    return [(CHUNK, message_id, text) for text in texts]


def texts(entries: tuple[RingEntry, ...]) -> list[str]:
    return [entry.text for entry in entries]


# OB-6: guard events stay separate and survive rollover ------------------------------------------


@pytest.mark.req("OB-6")
def test_both_guard_attempts_survive_many_rollovers_with_their_exact_meta() -> None:
    """Two guard attempts published among many chunks are still replayed, apart, after rollover."""
    ring = EventRing.create(capacity=8, pinned_capacity=4)
    first = (GUARD, "g1", continuation_text(1, 3), guard_meta(1))
    second = (GUARD, "g2", continuation_text(2, 3), guard_meta(2))
    filler = [(CHUNK, f"m{n // 3}", f"t{n} ") if n % 7 else (EntryKind.NOTICE, f"n{n}", "note")
              for n in range(300)]
    ring, published = feed(ring, *chunks("m-a", "x", "y"), first, *chunks("m-a", "z"), second,
                           *filler)
    attempts = [entry for entry in replay(ring).entries if entry.kind is GUARD]
    assert attempts == [published[2], published[4]]
    assert [entry.meta for entry in attempts] == [guard_meta(1), guard_meta(2)]
    assert [entry.meta.as_dict() for entry in attempts if entry.meta] == [guard_meta(1),
                                                                        guard_meta(2)]
    assert [entry.text for entry in attempts] == [continuation_text(1, 3), continuation_text(2, 3)]
    assert all(entry.discrete and not entry.merged for entry in attempts)
    assert replay(ring).gap


@pytest.mark.req("OB-6")
def test_identical_discrete_entries_are_never_merged() -> None:
    """Discrete entries with equal text, id and meta stay separate, whatever their kind."""
    same = (GUARD, "m", "same", guard_meta(1))
    chunk_like = (CHUNK, "m", "same", guard_meta(1))
    ring = EventRing.create(capacity=3, pinned_capacity=4)
    ring, published = feed(ring, same, same, chunk_like, chunk_like)
    held = replay(ring).entries
    assert held == tuple(published)
    assert [entry.seq for entry in held] == [1, 2, 3, 4]
    assert not any(entry.merged for entry in held)


@pytest.mark.req("OB-6")
def test_a_guard_entry_is_never_merged_with_the_text_around_it() -> None:
    """Chunks on both sides of a guard entry merge only with their own side, in order."""
    ring = EventRing.create(capacity=5, pinned_capacity=2)
    ring, published = feed(ring, *chunks("m", "a", "b"), (GUARD, "m", "guard", guard_meta(1)),
                           *chunks("m", "c", "d"), (CHUNK, "m", "e"))
    held = replay(ring).entries
    assert texts(held) == ["ab", "guard", "cde"]
    assert held[1] == published[2]
    assert [(entry.first_seq, entry.seq) for entry in held] == [(1, 2), (3, 3), (4, 6)]


@pytest.mark.req("OB-6")
def test_chunks_of_one_message_merge_only_when_the_ring_rolls_over() -> None:
    """A full ring is left as published; the next append merges the message's chunks into one."""
    ring = EventRing.create(capacity=4, pinned_capacity=2)
    ring, published = feed(ring, *chunks("m", "He", "ll", "o", ","))
    assert replay(ring).entries == tuple(published)
    ring, last = publish(ring, CHUNK, "m", " world")
    (merged,) = replay(ring).entries
    assert (merged.text, merged.first_seq, merged.seq, merged.merged) == ("Hello, world", 1, 5,
                                                                         True)
    assert merged.seq == last.seq
    assert not replay(ring).gap


@pytest.mark.req("OB-6")
def test_chunks_of_different_messages_or_metas_are_not_merged() -> None:
    """Only adjacent chunks of one message with equal meta merge; else the oldest is dropped."""
    ring = EventRing.create(capacity=3, pinned_capacity=2)
    ring, published = feed(ring, *chunks("m1", "a"), *chunks("m2", "b"), *chunks("m1", "c"),
                           *chunks("m2", "d"))
    assert replay(ring).entries == tuple(published[1:])
    assert replay(ring).gap
    ring = EventRing.create(capacity=2, pinned_capacity=2)
    ring, published = feed(ring, (CHUNK, "m", "x", {"n": 1}), (CHUNK, "m", "y", {"n": True}),
                           (CHUNK, "m", "z", {"n": 1.0}))
    assert replay(ring).entries == tuple(published[1:])


@pytest.mark.req("OB-6")
def test_the_pinned_store_keeps_the_newest_guard_entries() -> None:
    """Past ``pinned_capacity`` the oldest pinned guard entry goes and replay reports the gap."""
    ring = EventRing.create(capacity=2, pinned_capacity=2)
    items = []
    for stage, attempt in ((1, 1), (1, 2), (2, 1)):
        items += [(GUARD, f"g{stage}.{attempt}", continuation_text(attempt, 3),
                   guard_meta(attempt)), *chunks(f"m{stage}.{attempt}", "p", "q")]
        items += [(EntryKind.TURN_ENDED, f"t{stage}.{attempt}", "")]
    ring, published = feed(ring, *items)
    guards = [entry for entry in published if entry.discrete]
    result = replay(ring)
    assert [entry for entry in result.entries if entry.discrete] == guards[1:]
    assert result.gap
    assert len(ring.pinned) == 2


@pytest.mark.req("OB-6")
def test_is_discrete_needs_both_the_marker_and_the_guard_source() -> None:
    """Only ``qwenDiscreteMessage: True`` together with the guard source makes an event discrete."""
    assert is_discrete(guard_meta(1))
    assert is_discrete(Meta.of(guard_meta(2)))
    assert not is_discrete({DISCRETE_MARKER: True, "source": "other"})
    assert not is_discrete({"source": GUARD_SOURCE})
    assert not is_discrete({DISCRETE_MARKER: 1, "source": GUARD_SOURCE})
    assert not is_discrete(None)


# Replay and the seq rule (BR-4, BR-5) -----------------------------------------------------------


@pytest.mark.req("BR-5")
def test_events_published_with_no_subscriber_are_all_replayed_later() -> None:
    """A turn published while nobody listens, guard attempts included, is replayed whole."""
    ring = EventRing.create()
    exhausted = {"source": GUARD_SOURCE, DISCRETE_MARKER: True, "unfinishedCount": 2}
    turn = [*chunks("a1", "Working", " on it."), (GUARD, "g1", continuation_text(1, 2),
                                                   guard_meta(1, 2)),
            *chunks("a2", "More", " work."), (GUARD, "g2", continuation_text(2, 2),
                                               guard_meta(2, 2)),
            *chunks("a3", "Blocked."),
            (EntryKind.GUARD_EXHAUSTED, "x1", exhaustion_text(2), exhausted),
            (EntryKind.TURN_ENDED, "t1", "")]
    ring, published = feed(ring, *turn)
    result = replay(ring)
    assert result.entries == tuple(published)
    assert (result.gap, result.overlap, result.last_seq) == (False, False, len(turn))


@pytest.mark.req("BR-5")
def test_bounded_guard_attempts_are_replayed_after_rollover() -> None:
    """After many unobserved turns the latest guard events are still replayable, with a gap."""
    ring = EventRing.create(capacity=16, pinned_capacity=4)
    published: list[RingEntry] = []
    for turn in range(40):
        ring, entries = feed(ring, *chunks(f"a{turn}", "one", "two", "three"),
                             (GUARD, f"g{turn}", continuation_text(1 + turn % 2, 2),
                              guard_meta(1 + turn % 2, 2)),
                             (EntryKind.TURN_ENDED, f"t{turn}", ""))
        published += entries
    result = replay(ring)
    guards = [entry for entry in published if entry.discrete]
    held = [entry for entry in result.entries if entry.discrete]
    assert len(held) >= 4  # the pinned four, and those the live ring still holds
    assert held == guards[-len(held):]
    assert result.gap
    assert result.entries[-1] == published[-1]


@pytest.mark.req("BR-5")
def test_replay_after_a_seq_returns_only_newer_entries_and_reports_gaps() -> None:
    """``after_seq`` selects newer entries; ``gap`` is set only if one of those was dropped."""
    ring = EventRing.create(capacity=3, pinned_capacity=2)
    ring, published = feed(ring, *chunks("m1", "a"), *chunks("m2", "b"),
                           (GUARD, "g", "guard", guard_meta(1)), *chunks("m3", "c"),
                           *chunks("m4", "d"), *chunks("m5", "e"), *chunks("m6", "f"))
    # held: the guard (seq 3, pinned) and d, e, f (5 ... 7); a, b and c (1, 2, 4) were dropped.
    assert replay(ring, after_seq=4).entries == tuple(published[4:])
    assert not replay(ring, after_seq=4).gap
    assert replay(ring, after_seq=3).entries == tuple(published[4:])
    assert replay(ring, after_seq=3).gap
    assert replay(ring, after_seq=2).entries == (published[2], *published[4:])
    assert replay(ring, after_seq=0) == replay(ring)
    assert replay(ring).gap
    assert replay(ring, after_seq=7).entries == ()
    assert replay(ring, after_seq=99) == replay(ring, after_seq=7)
    assert not replay(ring, after_seq=7).gap
    assert replay(ring, after_seq=7).last_seq == 7


@pytest.mark.req("BR-5")
def test_a_merged_entry_is_resent_whole_and_flagged_as_overlapping() -> None:
    """A client that saw part of a merged message gets all of it again, with ``overlap`` set."""
    ring = EventRing.create(capacity=3, pinned_capacity=2)
    ring, _ = feed(ring, *chunks("m", "a", "b", "c", "d"))
    result = replay(ring, after_seq=2)
    assert texts(result.entries) == ["abcd"]
    assert (result.overlap, result.gap) == (True, False)
    assert not replay(ring, after_seq=0).overlap


def test_empty_ring_replays_nothing() -> None:
    """A new ring has nothing to replay and no gap; defaults are the documented bounds."""
    ring = EventRing.create()
    assert (ring.capacity, ring.pinned_capacity) == (DEFAULT_CAPACITY, DEFAULT_PINNED_CAPACITY)
    result = replay(ring)
    assert (result.entries, result.gap, result.overlap, result.last_seq) == ((), False, False, 0)


# OB-5: usage ------------------------------------------------------------------------------------


@pytest.mark.req("OB-5")
def test_usage_counts_guard_calls_as_model_calls() -> None:
    """Each guard continuation is one more model call, also counted as a guard call."""
    usage = Usage()
    usage = count_model_call(usage)
    usage = count_model_call(usage, guard=True)
    usage = count_model_call(usage, guard=True, hook=True)
    usage = count_model_call(usage, hook=True)
    assert (usage.model_calls, usage.guard_calls, usage.hook_calls) == (4, 2, 2)


@pytest.mark.req("OB-5")
@pytest.mark.parametrize("flags", [{"guard": 1}, {"hook": None}, {"guard": "yes"}])
def test_usage_refuses_non_bool_flags(flags: dict[str, Any]) -> None:
    """``count_model_call`` takes bools only, so a truthy value cannot miscount a call."""
    with pytest.raises(FieldError, match=next(iter(flags))):
        count_model_call(Usage(), **flags)


@pytest.mark.req("OB-5")
def test_usage_parts_cannot_exceed_model_calls() -> None:
    """Guard and hook calls are parts of the model calls, never more."""
    with pytest.raises(FieldError, match="guard_calls"):
        Usage(model_calls=1, guard_calls=2)
    with pytest.raises(FieldError, match="model_calls"):
        Usage(model_calls=-1)


# Validation and immutability --------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "name"), [
    ({"capacity": 0}, "capacity"),
    ({"capacity": -5}, "capacity"),
    ({"capacity": True}, "capacity"),
    ({"capacity": 2.0}, "capacity"),
    ({"capacity": "8"}, "capacity"),
    ({"pinned_capacity": 1}, "pinned_capacity"),
    ({"pinned_capacity": None}, "pinned_capacity"),
])
def test_create_refuses_bad_bounds(fields: dict[str, Any], name: str) -> None:
    """A bad bound raises FieldError naming the field."""
    with pytest.raises(FieldError, match=f"EventRing.{name} "):
        EventRing.create(**fields)


@pytest.mark.parametrize(("args", "name"), [
    (("message_chunk", "m", "t"), "kind"),
    ((CHUNK, "", "t"), "message_id"),
    ((CHUNK, 7, "t"), "message_id"),
    ((CHUNK, "m\ud800", "t"), "message_id"),
    ((CHUNK, "m", None), "text"),
    ((CHUNK, "m", b"t"), "text"),
    ((CHUNK, "m", "lone \udfff surrogate"), "text"),
    ((CHUNK, "m", "t", ["a"]), "meta"),
    ((CHUNK, "m", "t", {1: "x"}), "meta"),
    ((CHUNK, "m", "t", {"x": math.nan}), "meta"),
    ((CHUNK, "m", "t", {"x": {"y": [math.inf]}}), "meta"),
    ((CHUNK, "m", "t", {"x": object()}), "meta"),
    ((CHUNK, "m", "t", {"x": {1, 2}}), "meta"),
    ((CHUNK, "m", "t", {"x": "\ud800"}), "meta"),
    ((CHUNK, "m", "t", {"\ud800": 1}), "meta"),
    ((GUARD, "m", "t"), "meta"),
    ((GUARD, "m", "t", {**guard_meta(1), DISCRETE_MARKER: 1}), "meta"),
])
def test_publish_refuses_bad_fields_and_changes_nothing(args: tuple[Any, ...], name: str) -> None:
    """Bad input raises FieldError naming the field; the ring is left as it was."""
    ring, _ = feed(EventRing.create(capacity=2, pinned_capacity=2), *chunks("m", "a", "b"))
    before = replay(ring)
    with pytest.raises(FieldError, match=f"RingEntry.{name}"):
        publish(ring, *args)
    assert replay(ring) == before
    assert publish(ring, CHUNK, "m", "c")[1].seq == 3


def test_meta_nested_too_deep_is_refused() -> None:
    """Meta nesting is bounded, so a hostile value cannot blow the stack."""
    deep: Any = 1
    for _ in range(40):
        deep = {"x": deep}
    with pytest.raises(FieldError, match="deeper"):
        publish(EventRing.create(), CHUNK, "m", "t", deep)


@pytest.mark.parametrize("after", [-1, 1.0, "3", True])
def test_replay_refuses_a_bad_after_seq(after: Any) -> None:
    """``after_seq`` is None or a non-negative int."""
    with pytest.raises(FieldError, match="after_seq"):
        replay(EventRing.create(), after)


def test_meta_is_frozen_when_published() -> None:
    """A host mutating its dict after publishing cannot change the kept entry."""
    wire: dict[str, Any] = {**guard_meta(1), "extra": {"list": [1, 2]}}
    ring, entry = publish(EventRing.create(), GUARD, "g", "text", wire)
    wire["attempt"] = 99
    wire["extra"]["list"].append(3)
    kept = replay(ring).entries[0]
    assert kept.meta is not None
    assert kept.meta["attempt"] == 1
    assert kept.meta["extra"] == {"list": [1, 2]}
    assert kept.meta.as_dict() == {**guard_meta(1), "extra": {"list": [1, 2]}}
    assert hash(kept) == hash(entry)
    with pytest.raises(TypeError):
        kept.meta["attempt"] = 2  # type: ignore[index]
    with pytest.raises(AttributeError):
        kept.text = "changed"  # type: ignore[misc]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                               max_size=3),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=4), JSON, max_size=4))
def test_meta_round_trips_any_json_object(value: dict[str, Any]) -> None:
    """Freezing keeps every JSON object exactly: equal, same hash when frozen twice, same dict."""
    meta = Meta.of(value)
    assert meta == value
    assert meta.as_dict() == value
    assert Meta.of(meta.as_dict()) == meta
    assert hash(Meta.of(value)) == hash(meta)


# Random publishes and replays, invariants checked on every step --------------------------------

#: Metas a chunk may carry: ``label -> meta``; labels 4 and 5 are discrete.
METAS: list[dict[str, object] | None] = [
    None, {"n": 1}, {"n": True}, {"n": 1.0}, guard_meta(1), guard_meta(2),
    {"source": GUARD_SOURCE, DISCRETE_MARKER: 1}, {"source": "other", DISCRETE_MARKER: True},
]
DISCRETE_LABELS = {4, 5}


def label(meta: Meta | None) -> int:
    if meta is None:
        return 0
    return next(n for n, candidate in enumerate(METAS) if candidate is not None
                and meta == candidate)


class RingHost(RuleBasedStateMachine):
    """A session publishing random events into one ring while clients replay at random."""

    @initialize(capacity=st.integers(1, 6), pinned=st.integers(2, 4))
    def create(self, capacity: int, pinned: int) -> None:
        self.ring = EventRing.create(capacity=capacity, pinned_capacity=pinned)
        self.calls: list[tuple[Any, ...]] = []
        self.published: list[RingEntry] = []
        #: The specification, naively: (first_seq, seq, kind, message_id, text, meta label).
        self.model: list[tuple[int, int, EntryKind, str, str, int]] = []

    @rule(kind=st.sampled_from([CHUNK] * 6 + [GUARD, *EntryKind]),
          message=st.sampled_from(["m1", "m2", "m3"]),
          text=st.sampled_from(["", "a", "b", "é", "ab", "🙂"]),
          meta=st.integers(0, len(METAS) - 1))
    def publish(self, kind: EntryKind, message: str, text: str, meta: int) -> None:
        if kind is GUARD and meta not in DISCRETE_LABELS:
            meta = 4
        call = (kind, message, text, METAS[meta])
        note(f"publish{call}")
        self.ring, entry = publish(self.ring, *call)
        self.calls.append(call)
        self.published.append(entry)
        assert entry.seq == len(self.published)
        self.model_publish((entry.seq, entry.seq, kind, message, text, meta))

    def model_publish(self, new: tuple[int, int, EntryKind, str, str, int]) -> None:
        """Append; on overflow merge every mergeable run, then drop the oldest if still over."""
        entries = [*self.model, new]
        if len(entries) > self.ring.capacity:
            merged: list[tuple[int, int, EntryKind, str, str, int]] = []
            for item in entries:
                last = merged[-1] if merged else None
                if (last is not None and last[2] is CHUNK and item[2] is CHUNK
                        and last[3] == item[3] and last[5] == item[5]
                        and item[5] not in DISCRETE_LABELS):
                    merged[-1] = (last[0], item[1], CHUNK, item[3], last[4] + item[4], item[5])
                else:
                    merged.append(item)
            entries = merged[-self.ring.capacity:]
        self.model = entries

    @rule(data=st.data())
    def client_replays(self, data: st.DataObject) -> None:
        after = data.draw(st.none() | st.integers(0, len(self.published) + 2), label="after")
        full = replay(self.ring)
        result = replay(self.ring, after)
        bound = after or 0
        assert result.entries == tuple(e for e in full.entries if e.seq > bound)
        assert result.overlap == (bool(result.entries) and result.entries[0].first_seq <= bound)

    @invariant()
    def live_ring_matches_the_specification(self) -> None:
        if not hasattr(self, "ring"):
            return
        live = [(e.first_seq, e.seq, e.kind, e.message_id, e.text, label(e.meta))
                for e in self.ring.live]
        assert live == self.model

    @invariant()
    def bounded_ordered_and_faithful(self) -> None:
        if not hasattr(self, "ring"):
            return
        ring, published = self.ring, self.published
        held = replay(ring).entries
        assert len(ring.live) <= ring.capacity and len(ring.pinned) <= ring.pinned_capacity
        assert len(held) <= ring.capacity + ring.pinned_capacity
        seqs = [entry.seq for entry in held]
        assert seqs == sorted(set(seqs))
        if published:  # the newest entry is always held (perhaps merged into)
            assert held[-1].seq == published[-1].seq
        for entry in held:  # no text invented, reordered or re-labelled
            if not entry.merged:
                assert entry == published[entry.seq - 1]
                continue
            parts = published[entry.first_seq - 1:entry.seq]
            assert all(p.kind is CHUNK and p.message_id == entry.message_id
                       and p.meta == entry.meta and not p.discrete for p in parts)
            assert entry.text == "".join(p.text for p in parts)

    @invariant()
    def each_message_keeps_a_suffix_of_its_text(self) -> None:
        if not hasattr(self, "ring"):
            return
        held = [e for e in replay(self.ring).entries if e.kind is CHUNK and not e.discrete]
        for message in {e.message_id for e in held}:
            mine = [e for e in held if e.message_id == message]
            sent = [p.text for p in self.published
                    if p.kind is CHUNK and not p.discrete and p.message_id == message
                    and p.seq >= mine[0].first_seq]
            assert "".join(e.text for e in mine) == "".join(sent)

    @invariant()
    def newest_guard_entries_survive(self) -> None:
        if not hasattr(self, "ring"):
            return
        held = set(replay(self.ring).entries)
        guards = [entry for entry in self.published if entry.discrete]
        assert all(entry in held for entry in guards[len(guards) - self.ring.pinned_capacity:])

    @invariant()
    def gap_iff_something_newer_was_dropped(self) -> None:
        if not hasattr(self, "ring"):
            return
        covered = {seq for e in replay(self.ring).entries for seq in range(e.first_seq, e.seq + 1)}
        last = len(self.published)
        newest_lost = max((seq for seq in range(1, last + 1) if seq not in covered), default=0)
        for after in range(last + 2):
            assert replay(self.ring, after).gap == (after < newest_lost), after

    def teardown(self) -> None:
        if not hasattr(self, "ring"):
            return
        again = EventRing.create(capacity=self.ring.capacity,
                                 pinned_capacity=self.ring.pinned_capacity)
        again, _ = feed(again, *self.calls)
        assert again == self.ring, "publishing is deterministic"


TestRingHost = pytest.mark.req("OB-6", "BR-5")(RingHost.TestCase)
