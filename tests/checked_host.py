"""The scripted session host (tests/session_host.py), wrapped so that every step is also
checked from the outside, and the helpers of the tests that use it.

Each step of :class:`Checked` drives ``agentturn.session.reduce``: only ``ProtocolError`` may
escape, a refused step leaves the state as it was, and the session's own published invariants
(``agentturn.session.invariants``) hold on every accepted step. The tests that use it were
written by an outside host author trying to break the rebuilt session through its public API,
and their assertions read only commands, ``waiting_for`` and ``held``. Seven of them found
defects when they were written (a Lead riding a guard prompt's request, an invalidated turn's
retry window, resends of automatic turns, prompts and Continue, a failed Lead save during the
drain, an aborted queued prompt's fate); they pin the fixes.
"""

from __future__ import annotations

from typing import Any

from session_host import Host, say, todo_call, todos

import agentturn as at
from agentturn import session as se
from agentturn.session import invariants as inv


class Checked(Host):
    """The scripted host, checking every step from outside and keeping refusals apart."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self.bound = inv.HardBound()
        self.refused: list[tuple[at.Event, at.ProtocolError]] = []
        self.broken: list[tuple[at.Event, list[str]]] = []
        self.hold: list[Any] = []  # predicates: awaiting commands the test answers itself

    def send(self, *events: at.Event) -> list[at.Command]:
        start = len(self.log)
        self.queue.extend(events)
        while self.queue:
            event = self.queue.popleft()
            self.log.append(("event", event))
            before = self.state
            try:
                self.state, commands = se.reduce(before, event)
            except at.ProtocolError as error:  # anything else propagates and fails the test
                assert self.state is before
                self.refused.append((event, error))
                continue
            problems = inv.lost_texts(before, event, self.state, commands)
            problems += inv.stuck(self.state)
            self.bound, broke = self.bound.step(before, event, self.state, commands)
            problems += broke
            if problems:
                self.broken.append((event, problems))
            for command in commands:
                self.log.append(("command", command))
                if any(p(command) for p in self.hold):
                    self.held.append(command)
                else:
                    self.answer(command)
        return [item for kind, item in self.log[start:] if kind == "command"]

    def take(self, kind: type) -> Any:
        """The last held awaiting command of ``kind`` (removed from the held list)."""
        for index in range(len(self.held) - 1, -1, -1):
            if isinstance(self.held[index], kind):
                return self.held.pop(index)
        raise AssertionError(f"no held {kind.__name__}")

    def guard_attempts(self) -> list[int]:
        return [dict(e.meta.pairs)["attempt"] for e in self.published(se.EntryKind.GUARD_CHUNK)]

    def clean(self) -> None:
        assert self.refused == [], self.refused
        assert self.broken == [], self.broken


def script_todos(h: Checked, *statuses: str, turn: str = "t1") -> None:
    """Script a first response that writes a todo list with ``statuses``, then stops."""
    h.tool_results["tw1"] = {"output": "ok", "structured": todos(*(statuses or ("pending",)))}
    h.responses.extend([say("working", todo_call("tw1")), say("stopping")])


def prompt(turn: str = "t1", text: str = "do it") -> at.PromptSubmitted:
    return at.PromptSubmitted(turn_id=turn, message_id=f"{turn}-m", text=text)


def cron(turn: str, source: str = "task", recurring: bool = False,
         kind: se.AutomaticKind = se.AutomaticKind.CRON,
         text: str | None = None) -> se.AutomaticTurnDue:
    return se.AutomaticTurnDue(turn_id=turn, message_id=f"{turn}-m", text=text or f"{turn} text",
                               kind=kind, source_id=source, recurring=recurring)


def replies_with_queued(drain_id: str = "t1/drain-1", messages: tuple[str, ...] = ()):
    """A drain policy: the reply to ``drain_id`` carries ``messages`` and a queued prompt."""
    def reply(c: se.DrainMidTurnQueue) -> at.Event:
        if c.drain_id == drain_id:
            return se.MidTurnDrained(drain_id=c.drain_id, messages=messages, has_queued_prompt=True)
        return se.MidTurnDrained(drain_id=c.drain_id)
    return reply
