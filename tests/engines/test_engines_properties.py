"""Properties of every accumulator: re-chunking changes nothing, and no tool call of a response
that was cut off ever runs, whatever the engine labels it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from engine_wire import (
    Call,
    Script,
    anthropic_stream,
    chat_completion,
    chat_stream,
    commands_after,
    responses_stream,
    runs_a_tool,
)
from hypothesis import given
from hypothesis import strategies as st

import agentturn as at
from agentturn.engines import (
    AnthropicMessagesStream,
    ChatCompletionsStream,
    EngineStream,
    ResponsesStream,
)

Streamer = Callable[[Script], list[dict[str, Any]]]
FORMATS: dict[str, tuple[type[EngineStream], Streamer, dict[str, str]]] = {
    "chat": (ChatCompletionsStream, chat_stream,
             {"stop": "stop", "tools": "tool_calls", "cut": "length"}),
    # the same reader, fed a response asked for without streaming (one chat.completion object)
    "chat-whole": (ChatCompletionsStream, chat_completion,
                   {"stop": "stop", "tools": "tool_calls", "cut": "length"}),
    "anthropic": (AnthropicMessagesStream, anthropic_stream,
                  {"stop": "end_turn", "tools": "tool_use", "cut": "max_tokens"}),
    "responses": (ResponsesStream, responses_stream, {"stop": "completed", "tools": "completed"}),
}


def feed(kind: type[EngineStream], chunks: list[dict[str, Any]],
         limit: int | None) -> at.engines.EngineEvent:
    acc = kind.start("t1/r1", max_output_tokens=limit)
    for chunk in chunks:
        if acc.event is not None:
            break
        acc = acc.feed(chunk)
    return acc.finish()


def pieces(text: str, cuts: list[int]) -> tuple[str, ...]:
    """``text`` split at ``cuts`` (indexes into it); never an empty piece but for ``""``."""
    points = sorted({cut % (len(text) + 1) for cut in cuts} | {0, len(text)})
    return tuple(text[a:b] for a, b in itertools.pairwise(points) if b > a)


unicode_text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=30)
arguments = st.dictionaries(st.text(max_size=5), st.one_of(unicode_text, st.integers(),
                                                           st.booleans(), st.none()),
                            max_size=3).map(lambda value: json.dumps(value, ensure_ascii=False))
splits = st.lists(st.integers(0, 200), max_size=8)


@pytest.mark.req("TL-10")
@pytest.mark.parametrize("name", sorted(FORMATS))
@given(text=unicode_text, text_cuts=splits,
       calls=st.lists(st.tuples(arguments, splits), max_size=3))
def test_any_split_into_chunks_gives_the_same_event(
        name: str, text: str, text_cuts: list[int], calls: list[tuple[str, list[int]]]) -> None:
    """Re-chunking the text and argument deltas of a valid stream gives the same event, with
    the text and each raw argument string whole."""
    kind, streamer, labels = FORMATS[name]
    label = labels["tools"] if calls else labels["stop"]

    def script(split: bool) -> Script:
        return Script(
            text=pieces(text, text_cuts if split else []), finish=label, calls=tuple(
                Call(f"call_{n}", "tool", pieces(args, cuts if split else []))
                for n, (args, cuts) in enumerate(calls)))

    whole = feed(kind, streamer(script(split=False)), limit=1000)
    assert feed(kind, streamer(script(split=True)), limit=1000) == whole
    assert whole == at.StreamCompleted(
        request_id="t1/r1", text=text, finish_reason=label, tool_calls=tuple(
            at.ToolCall(call_id=f"call_{n}", name="tool", arguments=args)
            for n, (args, _) in enumerate(calls)))


@st.composite
def cut_or_not(draw: st.DrawFn) -> tuple[str, Script, int, bool]:
    """A response with tool calls, and whether it was really cut off: its label may say
    anything (the lying engines), its calls may stop mid-JSON or unclosed, its output tokens may
    reach the limit."""
    name = draw(st.sampled_from(sorted(FORMATS)))
    labels = FORMATS[name][2]
    limit = draw(st.integers(16, 64))
    output = draw(st.integers(1, limit + 4))
    calls = []
    unclosed = False
    for n in range(draw(st.integers(1, 3))):
        args = draw(arguments)
        if draw(st.booleans()):
            args = args[:draw(st.integers(0, len(args)))]  # stopped mid-JSON
        closed = name.startswith("chat") or draw(st.booleans())
        unclosed |= not closed
        calls.append(Call(f"call_{n}", "write_file", pieces(args, draw(splits)), closed=closed))
    label = draw(st.sampled_from(sorted(set(labels.values()))))
    cut = output >= limit or unclosed or label == labels.get("cut")
    return name, Script(finish=label, calls=tuple(calls), output_tokens=output), limit, cut


@pytest.mark.req("TL-9", "TL-6")
@given(case=cut_or_not(), permission=st.booleans())
def test_no_tool_call_of_a_cut_off_response_ever_runs(
        case: tuple[str, Script, int, bool], permission: bool) -> None:
    """Whatever the label, a response cut off (tokens at the limit, a block never closed, a
    cut label) runs no call and ends OUTPUT_LIMIT; one that was not cut runs its first call
    unless its arguments are malformed, which takes the corrective retry (TL-6)."""
    name, script, limit, cut = case
    kind, streamer, _ = FORMATS[name]
    event = feed(kind, streamer(script), limit)
    assert isinstance(event, at.StreamCompleted)
    commands = commands_after(event, permission=permission)
    if cut:
        assert event.cut_off is not None
        assert not runs_a_tool(commands)
        ends = [c for c in commands if isinstance(c, at.EndTurn)]
        assert [e.outcome.kind for e in ends] == [at.OutcomeKind.OUTPUT_LIMIT]
        assert ends[0].outcome.finish_reason is not None
        assert ends[0].outcome.finish_reason.raw == script.finish  # TL-10
    elif event.malformed_tool_format:
        assert not runs_a_tool(commands)
        assert any(isinstance(c, at.RequestModelStream) and c.corrective for c in commands)
    else:
        assert runs_a_tool(commands)
