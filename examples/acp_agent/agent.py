"""An ACP agent whose every decision comes from ``agentturn.session``; it only carries them out.

Run it under an ACP client (it speaks JSON-RPC on stdin/stdout; logs go to stderr):
``python examples/acp_agent/agent.py``. ``python examples/acp_agent/demo_client.py`` starts it
with the SDK's own client and prints the wire. See README.md beside this file.

Theory of operation
-------------------
:class:`AgentturnAgent` is the ACP side: ``session/new`` creates a
:class:`runner.SessionRunner`, which holds one ``agentturn.session`` state (a daemon session with
the todo stop guard on and no Stop hooks) and carries out its commands; ``session/prompt``,
``session/cancel`` and the Lead extension become the session's events. A prompt's response is
sent only after everything its turn produced has been sent. The translations to ACP models are
in :mod:`wire`, the scripted model in :mod:`scripted_model`, the tools in :mod:`tools`.

The wire mapping (the session's event or command <-> ACP):

* ``session/prompt`` -> ``PromptSubmitted`` (``PromptQueued`` into the session's FIFO if a turn
  runs); its response waits for the turn's ``EndTurn``: the stop reason mapped from the outcome
  (:data:`wire.STOP_REASONS`), ``_meta.agentturn`` the typed outcome.
* ``session/cancel`` -> ``StopPressed``.
* ``_agentturn/lead`` request ``{sessionId, leadId, text}`` -> ``LeadSubmitted``; answered
  ``{accepted: true}`` (``LeadAccepted``) or ``{accepted: false, reason, message, draft}``
  (``ReturnDraft``).
* ``Publish`` of a message chunk -> ``agent_message_chunk`` without ``_meta``; of a guard chunk
  or the exhaustion message -> ``agent_message_chunk`` whose ``_meta`` is the entry's
  (``source: 'todo_stop_guard'``, ``qwenDiscreteMessage: true``, then ``attempt``,
  ``maxAttempts``, ``unfinishedCount`` for a continuation, ``kind: 'exhausted'`` and
  ``maxAttempts`` for the exhaustion message).
* ``Persist`` of a response -> one ``tool_call`` (``pending``) per call, sent after the text the
  session publishes in the same step; ``ExecuteTool`` -> ``tool_call_update`` ``in_progress``
  and the tool runs; ``Persist`` of a tool result -> ``tool_call_update`` ``completed`` or
  ``failed`` (``rawOutput.status``: executed, denied, skipped, cancelled); a finished
  ``todo_write`` -> ``plan``.
* ``AskPermission`` -> ``session/request_permission`` (allow / deny) -> ``PermissionDecided``:
  ALLOW or DENY for those options; CANCEL for anything else (the client's ``cancelled``, an
  option never offered, a failed request). ``DismissPermission`` abandons the request.
* ``SetTitle`` -> ``session_info_update``. ``LeadUnapplied`` and a ``ReturnDraft`` after the
  Lead's request was answered -> ``_agentturn/lead_unapplied``, ``_agentturn/draft_returned``.

Answered inside the agent, never on the wire: ``Persist`` and ``SaveLead`` (an in-memory
transcript), ``RequestModelStream`` (the scripted model), ``RequestTitle`` (the prompt's first
words), ``DrainMidTurnQueue`` (``MidTurnDrained`` with the Leads the agent holds, always none,
``has_queued_prompt`` omitted), ``StartTimer`` / ``CancelTimer`` (``loop.call_later``),
``RunStopHooks`` (never sent: hooks are off).

**Why an extension method for Lead.** ACP has no message for text typed while a prompt runs: a
second ``session/prompt`` means "a new turn" and would be queued. Lead needs an answer (accepted,
or the draft back with a reason), so it is a request, ``_agentturn/lead``, named in the
extension namespace ACP reserves for this (a leading underscore). The agent hands it to the
session at once, so it holds no Lead of its own when the session drains mid-turn messages.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import pathlib
import sys
import tempfile
from typing import Any, cast

import acp
import wire
from acp.schema import (
    AgentCapabilities,
    AudioContentBlock,
    ClientCapabilities,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    ResourceContentBlock,
    TextContentBlock,
)
from runner import DRAFT_RETURNED, LEAD_UNAPPLIED, Outbox, SessionRunner

import agentturn as at

__all__ = ["DRAFT_RETURNED", "LEAD_METHOD", "LEAD_UNAPPLIED", "AgentturnAgent", "main"]

#: The extension request a client sends a Lead with (``_agentturn/lead`` on the wire).
LEAD_METHOD = "agentturn/lead"

log = logging.getLogger("agentturn.acp_agent")

ContentBlock = (TextContentBlock | ImageContentBlock | AudioContentBlock | ResourceContentBlock
                | EmbeddedResourceContentBlock)


class AgentturnAgent:
    """The ACP side: sessions, prompts, cancel and the Lead extension, each handed to a
    :class:`SessionRunner`."""

    def __init__(self) -> None:
        self._conn: acp.Client | None = None
        self._outbox = Outbox()
        self._sessions: dict[str, SessionRunner] = {}
        self._numbers = itertools.count(1)

    def on_connect(self, conn: acp.Client) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int,
                         client_capabilities: ClientCapabilities | None = None,
                         client_info: Implementation | None = None,
                         **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION, agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="agentturn-acp-example", version=at.__version__))

    async def new_session(self, cwd: str, additional_directories: list[str] | None = None,
                          mcp_servers: list[Any] | None = None,
                          **kwargs: Any) -> NewSessionResponse:
        if self._conn is None:
            raise acp.RequestError.internal_error({"details": "not connected"})
        folder = pathlib.Path(cwd)
        if not folder.is_dir():
            folder = pathlib.Path(tempfile.mkdtemp(prefix="agentturn-acp-"))
        session_id = f"session-{next(self._numbers)}"
        self._sessions[session_id] = SessionRunner(session_id, folder, self._conn, self._outbox)
        return NewSessionResponse(session_id=session_id)

    def _session(self, session_id: object) -> SessionRunner:
        runner = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if runner is None:
            raise acp.RequestError.invalid_params({"sessionId": session_id,
                                                   "details": "unknown session"})
        return runner

    async def prompt(self, session_id: str, prompt: list[ContentBlock],
                     **kwargs: Any) -> PromptResponse:
        runner = self._session(session_id)
        text = "\n".join(block.text for block in prompt if isinstance(block, TextContentBlock))
        outcome = await runner.prompt(text)
        await self._outbox.flushed()  # every update of the turn goes out before its end
        return wire.prompt_response(outcome)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        if session_id in self._sessions:
            self._sessions[session_id].stop()

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method != LEAD_METHOD:
            raise acp.RequestError.method_not_found(f"_{method}")
        runner = self._session(params.get("sessionId"))
        lead_id, text = params.get("leadId"), params.get("text")
        if not isinstance(lead_id, str) or not isinstance(text, str):
            raise acp.RequestError.invalid_params({"details": "leadId and text must be strings"})
        try:
            return runner.lead(lead_id, text)
        except (at.ProtocolError, at.FieldError) as error:
            raise acp.RequestError.invalid_params({"details": str(error)}) from None

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.info("ignored notification _%s", method)


def main() -> None:
    """Serve one ACP client on stdin/stdout."""
    logging.basicConfig(stream=sys.stderr,
                        level=os.environ.get("AGENTTURN_ACP_LOG", "WARNING").upper())
    # The SDK dispatches by attribute and answers "method not found" for what an agent lacks;
    # this agent implements the part of acp.Agent it serves.
    asyncio.run(acp.run_agent(cast(acp.Agent, AgentturnAgent())))


if __name__ == "__main__":
    main()
