"""Automatic chat titles: when to ask for one, and when to drop the answer.

Theory of operation
-------------------
A chat is named automatically at most once, early: after the first usable assistant response
(non-empty text) and before that response's tools run (TT-1), or, when the model only calls
tools, after the first completed tool round (TT-2). The turn lifecycle reports those two moments
by calling :func:`request_if_due`; the naming request it returns runs alone: while it is in flight
(:func:`naming_in_flight`) the turn issues no model request and starts no tool (TT-3).

Rules this module keeps:

* The preference is honoured (TT-4): with automatic titles off, no request is made, and a result
  that arrives after the user turned them off is dropped.
* A manual rename wins (TT-5): no automatic title is requested after one, and a result that
  arrives after one is dropped, never shown.
* At most one automatic title per chat (TT-6). A failed or empty result neither fails nor blocks
  the turn: the turn simply goes on. **Choice:** a later turn may try again, once per turn, until
  ``max_attempts`` naming requests have failed in this chat (default 3), so a chat whose first
  naming hit a transient error still gets a name, while a broken naming model costs at most a few
  small requests.

* Each naming request has an id (``<chat id>/title-<n>``) that its answer echoes. An answer for an
  earlier request of this chat, or one that arrives when none is in flight, is absorbed with a
  ``StaleAnswerIgnored`` notice and changes nothing; an id this chat never issued is misuse.

Usable alone: create the state with :meth:`TitleState.create`, call :func:`request_if_due` at your
own two moments and :func:`reduce` for ``TitleGenerated``, ``TitleFailed``, ``ManualRename`` and
``AutoTitlePreferenceChanged``.
"""

from __future__ import annotations

import enum

import attrs

from ._base import Command, FieldError, State, Step
from ._trusted import replacer
from .commands import RequestTitle, SetTitle, StaleAnswerIgnored
from .errors import UnknownId, check_state
from .events import AutoTitlePreferenceChanged, ManualRename, TitleFailed, TitleGenerated
from .phases import PhaseGraph

__all__ = [
    "TITLE_GRAPH",
    "TitlePhase",
    "TitleState",
    "TitleTrigger",
    "is_due",
    "naming_in_flight",
    "new_turn",
    "reduce",
    "request_if_due",
]


class TitlePhase(enum.Enum):
    """Where the chat's automatic title stands."""

    #: No title yet; one may be requested.
    UNNAMED = "unnamed"
    #: A naming request is in flight.
    NAMING = "naming"
    #: The chat has its automatic title; no other is ever requested.
    NAMED = "named"
    #: The user renamed the chat; no automatic title is requested or shown.
    RENAMED = "renamed"
    #: The user renamed the chat while a naming request was in flight; its result is dropped.
    RENAMED_NAMING = "renamed_naming"


#: Phases in which a naming request is in flight.
IN_FLIGHT = frozenset({TitlePhase.NAMING, TitlePhase.RENAMED_NAMING})
#: The same by name, for the hot path: an Enum member hashes in Python, its name in C.
_IN_FLIGHT_NAMES = frozenset(phase._name_ for phase in IN_FLIGHT)

_ALL = list(TitlePhase)

TITLE_GRAPH: PhaseGraph[TitlePhase] = PhaseGraph(
    "titles",
    TitlePhase,
    TitlePhase.UNNAMED,
    [
        ("request_title", [TitlePhase.UNNAMED], [TitlePhase.NAMING]),
        ("TitleGenerated", [TitlePhase.NAMING], [TitlePhase.NAMED, TitlePhase.UNNAMED,
                                                 TitlePhase.NAMING]),
        ("TitleGenerated", [TitlePhase.RENAMED_NAMING], [TitlePhase.RENAMED,
                                                         TitlePhase.RENAMED_NAMING]),
        ("TitleFailed", [TitlePhase.NAMING], [TitlePhase.UNNAMED, TitlePhase.NAMING]),
        ("TitleFailed", [TitlePhase.RENAMED_NAMING], [TitlePhase.RENAMED,
                                                      TitlePhase.RENAMED_NAMING]),
        # an answer to an earlier request: absorbed, nothing changes
        *[(name, [phase], [phase]) for name in ("TitleGenerated", "TitleFailed")
          for phase in (TitlePhase.UNNAMED, TitlePhase.NAMED, TitlePhase.RENAMED)],
        ("ManualRename", [TitlePhase.UNNAMED, TitlePhase.NAMED, TitlePhase.RENAMED],
         [TitlePhase.RENAMED]),
        ("ManualRename", [TitlePhase.NAMING, TitlePhase.RENAMED_NAMING],
         [TitlePhase.RENAMED_NAMING]),
        *[("AutoTitlePreferenceChanged", [phase], [phase]) for phase in _ALL],
    ],
)


class TitleTrigger(enum.Enum):
    """The two moments at which a title may be due."""

    #: A response with non-empty text was completed, before its tools run (TT-1).
    USABLE_RESPONSE = "usable_response"
    #: Every tool call of a response has its result (TT-2).
    TOOL_ROUND = "tool_round"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class TitleState(State):
    """The automatic-title state of one chat (it outlives turns). Build it with :meth:`create`."""

    chat_id: str
    phase: TitlePhase = TitlePhase.UNNAMED
    #: The user's automatic-title preference (TT-4).
    enabled: bool = True
    #: Naming requests of this chat that failed or came back empty.
    failures: int = 0
    #: A naming request was already made in the current turn.
    tried_this_turn: bool = False
    #: Failed naming requests after which no more are made in this chat.
    max_attempts: int = 3
    #: Naming requests made in this chat; the newest request's id is derived from it.
    requests: int = 0

    @classmethod
    def create(cls, chat_id: str, *, enabled: bool = True, max_attempts: int = 3) -> TitleState:
        """The title state of a new chat ``chat_id``; bad arguments raise ``FieldError``."""
        if type(chat_id) is not str or not chat_id:
            raise FieldError("TitleState.chat_id must be a non-empty id")
        if type(enabled) is not bool:
            raise FieldError("TitleState.enabled must be a bool")
        if type(max_attempts) is not int or max_attempts < 0:
            raise FieldError("TitleState.max_attempts must be an int that is zero or more")
        return cls(chat_id=chat_id, enabled=enabled, max_attempts=max_attempts)

    @property
    def request_id(self) -> str:
        """The id of the newest naming request of this chat."""
        return f"{self.chat_id}/title-{self.requests}"

    def issued(self, request_id: str) -> bool:
        """True when ``request_id`` names a naming request this chat made."""
        prefix = f"{self.chat_id}/title-"
        if not request_id.startswith(prefix):
            return False
        number = request_id[len(prefix):]
        return number.isdigit() and number == str(int(number)) and 1 <= int(number) <= self.requests


_replace = replacer(TitleState)


def new_turn(state: TitleState) -> TitleState:
    """A new turn begins: it may try naming once more if the chat is still unnamed."""
    if not state.tried_this_turn:
        return state
    return _replace(state, tried_this_turn=False)


def naming_in_flight(state: TitleState) -> bool:
    """True while a naming request runs; no model request or tool may start then (TT-3)."""
    return state.phase._name_ in _IN_FLIGHT_NAMES


def is_due(state: TitleState) -> bool:
    """Whether a title may be requested now: the one rule :func:`request_if_due` applies.

    Unnamed, not renamed, preference on, not yet tried this turn, under ``max_attempts``.
    """
    return (
        state.phase is TitlePhase.UNNAMED
        and state.enabled
        and not state.tried_this_turn
        and state.failures < state.max_attempts
    )


def request_if_due(state: TitleState, trigger: TitleTrigger) -> Step[TitleState]:
    """At one of the two moments, ask for a title if the chat still needs one.

    ``trigger`` documents which moment the caller reached; both are due under the same rule,
    :func:`is_due`.
    """
    if not is_due(state):
        return Step(state)
    state = _replace(state, phase=TitlePhase.NAMING, tried_this_turn=True,
                     requests=state.requests + 1)
    return Step(state, (RequestTitle(chat_id=state.chat_id, request_id=state.request_id),))


def reduce(
    state: TitleState,
    event: TitleGenerated | TitleFailed | ManualRename | AutoTitlePreferenceChanged,
) -> Step[TitleState]:
    """Take a naming result, a manual rename or a preference change.

    Raises :class:`~agentturn.UnknownId` (changing nothing) for a naming result whose request id
    this chat never issued.
    """
    check_state("titles", state, TitleState, event)
    TITLE_GRAPH.check(state.phase, event)
    if isinstance(event, AutoTitlePreferenceChanged):
        return Step(_replace(state, enabled=event.enabled))
    if isinstance(event, ManualRename):
        renamed = (TitlePhase.RENAMED_NAMING if state.phase in IN_FLIGHT else TitlePhase.RENAMED)
        return Step(_replace(state, phase=renamed))
    if state.phase not in IN_FLIGHT or event.request_id != state.request_id:
        if not state.issued(event.request_id):
            raise UnknownId(part="titles", phase=state.phase.name, event=event,
                            expected="a naming result for a request this chat made")
        return Step(state, (StaleAnswerIgnored(
            event=type(event).__name__, answer_id=event.request_id,
            reason="no longer waiting for this naming request"),))
    if state.phase is TitlePhase.RENAMED_NAMING:
        # TT-5: the rename came first; whatever the naming model said is dropped.
        return Step(_replace(state, phase=TitlePhase.RENAMED))
    title = event.title.strip() if isinstance(event, TitleGenerated) else ""
    if not title:
        return Step(_replace(state, phase=TitlePhase.UNNAMED, failures=state.failures + 1))
    if not state.enabled:
        # TT-4: the user turned automatic titles off while the request ran.
        return Step(_replace(state, phase=TitlePhase.UNNAMED))
    commands: tuple[Command, ...] = (SetTitle(chat_id=state.chat_id, title=title),)
    return Step(_replace(state, phase=TitlePhase.NAMED), commands)
