"""Outputs: everything a reducer asks the host to do, in the order it must be done.

A command describes an effect; the host carries it out with its own I/O and reports completion
as an event (``Persist`` -> ``Persisted``/``PersistFailed``, ``RequestModelStream`` ->
``StreamOpened``/``StreamCompleted``/..., ``ExecuteTool`` -> ``ToolFinished`` and so on).
Commands that only inform (``LeadRefused``, ``KeepDraft``, ``EndTurn``) need no answer.
"""

from __future__ import annotations

import enum

import attrs

from ._base import Command, ids, is_bool, is_id, is_str, one_of, tuple_of
from .records import (
    ResponseRecord,
    ToolCall,
    ToolResultRecord,
    ToolResultStatus,
    TurnOutcome,
    UserMessageRecord,
)

__all__ = [
    "AskPermission",
    "CancelStream",
    "CancelTool",
    "DismissPermission",
    "EndTurn",
    "ExecuteTool",
    "KeepDraft",
    "LeadAccepted",
    "LeadRefusal",
    "LeadRefused",
    "LeadUnapplied",
    "Persist",
    "Record",
    "RequestModelStream",
    "RequestTitle",
    "SaveLead",
    "SetTitle",
]

Record = UserMessageRecord | ResponseRecord | ToolResultRecord
_RECORD_TYPES = (UserMessageRecord, ResponseRecord, ToolResultRecord)


# --- the turn ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Persist(Command):
    """Durably save ``records`` (in order), then answer ``Persisted(key)`` (TL-5)."""

    key: str = attrs.field(validator=is_id)
    records: tuple[Record, ...] = attrs.field(validator=tuple_of(_RECORD_TYPES))


@attrs.frozen(kw_only=True)
class RequestModelStream(Command):
    """Run the budgeting step (token estimate, compaction), then open a response stream (TL-2).

    Answer ``StreamOpened`` once the stream is returned, or ``CompactionFailed`` /
    ``TokenLimitRejected`` / ``StreamFailed`` when no stream could be opened.
    """

    request_id: str = attrs.field(validator=is_id)
    #: Saved Lead instructions this request gives the model, in save order (LD-8, LD-16).
    lead_ids: tuple[str, ...] = attrs.field(default=(), validator=ids)
    #: True for the one corrective retry after a malformed tool-call format (TL-6).
    corrective: bool = attrs.field(default=False, validator=is_bool)


@attrs.frozen(kw_only=True)
class CancelStream(Command):
    """Stop the response stream ``request_id``; send no further events for it."""

    request_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True)
class AskPermission(Command):
    """Ask the user whether ``call`` may run; answer ``PermissionDecided`` (TL-3)."""

    call: ToolCall = attrs.field(validator=one_of(ToolCall))


@attrs.frozen(kw_only=True)
class DismissPermission(Command):
    """Close the permission dialog of ``call_id``; its result is recorded as ``recorded_as``."""

    call_id: str = attrs.field(validator=is_id)
    recorded_as: ToolResultStatus = attrs.field(validator=one_of(ToolResultStatus))


@attrs.frozen(kw_only=True)
class ExecuteTool(Command):
    """Run ``call`` now; answer ``ToolFinished`` when it ends (TL-4: only one at a time)."""

    call: ToolCall = attrs.field(validator=one_of(ToolCall))


@attrs.frozen(kw_only=True)
class CancelTool(Command):
    """The user pressed Stop while ``call_id`` runs: cancel it if it can be cancelled safely,
    then answer ``ToolFinished`` with whatever it produced."""

    call_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True)
class EndTurn(Command):
    """The turn ``turn_id`` ended; show ``outcome`` to the user. Sent exactly once per end."""

    turn_id: str = attrs.field(validator=is_id)
    outcome: TurnOutcome = attrs.field(validator=one_of(TurnOutcome))


# --- Lead -------------------------------------------------------------------------------------


class LeadRefusal(enum.Enum):
    """Why a Lead instruction was refused; the draft always goes back with it."""

    #: The instruction was typed in another chat than the one running the turn (LD-2).
    NOT_OWNER = "not_owner"
    #: No turn is active in this chat (LD-1).
    NOT_ACTIVE = "not_active"
    #: The text is empty or only white space (LD-6).
    EMPTY = "empty"
    #: The text is over 32,768 bytes of UTF-8 (LD-6).
    TOO_LONG = "too_long"
    #: Eight instructions are already pending (LD-5).
    QUEUE_FULL = "queue_full"
    #: The turn is doing its final lifecycle work (LD-14).
    TURN_ENDING = "turn_ending"


@attrs.frozen(kw_only=True)
class LeadAccepted(Command):
    """The instruction is admitted: clear its text from the composer, keep the attachments."""

    lead_id: str = attrs.field(validator=is_id)
    #: Attachments that stay in the composer for an ordinary send (LD-15).
    kept_attachment_ids: tuple[str, ...] = attrs.field(default=(), validator=ids)


@attrs.frozen(kw_only=True)
class LeadRefused(Command):
    """The instruction was refused; put ``draft`` back in the composer and show ``message``."""

    lead_id: str = attrs.field(validator=is_id)
    reason: LeadRefusal = attrs.field(validator=one_of(LeadRefusal))
    draft: str = attrs.field(validator=is_str)
    message: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True)
class SaveLead(Command):
    """Save the instruction as a user message of the running turn; answer ``LeadSaved`` or
    ``LeadSaveFailed`` (LD-3, LD-4: one save at a time)."""

    lead_id: str = attrs.field(validator=is_id)
    record: UserMessageRecord = attrs.field(validator=one_of(UserMessageRecord))


@attrs.frozen(kw_only=True)
class KeepDraft(Command):
    """An admitted instruction was not saved: put ``draft`` back in the composer (LD-7)."""

    lead_id: str = attrs.field(validator=is_id)
    draft: str = attrs.field(validator=is_str)
    message: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True)
class LeadUnapplied(Command):
    """The instruction is saved as a user message but the turn ended before the model saw it;
    show it as saved and unapplied (LD-13)."""

    lead_id: str = attrs.field(validator=is_id)


# --- naming -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RequestTitle(Command):
    """Ask the naming model for a title of ``chat_id``; answer ``TitleGenerated``/``TitleFailed``.

    No model request is issued and no tool starts while it runs (TT-3).
    """

    chat_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True)
class SetTitle(Command):
    """Show ``title`` as the chat's automatic title."""

    chat_id: str = attrs.field(validator=is_id)
    title: str = attrs.field(validator=is_id)
