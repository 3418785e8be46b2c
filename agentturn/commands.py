"""Outputs: everything a reducer asks the host to do, in the order it must be done.

Theory of operation
-------------------
Commands come in two kinds. An :class:`~agentturn.AwaitingCommand` asks for an effect whose
completion comes back as an answering event that echoes the command's ``answer_id``:

====================== ========================================= ==============
command                answered by                               echoes
====================== ========================================= ==============
``Persist``            ``Persisted`` / ``PersistFailed``         ``key``
``RequestModelStream`` ``StreamOpened``, ``StreamCompleted``,    ``request_id``
                       ``StreamFailed``, ``CompactionFailed``,
                       ``TokenLimitRejected``
``AskPermission``      ``PermissionDecided``                     ``call_id``
``ExecuteTool``        ``ToolFinished``                          ``call_id``
``SaveLead``           ``LeadSaved`` / ``LeadSaveFailed``        ``lead_id``
``RequestTitle``       ``TitleGenerated`` / ``TitleFailed``      ``request_id``
``DecideNaturalStop``  ``NaturalStopDecided``                    ``request_id``
====================== ========================================= ==============

A :class:`~agentturn.Notice` only informs (``EndTurn``, ``ReturnDraft``, ``LeadUnapplied``) or
asks for a fire-and-forget effect (``CancelStream``, ``CancelTool``, ``DismissPermission``,
``SetTitle``); nothing answers it. :data:`TurnCommand` is the union of every command the turn
family returns, for an exhaustive ``match``.
"""

from __future__ import annotations

import enum
from typing import ClassVar

import attrs

from ._base import AwaitingCommand, Notice, ids, is_bool, is_id, is_str, one_of, tuple_of
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
    "DecideNaturalStop",
    "DismissPermission",
    "DraftReason",
    "EndTurn",
    "ExecuteTool",
    "LeadAccepted",
    "LeadUnapplied",
    "Persist",
    "Record",
    "RequestModelStream",
    "RequestTitle",
    "ReturnDraft",
    "SaveLead",
    "SetTitle",
    "StaleAnswerIgnored",
    "TurnCommand",
    "TurnNotice",
    "TurnOrigin",
    "UnsavedRecords",
]

Record = UserMessageRecord | ResponseRecord | ToolResultRecord
_RECORD_TYPES = (UserMessageRecord, ResponseRecord, ToolResultRecord)


# --- the turn ---------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Persist(AwaitingCommand):
    """Durably save ``records`` (in order), then answer ``Persisted(key)`` (TL-5)."""

    answered_by: ClassVar[tuple[str, ...]] = ("Persisted", "PersistFailed")
    key: str = attrs.field(validator=is_id)
    records: tuple[Record, ...] = attrs.field(validator=tuple_of(_RECORD_TYPES))

    @property
    def answer_id(self) -> str:
        return self.key


@attrs.frozen(kw_only=True, eq=False, repr=False)
class RequestModelStream(AwaitingCommand):
    """Run the budgeting step (token estimate, compaction), then open a response stream (TL-2).

    Answer ``StreamOpened`` once the stream is returned, or ``CompactionFailed`` /
    ``TokenLimitRejected`` / ``StreamFailed`` when no stream could be opened.
    """

    answered_by: ClassVar[tuple[str, ...]] = (
        "StreamOpened", "StreamCompleted", "StreamFailed", "CompactionFailed",
        "TokenLimitRejected")
    request_id: str = attrs.field(validator=is_id)
    #: Saved Lead instructions this request gives the model, in save order (LD-8, LD-16). The
    #: host marks them applied once the request is made.
    lead_ids: tuple[str, ...] = attrs.field(default=(), validator=ids)
    #: True when this request is the one corrective retry after a response whose tool-call
    #: format was malformed (TL-6). The turn has already written that response
    #: (``ResponseRecord.malformed_tool_format``) and a ``SKIPPED`` result for each of its
    #: calls, none of which ran. Send the conversation as written, then one short instruction
    #: of the host's own telling the model its last tool call could not be parsed and to send
    #: it again with valid arguments (the turn writes no text for it). Where the engine refuses
    #: the broken call in the history (Anthropic's ``input`` must be an object), send that
    #: response with its text only, without its calls and their results. Otherwise this is an
    #: ordinary request: ``lead_ids``, the budgeting step and the answers are the same. A second
    #: malformed response in a row ends the turn ``MALFORMED_TOOL_FORMAT``; a well-formed one
    #: resets the allowance. The request ``ContinueTurn`` sends again after it failed is still
    #: corrective.
    corrective: bool = attrs.field(default=False, validator=is_bool)

    @property
    def answer_id(self) -> str:
        return self.request_id


@attrs.frozen(kw_only=True, eq=False, repr=False)
class CancelStream(Notice):
    """Stop the response stream ``request_id``; send no further events for it."""

    request_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class AskPermission(AwaitingCommand):
    """Ask the user whether ``call`` may run; answer ``PermissionDecided`` (TL-3)."""

    answered_by: ClassVar[tuple[str, ...]] = ("PermissionDecided",)
    call: ToolCall = attrs.field(validator=one_of(ToolCall))

    @property
    def answer_id(self) -> str:
        return self.call.call_id


@attrs.frozen(kw_only=True, eq=False, repr=False)
class DismissPermission(Notice):
    """Close the permission dialog of ``call_id``; its result is recorded as ``recorded_as``."""

    call_id: str = attrs.field(validator=is_id)
    recorded_as: ToolResultStatus = attrs.field(validator=one_of(ToolResultStatus))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ExecuteTool(AwaitingCommand):
    """Run ``call`` now; answer ``ToolFinished`` when it ends (TL-4: only one at a time)."""

    answered_by: ClassVar[tuple[str, ...]] = ("ToolFinished",)
    call: ToolCall = attrs.field(validator=one_of(ToolCall))

    @property
    def answer_id(self) -> str:
        return self.call.call_id


@attrs.frozen(kw_only=True, eq=False, repr=False)
class CancelTool(Notice):
    """Stop or a hard stop came while ``call_id`` runs: ask the tool to stop if it can.

    The turn sends it only then (after the call's ``ExecuteTool``, before its
    ``ToolFinished``), once per call; never for a Lead, which never cancels (LD-10), and never
    for a call still waiting for permission (that is ``DismissPermission``). Whether the tool
    may stop is the host's decision, since only the host knows what the tool does: stop a tool
    that can stop without leaving work half done (a read, a search, a command that can be
    interrupted), and let one that cannot run to its end; a write is never stopped part-way.
    Either way, answer with exactly one ``ToolFinished`` once the tool has really ended:
    ``cancelled=True`` with what it produced if it stopped short (the record then names what
    ended the turn), ``cancelled=False`` with its whole output if it ran to its end. The turn's
    ending stands either way; it waits for that result and saves it.
    """

    call_id: str = attrs.field(validator=is_id)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class DecideNaturalStop(AwaitingCommand):
    """The model stopped naturally (``TurnConfig(hold_natural_stops=True)`` only): decide whether
    the turn ends or continues, and answer ``NaturalStopDecided`` echoing ``request_id``.

    This is where a session applies its stop order (mid-turn messages, queued prompts, Stop
    hooks, the todo stop guard). ``empty`` is true when the final response had no text.
    """

    answered_by: ClassVar[tuple[str, ...]] = ("NaturalStopDecided",)
    turn_id: str = attrs.field(validator=is_id)
    request_id: str = attrs.field(validator=is_id)
    empty: bool = attrs.field(validator=is_bool)

    @property
    def answer_id(self) -> str:
        return self.request_id


class TurnOrigin(enum.Enum):
    """Where a turn came from; a ``ContinueTurn`` keeps the origin of the turn it continues."""

    #: A ``PromptSubmitted`` (the turn lifecycle alone always says this).
    PROMPT = "prompt"
    #: A prompt from the daemon FIFO (``PromptQueued``).
    QUEUED_PROMPT = "queued_prompt"
    #: An automatic turn for a cron fire.
    CRON = "cron"
    #: An automatic turn for a background notification.
    NOTIFICATION = "notification"
    #: An automatic turn for a ``@wakeup``.
    WAKEUP = "wakeup"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class EndTurn(Notice):
    """The turn ``turn_id`` ended; show ``outcome`` to the user. Sent exactly once per end."""

    turn_id: str = attrs.field(validator=is_id)
    outcome: TurnOutcome = attrs.field(validator=one_of(TurnOutcome))
    #: Where the turn came from (set by the session; the turn lifecycle alone says ``PROMPT``).
    origin: TurnOrigin = attrs.field(default=TurnOrigin.PROMPT, validator=one_of(TurnOrigin))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class UnsavedRecords(Notice):
    """Records the chat still owed when it closed (``CloseChat``): executed tool results whose
    write failed, a prompt whose save failed, a result for every call that never ran. Nothing
    will write them now: save them with the host's own means or show them; they are handed back
    so that no executed tool output and no user text is lost (TL-5)."""

    records: tuple[Record, ...] = attrs.field(validator=tuple_of(_RECORD_TYPES))
    reason: str = attrs.field(validator=is_str)


# --- Lead -------------------------------------------------------------------------------------


class DraftReason(enum.Enum):
    """Why a Lead draft goes back to the composer; every way a draft comes back has one."""

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
    #: The host could not save it (LD-7).
    SAVE_FAILED = "save_failed"
    #: It was admitted, but the turn ended before its save started (LD-14).
    TURN_ENDED_BEFORE_SAVE = "turn_ended_before_save"
    #: A resend used the id of an instruction this chat already has, with another text.
    DUPLICATE_ID = "duplicate_id"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LeadAccepted(Notice):
    """The instruction is admitted: clear its text from the composer, keep the attachments."""

    lead_id: str = attrs.field(validator=is_id)
    #: Attachments that stay in the composer for an ordinary send (LD-15).
    kept_attachment_ids: tuple[str, ...] = attrs.field(default=(), validator=ids)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ReturnDraft(Notice):
    """A Lead instruction was refused or not saved: put ``draft`` back in the composer and show
    ``message``. The one way a draft comes back, whatever the reason (LD-2, LD-5 ... LD-7, LD-14).
    """

    lead_id: str = attrs.field(validator=is_id)
    reason: DraftReason = attrs.field(validator=one_of(DraftReason))
    draft: str = attrs.field(validator=is_str)
    message: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SaveLead(AwaitingCommand):
    """Save the instruction as a user message of the running turn; answer ``LeadSaved`` or
    ``LeadSaveFailed`` (LD-3, LD-4: one save at a time)."""

    answered_by: ClassVar[tuple[str, ...]] = ("LeadSaved", "LeadSaveFailed")
    lead_id: str = attrs.field(validator=is_id)
    record: UserMessageRecord = attrs.field(validator=one_of(UserMessageRecord))

    @property
    def answer_id(self) -> str:
        return self.lead_id


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LeadUnapplied(Notice):
    """The instruction is saved as a user message but its turn ended for good before the model
    was given it; show it as saved and unapplied (LD-13). This command is the one report of it.
    """

    lead_id: str = attrs.field(validator=is_id)


# --- naming -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class RequestTitle(AwaitingCommand):
    """Ask the naming model for a title of ``chat_id``; answer ``TitleGenerated`` or
    ``TitleFailed`` echoing ``request_id``.

    No model request is issued and no tool starts while it runs (TT-3).
    """

    answered_by: ClassVar[tuple[str, ...]] = ("TitleGenerated", "TitleFailed")
    chat_id: str = attrs.field(validator=is_id)
    request_id: str = attrs.field(validator=is_id)

    @property
    def answer_id(self) -> str:
        return self.request_id


@attrs.frozen(kw_only=True, eq=False, repr=False)
class SetTitle(Notice):
    """Show ``title`` as the chat's automatic title."""

    chat_id: str = attrs.field(validator=is_id)
    title: str = attrs.field(validator=is_id)


# --- races ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True, eq=False, repr=False)
class StaleAnswerIgnored(Notice):
    """An answer arrived for something no longer waiting for it, as real UIs produce by timing
    alone (a click after the dialog closed, a title after a rename, a stream after Stop). Nothing
    changed; the host may log it."""

    #: The answering event's class name.
    event: str = attrs.field(validator=is_id)
    #: The id it echoed.
    answer_id: str = attrs.field(validator=is_str)
    reason: str = attrs.field(validator=is_str)


#: Every notice the turn family returns: what a turn driver's notice sink receives (its
#: ``on_notice``), for an exhaustive match there.
TurnNotice = (
    CancelStream | DismissPermission | CancelTool | EndTurn | LeadAccepted | ReturnDraft
    | LeadUnapplied | SetTitle | StaleAnswerIgnored | UnsavedRecords
)

#: Every command the turn family (turn lifecycle, Lead, titles) returns, for an exhaustive match.
TurnCommand = (
    Persist | RequestModelStream | AskPermission | ExecuteTool | SaveLead | RequestTitle
    | DecideNaturalStop | TurnNotice
)
