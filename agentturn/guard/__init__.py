"""The Daemon Todo Stop Guard: bounded, trusted automatic continuation of unfinished todo work.

Theory of operation
-------------------
A pure part, usable alone: build :class:`GuardState` from a :class:`GuardConfig` when a session
is created, feed it the session's facts (:data:`GuardEvent`) with :func:`reduce`, and carry out
its decisions (:data:`GuardCommand`). The session composes it with stop ordering, the daemon FIFO
and background work: :func:`decide` tells what a natural stop would do without changing anything,
and :func:`holds_automatic_turns` whether automatic turns and follow-up suggestions must wait.
"""

from .envelope import TodoCounts, parse_todo_envelope
from .reducer import (
    Decision,
    DecisionReason,
    GuardDecision,
    decide,
    defers_automatic_turn,
    holds_automatic_turns,
    reduce,
)
from .state import GUARD_GRAPH, GuardConfig, GuardPhase, GuardState, LoopOwner
from .texts import (
    DISCRETE_MARKER,
    GUARD_SOURCE,
    MAX_ATTEMPTS,
    GuardChunkMeta,
    combined_continuation,
    continuation_text,
    exhaustion_text,
    is_guard_prompt,
)
from .vocabulary import *  # noqa: F403
from .vocabulary import __all__ as _vocabulary_all

__all__ = [
    "DISCRETE_MARKER",
    "GUARD_GRAPH",
    "GUARD_SOURCE",
    "MAX_ATTEMPTS",
    "Decision",
    "DecisionReason",
    "GuardChunkMeta",
    "GuardConfig",
    "GuardDecision",
    "GuardPhase",
    "GuardState",
    "LoopOwner",
    "TodoCounts",
    "combined_continuation",
    "continuation_text",
    "decide",
    "exhaustion_text",
    "defers_automatic_turn",
    "holds_automatic_turns",
    "is_guard_prompt",
    "parse_todo_envelope",
    "reduce",
    *_vocabulary_all,
]
