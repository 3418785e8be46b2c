"""The session's own events and commands, beyond the turn family's and the guard's.

A session takes every turn-family event (``PromptSubmitted``, ``StreamCompleted``, answers ...)
as it is, plus the ones below: the daemon FIFO, the mid-turn drain, Stop hooks, background work,
automatic turns, timers, clients and lifecycle. It returns the turn family's commands (less the
ones it answers itself), the guard's notices, and the commands below.
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from .._base import (
    AwaitingCommand,
    Event,
    FieldError,
    Notice,
    is_bool,
    is_id,
    is_str,
    non_negative,
    not_blank,
    one_of,
    optional,
)
from ..commands import UnsavedRecords
from ..guard.vocabulary import ClientAttached, HardStopped, TrustClearingKind
from .background import AutomaticKind, BackgroundKind
from .ring import RingEntry

__all__ = [
    "AutomaticTurnDeferred",
    "AutomaticTurnDropped",
    "AutomaticTurnDue",
    "BackgroundEnded",
    "BackgroundStarted",
    "CancelTimer",
    "ClientAttached",
    "ClientDetached",
    "CloseRequested",
    "CloseSession",
    "DrainMidTurnQueue",
    "HardStopped",
    "LifecycleChanged",
    "MidTurnDrained",
    "NotificationConsumed",
    "NotificationQueued",
    "OfferFollowUpSuggestions",
    "PromptAborted",
    "PromptCompleted",
    "PromptQueued",
    "PromptRefused",
    "Publish",
    "ReplayEvents",
    "RestoreMidTurnMessages",
    "RetryWithdrawn",
    "RunStopHooks",
    "StartTimer",
    "StopHookDecided",
    "StopHookFailed",
    "SuppressFollowUpSuggestions",
    "TimerFired",
    "UnsavedRecords",
    "Warn",
]


def _non_negative_number(instance: object, attribute: attrs.Attribute[float],
                         value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise FieldError(f"{type(instance).__name__}.{attribute.name} must be a number >= 0")


# --- the daemon FIFO --------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PromptQueued(Event):
    """A prompt arrived for the daemon FIFO (BR-1); it runs as soon as no turn runs and it is
    complete. ``prompt_id`` becomes its turn id."""

    prompt_id: str = attrs.field(validator=is_id)
    message_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)
    #: False while its content is still arriving (``PromptCompleted`` follows).
    complete: bool = attrs.field(default=True, validator=is_bool)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PromptCompleted(Event):
    """The rest of a queued prompt arrived; ``text``, when given, is its final text."""

    prompt_id: str = attrs.field(validator=is_id)
    text: str | None = attrs.field(default=None, validator=optional(is_str))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PromptAborted(Event):
    """The user cancelled a queued prompt before it started (SO-3, SO-4)."""

    prompt_id: str = attrs.field(validator=is_id)


# --- the mid-turn drain -----------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class MidTurnDrained(Event):
    """The client's reply to ``DrainMidTurnQueue``: the mid-turn messages it held, and its
    ``hasQueuedPrompt`` (omitted by older clients: ``None``, read as false, BR-2)."""

    drain_id: str = attrs.field(validator=is_id)
    messages: tuple[str, ...] = attrs.field(default=())
    has_queued_prompt: bool | None = attrs.field(default=None, validator=optional(is_bool))

    @messages.validator
    def _check(self, attribute: attrs.Attribute[tuple[str, ...]], value: object) -> None:
        if type(value) is not tuple:
            raise FieldError("MidTurnDrained.messages must be a tuple of str")
        for message in value:
            is_str(self, attribute, message)


# --- Stop hooks -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StopHookDecided(Event):
    """The external Stop hooks of ``run_id`` finished: ``block`` with a ``reason`` asks the model
    to continue (SO-6). A block needs a reason that is not blank."""

    run_id: str = attrs.field(validator=is_id)
    block: bool = attrs.field(validator=is_bool)
    reason: str | None = attrs.field(default=None, validator=optional(not_blank))

    def __attrs_post_init__(self) -> None:
        if self.block and self.reason is None:
            raise FieldError("StopHookDecided.reason is required when block is true")


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StopHookFailed(Event):
    """The Stop hooks of ``run_id`` errored or timed out: that never blocks (SO-6)."""

    run_id: str = attrs.field(validator=is_id)
    error: str = attrs.field(validator=is_str)
    timed_out: bool = attrs.field(default=False, validator=is_bool)


# --- background work and automatic turns ------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class BackgroundStarted(Event):
    """A background agent, shell, monitor or wakeup started (BG-1, BG-2)."""

    kind: BackgroundKind = attrs.field(validator=one_of(BackgroundKind))
    item_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class BackgroundEnded(Event):
    """A background item ended, with its terminal notification, if any, in the same step.

    ``notification_id`` is required, ``None`` included, because the order matters: a session
    whose armed chain waits only for this item decides in this very step that the chain can no
    longer resume when nothing relevant is left, so a notification reported in a *later* event
    would come too late and start an unarmed chain instead. Name the notification here (the same
    as a ``NotificationQueued`` just before this event), or say ``None`` when no notification
    follows (the item sends none, or it was already queued with ``NotificationQueued``).
    """

    item_id: str = attrs.field(validator=is_id)
    #: The id of the item's terminal notification, queued in this step; ``None``: none follows.
    notification_id: str | None = attrs.field(validator=optional(is_id))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class NotificationQueued(Event):
    """A notification or wakeup from background item ``source_id`` is queued for the model."""

    notification_id: str = attrs.field(validator=is_id)
    source_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class NotificationConsumed(Event):
    """A queued notification reached the model (or was discarded by the host)."""

    notification_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AutomaticTurnDue(Event):
    """A cron fire, notification or wakeup wants a turn (BG-4, BG-5).

    ``source_id`` is the cron task id or the background item id; the session decides whether it
    is related to the live work chain, and whether it runs now, waits, or is coalesced (BG-6).
    """

    turn_id: str = attrs.field(validator=is_id)
    message_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)
    kind: AutomaticKind = attrs.field(validator=one_of(AutomaticKind))
    source_id: str = attrs.field(validator=is_id)
    recurring: bool = attrs.field(default=False, validator=is_bool)


# --- timers, clients, lifecycle ---------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TimerFired(Event):
    """The timer ``key`` of a ``StartTimer`` ran out. A timer already cancelled is absorbed."""

    key: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ClientDetached(Event):
    """A client went away. It never approves anything (BR-4); the grace period starts when no
    client is left."""

    client_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class CloseRequested(Event):
    """The client closed or cancelled the session explicitly (BR-4)."""


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LifecycleChanged(Event):
    """A trust-clearing lifecycle event (SG-A12): rewind, history restore, fork, a working
    directory change, a new session, disk restore, a daemon or agent restart."""

    kind: TrustClearingKind = attrs.field(validator=one_of(TrustClearingKind))


# --- commands ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class DrainMidTurnQueue(AwaitingCommand):
    """Ask the client for the mid-turn messages it holds (``craft/drainMidTurnQueue``); answer
    ``MidTurnDrained`` echoing ``drain_id``. A ``StartTimer`` with the same key bounds the wait."""

    answered_by: ClassVar[tuple[str, ...]] = ("MidTurnDrained",)
    drain_id: str = attrs.field(validator=is_id)

    @property
    def answer_id(self) -> str:
        return self.drain_id


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StartTimer(AwaitingCommand):
    """Start a timer; answer ``TimerFired(key)`` when it runs out, unless ``CancelTimer``."""

    answered_by: ClassVar[tuple[str, ...]] = ("TimerFired",)
    key: str = attrs.field(validator=is_id)
    seconds: float = attrs.field(validator=_non_negative_number)

    @property
    def answer_id(self) -> str:
        return self.key


@attrs.frozen(kw_only=True, eq=False, repr=False)
class CancelTimer(Notice):
    """Cancel the timer ``key``; a ``TimerFired`` that crosses it is absorbed."""

    key: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class RunStopHooks(AwaitingCommand):
    """Run the external Stop hooks for the natural stop of ``turn_id``; answer
    ``StopHookDecided`` or ``StopHookFailed`` echoing ``run_id`` (SO-6)."""

    answered_by: ClassVar[tuple[str, ...]] = ("StopHookDecided", "StopHookFailed")
    run_id: str = attrs.field(validator=is_id)
    turn_id: str = attrs.field(validator=is_id)
    #: How many times in a row the hooks blocked before this run (0 at the first), so a host
    #: can tell its hooks; at ``cap`` consecutive blocks one more block ends the turn.
    consecutive_blocks: int = attrs.field(default=0, validator=non_negative)
    #: The configured cap of consecutive blocks (``SessionConfig.stop_hook_cap``).
    cap: int = attrs.field(default=8, validator=non_negative)

    @property
    def answer_id(self) -> str:
        return self.run_id


@attrs.frozen(kw_only=True, eq=False, repr=False)
class RestoreMidTurnMessages(Notice):
    """A drain reply came after its timeout: put its messages back where the user can send them
    (BR-3); its queued-prompt snapshot was discarded as stale."""

    drain_id: str = attrs.field(validator=is_id)
    messages: tuple[str, ...] = attrs.field()


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PromptRefused(Notice):
    """A queued prompt was refused (the FIFO is full, or its id is in use): hand ``text`` back."""

    prompt_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)
    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AutomaticTurnDeferred(Notice):
    """An automatic turn waits: a turn runs, or the guard's chain can still resume (BG-5).
    ``coalesced_into`` names the deferred turn of the same recurring task it joined (BG-6)."""

    turn_id: str = attrs.field(validator=is_id)
    coalesced_into: str | None = attrs.field(default=None, validator=optional(is_id))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AutomaticTurnDropped(Notice):
    """An automatic turn will not run here: an unrelated one evicted from the bounded queue
    (BG-6), one that found the queue full of turns related to the live chain, or one that raced
    the close. Its prompt is handed back whole, so the host can deliver it again or show it."""

    turn_id: str = attrs.field(validator=is_id)
    message_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)
    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class RetryWithdrawn(Notice):
    """The retry window of ``turn_id`` (a turn that ended with a resumable error) ran out:
    ``ContinueTurn`` is no longer accepted for it, its records will be written first by the next
    prompt, its saved Lead instructions are reported unapplied, and automatic turns may run
    (TL-11, ``SessionConfig.retry_window``)."""

    turn_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class OfferFollowUpSuggestions(Notice):
    """The turn ended and nothing has priority: the host may ask for follow-up suggestions."""

    turn_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SuppressFollowUpSuggestions(Notice):
    """No follow-up suggestions now: a guard chain can resume or a queued prompt has priority
    (BG-7)."""

    turn_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Warn(Notice):
    """Show the user a warning (for example: the Stop-hook cap was reached)."""

    text: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Publish(Notice):
    """Send ``entry`` to the live subscribers; it is kept in the event ring for replay."""

    entry: RingEntry = attrs.field(validator=one_of(RingEntry))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ReplayEvents(Notice):
    """Send ``entries`` to the client that attached; ``gap`` says some were lost to rollover."""

    client_id: str = attrs.field(validator=is_id)
    entries: tuple[RingEntry, ...] = attrs.field()
    gap: bool = attrs.field(validator=is_bool)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class CloseSession(Notice):
    """The session is over (grace expired, or closed by the client): release its resources."""

    reason: str = attrs.field(validator=is_str)
