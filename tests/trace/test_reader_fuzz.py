"""The trace reader under fuzzing, the traces how-to's recipes, and traces of fuzzed sessions.

Hypothesis mutates real traces (bytes flipped, lines dropped, duplicated and reordered, fields
retyped, deep nesting, huge numbers, control and separator characters) and draws arbitrary
bytes: ``check`` and ``explain`` end every one with exit 0, 1 or 2, a refusal in one line, and
never an exception. Every trace recorded from a random session (the explorer's alphabet, seeded)
checks clean.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentturn as at
from agentturn import session as se
from agentturn import trace
from agentturn.testing import ScriptedHost, say
from agentturn.tools import explore
from agentturn.tools.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _recorded() -> list[str]:
    """A real session trace with a bit of everything: tools, a Lead, the guard, a title."""
    host = ScriptedHost(se.SessionConfig(chat_id="chat", guard=explore.CONFIGS["daemon"].guard))
    host.tool_results["tw"] = {"output": "ok", "structured": {
        "type": "todo_list", "todos": [{"id": "1", "content": "x", "status": "pending"}]}}
    host.responses.extend([say("Working 😀.", at.ToolCall(call_id="tw", name="todo_write")),
                           say("Stop."), say("Still."), say("Giving up.")])
    host.send(at.PromptSubmitted(turn_id="t1", message_id="m1", text="Port\u2028it"))
    return list(trace.write_trace("session", host.state.config, host.steps))


RECORDED = _recorded()

#: Replacements that retype a field or plant something hostile inside a line.
_PLANTS = ['"step": true', "[" * 70 + "1" + "]" * 70, "9" * 5000, "NaN", "1e999", '"\\ud800"',
           '"\\u001b[2J"', "null", "{}", "[]", '"x"', "-0", "1.0", "\u2028", "\x85"]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    lines = list(RECORDED)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["drop", "duplicate", "swap", "retype", "flip", "insert",
                                     "truncate"]))
        index = draw(st.integers(0, len(lines) - 1))
        if kind == "drop" and len(lines) > 1:
            del lines[index]
        elif kind == "duplicate":
            lines.insert(index, lines[index])
        elif kind == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        elif kind == "retype":
            values = list(re.finditer(r'(?<=: )("[^"]*"|-?\d+|true|false|null)', lines[index]))
            if values:
                match = draw(st.sampled_from(values))
                plant = draw(st.sampled_from(_PLANTS))
                lines[index] = lines[index][:match.start()] + plant + lines[index][match.end():]
        elif kind == "insert":
            lines.insert(index, draw(st.text(max_size=40)))
        elif kind == "truncate":
            lines[index] = lines[index][:draw(st.integers(0, len(lines[index])))]
        data = "\n".join(lines).encode("utf-8", "surrogatepass")
        if kind == "flip" and data:
            at_byte = draw(st.integers(0, len(data) - 1))
            data = data[:at_byte] + bytes([data[at_byte] ^ draw(st.integers(1, 255))]) + \
                data[at_byte + 1:]
            return data
    return "\n".join(lines).encode("utf-8", "surrogatepass")


def _verdict(path: pathlib.Path, command: str, capsys: pytest.CaptureFixture[str]) -> int:
    code = main([command, str(path)])
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), code
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("rejected: "), err
    assert "Traceback" not in out + err
    return code


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                   HealthCheck.too_slow], deadline=None)
@given(data=st.one_of(mutated(), st.binary(max_size=300)))
def test_every_mutated_or_random_input_gets_a_verdict(data: bytes, tmp_path: pathlib.Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    for command in ("check", "explain"):
        _verdict(path, command, capsys)


def test_the_recorded_trace_itself_checks_clean(tmp_path: pathlib.Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(RECORDED) + "\n", encoding="utf-8")
    assert _verdict(path, "check", capsys) == 0


@pytest.mark.parametrize("seed", range(6))
def test_every_trace_of_a_fuzzed_session_checks_clean(seed: int, tmp_path: pathlib.Path) -> None:
    """A random walk over the explorer's alphabet (every accepted step recorded, refusals
    left out as a host would), written and checked: no divergence, no broken rule."""
    rng = random.Random(seed)
    config = explore.CONFIGS[list(explore.CONFIGS)[seed % len(explore.CONFIGS)]]
    state = se.Session.create(config)
    steps = []
    for _ in range(800):
        # the close is left for the end: a closed session takes little more
        move = rng.choice([m for m in explore.alphabet(state)
                           if not isinstance(m.event, se.CloseRequested)])
        try:
            state, commands = se.reduce(state, move.event)
        except at.ProtocolError:
            continue
        steps.append((move.event, commands))
    assert len(steps) > 20
    path = tmp_path / "t.jsonl"
    path.write_text("".join(line + "\n" for line in trace.write_trace("session", config, steps)),
                    encoding="utf-8")
    report = __import__("agentturn.tools.check", fromlist=["check"]).check(
        trace.read_trace(path.read_text(encoding="utf-8")))
    assert report.ok, (report.divergence, report.broken)


def test_the_readmes_trace_recipes_run_and_check(tmp_path: pathlib.Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The traces how-to's turn and session recipes, run as they are, write traces that check."""
    text = (ROOT / "docs" / "howto" / "traces.md").read_text(encoding="utf-8")
    section = text[text.index("## Record a trace"):text.index("## Check it and explain it")]
    blocks = re.findall(r"```python\n(.+?)\n```", section, re.S)
    assert len(blocks) == 2
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        namespace: dict[str, object] = {}
        for block in blocks:
            exec(compile(block, "docs/howto/traces.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    for name in ("turn.jsonl", "session.jsonl"):
        assert main(["check", str(tmp_path / name)]) == 0
        assert capsys.readouterr().out.startswith("ok: ")
    header = json.loads((tmp_path / "turn.jsonl").read_text().splitlines()[0])
    assert header["chat_id"] == "chat-1"
