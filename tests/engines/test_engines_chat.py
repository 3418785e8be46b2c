"""OpenAI Chat Completions chunks (and whole responses), built with the openai SDK's own types,
to one event."""

from __future__ import annotations

import pytest
from engine_wire import (
    Call,
    Script,
    chat_chunk,
    chat_completion,
    chat_stream,
    commands_after,
    end_of,
    runs_a_tool,
)

import agentturn as at
from agentturn.engines import ChatCompletionsStream, StreamEnded, Usage


def run(chunks: list[dict[str, object]], limit: int | None = None) -> at.StreamCompleted:
    acc = ChatCompletionsStream.start("t1/r1", max_output_tokens=limit)
    for chunk in chunks:
        acc = acc.feed(chunk)
        assert acc.event is None
    event = acc.finish()
    assert isinstance(event, at.StreamCompleted), event
    return event


@pytest.mark.req("TL-10")
def test_plain_text_keeps_the_raw_finish_reason_and_the_usage() -> None:
    """Text deltas join in order; the finish reason and usage are the engine's own."""
    script = Script(text=("Hel", "lo, ", "wörld"), finish="stop", input_tokens=7,
                    output_tokens=4)
    acc = ChatCompletionsStream.start("t1/r1", max_output_tokens=100)
    for chunk in chat_stream(script):
        acc = acc.feed(chunk)
    assert acc.finish() == at.StreamCompleted(request_id="t1/r1", text="Hello, wörld",
                                              finish_reason="stop")
    assert acc.usage == Usage(input_tokens=7, output_tokens=4)


@pytest.mark.req("TL-4", "TL-10")
def test_parallel_tool_calls_keep_their_order_ids_and_raw_argument_strings() -> None:
    """Two calls, each with arguments split over many deltas, come out whole and in order."""
    script = Script(finish="tool_calls", calls=(
        Call("call_a", "read_file", ('{"pa', 'th": ', '"a.py"', "}")),
        Call("call_b", "grep", ("{", '"pattern": "déjà vu ✓"', "}")),
    ))
    event = run(chat_stream(script), limit=1000)
    assert event.tool_calls == (
        at.ToolCall(call_id="call_a", name="read_file", arguments='{"path": "a.py"}'),
        at.ToolCall(call_id="call_b", name="grep", arguments='{"pattern": "déjà vu ✓"}'),
    )
    assert (event.cut_off, event.malformed_tool_format) == (None, False)
    ran = [c.call.call_id for c in commands_after(event) if isinstance(c, at.ExecuteTool)]
    assert ran == ["call_a"]  # the first runs; the second waits for its result (TL-4)


def test_empty_arguments_are_a_call_without_arguments() -> None:
    """A call whose arguments never arrive has the empty string, and is well formed."""
    event = run(chat_stream(Script(finish="tool_calls", calls=(Call("c1", "now", ()),))))
    assert event.tool_calls == (at.ToolCall(call_id="c1", name="now", arguments=""),)
    assert not event.malformed_tool_format


@pytest.mark.req("TL-9")
def test_finish_reason_length_is_the_first_signal() -> None:
    """``length`` cuts: the outcome is OUTPUT_LIMIT, decided by the finish reason."""
    event = run(chat_stream(Script(text=("Once upon",), finish="length")))
    assert event.cut_off is at.CutOffSignal.FINISH_REASON
    outcome = end_of(commands_after(event))
    assert (outcome.kind, outcome.cut_off) == (at.OutcomeKind.OUTPUT_LIMIT,
                                               at.CutOffSignal.FINISH_REASON)
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "length"


@pytest.mark.req("TL-9", "TL-10")
def test_a_lying_tool_calls_label_at_the_token_limit_runs_nothing() -> None:
    """A serving stack says ``tool_calls`` for a response cut at max_tokens, mid-JSON: the
    output tokens at the limit decide; the raw label is kept and no call runs."""
    script = Script(finish="tool_calls", output_tokens=256, calls=(
        Call("c1", "write_file", ('{"path": "a.py", "content": "def f(', "):\\n  ret"),),))
    event = run(chat_stream(script), limit=256)
    assert event.finish_reason == "tool_calls"
    assert event.cut_off is at.CutOffSignal.UNPARSABLE_ARGUMENTS_AT_LIMIT
    assert not event.malformed_tool_format
    commands = commands_after(event)
    assert not runs_a_tool(commands)
    assert not runs_a_tool(commands_after(event, permission=True))
    outcome = end_of(commands)
    assert outcome.kind is at.OutcomeKind.OUTPUT_LIMIT
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "tool_calls"
    assert outcome.message == (
        "The response was cut at the engine's output limit (a tool call's arguments stop "
        "mid-JSON at the output limit, though the finish reason was 'tool_calls'); its 1 tool "
        "call(s) were not run.")


@pytest.mark.req("TL-9")
def test_well_formed_calls_at_the_token_limit_are_still_cut() -> None:
    """Output tokens equal to the limit are a cut even when every argument parses."""
    script = Script(finish="tool_calls", output_tokens=64,
                    calls=(Call("c1", "rm", ('{"path": "build"}',)),))
    event = run(chat_stream(script), limit=64)
    assert event.cut_off is at.CutOffSignal.OUTPUT_TOKEN_LIMIT
    assert not runs_a_tool(commands_after(event))


@pytest.mark.req("TL-6")
def test_unparsable_arguments_below_the_limit_are_the_malformed_format() -> None:
    """Broken JSON under a normal label and below the limit: one corrective retry (TL-6)."""
    script = Script(finish="tool_calls", output_tokens=20,
                    calls=(Call("c1", "rm", ('{"path": build}',)),))
    event = run(chat_stream(script), limit=1000)
    assert (event.malformed_tool_format, event.cut_off) == (True, None)
    commands = commands_after(event)
    assert not runs_a_tool(commands)
    retry = [c for c in commands if isinstance(c, at.RequestModelStream)]
    assert [r.corrective for r in retry] == [True]


@pytest.mark.req("TL-6")
def test_without_usage_the_limit_cannot_be_checked_and_broken_json_is_malformed() -> None:
    """No ``include_usage``: the token signal is unknown, so bad arguments are malformed."""
    script = Script(finish="tool_calls", calls=(Call("c1", "rm", ('{"a": ',)),))
    event = run(chat_stream(script, usage=False), limit=30)
    assert (event.malformed_tool_format, event.cut_off) == (True, None)


@pytest.mark.req("TL-9")
def test_content_filter_is_withheld_for_policy_and_runs_nothing() -> None:
    """``content_filter`` ends the turn CONTENT_FILTERED, its calls not run."""
    script = Script(finish="content_filter", calls=(Call("c1", "f", ('{"a": 1}',)),))
    event = run(chat_stream(script), limit=1000)
    commands = commands_after(event)
    assert not runs_a_tool(commands)
    assert end_of(commands).kind is at.OutcomeKind.CONTENT_FILTERED


def test_a_refusal_is_shown_as_the_text() -> None:
    """A structured-output refusal streams in ``delta.refusal``: the user is shown it."""
    chunks = [chat_chunk([{"index": 0, "delta": {"refusal": "I can't help "}}]),
              chat_chunk([{"index": 0, "delta": {"refusal": "with that."}}]),
              chat_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])]
    assert run(chunks).text == "I can't help with that."


@pytest.mark.req("TL-11")
def test_an_error_chunk_mid_stream_fails_the_request_at_once() -> None:
    """An ``{"error": ...}`` chunk decides ``StreamFailed``; feeding on is host misuse."""
    acc = ChatCompletionsStream.start("t1/r1")
    acc = acc.feed(chat_chunk([{"index": 0, "delta": {"content": "Hal"}}]))
    acc = acc.feed({"error": {"message": "upstream overloaded", "type": "server_error"}})
    assert acc.event == at.StreamFailed(
        request_id="t1/r1", error="the engine reported an error: server_error: upstream "
                                  "overloaded")
    with pytest.raises(StreamEnded):
        acc.feed(chat_chunk([{"index": 0, "delta": {"content": "lo"}}]))
    assert acc.finish() is acc.event


@pytest.mark.req("TL-11")
def test_a_stream_that_ends_without_a_finish_reason_is_a_network_failure() -> None:
    """The transport ended mid-response: resumable ``StreamFailed``, never a completion."""
    acc = ChatCompletionsStream.start("t1/r1").feed(
        chat_chunk([{"index": 0, "delta": {"content": "Hal"}}]))
    event = acc.finish()
    assert isinstance(event, at.StreamFailed) and event.network


def test_a_malformed_chunk_fails_naming_the_field() -> None:
    """A chunk of the wrong shape is the engine's fault: ``StreamFailed`` names the field."""
    acc = ChatCompletionsStream.start("t1/r1").feed(
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]})
    assert acc.event == at.StreamFailed(
        request_id="t1/r1", error="the OpenAI Chat Completions stream was malformed: "
                                  "choices[0].delta.tool_calls[0].index must be int, got str")


def test_feeding_an_sdk_object_itself_is_host_misuse() -> None:
    """Not a mapping: a typed ``ProtocolError``; the accumulator is unchanged."""
    from openai.types.chat import ChatCompletionChunk

    chunk = ChatCompletionChunk.model_validate(chat_chunk())
    acc = ChatCompletionsStream.start("t1/r1")
    with pytest.raises(at.ProtocolError, match="model_dump"):
        acc.feed(chunk)  # type: ignore[arg-type]
    assert acc.event is None


# --- a response asked for without streaming: one chat.completion object ------------------------


def whole(chunks: list[dict[str, object]], limit: int | None = None) -> at.StreamCompleted:
    """A whole response decides its event as soon as it is fed; nothing may follow it."""
    (response,) = chunks
    acc = ChatCompletionsStream.start("t1/r1", max_output_tokens=limit).feed(response)
    assert isinstance(acc.event, at.StreamCompleted), acc.event
    assert acc.finish() == acc.event
    with pytest.raises(StreamEnded):
        acc.feed(chat_chunk([{"index": 0, "delta": {"content": "more"}}]))
    return acc.event


@pytest.mark.req("TL-4", "TL-10")
def test_a_whole_response_reads_like_its_stream() -> None:
    """``stream=False``: the one ``chat.completion`` gives the event its stream gives, calls in
    the order of ``message.tool_calls``, the raw finish reason and the usage."""
    script = Script(text=("Let me look.",), finish="tool_calls", output_tokens=40, calls=(
        Call("call_a", "read_file", ('{"path": "a.py"}',)),
        Call("call_b", "grep", ('{"pattern": "déjà vu"}',))))
    assert whole(chat_completion(script), limit=1000) == run(chat_stream(script), limit=1000)
    acc = ChatCompletionsStream.start("t1/r1").feed(chat_completion(script)[0])
    assert acc.usage == Usage(input_tokens=12, output_tokens=40)
    assert [call.call_id for call in whole(chat_completion(script)).tool_calls] == [
        "call_a", "call_b"]


@pytest.mark.req("TL-9")
def test_a_whole_response_cut_or_mislabelled_at_the_limit_runs_nothing() -> None:
    """The cut-off signals read a whole response too: ``length``, and a ``tool_calls`` label
    with the output tokens at the requested limit (a serving stack's lie)."""
    call = Call("c1", "write_file", ('{"path": "a.py", "content": "x"}',))
    honest = whole(chat_completion(Script(finish="length", calls=(call,))), limit=256)
    assert honest.cut_off is at.CutOffSignal.FINISH_REASON
    lying = whole(chat_completion(Script(finish="tool_calls", output_tokens=256, calls=(call,))),
                  limit=256)
    assert lying.cut_off is at.CutOffSignal.OUTPUT_TOKEN_LIMIT
    for event in (honest, lying):
        assert not runs_a_tool(commands_after(event, permission=True))
        assert end_of(commands_after(event)).kind is at.OutcomeKind.OUTPUT_LIMIT


def test_a_choice_with_both_delta_and_message_fails_naming_it() -> None:
    """A choice is a streamed chunk's or a whole response's, never both: ``StreamFailed``."""
    acc = ChatCompletionsStream.start("t1/r1").feed(
        {"choices": [{"index": 0, "delta": {"content": "a"}, "message": {"content": "a"}}]})
    assert isinstance(acc.event, at.StreamFailed)
    assert "choices[0] has both delta (a streamed chunk) and message" in acc.event.error


@pytest.mark.req("TL-9")
def test_a_later_finish_reason_never_overwrites_a_cut() -> None:
    """``length`` then a chunk saying ``tool_calls`` (without usage, so the token signal cannot
    help): a wrong shape, never a response whose call runs; the same reason repeated is fine."""
    call = [{"index": 0, "id": "w1", "type": "function",
             "function": {"name": "write_file", "arguments": '{"path": "a"}'}}]
    cut = [chat_chunk([{"index": 0, "delta": {"tool_calls": call}}]),
           chat_chunk([{"index": 0, "delta": {}, "finish_reason": "length"}])]
    acc = ChatCompletionsStream.start("t1/r1")
    for chunk in [*cut, chat_chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])]:
        acc = acc.feed(chunk)
    event = acc.finish()
    assert isinstance(event, at.StreamFailed)
    assert "finish_reason is 'tool_calls', but the response already finished with 'length'" in (
        event.error)
    assert not runs_a_tool(commands_after(event, permission=True))
    repeated = ChatCompletionsStream.start("t1/r1")
    for chunk in [*cut, chat_chunk([{"index": 0, "delta": {}, "finish_reason": "length"}])]:
        repeated = repeated.feed(chunk)
    event = repeated.finish()
    assert isinstance(event, at.StreamCompleted) and event.cut_off is not None
