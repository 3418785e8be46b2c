"""One readable line for any event or command of any part: the demo, the notebooks and
``explain`` all show values through here.

Theory of operation
-------------------
:func:`describe` gives the line. The values a person reads for meaning get a line of their own
(a prompt's text, a response's calls and raw finish reason, a write's records, an outcome, a
guard chunk's attempt, a drain reply's flag); every other value shows its class and the fields
that differ from their defaults, a lone field by its bare value (``Persisted t1/p2``). Long text
is cut with its size; the guard's continuation prompts are named rather than quoted.

The phrases that ``explain``'s sentences share with these lines (an outcome, a guard chunk, a
drain reply's flag) are functions here too, so both say the same thing the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .. import commands as c
from .. import events as e
from .. import records as r
from ..guard import texts as guard_texts

__all__ = ["describe", "guard_chunk", "message", "outcome", "queued_flag", "records", "short",
           "terminal_safe", "tool_result", "written_by"]


def short(text: str, limit: int = 90) -> str:
    """``text`` as a repr, cut to ``limit`` characters with its full size when longer."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text.encode('utf-8'))} bytes)"


#: How every guard continuation prompt begins (a hook's reason may come before it, SO-8).
_GUARD_OPENING = guard_texts.continuation_text(attempt=1, unfinished=1).partition("]")[0] + "]"


def message(text: str) -> str:
    """A user message, with the guard's continuation prompts named rather than quoted (after a
    Stop hook's reason and a blank line, when the two were merged into one message)."""
    if not guard_texts.is_guard_prompt(text):
        return short(text, 60)
    if not text.startswith(_GUARD_OPENING):
        start = text.find("\n\n" + _GUARD_OPENING)
        while start != -1:
            hook, prompt = text[:start], text[start + 2:]
            if hook.strip() and guard_texts.is_guard_prompt(prompt):
                return f"{short(hook, 60)} + a blank line + {message(prompt)}"
            start = text.find("\n\n" + _GUARD_OPENING, start + 2)
    final = " + the final-continuation sentence" if "\n\n" in text else ""
    return f"the guard's continuation prompt{final}"


def records(items: Iterable[object]) -> str:
    """The records of one write, ``; ``-separated."""
    parts = []
    for record in items:
        if isinstance(record, r.UserMessageRecord):
            parts.append(f"user message {record.message_id}: {message(record.text)}")
        elif isinstance(record, r.ResponseRecord):
            calls = ", ".join(call.name for call in record.tool_calls) or "no tool calls"
            parts.append(f"response ({calls}; finish reason {record.finish_reason.raw!r})")
        elif isinstance(record, r.ToolResultRecord):
            parts.append(tool_result(record))
        else:
            parts.append(type(record).__name__)
    return "; ".join(parts)


def tool_result(record: r.ToolResultRecord) -> str:
    """A tool result record: the call, its status and why it did not run (``call-3 skipped: the
    user sent a Lead ...``). A reason that starts by naming the status again (the turn writes
    ``Skipped: ...`` for the model's sake) is not made to say it twice."""
    status = record.status.value
    reason = record.reason.strip()
    if reason.lower().startswith(status + ":"):
        reason = reason[len(status) + 1:].lstrip()
    return f"{record.call_id} {status}" + (f": {reason}" if reason else "")


def outcome(ending: r.TurnOutcome) -> str:
    """How a turn ended: kind, message and the engine's raw finish reason."""
    reason = ending.finish_reason.raw if ending.finish_reason else "none"
    return f"{ending.kind.value}: {ending.message} [finish reason {reason!r}]"


def guard_chunk(meta: Mapping[str, Any]) -> str:
    """A guard chunk's ``_meta``, read: which attempt of how many, how many todos unfinished."""
    return (f"attempt {meta.get('attempt')} of {meta.get('maxAttempts')}, "
            f"{meta.get('unfinishedCount')} unfinished")


def written_by(version: str) -> str:
    """Who wrote a trace, from its ``library_version``: ``agentturn 0.1.0``, or another host's
    own name (a Node host writes ``node-host 1``)."""
    return f"agentturn {version}" if version[:1].isdigit() else version


def queued_flag(flag: bool | None) -> str:
    """A drain reply's ``hasQueuedPrompt``: ``True``, ``False`` or ``omitted``."""
    return "omitted" if flag is None else str(flag)


def _fields(item: Any) -> str:
    """``Name field=value ...`` for the fields that differ from their defaults (a lone one by its
    bare value)."""
    shown = []
    for field in attrs.fields(type(item)):
        value = getattr(item, field.name)
        if not field.repr or (field.default is not attrs.NOTHING and value == field.default):
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        shown.append((field.name, value))
    if len(shown) == 1:
        value = shown[0][1]
        return f"{type(item).__name__} {value if isinstance(value, str) else repr(value)}"
    return " ".join([type(item).__name__, *(f"{name}={value!r}" for name, value in shown)])


def _turn_line(item: object) -> str | None:
    """Lines for the turn family's vocabulary."""
    if isinstance(item, e.PromptSubmitted):
        return f"PromptSubmitted {item.turn_id} {short(item.text, 60)}"
    if isinstance(item, e.LeadSubmitted):
        return f"LeadSubmitted {item.lead_id} {short(item.text, 60)}"
    if isinstance(item, e.StreamCompleted):
        calls = ", ".join(call.name for call in item.tool_calls)
        text = short(item.text, 60) if item.text else "no text"
        return (f"StreamCompleted {item.request_id}: {text}"
                + (f", calls {calls}" if calls else "") + f" [{item.finish_reason}]")
    if isinstance(item, e.ToolFinished):
        return f"ToolFinished {item.call_id}: {short(item.output, 60)}"
    if isinstance(item, e.PermissionDecided):
        return f"PermissionDecided {item.call_id}: {item.decision.value}"
    if isinstance(item, e.TitleGenerated):
        return f"TitleGenerated {item.request_id}: {item.title!r}"
    if isinstance(item, c.Persist):
        return f"Persist {item.key}: {records(item.records)}"
    if isinstance(item, c.RequestModelStream):
        extra = f", with Lead {', '.join(item.lead_ids)}" if item.lead_ids else ""
        return f"RequestModelStream {item.request_id} (budget, then open){extra}"
    if isinstance(item, c.ExecuteTool | c.AskPermission):
        return f"{type(item).__name__} {item.call.call_id} {item.call.name}"
    if isinstance(item, c.RequestTitle):
        return f"RequestTitle {item.request_id} (naming runs alone: no tool, no model request)"
    if isinstance(item, c.SetTitle):
        return f"SetTitle {item.title!r}"
    if isinstance(item, c.LeadAccepted):
        return f"LeadAccepted {item.lead_id} (clear the text, keep attachments)"
    if isinstance(item, c.SaveLead):
        return f"SaveLead {item.lead_id} as a user message"
    if isinstance(item, c.ReturnDraft):
        return f"ReturnDraft {item.lead_id} ({item.reason.value}): {item.message}"
    if isinstance(item, c.EndTurn):
        return f"EndTurn {outcome(item.outcome)}"
    return None


def _session_line(item: object) -> str | None:
    """Lines for the session's vocabulary."""
    from ..session import vocabulary as sv
    from ..session.ring import EntryKind

    if isinstance(item, sv.Publish):
        entry = item.entry
        if entry.kind is EntryKind.GUARD_CHUNK:
            return f"Publish guard chunk #{entry.seq} ({guard_chunk(entry.meta or {})}, discrete)"
        if entry.kind is EntryKind.GUARD_EXHAUSTED:
            return f"Publish #{entry.seq} guard exhausted: {entry.text!r}"
        return f"Publish #{entry.seq} {entry.kind.value}"
    if isinstance(item, sv.MidTurnDrained):
        messages = ", ".join(short(m, 60) for m in item.messages) or "no messages"
        return (f"MidTurnDrained {item.drain_id}: {messages}; "
                f"hasQueuedPrompt {queued_flag(item.has_queued_prompt)}")
    if isinstance(item, sv.PromptQueued):
        return f"PromptQueued {item.prompt_id} {short(item.text, 60)}"
    if isinstance(item, sv.StartTimer):
        return f"StartTimer {item.key} ({item.seconds:g} s)"
    if isinstance(item, sv.StopHookDecided):
        verdict = f"block: {item.reason!r}" if item.block else "no block"
        return f"StopHookDecided {item.run_id}: {verdict}"
    return None


def _guard_line(item: object) -> str | None:
    """Lines for the todo stop guard's vocabulary."""
    from .. import guard as g

    if isinstance(item, g.TodoWriteResult):
        counts = g.parse_todo_envelope(item.envelope)
        listed = (f"{counts.total} todos, {counts.unfinished} unfinished" if counts
                  else "a malformed envelope")
        return (f"TodoWriteResult {item.call_id} in {item.turn_id}: "
                f"{'succeeded' if item.succeeded else 'failed'}, {listed}")
    if isinstance(item, g.ContinueWithGuardPrompt):
        return f"ContinueWithGuardPrompt attempt {item.attempt}: {message(item.text)}"
    if isinstance(item, g.EmitAgentMessageChunk):
        return f"EmitAgentMessageChunk ({guard_chunk(item.meta.as_meta())}, discrete)"
    if isinstance(item, g.ReportGuardExhausted):
        return f"ReportGuardExhausted {item.text!r}"
    if isinstance(item, g.StartWorkChain):
        return f"StartWorkChain {item.chain} (snapshot the background baseline)"
    if isinstance(item, g.TodoArgumentsObserved | g.TodoHistoryReplayed | g.TodoDiskStateLoaded
                  | g.SubagentTodoObserved):
        envelope = item.arguments if isinstance(item, g.TodoArgumentsObserved) else item.envelope
        counts = g.parse_todo_envelope(envelope)
        listed = f"{counts.unfinished} of {counts.total} unfinished" if counts else "malformed"
        return f"{type(item).__name__} (a todo list: {listed})"
    return None


def describe(item: object) -> str:
    """One readable line for an event or a command of any part (``repr`` for anything else)."""
    module = type(item).__module__
    if module.startswith("agentturn.session"):
        line = _session_line(item)
    elif module.startswith("agentturn.guard"):
        line = _guard_line(item)
    else:
        line = _turn_line(item)
    if line is not None:
        return line
    if attrs.has(type(item)) and module.startswith("agentturn"):
        return _fields(item)
    return repr(item)


#: Characters shown escaped: C0 and C1 controls (but the newline), DEL, and the invisible
#: characters that reorder or break lines (bidirectional overrides and isolates, U+2028/9).
_UNSAFE = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))
           if code != 0x0A}
_UNSAFE.update({code: f"\\u{code:04x}" for code in (0x061C, 0x180E, 0x200B, 0x200E, 0x200F,
                                                      0x2028, 0x2029, 0xFEFF,
                                                      *range(0x202A, 0x202F),
                                                      *range(0x2066, 0x206A))})
_ONE_LINE = {**_UNSAFE, 0x0A: "\\n"}


def terminal_safe(text: str, one_line: bool = False) -> str:
    """``text`` with every control character shown escaped (``\\x1b`` for ESC), so a file's
    content cannot drive the reader's terminal; lone surrogates are escaped too. With
    ``one_line``, a newline is escaped as well, so a value cannot forge an output line."""
    safe = text.translate(_ONE_LINE if one_line else _UNSAFE)
    return safe.encode("utf-8", "backslashreplace").decode("utf-8")
