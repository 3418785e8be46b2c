"""The Python code blocks of the README and the documentation pages, found once.

Theory of operation
-------------------
A page's blocks are the fenced blocks whose info string is exactly ``python`` (```` ```python ````);
every other fence (``sh``, ``text``, ``console``, ``{eval-rst}`` ...) is prose. The blocks of one
page form one program: they run in order in one namespace, as if they were one file, so a later
block may use what an earlier one defined (a tutorial builds its host over several blocks).

Two readers use this: ``test_code_blocks.py`` runs every page's program, and
``typecheck_blocks.py`` writes the README's and the tutorial's programs to a folder outside the
clone and runs ``mypy --strict`` on them against an installed (not editable) agentturn.
"""

from __future__ import annotations

import pathlib
import re

import attrs

ROOT = pathlib.Path(__file__).resolve().parents[2]

#: An opening fence (three or more backticks or tildes) and its info string.
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")

#: The pages whose programs are type-checked by ``mypy --strict`` from outside the source tree.
TYPECHECKED = ("README.md", "docs/tutorial.md")


@attrs.frozen
class Block:
    """One ```` ```python ```` block: its page, the line its code starts on (1-based), its code."""

    page: pathlib.Path
    line: int
    code: str


def pages() -> list[pathlib.Path]:
    """The README and every Markdown page of the documentation, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(page: pathlib.Path) -> list[Block]:
    """The page's Python blocks, in order. A fence closes on the same character, at least as
    long, with nothing after it (CommonMark), so a block may show a shorter fence inside."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, info = opening["fence"], opening["info"].strip()
        start = index + 1
        index = start
        while index < len(lines):
            stripped = lines[index].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                break
            index += 1
        if info == "python":
            found.append(Block(page, start + 1, "\n".join(lines[start:index]) + "\n"))
        index += 1
    return found


def program(page: pathlib.Path) -> str:
    """The page's blocks as one file, each block at its own line number (blank lines between),
    so a traceback or a mypy error names the page's line."""
    text: list[str] = []
    for block in blocks(page):
        text.extend([""] * (block.line - 1 - len(text)))
        text.extend(block.code.splitlines())
    return "\n".join(text) + "\n"
