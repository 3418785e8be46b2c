"""What the engines' signal does downstream: the turn honours it, the outcome carries it, a
trace keeps it, ``explain`` says which signal decided; and the accumulators' host-misuse errors."""

from __future__ import annotations

import pytest
from engine_wire import Call, Script, chat_stream

import agentturn as at
from agentturn.engines import ChatCompletionsStream, GeminiStream, StreamEnded, WireInputError
from agentturn.tools.explain import explain
from agentturn.trace import read_trace, write_trace


def turn_steps(event: at.StreamCompleted) -> list[tuple[at.Event, tuple[at.Command, ...]]]:
    state = at.TurnState.create("chat-1", at.TurnConfig(auto_title=False))
    steps: list[tuple[at.Event, tuple[at.Command, ...]]] = []
    pending: list[at.Event] = [at.PromptSubmitted(turn_id="t1", message_id="m1",
                                                  text="write it")]
    while pending:
        one = pending.pop(0)
        state, commands = at.reduce(state, one)
        steps.append((one, commands))
        pending += [at.Persisted(key=c.key) for c in commands if isinstance(c, at.Persist)]
        if any(isinstance(c, at.RequestModelStream) for c in commands):
            pending += [at.StreamOpened(request_id="t1/r1"), event]
    return steps


@pytest.mark.req("TL-9", "TL-10")
def test_a_cut_off_signal_forces_the_output_limit_and_explain_names_it() -> None:
    """A ``tool_calls`` label with the tokens at the limit: ``EndTurn`` carries the raw
    reason and the signal; the trace keeps both; ``explain`` says which signal decided."""
    script = Script(finish="tool_calls", output_tokens=100,
                    calls=(Call("c1", "write_file", ('{"path": "a.py"}',)),))
    acc = ChatCompletionsStream.start("t1/r1", max_output_tokens=100)
    for chunk in chat_stream(script):
        acc = acc.feed(chunk)
    event = acc.finish()
    assert isinstance(event, at.StreamCompleted)
    steps = turn_steps(event)
    ends = [c for _, commands in steps for c in commands if isinstance(c, at.EndTurn)]
    assert len(ends) == 1
    outcome = ends[0].outcome
    assert (outcome.kind, outcome.cut_off) == (at.OutcomeKind.OUTPUT_LIMIT,
                                               at.CutOffSignal.OUTPUT_TOKEN_LIMIT)
    assert outcome.finish_reason == at.FinishReason(kind=at.FinishKind.TOOL_CALLS,
                                                    raw="tool_calls")
    assert not any(isinstance(c, at.ExecuteTool) for _, commands in steps for c in commands)
    trace = read_trace("\n".join(write_trace("turn", at.TurnConfig(auto_title=False), steps,
                                             chat_id="chat-1")) + "\n")
    assert [(s.event, s.commands) for s in trace.steps] == steps
    story = explain(trace)
    assert "[finish reason 'tool_calls'; cut off: output_token_limit]" in story
    assert ("What showed the cut: the output tokens reached the limit the request asked for, "
            "whatever the finish reason said.") in story


@pytest.mark.req("TL-9", "TL-10")
def test_a_length_label_alone_is_named_as_the_signal() -> None:
    """A host's own ``length`` event (no ``cut_off``) ends OUTPUT_LIMIT with the signal
    FINISH_REASON, and the message it always had."""
    steps = turn_steps(at.StreamCompleted(request_id="t1/r1", text="", finish_reason="length",
                                          tool_calls=(at.ToolCall(call_id="c", name="f"),)))
    ends = [c for _, commands in steps for c in commands if isinstance(c, at.EndTurn)]
    assert ends[0].outcome.cut_off is at.CutOffSignal.FINISH_REASON
    assert ends[0].outcome.message == ("The response was cut at the engine's output limit "
                                       "(finish reason 'length'); its 1 tool call(s) were not "
                                       "run.")


def test_other_endings_name_no_signal() -> None:
    """A content filter is not an output limit: no ``cut_off`` on its outcome."""
    steps = turn_steps(at.StreamCompleted(request_id="t1/r1", text="",
                                          finish_reason="content_filter"))
    ends = [c for _, commands in steps for c in commands if isinstance(c, at.EndTurn)]
    assert ends[0].outcome.cut_off is None


def test_start_refuses_bad_arguments_naming_them() -> None:
    """An empty request id or a limit below 1 is refused when the accumulator is made."""
    with pytest.raises(at.FieldError, match="request_id"):
        ChatCompletionsStream.start("")
    with pytest.raises(at.FieldError, match="max_output_tokens"):
        GeminiStream.start("t1/r1", max_output_tokens=0)


def test_host_misuse_is_a_protocol_error_and_changes_nothing() -> None:
    """Feeding what is not a mapping, or feeding a decided stream, raises a typed
    ``ProtocolError``; the accumulator the host holds is still valid."""
    acc = ChatCompletionsStream.start("t1/r1")
    with pytest.raises(WireInputError):
        acc.feed("data: {}")  # type: ignore[arg-type]
    failed = acc.feed({"error": {"message": "boom"}})
    with pytest.raises(StreamEnded) as raised:
        failed.feed({"choices": []})
    assert isinstance(raised.value, at.ProtocolError)
    assert failed.finish() == at.StreamFailed(request_id="t1/r1",
                                              error="the engine reported an error: boom")
    assert acc.event is None and acc.abort("reset by peer") == at.StreamFailed(
        request_id="t1/r1", error="reset by peer", network=True)


def test_the_same_chunks_always_give_the_same_event_and_old_values_stay_valid() -> None:
    """Feeding returns a new accumulator; the one fed stays as it was (a value)."""
    chunks = chat_stream(Script(text=("a", "b"), finish="stop"))
    start = ChatCompletionsStream.start("t1/r1")
    acc = start
    for chunk in chunks:
        acc = acc.feed(chunk)
    again = start
    for chunk in chunks:
        again = again.feed(chunk)
    assert acc.finish() == again.finish()
    assert start.draft.text is None and start.finish() != acc.finish()


def test_importing_agentturn_does_not_load_the_engines() -> None:
    """``import agentturn`` stays light: the engines load only when asked for."""
    import subprocess
    import sys

    code = "import sys, agentturn; print('agentturn.engines' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"
