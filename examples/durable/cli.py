"""The command line: ``python -m examples.durable COMMAND`` (from the repository's root).

``demo`` runs everything at once: a worker process, the demo session, the user's messages and the
transcript (``--kill-at LABEL`` kills the worker at that kill point and starts a replacement; a
label the demo never passes is a usage error, exit 2). Its data folder is a temporary one,
removed at the end unless ``--keep`` is given.
The other commands are the pieces, for several terminals:

    python -m examples.durable worker [--executor-id local]
    python -m examples.durable start s1 [--script FILE] [--worker local]
    python -m examples.durable send s1 prompt "Create calc.py"
    python -m examples.durable send s1 lead "also add a docstring"
    python -m examples.durable send s1 allow w1          # or: deny w1, cancel w1
    python -m examples.durable send s1 stop              # or: close
    python -m examples.durable show s1
    python -m examples.durable adopt worker-a --by worker-b

Where: ``AGENTTURN_DURABLE_DIR`` (default ``agentturn-durable`` in the temporary folder) holds the
SQLite system database, the chat store and the tools' work folders; ``AGENTTURN_DBOS_URL`` (a
``postgresql://`` URL) puts the system database on PostgreSQL instead.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from . import effects
from .script import DEMO_INPUTS, DEMO_SCRIPT

Json = dict[str, Any]

__all__ = ["demo_kill_points", "describe_input", "main", "render", "start_worker"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def render(data: pathlib.Path, session: str) -> list[str]:
    """The chat as text, from the store."""
    lines: list[str] = []
    for record in effects.read_transcript(data, session):
        kind = record["type"]
        if kind == "UserMessageRecord":
            lines.append(f"user: {record['text']}")
        elif kind == "ResponseRecord":
            calls = ", ".join(f"{c['name']} {c['call_id']}" for c in record["tool_calls"])
            lines.append(f"assistant: {record['text']}" + (f"  [{calls}]" if calls else ""))
        else:
            detail = record["output"] or record["reason"]
            lines.append(f"tool {record['call_id']} {record['status']}: {detail}")
    return lines


def _show(data: pathlib.Path, session: str, status: Json | None) -> None:
    title = effects.store_dir(data, session) / "title.txt"
    print(f"session {session}" + (f" - {title.read_text()}" if title.exists() else ""))
    for line in render(data, session):
        print(f"  {line}")
    if status is not None:
        for outcome in status.get("outcomes", []):
            print(f"  turn {outcome['turn_id']}: {outcome['kind']} ({outcome['message']})")
        state = "closed" if status.get("closed") else f"waiting for {status.get('for')}"
        print(f"  {state}; restarts noticed: {status.get('restarts', 0)}")
    started = collections.Counter(effects.attempts(data, session))
    again = ", ".join(f"{step} ({count} starts)" for step, count in started.items() if count > 1)
    print(f"  steps started again after a crash: {again or 'none'}")
    folder = effects.workdir(data, session)
    if folder.exists():
        for path in sorted(p for p in folder.iterdir() if not p.name.startswith(".")):
            text = path.read_text().strip()
            shown = text if len(text) <= 120 else text[:117] + "..."
            print(f"  file {path.name}: {shown!r}")


def start_worker(data: pathlib.Path, executor_id: str = "local", die_at: str | None = None,
                 env: dict[str, str] | None = None,
                 log: pathlib.Path | None = None) -> subprocess.Popen[str]:
    """A worker process (``python -m examples.durable worker``), once it is ready."""
    command = [sys.executable, "-m", "examples.durable", "worker", "--executor-id", executor_id]
    if die_at:
        command += ["--die-at", die_at]
    environment = {**os.environ, **(env or {}), "AGENTTURN_DURABLE_DIR": str(data)}
    stderr = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(command, cwd=ROOT, env=environment, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("ready"):
        process.kill()
        raise RuntimeError(f"the worker did not start: {line!r} (see {log})")
    return process


def stop_worker(process: subprocess.Popen[str]) -> None:
    if process.poll() is None and process.stdin is not None:
        process.stdin.write("quit\n")
        process.stdin.flush()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def describe_input(message: Json) -> str:
    """What the user sends, in words: the kind of input first (``Lead 'also add ...'``)."""
    kind = message.get("kind")
    if kind in ("prompt", "lead"):
        return f"{'Lead' if kind == 'lead' else 'prompt'} {json.dumps(message.get('text', ''))}"
    if kind == "permission":
        return f"{message.get('decision')} {message.get('call_id')} (a permission decision)"
    if kind == "stop":
        return "Stop"
    if kind == "close":
        return "close the session"
    return json.dumps(message)


def demo_kill_points() -> list[str]:
    """Every kill point the demo session passes, in order: the same host run without DBOS in a
    temporary folder (under a second), so ``--kill-at`` can refuse a label that never fires."""
    from .reference import run_reference

    with tempfile.TemporaryDirectory(prefix="agentturn-durable-") as folder:
        data = pathlib.Path(folder)
        run_reference(data, "demo", DEMO_SCRIPT, DEMO_INPUTS)
        log = data / "killpoints" / f"{effects.safe('demo')}.log"
        return log.read_text(encoding="utf-8").splitlines()


def _demo(kill_at: str | None, keep: bool = False) -> int:
    from .engine import Client, database_url

    if kill_at is not None and kill_at not in (points := demo_kill_points()):
        print(f"python -m examples.durable demo: --kill-at {kill_at!r} is no kill point of the "
              f"demo; choose one of {', '.join(points)}", file=sys.stderr)
        return 2
    data = pathlib.Path(tempfile.mkdtemp(prefix="agentturn-durable-"))
    url = database_url(data)
    session = f"demo-{os.getpid()}"
    print(f"data folder {data}\nsystem database {url.split('@')[-1]}")
    worker = start_worker(data, die_at=f"{session}:{kill_at}" if kill_at else None,
                          log=data / "worker.log")
    client = Client(url)

    def tick() -> None:
        nonlocal worker
        if worker.poll() == -signal.SIGKILL:
            print(f"the worker was killed at {effects.kills(data, session)[-1]}; "
                  "a replacement takes over")
            worker = start_worker(data, log=data / "worker.log")

    try:
        client.start(session, DEMO_SCRIPT)
        status = client.play(session, DEMO_INPUTS, tick=tick,
                             before_send=lambda n, s: print(
                                 f"user: {describe_input(DEMO_INPUTS[n])}   (the session waits "
                                 f"for {s['for']})"))
        client.result(session)
        _show(data, session, status)
    finally:
        client.close()
        stop_worker(worker)
        if keep:
            print(f"kept the data folder {data}")
        else:
            shutil.rmtree(data, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.durable",
                                     description="agentturn sessions as DBOS workflows")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the demo session with its own worker")
    demo.add_argument("--kill-at", metavar="LABEL",
                      help="kill the worker at this kill point (e.g. tool:w1:renamed)")
    demo.add_argument("--keep", action="store_true",
                      help="keep the demo's temporary data folder (removed by default)")
    worker = commands.add_parser("worker", help="run a worker until standard input closes")
    worker.add_argument("--executor-id", default="local")
    worker.add_argument("--die-at", default=os.environ.get("AGENTTURN_DURABLE_DIE_AT"),
                        metavar="SESSION:LABEL", help="SIGKILL this worker at that kill point")
    start = commands.add_parser("start", help="start a session")
    start.add_argument("session")
    start.add_argument("--script", type=pathlib.Path, help="a JSON script (default: the demo)")
    start.add_argument("--worker", default="local", help="the worker whose queue runs it")
    send = commands.add_parser("send", help="send input to a session")
    send.add_argument("session")
    send.add_argument("what", choices=["prompt", "lead", "allow", "deny", "cancel", "stop",
                                       "close"])
    send.add_argument("argument", nargs="?", default="")
    send.add_argument("--key", help="an idempotency key: sending again with the same key (a "
                                    "retried command) delivers the input once")
    show = commands.add_parser("show", help="print a session's transcript and status")
    show.add_argument("session")
    adopt = commands.add_parser("adopt", help="move a dead worker's sessions to another")
    adopt.add_argument("dead")
    adopt.add_argument("--by", required=True)
    arguments = parser.parse_args(argv)

    if arguments.command == "demo":
        return _demo(arguments.kill_at, arguments.keep)
    from .engine import Client, data_dir, database_url, serve

    data = data_dir()
    url = database_url(data)
    if arguments.command == "worker":
        serve(data, url, arguments.executor_id, arguments.die_at)
        return 0
    client = Client(url)
    try:
        if arguments.command == "start":
            script = (json.loads(arguments.script.read_text()) if arguments.script
                      else DEMO_SCRIPT)
            client.start(arguments.session, script, arguments.worker)
        elif arguments.command == "send":
            what, argument = arguments.what, arguments.argument
            message: Json = {"kind": what}
            if what in ("prompt", "lead"):
                message["text"] = argument
            elif what in ("allow", "deny", "cancel"):
                message = {"kind": "permission", "call_id": argument, "decision": what}
            client.send(arguments.session, message, key=arguments.key)
        elif arguments.command == "show":
            _show(data, arguments.session, client.status(arguments.session))
        else:
            print("\n".join(client.adopt(arguments.dead, arguments.by)) or "nothing to adopt")
    finally:
        client.close()
    return 0
