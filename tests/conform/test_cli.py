"""``agentturn conform``: the table on stdout, the JSON file, the exit codes."""

from __future__ import annotations

import json
import pathlib

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("anyio")
pytest.importorskip("openai")
pytest.importorskip("anthropic")

from agentturn.tools.cli import main


@pytest.mark.req("TL-9")
def test_conform_prints_the_table_and_writes_json(tmp_path: pathlib.Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    code = main(["conform", "--scenario", "TL-9/mislabelled", "--mode", "openai-chat-stream",
                 "--mode", "anthropic-messages", "--json", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out
    assert "TL-9/mislabelled-complete-args  pass" in printed.out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {(r["scenario"], r["mode"], r["verdict"]) for r in data["rows"]} == {
        ("TL-9/mislabelled-complete-args", "openai-chat-stream", "pass"),
        ("TL-9/mislabelled-complete-args", "anthropic-messages", "pass"),
        ("TL-9/mislabelled-cut-args", "openai-chat-stream", "pass"),
        ("TL-9/mislabelled-cut-args", "anthropic-messages", "n/a")}


def test_conform_exits_1_when_the_runtime_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conform", "--runner", "bad_runners:NaiveRunner", "--scenario",
                 "TL-7", "--mode", "openai-chat"])
    assert code == 1
    assert "FAIL TL-7/empty-answer [openai-chat]" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["conform", "--runner", "no.such.module:Runner"],
    ["conform", "--runner", "bad_runners:Raising"],
    ["conform", "--scenario", "XX-1"],
    ["conform", "--mode", "gemini"],
])
def test_conform_refuses_what_it_cannot_use(argv: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_conform_help_names_its_options_and_the_exit_codes(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conform", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--runner", "--scenario", "--mode", "--examples", "--timeout", "--json",
                   "--evidence"):
        assert option in out
    assert "conform: the runtime failed a scenario" in out
