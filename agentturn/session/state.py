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
from ..guard.state import GuardConfig, GuardState
from ..phases import PhaseGraph
from ..turn_state import TurnConfig, TurnState
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
_LIVE = [S.IDLE, S.TURN, S.DRAINING, S.HOOKS]
_RUNNING = [S.TURN, S.DRAINING, S.HOOKS]

#: Turn-family events the session hands to the turn as they are.
TURN_EVENTS = (
    "PromptSubmitted", "ContinueTurn", "StopPressed", "LeadSubmitted", "ManualRename",
    "AutoTitlePreferenceChanged", "PermissionDecided", "ClientDisconnected", "StreamOpened",
    "StreamCompleted", "StreamFailed", "CompactionFailed", "TokenLimitRejected", "ToolFinished",
    "Persisted", "PersistFailed", "LeadSaved", "LeadSaveFailed", "TitleGenerated", "TitleFailed",
    "HaltTurn",
)
#: Guard facts the session hands to the guard as they are (the rest it derives itself).
GUARD_EVENTS = (
    "ApprovalModeChanged", "ModelChanged", "SettingsChanged", "TodoArgumentsObserved",
    "TodoHistoryReplayed", "TodoDiskStateLoaded", "SubagentTodoObserved",
)
#: The session's own events that never change the phase by themselves.
_BOOKKEEPING = (
    "PromptCompleted", "PromptAborted", "BackgroundStarted", "BackgroundEnded",
    "NotificationQueued", "NotificationConsumed", "ClientAttached", "ClientDetached",
    "LifecycleChanged", *GUARD_EVENTS,
)

#: Events that can end the guard's hold on automatic turns (a trust-clearing lifecycle change,
#: Plan mode, a hard stop, any guard event): in IDLE they may start a held automatic turn.
_RELEASING_IN_IDLE = frozenset(
    (name, S.IDLE) for name in ("LifecycleChanged", "HardStopped", *GUARD_EVENTS))

SESSION_GRAPH: PhaseGraph[SessionPhase] = PhaseGraph(
    "session",
    SessionPhase,
    SessionPhase.IDLE,
    [
        # a turn starts (a prompt, a queued prompt, an automatic turn, a continue)
        *[(name, [S.IDLE], [S.IDLE, S.TURN])
          for name in ("PromptSubmitted", "PromptQueued", "PromptCompleted", "PromptAborted",
                       "AutomaticTurnDue", "ContinueTurn")],
        *[(name, [phase], [phase]) for name in ("PromptQueued", "AutomaticTurnDue")
          for phase in _RUNNING],
        # a prompt racing the close comes back (PromptRefused), never an error
        *[("PromptQueued", [phase], [phase]) for phase in (S.CLOSING, S.CLOSED)],
        # the turn family, while a turn runs or ends (its own table says the rest)
        *[(name, [S.TURN], [S.TURN, S.DRAINING, S.HOOKS, S.IDLE]) for name in TURN_EVENTS
          if name not in ("PromptSubmitted", "ContinueTurn")],
        *[(name, [S.DRAINING, S.HOOKS], [S.DRAINING, S.HOOKS, S.TURN, S.IDLE])
          for name in TURN_EVENTS if name not in ("PromptSubmitted", "ContinueTurn")],
        *[(name, [S.IDLE], [S.IDLE]) for name in TURN_EVENTS
          if name not in ("PromptSubmitted", "ContinueTurn")],
        *[(name, [S.CLOSING], [S.CLOSING, S.CLOSED]) for name in TURN_EVENTS
          if name not in ("PromptSubmitted", "ContinueTurn")],
        # a closed session still hears what it asked for before closing (a naming request,
        # a late dialog answer, a Lead typed as it closed): the idle turn's table says how
        *[(name, [S.CLOSED], [S.CLOSED]) for name in TURN_EVENTS
          if name not in ("PromptSubmitted", "ContinueTurn")],
        # the stop order
        # (the reply to an earlier drain that timed out joins as Lead and keeps DRAINING)
        ("MidTurnDrained", [S.DRAINING], [S.TURN, S.HOOKS, S.IDLE, S.DRAINING]),
        *[("MidTurnDrained", [phase], [phase])
          for phase in (S.IDLE, S.TURN, S.HOOKS, S.CLOSING, S.CLOSED)],
        ("TimerFired", [S.DRAINING], [S.TURN, S.HOOKS, S.IDLE, S.DRAINING, S.CLOSING,
                                      S.CLOSED]),
        *[("TimerFired", [phase], [phase, S.CLOSING, S.CLOSED])
          for phase in (S.IDLE, S.TURN, S.HOOKS)],
        ("TimerFired", [S.CLOSING], [S.CLOSING]),
        ("TimerFired", [S.CLOSED], [S.CLOSED]),
        *[(name, [S.HOOKS], [S.TURN, S.IDLE]) for name in ("StopHookDecided", "StopHookFailed")],
        *[(name, [phase], [phase]) for name in ("StopHookDecided", "StopHookFailed")
          for phase in (S.IDLE, S.TURN, S.DRAINING, S.CLOSING, S.CLOSED)],
        # bookkeeping and lifecycle
        *[(name, [phase], [phase]) for name in _BOOKKEEPING for phase in _LIVE
          if (name, phase) not in {("PromptCompleted", S.IDLE), ("PromptAborted", S.IDLE)}
          and (name, phase) not in _RELEASING_IN_IDLE],
        # what can end the guard's hold while idle starts a held automatic turn (BG-5)
        *[(name, [S.IDLE], [S.IDLE, S.TURN]) for name, _ in _RELEASING_IN_IDLE],
        *[(name, [S.CLOSING], [S.CLOSING]) for name in _BOOKKEEPING],
        ("ClientDetached", [S.CLOSED], [S.CLOSED]),
        ("HardStopped", _RUNNING, [S.TURN, S.IDLE]),

        ("HardStopped", [S.CLOSING], [S.CLOSING, S.CLOSED]),
        ("CloseRequested", _LIVE, [S.CLOSING, S.CLOSED]),
        ("CloseRequested", [S.CLOSING], [S.CLOSING]),
        ("CloseRequested", [S.CLOSED], [S.CLOSED]),
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


def _at_least_one(instance: Any, attribute: attrs.Attribute[int], value: Any) -> None:
    if type(value) is not int or value < 1:
        raise FieldError(f"SessionConfig.{attribute.name} must be an int >= 1")


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
    ring_pinned: int = attrs.field(default=32, validator=_at_least_one)

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
    #: The running turn is an automatic (cron, notification, wakeup) turn: no Stop hooks (BG-4).
    automatic: bool = False
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
    # --- the natural stop being decided ---
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
