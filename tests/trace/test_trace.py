"""Traces: round trips, saved sessions, and the check and explain commands' reading of them."""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Union

import attrs
import pytest
from hypothesis import given, settings
from session_host import Host, say, todo_call, todos

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn import trace
from agentturn.testing import strategies
from agentturn.tools.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: The unions a trace step's event and commands are read as.
EVENTS = Union[trace.event_types()]  # noqa: UP007
COMMANDS = Union[trace.command_types()]  # noqa: UP007


def _read_back(event: at.Event, commands: tuple[at.Command, ...] = ()) -> trace.TraceStep:
    """``event`` and ``commands`` as a one-step trace, read back by the strict reader."""
    lines = list(trace.write_trace("guard", g.GuardConfig(), [(event, commands)]))
    read = trace.read_trace("\n".join(lines) + "\n")
    assert read.intact
    (step,) = read.steps
    return step


@settings(max_examples=400)
@given(strategies.any_event())
def test_every_event_survives_write_then_read(event: at.Event) -> None:
    """Any event of any part, written as a trace step and read back by the strict reader, is
    equal to itself (and the lenient converter agrees)."""
    line = trace.step_line(1, event, ())
    assert json.loads(line)["event"]["type"].split(".")[-1] == type(event).__name__
    assert trace.converter().structure(json.loads(line)["event"], EVENTS) == event
    assert _read_back(event).event == event


@settings(max_examples=400)
@given(strategies.any_command())
def test_every_command_survives_write_then_read(command: at.Command) -> None:
    """Any command of any part, written as a trace step and read back by the strict reader, is
    equal to itself."""
    line = trace.step_line(1, at.StopPressed(), (command,))
    assert trace.converter().structure(json.loads(line)["commands"][0], COMMANDS) == command
    assert _read_back(at.StopPressed(), (command,)).commands == (command,)


def busy_session() -> Host:
    """A daemon session in the middle of things: armed, continued once, a Lead saved, a prompt
    queued, background work, a client attached, a request held."""
    host = Host(ring_capacity=4)
    host.responses.extend([say("Planning.", todo_call("tw1")), say("Stopping."),
                           say("Continuing.", at.ToolCall(call_id="r1", name="read_file"))])
    host.tool_results["tw1"] = {"output": "ok", "structured": todos("pending", "completed")}
    host.send(se.ClientAttached(client_id="desktop"),
              se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="sh"))
    host.send(at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port the parser é😀"))
    host.send(at.LeadSubmitted(chat_id="chat", lead_id="l1", text="use tabs"),
              se.PromptQueued(prompt_id="q1", message_id="q1m", text="next", complete=False))
    return host


def test_states_of_every_part_survive_write_then_read() -> None:
    """The turn, Lead, title, guard and session states of a busy session round-trip."""
    state = busy_session().state
    conv = trace.converter()
    for value, kind in ((state, se.SessionState), (state.turn, at.TurnState),
                        (state.turn.lead, at.LeadQueue), (state.turn.title, at.TitleState),
                        (state.guard, g.GuardState), (state.ring, se.EventRing)):
        data = json.loads(json.dumps(conv.unstructure(value, kind)))
        assert conv.structure(data, kind) == value


@pytest.mark.req("SG-A12")
def test_a_restored_session_keeps_everything_but_the_guards_trust() -> None:
    """req: SG-A12 — a saved and restored session equals the original except its guard, which
    is new (nothing it trusted survives a restart); the saved text holds no guard at all."""
    state = busy_session().state
    assert state.guard.armed
    saved = trace.dump_state(state)
    assert '"guard":' not in saved.replace('"guard": {"todo_stop_guard"', "")
    restored = trace.load_state(saved)
    assert restored == attrs.evolve(state, guard=g.GuardState.create(state.config.guard))
    assert not restored.guard.armed
    off = trace.load_state(saved, guard=g.GuardConfig(daemon=True))  # the setting changed
    assert off.guard.phase is g.GuardPhase.OFF


def test_a_saved_state_that_does_not_read_is_refused_clearly() -> None:
    """A broken saved state raises TraceError with a message, never another exception."""
    for text in ("{}", "[1]", '{"format": "agentturn-trace-state", "format_version": 1, '
                 '"state": {"config": 3}}'):
        with pytest.raises(trace.TraceError):
            trace.load_state(text)


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def demo_traces(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    turn, daemon = tmp_path / "turn.jsonl", tmp_path / "daemon.jsonl"
    assert main(["demo", "--trace", str(turn), "--daemon-trace", str(daemon)]) == 0
    return turn, daemon


def test_check_accepts_the_demo_traces(demo_traces: tuple[pathlib.Path, pathlib.Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Both demo traces replay to exactly their recorded commands: exit 0."""
    capsys.readouterr()
    for path in demo_traces:
        assert main(["check", str(path)]) == 0
        assert capsys.readouterr().out.startswith("ok: the ")


def test_check_accepts_the_example_hosts_trace(tmp_path: pathlib.Path) -> None:
    """The scripted example host writes a trace of its turn that checks."""
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import scripted_host
    finally:
        sys.path.pop(0)
    path = tmp_path / "example.jsonl"
    scripted_host.main(tmp_path, trace_path=path)
    assert main(["check", str(path)]) == 0


def lines_of(path: pathlib.Path) -> list[str]:
    return path.read_text().splitlines()


def write(path: pathlib.Path, lines: list[str]) -> pathlib.Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def resealed(lines: list[str]) -> list[str]:
    """The lines with a correct end record, as a host's own (patched) recorder would write."""
    return [*lines[:-1], trace.end_line(lines[:-1])]


@pytest.mark.parametrize(("tamper", "message"), [
    (lambda ls: ls[:7], "truncated"),
    (lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], "reordered"),
    (lambda ls: [ls[0].replace('"format_version": 1', '"format_version": 7'), *ls[1:]],
     "format version 7 is not supported"),
    (lambda ls: [*ls[:3], "{not json", *ls[3:]], "not JSON"),
    (lambda ls: [ls[0], ls[1].replace('"PromptSubmitted"', '"Nonsense"'), *ls[2:]],
     "unknown type 'Nonsense'"),
    (lambda ls: [*ls[:4], ls[4].replace("first.", "second."), *ls[5:]], "edited"),
    (lambda ls: [], "empty"),
])
def test_check_rejects_a_tampered_trace_clearly(
        tamper: object, message: str, demo_traces: tuple[pathlib.Path, pathlib.Path],
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Truncated, reordered, wrong-version, unreadable or edited: exit 2 and one clear line
    naming what is wrong, never a traceback."""
    tampered = write(tmp_path / "bad.jsonl", tamper(lines_of(demo_traces[0])))  # type: ignore[operator]
    capsys.readouterr()
    assert main(["check", str(tampered)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_check_reports_the_first_divergence(demo_traces: tuple[pathlib.Path, pathlib.Path],
                                            tmp_path: pathlib.Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A host whose library ran a tool of a truncated response: exit 1, the step, the event,
    the expected and recorded commands, and the rule its commands broke."""
    state = at.TurnState.create("chat-1")
    steps = []
    events = [at.PromptSubmitted(turn_id="t1", message_id="m1", text="go"),
              at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
              at.StreamCompleted(request_id="t1/r1", text="", finish_reason="max_tokens",
                                 tool_calls=(at.ToolCall(call_id="w1", name="write_file"),)),
              at.Persisted(key="t1/p2")]
    for event in events:
        state, commands = at.reduce(state, event)
        steps.append((event, commands))
    steps[-1] = (steps[-1][0], (at.ExecuteTool(call=at.ToolCall(call_id="w1",
                                                                 name="write_file")),))
    lines = list(trace.write_trace("turn", state.config, steps, chat_id="chat-1"))
    path = write(tmp_path / "patched.jsonl", lines)
    capsys.readouterr()
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "step 5: the commands differ from the spec's" in err
    assert "expected: [Persist(" in err and "recorded: [ExecuteTool(" in err
    assert "did not complete normally (TL-9)" in err


def test_check_reports_an_event_the_reducer_refuses(tmp_path: pathlib.Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A trace whose host answered a write that was never asked for: the reducer refuses it."""
    lines = list(trace.write_trace("turn", at.TurnConfig(), [
        (at.Persisted(key="t9/p1"), ())], chat_id="c"))
    path = write(tmp_path / "refused.jsonl", lines)
    capsys.readouterr()
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "the reducer refuses it" in err and "never asked for (TL-5)" in err


def test_explain_tells_why(demo_traces: tuple[pathlib.Path, pathlib.Path],
                          capsys: pytest.CaptureFixture[str]) -> None:
    """The story says why each request was made, why a call was skipped, when the Lead joined,
    why the guard continued and stopped, and why each turn ended."""
    turn, daemon = demo_traces
    capsys.readouterr()
    assert main(["explain", str(turn)]) == 0
    story = capsys.readouterr().out
    assert "to give it Lead instruction(s) lead-1 before anything else" in story
    assert "call-3 (run_tests) was not run [skipped]: Skipped: the user sent a Lead" in story
    assert "Ran write_file (call-2) after the user allowed it" in story
    assert "Turn t1 ended: finished" in story
    assert main(["explain", str(daemon)]) == 0
    story = capsys.readouterr().out
    assert story.count("the todo stop guard found unfinished todos") == 2
    assert "attempt 2 of 2" in story and "The todo stop guard stopped: [Todo Stop Guard]" in story
    assert "No follow-up suggestions: a queued prompt has priority" in story


def test_the_digest_covers_every_line_before_the_end(
        demo_traces: tuple[pathlib.Path, pathlib.Path]) -> None:
    """The end record's digest is the SHA-256 of the lines before it, each with its newline."""
    lines = lines_of(demo_traces[1])
    digest = hashlib.sha256("".join(line + "\n" for line in lines[:-1]).encode()).hexdigest()
    assert json.loads(lines[-1]) == {"end": True, "steps": len(lines) - 2, "digest": digest}
    assert trace.read_trace("\n".join(lines)).intact


def test_an_older_trace_without_a_field_that_became_required_still_reads() -> None:
    """A trace written when ``BackgroundEnded.notification_id`` had the default ``None`` left
    it out: the strict reader reads that as ``None``, which is what the trace meant; a trace
    naming a notification reads as written, and an unknown field is still refused."""
    from agentturn.trace.convert import reason, strict

    read = strict().structure
    assert read({"item_id": "sh1"}, se.BackgroundEnded) == se.BackgroundEnded(
        item_id="sh1", notification_id=None)
    assert read({"item_id": "sh1", "notification_id": "n1"}, se.BackgroundEnded) == (
        se.BackgroundEnded(item_id="sh1", notification_id="n1"))
    with pytest.raises(Exception) as refused:
        read({"item_id": "sh1", "notificationid": "n1"}, se.BackgroundEnded)
    assert "'notificationid'" in reason(refused.value)
