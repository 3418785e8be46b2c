"""The notebooks' one helper: feed events to a reducer and show each step as a table row.

``Player(reduce, state).play(...)`` feeds events in order and returns the :class:`Steps` it
took; Jupyter shows them as an HTML table (event in, commands out, phase after), ``print`` as
plain text. Each line comes from :func:`agentturn.tools.demo.describe_event` and
:func:`agentturn.tools.demo.describe_command`, with a few lines of its own for the Lead queue, the
todo stop guard and the session, whose events and commands the demo's turn does not tell.

Nothing here decides anything: it calls the reducer it is given and keeps what it returned.
"""

from __future__ import annotations

import enum
import html
from collections.abc import Callable, Iterator
from typing import Any, overload

import attrs

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn.tools.demo import describe_command, describe_event

__all__ = ["Player", "Row", "Steps", "Table", "describe", "short"]


def short(text: str, limit: int = 90) -> str:
    """``text`` as a repr, cut to ``limit`` characters with its full size when longer."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text.encode('utf-8'))} bytes)"


def _message(text: str) -> str:
    """A user message, with the guard's continuation prompts named rather than quoted."""
    hook, _, rest = text.partition("\n\n")
    if g.is_guard_prompt(text):
        final = " + the final-continuation sentence" if rest else ""
        return f"the guard's continuation prompt{final}"
    if rest and g.is_guard_prompt(rest):
        return f"{hook!r} + a blank line + {_message(rest)}"
    return short(text, 60)


def _fields(item: Any) -> str:
    """``Name field=value ...`` for the fields that differ from their defaults."""
    shown = []
    for field in attrs.fields(type(item)):
        value = getattr(item, field.name)
        if not field.repr or (field.default is not attrs.NOTHING and value == field.default):
            continue
        if isinstance(value, enum.Enum):
            value = value.value
        shown.append(f"{field.name}={value!r}")
    return " ".join([type(item).__name__, *shown])


def _record(record: object) -> str:
    if isinstance(record, at.UserMessageRecord):
        return f"user message {record.message_id}: {_message(record.text)}"
    if isinstance(record, at.ResponseRecord):
        calls = ", ".join(call.name for call in record.tool_calls) or "no tool calls"
        return f"response ({calls}; finish reason {record.finish_reason.raw!r})"
    if isinstance(record, at.ToolResultRecord):
        reason = f": {record.reason}" if record.reason else ""
        return f"{record.call_id} {record.name} {record.status.value}{reason}"
    return type(record).__name__


def _session(item: object) -> str | None:
    """Lines for the session's own vocabulary."""
    if isinstance(item, se.Publish):
        entry = item.entry
        if entry.kind is se.EntryKind.GUARD_CHUNK:
            return f"Publish #{entry.seq} guard chunk, _meta {dict(entry.meta or {})}"
        if entry.kind is se.EntryKind.GUARD_EXHAUSTED:
            return f"Publish #{entry.seq} guard exhausted: {entry.text!r}"
        return f"Publish #{entry.seq} {entry.kind.value}"
    if isinstance(item, se.MidTurnDrained):
        flag = "omitted" if item.has_queued_prompt is None else item.has_queued_prompt
        messages = ", ".join(short(m, 60) for m in item.messages) or "no messages"
        return f"MidTurnDrained {item.drain_id}: {messages}; hasQueuedPrompt {flag}"
    if isinstance(item, se.PromptQueued):
        return f"PromptQueued {item.prompt_id} {short(item.text, 60)}"
    if isinstance(item, se.StartTimer):
        return f"StartTimer {item.key} ({item.seconds:g} s)"
    if isinstance(item, se.StopHookDecided):
        verdict = f"block: {item.reason!r}" if item.block else "no block"
        return f"StopHookDecided {item.run_id}: {verdict}"
    return None


def describe(item: object) -> str:
    """One readable line for an event or a command of any part."""
    session_line = _session(item)
    if session_line is not None:
        return session_line
    if isinstance(item, at.LeadSubmitted):
        return f"LeadSubmitted {item.lead_id} in {item.chat_id}: {short(item.text, 60)}"
    if isinstance(item, at.ReturnDraft):
        return f"ReturnDraft {item.lead_id} ({item.reason.value}): {item.message}"
    if isinstance(item, at.Persist):
        return f"Persist {item.key}: " + "; ".join(_record(r) for r in item.records)
    if isinstance(item, at.ManualRename):
        return f"ManualRename {item.title!r}"
    if isinstance(item, at.TitleGenerated):
        return f"TitleGenerated {item.request_id}: {item.title!r}"
    if isinstance(item, g.TodoWriteResult):
        counts = g.parse_todo_envelope(item.envelope)
        listed = (f"{counts.total} todos, {counts.unfinished} unfinished" if counts
                  else "a malformed envelope")
        return (f"TodoWriteResult {item.call_id} in {item.turn_id}: "
                f"{'succeeded' if item.succeeded else 'failed'}, {listed}")
    if isinstance(item, g.ContinueWithGuardPrompt):
        return f"ContinueWithGuardPrompt attempt {item.attempt}: {item.text!r}"
    if isinstance(item, g.EmitAgentMessageChunk):
        return f"EmitAgentMessageChunk (discrete), _meta {item.meta.as_meta()}"
    if isinstance(item, g.ReportGuardExhausted):
        return f"ReportGuardExhausted {item.text!r}"
    if isinstance(item, g.StartWorkChain):
        return f"StartWorkChain {item.chain} (snapshot the background baseline)"
    if isinstance(item, at.RequestTitle):
        return f"RequestTitle {item.request_id} (it runs alone: no tool, no model request)"
    if isinstance(item, g.TodoArgumentsObserved | g.TodoHistoryReplayed | g.TodoDiskStateLoaded
                  | g.SubagentTodoObserved):
        envelope = item.arguments if isinstance(item, g.TodoArgumentsObserved) else item.envelope
        counts = g.parse_todo_envelope(envelope)
        listed = f"{counts.unfinished} of {counts.total} unfinished" if counts else "malformed"
        return f"{type(item).__name__} (a todo list: {listed})"
    if type(item).__module__.startswith(("agentturn.guard", "agentturn.session")):
        return _fields(item)
    if isinstance(item, at.Event):
        return describe_event(item)
    if isinstance(item, at.Command):
        return describe_command(item)
    return repr(item)


@attrs.frozen
class Row:
    """One step: who sent the event, the event, the commands it gave, the state after it."""

    number: int
    who: str
    event: Any
    commands: tuple[Any, ...]
    state: Any = attrs.field(repr=False)
    phase: str
    note: str = ""


class Steps:
    """The rows of one or more :meth:`Player.play` calls; shows itself as a table."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows)

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> Steps: ...

    def __getitem__(self, index: int | slice) -> Row | Steps:
        if isinstance(index, slice):
            return Steps(self.rows[index])
        return self.rows[index]

    @property
    def commands(self) -> list[Any]:
        """Every command of these steps, in order."""
        return [command for row in self.rows for command in row.commands]

    def of(self, kind: type | tuple[type, ...]) -> list[Any]:
        """Every command of these steps that is a ``kind``."""
        return [command for command in self.commands if isinstance(command, kind)]

    def __repr__(self) -> str:
        lines = []
        for row in self.rows:
            who = f"{row.who:<8} " if row.who else ""
            lines.append(f"{row.number:>3}  {who}> {describe(row.event)}   [{row.phase}]")
            lines.extend(f"{'':>5}< {describe(command)}" for command in row.commands)
            if row.note:
                lines.append(f"{'':>7}({row.note})")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cell = 'style="text-align:left; vertical-align:top; white-space:pre-wrap"'
        head = "".join(f"<th {cell}>{name}</th>" for name in
                       ("#", "from", "event in", "commands out", "phase after"))
        body = []
        for row in self.rows:
            commands = "<br>".join(html.escape(describe(c)) for c in row.commands) or "-"
            if row.note:
                commands += f"<br><i>({html.escape(row.note)})</i>"
            body.append(
                f"<tr><td {cell}>{row.number}</td><td {cell}>{html.escape(row.who)}</td>"
                f"<td {cell}>{html.escape(describe(row.event))}</td>"
                f"<td {cell}>{commands}</td><td {cell}>{html.escape(row.phase)}</td></tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Table:
    """A small table of values (a header and rows), shown like :class:`Steps`."""

    def __init__(self, header: tuple[str, ...], rows: list[tuple[object, ...]]) -> None:
        self.header = header
        self.rows = rows

    def __repr__(self) -> str:
        lines = (self.header, *self.rows)
        widths = [max(len(str(v)) for v in column) for column in zip(*lines, strict=True)]
        return "\n".join("  ".join(f"{v!s:<{w}}" for v, w in zip(line, widths, strict=True))
                         .rstrip() for line in lines)

    def _repr_html_(self) -> str:
        cell = 'style="text-align:left"'
        head = "".join(f"<th {cell}>{html.escape(name)}</th>" for name in self.header)
        body = "".join("<tr>" + "".join(f"<td {cell}>{html.escape(str(v))}</td>" for v in row)
                       + "</tr>" for row in self.rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _phase(state: Any) -> str:
    """The phase of any part's state: its ``phase`` (or a Lead queue's ``admission``)."""
    phase = getattr(state, "phase", None) or getattr(state, "admission", None)
    return phase.name if phase is not None else type(state).__name__


class Player:
    """Feeds events to ``reduce`` one at a time, keeping the state and every step.

    ``phase(state)`` gives the text of the "phase after" column (by default the state's phase).
    """

    def __init__(self, reduce: Callable[[Any, Any], Any], state: Any,
                 phase: Callable[[Any], str] = _phase) -> None:
        self.reduce = reduce
        self.state = state
        self.phase = phase
        self.history: list[Row] = []

    def play(self, *items: Any) -> Steps:
        """Feed each item: an event, ``(who, event)`` or ``(who, event, note)``.

        Returns the steps of this call. A ``ProtocolError`` propagates with the state unchanged.
        """
        rows = []
        for item in items:
            who, event, note = "", item, ""
            if isinstance(item, tuple):
                who, event, *rest = item
                note = rest[0] if rest else ""
            self.state, commands = self.reduce(self.state, event)
            row = Row(len(self.history) + 1, who, event, tuple(commands), self.state,
                      self.phase(self.state), note)
            self.history.append(row)
            rows.append(row)
        return Steps(rows)

    @property
    def steps(self) -> Steps:
        """Every step so far."""
        return Steps(list(self.history))
