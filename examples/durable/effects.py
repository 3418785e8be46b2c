"""The durable host's I/O: the chat store, the scripted model, the tools, titles, kill points.

Every function here is the body of one DBOS step (see :mod:`examples.durable.engine`) and takes
the data folder and the session id first. DBOS runs a step *at least once*: a step that a crash
interrupted runs again from its start. So each one is written to have a single effect however
often it starts:

* a store write (``Persist``, ``SaveLead``, the title, the trace) goes to a file named by its
  sequence number: written under a temporary name, then renamed over the final name. Running it
  again writes the same bytes to the same name.
* a tool keeps an idempotency key (``<session>/<call id>``): the file it writes goes through a
  temporary name carrying the key and one rename; the line it appends to ``CHANGES.log`` carries
  the key and is appended only if no line has it yet; and the result is recorded in
  ``.journal/<call id>.done`` before the step returns. A rerun finds the record and returns it
  without touching anything. A tool interrupted before its record re-does only what is missing.
* the scripted model answers a request id it has already answered from its record, the way an
  API with an idempotency key does: a Lead given to that request reaches the model once however
  often the step starts.

``attempts/<session>.log`` counts every start of every step, so a test can tell the steps that
ran again (interrupted) from those that never did (completed).

**Kill points.** :func:`kill_point` marks named spots (``tool:w1:renamed``, ``lead:lead-1:start``
...). A worker started with a kill switch (``AGENTTURN_DURABLE_DIE_AT=<session>:<label>``) kills
itself with SIGKILL at that spot, once per data folder, so the crash tests are reproducible;
several labels (comma-separated) make a chain: each replacement, armed the same way, dies at the
next one it reaches.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
from typing import Any

Json = dict[str, Any]

__all__ = [
    "arm_kill_switch",
    "attempts",
    "kill_point",
    "kills",
    "model",
    "persist",
    "read_transcript",
    "safe",
    "save_title",
    "save_trace",
    "served",
    "store_dir",
    "title",
    "tool",
    "workdir",
]

# --- files -------------------------------------------------------------------------------------


def safe(name: str) -> str:
    """``name`` as one file-name component (ids hold ``/``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _write_atomic(path: pathlib.Path, text: str, tag: str) -> pathlib.Path:
    """Write ``text`` under a temporary name carrying ``tag``; the caller renames it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{safe(tag)}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return temporary


def _append_line(path: pathlib.Path, line: str) -> None:
    """One ``write`` on an ``O_APPEND`` descriptor: a kill never leaves half a line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (line + "\n").encode("utf-8"))
    finally:
        os.close(descriptor)


def store_dir(data: pathlib.Path, session: str) -> pathlib.Path:
    return data / "store" / safe(session)


def workdir(data: pathlib.Path, session: str) -> pathlib.Path:
    return data / "work" / safe(session)


def attempts(data: pathlib.Path, session: str) -> list[str]:
    """Every step start of ``session``, in order (a label per start)."""
    path = data / "attempts" / f"{safe(session)}.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _started(data: pathlib.Path, session: str, label: str) -> None:
    _append_line(data / "attempts" / f"{safe(session)}.log", label)
    kill_point(data, session, f"{label}:start")


# --- kill points -------------------------------------------------------------------------------

_KILL_SWITCH: tuple[str, frozenset[str]] | None = None


def arm_kill_switch(spec: str | None) -> None:
    """``<session>:<label>[,<label>...]``: die at each of those kill points, once per data
    folder (a replacement armed the same way dies at the next one); None: never."""
    global _KILL_SWITCH
    if not spec:
        _KILL_SWITCH = None
        return
    session, _, labels = spec.partition(":")
    _KILL_SWITCH = (session, frozenset(labels.split(",")))


def kill_point(data: pathlib.Path, session: str, label: str) -> None:
    """Log that this process passed ``label``; die here if the kill switch names it."""
    _append_line(data / "killpoints" / f"{safe(session)}.log", label)
    if _KILL_SWITCH is None or _KILL_SWITCH[0] != session or label not in _KILL_SWITCH[1]:
        return
    marker = data / "kills" / safe(session) / f"{safe(label)}.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return  # this kill point already had its crash: the replacement runs on
    os.write(descriptor, json.dumps({"label": label, "pid": os.getpid()}).encode("utf-8"))
    os.fsync(descriptor)
    os.close(descriptor)
    _append_line(data / "kills" / f"{safe(session)}.log", label)
    os.kill(os.getpid(), signal.SIGKILL)


def kills(data: pathlib.Path, session: str) -> list[str]:
    """The kill points at which a worker of ``session`` was killed, in order."""
    path = data / "kills" / f"{safe(session)}.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


# --- the chat store ----------------------------------------------------------------------------


def persist(data: pathlib.Path, session: str, seq: int, key: str, kind: str,
            records: list[Json]) -> Json:
    """Save ``records`` as entry ``seq`` of the chat (``kind``: ``persist`` or ``lead``)."""
    label = f"{kind}:{key}"
    _started(data, session, label)
    path = store_dir(data, session) / f"{seq:04d}.json"
    temporary = _write_atomic(path, json.dumps({"key": key, "kind": kind, "records": records}),
                              key)
    kill_point(data, session, f"{label}:written")
    os.replace(temporary, path)
    return {}


def read_transcript(data: pathlib.Path, session: str) -> list[Json]:
    """Every saved record of ``session``, in save order."""
    records: list[Json] = []
    for path in sorted(store_dir(data, session).glob("[0-9]*.json")):
        records.extend(json.loads(path.read_text(encoding="utf-8"))["records"])
    return records


def save_title(data: pathlib.Path, session: str, text: str) -> Json:
    _started(data, session, "set-title")
    path = store_dir(data, session) / "title.txt"
    os.replace(_write_atomic(path, text, "title"), path)
    return {}


def save_trace(data: pathlib.Path, session: str, lines: list[str]) -> Json:
    """The session's agentturn trace (check it with ``agentturn check``)."""
    _started(data, session, "trace")
    path = store_dir(data, session) / "trace.jsonl"
    os.replace(_write_atomic(path, "".join(line + "\n" for line in lines), "trace"), path)
    return {}


# --- the scripted model ------------------------------------------------------------------------


def model(data: pathlib.Path, session: str, request_id: str, lead_ids: list[str],
          scripted: Json) -> Json:
    """Answer ``request_id`` with its scripted response, once per request id.

    The request is built from the saved chat: every Lead instruction it carries must already be
    saved (the reducer's barrier). Like an API honouring an idempotency key, the model keeps one
    record per request id, written with its answer in one rename: a request asked again (the
    step ran again after a crash) gets the recorded answer, so each request, and each Lead it
    carries, reaches the model once.
    """
    label = f"model:{request_id}"
    _started(data, session, label)
    folder = data / "model" / safe(session)
    record = folder / f"{safe(request_id)}.json"
    if record.exists():
        return dict(json.loads(record.read_text(encoding="utf-8"))["response"])
    chat = read_transcript(data, session)
    texts = {r["message_id"]: r["text"] for r in chat if r["type"] == "UserMessageRecord"}
    missing = [lead for lead in lead_ids if lead not in texts]
    if missing:
        raise RuntimeError(f"{request_id} carries unsaved Lead instructions {missing}")
    order = len(list(folder.glob("*.json"))) + 1 if folder.exists() else 1
    entry = {"order": order, "request_id": request_id, "lead_ids": lead_ids,
             "leads": [texts[lead] for lead in lead_ids], "messages": len(chat),
             "response": scripted}
    os.replace(_write_atomic(record, json.dumps(entry), request_id), record)
    kill_point(data, session, f"{label}:answered")
    return dict(scripted)


def served(data: pathlib.Path, session: str) -> list[Json]:
    """Every request the model answered, in the order it answered them (one record each)."""
    folder = data / "model" / safe(session)
    entries = [json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("*.json")]
    return sorted(entries, key=lambda entry: int(entry["order"]))


def title(data: pathlib.Path, session: str, request_id: str) -> Json:
    """The naming model: the first words of the first prompt."""
    _started(data, session, f"title:{request_id}")
    chat = read_transcript(data, session)
    first = next((r["text"] for r in chat if r["type"] == "UserMessageRecord"), "")
    words = first.replace(",", " ").split()[:2]
    return {"title": " ".join(words)}


# --- tools -------------------------------------------------------------------------------------


def tool(data: pathlib.Path, session: str, call: Json) -> Json:
    """Run ``call`` in the session's work folder with its idempotency key; its result."""
    call_id = str(call["call_id"])
    label = f"tool:{call_id}"
    _started(data, session, label)
    folder = workdir(data, session)
    done = folder / ".journal" / f"{safe(call_id)}.done"
    if done.exists():  # the effect happened and was recorded: never again
        return dict(json.loads(done.read_text(encoding="utf-8")))
    try:
        arguments = json.loads(call.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        result: Json = {"output": "the arguments are not a JSON object", "error": True}
    elif call["name"] == "write_file":
        result = _write_file(data, session, label, f"{session}/{call_id}", arguments)
    elif call["name"] == "todo_write":
        result = _todo_write(data, session, arguments)
    elif call["name"] == "run_tests":
        source = folder / "calc.py"
        passed = source.exists() and "def add" in source.read_text(encoding="utf-8")
        result = {"output": "1 passed" if passed else "no tests ran", "error": not passed}
    else:
        result = {"output": f"unknown tool {call['name']}", "error": True}
    os.replace(_write_atomic(done, json.dumps(result), call_id), done)
    return result


def _write_file(data: pathlib.Path, session: str, label: str, key: str,
                arguments: Json) -> Json:
    folder = workdir(data, session)
    name, content = str(arguments.get("path", "")), str(arguments.get("content", ""))
    target = (folder / name).resolve()
    if not name or folder.resolve() not in target.parents:
        return {"output": f"refused: {name!r} is outside the work folder", "error": True}
    temporary = _write_atomic(target, content, key)
    kill_point(data, session, f"{label}:temp-written")
    os.replace(temporary, target)
    kill_point(data, session, f"{label}:renamed")
    changes = folder / "CHANGES.log"
    logged = changes.exists() and any(line.startswith(key + " ") for line in
                                      changes.read_text(encoding="utf-8").splitlines())
    if not logged:
        _append_line(changes, f"{key} wrote {name} ({len(content)} bytes)")
    kill_point(data, session, f"{label}:logged")
    return {"output": f"wrote {name}"}


def _todo_write(data: pathlib.Path, session: str, arguments: Json) -> Json:
    todos = arguments.get("todos")
    envelope = {"type": "todo_list", "todos": todos if isinstance(todos, list) else []}
    path = workdir(data, session) / "todos.json"
    os.replace(_write_atomic(path, json.dumps(envelope, indent=1), "todos"), path)
    open_items = sum(1 for t in envelope["todos"] if t.get("status") != "completed")
    return {"output": f"{len(envelope['todos'])} todos, {open_items} open", "structured": envelope}
