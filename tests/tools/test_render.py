"""The renderer's phrases a reader meets in the demo, the notebooks and the durable host."""

from __future__ import annotations

import agentturn as at
from agentturn.tools.render import records, tool_result


def result(status: at.ToolResultStatus, reason: str = "") -> at.ToolResultRecord:
    return at.ToolResultRecord(call_id="call-3", name="run_tests", status=status, reason=reason)


def test_a_skipped_call_says_skipped_once() -> None:
    reason = "Skipped: the user sent a Lead instruction before this call started."
    line = tool_result(result(at.ToolResultStatus.SKIPPED, reason))
    assert line == "call-3 skipped: the user sent a Lead instruction before this call started."


def test_a_reason_without_the_status_is_kept_whole_and_none_adds_nothing() -> None:
    assert tool_result(result(at.ToolResultStatus.DENIED, "The user denied it.")) == (
        "call-3 denied: The user denied it.")
    assert tool_result(result(at.ToolResultStatus.EXECUTED)) == "call-3 executed"
    assert records([result(at.ToolResultStatus.CANCELLED, "cancelled: Stop was pressed"),
                    result(at.ToolResultStatus.EXECUTED)]) == (
        "call-3 cancelled: Stop was pressed; call-3 executed")


def test_a_hook_reason_and_a_guard_prompt_merged_are_named_apart() -> None:
    """SO-8's merged message shows the hook's reason, then names the guard's prompt; a bare
    prompt is named alone, the second one with its final sentence."""
    from agentturn.guard import texts
    from agentturn.tools.render import message

    first, second = texts.continuation_text(1, 1), texts.continuation_text(2, 1)
    assert message(first) == "the guard's continuation prompt"
    assert message(second) == "the guard's continuation prompt + the final-continuation sentence"
    assert message(texts.combined_continuation("Tests fail.", first)) == (
        "'Tests fail.' + a blank line + the guard's continuation prompt")
    assert message(texts.combined_continuation("a\n\nb", second)) == (
        "'a\\n\\nb' + a blank line + the guard's continuation prompt + the final-continuation "
        "sentence")
    assert message("Keep the old API") == "'Keep the old API'"
