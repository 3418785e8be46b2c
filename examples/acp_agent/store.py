"""What the agent keeps of a session on disk, so that a restarted agent can ``session/load`` it.

Theory of operation
-------------------
Each session has a folder ``<root>/<session id>/`` (the id is a UUID, so folders of different
agent processes never collide) with two files:

* ``log.jsonl``: the conversation, one JSON object per line, appended as it happens:
  ``{"record": {...}, "type": "UserMessageRecord" | "ResponseRecord" | "ToolResultRecord"}``
  for every record the session asked to persist (``Persist``, ``SaveLead``), written with
  ``agentturn.trace``'s converter; ``{"chunk": {"messageId", "text", "meta"}}`` for every
  ``agent_message_chunk`` the client was sent (model text and the guard's discrete messages);
  ``{"title": "..."}`` for each ``SetTitle``.
* ``session.json``: rewritten (to a temporary file, then renamed) after every step: the folder
  (``cwd``), the id counters as they are, the prompt of a turn that can still be continued, and
  the last state in which the session was idle, from ``agentturn.trace.dump_state``, which never
  holds the guard (SG-A12). :meth:`SessionStore.load` reads it back with ``load_state``: a new
  guard, nothing trusted.

Saving only idle states means an agent killed mid-turn comes back to the state before that turn
(its prompt and the records it had written are in the log, and replayed; its ids are not handed
out again); the turn itself is not continued, as nothing half-done in another process can be
checked.

The root is ``$AGENTTURN_ACP_STATE_DIR``, else ``$XDG_STATE_HOME/agentturn-acp-example``, else
``~/.local/state/agentturn-acp-example``.
"""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import agentturn as at
from agentturn import session as se
from agentturn.trace import dump_state, load_state
from agentturn.trace.convert import converter, strict

__all__ = ["LogLine", "SavedSession", "SessionStore", "default_root"]

_RECORD_TYPES: dict[str, type[at.Record]] = {
    cls.__name__: cls for cls in (at.UserMessageRecord, at.ResponseRecord, at.ToolResultRecord)}

#: One line of the log, read back: a record, a sent chunk ``(messageId, text, meta)``, a title.
LogLine: TypeAlias = at.Record | tuple[str, str, dict[str, Any] | None] | str


def default_root() -> pathlib.Path:
    """Where sessions are kept (see the module docstring)."""
    explicit = os.environ.get("AGENTTURN_ACP_STATE_DIR")
    if explicit:
        return pathlib.Path(explicit)
    state_home = os.environ.get("XDG_STATE_HOME") or str(pathlib.Path.home() / ".local/state")
    return pathlib.Path(state_home) / "agentturn-acp-example"


@dataclass
class SavedSession:
    """What ``session.json`` holds."""

    cwd: str
    state: se.SessionState
    next_turn: int = 1
    next_call: int = 1
    #: Prompt text per turn id, for a turn that ended with a resumable error.
    prompts: dict[str, str] = field(default_factory=dict)


class SessionStore:
    """The sessions' folders under one root."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root

    def _folder(self, session_id: str) -> pathlib.Path:
        return self.root / session_id

    def exists(self, session_id: str) -> bool:
        return (self._folder(session_id) / "session.json").is_file()

    def append(self, session_id: str, line: LogLine) -> None:
        """Add one line to the session's log."""
        if isinstance(line, str):
            data: dict[str, Any] = {"title": line}
        elif isinstance(line, tuple):
            message_id, text, meta = line
            data = {"chunk": {"messageId": message_id, "text": text, "meta": meta}}
        else:
            data = {"type": type(line).__name__,
                    "record": converter().unstructure(line, type(line))}
        folder = self._folder(session_id)
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "log.jsonl").open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(data, ensure_ascii=False) + "\n")

    def log(self, session_id: str) -> Iterator[LogLine]:
        """The session's log, in order; a line that does not read (a torn last line after a
        crash) is skipped."""
        path = self._folder(session_id) / "log.jsonl"
        if not path.is_file():
            return
        with path.open(encoding="utf-8") as handle:
            for text in handle:
                line = _read_line(text)
                if line is not None:
                    yield line

    def save(self, session_id: str, saved: SavedSession) -> None:
        """Rewrite ``session.json`` atomically."""
        folder = self._folder(session_id)
        folder.mkdir(parents=True, exist_ok=True)
        data = {"cwd": saved.cwd, "next_turn": saved.next_turn, "next_call": saved.next_call,
                "prompts": saved.prompts, "state": dump_state(saved.state)}
        partial = folder / "session.json.partial"
        partial.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(partial, folder / "session.json")

    def load(self, session_id: str) -> SavedSession:
        """``session.json`` read back, the state with a new guard (trust cleared, SG-A12).
        Raises ``ValueError`` (``agentturn.trace.TraceError`` is one) when it does not read."""
        data = json.loads((self._folder(session_id) / "session.json").read_text("utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("state"), str):
            raise ValueError("session.json is not a saved session")
        prompts = data.get("prompts", {})
        return SavedSession(cwd=str(data.get("cwd", "")), state=load_state(data["state"]),
                            next_turn=int(data.get("next_turn", 1)),
                            next_call=int(data.get("next_call", 1)),
                            prompts={str(k): str(v) for k, v in prompts.items()}
                            if isinstance(prompts, dict) else {})


def _read_line(text: str) -> LogLine | None:
    try:
        data = json.loads(text)
        if "title" in data:
            return str(data["title"])
        if "chunk" in data:
            chunk = data["chunk"]
            meta = chunk.get("meta")
            return (str(chunk["messageId"]), str(chunk["text"]),
                    meta if isinstance(meta, dict) else None)
        record: at.Record = strict().structure(data["record"], _RECORD_TYPES[data["type"]])
        return record
    except Exception:  # a torn or foreign line: the rest of the log still replays
        return None
