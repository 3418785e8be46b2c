"""The daemon FIFO of queued prompts, and the drain reply's queued-prompt flag (BR-1 ... BR-3).

Theory of operation
-------------------
A daemon session runs one turn at a time; prompts that arrive while a turn runs wait here in
arrival order. An entry is *complete* once its whole content has arrived (a client may register a
prompt before its upload finishes) and *aborted* when the user cancels it before it starts; an
aborted entry leaves the queue at once, so a cancelled request can never come back (SO-3).

:func:`has_queued_prompt` is the bridge's rule for the drain reply's ``hasQueuedPrompt`` (BR-1):
true only when the list holds a complete entry still queued and not aborted. The session ORs it
with the flag a client sends in its drain reply; an omitted flag counts as false (BR-2), and the
snapshot of a reply that arrives after the drain timed out is discarded as stale (BR-3).

The queue is bounded (:data:`MAX_QUEUED`): a prompt beyond the bound is refused with its text
handed back by the session, never dropped.
"""

from __future__ import annotations

import attrs

from .._base import Value

__all__ = [
    "MAX_QUEUED",
    "QueuedPrompt",
    "abort",
    "admit",
    "complete",
    "find",
    "has_queued_prompt",
    "pop_next",
]

#: The most prompts that may wait in one session's FIFO.
MAX_QUEUED = 32


@attrs.frozen(kw_only=True, eq=False, repr=False)
class QueuedPrompt(Value):
    """One prompt waiting for its turn."""

    prompt_id: str
    message_id: str
    text: str
    #: Its whole content has arrived; only a complete entry may start (BR-1).
    complete: bool = True


def find(queue: tuple[QueuedPrompt, ...], prompt_id: str) -> QueuedPrompt | None:
    """The entry ``prompt_id``, if it is queued."""
    for entry in queue:
        if entry.prompt_id == prompt_id:
            return entry
    return None


def admit(queue: tuple[QueuedPrompt, ...], entry: QueuedPrompt) -> tuple[QueuedPrompt, ...] | None:
    """The queue with ``entry`` at its end, or ``None`` when it is full."""
    if len(queue) >= MAX_QUEUED:
        return None
    return (*queue, entry)


def complete(queue: tuple[QueuedPrompt, ...], prompt_id: str, text: str | None
             ) -> tuple[QueuedPrompt, ...]:
    """Mark ``prompt_id`` complete (with its final text, when given)."""
    return tuple(
        attrs.evolve(entry, complete=True, text=entry.text if text is None else text)
        if entry.prompt_id == prompt_id else entry
        for entry in queue
    )


def abort(queue: tuple[QueuedPrompt, ...], prompt_id: str) -> tuple[QueuedPrompt, ...]:
    """Remove the aborted ``prompt_id``: it can never start later (SO-3)."""
    return tuple(entry for entry in queue if entry.prompt_id != prompt_id)


def has_queued_prompt(queue: tuple[QueuedPrompt, ...]) -> bool:
    """BR-1: a complete entry is queued (aborted entries are gone already)."""
    return any(entry.complete for entry in queue)


def pop_next(
    queue: tuple[QueuedPrompt, ...],
) -> tuple[tuple[QueuedPrompt, ...], QueuedPrompt | None]:
    """Take the first complete entry, keeping the others in order.

    An incomplete entry ahead of it does not block it: the FIFO orders complete prompts, and one
    still uploading takes its place when it completes.
    """
    for index, entry in enumerate(queue):
        if entry.complete:
            return queue[:index] + queue[index + 1:], entry
    return queue, None
