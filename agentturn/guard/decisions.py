"""The todo stop guard's commands: its decisions, as the host carries them out.

Theory of operation
-------------------
:mod:`agentturn.guard.vocabulary` holds what the session tells the guard (events); this module
holds what the guard answers (commands). They are apart because the two sides are read apart: a
host writes one ``match`` over :data:`GuardCommand` to carry decisions out, and the reducer's
handlers build them. :mod:`agentturn.guard.vocabulary` re-exports every name here, so
``agentturn.guard.vocabulary.X`` and ``agentturn.guard.X`` keep naming the same class; the trace
registry (:mod:`agentturn.registry`) lists this module with the vocabulary, so each class keeps
its ``guard.`` tag. :class:`AutomaticTurnKind` is here, not with the events, because
:class:`DeferAutomaticTurn` carries it and this module must import nothing from the vocabulary
(which imports it): the event :class:`~agentturn.guard.AutomaticTurnStarted` uses it from here.
None of them carries todo text (OB-4); every field validates on construction.

Commands come in two kinds. Two of them are an :class:`~agentturn.AwaitingCommand`, answered by
an event; at most one is outstanding at a time, so they carry no id (``answer_id`` is ``None``):

===========================  =================================================================
command                      answered by
===========================  =================================================================
``ContinueWithGuardPrompt``  ``GuardStreamOpened`` / ``GuardStreamNotOpened`` /
                             ``RequestErrored`` / ``HardStopped``
``SendToolResults``          ``GuardStreamOpened`` / ``GuardStreamNotOpened`` (guard sponsor),
                             ``OrdinaryStreamOpened`` (other sponsors), ``RequestErrored`` /
                             ``HardStopped``
===========================  =================================================================

An event that ends the chain first (a trust-clearing event, Approval plan mode, a new ordinary
prompt, a related automatic turn) withdraws a pending continuation: the host drops it then. Every
other command is a :class:`~agentturn.Notice`. :data:`GuardCommand` is the union of every guard
command, for an exhaustive ``match``.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import attrs

from .._base import (
    AwaitingCommand,
    Notice,
    is_id,
    is_str,
    non_negative,
    not_blank,
    one_of,
    optional,
)
from .texts import GuardChunkMeta

__all__ = [
    "AutomaticTurnKind",
    "ContinueWithGuardPrompt",
    "DeferAutomaticTurn",
    "EmitAgentMessageChunk",
    "GuardCommand",
    "HookMayContinue",
    "KeepToolResults",
    "ReleaseAutomaticQueues",
    "ReportGuardExhausted",
    "SendToolResults",
    "Sponsor",
    "StartWorkChain",
]


class AutomaticTurnKind(enum.Enum):
    """What started an automatic turn."""

    CRON = "cron"
    NOTIFICATION = "notification"


# --- commands ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StartWorkChain(Notice):
    """A new work chain begins: snapshot the background baseline now (BG-1, SG-A7, SG-A8)."""

    chain: int = attrs.field(validator=non_negative)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ContinueWithGuardPrompt(AwaitingCommand):
    """Open one more primary stream with ``text`` as a user-role message (OB-1).

    When an external Stop hook blocks the same stop, ``hook_reason`` goes in the same model call
    (SO-8); the hook's counter is the session's, the guard's attempt is this one.
    """

    answered_by: ClassVar[tuple[str, ...]] = (
        "GuardStreamOpened", "GuardStreamNotOpened", "RequestErrored", "HardStopped")
    attempt: int = attrs.field(validator=non_negative)
    unfinished: int = attrs.field(validator=non_negative)
    text: str = attrs.field(validator=is_str)
    hook_reason: str | None = attrs.field(default=None, validator=optional(not_blank))


class Sponsor(enum.Enum):
    """Who a tool-result follow-up stream is attributed to."""

    #: The guard: it uses (and commits on open) a guard attempt (SG-B4).
    GUARD = "guard"
    #: Waiting mid-turn user input: no guard attempt (SG-B7).
    MID_TURN_INPUT = "mid_turn_input"
    #: The external Stop hook's own tool loop: no guard attempt (SG-B8).
    STOP_HOOK = "stop_hook"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SendToolResults(AwaitingCommand):
    """Send the tool results in a follow-up stream; a guard-sponsored send that still has
    unfinished todos carries the guard's prompt (``text``), one that completed them none (SG-B6).

    A guard-sponsored send is answered like a continuation (``GuardStreamOpened`` commits its
    attempt); the other sponsors' stream is an ``OrdinaryStreamOpened``.
    """

    answered_by: ClassVar[tuple[str, ...]] = (
        "GuardStreamOpened", "GuardStreamNotOpened", "OrdinaryStreamOpened", "RequestErrored",
        "HardStopped")

    sponsor: Sponsor = attrs.field(validator=one_of(Sponsor))
    #: The guard attempt this send will commit when its stream opens, if the guard sponsors it.
    attempt: int | None = attrs.field(default=None, validator=optional(non_negative))
    #: The guard's continuation prompt to save before the results are sent: set while todos are
    #: unfinished (the model must read, for example, "This is the final automatic
    #: continuation..."); empty when the previous guard stream completed every todo (SG-B6).
    text: str = attrs.field(default="", validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class KeepToolResults(Notice):
    """Keep the executed results, but open no further stream: no third attempt (SG-B5)."""

    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class EmitAgentMessageChunk(Notice):
    """Emit one discrete, replayable ``agent_message_chunk`` for a committed attempt (OB-2)."""

    text: str = attrs.field(validator=is_str)
    meta: GuardChunkMeta = attrs.field(validator=one_of(GuardChunkMeta))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ReportGuardExhausted(Notice):
    """Show the exhaustion message, once per chain (OB-3)."""

    text: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class HookMayContinue(Notice):
    """The guard chain is suspended, but the coalesced hook may continue on its own (SG-B9)."""

    reason: str = attrs.field(validator=not_blank)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ReleaseAutomaticQueues(Notice):
    """Release deferred automatic (cron, notification) queues (SG-A15, SO-4, BG-5).

    Emitted exactly when a step ends the guard's hold on automatic turns: before the step
    :func:`~agentturn.guard.holds_automatic_turns` was true, after it false.
    """


@attrs.frozen(kw_only=True, eq=False, repr=False)
class DeferAutomaticTurn(Notice):
    """Hold this automatic turn and start it after the next :class:`ReleaseAutomaticQueues`.

    The guard's chain can still resume, or a complete FIFO prompt has priority (BG-5, SO-2);
    the guard's state did not change. Coalescing recurring cron fires is the session's (BG-6).
    """

    turn_id: str = attrs.field(validator=is_id)
    kind: AutomaticTurnKind = attrs.field(validator=one_of(AutomaticTurnKind))


#: Every command the todo stop guard returns, for an exhaustive ``match``.
GuardCommand = (
    StartWorkChain | ContinueWithGuardPrompt | SendToolResults | KeepToolResults
    | EmitAgentMessageChunk | ReportGuardExhausted | HookMayContinue | ReleaseAutomaticQueues
    | DeferAutomaticTurn
)
