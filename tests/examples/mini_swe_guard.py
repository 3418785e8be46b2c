"""What the mini-swe-agent test files do before anything imports mini-swe-agent or litellm.

:func:`prepare` gives mini-swe-agent a configuration folder of the tests' own (no ``.env`` of
the machine changes what runs), no banner and no cost-map fetch, then decides whether the file
runs: the suite's plain runs, without the examples extra (the scripted server's starlette and
uvicorn), skip it even under CI; with the examples installed, CI (``CI=true``) wants
mini-swe-agent too (``.ci/run`` installs the ``mini-swe`` extra), and elsewhere its absence
skips the file.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile

import pytest

_CONFIG: list[tempfile.TemporaryDirectory[str]] = []


def prepare() -> None:
    if not _CONFIG:
        _CONFIG.append(tempfile.TemporaryDirectory(prefix="mswea-config-"))
    os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = _CONFIG[0].name
    os.environ["MSWEA_SILENT_STARTUP"] = "1"
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    for module in ("starlette", "uvicorn"):
        pytest.importorskip(module)
    if importlib.util.find_spec("minisweagent") is None:
        if os.environ.get("CI") == "true":
            raise RuntimeError("mini-swe-agent is not installed under CI: .ci/run installs it "
                               "with pip install -e '.[mini-swe]'")
        pytest.skip("mini-swe-agent is not installed (pip install -e '.[mini-swe]')",
                    allow_module_level=True)
