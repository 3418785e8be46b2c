"""The todo stop guard's events: the session facts it takes.

Theory of operation
-------------------
Events are facts the session reports; the guard's decisions, its commands, are in
:mod:`agentturn.guard.decisions` and re-exported here, so every name in ``__all__`` is reachable
as ``agentturn.guard.vocabulary.X`` (as the trace format and other parts look them up). None of
them carries todo text (OB-4): the only event that holds a todo list is :class:`TodoWriteResult`,
whose envelope the guard reduces to counts at once. The untrusted places a todo list can be seen
(tool-call arguments, replayed history, disk state, sub-agents) are distinct events so a host can
show them to the guard, and the tests can show they change nothing (SG-A3).

Every field validates on construction (an id is a non-empty str, every str is encodable as
UTF-8, a Stop-hook reason is not blank), so an invalid event never reaches the reducer.

:data:`GuardEvent` and :data:`GuardCommand` are the unions of every guard event and command, for
an exhaustive ``match``.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from .._base import Event, FieldError, is_bool, is_id, is_json, not_blank, one_of, optional
from ..events import HardStopped
from ..records import HardStopKind
from .decisions import (
    AutomaticTurnKind,
    ContinueWithGuardPrompt,
    DeferAutomaticTurn,
    EmitAgentMessageChunk,
    GuardCommand,
    HookMayContinue,
    KeepToolResults,
    ReleaseAutomaticQueues,
    ReportGuardExhausted,
    SendToolResults,
    Sponsor,
    StartWorkChain,
)

__all__ = [
    "ApprovalMode",
    "ApprovalModeChanged",
    "AutomaticTurnKind",
    "AutomaticTurnStarted",
    "BackgroundResult",
    "ClientAttached",
    "ContinueWithGuardPrompt",
    "DeferAutomaticTurn",
    "EmitAgentMessageChunk",
    "ErrorKind",
    "ForegroundPromptSettled",
    "GuardCommand",
    "GuardEvent",
    "GuardStreamNotOpened",
    "GuardStreamOpened",
    "HardStopKind",
    "HardStopped",
    "HookMayContinue",
    "KeepToolResults",
    "MidTurnMessage",
    "ModelChanged",
    "NaturalStop",
    "NotOpenedReason",
    "ObservationPoint",
    "OrdinaryPromptStarted",
    "OrdinaryStreamOpened",
    "QueuedPromptAborted",
    "ReleaseAutomaticQueues",
    "ReportGuardExhausted",
    "RequestErrored",
    "RetryOrContinue",
    "SendToolResults",
    "SettingsChanged",
    "Sponsor",
    "StartWorkChain",
    "SubagentTodoObserved",
    "TodoArgumentsObserved",
    "TodoDiskStateLoaded",
    "TodoHistoryReplayed",
    "TodoWriteResult",
    "TodoWriteStarted",
    "ToolOrigin",
    "ToolResultsReady",
    "TrustCleared",
    "TrustClearingKind",
]


# --- the user and the work chain --------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class OrdinaryPromptStarted(Event):
    """A new ordinary user prompt starts; it starts an unarmed work chain (SG-A7)."""

    turn_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class MidTurnMessage(Event):
    """A mid-turn user message (a Lead instruction) reached the model: new user input (SG-A9)."""


@attrs.frozen(kw_only=True, eq=False, repr=False)
class RetryOrContinue(Event):
    """The user explicitly retried or continued after an error (SG-A8, SG-S2).

    A retried request gets a new turn id to be trusted again: a turn id that a lifecycle event
    invalidated (``TrustCleared.invalidated_turn_id``) never arms the guard, even in a retry
    (SG-A14).
    """

    #: The turn the retry runs in; its todo-write results are the live ones.
    turn_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class BackgroundResult(Event):
    """A background agent, shell, monitor or wakeup delivered a result to the session."""

    #: True when it belongs to the current work chain (not in the chain's baseline).
    related: bool = attrs.field(validator=is_bool)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AutomaticTurnStarted(Event):
    """A cron or notification turn starts (SG-A10, BG-5).

    While the guard holds automatic turns (:func:`~agentturn.guard.holds_automatic_turns`) an
    unrelated one is answered with :class:`DeferAutomaticTurn` and changes nothing; the session
    starts it again after :class:`ReleaseAutomaticQueues`.
    """

    turn_id: str = attrs.field(validator=is_id)
    kind: AutomaticTurnKind = attrs.field(validator=one_of(AutomaticTurnKind))
    #: True when it processes background results of the current chain.
    related: bool = attrs.field(validator=is_bool)


# --- todo lists: the one trusted input and the untrusted ones ---------------------------------


class ToolOrigin(enum.Enum):
    """Which tool produced a result under the todo-write wire name."""

    #: The built-in todo-write tool.
    BUILTIN = "builtin"
    #: A discovered (MCP or extension) tool that shadows the wire name: never trusted.
    DISCOVERED = "discovered"


class ObservationPoint(enum.Enum):
    """When in the tool pipeline the session observed the result (SG-A2)."""

    #: After execution and status calculation, before PostToolUse hooks: the trusted point.
    AFTER_STATUS = "after_status"
    #: After PostToolUse hooks ran (a hook may have rewritten or stopped it): not trusted.
    AFTER_POST_TOOL_USE = "after_post_tool_use"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TodoWriteStarted(Event):
    """A built-in todo-write call started in ``turn_id`` (SG-A3).

    Tools run one at a time (TL-4), so the guard keeps at most one open todo-write call: each
    start replaces the one before. Only the result that answers the open call can be trusted.
    """

    call_id: str = attrs.field(validator=is_id)
    turn_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TodoWriteResult(Event):
    """A todo-write tool result observed live.

    Only a successful, top-level, built-in result at ``AFTER_STATUS`` with a valid envelope that
    answers the open call (:class:`TodoWriteStarted`) of the live turn arms or disarms (SG-A1).
    Any result for the open call closes it, so a second report of the same call (a duplicate, or
    a failure re-reported as a success) finds nothing open and changes nothing (SG-A3).
    """

    call_id: str = attrs.field(validator=is_id)
    #: The live turn the call belongs to; results of an invalidated turn are ignored (SG-A14).
    turn_id: str = attrs.field(validator=is_id)
    #: The structured result as the tool returned it (a mapping; a JSON string is rejected).
    envelope: Any = attrs.field(repr=False, validator=is_json)
    succeeded: bool = attrs.field(validator=is_bool)
    top_level: bool = attrs.field(default=True, validator=is_bool)
    origin: ToolOrigin = attrs.field(default=ToolOrigin.BUILTIN, validator=one_of(ToolOrigin))
    point: ObservationPoint = attrs.field(default=ObservationPoint.AFTER_STATUS,
                                          validator=one_of(ObservationPoint))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TodoArgumentsObserved(Event):
    """A todo list seen in a todo-write call's *arguments*: never trusted (SG-A3)."""

    arguments: Any = attrs.field(repr=False, validator=is_json)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TodoHistoryReplayed(Event):
    """A todo list found while replaying history: never trusted (SG-A3)."""

    envelope: Any = attrs.field(repr=False, validator=is_json)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TodoDiskStateLoaded(Event):
    """A todo list read from disk: never trusted (SG-A3)."""

    envelope: Any = attrs.field(repr=False, validator=is_json)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SubagentTodoObserved(Event):
    """A sub-agent's todo list: never trusted (SG-A3)."""

    envelope: Any = attrs.field(repr=False, validator=is_json)


# --- streams and stops ------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class NaturalStop(Event):
    """The model stopped naturally; the session asks the guard in its stop order (SO-7)."""

    #: Mid-turn user messages were drained at this stop (SO-1): the user continuation runs.
    mid_turn_messages: bool = attrs.field(default=False, validator=is_bool)
    #: The daemon FIFO holds a complete, non-aborted prompt (SO-2).
    queued_prompt: bool = attrs.field(default=False, validator=is_bool)
    #: Relevant background input exists (BG-2): the guard waits for it.
    relevant_background: bool = attrs.field(default=False, validator=is_bool)
    #: The reason of an external Stop hook that blocks this same stop, to coalesce (SO-8).
    #: ``None`` when no hook blocks it; a blank reason is refused (SG-B9).
    hook_reason: str | None = attrs.field(default=None, validator=optional(not_blank))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class GuardStreamOpened(Event):
    """The guard-attributable stream the guard asked for was returned: the attempt commits."""


class NotOpenedReason(enum.Enum):
    """Why a guard-attributable stream never opened; none of these consumes an attempt."""

    CANCELLED = "cancelled"
    COMPACTION_FAILED = "compaction_failed"
    TOKEN_REJECTED = "token_rejected"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class GuardStreamNotOpened(Event):
    """The guard-attributable stream failed before it was returned (SG-B3)."""

    reason: NotOpenedReason = attrs.field(validator=one_of(NotOpenedReason))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class OrdinaryStreamOpened(Event):
    """A primary stream not attributable to the guard opened (user, mid-turn input, hook)."""


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ToolResultsReady(Event):
    """Tool results of the last primary stream are executed and saved; who may send them?"""

    #: Mid-turn user input is waiting and can sponsor the send (SG-B7).
    mid_turn_input: bool = attrs.field(default=False, validator=is_bool)


class ErrorKind(enum.Enum):
    """Errors that pause, not end, a work chain (SG-S2)."""

    API = "api"
    NETWORK = "network"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class RequestErrored(Event):
    """A primary request failed with an API or network error."""

    kind: ErrorKind = attrs.field(validator=one_of(ErrorKind))


# --- lifecycle --------------------------------------------------------------------------------


class TrustClearingKind(enum.Enum):
    """Lifecycle events after which nothing the guard knew is trusted (SG-A12)."""

    REWIND = "rewind"
    HISTORY_RESTORED = "history_restored"
    FORK = "branch_or_fork"
    WORKING_DIRECTORY_CHANGED = "working_directory_changed"
    NEW_SESSION = "new_session"
    DISK_RESTORED = "disk_restored"
    DAEMON_RESTART = "daemon_restart"
    AGENT_RESTART = "agent_restart"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TrustCleared(Event):
    """A trust-clearing lifecycle event happened (SG-A12)."""

    kind: TrustClearingKind = attrs.field(validator=one_of(TrustClearingKind))
    #: The live foreground turn it invalidated, if one was running. That turn id is never trusted
    #: again (SG-A14), and automatic queues stay held until it settles (SG-A15).
    invalidated_turn_id: str | None = attrs.field(default=None, validator=optional(is_id))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ForegroundPromptSettled(Event):
    """A foreground prompt finished, normally or through an error path (SG-A15)."""

    turn_id: str = attrs.field(validator=is_id)
    errored: bool = attrs.field(default=False, validator=is_bool)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class QueuedPromptAborted(Event):
    """A queued FIFO prompt was aborted (SO-3, SO-4)."""

    #: It was the last queued prompt.
    last: bool = attrs.field(validator=is_bool)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ClientAttached(Event):
    """A client subscribed; ``last_seq`` is the last event-ring entry it saw (``None``: none).

    A live attach to the same session keeps the guard's state (SG-A13). The one class for the
    concept: the session replays its ring to the client and hands the guard the same event.
    """

    client_id: str = attrs.field(validator=is_id)
    last_seq: int | None = attrs.field(default=None)

    @last_seq.validator
    def _check(self, attribute: attrs.Attribute[int | None], value: object) -> None:
        if value is not None and (type(value) is not int or value < 0):
            raise FieldError("ClientAttached.last_seq must be None or an int >= 0")


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ModelChanged(Event):
    """The model changed: no new work chain (SG-A13)."""


class ApprovalMode(enum.Enum):
    """The session's approval mode."""

    DEFAULT = "default"
    AUTO_EDIT = "auto_edit"
    YOLO = "yolo"
    #: Approval plan mode: the guard is off while in it (SG-C3).
    PLAN = "plan"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ApprovalModeChanged(Event):
    """The approval mode changed (SG-A13, SG-C3).

    Into Plan: the guard enters ``PLAN`` and clears its trust. Out of Plan: no chain until an
    ordinary prompt or automatic turn starts one. Between non-Plan modes: nothing changes.
    """

    mode: ApprovalMode = attrs.field(validator=one_of(ApprovalMode))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SettingsChanged(Event):
    """The user changed ``experimental.todoStopGuard``; it applies only to new sessions (SG-C2)."""

    todo_stop_guard: bool = attrs.field(validator=is_bool)


#: Every event the todo stop guard accepts, for an exhaustive ``match``.
GuardEvent = (
    OrdinaryPromptStarted | MidTurnMessage | RetryOrContinue | BackgroundResult
    | AutomaticTurnStarted | TodoWriteStarted | TodoWriteResult | TodoArgumentsObserved
    | TodoHistoryReplayed | TodoDiskStateLoaded | SubagentTodoObserved | NaturalStop
    | GuardStreamOpened | GuardStreamNotOpened | OrdinaryStreamOpened | ToolResultsReady
    | RequestErrored | HardStopped | TrustCleared | ForegroundPromptSettled | QueuedPromptAborted
    | ClientAttached | ModelChanged | ApprovalModeChanged | SettingsChanged
)
