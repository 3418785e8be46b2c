"""An ACP agent whose every decision comes from ``agentturn.session``; it only carries them out.

Run it under an ACP client (it speaks JSON-RPC on stdin/stdout; logs go to stderr):
``python examples/acp_agent/agent.py``. ``python examples/acp_agent/demo_client.py`` starts it
with the SDK's own client and prints the wire. See README.md beside this file.

Theory of operation
-------------------
:class:`AgentturnAgent` is the ACP side: ``session/new`` (with an absolute ``cwd`` that is a
folder, else ``-32602``) creates a :class:`runner.SessionRunner` under a new UUID, which
runs one ``agentturn.session`` on :class:`agentturn.aio.SessionDriver` (a daemon session with
the todo stop guard on and no Stop hooks) and gives it the agent's effects; ``session/prompt``,
``session/cancel`` and the Lead extension become the session's events. A prompt's response is
sent only after everything its turn produced has been sent. The translations to ACP models are
in :mod:`wire`, the scripted model in :mod:`scripted_model`, the tools in :mod:`tools`, what is
kept on disk in :mod:`store`, and the stdio reader that answers malformed lines in
:mod:`jsonrpc_stdio`.

``session/load`` (advertised as ``loadSession``) works for any session this agent or an earlier
agent process saved: a session not live in this process is restored from its saved state with
a new guard (nothing trusted survives a restart, SG-A12), the conversation is replayed as
``session/update`` notifications, then the load is answered. A turn that ended with a resumable
error can be continued with ``_agentturn/continue`` before or after a restart.

The wire mapping (the session's event or command <-> ACP):

* ``session/prompt`` -> ``PromptSubmitted`` (``PromptQueued`` into the session's FIFO if a turn
  runs); its response waits for the turn's ``EndTurn``: the stop reason mapped from the outcome
  (:data:`wire.STOP_REASONS`), ``_meta.agentturn`` the typed outcome.
* ``session/cancel`` -> ``StopPressed``.
* ``_agentturn/continue`` request ``{sessionId}`` -> ``ContinueTurn``; answered like a prompt.
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
  ALLOW or DENY for those options; CANCEL for the client's ``cancelled``; DENY, logged with what
  came, for an answer that does not read or a failed request (no ``session/cancel`` came, so the
  turn goes on with a denied result). ``DismissPermission`` abandons the request.
* ``SetTitle`` -> ``session_info_update``. ``LeadUnapplied`` and a ``ReturnDraft`` after the
  Lead's request was answered -> ``_agentturn/lead_unapplied``, ``_agentturn/draft_returned``.

Answered inside the agent, never on the wire: ``Persist`` and ``SaveLead`` (an in-memory
transcript), ``RequestModelStream`` (the scripted model), ``RequestTitle`` (the prompt's first
words), ``DrainMidTurnQueue`` (``MidTurnDrained`` with the Leads the agent holds, always none,
``has_queued_prompt`` omitted: the driver's stand-in), ``StartTimer`` / ``CancelTimer`` (the
driver's clock), ``RunStopHooks`` (never sent: hooks are off).

**Why an extension method for Lead.** ACP has no message for text typed while a prompt runs: a
second ``session/prompt`` means "a new turn" and would be queued. Lead needs an answer (accepted,
or the draft back with a reason), so it is a request, ``_agentturn/lead``, named in the
extension namespace ACP reserves for this (a leading underscore). The agent hands it to the
session at once, so it holds no Lead of its own when the session drains mid-turn messages.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import sys
import uuid
from typing import Any, cast

import acp
import wire
from acp.agent.connection import AgentSideConnection
from acp.schema import (
    AgentCapabilities,
    AudioContentBlock,
    ClientCapabilities,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    ResourceContentBlock,
    TextContentBlock,
)
from jsonrpc_stdio import CheckedStdioTransport
from runner import DRAFT_RETURNED, LEAD_UNAPPLIED, Outbox, SessionRunner
from store import SessionStore, default_root

import agentturn as at
from agentturn import session as se

__all__ = ["CAPABILITIES_META", "CONTINUE_METHOD", "DRAFT_RETURNED", "LEAD_METHOD",
           "LEAD_UNAPPLIED", "AgentturnAgent", "main"]

#: The extension request a client sends a Lead with (``_agentturn/lead`` on the wire).
LEAD_METHOD = "agentturn/lead"
#: The extension request that continues a turn ended by a resumable error (``ContinueTurn``).
CONTINUE_METHOD = "agentturn/continue"

#: The agent capabilities' ``_meta``: the extensions, so a client can find them (ACP's
#: extensibility rules: custom capabilities go under ``_meta``, methods start with ``_``).
CAPABILITIES_META: dict[str, Any] = {"agentturn": {
    "lead": {
        "method": "_" + LEAD_METHOD,
        "params": ["sessionId", "leadId", "text"],
        "notifications": ["_" + LEAD_UNAPPLIED, "_" + DRAFT_RETURNED],
        # In the terms of ACP's draft mid-turn input proposal (session/inject): a Lead is its
        # "steer" (into the running turn, at the next model request); its "queue" is what a
        # second session/prompt already does here (the session's FIFO, after the turn).
        "injectMode": "steer",
    },
    "continue": {"method": "_" + CONTINUE_METHOD, "params": ["sessionId"]},
}}

log = logging.getLogger("agentturn.acp_agent")

ContentBlock = (TextContentBlock | ImageContentBlock | AudioContentBlock | ResourceContentBlock
                | EmbeddedResourceContentBlock)


class AgentturnAgent:
    """The ACP side: sessions, prompts, cancel and the Lead extension, each handed to a
    :class:`SessionRunner`."""

    def __init__(self, store: SessionStore | None = None) -> None:
        self._conn: acp.Client | None = None
        self._outbox = Outbox()
        self._sessions: dict[str, SessionRunner] = {}
        self._store = store if store is not None else SessionStore(default_root())

    def on_connect(self, conn: acp.Client) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int,
                         client_capabilities: ClientCapabilities | None = None,
                         client_info: Implementation | None = None,
                         **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=True, field_meta=CAPABILITIES_META),
            agent_info=Implementation(name="agentturn-acp-example", version=at.__version__))

    async def new_session(self, cwd: str, additional_directories: list[str] | None = None,
                          mcp_servers: list[Any] | None = None,
                          **kwargs: Any) -> NewSessionResponse:
        conn = self._connected()
        folder = _folder(cwd)
        # Unique across agent processes: clients name their session records after it.
        session_id = str(uuid.uuid4())
        self._sessions[session_id] = await SessionRunner(session_id, folder, conn, self._outbox,
                                                         self._store).start()
        return NewSessionResponse(session_id=session_id)

    async def load_session(self, cwd: str, session_id: str,
                           mcp_servers: list[Any] | None = None,
                           additional_directories: list[str] | None = None,
                           **kwargs: Any) -> LoadSessionResponse:
        conn = self._connected()
        folder = _folder(cwd)
        runner = self._sessions.get(session_id)
        if runner is None:
            if not _is_uuid(session_id) or not self._store.exists(session_id):
                raise acp.RequestError.resource_not_found(session_id)
            try:
                runner = SessionRunner.restored(session_id, folder, conn, self._outbox,
                                                self._store)
                await runner.start()
            except (OSError, ValueError) as error:
                raise acp.RequestError.internal_error({
                    "sessionId": session_id,
                    "details": f"the saved session does not read: {error}"}) from None
            self._sessions[session_id] = runner
        elif runner.state.phase is not se.SessionPhase.IDLE:
            raise acp.RequestError.invalid_request({
                "sessionId": session_id, "details": "a turn is running in this session"})
        else:
            await runner.move_to(folder)
        runner.replay()
        await self._outbox.flushed()  # the replay goes out before the load's answer
        return LoadSessionResponse()

    def _connected(self) -> acp.Client:
        if self._conn is None:
            raise acp.RequestError.internal_error({"details": "not connected"})
        return self._conn

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
        if method not in (LEAD_METHOD, CONTINUE_METHOD):
            raise acp.RequestError.method_not_found(f"_{method}")
        if not isinstance(params, dict):
            raise acp.RequestError.invalid_params({"details": "params must be an object"})
        runner = self._session(params.get("sessionId"))
        if method == CONTINUE_METHOD:
            try:
                outcome = await runner.continue_turn()
            except (LookupError, at.ProtocolError) as error:
                raise acp.RequestError.invalid_request({"details": str(error)}) from None
            await self._outbox.flushed()
            return wire.prompt_response(outcome).model_dump(
                mode="json", by_alias=True, exclude_none=True)
        lead_id, text = params.get("leadId"), params.get("text")
        if not isinstance(lead_id, str) or not isinstance(text, str):
            raise acp.RequestError.invalid_params({"details": "leadId and text must be strings"})
        try:
            return await runner.lead(lead_id, text)
        except (at.ProtocolError, at.FieldError) as error:
            raise acp.RequestError.invalid_params({"details": str(error)}) from None

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.info("ignored notification _%s", method)


def _folder(cwd: object) -> pathlib.Path:
    """The session's folder: ``cwd`` must be an absolute path to a folder (ACP: "the working
    directory for this session ... must be an absolute path"), else ``-32602``."""
    if not isinstance(cwd, str) or not cwd:
        raise acp.RequestError.invalid_params({"cwd": cwd, "details": "cwd is required"})
    folder = pathlib.Path(cwd)
    if not folder.is_absolute():
        raise acp.RequestError.invalid_params({"cwd": cwd,
                                               "details": "cwd must be an absolute path"})
    if not folder.is_dir():
        raise acp.RequestError.invalid_params({"cwd": cwd, "details": "cwd is not a folder"})
    return folder.resolve()


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


async def serve() -> None:
    """Serve one ACP client on stdin/stdout, through the reader that answers malformed lines
    (:mod:`jsonrpc_stdio`) instead of the SDK's own."""
    transport = await CheckedStdioTransport.open()
    # The SDK dispatches by attribute and answers "method not found" for what an agent lacks;
    # this agent implements the part of acp.Agent it serves.
    conn = AgentSideConnection(cast(acp.Agent, AgentturnAgent()), transport, listening=False)
    try:
        await conn.listen()
    finally:
        await asyncio.shield(conn.close())


def main() -> None:
    """Serve one ACP client on stdin/stdout."""
    logging.basicConfig(stream=sys.stderr,
                        level=os.environ.get("AGENTTURN_ACP_LOG", "WARNING").upper())
    asyncio.run(serve())


if __name__ == "__main__":
    main()
