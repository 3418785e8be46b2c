"""Traces and the command line under hostile input: never a traceback, never a false verdict.

Each test pins one way a trace from another program, language or person broke the reader, the
checker or the command line: honest traces misjudged, tracebacks and wrong exit codes, values
coerced instead of refused, an edited trace explained without a word, a terminal driven by a
trace's text, and the command line's edges.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from session_host import Host, say, todo_call, todos

import agentturn as at
from agentturn import guard as g
from agentturn import session as se
from agentturn import trace
from agentturn.tools.cli import main

BIN = pathlib.Path(sys.executable).parent / "agentturn"


def write(path: pathlib.Path, lines: list[str]) -> pathlib.Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def turn_trace(text: str = "Fix the parser") -> list[str]:
    """An honest turn trace: one prompt, one response, the end."""
    host = at.TurnState.create("chat")
    steps = []
    for event in (at.PromptSubmitted(turn_id="t1", message_id="m1", text=text),
                  at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
                  at.StreamCompleted(request_id="t1/r1", text="Done.", finish_reason="stop"),
                  at.Persisted(key="t1/p2")):
        host, commands = at.reduce(host, event)
        steps.append((event, commands))
    return list(trace.write_trace("turn", host.config, steps, chat_id="chat"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def reseal(lines: list[str]) -> list[str]:
    """``lines`` with a fresh end record: an edit a writer made, not a tampering."""
    return [*lines[:-1], trace.end_line(lines[:-1])]


# --- honest traces, judged right ------------------------------------------------------------


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085", "\r", "\x0b", "\x1c"])
def test_a_prompt_holding_a_line_separator_round_trips(
        separator: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only ``\\n`` ends a line: a prompt holding U+2028, U+2029, U+0085 (or another character
    ``str.splitlines`` splits on) is read back exactly and the trace checks."""
    text = f"first{separator}second"
    lines = turn_trace(text)
    read = trace.read_trace("\n".join(lines) + "\n")
    assert read.steps[0].event.text == text
    assert separator not in "".join(lines) or separator in "\r\x0b\x1c"
    code, out, _ = run(capsys, "check", str(write(tmp_path / "t.jsonl", lines)))
    assert code == 0 and out.startswith("ok:")


def test_non_bmp_text_and_every_separator_round_trip_through_a_session() -> None:
    """A session trace with emoji, combining marks and separators reads back equal."""
    host = Host()
    host.responses.append(say("Fait 😀\u2028e\u0301"))
    host.send(at.PromptSubmitted(turn_id="t1", message_id="m1", text="Ünïcødé 𝄞\u2029\u0085"))
    lines = list(trace.write_trace("session", host.state.config, host.steps))
    read = trace.read_trace("\n".join(lines))
    assert [s.event for s in read.steps] == [e for e, _ in host.steps]
    assert [s.commands for s in read.steps] == [c for _, c in host.steps]


def test_check_follows_the_guard_across_work_chains(tmp_path: pathlib.Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """SG-B1 is per work chain: a queued prompt starts a new chain, whose two continuations
    are not a third and fourth of the first (check reported a false SG-B1)."""
    host = Host()
    host.tool_results["tw1"] = {"output": "ok", "structured": todos("pending")}
    host.tool_results["tw2"] = {"output": "ok", "structured": todos("pending")}
    host.responses.extend([say("Planning.", todo_call("tw1")), say("Stop."), say("Still."),
                           say("Giving up."), say("Queued work.", todo_call("tw2")),
                           say("Stop."), say("Still."), say("Giving up.")])
    host.send(at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port it"))
    host.send(se.PromptQueued(prompt_id="q1", message_id="q1m", text="And the docs"))
    chunks = host.published(se.EntryKind.GUARD_CHUNK)
    assert len(chunks) == 4 and not host.held  # two per chain
    lines = list(trace.write_trace("session", host.state.config, host.steps))
    code, out, err = run(capsys, "check", str(write(tmp_path / "t.jsonl", lines)))
    assert (code, err) == (0, "") and out.startswith("ok:")


def test_check_forgets_a_cut_off_mark_when_a_complete_response_reuses_the_call_id(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TL-9 judged per response: engines number calls ``call_0`` in every response, so a later
    complete response that runs ``call_0`` is not a cut-off call running."""
    call = at.ToolCall(call_id="call_0", name="read_file")
    state, steps = at.TurnState.create("chat"), []
    for event in (at.PromptSubmitted(turn_id="t1", message_id="m1", text="a"),
                  at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
                  at.StreamCompleted(request_id="t1/r1", text="", finish_reason="max_tokens",
                                     tool_calls=(call,)),
                  at.Persisted(key="t1/p2"), at.Persisted(key="t1/p3"),
                  at.PromptSubmitted(turn_id="t2", message_id="m2", text="b"),
                  at.Persisted(key="t2/p1"), at.StreamOpened(request_id="t2/r1"),
                  at.StreamCompleted(request_id="t2/r1", text="", finish_reason="tool_use",
                                     tool_calls=(call,)),
                  at.Persisted(key="t2/p2")):
        state, commands = at.reduce(state, event)
        steps.append((event, commands))
    assert any(isinstance(c, at.ExecuteTool) for c in steps[-1][1])
    lines = list(trace.write_trace("turn", state.config, steps, chat_id="chat"))
    code, _, err = run(capsys, "check", str(write(tmp_path / "t.jsonl", lines)))
    assert (code, err) == (0, "")


def test_a_tuple_where_json_has_only_arrays_is_refused_when_built() -> None:
    """A tuple ``todos`` would be written as an array and read back as a list, arming the
    guard on replay where it did not arm live: it is refused when the event is built."""
    with pytest.raises(at.FieldError, match=r"ToolFinished\.structured must be a JSON value: "
                                            r"it holds a tuple"):
        at.ToolFinished(call_id="c", output="o",
                        structured={"type": "todo_list", "todos": ({"id": "1"},)})
    for bad in ({1: "x"}, float("nan"), {"deep": [[[[]]]] * 0 + [10**50]}, {1, 2}):
        with pytest.raises(at.FieldError, match="structured must be a JSON value"):
            at.ToolFinished(call_id="c", output="o", structured=bad)
    with pytest.raises(at.FieldError, match="envelope must be a JSON value"):
        g.TodoWriteResult(call_id="c", turn_id="t", succeeded=True, envelope=("a",))


# --- never a traceback, and the right exit code -----------------------------------------------


def hostile_lines() -> dict[str, list[str]]:
    lines = turn_trace()
    step = json.loads(lines[1])
    cases: dict[str, list[str]] = {
        "deep nesting": [lines[0], "[" * 200_000 + "]" * 200_000, *lines[2:]],
        "a huge integer": [lines[0], '{"step": ' + "9" * 5000 + "}", *lines[2:]],
        "a lone surrogate": [lines[0].replace('"library_version": "0.1.0"',
                                              '"library_version": "\\ud800"'), *lines[1:]],
        "an unknown event": [lines[0], lines[1].replace('"PromptSubmitted"', '"NoSuchEvent"'),
                             *lines[2:]],
        "an event that is a string": [lines[0], json.dumps({**step, "event": "PromptSubmitted"}),
                                      *lines[2:]],
        "an unterminated string": [lines[0], '{"step": 1, "event": "abc', *lines[2:]],
        "a number for a text": [lines[0], lines[1].replace('"text": "Fix the parser"',
                                                           '"text": 42'), *lines[2:]],
        "a step without commands": [lines[0], json.dumps({"step": 1, "event": step["event"]}),
                                    *lines[2:]],
        "step true": [lines[0], lines[1].replace('"step": 1', '"step": true'), *lines[2:]],
        "format version 1.0": [lines[0].replace('"format_version": 1', '"format_version": 1.0'),
                               *lines[1:]],
        "an unknown field": [lines[0], lines[1].replace('{"step": 1', '{"step": 1, "x": 0'),
                             *lines[2:]],
        "a key twice": [lines[0], lines[1].replace('{"step": 1', '{"step": 1, "step": 1'),
                        *lines[2:]],
        "NaN": [lines[0], lines[1].replace('"step": 1', '"step": NaN'), *lines[2:]],
        "a blank line": [lines[0], "", *lines[1:]],
        "lines after the end": [*lines, lines[1]],
        "an array line": [lines[0], "[1, 2]", *lines[2:]],
    }
    return cases


@pytest.mark.parametrize("case", list(hostile_lines()))
@pytest.mark.parametrize("command", ["check", "explain"])
def test_a_hostile_trace_is_rejected_in_one_line(case: str, command: str, tmp_path: pathlib.Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 and one line in the project's words; no Python leaks (``KeyError``, ``string
    indices``, ``at at``) and nothing is coerced (``"text": 42`` is not ``"42"``)."""
    path = write(tmp_path / "t.jsonl", reseal(hostile_lines()[case])
                 if case not in ("lines after the end",) else hostile_lines()[case])
    code, out, err = run(capsys, command, str(path))
    assert code == 2 and out == "", (case, out, err)
    assert err.count("\n") == 1 and err.startswith("rejected: "), err
    for leak in ("KeyError", "TypeError", "string indices", "at at", "Traceback", "ValueError"):
        assert leak not in err, err


def test_the_leaks_are_now_said_in_the_projects_words(tmp_path: pathlib.Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The exact messages of the cases that leaked Python before."""
    said = {}
    for case in ("an unknown event", "an event that is a string", "an unterminated string",
                 "a number for a text", "a step without commands", "deep nesting",
                 "a huge integer"):
        path = write(tmp_path / "t.jsonl", reseal(hostile_lines()[case]))
        run(capsys, "check", str(path))
        said[case] = capsys.readouterr().err or ""
        main(["check", str(path)])
        said[case] = capsys.readouterr().err.strip()
    assert said["an unknown event"] == "rejected: line 2: event: unknown type 'NoSuchEvent'"
    assert said["an event that is a string"] == ("rejected: line 2: 'event' must be an object, "
                                                 "got a string")
    assert said["an unterminated string"].startswith(
        "rejected: line 2: not JSON: an unterminated string that starts at column")
    assert said["a number for a text"] == ("rejected: line 2: event PromptSubmitted: text: "
                                           "must be a string, got an integer")
    assert said["a step without commands"] == ("rejected: line 2: the field 'commands' is "
                                               "missing")
    assert "nests deeper than 72 levels" in said["deep nesting"]
    assert "more than 40 digits" in said["a huge integer"]


def test_unreadable_files_are_exit_2_in_one_line(tmp_path: pathlib.Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A folder, a missing file, bytes that are not UTF-8, an empty file."""
    (tmp_path / "bytes.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "empty.jsonl").write_text("")
    for path, said in ((tmp_path, "cannot read"), (tmp_path / "missing", "cannot read"),
                       (tmp_path / "bytes.jsonl", "not UTF-8"),
                       (tmp_path / "empty.jsonl", "empty")):
        code, _, err = run(capsys, "check", str(path))
        assert code == 2 and said in err and err.count("\n") == 1, err


def test_the_commands_survive_a_closed_pipe(tmp_path: pathlib.Path) -> None:
    """``agentturn demo | head -2`` (and diagram, explain, explore) ends quietly with the
    command's own code: no ``BrokenPipeError`` traceback."""
    story = write(tmp_path / "t.jsonl", turn_trace())
    for argv in (["demo"], ["diagram", "session"], ["explain", str(story)],
                 ["explore", "--depth", "2", "--start", "new"]):
        process = subprocess.run(f"'{BIN}' {' '.join(argv)} | head -2", shell=True,
                                 capture_output=True, text=True, check=False,
                                 executable="/bin/bash")
        assert process.stderr.count("Traceback") == 0 and "BrokenPipe" not in process.stderr, (
            argv, process.stderr)
        assert len(process.stdout.splitlines()) == 2


def test_an_unwritable_trace_path_is_a_usage_error(tmp_path: pathlib.Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``demo --trace /nonexistent/x.jsonl`` or a folder: exit 2, one line, no traceback."""
    for target in ("/nonexistent/x.jsonl", str(tmp_path)):
        code, out, err = run(capsys, "demo", "--trace", target)
        assert code == 2 and err.startswith("cannot write ") and err.count("\n") == 1
        assert out == ""  # nothing printed before the refusal


# --- saved states: the same rules, and consistency --------------------------------------------


def saved() -> dict[str, object]:
    host = Host()
    host.responses.append(say("Reading.", at.ToolCall(call_id="c1", name="read_file",
                                                       needs_permission=True)))
    host.send(at.PromptSubmitted(turn_id="t1", message_id="m1", text="Read it"))
    assert host.state.turn.phase is at.TurnPhase.AWAITING_PERMISSION
    record: dict[str, object] = json.loads(trace.dump_state(host.state))
    return record


@pytest.mark.parametrize(("edit", "said"), [
    (lambda s: s["turn"].update(next_call=7), "turn.next_call is 7 with 1 call(s)"),
    (lambda s: s.update(grace="no"), "grace: must be a bool, got a string"),
    (lambda s: s["turn"].update(request_seq=True), "must be an integer, got a bool"),
    (lambda s: s["turn"]["calls"][0].update(call_id=5), "must be a string"),
    (lambda s: s.update(unknown_field=1), "unknown field"),
    (lambda s: s["turn"].update(turn_id=""), "has no turn.turn_id"),
    (lambda s: s.update(phase="draining"), "phase DRAINING has no drain_id"),
    # found by an outsider: each made a later reduce raise AssertionError or FieldError
    (lambda s: s["turn"].update(phase="ending", ending=None), "turn.phase ENDING has no "
                                                               "turn.ending"),
    (lambda s: s["deferred"].update(turns=[{"turn_id": "a1", "kind": "cron",
                                            "source_id": "nightly"}]),
     "deferred.turns holds \\['a1'\\] without its prompt"),
    (lambda s: s["ring"].update(capacity=0), "ring.capacity and ring.pinned_capacity differ"),
])
def test_a_saved_state_is_read_strictly_and_must_agree_with_itself(edit: object,
                                                                   said: str) -> None:
    record = saved()
    edit(record["state"])  # type: ignore[operator]
    with pytest.raises(trace.TraceError, match=said.replace("(", r"\(").replace(")", r"\)")):
        trace.load_state(json.dumps(record))


def test_a_saved_state_names_its_library_version() -> None:
    record = saved()
    record["library_version"] = {"evil": [1, 2]}
    with pytest.raises(trace.TraceError, match="'library_version' must be a string"):
        trace.load_state(json.dumps(record))


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"format": ' + "1" * 5000 + "}",
                                  "", "null", '{"format": "agentturn-trace-state", '
                                  '"format_version": 1.0, "state": {}}'])
def test_a_hostile_saved_state_is_a_trace_error(text: str) -> None:
    with pytest.raises(trace.TraceError):
        trace.load_state(text)


# --- explain and check: an edited trace, and a terminal kept safe -----------------------------


def test_explain_refuses_an_edited_trace_unless_asked(tmp_path: pathlib.Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    lines = turn_trace()
    lines[4] = lines[4].replace('"Done."', '"Done!"')
    path = write(tmp_path / "t.jsonl", lines)
    code, out, err = run(capsys, "explain", str(path))
    assert code == 2 and out == "" and "edited after it was written" in err
    code, out, err = run(capsys, "explain", "--unsealed", str(path))
    assert code == 0 and out.splitlines()[0].startswith("WARNING: this trace was edited")


def test_no_text_from_a_trace_drives_the_terminal(tmp_path: pathlib.Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """ESC, BEL, C1 controls and bidirectional overrides in a prompt or the model's text are
    printed escaped by explain, and by check in a divergence."""
    lines = turn_trace("\x1b]0;owned\x07 \x9b2J \u202eevil")
    code, out, _ = run(capsys, "explain", str(write(tmp_path / "t.jsonl", lines)))
    assert code == 0
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in out
    assert "\\x1b]0;owned\\x07" in out and "\\u202e" in out
    edited = reseal([lines[0], lines[1].replace('"t1/p1"', '"\\u001b[2Jx"'), *lines[2:-1],
                     lines[-1]])
    code, out, err = run(capsys, "check", str(write(tmp_path / "d.jsonl", edited)))
    assert code == 1 and "\x1b" not in err and "\\x1b[2J" in err


# --- the recipe and the command line's edges --------------------------------------------------


def test_write_trace_says_what_a_turn_trace_needs() -> None:
    """The README's recipe without ``chat_id`` and a wrong config are refused when written."""
    state = at.TurnState.create("chat")
    with pytest.raises(trace.TraceError, match="a turn trace names its chat: pass chat_id="):
        list(trace.write_trace("turn", state.config, []))
    with pytest.raises(trace.TraceError, match="config must be a TurnConfig, got SessionConfig"):
        list(trace.write_trace("turn", se.SessionConfig(chat_id="c"), [], chat_id="c"))


@pytest.mark.parametrize("argv", [
    ["fuzz", "--episode", "0"], ["fuzz", "--episode", "-3"], ["fuzz", "--steps", "-5"],
    ["fuzz", "--steps", "0"], ["explore", "--depth", "-1"], ["explore", "--depth", "0"],
    ["explore", "--depth", "11"], ["explore", "--depth", "two"], ["fuzz", "--seed", "-1"],
    ["nosuchcommand"], [],
])
def test_out_of_range_arguments_are_usage_errors(argv: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2 and "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        "agentturn")


def test_the_library_refuses_walks_that_never_end() -> None:
    from agentturn.tools import explore

    for bad in (0, -1):
        with pytest.raises(ValueError, match="episode must be an int of at least 1"):
            explore.fuzz(10, episode=bad)
        with pytest.raises(ValueError, match="depth must be an int of at least 1"):
            explore.explore(bad)


def test_help_names_every_argument_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "exit codes:" in out and "2  the input cannot be used" in out
    for command in ("demo", "check", "explain", "diagram", "explore", "fuzz"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0 and "exit codes:" in out
        options = [line for line in out.splitlines() if line.startswith("  -") or (
            line.startswith("  ") and line.strip().split(" ")[0].isupper())]
        for line in options:
            if line.strip().startswith("-h"):
                continue
            assert len(line.split("  ")) > 2 or line.rstrip() != line.strip(), line
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == f"agentturn {at.__version__}"


def test_diagram_without_a_part_lists_the_parts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "diagram")
    assert code == 2 and out == ""
    assert err.strip() == ("agentturn diagram PART: choose a part: turn, lead, titles, guard, "
                           "session")


def test_a_clean_walk_says_no_rule_broken(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explore", "--depth", "1", "--start", "new")
    assert code == 0 and "violations: no rule broken" in out and "0 unknown" not in out


@pytest.mark.parametrize(("edit", "said"), [
    (lambda line: line.replace('"records": [{"message_id": "m1", "text": "Fix the parser"}]',
                               '"records": [7]'),
     "records: must be an object (one of UserMessageRecord, ResponseRecord, ToolResultRecord), "
     "got an integer"),
    (lambda line: line.replace('"records": [{"message_id": "m1", "text": "Fix the parser"}]',
                               '"records": [{}]'),
     "records: its fields match none of UserMessageRecord, ResponseRecord, ToolResultRecord"),
    (lambda line: line.replace('"event": {', '"event": null, "x": {'), "unknown field"),
])
def test_a_record_or_value_of_the_wrong_shape_is_named_not_leaked(
        edit: object, said: str, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an outsider: cattrs' own words ("Couldn't disambiguate", "Only input mappings",
    "'int' object has no attribute 'keys'") leaked for records of the wrong shape."""
    lines = turn_trace()
    lines[1] = edit(lines[1])  # type: ignore[operator]
    code, _, err = run(capsys, "check", str(write(tmp_path / "t.jsonl", reseal(lines))))
    assert code == 2 and said in err and err.count("\n") == 1, err


def test_a_configuration_that_cannot_start_a_session_is_refused(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an outsider: ``ring_pinned: 1`` read as a SessionConfig but made
    ``Session.create`` raise inside ``check`` (a traceback, exit 1); the configuration now
    refuses it, and the reader starts the part's state before accepting a header."""
    with pytest.raises(at.FieldError, match="ring_pinned must be an int >= 2"):
        se.SessionConfig(chat_id="c", ring_pinned=1)
    lines = list(trace.write_trace("session", se.SessionConfig(chat_id="c"), []))
    lines[0] = lines[0].replace('"ring_pinned": 32', '"ring_pinned": 1')
    code, _, err = run(capsys, "check", str(write(tmp_path / "t.jsonl", reseal(lines))))
    assert code == 2 and err.strip() == ("rejected: line 1: config: SessionConfig.ring_pinned "
                                         "must be an int >= 2")


def test_every_value_an_event_accepts_fits_in_a_trace_line() -> None:
    """Found by an outsider: a ``structured`` value 64 deep (the most an event takes) made a
    line 66 deep, which the reader refused; the line's own structure has its headroom now."""
    deep: object = "bottom"
    for _ in range(63):
        deep = [deep]
    event = at.ToolFinished(call_id="c", output="o", structured={"deep": deep})
    lines = list(trace.write_trace("guard", g.GuardConfig(), [(event, ())]))
    assert trace.read_trace("\n".join(lines)).steps[0].event == event


@pytest.mark.parametrize(("call", "said"), [
    (lambda: trace.step_line(1, None, ()), "NoneType is not an agentturn event"),  # type: ignore[arg-type]
    (lambda: trace.step_line(1, at.StopPressed(), (None,)), "is not an agentturn command"),  # type: ignore[arg-type]
    (lambda: trace.step_line(True, at.StopPressed(), ()), "a step number is an int from 1"),
    (lambda: trace.dump_state(None), "dump_state saves a SessionState"),  # type: ignore[arg-type]
    (lambda: trace.end_line([1]), "end_line takes the trace's lines as str"),  # type: ignore[list-item]
])
def test_the_writer_refuses_what_the_reader_would(call: object, said: str) -> None:
    """Found by an outsider: the writer raised ``KeyError``/``AttributeError`` or wrote a line
    the reader refuses."""
    with pytest.raises(trace.TraceError, match=said):
        call()  # type: ignore[operator]


def test_a_configuration_a_converter_would_change_is_refused(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an outsider: ``stop_hook_cap: 0`` was read as 8 (the documented fallback for a
    host's configuration), and a finish-reason table that normalizes to another was accepted:
    a trace holds what the library wrote, so anything it would not write is refused."""
    lines = list(trace.write_trace("session", se.SessionConfig(chat_id="c"), []))
    for edit, said in (('"stop_hook_cap": 0', "stop_hook_cap: 0 would be read as 8"),
                       ('"stop_hook_cap": -5', "stop_hook_cap: -5 would be read as 8")):
        edited = [lines[0].replace('"stop_hook_cap": 8', edit), *lines[1:]]
        code, _, err = run(capsys, "check", str(write(tmp_path / "t.jsonl", reseal(edited))))
        assert code == 2 and said in err, err
    turn = turn_trace()
    turn[0] = turn[0].replace('"finish_reasons": []',
                              '"finish_reasons": [[" END_TURN ", "length"], ["end_turn", "stop"]]')
    code, _, err = run(capsys, "check", str(write(tmp_path / "u.jsonl", reseal(turn))))
    assert code == 2 and "finish_reasons" in err and "would be read as" in err, err


def test_a_closed_stderr_keeps_the_verdict(tmp_path: pathlib.Path) -> None:
    """Found by an outsider: with stderr closed, a refused trace (2) or a differing one (1)
    ended 0: the closed pipe now only silences the stream."""
    import os

    lines = turn_trace()
    edited = write(tmp_path / "edited.jsonl", [*lines[:-2], lines[-2].replace("t1/p2", "x"),
                                               lines[-1]])
    read, written = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([str(BIN), "check", str(edited)], stderr=written,
                                stdout=subprocess.DEVNULL, check=False)
    finally:
        os.close(written)
    assert result.returncode == 2


def test_no_value_forges_an_output_line(tmp_path: pathlib.Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an outsider: a newline inside a library version or a tool name printed a fake
    ``ok:`` line or a fake numbered step; values are printed on one line now."""
    lines = turn_trace()
    lines[0] = lines[0].replace('"library_version": "0.1.0"',
                                '"library_version": "0.1.0)\\nok: the 999 steps are fine (9"')
    code, out, _ = run(capsys, "check", str(write(tmp_path / "t.jsonl", reseal(lines))))
    assert code == 0 and out.count("\n") == 1 and "\\nok: the 999" in out
    code, out, _ = run(capsys, "explain", str(tmp_path / "t.jsonl"))
    assert code == 0 and not any(line.startswith("ok:") for line in out.splitlines())
    code, _, err = run(capsys, "check", str(tmp_path / "bad\nname"))
    assert code == 2 and err.count("\n") == 1


def test_a_fifo_is_refused_without_waiting(tmp_path: pathlib.Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "check", str(fifo))
    assert code == 2 and "not a regular file" in err


@pytest.mark.parametrize("text", ["1_0", "+1", "\u0661", " 3"])
def test_numbers_are_plain_digits(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "explore", "--depth", text)
    assert code == 2 and "is not a whole number" in err and err.count("\n") == 1


def test_an_empty_trace_path_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "demo", "--trace", "")
    assert code == 2 and err.strip() == "a trace path must not be empty"
