"""A host loop around one session that checks the reducer's promises on every step, and its
helpers (the session tests written from the host author's chair use it).

Only the public API is used: ``agentturn``, ``agentturn.session``, ``agentturn.guard``. Every step
goes through :class:`StrictHost`, which checks the reducer's promises on each call: deterministic
(the same input gives the same output twice), the input state is never changed, a refusal is a
``ProtocolError`` (never another exception) and leaves the state as it was. Its todo lists say
"secret item N", so a test can look for todo text where it must not appear.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterable
from typing import Any

import pytest

import agentturn as at
from agentturn import guard as g
from agentturn import session as se

GUARD_1 = (
    "[Todo Stop Guard] {n} todo item(s) are still pending or in progress. Continue executing the "
    "current task now. Do not ask the user whether to continue. If progress requires user input, "
    "use the structured question or permission flow. If progress depends on external state, "
    "report the blocker explicitly."
)


EXHAUSTED = (
    "[Todo Stop Guard] Automatic continuation stopped after 2 attempts; "
    "{n} todo item(s) remain unfinished."
)


def secret_todos(*statuses: str) -> dict[str, Any]:
    return {"type": "todo_list", "todos": [
        {"id": str(i), "content": f"secret item {i}", "status": st}
        for i, st in enumerate(statuses, 1)]}


def daemon_config(**kw: Any) -> se.SessionConfig:
    return se.SessionConfig(
        chat_id="chat-1", guard=g.GuardConfig(todo_stop_guard=True, daemon=True), **kw)


class StrictHost:
    """A host loop around one session that checks the reducer's promises on every step."""

    def __init__(self, config: se.SessionConfig | None = None) -> None:
        self.state = se.Session.create(config or daemon_config())
        self.log: list[tuple[object, tuple[at.Command, ...]]] = []

    def send(self, event: object) -> tuple[at.Command, ...]:
        before = self.state
        frozen = pickle.dumps(before)
        try:
            first = se.reduce(before, event)
        except at.ProtocolError:
            assert self.state == before
            assert pickle.dumps(before) == frozen
            # deterministic refusals too
            with pytest.raises(at.ProtocolError):
                se.reduce(before, event)
            raise
        except Exception as error:  # pragma: no cover - a broken promise
            raise AssertionError(f"non-ProtocolError escaped: {error!r}") from error
        second = se.reduce(copy.deepcopy(before), event)
        assert first.state == second.state, "reduce is not deterministic"
        assert tuple(first.commands) == tuple(second.commands), "reduce is not deterministic"
        assert pickle.dumps(before) == frozen, "reduce changed its input state"
        self.state = first.state
        self.log.append((event, tuple(first.commands)))
        return tuple(first.commands)

    def refused(self, event: object) -> at.ProtocolError:
        before = self.state
        with pytest.raises(at.ProtocolError) as info:
            self.send(event)
        assert self.state == before
        return info.value

    # --- helpers -------------------------------------------------------------------------
    def all_commands(self) -> list[at.Command]:
        return [c for _, cmds in self.log for c in cmds]

    def outstanding_ids(self, kind: type) -> list[str]:
        return [o.answer_id for o in se.outstanding(self.state) if o.command is kind]

    def pending(self, kind: type) -> str:
        ids = self.outstanding_ids(kind)
        assert len(ids) == 1, (kind, se.outstanding(self.state))
        return ids[0]

    def ack_persists(self) -> tuple[at.Command, ...]:
        out: tuple[at.Command, ...] = ()
        while self.outstanding_ids(at.Persist):
            out += self.send(at.Persisted(key=self.pending(at.Persist)))
        return out

    def open_and_complete(self, text: str = "", finish: str = "end_turn",
                          calls: Iterable[at.ToolCall] = ()) -> tuple[at.Command, ...]:
        rid = self.pending(at.RequestModelStream)
        out = self.send(at.StreamOpened(request_id=rid))
        out += self.send(at.StreamCompleted(request_id=rid, text=text, finish_reason=finish,
                                            tool_calls=tuple(calls)))
        return out + self.ack_persists()

    def answer_titles(self) -> tuple[at.Command, ...]:
        out: tuple[at.Command, ...] = ()
        for rid in self.outstanding_ids(at.RequestTitle):
            out += self.send(at.TitleGenerated(request_id=rid, title="A title"))
        return out

    def drain(self, messages: tuple[str, ...] = (), queued: bool | None = None
              ) -> tuple[at.Command, ...]:
        return self.send(se.MidTurnDrained(drain_id=self.pending(se.DrainMidTurnQueue),
                                          messages=messages, has_queued_prompt=queued))

    def prompt(self, turn_id: str = "t1", text: str = "Port the parser") -> tuple[at.Command, ...]:
        out = self.send(at.PromptSubmitted(turn_id=turn_id, message_id=f"{turn_id}/m",
                                           text=text))
        return out + self.ack_persists()

    def todo_round(self, envelope: Any, call_id: str = "tw1", text: str = ""
                   ) -> tuple[at.Command, ...]:
        out = self.open_and_complete(text=text, finish="tool_use", calls=(
            at.ToolCall(call_id=call_id, name="todo_write", arguments="{}"),))
        out += self.answer_titles()
        out += self.send(at.ToolFinished(call_id=call_id, output="ok", structured=envelope))
        out += self.ack_persists()
        return out + self.answer_titles()

    def armed_natural_stop(self, n_unfinished: int = 2) -> tuple[at.Command, ...]:
        """Prompt, a trusted todo write with ``n`` unfinished items, then a natural stop."""
        self.prompt()
        self.todo_round(secret_todos(*(["pending"] * n_unfinished)))
        return self.open_and_complete(text="I stop here.")


def of(commands: Iterable[object], kind: type) -> list[Any]:
    return [c for c in commands if isinstance(c, kind)]


def texts_published(commands: Iterable[object]) -> list[str]:
    return [c.entry.text for c in of(commands, se.Publish)]


def user_texts(commands: Iterable[object]) -> list[str]:
    return [r.text for p in of(commands, at.Persist) for r in p.records
            if isinstance(r, at.UserMessageRecord)]


def ends(commands: Iterable[object]) -> list[at.EndTurn]:
    return of(commands, at.EndTurn)


def with_permission_call(host: StrictHost, *, queued: bool = False) -> None:
    """A prompt whose response asks for a guarded call ``c1`` and then an unguarded ``c2``."""
    host.send(se.ClientAttached(client_id="ui"))
    host.prompt()
    if queued:
        host.send(se.PromptQueued(prompt_id="q1", message_id="q1/m", text="queued one"))
        host.send(se.PromptQueued(prompt_id="q2", message_id="q2/m", text="partial",
                                  complete=False))
    host.open_and_complete(text="I will delete it.", finish="tool_use", calls=(
        at.ToolCall(call_id="c1", name="rm", arguments='{"path": "x"}', needs_permission=True),
        at.ToolCall(call_id="c2", name="ls")))
    host.answer_titles()
    assert host.pending(at.AskPermission) == "c1"


def run_guard_to_exhaustion(host: StrictHost, n: int = 2) -> tuple[at.Command, ...]:
    host.armed_natural_stop(n_unfinished=n)
    out = host.drain()
    for i in range(2):
        out += host.ack_persists()
        out += host.open_and_complete(text=f"still working {i}")
        out += host.drain()
    return out
