"""The one mapping from a command to the events that report it, against any world.

Theory of operation
-------------------
A host's *adapter* carries out each command against the outside world and turns what happened
into events. The world is whatever answers: storage, the engine, the tools, the user, the client,
the Stop hooks. :class:`WorldLike` names what an adapter asks of it, one method per awaiting
command; a method returns ``None`` when the world gives no answer yet (the engine has nothing to
say, the tool still runs, the user has not clicked), and the command then stays outstanding.

*The world answers later*: when a held command's answer comes (the tool finishes, the stream
opens or ends), the world's host calls :meth:`Adapter.carry_out` again with the same command,
and the adapter reports what happened since. An engine stream goes in two steps: the world's
``stream`` returns a response that is still ``streaming`` once the stream opened (the adapter
reports ``StreamOpened``), then the complete response (``StreamCompleted``), or a ``failure``.
A world that answers at once (:class:`~agentturn.testing.ScriptedHost`) returns the complete
response the first time, and the adapter reports both events together.

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

import enum
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from .. import commands as c
from .. import events as e
from .._base import Command, Event
from ..records import ResponseRecord, ToolCall, ToolResultRecord, UserMessageRecord
from ..session import vocabulary as sv

__all__ = ["Adapter", "EngineFailure", "EngineResponse", "ReferenceAdapter", "WorldLike",
           "hooks_do_not_block", "nothing_held"]


class EngineFailure(enum.Enum):
    """How an engine request can fail (TL-2, TL-11)."""

    #: The budgeting step could not compact the prompt: no stream opened.
    COMPACTION = "compaction"
    #: The budgeting step rejected the prompt as over the token limit: no stream opened.
    TOKEN_LIMIT = "token_limit"
    #: The API returned an error.
    API = "api"
    #: The network failed.
    NETWORK = "network"


@attrs.frozen(kw_only=True)
class EngineResponse:
    """What the world's engine streams for one request, raw, before any normalization."""

    text: str = ""
    raw_finish_reason: str = "end_turn"
    calls: tuple[ToolCall, ...] = ()
    #: The host's stream normalizer could not parse the tool calls (TL-6).
    malformed_tool_format: bool = False
    #: The stream opened and is still streaming: only ``StreamOpened`` can be reported yet.
    streaming: bool = False
    #: The request failed (the other fields are then meaningless).
    failure: EngineFailure | None = None


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

    def history(self) -> Sequence[Any]:
        """Every record storage holds, in order: what a host builds an engine request from."""
        ...

    def stream(self, request: c.RequestModelStream | None = None) -> EngineResponse | None:
        """The engine's response to ``request``, raw; ``None``: no answer yet."""
        ...

    def ask(self, call: ToolCall) -> e.PermissionDecision | None:
        """The user's answer to a permission dialog; ``None``: not answered yet."""
        ...

    def run(self, call: ToolCall) -> tuple[str, Any] | None:
        """Run a tool (the first call starts it): its output and its structured result once it
        finished; ``None``: it still runs."""
        ...

    def cancel(self, call_id: str) -> bool:
        """Ask the world to stop a running tool (the host's part of ``CancelTool``): ``True``
        when it stopped, ``False`` when it runs on to its end (it cannot stop safely: a write
        is never stopped part-way)."""
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
    """A correct adapter: what the README's command table says, against a :class:`WorldLike`.

    It keeps the little a real host keeps: which streams it reported open, which Leads the
    session gave the model (so a request's transcript holds a saved Lead only from the request
    that gives it, LD-8), and which tools the world stopped after a ``CancelTool``.
    """

    def __init__(self) -> None:
        self.opened: set[str] = set()  # request ids whose StreamOpened was reported
        self.lead_of: dict[str, str] = {}  # Lead record message id -> Lead id
        self.given: set[str] = set()  # Lead ids some request gave the model
        self.stopped: set[str] = set()  # call ids the world stopped after CancelTool

    def normalize(self, raw: str) -> str:
        """The engine's finish reason, passed through unchanged (agentturn normalizes)."""
        return raw

    def transcript(self, request: c.RequestModelStream, world: WorldLike) -> tuple[Any, ...]:
        """What the engine receives for ``request``: the saved history, with each saved Lead
        from the request that gives it on (LD-8), and only the tool calls whose result is
        saved. A response that did not complete normally (``ResponseRecord.completes_normally``
        false: cut off, withheld, an unknown finish) goes with its text only: its calls, whose
        arguments may be incomplete JSON, and their results never reach the model (TL-9)."""
        self.given.update(request.lead_ids)
        history = tuple(world.history())
        answered = {r.call_id for r in history if isinstance(r, ToolResultRecord)}
        sent: list[Any] = []
        withheld: set[str] = set()  # the calls of the last response, if it is left out
        for record in history:
            if isinstance(record, UserMessageRecord):
                lead = self.lead_of.get(record.message_id)
                if lead is not None and lead not in self.given:
                    continue
            if isinstance(record, ResponseRecord):
                withheld = (set() if record.completes_normally
                            else {call.call_id for call in record.tool_calls})
                calls = tuple(call for call in record.tool_calls
                              if call.call_id in answered and call.call_id not in withheld)
                record = attrs.evolve(record, tool_calls=calls)
            elif isinstance(record, ToolResultRecord) and record.call_id in withheld:
                continue
            sent.append(record)
        return tuple(sent)

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        """The events reporting ``command`` (or what happened since it was last carried out);
        none for a notice, a timer (the host fires it), or an answer not given yet."""
        if isinstance(command, c.Persist):
            if world.store(command.records):
                return [e.Persisted(key=command.key)]
            return [e.PersistFailed(key=command.key, reason="disk full")]
        if isinstance(command, c.RequestModelStream):
            return self.stream(command, world)
        if isinstance(command, c.AskPermission):
            decision = world.ask(command.call)
            if decision is None:
                return []
            return [e.PermissionDecided(call_id=command.call.call_id, decision=decision)]
        if isinstance(command, c.ExecuteTool):
            if command.call.call_id in self.stopped:
                return []  # already reported cancelled
            result = world.run(command.call)
            if result is None:
                return []
            output, structured = result
            return [e.ToolFinished(call_id=command.call.call_id, output=output,
                                   structured=structured)]
        if isinstance(command, c.CancelTool):
            if world.cancel(command.call_id):
                self.stopped.add(command.call_id)
                return [e.ToolFinished(call_id=command.call_id, output="cancelled",
                                       cancelled=True)]
            return []  # it cannot stop safely: its one result comes when it ends
        if isinstance(command, c.SaveLead):
            self.lead_of[command.record.message_id] = command.lead_id
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

    def stream(self, command: c.RequestModelStream, world: WorldLike) -> list[Event]:
        """The events of an engine request so far: opened, then completed or failed."""
        response = world.stream(command)
        if response is None:
            return []
        rid = command.request_id
        failure = response.failure
        if failure is EngineFailure.COMPACTION:
            return [e.CompactionFailed(request_id=rid, reason="could not compact the prompt")]
        if failure is EngineFailure.TOKEN_LIMIT:
            return [e.TokenLimitRejected(request_id=rid, reason="prompt over the token limit")]
        events: list[Event] = []
        if failure is not None:  # before the stream opened, or cutting it
            return [e.StreamFailed(request_id=rid, error=f"{failure.value} error",
                                   network=failure is EngineFailure.NETWORK)]
        if rid not in self.opened:
            self.opened.add(rid)
            events.append(e.StreamOpened(request_id=rid))
        if not response.streaming:
            events.append(e.StreamCompleted(
                request_id=rid, text=response.text,
                finish_reason=self.normalize(response.raw_finish_reason),
                tool_calls=response.calls, malformed_tool_format=response.malformed_tool_format))
        return events
