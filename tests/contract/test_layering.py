"""Layering: ``import agentturn`` stays light, the core reads no clock, randomness or I/O, no
library module imports the tools, and the Lead and title parts run without the turn.
"""

from __future__ import annotations

import re
import subprocess
import sys

import agentturn as at
from agentturn import lead, titles


def test_importing_agentturn_loads_no_test_or_protocol_library() -> None:
    """``import agentturn`` stays light: no hypothesis, pytest, pydantic or ACP SDK."""
    code = ("import sys, agentturn; heavy = [m for m in ('hypothesis', 'pytest', 'pydantic', "
            "'acp', 'transitions.extensions.diagrams') if m in sys.modules]; print(heavy)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_the_core_reads_no_clock_randomness_or_io() -> None:
    """No module of agentturn imports time, random, uuid, os, io, socket or logging — except the
    tools a person runs and the spec kit (``agentturn.testing``), test tooling whose random world
    draws its choices from a seeded ``random.Random``; no reducer imports either."""
    import pathlib

    banned = re.compile(r"^\s*(import|from)\s+(time|random|uuid|os|io|socket|logging|datetime)\b",
                        re.M)
    package = pathlib.Path(at.__file__).parent
    core = [path for path in package.rglob("*.py")
            if not {"tools", "testing"} & set(path.relative_to(package).parts)
            and path.name != "__main__.py"]
    assert len(core) > 10
    offenders = [path.name for path in core if banned.search(path.read_text())]
    assert offenders == []


def test_no_library_module_imports_the_tools() -> None:
    """``agentturn.tools`` is what a person runs: no module outside it imports it (the package's
    ``__main__`` is the command line's entry, not library code)."""
    import ast
    import pathlib

    package = pathlib.Path(at.__file__).parent
    library = [path for path in package.rglob("*.py")
               if "tools" not in path.relative_to(package).parts and path.name != "__main__.py"]
    assert len(library) > 30
    offenders = []
    for path in library:
        depth = len(path.relative_to(package).parts) - 1  # how many packages below agentturn
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    names = [node.module or ""]
                elif node.level == depth + 1:  # relative to agentturn itself
                    names = [f"agentturn.{node.module}" if node.module
                             else f"agentturn.{alias.name}" for alias in node.names]
                else:
                    names = []
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            offenders += [f"{path.name}: {name}" for name in names
                          if name == "agentturn.tools" or name.startswith("agentturn.tools.")]
    assert offenders == []


def test_parts_are_usable_alone() -> None:
    """The Lead and title parts run without the turn lifecycle."""
    queue = lead.open_admission(lead.LeadQueue.create("c"))
    queue, commands = lead.reduce(queue, at.LeadSubmitted(chat_id="c", lead_id="l", text="hi"))
    assert [type(c) for c in commands] == [at.LeadAccepted, at.SaveLead]
    title = titles.TitleState.create("c")
    title, commands = titles.request_if_due(title, titles.TitleTrigger.USABLE_RESPONSE)
    assert commands == (at.RequestTitle(chat_id="c", request_id="c/title-1"),)
