"""Inputs: everything a host tells a reducer, grouped by where it comes from.

Every event is a frozen, slotted, keyword-only attrs class that validates its fields when it is
built; a bad field raises :class:`agentturn.FieldError` naming the class and the field, so a
reducer only ever sees well-formed events. Whether an event is *acceptable now* is the reducer's
question, answered with a :class:`agentturn.ProtocolError` when it is not.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from ._base import Event, FieldError, ids, is_bool, is_id, is_str, one_of, tuple_of
from .records import ToolCall

__all__ = [
    "AutoTitlePreferenceChanged",
    "ClientDisconnected",
    "CompactionFailed",
    "ContinueTurn",
    "LeadSaveFailed",
    "LeadSaved",
    "LeadSubmitted",
    "ManualRename",
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
]


# --- the user ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PromptSubmitted(Event):
    """The user sent an ordinary prompt; it starts a turn."""

    turn_id: str = attrs.field(validator=is_id)
    #: The id under which the host will persist the prompt as a user message.
    message_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True)
class ContinueTurn(Event):
    """The user asked to retry or continue a turn that ended with a resumable error (TL-11)."""

    turn_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True)
class StopPressed(Event):
    """The user pressed Stop (TL-8). Pressing it with no turn running changes nothing."""


@attrs.frozen(kw_only=True)
class LeadSubmitted(Event):
    """The user sent a Lead instruction from the composer of ``chat_id`` (LD-1)."""

    chat_id: str = attrs.field(validator=is_id)
    lead_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)
    #: Composer attachments present when Lead was pressed; Lead never consumes them (LD-15).
    attachment_ids: tuple[str, ...] = attrs.field(default=(), validator=ids)


@attrs.frozen(kw_only=True)
class ManualRename(Event):
    """The user renamed the chat by hand; no automatic title replaces it (TT-5)."""

    title: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True)
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


@attrs.frozen(kw_only=True)
class PermissionDecided(Event):
    """The user (or the host's policy) answered the permission request for ``call_id``."""

    call_id: str = attrs.field(validator=is_id)
    decision: PermissionDecision = attrs.field(validator=one_of(PermissionDecision))


@attrs.frozen(kw_only=True)
class ClientDisconnected(Event):
    """The client went away. It never approves anything (TL-3, BR-4): a pending permission
    request stays pending until the host reports a decision (for example a cancel at grace
    expiry)."""


# --- the engine -------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class StreamOpened(Event):
    """The budgeting step passed and the response stream for ``request_id`` was returned."""

    request_id: str = attrs.field(validator=is_id)


def _distinct_call_ids(instance: Any, attribute: Any, value: tuple[ToolCall, ...]) -> None:
    seen = [call.call_id for call in value]
    if len(set(seen)) != len(seen):
        raise FieldError("StreamCompleted.tool_calls holds a repeated call_id")


@attrs.frozen(kw_only=True)
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


@attrs.frozen(kw_only=True)
class StreamFailed(Event):
    """The request failed with an API or network error (TL-11)."""

    request_id: str = attrs.field(validator=is_id)
    error: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True)
class CompactionFailed(Event):
    """The budgeting step could not compact the prompt; no stream opened (TL-2)."""

    request_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True)
class TokenLimitRejected(Event):
    """The budgeting step rejected the prompt as over the token limit; no stream opened (TL-2)."""

    request_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


# --- tools ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ToolFinished(Event):
    """The running tool call ended. An error the tool reports is output for the model."""

    call_id: str = attrs.field(validator=is_id)
    output: str = attrs.field(validator=is_str)
    #: True when the tool stopped because the host cancelled it after Stop.
    cancelled: bool = attrs.field(default=False, validator=is_bool)


# --- storage ----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Persisted(Event):
    """The host durably saved the records of the ``Persist`` command with this ``key``."""

    key: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True)
class PersistFailed(Event):
    """The host could not save the records of the ``Persist`` command with this ``key``."""

    key: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True)
class LeadSaved(Event):
    """The Lead instruction ``lead_id`` is saved as a user message (LD-3)."""

    lead_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True)
class LeadSaveFailed(Event):
    """Saving the Lead instruction ``lead_id`` failed; its draft goes back (LD-7)."""

    lead_id: str = attrs.field(validator=is_id)
    reason: str = attrs.field(validator=is_str)


# --- naming -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TitleGenerated(Event):
    """The naming request returned a title (it may be empty, which counts as a failure)."""

    title: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True)
class TitleFailed(Event):
    """The naming request failed."""

    reason: str = attrs.field(validator=is_str)
