"""A host's own rules about a response's tool calls, given to the turn as data.

Theory of operation
-------------------
A host knows things the turn does not: which tool names exist, which arguments each needs,
which calls its policy wants the user to allow. It applies those rules between its engine and
the turn: it reads the ``StreamCompleted`` it built, decides, and hands the turn a copy with
each call marked (:func:`review_calls`). The marks are fields of :class:`~agentturn.ToolCall`,
so the reducer stays pure data (no callable in the configuration), a trace records the marks
in the ``StreamCompleted`` it replays, and the saved response shows them:

* ``needs_permission``: the call runs only after an explicit allow (TL-3);
* ``refusal``: the call never runs and is never asked about; when its turn comes (in the
  model's order, TL-4) its result is saved ``REFUSED`` with the host's text, which the model
  reads in its next request, and the turn goes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from .._base import FieldError
from ..events import StreamCompleted

__all__ = ["review_calls"]


def review_calls(completed: StreamCompleted, *, refuse: Mapping[str, str] | None = None,
                 needs_permission: Iterable[str] = ()) -> StreamCompleted:
    """``completed`` with the host's rules applied to its calls, by call id.

    ``refuse`` maps a call id to the reason the model is told (``"No tool named 'serach'."``,
    ``"write_file needs a 'path' argument."``); ``needs_permission`` names calls that must wait
    for an explicit allow. A call both refused and needing permission is refused (nothing
    asks about a call that cannot run). Marks already set stay set, except that a reason given
    here replaces an earlier refusal's text. Feed the turn the value
    returned, never the original, so the trace holds what the turn decided on.

    Raises :class:`~agentturn.FieldError` for an id the response does not hold, or an empty
    reason: a typo must not let a call the host meant to refuse run.
    """
    if not isinstance(completed, StreamCompleted):
        raise FieldError("review_calls needs the StreamCompleted the host built, got "
                         f"{type(completed).__name__}")
    if refuse is not None and not isinstance(refuse, Mapping):
        raise FieldError("review_calls(refuse=...) must map call ids to reasons, got "
                         f"{type(refuse).__name__}")
    if isinstance(needs_permission, (str, bytes)) or not isinstance(needs_permission, Iterable):
        raise FieldError("review_calls(needs_permission=...) must be a collection of call ids, "
                         f"got {type(needs_permission).__name__}")
    refusals = dict(refuse or {})
    asked = set()
    for call_id in needs_permission:
        if type(call_id) is not str:
            raise FieldError("review_calls(needs_permission=...) must hold call ids (str), got "
                             f"{type(call_id).__name__}")
        asked.add(call_id)
    held = {call.call_id for call in completed.tool_calls}
    for name, ids in (("refuse", refusals), ("needs_permission", asked)):
        unknown = sorted(str(call_id) for call_id in ids if call_id not in held)
        if unknown:
            raise FieldError(f"review_calls({name}=...) names call ids the response does not "
                             f"hold: {', '.join(unknown)}")
    for call_id, reason in refusals.items():
        if type(reason) is not str or not reason.strip():
            raise FieldError(f"review_calls(refuse=...)[{call_id!r}] must be a non-empty str "
                             "reason for the model")
        try:
            reason.encode("utf-8")
        except UnicodeEncodeError:
            raise FieldError(f"review_calls(refuse=...)[{call_id!r}] must be encodable as "
                             "UTF-8 (it holds a lone surrogate)") from None
    if not refusals and not asked:
        return completed
    calls = tuple(
        attrs.evolve(call, refusal=refusals.get(call.call_id, call.refusal),
                     needs_permission=call.needs_permission or call.call_id in asked)
        for call in completed.tool_calls)
    return attrs.evolve(completed, tool_calls=calls)
