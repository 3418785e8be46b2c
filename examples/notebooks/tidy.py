"""Strip the notebooks' outputs and redraw their diagram cells from the phase graphs.

    .venv/bin/python examples/notebooks/tidy.py           # rewrite what needs it
    .venv/bin/python examples/notebooks/tidy.py --check   # only list it; exit 1 if any

Run it after executing a notebook in Jupyter, or after changing a phase graph:
``tests/examples/test_notebooks.py`` fails until the committed notebooks have no outputs and
each diagram cell equals :func:`diagram_cell` of its part. A diagram cell shows the part's
committed SVG (``docs/diagrams/PART.svg``, which every notebook viewer and code host displays,
unlike Mermaid) and, under it, the caption of the main-path view: what the picture does not
draw. The cell names its part in the SVG's file name.
"""

from __future__ import annotations

import pathlib
import re
import sys
from typing import Any

import nbformat

from agentturn.tools import diagrams

HERE = pathlib.Path(__file__).resolve().parent
LINK = re.compile(r"\]\(\.\./\.\./docs/diagrams/(\w+)\.svg\)")
LANGUAGE = {"name": "python"}


def diagram_cell(part: str) -> str:
    """The source of the Markdown cell that shows the phase graph of ``part``."""
    caption = diagrams.caption(diagrams.main_view(diagrams.graph_of(part)))
    return "\n".join([
        f"![The {part} phase graph: its main path](../../docs/diagrams/{part}.svg)",
        "",
        *(f"- {line}" for line in caption),
        "",
        f"Every edge, self-loops included: `agentturn diagram {part} --full`. How to read the "
        "picture: `docs/diagrams.md` (the docs' *Phase diagrams* page).",
    ])


def tidy(notebook: Any) -> bool:
    """Strip outputs, execution counts and run metadata; redraw diagram cells. True if changed."""
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
        elif cell.cell_type == "markdown" and (found := LINK.search(cell.source)):
            part = found[1]
            if part not in diagrams.PARTS:
                raise SystemExit(f"a diagram cell shows no known graph: {part!r}")
            if cell.source != diagram_cell(part):
                cell.source = diagram_cell(part)
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
