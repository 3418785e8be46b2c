"""The README's claims that the code can check: its table of awaiting commands and answers, its
exhaustive ``match``, and links that render on a package index (issue 21)."""

from __future__ import annotations

import re

from code_blocks import ROOT, blocks

import agentturn as at
from agentturn import registry
from agentturn._base import AwaitingCommand

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _table_rows() -> dict[str, str]:
    """The README's table of awaiting commands: command name -> its 'answered by' cell."""
    start = README.index("| awaiting command | answered by |")
    rows: dict[str, str] = {}
    for line in README[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1]
    return rows


def test_the_readme_table_lists_every_awaiting_command_of_the_turn_family() -> None:
    """Every awaiting command in ``at.TurnCommand`` has a row naming exactly its answers."""
    turn_awaiting = {cls.__name__: cls for cls in registry.command_types()
                     if registry.part_of(cls) == "turn" and issubclass(cls, AwaitingCommand)}
    rows = _table_rows()
    assert set(rows) == set(turn_awaiting)
    for name, cls in turn_awaiting.items():
        named = set(re.findall(r"`(\w+)`", rows[name]))
        assert named == set(cls.answered_by), name


def test_the_readme_match_names_every_turn_command() -> None:
    """The README's ``match`` has a case for each class of ``at.TurnCommand`` (mypy checks the
    same from outside the tree in CI; this catches it in the suite)."""
    code = "".join(block.code for block in blocks(ROOT / "README.md"))
    match = code[code.index("match command:"):code.index("assert_never(command)")]
    cased = set(re.findall(r"at\.(\w+)\(\)", match))
    assert cased == {cls.__name__ for cls in at.TurnCommand.__args__}


def test_the_readme_has_no_relative_links() -> None:
    """A package index shows the README without the repository around it: every link is
    absolute (documentation pages are named by their path, in code spans)."""
    targets = re.findall(r"\]\(([^)]+)\)", README)
    assert all(target.startswith("https://") for target in targets), targets


def test_every_docs_path_the_readme_names_exists() -> None:
    named = set(re.findall(r"`(docs/[\w./-]+)`", README))
    assert named, "the README points into the docs"
    for path in named:
        assert (ROOT / path).exists(), path
