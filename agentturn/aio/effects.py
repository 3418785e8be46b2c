"""Effects: what a host gives the driver, one async callable per kind of awaiting command.

Theory of operation
-------------------
The driver carries out every command a reducer returns; for each command that awaits an answer
it calls the host's effect in a task of its own and turns what the effect returns into the
answering event, with the id the command asked to echo. An effect never builds an event and
never sees another command's id, so it cannot answer the wrong thing. Each effect is a
:class:`typing.Protocol`, so ``mypy --strict`` checks a host's functions against it:

* ``persist`` (``Persist``): returns nothing (``Persisted``); raises: ``PersistFailed``;
* ``model`` (``RequestModelStream``): yields wire objects; raises: ``StreamFailed`` (below);
* ``permission`` (``AskPermission``): a ``PermissionDecision``; raises: ``CANCEL``, never an
  allow;
* ``tool`` (``ExecuteTool``): a :class:`ToolResult`; raises: an error result;
* ``review`` (each call of a completed response): a :class:`CallReview`; raises: every call
  of that response waits for an explicit allow;
* ``save_lead`` (``SaveLead``): nothing (``LeadSaved``); raises: ``LeadSaveFailed``;
* ``title`` (``RequestTitle``): the title; raises: ``TitleFailed``;
* ``natural_stop`` (``DecideNaturalStop``): a :class:`StopDecision`; raises: the turn ends as
  it would have;
* ``stop_hooks`` (``RunStopHooks``): a :class:`HookVerdict`; raises: ``StopHookFailed``;
* ``drain`` (``DrainMidTurnQueue``): a :class:`DrainReply`; raises: no answer, the drain's
  timer bounds the wait (BR-3).

A value an event refuses (a title that is not a ``str``) counts as a raise. The model effect is
an async iterator of the engine's wire objects (an SDK event's ``model_dump()``, or the SSE
``data:`` JSON; for a request made without streaming, the one whole response): the driver feeds
them to an :mod:`agentturn.engines` accumulator started with the requested output limit,
answers ``StreamOpened`` at the first object and the accumulator's one event at the end, so the
cut-off signals work without the host writing any of it. An effect that knows the engine
accepted the request before its first object (the HTTP response's headers came; a request made
without streaming is on its way) may yield :data:`OPENED` first: ``StreamOpened`` is answered
then, and a failure after it is the stream's, not the budgeting step's. A
completed response's calls then pass the host's ``review`` (``agentturn.review_calls``: which
need permission, which are refused) before the turn sees them. Before
the first object it may raise :class:`CompactionError` or :class:`TokenLimitError` (the
budgeting step, TL-2); any other exception is ``StreamFailed``: raise :class:`StreamError` to
say whether it was a network error, else an ``OSError`` (``ConnectionError``,
``TimeoutError`` ...), raised or among the exception's causes (an SDK's own error raised from
the socket's), is one and the rest are not.

**Cancellation contract.** ``CancelStream`` cancels the model effect's task: the iterator is
closed (``aclose``, in a shielded scope with a deadline). The cancellation reaches the effect at
the ``await`` it waits in, and anyio's cancellation is level-triggered: a cleanup of the
effect's own that awaits (an ``async with`` over the HTTP response) must shield itself, as
httpx's response close does (``with anyio.CancelScope(shield=True):``).
``DismissPermission`` cancels the permission effect's task: close the dialog in a ``finally``.
``CancelTool`` never cancels a tool's task: it sets the :class:`StopSignal` the tool was given.
A tool that can stop without leaving work half done watches it (``with stop.scope() as scope:``
around the interruptible part) and returns ``ToolResult(cancelled=True)`` with what it did; a
tool that cannot (a write) ignores it and returns its whole result. Either way the driver
answers exactly one ``ToolFinished``. The reducers decide when to stop; the tool decides only
whether it can, as only it knows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

import anyio
import attrs

from ..commands import (
    AskPermission,
    DecideNaturalStop,
    ExecuteTool,
    Persist,
    RequestModelStream,
    RequestTitle,
    SaveLead,
)
from ..events import PermissionDecision
from ..records import ToolCall
from ..session.vocabulary import DrainMidTurnQueue, RunStopHooks

__all__ = [
    "OPENED",
    "CallReview",
    "CompactionError",
    "DrainEffect",
    "DrainReply",
    "Effects",
    "HookVerdict",
    "ModelEffect",
    "NaturalStopEffect",
    "PermissionEffect",
    "PersistEffect",
    "ReviewEffect",
    "SaveLeadEffect",
    "StopDecision",
    "StopHooksEffect",
    "StopSignal",
    "StreamError",
    "TextSink",
    "TitleEffect",
    "TokenLimitError",
    "ToolEffect",
    "ToolResult",
]


#: A text sink: called with a request's id and each piece of its response's text as it streams
#: (to show it; the turn still takes the whole ``StreamCompleted``); may be a coroutine function.
TextSink = Callable[[str, str], "Awaitable[None] | None"]


class _Opened(Mapping[str, Any]):
    """The type of :data:`OPENED`: an empty mapping, so a model effect's type stays one."""

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "agentturn.aio.OPENED"


#: Yielded by a model effect before its first wire object: the engine accepted the request, so
#: the driver answers ``StreamOpened`` now rather than at the first object (never fed to the
#: accumulator). Yield it at most once, first.
OPENED: Mapping[str, Any] = _Opened()


class CompactionError(Exception):
    """Raised by a model effect before its first wire object: the prompt could not be
    compacted (``CompactionFailed``)."""


class StreamError(Exception):
    """Raised by a model effect to say how its request failed: ``StreamFailed`` with this
    message and ``network`` (an SDK's connection error is a network error; its API errors are
    not). Any other exception counts as a network error when it is an ``OSError``."""

    def __init__(self, message: str, *, network: bool) -> None:
        super().__init__(message)
        self.network = network


class TokenLimitError(Exception):
    """Raised by a model effect before its first wire object: the prompt is over the token
    limit (``TokenLimitRejected``)."""


@attrs.frozen(kw_only=True)
class ToolResult:
    """What a tool returns; the fields are ``ToolFinished``'s (see it for their meaning)."""

    output: str
    error: bool = False
    #: True when the tool stopped short (after its :class:`StopSignal`, or on its own).
    cancelled: bool = False
    structured: Any = None
    ends_task: bool = False


@attrs.frozen(kw_only=True)
class CallReview:
    """The host's rules for one tool call of a completed response (``review_calls``):
    ``refuse`` is the reason the model is told instead of running it; ``needs_permission``
    makes it wait for an explicit allow (TL-3)."""

    needs_permission: bool = False
    refuse: str | None = None


@attrs.frozen(kw_only=True)
class StopDecision:
    """The answer to ``DecideNaturalStop``: ``None`` ends the turn, a text continues it."""

    message_id: str | None = None
    text: str | None = None


@attrs.frozen(kw_only=True)
class HookVerdict:
    """The Stop hooks' verdict: ``block`` with a ``reason`` asks the model to continue."""

    block: bool = False
    reason: str | None = None


@attrs.frozen(kw_only=True)
class DrainReply:
    """The client's reply to a drain: its mid-turn messages and its ``hasQueuedPrompt``."""

    messages: tuple[str, ...] = ()
    has_queued_prompt: bool | None = None


class StopSignal:
    """What ``CancelTool`` sets for the running tool: the user stopped, stop if you safely can.

    ``requested`` says whether it is set, ``await wait()`` waits for it, and ``scope()`` gives
    an :class:`anyio.CancelScope` that is cancelled as soon as it is set (already cancelled if
    it is), for the part of the tool that may be interrupted::

        with stop.scope() as scope:
            found = await search(query)
        if scope.cancelled_caught:
            return ToolResult(output="stopped before the search ended", cancelled=True)
    """

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._scopes: list[anyio.CancelScope] = []

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()

    def scope(self) -> anyio.CancelScope:
        scope = anyio.CancelScope()
        if self.requested:
            scope.cancel()
        else:
            self._scopes.append(scope)
        return scope

    def request(self) -> None:
        """Set the signal (the driver does, on ``CancelTool``)."""
        self._event.set()
        scopes, self._scopes = self._scopes, []
        for scope in scopes:
            scope.cancel()


class PersistEffect(Protocol):
    """Save ``command.records`` durably, in order; raise if they could not be saved."""

    async def __call__(self, command: Persist, /) -> None: ...


class ModelEffect(Protocol):
    """Run the budgeting step, open the stream, and yield the engine's wire objects (:data:`OPENED`
    first if the engine's acceptance comes before them)."""

    def __call__(self, command: RequestModelStream, /) -> AsyncIterator[Mapping[str, Any]]: ...


class ReviewEffect(Protocol):
    """The host's rules for a tool call the model asked for (plain code, no I/O)."""

    def __call__(self, call: ToolCall, /) -> CallReview: ...


class PermissionEffect(Protocol):
    """Ask the user whether ``command.call`` may run; close the dialog when cancelled."""

    async def __call__(self, command: AskPermission, /) -> PermissionDecision: ...


class ToolEffect(Protocol):
    """Run ``command.call``; watch ``stop`` if the tool can stop safely."""

    async def __call__(self, command: ExecuteTool, stop: StopSignal, /) -> ToolResult: ...


class SaveLeadEffect(Protocol):
    """Save the Lead instruction ``command.record``; raise if it could not be saved."""

    async def __call__(self, command: SaveLead, /) -> None: ...


class TitleEffect(Protocol):
    """Ask the naming model for a title."""

    async def __call__(self, command: RequestTitle, /) -> str: ...


class NaturalStopEffect(Protocol):
    """Decide a held natural stop (``TurnConfig(hold_natural_stops=True)`` only)."""

    async def __call__(self, command: DecideNaturalStop, /) -> StopDecision: ...


class StopHooksEffect(Protocol):
    """Run the external Stop hooks."""

    async def __call__(self, command: RunStopHooks, /) -> HookVerdict: ...


class DrainEffect(Protocol):
    """Ask the client for the mid-turn messages it holds."""

    async def __call__(self, command: DrainMidTurnQueue, /) -> DrainReply: ...


@attrs.frozen(kw_only=True)
class Effects:
    """Every effect the driver may need. The four a turn always needs are required; the rest
    have a documented stand-in when left out:

    * ``review``: every call runs as the engine sent it (no permission asked, none refused);
      a review that raises makes every call of that response wait for an explicit allow;
    * ``save_lead``: ``LeadSaveFailed`` ("no Lead storage"): the draft comes back (LD-7);
    * ``title``: ``TitleFailed`` ("no namer");
    * ``natural_stop``: the turn driver refuses a ``hold_natural_stops`` config without it;
    * ``stop_hooks``: ``StopHookFailed`` ("no Stop hooks"), which never blocks (SO-6);
    * ``drain``: ``MidTurnDrained`` with nothing held (the host keeps no mid-turn queue).
    """

    persist: PersistEffect
    model: ModelEffect
    permission: PermissionEffect
    tool: ToolEffect
    review: ReviewEffect | None = None
    save_lead: SaveLeadEffect | None = None
    title: TitleEffect | None = None
    natural_stop: NaturalStopEffect | None = None
    stop_hooks: StopHooksEffect | None = None
    drain: DrainEffect | None = None
