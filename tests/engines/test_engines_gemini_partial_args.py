"""Vertex AI's streamed function-call arguments (``partialArgs``), built with google-genai's own
``FunctionCall`` / ``PartialArg`` types and dumped as the REST wire's JSON, to one event."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

genai_types = pytest.importorskip("google.genai.types")  # google-genai needs Python 3.11

from engine_wire import commands_after, end_of, runs_a_tool  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import agentturn as at  # noqa: E402
from agentturn.engines import GeminiStream  # noqa: E402

G: Any = genai_types
Wire = dict[str, Any]


def chunk(*calls: Any, finish: str | None = None, output: int = 5, camel: bool = True) -> Wire:
    """One ``GenerateContentResponse`` holding ``calls`` (``FunctionCall`` objects) as parts."""
    response = G.GenerateContentResponse(
        candidates=[G.Candidate(content=G.Content(role="model", parts=[
            G.Part(function_call=call) for call in calls]), finish_reason=finish)],
        usage_metadata=G.GenerateContentResponseUsageMetadata(
            prompt_token_count=10, candidates_token_count=output))
    if camel:  # the REST wire's own JSON
        dumped: Wire = response.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped
    return response.model_dump()


def opens(name: str, *args: Any, call_id: str | None = None) -> Any:
    """The first piece of a call: its name, ``willContinue: true``."""
    return G.FunctionCall(name=name, id=call_id, partial_args=list(args) or None,
                          will_continue=True)


def more(*args: Any) -> Any:
    return G.FunctionCall(partial_args=list(args), will_continue=True)


def ends(*args: Any, name: str | None = None) -> Any:
    """The last piece of a call (``willContinue`` false)."""
    return G.FunctionCall(name=name, partial_args=list(args) or None, will_continue=False)


def arg(path: str, value: Any = None, *, cont: bool | None = None, null: bool = False) -> Any:
    kinds = {str: "string_value", bool: "bool_value", int: "number_value",
             float: "number_value"}
    fields: dict[str, Any] = {"json_path": path, "will_continue": cont}
    if null:
        fields["null_value"] = "NULL_VALUE"
    elif value is not None:
        fields[kinds[type(value)]] = value
    return G.PartialArg(**fields)


def feed(chunks: list[Wire], limit: int | None = 1000) -> at.StreamCompleted | at.StreamFailed:
    acc = GeminiStream.start("t1/r1", max_output_tokens=limit)
    for one in chunks:
        acc = acc.feed(one)
        if acc.event is not None:
            break
    return acc.finish()


def completed(chunks: list[Wire], limit: int | None = 1000) -> at.StreamCompleted:
    event = feed(chunks, limit)
    assert isinstance(event, at.StreamCompleted), event
    return event


def failed(chunks: list[Wire]) -> at.StreamFailed:
    event = feed(chunks)
    assert isinstance(event, at.StreamFailed), event
    assert event.network is False
    assert not runs_a_tool(commands_after(event))
    return event


WRITE = [
    chunk(opens("write_file", arg("$.path", "notes/", cont=True))),
    chunk(more(arg("$.path", "today.md"), arg("$.content", "- buy ", cont=True))),
    chunk(more(arg("$.content", "milk\n", cont=True))),
    chunk(more(arg("$.content", "- call Ana"))),
    chunk(ends(arg("$.append", True), name="write_file"), finish="STOP"),
]


@pytest.mark.req("TL-4", "TL-10")
def test_one_call_streamed_in_pieces_is_assembled_and_runs() -> None:
    """Strings in pieces join in order; the call reads like a whole one (derived id, canonical
    arguments) and runs."""
    event = completed(WRITE)
    assert event.tool_calls == (at.ToolCall(
        call_id="t1/r1/call-1", name="write_file",
        arguments='{"append":true,"content":"- buy milk\\n- call Ana","path":"notes/today.md"}'),)
    assert (event.finish_reason, event.cut_off, event.malformed_tool_format) == (
        "STOP", None, False)
    assert runs_a_tool(commands_after(event))


def test_the_same_call_sent_whole_gives_the_same_event() -> None:
    """Streamed or whole (``args``), one call gives one argument string; a python-mode dump
    reads like the REST JSON."""
    whole = completed([chunk(G.FunctionCall(name="write_file", args={
        "path": "notes/today.md", "content": "- buy milk\n- call Ana", "append": True}),
        finish="STOP")])
    assert completed(WRITE) == whole
    python_mode = [chunk(*[G.FunctionCall.model_validate(part["functionCall"])
                           for part in wire["candidates"][0]["content"]["parts"]],
                         finish=wire["candidates"][0].get("finishReason"), camel=False)
                   for wire in WRITE]
    assert completed(python_mode) == whole


@pytest.mark.req("TL-4")
def test_two_streamed_calls_keep_their_order_and_ids() -> None:
    """Two calls, one after the other, each with the wire's id when it sent one."""
    event = completed([
        chunk(opens("read_file", arg("$.path", "a.txt"), call_id="fc-1")),
        chunk(ends(name="read_file")),
        chunk(opens("grep", arg("$.pattern", "TO", cont=True))),
        chunk(more(arg("$.pattern", "DO")), ends(arg("$.limit", 20.0)), finish="STOP"),
    ])
    assert event.tool_calls == (
        at.ToolCall(call_id="fc-1", name="read_file", arguments='{"path":"a.txt"}'),
        at.ToolCall(call_id="t1/r1/call-2", name="grep",
                    arguments='{"limit":20,"pattern":"TODO"}'))


def test_nested_objects_and_arrays_are_built_from_their_paths() -> None:
    """``$.a.b``, ``$.a[0].x``, bracketed names with escapes, a null, a fraction: one object."""
    event = completed([
        chunk(opens("edit", arg("$.file.path", "app.py"))),
        chunk(more(arg("$.edits[0].line", 3), arg("$.edits[0].text", "x = ", cont=True),
                   arg("$.edits[1].line", 9))),
        chunk(more(arg("$.edits[0].text", "1"), arg("$.edits[1].text", null=True),
                   arg("$['odd key']['it\\'s']", 0.5), arg("$.file.tags[0][0]", "a"))),
        chunk(ends(), finish="STOP"),
    ])
    assert json.loads(event.tool_calls[0].arguments) == {
        "file": {"path": "app.py", "tags": [["a"]]},
        "edits": [{"line": 3, "text": "x = 1"}, {"line": 9, "text": None}],
        "odd key": {"it's": 0.5}}
    assert event.cut_off is None


def test_the_sdks_own_example_history_reads_as_one_call() -> None:
    """google-genai's test history: the name alone, then the name again with the last piece
    (a null) and ``willContinue: false``."""
    event = completed([chunk(opens("get_current_weather")),
                       chunk(ends(arg("$.country", null=True), name="get_current_weather"),
                             finish="STOP")])
    assert event.tool_calls[0].arguments == '{"country":null}'


def test_a_null_the_sdk_read_as_absent_is_null() -> None:
    """Proto3 JSON writes ``nullValue: null``; the SDK's types drop it, leaving a piece with
    only a path: both read as null."""
    rest = {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {
        "name": "f", "partialArgs": [{"jsonPath": "$.a", "nullValue": None},
                                     {"jsonPath": "$.b"}]}}]}, "finishReason": "STOP"}]}
    assert completed([rest]).tool_calls[0].arguments == '{"a":null,"b":null}'


@pytest.mark.req("TL-9", "TL-10")
def test_a_cut_in_the_middle_of_a_string_is_an_output_limit() -> None:
    """``MAX_TOKENS`` while a string still continues: cut, never run, never an error."""
    event = completed([*WRITE[:2], chunk(more(arg("$.content", "mi", cont=True)),
                                         finish="MAX_TOKENS", output=1000)])
    assert event.cut_off is at.CutOffSignal.FINISH_REASON
    assert json.loads(event.tool_calls[0].arguments)["content"] == "- buy mi"
    commands = commands_after(event)
    assert not runs_a_tool(commands)
    outcome = end_of(commands)
    assert outcome.kind is at.OutcomeKind.OUTPUT_LIMIT
    assert outcome.finish_reason is not None and outcome.finish_reason.raw == "MAX_TOKENS"


@pytest.mark.req("TL-9")
@pytest.mark.parametrize("last", [
    # the call still willContinue when STOP comes
    chunk(more(arg("$.content", "milk"), arg("$.append", False)), finish="STOP"),
    # the call ended, but one of its strings still willContinue
    chunk(ends(arg("$.content", "mi", cont=True)), finish="STOP"),
], ids=["call-continues", "string-continues"])
def test_a_mislabelled_cut_is_an_unclosed_block(last: Wire) -> None:
    """``STOP`` over a call that was never finished: cut (``UNCLOSED_TOOL_BLOCK``), never run."""
    event = completed([*WRITE[:2], last], limit=None)
    assert event.cut_off is at.CutOffSignal.UNCLOSED_TOOL_BLOCK
    commands = commands_after(event)
    assert not runs_a_tool(commands)
    assert end_of(commands).kind is at.OutcomeKind.OUTPUT_LIMIT


@pytest.mark.req("TL-11")
def test_a_transport_that_ends_mid_call_is_a_network_failure() -> None:
    """No finish reason at all: resumable ``StreamFailed(network=True)``, as for any stream."""
    event = feed(WRITE[:3])
    assert isinstance(event, at.StreamFailed) and event.network is True


def bad(*pieces: Wire) -> Wire:
    return {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": piece} for piece in pieces]}, "finishReason": "STOP"}]}


P = "candidates[0].content.parts[0].functionCall"


@pytest.mark.parametrize(("wire", "error"), [
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$..a", "stringValue": "x"}]}),
     f"{P}.partialArgs[0].jsonPath '$..a' cannot be read at 1"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a[*]", "stringValue": "x"}]}),
     f"{P}.partialArgs[0].jsonPath '$.a[*]' addresses no single value at 3"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$[0]", "stringValue": "x"}]}),
     f"{P}.partialArgs[0].jsonPath '$[0]' must name a member of the arguments"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "a", "stringValue": "x"}]}),
     f"{P}.partialArgs[0].jsonPath 'a' must start with '$'"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": 7, "stringValue": "x"}]}),
     f"{P}.partialArgs[0].jsonPath must be str, got int"),
    (bad({"name": "f", "partialArgs": [{"stringValue": "x"}]}),
     f"{P}.partialArgs[0].jsonPath is missing"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a", "numberValue": "1"}]}),
     f"{P}.partialArgs[0].numberValue must be int/float, got str"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a", "numberValue": True}]}),
     f"{P}.partialArgs[0].numberValue must be int/float, got bool"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a", "nullValue": "NONE"}]}),
     f"{P}.partialArgs[0].nullValue must be NULL_VALUE or null, got str"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a", "stringValue": "x",
                                        "boolValue": True}]}),
     f"{P}.partialArgs[0] holds more than one value (stringValue, boolValue)"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a", "numberValue": 1,
                                        "willContinue": True}]}),
     f"{P}.partialArgs[0].willContinue is true, but only a string value comes in pieces"),
    (bad({"name": "f", "partialArgs": {"jsonPath": "$.a"}}),
     f"{P}.partialArgs must be list, got dict"),
    (bad({"name": "f", "partialArgs": ["$.a"]}),
     f"{P}.partialArgs[0] must be an object, got str"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a", "stringValue": "x"},
                                       {"jsonPath": "$.a", "stringValue": "y"}]}),
     f"{P}.partialArgs[1] sets '$.a' a second time"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a", "stringValue": "x"},
                                       {"jsonPath": "$.a.b", "stringValue": "y"}]}),
     f"{P}.partialArgs[1] addresses '$.a.b', but '$.a' is a string there, not an object"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a[0]", "stringValue": "x"},
                                       {"jsonPath": "$.a.b", "stringValue": "y"}]}),
     f"{P}.partialArgs[1] addresses '$.a.b', but '$.a' is an array there, not an object"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a[1]", "stringValue": "x"}]}),
     f"{P}.partialArgs[0] addresses '$.a[1]', which skips index 0 of '$.a'"),
    (bad({"name": "f", "partialArgs": [{"jsonPath": "$.a", "stringValue": "x",
                                        "willContinue": True},
                                       {"jsonPath": "$.a", "numberValue": 2}]}),
     f"{P}.partialArgs[1] continues the string at '$.a' with a value that is not a string"),
    (bad({"name": "f", "args": {"a": 1}, "partialArgs": [{"jsonPath": "$.a", "numberValue": 2}]}),
     f"{P}.args.a differs from what partialArgs sent"),
    (bad({"name": "f", "willContinue": True}, {"name": "g", "willContinue": False}),
     "candidates[0].content.parts[1].functionCall.name is 'g' while the call 'f' still streams"),
    (bad({"willContinue": True, "partialArgs": [{"jsonPath": "$.a", "stringValue": "x"}]}),
     f"{P}.name is missing"),
    (bad({"name": "f", "willContinue": "yes"}), f"{P}.willContinue must be bool, got str"),
])
def test_pieces_that_cannot_be_read_fail_naming_the_field(wire: Wire, error: str) -> None:
    """A bad path, a wrong type, a value set twice or placed where it cannot go: a
    ``StreamFailed`` (not resumable) naming the piece, never an exception, never a run."""
    event = failed([wire])
    assert event.error.startswith("the Gemini generateContent stream was malformed: " + error), (
        event.error)


def test_a_path_deeper_than_the_limit_fails_naming_the_field() -> None:
    """Nesting is bounded like whole ``args``: 64 steps, 64 objects, at most."""
    deep = "$" + ".a" * 65
    event = failed([bad({"name": "f", "partialArgs": [{"jsonPath": deep, "numberValue": 1}]})])
    assert "has more than 64 steps" in event.error
    ok = completed([bad({"name": "f", "partialArgs": [{"jsonPath": "$" + ".a" * 64,
                                                       "numberValue": 1}]})])
    assert ok.tool_calls[0].arguments.count("{") == 64


# --- properties -------------------------------------------------------------------------------

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 53), 2 ** 53),
                    st.integers(-1000, 1000).map(lambda n: n + 0.25),
                    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12))
keys = st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=4)
values = st.recursive(scalars, lambda inner: st.lists(inner, min_size=1, max_size=3)
                      | st.dictionaries(keys, inner, min_size=1, max_size=3), max_leaves=8)
arguments = st.dictionaries(keys, values, max_size=4)


def leaves(value: Any, path: str = "$") -> list[tuple[str, Any]]:
    """Every scalar of ``value`` with its normalized JSON path (RFC 9535)."""
    if isinstance(value, dict):
        return [leaf for key, inner in value.items()
                for leaf in leaves(inner, f"{path}[{json.dumps(key)}]")]
    if isinstance(value, list):
        return [leaf for n, inner in enumerate(value) for leaf in leaves(inner, f"{path}[{n}]")]
    return [(path, value)]


def streamed(name: str, args: dict[str, Any], cuts: list[int], per_chunk: int) -> list[Any]:
    """``args`` as partial args: every string split at ``cuts``; then grouped ``per_chunk``
    pieces to a ``FunctionCall`` (the first opens it, an empty last one ends it)."""
    pieces: list[Any] = []
    for path, value in leaves(args):
        if isinstance(value, str) and value:
            points = sorted({c % (len(value) + 1) for c in cuts} | {0, len(value)})
            parts = [value[a:b] for a, b in itertools.pairwise(points) if b > a]
            pieces += [arg(path, part, cont=n < len(parts) - 1) for n, part in enumerate(parts)]
        else:
            pieces.append(arg(path, value, null=value is None))
    groups = [pieces[n:n + per_chunk] for n in range(0, len(pieces), per_chunk)]
    return [opens(name), *[more(*group) for group in groups], ends(name=name)]


@pytest.mark.req("TL-10")
@given(calls=st.lists(arguments, min_size=1, max_size=2), cuts=st.lists(st.integers(0, 20),
                                                                        max_size=4),
       per_chunk=st.integers(1, 4), per_wire=st.integers(1, 3))
def test_any_streaming_of_any_arguments_gives_the_whole_calls(
        calls: list[dict[str, Any]], cuts: list[int], per_chunk: int, per_wire: int) -> None:
    """Any arguments (nested objects and arrays, strings cut anywhere), streamed in any pieces
    and chunks, give the event of the same calls sent whole."""
    parts = [part for n, args in enumerate(calls) for part in streamed(f"f{n}", args, cuts,
                                                                        per_chunk)]
    wires = [chunk(*parts[n:n + per_wire]) for n in range(0, len(parts), per_wire)]
    whole = completed([chunk(*[G.FunctionCall(name=f"f{n}", args=args)
                               for n, args in enumerate(calls)], finish="STOP")])
    assert completed([*wires, chunk(finish="STOP")]) == whole
    assert [json.loads(call.arguments) for call in whole.tool_calls] == calls


@pytest.mark.req("TL-9")
@given(args=arguments.filter(lambda args: len(leaves(args)) > 0), cuts=st.lists(
    st.integers(0, 20), max_size=4), keep=st.integers(0, 200), label=st.sampled_from(
    ["STOP", "MAX_TOKENS"]))
def test_a_call_stream_stopped_anywhere_never_runs(args: dict[str, Any], cuts: list[int],
                                                   keep: int, label: str) -> None:
    """The pieces of a call stopped at any point before its end, under any label: cut off,
    never run, never an error."""
    parts = streamed("write_file", args, cuts, per_chunk=1)
    wires = [chunk(part) for part in parts[:keep % (len(parts) - 1) + 1]]
    event = completed([*wires, chunk(finish=label)])
    assert event.cut_off is not None
    assert not runs_a_tool(commands_after(event))
