"""Inputs: everything a host tells a reducer, grouped by where it comes from.

Every event is a frozen, slotted, keyword-only attrs class that validates its fields when it is
built; a bad field raises :class:`agentturn.FieldError` naming the class and the field, so a
reducer only ever sees well-formed events. Whether an event is *acceptable now* is the reducer's
question, answered with a :class:`agentturn.ProtocolError` when it is not, or absorbed with a
``StaleAnswerIgnored`` notice when it is an answer that real timing alone makes late (a permission
decision after Stop, a title after a rename, a stream event after ``CancelStream``).
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from ._base import (
    Event,
    FieldError,
    ids,
    is_bool,
    is_id,
    is_json,
    is_str,
    one_of,
    optional,
    tuple_of,
)
from .records import CutOffSignal, HardStopKind, ToolCall

__all__ = [
    "AmendRequest",
    "AutoTitlePreferenceChanged",
    "ClientDisconnected",
    "CloseChat",
    "CompactionFailed",
    "ContinueTurn",
    "HardStopped",
    "LeadSaveFailed",
    "LeadSaved",
    "LeadSubmitted",
    "ManualRename",
    "NaturalStopDecided",
    "PermissionDecided",
    "PermissionDecision",
    "PersistFailed",
    "Persisted",
    "PromptSubmitted",
    "StopPressed",
    "StreamCompleted",
    "StreamFailed",
    "StreamOpened",
    "TitleFailed",
    "TitleGenerated",
    "TokenLimitRejected",
    "ToolFinished",
    "TurnEvent",
    "WithdrawRetry",
]


# --- the user ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PromptSubmitted(Event):
    """The user sent an ordinary prompt; it starts a turn."""

    turn_id: str = attrs.field(validator=is_id)
    #: The id under which the host will persist the prompt as a user message.
    message_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ContinueTurn(Event):
    """The user asked to retry or continue a turn that ended with a resumable error (TL-11)."""

    turn_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StopPressed(Event):
    """The user pressed Stop (TL-8). Pressing it with no turn running changes nothing."""


@attrs.frozen(kw_only=True, eq=False, repr=False)
class HardStopped(Event):
    """A hard terminal path ended the running work (SG-S1): the host's own authority (a
    PostToolUse hook's ``shouldStop``, loop or repeated-call protection, a resource limit, the
    automatic-continuation limit, a close ...). The one class for the concept, in every part:

    * the turn acts as for Stop (the stream is cancelled, a running tool is asked to cancel and
      its result kept, a pending dialog dismissed) but the outcome is ``HALTED`` with ``reason``
      as its message and ``kind`` as its ``halt_kind``; with no turn running it changes nothing;
    * the guard suspends the chain;
    * a session tells the guard, then halts the running turn (if any).
    """

    #: Which authority stopped it.
    kind: HardStopKind = attrs.field(default=HardStopKind.OTHER, validator=one_of(HardStopKind))
    #: What the user is told when a running turn is halted; empty or blank: "The turn was
    #: halted: <which authority>." (the outcome never has an empty message).
    reason: str = attrs.field(default="", validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AmendRequest(Event):
    """A composing reducer's answer to a ``RequestModelStream`` it did not pass on, or whose
    prompt could not be compacted: save one more user-role message, then ask again.

    The request ``request_id`` is dropped (a late answer to it is absorbed), Lead instructions it
    carried go back to the queue, ``text`` is saved as ``message_id`` (TL-5) and the next request
    includes it. The session sends it for a guard-sponsored tool-result follow-up that must carry
    the guard's prompt (SG-B6) and for a Stop hook's reason after its combined continuation could
    not be compacted (SG-B9).
    """

    request_id: str = attrs.field(validator=is_id)
    message_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class WithdrawRetry(Event):
    """Give up the retry of a turn that ended with a resumable error (TL-11): what it owed is
    written first by the next prompt, its saved Lead instructions are reported unapplied, and
    ``ContinueTurn`` is no longer accepted. With no resumable turn it changes nothing."""


@attrs.frozen(kw_only=True, eq=False, repr=False)
class CloseChat(Event):
    """The chat closes while no turn runs: hand back everything still owed (``UnsavedRecords``,
    ``LeadUnapplied``) and forget it. The chat stays idle; late answers are still absorbed."""

    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class NaturalStopDecided(Event):
    """The host's answer to ``DecideNaturalStop``: end the turn, or continue it with one more
    user-role message (a Stop hook's reason, a guard continuation, or both combined).

    With ``text`` None the turn ends as it would have; otherwise the message is saved as
    ``message_id`` and the next request includes it. Saved Lead instructions join that request
    either way (LD-9).
    """

    request_id: str = attrs.field(validator=is_id)
    message_id: str | None = attrs.field(default=None, validator=optional(is_id))
    text: str | None = attrs.field(default=None, validator=optional(is_str))

    def __attrs_post_init__(self) -> None:
        if (self.message_id is None) != (self.text is None):
            raise FieldError("NaturalStopDecided.message_id and .text go together")


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LeadSubmitted(Event):
    """The user sent a Lead instruction from the composer of ``chat_id`` (LD-1)."""

    chat_id: str = attrs.field(validator=is_id)
    lead_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)
    #: Composer attachments present when Lead was pressed; Lead never consumes them (LD-15).
    attachment_ids: tuple[str, ...] = attrs.field(default=(), validator=ids)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ManualRename(Event):
    """The user renamed the chat by hand; no automatic title replaces it (TT-5)."""

    title: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AutoTitlePreferenceChanged(Event):
    """The user turned automatic titles on or off (TT-4)."""

    enabled: bool = attrs.field(validator=is_bool)


class PermissionDecision(enum.Enum):
    """The answer to a permission request (TL-3). There is no "disconnected" answer."""

    #: Run the tool.
    ALLOW = "allow"
    #: Do not run it; the model gets a denied result and the turn goes on.
    DENY = "deny"
    #: Cancel the request: the turn is cancelled.
    CANCEL = "cancel"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PermissionDecided(Event):
    """The user (or the host's policy) answered the permission request for ``call_id``.

    A decision for a dialog that was already dismissed (Stop, a superseding Lead) or already
    decided is absorbed with ``StaleAnswerIgnored``; one for a call never asked about is misuse.
    """

    call_id: str = attrs.field(validator=is_id)
    decision: PermissionDecision = attrs.field(validator=one_of(PermissionDecision))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ClientDisconnected(Event):
    """The client went away. It never approves anything (TL-3, BR-4): a pending permission
    request stays pending until the host reports a decision (for example a cancel at grace
    expiry)."""


# --- the engine -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StreamOpened(Event):
    """The budgeting step passed and the response stream for ``request_id`` was returned."""

    request_id: str = attrs.field(validator=is_id)


def _distinct_call_ids(instance: Any, attribute: Any, value: tuple[ToolCall, ...]) -> None:
    seen = [call.call_id for call in value]
    if len(set(seen)) != len(seen):
        raise FieldError("StreamCompleted.tool_calls holds a repeated call_id")


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StreamCompleted(Event):
    """The response stream for ``request_id`` ended normally."""

    request_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)
    #: The engine's finish reason exactly as it sent it; normalized, never rewritten (TL-10).
    finish_reason: str = attrs.field(validator=is_str)
    tool_calls: tuple[ToolCall, ...] = attrs.field(
        default=(), validator=[tuple_of(ToolCall), _distinct_call_ids]
    )
    #: The host's stream normalizer could not parse the tool calls (TL-6).
    malformed_tool_format: bool = attrs.field(default=False, validator=is_bool)
    #: The stream normalizer's evidence that the response was cut at the output limit, whatever
    #: ``finish_reason`` says (engines mislabel cut-off responses): the turn then ends with the
    #: output-limit outcome and runs none of the tool calls (TL-9). ``agentturn.engines`` sets it.
    cut_off: CutOffSignal | None = attrs.field(default=None,
                                               validator=optional(one_of(CutOffSignal)))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StreamFailed(Event):
    """The request failed with an API or network error (TL-11)."""

    request_id: str = attrs.field(validator=is_id)
    error: str = attrs.field(validator=is_str)
    #: True for a network error, False for an error the API returned.
    network: bool = attrs.field(default=False, validator=is_bool)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class CompactionFailed(Event):
    """The budgeting step could not compact the prompt; no stream opened (TL-2)."""

    request_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TokenLimitRejected(Event):
    """The budgeting step rejected the prompt as over the token limit; no stream opened (TL-2)."""

    request_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


# --- tools ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ToolFinished(Event):
    """The running tool call ended. An error the tool reports is output for the model."""

    call_id: str = attrs.field(validator=is_id)
    output: str = attrs.field(validator=is_str)
    #: True when the tool stopped before it finished: cancelled by the host (``CancelTool``
    #: after Stop or a hard stop), or on its own (a timeout) while the turn goes on. The
    #: record is ``CANCELLED``, and its reason says which of these happened.
    cancelled: bool = attrs.field(default=False, validator=is_bool)
    #: True when the tool reported a failure (MCP's ``isError``); the output still goes to the
    #: model, and the record is still ``EXECUTED``.
    error: bool = attrs.field(default=False, validator=is_bool)
    #: The tool's structured result, if it has one (JSON-like; for example the todo-write tool's
    #: ``{"type": "todo_list", "todos": [...]}``). Not persisted; the session reads it once.
    structured: Any = attrs.field(default=None, repr=False, validator=is_json)
    #: True when this tool ends the task (a "submit" command completed): its result is saved
    #: ``EXECUTED``, the response's later calls are recorded not run, and the turn ends with
    #: ``OutcomeKind.ENDED_BY_TOOL`` (not an error, not a natural stop). A tool that was
    #: cancelled or failed did not end the task, so ``cancelled`` and ``error`` must be false.
    #: After Stop or a hard stop the turn's ending stands; the result is still saved.
    ends_task: bool = attrs.field(default=False, validator=is_bool)

    def __attrs_post_init__(self) -> None:
        if self.ends_task and (self.cancelled or self.error):
            raise FieldError("ToolFinished.ends_task needs a tool that completed: .cancelled "
                             "and .error must be false")


# --- storage ----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Persisted(Event):
    """The host durably saved the records of the ``Persist`` command with this ``key``."""

    key: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class PersistFailed(Event):
    """The host could not save the records of the ``Persist`` command with this ``key``."""

    key: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LeadSaved(Event):
    """The Lead instruction ``lead_id`` is saved as a user message (LD-3)."""

    lead_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LeadSaveFailed(Event):
    """Saving the Lead instruction ``lead_id`` failed; its draft goes back (LD-7)."""

    lead_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


# --- naming -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TitleGenerated(Event):
    """The naming request ``request_id`` returned a title (an empty one counts as a failure)."""

    request_id: str = attrs.field(validator=is_id)
    title: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TitleFailed(Event):
    """The naming request ``request_id`` failed."""

    request_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


#: Every event the turn family (turn lifecycle, Lead, titles) accepts, for an exhaustive match.
TurnEvent = (
    PromptSubmitted | ContinueTurn | StopPressed | LeadSubmitted | ManualRename
    | AutoTitlePreferenceChanged | PermissionDecided | ClientDisconnected | StreamOpened
    | StreamCompleted | StreamFailed | CompactionFailed | TokenLimitRejected | ToolFinished
    | Persisted | PersistFailed | LeadSaved | LeadSaveFailed | TitleGenerated | TitleFailed
    | HardStopped | NaturalStopDecided | AmendRequest | WithdrawRetry | CloseChat
)
