"""Explaining a recorded trace in plain words: why each thing happened.

Theory of operation
-------------------
:func:`explain` walks a trace's steps and turns the events and commands that carry a decision
into sentences: why each model call was made (the prompt, tool results, Lead instructions, a
corrective retry, a guard or Stop-hook continuation), why each tool ran or was not run, when
each Lead instruction joined, why the guard continued or stopped, and why each turn ended. The
reasons come from what the reducers recorded (result records carry their reason, outcomes their
message and raw finish reason), never from guessing: what the trace does not say is left out.
Where a sentence names what a line of the demo shows too (an outcome, a guard chunk's attempt,
a drain reply's flag), it takes the phrase from :mod:`~agentturn.tools.render`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._base import Command, Event
from ..commands import (
    DecideNaturalStop,
    EndTurn,
    ExecuteTool,
    LeadAccepted,
    LeadUnapplied,
    Persist,
    RequestModelStream,
    ReturnDraft,
    SetTitle,
    StaleAnswerIgnored,
)
from ..events import (
    PermissionDecided,
    Persisted,
    PromptSubmitted,
    StopPressed,
    StreamCompleted,
)
from ..guard.texts import is_guard_prompt
from ..records import (
    CutOffSignal,
    ResponseRecord,
    ToolResultRecord,
    ToolResultStatus,
    UserMessageRecord,
)
from ..trace import Trace
from .render import guard_chunk, outcome, queued_flag, terminal_safe, written_by

__all__ = ["explain"]


#: Which signal decided that a response was cut off (TL-9), as the story says it.
_CUT_OFF_SIGNALS = {
    CutOffSignal.FINISH_REASON: "the engine's finish reason said it cut the response at its "
                                "output limit",
    CutOffSignal.OUTPUT_TOKEN_LIMIT: "the output tokens reached the limit the request asked "
                                     "for, whatever the finish reason said",
    CutOffSignal.UNCLOSED_TOOL_BLOCK: "the stream ended inside a tool-call block that was never "
                                      "closed, whatever the finish reason said",
    CutOffSignal.UNPARSABLE_ARGUMENTS_AT_LIMIT: "a tool call's arguments stop mid-JSON with the "
                                                "output tokens at the limit, whatever the finish "
                                                "reason said",
}


def _quote(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return f"“{text[:limit]}…”" if len(text) > limit else f"“{text}”"


class _Story:
    """What the narration remembers between steps."""

    def __init__(self) -> None:
        self.writes: dict[str, tuple[Any, ...]] = {}  # write key -> its records
        self.last_saved: tuple[Any, ...] = ()
        self.names: dict[str, str] = {}  # call id -> tool name
        self.allowed: set[str] = set()

    def why_request(self, request: RequestModelStream) -> str:
        if request.lead_ids:
            return f"to give it Lead instruction(s) {', '.join(request.lead_ids)} before " \
                   "anything else"
        if request.corrective:
            return "once more, to correct a malformed tool-call format (the one retry)"
        users = [r for r in self.last_saved if isinstance(r, UserMessageRecord)]
        results = [r for r in self.last_saved if isinstance(r, ToolResultRecord)]
        if users and is_guard_prompt(users[-1].text):
            return "to continue: the todo stop guard found unfinished todos"
        if users and "[Todo Stop Guard]" in users[-1].text:
            return "to continue: a Stop hook blocked and the todo stop guard continued, in " \
                   "one call"
        if users and users[-1].message_id.endswith("/continue"):
            return f"to continue: a Stop hook blocked the stop ({_quote(users[-1].text)})"
        if results:
            return "with the tool results just saved"
        if users:
            return "for the prompt just saved"
        return "to go on with the turn"


def _event_line(event: Event, story: _Story) -> Iterator[str]:
    from ..session import vocabulary as se

    if isinstance(event, PromptSubmitted):
        yield f"The user asked {_quote(event.text)} (turn {event.turn_id})."
    elif isinstance(event, StreamCompleted):
        calls = ", ".join(f"{c.name} ({c.call_id})" for c in event.tool_calls)
        what = f"called {calls}" if calls else (
            f"answered {_quote(event.text)}" if event.text.strip() else "answered nothing")
        cut = f"; cut off: {event.cut_off.value}" if event.cut_off is not None else ""
        yield f"The model {what} [finish reason {event.finish_reason!r}{cut}]."
    elif isinstance(event, PermissionDecided):
        story.allowed.add(event.call_id)
        yield f"The user answered {event.decision.value} for {event.call_id}."
    elif isinstance(event, StopPressed):
        yield "The user pressed Stop."
    elif isinstance(event, se.PromptQueued):
        yield f"Prompt {event.prompt_id} {_quote(event.text)} waits in the daemon FIFO."
    elif isinstance(event, se.MidTurnDrained):
        yield (f"The client's drain reply: {len(event.messages)} mid-turn message(s), "
               f"hasQueuedPrompt {queued_flag(event.has_queued_prompt)}.")
    elif isinstance(event, se.StopHookDecided):
        yield ("The Stop hook blocked: " + _quote(event.reason or "")) if event.block else \
            "The Stop hook did not block."
    elif isinstance(event, se.StopHookFailed):
        yield f"The Stop hook failed ({event.error}); a failing hook never blocks."
    elif isinstance(event, se.TimerFired):
        yield f"Timer {event.key} ran out."
    elif isinstance(event, se.AutomaticTurnDue):
        yield f"A {event.kind.value} wants turn {event.turn_id} ({event.source_id})."
    elif isinstance(event, se.LifecycleChanged):
        what = event.kind.value.replace("_", " ").capitalize()
        yield f"{what}: nothing the guard trusted is kept."


def _command_line(command: Command, story: _Story) -> Iterator[str]:
    from ..session import vocabulary as se
    from ..session.ring import EntryKind

    if isinstance(command, Persist):
        story.writes[command.key] = command.records
        for record in command.records:
            if isinstance(record, ResponseRecord):
                for call in record.tool_calls:
                    story.names[call.call_id] = call.name
                if not record.completes_normally and record.tool_calls:
                    if record.cut_off is not None:
                        how = f"cut off ({record.cut_off.value})"
                    elif record.malformed_tool_format:
                        how = "with malformed tool calls (the corrective retry answers them)"
                    else:
                        how = f"not ended normally (finish reason {record.finish_reason.raw!r})"
                    yield (f"Response {record.request_id} was saved {how}: its "
                           f"{len(record.tool_calls)} tool call(s) never run, and later "
                           "requests send its text without them.")
            elif isinstance(record, ToolResultRecord) and record.status is not (
                    ToolResultStatus.EXECUTED):
                yield (f"{record.call_id} ({record.name}) was not run "
                       f"[{record.status.value}]: {record.reason}")
    elif isinstance(command, RequestModelStream):
        yield f"Asked the model ({command.request_id}) {story.why_request(command)}."
    elif isinstance(command, ExecuteTool):
        call = command.call
        why = " after the user allowed it" if call.call_id in story.allowed else ""
        yield f"Ran {call.name} ({call.call_id}){why}, in the model's order."
    elif isinstance(command, LeadAccepted):
        yield f"Lead instruction {command.lead_id} was accepted; it is saved next and joins " \
              "the turn at the next safe boundary."
    elif isinstance(command, ReturnDraft):
        yield f"Lead {command.lead_id}'s text went back to the composer " \
              f"[{command.reason.value}]: {command.message}"
    elif isinstance(command, LeadUnapplied):
        yield f"Lead {command.lead_id} was saved, but the turn ended before the model got it."
    elif isinstance(command, DecideNaturalStop):
        yield "The model stopped on its own; the stop order decides what comes next."
    elif isinstance(command, se.Publish):
        entry = command.entry
        meta = dict(entry.meta or {})
        if entry.kind is EntryKind.GUARD_CHUNK:
            yield (f"The todo stop guard continued: {guard_chunk(meta)} todo item(s) "
                   "(committed when its stream opened).")
        elif entry.kind is EntryKind.GUARD_EXHAUSTED:
            yield f"The todo stop guard stopped: {entry.text}"
    elif isinstance(command, se.SuppressFollowUpSuggestions):
        yield f"No follow-up suggestions: {command.reason}."
    elif isinstance(command, se.Warn):
        yield f"Warning: {command.text}"
    elif isinstance(command, se.AutomaticTurnDeferred):
        joined = f" (coalesced into {command.coalesced_into})" if command.coalesced_into else ""
        yield f"Automatic turn {command.turn_id} waits{joined}."
    elif isinstance(command, SetTitle):
        yield f"The chat was named {_quote(command.title)}."
    elif isinstance(command, StaleAnswerIgnored):
        yield f"A late {command.event} for {command.answer_id} was ignored: {command.reason}."
    elif isinstance(command, EndTurn):
        yield (f"Turn {command.turn_id} ended: {outcome(command.outcome)}"
               + (" (it can be continued)" if command.outcome.resumable else ""))
        if command.outcome.cut_off is not None:
            yield f"What showed the cut: {_CUT_OFF_SIGNALS[command.outcome.cut_off]}."


def explain(trace: Trace) -> str:
    """The story of a traced session, one numbered step per line that decided something."""
    story = _Story()
    lines = [terminal_safe(f"The story of this {trace.part} trace ({len(trace.steps)} steps, "
                           f"written by {written_by(trace.library_version)}):", one_line=True), ""]
    for step in trace.steps:
        if isinstance(step.event, Persisted):
            story.last_saved = story.writes.pop(step.event.key, ())
        said = [*_event_line(step.event, story)]
        for command in step.commands:
            said.extend(_command_line(command, story))
        for number, sentence in enumerate(said):
            prefix = f"{step.number:>4}. " if number == 0 else "      "
            # a value's own newline cannot start a line of the story
            lines.append(prefix + terminal_safe(sentence, one_line=True))
    return "\n".join(lines)
