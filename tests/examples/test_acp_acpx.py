"""The ACP example agent under a real, independent ACP client: acpx 0.19.1 (npm), over stdio.

acpx is a headless ACP command line. These tests run it as a user would, as subprocesses, and
read the JSON-RPC exchange it prints with ``--format json`` (one message per line), its session
records (``sessions show``, ``sessions read``) and the files the agent wrote:

* a plain prompt; tools with permission allowed (``--approve-all``) and denied (``--deny-all``);
* a cancel while the permission dialog is open (acpx on a terminal, interrupted) and a cancel
  mid-write (``acpx cancel``): ``stopReason: "cancelled"``, nothing written;
* prompts queued with ``--no-wait`` during a running turn, answered in order;
* two sessions in two folders, each writing into its own folder (unique session ids);
* the guard's discrete messages (their own ``messageId``, their ``_meta``) and the title;
* an agent restart: the agent process is killed, the next prompt starts a new one, which
  ``session/load``s the session and goes on.

Where acpx is: ``$AGENTTURN_ACPX`` (the ``acpx`` executable), else ``.acpx/node_modules/.bin`` in
the clone (``.ci/run`` installs it there with ``npm i --prefix .acpx node@22 acpx@0.19.1``).
Without it these tests skip, except under CI (``CI=true``), where a missing acpx fails.

Nothing is left behind: acpx's records go to a temporary HOME (and its queue sockets to the
``/tmp/acpx-<hash of HOME>`` folder that belongs to it, removed at the end), the agent's saved
sessions to a temporary ``AGENTTURN_ACP_STATE_DIR``; every acpx session is closed at the end,
an owner still running is ended by its pid, and every subprocess runs with a timeout. The
malformed-input checks over raw stdio are in ``test_acp_stdio.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("acp")  # the agent's own dependency (the `acp` extra)

ROOT = pathlib.Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "acp_agent" / "agent.py"
ACPX_VERSION = "0.19.1"
#: Seconds any one acpx command may take.
TIMEOUT = 60
GUARD_META = {"source": "todo_stop_guard", "qwenDiscreteMessage": True}


def _find_acpx() -> pathlib.Path | None:
    explicit = os.environ.get("AGENTTURN_ACPX")
    candidate = pathlib.Path(explicit) if explicit else ROOT / ".acpx/node_modules/.bin/acpx"
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


ACPX = _find_acpx()
if ACPX is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("acpx is not installed under CI: .ci/run installs it with "
                           f"`npm i --prefix .acpx node@22 acpx@{ACPX_VERSION}`")
    pytest.skip(f"acpx not installed (npm i --prefix .acpx node@22 acpx@{ACPX_VERSION})",
                allow_module_level=True)


class Acpx:
    """acpx with its own HOME, TMPDIR and agent store; every call bounded by a timeout."""

    def __init__(self, acpx: pathlib.Path, home: pathlib.Path) -> None:
        self.acpx = acpx
        self.home = home
        (home / "tmp").mkdir()
        self.env = {**os.environ, "HOME": str(home), "TMPDIR": str(home / "tmp"),
                    "AGENTTURN_ACP_STATE_DIR": str(home / "agent-state"),
                    # node@22 from npm: acpx's own `#!/usr/bin/env node` must find it first
                    "PATH": f"{acpx.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.agent = f"{sys.executable} {AGENT}"
        self.folders: list[pathlib.Path] = []

    def folder(self, name: str) -> pathlib.Path:
        folder = self.home / name
        folder.mkdir()
        return folder

    def command(self, *args: str, policy: str | None = None) -> list[str]:
        flags = ["--format", "json", "--agent", self.agent]
        if policy is not None:
            flags.append(policy)
        return [str(self.acpx), *flags, *args]

    def run(self, folder: pathlib.Path, *args: str, policy: str | None = None,
            check: bool = True, exit_code: int = 0) -> subprocess.CompletedProcess[str]:
        """acpx ``args`` in ``folder``; with ``check``, its exit code must be ``exit_code``."""
        if args and args[0] == "sessions" and args[1:2] == ("new",):
            self.folders.append(folder)
        done = subprocess.run(self.command(*args, policy=policy), cwd=folder, env=self.env,
                              capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
        if check and done.returncode != exit_code:
            raise AssertionError(f"acpx {' '.join(args)} exited {done.returncode}:\n"
                                 f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return done

    def start(self, folder: pathlib.Path, *args: str,
              policy: str | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command(*args, policy=policy), cwd=folder, env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)

    def show(self, folder: pathlib.Path) -> dict[str, Any]:
        record: dict[str, Any] = json.loads(self.run(folder, "sessions", "show").stdout)
        return record

    def close_all(self) -> None:
        """Close every session (which ends its queue owner and agent), then end any owner or
        agent still running from this run's records, by its pid."""
        for folder in self.folders:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.run(folder, "sessions", "close", check=False)
        for lock in (self.home / ".acpx" / "queues").glob("*.lock"):
            try:
                pid = json.loads(lock.read_text())["pid"]
                os.kill(int(pid), signal.SIGTERM)
            except (OSError, ValueError, KeyError, TypeError):
                pass


@pytest.fixture(scope="module")
def acpx() -> Iterator[Acpx]:
    assert ACPX is not None
    version = subprocess.run([str(ACPX), "--version"], capture_output=True, text=True,
                             timeout=TIMEOUT, env={**os.environ, "PATH": f"{ACPX.parent}"
                                                   f"{os.pathsep}{os.environ.get('PATH', '')}"})
    assert version.stdout.strip() == ACPX_VERSION, version
    home = pathlib.Path(tempfile.mkdtemp(prefix="agentturn-acpx-home-"))
    client = Acpx(ACPX, home)
    try:
        yield client
    finally:
        client.close_all()
        shutil.rmtree(home, ignore_errors=True)
        # acpx keeps its queue sockets in /tmp/acpx-<hash of HOME>, whatever TMPDIR says
        key = hashlib.sha256(str(home).encode()).hexdigest()[:10]
        shutil.rmtree(pathlib.Path("/tmp") / f"acpx-{key}", ignore_errors=True)


# --- reading acpx's JSON output ----------------------------------------------------------------


def messages(output: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages acpx printed, in order (other JSON lines dropped)."""
    found = []
    for line in output.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("jsonrpc") == "2.0":
            found.append(value)
    return found


def updates(wire: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    """The ``session/update`` payloads (of ``kind``, if given)."""
    return [m["params"]["update"] for m in wire if m.get("method") == "session/update"
            and (kind is None or m["params"]["update"]["sessionUpdate"] == kind)]


def answer_to(wire: list[dict[str, Any]], method: str) -> dict[str, Any]:
    """The response to the (last) request ``method`` the client sent."""
    ids = [m["id"] for m in wire if m.get("method") == method and "id" in m]
    assert ids, f"no {method} request in {wire}"
    return next(m for m in reversed(wire) if "method" not in m and m.get("id") == ids[-1]
                and ("result" in m or "error" in m))


def stop_reason(wire: list[dict[str, Any]]) -> str:
    reason: str = answer_to(wire, "session/prompt")["result"]["stopReason"]
    return reason


def texts(wire: list[dict[str, Any]]) -> list[str]:
    return [u["content"]["text"] for u in updates(wire, "agent_message_chunk")]


# --- the scenarios -------------------------------------------------------------------------------


def test_a_plain_prompt_is_answered_and_the_agent_advertises_load_and_lead(acpx: Acpx) -> None:
    """exec: initialize (loadSession, the Lead extension in _meta), session/new with a UUID, one
    agent_message_chunk with a messageId, the title, end_turn."""
    folder = acpx.folder("plain")
    wire = messages(acpx.run(folder, "exec", "hello there").stdout)
    capabilities = answer_to(wire, "initialize")["result"]["agentCapabilities"]
    assert capabilities["loadSession"] is True
    assert capabilities["_meta"]["agentturn"]["lead"]["method"] == "_agentturn/lead"
    session_id = answer_to(wire, "session/new")["result"]["sessionId"]
    assert str(uuid.UUID(session_id)) == session_id
    chunk, = updates(wire, "agent_message_chunk")
    assert chunk["content"]["text"] == "Hello! You said: hello there"
    assert chunk["messageId"] and "_meta" not in chunk
    assert [u["title"] for u in updates(wire, "session_info_update")] == ["Hello there"]
    assert stop_reason(wire) == "end_turn"


def test_an_allowed_write_writes_the_file_its_location_absolute(acpx: Acpx) -> None:
    """--approve-all: the permission request is answered allow, the tool runs, the file is in
    the session's folder; the call's location is that file's absolute path."""
    folder = acpx.folder("allow")
    wire = messages(acpx.run(folder, "exec", "write notes.txt", policy="--approve-all").stdout)
    call, = updates(wire, "tool_call")
    assert call["locations"] == [{"path": str((folder / "notes.txt").resolve())}]
    asked = next(m for m in wire if m.get("method") == "session/request_permission")
    assert asked["params"]["toolCall"]["locations"] == call["locations"]
    ends = [u for u in updates(wire, "tool_call_update") if u["status"] != "in_progress"]
    assert [(u["status"], u["rawOutput"]["status"]) for u in ends] == [("completed", "executed")]
    assert (folder / "notes.txt").read_text().startswith("Written by the agentturn ACP example")
    assert texts(wire)[-1] == "Wrote notes.txt."
    assert stop_reason(wire) == "end_turn"


def test_a_denied_write_writes_nothing_and_the_turn_goes_on(acpx: Acpx) -> None:
    """--deny-all: the call ends denied with the reason, the model is told, end_turn (acpx
    exits 5, its code for "a permission was denied")."""
    folder = acpx.folder("deny")
    wire = messages(acpx.run(folder, "exec", "write notes.txt", policy="--deny-all",
                             exit_code=5).stdout)
    end = updates(wire, "tool_call_update")[-1]
    assert end["status"] == "failed"
    assert end["rawOutput"]["status"] == "denied"
    assert end["rawOutput"]["permission"] == "the client chose 'deny'"
    assert texts(wire)[-1] == "Understood: notes.txt was not written."
    assert stop_reason(wire) == "end_turn"
    assert list(folder.iterdir()) == []


def _until(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether ``condition`` came true within ``seconds`` (polled)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_cancel_while_the_permission_dialog_is_open_writes_nothing(acpx: Acpx) -> None:
    """acpx on a terminal asks "Allow ...? (y/N)"; interrupted meanwhile, it sends
    session/cancel and answers the dialog cancelled: stopReason cancelled, no file."""
    folder = acpx.folder("dialog")
    terminal, other_end = pty.openpty()
    out = folder.parent / "dialog.out"
    with out.open("w") as sink:
        process = subprocess.Popen(acpx.command("exec", "write notes.txt"), cwd=folder,
                                   env=acpx.env, stdin=other_end, stdout=sink, stderr=other_end,
                                   start_new_session=True)
    os.close(other_end)
    shown = b""
    try:
        deadline = time.monotonic() + TIMEOUT
        while b"[permission]" not in shown and time.monotonic() < deadline:
            if select.select([terminal], [], [], 0.2)[0]:
                shown += os.read(terminal, 4096)
        assert b"[permission] Allow write_file notes.txt" in shown
        process.send_signal(signal.SIGINT)
        process.wait(TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT)
        os.close(terminal)
    wire = messages(out.read_text())
    methods = [m.get("method") for m in wire]
    assert methods.index("session/cancel") > methods.index("session/request_permission")
    assert answer_to(wire, "session/request_permission")["result"] == {
        "outcome": {"outcome": "cancelled"}}
    assert stop_reason(wire) == "cancelled"
    assert [u["rawOutput"]["status"] for u in updates(wire, "tool_call_update")] == [
        "cancelled"]
    assert list(folder.iterdir()) == []


def test_a_cancel_mid_write_writes_nothing_and_queued_prompts_run_in_order(acpx: Acpx) -> None:
    """A persistent session: a slow write runs, two prompts are queued with --no-wait, then
    `acpx cancel`: the write stops with nothing written (no partial file either), the turn
    ends cancelled, and the queued prompts are answered after it, first in first out."""
    folder = acpx.folder("queue")
    acpx.run(folder, "sessions", "new")
    running = acpx.start(folder, "prompt", "write big.txt slowly over 30 seconds",
                         policy="--approve-all")
    try:
        assert _until(lambda: (folder / ".big.txt.partial").exists(), TIMEOUT)
        for text in ("first queued", "second queued"):
            queued = json.loads(acpx.run(folder, "prompt", "--no-wait", text).stdout)
            assert queued["action"] == "prompt_queued"
        cancelled = json.loads(acpx.run(folder, "cancel").stdout)
        assert cancelled["cancelled"] is True
        output, _ = running.communicate(timeout=TIMEOUT)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate(timeout=TIMEOUT)
    wire = messages(output)
    assert stop_reason(wire) == "cancelled"
    write = next(u for u in updates(wire, "tool_call") if u["title"] == "write_file big.txt")
    end = [u for u in updates(wire, "tool_call_update")
           if u["toolCallId"] == write["toolCallId"]][-1]
    assert end["rawOutput"]["status"] == "cancelled" and end["status"] == "failed"
    assert end["rawOutput"]["output"] == "cancelled: big.txt was not written"

    def history() -> list[tuple[str, str]]:
        read = json.loads(acpx.run(folder, "sessions", "read").stdout)
        return [(e["role"], e["textPreview"]) for e in read["entries"]]

    assert _until(lambda: len(history()) == 6, TIMEOUT), history()
    assert [entry for entry in history() if entry[0] == "user"] == [
        ("user", "write big.txt slowly over 30 seconds"), ("user", "first queued"),
        ("user", "second queued")]
    assert history()[3:] == [("assistant", "Hello! You said: first queued"),
                             ("user", "second queued"),
                             ("assistant", "Hello! You said: second queued")]
    assert list(folder.iterdir()) == []


def test_two_sessions_in_two_folders_each_write_into_their_own(acpx: Acpx) -> None:
    """Two acpx sessions, one per folder, each with its own agent process: distinct session
    ids, so neither record overwrites the other and each prompt writes into its own folder."""
    a, b = acpx.folder("a"), acpx.folder("b")
    for folder in (a, b):
        acpx.run(folder, "sessions", "new")
    ids = {acpx.show(a)["acpSessionId"], acpx.show(b)["acpSessionId"]}
    assert len(ids) == 2
    acpx.run(b, "prompt", "write from-b.txt", policy="--approve-all")
    acpx.run(a, "prompt", "write from-a.txt", policy="--approve-all")
    assert sorted(p.name for p in a.iterdir()) == ["from-a.txt"]
    assert sorted(p.name for p in b.iterdir()) == ["from-b.txt"]
    assert {acpx.show(a)["cwd"], acpx.show(b)["cwd"]} == {str(a), str(b)}


def test_the_guards_messages_are_discrete_with_their_meta_and_the_title_is_set(
        acpx: Acpx) -> None:
    """An unfinished todo list: two guard continuations and the exhaustion message, each with
    its _meta and a messageId of its own (distinct from the model's text around it); the
    session's title is the prompt's first words."""
    folder = acpx.folder("guard")
    acpx.run(folder, "sessions", "new")
    wire = messages(acpx.run(folder, "prompt", "todo: port the parser").stdout)
    chunks = updates(wire, "agent_message_chunk")
    ids = [c["messageId"] for c in chunks]
    assert all(ids) and len(set(ids)) == len(ids) == 7
    guard = [c for c in chunks if "_meta" in c]
    assert [c["_meta"] for c in guard] == [
        {**GUARD_META, "attempt": 1, "maxAttempts": 2, "unfinishedCount": 1},
        {**GUARD_META, "attempt": 2, "maxAttempts": 2, "unfinishedCount": 1},
        {**GUARD_META, "kind": "exhausted", "attempt": 2, "maxAttempts": 2,
         "unfinishedCount": 1}]
    assert all(c["content"]["text"].startswith("[Todo Stop Guard]") for c in guard)
    assert stop_reason(wire) == "end_turn"
    assert [u["title"] for u in updates(wire, "session_info_update")] == [
        "Todo: port the parser"]
    assert acpx.show(folder)["title"] == "Todo: port the parser"


def test_after_the_agent_is_killed_the_next_prompt_loads_the_session_and_goes_on(
        acpx: Acpx) -> None:
    """The agent process dies; acpx starts a new one for the next prompt, which answers
    session/load for the same session id (no fallback to a new session) and continues it:
    the turn and call numbers go on, the title stays, the history holds both turns."""
    folder = acpx.folder("restart")
    acpx.run(folder, "sessions", "new")
    acpx.run(folder, "prompt", "write one.txt", policy="--approve-all")
    before = acpx.show(folder)
    os.kill(int(before["pid"]), signal.SIGTERM)  # the agent process acpx started for us
    wire = messages(acpx.run(folder, "prompt", "write two.txt", policy="--approve-all").stdout)
    load = next(m for m in wire if m.get("method") == "session/load")
    assert load["params"]["sessionId"] == before["acpSessionId"]
    assert answer_to(wire, "session/load")["result"] == {}
    assert not any(m.get("method") == "session/new" for m in wire)
    assert [u["toolCallId"] for u in updates(wire, "tool_call")] == ["call-2"]
    assert stop_reason(wire) == "end_turn"
    after = acpx.show(folder)
    assert after["pid"] != before["pid"]
    assert after["acpSessionId"] == before["acpSessionId"]
    assert after["title"] == "Write one.txt"
    assert sorted(p.name for p in folder.iterdir()) == ["one.txt", "two.txt"]
    read = json.loads(acpx.run(folder, "sessions", "read").stdout)
    assert [e["textPreview"] for e in read["entries"] if e["role"] == "user"] == [
        "write one.txt", "write two.txt"]
