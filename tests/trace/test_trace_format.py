"""The trace format as a conformance format: its JSON Schema, and a host in another language.

``docs/trace-format.schema.json`` is derived from the vocabularies (``agentturn.trace.schema``);
it must equal the committed file, and every line of every trace the library writes must
validate against it. A small Node host (``examples/node_host/host.mjs``) writes its own trace of
a scripted turn: honest, ``agentturn check`` agrees; with the usual bug planted (it runs the
tool call of a response cut at the output limit), ``check`` catches it.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import subprocess

import jsonschema
import pytest
from hypothesis import given, settings
from session_host import Host, say

import agentturn as at
from agentturn import session as se
from agentturn import trace
from agentturn.testing import strategies
from agentturn.tools import explore
from agentturn.tools.cli import main
from agentturn.trace.schema import schema

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "docs" / "trace-format.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def invalid_lines(lines: list[str]) -> list[str]:
    return [f"line {n}: {error.message[:200]}" for n, line in enumerate(lines, 1)
            for error in [jsonschema.exceptions.best_match(VALIDATOR.iter_errors(json.loads(line)))]
            if error is not None]


def test_the_committed_schema_is_the_one_derived_from_the_vocabularies() -> None:
    """Regenerate it with ``python -c "import json; from agentturn.trace.schema import schema;
    print(json.dumps(schema(), indent=2, ensure_ascii=False))" > docs/trace-format.schema.json``.
    """
    jsonschema.Draft202012Validator.check_schema(schema())
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == schema()


def test_the_demo_and_a_scripted_session_validate(tmp_path: pathlib.Path) -> None:
    assert main(["demo", "--trace", str(tmp_path / "t.jsonl"),
                 "--daemon-trace", str(tmp_path / "d.jsonl")]) == 0
    for name in ("t.jsonl", "d.jsonl"):
        assert invalid_lines((tmp_path / name).read_text(encoding="utf-8").splitlines()) == []
    host = Host()
    host.responses.append(say("Done 😀\u2028"))
    host.send(at.PromptSubmitted(turn_id="t1", message_id="m1", text="Go"),
              at.LeadSubmitted(chat_id="chat", lead_id="l1", text="tabs"))
    assert invalid_lines(list(trace.write_trace("session", host.state.config,
                                                host.steps))) == []


@pytest.mark.parametrize("seed", range(3))
def test_traces_of_fuzzed_sessions_validate(seed: int) -> None:
    rng = random.Random(seed)
    config = explore.CONFIGS[list(explore.CONFIGS)[seed]]
    state, steps = se.Session.create(config), []
    for _ in range(400):
        move = rng.choice(explore.alphabet(state))
        try:
            state, commands = se.reduce(state, move.event)
        except at.ProtocolError:
            continue
        steps.append((move.event, commands))
    assert invalid_lines(list(trace.write_trace("session", config, steps))) == []


@settings(max_examples=200)
@given(event=strategies.any_event(), command=strategies.any_command())
def test_every_event_and_command_validates(event: at.Event, command: at.Command) -> None:
    assert invalid_lines([trace.step_line(1, event, (command,))]) == []


def node() -> str:
    found = shutil.which("node")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs the Node host: node is not on PATH")
        pytest.skip("node is not installed")
    return found


@pytest.mark.parametrize(("flag", "code"), [((), 0), (("--bug",), 1)])
def test_a_node_host_is_checked_by_its_trace(flag: tuple[str, ...], code: int,
                                             tmp_path: pathlib.Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "node.jsonl"
    subprocess.run([node(), str(ROOT / "examples" / "node_host" / "host.mjs"), str(out), *flag],
                   check=True, capture_output=True, timeout=60)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert invalid_lines(lines) == []
    assert main(["check", str(out)]) == code
    said = capsys.readouterr()
    if code == 0:
        assert said.out.strip() == ("ok: the 10 steps of this turn trace agree with the spec "
                                    "(written by node-host 1)")
    else:
        assert "step 5: the commands differ from the spec's" in said.err
        assert ("broken rule: step 5: ran 'call_0' from a response that did not complete "
                "normally (TL-9)") in said.err
