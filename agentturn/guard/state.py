"""The todo stop guard's configuration, phases, phase graph and state.

Theory of operation
-------------------
The guard is decided once, when a session is created (SG-C2): :class:`GuardConfig` is read by
:meth:`GuardState.create`, and a guard that is not enabled starts and stays in ``OFF``, where every
event is accepted and changes nothing, so the session behaves exactly as without it (SG-C6).

Otherwise the guard follows one *work chain* at a time. A chain starts unarmed (a new ordinary
prompt, a retry after trust was cleared, an unrelated automatic turn); a trusted todo-write result
arms it with the unfinished count. At a natural stop an armed chain with unfinished items may
continue, at most :data:`~agentturn.guard.texts.MAX_ATTEMPTS` times per stage; an attempt is
decided (``CONTINUING``) and committed only when its stream opens (SG-B3). Errors pause the chain
(``PAUSED``), hard paths and exhaustion suspend it (``SUSPENDED``), a complete FIFO prompt makes
it wait for that prompt (``AWAITING_PROMPT``), and trust-clearing lifecycle events drop it
(``NO_CHAIN``). The graph below is the one place these moves are declared.

The state holds counts and flags only, never todo text (OB-4), and is never persisted (SG-A12).
"""

from __future__ import annotations

import enum

import attrs

from .._base import FieldError, State, is_bool, one_of
from ..phases import PhaseGraph
from .vocabulary import ApprovalMode

__all__ = [
    "GUARD_GRAPH",
    "SEEN_CALLS_KEPT",
    "GuardConfig",
    "GuardPhase",
    "GuardState",
    "LoopOwner",
]

#: How many recent todo-write call ids a chain remembers to refuse duplicates (bounded state).
SEEN_CALLS_KEPT = 32


class GuardPhase(enum.Enum):
    """Where the guard stands."""

    #: Not enabled for this session (setting off, not a daemon, safe or bare mode): inert.
    OFF = "off"
    #: No work chain: before the first prompt, or after trust was cleared.
    NO_CHAIN = "no_chain"
    #: A work chain runs (armed or not).
    ACTIVE = "active"
    #: A guard-attributable stream was asked for and has not opened yet.
    CONTINUING = "continuing"
    #: An API or network error paused the chain until a trusted retry/continue (SG-S2).
    PAUSED = "paused"
    #: A hard path or exhaustion suspended the chain; only a new ordinary prompt revives (SG-S1).
    SUSPENDED = "suspended"
    #: A complete FIFO prompt has priority; the old chain never continues (SO-2, SO-3).
    AWAITING_PROMPT = "awaiting_prompt"


class LoopOwner(enum.Enum):
    """Who the current primary stream (and so its tool loop) is attributed to."""

    NONE = "none"
    GUARD = "guard"
    #: A guard continuation coalesced with an external Stop hook (SO-8).
    GUARD_AND_HOOK = "guard_and_hook"


G = GuardPhase
_CHAIN = [G.NO_CHAIN, G.ACTIVE, G.CONTINUING, G.PAUSED, G.SUSPENDED, G.AWAITING_PROMPT]
_NOT_CONTINUING = [phase for phase in _CHAIN if phase is not G.CONTINUING]

_EVERYWHERE = (
    "ClientAttached", "ModelChanged", "ApprovalModeChanged", "SettingsChanged",
    "TodoArgumentsObserved", "TodoHistoryReplayed", "TodoDiskStateLoaded",
    "SubagentTodoObserved", "ForegroundPromptSettled", "BackgroundResult",
)
_ALL_EVENTS = (
    *_EVERYWHERE, "OrdinaryPromptStarted", "AutomaticTurnStarted", "MidTurnMessage",
    "RetryOrContinue", "TodoWriteResult", "NaturalStop", "GuardStreamOpened",
    "GuardStreamNotOpened", "OrdinaryStreamOpened", "ToolResultsReady", "RequestErrored",
    "HardStop", "TrustCleared", "QueuedPromptAborted",
)

GUARD_GRAPH: PhaseGraph[GuardPhase] = PhaseGraph(
    "todo_stop_guard",
    GuardPhase,
    GuardPhase.NO_CHAIN,
    [
        *[(name, [G.OFF], [G.OFF]) for name in _ALL_EVENTS],
        *[(name, [phase], [phase]) for name in _EVERYWHERE for phase in _CHAIN],
        ("BackgroundResult", [G.PAUSED], [G.ACTIVE]),
        ("OrdinaryPromptStarted", _CHAIN, [G.ACTIVE]),
        ("AutomaticTurnStarted", _CHAIN, [G.ACTIVE]),
        ("AutomaticTurnStarted", [G.SUSPENDED], [G.SUSPENDED]),
        ("AutomaticTurnStarted", [G.AWAITING_PROMPT], [G.AWAITING_PROMPT]),
        ("MidTurnMessage", [G.ACTIVE, G.PAUSED], [G.ACTIVE]),
        ("MidTurnMessage", [G.NO_CHAIN, G.SUSPENDED, G.AWAITING_PROMPT],
         [G.NO_CHAIN, G.SUSPENDED, G.AWAITING_PROMPT]),
        ("RetryOrContinue", [G.NO_CHAIN, G.ACTIVE, G.PAUSED], [G.ACTIVE]),
        ("RetryOrContinue", [G.SUSPENDED], [G.SUSPENDED]),
        ("RetryOrContinue", [G.AWAITING_PROMPT], [G.AWAITING_PROMPT]),
        *[("TodoWriteResult", [phase], [phase]) for phase in _NOT_CONTINUING],
        *[("NaturalStop", [phase], [phase]) for phase in _NOT_CONTINUING],
        ("NaturalStop", [G.ACTIVE], [G.CONTINUING, G.SUSPENDED, G.AWAITING_PROMPT]),
        ("GuardStreamOpened", [G.CONTINUING], [G.ACTIVE]),
        ("GuardStreamNotOpened", [G.CONTINUING], [G.SUSPENDED]),
        *[("OrdinaryStreamOpened", [phase], [phase]) for phase in _NOT_CONTINUING],
        *[("ToolResultsReady", [phase], [phase]) for phase in _NOT_CONTINUING],
        ("ToolResultsReady", [G.ACTIVE], [G.CONTINUING, G.SUSPENDED]),
        ("RequestErrored", [G.ACTIVE, G.CONTINUING, G.PAUSED], [G.PAUSED]),
        ("RequestErrored", [G.NO_CHAIN, G.SUSPENDED, G.AWAITING_PROMPT],
         [G.NO_CHAIN, G.SUSPENDED, G.AWAITING_PROMPT]),
        ("HardStop", [G.ACTIVE, G.CONTINUING, G.PAUSED, G.SUSPENDED, G.AWAITING_PROMPT],
         [G.SUSPENDED]),
        ("HardStop", [G.NO_CHAIN], [G.NO_CHAIN]),
        ("TrustCleared", _CHAIN, [G.NO_CHAIN]),
        ("QueuedPromptAborted", [G.AWAITING_PROMPT], [G.NO_CHAIN, G.AWAITING_PROMPT]),
        *[("QueuedPromptAborted", [phase], [phase]) for phase in _CHAIN
          if phase is not G.AWAITING_PROMPT],
    ],
)


@attrs.frozen(kw_only=True)
class GuardConfig:
    """What a session knows about the guard when it is created (SG-C1 ... SG-C5)."""

    #: ``experimental.todoStopGuard``; off unless the user opts in (SG-C1).
    todo_stop_guard: bool = attrs.field(default=False, validator=is_bool)
    #: The guard is daemon-only: an interactive (TUI) session never has it (SG-C5).
    daemon: bool = attrs.field(default=False, validator=is_bool)
    safe_mode: bool = attrs.field(default=False, validator=is_bool)
    bare_mode: bool = attrs.field(default=False, validator=is_bool)
    approval_mode: ApprovalMode = attrs.field(default=ApprovalMode.DEFAULT,
                                              validator=one_of(ApprovalMode))
    #: Turns off external hooks only; the built-in guard is not a hook (SG-C4).
    disable_all_hooks: bool = attrs.field(default=False, validator=is_bool)

    @property
    def enabled(self) -> bool:
        """Whether a session created with this configuration has a guard at all."""
        return self.todo_stop_guard and self.daemon and not self.safe_mode and not self.bare_mode


@attrs.frozen(kw_only=True)
class GuardState(State):
    """The guard of one session. Build it with :meth:`create`; it is never persisted."""

    phase: GuardPhase
    #: Approval plan mode is on: the guard never continues then (SG-C3).
    plan_mode: bool = False
    #: The number of the current work chain (0 before the first).
    chain: int = 0
    #: The live turn whose todo-write results may arm the guard (SG-A14).
    live_turn: str = ""
    armed: bool = False
    unfinished: int = 0
    #: Attempts committed in the current stage (SG-B1, SG-B3).
    attempts: int = 0
    #: The attempt decided and waiting for its stream to open; 0 when none.
    pending_attempt: int = 0
    pending_text: str = ""
    pending_owner: LoopOwner = LoopOwner.NONE
    #: The Stop-hook reason coalesced into the pending continuation (SO-8, SG-B9).
    pending_hook_reason: str | None = None
    #: Who the current primary stream, and so its tool loop, is attributed to.
    loop: LoopOwner = LoopOwner.NONE
    #: Recent todo-write call ids of this chain, to refuse duplicates (SG-A3).
    seen_calls: tuple[str, ...] = ()
    #: An invalidated foreground turn whose settling releases automatic queues (SG-A15).
    release_on_settle: str = ""

    @classmethod
    def create(cls, config: GuardConfig | None = None) -> GuardState:
        """The guard of a new session, decided from ``config`` once (SG-C2)."""
        config = GuardConfig() if config is None else config
        if not isinstance(config, GuardConfig):
            raise FieldError("GuardState.create needs a GuardConfig")
        return cls(phase=GuardPhase.NO_CHAIN if config.enabled else GuardPhase.OFF,
                   plan_mode=config.approval_mode is ApprovalMode.PLAN)
