"""The turn lifecycle's vocabulary: its phases, its phase graph, its configuration and its state.

Theory of operation
-------------------
:data:`TURN_GRAPH` is the one declaration of which events each :class:`TurnPhase` accepts and
where each may lead; :mod:`agentturn.turn` holds the reducer that walks it. The graph is compiled
into a read-only table when this module is imported, and the reducer only looks events up in that
table; ``transitions`` validates the same declaration (``TURN_GRAPH.validate()``) and draws it
(``python -m agentturn diagram``), loaded only then.

:class:`TurnState` keeps the current response only (its tool calls and the index of the first
one without a result) plus two counters from which request ids and write keys are derived, so its
size does not depend on how many rounds the turn has run (TL-1).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from typing import Any

import attrs

from .._base import FieldError, State, Value, is_bool, non_negative, one_of, optional
from ..commands import Record
from ..lead import Admission, LeadEntry, LeadQueue
from ..phases import PhaseGraph
from ..records import FinishKind, FinishReason, ToolCall, TurnOutcome
from ..titles import TitleState

__all__ = [
    "SAVING_PHASES",
    "TURN_GRAPH",
    "LeadPermissionPolicy",
    "NextStep",
    "TurnConfig",
    "TurnPhase",
    "TurnState",
]


class TurnPhase(enum.Enum):
    """What the turn is waiting for."""

    #: No turn is running (between turns, or after one ended).
    IDLE = "idle"
    #: The prompt's ``Persist`` is in flight (TL-5).
    SAVING_PROMPT = "saving_prompt"
    #: ``RequestModelStream`` sent: budgeting, then opening the stream (TL-2).
    AWAITING_STREAM = "awaiting_stream"
    #: The stream is open.
    STREAMING = "streaming"
    #: The completed response's ``Persist`` is in flight; no tool runs before its ack (TL-5).
    SAVING_RESPONSE = "saving_response"
    #: ``AskPermission`` sent for the next call (TL-3).
    AWAITING_PERMISSION = "awaiting_permission"
    #: ``ExecuteTool`` sent; exactly one tool runs (TL-4).
    RUNNING_TOOL = "running_tool"
    #: Tool result records are being written; the next step waits for the ack (TL-5).
    SAVING_RESULTS = "saving_results"
    #: A naming request runs; no tool starts and no model request is made (TT-3).
    AWAITING_TITLE = "awaiting_title"
    #: At a boundary, a Lead save is in flight; it is awaited before any further action.
    AWAITING_LEAD_SAVES = "awaiting_lead_saves"
    #: The model stopped naturally and the host decides whether the turn ends or continues
    #: (``hold_natural_stops`` only); Lead admission stays open.
    AWAITING_STOP_DECISION = "awaiting_stop_decision"
    #: Final lifecycle work: Lead admission is closed, outstanding work is drained (LD-14).
    ENDING = "ending"


P = TurnPhase
_EVERY = list(TurnPhase)
_ACTIVE = [phase for phase in TurnPhase if phase is not P.IDLE]
#: How many cancelled requests and dismissed dialogs a turn remembers, to absorb their late
#: answers; older ones are misuse again (a host would have to be eight Stops behind).
LATE_MEMORY = 8
#: The phases in which a turn write (``Persist``) is in flight.
SAVING_PHASES = (P.SAVING_PROMPT, P.SAVING_RESPONSE, P.SAVING_RESULTS)
_SAVING = list(SAVING_PHASES)
#: Where :func:`_finalize` may leave the turn.
_FINAL = [P.ENDING, P.IDLE]
#: Where :func:`_advance` may leave the turn.
_NEXT = [P.AWAITING_TITLE, P.AWAITING_LEAD_SAVES, P.SAVING_RESULTS, P.AWAITING_STREAM,
         P.AWAITING_PERMISSION, P.RUNNING_TOOL, P.AWAITING_STOP_DECISION, *_FINAL]

TURN_GRAPH: PhaseGraph[TurnPhase] = PhaseGraph(
    "turn",
    TurnPhase,
    TurnPhase.IDLE,
    [
        ("PromptSubmitted", [P.IDLE], [P.SAVING_PROMPT]),
        ("ContinueTurn", [P.IDLE], [*_SAVING, *_NEXT]),
        ("StreamOpened", [P.AWAITING_STREAM], [P.STREAMING]),
        ("StreamCompleted", [P.STREAMING], [P.SAVING_RESPONSE, P.ENDING]),
        ("StreamFailed", [P.AWAITING_STREAM, P.STREAMING], _FINAL),
        ("CompactionFailed", [P.AWAITING_STREAM], _FINAL),
        ("TokenLimitRejected", [P.AWAITING_STREAM], _FINAL),
        ("Persisted", [P.SAVING_PROMPT, P.SAVING_RESULTS], _NEXT),
        ("Persisted", [P.SAVING_RESPONSE], [P.SAVING_RESULTS, *_NEXT]),
        ("Persisted", [P.ENDING], _FINAL),
        ("PersistFailed", [*_SAVING, P.ENDING], _FINAL),
        ("PermissionDecided", [P.AWAITING_PERMISSION], [P.RUNNING_TOOL, P.SAVING_RESULTS,
                                                       P.ENDING]),
        ("ToolFinished", [P.RUNNING_TOOL], [P.SAVING_RESULTS, P.ENDING]),
        ("ToolFinished", [P.ENDING], [P.ENDING]),
        ("StopPressed", [P.IDLE], [P.IDLE]),
        ("StopPressed", [P.ENDING], [P.ENDING]),
        ("StopPressed", [*_SAVING, P.AWAITING_PERMISSION, P.RUNNING_TOOL], [P.ENDING]),
        ("StopPressed", [P.AWAITING_STREAM, P.STREAMING, P.AWAITING_TITLE,
                         P.AWAITING_LEAD_SAVES, P.AWAITING_STOP_DECISION], _FINAL),
        ("HardStopped", [P.IDLE], [P.IDLE]),
        ("HardStopped", [P.ENDING], [P.ENDING]),
        ("HardStopped", [*_SAVING, P.AWAITING_PERMISSION, P.RUNNING_TOOL], [P.ENDING]),
        ("HardStopped", [P.AWAITING_STREAM, P.STREAMING, P.AWAITING_TITLE,
                      P.AWAITING_LEAD_SAVES, P.AWAITING_STOP_DECISION], _FINAL),
        ("NaturalStopDecided", [P.AWAITING_STOP_DECISION], [P.SAVING_PROMPT, *_NEXT]),
        ("AmendRequest", [P.AWAITING_STREAM], [P.SAVING_PROMPT]),
        ("WithdrawRetry", [P.IDLE], [P.IDLE]),
        ("CloseChat", [P.IDLE], [P.IDLE]),
        *[("ClientDisconnected", [phase], [phase]) for phase in _EVERY],
        *[("LeadSubmitted", [phase], [phase]) for phase in _EVERY],
        *[(name, [phase], [phase])
          for name in ("LeadSaved", "LeadSaveFailed")
          for phase in _EVERY if phase is not P.AWAITING_LEAD_SAVES],
        ("LeadSaved", [P.AWAITING_PERMISSION], [P.SAVING_RESULTS]),
        *[(name, [P.AWAITING_LEAD_SAVES], [P.AWAITING_LEAD_SAVES, *_NEXT])
          for name in ("LeadSaved", "LeadSaveFailed")],
        *[(name, [P.ENDING], [P.IDLE]) for name in ("LeadSaved", "LeadSaveFailed")],
        *[(name, [phase], [phase])
          for name in ("TitleGenerated", "TitleFailed", "ManualRename",
                       "AutoTitlePreferenceChanged")
          for phase in _EVERY],
        *[(name, [P.AWAITING_TITLE], _NEXT) for name in ("TitleGenerated", "TitleFailed")],
    ],
)


class LeadPermissionPolicy(enum.Enum):
    """What a saved Lead instruction does to a permission dialog that is still open."""

    #: ADR-0067, the default: the request stays open; Lead waits for the decision and, if the
    #: call is allowed, for the call itself, then applies (LD-11).
    KEEP_OPEN = "keep_open"
    #: ADR-0066, opt-in: the dialog is dismissed and the call recorded as superseded, not
    #: denied; the instruction applies at once (LD-12).
    SUPERSEDE = "supersede"


def _positive_or_none(instance: Any, attribute: Any, value: Any) -> None:
    optional(non_negative)(instance, attribute, value)
    if value == 0:
        raise FieldError(f"TurnConfig.{attribute.name} must be at least 1 (or None for no limit)")


def _finish_table(value: Any) -> tuple[tuple[str, FinishKind], ...]:
    """``TurnConfig.finish_reasons``: a mapping of raw reasons to kinds, kept as sorted pairs
    (so the configuration stays hashable) with lower-cased, stripped keys."""
    if isinstance(value, tuple):
        value = dict(value)
    if not isinstance(value, Mapping):
        raise FieldError(
            f"TurnConfig.finish_reasons must be a mapping, got {type(value).__name__}")
    pairs: dict[str, FinishKind] = {}
    for raw, kind in value.items():
        if type(raw) is not str or not raw.strip():
            raise FieldError("TurnConfig.finish_reasons keys must be non-empty str")
        if not isinstance(kind, FinishKind):
            raise FieldError(f"TurnConfig.finish_reasons[{raw!r}] must be a FinishKind, "
                             f"got {type(kind).__name__}")
        pairs[raw.strip().lower()] = kind
    return tuple(sorted(pairs.items()))


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TurnConfig(Value):
    """How a host wants its turns run. Every default is the documented behaviour."""

    lead_permission_policy: LeadPermissionPolicy = attrs.field(
        default=LeadPermissionPolicy.KEEP_OPEN, validator=one_of(LeadPermissionPolicy))
    #: Opt-in action budget: the most model requests in one turn. ``None`` (the default) means
    #: none: a turn runs until the model finishes, an error stops it, or the user does (TL-1).
    max_requests: int | None = attrs.field(default=None, validator=_positive_or_none)
    #: Ask the host at each natural stop (``DecideNaturalStop``) instead of ending at once: a
    #: session sets this to apply its stop order. Off by default: the turn just ends.
    hold_natural_stops: bool = attrs.field(default=False, validator=is_bool)
    #: The user's automatic-title preference when the chat is created (TT-4).
    auto_title: bool = attrs.field(default=True, validator=is_bool)
    #: Failed naming requests after which a chat is no longer named automatically (TT-6).
    max_title_attempts: int = attrs.field(default=3, validator=non_negative)
    #: The host's engine's finish reasons, beyond ``KNOWN_FINISH_REASONS`` (which they override):
    #: for example ``{"done": FinishKind.STOP, "truncated": FinishKind.LENGTH}``. Only a reason
    #: known to complete normally lets a response's tool calls run (TL-9).
    finish_reasons: tuple[tuple[str, FinishKind], ...] = attrs.field(
        default=(), converter=_finish_table)

    def finish_reason(self, raw: str) -> FinishReason:
        """Normalize an engine's raw finish reason with this configuration."""
        if type(raw) is not str:
            return FinishReason.of(raw)  # raises the FieldError that names the field
        return _normalized(raw, self.finish_reasons)


@functools.lru_cache(maxsize=256)
def _normalized(raw: str, table: tuple[tuple[str, FinishKind], ...]) -> FinishReason:
    # An engine repeats a handful of raw strings; the value is immutable, so one per string is
    # shared (bounded, so a stream of odd strings cannot grow it).
    return FinishReason.of(raw, dict(table) if table else None)


class NextStep(enum.Enum):
    """What the turn does once the current response's calls all have results."""

    REQUEST = "request"  # ask the model again (tool results to read)
    RETRY = "retry"  # the one corrective retry after a malformed tool format (TL-6)
    FINISH = "finish"  # the model finished with text
    FINISH_EMPTY = "finish_empty"  # the model finished with nothing (TL-7)


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TurnState(State):
    """The lifecycle state of one chat. Build it with :meth:`create`."""

    chat_id: str
    config: TurnConfig
    phase: TurnPhase = TurnPhase.IDLE
    turn_id: str = ""
    #: Model requests made in this turn; the request id is derived from it.
    request_seq: int = 0
    #: ``Persist`` commands sent in this turn; the write key is derived from it.
    persist_seq: int = 0
    #: A ``Persist`` is in flight.
    persisting: bool = False
    #: The records of the write in flight, kept so a failed write can be sent again.
    batch: tuple[Record, ...] = ()
    #: The current response's tool calls and the index of the first one without a result.
    calls: tuple[ToolCall, ...] = ()
    next_call: int = 0
    #: ``calls[next_call]`` is running.
    tool_in_flight: bool = False
    next_step: NextStep = NextStep.REQUEST
    #: The finish reason of the last completed response of this turn (TL-10).
    finish_reason: FinishReason | None = None
    #: The outcome decided while final lifecycle work drains.
    ending: TurnOutcome | None = None
    #: After a resumable error: the phase ``ContinueTurn`` resumes in (TL-11).
    resume_phase: TurnPhase | None = None
    #: Records an ended turn could not save; the next prompt writes them first (TL-5).
    owed: tuple[Record, ...] = ()
    #: The calls whose permission dialogs were dismissed last (at most ``LATE_MEMORY``): a late
    #: decision for one of them is absorbed.
    dismissed_calls: tuple[str, ...] = ()
    #: The requests cancelled last with ``CancelStream`` (at most ``LATE_MEMORY``): late stream
    #: events for them are absorbed, however many turns ago Stop cancelled them.
    cancelled_requests: tuple[str, ...] = ()
    #: The host already decided this natural stop (``NaturalStopDecided``): end, do not ask again.
    stop_decided: bool = False
    #: Saved Lead instructions the current request carries and that its stream has not yet
    #: confirmed delivered: a request that never opens gives them back to the queue (LD-13).
    request_leads: tuple[LeadEntry, ...] = ()
    #: The current (or last) turn's prompt as ``(message_id, text)``: a resend of the very same
    #: prompt is absorbed, never started twice.
    prompt: tuple[str, str] = ("", "")
    lead: LeadQueue
    title: TitleState

    @classmethod
    def create(cls, chat_id: str, config: TurnConfig | None = None) -> TurnState:
        """The idle lifecycle of chat ``chat_id``."""
        if type(chat_id) is not str or not chat_id:
            raise FieldError("TurnState.chat_id must be a non-empty id")
        config = TurnConfig() if config is None else config
        if not isinstance(config, TurnConfig):
            raise FieldError("TurnState.config must be a TurnConfig")
        return cls(
            chat_id=chat_id,
            config=config,
            lead=LeadQueue.create(chat_id),
            title=TitleState.create(chat_id, enabled=config.auto_title,
                                    max_attempts=config.max_title_attempts),
        )

    @property
    def request_id(self) -> str:
        """The id of the current (or last) model request of this turn."""
        return f"{self.turn_id}/r{self.request_seq}"

    @property
    def persist_key(self) -> str:
        """The key of the current (or last) write of this turn."""
        return f"{self.turn_id}/p{self.persist_seq}"

    @property
    def dismissed_call(self) -> str:
        """The call whose dialog was dismissed last ("" for none)."""
        return self.dismissed_calls[-1] if self.dismissed_calls else ""

    @property
    def cancelled_request(self) -> str:
        """The request cancelled last ("" for none)."""
        return self.cancelled_requests[-1] if self.cancelled_requests else ""


    @property
    def lead_offered(self) -> bool:
        """True while the Lead control may be shown beside Stop (LD-1)."""
        return self.lead.admission is Admission.OPEN
