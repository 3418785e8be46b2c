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


@pytest.mark.req("TL-8")
def test_the_worlds_write_never_stops_part_way_whatever_cancel_tool_asks() -> None:
    """The ``CancelTool`` contract in the kit: the host asks, the tool decides, and a write
    (``write_file``) runs to its end even where any other tool would stop."""
    from agentturn.testing.world import WRITES, World

    world = World(choose=lambda options: options[-1])  # every tool that can stop, stops
    fates = {}
    for number, name in enumerate(("read_file", "write_file")):
        call = at.ToolCall(call_id=f"c{number}", name=name, arguments="{}")
        world.asked.append(call.call_id)
        assert world.run(call) is None  # still running
        fates[name] = world.cancel(call.call_id)
    assert fates == {"read_file": True, "write_file": False}
    assert world.stopped == {"c0"}
    assert frozenset({"write_file"}) == WRITES


@pytest.mark.req("TL-8", "LD-10")
def test_the_cancel_contract_is_stated_the_same_in_the_command_the_kit_and_its_docs() -> None:
    """One contract (issue 32): the host decides whether a running tool may stop, a write is
    never stopped part-way, and exactly one ToolFinished answers once the tool has ended; the
    CancelTool docstring, the kit's ``cancel`` rule and the spec-kit how-to all say so."""
    from agentturn.testing import world

    doc = " ".join((at.CancelTool.__doc__ or "").split())
    rule = " ".join((world.__doc__ or "").split())
    howto = " ".join((pathlib.Path(__file__).parents[2] / "docs" / "howto" / "spec-kit.md")
                     .read_text(encoding="utf-8").split())
    for text in (doc, rule, howto):
        assert "never stopped part-way" in text
    assert "exactly one ``ToolFinished``" in doc and "the one result" in rule
    assert "write_file" in world.WRITES
