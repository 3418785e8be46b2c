"""The spec kit (``agentturn.testing``): a host checks its adapter, a buggy one is caught and
shrunk, and the hypothesis entry point registers the strategies.
"""

from __future__ import annotations

import pathlib
import re
import sys

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

import agentturn as at
from agentturn.testing import ReferenceAdapter, SessionSpec, profiles

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "spec_kit"))
import buggy_adapter  # noqa: E402

sys.path.pop(0)


class ReferenceSpec(SessionSpec):
    """The reference adapter, checked."""


TestReferenceAdapter = ReferenceSpec.TestCase
TestReferenceAdapter.settings = settings(profiles.CI, max_examples=100)


@pytest.mark.req("TL-9")
def test_the_machine_catches_the_translating_adapter_and_shrinks_it() -> None:
    """req: TL-9 — the adapter that turns ``max_tokens`` into ``stop`` lets a cut-off call run:
    the machine finds it under the CI profile and hypothesis shrinks the run to a short
    program."""
    with pytest.raises(AssertionError, match="TL-9") as caught:
        run_state_machine_as_test(buggy_adapter.BuggyHostSpec, settings=settings(
            profiles.CI, phases=[Phase.generate, Phase.shrink]))
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    steps = re.findall(r"^state\.move\(", notes, flags=re.MULTILINE)
    assert 1 <= len(steps) <= 15, notes
    assert "[cut-off, TL-9]" in str(caught.value) or "[engine-input, TL-9]" in str(caught.value)


def test_the_reference_adapter_is_what_the_hosts_start_from() -> None:
    """The reference adapter passes the engine's raw finish reason through."""
    assert ReferenceAdapter().normalize("max_tokens") == "max_tokens"


@settings(max_examples=20)
@given(st.from_type(at.Event), st.from_type(at.PromptSubmitted))
def test_from_type_draws_agentturn_events(event: at.Event, prompt: at.PromptSubmitted) -> None:
    """The hypothesis entry point registered the strategies: ``st.from_type(Event)`` works."""
    assert isinstance(event, at.Event)
    assert isinstance(prompt, at.PromptSubmitted)
