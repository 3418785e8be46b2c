"""The session's bookkeeping of background work and deferred automatic turns (BG-1 … BG-7).

Theory of operation
-------------------
A :class:`Background` value is what the session knows about work running beside the model:
the *live* background items (agents, shells, monitors and scheduled ``@wakeup``\\ s, each a
:class:`LiveItem` with its :class:`BackgroundKind`) and the *queued* notifications, each a
:class:`Notification` with its own ``notification_id`` and the ``source_id`` of the item it comes
from (a wakeup that fires is a notification whose source is the ``WAKEUP`` item). The session
feeds it what the host reports, in order:

* :func:`started` when an item starts; :func:`ended` when it ends. An item that ends may leave a
  terminal notification: that is a separate :func:`notification_queued`.
* :func:`notification_consumed` when a queued notification (or fired wakeup) has been processed.
* :func:`snapshot_baseline` at the start of every work chain (the guard's ``StartWorkChain``):
  the :class:`Baseline` is the ids of the live items *and* of the notifications already queued
  at that boundary (BG-1). It also forgets which items the previous chain started.

and asks two questions:

* :func:`relevant_input` (BG-2, SO-7): is there background input the current chain must wait
  for? Its answer is ``NaturalStop.relevant_background``.
* :func:`is_related` (BG-2, BG-5, SG-A10, SG-A11): does a notification, wakeup or cron fire with
  this source process background results of the current chain? Its answer is the ``related``
  flag of ``BackgroundResult`` and ``AutomaticTurnStarted``.

**The relationship rule.** The chain *owns* an item when the item was started after the
chain's boundary under an id that is not in the baseline (:attr:`Background.chain_items`; an
owned item stays owned after it ends, until the next boundary). Then:

* a live item is relevant when its id is not in the baseline (BG-2; every such item is owned);
* a queued notification is relevant when its ``notification_id`` was not queued at the boundary
  **and** its source is owned by the chain: "the same relationship" as a live item;
* :func:`is_related` is true exactly for a source the chain owns.

This is stricter than "the source is not in the baseline", on purpose: a source the session
has never seen start in this chain (an item that started *and ended* under an older request
and whose terminal notification is queued only now, an unknown id, a cron task id) is inherited
work, and inherited work never blocks a new request nor counts as related (BG-3). Cron jobs are
not background items (:class:`BackgroundKind` has none), so a cron job never makes input
relevant and an ordinary cron fire is unrelated; a session that knows a particular cron fire
processes the chain's results may still build its :class:`AutomaticTurn` with ``related=True``.
An id in the baseline stays unrelated for the whole chain, even if an item ends and a new one
starts under the same id (BG-2 names the id).

**Deferred automatic turns.** While the guard's chain can still resume (or a complete FIFO
prompt has priority) the guard answers an automatic turn with ``DeferAutomaticTurn``; the
session holds it in a :class:`Deferred` queue with :func:`defer` and gets everything back, in
FIFO order, with :func:`release` on ``ReleaseAutomaticQueues`` (or one at a time with
:func:`pop_next`). When to hold and when to release is the session's (and the guard's) call;
this module only keeps the queue. :func:`defer` returns a :class:`DeferOutcome` whose
:class:`Deferral` says what happened, so nothing ever leaves the queue silently:

1. ``DUPLICATE``: a turn with the same ``turn_id`` is already held; nothing changes.
2. ``COALESCED`` (BG-6): a *recurring* cron fire for a task (``source_id``) that already has a
   held recurring fire with the same ``related`` flag is merged into it: the held one keeps its
   place and turn id and its :attr:`AutomaticTurn.coalesced` count grows by one plus the count
   the new fire carried. Coalescing never grows the queue. One-shot fires, notifications and
   wakeups are never coalesced (each carries its own result).
3. ``QUEUED``: the turn is appended at the back. If the queue already held ``max_deferred``
   turns, the **oldest unrelated** held turn is evicted to make room and returned in
   :attr:`DeferOutcome.evicted` (the session tells the host it was skipped).
4. ``DROPPED``: the queue is full and every held turn is related; the new turn is unrelated, so
   it is the one that goes (returned as :attr:`DeferOutcome.turn`), never a related one.
5. ``REFUSED``: the queue is full, every held turn is related, and so is the new one. A hard
   bound and "never lose a related turn" cannot both hold here, so the queue keeps its bound
   and hands the turn back *not held*: the session must start it now, as the related turn it
   is (it keeps the chain's budget, SG-A10; SG-B1 still bounds guard streams). It is not
   dropped: the caller still owns it. ``max_deferred`` related turns held at once means a
   stalled chain; the default of 32 makes that rare.

So a :class:`Deferred` never holds more than ``max_deferred`` turns, a related turn is never
evicted or dropped, and the held turns are in the order they were first admitted.

:func:`suppress_follow_ups` (BG-7) is the one rule for daemon follow-up suggestions.

Rules this module keeps:

* Pure and immutable: frozen, slotted, keyword-only attrs classes; every function returns a new
  value (or the same one when nothing changes); no clock, no I/O, no randomness.
* Timing is absorbed, never raised: ending an item that is not live, consuming a notification
  that is not queued, starting an item that is already live (the first kind stays) or queueing a
  notification id that is already queued returns the value unchanged.
* Malformed input (a non-``str`` or empty id, a kind of the wrong type, a non-``bool`` flag)
  raises :class:`~agentturn._base.FieldError` naming the field, before anything is built.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

import attrs

from .._base import FieldError, Value, is_bool, is_id, non_negative, one_of
from .._trusted import replacer

__all__ = [
    "DEFAULT_MAX_DEFERRED",
    "AutomaticKind",
    "AutomaticTurn",
    "Background",
    "BackgroundKind",
    "Baseline",
    "DeferOutcome",
    "Deferral",
    "Deferred",
    "LiveItem",
    "Notification",
    "defer",
    "ended",
    "is_related",
    "notification_consumed",
    "notification_queued",
    "pop_next",
    "release",
    "relevant_ids",
    "relevant_input",
    "snapshot_baseline",
    "started",
    "suppress_follow_ups",
    "take",
]

#: Automatic turns a :class:`Deferred` holds by default.
DEFAULT_MAX_DEFERRED = 32


def _check_id(where: str, value: object) -> None:
    if type(value) is not str or not value:
        raise FieldError(f"{where} must be a non-empty str id, got {value!r}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise FieldError(f"{where} must be encodable as UTF-8; position {error.start} "
                             f"holds a lone surrogate") from None


# --- background items and notifications (BG-1, BG-2, BG-3) ------------------------------------


class BackgroundKind(enum.Enum):
    """What a live background item is."""

    #: A background sub-agent.
    AGENT = "agent"
    #: A background shell command.
    SHELL = "shell"
    #: A monitor watching something on the model's behalf.
    MONITOR = "monitor"
    #: A scheduled ``@wakeup``; live until it fires (its firing is a queued notification).
    WAKEUP = "wakeup"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LiveItem(Value):
    """A background item that is still running (or, for a wakeup, still scheduled)."""

    item_id: str = attrs.field(validator=is_id)
    kind: BackgroundKind = attrs.field(validator=one_of(BackgroundKind))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Notification(Value):
    """A queued notification or fired wakeup, waiting to be processed."""

    notification_id: str = attrs.field(validator=is_id)
    #: The id of the background item it comes from.
    source_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Baseline(Value):
    """What was already there when the current work chain started (BG-1)."""

    #: Ids of the items live at the boundary.
    item_ids: frozenset[str] = frozenset()
    #: Ids of the notifications and wakeups already queued at the boundary.
    notification_ids: frozenset[str] = frozenset()


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Background(Value):
    """The session's background work. Start from ``Background()`` and change it only through
    the functions of this module."""

    #: Live items, in the order they started; ids are distinct.
    live: tuple[LiveItem, ...] = ()
    #: Queued notifications and fired wakeups, in the order they were queued; ids are distinct.
    queued: tuple[Notification, ...] = ()
    #: The current work chain's baseline, taken by :func:`snapshot_baseline`.
    baseline: Baseline = Baseline()
    #: Ids the current chain owns: started since the boundary, not in the baseline, live or
    #: ended. Cleared at the next boundary, so it grows only with one chain's own work.
    chain_items: frozenset[str] = frozenset()


_replace_bg = replacer(Background)


def started(bg: Background, kind: BackgroundKind, item_id: str) -> Background:
    """``bg`` with ``item_id`` live as a ``kind`` item; unchanged if that id is already live."""
    item = LiveItem(item_id=item_id, kind=kind)
    if any(live.item_id == item_id for live in bg.live):
        return bg
    owned = bg.chain_items
    if item_id not in bg.baseline.item_ids and item_id not in owned:
        owned = owned | {item_id}
    return _replace_bg(bg, live=(*bg.live, item), chain_items=owned)


def ended(bg: Background, item_id: str) -> Background:
    """``bg`` without the live item ``item_id``; unchanged if it is not live.

    The chain keeps owning an item it started after the item ends, so the item's terminal
    notification (queued separately with :func:`notification_queued`) is still related.
    """
    _check_id("ended item_id", item_id)
    live = tuple(item for item in bg.live if item.item_id != item_id)
    return bg if len(live) == len(bg.live) else _replace_bg(bg, live=live)


def notification_queued(bg: Background, notification_id: str, source_id: str) -> Background:
    """``bg`` with a notification (or fired wakeup) from ``source_id`` queued at the back;
    unchanged if ``notification_id`` is already queued. Any source is accepted: one the chain
    does not own makes the notification unrelated, never an error."""
    note = Notification(notification_id=notification_id, source_id=source_id)
    if any(queued.notification_id == notification_id for queued in bg.queued):
        return bg
    return _replace_bg(bg, queued=(*bg.queued, note))


def notification_consumed(bg: Background, notification_id: str) -> Background:
    """``bg`` without the queued notification ``notification_id``; unchanged if not queued."""
    _check_id("notification_consumed notification_id", notification_id)
    queued = tuple(note for note in bg.queued if note.notification_id != notification_id)
    return bg if len(queued) == len(bg.queued) else _replace_bg(bg, queued=queued)


def snapshot_baseline(bg: Background) -> Background:
    """Start a work chain (BG-1): the baseline becomes the live item ids and the queued
    notification ids, and the chain owns nothing yet."""
    baseline = Baseline(item_ids=frozenset(item.item_id for item in bg.live),
                        notification_ids=frozenset(note.notification_id for note in bg.queued))
    return _replace_bg(bg, baseline=baseline, chain_items=frozenset())


def is_related(bg: Background, source_id: str) -> bool:
    """Whether a notification, wakeup or cron fire from ``source_id`` processes background
    results of the current chain: the chain owns that source (see the module docstring)."""
    _check_id("is_related source_id", source_id)
    return source_id in bg.chain_items


def relevant_ids(bg: Background) -> Iterator[str]:
    """The ids of the relevant background input pending (BG-2, BG-3, SO-7): each live item whose
    id is not in the baseline, then each queued notification that was not queued at the
    boundary and whose source the chain owns."""
    baseline = bg.baseline
    yield from (item.item_id for item in bg.live if item.item_id not in baseline.item_ids)
    yield from (note.notification_id for note in bg.queued
                if note.source_id in bg.chain_items
                and note.notification_id not in baseline.notification_ids)


def relevant_input(bg: Background) -> bool:
    """Whether any relevant background input is pending (:func:`relevant_ids`)."""
    return next(relevant_ids(bg), None) is not None


# --- deferred automatic turns (BG-5, BG-6) ------------------------------------------------------


class AutomaticKind(enum.Enum):
    """What started an automatic turn."""

    #: A cron job fired; ``source_id`` is its task id.
    CRON = "cron"
    #: A background item's notification arrived; ``source_id`` is the item's id.
    NOTIFICATION = "notification"
    #: A ``@wakeup`` fired; ``source_id`` is the wakeup's item id.
    WAKEUP = "wakeup"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AutomaticTurn(Value):
    """An automatic (cron, notification or wakeup) turn the session may have to hold."""

    turn_id: str = attrs.field(validator=is_id)
    kind: AutomaticKind = attrs.field(validator=one_of(AutomaticKind))
    #: The cron task id, or the background item id the notification or wakeup comes from.
    source_id: str = attrs.field(validator=is_id)
    #: A fire of a recurring cron job; only ``CRON`` turns can be recurring.
    recurring: bool = attrs.field(default=False, validator=is_bool)
    #: It processes background results of the live chain (:func:`is_related`); never evicted.
    related: bool = attrs.field(default=False, validator=is_bool)
    #: Later fires of the same task merged into this one while it was held (BG-6).
    coalesced: int = attrs.field(default=0, validator=non_negative)

    def __attrs_post_init__(self) -> None:
        if self.recurring and self.kind is not AutomaticKind.CRON:
            raise FieldError(f"AutomaticTurn.recurring is only for CRON turns, "
                             f"got kind {self.kind.name}")


def _at_least_one(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    non_negative(instance, attribute, value)
    if value == 0:
        raise FieldError("Deferred.max_deferred must be at least 1, got 0")


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Deferred(Value):
    """The bounded FIFO of held automatic turns. Start from ``Deferred()`` (or give
    ``max_deferred``) and change it only through :func:`defer`, :func:`release` and
    :func:`pop_next`."""

    #: At most this many turns are held (at least 1).
    max_deferred: int = attrs.field(default=DEFAULT_MAX_DEFERRED, validator=_at_least_one)
    #: The held turns, oldest first; turn ids are distinct.
    turns: tuple[AutomaticTurn, ...] = ()

    @property
    def full(self) -> bool:
        """No room without evicting, dropping or refusing."""
        return len(self.turns) >= self.max_deferred


_replace_deferred = replacer(Deferred)


class Deferral(enum.Enum):
    """What :func:`defer` did with a turn."""

    #: Appended at the back; ``evicted`` names the unrelated turn that made room, if any.
    QUEUED = "queued"
    #: Merged into a held recurring fire of the same task (BG-6); ``into`` is that turn now.
    COALESCED = "coalesced"
    #: Not held: the queue is full of related turns and this one is unrelated.
    DROPPED = "dropped"
    #: Not held: the queue is full of related turns and so is this one; start it now.
    REFUSED = "refused"
    #: Not held again: a turn with this ``turn_id`` is already held.
    DUPLICATE = "duplicate"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class DeferOutcome(Value):
    """What :func:`defer` did, for the session to report to the host."""

    result: Deferral
    #: The turn :func:`defer` was given.
    turn: AutomaticTurn
    #: ``QUEUED`` only: the oldest unrelated turn evicted to make room, or ``None``.
    evicted: AutomaticTurn | None = None
    #: ``COALESCED`` only: the held turn it was merged into, with its new count.
    into: AutomaticTurn | None = None


def defer(queue: Deferred, turn: AutomaticTurn) -> tuple[Deferred, DeferOutcome]:
    """Hold ``turn`` (BG-5, BG-6): coalesce, queue (evicting the oldest unrelated turn if full),
    drop or refuse it, by the rules in the module docstring."""
    if not isinstance(turn, AutomaticTurn):
        raise FieldError(f"defer turn must be an AutomaticTurn, got {type(turn).__name__}")
    held = queue.turns
    if any(other.turn_id == turn.turn_id for other in held):
        return queue, DeferOutcome(result=Deferral.DUPLICATE, turn=turn)
    if turn.recurring:
        for index, other in enumerate(held):
            if (other.recurring and other.source_id == turn.source_id
                    and other.related == turn.related):
                merged = attrs.evolve(other, coalesced=other.coalesced + 1 + turn.coalesced)
                turns = (*held[:index], merged, *held[index + 1:])
                return (_replace_deferred(queue, turns=turns),
                        DeferOutcome(result=Deferral.COALESCED, turn=turn, into=merged))
    if len(held) < queue.max_deferred:
        return (_replace_deferred(queue, turns=(*held, turn)),
                DeferOutcome(result=Deferral.QUEUED, turn=turn))
    victim = next((index for index, other in enumerate(held) if not other.related), None)
    if victim is None:
        result = Deferral.REFUSED if turn.related else Deferral.DROPPED
        return queue, DeferOutcome(result=result, turn=turn)
    turns = (*held[:victim], *held[victim + 1:], turn)
    return (_replace_deferred(queue, turns=turns),
            DeferOutcome(result=Deferral.QUEUED, turn=turn, evicted=held[victim]))


def release(queue: Deferred) -> tuple[Deferred, tuple[AutomaticTurn, ...]]:
    """Hand back every held turn, oldest first, and an empty queue with the same bound."""
    if not queue.turns:
        return queue, ()
    return _replace_deferred(queue, turns=()), queue.turns


def take(queue: Deferred, turn_id: str) -> Deferred:
    """The queue without the held turn ``turn_id`` (the same queue if it is not held)."""
    turns = tuple(turn for turn in queue.turns if turn.turn_id != turn_id)
    return queue if len(turns) == len(queue.turns) else _replace_deferred(queue, turns=turns)


def pop_next(queue: Deferred) -> tuple[Deferred, AutomaticTurn | None]:
    """Hand back the oldest held turn (``None`` if there is none) and the queue without it."""
    if not queue.turns:
        return queue, None
    return _replace_deferred(queue, turns=queue.turns[1:]), queue.turns[0]


# --- follow-up suggestions (BG-7) ---------------------------------------------------------------


def suppress_follow_ups(chain_can_resume: bool, queued_prompt_has_priority: bool) -> bool:
    """Whether daemon follow-up suggestions are suppressed (BG-7): while a guard chain can
    still resume, or a complete FIFO prompt has priority, no suggestion-model call competes."""
    for name, flag in (("chain_can_resume", chain_can_resume),
                       ("queued_prompt_has_priority", queued_prompt_has_priority)):
        if type(flag) is not bool:
            raise FieldError(f"suppress_follow_ups {name} must be a bool, "
                             f"got {type(flag).__name__}")
    return chain_can_resume or queued_prompt_has_priority
