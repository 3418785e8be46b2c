"""The runnable examples clean up: run as a reader runs them, each leaves its temporary folder
as it found it (TMPDIR points at an empty folder of the test's own)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(tmp_path: pathlib.Path, *argv: str) -> subprocess.CompletedProcess[str]:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "TMPDIR": str(scratch)})
    assert result.returncode == 0, result.stderr[-2000:]
    left = sorted(path.name for path in scratch.iterdir())
    assert left == [], f"{argv[0]} left {left} in the temporary folder"
    return result


def test_the_scripted_host_leaves_no_folder_behind(tmp_path: pathlib.Path) -> None:
    out = run(tmp_path, "examples/scripted_host.py", "--trace", str(tmp_path / "t.jsonl")).stdout
    assert "outcome: finished" in out and '"""Return a + b."""' in out


def test_the_acp_demo_leaves_no_folder_behind(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("acp")
    out = run(tmp_path, "examples/acp_agent/demo_client.py").stdout
    assert "files in " in out and "notes.txt" in out
