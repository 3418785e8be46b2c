"""Bounded exhaustive exploration, and long random walks, of the session reducer.

Theory of operation
-------------------
Session states are frozen and hashable, so the states a host can reach form a graph that can be
walked: the explorer walks it breadth first to a bounded depth, the fuzzer at random with a fixed
seed, and both check every step against the session's rules. A broken rule is reported with a
short event sequence that reproduces it from a new session; a known reducer bug is counted apart.

* :mod:`~agentturn.tools.explore.alphabet`: the moves a host could make from a state, the
  configurations walked and the starting points;
* :mod:`~agentturn.tools.explore.invariants`: the rules of a step and of a state, the
  :class:`Violation` and the known reducer bugs;
* :mod:`~agentturn.tools.explore.search`: the exhaustive walk (:func:`explore`,
  :func:`reachable`) and the shrinking of what it finds;
* :mod:`~agentturn.tools.explore.checker`: the breadth-first model check over 64-bit
  fingerprints, in worker processes sharded by fingerprint;
* :mod:`~agentturn.tools.explore.coverage`: which declared (phase, event) edges a walk reached;
* :mod:`~agentturn.tools.explore.counterexample`: a violation as a trace file (which
  ``agentturn check`` and ``explain`` read) and as a short program;
* :mod:`~agentturn.tools.explore.fuzz`: the seeded random walk (:func:`fuzz`).

Every name is importable from here, as when the explorer was one module. So is ``reduce``, the
session's reducer: the walks look it up here at each step, so a test can swap in a broken one.
(The function names ``alphabet`` and ``fuzz`` hide the modules of the same name here.)
"""

from __future__ import annotations

from ...session import reduce as reduce
from .alphabet import CONFIGS, STARTS, Move, alphabet, start_state
from .checker import collision_probability, default_workers
from .counterexample import program, trace_lines
from .coverage import Coverage, coverage
from .fuzz import FuzzReport, fuzz
from .invariants import KNOWN_BUGS, Violation, check_state, check_step, known_bug
from .search import ExploreReport, explore, reachable, shrink

__all__ = [
    "CONFIGS",
    "KNOWN_BUGS",
    "STARTS",
    "Coverage",
    "ExploreReport",
    "FuzzReport",
    "Move",
    "Violation",
    "alphabet",
    "check_state",
    "check_step",
    "collision_probability",
    "coverage",
    "default_workers",
    "explore",
    "fuzz",
    "known_bug",
    "program",
    "reachable",
    "shrink",
    "start_state",
    "trace_lines",
]
