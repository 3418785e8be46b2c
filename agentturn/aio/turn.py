"""The turn driver: :func:`agentturn.reduce` (turn lifecycle, Lead, titles) run by the driver.

Theory of operation
-------------------
A :class:`TurnDriver` starts from a new chat (``TurnState.create(chat_id, config)``), so its
trace replays from the header alone. The host sends the user's input (``PromptSubmitted``,
``LeadSubmitted``, ``StopPressed``, ``ManualRename``, ``ContinueTurn`` ...) and awaits
:meth:`~agentturn.aio.Driver.turn_ended`; :meth:`run_turn` does both. Closing halts a running
turn (``HardStopped`` of kind ``SESSION_CLOSED``: its stream is cancelled, its tool asked to
stop, its dialog dismissed), waits for it to end, then sends ``CloseChat``, whose
``UnsavedRecords`` and ``LeadUnapplied`` come back in :class:`~agentturn.aio.Closed`.
"""

from __future__ import annotations

from typing import TextIO

from ..engines import ChatCompletionsStream, EngineStream
from ..events import CloseChat, HardStopped
from ..records import HardStopKind
from ..turn import TurnConfig, TurnPhase, TurnState, outstanding, reduce
from .clock import Clock
from .driver import Driver, NoticeSink, StepSink
from .effects import Effects, TextSink
from .tracing import TraceWriter

__all__ = ["TurnDriver"]


class TurnDriver(Driver[TurnState]):
    """Runs one chat's turns. Use as ``async with TurnDriver(...) as driver:``."""

    def __init__(self, chat_id: str, config: TurnConfig, effects: Effects, *,
                 max_output_tokens: int | None, wire: type[EngineStream] = ChatCompletionsStream,
                 on_notice: NoticeSink | None = None, on_step: StepSink | None = None,
                 on_text: TextSink | None = None, clock: Clock | None = None,
                 trace: TextIO | None = None) -> None:
        if config.hold_natural_stops and effects.natural_stop is None:
            raise ValueError("TurnConfig(hold_natural_stops=True) needs Effects(natural_stop=...)")
        super().__init__(state=TurnState.create(chat_id, config), reduce=reduce,
                         outstanding=outstanding, effects=effects,
                         max_output_tokens=max_output_tokens, wire=wire, on_notice=on_notice,
                         on_step=on_step, on_text=on_text, clock=clock,
                         trace=TraceWriter(trace, "turn", config, chat_id))

    def idle(self) -> bool:
        """No turn runs and nothing is awaited."""
        return self.state.phase is TurnPhase.IDLE and not outstanding(self.state)

    async def _close(self, reason: str) -> None:
        if self.state.phase is not TurnPhase.IDLE:
            self._enqueue(HardStopped(kind=HardStopKind.SESSION_CLOSED, reason=reason))
            await self._wait(lambda: self.state.phase is TurnPhase.IDLE and not self._busy)
        self._enqueue(CloseChat(reason=reason))
