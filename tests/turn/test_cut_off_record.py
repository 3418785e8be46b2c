"""A cut-off response's record: it says it was cut, the trace checker and ``explain`` read that
mark alone, the mark survives a trace, and what goes to the engine later leaves the cut calls
out (issue 32, item 8)."""

from __future__ import annotations

import re

import pytest
from driver import Driver, call, no_titles

import agentturn as at
from agentturn.testing import ReferenceAdapter
from agentturn.tools.check import broken_invariants, check
from agentturn.tools.explain import explain
from agentturn.trace import Trace, TraceStep, end_line, read_trace, write_trace


class Recording(Driver):
    """A turn driver that also keeps the events it fed, for writing them as a trace."""

    def __init__(self) -> None:
        super().__init__(no_titles())
        self.events: list[at.Event] = []

    def send(self, *events: at.Event) -> tuple[at.Command, ...]:
        self.events.extend(events)
        return super().send(*events)


def saved_response(driver: Driver) -> at.ResponseRecord:
    """The newest response record the turn asked to save."""
    return next(record for persist in reversed(driver.of(at.Persist))
                for record in persist.records if isinstance(record, at.ResponseRecord))


def cut_turn(signal: at.CutOffSignal | None, finish_reason: str) -> Recording:
    """One response with one write call, completed with ``finish_reason`` and ``signal``."""
    driver = Recording()
    driver.start()
    driver.send(at.StreamCompleted(request_id="t1/r1", text="Writing", finish_reason=finish_reason,
                                   tool_calls=(call("w1", "write_file"),), cut_off=signal))
    while driver.state.persisting:
        driver.ack()
    return driver


@pytest.mark.req("TL-9", "TL-10")
@pytest.mark.parametrize(("signal", "finish_reason", "recorded", "normal"), [
    (at.CutOffSignal.UNCLOSED_TOOL_BLOCK, "tool_use", at.CutOffSignal.UNCLOSED_TOOL_BLOCK, False),
    (None, "max_tokens", at.CutOffSignal.FINISH_REASON, False),
    (None, "content_filter", None, False),
    (None, "tool_use", None, True),
])
def test_the_response_record_says_whether_the_response_was_cut(
        signal: at.CutOffSignal | None, finish_reason: str, recorded: at.CutOffSignal | None,
        normal: bool) -> None:
    """The saved response carries the same cut-off signal as the outcome (``FINISH_REASON``
    when the label said so), and ``completes_normally`` is false for any response whose calls
    were not run for its ending."""
    driver = cut_turn(signal, finish_reason)
    response = saved_response(driver)
    assert (response.cut_off, response.completes_normally) == (recorded, normal)
    assert response.finish_reason.raw == finish_reason
    if not normal:
        end = driver.last(at.EndTurn)
        assert isinstance(end, at.EndTurn) and end.outcome.cut_off is recorded


def _host_trace(run_the_cut_call: bool) -> Trace:
    """A host's own trace: a response labelled ``tool_calls`` but cut (an unclosed block), and
    optionally the host's bug of running its call anyway."""
    record = at.ResponseRecord(request_id="t1/r1", text="", tool_calls=(call("w1", "write"),),
                               finish_reason=at.FinishReason.of("tool_calls"),
                               cut_off=at.CutOffSignal.UNCLOSED_TOOL_BLOCK)
    commands: tuple[at.Command, ...] = (at.Persist(key="t1/p2", records=(record,)),)
    ran = (at.ExecuteTool(call=call("w1", "write")),) if run_the_cut_call else ()
    steps = [
        (at.PromptSubmitted(turn_id="t1", message_id="m1", text="go"),
         (at.Persist(key="t1/p1", records=(at.UserMessageRecord(message_id="m1", text="go"),)),)),
        (at.Persisted(key="t1/p1"), (at.RequestModelStream(request_id="t1/r1"),)),
        (at.StreamOpened(request_id="t1/r1"), ()),
        (at.StreamCompleted(request_id="t1/r1", text="", finish_reason="tool_calls",
                            tool_calls=(call("w1", "write"),),
                            cut_off=at.CutOffSignal.UNCLOSED_TOOL_BLOCK), commands),
        (at.Persisted(key="t1/p2"), ran),
    ]
    return Trace(part="turn", library_version="my-host 2", config=no_titles(), chat_id="chat",
                 intact=True, steps=tuple(TraceStep(number=n, event=e, commands=c)
                                          for n, (e, c) in enumerate(steps, 1)))


@pytest.mark.req("TL-9")
def test_the_checker_reads_the_cut_off_mark_of_a_host_s_own_record() -> None:
    """A host trace runs a call of a response whose label says ``tool_calls`` but whose record
    is marked cut off: the TL-9 rule is broken, read from the record alone."""
    assert broken_invariants(_host_trace(run_the_cut_call=True)) == (
        "step 5: ran 'w1' from a response that did not complete normally (TL-9)",)
    assert broken_invariants(_host_trace(run_the_cut_call=False)) == ()


@pytest.mark.req("TL-9")
def test_explain_tells_the_history_rule_of_a_cut_response() -> None:
    """``explain`` says that a cut response was saved marked cut off, that its calls never run,
    and that later requests send its text without them."""
    driver = cut_turn(at.CutOffSignal.OUTPUT_TOKEN_LIMIT, "tool_calls")
    trace = read_trace("\n".join(write_trace("turn", no_titles(), _steps(driver), "chat")))
    story = explain(trace)
    assert ("Response t1/r1 was saved cut off (output_token_limit): its 1 tool call(s) never "
            "run, and later requests send its text without them.") in story


def _steps(driver: Recording) -> list[tuple[at.Event, tuple[at.Command, ...]]]:
    """Replay the driver's events to pair each with its commands."""
    replay = Driver(no_titles())
    return [(event, replay.send(event)) for event in driver.events]


@pytest.mark.req("TL-9", "TL-10")
def test_the_cut_off_mark_round_trips_through_a_trace_and_older_traces_still_load() -> None:
    """A trace keeps the record's ``cut_off`` (and a call's ``refusal``); a trace written
    before they existed, without either key, loads with neither set and checks ok."""
    driver = cut_turn(at.CutOffSignal.UNCLOSED_TOOL_BLOCK, "tool_use")
    lines = list(write_trace("turn", no_titles(), _steps(driver), "chat"))
    trace = read_trace("\n".join(lines))
    records = [r for step in trace.steps for c in step.commands if isinstance(c, at.Persist)
               for r in c.records if isinstance(r, at.ResponseRecord)]
    assert [r.cut_off for r in records] == [at.CutOffSignal.UNCLOSED_TOOL_BLOCK]
    assert check(trace).ok

    plain = cut_turn(None, "tool_use")
    older = [re.sub(r', "(cut_off|refusal)": (null|"")', "", line)
             for line in write_trace("turn", no_titles(), _steps(plain), "chat")][:-1]
    assert not any('"cut_off"' in line or '"refusal"' in line for line in older)
    old = read_trace("\n".join([*older, end_line(older)]))
    assert old.intact and check(old).ok


class _World:
    """Storage only: what the reference adapter builds a transcript from."""

    def __init__(self, history: tuple[at.Record, ...]) -> None:
        self.saved = history

    def history(self) -> tuple[at.Record, ...]:
        return self.saved


@pytest.mark.req("TL-9")
def test_the_reference_transcript_sends_a_cut_response_without_its_calls() -> None:
    """What the engine receives later: a cut response's text, without its calls or their
    results; a later complete response that reuses a call id keeps its call and result."""
    cut = at.ResponseRecord(request_id="t1/r1", text="Writing", tool_calls=(call("c0"),),
                            finish_reason=at.FinishReason.of("tool_use"),
                            cut_off=at.CutOffSignal.UNCLOSED_TOOL_BLOCK)
    skipped = at.ToolResultRecord(call_id="c0", name="read_file",
                                  status=at.ToolResultStatus.SKIPPED, reason="Not run: cut.")
    prompt = at.UserMessageRecord(message_id="m2", text="go on")
    whole = at.ResponseRecord(request_id="t2/r1", text="", tool_calls=(call("c0"),),
                              finish_reason=at.FinishReason.of("tool_use"))
    ran = at.ToolResultRecord(call_id="c0", name="read_file",
                              status=at.ToolResultStatus.EXECUTED, output="x")
    world = _World((cut, skipped, prompt, whole, ran))
    sent = ReferenceAdapter().transcript(at.RequestModelStream(request_id="t2/r2"),
                                         world)  # type: ignore[arg-type]
    assert [type(r).__name__ for r in sent] == [
        "ResponseRecord", "UserMessageRecord", "ResponseRecord", "ToolResultRecord"]
    assert sent[0].tool_calls == () and sent[0].text == "Writing"  # type: ignore[union-attr]
    assert sent[2:] == (whole, ran)


@pytest.mark.req("TL-6")
def test_a_malformed_response_does_not_complete_normally_and_explain_says_why() -> None:
    """A response whose tool calls are malformed (the corrective retry answers it) runs none of
    them and has no results for them: it does not complete normally, so the history rule sends
    its text only, and ``explain`` names the malformed format, not a finish reason."""
    driver = Recording()
    driver.start()
    driver.send(at.StreamCompleted(request_id="t1/r1", text="Writing", finish_reason="tool_calls",
                                   tool_calls=(call("w1", "write_file"),),
                                   malformed_tool_format=True))
    while driver.state.persisting:
        driver.ack()
    response = saved_response(driver)
    assert response.malformed_tool_format and response.cut_off is None
    assert not response.completes_normally
    assert not driver.of(at.ExecuteTool)
    trace = read_trace("\n".join(write_trace("turn", no_titles(), _steps(driver), "chat")))
    assert ("Response t1/r1 was saved with malformed tool calls (the corrective retry answers "
            "them): its 1 tool call(s) never run, and later requests send its text without "
            "them.") in explain(trace)
