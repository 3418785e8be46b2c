"""Lead: text the user types while the agent works, joined to the same turn at a safe boundary.

Theory of operation
-------------------
The Lead queue of one chat admits instructions only while a turn is active in that chat
(``OPEN``), saves them one at a time as user messages, and hands the saved ones to the turn when
it reaches a safe boundary. It knows nothing about tools or streams: the turn lifecycle
(:mod:`agentturn.turn`) decides where the boundaries are and calls :func:`take_saved` there. A
host that has its own turn loop can use this part alone: :func:`open_admission` when a turn
starts, :func:`reduce` for the three Lead events, :func:`take_saved` at its boundaries,
:func:`close_admission` before final lifecycle work and :func:`release` when the turn has ended
(or :func:`suspend` when it ended with a resumable error), and :func:`is_offered` to show or hide
the Lead control.

Rules this module keeps:

* Admission (LD-1, LD-2, LD-5, LD-6, LD-14): the owning chat only, an open turn only, text that is
  not blank and at most ``MAX_LEAD_BYTES`` bytes of UTF-8, at most ``MAX_PENDING`` pending. Each
  refusal is a :class:`~agentturn.ReturnDraft` command with a typed reason and the draft; never an
  exception. (Text that cannot be encoded as UTF-8 never gets this far: building the event
  raises ``FieldError``.)
* Saves are serialized (LD-4): at most one ``SaveLead`` is in flight; the others wait in
  submission order. A failed save hands the draft back (``ReturnDraft``, ``SAVE_FAILED``) and
  leaves the others and their order untouched (LD-7).
* Only acknowledged saves are ever handed to the turn (LD-8), all of them together in save order
  (LD-16).
* Nothing is lost (LD-13, LD-14): when admission closes, instructions not yet saving go back as
  drafts; when the turn ends for good, saved ones that never reached the model are reported with
  ``LeadUnapplied`` (that command is the one report). A turn that ends with a resumable error
  keeps its saved instructions (:func:`suspend`): a ``ContinueTurn`` gives them to the model in
  its next request's ``lead_ids``; a new prompt instead reports them unapplied first.
* Late answers (LD-4): an acknowledgement for an instruction that is no longer saving (a second
  ack, an ack after the save was reported failed or after the turn ended) is absorbed with
  ``StaleAnswerIgnored``; one for an id never admitted here is misuse (``UnknownId``). The queue
  remembers the last ``MAX_PENDING`` ids that left it, so its size stays bounded.
* Attachments are never consumed (LD-15): ``LeadAccepted`` lists them as kept.
"""

from __future__ import annotations

import enum

import attrs

from ._base import Command, State, Step, Value
from ._bounded import remember
from ._trusted import builder, new_step, replacer
from .commands import (
    DraftReason,
    LeadAccepted,
    LeadUnapplied,
    ReturnDraft,
    SaveLead,
    StaleAnswerIgnored,
)
from .errors import UnknownId, check_state
from .events import LeadSaved, LeadSaveFailed, LeadSubmitted
from .phases import PhaseGraph
from .records import UserMessageRecord

__all__ = [
    "LEAD_GRAPH",
    "MAX_LEAD_BYTES",
    "MAX_PENDING",
    "Admission",
    "LeadEntry",
    "LeadQueue",
    "LeadStatus",
    "close_admission",
    "has_unsaved",
    "is_offered",
    "open_admission",
    "reduce",
    "release",
    "restore",
    "saved_ids",
    "saving_id",
    "suspend",
    "take_saved",
    "take_saved_entries",
]

#: The most instructions that may be pending (saving or saved, not yet applied) at once (LD-5).
MAX_PENDING = 8
#: The largest instruction, in bytes of UTF-8 (LD-6): 32 KiB.
MAX_LEAD_BYTES = 32 * 1024


class Admission(enum.Enum):
    """Whether the chat's composer may send Lead instructions now."""

    #: No turn is active; Lead is not offered (LD-1).
    CLOSED = "closed"
    #: A turn is active; instructions are admitted.
    OPEN = "open"
    #: The turn does its final lifecycle work; new instructions are refused (LD-14).
    ENDING = "ending"


LEAD_GRAPH: PhaseGraph[Admission] = PhaseGraph(
    "lead",
    Admission,
    Admission.CLOSED,
    [
        # every phase takes every Lead event: refusals and late answers change no phase
        *[(name, [phase], [phase]) for name in ("LeadSubmitted", "LeadSaved", "LeadSaveFailed")
          for phase in Admission],
        ("open_admission", [Admission.CLOSED, Admission.ENDING], [Admission.OPEN]),
        ("close_admission", [Admission.OPEN], [Admission.ENDING]),
        ("release", [Admission.OPEN, Admission.ENDING], [Admission.CLOSED]),
        ("suspend", [Admission.OPEN, Admission.ENDING], [Admission.CLOSED]),
    ],
)


class LeadStatus(enum.Enum):
    """Where one admitted instruction is."""

    #: Admitted, waiting for the save in flight to finish (LD-4).
    QUEUED = "queued"
    #: Its ``SaveLead`` is in flight.
    SAVING = "saving"
    #: Saved as a user message; waiting for a safe boundary.
    SAVED = "saved"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LeadEntry(Value):
    """One pending instruction."""

    lead_id: str
    text: str
    status: LeadStatus


@attrs.frozen(kw_only=True, eq=False, repr=False)
class LeadQueue(State):
    """The Lead queue of one chat: at most ``MAX_PENDING`` entries in submission order."""

    chat_id: str
    admission: Admission = Admission.CLOSED
    entries: tuple[LeadEntry, ...] = ()
    #: The last ``MAX_PENDING`` lead ids that left the queue, to tell a late answer from misuse.
    recent: tuple[str, ...] = ()

    @classmethod
    def create(cls, chat_id: str) -> LeadQueue:
        """An empty, closed queue for ``chat_id``."""
        return cls(chat_id=chat_id)


_replace = replacer(LeadQueue)
_replace_entry = replacer(LeadEntry)
# The trusted constructors (see ``builder``) of what this part makes from validated values.
_SaveLead = builder(SaveLead)
_UserMessageRecord = builder(UserMessageRecord)
_LeadEntry = builder(LeadEntry)
_LeadAccepted = builder(LeadAccepted)


def is_offered(queue: LeadQueue) -> bool:
    """True while the Lead control may be shown in the chat's composer (LD-1)."""
    return queue.admission is Admission.OPEN


def _refuse(event: LeadSubmitted, reason: DraftReason, message: str) -> ReturnDraft:
    return ReturnDraft(lead_id=event.lead_id, reason=reason, draft=event.text, message=message)


def _left(queue: LeadQueue, *lead_ids: str) -> tuple[str, ...]:
    """``queue.recent`` with ``lead_ids`` added, bounded."""
    return remember(queue.recent, *lead_ids, limit=MAX_PENDING)


def _admission_refusal(queue: LeadQueue, event: LeadSubmitted) -> ReturnDraft | None:
    """The refusal for ``event``, or ``None`` when it may be admitted. Checked in this order."""
    if event.chat_id != queue.chat_id:
        return _refuse(event, DraftReason.NOT_OWNER,
                       "Lead can only steer the chat whose turn is running.")
    if queue.admission is Admission.CLOSED:
        return _refuse(event, DraftReason.NOT_ACTIVE,
                       "No turn is running in this chat; send the text as a new message.")
    if queue.admission is Admission.ENDING:
        return _refuse(event, DraftReason.TURN_ENDING,
                       "The turn is finishing; your text is kept for an ordinary send.")
    if not event.text.strip():
        return _refuse(event, DraftReason.EMPTY, "A Lead instruction needs some text.")
    size = len(event.text.encode("utf-8"))
    if size > MAX_LEAD_BYTES:
        return _refuse(event, DraftReason.TOO_LONG,
                       f"A Lead instruction holds at most {MAX_LEAD_BYTES} bytes; "
                       f"this one has {size}.")
    if len(queue.entries) >= MAX_PENDING:
        return _refuse(event, DraftReason.QUEUE_FULL,
                       f"{MAX_PENDING} Lead instructions are already waiting; "
                       "send this one after they are applied.")
    return None


def _resend(queue: LeadQueue, event: LeadSubmitted) -> Command | None:
    """A client's resend (a retry after a network blip) is idempotent: the id of an instruction
    this queue holds with the same text, or of one that left it lately, is absorbed; the id of a
    pending one with another text is refused with its draft (``DUPLICATE_ID``). ``None``: new."""
    for entry in queue.entries:
        if entry.lead_id == event.lead_id:
            if entry.text == event.text:
                return StaleAnswerIgnored(event="LeadSubmitted", answer_id=event.lead_id,
                                          reason="this instruction was already received")
            return _refuse(event, DraftReason.DUPLICATE_ID,
                           "Another Lead instruction already has this id; your text was not "
                           "sent.")
    if event.lead_id in queue.recent:
        # Its text is no longer held (the queue stays bounded), so it is not compared.
        return StaleAnswerIgnored(event="LeadSubmitted", answer_id=event.lead_id,
                                  reason="this instruction was already received")
    return None


def _start_next_save(
    entries: tuple[LeadEntry, ...],
) -> tuple[tuple[LeadEntry, ...], tuple[Command, ...]]:
    """Start the first queued save if no save is in flight (LD-4)."""
    for entry in entries:
        if entry.status is LeadStatus.SAVING:
            return entries, ()
    for index, entry in enumerate(entries):
        if entry.status is LeadStatus.QUEUED:
            saving = _replace_entry(entry, status=LeadStatus.SAVING)
            command = _SaveLead(
                lead_id=entry.lead_id,
                record=_UserMessageRecord(message_id=entry.lead_id, text=entry.text),
            )
            return (*entries[:index], saving, *entries[index + 1:]), (command,)
    return entries, ()


def _saving_index(queue: LeadQueue, event: LeadSaved | LeadSaveFailed) -> int | None:
    """The index of the entry whose save ``event`` answers; ``None`` for a late answer."""
    saved = False  # already acknowledged: a second answer is late, not misuse
    for index, entry in enumerate(queue.entries):
        if entry.lead_id == event.lead_id:
            if entry.status is LeadStatus.SAVING:
                return index
            saved = entry.status is LeadStatus.SAVED
    if saved or event.lead_id in queue.recent:
        return None
    raise UnknownId(part="lead", phase=queue.admission.name, event=event,
                    expected="an acknowledgement of the instruction whose save is in flight")


def reduce(queue: LeadQueue, event: LeadSubmitted | LeadSaved | LeadSaveFailed) -> Step[LeadQueue]:
    """Admit, refuse, or record the save of one Lead instruction."""
    check_state("lead", queue, LeadQueue, event)
    LEAD_GRAPH.check(queue.admission, event)
    if isinstance(event, LeadSubmitted):
        resent = _resend(queue, event) if event.chat_id == queue.chat_id else None
        if resent is not None:
            return Step(queue, (resent,))
        refusal = _admission_refusal(queue, event)
        if refusal is not None:
            return Step(queue, (refusal,))
        entry = _LeadEntry(lead_id=event.lead_id, text=event.text, status=LeadStatus.QUEUED)
        entries, saves = _start_next_save((*queue.entries, entry))
        accepted = _LeadAccepted(lead_id=event.lead_id, kept_attachment_ids=event.attachment_ids)
        return new_step(state=_replace(queue, entries=entries), commands=(accepted, *saves))
    index = _saving_index(queue, event)
    if index is None:
        return Step(queue, (StaleAnswerIgnored(
            event=type(event).__name__, answer_id=event.lead_id,
            reason="this instruction's save is not in flight"),))
    entry = queue.entries[index]
    if isinstance(event, LeadSaved):
        saved = _replace_entry(entry, status=LeadStatus.SAVED)
        entries, saves = _start_next_save(
            (*queue.entries[:index], saved, *queue.entries[index + 1:]))
        return new_step(state=_replace(queue, entries=entries), commands=saves)
    draft = ReturnDraft(lead_id=entry.lead_id, reason=DraftReason.SAVE_FAILED, draft=entry.text,
                        message=f"Saving the Lead instruction failed ({event.reason}); "
                                "the text is back in the composer.")
    entries, saves = _start_next_save(queue.entries[:index] + queue.entries[index + 1:])
    return Step(_replace(queue, entries=entries, recent=_left(queue, entry.lead_id)),
                (draft, *saves))


def _unsaved_draft(entry: LeadEntry) -> ReturnDraft:
    """The draft of an instruction the turn ended before saving goes back to the composer."""
    return ReturnDraft(lead_id=entry.lead_id, reason=DraftReason.TURN_ENDED_BEFORE_SAVE,
                       draft=entry.text,
                       message="The turn ended before this Lead instruction was saved; the "
                               "text is back in the composer.")


def open_admission(queue: LeadQueue) -> LeadQueue:
    """A turn became active in the chat: admit instructions."""
    return _replace(queue, admission=Admission.OPEN)


def close_admission(queue: LeadQueue) -> Step[LeadQueue]:
    """The turn starts its final lifecycle work (LD-14).

    New instructions are refused from now on. Instructions admitted but not yet saving go back
    as drafts at once (they were never saved, so the user's text must not wait on the turn); the
    save in flight, if any, still completes and is reported by :func:`release`.
    """
    if queue.admission is not Admission.OPEN:
        return Step(queue)
    kept: list[LeadEntry] = []
    drafts: list[Command] = []
    for entry in queue.entries:
        if entry.status is LeadStatus.QUEUED:
            drafts.append(_unsaved_draft(entry))
        else:
            kept.append(entry)
    returned = tuple(entry.lead_id for entry in queue.entries if entry not in kept)
    return Step(_replace(queue, admission=Admission.ENDING, entries=tuple(kept),
                         recent=_left(queue, *returned)), tuple(drafts))


def has_unsaved(queue: LeadQueue) -> bool:
    """True while an admitted instruction is queued for saving or being saved."""
    if not queue.entries:
        return False
    return any(entry.status is not LeadStatus.SAVED for entry in queue.entries)


def saved_ids(queue: LeadQueue) -> tuple[str, ...]:
    """The ids of saved, unapplied instructions, in save order."""
    if not queue.entries:
        return ()
    return tuple(entry.lead_id for entry in queue.entries if entry.status is LeadStatus.SAVED)


def saving_id(queue: LeadQueue) -> str | None:
    """The id of the instruction whose ``SaveLead`` is in flight, if any."""
    for entry in queue.entries:
        if entry.status is LeadStatus.SAVING:
            return entry.lead_id
    return None


def take_saved(queue: LeadQueue) -> tuple[LeadQueue, tuple[str, ...]]:
    """At a safe boundary: hand every saved instruction to the model together (LD-9, LD-16)."""
    queue, taken = take_saved_entries(queue)
    return queue, tuple(entry.lead_id for entry in taken)


def take_saved_entries(queue: LeadQueue) -> tuple[LeadQueue, tuple[LeadEntry, ...]]:
    """:func:`take_saved`, giving the entries, so a request that never opens can
    :func:`restore` them."""
    if not queue.entries:
        return queue, ()
    taken = tuple(entry for entry in queue.entries if entry.status is LeadStatus.SAVED)
    if not taken:
        return queue, ()
    rest = tuple(entry for entry in queue.entries if entry.status is not LeadStatus.SAVED)
    return (_replace(queue, entries=rest,
                     recent=_left(queue, *(entry.lead_id for entry in taken))), taken)


def restore(queue: LeadQueue, entries: tuple[LeadEntry, ...]) -> LeadQueue:
    """Saved instructions a request took but never delivered (its stream never opened) go back
    to the front of the queue, in save order, ahead of anything admitted since (LD-13)."""
    if not entries:
        return queue
    return _replace(queue, entries=(*entries, *queue.entries))


def release(queue: LeadQueue) -> Step[LeadQueue]:
    """The turn has ended: report each saved, unapplied instruction (LD-13) and close.

    The caller waits until :func:`has_unsaved` is false before releasing, so no save is in
    flight; a queued entry, if the caller released early anyway, goes back as a draft.
    """
    commands: list[Command] = []
    for entry in queue.entries:
        if entry.status is LeadStatus.SAVED:
            commands.append(LeadUnapplied(lead_id=entry.lead_id))
        else:
            commands.append(_unsaved_draft(entry))
    left = tuple(entry.lead_id for entry in queue.entries)
    return Step(_replace(queue, admission=Admission.CLOSED, entries=(),
                         recent=_left(queue, *left)), tuple(commands))


def suspend(queue: LeadQueue) -> Step[LeadQueue]:
    """The turn ended with a resumable error (TL-11): close admission, keep what is saved.

    Saved instructions stay pending, unreported: a ``ContinueTurn`` reopens admission and the next
    request gives them to the model; a new prompt calls :func:`release` first, which reports them
    unapplied. Like :func:`release`, it is called once no save is in flight.
    """
    unsaved = [entry for entry in queue.entries if entry.status is not LeadStatus.SAVED]
    drafts = tuple(_unsaved_draft(entry) for entry in unsaved)
    kept = tuple(entry for entry in queue.entries if entry.status is LeadStatus.SAVED)
    returned = tuple(entry.lead_id for entry in unsaved)
    return Step(_replace(queue, admission=Admission.CLOSED, entries=kept,
                         recent=_left(queue, *returned)), drafts)
