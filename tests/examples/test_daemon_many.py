"""The daemon_many example: fifty sessions on one event loop, each ending its turns as scripted
(a Stop, a Lead, a queued prompt among them), all idle at once, then closed with no task left."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("anyio")

import anyio

import agentturn as at

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.daemon_many import Summary, serve  # noqa: E402

SESSIONS = 50


async def serve_bounded() -> Summary:
    with anyio.fail_after(60):
        return await serve(SESSIONS, rounds=3)


def test_every_session_ends_its_turns_as_scripted_and_no_task_is_left() -> None:
    summary = anyio.run(serve_bounded)
    assert len(summary.hosts) == summary.idle_at_once == SESSIONS
    assert summary.tasks_left == 0
    plans = [host.plan for host in summary.hosts]
    # the script has every kind of session in it
    assert any(p.queued for p in plans) and any(p.lead for p in plans)
    assert any(p.stop for p in plans) and any(p.stop and p.queued for p in plans)
    for host in summary.hosts:
        assert host.outcomes == host.plan.expected(), host.number
        assert host.waiting == (), host.number  # idle: the session waits for nothing
        records = [type(record) for record in host.saved]
        assert records[0] is at.UserMessageRecord
        assert records.count(at.ToolResultRecord) == host.tools_run
        if host.plan.lead:  # saved, and carried by the next request
            assert host.leads == ["Also list the deadlines."]
            assert host.leads_sent == ["lead-1"]
        else:
            assert host.leads == host.leads_sent == []
        if host.plan.stop:
            stopped = [r for r in host.saved if isinstance(r, at.ToolResultRecord)
                       and r.status is at.ToolResultStatus.CANCELLED]
            assert len(stopped) == 1, host.number
    turns = sum(len(p.expected()) for p in plans)
    assert sum(summary.outcomes.values()) == turns
    assert summary.outcomes["cancelled"] == sum(p.stop for p in plans)
    assert summary.events > 20 * SESSIONS


def test_the_command_prints_the_summary() -> None:
    result = subprocess.run([sys.executable, "-m", "examples.daemon_many", "--sessions", "20"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "sessions: 20 (idle at once: 20)"
    assert lines[1].startswith("turns ended: 27 (cancelled 3, finished 24)")
    assert lines[-1] == "tasks left: 0"
