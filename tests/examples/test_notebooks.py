"""The notebooks of examples/notebooks: committed without outputs, diagrams equal to the graphs.

Executing them is ``pytest --nbmake examples/notebooks`` (the ``notebooks`` extra). This file
reads them only, with nbformat, and is skipped where nbformat is not installed.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import agentturn as at
from agentturn import guard, session

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
def test_the_mermaid_cell_is_the_current_graph(name: str) -> None:
    cells = [cell.source for cell in read(name).cells
             if cell.cell_type == "markdown" and "```mermaid" in cell.source]
    assert len(cells) == 1, f"{name}: expected one Mermaid cell, found {len(cells)}"
    assert cells[0] == f"```mermaid\n{GRAPHS[name].mermaid()}\n```", (
        f"{name}: the diagram differs from {GRAPHS[name].part}'s graph; {FIX}")


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_notebook_checks_what_it_shows(name: str) -> None:
    code = [cell.source for cell in read(name).cells if cell.cell_type == "code"]
    assert "from show import" in code[0]
    assert sum(source.count("assert ") for source in code) >= 5


def test_the_readme_gives_the_command_that_runs_them() -> None:
    assert RUN in (NOTEBOOKS / "README.md").read_text(encoding="utf-8")
