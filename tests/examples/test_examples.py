"""The examples run for real: the scripted host writes real files and applies a Lead."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

import agentturn as at

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.req("LD-10")
def test_the_scripted_host_applies_a_lead_after_a_real_file_write(tmp_path: pathlib.Path) -> None:
    """req: LD-10, LD-9 — the first write lands untouched, the test run is skipped, the model
    acts on the Lead and the file ends with the docstring."""
    example = load("scripted_host")
    host = example.main(tmp_path)
    assert host.outcome is not None and host.outcome.kind is at.OutcomeKind.FINISHED
    assert (tmp_path / "calc.py").read_text() == example.SECOND_VERSION
    assert host.title == "Write calc.py"
    assert "user: also add a docstring" in host.transcript
