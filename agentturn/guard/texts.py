"""The guard's exact texts, their recognizer, and the continuation chunk's metadata (OB-1 ... OB-3).

Theory of operation
-------------------
The texts are the design document's, word for word; only ``N`` (a count) is filled in. The second
continuation sends the first text and then the final-continuation sentence, separated by a blank
line. :func:`is_guard_prompt` tells whether a user-role text is one of the two continuation
prompts, so history, rewind and turn counting never take a guard prompt for something the user
typed. It accepts the exact templates only, with ``N`` a canonical positive integer (``"1"``,
``"12"``; not ``"0"``, ``"01"``, ``"1.5"`` or ``"+1"``).
"""

from __future__ import annotations

import re

import attrs

from .._base import Value

__all__ = [
    "DISCRETE_MARKER",
    "GUARD_SOURCE",
    "MAX_ATTEMPTS",
    "GuardChunkMeta",
    "combined_continuation",
    "continuation_text",
    "exhaustion_text",
    "is_guard_prompt",
]

#: Automatic continuations an uninterrupted stage may open (SG-B1).
MAX_ATTEMPTS = 2
#: ``_meta.source`` of the guard's message chunks (OB-2).
GUARD_SOURCE = "todo_stop_guard"
#: The discrete-message marker that keeps each chunk a separate replayable event (OB-2, OB-6).
DISCRETE_MARKER = "qwenDiscreteMessage"

_FIRST = ("[Todo Stop Guard] {n} todo item(s) are still pending or in progress. Continue "
          "executing the current task now. Do not ask the user whether to continue. If progress "
          "requires user input, use the structured question or permission flow. If progress "
          "depends on external state, report the blocker explicitly.")
_FINAL = ("This is the final automatic continuation. Before ending, either complete/update the "
          "todos or report the completed progress and the exact blocker.")
_EXHAUSTED = ("[Todo Stop Guard] Automatic continuation stopped after {attempts} attempts; {n} "
              "todo item(s) remain unfinished.")
_SEPARATOR = "\n\n"


def _positive(value: int) -> int:
    if type(value) is not int or value < 1:
        raise ValueError(f"a guard text needs a positive count, got {value!r}")
    return value


def continuation_text(attempt: int, unfinished: int) -> str:
    """The user-role prompt of continuation ``attempt`` (1 or 2) with ``unfinished`` items."""
    first = _FIRST.format(n=_positive(unfinished))
    if attempt == 1:
        return first
    if attempt == MAX_ATTEMPTS:
        return first + _SEPARATOR + _FINAL
    raise ValueError(f"attempt must be 1 or {MAX_ATTEMPTS}, got {attempt!r}")


def exhaustion_text(unfinished: int) -> str:
    """The one message reported when the attempts are used up (OB-3)."""
    return _EXHAUSTED.format(attempts=MAX_ATTEMPTS, n=_positive(unfinished))


def combined_continuation(hook_reason: str | None, guard_text: str | None) -> str:
    """The one continuation message of a stop (SO-8): the hook's reason, a blank line, then the
    guard's text (either alone when the other is missing)."""
    return _SEPARATOR.join(part for part in (hook_reason, guard_text) if part)


_N = "[1-9][0-9]*"
_PROMPT = re.compile(
    re.escape(_FIRST).replace(re.escape("{n}"), _N)
    + "(?:" + re.escape(_SEPARATOR + _FINAL) + ")?"
)
_OPENING = _SEPARATOR + _FIRST[:_FIRST.index("{n}")]


def is_guard_prompt(text: object) -> bool:
    """True for the exact text of a first or second guard continuation, alone or after a Stop
    hook's reason and a blank line (:func:`combined_continuation`, SO-8): history, rewind and
    turn counting must not take either for something the user typed. The hook's part must hold
    something other than white space."""
    if not isinstance(text, str):
        return False
    if _PROMPT.fullmatch(text) is not None:
        return True
    start = text.find(_OPENING)
    while start != -1:
        if text[:start].strip() and _PROMPT.fullmatch(text, start + len(_SEPARATOR)):
            return True
        start = text.find(_OPENING, start + 1)
    return False


@attrs.frozen(kw_only=True, eq=False, repr=False)
class GuardChunkMeta(Value):
    """The ``_meta`` of a committed continuation's ``agent_message_chunk`` (OB-2). No todo text."""

    attempt: int
    unfinished: int
    max_attempts: int = MAX_ATTEMPTS

    def as_meta(self) -> dict[str, object]:
        """The wire form: ``{"source": "todo_stop_guard", "qwenDiscreteMessage": True, ...}``."""
        return {
            "source": GUARD_SOURCE,
            DISCRETE_MARKER: True,
            "attempt": self.attempt,
            "maxAttempts": self.max_attempts,
            "unfinishedCount": self.unfinished,
        }
