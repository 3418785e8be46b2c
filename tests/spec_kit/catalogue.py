"""A catalogue of realistic one-bug adapters: what host authors actually get wrong.

Each is the reference adapter with one mistake a real host makes, and names the rule of the
spec kit that must catch it. ``tests/spec_kit/test_catalogue.py`` checks that the kit catches
every one on three fixed seeds; ``benchmarks/spec_kit_catalogue.py`` measures the detection
rate on random seeds and the shrink (its time, the length of the shrunk program).
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

from agentturn import commands as c
from agentturn import events as e
from agentturn._base import Command, Event
from agentturn.records import ToolCall
from agentturn.session import vocabulary as sv
from agentturn.testing import ReferenceAdapter, SessionSpec, WorldLike


class AcksFailedSave(ReferenceAdapter):
    """Reports ``Persisted`` whatever the write did (it ignores the storage call's result)."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.Persist):
            world.store(command.records)
            return [e.Persisted(key=command.key)]
        return super().carry_out(command, world)


class RunsToolsWhileStreaming(ReferenceAdapter):
    """Starts each tool call as soon as it streams in, before agentturn says to run it."""

    def stream(self, command: c.RequestModelStream, world: WorldLike) -> list[Event]:
        events = super().stream(command, world)
        for event in events:
            if isinstance(event, e.StreamCompleted):
                for call in event.tool_calls:
                    world.run(call)
        return events


class TranslatesFinishReasons(ReferenceAdapter):
    """Maps Anthropic finish reasons to OpenAI's, and everything unknown to ``stop``
    (``max_tokens`` becomes a normal stop: the shipped example's bug)."""

    TABLE: ClassVar[dict[str, str]] = {"end_turn": "stop", "tool_use": "tool_calls"}

    def normalize(self, raw: str) -> str:
        return self.TABLE.get(raw, "stop")


class AcksLeadBeforeDurable(ReferenceAdapter):
    """Acknowledges a Lead as soon as the write is queued, before it is durable (a failed
    write is never reported)."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.SaveLead):
            self.lead_of[command.record.message_id] = command.lead_id
            world.store((command.record,))
            return [e.LeadSaved(lead_id=command.lead_id)]
        return super().carry_out(command, world)


class AnswersCancelledToolTwice(ReferenceAdapter):
    """Reports a tool cancelled as soon as Stop cancels it, then again when it ends."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.CancelTool):
            world.cancel(command.call_id)
            return [e.ToolFinished(call_id=command.call_id, output="cancelled", cancelled=True)]
        return super().carry_out(command, world)


class ClosedDialogAllows(ReferenceAdapter):
    """Treats a permission dialog with no answer (closed, or not answered yet) as Allow."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.AskPermission):
            decision = world.ask(command.call) or e.PermissionDecision.ALLOW
            return [e.PermissionDecided(call_id=command.call.call_id, decision=decision)]
        return super().carry_out(command, world)


class RunsToolsConcurrently(ReferenceAdapter):
    """Runs the calls of a response side by side to save time (TL-4 says one at a time)."""

    def __init__(self) -> None:
        super().__init__()
        self.batch: tuple[ToolCall, ...] = ()

    def stream(self, command: c.RequestModelStream, world: WorldLike) -> list[Event]:
        events = super().stream(command, world)
        for event in events:
            if isinstance(event, e.StreamCompleted):
                self.batch = event.tool_calls
        return events

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        events = super().carry_out(command, world)
        if isinstance(command, c.ExecuteTool) and command.call in self.batch:
            for call in self.batch:
                world.run(call)  # the rest of the batch starts too
        return events


class RunsToolsByName(ReferenceAdapter):
    """Keeps the calls of a response in a dict by tool name, so of two calls to one tool it
    runs the last for both (out of order, and one is never run)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: dict[str, ToolCall] = {}

    def stream(self, command: c.RequestModelStream, world: WorldLike) -> list[Event]:
        events = super().stream(command, world)
        for event in events:
            if isinstance(event, e.StreamCompleted):
                self.by_name.update((call.name, call) for call in event.tool_calls)
        return events

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.ExecuteTool):
            result = world.run(self.by_name.get(command.call.name, command.call))
            if result is None:
                return []
            return [e.ToolFinished(call_id=command.call.call_id, output=result[0],
                                   structured=result[1])]
        return super().carry_out(command, world)


class DropsFailedLeadSave(ReferenceAdapter):
    """Reports a Lead save only when it worked: a failed one is never answered (the draft is
    lost, the chat waits forever)."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        events = super().carry_out(command, world)
        return [x for x in events if not isinstance(x, e.LeadSaveFailed)]


class SendsUnsavedLeads(ReferenceAdapter):
    """Adds each Lead to the conversation it sends the model as soon as it is asked to save it,
    saved or not (LD-8)."""

    def __init__(self) -> None:
        super().__init__()
        self.typed: list[Any] = []

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.SaveLead):
            self.typed.append(command.record)
        return super().carry_out(command, world)

    def transcript(self, request: c.RequestModelStream, world: WorldLike) -> tuple[Any, ...]:
        sent = super().transcript(request, world)
        return sent + tuple(record for record in self.typed if record not in sent)


class IgnoresCancelTool(ReferenceAdapter):
    """Has no way to stop a tool: ``CancelTool`` is ignored and the tool reported completed."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.CancelTool):
            return []
        return super().carry_out(command, world)


class NamesBesideGeneration(ReferenceAdapter):
    """Answers the naming request at once with a placeholder and names the chat in the
    background, beside generation (TT-3)."""

    def __init__(self) -> None:
        super().__init__()
        self.named: set[str] = set()

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.RequestTitle):
            world.title(command)  # the real naming request, in the background
            if command.request_id in self.named:
                return []
            self.named.add(command.request_id)
            return [e.TitleGenerated(request_id=command.request_id, title="New chat")]
        return super().carry_out(command, world)


class RetriesMalformedItself(ReferenceAdapter):
    """Retries a response with a malformed tool-call format once by itself before reporting
    it (the session's corrective retry then comes on top: TL-6)."""

    def __init__(self) -> None:
        super().__init__()
        self.retried: set[str] = set()

    def stream(self, command: c.RequestModelStream, world: WorldLike) -> list[Event]:
        events = super().stream(command, world)
        done = [x for x in events if isinstance(x, e.StreamCompleted)]
        if done and done[0].malformed_tool_format and command.request_id not in self.retried:
            self.retried.add(command.request_id)
            world.stream(command)  # the same request again
            return [x for x in events if not isinstance(x, e.StreamCompleted)]
        return events


class ResyncRewritesEverything(ReferenceAdapter):
    """After a failed write, resyncs storage by writing every record of the chat again,
    acknowledged ones included (the user's history shows them twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[Any] = []
        self.dirty = False

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.Persist):
            records = (*self.written, *command.records) if self.dirty else command.records
            if world.store(records):
                self.written.extend(command.records)
                self.dirty = False
                return [e.Persisted(key=command.key)]
            self.dirty = True
            return [e.PersistFailed(key=command.key, reason="disk full")]
        return super().carry_out(command, world)


class ReportsTimeoutEarly(ReferenceAdapter):
    """Gives a tool no time: one that has not finished when asked is reported as timed out,
    and keeps running."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.ExecuteTool):
            if world.run(command.call) is None:
                return [e.ToolFinished(call_id=command.call.call_id, output="timed out",
                                       error=True)]
            return []  # the late result is dropped
        return super().carry_out(command, world)


class DedupesToolCalls(ReferenceAdapter):
    """Caches tool results by name and arguments and answers a repeated call from the cache
    without running it."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[tuple[str, str], tuple[str, Any]] = {}

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        if isinstance(command, c.ExecuteTool):
            key = (command.call.name, command.call.arguments)
            if key in self.cache:
                output, structured = self.cache[key]
                return [e.ToolFinished(call_id=command.call.call_id, output=output,
                                       structured=structured)]
            result = world.run(command.call)
            if result is None:
                return []
            self.cache[key] = result
            return [e.ToolFinished(call_id=command.call.call_id, output=result[0],
                                   structured=result[1])]
        return super().carry_out(command, world)


class SwallowsHookFailure(ReferenceAdapter):
    """Logs a crashed Stop hook and reports nothing (the daemon's chat waits forever)."""

    def carry_out(self, command: Command, world: WorldLike) -> list[Event]:
        events = super().carry_out(command, world)
        if isinstance(command, sv.RunStopHooks):
            return [x for x in events if not isinstance(x, sv.StopHookFailed)]
        return events


class Bug(NamedTuple):
    """One entry of the catalogue: the adapter, and what its failure message names (a regular
    expression: the rules that can see the bug first)."""

    adapter: type[ReferenceAdapter]
    rule: str
    #: Listed in issue 25 as caught before the world observed the outcome.
    known: bool


CATALOGUE: dict[str, Bug] = {
    "acks-failed-save": Bug(AcksFailedSave, "storage", True),
    "tools-while-streaming": Bug(RunsToolsWhileStreaming, "TL-", True),
    "translates-finish-reasons": Bug(TranslatesFinishReasons, "TL-9", True),
    "acks-lead-before-durable": Bug(AcksLeadBeforeDurable, "storage", True),
    "answers-cancelled-tool-twice": Bug(AnswersCancelledToolTwice, "TL-4|TL-8", True),
    "closed-dialog-allows": Bug(ClosedDialogAllows, "TL-3|answered-once|accepted", True),
    "runs-tools-concurrently": Bug(RunsToolsConcurrently, "TL-4", False),
    "runs-tools-by-name": Bug(RunsToolsByName, "TL-4", False),
    "drops-failed-lead-save": Bug(DropsFailedLeadSave, "liveness", False),
    "sends-unsaved-leads": Bug(SendsUnsavedLeads, "LD-8", False),
    "ignores-cancel-tool": Bug(IgnoresCancelTool, "TL-8", False),
    "names-beside-generation": Bug(NamesBesideGeneration, "TT-3", False),
    "retries-malformed-itself": Bug(RetriesMalformedItself, "TL-6", False),
    "resync-rewrites-everything": Bug(ResyncRewritesEverything, "storage", False),
    "reports-timeout-early": Bug(ReportsTimeoutEarly, "TL-4|liveness|accepted", False),
    "dedupes-tool-calls": Bug(DedupesToolCalls, "TL-4", False),
    "swallows-hook-failure": Bug(SwallowsHookFailure, "liveness", False),
}


def spec_for(adapter: type[ReferenceAdapter]) -> type[SessionSpec]:
    """The state machine checking ``adapter``."""

    class Spec(SessionSpec):
        def make_adapter(self) -> ReferenceAdapter:
            return adapter()

    Spec.__name__ = Spec.__qualname__ = f"{adapter.__name__}Spec"
    return Spec
