"""The session's configuration, phases, phase graph and state.

Theory of operation
-------------------
A session holds one chat's :class:`~agentturn.TurnState` (turn lifecycle, Lead, titles) and one
:class:`~agentturn.guard.GuardState`, and around them what only a session knows: the daemon FIFO
of queued prompts, background work and its chain baseline, deferred automatic turns, the event
ring and usage, the attached clients, and where a natural stop stands in the stop order.

:class:`SessionPhase` is that orchestration: ``IDLE`` (no turn), ``TURN`` (a turn runs),
``DRAINING`` and ``HOOKS`` (a natural stop waits for the mid-turn drain or the Stop hooks),
``CLOSING`` (the session ends once the running turn has), ``CLOSED``. :data:`SESSION_GRAPH` is the
one declaration of which events each phase takes; the turn and the guard keep checking their own.

The session's size does not depend on how long it has run: the turn and guard are bounded, the
FIFO (:data:`~agentturn.session.fifo.MAX_QUEUED`), the deferred queue and the ring are bounded,
and the background sets hold the items that are live (which the host's own limits bound).
"""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs

from .._base import FieldError, State, Value, is_bool, is_id, one_of
from ..commands import TurnOrigin
from ..guard.state import GuardConfig, GuardState
from ..phases import PhaseGraph
from ..turn.state import TurnConfig, TurnState
from . import background as bg
from .fifo import QueuedPrompt
from .ring import EventRing, Usage

__all__ = [
    "DEFAULT_STOP_HOOK_CAP",
    "GRACE_TIMER",
    "SESSION_GRAPH",
    "Continuation",
    "SessionConfig",
    "SessionPhase",
    "SessionState",
]

#: The external Stop hooks' consecutive-block cap when none (or a nonsense one) is configured.
DEFAULT_STOP_HOOK_CAP = 8
#: The key of the client grace-period timer (BR-4).
GRACE_TIMER = "grace"
#: The origins of automatic turns.
AUTOMATIC_ORIGINS = frozenset({TurnOrigin.CRON, TurnOrigin.NOTIFICATION, TurnOrigin.WAKEUP})


class SessionPhase(enum.Enum):
    """Where the session's orchestration stands."""

    #: No turn runs; a prompt or an automatic turn may start one.
    IDLE = "idle"
    #: A turn runs.
    TURN = "turn"
    #: At a natural stop, the mid-turn drain reply (or its timeout) is awaited (SO-1, BR-3).
    DRAINING = "draining"
    #: At a natural stop, the external Stop hooks run (SO-6).
    HOOKS = "hooks"
    #: The session ends as soon as the running turn has ended (grace expired, closed).
    CLOSING = "closing"
    #: The session is over.
    CLOSED = "closed"


S = SessionPhase
_RUNNING = [S.TURN, S.DRAINING, S.HOOKS]

#: Turn-family events the session hands to the turn as they are.
TURN_EVENTS = (
    "PromptSubmitted", "ContinueTurn", "StopPressed", "LeadSubmitted", "ManualRename",
    "AutoTitlePreferenceChanged", "PermissionDecided", "ClientDisconnected", "StreamOpened",
    "StreamCompleted", "StreamFailed", "CompactionFailed", "TokenLimitRejected", "ToolFinished",
    "Persisted", "PersistFailed", "LeadSaved", "LeadSaveFailed", "TitleGenerated", "TitleFailed",
)
#: Guard facts the session hands to the guard as they are (the rest it derives itself).
GUARD_EVENTS = (
    "ApprovalModeChanged", "ModelChanged", "SettingsChanged", "TodoArgumentsObserved",
    "TodoHistoryReplayed", "TodoDiskStateLoaded", "SubagentTodoObserved",
)
#: The session's own events that never start or end a turn by themselves (settle may start one
#: from IDLE after any step).
_BOOKKEEPING = (
    "PromptQueued", "PromptCompleted", "PromptAborted", "AutomaticTurnDue", "BackgroundStarted",
    "BackgroundEnded", "NotificationQueued", "NotificationConsumed", "ClientAttached",
    "ClientDetached", "LifecycleChanged", *GUARD_EVENTS,
)
#: The turn family's events a running turn takes (a new prompt or a retry starts one instead).
_IN_TURN = tuple(name for name in TURN_EVENTS if name not in ("PromptSubmitted", "ContinueTurn"))
_STOP_ANSWERS = ("MidTurnDrained", "StopHookDecided", "StopHookFailed")
#: Every event a session takes.
SESSION_EVENTS = (*TURN_EVENTS, *_BOOKKEEPING, *_STOP_ANSWERS, "TimerFired", "HardStopped",
                  "CloseRequested")

SESSION_GRAPH: PhaseGraph[SessionPhase] = PhaseGraph(
    "session",
    SessionPhase,
    SessionPhase.IDLE,
    [
        # Idle: after any step, settle may start the next turn (a prompt, a queued prompt, a
        # held automatic turn); a close or the grace timer may end the session.
        *[(name, [S.IDLE], [S.IDLE, S.TURN]) for name in SESSION_EVENTS
          if name not in ("CloseRequested", "TimerFired")],
        ("TimerFired", [S.IDLE], [S.IDLE, S.TURN, S.CLOSED]),
        ("CloseRequested", [S.IDLE], [S.CLOSED]),
        # A running turn: its own events move the stop order along or end it.
        *[(name, [phase], [S.TURN, S.DRAINING, S.HOOKS, S.IDLE]) for name in _IN_TURN
          for phase in _RUNNING],
        *[(name, [phase], [phase]) for name in _BOOKKEEPING for phase in _RUNNING],
        # a resend of the running turn's prompt, a second click on Continue: absorbed
        *[(name, [phase], [phase]) for name in ("PromptSubmitted", "ContinueTurn")
          for phase in _RUNNING],
        ("MidTurnDrained", [S.DRAINING], [S.TURN, S.HOOKS, S.IDLE, S.DRAINING]),
        *[("MidTurnDrained", [phase], [phase]) for phase in (S.TURN, S.HOOKS)],
        *[(name, [S.HOOKS], [S.TURN, S.IDLE]) for name in ("StopHookDecided", "StopHookFailed")],
        *[(name, [phase], [phase]) for name in ("StopHookDecided", "StopHookFailed")
          for phase in (S.TURN, S.DRAINING)],
        ("TimerFired", [S.DRAINING], [S.TURN, S.HOOKS, S.IDLE, S.DRAINING, S.CLOSING,
                                      S.CLOSED]),
        *[("TimerFired", [phase], [phase, S.CLOSING, S.CLOSED]) for phase in (S.TURN, S.HOOKS)],
        ("HardStopped", _RUNNING, [S.TURN, S.IDLE]),
        ("CloseRequested", _RUNNING, [S.CLOSING, S.CLOSED]),
        # Closing: the halted turn finishes its final work, then the session closes; what
        # races the close is absorbed or handed back.
        *[(name, [S.CLOSING], [S.CLOSING, S.CLOSED]) for name in _IN_TURN],
        *[(name, [S.CLOSING], [S.CLOSING]) for name in SESSION_EVENTS if name not in _IN_TURN
          and name != "HardStopped"],
        ("HardStopped", [S.CLOSING], [S.CLOSING, S.CLOSED]),
        # Closed: everything is absorbed or handed back; a closed session still hears the
        # answers it asked for before closing (a title, a late dialog answer).
        *[(name, [S.CLOSED], [S.CLOSED]) for name in SESSION_EVENTS],
    ],
)


def _hook_cap(value: Any) -> int:
    """A non-finite, non-numeric or below-1 cap falls back to the default (SO-6)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DEFAULT_STOP_HOOK_CAP
    if not math.isfinite(value) or value < 1:
        return DEFAULT_STOP_HOOK_CAP
    return int(value)


def _seconds(instance: Any, attribute: attrs.Attribute[float], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value >= 0):
        raise FieldError(f"SessionConfig.{attribute.name} must be a finite number of seconds >= 0")


def _window(instance: Any, attribute: attrs.Attribute[float], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise FieldError(f"SessionConfig.{attribute.name} must be a number of seconds >= 0 "
                         "(math.inf for no limit)")


def _at_least_one(instance: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if type(value) is not int or value < 1:
        raise FieldError(f"SessionConfig.{attribute.name} must be an int >= 1")


def _at_least_two(instance: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    # the ring keeps at least one stage's two guard attempts past rollover (OB-6)
    if type(value) is not int or value < 2:
        raise FieldError(f"SessionConfig.{attribute.name} must be an int >= 2")


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SessionConfig(Value):
    """How a host runs its sessions. Read once, when a session is created (SG-C2)."""

    #: The chat this session runs.
    chat_id: str = attrs.field(validator=is_id)
    #: The turn lifecycle's configuration (the session always holds natural stops).
    turn: TurnConfig = attrs.field(factory=TurnConfig, validator=one_of(TurnConfig))
    #: The guard's gates; ``guard.daemon`` also says whether this is a daemon session (drain,
    #: FIFO, follow-up suggestions) or an interactive one.
    guard: GuardConfig = attrs.field(factory=GuardConfig, validator=one_of(GuardConfig))
    #: External Stop hooks are configured for foreground turns (``disableAllHooks`` in the guard
    #: configuration turns them off, never the built-in guard: SG-C4).
    stop_hooks: bool = attrs.field(default=False, validator=is_bool)
    #: Consecutive Stop-hook blocks allowed before the turn ends with a warning (SO-6); a
    #: non-finite or below-1 value falls back to 8.
    stop_hook_cap: int = attrs.field(default=DEFAULT_STOP_HOOK_CAP, converter=_hook_cap)
    #: How long the mid-turn drain reply is awaited (BR-3).
    drain_timeout: float = attrs.field(default=2.0, validator=_seconds)
    #: How long a session without clients lives on (BR-4).
    grace_period: float = attrs.field(default=10.0, validator=_seconds)
    #: The wire name of the built-in todo-write tool.
    todo_tool: str = attrs.field(default="todo_write", validator=is_id)
    #: The most automatic turns held at once (BG-6).
    max_deferred: int = attrs.field(default=bg.DEFAULT_MAX_DEFERRED, validator=_at_least_one)
    #: The event ring's bounds (OB-6).
    ring_capacity: int = attrs.field(default=256, validator=_at_least_one)
    ring_pinned: int = attrs.field(default=32, validator=_at_least_two)
    #: How long a daemon turn that ended with a resumable error keeps the chat for the user's
    #: ``ContinueTurn`` (TL-11): automatic turns wait meanwhile; when it runs out the retry is
    #: withdrawn (``RetryWithdrawn``) and they run. ``math.inf``: until the user acts.
    retry_window: float = attrs.field(default=300.0, validator=_window)

    @property
    def daemon(self) -> bool:
        """A daemon session: mid-turn drain, FIFO priority, follow-up suggestions."""
        return self.guard.daemon

    @property
    def hooks_enabled(self) -> bool:
        """External Stop hooks run at foreground natural stops."""
        return self.stop_hooks and not self.guard.disable_all_hooks


class Continuation(enum.Enum):
    """Who the continuation decided at a natural stop belongs to (for attribution)."""

    NONE = "none"
    #: A guard continuation, alone or coalesced with a hook's reason (SO-8).
    GUARD = "guard"
    #: A Stop hook's continuation alone.
    HOOK = "hook"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SessionState(State):
    """One session. Build it with :meth:`create`."""

    config: SessionConfig
    phase: SessionPhase = SessionPhase.IDLE
    turn: TurnState
    guard: GuardState
    #: Where the running (or last) turn came from; an automatic turn runs no Stop hooks (BG-4).
    origin: TurnOrigin = TurnOrigin.PROMPT
    fifo: tuple[QueuedPrompt, ...] = ()
    background: bg.Background = attrs.field(factory=bg.Background)
    deferred: bg.Deferred
    #: Prompt texts of held automatic turns, by turn id: what each will send when it starts.
    deferred_prompts: tuple[tuple[str, str, str], ...] = ()
    ring: EventRing
    usage: Usage = attrs.field(factory=Usage)
    clients: tuple[str, ...] = ()
    #: No client is attached and the grace timer runs (BR-4).
    grace: bool = False
    # --- the daemon FIFO beyond the session's own queue ---
    #: A drain reply said the client holds a complete queued prompt the session has not been
    #: sent: it has FIFO priority until it arrives or is aborted (SO-2, SO-5).
    client_prompt: bool = False
    #: A ``PromptAborted`` crossed the drain in flight: that reply's queued-prompt snapshot may
    #: predate the abort, so it is discarded as stale (BR-3).
    stale_snapshot: bool = False
    #: Prompt ids that started as turns, most recent last (bounded): an abort naming one is late.
    started_prompts: tuple[str, ...] = ()
    #: Drain ids, Stop-hook run ids and timer keys this session issued, most recent last
    #: (bounded): an answer to one that is no longer awaited is absorbed; any other is misuse.
    issued: tuple[str, ...] = ()
    #: The key of the running retry-window timer of a turn that ended with a resumable error.
    retry_timer: str = ""
    #: The last turn whose retry the session gave up (its window ran out, or an automatic turn
    #: or a new prompt took the chat): a Continue click naming it crossed that and is absorbed.
    withdrawn_retry: str = ""
    #: A turn ended while a naming request ran: its follow-up suggestions wait for the title
    #: (the suggestion call is serialized with the naming request, like every small request).
    follow_ups_due: str = ""
    # --- the natural stop being decided ---
    #: Natural stops of the running turn; drain and hook-run ids are numbered from it.
    stops: int = 0
    #: The drain in flight, and the last one that timed out (its late reply restores, BR-3).
    drain_id: str = ""
    late_drain: str = ""
    #: Why the session is closing (``CloseSession`` says it once the running turn has ended).
    close_reason: str = ""
    #: The last drain whose reply was taken: a second copy of that reply is stale (its
    #: messages were saved or handed back already).
    answered_drain: str = ""
    #: The Stop-hook run in flight.
    hook_run: str = ""
    #: Consecutive Stop-hook blocks (SO-6).
    hook_blocks: int = 0
    #: A drain saw both mid-turn messages and a complete queued prompt: the prompt keeps its
    #: priority at the next stop (SO-5).
    fifo_priority: bool = False
    #: The continuation decided at the last natural stop, attributed to its request.
    continuation: Continuation = Continuation.NONE
    #: The guard-attributable request awaiting its stream (commit on open, SG-B3).
    guard_request: str = ""
    #: The request of a Stop hook's own continuation, counted as a hook call when it opens.
    hook_request: str = ""
    #: The request the session withheld from the host (no third guard stream, SG-B5).
    withheld_request: str = ""
    #: The todo-write call running now, whose result the guard is handed once (SG-A3).
    todo_call: str = ""

    @classmethod
    def create(cls, config: SessionConfig) -> SessionState:
        """A new session, its guard decided once from ``config`` (SG-C2)."""
        if not isinstance(config, SessionConfig):
            raise FieldError("SessionState.create needs a SessionConfig")
        turn_config = attrs.evolve(config.turn, hold_natural_stops=True)
        return cls(
            config=config,
            turn=TurnState.create(config.chat_id, turn_config),
            guard=GuardState.create(config.guard),
            deferred=bg.Deferred(max_deferred=config.max_deferred),
            ring=EventRing.create(capacity=config.ring_capacity,
                                  pinned_capacity=config.ring_pinned),
        )

    @property
    def automatic(self) -> bool:
        """The running (or last) turn is an automatic (cron, notification, wakeup) turn."""
        return self.origin in AUTOMATIC_ORIGINS
