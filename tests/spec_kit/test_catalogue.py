"""The spec kit used the way a host author uses it: every buggy adapter of the catalogue is
caught, on three fixed seeds, within 200 examples; the reference adapter never fails.

Each run stops at the first failure and does not shrink (the shrink is timed by
``benchmarks/spec_kit_catalogue.py``, whose figures are in ``benchmarks/EVIDENCE.md``); one
shrink, of the shipped example, is checked in ``test_spec_kit.py``.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import get_state_machine_test

from agentturn.testing import ReferenceAdapter
from agentturn.testing.profiles import STEPS

# pytest puts this directory on sys.path (rootdir-relative "prepend" imports, no __init__.py).
from catalogue import CATALOGUE, spec_for  # isort: skip

SEEDS = (0, 1, 2)
#: Generation only, stopping at the first failure: the catch, not the shrink.
CATCH = settings(max_examples=200, stateful_step_count=STEPS, deadline=None, database=None,
                 phases=[Phase.generate], suppress_health_check=list(HealthCheck))

#: The requirement each bug breaks, for the coverage report (the rule may be caught first by
#: another rule on some seed; any rule is a catch).
REQS = {"acks-failed-save": "TL-5", "tools-while-streaming": "TL-4",
        "translates-finish-reasons": "TL-9", "acks-lead-before-durable": "LD-7",
        "answers-cancelled-tool-twice": "TL-8", "closed-dialog-allows": "TL-3",
        "runs-tools-concurrently": "TL-4", "runs-tools-by-name": "TL-4",
        "drops-failed-lead-save": "LD-7", "sends-unsaved-leads": "LD-8",
        "ignores-cancel-tool": "TL-8", "names-beside-generation": "TT-3",
        "retries-malformed-itself": "TL-6", "resync-rewrites-everything": "TL-5",
        "reports-timeout-early": "TL-4", "dedupes-tool-calls": "TL-4",
        "swallows-hook-failure": "SO-6"}


def test_the_catalogue_names_a_requirement_for_every_bug() -> None:
    assert set(REQS) == set(CATALOGUE)


@pytest.mark.parametrize("name", list(CATALOGUE))
def test_the_kit_catches_the_bug_on_three_seeds(name: str) -> None:
    """req: TL-3 TL-4 TL-5 TL-6 TL-8 TL-9 LD-7 LD-8 TT-3 — each buggy adapter of the catalogue
    fails the machine within 200 examples, with a named rule and its IDs in the message."""
    spec = spec_for(CATALOGUE[name].adapter)
    for run_seed in SEEDS:
        test = seed(run_seed)(get_state_machine_test(spec, settings=CATCH))
        with pytest.raises(AssertionError) as caught:
            test()
        message = str(caught.value)
        assert re.search(r"\[[a-z-]+, [^\]]+\]", message), message
        assert re.search(CATALOGUE[name].rule, message), message


def test_the_reference_adapter_passes_on_the_same_seeds() -> None:
    """The rules are no stricter than the spec: the reference adapter never fails them."""
    spec = spec_for(ReferenceAdapter)
    for run_seed in SEEDS:
        seed(run_seed)(get_state_machine_test(spec, settings=settings(CATCH, max_examples=60)))()
