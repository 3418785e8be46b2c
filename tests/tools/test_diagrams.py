"""The readable diagrams: each main-path view is its declaration (every edge drawn or named in
the caption, nothing else drawn), and each committed SVG in docs/diagrams/ is its view.

The drawings are read back as a reader's tool would (Mermaid lines, the SVG's edge titles and
texts), never through the code that made them.
"""

from __future__ import annotations

import html
import pathlib
import re
from typing import Any

import pytest

from agentturn.tools import diagrams
from agentturn.tools.cli import main

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "diagrams"
PAGE = DOCS.parent / "diagrams.md"
#: The page's section of each part.
SECTIONS = {"turn": "The turn", "lead": "Lead", "titles": "Titles",
            "guard": "The todo stop guard", "session": "The session"}
REGENERATE = "agentturn diagram {name} --format dot | dot -Tsvg -o docs/diagrams/{name}.svg"


def names(text: str) -> list[str]:
    return [name.strip() for name in text.rstrip(".").split(",")]


def phases_of(where: str, every: tuple[str, ...]) -> set[str]:
    if where == "every phase":
        return set(every)
    if where.startswith("every phase but "):
        return set(every) - set(names(where.removeprefix("every phase but ")))
    return set(names(where))


def read_back(text: str, graph: Any) -> tuple[set[tuple[str, str, str]], set[tuple[str, str, str]]]:
    """The edges a main-path Mermaid text draws, and the edges its caption names."""
    every = tuple(phase.name for phase in graph.phases)
    events = graph.events()
    hub: set[str] = set()
    groups: dict[str, list[str]] = {}
    named: set[tuple[str, str, str]] = set()
    for line in text.splitlines():
        if not line.startswith("%% "):
            continue
        line = line.removeprefix("%% ")
        if line.startswith("◇ next step: "):
            hub = set(names(line.rsplit("one of ", 1)[1]))
        elif match := re.fullmatch(r'"(.+)": any of (.+)', line):
            groups[match[1]] = names(match[2])
        elif match := re.fullmatch(r"not drawn: ([\w, ]+): (.+)\.", line):
            for moves in match[2].split("; "):
                sources, dests = moves.split(" → ")
                named |= {(s, e, d) for e in names(match[1]) for s in names(sources)
                          for d in names(dests)}
        elif match := re.fullmatch(r"absorbed in ([\w, ]+): (.+)", line):
            named |= {(p, e, p) for p in phases_of(match[1], every) for e in names(match[2])}
        else:
            raise AssertionError(f"a caption line nobody reads: {line!r}")
    drawn: set[tuple[str, str, str]] = set()
    for line in text.splitlines():
        match = re.fullmatch(r"  (\w+) --> (\w+)(?:: (.+))?", line)
        if not match or match[1] == diagrams.HUB:
            continue
        source, dest, label = match.groups()
        assert label, f"an unlabelled arrow from a phase: {line!r}"
        tokens = label.split(" | ")
        assert len(tokens) == len(set(tokens)), f"a repeated label: {line!r}"
        for token in tokens:
            if token.startswith("any event but "):
                triggers = set(events) - set(names(token.removeprefix("any event but ")))
            else:
                triggers = set(groups.get(token, [token]))
            targets = hub - {source} if dest == diagrams.HUB else {dest}
            drawn |= {(source, trigger, target) for trigger in triggers for target in targets}
    return drawn, named


@pytest.mark.parametrize("part", diagrams.PARTS)
def test_the_main_view_is_the_declaration(part: str) -> None:
    """Every declared edge is drawn or named in the caption; nothing drawn is undeclared; no
    self-loop is drawn, no label repeated, nothing styled."""
    graph = diagrams.graph_of(part)
    text = diagrams.mermaid(diagrams.main_view(graph))
    drawn, named = read_back(text, graph)
    declared = set(graph.edges())
    assert drawn <= declared, f"drawn but not declared: {sorted(drawn - declared)[:5]}"
    assert drawn | named == declared, f"lost: {sorted(declared - drawn - named)[:5]}"
    assert not {(s, e, d) for s, e, d in drawn if s == d}
    assert not re.search(r"classDef|Class |s_active|:::", text)


@pytest.mark.parametrize("part", diagrams.PARTS)
def test_the_full_view_has_no_current_state_and_each_label_once(part: str) -> None:
    text = diagrams.graph_of(part).mermaid()
    assert not re.search(r"classDef|Class |s_active", text)
    for line in text.splitlines():
        if ": " in line and "-->" in line:
            tokens = line.split(": ", 1)[1].split(" | ")
            assert len(tokens) == len(set(tokens)), line


def test_the_turn_view_folds_the_wildcards_into_its_caption() -> None:
    """ContinueTurn from IDLE to every phase and Stop from every busy phase are one caption
    line each; the answers that settle on the next step are drawn to one choice node."""
    view = diagrams.main_view(diagrams.graph_of("turn"))
    lines = diagrams.caption(view)
    assert ("not drawn: ContinueTurn: IDLE → SAVING_PROMPT, AWAITING_STREAM, SAVING_RESPONSE, "
            "AWAITING_PERMISSION, RUNNING_TOOL, SAVING_RESULTS, AWAITING_TITLE, "
            "AWAITING_LEAD_SAVES, AWAITING_STOP_DECISION, ENDING.") in lines
    assert lines[-1] == "absorbed in AWAITING_STOP_DECISION: NaturalStopDecided."
    assert not [arrow for arrow in view.arrows if "ContinueTurn" in arrow[2]]
    into_hub = {source for source, dest, _ in view.arrows if dest == diagrams.HUB}
    assert into_hub == {"SAVING_PROMPT", "SAVING_RESPONSE", "SAVING_RESULTS", "AWAITING_TITLE",
                        "AWAITING_LEAD_SAVES", "AWAITING_STOP_DECISION"}
    assert len(view.arrows) < 35  # the full graph draws 86 arrows


def test_a_view_naming_an_event_the_graph_lacks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(diagrams.RULES, "lead", diagrams.Rules(folded=("LeadWithdrawn",)))
    with pytest.raises(ValueError, match="LeadWithdrawn"):
        diagrams.main_view(diagrams.graph_of("lead"))


def svg_parts(path: pathlib.Path) -> tuple[set[tuple[str, str, tuple[str, ...]]], str]:
    """An SVG's edges as ``(source, dest, label lines)`` and the text outside nodes and edges."""
    svg = path.read_text(encoding="utf-8")
    edges = set()
    for title, body in re.findall(
            r'<g id="edge\d+" class="edge">\s*<title>(.*?)</title>(.*?)</g>', svg, re.S):
        source, dest = html.unescape(title).split("->")
        texts = tuple(html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", body))
        edges.add((source, dest, texts))
    rest = re.sub(r'<g id="(?:node|edge)\d+" class="(?:node|edge)">.*?</g>', "", svg, flags=re.S)
    caption = " ".join(html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", rest))
    return edges, caption


@pytest.mark.parametrize("part", diagrams.PARTS)
def test_the_committed_svg_is_the_main_view(part: str) -> None:
    view = diagrams.main_view(diagrams.graph_of(part))
    edges, caption = svg_parts(DOCS / f"{part}.svg")
    expected = {(s, d, labels) for s, d, labels in view.arrows} | {("start", view.initial, ())}
    fix = "regenerate it: " + REGENERATE.format(name=part)
    assert edges == expected, f"docs/diagrams/{part}.svg differs from the view; {fix}"
    words = " ".join(diagrams.caption(view)).split()
    assert caption.split()[-len(words):] == words, f"the SVG's caption is stale; {fix}"


def test_the_committed_stop_order_svg_is_the_flowchart() -> None:
    chart = diagrams.STOP_ORDER
    edges, _ = svg_parts(DOCS / "stop-order.svg")
    assert edges == {(s, d, (label,) if label else ()) for s, d, label in chart.edges}, (
        "regenerate it: " + REGENERATE.format(name="stop-order"))
    svg = html.unescape((DOCS / "stop-order.svg").read_text(encoding="utf-8"))
    for _, _, text in chart.nodes:
        assert all(f">{line}</text>" in svg for line in text.splitlines()), text


def test_the_stop_order_follows_the_rules_in_order() -> None:
    """Drain, then mid-turn input wins, else a queued prompt, else Stop hooks, else the guard."""
    chart = diagrams.STOP_ORDER
    nodes = {node: text for node, _, text in chart.nodes}
    step = {(s, label): d for s, d, label in chart.edges}
    assert step[("daemon", "yes")] == "drain" and step[("midturn", "yes")] == "lead"
    assert step[("midturn", "no")] == step[("daemon", "no")] == "queued"
    assert step[("queued", "yes")] == "prompt" and step[("queued", "no")] == "foreground"
    assert step[("foreground", "yes")] == "hooks" and step[("hooks", "neither")] == "guard"
    assert "Lead instructions" in nodes["lead"] and "RunStopHooks" in nodes["hooks"]
    text = diagrams.flowchart_mermaid(chart)
    assert text.splitlines()[3] == "flowchart TD"
    assert len(re.findall(r"-->", text)) == len(chart.edges)


def test_the_command_line_draws_both_views_and_both_formats(
        capsys: pytest.CaptureFixture[str]) -> None:
    graph = diagrams.graph_of("titles")
    assert main(["diagram", "titles"]) == 0
    assert capsys.readouterr().out.strip() == diagrams.mermaid(diagrams.main_view(graph))
    assert main(["diagram", "titles", "--full"]) == 0
    assert capsys.readouterr().out.strip() == graph.mermaid().strip()
    assert main(["diagram", "titles", "--format", "dot"]) == 0
    assert capsys.readouterr().out.strip() == diagrams.dot(diagrams.main_view(graph)).strip()
    assert main(["diagram", "titles", "--format", "caption"]) == 0
    assert capsys.readouterr().out.splitlines() == diagrams.caption(diagrams.main_view(graph))
    assert main(["diagram", "stop-order", "--format", "dot"]) == 0
    assert capsys.readouterr().out.strip() == diagrams.flowchart_dot(diagrams.STOP_ORDER).strip()
    assert main(["diagram", "stop-order"]) == 0
    assert "flowchart TD" in capsys.readouterr().out
    assert main(["diagram", "titles", "--format", "png"]) == 2
    assert "invalid choice: 'png'" in capsys.readouterr().err


@pytest.mark.parametrize("part", diagrams.PARTS)
def test_the_docs_page_shows_the_svg_and_its_current_caption(part: str) -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert page.startswith("# Phase diagrams\n")
    section = page.split(f"\n## {SECTIONS[part]}\n", 1)[1].split("\n## ", 1)[0]
    assert f"```{{image}} diagrams/{part}.svg\n" in section
    bullets = [line.removeprefix("- ") for line in section.splitlines() if line.startswith("- ")]
    assert bullets == diagrams.caption(diagrams.main_view(diagrams.graph_of(part))), (
        f"docs/diagrams.md: the caption of {part} is stale; one bullet per line of "
        f"agentturn diagram {part} --format caption")
