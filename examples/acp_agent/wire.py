"""How the session's commands and outcomes look on the ACP wire (the agent's only translations).

Theory of operation
-------------------
Pure functions from agentturn values to ``acp.schema`` models and back; nothing here decides
anything. :func:`published` is the one place a ``Publish`` becomes an ``agent_message_chunk``:
ordinary model text carries no ``_meta``; a guard continuation and the exhaustion message carry
exactly the ring entry's metadata (``source: 'todo_stop_guard'``, ``qwenDiscreteMessage: true``,
the attempt counts), so a client keeps each as its own message (OB-2, OB-3, OB-6).

:func:`decision_of` reads a permission answer: only an option the agent offered as an allow is
an allow; a rejection is a deny; the client's ``cancelled`` outcome, an option the agent never
offered, and (in the caller) a failed request are a cancel, never an allow (TL-3, BR-4).

:func:`prompt_response` maps the turn's one typed outcome to the prompt's stop reason (the table
in README.md); outcomes that are errors become a JSON-RPC error carrying the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from acp import RequestError, text_block, tool_content
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AllowedOutcome,
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
)

import agentturn as at
from agentturn import session as se

__all__ = [
    "META_KEY",
    "PERMISSION_OPTIONS",
    "STOP_REASONS",
    "decision_of",
    "permission_subject",
    "plan",
    "prompt_response",
    "published",
    "title",
    "tool_call_ended",
    "tool_call_running",
    "tool_call_started",
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
        return AgentMessageChunk(session_update="agent_message_chunk",
                                 content=text_block(entry.text))
    if entry.kind in (se.EntryKind.GUARD_CHUNK, se.EntryKind.GUARD_EXHAUSTED):
        meta = entry.meta.as_dict() if entry.meta is not None else None
        return AgentMessageChunk(session_update="agent_message_chunk",
                                 content=text_block(entry.text), field_meta=meta)
    return None


def _arguments(call: at.ToolCall) -> Any:
    try:
        return json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return call.arguments


def _title(call: at.ToolCall) -> str:
    arguments = _arguments(call)
    path = arguments.get("path") if isinstance(arguments, dict) else None
    return f"{call.name} {path}" if isinstance(path, str) else call.name


def _locations(call: at.ToolCall) -> list[ToolCallLocation] | None:
    arguments = _arguments(call)
    path = arguments.get("path") if isinstance(arguments, dict) else None
    return [ToolCallLocation(path=path)] if isinstance(path, str) else None


def tool_call_started(call: at.ToolCall) -> ToolCallStart:
    """A call of a saved response, announced before anything runs (status ``pending``)."""
    return ToolCallStart(session_update="tool_call", tool_call_id=call.call_id,
                         title=_title(call), kind=_TOOL_KINDS.get(call.name, "other"),
                         status="pending", locations=_locations(call),
                         raw_input=_arguments(call))


def tool_call_running(call_id: str) -> ToolCallProgress:
    """``ExecuteTool``: the call runs now."""
    return ToolCallProgress(session_update="tool_call_update", tool_call_id=call_id,
                            status="in_progress")


def tool_call_ended(record: at.ToolResultRecord, failed: bool) -> ToolCallProgress:
    """A saved result: ``completed`` when the tool ran and did not report a failure, else
    ``failed``; ``rawOutput.status`` is the record's own status (executed, denied, skipped,
    cancelled, superseded)."""
    ran = record.status is at.ToolResultStatus.EXECUTED
    text = record.output or record.reason or record.status.value
    return ToolCallProgress(
        session_update="tool_call_update", tool_call_id=record.call_id,
        status="completed" if ran and not failed else "failed",
        content=[tool_content(text_block(text))],
        raw_output={"status": record.status.value, "output": record.output,
                    "reason": record.reason})


def permission_subject(call: at.ToolCall) -> ToolCallUpdate:
    """The tool call a ``session/request_permission`` asks about."""
    return ToolCallUpdate(tool_call_id=call.call_id, title=_title(call),
                          kind=_TOOL_KINDS.get(call.name, "other"), status="pending",
                          locations=_locations(call), raw_input=_arguments(call))


def decision_of(response: RequestPermissionResponse) -> at.PermissionDecision:
    """The session's decision for a permission answer; never an allow unless one was chosen."""
    outcome = response.outcome
    if isinstance(outcome, AllowedOutcome):
        kind = _KINDS.get(outcome.option_id)
        if kind in ("allow_once", "allow_always"):
            return at.PermissionDecision.ALLOW
        if kind in ("reject_once", "reject_always"):
            return at.PermissionDecision.DENY
    return at.PermissionDecision.CANCEL


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
