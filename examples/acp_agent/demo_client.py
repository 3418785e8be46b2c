"""Watch the ACP example agent on the wire: the SDK's own client starts it and prints each update.

Run:  python examples/acp_agent/demo_client.py

Three prompts in a temporary folder: a file write the client allows, a long write during which
the client sends a Lead (``_agentturn/lead``), and a todo list the model leaves unfinished, so the
todo stop guard continues twice and then reports exhaustion. One line per message.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
import tempfile
from typing import Any, cast

import acp
from acp.interfaces import Client
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AllowedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    SessionInfoUpdate,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

AGENT = pathlib.Path(__file__).resolve().parent / "agent.py"
STATE_FOLDER = ".agent-state"


def _line(update: Any) -> str:
    if isinstance(update, AgentMessageChunk):
        text = getattr(update.content, "text", "")
        text = text if len(text) <= 70 else text[:67] + "..."
        return f"agent_message_chunk {text!r}" + (f"  _meta={update.field_meta}"
                                                  if update.field_meta else "")
    if isinstance(update, ToolCallStart):
        return f"tool_call {update.tool_call_id} {update.title!r} {update.status}"
    if isinstance(update, ToolCallProgress):
        status = (update.raw_output or {}).get("status", "")
        return f"tool_call_update {update.tool_call_id} {update.status} {status}".rstrip()
    if isinstance(update, AgentPlanUpdate):
        return "plan " + ", ".join(f"{e.content} ({e.status})" for e in update.entries)
    if isinstance(update, SessionInfoUpdate):
        return f"session_info_update title={update.title!r}"
    return str(update.session_update)


class Printer:
    """A client that prints what it receives and allows every permission request."""

    def __init__(self) -> None:
        self.writing = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, ToolCallProgress) and update.status == "in_progress":
            self.writing.set()
        print(f"  < {_line(update)}")

    async def request_permission(self, session_id: str, tool_call: ToolCallUpdate,
                                 options: list[PermissionOption],
                                 **kwargs: Any) -> RequestPermissionResponse:
        print(f"  < session/request_permission {tool_call.title!r}  > allow")
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id="allow"))

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        print(f"  < _{method} {params}")


async def main() -> None:
    # The agent's work folder lives as long as the demo: nothing is left in the temp folder.
    with tempfile.TemporaryDirectory(prefix="agentturn-acp-demo-") as scratch:
        await _run(pathlib.Path(scratch))


async def _run(folder: pathlib.Path) -> None:
    printer = Printer()
    # The agent saves its sessions (for session/load) in the demo's folder, not in ~/.local.
    state = {"AGENTTURN_ACP_STATE_DIR": str(folder / STATE_FOLDER)}
    async with acp.spawn_agent_process(cast(Client, printer), sys.executable, str(AGENT),
                                       env=state) as (conn, _process):
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        for text, lead in (("write notes.txt", None),
                           ("write big.txt slowly", "also add a docstring"),
                           ("todo: port the parser", None)):
            session = (await conn.new_session(cwd=str(folder))).session_id
            print(f"> session/prompt {text!r}")
            printer.writing.clear()
            turn = asyncio.ensure_future(conn.prompt(session_id=session,
                                                     prompt=[acp.text_block(text)]))
            if lead is not None:
                await printer.writing.wait()
                reply = await conn.ext_method("agentturn/lead", {
                    "sessionId": session, "leadId": "lead-1", "text": lead})
                print(f"> _agentturn/lead {lead!r}  < {reply}")
            response = await turn
            print(f"  < stopReason {response.stop_reason!r}\n")
    written = sorted(p.name for p in folder.iterdir() if p.name != STATE_FOLDER)
    print(f"files in {folder}: {written}")


if __name__ == "__main__":
    asyncio.run(main())
