"""What the runners of runtimes with an agentturn adapter share: the same runner, as shipped or
with the adapter added, and the adapter's typed ending read as the caller reads it.

Theory of operation
-------------------
A subclass names its runtime (``name``), its ``modes``, and writes ``_run`` (one task, as that
framework's user writes it, adding the adapter when ``self.adapted``). :meth:`run` runs it on
its own event loop; with the adapter, the run may end with a
:class:`~agentturn.integrations.TurnEnded`, which becomes the :class:`RunResult` the suite
judges: not a success, the ending's class as the outcome, its raw finish reason kept.
"""

from __future__ import annotations

import asyncio

from ..protocol import RunResult, Task, Tools

__all__ = ["AdaptableRunner"]


class AdaptableRunner:
    """A runner that runs its runtime as shipped, or with agentturn's adapter (``adapted``)."""

    name = ""

    def __init__(self, adapted: bool = False) -> None:
        self.adapted = adapted
        if adapted:
            self.name += " + agentturn adapter"

    def run(self, task: Task, tools: Tools) -> RunResult:
        if not self.adapted:
            return asyncio.run(self._run(task, tools))
        from agentturn.integrations import TurnEnded

        try:
            return asyncio.run(self._run(task, tools))
        except TurnEnded as ended:  # what the adapter's user reads: the typed outcome
            return RunResult(success=False, text=ended.outcome.text,
                             outcome=type(ended).__name__, finish_reason=ended.finish_reason,
                             error=str(ended))

    async def _run(self, task: Task, tools: Tools) -> RunResult:
        raise NotImplementedError
