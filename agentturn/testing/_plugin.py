"""The hypothesis entry point: registers agentturn's strategies when hypothesis is imported."""

from __future__ import annotations

__all__ = ["_hypothesis_setup_hook"]


def _hypothesis_setup_hook() -> None:
    """Called by hypothesis at import; registering loads agentturn lazily, on first use."""
    from .strategies import register

    register()
