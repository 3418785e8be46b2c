"""Wire objects engines and proxies really send, or could, that once went wrong.

Each case here was found by an outside tester: an exception escaping ``feed()``, a call run
with arguments that never arrived, a second call merged into the first, a cut stream taken for
a completion, a field named in the wrong spelling. Every one now ends in an event that says what
happened, and no tool runs on arguments that were not received.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import RawContentBlockStartEvent, ToolUseBlock
from engine_wire import (
    Call,
    Script,
    anthropic_stream,
    chat_chunk,
    chat_stream,
    commands_after,
    responses_stream,
    runs_a_tool,
)
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import ResponseCustomToolCall, ResponseOutputItemAddedEvent

import agentturn as at
from agentturn._json import MAX_DEPTH
from agentturn.engines import (
    AnthropicMessagesStream,
    ChatCompletionsStream,
    EngineStream,
    GeminiStream,
    ResponsesStream,
)

Wire = dict[str, Any]


def run(cls: type[EngineStream], wires: list[Wire], limit: int | None = 100
        ) -> at.StreamCompleted | at.StreamFailed:
    """The documented host loop: feed until decided, then finish."""
    acc = cls.start("t1/r1", max_output_tokens=limit)
    for wire in wires:
        acc = acc.feed(wire)
        if acc.event is not None:
            break
    return acc.finish()


def failed(event: at.StreamCompleted | at.StreamFailed) -> at.StreamFailed:
    assert isinstance(event, at.StreamFailed), event
    assert not runs_a_tool(commands_after(event))
    return event


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


# --- Gemini -----------------------------------------------------------------------------------


def gemini_call(call: Wire, finish: str | None = "STOP") -> Wire:
    candidate: Wire = {"content": {"role": "model", "parts": [{"functionCall": call}]}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": {"candidatesTokenCount": 5}}


def test_gemini_args_nested_past_the_depth_limit_fail_naming_the_field() -> None:
    """A mapping 5000 levels deep once raised RecursionError out of ``feed()`` (the recursive
    JSON encoder); now the depth is checked first, without recursion."""
    event = failed(run(GeminiStream, [gemini_call({"name": "f", "args": nested(5000)})]))
    assert event.network is False
    assert event.error == (
        "the Gemini generateContent stream was malformed: candidates[0].content.parts[0]"
        f".functionCall.args cannot be written as JSON: it nests deeper than {MAX_DEPTH} levels")


def test_gemini_args_at_the_depth_limit_still_run() -> None:
    event = run(GeminiStream, [gemini_call({"name": "f", "args": nested(MAX_DEPTH)})])
    assert isinstance(event, at.StreamCompleted)
    assert json.loads(event.tool_calls[0].arguments) == nested(MAX_DEPTH)


@pytest.mark.req("TL-9")
def test_gemini_a_streamed_call_the_engine_never_ended_does_not_run() -> None:
    """``willContinue`` / ``partialArgs`` calls once ran with ``"{}"``, arguments the model
    never sent. Now they are assembled, and one the stream never ended is cut off."""
    event = run(GeminiStream, [
        gemini_call({"name": "write_file", "willContinue": True, "partialArgs": [
            {"jsonPath": "$.path", "stringValue": "a.txt"}]}, finish=None),
        {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP"}]}])
    assert isinstance(event, at.StreamCompleted)
    assert event.cut_off is at.CutOffSignal.UNCLOSED_TOOL_BLOCK
    assert event.tool_calls[0].arguments == '{"path":"a.txt"}'
    assert not runs_a_tool(commands_after(event))


@pytest.mark.req("TL-11")
def test_gemini_a_streamed_call_with_no_end_at_all_is_a_network_failure() -> None:
    """A python-mode dump (snake_case) of an opened call, then the transport ends."""
    event = run(GeminiStream, [gemini_call({"name": "f", "will_continue": True,
                                            "partial_args": None}, finish=None)])
    assert isinstance(event, at.StreamFailed) and event.network is True


def test_gemini_errors_name_the_field_as_the_wire_spelled_it() -> None:
    rest = failed(run(GeminiStream, [{"usageMetadata": {"candidatesTokenCount": -1}}]))
    assert "chunk.usageMetadata.candidatesTokenCount must not be negative" in rest.error
    dumped = failed(run(GeminiStream, [{"usage_metadata": {"candidates_token_count": "5"}}]))
    assert "chunk.usage_metadata.candidates_token_count must be int" in dumped.error
    reason = failed(run(GeminiStream, [{"candidates": [{"finishReason": 3}]}]))
    assert "candidates[0].finishReason must be str, got int" in reason.error


# --- Anthropic Messages -----------------------------------------------------------------------


def anthropic_tool(block: int, tool_input: dict[str, Any]) -> Wire:
    dumped: Wire = RawContentBlockStartEvent(
        type="content_block_start", index=block,
        content_block=ToolUseBlock(type="tool_use", id=f"toolu_{block}", name="write_file",
                                   input=tool_input)).model_dump()
    return dumped


def anthropic_with(middle: list[Wire], reason: str = "tool_use") -> list[Wire]:
    return [{"type": "message_start", "message": {"usage": {"input_tokens": 9,
                                                            "output_tokens": 1}}},
            *middle,
            {"type": "message_delta", "delta": {"stop_reason": reason},
             "usage": {"output_tokens": 20}},
            {"type": "message_stop"}]


def json_delta(block: int, partial: str) -> Wire:
    return {"type": "content_block_delta", "index": block,
            "delta": {"type": "input_json_delta", "partial_json": partial}}


def block_stop(block: int) -> Wire:
    return {"type": "content_block_stop", "index": block}


@pytest.mark.req("TL-4")
def test_anthropic_input_in_the_start_block_is_the_arguments_when_no_delta_came() -> None:
    """A proxy re-emitting a non-streamed reply puts the whole input in
    ``content_block_start``; it was dropped (``arguments=''``). Now it is written canonically;
    an empty ``partial_json`` fragment (the API sends one first) does not replace it."""
    event = run(AnthropicMessagesStream, anthropic_with([
        anthropic_tool(0, {"path": "a.txt", "content": "é"}), json_delta(0, ""), block_stop(0)]))
    assert isinstance(event, at.StreamCompleted)
    assert event.tool_calls == (at.ToolCall(call_id="toolu_0", name="write_file",
                                            arguments='{"content":"é","path":"a.txt"}'),)
    assert runs_a_tool(commands_after(event))


def test_anthropic_deltas_win_over_a_start_block_input() -> None:
    """Both came: the deltas replace the start input, as the SDK's accumulator does."""
    event = run(AnthropicMessagesStream, anthropic_with([
        anthropic_tool(0, {"path": "stale"}), json_delta(0, '{"path": '),
        json_delta(0, '"fresh"}'), block_stop(0)]))
    assert isinstance(event, at.StreamCompleted)
    assert event.tool_calls[0].arguments == '{"path": "fresh"}'


def test_anthropic_start_block_input_too_deep_fails_naming_it() -> None:
    event = failed(run(AnthropicMessagesStream, anthropic_with([
        anthropic_tool(0, {"a": nested(5000)}), block_stop(0)])))
    assert "content_block_start.content_block.input cannot be written as JSON" in event.error


@pytest.mark.req("TL-11")
def test_anthropic_stream_ending_without_message_stop_is_a_network_failure() -> None:
    """``message_delta`` came, ``message_stop`` did not: the transport was cut. It used to
    complete with the delta's stop reason; ``message_stop`` alone decides a completion."""
    wires = anthropic_stream(Script(text=("hi",), finish="end_turn"), stop=False)
    assert wires[-1]["type"] == "message_delta"
    event = failed(run(AnthropicMessagesStream, wires))
    assert event == at.StreamFailed(
        request_id="t1/r1", network=True,
        error="the stream ended before message_stop: the message was cut off in transit")


@pytest.mark.req("TL-9")
def test_anthropic_no_message_stop_runs_no_closed_call() -> None:
    wires = anthropic_stream(Script(finish="tool_use", calls=(
        Call("toolu_1", "write_file", ('{"path": "a"}',)),)), stop=False)
    assert failed(run(AnthropicMessagesStream, wires)).network is True


@pytest.mark.parametrize(("middle", "named"), [
    ([anthropic_tool(0, {}),
      {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}],
     "content_block_delta.delta.type is text_delta, but block 0 is a tool_use block"),
    ([{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
      json_delta(0, '{"a": 1}')],
     "content_block_delta.delta.type is input_json_delta, but block 0 is a text block"),
])
def test_anthropic_a_delta_of_the_other_block_kind_fails(middle: list[Wire], named: str) -> None:
    """Such a delta was dropped silently (text lost, or arguments lost)."""
    assert named in failed(run(AnthropicMessagesStream, anthropic_with(middle))).error


# --- OpenAI Chat Completions ------------------------------------------------------------------


def chat_call(index: int, call_id: str | None, name: str | None, arguments: str) -> Wire:
    function: Wire = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    delta: Wire = {"index": index, "type": "function", "function": function}
    if call_id is not None:
        delta["id"] = call_id
    return chat_chunk([{"index": 0, "delta": {"tool_calls": [delta]}}])


def chat_end(output: int = 5) -> list[Wire]:
    return [chat_chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
            chat_chunk([], usage={"prompt_tokens": 9, "completion_tokens": output,
                                  "total_tokens": 9 + output})]


@pytest.mark.parametrize(("second", "named"), [
    (chat_call(0, "c2", "delete_file", ""), "choices[0].delta.tool_calls[0].id is 'c2', but "
                                            "tool call 0 began as 'c1'"),
    (chat_call(0, None, "delete_file", ""), "choices[0].delta.tool_calls[0].function.name is "
                                            "'delete_file', but tool call 0 began as "
                                            "'write_file'"),
])
def test_chat_a_new_id_or_name_at_a_used_index_fails(second: Wire, named: str) -> None:
    """A different id or name at an index already used was merged into the first call (the
    second call vanished, the first ran). The id and name come only in an index's first delta,
    so this is a wrong shape."""
    event = failed(run(ChatCompletionsStream, [
        chat_call(0, "c1", "write_file", '{"path": "a"}'), second, *chat_end()]))
    assert named in event.error


def test_chat_repeating_the_same_id_and_name_is_one_call() -> None:
    """Some OpenAI-compatible servers repeat the id and name in every delta of an index."""
    event = run(ChatCompletionsStream, [
        chat_call(0, "c1", "write_file", '{"path": '), chat_call(0, "c1", "write_file", '"a"}'),
        chat_call(0, "", None, ""), *chat_end()])
    assert isinstance(event, at.StreamCompleted)
    assert event.tool_calls == (at.ToolCall(call_id="c1", name="write_file",
                                            arguments='{"path": "a"}'),)


@pytest.mark.req("TL-4")
def test_chat_calls_reach_the_turn_in_index_order() -> None:
    """Order is the wire's ``index`` (where the SDK's accumulator places each call), not when a
    call first appeared: a server that interleaves still gives the model's order."""
    event = run(ChatCompletionsStream, [
        chat_call(1, "c_b", "second", '{"n": '), chat_call(0, "c_a", "first", "{}"),
        chat_call(1, None, None, "2}"), *chat_end()])
    assert isinstance(event, at.StreamCompleted)
    assert [(call.call_id, call.arguments) for call in event.tool_calls] == [
        ("c_a", "{}"), ("c_b", '{"n": 2}')]
    executed = [c for c in commands_after(event) if isinstance(c, at.ExecuteTool)]
    assert [c.call.call_id for c in executed] == ["c_a"]  # one at a time, the first first


@pytest.mark.req("TL-6")
def test_chat_arguments_nested_past_the_parser_are_malformed_not_a_crash() -> None:
    """Arguments ``[[[[...`` 200000 deep once raised RecursionError out of ``finish()``."""
    event = run(ChatCompletionsStream, [chat_call(0, "c1", "f", "[" * 200_000), *chat_end()],
                limit=None)
    assert isinstance(event, at.StreamCompleted)
    assert (event.malformed_tool_format, event.cut_off) == (True, None)


def test_an_error_object_nested_past_the_recursion_limit_is_read_without_crashing() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    event = failed(run(ChatCompletionsStream, [{"error": deep}]))
    assert event.error == "the engine reported an error: an error given as list, with no message"


def test_a_lone_surrogate_is_named_by_its_wire_field() -> None:
    event = failed(run(ChatCompletionsStream, [
        chat_chunk([{"index": 0, "delta": {"content": "ok \ud800"}}]), *chat_end()]))
    assert event.error == ("the OpenAI Chat Completions stream was malformed: choices[0].delta"
                           ".content holds a lone surrogate, which UTF-8 cannot encode")


# --- OpenAI Responses -------------------------------------------------------------------------


@pytest.mark.req("TL-9")
def test_responses_custom_tool_call_fails_rather_than_ending_as_if_nothing_was_asked() -> None:
    """A ``custom_tool_call`` item was skipped: the turn would end as if the model had asked
    for no tool. It is not a function call, so it is refused, naming the item type."""
    added: Wire = ResponseOutputItemAddedEvent(
        type="response.output_item.added", output_index=0, sequence_number=1,
        item=ResponseCustomToolCall(type="custom_tool_call", call_id="call_1", name="apply",
                                    input="*** Begin Patch", id="ctc_1")).model_dump()
    event = failed(run(ResponsesStream, [added]))
    assert event.error == (
        "response.output_item.added.item.type is custom_tool_call: the engine asked the host to "
        "run an item ResponsesStream does not read (only function_call items are calls)")


# --- whatever the wire holds ------------------------------------------------------------------

SAMPLE = Script(text=("Hi",), finish="tool_calls", calls=(Call("c1", "f", ('{"a": ', "1}")),))
GEMINI_SAMPLE: list[Wire] = [
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]}}],
     "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 1}},
    {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "f", "args": {"a": [1, {"b": None}]}}}]},
        "finishReason": "STOP"}], "usageMetadata": {"candidatesTokenCount": 3}}]
GEMINI_PIECES_SAMPLE: list[Wire] = [
    gemini_call({"name": "f", "willContinue": True, "partialArgs": [
        {"jsonPath": "$.a[0]", "stringValue": "x", "willContinue": True}]}, finish=None),
    gemini_call({"willContinue": True, "partialArgs": [
        {"jsonPath": "$.a[0]", "stringValue": "y"}, {"jsonPath": "$.b.c", "numberValue": 2}]},
        finish=None),
    gemini_call({"name": "f", "willContinue": False, "partialArgs": [
        {"jsonPath": "$['d']", "nullValue": "NULL_VALUE"}]})]
SAMPLES: dict[str, tuple[type[EngineStream], list[Wire]]] = {
    "chat": (ChatCompletionsStream, chat_stream(SAMPLE)),
    "anthropic": (AnthropicMessagesStream, anthropic_stream(
        Script(text=("Hi",), finish="tool_use", calls=SAMPLE.calls))),
    "responses": (ResponsesStream, responses_stream(Script(text=("Hi",), finish="completed",
                                                           calls=SAMPLE.calls))),
    "gemini": (GeminiStream, GEMINI_SAMPLE),
    "gemini-pieces": (GeminiStream, GEMINI_PIECES_SAMPLE),
}
WIRE_KEYS = ["type", "index", "id", "name", "input", "args", "delta", "functionCall",
             "willContinue", "partialArgs", "jsonPath", "stringValue", "numberValue",
             "nullValue", "tool_calls", "arguments", "item", "error"]
junk = st.one_of(
    st.recursive(st.none() | st.booleans() | st.integers(-2, 3) | st.floats()
                 | st.sampled_from(["", "x", "\ud800", "tool_use", "function_call",
                                    "input_json_delta", "text_delta", "custom_tool_call",
                                    "$.a", "$.a[0]", "$..a", "$['\\ud800']"]),
                 lambda inner: st.lists(inner, max_size=2)
                 | st.dictionaries(st.sampled_from(WIRE_KEYS), inner, max_size=3),
                 max_leaves=6),
    st.integers(60, 3000).map(nested),
)


def spots(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a wire object, as a path of keys and indexes."""
    found = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += spots(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += spots(inner, (*path, index))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """``value`` with ``new`` at ``path``; unchanged if an earlier fault removed the place."""
    if not path:
        return new
    step = path[0]
    in_dict = isinstance(value, dict) and step in value
    in_list = isinstance(value, list) and isinstance(step, int) and step < len(value)
    if not (in_dict or in_list):
        return value
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


@pytest.mark.parametrize("name", sorted(SAMPLES))
@given(data=st.data())
def test_no_exception_but_a_protocol_error_escapes_whatever_the_wire_holds(
        name: str, data: st.DataObject) -> None:
    """Any value at any place of a real stream (deep, surrogate, wrong type, a pieced call):
    ``feed`` and ``finish`` give the request's one event; only feeding a non-mapping raises,
    and that is a ``ProtocolError``."""
    kind, sample = SAMPLES[name]
    wires = list(sample)
    for _ in range(data.draw(st.integers(1, 3), label="faults")):
        at_wire = data.draw(st.integers(0, len(wires) - 1), label="wire")
        path = data.draw(st.sampled_from(spots(sample[at_wire])), label="path")
        wires[at_wire] = replaced(wires[at_wire], path, data.draw(junk, label="value"))
    acc = kind.start("t1/r1", max_output_tokens=data.draw(st.sampled_from([None, 3, 100])))
    for wire in wires:
        if acc.event is not None:
            break
        try:
            acc = acc.feed(wire)
        except at.ProtocolError:
            assert not isinstance(wire, dict)
    event = acc.finish()
    assert isinstance(event, at.StreamCompleted | at.StreamFailed)
    assert event.request_id == "t1/r1"
