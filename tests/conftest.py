"""Shared test set-up: hypothesis profiles and the ``req`` marker."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# CI: derandomized, so a red run is reproducible from its log; enough examples to matter.
settings.register_profile(
    "ci", derandomize=True, max_examples=200, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
# Deeper local runs: AGENTTURN_HYPOTHESIS=deep pytest
settings.register_profile(
    "deep", max_examples=5000, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("AGENTTURN_HYPOTHESIS", "ci"))
