"""The async kit used the way a host author uses it: every buggy asyncio host of the catalogue
(``async_catalogue.py``) is caught on three fixed seeds within 200 examples, with the rule that
names its mistake; the reference host never fails on the same seeds.

Each run stops at the first failure and does not shrink; one shrink is checked in
``test_async_kit.py`` and all are timed by ``benchmarks/spec_kit_async_catalogue.py``.
"""

from __future__ import annotations

import re

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings

import agentturn as at
from agentturn.testing.asyncio_kit import AsyncSpec, check, reference_effects
from agentturn.testing.profiles import STEPS

# pytest puts this directory on sys.path (rootdir-relative "prepend" imports, no __init__.py).
from async_catalogue import CATALOGUE  # isort: skip

SEEDS = (0, 1, 2)
#: Generation only, stopping at the first failure: the catch, not the shrink.
CATCH = settings(max_examples=200, stateful_step_count=STEPS, deadline=None, database=None,
                 phases=[Phase.generate], suppress_health_check=list(HealthCheck))


@pytest.mark.req("TL-2", "TL-4", "TL-5", "TL-8", "TL-11", "LD-7", "TT-3", "SO-1", "SO-4")
@pytest.mark.parametrize("name", list(CATALOGUE))
def test_the_async_kit_catches_the_bug_on_three_seeds(name: str) -> None:
    """Each buggy host fails within 200 examples on every seed, naming a rule and its IDs."""
    bug = CATALOGUE[name]
    for run_seed in SEEDS:
        with pytest.raises(AssertionError) as caught:
            check(bug.spec, CATCH, run_seed=run_seed)
        message = str(caught.value)
        assert re.search(r"\[[a-z-]+, [^\]]+\]", message), message
        assert re.search(bug.rule, message), message


def test_the_reference_host_passes_on_the_same_seeds() -> None:
    """The rules are no stricter than the spec: the reference host on the driver never fails."""
    for run_seed in SEEDS:
        check(AsyncSpec(make_effects=reference_effects), CATCH, run_seed=run_seed)


#: A chat with no session around it: the kit runs the host on an ``aio.TurnDriver``.
TURN = at.TurnConfig(auto_title=True)
#: The catalogue's bugs a turn driver can have (it has no timers and no drain).
TURN_BUGS = [name for name, bug in CATALOGUE.items() if bug.on_a_turn_driver]


@pytest.mark.req("TL-2", "TL-4", "TL-5", "TL-8", "TL-11", "LD-7", "TT-3")
@pytest.mark.parametrize("name", TURN_BUGS)
def test_on_a_turn_driver_the_kit_catches_the_bug(name: str) -> None:
    """The same buggy effects on a turn driver (``AsyncSpec(config=TurnConfig(...))``): the
    same rule catches them."""
    bug = CATALOGUE[name]
    with pytest.raises(AssertionError, match=bug.rule):
        check(attrs.evolve(bug.spec, config=TURN), CATCH, run_seed=0)


def test_on_a_turn_driver_the_reference_host_passes() -> None:
    for run_seed in SEEDS:
        check(AsyncSpec(make_effects=reference_effects, config=TURN), CATCH, run_seed=run_seed)
