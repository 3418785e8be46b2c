"""The notebooks of examples/notebooks: committed without outputs, diagrams equal to the graphs,
each ending with what a host author does next.

Executing them is ``pytest --nbmake examples/notebooks`` (the ``notebooks`` extra). This file
reads them only, with nbformat, and is skipped where nbformat is not installed. A diagram cell
shows the part's committed SVG (which GitHub, GitLab and nbviewer display; none of them draws
Mermaid in a notebook) with the main-path view's caption beneath it.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import agentturn as at
from agentturn import guard, session
from agentturn.tools import diagrams

nbformat = pytest.importorskip("nbformat")

NOTEBOOKS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "notebooks"
#: Each notebook and the phase graph its Mermaid cell draws.
GRAPHS: dict[str, at.PhaseGraph[Any]] = {
    "01_turn_lifecycle.ipynb": at.TURN_GRAPH,
    "02_lead.ipynb": at.LEAD_GRAPH,
    "03_titles.ipynb": at.TITLE_GRAPH,
    "04_todo_stop_guard.ipynb": guard.GUARD_GRAPH,
    "05_session_stop_order.ipynb": session.SESSION_GRAPH,
}
RUN = ".venv/bin/pip install -e '.[test,notebooks]' && .venv/bin/python -m pytest --nbmake " \
      "examples/notebooks"
FIX = "run .venv/bin/python examples/notebooks/tidy.py"
#: The name ``agentturn diagram`` and docs/diagrams/ give each graph.
PART_NAMES = {"turn": "turn", "lead": "lead", "titles": "titles", "todo_stop_guard": "guard",
              "session": "session"}


def read(name: str) -> Any:
    return nbformat.read(NOTEBOOKS / name, as_version=nbformat.NO_CONVERT)


def test_every_notebook_is_checked_here() -> None:
    assert sorted(path.name for path in NOTEBOOKS.glob("*.ipynb")) == sorted(GRAPHS)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_notebook_is_committed_without_outputs(name: str) -> None:
    notebook = read(name)
    nbformat.validate(notebook)
    untidy = [number for number, cell in enumerate(notebook.cells, 1)
              if cell.cell_type == "code"
              and (cell.outputs or cell.execution_count is not None
                   or "execution" in cell.metadata)]
    assert not untidy, f"{name}: cells {untidy} hold outputs or execution counts; {FIX}"
    language = notebook.metadata.get("language_info")
    assert language == {"name": "python"}, f"{name}: interpreter details in metadata; {FIX}"


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_diagram_cell_shows_the_svg_and_the_current_caption(name: str) -> None:
    """One Markdown cell shows the part's SVG, and lists beneath it exactly the main view's
    caption; no cell holds Mermaid, which code hosts show as raw text."""
    part = PART_NAMES[GRAPHS[name].part]
    markdown = [cell.source for cell in read(name).cells if cell.cell_type == "markdown"]
    assert not [source for source in markdown if "```mermaid" in source], f"{name}: Mermaid"
    link = f"](../../docs/diagrams/{part}.svg)"
    cells = [source for source in markdown if link in source]
    assert len(cells) == 1, f"{name}: expected one cell showing {part}.svg, found {len(cells)}"
    assert (NOTEBOOKS / "../../docs/diagrams" / f"{part}.svg").resolve().is_file()
    bullets = [line.removeprefix("- ") for line in cells[0].splitlines() if line.startswith("- ")]
    caption = diagrams.caption(diagrams.main_view(GRAPHS[name]))
    assert bullets == caption, f"{name}: the caption differs from {part}'s graph; {FIX}"
    assert f"agentturn diagram {part} --full" in cells[0]


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_notebook_ends_with_what_a_host_author_does_next(name: str) -> None:
    last = read(name).cells[-1]
    assert last.cell_type == "markdown"
    assert last.source.startswith("## What a host author does next\n")
    assert "examples/" in last.source


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_notebook_checks_what_it_shows(name: str) -> None:
    code = [cell.source for cell in read(name).cells if cell.cell_type == "code"]
    assert "from show import" in code[0]
    assert sum(source.count("assert ") for source in code) >= 5


def test_the_readme_gives_the_command_that_runs_them() -> None:
    readme = (NOTEBOOKS / "README.md").read_text(encoding="utf-8")
    assert RUN in readme
    # code hosts do not draw Mermaid in notebooks: the README points to the SVGs instead
    assert "do not draw Mermaid" in readme and "docs/diagrams/PART.svg" in readme
    assert "draws the Mermaid cells" not in readme and "draw them without" not in readme


def test_the_turn_notebook_opens_with_plain_reduce_calls() -> None:
    """Before the player hides them: three calls of ``at.reduce``, by hand."""
    code = [cell.source for cell in read("01_turn_lifecycle.ipynb").cells
            if cell.cell_type == "code"]
    assert code[1].count("at.reduce(state, ") == 3 and "Player" not in code[1]


def test_the_session_notebook_plays_its_shared_beginning_once() -> None:
    """The ten shared steps are played once; the scenes fork them."""
    code = "\n".join(cell.source for cell in read("05_session_stop_order.ipynb").cells
                     if cell.cell_type == "code")
    assert code.count('at.PromptSubmitted(turn_id="t1"') == 1
    assert code.count("shared.fork()") >= 4


def test_steps_are_numbered_as_the_table_and_a_fork_goes_on_alone() -> None:
    """``steps[n]`` is the row the table numbers n; a fork shares the beginning, then not."""
    import sys

    sys.path.insert(0, str(NOTEBOOKS))
    try:
        from show import Player
    finally:
        sys.path.remove(str(NOTEBOOKS))
    player = Player(at.reduce, at.TurnState.create("chat-1", at.TurnConfig(auto_title=False)))
    player.play(at.PromptSubmitted(turn_id="t1", message_id="m1", text="Hi"),
                at.Persisted(key="t1/p1"))
    fork = player.fork()
    fork.play(at.StreamOpened(request_id="t1/r1"))
    steps = fork.steps
    assert steps[1].event == at.PromptSubmitted(turn_id="t1", message_id="m1", text="Hi")
    assert steps[3].number == 3 and steps[-1] is steps[3]
    assert [row.number for row in steps[2:]] == [2, 3] and len(player.steps) == 2
    assert player.state.phase is at.TurnPhase.AWAITING_STREAM
    with pytest.raises(IndexError, match="no step numbered 0 here"):
        steps[0]
