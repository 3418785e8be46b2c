"""The session's bounded event ring with replay, and its model-call usage (OB-5, OB-6, BR-5).

Theory of operation
-------------------
Every event the session publishes to its clients (agent text chunks, guard continuations, the
exhaustion message, turn ends, notices) goes through :func:`publish`, which gives it the next
sequence number (1, 2, 3, ...) and keeps it in an :class:`EventRing`. A client that connects
late, or reconnects after a disconnect (BR-4, BR-5), asks :func:`replay` for everything after the
last ``seq`` it saw. Nobody needs to be subscribed for an event to be kept (BR-5).

The ring is bounded whatever the number of appends:

* The *live* ring keeps at most ``capacity`` entries, in ``seq`` order. An append to a full live
  ring *rolls it over*: first **replay compaction** merges every run of adjacent *mergeable*
  entries into one entry; then, only if nothing could be merged, the **oldest entry is dropped**.
  Two entries are mergeable when both are ``MESSAGE_CHUNK`` entries of the same ``message_id``
  with equal ``meta`` and neither is discrete: ordinary text of one assistant message. Nothing is
  merged before the ring is full, so a client that keeps up sees every chunk as published.
* **Seq rule.** A merged entry takes the ``seq`` of the *last* chunk merged into it, and
  ``first_seq`` of the first; its ``text`` is the chunks' texts joined in ``seq`` order. Every
  ``seq`` from ``first_seq`` to ``seq`` was a chunk of that message and nothing else, so a
  client's resume point never skips text: a client that saw ``after_seq`` with
  ``first_seq <= after_seq < seq`` gets the merged entry again, and :attr:`Replay.overlap` tells
  it that the entry's text *starts with* text it was already sent (it replaces what it holds for
  that message from ``first_seq`` on rather than appending). Unmerged entries have
  ``first_seq == seq``.
* **Discrete guard entries** (:func:`is_discrete`: ``meta`` carries both
  ``qwenDiscreteMessage: True`` and ``source: 'todo_stop_guard'``, OB-6) are never merged with
  anything, not even with an identical neighbour, and they also sit in a separate *pinned* store
  of at most ``pinned_capacity`` entries, so they survive the live ring rolling over with their
  exact text and metadata. Past that bound the oldest pinned entry goes. The bound is harmless: a
  stage opens at most two guard continuations plus one exhaustion message before new user input
  is needed, so the default of 32 keeps the guard events of the last ten stages or more, while
  the text around older ones has long left the live ring anyway (and ``gap`` says so). Publish
  the exhaustion message with the same discrete guard meta to have it pinned too.
* :func:`replay` merges live and pinned entries (no duplicates: a pinned entry is returned from
  the live ring while it is still there) and sets :attr:`Replay.gap` when anything published
  after ``after_seq`` is gone, so the client knows its view is partial.

Rules this module keeps:

* Pure and immutable: frozen, slotted, keyword-only attrs classes; every function returns new
  values; no clock, no I/O, no randomness. ``meta`` is frozen into a :class:`Meta` once, when the
  entry is published, so a host cannot change a kept entry by mutating its dict.
* Bad input raises :class:`~agentturn._base.FieldError` naming the field, before anything is
  built; text must be encodable as UTF-8 (no lone surrogates).
* Cheap per publish: counting merge candidates as they are appended means a full ring of
  unmergeable entries drops its oldest without a scan, and a long message streamed into a full
  ring is merged into its last entry without one; a full compaction pass runs only when there
  are candidates outside the newest run.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Mapping

import attrs

from .._base import FieldError, Value, non_negative
from .._trusted import builder, replacer
from ..guard.texts import DISCRETE_MARKER, GUARD_SOURCE, MAX_ATTEMPTS
from .meta import JsonValue, Meta

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_PINNED_CAPACITY",
    "EntryKind",
    "EventRing",
    "JsonValue",
    "Meta",
    "Replay",
    "RingEntry",
    "Usage",
    "count_model_call",
    "is_discrete",
    "publish",
    "replay",
]

#: Live entries an :class:`EventRing` keeps by default.
DEFAULT_CAPACITY = 256
#: Discrete guard entries an :class:`EventRing` keeps past rollover by default.
DEFAULT_PINNED_CAPACITY = 32
class EntryKind(enum.Enum):
    """What a published event is."""

    #: An ordinary chunk of agent text; adjacent chunks of one message may be merged.
    MESSAGE_CHUNK = "message_chunk"
    #: A committed guard continuation's discrete ``agent_message_chunk`` (OB-2); never merged.
    GUARD_CHUNK = "guard_chunk"
    #: The guard's exhaustion message (OB-3).
    GUARD_EXHAUSTED = "guard_exhausted"
    #: The end of a turn.
    TURN_ENDED = "turn_ended"
    #: Anything else the session tells its clients.
    NOTICE = "notice"


def is_discrete(meta: Mapping[str, object] | None) -> bool:
    """Whether ``meta`` marks a discrete guard event: ``qwenDiscreteMessage`` is ``True`` and
    ``source`` is ``'todo_stop_guard'`` (OB-6). Such an event is never merged and is pinned."""
    return (meta is not None and meta.get(DISCRETE_MARKER) is True
            and meta.get("source") == GUARD_SOURCE)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class RingEntry(Value):
    """One replayable event the session published.

    Built only by :func:`publish` (which validates its inputs) and by replay compaction, so,
    like every state, it carries no validators: that keeps a publish cheap.
    """

    #: Assigned by the ring, strictly increasing; for a merged entry, its last chunk's.
    seq: int
    #: The seq of the first chunk merged into this entry; ``seq`` itself when nothing was merged.
    first_seq: int
    kind: EntryKind
    #: Chunks of one assistant message share it; for other kinds, the turn's or notice's id.
    message_id: str
    text: str
    #: The event's ``_meta``, frozen; for guard entries ``GuardChunkMeta.as_meta()``.
    meta: Meta | None = None

    @property
    def discrete(self) -> bool:
        """A discrete guard event (OB-6): never merged, kept past rollover."""
        return is_discrete(self.meta)

    @property
    def merged(self) -> bool:
        """Replay compaction merged several chunks into this entry."""
        return self.first_seq != self.seq


def _check_str(name: str, value: object, *, empty: bool) -> None:
    if type(value) is not str:
        raise FieldError(f"RingEntry.{name} must be a str, got {type(value).__name__}")
    if not value and not empty:
        raise FieldError(f"RingEntry.{name} must be a non-empty id")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise FieldError(f"RingEntry.{name} must be encodable as UTF-8; position "
                             f"{error.start} holds a lone surrogate") from None


def _checked(kind: object, message_id: object, text: object,
             meta: Mapping[str, object] | None) -> Meta | None:
    """Validate what :func:`publish` was given; the frozen meta."""
    if type(kind) is not EntryKind:
        raise FieldError(f"RingEntry.kind must be an EntryKind, got {type(kind).__name__}")
    _check_str("message_id", message_id, empty=False)
    _check_str("text", text, empty=True)
    frozen = None if meta is None else Meta.of(meta)
    if kind is EntryKind.GUARD_CHUNK and not is_discrete(frozen):
        raise FieldError(
            f"RingEntry.meta of a GUARD_CHUNK must carry {DISCRETE_MARKER}=True and "
            f"source={GUARD_SOURCE!r} (GuardChunkMeta.as_meta())")
    return frozen


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Replay(Value):
    """What :func:`replay` returns."""

    #: Every entry still held with ``seq > after_seq``, in ``seq`` order.
    entries: tuple[RingEntry, ...]
    #: Something published after ``after_seq`` was dropped by rollover: the view is partial.
    gap: bool
    #: The first entry is a merged chunk with ``first_seq <= after_seq``: its text begins with
    #: text the client was already sent (see the seq rule in the module docstring).
    overlap: bool
    #: The last seq the ring assigned (0 before the first publish): the next ``after_seq``.
    last_seq: int


@attrs.frozen(kw_only=True, eq=False, repr=False)
class EventRing(Value):
    """The bounded ring of one session's published events. Build it with :meth:`create`."""

    #: At most this many live entries (at least 1).
    capacity: int
    #: At most this many discrete guard entries kept past rollover (at least MAX_ATTEMPTS).
    pinned_capacity: int
    #: The live entries, in seq order.
    live: tuple[RingEntry, ...] = ()
    #: The newest discrete guard entries, in seq order; some may also still be live.
    pinned: tuple[RingEntry, ...] = ()
    #: The seq the next published entry gets.
    next_seq: int = 1
    #: Bookkeeping: adjacent mergeable pairs in ``live``, so a rollover with none needs no scan.
    mergeable_pairs: int = 0

    @classmethod
    def create(cls, capacity: int = DEFAULT_CAPACITY,
               pinned_capacity: int = DEFAULT_PINNED_CAPACITY) -> EventRing:
        """An empty ring. ``capacity`` (default 256) bounds the live entries, at least 1;
        ``pinned_capacity`` (default 32) bounds the discrete guard entries kept past rollover,
        at least ``MAX_ATTEMPTS`` (2) so one stage's attempts always survive (OB-6)."""
        for name, value, least in (("capacity", capacity, 1),
                                   ("pinned_capacity", pinned_capacity, MAX_ATTEMPTS)):
            if type(value) is not int:
                raise FieldError(f"EventRing.{name} must be an int, got {type(value).__name__}")
            if value < least:
                raise FieldError(f"EventRing.{name} must be at least {least}, got {value}")
        return cls(capacity=capacity, pinned_capacity=pinned_capacity)

    @property
    def last_seq(self) -> int:
        """The last seq assigned; 0 before the first publish."""
        return self.next_seq - 1


_replace_ring = replacer(EventRing)
_RingEntry = builder(RingEntry)  # the trusted constructor: publish validates its inputs first


def _mergeable(earlier: RingEntry, later: RingEntry) -> bool:
    if earlier.kind is not EntryKind.MESSAGE_CHUNK or later.kind is not EntryKind.MESSAGE_CHUNK:
        return False
    if earlier.message_id != later.message_id:
        return False
    a, b = earlier.meta, later.meta
    if a is None and b is None:
        return True
    # Equal metas are both discrete or both not; Meta equality is exact (True is not 1).
    return a is not None and b is not None and a == b and not is_discrete(a)


def _merge(run: list[RingEntry] | tuple[RingEntry, ...]) -> RingEntry:
    if len(run) == 1:
        return run[0]
    first, last = run[0], run[-1]
    return RingEntry(seq=last.seq, first_seq=first.first_seq, kind=EntryKind.MESSAGE_CHUNK,
                     message_id=first.message_id, text="".join(entry.text for entry in run),
                     meta=first.meta)


def _compact(entries: tuple[RingEntry, ...]) -> tuple[RingEntry, ...]:
    """Replay compaction: every run of adjacent mergeable entries becomes one entry."""
    out: list[RingEntry] = []
    run: list[RingEntry] = []
    for entry in entries:
        if run and _mergeable(run[-1], entry):
            run.append(entry)
            continue
        if run:
            out.append(_merge(run))
        run = [entry]
    if run:
        out.append(_merge(run))
    return tuple(out)


def _tail_run(live: tuple[RingEntry, ...], limit: int) -> int:
    """How many mergeable pairs end at the last live entry (counting stops at ``limit``)."""
    count = 0
    index = len(live) - 1
    while count < limit and index > 0 and _mergeable(live[index - 1], live[index]):
        count += 1
        index -= 1
    return count


def publish(ring: EventRing, kind: EntryKind, message_id: str, text: str,
            meta: Mapping[str, object] | None = None) -> tuple[EventRing, RingEntry]:
    """Append one event with the next seq; roll the live ring over if it is full.

    Returns the new ring and the entry as published (what the session sends to subscribers;
    its ``meta`` is frozen). Raises :class:`FieldError` for a bad field, changing nothing.
    """
    frozen = _checked(kind, message_id, text, meta)
    seq = ring.next_seq
    entry = _RingEntry(seq=seq, first_seq=seq, kind=kind, message_id=message_id, text=text,
                       meta=frozen)
    live, pairs = ring.live, ring.mergeable_pairs
    extends = bool(live) and _mergeable(live[-1], entry)
    if len(live) < ring.capacity:
        live = (*live, entry)
        pairs += extends
    elif pairs == 0 and not extends:
        live = (*live[1:], entry)  # nothing to merge: the oldest entry goes
    else:
        run = _tail_run(live, pairs) if extends else -1
        if run == pairs:  # every candidate is in the newest run, which the entry extends
            start = len(live) - 1 - run
            live = (*live[:start], _merge((*live[start:], entry)))
        else:
            live = (*_compact(live), entry) if not extends else _compact((*live, entry))
        pairs = 0
    pinned = ring.pinned
    if entry.discrete:
        pinned = (*(pinned if len(pinned) < ring.pinned_capacity else pinned[1:]), entry)
    return _replace_ring(ring, live=live, pinned=pinned, next_seq=seq + 1,
                         mergeable_pairs=pairs), entry


def _seq(entry: RingEntry) -> int:
    return entry.seq


def replay(ring: EventRing, after_seq: int | None = None) -> Replay:
    """Every entry still held with ``seq > after_seq`` (all of them for ``None``), in seq order,
    live and pinned merged, and whether anything after ``after_seq`` was lost to rollover."""
    if after_seq is None:
        after = 0
    elif type(after_seq) is not int or after_seq < 0:
        raise FieldError(f"replay after_seq must be None or an int >= 0, got {after_seq!r}")
    else:
        after = after_seq
    live = ring.live
    # Every seq below ``low`` left the live ring; of those only pinned entries are still held.
    low = live[0].first_seq if live else ring.next_seq
    older = tuple(entry for entry in ring.pinned if after < entry.seq < low)
    start = bisect.bisect_right(live, after, key=_seq)
    newer = live[start:]
    lost = max(0, low - 1 - after) - len(older)
    overlap = bool(newer) and newer[0].first_seq <= after
    return Replay(entries=older + newer if older else newer, gap=lost > 0, overlap=overlap,
                  last_seq=ring.next_seq - 1)


def _parts_of_model_calls(instance: Usage, attribute: attrs.Attribute[int], value: int) -> None:
    """Validator run last: the guard's and the hooks' calls are parts of all model calls."""
    if max(instance.guard_calls, value) > instance.model_calls:
        raise FieldError("Usage.guard_calls and Usage.hook_calls are parts of "
                         "Usage.model_calls and cannot exceed it")


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Usage(Value):
    """Primary-model calls of a session, for its usage metadata (OB-5).

    Guard continuations are extra model calls: each is counted in ``model_calls`` as well as in
    ``guard_calls``. A continuation coalesced with an external Stop hook (one call for both)
    counts once in ``model_calls`` and once in each of ``guard_calls`` and ``hook_calls``.
    """

    #: Every primary-model stream opened, whoever sponsored it.
    model_calls: int = attrs.field(default=0, validator=non_negative)
    #: Of those, the streams attributable to the guard (its committed attempts).
    guard_calls: int = attrs.field(default=0, validator=non_negative)
    #: Of those, the streams an external Stop hook's continuation opened.
    hook_calls: int = attrs.field(default=0, validator=[non_negative, _parts_of_model_calls])


_Usage = builder(Usage)  # the trusted constructor (see ``builder``)


def count_model_call(usage: Usage, *, guard: bool = False, hook: bool = False) -> Usage:
    """``usage`` with one more primary-model call; ``guard`` when it is attributable to the guard,
    ``hook`` when to an external Stop hook. Count a call when its stream opens (as the guard
    commits an attempt, SG-B3), so a stream that never opened is not counted."""
    for name, flag in (("guard", guard), ("hook", hook)):
        if type(flag) is not bool:
            raise FieldError(f"count_model_call {name} must be a bool, got {type(flag).__name__}")
    return _Usage(model_calls=usage.model_calls + 1, guard_calls=usage.guard_calls + guard,
                  hook_calls=usage.hook_calls + hook)
