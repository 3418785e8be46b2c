"""The todo stop guard's configuration, phases, phase graph and state.

Theory of operation
-------------------
The guard is decided once, when a session is created (SG-C2): :class:`GuardConfig` is read by
:meth:`GuardState.create`, and a guard that is not enabled starts and stays in ``OFF``, where every
event is accepted and changes nothing, so the session behaves exactly as without it (SG-C6).

Otherwise the guard follows one *work chain* at a time. A chain starts unarmed (a new ordinary
prompt, a retry after trust was cleared, an automatic turn nothing holds back); a trusted
todo-write result arms it with the unfinished count. At a natural stop an armed chain with
unfinished items may continue, at most :data:`~agentturn.guard.texts.MAX_ATTEMPTS` times per
stage; an attempt is decided (``CONTINUING``) and committed only when its stream opens (SG-B3).
Errors pause the chain (``PAUSED``), hard paths and exhaustion suspend it (``SUSPENDED``), a
complete FIFO prompt makes it wait for that prompt (``AWAITING_PROMPT``), and trust-clearing
lifecycle events drop it (``NO_CHAIN``). Approval plan mode is a chain boundary (``PLAN``): it
clears trust, and after it the guard waits, in ``NO_CHAIN``, for a new prompt or automatic turn
(SG-C3, SG-A13). The graph below is the one place these moves are declared.

A complete queued prompt's priority outlives the chain that yielded to it: a rewind or Plan
mode end the chain (``NO_CHAIN``, ``PLAN``) but automatic turns and follow-up suggestions still
wait (``prompt_first``) until the prompt runs or its abort is reported.

Rules this module keeps: the state holds counts, flags and at most three ids (the live turn, the
open todo-write call, the one superseded turn), never todo text (OB-4), so it stays bounded; it
is never persisted (SG-A12).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from .._base import FieldError, State, Value, is_bool, one_of
from ..phases import PhaseGraph
from .vocabulary import ApprovalMode

__all__ = [
    "GUARD_GRAPH",
    "GuardConfig",
    "GuardPhase",
    "GuardState",
    "LoopOwner",
]


class GuardPhase(enum.Enum):
    """Where the guard stands."""

    #: Not enabled for this session (setting off, not a daemon, safe or bare mode): inert.
    OFF = "off"
    #: No work chain: before the first prompt, after trust was cleared, or after Plan mode.
    NO_CHAIN = "no_chain"
    #: Approval plan mode: nothing arms, no chain starts, nothing continues (SG-C3).
    PLAN = "plan"
    #: A work chain runs (armed or not).
    ACTIVE = "active"
    #: A guard-attributable stream was asked for and has not opened yet.
    CONTINUING = "continuing"
    #: An API or network error paused the chain until a trusted retry/continue (SG-S2); a
    #: continuation whose request failed before it opened stays pending for that retry.
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
#: The phases of an enabled guard outside Plan mode.
_CHAIN = [G.NO_CHAIN, G.ACTIVE, G.CONTINUING, G.PAUSED, G.SUSPENDED, G.AWAITING_PROMPT]
#: The phases where no guard-attributable stream is pending (tools and stops happen here).
_SETTLED = [G.PLAN, *(phase for phase in _CHAIN if phase is not G.CONTINUING)]

_EVERYWHERE = (
    "ClientAttached", "ModelChanged", "SettingsChanged", "TodoArgumentsObserved",
    "TodoHistoryReplayed", "TodoDiskStateLoaded", "SubagentTodoObserved",
    "ForegroundPromptSettled", "BackgroundResult",
)
_ALL_EVENTS = (
    *_EVERYWHERE, "ApprovalModeChanged", "OrdinaryPromptStarted", "AutomaticTurnStarted",
    "MidTurnMessage", "RetryOrContinue", "TodoWriteStarted", "TodoWriteResult", "NaturalStop",
    "GuardStreamOpened", "GuardStreamNotOpened", "OrdinaryStreamOpened", "ToolResultsReady",
    "RequestErrored", "HardStopped", "TrustCleared", "QueuedPromptAborted",
)


def _stay(name: str, phases: Sequence[GuardPhase]) -> list[tuple[str, list[G], list[G]]]:
    """Self-loops: ``name`` is accepted in each of ``phases`` and leaves it where it is."""
    return [(name, [phase], [phase]) for phase in phases]


GUARD_GRAPH: PhaseGraph[GuardPhase] = PhaseGraph(
    "todo_stop_guard",
    GuardPhase,
    GuardPhase.NO_CHAIN,
    [
        *[(name, [G.OFF], [G.OFF]) for name in _ALL_EVENTS],
        *[edge for name in _EVERYWHERE for edge in _stay(name, [G.PLAN, *_CHAIN])],
        ("BackgroundResult", [G.PAUSED], [G.ACTIVE]),
        # Plan mode is a chain boundary; a change between non-Plan modes changes nothing.
        *[("ApprovalModeChanged", [phase], [phase, G.PLAN]) for phase in _CHAIN],
        ("ApprovalModeChanged", [G.PLAN], [G.PLAN, G.NO_CHAIN]),
        ("OrdinaryPromptStarted", _CHAIN, [G.ACTIVE]),
        *_stay("OrdinaryPromptStarted", [G.PLAN]),
        # A new chain, a kept chain, or (deferred or not revived) no change.
        *[("AutomaticTurnStarted", [phase], [phase, G.ACTIVE]) for phase in _CHAIN
          if phase is not G.AWAITING_PROMPT],
        *_stay("AutomaticTurnStarted", [G.PLAN, G.AWAITING_PROMPT]),
        ("MidTurnMessage", [G.ACTIVE, G.PAUSED, G.CONTINUING], [G.ACTIVE]),
        *_stay("MidTurnMessage", [G.PLAN, G.NO_CHAIN, G.SUSPENDED, G.AWAITING_PROMPT]),
        ("RetryOrContinue", [G.NO_CHAIN, G.ACTIVE], [G.ACTIVE]),
        # A continuation whose request failed before its stream opened is retried as itself.
        ("RetryOrContinue", [G.PAUSED], [G.ACTIVE, G.CONTINUING]),
        *_stay("RetryOrContinue", [G.PLAN, G.SUSPENDED, G.AWAITING_PROMPT]),
        *_stay("TodoWriteStarted", _SETTLED),
        *_stay("TodoWriteResult", _SETTLED),
        *_stay("NaturalStop", _SETTLED),
        ("NaturalStop", [G.ACTIVE], [G.CONTINUING, G.SUSPENDED, G.AWAITING_PROMPT]),
        ("GuardStreamOpened", [G.CONTINUING], [G.ACTIVE]),
        ("GuardStreamNotOpened", [G.CONTINUING], [G.SUSPENDED]),
        *_stay("OrdinaryStreamOpened", _SETTLED),
        *_stay("ToolResultsReady", _SETTLED),
        ("ToolResultsReady", [G.ACTIVE], [G.CONTINUING, G.SUSPENDED]),
        ("RequestErrored", [G.ACTIVE, G.CONTINUING, G.PAUSED], [G.PAUSED]),
        *_stay("RequestErrored", [G.PLAN, G.NO_CHAIN, G.SUSPENDED, G.AWAITING_PROMPT]),
        ("HardStopped", [G.ACTIVE, G.CONTINUING, G.PAUSED, G.SUSPENDED, G.AWAITING_PROMPT],
         [G.SUSPENDED]),
        *_stay("HardStopped", [G.PLAN, G.NO_CHAIN]),
        ("TrustCleared", _CHAIN, [G.NO_CHAIN]),
        *_stay("TrustCleared", [G.PLAN]),
        ("QueuedPromptAborted", [G.AWAITING_PROMPT], [G.NO_CHAIN, G.AWAITING_PROMPT]),
        *_stay("QueuedPromptAborted", [G.PLAN, *(phase for phase in _CHAIN
                                                  if phase is not G.AWAITING_PROMPT)]),
    ],
)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class GuardConfig(Value):
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


@attrs.frozen(kw_only=True, eq=False, repr=False)
class GuardState(State):
    """The guard of one session. Build it with :meth:`create`; it is never persisted."""

    phase: GuardPhase
    #: The number of the current work chain (0 before the first).
    chain: int = 0
    #: The live turn whose todo-write results may arm the guard (SG-A14).
    live_turn: str = ""
    #: The one turn a lifecycle event invalidated: it never arms again, even in a retry (SG-A14).
    superseded_turn: str = ""
    #: The built-in todo-write call that started and has no result yet; "" when none (SG-A3).
    open_call: str = ""
    #: A trusted todo list arrived in this chain (armed or not).
    listed: bool = False
    #: Unfinished items of the newest trusted list; the chain is armed while this is above 0.
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
    #: An invalidated foreground turn whose settling releases automatic queues (SG-A15).
    release_on_settle: str = ""
    #: A complete queued prompt has priority over automatic turns and follow-up suggestions
    #: (SO-2, BG-7): set when a natural stop yields to it, kept across a trust clear and Plan
    #: mode, and cleared only when an ordinary prompt starts or the last queued prompt's abort
    #: is reported (SO-4).
    prompt_first: bool = False

    @property
    def armed(self) -> bool:
        """The chain is armed: its newest trusted todo list has unfinished items (SG-A1, SG-A5)."""
        return self.unfinished > 0

    @classmethod
    def create(cls, config: GuardConfig | None = None) -> GuardState:
        """The guard of a new session, decided from ``config`` once (SG-C2, SG-C3)."""
        config = GuardConfig() if config is None else config
        if not isinstance(config, GuardConfig):
            raise FieldError("GuardState.create needs a GuardConfig")
        if not config.enabled:
            return cls(phase=GuardPhase.OFF)
        if config.approval_mode is ApprovalMode.PLAN:
            return cls(phase=GuardPhase.PLAN)
        return cls(phase=GuardPhase.NO_CHAIN)
