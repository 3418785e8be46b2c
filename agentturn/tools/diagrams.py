"""Phase diagrams a person can read: the main-path view of each graph, its caption, and the stop
order as a flowchart, as Mermaid and as Graphviz ``dot`` text.

Theory of operation
-------------------
A part's full graph (:meth:`agentturn.PhaseGraph.mermaid`) draws every declared edge; for the
turn that is 86 arrows, and every phase of the guard and the session carries a self-loop of 20
to 50 events. :func:`main_view` draws the same declaration for a reader, by four rules and
nothing else:

* A self-loop is not drawn: the event is *absorbed* (accepted, the phase stays) and the caption
  lists it, grouped by the phases that absorb it.
* The events a part's :class:`Rules` *fold* (moves that happen from nearly everywhere, such as
  the turn's ``ContinueTurn`` from IDLE into any phase, or Stop) are not drawn either: each
  gets one caption line naming every move it makes.
* A part may have a *hub*, a choice node standing for a set of phases (the turn's "next step":
  where the reducer settles after an answer). An event whose moves from a phase reach every
  phase of the hub is drawn once, to the hub; the hub is drawn once to each of its phases.
* The labels of one arrow are merged, each event once. A label holding a whole named event
  group (:attr:`Rules.groups`) names the group instead, and one holding every event of the
  graph but one or two says "any event but ...". The caption states each group's members.

So every declared edge is either drawn or named in the caption, and nothing is drawn that is
not declared; ``tests/tools/test_diagrams.py`` checks both by reading the drawings back, and
checks the committed SVGs in ``docs/diagrams/`` against the view the same way (Graphviz writes
each edge's ``<title>SOURCE&#45;&gt;DEST</title>``), so no picture can drift from the reducers.
A static graph has no current state, so nothing is coloured.

The stop-order flowchart (:data:`STOP_ORDER`) is written by hand from
:mod:`agentturn.session.stop_order`'s rules; its SVG is checked against it the same way.

Regenerate a picture with ``agentturn diagram PART --format dot | dot -Tsvg -o
docs/diagrams/PART.svg`` (Graphviz is needed only for that, never by the tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = [
    "HUB",
    "PARTS",
    "STOP_ORDER",
    "Flowchart",
    "MainView",
    "Rules",
    "caption",
    "dot",
    "flowchart_dot",
    "flowchart_mermaid",
    "full_view",
    "graph_of",
    "main_view",
    "mermaid",
]

#: The parts the command line draws, by the names ``agentturn diagram`` takes.
PARTS = ("turn", "lead", "titles", "guard", "session")
#: The node name of a hub in every drawing.
HUB = "next_step"
#: Arrows in captions.
ARROW = " → "
#: Labels longer than this many events say "any event but ..." when they can.
_MANY = 6


@attrs.frozen
class Rules:
    """How one part's main view is drawn (presentation only: the edges are the declaration's).

    ``folded``: events whose moves are named in the caption, not drawn. ``hub``: the phases of
    the choice node, and ``hub_label`` its caption text. ``groups``: label names standing for a
    set of events, when an arrow carries all of them.
    """

    folded: tuple[str, ...] = ()
    hub: tuple[str, ...] = ()
    hub_label: str = ""
    groups: tuple[tuple[str, tuple[str, ...]], ...] = ()
    direction: str = "LR"


_STOPS = ("StopPressed", "HardStopped")
#: The session's turn-family events that a running turn takes (the session's ``_IN_TURN``).
_IN_TURN = (
    "StopPressed", "LeadSubmitted", "ManualRename", "AutoTitlePreferenceChanged",
    "PermissionDecided", "ClientDisconnected", "StreamOpened", "StreamCompleted", "StreamFailed",
    "CompactionFailed", "TokenLimitRejected", "ToolFinished", "Persisted", "PersistFailed",
    "LeadSaved", "LeadSaveFailed", "TitleGenerated", "TitleFailed",
)

RULES: Mapping[str, Rules] = {
    "turn": Rules(
        folded=("ContinueTurn", *_STOPS, "PersistFailed"),
        hub=("AWAITING_TITLE", "AWAITING_LEAD_SAVES", "SAVING_RESULTS", "AWAITING_STREAM",
             "AWAITING_PERMISSION", "RUNNING_TOOL", "AWAITING_STOP_DECISION", "ENDING", "IDLE"),
        hub_label="where the reducer settles after an answer, the step the turn needs next",
        direction="TB"),
    "lead": Rules(),
    "titles": Rules(),
    "todo_stop_guard": Rules(folded=("ApprovalModeChanged", "TrustCleared"), direction="TB"),
    "session": Rules(
        folded=("CloseRequested",),
        groups=(("a turn event", _IN_TURN),),
        direction="TB"),
}


@attrs.frozen
class MainView:
    """A part's main-path view: what is drawn and what the caption names."""

    part: str
    initial: str
    phases: tuple[str, ...]
    #: ``(source, destination, label lines)``; the destination may be :data:`HUB`.
    arrows: tuple[tuple[str, str, tuple[str, ...]], ...]
    #: The hub's phases (empty: no hub) and its caption text.
    hub: tuple[str, ...]
    hub_label: str
    #: Label names and the events they stand for (only those used).
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    #: ``(events, ((sources, destinations), ...))``: the folded moves.
    folded: tuple[tuple[tuple[str, ...], tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]], ...]
    #: ``(phases, events)``: the absorbed events; ``phases`` may be ``("every phase",)``.
    absorbed: tuple[tuple[str, tuple[str, ...]], ...]
    direction: str


def graph_of(part: str) -> Any:
    """The phase graph ``agentturn diagram PART`` draws."""
    from .. import LEAD_GRAPH, TITLE_GRAPH, TURN_GRAPH
    from ..guard import GUARD_GRAPH
    from ..session import SESSION_GRAPH

    return {"turn": TURN_GRAPH, "lead": LEAD_GRAPH, "titles": TITLE_GRAPH, "guard": GUARD_GRAPH,
            "session": SESSION_GRAPH}[part]


def _ordered(names: Iterable[str], order: tuple[str, ...]) -> tuple[str, ...]:
    chosen = set(names)
    return tuple(name for name in order if name in chosen)


def _phase_list(phases: Iterable[str], order: tuple[str, ...]) -> str:
    chosen = _ordered(phases, order)
    if chosen == order:
        return "every phase"
    missing = [phase for phase in order if phase not in chosen]
    if len(chosen) > 3 and len(missing) <= 2:
        return "every phase but " + ", ".join(missing)
    return ", ".join(chosen)


def main_view(graph: Any) -> MainView:
    """The main-path view of ``graph`` (a :class:`agentturn.PhaseGraph`), by the module's rules."""
    rules = RULES[graph.part]
    phases = tuple(phase.name for phase in graph.phases)
    events: tuple[str, ...] = graph.events()
    for name in (*rules.folded, *(e for _, members in rules.groups for e in members)):
        if name not in events:
            raise ValueError(f"{graph.part}: the view names {name!r}, which the graph lacks")
    for phase in rules.hub:
        if phase not in phases:
            raise ValueError(f"{graph.part}: the hub names {phase!r}, which is no phase")
    absorbed: dict[str, set[str]] = {}
    folded: dict[str, set[tuple[str, str]]] = {}
    moves: dict[tuple[str, str], set[str]] = {}
    for source, event, dest in graph.edges():
        if source == dest:
            absorbed.setdefault(event, set()).add(source)
        elif event in rules.folded:
            folded.setdefault(event, set()).add((source, dest))
        else:
            moves.setdefault((source, event), set()).add(dest)
    drawn: dict[tuple[str, str], set[str]] = {}
    hub = set(rules.hub)
    for (source, event), dests in moves.items():
        if hub and hub - {source} <= dests:
            drawn.setdefault((source, HUB), set()).add(event)
            dests = dests - hub
        for dest in dests:
            drawn.setdefault((source, dest), set()).add(event)
    used_groups: dict[str, tuple[str, ...]] = {}

    def label(names: set[str]) -> tuple[str, ...]:
        if len(names) > _MANY and len(missing := set(events) - names) <= 2:
            return ("any event but " + ", ".join(_ordered(missing, events)),)
        lines = []
        for group, members in rules.groups:
            if set(members) <= names:
                used_groups[group] = members
                names = names - set(members)
                lines.append(group)
        return (*lines, *_ordered(names, events))

    node_order = (*phases, HUB)
    arrows = tuple(
        (source, dest, label(names)) for (source, dest), names in sorted(
            drawn.items(), key=lambda item: (node_order.index(item[0][0]),
                                             node_order.index(item[0][1]))))
    if hub:
        arrows += tuple((HUB, phase, ()) for phase in _ordered(hub, phases))
    by_moves: dict[frozenset[tuple[str, str]], list[str]] = {}
    for event in _ordered(folded, events):
        by_moves.setdefault(frozenset(folded[event]), []).append(event)
    folded_lines = []
    for pairs, names in by_moves.items():
        by_sources: dict[tuple[str, ...], list[str]] = {}
        for source in phases:
            reached = _ordered((d for s, d in pairs if s == source), phases)
            if reached:
                by_sources.setdefault(reached, []).append(source)
        folded_lines.append((tuple(names), tuple((tuple(sources), dests)
                                                 for dests, sources in by_sources.items())))
    by_phases: dict[str, list[str]] = {}
    for event in _ordered(absorbed, events):
        by_phases.setdefault(_phase_list(absorbed[event], phases), []).append(event)
    absorbed_lines = sorted(((where, tuple(names)) for where, names in by_phases.items()),
                            key=lambda line: (not line[0].startswith("every"), -len(line[1])))
    return MainView(
        part=graph.part, initial=graph.initial.name, phases=phases, arrows=arrows,
        hub=_ordered(hub, phases), hub_label=rules.hub_label,
        groups=tuple((name, used_groups[name]) for name, _ in rules.groups
                     if name in used_groups),
        folded=tuple(folded_lines), absorbed=tuple(absorbed_lines), direction=rules.direction)


def full_view(graph: Any) -> MainView:
    """Every declared edge of ``graph``, self-loops included, each arrow's labels merged (the
    view ``agentturn diagram PART --full --format dot`` draws)."""
    phases = tuple(phase.name for phase in graph.phases)
    events: tuple[str, ...] = graph.events()
    drawn: dict[tuple[str, str], set[str]] = {}
    for source, event, dest in graph.edges():
        drawn.setdefault((source, dest), set()).add(event)
    arrows = tuple((source, dest, (" | ".join(_ordered(names, events)),))
                   for (source, dest), names in sorted(
                       drawn.items(), key=lambda item: (phases.index(item[0][0]),
                                                        phases.index(item[0][1]))))
    return MainView(part=graph.part, initial=graph.initial.name, phases=phases, arrows=arrows,
                    hub=(), hub_label="", groups=(), folded=(), absorbed=(), direction="LR")


def caption(view: MainView) -> list[str]:
    """The caption's lines: the hub, the groups, the folded moves, the absorbed events."""
    lines = []
    if view.hub:
        lines.append(f"◇ next step: {view.hub_label}: one of {', '.join(view.hub)}.")
    for name, members in view.groups:
        lines.append(f'"{name}": any of {", ".join(members)}.')
    for names, pairs in view.folded:
        moves = "; ".join(f"{', '.join(sources)}{ARROW}{', '.join(dests)}"
                          for sources, dests in pairs)
        lines.append(f"not drawn: {', '.join(names)}: {moves}.")
    for where, names in view.absorbed:
        lines.append(f"absorbed in {where}: {', '.join(names)}.")
    return lines


def mermaid(view: MainView) -> str:
    """The main view as a Mermaid ``stateDiagram-v2``, its caption as ``%%`` comments."""
    lines = ["---", f"title: {view.part} (main path)", "---", "stateDiagram-v2",
             f"  direction {view.direction}"]
    if view.hub:
        lines.append(f"  state {HUB} <<choice>>")
    lines.append(f"  [*] --> {view.initial}")
    linked = {node for source, dest, _ in view.arrows for node in (source, dest)}
    lines.extend(f"  {phase}" for phase in view.phases
                 if phase not in linked and phase != view.initial)
    for source, dest, label in view.arrows:
        lines.append(f"  {source} --> {dest}" + (f": {' | '.join(label)}" if label else ""))
    lines.extend(f"%% {line}" for line in caption(view))
    return "\n".join(lines)


def _quoted(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _two_lines(phase: str) -> str:
    """A long phase name broken after its first underscore (``AWAITING_`` / ``PERMISSION``):
    the boxes narrow enough that a drawing fits a page at a readable size."""
    head, underscore, rest = phase.partition("_")
    return f"{head}_\n{rest}" if underscore and len(phase) > 9 else phase


def _wrapped(line: str, width: int = 95) -> list[str]:
    """``line`` broken at commas into lines of at most about ``width`` characters."""
    out: list[str] = []
    current = ""
    for word in line.split(" "):
        if current and len(current) + 1 + len(word) > width:
            out.append(current)
            current = "    " + word
        else:
            current = f"{current} {word}" if current else word
    return [*out, current]


_GRAPH_STYLE = ('  graph [fontname="Helvetica", fontsize=11, labeljust=l, labelloc=b, '
                'nodesep=0.3, ranksep=0.45];\n'
                '  node [fontname="Helvetica", fontsize=12, shape=box, style=rounded, '
                'margin="0.08,0.04"];\n'
                '  edge [fontname="Helvetica", fontsize=10];\n')


def dot(view: MainView) -> str:
    """The main view as Graphviz ``dot`` text, its caption as the graph's label."""
    text = "\n".join(wrapped for line in caption(view) for wrapped in _wrapped(line))
    label = "".join(line.replace("\\", "\\\\").replace('"', '\\"') + "\\l"
                    for line in text.splitlines())
    out = [f"digraph {_quoted(view.part)} {{",
           f'  graph [rankdir={view.direction}, label="{label}"];', _GRAPH_STYLE.rstrip("\n"),
           '  start [shape=point, width=0.15, label=""];', f"  start -> {view.initial};"]
    out.extend(f"  {phase} [label={_quoted(_two_lines(phase))}];" for phase in view.phases)
    if view.hub:
        out.append(f'  {HUB} [shape=diamond, style="", label="next\\nstep", fontsize=10];')
    for source, dest, label_lines in view.arrows:
        attributes = (f' [label={_quoted(chr(10).join(label_lines))}]' if label_lines
                      else ' [style=dashed, color="#555555"]')
        out.append(f"  {source} -> {dest}{attributes};")
    out.append("}")
    return "\n".join(out) + "\n"


@attrs.frozen
class Flowchart:
    """A small decision flowchart: ``nodes`` are ``(id, shape, text)`` with shape ``start``,
    ``question`` or ``step``; ``edges`` are ``(source, dest, label)``."""

    title: str
    nodes: tuple[tuple[str, str, str], ...]
    edges: tuple[tuple[str, str, str], ...]


#: The session's stop order (``agentturn.session.stop_order``), rule by rule (SO-1 ... SO-8).
STOP_ORDER = Flowchart(
    title="stop order",
    nodes=(
        ("stop", "start", "The model stops naturally (DecideNaturalStop)"),
        ("daemon", "question", "A daemon session?"),
        ("drain", "step", "Drain the client's mid-turn messages\n(DrainMidTurnQueue, StartTimer)"),
        ("midturn", "question", "Mid-turn input?\n(drained messages, or a saved Lead)"),
        ("lead", "step", "They become Lead instructions;\nthe turn continues with them\n"
                         "(no Stop hooks, no guard; the guard's stage restarts)"),
        ("queued", "question", "A complete queued prompt?"),
        ("prompt", "step", "The turn ends; the queued prompt runs next\n"
                           "(the guard's chain waits for it)"),
        ("foreground", "question", "A foreground turn\nwith Stop hooks?"),
        ("hooks", "step", "Run the Stop hooks (RunStopHooks;\n"
                          "at most 8 consecutive blocks)"),
        ("guard", "step", "The todo stop guard decides"),
        ("continue", "step", "A hook block and/or a guard continuation:\n"
                             "one continuation message\n(the hook's reason, a blank line, "
                             "the guard's text)"),
        ("end", "step", "Nothing continues: the turn ends"),
    ),
    edges=(
        ("stop", "daemon", ""),
        ("daemon", "drain", "yes"),
        ("daemon", "queued", "no"),
        ("drain", "midturn", "reply or timeout"),
        ("midturn", "lead", "yes"),
        ("midturn", "queued", "no"),
        ("queued", "prompt", "yes"),
        ("queued", "foreground", "no"),
        ("foreground", "hooks", "yes"),
        ("foreground", "guard", "no"),
        ("hooks", "lead", "a Lead saved meanwhile"),
        ("hooks", "prompt", "a prompt queued meanwhile"),
        ("hooks", "guard", "neither"),
        ("guard", "continue", "it continues, or a hook blocked"),
        ("guard", "end", "neither"),
    ),
)


def flowchart_mermaid(chart: Flowchart) -> str:
    """``chart`` as a Mermaid ``flowchart``."""
    shapes = {"start": ('(["', '"])'), "question": ('{"', '"}'), "step": ('["', '"]')}
    lines = ["---", f"title: {chart.title}", "---", "flowchart TD"]
    for node, shape, text in chart.nodes:
        opening, closing = shapes[shape]
        lines.append(f"  {node}{opening}{text.replace(chr(10), '<br>')}{closing}")
    for source, dest, label in chart.edges:
        lines.append(f"  {source} -->|{label}| {dest}" if label else f"  {source} --> {dest}")
    return "\n".join(lines)


def flowchart_dot(chart: Flowchart) -> str:
    """``chart`` as Graphviz ``dot`` text."""
    shapes = {"start": 'shape=box, style="rounded,bold"', "question": 'shape=diamond, style=""',
              "step": "shape=box, style=rounded"}
    out = [f"digraph {_quoted(chart.title)} {{", "  graph [rankdir=TB];",
           _GRAPH_STYLE.rstrip("\n")]
    for node, shape, text in chart.nodes:
        out.append(f"  {node} [{shapes[shape]}, label={_quoted(text)}];")
    for source, dest, label in chart.edges:
        out.append(f"  {source} -> {dest}" + (f" [label={_quoted(label)}];" if label else ";"))
    out.append("}")
    return "\n".join(out) + "\n"
