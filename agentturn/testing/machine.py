"""A state machine a host reuses to check its own adapter against the spec.

Theory of operation
-------------------
A host's *adapter* is the code between agentturn and the world: it carries out each command
(saves records, calls the engine and normalizes its stream, runs tools, asks the user, answers
the daemon's drains and Stop hooks) and turns what happened into events. :class:`SessionSpec`
is a hypothesis ``RuleBasedStateMachine`` that plays the world
(:class:`~agentturn.testing.world.World`) and drives the session through the adapter in random
interleavings. Each step is one *move* of the world, drawn with weights from the moves possible
now (so almost none is a no-op): an answer the adapter returned reaches the session; the
engine opens or ends a stream (or fails); a tool finishes; the user answers a dialog, types a
prompt or a Lead, presses Stop, continues a failed turn, aborts a queued prompt or resends a
returned draft; the client replies late to a drain, sends the prompt it said it holds, sends
the rest of a queued prompt, detaches or comes back; a Stop hook decides; background work
starts, ends or notifies, a cron job fires; a timer runs out. When a world move finishes a job
the adapter started, the machine carries the job's command out again and the adapter reports
what happened (see :mod:`agentturn.testing.adapter`).

After every move it checks the world's rules (:mod:`agentturn.testing.world`) and its own, each
named with its requirement ID in the failure message:

* ``accepted`` — the session never refuses an event the adapter produced (a wrong id, an answer
  to nothing);
* ``answered-once`` — no awaiting command is answered twice;
* ``liveness`` (never stuck) — everything :func:`~agentturn.session.waiting_for` names has an
  answer coming: an event the adapter returned, a job the world holds, a timer that will fire,
  a prompt the client holds, a user move;
* ``no-text-lost`` — every prompt and Lead the user typed is in storage, handed back, or still
  held by the session; and the session's own three invariants on every step
  (:func:`~agentturn.session.invariants.lost_texts`, :func:`~agentturn.session.invariants.stuck`,
  :class:`~agentturn.session.invariants.HardBound`).

Subclass it and give it your adapter; hypothesis finds and shrinks an interleaving that breaks
a rule::

    class MyHostSpec(SessionSpec):
        def make_adapter(self) -> Adapter:
            return MyAdapter()

    TestMyHost = MyHostSpec.TestCase

:mod:`agentturn.testing.profiles` has the settings for CI and for a nightly deep run.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from .. import commands as c
from .. import events as e
from .._base import Command, Event
from ..errors import ProtocolError
from ..guard import GuardConfig
from ..records import UserMessageRecord
from ..session import vocabulary as sv
from ..session.background import AutomaticKind, BackgroundKind
from ..session.invariants import HardBound, held_texts, lost_texts, stuck
from ..session.reducer import reduce
from ..session.state import SessionConfig, SessionPhase, SessionState
from ..session.waiting import WaitKind, waiting_for
from ..turn.state import TurnConfig
from .adapter import Adapter, ReferenceAdapter
from .world import ENDED, World

__all__ = ["SessionSpec", "World"]

#: The fields an event echoes its command's id in.
_ANSWER_FIELDS = ("key", "lead_id", "request_id", "call_id", "drain_id", "run_id")
#: Events that end a command (``StreamOpened`` is progress, not an end).
_FINAL = (e.Persisted, e.PersistFailed, e.LeadSaved, e.LeadSaveFailed, e.StreamCompleted,
          e.StreamFailed, e.CompactionFailed, e.TokenLimitRejected, e.ToolFinished,
          e.PermissionDecided, e.TitleGenerated, e.TitleFailed, sv.MidTurnDrained,
          sv.StopHookDecided, sv.StopHookFailed)
_LEAD_TEXTS = ("use tabs", "also update the docs", "", "é" * 20)
#: Every move with its weight, in a fixed order: a draw names a move through this table.
_TABLE = tuple(name for name, weight in (
    ("deliver", 10), ("engine", 10), ("tool", 8), ("dialog", 5), ("reply", 4),
    ("client_sends", 4), ("content", 3), ("continue", 3), ("client", 2), ("lead", 2),
    ("stop", 2), ("timer", 1), ("abort", 1), ("resend", 1), ("notify", 1), ("prompt", 2),
    ("background", 1)) for _ in range(weight))
#: Moves the outside world can always make, with their weights: background work, and the
#: client detaching (it comes back at a higher weight, above).
_ALWAYS = (("background", 1),)




#: One draw is a whole move: the move (its rest modulo the number of weighted possible moves)
#: and the seed of every choice the world makes in it (its quotient). A move is then two
#: choices of hypothesis's sequence (with the step's own), so the shrinker's deletion of a few
#: consecutive choices removes whole moves, and a turn with nothing in it (a prompt, then the
#: response) whole; the smallest values are the plainest world (seed 0: the first option of
#: every choice).
_DRAW = st.integers(0, 2**24 - 1)


def _drawer(data: st.DataObject) -> Callable[[st.SearchStrategy[int]], int]:
    """Draws through hypothesis's underlying choice sequence when it can: ``DataObject.draw``
    also notes every draw, which costs more than the move itself and says less than the
    machine's own notes."""
    draw: Callable[[st.SearchStrategy[int]], int] = getattr(
        getattr(data, "conjecture_data", None), "draw", data.draw)
    return draw


def _chooser(seed: int) -> Callable[[Sequence[Any]], Any]:
    """The world's choices in one move: the first option of each with seed 0, else uniform."""
    if not seed:
        return lambda options: options[0]
    rng = random.Random(seed)
    return lambda options: options[rng.randrange(len(options))]


def verbose() -> bool:
    """True when hypothesis prints this run (the final replay of a failure): notes cost."""
    try:
        return bool(current_build_context().is_final)
    except Exception:  # outside a hypothesis run
        return False


def answer_id(event: Event) -> str:
    """The id an answering event echoes ('' for an event that answers nothing)."""
    for field in _ANSWER_FIELDS:
        value = getattr(event, field, None)
        if isinstance(value, str):
            return value
    return ""


class SessionSpec(RuleBasedStateMachine):
    """The world, your adapter and the session, checked on every move (see the module doc)."""

    def make_adapter(self) -> Adapter:
        """Your adapter; override this."""
        return ReferenceAdapter()

    def make_config(self) -> SessionConfig:
        """The session configuration to check; override to match your host's."""
        return SessionConfig(chat_id="chat", turn=TurnConfig(auto_title=True), stop_hooks=True,
                             guard=GuardConfig(todo_stop_guard=True, daemon=True))

    @initialize()
    def start(self) -> None:
        self.verbose = verbose()
        self.world = World()
        self.adapter = self.make_adapter()
        transcript = getattr(self.adapter, "transcript", None)
        if transcript is not None:
            self.world.transcript_of = lambda request: transcript(request, self.world)
        self.state = SessionState.create(self.make_config())
        self.violations: list[str] = []  # the machine's own rules
        self.pending: list[deque[Event]] = []  # answers that come later, per command
        self.now: deque[Event] = deque()  # answers that reach the session within this move
        self.timers: list[str] = []
        self.typed: dict[tuple[str, str], str] = {}  # ("user"|"lead", id) -> text typed
        self.fates: set[tuple[str, str]] = set()  # typed text handed back or cancelled
        self.drafts: list[str] = []  # drafts handed back to the composer
        self.incomplete: set[str] = set()  # queued prompts whose content the client owes
        self.message_of: dict[str, str] = {}  # prompt or automatic turn id -> message id
        self.acked: list[Any] = []  # turn records the session saw acknowledged, in order
        self.acked_leads: list[Any] = []  # Lead records the session saw acknowledged
        self.writes: dict[str, tuple[Any, ...]] = {}
        self.answered: set[tuple[str, str]] = set()
        self.monitor = HardBound()
        self.attached = True
        self.live: list[str] = []  # background items running
        self.notes: list[tuple[str, str]] = []  # (notification id, source id) queued
        self.moves = 0
        self.feed(sv.ClientAttached(client_id="ui"))
        self.settle()

    # --- feeding the session ----------------------------------------------------------------

    def violate(self, rule: str, ids: str, text: str) -> None:
        self.violations.append(f"[{rule}, {ids}] {text}")

    def note(self, text: Callable[[], str]) -> None:
        if self.verbose:
            note(text())

    def feed(self, event: Event) -> None:
        self.note(lambda: f"   -> {event!r}")
        before = self.state
        try:
            self.state, commands = reduce(before, event)
        except ProtocolError as error:
            self.violate("accepted", "protocol", f"the session refused {event!r}: {error}")
            return
        self.heard(event)
        for problem in (*lost_texts(before, event, self.state, commands), *stuck(self.state)):
            self.violate("session-invariant", "no text lost / never stuck", problem)
        self.monitor, problems = self.monitor.step(before, event, self.state, commands)
        for problem in problems:
            self.violate("hard-bound", "SG-B4", problem)
        for command in commands:
            self.note(lambda command=command: f"   <- {command!r}")  # type: ignore[misc]
            self.observe(command)
            answers = self.adapter.carry_out(command, self.world)
            if not answers:
                continue
            # Most answers reach the session at once, in order (the plainest world); one in
            # three waits for a later move, so user moves can land before it.
            if self.world.chance(1, 3):
                self.pending.append(deque(answers))
            else:
                self.now.extend(answers)

    def settle(self) -> None:
        """Deliver the answers that come at once, in order, until none is left."""
        while self.now:
            self.feed(self.now.popleft())

    def heard(self, event: Event) -> None:
        """What an accepted event means for the world's bookkeeping."""
        if isinstance(event, _FINAL):
            kind = {e.Persisted: "persist", e.PersistFailed: "persist", e.LeadSaved: "lead",
                    e.LeadSaveFailed: "lead", e.ToolFinished: "tool",
                    e.PermissionDecided: "dialog", e.TitleGenerated: "title",
                    e.TitleFailed: "title", sv.MidTurnDrained: "drain",
                    sv.StopHookDecided: "hooks", sv.StopHookFailed: "hooks"}.get(
                        type(event), "stream")
            key = (kind, answer_id(event))
            if key in self.answered:
                self.violate("answered-once", "protocol", f"{event!r} answers {key[1]} a second "
                             "time")
            self.answered.add(key)
        if isinstance(event, e.Persisted):
            self.acked.extend(self.writes.pop(event.key, ()))
        elif isinstance(event, e.LeadSaved):
            self.acked_leads.extend(self.writes.pop(event.lead_id, ()))
        elif isinstance(event, e.ToolFinished):
            self.world.reported(event)
        elif isinstance(event, sv.MidTurnDrained) and event.has_queued_prompt:
            self.world.client_holds.append(self.world.fresh("q"))

    def observe(self, command: Command) -> None:
        w = self.world
        if isinstance(command, c.Persist):
            self.writes[command.key] = command.records
        elif isinstance(command, c.SaveLead):
            self.writes[command.lead_id] = (command.record,)
            w.lead_messages[command.record.message_id] = command.lead_id
        elif isinstance(command, sv.StartTimer):
            self.timers.append(command.key)
        elif isinstance(command, sv.CancelTimer) and command.key in self.timers:
            self.timers.remove(command.key)
        elif isinstance(command, c.ExecuteTool):
            w.asked.append(command.call.call_id)
        elif isinstance(command, c.CancelTool):
            w.cancel_sent.add(command.call_id)
        elif isinstance(command, c.CancelStream):
            w.cancel_stream(command.request_id)
        elif isinstance(command, c.DismissPermission) and command.call_id in w.dialogs:
            w.dialogs[command.call_id].stage = ENDED
        elif isinstance(command, c.EndTurn):
            w.turn_ended()
        elif isinstance(command, c.ReturnDraft):
            self.fates.add(("lead", command.lead_id))
            if command.draft.strip():
                self.drafts.append(command.draft)
        elif isinstance(command, c.LeadUnapplied):
            self.fates.add(("lead", command.lead_id))
        elif isinstance(command, sv.PromptRefused):
            self.fates.add(("user", self.message_of.get(command.prompt_id, "")))
            self.incomplete.discard(command.prompt_id)  # handed back: the client stops sending
        elif isinstance(command, sv.AutomaticTurnDropped):
            self.fates.add(("user", command.message_id))
        elif isinstance(command, sv.AutomaticTurnDeferred) and command.coalesced_into:
            self.fates.add(("user", self.message_of.get(command.turn_id, "")))
        elif isinstance(command, c.UnsavedRecords):
            self.fates.update(("user", r.message_id) for r in command.records
                              if isinstance(r, UserMessageRecord))

    def resume(self, command: Any) -> None:
        """A world job moved on: the adapter reports what happened since, at once, unless an
        earlier answer to the same command still waits (the answers keep their order)."""
        events = self.adapter.carry_out(command, self.world)
        ids = {answer_id(event) for event in events}
        for queue in self.pending:
            if any(answer_id(event) in ids for event in queue):
                queue.extend(events)
                return
        self.now.extend(events)

    # --- the world's moves ----------------------------------------------------------------------

    def possible(self) -> list[tuple[str, int]]:
        """The moves possible now, with their weights; the plainest first."""
        w, phase = self.world, self.state.phase
        turn_runs = phase not in (SessionPhase.IDLE, SessionPhase.CLOSED)
        found: list[tuple[str, int]] = []
        running = bool(w.running())
        for name, weight, possible in (
                ("deliver", 10, bool(self.pending)),
                ("engine", 10, bool(w.open_streams())),
                ("tool", 8, running),
                ("dialog", 5, bool(w.open_dialogs())),
                ("reply", 4, bool(w.pending_replies())),
                ("client_sends", 4, bool(w.client_holds)),
                ("content", 3, bool(self.incomplete)),
                ("continue", 3, any(x.kind is WaitKind.RETRY for x in waiting_for(self.state))),
                ("client", 4, not self.attached),  # back before the grace period runs out
                ("lead", 2, turn_runs),
                ("stop", 3 if running else 1, turn_runs),
                ("timer", 1, bool(self.timers)),
                ("abort", 1, bool(self.state.fifo)),
                ("resend", 1, bool(self.drafts)),
                ("notify", 1, bool(self.notes)),
                ("prompt", 1, turn_runs),
                ("prompt", 3, not turn_runs)):
            if possible:
                found.append((name, weight))
        found.extend(_ALWAYS)
        if self.attached and turn_runs:
            found.append(("client", 1))
        return found

    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        self.verbose = verbose()
        draw = _drawer(data)
        possible = self.possible()
        drawn = draw(_DRAW)
        # A draw names the same move wherever the shrinker moves it, when that move is possible
        # (the fixed table); otherwise it picks among the possible moves, by their weights.
        name = _TABLE[drawn % len(_TABLE)]
        if name not in {move for move, _ in possible}:
            weighted = [move for move, weight in possible for _ in range(weight)]
            name = weighted[drawn % len(weighted)]
        self.choose = self.world.choose = _chooser(drawn // len(_TABLE))
        self.moves += 1
        self.note(lambda: f"move {self.moves}: {name}")
        getattr(self, f"_{name}")()
        self.settle()

    def _deliver(self) -> None:
        """The next answer of one command the adapter carried out reaches the session."""
        queue = self.choose(self.pending)
        event = queue.popleft()
        if not queue:
            self.pending.remove(queue)
        self.feed(event)

    def _engine(self) -> None:
        """An engine or naming request moves on: it opens, ends or fails."""
        key = self.choose(self.world.open_streams())
        self.world.advance_stream(key)
        self.resume(self.world.streams[key].command)

    def _tool(self) -> None:
        """A running tool finishes."""
        key = self.choose(self.world.running())
        self.world.finish_tool(key)
        self.resume(c.ExecuteTool(call=self.world.tools[key].command))

    def _dialog(self) -> None:
        """The user answers a permission dialog."""
        key = self.choose(self.world.open_dialogs())
        self.world.answer_dialog(key)
        self.resume(c.AskPermission(call=self.world.dialogs[key].command))

    def _reply(self) -> None:
        """The client's late drain reply, or a slow Stop hook's verdict."""
        key = self.choose(self.world.pending_replies())
        self.world.reply(key)
        self.resume(self.world.late[key].command)

    def _prompt(self, prompt_id: str = "") -> None:
        """The user sends a prompt (queued while a turn runs); its content may come later."""
        prompt_id = prompt_id or self.world.fresh("p")
        message_id = f"{prompt_id}-m"
        complete = not self.world.chance(1, 6)
        if not complete:
            self.incomplete.add(prompt_id)
        self.message_of[prompt_id] = message_id
        self.typed[("user", message_id)] = "Do the next thing"
        self.feed(sv.PromptQueued(prompt_id=prompt_id, message_id=message_id,
                                  text="Do the next thing", complete=complete))

    def _client_sends(self) -> None:
        """The client sends the queued prompt it said it holds."""
        self._prompt(self.world.client_holds.pop(0))

    def _content(self) -> None:
        """The rest of a queued prompt arrives."""
        prompt_id = self.choose(sorted(self.incomplete))
        self.incomplete.discard(prompt_id)
        self.feed(sv.PromptCompleted(prompt_id=prompt_id))

    def _abort(self) -> None:
        """The user takes back a queued prompt."""
        entry = self.choose(self.state.fifo)
        self.incomplete.discard(entry.prompt_id)
        self.fates.add(("user", entry.message_id))
        self.feed(sv.PromptAborted(prompt_id=entry.prompt_id))

    def _lead(self, text: str | None = None) -> None:
        """The user types a Lead instruction."""
        if text is None:
            text = self.choose(_LEAD_TEXTS)
        lead_id = self.world.fresh("L")
        self.typed[("lead", lead_id)] = text
        self.feed(e.LeadSubmitted(chat_id=self.state.config.chat_id, lead_id=lead_id,
                                  text=text))

    def _resend(self) -> None:
        """The user resends a draft the session handed back (as a Lead if a turn runs)."""
        draft = self.drafts.pop(0)
        if self.state.phase in (SessionPhase.IDLE, SessionPhase.CLOSED):
            self._prompt()
        else:
            self._lead(draft)

    def _stop(self) -> None:
        """The user presses Stop."""
        self.feed(e.StopPressed())

    def _continue(self) -> None:
        """The user continues a turn that ended with a resumable error (TL-11)."""
        self.feed(e.ContinueTurn(turn_id=self.state.turn.turn_id))

    def _timer(self) -> None:
        """A timer the session started runs out."""
        key = self.choose(self.timers)
        self.timers.remove(key)
        self.feed(sv.TimerFired(key=key))

    def _client(self) -> None:
        """The client detaches (the grace period starts) or comes back."""
        self.attached = not self.attached
        self.feed(sv.ClientAttached(client_id="ui") if self.attached
                  else sv.ClientDetached(client_id="ui"))

    def _background(self) -> None:
        """Background work starts or ends (leaving a notification), or a cron job fires."""
        what = self.choose(["start", "end", "cron"] if self.live
                                         else ["start", "cron"])
        if what == "start":
            item = self.world.fresh("bg")
            self.live.append(item)
            self.feed(sv.BackgroundStarted(kind=self.choose(list(BackgroundKind)),
                                           item_id=item))
        elif what == "end":
            item = self.live.pop(0)
            notification = self.world.fresh("n")
            self.notes.append((notification, item))
            # the end and its terminal notification in one step (BackgroundEnded's docstring)
            self.feed(sv.BackgroundEnded(item_id=item, notification_id=notification))
        else:
            self._automatic(AutomaticKind.CRON, "cron-task", self.world.chance(1, 2))

    def _notify(self) -> None:
        """A queued notification becomes an automatic turn."""
        notification, item = self.notes.pop(0)
        self._automatic(AutomaticKind.NOTIFICATION, item, False)
        self.feed(sv.NotificationConsumed(notification_id=notification))

    def _automatic(self, kind: AutomaticKind, source: str, recurring: bool) -> None:
        turn_id = self.world.fresh("auto")
        message_id = f"{turn_id}-m"
        self.message_of[turn_id] = message_id
        self.typed[("user", message_id)] = "background results"
        self.feed(sv.AutomaticTurnDue(turn_id=turn_id, message_id=message_id,
                                      text="background results", kind=kind, source_id=source,
                                      recurring=recurring))

    # --- the rules ------------------------------------------------------------------------------

    @invariant()
    def the_world_saw_no_broken_rule(self) -> None:
        """Every rule the world and the machine check as things happen (see the module doc)."""
        if hasattr(self, "world"):
            broken = [*self.world.violations, *self.violations]
            assert not broken, "\n".join(broken)

    @invariant()
    def everything_acknowledged_is_saved_in_order(self) -> None:
        """storage (TL-5, LD-7): what the session saw acknowledged is in storage, in the same
        order (turn writes among themselves, Lead saves among themselves: each is serialized)."""
        if hasattr(self, "world"):
            for acked in (self.acked, self.acked_leads):
                saved = iter(self.world.saved)
                for record in acked:
                    assert any(stored == record for stored in saved), (
                        f"[storage, TL-5, LD-7] acknowledged but not saved (or out of order): "
                        f"{record!r}")

    @invariant()
    def whatever_the_session_waits_for_will_come(self) -> None:
        """liveness (never stuck): each thing the session waits for has an answer coming."""
        if not hasattr(self, "world"):
            return
        w = self.world
        coming = {answer_id(event) for queue in self.pending for event in queue}
        coming.update(w.open_streams(), w.running(), w.open_dialogs(), w.pending_replies(),
                      self.timers)
        for waiting in waiting_for(self.state):
            if waiting.kind is WaitKind.ANSWER and waiting.answer_id not in coming:
                name = waiting.command.__name__ if waiting.command else "?"
                raise AssertionError(f"[liveness, never stuck] the session waits for the answer "
                                     f"to {name} {waiting.answer_id!r}; nothing will answer it")
            if waiting.kind is WaitKind.CLIENT_PROMPT and not w.client_holds:
                raise AssertionError("[liveness, SO-4] the session waits for a queued prompt "
                                     "the client does not hold")

    @invariant()
    def no_typed_text_is_lost(self) -> None:
        """no-text-lost (LD-7, LD-13, SO-3): every prompt and Lead the user typed is in
        storage, handed back, cancelled by the user, or still held by the session."""
        if not hasattr(self, "world"):
            return
        saved = {("user", r.message_id) for r in self.world.saved
                 if isinstance(r, UserMessageRecord)}
        saved.update(("lead", lead) for message, lead in self.world.lead_messages.items()
                     if ("user", message) in saved)
        lost = set(self.typed) - saved - self.fates - held_texts(self.state)
        assert not lost, f"[no-text-lost, LD-7, LD-13] typed and gone: {sorted(lost)}"
