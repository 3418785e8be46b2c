"""The reference host: a correct asyncio host on the driver, written against the world's
clients the way a host is written against its real services.

Theory of operation
-------------------
:func:`reference_effects` is what a host hands the kit (and, with real clients, the driver):
``make_effects(world) -> aio.Effects``. Each effect is a few lines of plain I/O; the driver
does the rest (tasks, cancelling, failures turned into events). Two choices make it correct
where hosts often go wrong:

* a save is idempotent: a write whose acknowledgement was lost may have landed, and the
  session may ask for the same records again, so records storage already holds are not
  written again (storage holds each record once, and the engine never gets a text twice);
* the engine's request is built from storage alone, in the OpenAI Chat format, with
  :meth:`agentturn.testing.ReferenceAdapter.transcript`'s rules (a saved Lead from the request
  that gives it on; a response that did not complete normally with its text only).

Catalogue bugs (``tests/spec_kit/async_catalogue.py``) are small subclasses of
:class:`ReferenceHost`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ... import commands as c
from ...aio import DrainReply, Effects, HookVerdict, StopSignal, TokenLimitError, ToolResult
from ...events import PermissionDecision
from ...records import ResponseRecord, ToolResultRecord, UserMessageRecord
from ...session import vocabulary as sv
from ..adapter import ReferenceAdapter
from .world import AsyncWorld, ContextTooLong, EngineStream

__all__ = ["ReferenceHost", "chat_messages", "reference_effects"]


def chat_messages(records: Sequence[Any]) -> list[dict[str, Any]]:
    """agentturn records as OpenAI Chat Completions messages."""
    messages: list[dict[str, Any]] = []
    for record in records:
        if isinstance(record, UserMessageRecord):
            messages.append({"role": "user", "content": record.text})
        elif isinstance(record, ResponseRecord):
            message: dict[str, Any] = {"role": "assistant", "content": record.text}
            if record.tool_calls:
                message["tool_calls"] = [
                    {"id": call.call_id, "type": "function",
                     "function": {"name": call.name, "arguments": call.arguments}}
                    for call in record.tool_calls]
            messages.append(message)
        elif isinstance(record, ToolResultRecord):
            messages.append({"role": "tool", "tool_call_id": record.call_id,
                             "content": record.output})
    return messages


class ReferenceHost:
    """A correct host (see the module docstring)."""

    def __init__(self, world: AsyncWorld) -> None:
        self.world = world
        # The sync kit's transcript rules, reused: it keeps which Leads a request gave.
        self.adapter = ReferenceAdapter()

    def history(self) -> Sequence[Any]:
        """What the transcript is built from: storage."""
        return self.world.storage.history()

    async def persist(self, command: c.Persist) -> None:
        stored = self.world.storage.history()
        new = [record for record in command.records if record not in stored]
        if new:
            await self.world.storage.write(new)

    async def save_lead(self, command: c.SaveLead) -> None:
        self.adapter.lead_of[command.record.message_id] = command.lead_id
        if command.record not in self.world.storage.history():
            await self.world.storage.write([command.record])

    def messages(self, command: c.RequestModelStream) -> list[dict[str, Any]]:
        return chat_messages(self.adapter.transcript(command, self))  # type: ignore[arg-type]

    async def create(self, messages: list[dict[str, Any]]) -> EngineStream:
        """The engine's stream for ``messages``; a refusal for the request's length is told as
        :class:`~agentturn.aio.TokenLimitError` (its own outcome, TL-2), not a failed stream."""
        try:
            return await self.world.engine.create(messages)
        except ContextTooLong as error:
            raise TokenLimitError(str(error)) from error

    async def model(self, command: c.RequestModelStream) -> AsyncIterator[Mapping[str, Any]]:
        stream = await self.create(self.messages(command))
        async with stream:
            async for chunk in stream:
                yield chunk

    async def permission(self, command: c.AskPermission) -> PermissionDecision:
        return await self.world.user.ask(command.call)

    async def tool(self, command: c.ExecuteTool, stop: StopSignal) -> ToolResult:
        return await self.world.tools.run(command.call, stop)

    async def title(self, command: c.RequestTitle) -> str:
        return await self.world.namer.title()

    async def stop_hooks(self, command: sv.RunStopHooks) -> HookVerdict:
        return await self.world.hooks.run()

    async def drain(self, command: sv.DrainMidTurnQueue) -> DrainReply:
        return await self.world.client.drain()

    @classmethod
    def effects_for(cls, world: AsyncWorld) -> Effects:
        """The host's effects against ``world``: what a spec's ``make_effects`` is."""
        return cls(world).effects()

    def effects(self) -> Effects:
        return Effects(persist=self.persist, model=self.model, permission=self.permission,
                       tool=self.tool, review=self.world.tools.review, save_lead=self.save_lead,
                       title=self.title, stop_hooks=self.stop_hooks, drain=self.drain)


def reference_effects(world: AsyncWorld) -> Effects:
    """The reference host's effects against ``world``."""
    return ReferenceHost(world).effects()
