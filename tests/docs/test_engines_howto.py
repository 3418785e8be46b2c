"""The engines how-to tells a host what the turn leaves to it (issue 32): SDK clients with their
own retries off, and what to send for a corrective request."""

from __future__ import annotations

import ast

import pytest
from code_blocks import ROOT, blocks, pages

#: The engine SDKs' client classes, which retry a failed request unless told not to.
CLIENTS = {"OpenAI", "AsyncOpenAI", "Anthropic", "AsyncAnthropic"}


def _sources() -> list[tuple[str, str]]:
    found = [(f"{block.page.relative_to(ROOT)}:{block.line}", block.code)
             for page in pages() for block in blocks(page)]
    found += [(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
              for path in sorted((ROOT / "examples").rglob("*.py"))]
    return found


@pytest.mark.req("TL-11")
def test_the_engines_how_to_builds_its_client_without_sdk_retries() -> None:
    """The how-to's streaming loop shows ``max_retries=0`` and says why (the turn decides)."""
    page = (ROOT / "docs" / "howto" / "engines.md").read_text(encoding="utf-8")
    code = "\n".join(block.code for block in blocks(ROOT / "docs" / "howto" / "engines.md"))
    assert "AsyncOpenAI(max_retries=0)" in code
    assert "`max_retries=0`" in page and "ContinueTurn" in page


@pytest.mark.req("TL-11")
def test_every_sdk_client_in_the_docs_and_examples_has_retries_off() -> None:
    """An ``OpenAI``/``Anthropic`` client built anywhere a host copies from passes
    ``max_retries=0``: the SDK would otherwise resend a failed request twice, silently."""
    built = [(where, node) for where, code in _sources() for node in ast.walk(ast.parse(code))
             if isinstance(node, ast.Call) and _name(node.func) in CLIENTS]
    assert built
    assert [f"{where} line {node.lineno}" for where, node in built if not any(
        k.arg == "max_retries" and isinstance(k.value, ast.Constant) and k.value.value == 0
        for k in node.keywords)] == []


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


@pytest.mark.req("TL-6")
def test_the_engines_how_to_says_what_a_corrective_request_sends() -> None:
    """``RequestModelStream.corrective`` (TL-6) is explained where hosts build requests."""
    page = (ROOT / "docs" / "howto" / "engines.md").read_text(encoding="utf-8")
    assert "### What the host sends for a corrective request" in page
    assert "corrective=True" in page
