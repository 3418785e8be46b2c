"""Gemini generateContent stream chunks, built with google-genai's own types, to one event."""

from __future__ import annotations

from typing import Any

import pytest

genai_types = pytest.importorskip("google.genai.types")  # google-genai needs Python 3.11

from engine_wire import commands_after, end_of, runs_a_tool  # noqa: E402

import agentturn as at  # noqa: E402
from agentturn.engines import GeminiStream, Usage, canonical_arguments  # noqa: E402

G: Any = genai_types


def chunk(parts: list[Any] | None = None, finish: str | None = None, output: int = 3,
          camel: bool = False) -> dict[str, Any]:
    response = G.GenerateContentResponse(
        candidates=[G.Candidate(content=G.Content(role="model", parts=parts or []),
                                finish_reason=finish)],
        usage_metadata=G.GenerateContentResponseUsageMetadata(
            prompt_token_count=10, candidates_token_count=output))
    if camel:  # the REST wire's own JSON
        dumped: dict[str, Any] = response.model_dump(mode="json", by_alias=True,
                                                     exclude_none=True)
        return dumped
    return response.model_dump()


def text(value: str) -> Any:
    return G.Part(text=value)


def call(name: str, args: dict[str, Any]) -> Any:
    return G.Part(function_call=G.FunctionCall(name=name, args=args))


def run(chunks: list[dict[str, Any]], limit: int | None = 1000) -> at.StreamCompleted:
    acc = GeminiStream.start("t1/r1", max_output_tokens=limit)
    for one in chunks:
        acc = acc.feed(one)
        assert acc.event is None
    event = acc.finish()
    assert isinstance(event, at.StreamCompleted), event
    return event


@pytest.mark.req("TL-10")
def test_text_joins_and_the_last_usage_is_final() -> None:
    """Text parts join across chunks; usage comes on every chunk, the last one counts."""
    acc = GeminiStream.start("t1/r1")
    for one in [chunk([text("Guten ")], output=2), chunk([text("Tag")], "STOP", output=4)]:
        acc = acc.feed(one)
    assert acc.finish() == at.StreamCompleted(request_id="t1/r1", text="Guten Tag",
                                              finish_reason="STOP")
    assert acc.usage == Usage(input_tokens=10, output_tokens=4)


@pytest.mark.req("TL-4")
def test_function_calls_get_derived_ids_and_canonical_argument_strings() -> None:
    """No ids on the wire: ``{request_id}/call-{n}``; parsed args serialized canonically
    (sorted keys, no spaces, non-ASCII kept)."""
    event = run([chunk([text("Two calls.")]),
                 chunk([call("write", {"path": "é.txt", "content": "naïve ✓"}),
                        call("now", {})], "STOP")])
    assert event.tool_calls == (
        at.ToolCall(call_id="t1/r1/call-1", name="write",
                    arguments='{"content":"naïve ✓","path":"é.txt"}'),
        at.ToolCall(call_id="t1/r1/call-2", name="now", arguments="{}"),
    )
    assert canonical_arguments({"b": [1, {"z": None, "a": 2}]}) == '{"b":[1,{"a":2,"z":null}]}'


def test_the_rest_wire_json_gives_the_same_event_as_the_sdk_dump() -> None:
    """camelCase REST JSON and the SDK's snake_case python dump read alike."""
    def chunks(camel: bool) -> list[dict[str, Any]]:
        return [chunk([text("Hi")], camel=camel),
                chunk([call("f", {"x": 1})], "STOP", camel=camel)]

    assert run(chunks(camel=True)) == run(chunks(camel=False))


@pytest.mark.req("TL-9")
def test_max_tokens_is_an_output_limit() -> None:
    """``MAX_TOKENS`` cuts; the calls of the response do not run."""
    event = run([chunk([call("f", {"a": 1})], "MAX_TOKENS")])
    assert event.cut_off is at.CutOffSignal.FINISH_REASON
    commands = commands_after(event)
    assert not runs_a_tool(commands)
    assert end_of(commands).kind is at.OutcomeKind.OUTPUT_LIMIT


@pytest.mark.req("TL-9")
def test_stop_at_the_token_limit_is_cut() -> None:
    """``STOP`` with the output tokens at the limit: cut all the same."""
    event = run([chunk([call("f", {"a": 1})], "STOP", output=128)], limit=128)
    assert event.cut_off is at.CutOffSignal.OUTPUT_TOKEN_LIMIT
    assert not runs_a_tool(commands_after(event))


@pytest.mark.req("TL-9")
def test_safety_is_content_filtered() -> None:
    """``SAFETY`` is withheld for policy, raw reason kept."""
    outcome = end_of(commands_after(run([chunk([text("I ")], "SAFETY")])))
    assert outcome.kind is at.OutcomeKind.CONTENT_FILTERED
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "SAFETY"


@pytest.mark.req("TL-6")
def test_malformed_function_call_takes_the_one_corrective_retry() -> None:
    """``MALFORMED_FUNCTION_CALL`` is the malformed-format path: a corrective retry."""
    event = run([chunk([], "MALFORMED_FUNCTION_CALL")])
    assert (event.finish_reason, event.malformed_tool_format, event.cut_off) == (
        "MALFORMED_FUNCTION_CALL", True, None)
    retries = [c for c in commands_after(event) if isinstance(c, at.RequestModelStream)]
    assert [r.corrective for r in retries] == [True]


@pytest.mark.req("TL-11")
def test_an_error_chunk_fails_the_request() -> None:
    """A raw ``{"error": ...}`` chunk mid-stream decides ``StreamFailed``."""
    acc = GeminiStream.start("t1/r1").feed(chunk([text("Hal")]))
    acc = acc.feed({"error": {"code": 503, "message": "The model is overloaded.",
                              "status": "UNAVAILABLE"}})
    assert acc.event == at.StreamFailed(
        request_id="t1/r1", error="the engine reported an error: 503: The model is overloaded.")


def test_thought_parts_are_not_the_answer() -> None:
    """Thought summaries are skipped."""
    event = run([chunk([G.Part(text="pondering", thought=True), text("42")], "STOP")])
    assert event.text == "42"


@pytest.mark.req("TL-10")
def test_any_split_of_the_text_gives_the_same_event() -> None:
    """Text re-chunked across chunks (calls come whole on this wire) gives the same event."""
    from hypothesis import given
    from hypothesis import strategies as st

    @given(words=st.lists(st.text(max_size=6), max_size=8))
    def check(words: list[str]) -> None:
        split = run([chunk([text(w)]) for w in words if w] + [chunk([], "STOP")])
        whole = run([chunk([text("".join(words))] if "".join(words) else []),
                     chunk([], "STOP")])
        assert split == whole and whole.text == "".join(words)

    check()
