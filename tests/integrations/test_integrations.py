"""agentturn.integrations: the rules its adapters apply, and a package ``import agentturn``
never loads. The adapters themselves are proved on their frameworks by the conformance suite
(tests/conform/test_runtimes.py, in each framework's own venv)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentturn import CutOffSignal
from agentturn.integrations import (
    ContentFiltered,
    EmptyAnswer,
    Outcome,
    OutputLimitReached,
    TurnEnded,
    UnknownFinish,
    judge,
    raise_for,
)


def test_import_agentturn_never_loads_the_integrations_nor_a_framework() -> None:
    code = ("import sys, agentturn, agentturn.tools.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('agentturn.integrations')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_each_adapter_loads_its_framework_only_when_used() -> None:
    code = ("import sys, agentturn.integrations.pydantic_ai, "
            "agentturn.integrations.openai_agents; "
            "print(sorted(m for m in ('pydantic_ai', 'agents', 'openai', 'httpx', 'httpx2') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def _judge(finish: str | None, tokens: int | None = 20, text: str = "ok",
           calls: tuple[tuple[str, object], ...] = ()) -> Outcome | None:
    return judge(finish_reason=finish, output_tokens=tokens, max_output_tokens=256, text=text,
                 calls=calls)


@pytest.mark.req("TL-9")
@pytest.mark.parametrize("finish", ["length", "max_tokens", "MAX_TOKENS"])
def test_a_length_finish_is_a_cut_whatever_the_calls(finish: str) -> None:
    outcome = _judge(finish, calls=(("write_file", {"path": "a"}),))
    assert outcome is not None and outcome.kind == "cut_off"
    assert outcome.cut_off is CutOffSignal.FINISH_REASON
    assert (outcome.finish_reason, outcome.withheld_calls) == (finish, ("write_file",))


@pytest.mark.req("TL-9")
@given(finish=st.sampled_from(["tool_calls", "stop", "end_turn", "tool_use", None]),
       complete=st.booleans(), over=st.integers(0, 5))
def test_output_tokens_at_the_limit_are_a_cut_whatever_the_label(
        finish: str | None, complete: bool, over: int) -> None:
    arguments = '{"path": "a"}' if complete else '{"path": "a'
    outcome = _judge(finish, tokens=256 + over, calls=(("write_file", arguments),))
    assert outcome is not None and outcome.kind == "cut_off"
    assert outcome.finish_reason == finish  # the raw label kept, mislabelled or not (TL-10)
    assert outcome.cut_off is (CutOffSignal.OUTPUT_TOKEN_LIMIT if complete
                               else CutOffSignal.UNPARSABLE_ARGUMENTS_AT_LIMIT)


@pytest.mark.req("TL-6")
def test_a_malformed_call_under_the_limit_is_left_to_the_framework() -> None:
    assert _judge("tool_calls", calls=(("write_file", '{"path": '),)) is None


@pytest.mark.req("TL-7", "TL-10")
def test_empty_filtered_and_unknown_ends_are_outcomes_with_their_raw_reason() -> None:
    empty, filtered, unknown = (_judge("stop", text=" "), _judge("content_filter"),
                                _judge("weird_reason"))
    assert empty is not None and (empty.kind, empty.finish_reason) == ("empty", "stop")
    assert filtered is not None and filtered.kind == "content_filter"
    assert unknown is not None and (unknown.kind, unknown.finish_reason) == (
        "unknown_finish", "weird_reason")
    assert _judge("stop") is None and _judge(None, tokens=None) is None


@pytest.mark.req("TL-9", "TL-10")
@pytest.mark.parametrize("kind, error", [
    ("cut_off", OutputLimitReached), ("content_filter", ContentFiltered),
    ("empty", EmptyAnswer), ("unknown_finish", UnknownFinish)])
def test_each_outcome_raises_its_typed_exception_with_the_outcome(
        kind: str, error: type[TurnEnded]) -> None:
    outcome = Outcome(kind, "length", output_tokens=256, max_output_tokens=256,
                      withheld_calls=("write_file",))
    with pytest.raises(error) as raised:
        raise_for(outcome)
    assert raised.value.outcome is outcome and raised.value.finish_reason == "length"
    assert "withheld: write_file" in str(raised.value)
    raise_for(None)


@pytest.mark.req("TL-9")
@pytest.mark.parametrize("finish", ["tool_use", "end_turn", None])
def test_an_unclosed_tool_block_is_a_cut_under_the_limit_like_the_engines(
        finish: str | None) -> None:
    # the engines' UNCLOSED_TOOL_BLOCK signal, for an adapter whose framework shows it
    outcome = judge(finish_reason=finish, output_tokens=20, max_output_tokens=256, text="",
                    calls=(("write_file", {"path": "a", "content": "b"}),), unclosed=True)
    assert outcome is not None and outcome.kind == "cut_off"
    assert (outcome.cut_off, outcome.finish_reason) == (CutOffSignal.UNCLOSED_TOOL_BLOCK,
                                                         finish)
    assert outcome.withheld_calls == ("write_file",)
    # a LENGTH finish keeps its own signal; a filter is still a filter
    cut = judge(finish_reason="max_tokens", output_tokens=256, max_output_tokens=256,
                text="", calls=(), unclosed=True)
    assert cut is not None and cut.cut_off is CutOffSignal.FINISH_REASON
