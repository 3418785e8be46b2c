"""Values that travel inside events and commands: finish reasons, tool calls, records, outcomes.

Theory of operation
-------------------
Engines disagree on how they say why a response ended (``stop``, ``end_turn``, ``length``,
``max_tokens``, ``MAX_TOKENS``, ``tool_use`` ...). :func:`FinishReason.of` normalizes the raw
string into a small :class:`FinishKind` and keeps the raw string unchanged beside it (TL-10); a
string it does not know becomes ``OTHER``, never an error. Only a response whose reason is known to
complete normally (``STOP``, ``TOOL_CALLS``) may have its tool calls run: a cut-off, a safety stop
or an unknown reason may hide a half-written call (TL-9).

Records are what the host persists when it gets a ``Persist`` command: the user's prompt, a model
response (with its raw finish reason), or one result record per tool call. Every tool call of a
persisted response ends with exactly one :class:`ToolResultRecord`, whose status says how it ended.

A turn ends with one :class:`TurnOutcome`, which always carries the finish reason of the turn's
last completed response (``None`` only when no response completed in the turn).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType

import attrs

from ._base import (
    FieldError,
    Value,
    is_bool,
    is_id,
    is_str,
    not_blank,
    one_of,
    optional,
    tuple_of,
)

__all__ = [
    "COMPLETE_KINDS",
    "KNOWN_FINISH_REASONS",
    "CutOffSignal",
    "FinishKind",
    "FinishReason",
    "HardStopKind",
    "OutcomeKind",
    "ResponseRecord",
    "ToolCall",
    "ToolResultRecord",
    "ToolResultStatus",
    "TurnOutcome",
    "UserMessageRecord",
]


class FinishKind(enum.Enum):
    """The normalized meaning of an engine's finish reason."""

    #: The model ended its response on its own.
    STOP = "stop"
    #: The model ended its response to call tools.
    TOOL_CALLS = "tool_calls"
    #: The engine cut the response at its output limit (``length``, ``max_tokens``).
    LENGTH = "length"
    #: The engine withheld or cut the response for safety reasons.
    CONTENT_FILTER = "content_filter"
    #: A finish reason this library does not know; the raw string says what it was.
    OTHER = "other"


#: Finish reasons of the major engines (OpenAI chat and responses, Anthropic, Gemini, Bedrock,
#: Mistral, Cohere, Ollama, vLLM), lower-cased. A reason missing here is ``OTHER``; a host adds
#: its engine's reasons with ``TurnConfig(finish_reasons=...)``.
KNOWN_FINISH_REASONS: Mapping[str, FinishKind] = MappingProxyType({
    # a normal end of the response
    "stop": FinishKind.STOP,
    "end_turn": FinishKind.STOP,
    "stop_sequence": FinishKind.STOP,
    "eos": FinishKind.STOP,
    "complete": FinishKind.STOP,
    "completed": FinishKind.STOP,
    # a normal end in order to call tools
    "tool_calls": FinishKind.TOOL_CALLS,
    "tool_use": FinishKind.TOOL_CALLS,
    "tool_call": FinishKind.TOOL_CALLS,
    "function_call": FinishKind.TOOL_CALLS,
    # Gemini: the model called a tool and wrote the call badly. Not a cut-off: with the event's
    # ``malformed_tool_format`` (which agentturn.engines sets) it takes the one retry (TL-6).
    "malformed_function_call": FinishKind.TOOL_CALLS,
    # cut off by a size limit: the response (and any tool call in it) may be incomplete
    "length": FinishKind.LENGTH,
    "max_tokens": FinishKind.LENGTH,
    "max_output_tokens": FinishKind.LENGTH,
    "model_length": FinishKind.LENGTH,
    "model_context_window_exceeded": FinishKind.LENGTH,
    "context_length_exceeded": FinishKind.LENGTH,
    "incomplete": FinishKind.LENGTH,
    # withheld or cut for safety or policy
    "content_filter": FinishKind.CONTENT_FILTER,
    "content_filtered": FinishKind.CONTENT_FILTER,
    "guardrail_intervened": FinishKind.CONTENT_FILTER,
    "safety": FinishKind.CONTENT_FILTER,
    "refusal": FinishKind.CONTENT_FILTER,
    "recitation": FinishKind.CONTENT_FILTER,
    "blocklist": FinishKind.CONTENT_FILTER,
    "prohibited_content": FinishKind.CONTENT_FILTER,
    "spii": FinishKind.CONTENT_FILTER,
    "image_safety": FinishKind.CONTENT_FILTER,
    "error_toxic": FinishKind.CONTENT_FILTER,
})

#: The kinds that mean the engine completed the response normally: only their tool calls run.
COMPLETE_KINDS = frozenset({FinishKind.STOP, FinishKind.TOOL_CALLS})
#: The same by name, for the hot path: an Enum member hashes in Python, its name in C.
_COMPLETE_NAMES = frozenset(kind._name_ for kind in COMPLETE_KINDS)


class CutOffSignal(enum.Enum):
    """Which signal showed that a response was cut at the output limit (TL-9). Engines can
    mislabel a cut-off response, so the finish reason is only the first of the signals; any of
    them means no tool call of the response runs, whatever its label."""

    #: The engine's finish reason said so (``length``, ``max_tokens``, ``MAX_TOKENS`` ...).
    FINISH_REASON = "finish_reason"
    #: The output tokens reached the limit the request asked for.
    OUTPUT_TOKEN_LIMIT = "output_token_limit"
    #: The stream ended inside a tool-call block that was never closed.
    UNCLOSED_TOOL_BLOCK = "unclosed_tool_block"
    #: A tool call's arguments stop mid-JSON, with the output tokens at the limit.
    UNPARSABLE_ARGUMENTS_AT_LIMIT = "unparsable_arguments_at_limit"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class FinishReason(Value):
    """An engine's finish reason: its normalized kind and the raw string, unchanged (TL-10)."""

    kind: FinishKind = attrs.field(validator=one_of(FinishKind))
    raw: str = attrs.field(validator=is_str)

    @classmethod
    def of(cls, raw: str, extra: Mapping[str, FinishKind] | None = None) -> FinishReason:
        """Normalize ``raw`` (case-insensitive, surrounding space ignored).

        ``extra`` (lower-case keys) is consulted first, so a host can name its engine's reasons;
        a string neither knows is kept as ``OTHER``, never an error.
        """
        if type(raw) is not str:
            raise FieldError(f"FinishReason.raw must be a str, got {type(raw).__name__}")
        key = raw.strip().lower()
        kind = extra.get(key) if extra else None
        if kind is None:
            kind = KNOWN_FINISH_REASONS.get(key, FinishKind.OTHER)
        return cls(kind=kind, raw=raw)

    @property
    def completes_normally(self) -> bool:
        """True when the engine ended the response normally, so its tool calls may run (TL-9)."""
        return self.kind._name_ in _COMPLETE_NAMES


def _no_reason_or_a_real_one(instance: object, attribute: attrs.Attribute[str],
                             value: object) -> None:
    """Validator: "" (no refusal), or a reason the model can read (not only white space)."""
    if value != "":
        not_blank(instance, attribute, value)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ToolCall(Value):
    """One tool call a model response asks for."""

    call_id: str = attrs.field(validator=is_id)
    name: str = attrs.field(validator=is_id)
    #: The arguments as the engine sent them (usually JSON text); never parsed here.
    arguments: str = attrs.field(default="", validator=is_str)
    #: Whether the host's policy requires an explicit allow before this call runs (TL-3).
    needs_permission: bool = attrs.field(default=False, validator=is_bool)
    #: A discovered (MCP or extension) tool rather than a built-in one; such a tool never counts
    #: as the built-in todo-write tool, whatever its name (SG-A3).
    discovered: bool = attrs.field(default=False, validator=is_bool)
    #: The host's own reason for refusing this call before it runs (an unknown tool name, a
    #: missing required argument, its policy), for the model to read; "" (the default) refuses
    #: nothing. A refused call never runs and is never asked about, even with
    #: ``needs_permission``: when its turn comes (TL-4) its result is recorded ``REFUSED`` with
    #: this text and the turn goes on. :func:`agentturn.review_calls` sets it.
    refusal: str = attrs.field(default="", validator=_no_reason_or_a_real_one)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class UserMessageRecord(Value):
    """A user message to persist: the turn's prompt or a saved Lead instruction."""

    message_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ResponseRecord(Value):
    """A completed model response to persist, with the engine's raw finish reason (TL-10)."""

    request_id: str = attrs.field(validator=is_id)
    text: str = attrs.field(validator=is_str)
    tool_calls: tuple[ToolCall, ...] = attrs.field(validator=tuple_of(ToolCall))
    finish_reason: FinishReason = attrs.field(validator=one_of(FinishReason))
    #: True when the tool-call format was malformed; such calls are never executed (TL-6).
    malformed_tool_format: bool = attrs.field(default=False, validator=is_bool)
    #: Which signal showed that the response was cut at the output limit (the finish reason
    #: itself, the output tokens at the requested limit, an unclosed tool block ...), the same
    #: as the turn outcome's ``cut_off``; ``None`` for a response that was not cut (TL-9).
    cut_off: CutOffSignal | None = attrs.field(default=None,
                                               validator=optional(one_of(CutOffSignal)))

    @property
    def completes_normally(self) -> bool:
        """True when the response ended normally (a known normal finish reason, no cut-off
        signal, tool calls in a well-formed format), so its tool calls may run and be sent to
        the engine again (TL-9, TL-6).

        The rule for history: a response for which this is false (cut off, withheld for
        safety, an unknown finish, malformed tool calls the corrective retry answers) goes to
        the engine in later requests with its text only: leave out its tool calls, whose
        arguments may be incomplete or invalid JSON a server rejects and which have no results,
        and the result records the turn wrote for them. Keep all of them in storage.
        """
        return (self.cut_off is None and not self.malformed_tool_format
                and self.finish_reason.completes_normally)


class ToolResultStatus(enum.Enum):
    """How one tool call of a persisted response ended."""

    #: The tool ran; ``output`` holds what it returned (an error output is still executed).
    EXECUTED = "executed"
    #: The user denied permission; the model is told so (TL-3).
    DENIED = "denied"
    #: The call never started: a Lead instruction, an output limit or a budget came first.
    SKIPPED = "skipped"
    #: The turn was cancelled before or while the call ran.
    CANCELLED = "cancelled"
    #: The permission dialog was dismissed by a Lead instruction (ADR-0066 supersede policy).
    SUPERSEDED = "superseded"
    #: The host refused the call before it ran (``ToolCall.refusal``): an unknown tool, a
    #: missing argument, its policy; ``reason`` is the host's text for the model.
    REFUSED = "refused"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class ToolResultRecord(Value):
    """The one result record of a tool call; ``reason`` says why it did not execute."""

    call_id: str = attrs.field(validator=is_id)
    name: str = attrs.field(validator=is_id)
    status: ToolResultStatus = attrs.field(validator=one_of(ToolResultStatus))
    output: str = attrs.field(default="", validator=is_str)
    reason: str = attrs.field(default="", validator=is_str)


class OutcomeKind(enum.Enum):
    """How a turn ended; every ended turn has exactly one."""

    #: The model finished with a non-empty response and no tool calls.
    FINISHED = "finished"
    #: The model finished with no text and no tool calls (TL-7).
    EMPTY_RESPONSE = "empty_response"
    #: The user pressed Stop or cancelled a permission request (TL-3, TL-8).
    CANCELLED = "cancelled"
    #: The engine cut the response at its output limit; its tool calls were skipped (TL-9).
    OUTPUT_LIMIT = "output_limit"
    #: The engine withheld or cut the response for safety or policy; its tool calls were skipped.
    CONTENT_FILTERED = "content_filtered"
    #: The engine ended the response with a finish reason not known to be a normal completion;
    #: its tool calls were skipped, and the raw reason says what it was (TL-9, TL-10).
    UNRECOGNIZED_FINISH = "unrecognized_finish"
    #: An API or network error prevented progress; the turn can be continued (TL-11).
    ERROR = "error"
    #: The prompt was rejected for its size before a stream opened (TL-2).
    TOKEN_LIMIT = "token_limit"
    #: Compaction failed before a stream opened (TL-2).
    COMPACTION_FAILED = "compaction_failed"
    #: A second malformed tool-call response in a row (TL-6).
    MALFORMED_TOOL_FORMAT = "malformed_tool_format"
    #: The host's opt-in action budget was used up (TL-1: there is none by default).
    ACTION_BUDGET = "action_budget"
    #: A tool ended the task (``ToolFinished(ends_task=True)``, a "submit"): its result is
    #: saved, the response's later calls are recorded not run, and the turn ends. Not an
    #: error, and not a natural stop (no Stop hook or guard continuation follows).
    ENDED_BY_TOOL = "ended_by_tool"
    #: The host's own authority ended the turn (``HardStopped``): a hook, loop protection, a
    #: resource limit, the automatic-continuation limit. The message says which.
    HALTED = "halted"


class HardStopKind(enum.Enum):
    """The one list of hard terminal paths (SG-S1) and the authorities no automatic continuation
    overrides (SG-S3). The session's ``HardStopped``, the guard and a ``HALTED`` outcome's
    ``halt_kind`` all use it."""

    USER_CANCELLED = "user_cancelled"
    PERMISSION_CANCELLED = "permission_cancelled"
    POST_TOOL_USE_STOP = "post_tool_use_should_stop"
    LOOP_PROTECTION = "loop_protection"
    TOKEN_LIMIT = "token_limit"
    STOP_HOOK_CAP = "stop_hook_cap"
    GRACE_EXPIRED = "acp_grace_expired"
    RESOURCE_LIMIT = "daemon_resource_limit"
    #: Compacting the prompt of an ordinary request failed: the turn cannot be retried, so the
    #: chain cannot resume and must not hold automatic queues (SG-B9).
    COMPACTION_FAILED = "compaction_failed"
    #: The chain's turn ended in a way it cannot resume from (an output limit, a content filter,
    #: an unrecognized finish reason, a second malformed format, the action budget, a retry
    #: window that ran out, a tool that ended the task), or nothing that could resume it is
    #: left.
    UNRESUMABLE = "unresumable"
    #: The todo stop guard used its attempts; no third guard-attributable stream opens (SG-B5).
    GUARD_BUDGET = "guard_budget"
    #: The client closed the session (BR-4).
    SESSION_CLOSED = "session_closed"
    #: Any other authority of the host's.
    OTHER = "other"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TurnOutcome(Value):
    """The one typed end of a turn.

    ``finish_reason`` is the finish reason of the turn's last completed response, unchanged; it is
    ``None`` only when no response completed in the turn (for example a compaction failure on the
    first request).
    """

    kind: OutcomeKind = attrs.field(validator=one_of(OutcomeKind))
    finish_reason: FinishReason | None = attrs.field(validator=optional(one_of(FinishReason)))
    #: A sentence the host can show the user as it is.
    message: str = attrs.field(validator=is_str)
    #: True when the host may continue this turn with ``ContinueTurn`` (errors, TL-11).
    resumable: bool = attrs.field(default=False, validator=is_bool)
    #: For a ``HALTED`` outcome, which authority halted it; ``None`` for every other outcome.
    halt_kind: HardStopKind | None = attrs.field(default=None,
                                                 validator=optional(one_of(HardStopKind)))
    #: For an ``OUTPUT_LIMIT`` outcome, which signal showed the cut (the finish reason, the
    #: output tokens at the requested limit, an unclosed tool block ...); ``None`` otherwise.
    cut_off: CutOffSignal | None = attrs.field(default=None,
                                               validator=optional(one_of(CutOffSignal)))
