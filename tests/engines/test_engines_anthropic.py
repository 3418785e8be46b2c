"""Anthropic Messages events (and whole messages), built with the anthropic SDK's own types, to
one event."""

from __future__ import annotations

import pytest
from anthropic.types import RawContentBlockDeltaEvent, RawContentBlockStartEvent
from engine_wire import (
    Call,
    Script,
    anthropic_message,
    anthropic_stream,
    commands_after,
    end_of,
    runs_a_tool,
)

import agentturn as at
from agentturn.engines import AnthropicMessagesStream, StreamEnded, Usage


def stream(chunks: list[dict[str, object]], limit: int | None = 4096) -> AnthropicMessagesStream:
    acc = AnthropicMessagesStream.start("t1/r1", max_output_tokens=limit)
    for chunk in chunks:
        acc = acc.feed(chunk)
    return acc


@pytest.mark.req("TL-10")
def test_text_and_the_final_usage() -> None:
    """Text deltas join; ``message_stop`` decides the event; usage is message_delta's."""
    acc = stream(anthropic_stream(Script(text=("Bon", "jour ", "🌍"), finish="end_turn",
                                         input_tokens=9, output_tokens=5)))
    assert acc.event == at.StreamCompleted(request_id="t1/r1", text="Bonjour 🌍",
                                           finish_reason="end_turn")
    assert acc.usage == Usage(input_tokens=9, output_tokens=5)
    with pytest.raises(StreamEnded):
        acc.feed({"type": "ping"})


@pytest.mark.req("TL-4")
def test_tool_use_blocks_join_their_partial_json_in_order() -> None:
    """Each tool_use block's arguments are its joined partial_json, not the ``{}`` placeholder."""
    acc = stream(anthropic_stream(Script(text=("Reading.",), finish="tool_use", calls=(
        Call("toolu_1", "read_file", ('{"path":', ' "ä/ß.txt"}')),
        Call("toolu_2", "list_dir", ()),
    ))))
    event = acc.event
    assert isinstance(event, at.StreamCompleted)
    assert event.tool_calls == (
        at.ToolCall(call_id="toolu_1", name="read_file", arguments='{"path": "ä/ß.txt"}'),
        at.ToolCall(call_id="toolu_2", name="list_dir", arguments=""),
    )
    assert (event.text, event.cut_off, event.malformed_tool_format) == ("Reading.", None, False)


@pytest.mark.req("TL-9", "TL-10")
def test_a_cut_block_relabelled_tool_use_runs_nothing() -> None:
    """A proxy relabels a block cut without ``content_block_stop`` as ``tool_use``: the
    unclosed block decides, whatever the label, even below the token limit."""
    acc = stream(anthropic_stream(Script(finish="tool_use", output_tokens=40, calls=(
        Call("toolu_1", "write_file", ('{"path": "a.py", "content": "x = ',), closed=False),))))
    event = acc.event
    assert isinstance(event, at.StreamCompleted)
    assert (event.finish_reason, event.cut_off) == ("tool_use", at.CutOffSignal.UNCLOSED_TOOL_BLOCK)
    commands = commands_after(event)
    assert not runs_a_tool(commands)
    outcome = end_of(commands)
    assert (outcome.kind, outcome.cut_off) == (at.OutcomeKind.OUTPUT_LIMIT,
                                               at.CutOffSignal.UNCLOSED_TOOL_BLOCK)


@pytest.mark.req("TL-9")
def test_max_tokens_is_an_output_limit() -> None:
    """``max_tokens`` cuts by its own label; the raw reason reaches the outcome."""
    acc = stream(anthropic_stream(Script(finish="max_tokens", calls=(
        Call("toolu_1", "f", ('{"a": ',), closed=True),))))
    assert isinstance(acc.event, at.StreamCompleted)
    outcome = end_of(commands_after(acc.event))
    assert outcome.kind is at.OutcomeKind.OUTPUT_LIMIT
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "max_tokens"


@pytest.mark.req("TL-9")
def test_refusal_is_content_filtered() -> None:
    """``refusal`` ends the turn withheld for policy, with its raw reason."""
    acc = stream(anthropic_stream(Script(text=("I won't",), finish="refusal")))
    assert isinstance(acc.event, at.StreamCompleted)
    outcome = end_of(commands_after(acc.event))
    assert outcome.kind is at.OutcomeKind.CONTENT_FILTERED
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "refusal"


def test_pause_turn_is_not_a_normal_completion() -> None:
    """``pause_turn`` keeps its raw reason and ends UNRECOGNIZED_FINISH; no call runs."""
    acc = stream(anthropic_stream(Script(finish="pause_turn", calls=(
        Call("toolu_1", "f", ('{}',)),))))
    assert isinstance(acc.event, at.StreamCompleted)
    commands = commands_after(acc.event)
    assert not runs_a_tool(commands)
    assert end_of(commands).kind is at.OutcomeKind.UNRECOGNIZED_FINISH


@pytest.mark.req("TL-11")
def test_an_error_event_mid_stream_fails_the_request() -> None:
    """An ``error`` event (overloaded) decides ``StreamFailed`` with the engine's words."""
    chunks = anthropic_stream(Script(text=("Hi",), finish="end_turn"))[:3]
    acc = stream([*chunks, {"type": "error", "error": {"type": "overloaded_error",
                                                       "message": "Overloaded"}}])
    assert acc.event == at.StreamFailed(
        request_id="t1/r1", error="the engine reported an error: overloaded_error: Overloaded")


@pytest.mark.req("TL-11")
def test_a_stream_cut_before_message_stop_is_a_network_failure() -> None:
    """No ``message_stop``: the transport broke; ``finish`` says so, resumable."""
    acc = stream(anthropic_stream(Script(text=("Hi",), finish="end_turn"))[:4])
    event = acc.finish()
    assert isinstance(event, at.StreamFailed) and event.network


def test_thinking_blocks_are_not_the_answer() -> None:
    """A thinking block's deltas are skipped; the text block is the answer."""
    chunks = anthropic_stream(Script(text=("Answer",), finish="end_turn"))
    thinking = [
        RawContentBlockStartEvent(type="content_block_start", index=5, content_block={
            "type": "thinking", "thinking": "", "signature": ""}).model_dump(),
        RawContentBlockDeltaEvent(type="content_block_delta", index=5, delta={
            "type": "thinking_delta", "thinking": "hmm"}).model_dump(),
    ]
    acc = stream([chunks[0], *thinking, *chunks[1:]])
    assert isinstance(acc.event, at.StreamCompleted) and acc.event.text == "Answer"


# --- a response asked for without streaming: one message object --------------------------------


@pytest.mark.req("TL-4", "TL-10")
def test_a_whole_message_reads_like_its_stream() -> None:
    """A ``message`` object gives the event its stream gives: the text, each ``tool_use``
    block's ``input`` as canonical JSON, in block order, the raw stop reason and the usage."""
    script = Script(text=("Reading.",), finish="tool_use", output_tokens=40, calls=(
        Call("toolu_1", "read_file", ('{"path": "ä/ß.txt"}',)),
        Call("toolu_2", "list_dir", ())))
    whole = stream(anthropic_message(script))
    assert whole.event == at.StreamCompleted(
        request_id="t1/r1", text="Reading.", finish_reason="tool_use", tool_calls=(
            at.ToolCall(call_id="toolu_1", name="read_file", arguments='{"path":"ä/ß.txt"}'),
            at.ToolCall(call_id="toolu_2", name="list_dir", arguments="")))
    assert whole.usage == Usage(input_tokens=12, output_tokens=40)


@pytest.mark.req("TL-9")
def test_a_whole_message_cut_or_mislabelled_at_the_limit_runs_nothing() -> None:
    """``max_tokens``, and a ``tool_use`` label with the output tokens at the limit, cut a
    whole message too: none of its calls runs."""
    call = Call("toolu_1", "write_file", ('{"path": "a.py", "content": "x"}',))
    honest = stream(anthropic_message(Script(finish="max_tokens", calls=(call,))), limit=256)
    lying = stream(anthropic_message(Script(finish="tool_use", output_tokens=256,
                                            calls=(call,))), limit=256)
    for acc in (honest, lying):
        event = acc.event
        assert isinstance(event, at.StreamCompleted) and event.cut_off is not None
        assert not runs_a_tool(commands_after(event, permission=True))
        assert end_of(commands_after(event)).kind is at.OutcomeKind.OUTPUT_LIMIT


@pytest.mark.parametrize(("block", "named"), [
    ("oops", "message.content[0]"),
    ({"type": "tool_use", "id": "t1", "name": "write_file"}, "message.content[0].input"),
    ({"type": "tool_use", "id": "t1", "name": "write_file", "input": None},
     "message.content[0].input"),
])
def test_a_whole_message_with_a_bad_block_fails_naming_it(block: object, named: str) -> None:
    """A content block that is not an object, a ``tool_use`` block without its ``input``:
    ``StreamFailed`` names it, and no call runs."""
    acc = stream([{"type": "message", "content": [block], "stop_reason": "tool_use"}])
    assert isinstance(acc.event, at.StreamFailed)
    assert named in acc.event.error
    assert not runs_a_tool(commands_after(acc.event, permission=True))
