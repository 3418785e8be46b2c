"""The shared core of the engine accumulators: a response under construction, and its one end.

Theory of operation
-------------------
Every wire format streams the same few things in its own shape: text fragments, tool calls
(an id, a name, argument fragments, sometimes a closing marker), a finish reason, usage. A
format module reads its wire objects into a :class:`Draft` (frozen: every wire object gives a
new draft, the old one stays valid) and :func:`conclude` turns a draft into the one event of the
request, ``StreamCompleted`` or ``StreamFailed``.

:func:`conclude` is where truncation is decided, with two kinds of signal, because engines
mislabel cut-off responses (a serving stack reporting ``tool_calls`` for a response cut at
``max_tokens``, a proxy relabelling a cut block ``tool_use``):

1. the finish reason says so (a ``LENGTH`` kind: ``length``, ``max_tokens``, ``MAX_TOKENS``,
   ``max_output_tokens``) — :attr:`CutOffSignal.FINISH_REASON`;
2. when the label claims a normal end (``STOP`` or ``TOOL_CALLS``): the stream ended inside a
   tool-call block that was never closed (``UNCLOSED_TOOL_BLOCK``); a call's arguments do not
   parse and the output tokens reached the request's limit (``UNPARSABLE_ARGUMENTS_AT_LIMIT``);
   or the output tokens reached the limit at all (``OUTPUT_TOKEN_LIMIT``; a response that ends
   exactly at the limit on its own is rare, and treating it as cut costs one turn end, while
   trusting it could run half a file write).

Any signal sets ``StreamCompleted.cut_off``: the turn ends with the output-limit outcome and runs
none of the calls (TL-9). A label that says neither (a safety stop, an unknown reason) is left to
the turn, which already runs no call then. Arguments that do not parse under a normal label and
below the limit (or with no limit or usage known) are the malformed-tool-format case:
``malformed_tool_format`` is set and the turn gives the model its one corrective retry (TL-6).
Arguments parse when they are empty or a JSON object.

Choices written down here: a stream that ends before the engine said how it finished (no finish
reason, no terminal event) is a network failure (``StreamFailed(network=True)``, resumable,
TL-11), never a completion; an error the engine streams is ``StreamFailed(network=False)``; a
wire object whose shape is wrong is the engine's fault and becomes ``StreamFailed`` naming the
field as the wire spelled it, while a host that feeds something that is not a mapping, or feeds
an ended stream, gets a :class:`WireInputError` / :class:`StreamEnded` (both ``ProtocolError``)
and nothing changes. No other exception escapes, whatever the wire holds: a string UTF-8 cannot
carry (a lone surrogate) is a wrong shape of its field; arguments that arrive parsed (Gemini's
``args``, an Anthropic start block's ``input``) are written with :func:`canonical_json`, which
refuses what JSON cannot hold and values nested deeper than :data:`agentturn._json.MAX_DEPTH`;
arguments that arrive as text and nest too deep for Python's parser count as not parsing.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import attrs

from .._base import FieldError
from .._json import MAX_DEPTH, json_problem
from ..errors import ProtocolError
from ..events import StreamCompleted, StreamFailed
from ..records import COMPLETE_KINDS, CutOffSignal, FinishKind, FinishReason, ToolCall

__all__ = [
    "Draft",
    "DraftCall",
    "EngineEvent",
    "EngineStream",
    "Fragments",
    "StreamEnded",
    "Usage",
    "WireInputError",
    "WireShapeError",
    "canonical_json",
    "conclude",
    "joined",
]

#: The one event an accumulator yields for its request.
EngineEvent = StreamCompleted | StreamFailed

#: Text received so far, newest fragment first: ``(fragment, older)`` or ``None``. Adding a
#: fragment is O(1) and shares the older ones, so a draft stays immutable without copying.
Fragments = tuple[str, "Fragments"] | None


def joined(fragments: Fragments) -> str:
    """The fragments in the order they arrived, as one string."""
    parts: list[str] = []
    while fragments is not None:
        parts.append(fragments[0])
        fragments = fragments[1]
    return "".join(reversed(parts))


class StreamEnded(ProtocolError):
    """A wire object was fed to an accumulator whose event is already decided."""


class WireInputError(ProtocolError):
    """The host fed something that is not a wire mapping (for example an SDK object itself:
    feed its ``model_dump()``)."""


class WireShapeError(ValueError):
    """Internal: a wire mapping whose field has the wrong shape; it becomes ``StreamFailed``."""


@attrs.frozen(kw_only=True)
class Usage:
    """The token counts the engine reported (``None`` when it reported none)."""

    input_tokens: int | None = None
    output_tokens: int | None = None


@attrs.frozen(kw_only=True)
class DraftCall:
    """One tool call under construction."""

    #: What the wire uses to address the call while it streams (an index, an item id).
    key: str
    call_id: str
    name: str
    arguments: Fragments = None
    #: False while a format with a closing marker has not sent it; None for formats without.
    closed: bool | None = None


@attrs.frozen(kw_only=True)
class Draft:
    """A response under construction: what every format accumulates."""

    request_id: str
    #: The output limit the host asked the engine for; None when it asked for none.
    max_output_tokens: int | None = None
    text: Fragments = None
    calls: tuple[DraftCall, ...] = ()
    #: The engine's finish reason as it sent it; None until it said one.
    finish_reason: str | None = None
    usage: Usage = Usage()
    #: The engine itself said the tool-call format was malformed (Gemini).
    malformed: bool = False
    #: The event, once a wire object decided it (a terminal event, an error, a bad shape).
    event: EngineEvent | None = None

    def add_text(self, fragment: str) -> Draft:
        if not fragment:
            return self
        return attrs.evolve(self, text=(fragment, self.text))

    def call_index(self, key: str) -> int | None:
        for index, call in enumerate(self.calls):
            if call.key == key:
                return index
        return None

    def add_call(self, call: DraftCall) -> Draft:
        return attrs.evolve(self, calls=(*self.calls, call))

    def change_call(self, index: int, **changes: Any) -> Draft:
        call = attrs.evolve(self.calls[index], **changes)
        return attrs.evolve(self, calls=(*self.calls[:index], call, *self.calls[index + 1:]))

    def add_arguments(self, index: int, fragment: str) -> Draft:
        if not fragment:
            return self
        return self.change_call(index, arguments=(fragment, self.calls[index].arguments))

    def failed(self, error: str, network: bool = False) -> Draft:
        return attrs.evolve(self, event=StreamFailed(request_id=self.request_id, error=error,
                                                     network=network))


# --- reading wire mappings --------------------------------------------------------------------


def check_mapping(chunk: object, where: str) -> Mapping[str, Any]:
    if not isinstance(chunk, Mapping):
        raise WireShapeError(f"{where} must be an object, got {type(chunk).__name__}")
    return chunk


def field(obj: Mapping[str, Any], name: str, where: str, kind: type | tuple[type, ...],
          *, required: bool = False, alias: str | None = None) -> Any:
    """``obj[name]`` (or ``obj[alias]``, the raw wire's camelCase), checked to be a ``kind``;
    None when absent or null, unless ``required``. Errors name the key as the wire spelled it;
    a string must be one UTF-8 can carry."""
    value = obj.get(name)
    if value is None and alias is not None:
        value = obj.get(alias)
        if value is not None:
            name = alias
    if isinstance(value, enum.Enum):  # an SDK's str enum left in a python-mode dump
        value = value.value
    if value is None:
        if required:
            raise WireShapeError(f"{where}.{name} is missing")
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise WireShapeError(f"{where}.{name} must be {names}, got {type(value).__name__}")
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise WireShapeError(f"{where}.{name} holds a lone surrogate, which UTF-8 cannot "
                                 "encode") from None
    return value


def canonical_json(value: Mapping[str, Any] | None, where: str) -> str:
    """The canonical text of arguments that arrived parsed: ``json.dumps(value,
    ensure_ascii=False, sort_keys=True, separators=(",", ":"))``, ``"{}"`` for None.

    Raises :class:`WireShapeError` naming ``where`` when the value is not an exact JSON value
    (a non-str key, NaN, a set ...) or nests deeper than ``MAX_DEPTH``: checked without
    recursion first, so a hostile depth never reaches the recursive encoder.
    """
    value = {} if value is None else dict(value)
    problem = json_problem(value, MAX_DEPTH)
    if problem is not None:
        raise WireShapeError(f"{where} cannot be written as JSON: it {problem}")
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def count(obj: Mapping[str, Any], name: str, where: str, alias: str | None = None) -> int | None:
    value: int | None = field(obj, name, where, int, alias=alias)
    if value is not None and value < 0:
        spelled = name if obj.get(name) is not None or alias is None else alias
        raise WireShapeError(f"{where}.{spelled} must not be negative, got {value}")
    return value


def error_text(error: object) -> str:
    """The sentence of an engine's error object (``{"message": ..., "type"/"code": ...}``)."""
    if isinstance(error, Mapping):
        message = error.get("message")
        kind = error.get("code") or error.get("type") or error.get("status")
        text = message if isinstance(message, str) and message else "an error with no message"
        return f"{kind}: {text}" if isinstance(kind, (str, int)) and kind != "" else text
    if isinstance(error, (str, int)) and not isinstance(error, bool) and error != "":
        return str(error)
    # not str(error): the engine's object may be huge or nested past the recursion limit
    return f"an error given as {type(error).__name__}, with no message"


# --- the end ----------------------------------------------------------------------------------


def _parses(arguments: str) -> bool:
    if not arguments.strip():
        return True  # a call without arguments
    try:
        return isinstance(json.loads(arguments), dict)
    except (ValueError, RecursionError):  # not JSON; or nested deeper than Python parses
        return False


def conclude(draft: Draft) -> EngineEvent:
    """The one event of a stream that ended here (see the module docstring for the rules)."""
    if draft.event is not None:
        return draft.event
    if draft.finish_reason is None:
        return StreamFailed(request_id=draft.request_id, network=True,
                            error="the stream ended before the engine said how the response "
                                  "finished")
    try:
        calls = tuple(ToolCall(call_id=call.call_id, name=call.name,
                               arguments=joined(call.arguments)) for call in draft.calls)
    except FieldError as error:  # an empty name or id, a lone surrogate
        return StreamFailed(request_id=draft.request_id, error=f"a tool call of the engine "
                                                               f"could not be read: {error}")
    if len({call.call_id for call in calls}) != len(calls):
        return StreamFailed(request_id=draft.request_id,
                            error="the engine sent two tool calls with the same id")
    kind = FinishReason.of(draft.finish_reason).kind
    limit = draft.max_output_tokens
    output = draft.usage.output_tokens
    at_limit = limit is not None and output is not None and output >= limit
    unparsable = not all(_parses(call.arguments) for call in calls)
    signal: CutOffSignal | None = None
    if kind is FinishKind.LENGTH:
        signal = CutOffSignal.FINISH_REASON
    elif kind in COMPLETE_KINDS:
        if any(call.closed is False for call in draft.calls):
            signal = CutOffSignal.UNCLOSED_TOOL_BLOCK
        elif at_limit and unparsable:
            signal = CutOffSignal.UNPARSABLE_ARGUMENTS_AT_LIMIT
        elif at_limit:
            signal = CutOffSignal.OUTPUT_TOKEN_LIMIT
    try:
        return StreamCompleted(
            request_id=draft.request_id, text=joined(draft.text),
            finish_reason=draft.finish_reason, tool_calls=calls, cut_off=signal,
            malformed_tool_format=signal is None and (unparsable or draft.malformed))
    except FieldError as error:  # text that UTF-8 cannot carry
        return StreamFailed(request_id=draft.request_id,
                            error=f"the engine's response could not be read: {error}")


# --- the accumulator every format shares -----------------------------------------------------

S = TypeVar("S", bound="EngineStream")


@attrs.frozen(kw_only=True)
class EngineStream:
    """An accumulator of one wire format: feed it the wire objects of one request, one at a
    time, as mappings; it yields that request's one event.

    It is a value: :meth:`feed` returns a new accumulator and leaves this one as it was, so the
    same objects always give the same event. :attr:`event` is set as soon as a wire object
    decides it (a terminal event, an error); :meth:`finish` gives the event when the transport
    ends (formats without a terminal event learn of their end only then).
    """

    #: The format's name, as errors say it.
    wire_format: ClassVar[str] = "engine"
    draft: Draft

    @classmethod
    def start(cls: type[S], request_id: str, *, max_output_tokens: int | None = None) -> S:
        """An empty accumulator for ``request_id`` (the turn's ``RequestModelStream`` id);
        ``max_output_tokens`` is the output limit the host asked the engine for (the second
        truncation signal needs it).

        Raises :class:`~agentturn.FieldError` for an empty or non-str ``request_id`` or a
        ``max_output_tokens`` that is not a positive int (host misuse, found before any wire
        object)."""
        if type(request_id) is not str or not request_id:
            raise FieldError(f"{cls.__name__}.request_id must be a non-empty id")
        if max_output_tokens is not None and (
                type(max_output_tokens) is not int or max_output_tokens < 1):
            raise FieldError(f"{cls.__name__}.max_output_tokens must be a positive int or None")
        return cls(draft=Draft(request_id=request_id, max_output_tokens=max_output_tokens))

    @property
    def event(self) -> EngineEvent | None:
        """The event, once a wire object decided it; None while the stream goes on."""
        return self.draft.event

    @property
    def usage(self) -> Usage:
        """The token counts reported so far (the last report wins)."""
        return self.draft.usage

    def feed(self: S, chunk: Mapping[str, Any]) -> S:
        """Take one wire object (an SDK object's ``model_dump()``, or an SSE ``data:`` JSON).

        A wire object of the wrong shape ends the stream with ``StreamFailed`` naming the field.
        Raises :class:`StreamEnded` once the event is decided, :class:`WireInputError` for what
        is not a mapping; the accumulator is unchanged then.
        """
        if self.draft.event is not None:
            raise StreamEnded(part="engines", phase="ended", event=chunk,
                              expected=f"no more {self.wire_format} objects: the stream's "
                                       "event is already decided (see .event)")
        if not isinstance(chunk, Mapping):
            raise WireInputError(part="engines", phase="streaming", event=chunk,
                                 expected=f"a {self.wire_format} object as a mapping (an SDK "
                                          "object's model_dump(), or the SSE data JSON)")
        try:
            return self._take(chunk)
        except WireShapeError as error:
            return attrs.evolve(self, draft=self.draft.failed(
                f"the {self.wire_format} stream was malformed: {error}"))

    def finish(self) -> EngineEvent:
        """The transport ended: the request's one event (the decided one, if any)."""
        return conclude(self.draft)

    def abort(self, error: str, *, network: bool = True) -> EngineEvent:
        """The transport failed (the SDK raised): ``StreamFailed``, unless already decided."""
        if self.draft.event is not None:
            return self.draft.event
        return StreamFailed(request_id=self.draft.request_id, error=error, network=network)

    def _take(self: S, chunk: Mapping[str, Any]) -> S:
        raise NotImplementedError

    def _with(self: S, draft: Draft) -> S:
        return attrs.evolve(self, draft=draft)
