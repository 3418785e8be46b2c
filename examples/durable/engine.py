"""The DBOS side: the session workflow, its steps, the worker process and the client.

**What is a step, what is a message.** The workflow :func:`session_workflow` runs
:class:`~examples.durable.host.SessionHost`, the ``agentturn.session`` reducer's loop, which is
deterministic. Each command that does I/O is a ``@DBOS.step``: ``Persist`` and ``SaveLead``
(``persist``), ``RequestModelStream`` (``model``), ``ExecuteTool`` (``tool``), ``RequestTitle``
(``title``), ``SetTitle`` (``save_title``), plus ``start`` (records the boot id) and
``save_trace``. DBOS records each step's result; after a crash the workflow runs again from the
start and the recorded results come back instead of the steps running again.

What comes from outside (a prompt, queued when a turn runs; a Lead typed; a permission decision;
Stop; close) is a message on the topic ``input``: the client calls ``DBOS.send`` (through
``DBOSClient.send``, with an idempotency key) and the workflow takes it with ``DBOS.recv``, which
consumes the message and records it in one transaction: it is consumed exactly once, and a
replay gets it back at the same place. The workflow waits (a long ``recv``) only when it has
nothing else to do, and looks without waiting (``recv`` with a zero timeout) after each tool run
and at each natural stop, so a Lead or Stop sent meanwhile lands at the next boundary.
``DBOS.set_event("status", ...)`` publishes where the session stands (a client reads it with
``get_event``), and ``DBOS.write_stream("events", ...)`` carries the session's event-ring entries
(``Publish``) to subscribers.

**Workers and shards.** A worker is a process with an executor id; it dequeues sessions from its
own DBOS queue ``agentturn-sessions-<executor id>``, which a client picks when it starts a session
(:meth:`Client.start`). A worker restarted with the same executor id recovers its pending sessions
at launch. When a worker is gone for good, :meth:`Client.adopt` moves its pending sessions to the
queue of a live one, which runs them from their recorded history.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import IO, Any

from dbos import DBOS, DBOSClient, DBOSConfig, WorkflowStatus

from . import effects
from .host import SessionHost

Json = dict[str, Any]

__all__ = [
    "APP",
    "TOPIC",
    "Client",
    "data_dir",
    "database_url",
    "launch_worker",
    "queue_name",
    "run_worker",
    "serve",
    "session_workflow",
]

APP = "agentturn-durable"
#: One application version for every worker: recovery only resumes a version's own workflows.
VERSION = "agentturn-durable-1"
WORKFLOW = "agentturn_session"
TOPIC = "input"
#: How often a worker looks for sessions on its queue (seconds).
QUEUE_POLL = 0.1

_data: pathlib.Path | None = None
_boot = ""


def data_dir() -> pathlib.Path:
    """``AGENTTURN_DURABLE_DIR``, or ``agentturn-durable`` in the temporary folder."""
    configured = os.environ.get("AGENTTURN_DURABLE_DIR")
    return pathlib.Path(configured or pathlib.Path(tempfile.gettempdir()) / "agentturn-durable")


def database_url(data: pathlib.Path) -> str:
    """``AGENTTURN_DBOS_URL`` (any ``postgresql://`` URL), else a SQLite file in ``data``."""
    return os.environ.get("AGENTTURN_DBOS_URL") or f"sqlite:///{data / 'dbos.sqlite'}"


def queue_name(executor_id: str) -> str:
    return f"agentturn-sessions-{executor_id}"


def _folder() -> pathlib.Path:
    if _data is None:
        raise RuntimeError("steps run in a worker: call launch_worker first")
    return _data


def _booted(result: Json) -> Json:
    return {**result, "boot": _boot}


# --- steps -------------------------------------------------------------------------------------


@DBOS.step(name="agentturn.start")
def start_step(session: str) -> Json:
    return _booted({})


@DBOS.step(name="agentturn.persist")
def persist_step(session: str, seq: int, key: str, kind: str, records: list[Json]) -> Json:
    return _booted(effects.persist(_folder(), session, seq, key, kind, records))


@DBOS.step(name="agentturn.model")
def model_step(session: str, request_id: str, lead_ids: list[str], scripted: Json) -> Json:
    return _booted(effects.model(_folder(), session, request_id, lead_ids, scripted))


@DBOS.step(name="agentturn.tool")
def tool_step(session: str, call: Json) -> Json:
    return _booted(effects.tool(_folder(), session, call))


@DBOS.step(name="agentturn.title")
def title_step(session: str, request_id: str) -> Json:
    return _booted(effects.title(_folder(), session, request_id))


@DBOS.step(name="agentturn.save_title")
def save_title_step(session: str, text: str) -> Json:
    return _booted(effects.save_title(_folder(), session, text))


@DBOS.step(name="agentturn.save_trace")
def save_trace_step(session: str, lines: list[str]) -> Json:
    return _booted(effects.save_trace(_folder(), session, lines))


class DbosEffects:
    """The host's effects as DBOS steps of the running workflow."""

    def __init__(self, session: str, script: Json) -> None:
        self.session, self.script = session, script

    def start(self) -> Json:
        return start_step(self.session)

    def persist(self, seq: int, key: str, kind: str, records: list[Json]) -> Json:
        return persist_step(self.session, seq, key, kind, records)

    def model(self, request_id: str, lead_ids: list[str]) -> Json:
        responses = self.script.get("responses", {})
        scripted = responses.get(request_id, self.script.get("default", {}))
        return model_step(self.session, request_id, lead_ids, scripted)

    def tool(self, call: Json) -> Json:
        return tool_step(self.session, call)

    def title(self, request_id: str) -> Json:
        return title_step(self.session, request_id)

    def save_title(self, text: str) -> Json:
        return save_title_step(self.session, text)

    def save_trace(self, lines: list[str]) -> Json:
        return save_trace_step(self.session, lines)


class DbosInbox:
    """Outside input through ``DBOS.recv``; progress through ``set_event`` and a stream."""

    def poll(self) -> list[Json]:
        arrived: list[Json] = []
        while (message := DBOS.recv(TOPIC, timeout_seconds=0)) is not None:
            arrived.append(_message(message))
        return arrived

    def wait(self, timeout: float) -> Json | None:
        message = DBOS.recv(TOPIC, timeout_seconds=timeout)
        return None if message is None else _message(message)

    def status(self, status: Json) -> None:
        DBOS.set_event("status", status)

    def publish(self, entries: list[Json]) -> None:
        DBOS.write_stream("events", entries)


def _message(value: object) -> Json:
    return dict(value) if isinstance(value, dict) else {"kind": None, "value": repr(value)}


@DBOS.workflow(name=WORKFLOW)
def session_workflow(session: str, script: Json) -> Json:
    """One session, from its first wait to its close: deterministic, so DBOS can replay it."""
    return SessionHost(script, DbosEffects(session, script), DbosInbox()).run()


# --- the worker --------------------------------------------------------------------------------


def _prepare_sqlite(url: str) -> None:
    """Write-ahead logging for a SQLite system database (set once, kept by the file): one sync
    per commit instead of several; a killed process loses nothing committed."""
    path = pathlib.Path(url.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
    finally:
        connection.close()


def launch_worker(data: pathlib.Path, url: str, executor_id: str = "local",
                  die_at: str | None = None) -> None:
    """Launch DBOS in this process as worker ``executor_id``: it recovers its own pending
    sessions, then runs the sessions of its queue."""
    global _data, _boot
    _data = data
    _boot = f"{executor_id}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    effects.arm_kill_switch(die_at)
    sqlite = url.startswith("sqlite")
    if sqlite:
        _prepare_sqlite(url)
    config: DBOSConfig = {"name": APP, "system_database_url": url, "executor_id": executor_id,
                          "application_version": VERSION, "log_level": "WARNING"}
    if sqlite:  # no LISTEN/NOTIFY: look for new messages often
        config["notification_listener_polling_interval_sec"] = 0.02
    client = Client(url)  # the queue exists before launch: it is served from the first moment
    client.register(executor_id)
    client.close()
    DBOS(config=config)
    DBOS.listen_queues([queue_name(executor_id)])
    DBOS.launch()


def run_worker(data: str, url: str, executor_id: str = "local",
               die_at: str | None = None) -> None:
    """A worker that runs until it is killed (the crash tests fork it)."""
    launch_worker(pathlib.Path(data), url, executor_id, die_at)
    threading.Event().wait()


def serve(data: pathlib.Path, url: str, executor_id: str = "local", die_at: str | None = None,
          control: IO[str] | None = None) -> None:
    """Run a worker until ``control`` (standard input) says ``quit`` or closes.

    Sessions still running then (waiting for input, say) are simply left: they are durable, and
    the next worker with this executor id resumes them, exactly as after a crash. Their threads
    would keep the interpreter alive, so the process ends with ``os._exit``.
    """
    launch_worker(data, url, executor_id, die_at)
    print(f"ready {executor_id} {os.getpid()}", flush=True)
    for line in control or sys.stdin:
        if line.strip() == "quit":
            break
    DBOS.destroy()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# --- the client --------------------------------------------------------------------------------


class Client:
    """Start sessions, send them input, read where they stand (from outside any worker)."""

    def __init__(self, url: str) -> None:
        if url.startswith("sqlite"):
            _prepare_sqlite(url)
        DBOS.migrate(url)  # a client never creates the system database: do it first
        self.dbos = DBOSClient(system_database_url=url, application_name=APP)

    def register(self, worker: str) -> None:
        """Create (or update) ``worker``'s queue."""
        self.dbos.register_queue(queue_name(worker), polling_interval_sec=QUEUE_POLL)

    def close(self) -> None:
        self.dbos.destroy()

    def start(self, session: str, script: Json, worker: str = "local") -> None:
        """Start ``session`` on ``worker``'s queue (a host shards sessions by choosing it)."""
        self.register(worker)
        self.dbos.enqueue({"queue_name": queue_name(worker), "workflow_name": WORKFLOW,
                           "workflow_id": session, "app_version": VERSION}, session, script)

    def send(self, session: str, message: Json, key: str | None = None) -> None:
        """Send one input; a resend with the same ``key`` is delivered once."""
        self.dbos.send(session, message, TOPIC, idempotency_key=key)

    def status(self, session: str) -> Json | None:
        value = self.dbos.get_event(session, "status", timeout_seconds=0)
        return value if isinstance(value, dict) else None

    def workflow(self, session: str) -> WorkflowStatus | None:
        found = self.dbos.list_workflows(workflow_ids=[session], load_input=False)
        return found[0] if found else None

    def result(self, session: str) -> Json:
        value: Any = self.dbos.retrieve_workflow(session).get_result(polling_interval_sec=0.05)
        return dict(value)

    def adopt(self, dead: str, survivor: str) -> list[str]:
        """Move every unfinished session of the worker ``dead`` (gone for good) to the queue of
        ``survivor``; it runs them from their recorded history. Their ids."""
        moved: list[str] = []
        for status in ("PENDING", "ENQUEUED"):
            for workflow in self.dbos.list_workflows(
                    status=status, executor_id=dead if status == "PENDING" else None,
                    queue_name=queue_name(dead) if status == "ENQUEUED" else None,
                    load_input=False, load_output=False):
                self.dbos.resume_workflow(workflow.workflow_id, queue_name=queue_name(survivor))
                moved.append(workflow.workflow_id)
        return moved

    def play(self, session: str, inputs: Sequence[Json], *, sent: int = 0,
             stop_at: int | None = None,
             before_send: Callable[[int, Json], None] | None = None,
             tick: Callable[[], None] | None = None, timeout: float = 60.0) -> Json:
        """Send ``inputs`` in lockstep: input ``n`` when the session waits having taken ``n``
        (the first ``sent`` went out before). ``before_send(n, status)`` runs before input ``n``
        goes out, ``tick()`` at every look. Returns the status once the session closes, or
        waits for input ``stop_at``."""
        deadline = time.monotonic() + timeout
        looks = 0
        while time.monotonic() < deadline:
            if tick is not None:
                tick()
            looks += 1
            if looks % 40 == 0:  # every two seconds: has the workflow failed?
                workflow = self.workflow(session)
                if workflow is not None and workflow.status == "ERROR":
                    raise RuntimeError(f"{session} failed: {workflow.error!r}")
            status = self.status(session)
            if status is not None and status.get("closed"):
                return status
            if status is not None and status.get("waiting") and status.get("inputs") == sent:
                if sent == stop_at:
                    return status
                if sent == len(inputs):
                    raise RuntimeError(f"{session} waits for {status['for']}: no input left")
                if before_send is not None:
                    before_send(sent, status)
                self.send(session, inputs[sent], key=f"{session}/input-{sent}")
                sent += 1
                continue
            time.sleep(0.05)
        raise TimeoutError(f"{session} did not close within {timeout} s")
