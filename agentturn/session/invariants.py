"""The session's three invariants, as checks anyone can run on a step: no text lost, never
stuck, the hard bound.

Theory of operation
-------------------
Each check looks at one step (the state before, the event, the state after, the commands) or
one state, and returns what is wrong as sentences (an empty list when nothing is). The session
property machine, the explorer and the fuzzer run all three on every step; a host's own tests
may run them on its recorded traffic.

* **No text lost** (:func:`lost_texts`). Every piece of text a host hands the session is, after
  every step, either *held* in the state (a queued prompt, a held automatic turn, a record the
  turn still has to write or owes, a Lead instruction pending or carried by a request not yet
  opened) or has reached a *terminal fate* in that step: saved (its write acknowledged),
  delivered (a Lead carried by a stream that opened), handed back (``PromptRefused``,
  ``AutomaticTurnDropped``, ``ReturnDraft``, ``RestoreMidTurnMessages``, ``UnsavedRecords``),
  reported (``LeadUnapplied``), coalesced into a held turn, cancelled by the user (a queued
  prompt's ``PromptAborted``), or absorbed as a resend of what is already held. The check is
  local (held before + brought in = held after + fates), so it holds for a whole run exactly
  when it holds for every step.
* **Never stuck** (:func:`stuck`). A running turn always awaits an answer; an idle session
  never keeps a complete queued prompt waiting; and when it holds input that has not run,
  :func:`~agentturn.session.waiting_for` names something the host can still deliver.
* **The hard bound** (:class:`HardBound`). Without new user input, at most two model streams
  are attributable to the guard: its continuations (combined hook + guard continuations
  included), and every follow-up that sends the tool results of a plain guard continuation (a
  combined one's follow-ups are the hook's own loop, SG-B8). The monitor follows the
  streams from the commands and events alone, not from the guard's own bookkeeping.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import commands as c
from .. import events as e
from .._base import Command
from .._memo import remember_recent
from ..commands import Record
from ..guard.state import GuardPhase
from ..guard.texts import MAX_ATTEMPTS, is_guard_prompt
from ..lead import LeadEntry
from ..records import ToolResultRecord, UserMessageRecord
from ..turn.state import TurnPhase
from . import fifo
from . import vocabulary as sv
from .fifo import QueuedPrompt
from .reducer import outstanding
from .ring import EntryKind
from .state import SessionPhase, SessionState
from .waiting import WaitKind, pending

__all__ = ["HardBound", "held_texts", "lost_texts", "stuck"]

#: How a plain guard continuation begins (a combined one begins with the hook's reason).
_GUARD_OPENING = "[Todo Stop Guard]"
#: Guard phases with no work chain: entering one is a chain boundary.
_NO_CHAIN_PHASES = (GuardPhase.NO_CHAIN, GuardPhase.PLAN)  # (a tuple: members compare by identity)
#: A piece of text: ``("user", message_id)`` for a prompt or user-role record,
#: ``("result", call_id)`` for a tool result, ``("lead", lead_id)`` for a Lead instruction.
Key = tuple[str, str]


def _record_key(record: object) -> Key | None:
    if isinstance(record, UserMessageRecord):
        return ("user", record.message_id)
    if isinstance(record, ToolResultRecord):
        return ("result", record.call_id)
    return None


def held_texts(state: SessionState) -> set[Key]:
    """Every piece of text ``state`` still holds on the way to its fate."""
    turn = state.turn
    held: set[Key] = {("user", entry.message_id) for entry in state.fifo}
    held.update(("user", message_id) for _, message_id, _ in state.deferred_prompts)
    for record in (*turn.batch, *turn.owed):
        key = _record_key(record)
        if key is not None:
            held.add(key)
    held.update(("lead", entry.lead_id) for entry in (*turn.lead.entries, *turn.request_leads))
    return held


def _brought(event: object, commands: tuple[Command, ...]) -> set[Key]:
    """The text ``event`` hands the session (a resend of something held brings nothing new)."""
    cls = event.__class__
    bringing = _BRINGS[cls] if cls in _BRINGS else _brings(cls)
    if bringing is None or any(isinstance(x, c.StaleAnswerIgnored) for x in commands):
        return set()
    return {(bringing[0], getattr(event, bringing[1]))}


#: The events that bring text: the kind of text, and the field that names it.
_BRINGING: tuple[tuple[type | tuple[type, ...], tuple[str, str]], ...] = (
    ((e.PromptSubmitted, sv.PromptQueued, sv.AutomaticTurnDue), ("user", "message_id")),
    (e.LeadSubmitted, ("lead", "lead_id")), (e.ToolFinished, ("result", "call_id")))
#: What :data:`_BRINGING` says of each event class met (found once per class).
_BRINGS: dict[type, tuple[str, str] | None] = {}


def _brings(cls: type) -> tuple[str, str] | None:
    found = _BRINGS[cls] = next((how for kinds, how in _BRINGING if issubclass(cls, kinds)), None)
    return found


def _fates(before: SessionState, event: object, commands: tuple[Command, ...]) -> set[Key]:
    """The text that reached a terminal fate in this step."""
    fates: set[Key] = set()
    turn = before.turn
    if isinstance(event, e.Persisted) and turn.persisting and event.key == turn.persist_key:
        fates.update(k for k in map(_record_key, turn.batch) if k is not None)  # saved
    if (isinstance(event, e.StreamOpened) and event.request_id == turn.request_id
            and turn.phase is TurnPhase.AWAITING_STREAM):
        fates.update(("lead", entry.lead_id) for entry in turn.request_leads)  # delivered
    message_of = {entry.prompt_id: entry.message_id for entry in before.fifo}
    if isinstance(event, sv.PromptAborted) and event.prompt_id in message_of:
        fates.add(("user", message_of[event.prompt_id]))  # the user cancelled it (SO-3)
    brought: tuple[str, str] | None = None  # (prompt id, message id) of a prompt this event brings
    if isinstance(event, sv.PromptQueued):
        brought = (event.prompt_id, event.message_id)
    elif isinstance(event, e.PromptSubmitted):
        brought = (event.turn_id, event.message_id)
    for command in commands:
        if isinstance(command, sv.PromptRefused):
            # The prompt this event brought, or (at a close) a queued one handed back.
            if brought is not None and command.prompt_id == brought[0]:
                fates.add(("user", brought[1]))
            else:
                fates.add(("user", message_of.get(command.prompt_id, "")))
        elif isinstance(command, sv.AutomaticTurnDropped):
            fates.add(("user", command.message_id))
        elif isinstance(command, sv.AutomaticTurnDeferred) and command.coalesced_into:
            fates.add(("user", getattr(event, "message_id", "")))  # merged into a held fire
        elif isinstance(command, c.ReturnDraft | c.LeadUnapplied):
            fates.add(("lead", command.lead_id))
        elif isinstance(command, c.UnsavedRecords):
            fates.update(k for k in map(_record_key, command.records) if k is not None)
    return fates


# The texts a state holds, part by part (held_texts reads three parts: the queues, the turn's
# records, its Lead instructions). A walk checks every move from one state in a row, and a
# random walk goes on from the state its step made; most steps keep most parts as they were:
# the texts of the last two objects of each part asked about are remembered (agentturn._memo).
@remember_recent(2)
def _queue_texts(queue: tuple[QueuedPrompt, ...], prompts: tuple[tuple[str, str, str], ...]
                 ) -> frozenset[Key]:
    return frozenset([*(("user", entry.message_id) for entry in queue),
                      *(("user", message_id) for _, message_id, _ in prompts)])


@remember_recent(2)
def _record_texts(batch: tuple[Record, ...], owed: tuple[Record, ...]) -> frozenset[Key]:
    return frozenset(key for key in map(_record_key, (*batch, *owed)) if key is not None)


@remember_recent(2)
def _lead_texts(entries: tuple[LeadEntry, ...], carried: tuple[LeadEntry, ...]
                ) -> frozenset[Key]:
    return frozenset(("lead", entry.lead_id) for entry in (*entries, *carried))


def lost_texts(before: SessionState, event: object, after: SessionState,
               commands: tuple[Command, ...]) -> list[str]:
    """*No text lost* for one accepted step: what was held or brought in and is now neither
    held nor at a terminal fate (an empty list when nothing is lost)."""
    problems: list[str] = []
    # What is missing is (held before | brought) - held after - fates. A text held before by a
    # part that is the very same object after is held after too: only the texts brought and
    # those of the parts this step replaced can be missing, so only they are looked at.
    candidates = _brought(event, commands)
    turn, new_turn = before.turn, after.turn
    queues = after.fifo is not before.fifo or after.deferred_prompts is not before.deferred_prompts
    if queues:
        candidates |= _queue_texts(before.fifo, before.deferred_prompts)
    records = leads = False
    if new_turn is not turn:
        records = new_turn.batch is not turn.batch or new_turn.owed is not turn.owed
        if records:
            candidates |= _record_texts(turn.batch, turn.owed)
        leads = (new_turn.lead.entries is not turn.lead.entries
                 or new_turn.request_leads is not turn.request_leads)
        if leads:
            candidates |= _lead_texts(turn.lead.entries, turn.request_leads)
    if candidates:
        missing = (candidates - _queue_texts(after.fifo, after.deferred_prompts)
                   - _record_texts(new_turn.batch, new_turn.owed)
                   - _lead_texts(new_turn.lead.entries, new_turn.request_leads)
                   - _fates(before, event, commands))
        if missing:
            problems.append(f"no text lost: {sorted(missing)} vanished")
    if isinstance(event, sv.MidTurnDrained) and event.messages:
        # Drained messages become Lead instructions of the turn, or come back to the client.
        kept = [entry.text for entry in after.turn.lead.entries]
        kept += [x.draft for x in commands if isinstance(x, c.ReturnDraft)]
        kept += [m for x in commands if isinstance(x, sv.RestoreMidTurnMessages)
                 for m in x.messages]
        gone = [m for m in event.messages if m not in kept and not any(
            isinstance(x, c.StaleAnswerIgnored) for x in commands)]
        if gone:
            problems.append(f"no text lost: drained messages {gone} vanished")
    return problems


# Enum members the check reads, bound once (cheaper than reading them off their classes).
_CLOSED, _IDLE = SessionPhase.CLOSED, SessionPhase.IDLE
_BACKGROUND, _RETRY = WaitKind.BACKGROUND, WaitKind.RETRY


def stuck(state: SessionState) -> list[str]:
    """*Never stuck* for one state (an empty list when it is not stuck)."""
    phase = state.phase
    if phase is _CLOSED:
        return []
    # What waiting_for(state) lists, without building its values: the answers (outstanding,
    # one for one and in order), then the rest (waiting.pending).
    answers = outstanding(state)
    rest = pending(state)
    problems: list[str] = []
    if phase is not _IDLE and not answers:
        problems.append(f"never stuck: a {phase.name} session awaits no answer")
    if phase is _IDLE:
        if fifo.has_queued_prompt(state.fifo):
            problems.append("never stuck: a complete queued prompt waits while idle")
        if state.deferred.turns and not answers and not rest:
            problems.append("never stuck: automatic turns are held and nothing can wake them")
    for kind, answer_id in rest:
        if kind is _BACKGROUND and not (
                any(live.item_id == answer_id for live in state.background.live)
                or any(note.notification_id == answer_id for note in state.background.queued)):
            problems.append(f"never stuck: waits for background {answer_id!r} that is gone")
        if kind is _RETRY and state.turn.resume_phase is None:
            problems.append("never stuck: waits for a retry no turn offers")
    if len(answers) > 1 and len({(o.command, o.answer_id) for o in answers}) != len(answers):
        problems.append("never stuck: an awaiting command is outstanding twice")
    return problems


class HardBound(NamedTuple):
    """The hard-bound monitor along a run. Hashable, so an explorer can key its nodes by
    ``(state, monitor)``.

    A stream is guard-attributable when it is a guard continuation (its discrete chunk is
    published as it opens) or a follow-up that sends the tool results of an attributable stream
    (SG-B4), with one exception the design makes: the follow-up of a *combined* hook + guard
    continuation is the hook's own loop (SG-B8). User input (a
    request carrying Lead instructions), a new work chain and a chain boundary start over.
    """

    #: Guard-attributable streams since the last user input.
    streams: int = 0
    #: The last attributable stream's tool calls are running: its follow-up is attributable.
    loop_open: bool = False
    #: Requests sent inside that loop, whose streams will be attributable when they open.
    follow_ups: frozenset[str] = frozenset()
    #: A combined hook + guard continuation's message was saved; its stream has not opened.
    combined_next: bool = False
    #: The open loop comes from a combined continuation.
    combined: bool = False

    def step(self, before: SessionState, event: object, after: SessionState,
             commands: tuple[Command, ...]) -> tuple[HardBound, list[str]]:
        """The monitor after one accepted step, and what broke (an empty list if nothing)."""
        streams, loop_open, follow_ups, combined_next, combined = self
        guard, new_guard = before.guard, after.guard
        if new_guard is not guard and (new_guard.chain != guard.chain or (
                new_guard.phase in _NO_CHAIN_PHASES and guard.phase not in _NO_CHAIN_PHASES)):
            # A new work chain is a new stage: a prompt (user input) or an unrelated automatic
            # turn's own chain (SG-A10); a related one keeps the chain, and its count. A chain
            # boundary (trust cleared, Approval plan mode) ends the chain: what runs after it
            # is no longer the guard's (SG-A12, SG-C3).
            streams, loop_open, follow_ups, combined = 0, False, frozenset(), False
            combined_next = False
        if isinstance(event, e.StreamOpened) and after.turn is not before.turn:
            chunk = any(isinstance(x, sv.Publish) and x.entry.kind is EntryKind.GUARD_CHUNK
                        for x in commands)
            attributable = chunk or event.request_id in follow_ups
            streams += int(attributable)
            combined = attributable and (combined if event.request_id in follow_ups and not chunk
                                         else combined_next)
            loop_open, follow_ups, combined_next = attributable, frozenset(), False
        if isinstance(event, e.StreamCompleted) and after.turn is not before.turn:
            # The loop stays open only while the attributable stream's calls run.
            loop_open = loop_open and bool(event.tool_calls)
        for command in commands:
            if isinstance(command, c.Persist):
                combined_next = combined_next or any(
                    isinstance(r, UserMessageRecord) and is_guard_prompt(r.text)
                    and not r.text.startswith(_GUARD_OPENING) for r in command.records)
            elif isinstance(command, c.RequestModelStream):
                if command.lead_ids:  # user input
                    streams, loop_open, follow_ups, combined = 0, False, frozenset(), False
                elif loop_open and combined:
                    loop_open = False  # SG-B8: a combined stream's loop is the hook's own
                elif loop_open:
                    follow_ups = follow_ups | {command.request_id}
            elif isinstance(command, c.EndTurn):
                # (a combined continuation whose request failed before it opened is retried as
                # itself, its message already saved: it stays combined for that retry)
                keep = command.outcome.resumable and combined_next
                loop_open, follow_ups, combined_next, combined = False, frozenset(), keep, False
        problems = ([f"the hard bound: {streams} guard-attributable streams without new user "
                     "input"] if streams > MAX_ATTEMPTS else [])
        return HardBound(streams, loop_open, follow_ups, combined_next, combined), problems
