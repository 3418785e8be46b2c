"""What a session waits for, and what it holds: the host's view of *never stuck*.

Theory of operation
-------------------
:func:`waiting_for` names everything the session is waiting on, as data a host can show, time
out or check after a restart:

* ``ANSWER``: an awaiting command the host has not answered (its class and the id to echo;
  the same list as :func:`~agentturn.session.outstanding`);
* ``CLIENT_PROMPT``: a complete queued prompt the client reported (a drain reply's
  ``has_queued_prompt``) and has not sent; ``PromptQueued`` or ``PromptAborted`` ends it;
* ``PROMPT_CONTENT``: a queued prompt whose content is still arriving (``PromptCompleted``);
* ``RETRY``: the user's ``ContinueTurn`` for a turn that ended with a resumable error;
* ``BACKGROUND``: background input an idle chain waits for, by id: a live item it started or a
  queued notification of one (``NotificationQueued`` / ``AutomaticTurnDue`` /
  ``BackgroundEnded`` / ``NotificationConsumed`` move it on).

An empty tuple means the session waits for nothing. The *never stuck* invariant is stated on
this function: whenever the session holds input that has not run (a queued prompt, a held
automatic turn) and no answer is outstanding, :func:`waiting_for` is not empty, and each entry
is something the host can still deliver. :func:`held` lists that held input.
"""

from __future__ import annotations

import enum

import attrs

from .. import guard as g
from .._base import AwaitingCommand, Value
from . import background as bg
from .reducer import outstanding
from .state import SessionPhase, SessionState

__all__ = ["Held", "WaitKind", "Waiting", "held", "waiting_for"]


class WaitKind(enum.Enum):
    """What kind of thing a session waits for."""

    #: An awaiting command's answer: ``command`` is its class, ``answer_id`` the id to echo.
    ANSWER = "answer"
    #: A complete queued prompt the client said it holds and has not sent.
    CLIENT_PROMPT = "client_prompt"
    #: The rest of a queued prompt (``answer_id``: its prompt id).
    PROMPT_CONTENT = "prompt_content"
    #: The user's ``ContinueTurn`` (``answer_id``: the turn id).
    RETRY = "retry"
    #: Background input of the live chain (``answer_id``: an item or notification id).
    BACKGROUND = "background"


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Waiting(Value):
    """One thing the session waits for."""

    kind: WaitKind
    answer_id: str = ""
    command: type[AwaitingCommand] | None = None


@attrs.frozen(kw_only=True, eq=False, repr=False)
class Held(Value):
    """Input the session holds that has not run yet: a queued prompt or an automatic turn."""

    turn_id: str
    #: ``"queued_prompt"`` or the automatic turn's kind (``"cron"``, ``"notification"``,
    #: ``"wakeup"``).
    kind: str
    #: The automatic turn is related to the live chain (it keeps its budget when it runs).
    related: bool = False


def held(state: SessionState) -> tuple[Held, ...]:
    """The session's held input, in the order it would run: queued prompts, then held
    automatic turns."""
    prompts = tuple(Held(turn_id=entry.prompt_id, kind="queued_prompt") for entry in state.fifo)
    turns = tuple(Held(turn_id=turn.turn_id, kind=turn.kind.value,
                       related=bg.is_related(state.background, turn.source_id))
                  for turn in state.deferred.turns)
    return prompts + turns


# (read once: a member read off its enum class costs ten times a global on Python 3.11)
_CLOSED, _IDLE = SessionPhase.CLOSED, SessionPhase.IDLE


def waiting_for(state: SessionState) -> tuple[Waiting, ...]:
    """Everything ``state`` waits for (see the module docstring); ``()``: nothing."""
    found = [Waiting(kind=WaitKind.ANSWER, answer_id=o.answer_id, command=o.command)
             for o in outstanding(state)]
    found.extend(Waiting(kind=kind, answer_id=answer_id) for kind, answer_id in pending(state))
    return tuple(found)


def pending(state: SessionState) -> list[tuple[WaitKind, str]]:
    """What :func:`waiting_for` lists after the answers, as ``(kind, answer id)`` pairs, in its
    order. (The session's *never stuck* check asks this of every state a walk reaches, and
    building the :class:`Waiting` values would cost more than the rest of the check.)"""
    phase = state.phase
    if phase is _CLOSED:
        return []
    found: list[tuple[WaitKind, str]] = []
    if state.client_prompt:
        found.append((WaitKind.CLIENT_PROMPT, ""))
    if state.fifo:
        found.extend((WaitKind.PROMPT_CONTENT, entry.prompt_id)
                     for entry in state.fifo if not entry.complete)
    if phase is _IDLE:
        if state.turn.resume_phase is not None:
            found.append((WaitKind.RETRY, state.turn.turn_id))
        if g.holds_automatic_turns(state.guard):
            found.extend((WaitKind.BACKGROUND, answer_id)
                         for answer_id in bg.relevant_ids(state.background))
    return found
