"""The same host without DBOS: the uninterrupted run a crashed one is compared with.

:func:`run_reference` runs :class:`~examples.durable.host.SessionHost` in this process with plain
calls for its steps and the user's messages handed over one per wait, exactly as the lockstep
client sends them to a worker. ``restarts`` lists the steps (numbered from 1, as the host counts
them) at which the boot id changes: the reference then gets the restart notice where a crashed
durable run noticed its recovery, and nothing else differs.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable
from typing import Any

from . import effects
from .host import SessionHost

Json = dict[str, Any]

__all__ = ["DirectEffects", "ListInbox", "run_reference"]


class DirectEffects:
    """Every step as a plain call; the boot id changes at the given step numbers."""

    def __init__(self, data: pathlib.Path, session: str, script: Json,
                 restarts: Iterable[int] = ()) -> None:
        self.data, self.session, self.script = data, session, script
        self.restarts = set(restarts)
        self.count = 0
        self.boot = 0

    def _booted(self, result: Json) -> Json:
        self.count += 1
        if self.count in self.restarts:
            self.boot += 1
        return {**result, "boot": f"reference-{self.boot}"}

    def start(self) -> Json:
        return self._booted({})

    def persist(self, seq: int, key: str, kind: str, records: list[Json]) -> Json:
        return self._booted(effects.persist(self.data, self.session, seq, key, kind, records))

    def model(self, request_id: str, lead_ids: list[str]) -> Json:
        responses = self.script.get("responses", {})
        scripted = responses.get(request_id, self.script.get("default", {}))
        return self._booted(effects.model(self.data, self.session, request_id, lead_ids,
                                          scripted))

    def tool(self, call: Json) -> Json:
        return self._booted(effects.tool(self.data, self.session, call))

    def title(self, request_id: str) -> Json:
        return self._booted(effects.title(self.data, self.session, request_id))

    def save_title(self, text: str) -> Json:
        return self._booted(effects.save_title(self.data, self.session, text))

    def save_trace(self, lines: list[str]) -> Json:
        return self._booted(effects.save_trace(self.data, self.session, lines))


class ListInbox:
    """The user's messages, one handed over at each wait; nothing arrives between waits."""

    def __init__(self, inputs: Iterable[Json]) -> None:
        self.inputs = list(inputs)
        self.published: list[Json] = []

    def poll(self) -> list[Json]:
        return []

    def wait(self, timeout: float) -> Json | None:
        if not self.inputs:
            raise RuntimeError("the session waits for input and the script has none left")
        return self.inputs.pop(0)

    def status(self, status: Json) -> None:
        pass

    def publish(self, entries: list[Json]) -> None:
        self.published.extend(entries)


def run_reference(data: pathlib.Path, session: str, script: Json, inputs: Iterable[Json],
                  restarts: Iterable[int] = ()) -> Json:
    """Run ``session`` to its close in ``data``; the host's summary."""
    host = SessionHost(script, DirectEffects(data, session, script, restarts), ListInbox(inputs))
    return host.run()
