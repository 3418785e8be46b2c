"""A state machine a host reuses to check its own adapter against the spec.

Theory of operation
-------------------
A host's *adapter* is the code between agentturn and the world: it carries out each command
(saves records, calls the engine and normalizes its stream, runs tools, asks the user) and turns
what happened into events. :class:`SessionSpec` is a hypothesis ``RuleBasedStateMachine`` that
plays the world (:class:`World`: an engine with the raw finish reasons real engines send,
storage that sometimes fails, tools, a user who types prompts, Leads and Stop, and answers
permission dialogs) and drives the session through the adapter, in random interleavings. On every
step it checks the adapter against the spec, from the world's side, where the truth is:

* the session never refuses an event the adapter produced (a wrong id, an answer to nothing);
* no tool call from a response that did not end normally ever runs in the world (TL-9), and no
  call that needs permission runs without the user's allow (TL-3);
* everything the session asked to save is saved, in order, and every Lead the user typed is
  saved or handed back (LD-7, LD-13): nothing disappears.

Subclass it, give it your adapter, and hypothesis finds and shrinks any interleaving that breaks
a rule::

    class MyHostSpec(SessionSpec):
        def make_adapter(self) -> Adapter:
            return MyAdapter()

    TestMyHost = MyHostSpec.TestCase

:class:`ReferenceAdapter` is a correct adapter to start from (and to compare with).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from .. import commands as c
from .. import events as e
from .._base import Command, Event
from ..errors import ProtocolError
from ..guard import GuardConfig
from ..records import ToolCall
from ..session import vocabulary as sv
from ..session.reducer import reduce
from ..session.state import SessionConfig, SessionState
from ..turn.state import TurnConfig
from .adapter import Adapter, EngineResponse, ReferenceAdapter, hooks_do_not_block, nothing_held

__all__ = ["SessionSpec", "World"]

#: Raw finish reasons as Anthropic-style and OpenAI-style engines send them, and whether each
#: means the response ended normally (the world's ground truth).
RAW_REASONS: dict[str, bool] = {"end_turn": True, "tool_use": True, "stop": True,
                                "tool_calls": True, "max_tokens": False, "length": False,
                                "refusal": False}
TOOLS = ("read_file", "write_file", "todo_write")


_T = TypeVar("_T")


class World:
    """The outside world the machine controls; records what really happened in it.

    Every choice it makes goes through ``choose`` (the machine draws it from hypothesis, so a
    failure shrinks to the simplest world: the first option of each choice is the plainest).
    """

    def __init__(self, choose: Callable[[Sequence[Any]], Any] | None = None) -> None:
        self.choose = choose or (lambda options: options[0])  # the plainest world by default
        self.saved: list[Any] = []  # every record storage holds, in order
        self.executed: list[str] = []  # call ids run, in order
        self.cut_off: set[str] = set()  # calls of responses that did not end normally
        self.allowed: set[str] = set()  # calls the user allowed
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # --- what an adapter calls ------------------------------------------------------------

    def store(self, records: Sequence[Any]) -> bool:
        """Save records; False when storage fails (rarely)."""
        if self.choose([False] * 19 + [True]):
            return False
        self.saved.extend(records)
        return True

    def stream(self, request: c.RequestModelStream | None = None) -> EngineResponse:
        """The engine's next response, raw."""
        count = self.choose([0, 0, 1, 1, 2])
        calls = tuple(ToolCall(call_id=self.fresh("c"), name=self.choose(TOOLS),
                               arguments="{}", needs_permission=self.choose([False, False, True]))
                      for _ in range(count))
        reason = self.choose(["tool_use", "tool_calls"] if calls else ["end_turn", "stop"])
        if self.choose([False] * 4 + [True]):
            reason = self.choose(["max_tokens", "length", "refusal"])
        if not RAW_REASONS[reason]:
            self.cut_off.update(call.call_id for call in calls)
        return EngineResponse(text=self.choose(["Working.", "Done.", ""]),
                              raw_finish_reason=reason, calls=calls)

    def ask(self, call: ToolCall) -> e.PermissionDecision:
        """The user's answer to a permission dialog."""
        decision: e.PermissionDecision = self.choose(list(e.PermissionDecision))
        if decision is e.PermissionDecision.ALLOW:
            self.allowed.add(call.call_id)
        return decision

    def run(self, call: ToolCall) -> tuple[str, Any]:
        """Run a tool: its output and structured result."""
        if call.needs_permission and call.call_id not in self.allowed:
            raise AssertionError(f"TL-3: {call.call_id} ran without the user's allow")
        self.executed.append(call.call_id)
        if call.name == "todo_write":
            statuses = [self.choose(["pending", "completed"]) for _ in range(2)]
            return "todos", {"type": "todo_list", "todos": [
                {"id": str(i), "content": f"step {i}", "status": s}
                for i, s in enumerate(statuses)]}
        return "ok", None

    def title(self, request: c.RequestTitle) -> str:
        """The namer's answer."""
        return "A title"

    def drain(self, command: sv.DrainMidTurnQueue) -> Event:
        """The client's drain reply: nothing held, no queued prompt."""
        return nothing_held(command)

    def hooks(self, command: sv.RunStopHooks) -> Event:
        """The Stop hooks do not block."""
        return hooks_do_not_block(command)


_MOVES = ("deliver",) * 8 + ("prompt",) * 2 + ("lead",) * 2 + ("timer",) * 2 + ("stop",)


class SessionSpec(RuleBasedStateMachine):
    """The world, your adapter and the session, checked on every step (see the module doc)."""

    def make_adapter(self) -> Adapter:
        """Your adapter; override this."""
        return ReferenceAdapter()

    def make_config(self) -> SessionConfig:
        """The session configuration to check; override to match your host's."""
        return SessionConfig(chat_id="chat", turn=TurnConfig(auto_title=True),
                             guard=GuardConfig(todo_stop_guard=True, daemon=True))

    @initialize()
    def start(self) -> None:
        self.world = World()
        self.adapter = self.make_adapter()
        self.state = SessionState.create(self.make_config())
        self.pending: list[deque[Event]] = []  # completions, per command, in order
        self.timers: list[str] = []
        self.typed: dict[str, str] = {}  # Lead id -> text the user typed, not yet resolved
        self.acked: list[Any] = []  # turn records the session saw acknowledged, in order
        self.acked_leads: list[Any] = []  # Lead records the session saw acknowledged
        self.writes: dict[str, tuple[Any, ...]] = {}

    # --- feeding the session ----------------------------------------------------------------

    def feed(self, event: Event) -> None:
        note(f"-> {event!r}")
        try:
            self.state, commands = reduce(self.state, event)
        except ProtocolError as error:
            raise AssertionError(f"the session refused an event: {error}") from error
        if isinstance(event, e.Persisted):
            self.acked.extend(self.writes.pop(event.key, ()))
        for command in commands:
            note(f"   <- {command!r}")
            self.observe(command)
            answers = self.adapter.carry_out(command, self.world)
            if answers:
                self.pending.append(deque(answers))

    def observe(self, command: Command) -> None:
        if isinstance(command, c.Persist):
            self.writes[command.key] = command.records
        elif isinstance(command, c.SaveLead):
            self.writes[command.lead_id] = (command.record,)
        elif isinstance(command, sv.StartTimer):
            self.timers.append(command.key)
        elif isinstance(command, sv.CancelTimer) and command.key in self.timers:
            self.timers.remove(command.key)
        elif isinstance(command, c.ReturnDraft | c.LeadUnapplied):
            self.typed.pop(command.lead_id, None)
        elif isinstance(command, c.RequestModelStream):
            for lead_id in command.lead_ids:
                self.typed.pop(lead_id, None)

    # --- the world's moves --------------------------------------------------------------------
    #
    # One rule draws the next move with weights: separate rules are picked uniformly, and the
    # always-possible user moves (Stop above all) would crowd out the completions that keep a
    # turn going.

    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        self.world.choose = lambda options: data.draw(st.sampled_from(options))
        # The same list every time, so a draw means the same move wherever the shrinker moves it.
        move = data.draw(st.sampled_from(_MOVES), label="move")
        if (move == "deliver" and not self.pending) or (move == "timer" and not self.timers):
            return
        getattr(self, f"_{move}")(data)

    def _deliver(self, data: st.DataObject) -> None:
        """The next completion of one command the adapter carried out."""
        queue = data.draw(st.sampled_from(self.pending), label="completion")
        event = queue.popleft()
        if not queue:
            self.pending.remove(queue)
        if isinstance(event, e.LeadSaved):
            self.acked_leads.extend(self.writes.pop(event.lead_id, ()))
        self.feed(event)

    def _prompt(self, data: st.DataObject) -> None:
        """The user sends a prompt (queued while a turn runs)."""
        prompt_id = self.world.fresh("p")
        self.feed(sv.PromptQueued(prompt_id=prompt_id, message_id=f"{prompt_id}-m",
                                  text="Do the next thing"))

    def _lead(self, data: st.DataObject) -> None:
        """The user types a Lead instruction."""
        text = data.draw(st.sampled_from(["use tabs", "also update the docs", "", "é" * 20]))
        lead_id = self.world.fresh("L")
        self.typed[lead_id] = text
        self.feed(e.LeadSubmitted(chat_id=self.state.config.chat_id, lead_id=lead_id,
                                  text=text))

    def _stop(self, data: st.DataObject) -> None:
        """The user presses Stop."""
        self.feed(e.StopPressed())

    def _timer(self, data: st.DataObject) -> None:
        """A timer the session started runs out."""
        key = data.draw(st.sampled_from(self.timers), label="timer")
        self.timers.remove(key)
        self.feed(sv.TimerFired(key=key))

    # --- the rules ------------------------------------------------------------------------------

    @invariant()
    def no_cut_off_call_ran(self) -> None:
        """TL-9: the world never ran a call of a response that did not end normally."""
        if hasattr(self, "world"):
            ran = self.world.cut_off.intersection(self.world.executed)
            assert not ran, f"TL-9: ran {sorted(ran)} from a response cut off by the engine"

    @invariant()
    def everything_acknowledged_is_saved_in_order(self) -> None:
        """TL-5, LD-7: what the session saw acknowledged is in storage, in the same order
        (turn writes among themselves, Lead saves among themselves: each is serialized)."""
        if hasattr(self, "world"):
            for acked in (self.acked, self.acked_leads):
                saved = iter(self.world.saved)
                for record in acked:
                    assert any(stored == record for stored in saved), \
                        f"acknowledged but not saved (or out of order): {record!r}"

    def teardown(self) -> None:
        """LD-13: once everything settled, no Lead the user typed is left unanswered."""
        if not hasattr(self, "world") or self.pending:
            return
        if self.state.turn.phase.name == "IDLE" and not self.state.turn.lead.entries:
            assert not self.typed, f"Leads neither saved, applied nor handed back: {self.typed}"

