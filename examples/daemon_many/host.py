"""One session's host: scripted in-memory effects for ``agentturn.aio.SessionDriver``.

A :class:`Plan` says what the user of one session does: a prompt that takes ``rounds`` tool
rounds, and maybe a prompt queued while it runs, a Lead instruction typed while the first tool
runs, a Stop pressed while the second tool runs. :class:`SessionHost` carries the session's
effects out of memory: the engine streams Chat Completions chunk dicts from the plan (a tool
call per round, then a text), storage is a list, the one tool (``read_file``) answers at once or,
when the plan presses Stop, waits until the driver's ``StopSignal`` stops it. The user's input
goes to the driver through :attr:`SessionHost.user` (the daemon sets it to the driver's
``send_nowait``), as a UI would send it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import attrs

import agentturn as at
from agentturn import aio
from agentturn import session as se

__all__ = ["Plan", "SessionHost", "chunk", "plan_for"]


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One Chat Completions chunk, as ``ChatCompletionChunk.model_dump()`` gives it."""
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0,
            "model": "scripted", "choices": [{"index": 0, "delta": delta,
                                              "finish_reason": finish}]}


@attrs.frozen(kw_only=True)
class Plan:
    """What the user of one session does, and so how its turns must end."""

    rounds: int
    #: A second prompt queued while the first turn runs (its turn id is ``q1``).
    queued: bool = False
    #: A Lead instruction typed while the first tool runs.
    lead: bool = False
    #: Stop pressed while the second tool runs (needs ``rounds >= 2``).
    stop: bool = False

    def expected(self) -> dict[str, at.OutcomeKind]:
        """Each turn's outcome, by turn id."""
        first = at.OutcomeKind.CANCELLED if self.stop else at.OutcomeKind.FINISHED
        turns = {"t1": first}
        if self.queued:
            turns["q1"] = at.OutcomeKind.FINISHED
        return turns


def plan_for(number: int, rounds: int) -> Plan:
    """Session ``number``'s plan: every third queues a prompt, every fourth types a Lead,
    every seventh presses Stop (when there are two tool rounds to stop in)."""
    return Plan(rounds=rounds, queued=number % 3 == 1, lead=number % 4 == 2,
                stop=rounds >= 2 and number % 7 == 5)


class SessionHost:
    """Scripted effects of one session, and what they saw."""

    def __init__(self, number: int, plan: Plan) -> None:
        self.number = number
        self.plan = plan
        self.chat_id = f"chat-{number}"
        #: The user's input goes here (the daemon sets it to the driver's ``send_nowait``).
        self.user: Callable[[at.Event], None] = lambda event: None
        self.saved: list[at.Record] = []  # the in-memory storage
        self.leads: list[str] = []  # Lead texts saved
        self.leads_sent: list[str] = []  # Lead ids the model's requests carried
        self.tools_run = 0
        self.outcomes: dict[str, at.OutcomeKind] = {}
        self.waiting: tuple[se.Waiting, ...] | None = None

    def config(self) -> se.SessionConfig:
        return se.SessionConfig(chat_id=self.chat_id, turn=at.TurnConfig(auto_title=False))

    def effects(self) -> aio.Effects:
        return aio.Effects(persist=self.persist, model=self.model, permission=self.permission,
                           tool=self.tool, save_lead=self.save_lead)

    def notice(self, notice: at.Notice) -> None:
        if isinstance(notice, at.EndTurn):
            self.outcomes[notice.turn_id] = notice.outcome.kind

    # --- the effects ---------------------------------------------------------------------

    async def persist(self, command: at.Persist) -> None:
        self.saved.extend(command.records)

    async def save_lead(self, command: at.SaveLead) -> None:
        self.leads.append(command.record.text)

    async def model(self, command: at.RequestModelStream) -> AsyncIterator[dict[str, Any]]:
        self.leads_sent.extend(command.lead_ids)
        turn, _, number = command.request_id.rpartition("/r")
        rounds = self.plan.rounds if turn == "t1" else 1
        yield chunk({"role": "assistant", "content": ""})
        if int(number) <= rounds:
            call = {"index": 0, "id": f"call-{turn}-{number}", "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}
            yield chunk({"tool_calls": [call]})
            yield chunk({}, "tool_calls")
        else:
            yield chunk({"content": f"Done with {turn}."})
            yield chunk({}, "stop")

    async def permission(self, command: at.AskPermission) -> at.PermissionDecision:
        return at.PermissionDecision.ALLOW  # no call of this script asks

    async def tool(self, command: at.ExecuteTool, stop: aio.StopSignal) -> aio.ToolResult:
        self.tools_run += 1
        if self.plan.lead and self.tools_run == 1:  # typed while this tool runs
            self.user(at.LeadSubmitted(chat_id=self.chat_id, lead_id="lead-1",
                                       text="Also list the deadlines."))
        if self.plan.stop and self.tools_run == 2:  # pressed while this tool runs
            self.user(at.StopPressed())
            with stop.scope() as scope:  # a read can stop part-way
                await anyio.sleep_forever()
            if scope.cancelled_caught:
                return aio.ToolResult(output="stopped before the read ended", cancelled=True)
        await anyio.sleep(0)  # a real tool awaits its I/O
        return aio.ToolResult(output="ship on Friday")
