"""Strip the notebooks' outputs and redraw their Mermaid cells from the phase graphs.

    .venv/bin/python examples/notebooks/tidy.py           # rewrite what needs it
    .venv/bin/python examples/notebooks/tidy.py --check   # only list it; exit 1 if any

Run it after executing a notebook in Jupyter, or after changing a phase graph:
``tests/examples/test_notebooks.py`` fails until the committed notebooks have no outputs and
each Mermaid cell equals its graph's ``mermaid()`` text. A Mermaid cell names its graph on the
title line of the drawing (``turn``, ``lead``, ``titles``, ``todo_stop_guard``, ``session``).
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import nbformat

import agentturn as at
from agentturn import guard, session

HERE = pathlib.Path(__file__).resolve().parent
GRAPHS = {graph.part: graph for graph in (at.TURN_GRAPH, at.LEAD_GRAPH, at.TITLE_GRAPH,
                                          guard.GUARD_GRAPH, session.SESSION_GRAPH)}
FENCE = "```mermaid\n"
LANGUAGE = {"name": "python"}


def mermaid_cell(part: str) -> str:
    """The source of the Markdown cell that shows the graph of ``part``."""
    return f"{FENCE}{GRAPHS[part].mermaid()}\n```"


def _part(source: str) -> str:
    """The graph a Mermaid cell draws: the title between its two ``---`` lines."""
    lines = source.splitlines()
    title = lines[2] if len(lines) > 3 and lines[1] == lines[3] == "---" else ""
    return title.removeprefix("title:").strip()


def tidy(notebook: Any) -> bool:
    """Strip outputs, execution counts and run metadata; redraw Mermaid cells. True if changed."""
    changed = False
    if notebook.metadata.get("language_info") != LANGUAGE:  # no interpreter version to churn
        notebook.metadata["language_info"] = dict(LANGUAGE)
        changed = True
    for cell in notebook.cells:
        if cell.cell_type == "code":
            if cell.outputs or cell.execution_count is not None or "execution" in cell.metadata:
                cell.outputs, cell.execution_count = [], None
                cell.metadata.pop("execution", None)
                changed = True
        elif cell.cell_type == "markdown" and cell.source.startswith(FENCE):
            part = _part(cell.source)
            if part not in GRAPHS:
                raise SystemExit(f"a Mermaid cell draws no known graph: {part!r}")
            if cell.source != mermaid_cell(part):
                cell.source = mermaid_cell(part)
                changed = True
    return changed


def main(argv: list[str]) -> int:
    check = "--check" in argv
    untidy = []
    for path in sorted(HERE.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)  # type: ignore[no-untyped-call]
        if tidy(notebook):
            untidy.append(path.name)
            if not check:
                nbformat.write(notebook, path)  # type: ignore[no-untyped-call]
    for name in untidy:
        print(f"{'untidy' if check else 'tidied'}: {name}")
    return 1 if check and untidy else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
