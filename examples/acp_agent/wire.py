"""How the session's commands and outcomes look on the ACP wire (the agent's only translations).

Theory of operation
-------------------
Pure functions from agentturn values to ``acp.schema`` models and back; nothing here decides
anything. :func:`published` is the one place a ``Publish`` becomes an ``agent_message_chunk``:
ordinary model text carries no ``_meta``; a guard continuation and the exhaustion message carry
exactly the ring entry's metadata (``source: 'todo_stop_guard'``, ``qwenDiscreteMessage: true``,
the attempt counts), so a client keeps each as its own message (OB-2, OB-3, OB-6).

Every ``agent_message_chunk`` carries the ``messageId`` of the ring entry it publishes: the
chunks of one model response share it, and each guard continuation and the exhaustion message
have their own, so a client that treats ``_meta`` as opaque still keeps them apart (ACP's
``ContentChunk.messageId``: "a change in messageId indicates a new message has started").
Tool-call ``locations`` are absolute paths, resolved against the session's folder.

:func:`decision_of` reads a permission answer: only an option the agent offered as an allow is
an allow; a rejection is a deny; the client's ``cancelled`` outcome is a cancel (the client
sends it when the turn was cancelled). An answer that does not read (an option the agent never
offered) is a deny, never an allow and never a cancel, with a reason that says what came; the
caller treats a failed request the same way (TL-3, BR-4).

:func:`replayed` turns a session's saved log (:mod:`store`) back into the updates a client saw,
for ``session/load``. A tool that ran but reported an error replays as ``completed`` (its record
says only that it was executed).

:func:`prompt_response` maps the turn's one typed outcome to the prompt's stop reason (the table
in README.md); outcomes that are errors become a JSON-RPC error carrying the outcome.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from acp import RequestError, text_block, tool_content
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    PermissionOptionKind,
    PlanEntry,
    PlanEntryStatus,
    PromptResponse,
    RequestPermissionResponse,
    SessionInfoUpdate,
    StopReason,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    ToolKind,
    UserMessageChunk,
)

import agentturn as at
from agentturn import guard
from agentturn import session as se

__all__ = [
    "META_KEY",
    "PERMISSION_OPTIONS",
    "STOP_REASONS",
    "decision_of",
    "message_chunk",
    "permission_subject",
    "plan",
    "prompt_response",
    "published",
    "replayed",
    "title",
    "tool_call_ended",
    "tool_call_running",
    "tool_call_started",
    "user_message",
]

#: The ``_meta`` key under which this agent adds its own facts (the typed outcome of a turn).
META_KEY = "agentturn"

#: The options of every permission request: allow once, or deny.
PERMISSION_OPTIONS: tuple[PermissionOption, ...] = (
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="deny", name="Deny", kind="reject_once"),
)
_KINDS: Mapping[str, PermissionOptionKind] = MappingProxyType(
    {option.option_id: option.kind for option in PERMISSION_OPTIONS})

#: The prompt's stop reason per outcome; ``None``: the outcome is answered with an error.
STOP_REASONS: Mapping[at.OutcomeKind, StopReason | None] = MappingProxyType({
    at.OutcomeKind.FINISHED: "end_turn",
    at.OutcomeKind.ENDED_BY_TOOL: "end_turn",
    at.OutcomeKind.EMPTY_RESPONSE: "end_turn",
    at.OutcomeKind.UNRECOGNIZED_FINISH: "end_turn",
    at.OutcomeKind.CANCELLED: "cancelled",
    at.OutcomeKind.OUTPUT_LIMIT: "max_tokens",
    at.OutcomeKind.TOKEN_LIMIT: "max_tokens",
    at.OutcomeKind.CONTENT_FILTERED: "refusal",
    at.OutcomeKind.ACTION_BUDGET: "max_turn_requests",
    at.OutcomeKind.HALTED: "max_turn_requests",
    at.OutcomeKind.ERROR: None,
    at.OutcomeKind.COMPACTION_FAILED: None,
    at.OutcomeKind.MALFORMED_TOOL_FORMAT: None,
})

_PLAN_STATUSES: Mapping[object, PlanEntryStatus] = MappingProxyType(
    {"pending": "pending", "in_progress": "in_progress", "completed": "completed"})
_TOOL_KINDS: Mapping[str, ToolKind] = MappingProxyType(
    {"write_file": "edit", "run_tests": "execute", "todo_write": "think"})


def published(entry: se.RingEntry) -> AgentMessageChunk | None:
    """The ``agent_message_chunk`` of a published ring entry; ``None`` for a turn's end and
    notices (the prompt response carries the end)."""
    if entry.kind is se.EntryKind.MESSAGE_CHUNK:
        return message_chunk(entry.message_id, entry.text, None)
    if entry.kind in (se.EntryKind.GUARD_CHUNK, se.EntryKind.GUARD_EXHAUSTED):
        meta = entry.meta.as_dict() if entry.meta is not None else None
        # The ring's guard entries share the turn's id; on the wire each is its own message.
        return message_chunk(f"{entry.message_id}/guard-{entry.seq}", entry.text, meta)
    return None


def message_chunk(message_id: str, text: str,
                  meta: Mapping[str, Any] | None) -> AgentMessageChunk:
    """One ``agent_message_chunk`` (live, or replayed by ``session/load``)."""
    return AgentMessageChunk(session_update="agent_message_chunk", content=text_block(text),
                             message_id=message_id,
                             field_meta=dict(meta) if meta is not None else None)


def user_message(record: at.UserMessageRecord) -> UserMessageChunk:
    """A saved user message, replayed by ``session/load``."""
    return UserMessageChunk(session_update="user_message_chunk",
                            content=text_block(record.text), message_id=record.message_id)


def _arguments(call: at.ToolCall) -> Any:
    try:
        return json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return call.arguments


def _title(call: at.ToolCall) -> str:
    arguments = _arguments(call)
    path = arguments.get("path") if isinstance(arguments, dict) else None
    return f"{call.name} {path}" if isinstance(path, str) else call.name


def _locations(call: at.ToolCall, folder: pathlib.Path) -> list[ToolCallLocation] | None:
    """The file a call touches, as the absolute path ACP's schema asks for."""
    arguments = _arguments(call)
    path = arguments.get("path") if isinstance(arguments, dict) else None
    if not isinstance(path, str) or not path:
        return None
    return [ToolCallLocation(path=str((folder / path).resolve()))]


def tool_call_started(call: at.ToolCall, folder: pathlib.Path) -> ToolCallStart:
    """A call of a saved response, announced before anything runs (status ``pending``)."""
    return ToolCallStart(session_update="tool_call", tool_call_id=call.call_id,
                         title=_title(call), kind=_TOOL_KINDS.get(call.name, "other"),
                         status="pending", locations=_locations(call, folder),
                         raw_input=_arguments(call))


def tool_call_running(call_id: str) -> ToolCallProgress:
    """``ExecuteTool``: the call runs now."""
    return ToolCallProgress(session_update="tool_call_update", tool_call_id=call_id,
                            status="in_progress")


def tool_call_ended(record: at.ToolResultRecord, failed: bool,
                    permission: str | None = None) -> ToolCallProgress:
    """A saved result: ``completed`` when the tool ran and did not report a failure, else
    ``failed``; ``rawOutput.status`` is the record's own status (executed, denied, skipped,
    cancelled, superseded); ``rawOutput.permission`` says how a permission answer was read
    when it was not a plain allow."""
    ran = record.status is at.ToolResultStatus.EXECUTED
    text = record.output or record.reason or record.status.value
    return ToolCallProgress(
        session_update="tool_call_update", tool_call_id=record.call_id,
        status="completed" if ran and not failed else "failed",
        content=[tool_content(text_block(text))],
        raw_output={"status": record.status.value, "output": record.output,
                    "reason": record.reason,
                    **({"permission": permission} if permission is not None else {})})


def permission_subject(call: at.ToolCall, folder: pathlib.Path) -> ToolCallUpdate:
    """The tool call a ``session/request_permission`` asks about."""
    return ToolCallUpdate(tool_call_id=call.call_id, title=_title(call),
                          kind=_TOOL_KINDS.get(call.name, "other"), status="pending",
                          locations=_locations(call, folder), raw_input=_arguments(call))


def decision_of(response: RequestPermissionResponse) -> tuple[at.PermissionDecision, str]:
    """The session's decision for a permission answer, and why; never an allow unless one was
    chosen, never a cancel unless the client said ``cancelled``."""
    outcome = response.outcome
    if isinstance(outcome, DeniedOutcome):
        return at.PermissionDecision.CANCEL, "the client answered 'cancelled'"
    if isinstance(outcome, AllowedOutcome):
        kind = _KINDS.get(outcome.option_id)
        if kind in ("allow_once", "allow_always"):
            return at.PermissionDecision.ALLOW, f"the client chose {outcome.option_id!r}"
        if kind in ("reject_once", "reject_always"):
            return at.PermissionDecision.DENY, f"the client chose {outcome.option_id!r}"
        return at.PermissionDecision.DENY, (
            f"the client chose {outcome.option_id!r}, an option never offered: denied")
    return at.PermissionDecision.DENY, "the client's answer has no outcome this agent reads: denied"


def plan(todos: Sequence[object]) -> AgentPlanUpdate:
    """A todo-write result as the ACP plan."""
    entries = [PlanEntry(content=str(todo.get("content", "")), priority="medium",
                         status=_PLAN_STATUSES.get(todo.get("status"), "pending"))
               for todo in todos if isinstance(todo, dict)]
    return AgentPlanUpdate(session_update="plan", entries=entries)


def title(text: str) -> SessionInfoUpdate:
    """``SetTitle``: the session's title."""
    return SessionInfoUpdate(session_update="session_info_update", title=text)


def _outcome(outcome: at.TurnOutcome) -> dict[str, Any]:
    finish = outcome.finish_reason
    return {"outcome": outcome.kind.value, "message": outcome.message,
            "finishReason": finish.raw if finish is not None else None,
            "resumable": outcome.resumable}


def prompt_response(outcome: at.TurnOutcome) -> PromptResponse:
    """The ``session/prompt`` response of a turn that ended with ``outcome``; raises
    :class:`acp.RequestError` for the outcomes that are errors."""
    reason = STOP_REASONS[outcome.kind]
    if reason is None:
        raise RequestError.internal_error(_outcome(outcome))
    return PromptResponse(stop_reason=reason, field_meta={META_KEY: _outcome(outcome)})


def replayed(log: Iterable[Any], folder: pathlib.Path) -> Iterator[Any]:
    """The ``session/update``s of a saved log (:data:`store.LogLine` items), in order: user
    messages, the agent's message chunks as they were sent (the guard's with their ``_meta``),
    each tool call and its end, the title. A response's calls follow its text, as live; a guard
    prompt saved as a user message is not repeated (its guard chunk stands for it)."""
    calls: list[at.ToolCall] = []
    for line in log:
        if isinstance(line, tuple):
            yield message_chunk(*line)
            continue
        yield from (tool_call_started(call, folder) for call in calls)
        calls.clear()
        if isinstance(line, str):
            yield title(line)
        elif isinstance(line, at.UserMessageRecord):
            if not guard.is_guard_prompt(line.text):
                yield user_message(line)
        elif isinstance(line, at.ResponseRecord):
            calls.extend(line.tool_calls)
        elif isinstance(line, at.ToolResultRecord):
            yield tool_call_ended(line, failed=False)
    yield from (tool_call_started(call, folder) for call in calls)
