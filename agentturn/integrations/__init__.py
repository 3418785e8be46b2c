"""Adapters that bring the turn rules into agent frameworks people already use.

Theory of operation
-------------------
A framework's loop runs every call a response holds, whatever the response's finish reason,
and hands back an empty, cut or filtered answer as an ordinary success. Each adapter here sits
at the framework's public extension point for the model (pydantic-ai: a ``WrapperModel``; the
OpenAI Agents SDK: a ``Model`` that wraps another), sees each response with whatever the
framework keeps of its finish reason, usage and the requested output limit, and judges it with
agentturn's rules (:func:`judge`: the rules :mod:`agentturn.engines` applies on the wire, each
applied as far as the framework shows its signal):

* cut at the output limit (TL-9): a finish reason of kind ``LENGTH``, or the output tokens at
  the limit the request asked for (an engine may label a cut ``tool_calls`` or ``stop``), or
  a streamed tool block that never closed (``unclosed``). Neither framework shows the last
  one: pydantic-ai reads Anthropic's ``content_block_stop`` inside its private stream
  mapping and emits the same public events whether a tool block closed or not, and the
  OpenAI Agents SDK's chat-completions model speaks no API with tool blocks that close. So
  an Anthropic stream whose tool block never closes, under the limit with a normal label,
  gets past both adapters (TL-9/unclosed-block in ``agentturn conform``; the adapter pages
  say so); its arguments, when cut, are a malformed call left to the framework (below);
* withheld by a filter (TL-10), or an unknown finish reason;
* empty (TL-7): a normal stop with no text and no call.

Such a response's calls never reach the framework's tool runner: the adapter raises a
:class:`TurnEnded` (:class:`OutputLimitReached`, :class:`ContentFiltered`,
:class:`EmptyAnswer`, :class:`UnknownFinish`) carrying the :class:`Outcome`, with the engine's
raw finish reason unchanged. An exception, not a final text the adapter makes up: anything
the model returns, the framework treats as the model's answer and hands to the caller as a
success, which is the failure being fixed; an exception leaves the framework's loop at once,
before any tool runs, and reaches the caller of ``run`` as it was raised (both frameworks let
a model's exception through unchanged: the suite checks that it does).

A malformed call that is not at the limit is the framework's business (TL-6: it sends the
error back to the model once, as pydantic-ai does by default); the adapters do not change it.

Each framework module is loaded only when used (``from agentturn.integrations import
pydantic_ai``), and ``import agentturn`` loads none of this package.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..records import COMPLETE_KINDS, CutOffSignal, FinishKind, FinishReason

__all__ = ["ContentFiltered", "EmptyAnswer", "Outcome", "OutputLimitReached", "TurnEnded",
           "UnknownFinish", "judge", "raise_for"]


@dataclass(frozen=True)
class Outcome:
    """How a response ended a run: what the adapter saw, the raw finish reason kept."""

    #: ``cut_off``, ``content_filter``, ``empty`` or ``unknown_finish``.
    kind: str
    #: The engine's finish reason as the framework kept it (None if it kept none).
    finish_reason: str | None
    #: For a cut: which signal showed it.
    cut_off: CutOffSignal | None = None
    output_tokens: int | None = None
    max_output_tokens: int | None = None
    #: The response's text (what the caller would otherwise have got as the answer).
    text: str = ""
    #: The names of the calls that were withheld, in the response's order.
    withheld_calls: tuple[str, ...] = ()

    def describe(self) -> str:
        said = f"finish reason {self.finish_reason!r}" if self.finish_reason else \
            "no finish reason kept by the framework"
        parts = [f"the response ended the run: {self.kind} ({said}"]
        if self.cut_off is not None:
            parts.append(f", signal {self.cut_off.value}")
        if self.output_tokens is not None or self.max_output_tokens is not None:
            parts.append(f", {self.output_tokens} output tokens of {self.max_output_tokens}")
        parts.append(")")
        if self.withheld_calls:
            parts.append(f"; withheld: {', '.join(self.withheld_calls)}")
        return "".join(parts)


class TurnEnded(Exception):
    """A response that did not complete normally ended the run; its calls did not run."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.describe())
        self.outcome = outcome

    @property
    def finish_reason(self) -> str | None:
        """The engine's raw finish reason (TL-10)."""
        return self.outcome.finish_reason


class OutputLimitReached(TurnEnded):
    """The response was cut at the output limit (TL-9)."""


class ContentFiltered(TurnEnded):
    """The engine withheld or cut the response for safety reasons (TL-10)."""


class EmptyAnswer(TurnEnded):
    """The model stopped with no text and no call (TL-7)."""


class UnknownFinish(TurnEnded):
    """A finish reason agentturn does not know: not taken as a normal end (TL-10)."""


_RAISES: Mapping[str, type[TurnEnded]] = {
    "cut_off": OutputLimitReached, "content_filter": ContentFiltered, "empty": EmptyAnswer,
    "unknown_finish": UnknownFinish}


def _parses(arguments: Any) -> bool:
    if arguments is None or isinstance(arguments, Mapping):
        return True
    if not isinstance(arguments, str):
        return False
    if not arguments.strip():
        return True
    try:
        return isinstance(json.loads(arguments), dict)
    except (ValueError, RecursionError):
        return False


def judge(*, finish_reason: str | None, output_tokens: int | None,
          max_output_tokens: int | None, text: str,
          calls: Iterable[tuple[str, Any]], unclosed: bool = False) -> Outcome | None:
    """The outcome a response ends the run with, or None when it completed normally.

    ``calls``: each call's name and its arguments (a mapping, or the raw text); ``unclosed``:
    the stream ended inside a tool-call block that was never closed (pass it only when the
    framework shows it). The rules are :mod:`agentturn.engines`' (``conclude``): a
    ``LENGTH`` finish is a cut; under a complete finish (or none kept), an unclosed tool
    block is a cut (``UNCLOSED_TOOL_BLOCK``), and so are the output tokens at the requested
    limit, named ``UNPARSABLE_ARGUMENTS_AT_LIMIT`` when a call's arguments do not parse.
    """
    calls = tuple(calls)
    names = tuple(name for name, _ in calls)
    kind = FinishReason.of(finish_reason).kind if finish_reason else None
    at_limit = (max_output_tokens is not None and output_tokens is not None
                and output_tokens >= max_output_tokens)

    def ended(what: str, signal: CutOffSignal | None = None) -> Outcome:
        return Outcome(what, finish_reason, signal, output_tokens, max_output_tokens, text,
                       names)

    if kind is FinishKind.LENGTH:
        return ended("cut_off", CutOffSignal.FINISH_REASON)
    if kind is FinishKind.CONTENT_FILTER:
        return ended("content_filter")
    if kind is FinishKind.OTHER:
        return ended("unknown_finish")
    assert kind is None or kind in COMPLETE_KINDS
    if unclosed:
        return ended("cut_off", CutOffSignal.UNCLOSED_TOOL_BLOCK)
    if at_limit:
        unparsable = not all(_parses(arguments) for _, arguments in calls)
        return ended("cut_off", CutOffSignal.UNPARSABLE_ARGUMENTS_AT_LIMIT if unparsable
                     else CutOffSignal.OUTPUT_TOKEN_LIMIT)
    if not calls and not text.strip():
        return ended("empty")
    return None


def raise_for(outcome: Outcome | None) -> None:
    """Raise the :class:`TurnEnded` that ``outcome`` calls for (nothing for None)."""
    if outcome is not None:
        raise _RAISES[outcome.kind](outcome)
