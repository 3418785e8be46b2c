"""Small drivers that feed a script of events to a reducer and keep the commands."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import agentturn as at


class Recorder:
    """Feeds events to one reducer, remembering every command in order."""

    def __init__(self, reduce: Callable[[Any, at.Event], at.Step[Any]], state: Any) -> None:
        self.reduce = reduce
        self.state = state
        self.commands: list[at.Command] = []

    def send(self, *events: at.Event) -> tuple[at.Command, ...]:
        """Feed ``events`` in order; return the commands of this call."""
        out: list[at.Command] = []
        for event in events:
            self.state, commands = self.reduce(self.state, event)
            out.extend(commands)
        self.commands.extend(out)
        return tuple(out)

    def of(self, kind: type) -> list[Any]:
        """Every command of type ``kind`` so far."""
        return [command for command in self.commands if isinstance(command, kind)]


class Driver(Recorder):
    """A :class:`Recorder` for the turn lifecycle, with the common host answers."""

    def __init__(self, config: at.TurnConfig | None = None, chat_id: str = "chat") -> None:
        super().__init__(at.reduce, at.TurnState.create(chat_id, config))

    # --- conveniences for the common host answers ---------------------------------------------

    def last(self, kind: type) -> object:
        """The newest command of type ``kind``."""
        for command in reversed(self.commands):
            if isinstance(command, kind):
                return command
        raise AssertionError(f"no {kind.__name__} sent")

    def ack(self) -> tuple[at.Command, ...]:
        """Acknowledge the newest ``Persist``."""
        persist = self.last(at.Persist)
        assert isinstance(persist, at.Persist)
        return self.send(at.Persisted(key=persist.key))

    def start(self, text: str = "Fix the failing test", turn_id: str = "t1") -> None:
        """Submit a prompt, save it, and open the first stream."""
        self.send(at.PromptSubmitted(turn_id=turn_id, message_id=f"{turn_id}-prompt", text=text))
        self.ack()
        self.open()

    def named(self, title: str) -> tuple[at.Command, ...]:
        """Answer the newest ``RequestTitle`` with ``title``."""
        request = self.last(at.RequestTitle)
        assert isinstance(request, at.RequestTitle)
        return self.send(at.TitleGenerated(request_id=request.request_id, title=title))

    def naming_failed(self, reason: str = "offline") -> tuple[at.Command, ...]:
        """Answer the newest ``RequestTitle`` with a failure."""
        request = self.last(at.RequestTitle)
        assert isinstance(request, at.RequestTitle)
        return self.send(at.TitleFailed(request_id=request.request_id, reason=reason))

    def open(self) -> tuple[at.Command, ...]:
        """Open the stream of the newest ``RequestModelStream``."""
        request = self.last(at.RequestModelStream)
        assert isinstance(request, at.RequestModelStream)
        return self.send(at.StreamOpened(request_id=request.request_id))

    def respond(self, text: str = "", finish_reason: str = "stop",
                calls: Iterable[at.ToolCall] = (),
                malformed: bool = False) -> tuple[at.Command, ...]:
        """Complete the open stream with this response."""
        request = self.last(at.RequestModelStream)
        assert isinstance(request, at.RequestModelStream)
        return self.send(at.StreamCompleted(
            request_id=request.request_id, text=text, finish_reason=finish_reason,
            tool_calls=tuple(calls), malformed_tool_format=malformed))


def call(call_id: str, name: str = "read_file", permission: bool = False) -> at.ToolCall:
    """A tool call with JSON-ish arguments."""
    return at.ToolCall(call_id=call_id, name=name, arguments='{"path": "a.py"}',
                       needs_permission=permission)


def no_titles() -> at.TurnConfig:
    """A config with automatic titles off, for tests about other things."""
    return at.TurnConfig(auto_title=False)
