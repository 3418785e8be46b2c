"""The one mapping from a command to the events that report it, against any world.

Theory of operation
-------------------
A host's *adapter* carries out each command against the outside world and turns what happened
into events. The world is whatever answers: storage, the engine, the tools, the user, the client,
the Stop hooks. :class:`WorldLike` names what an adapter asks of it, one method per awaiting
command; a method returns ``None`` when the world gives no answer yet (the engine has nothing to
say, the user has not clicked), and the command then stays outstanding.

:class:`ReferenceAdapter` is the correct adapter, what the README's command table says: it is
the only place in agentturn that maps commands to their answering events. Two worlds use it:

* :class:`~agentturn.testing.SessionSpec`'s :class:`~agentturn.testing.World`, which draws every
  answer from hypothesis and records what really happened;
* :class:`~agentturn.testing.ScriptedHost`, a world answered from a script (responses in order,
  a table of tool results, policies for the rest), which the demo, the benchmark and the tests
  run sessions with.

Nothing here imports hypothesis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from .. import commands as c
from .. import events as e
from .._base import Command, Event
from ..records import ToolCall
from ..session import vocabulary as sv

__all__ = ["Adapter", "EngineResponse", "ReferenceAdapter", "WorldLike", "hooks_do_not_block",
           "nothing_held"]


@attrs.frozen(kw_only=True)
class EngineResponse:
    """What the world's engine streams for one request, raw, before any normalization."""

    text: str
    raw_finish_reason: str
    calls: tuple[ToolCall, ...]
    #: The host's stream normalizer could not parse the tool calls (TL-6).
    malformed_tool_format: bool = False


def nothing_held(command: sv.DrainMidTurnQueue) -> Event:
    """The plainest drain reply: the client holds no mid-turn message and no queued prompt."""
    return sv.MidTurnDrained(drain_id=command.drain_id)


def hooks_do_not_block(command: sv.RunStopHooks) -> Event:
    """The plainest Stop-hook verdict: no hook blocks."""
    return sv.StopHookDecided(run_id=command.run_id, block=False)


class WorldLike(Protocol):
    """What an adapter asks of the world, one method per kind of awaiting command."""

    def store(self, records: Sequence[Any]) -> bool:
        """Save records; ``False`` when storage fails."""
        ...

    def stream(self, request: c.RequestModelStream | None = None) -> EngineResponse | None:
        """The engine's response to ``request``, raw; ``None``: no answer yet."""
        ...

    def ask(self, call: ToolCall) -> e.PermissionDecision | None:
        """The user's answer to a permission dialog; ``None``: not answered yet."""
        ...

    def run(self, call: ToolCall) -> tuple[str, Any]:
        """Run a tool: its output and its structured result."""
        ...

    def title(self, request: c.RequestTitle) -> str | None:
        """The title the namer generated; ``None``: no answer yet."""
        ...

    def drain(self, command: sv.DrainMidTurnQueue) -> Event | None:
        """The client's drain reply (a ``MidTurnDrained``); ``None``: no answer yet."""
        ...

    def hooks(self, command: sv.RunStopHooks) -> Event | None:
        """The Stop hooks' verdict (``StopHookDecided`` or ``StopHookFailed``); ``None``: not
        decided yet."""
        ...


class Adapter(Protocol):
    """The host code under test: carry out one command against the world, and return the
    events that report it (in order; they are delivered interleaved with the user)."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]: ...


class ReferenceAdapter:
    """A correct adapter: what the README's command table says, against a :class:`WorldLike`."""

    def normalize(self, raw: str) -> str:
        """The engine's finish reason, passed through unchanged (agentturn normalizes)."""
        return raw

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        """The events reporting ``command``; none for a notice, a timer (the host fires it), a
        cancellation, or an answer the world does not give yet."""
        if isinstance(command, c.Persist):
            if world.store(command.records):
                return [e.Persisted(key=command.key)]
            return [e.PersistFailed(key=command.key, reason="disk full")]
        if isinstance(command, c.RequestModelStream):
            response = world.stream(command)
            if response is None:
                return []
            return [e.StreamOpened(request_id=command.request_id),
                    e.StreamCompleted(request_id=command.request_id, text=response.text,
                                      finish_reason=self.normalize(response.raw_finish_reason),
                                      tool_calls=response.calls,
                                      malformed_tool_format=response.malformed_tool_format)]
        if isinstance(command, c.AskPermission):
            decision = world.ask(command.call)
            if decision is None:
                return []
            return [e.PermissionDecided(call_id=command.call.call_id, decision=decision)]
        if isinstance(command, c.ExecuteTool):
            output, structured = world.run(command.call)
            return [e.ToolFinished(call_id=command.call.call_id, output=output,
                                   structured=structured)]
        if isinstance(command, c.SaveLead):
            if world.store((command.record,)):
                return [e.LeadSaved(lead_id=command.lead_id)]
            return [e.LeadSaveFailed(lead_id=command.lead_id, reason="disk full")]
        if isinstance(command, c.RequestTitle):
            title = world.title(command)
            if title is None:
                return []
            return [e.TitleGenerated(request_id=command.request_id, title=title)]
        if isinstance(command, sv.DrainMidTurnQueue):
            reply = world.drain(command)
            return [] if reply is None else [reply]
        if isinstance(command, sv.RunStopHooks):
            verdict = world.hooks(command)
            return [] if verdict is None else [verdict]
        return []
