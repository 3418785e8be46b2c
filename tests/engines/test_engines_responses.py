"""OpenAI Responses events, built with the openai SDK's own types, to one event."""

from __future__ import annotations

import pytest
from engine_wire import Call, Script, commands_after, end_of, responses_stream, runs_a_tool
from openai.types.responses import ResponseErrorEvent

import agentturn as at
from agentturn.engines import ResponsesStream, Usage


def stream(chunks: list[dict[str, object]], limit: int | None = None) -> ResponsesStream:
    acc = ResponsesStream.start("t1/r1", max_output_tokens=limit)
    for chunk in chunks:
        acc = acc.feed(chunk)
    return acc


@pytest.mark.req("TL-4", "TL-10")
def test_text_and_function_calls_answer_with_call_id() -> None:
    """Argument deltas address the item id; the call's id is ``call_id``; ``completed`` is
    the raw finish reason."""
    acc = stream(responses_stream(Script(text=("Let me ", "look."), calls=(
        Call("call_1", "read_file", ('{"path"', ': "x"}')),
        Call("call_2", "now", ()),
    ), input_tokens=11, output_tokens=22)))
    assert acc.event == at.StreamCompleted(
        request_id="t1/r1", text="Let me look.", finish_reason="completed", tool_calls=(
            at.ToolCall(call_id="call_1", name="read_file", arguments='{"path": "x"}'),
            at.ToolCall(call_id="call_2", name="now", arguments="")))
    assert acc.usage == Usage(input_tokens=11, output_tokens=22)


@pytest.mark.req("TL-9")
def test_incomplete_max_output_tokens_is_an_output_limit() -> None:
    """``response.incomplete`` with reason ``max_output_tokens``: cut, by the label."""
    acc = stream(responses_stream(Script(text=("Once",)), incomplete="max_output_tokens"))
    assert isinstance(acc.event, at.StreamCompleted)
    assert (acc.event.finish_reason, acc.event.cut_off) == (
        "max_output_tokens", at.CutOffSignal.FINISH_REASON)
    assert end_of(commands_after(acc.event)).kind is at.OutcomeKind.OUTPUT_LIMIT


@pytest.mark.req("TL-9")
def test_incomplete_content_filter_is_withheld() -> None:
    """``incomplete`` for ``content_filter``: withheld for policy, no call runs."""
    acc = stream(responses_stream(Script(calls=(Call("call_1", "f", ('{"a": 1}',)),)),
                 incomplete="content_filter"))
    assert isinstance(acc.event, at.StreamCompleted)
    commands = commands_after(acc.event)
    assert not runs_a_tool(commands)
    assert end_of(commands).kind is at.OutcomeKind.CONTENT_FILTERED


@pytest.mark.req("TL-9")
def test_a_function_call_without_done_is_cut_whatever_the_status() -> None:
    """``completed`` although a call never got its ``.done``: the unclosed call decides."""
    acc = stream(responses_stream(Script(calls=(
        Call("call_1", "write_file", ('{"path": "a', ), closed=False),))))
    assert isinstance(acc.event, at.StreamCompleted)
    assert acc.event.cut_off is at.CutOffSignal.UNCLOSED_TOOL_BLOCK
    assert not runs_a_tool(commands_after(acc.event, permission=True))


@pytest.mark.req("TL-9")
def test_the_echoed_limit_is_used_when_the_host_gave_none() -> None:
    """The response echoes ``max_output_tokens``; output at that limit is a cut."""
    acc = stream(responses_stream(Script(output_tokens=50, calls=(
        Call("call_1", "f", ('{"a": 1}',)),)), max_output_tokens=50))
    assert isinstance(acc.event, at.StreamCompleted)
    assert acc.event.cut_off is at.CutOffSignal.OUTPUT_TOKEN_LIMIT


@pytest.mark.req("TL-11")
def test_an_error_event_fails_the_request() -> None:
    """The ``error`` event decides ``StreamFailed``."""
    chunks = responses_stream(Script(text=("a", "b")))[:1]
    error = ResponseErrorEvent(type="error", code="rate_limit_exceeded", message="Slow down",
                               param=None, sequence_number=9).model_dump()
    acc = stream([*chunks, error])
    assert acc.event == at.StreamFailed(
        request_id="t1/r1", error="the engine reported an error: rate_limit_exceeded: Slow down")


def test_a_delta_for_an_unknown_item_fails_naming_it() -> None:
    """Argument deltas for an item never added: ``StreamFailed`` naming the item id."""
    acc = stream([{"type": "response.function_call_arguments.delta", "item_id": "fc_9",
                   "output_index": 1, "delta": "{", "sequence_number": 1}])
    assert isinstance(acc.event, at.StreamFailed)
    assert "item_id 'fc_9' names no function call added" in acc.event.error
