"""The one bounded id memory: the last few ids a part must still recognize.

A part remembers ids it no longer waits on (a cancelled request, a dismissed dialog, a Lead that
left the queue, a drain or timer it issued) so that a late answer to one is absorbed rather than
refused as misuse. The memory is a tuple in order of arrival, cut to its newest ``limit`` ids, so
a session of a million turns holds as much as one of ten; each part names its own limit.
"""

from __future__ import annotations

__all__ = ["remember"]


def remember(kept: tuple[str, ...], *ids: str, limit: int) -> tuple[str, ...]:
    """``kept`` with ``ids`` added at the end, the oldest forgotten beyond ``limit`` (> 0)."""
    return (*kept, *ids)[-limit:]
