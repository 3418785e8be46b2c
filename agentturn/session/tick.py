"""One session step in the making: the state so far, the host's commands so far, and the
messages still to deliver.

Theory of operation
-------------------
A session step is a small program with two halves (see :mod:`agentturn.session.reducer`):

1. **Messages.** A handler never calls a part's reducer. It puts a message in the tick's inbox:
   ``tick.to_turn(event)``, ``tick.to_guard(event)``, or ``tick.later(decision)`` for a decision of
   the session's own that must wait until the messages before it have been heard. The loop
   (:func:`agentturn.session.translate.run`) takes one message at a time, hands it to its part,
   and translates what the part returns: a command for the host goes to ``out``; a command
   another part must hear becomes one more message at the back of the inbox. No part is ever
   re-entered while its own output is being walked, and the inbox order *is* the order in which
   the parts hear things.
2. **Settle.** When the inbox is empty, :func:`agentturn.session.scheduling.settle` looks at the
   resulting state alone and decides what runs next.

A tick lives inside one ``reduce`` call and never escapes it: the host gets a new frozen
:class:`~agentturn.session.SessionState` and a tuple of commands, and a ``ProtocolError`` raised
anywhere drops the tick whole, so the host's state is unchanged.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable

from .._base import Command
from .._bounded import remember as bounded_remember
from .._trusted import builder, replacer
from ..commands import EndTurn, StaleAnswerIgnored
from ..events import ContinueTurn, PromptSubmitted
from .background import AutomaticTurn
from .state import SessionPhase, SessionState
from .vocabulary import Publish

__all__ = ["ISSUED_MEMORY", "Part", "Tick", "closed_reason", "held_prompt", "remember",
           "replace", "with_guard", "with_ring", "with_turn"]

#: ``attrs.evolve`` for the session state (trusted: see :func:`agentturn._trusted.replacer`).
replace = replacer(SessionState)
#: The two copies nearly every message makes (one part moved, nothing else), specialised.
with_turn = replacer(SessionState, "turn")
with_guard = replacer(SessionState, "guard")
#: The copy every published entry makes (a message chunk, a turn's end, a guard chunk).
with_ring = replacer(SessionState, "ring")
build_publish = builder(Publish)

#: How many ids of drains, Stop-hook runs and timers the session remembers having issued: an
#: answer to one of them that is no longer awaited is absorbed as late; any other id is misuse.
ISSUED_MEMORY = 16


def remember(kept: tuple[str, ...], item: str) -> tuple[str, ...]:
    """``kept`` with ``item`` added, bounded by ``ISSUED_MEMORY`` (:mod:`agentturn._bounded`)."""
    return bounded_remember(kept, item, limit=ISSUED_MEMORY)


def closed_reason(state: SessionState) -> str:
    """Why text racing the close is handed back ("" while the session is live)."""
    if state.phase is SessionPhase.CLOSED:
        return "the session is closed"
    if state.phase is SessionPhase.CLOSING:
        return "the session is closing"
    return ""


def held_prompt(state: SessionState, turn_id: str) -> tuple[str, str]:
    """The ``(message_id, text)`` a held automatic turn will send when it starts."""
    for held_id, message_id, text in state.deferred_prompts:
        if held_id == turn_id:
            return message_id, text
    return "", ""  # unreachable: every held turn has its prompt (the state checks say so)


class Part(enum.Enum):
    """Who a message is for."""

    #: The turn lifecycle (with its Lead queue and title scheduler).
    TURN = "turn"
    #: The todo stop guard.
    GUARD = "guard"
    #: The session itself: a decision that waits for the messages queued before it.
    SESSION = "session"


#: What runs after a part has heard a message and its commands were translated:
#: ``(tick, the part's commands, whether the part's state changed)``.
Then = Callable[["Tick", "list[Command]", bool], None]
#: A decision of the session's own, run in inbox order.
Decision = Callable[["Tick"], None]


class Tick:
    """The state, output and inbox of one session step (see the module docstring)."""

    __slots__ = ("due", "ended", "inbox", "out", "s", "submitted")

    def __init__(self, state: SessionState) -> None:
        self.s = state
        self.out: list[Command] = []
        self.inbox: deque[tuple[Part, object, Then | None]] = deque()
        #: The turn that ended in this step, for settle's follow-up decision.
        self.ended: EndTurn | None = None
        #: An automatic turn that became due in this step, for settle to start or hold.
        self.due: tuple[AutomaticTurn, str, str] | None = None
        #: A prompt or retry the user sent in this step, admitted, for settle to start.
        self.submitted: PromptSubmitted | ContinueTurn | None = None

    def to_turn(self, event: object, then: Then | None = None) -> None:
        """Queue ``event`` for the turn; ``then`` runs once its commands are translated."""
        self.inbox.append((Part.TURN, event, then))

    def to_guard(self, event: object, then: Then | None = None) -> None:
        """Queue ``event`` for the guard; ``then`` runs once its commands are translated."""
        self.inbox.append((Part.GUARD, event, then))

    def later(self, decision: Decision) -> None:
        """Queue a decision of the session's own behind the messages already queued."""
        self.inbox.append((Part.SESSION, decision, None))

    def emit(self, command: Command) -> None:
        """A command for the host, in order."""
        self.out.append(command)

    def stale(self, event: object, answer_id: str, why: str) -> None:
        """Absorb a late answer: one notice, nothing changed."""
        self.out.append(StaleAnswerIgnored(event=type(event).__name__, answer_id=answer_id,
                                           reason=why))
