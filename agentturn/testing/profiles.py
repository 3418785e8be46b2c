"""Hypothesis settings for running :class:`~agentturn.testing.SessionSpec`: one for CI, one for
a nightly deep run.

Theory of operation
-------------------
A state machine's cost is examples x steps, and its power is where the rare interleavings
are: a Stop while a tool runs, a failed Lead save, a Stop hook that crashes, two streams at
once. The machine draws its moves from what is possible now, weighted so such interleavings
come up in a few percent of examples; 200 examples of 50 moves find every bug of the project's
catalogue of buggy adapters (``tests/spec_kit/catalogue.py``) on every seed measured, and the
shrinker brings each failure down to a short program (the figures are in
``benchmarks/EVIDENCE.md``).

* :data:`CI` — fast and reproducible: 200 examples of 50 moves, derandomized (a red run is the
  same run again), no example database (nothing carried between runs). About 3 to 5 s for a
  correct adapter on one core.
* :data:`NIGHTLY` — deep: 5,000 examples of 80 moves, random seeds (each night explores new
  interleavings), with the example database so a failure found is replayed first next time.

Use one in a test module (``TestMyHost.settings = profiles.CI``), or register both as
hypothesis profiles (:func:`register`) and pick one by name
(``settings.load_profile("agentturn-spec-nightly")``).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

__all__ = ["CI", "NIGHTLY", "STEPS", "register"]

#: Moves per example: enough for two or three turns with tools, Leads and a Stop.
STEPS = 50

# Built on hypothesis's own defaults, not on whatever profile the test run loaded.
_BASE = settings.get_profile("default")

CI = settings(_BASE, max_examples=200, stateful_step_count=STEPS, derandomize=True, deadline=None,
              database=None, print_blob=True, report_multiple_bugs=False,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

NIGHTLY = settings(_BASE, max_examples=5000, stateful_step_count=80, deadline=None,
                   derandomize=False, report_multiple_bugs=False,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def register() -> None:
    """Register :data:`CI` and :data:`NIGHTLY` as the hypothesis profiles
    ``agentturn-spec-ci`` and ``agentturn-spec-nightly``."""
    settings.register_profile("agentturn-spec-ci", CI)
    settings.register_profile("agentturn-spec-nightly", NIGHTLY)
