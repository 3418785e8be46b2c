"""From an effect's result to the answering event: one small async function per command.

Theory of operation
-------------------
Each function here calls one effect for one command and returns the event that answers it,
echoing the command's id: the effect's value when it returned one an event accepts, the
command's documented failure event when it raised (or returned something the event refuses),
``None`` where the command has no failure event (a drain: its timer bounds the wait). Nothing
here decides what happens next: a failure event is the reducer's to weigh. A cancellation the
driver or the host asked for is not caught: a cancelled effect answers nothing, which is what
``CancelStream`` and ``DismissPermission`` ask for. A cancellation the effect raised on its own
(it awaited a future that was cancelled under it) is its failure, like any exception
(:func:`_failed`). ``KeyboardInterrupt`` and ``SystemExit`` are not caught: they end the
driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import anyio

from .._base import Event
from ..commands import (
    AskPermission,
    DecideNaturalStop,
    ExecuteTool,
    Persist,
    RequestModelStream,
    RequestTitle,
    SaveLead,
)
from ..engines import EngineStream
from ..events import (
    CompactionFailed,
    LeadSaved,
    LeadSaveFailed,
    NaturalStopDecided,
    PermissionDecided,
    PermissionDecision,
    Persisted,
    PersistFailed,
    StreamCompleted,
    StreamOpened,
    TitleFailed,
    TitleGenerated,
    TokenLimitRejected,
    ToolFinished,
)
from ..session.vocabulary import (
    DrainMidTurnQueue,
    MidTurnDrained,
    RunStopHooks,
    StopHookDecided,
    StopHookFailed,
)
from ..turn import review_calls
from .effects import (
    OPENED,
    CompactionError,
    Effects,
    StopSignal,
    StreamError,
    TextSink,
    TokenLimitError,
)

__all__ = ["drain", "model_stream", "natural_stop", "permission", "persist", "save_lead",
           "stop_hooks", "title", "tool"]

#: How long closing a cancelled stream's iterator may take (its HTTP response closing).
CLOSE_SECONDS = 5.0


def _failed(error: BaseException) -> bool:
    """Whether ``error``, raised by an effect, is the effect's failure (answered with the
    command's failure event) rather than the driver's own end: any ``Exception``; a
    ``GeneratorExit``; and a cancellation nobody asked for: the effect awaited something that
    was cancelled under it (a dialog's future the UI cancelled as its window closed), while
    neither the driver nor the host cancelled this task (no enclosing cancel scope was
    cancelled, and on asyncio the task has no cancellation request of its own)."""
    if isinstance(error, Exception | GeneratorExit):
        return True
    if not isinstance(error, anyio.get_cancelled_exc_class()):
        return False  # KeyboardInterrupt, SystemExit: they end the driver
    if anyio.current_effective_deadline() == -math.inf:
        return False  # Stop, a dismissed dialog, the driver closing: ours, not a failure
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio
        return True
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return not (cancelling is not None and cancelling() > 0)


def reason(error: BaseException) -> str:
    """A failure event's text for an exception: its message, or its class name."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def persist(effects: Effects, command: Persist) -> Event:
    try:
        await effects.persist(command)
    except BaseException as error:
        if not _failed(error):
            raise
        return PersistFailed(key=command.key, reason=reason(error))
    return Persisted(key=command.key)


async def save_lead(effects: Effects, command: SaveLead) -> Event:
    if effects.save_lead is None:
        return LeadSaveFailed(lead_id=command.lead_id, reason="no Lead storage")
    try:
        await effects.save_lead(command)
    except BaseException as error:
        if not _failed(error):
            raise
        return LeadSaveFailed(lead_id=command.lead_id, reason=reason(error))
    return LeadSaved(lead_id=command.lead_id)


async def title(effects: Effects, command: RequestTitle) -> Event:
    if effects.title is None:
        return TitleFailed(request_id=command.request_id, reason="no namer")
    try:
        return TitleGenerated(request_id=command.request_id, title=await effects.title(command))
    except BaseException as error:
        if not _failed(error):
            raise
        return TitleFailed(request_id=command.request_id, reason=reason(error))


async def permission(effects: Effects, command: AskPermission) -> Event:
    call_id = command.call.call_id
    try:
        return PermissionDecided(call_id=call_id, decision=await effects.permission(command))
    except BaseException as error:
        if not _failed(error):
            raise
        # No failure event exists: CANCEL is the answer that never runs the call and never
        # lets the turn go on as if the user had answered (TL-3: nothing approves by default).
        return PermissionDecided(call_id=call_id, decision=PermissionDecision.CANCEL)


async def tool(effects: Effects, command: ExecuteTool, stop: StopSignal) -> Event:
    call_id = command.call.call_id
    try:
        result = await effects.tool(command, stop)
        return ToolFinished(call_id=call_id, output=result.output, error=result.error,
                            cancelled=result.cancelled, structured=result.structured,
                            ends_task=result.ends_task)
    except BaseException as error:
        if not _failed(error):
            raise
        return ToolFinished(call_id=call_id, output=f"the tool failed: {reason(error)}",
                            error=True)


async def natural_stop(effects: Effects, command: DecideNaturalStop) -> Event:
    if effects.natural_stop is not None:
        try:
            decision = await effects.natural_stop(command)
            return NaturalStopDecided(request_id=command.request_id,
                                      message_id=decision.message_id, text=decision.text)
        except BaseException as error:
            if not _failed(error):
                raise
            pass
    return NaturalStopDecided(request_id=command.request_id)  # the turn ends as it would have


async def stop_hooks(effects: Effects, command: RunStopHooks) -> Event:
    if effects.stop_hooks is None:
        return StopHookFailed(run_id=command.run_id, error="no Stop hooks")
    try:
        verdict = await effects.stop_hooks(command)
        return StopHookDecided(run_id=command.run_id, block=verdict.block, reason=verdict.reason)
    except BaseException as error:
        if not _failed(error):
            raise
        return StopHookFailed(run_id=command.run_id, error=reason(error))


async def drain(effects: Effects, command: DrainMidTurnQueue) -> Event | None:
    if effects.drain is None:
        return MidTurnDrained(drain_id=command.drain_id)  # no mid-turn queue: nothing held
    try:
        reply = await effects.drain(command)
        return MidTurnDrained(drain_id=command.drain_id, messages=tuple(reply.messages),
                              has_queued_prompt=reply.has_queued_prompt)
    except BaseException as error:
        if not _failed(error):
            raise
        return None  # no failure event: the drain's timer bounds the wait (BR-3)


async def _close(iterator: AsyncIterator[Mapping[str, Any]]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return
    # The stream's answer is already decided: a close that fails changes nothing.
    with anyio.move_on_after(CLOSE_SECONDS, shield=True), contextlib.suppress(Exception):
        await aclose()


def _text_between(before: Any, after: Any) -> str:
    """The text fragments an accumulator's draft gained from ``before`` to ``after`` (its text
    is a linked list of fragments, newest first: walk back to the old head)."""
    pieces: list[str] = []
    while after is not before and after is not None:
        pieces.append(after[0])
        after = after[1]
    return "".join(reversed(pieces))


async def model_stream(effects: Effects, command: RequestModelStream, wire: type[EngineStream],
                       max_output_tokens: int | None, opened: Callable[[Event], None],
                       on_text: TextSink | None = None) -> Event:
    """Feed the model effect's wire objects to ``wire``'s accumulator; ``opened(event)`` is
    called with ``StreamOpened`` at :data:`~agentturn.aio.OPENED` or the first object, and
    ``on_text`` with each piece of the response's text as it arrives; return the request's one
    last event."""
    rid = command.request_id
    acc = wire.start(rid, max_output_tokens=max_output_tokens)
    started = False
    try:
        iterator = effects.model(command).__aiter__()
        try:
            async for chunk in iterator:
                if not started:
                    started = True
                    opened(StreamOpened(request_id=rid))
                    if chunk is OPENED:
                        continue
                before = acc.draft.text
                acc = acc.feed(chunk)
                if on_text is not None and acc.draft.text is not before:
                    shown = on_text(rid, _text_between(before, acc.draft.text))
                    if shown is not None:
                        await shown
                if acc.event is not None:
                    break
        finally:
            await _close(iterator)
    except CompactionError as error:
        if not started:
            return CompactionFailed(request_id=rid, reason=reason(error))
        return acc.abort(reason(error), network=False)
    except TokenLimitError as error:
        if not started:
            return TokenLimitRejected(request_id=rid, reason=reason(error))
        return acc.abort(reason(error), network=False)
    except BaseException as error:
        if not _failed(error):
            raise
        network = error.network if isinstance(error, StreamError) else _from_os_error(error)
        text = str(error) if isinstance(error, StreamError) else reason(error)
        return acc.abort(text or "the stream failed", network=network)
    return _reviewed(effects, acc.finish())


def _from_os_error(error: BaseException, depth: int = 0) -> bool:
    """Whether ``error`` is an ``OSError`` or was caused by one (SDKs wrap the socket's error in
    their own: ``raise ... from``, or raised while handling it; a task group raises an
    exception group holding it), walked to a bounded depth."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 16 and depth < 4:
        if isinstance(current, OSError):
            return True
        members = getattr(current, "exceptions", None)  # an exception group's
        if isinstance(members, tuple) and any(
                isinstance(member, BaseException) and _from_os_error(member, depth + 1)
                for member in members):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _reviewed(effects: Effects, event: Event) -> Event:
    """A completed response with the host's review applied to its calls (``review_calls``)."""
    if effects.review is None or not isinstance(event, StreamCompleted) or not event.tool_calls:
        return event
    try:
        reviews = [(call.call_id, effects.review(call)) for call in event.tool_calls]
        refuse = {call_id: r.refuse for call_id, r in reviews if r.refuse is not None}
        asked = [call_id for call_id, r in reviews if r.needs_permission]
        return review_calls(event, refuse=refuse, needs_permission=asked)
    except BaseException as error:
        if not _failed(error):
            raise
        # Nothing runs on a review that failed without an explicit allow (TL-3).
        return review_calls(event, needs_permission=[c.call_id for c in event.tool_calls])
