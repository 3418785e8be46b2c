"""Scripted sessions that more than one of the session's test files starts from: an armed
chain, a host that holds chosen commands or fails chosen writes, a session idling with a cron
turn held, and the helpers that read what came out.
"""

from __future__ import annotations

from typing import Any

from checks import field_type_problems
from session_host import PROMPT, Host, say, todo_call, todos

import agentturn as at
from agentturn import session as se


def armed_host(*more: dict[str, object], **config: object) -> Host:
    """A daemon whose first response writes one unfinished todo, then stops, then ``more``."""
    host = Host(**config)  # type: ignore[arg-type]
    host.responses.extend([say("Planning.", todo_call("tw1")), say("Stopping here.")])
    host.responses.extend(more)
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending", "completed")}
    return host


PENDING = {"output": "1 todo", "structured": todos("pending")}


READ = at.ToolCall(call_id="r1", name="read_file", arguments='{"path": "a.py"}')


CRON = se.AutomaticTurnDue(turn_id="cron-1", message_id="cron-1m", text="nightly report",
                           kind=se.AutomaticKind.CRON, source_id="task-1")


class ScriptHost(Host):
    """The scripted host, which can also hold chosen awaiting commands unanswered and fail
    chosen writes (``PersistFailed`` instead of ``Persisted``)."""

    def __init__(self, config: se.SessionConfig | None = None, *,
                 hold: tuple[type, ...] = (), fail_keys: tuple[str, ...] = (),
                 **fields: Any) -> None:
        super().__init__(config, **fields)
        self.hold_kinds = hold
        self.fail_keys = set(fail_keys)

    def answer(self, command: at.Command) -> None:
        if isinstance(command, at.Persist) and command.key in self.fail_keys:
            self.fail_keys.discard(command.key)
            self.queue.append(at.PersistFailed(key=command.key, reason="disk full"))
            return
        if self.hold_kinds and isinstance(command, self.hold_kinds):
            self.held.append(command)
            return
        super().answer(command)


def held(host: Host, kind: type) -> Any:
    """Take the last held command of ``kind`` out of ``host.held``."""
    command = next(c for c in reversed(host.held) if isinstance(c, kind))
    host.held.remove(command)
    return command


def resume(host: Host, *responses: dict[str, Any]) -> list[at.Command]:
    """Answer the held model request with ``responses`` (one per request from now on)."""
    request = held(host, at.RequestModelStream)
    host.responses.extend(responses)
    host.answer(request)
    return host.send()


def start_armed(host: Host) -> None:
    """``PROMPT``: its first response writes one unfinished todo; the next request is held."""
    host.responses.append(say("Planning.", todo_call("tw1")))
    host.tool_results["tw1"] = PENDING
    host.send(PROMPT)
    assert isinstance(host.held[-1], at.RequestModelStream)


def hooks_block_once() -> Host:
    """A host whose Stop hooks block once (reason "Tests fail."), then let stops through."""
    host = Host(stop_hooks=True)
    blocks = iter([True])
    host.hooks = lambda c: (
        se.StopHookDecided(run_id=c.run_id, block=True, reason="Tests fail.")
        if next(blocks, False) else se.StopHookDecided(run_id=c.run_id, block=False))
    return host


def persisted_texts(commands: list[at.Command]) -> list[str]:
    return [r.text for c in commands if isinstance(c, at.Persist) for r in c.records
            if isinstance(r, at.UserMessageRecord)]


def waits(state: se.SessionState) -> list[Any]:
    return [w.kind for w in se.waiting_for(state)]


def session_shape_problems(state: se.SessionState) -> list[str]:
    """What breaks the documented shape of a session state (an empty list when nothing does)."""
    problems = field_type_problems(state)
    phase = state.phase
    if bool(state.drain_id) != (phase is se.SessionPhase.DRAINING):
        problems.append(f"drain in flight {state.drain_id!r} in {phase.name}")
    if bool(state.hook_run) != (phase is se.SessionPhase.HOOKS):
        problems.append(f"Stop-hook run in flight {state.hook_run!r} in {phase.name}")
    if state.automatic and phase is not se.SessionPhase.IDLE and state.hook_blocks:
        problems.append(f"an automatic turn counts {state.hook_blocks} Stop-hook block(s)")
    turn = state.turn
    if state.todo_call and not (turn.tool_in_flight
                                and turn.calls[turn.next_call].call_id == state.todo_call):
        problems.append(f"todo call {state.todo_call!r} kept while it does not run")
    for name in ("guard_request", "hook_request", "withheld_request"):
        request = getattr(state, name)
        if request and (phase in (se.SessionPhase.IDLE, se.SessionPhase.CLOSED)
                        or request != turn.request_id):
            problems.append(f"{name}={request!r} is not the running turn's request")
    return problems


class CheckedHost(Host):
    """The scripted host, checking the session's shape after every single step."""

    def stepped(self, event: at.Event) -> None:
        problems = session_shape_problems(self.state)
        assert not problems, (event, problems)


def armed_script(host: Host, *more: dict[str, Any]) -> Host:
    """Script ``host``: the first response writes one unfinished todo, the next stops."""
    host.responses.extend([say("Planning.", todo_call("tw1")), say("Stopping here."), *more])
    host.tool_results["tw1"] = {"output": "1 todo", "structured": todos("pending", "completed")}
    return host


def third_guard_stream_withheld() -> CheckedHost:
    host = armed_script(CheckedHost(), say("Working."),
                 say("Reading.", at.ToolCall(call_id="r1", name="read_file")), say("never sent"))
    host.send(PROMPT)
    return host


def due_notification(turn_id: str, source_id: str) -> se.AutomaticTurnDue:
    return se.AutomaticTurnDue(turn_id=turn_id, message_id=f"{turn_id}-m", text=f"run {turn_id}",
                               kind=se.AutomaticKind.NOTIFICATION, source_id=source_id)
