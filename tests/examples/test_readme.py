"""The README's two commands, the CI script and the demo stay what they say they are."""

from __future__ import annotations

import pathlib
import re

import pytest

import agentturn as at
from agentturn.tools.demo import SCRIPT, timeline

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```sh\n(.+?)\n```", text)[:2]


def test_the_readme_starts_with_two_self_contained_commands() -> None:
    """Both make their own virtual environment and install before they run."""
    demo, tests = readme_commands()
    for command in (demo, tests):
        assert command.startswith("python3 -m venv .venv && .venv/bin/pip install")
    assert demo.endswith("agentturn demo")
    assert tests.endswith("python -m pytest")


def test_ci_runs_the_readmes_test_command() -> None:
    """.ci/run holds the README's test command verbatim."""
    _, tests = readme_commands()
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_demo_tells_the_story_the_readme_promises() -> None:
    """req: LD-9, LD-10, TT-1 — in the demo the title comes before the first tool, and the Lead
    typed during the file write is applied only after the write's result is saved."""
    text = timeline()
    lines = text.splitlines()
    first = lambda needle: next(i for i, line in enumerate(lines) if needle in line)  # noqa: E731
    assert first("RequestTitle") < first("ExecuteTool call-1")
    assert first("LeadSubmitted") < first("Persist t1/p5: call-2 executed")
    assert first("Persist t1/p5: call-2 executed") < first("call-3 skipped")
    assert first("call-3 skipped") < first("with Lead lead-1")
    assert "EndTurn finished" in text
    assert not any("CancelTool" in line for line in lines)


def test_the_demo_script_is_valid_end_to_end() -> None:
    """Every scripted event is accepted; the turn ends idle."""
    state = at.TurnState.create("chat-1")
    for _, event in SCRIPT:
        state = at.reduce(state, event).state
    assert state.phase is at.TurnPhase.IDLE


@pytest.mark.parametrize("part", ["turn", "lead", "titles", "guard", "session"])
def test_the_command_line_prints_diagrams(part: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``agentturn diagram PART`` prints Mermaid."""
    from agentturn.tools.cli import main

    assert main(["diagram", part]) == 0
    assert "stateDiagram-v2" in capsys.readouterr().out


def test_the_daemon_scene_tells_the_stop_order() -> None:
    """req: OB-1, OB-3, SO-2 — the daemon scene shows two guard continuations committed when
    their streams open, the exhaustion message once, and a queued prompt that takes priority
    over the armed guard at the next stop and runs next."""
    from agentturn.tools.demo_daemon import daemon_timeline

    text = daemon_timeline()
    lines = text.splitlines()
    first = lambda needle: next(i for i, line in enumerate(lines) if needle in line)  # noqa: E731
    assert "attempt 1 of 2" in text and "attempt 2 of 2" in text
    assert text.count("Automatic continuation stopped after 2 attempts") == 1
    assert first("attempt 2 of 2") < first("Automatic continuation stopped")
    assert first("hasQueuedPrompt True") < first("a queued prompt has priority")
    assert first("a queued prompt has priority") < first("user message q1m")
    assert text.count("Publish guard chunk") == 2  # nothing continued once the queue had priority
