"""The notebooks' one helper: feed events to a reducer and show each step as a table row.

``Player(reduce, state).play(...)`` feeds events in order and returns the :class:`Steps` it
took; Jupyter shows them as an HTML table (event in, commands out, phase after), ``print`` as
plain text. Each line comes from :func:`agentturn.tools.render.describe`, the renderer the demo
and ``agentturn explain`` use too.

Steps are numbered as the table numbers them: ``steps[5]`` is the row numbered 5 (not the sixth
from zero), ``steps[10:]`` the rows from 10 on, and ``steps[-1]`` the last row.
``Player.fork()`` starts a second player from the same state and history: states are
immutable, so a shared beginning is played once and each branch goes on from it, numbered on
from where it forked; ``Player.replay(steps)`` feeds another player's events again.

Nothing here decides anything: it calls the reducer it is given and keeps what it returned.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterator
from typing import Any, overload

import attrs

from agentturn.tools.render import describe, short

__all__ = ["Player", "Row", "Steps", "Table", "describe", "short"]


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
    def __getitem__(self, number: int) -> Row: ...

    @overload
    def __getitem__(self, numbers: slice) -> Steps: ...

    def __getitem__(self, number: int | slice) -> Row | Steps:
        """The row numbered ``number`` in the table (``steps[-1]``: the last row); a slice
        selects by number too (``steps[3:6]`` is rows 3, 4 and 5)."""
        if isinstance(number, slice):
            if number.step is not None:
                raise ValueError("steps are selected by number: no step in the slice")
            low = -math.inf if number.start is None else number.start
            high = math.inf if number.stop is None else number.stop
            return Steps([row for row in self.rows if low <= row.number < high])
        if number < 0 and -number <= len(self.rows):  # from the end, as lists count
            return self.rows[number]
        for row in self.rows:
            if row.number == number:
                return row
        numbers = [row.number for row in self.rows]
        shown = f"{numbers[0]} to {numbers[-1]}" if numbers else "none"
        raise IndexError(f"no step numbered {number} here (the rows are numbered {shown})")

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

    def replay(self, steps: Steps) -> Steps:
        """Feed the events of ``steps`` (another player's) again, with their senders and notes."""
        return self.play(*[(row.who, row.event, row.note) for row in steps])

    def fork(self) -> Player:
        """A second player from this one's state and history; the two go on independently."""
        twin = Player(self.reduce, self.state, self.phase)
        twin.history = list(self.history)
        return twin
