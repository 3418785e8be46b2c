"""What runs next in a turn, and how a turn ends: the two paths every handler goes through.

Theory of operation
-------------------
A handler of :mod:`agentturn.turn.reducer` records what its event says and then hands the state
to one of two functions, so the order of actions is decided in one place:

* :func:`advance` picks the next action at a boundary, in the fixed order the reducer's module
  docstring gives (Lead saves, then a Lead boundary, the end, a naming request, the next tool,
  the next request);
* :func:`finalize` ends the turn: Lead admission closes, writes and tools in flight are awaited,
  every call without a result gets one, Lead saves are awaited, unapplied instructions are
  reported, and ``EndTurn`` goes out with the typed outcome and the raw finish reason.

The building blocks both use (one write, the next request, the next call) live here too, with
the texts recorded for calls that were not run.
"""

from __future__ import annotations

from typing import Any

from .. import lead, titles
from .._base import Command
from .._trusted import builder, replacer
from ..commands import (
    AskPermission,
    DecideNaturalStop,
    EndTurn,
    ExecuteTool,
    Persist,
    Record,
    RequestModelStream,
)
from ..errors import UnknownId
from ..records import (
    CutOffSignal,
    FinishKind,
    HardStopKind,
    OutcomeKind,
    ResponseRecord,
    ToolResultRecord,
    ToolResultStatus,
    TurnOutcome,
    UserMessageRecord,
)
from .state import NextStep, TurnPhase, TurnState

P = TurnPhase
#: ``attrs.evolve`` for TurnState, at the cost of one C call per field (see ``replacer``).
replace = replacer(TurnState)
# The copies of a tool round's steps, the commonest a turn takes. Speed, in this one place: a
# step copies the 23-field TurnState, and ``replace`` matches keywords and tests every field;
# each copy below takes exactly the fields it names, positionally, and copies the rest as they
# are, at about half the cost (``benchmarks/README.md``). Everything else reads ``replace``.
#: ``(state, phase, persist_seq, persisting, batch)``: a write goes out (:func:`persist`).
copy_for_write = replacer(TurnState, "phase", "persist_seq", "persisting", "batch")
#: ``(state, phase, persist_seq, persisting, batch, tool_in_flight, next_call)``: a tool's
#: result goes out (:func:`persist_result`).
copy_for_result = replacer(TurnState, "phase", "persist_seq", "persisting", "batch",
                           "tool_in_flight", "next_call")
#: ``(state, phase, persist_seq, persisting, batch, finish_reason, calls, next_call,
#: next_step)``: a response goes out (:func:`persist_response`).
copy_for_response = replacer(TurnState, "phase", "persist_seq", "persisting", "batch",
                             "finish_reason", "calls", "next_call", "next_step")
#: ``(state, persisting, batch)``: the write in flight was acknowledged.
copy_write_done = replacer(TurnState, "persisting", "batch")
#: ``(state, phase, tool_in_flight)``: a call waits for permission or runs.
copy_for_call = replacer(TurnState, "phase", "tool_in_flight")
#: ``(state, phase, tool_in_flight, persisting, batch)``: the same, as the write before it is
#: acknowledged (one copy for both, at the commonest boundary of all: see :func:`advance`).
copy_for_call_after_write = replacer(TurnState, "phase", "tool_in_flight", "persisting", "batch")
#: ``(state, phase, request_leads)``: a stream opened.
copy_for_stream = replacer(TurnState, "phase", "request_leads")
#: ``(state, phase, request_seq, lead, calls, next_call, stop_decided, request_leads,
#: next_step)``: the next model request goes out (:func:`next_request`).
copy_for_request = replacer(TurnState, "phase", "request_seq", "lead", "calls", "next_call",
                            "stop_decided", "request_leads", "next_step")
# The trusted constructors (see ``builder``) of what a step makes from validated values.
new_persist = builder(Persist)
new_request = builder(RequestModelStream)
new_ask_permission = builder(AskPermission)
new_execute_tool = builder(ExecuteTool)
new_response_record = builder(ResponseRecord)
new_tool_result = builder(ToolResultRecord)
new_user_message = builder(UserMessageRecord)


Commands = list[Command]

LEAD_SKIP = "Skipped: the user sent a Lead instruction before this call started."
SUPERSEDED = ("Superseded: the user sent a Lead instruction while this call waited for "
              "permission.")
#: The record of a call the user's Stop ended (TL-8), whether it ran or never started.
STOPPED = "Cancelled: the user stopped the turn."
#: A running tool that reports ``cancelled`` while the turn goes on cancelled itself.
SELF_CANCELLED = "Cancelled: the tool stopped before it finished (for example, it timed out)."
#: The calls after the one whose permission request the user cancelled (TL-3).
PERMISSION_CANCELLED = ("Cancelled: the user cancelled the permission request of an earlier "
                        "call, which cancelled the turn.")
SKIP_REASONS = {
    OutcomeKind.CANCELLED: (ToolResultStatus.CANCELLED, STOPPED),
    OutcomeKind.OUTPUT_LIMIT: (ToolResultStatus.SKIPPED, "Not run: the response was cut at the "
                               "engine's output limit, so this call may be incomplete."),
    OutcomeKind.MALFORMED_TOOL_FORMAT: (ToolResultStatus.SKIPPED,
                                        "Not run: the tool-call format was malformed."),
    OutcomeKind.CONTENT_FILTERED: (ToolResultStatus.SKIPPED, "Not run: the engine withheld or "
                                   "cut the response for safety or policy."),
    OutcomeKind.UNRECOGNIZED_FINISH: (ToolResultStatus.SKIPPED, "Not run: the response did not "
                                      "end normally, so this call may be incomplete."),
    OutcomeKind.ENDED_BY_TOOL: (ToolResultStatus.SKIPPED, "Not run: an earlier call of this "
                                "response ended the task."),
}
#: What ended a ``HALTED`` turn, by the authority that halted it, as a call's record says it.
HALTED_BY = {
    HardStopKind.USER_CANCELLED: "the user cancelled the turn",
    HardStopKind.PERMISSION_CANCELLED: "the user cancelled a permission request",
    HardStopKind.POST_TOOL_USE_STOP: "a PostToolUse hook stopped the turn",
    HardStopKind.LOOP_PROTECTION: "loop protection stopped the turn",
    HardStopKind.TOKEN_LIMIT: "the conversation reached the model's token limit",
    HardStopKind.STOP_HOOK_CAP: "the Stop hooks reached their limit",
    HardStopKind.GRACE_EXPIRED: "the client disconnected and did not come back in time",
    HardStopKind.RESOURCE_LIMIT: "a resource limit of the host stopped the turn",
    HardStopKind.COMPACTION_FAILED: "compacting the conversation failed",
    HardStopKind.UNRESUMABLE: "the host stopped the turn",
    HardStopKind.GUARD_BUDGET: "the automatic continuations reached their limit",
    HardStopKind.SESSION_CLOSED: "the session closed",
    HardStopKind.OTHER: "the host stopped the turn",
}


def not_run(ending: TurnOutcome) -> tuple[ToolResultStatus, str]:
    """The status and reason recorded for a call that never started because the turn ended
    with ``ending``: the true reason, for the model to read in its next request."""
    if ending.kind is OutcomeKind.HALTED:
        return ToolResultStatus.SKIPPED, f"Not run: {_halted_by(ending)} before this call started."
    return SKIP_REASONS.get(ending.kind, ENDED_OTHERWISE)


def cancelled_reason(ending: TurnOutcome | None) -> str:
    """The reason recorded for a running tool that reports ``cancelled``: what ended the turn
    (``ending``), or, while the turn goes on (``None``), the tool itself."""
    if ending is None:
        return SELF_CANCELLED
    if ending.kind is OutcomeKind.HALTED:
        return f"Cancelled: {_halted_by(ending)} while this call ran."
    if ending.kind is OutcomeKind.CANCELLED:
        return STOPPED
    return "Cancelled: the turn ended while this call ran."


#: The authorities whose own words (``HardStopped.reason``) say more than the kind: a hook's
#: stop reason, what loop protection saw, which limit. The record quotes them.
_QUOTED = frozenset({HardStopKind.POST_TOOL_USE_STOP, HardStopKind.LOOP_PROTECTION,
                     HardStopKind.RESOURCE_LIMIT, HardStopKind.UNRESUMABLE, HardStopKind.OTHER})


def halt_message(kind: HardStopKind, reason: str) -> str:
    """What the user is told when ``kind`` halts the turn: the host's own words, or, when it
    gave none (``HardStopped.reason`` empty or blank), which authority it was."""
    return reason if reason.strip() else f"The turn was halted: {HALTED_BY[kind]}."


def _halted_by(ending: TurnOutcome) -> str:
    kind = ending.halt_kind or HardStopKind.OTHER
    quoted = kind in _QUOTED and ending.message != halt_message(kind, "")
    detail = ending.message.strip().rstrip(".") if quoted else ""
    return f"{HALTED_BY[kind]} ({detail})" if detail else HALTED_BY[kind]


#: Why a response that did not complete normally ends the turn, by its finish kind (TL-9).
CUT_OFF = {
    FinishKind.LENGTH: (OutcomeKind.OUTPUT_LIMIT, "The response was cut at the engine's output "
                        "limit"),
    FinishKind.CONTENT_FILTER: (OutcomeKind.CONTENT_FILTERED, "The engine withheld or cut the "
                                "response for safety or policy"),
    FinishKind.OTHER: (OutcomeKind.UNRECOGNIZED_FINISH, "The engine ended the response in a way "
                       "not known to be a normal completion"),
}
#: What showed a cut that the finish reason did not admit (engines mislabel cut-off responses).
CUT_EVIDENCE = {
    CutOffSignal.OUTPUT_TOKEN_LIMIT: "the output tokens reached the request's limit",
    CutOffSignal.UNCLOSED_TOOL_BLOCK: "the stream ended inside an unclosed tool-call block",
    CutOffSignal.UNPARSABLE_ARGUMENTS_AT_LIMIT: "a tool call's arguments stop mid-JSON at the "
                                                "output limit",
}
ENDED_OTHERWISE = (ToolResultStatus.SKIPPED, "Not run: the turn ended first.")
NOT_CONTINUED = (ToolResultStatus.SKIPPED,
                 "Not run: the turn stopped on an error and was not continued.")


def make_outcome(state: TurnState, kind: OutcomeKind, message: str,
             resumable: bool = False) -> TurnOutcome:
    return TurnOutcome(kind=kind, finish_reason=state.finish_reason, message=message,
                       resumable=resumable)


# --- building blocks --------------------------------------------------------------------------


def persist(state: TurnState, records: tuple[Record, ...], phase: TurnPhase,
            out: Commands, **changes: Any) -> TurnState:
    """Send one write and wait for it in ``phase``; ``changes`` join the same new state."""
    if changes:
        changes.update(phase=phase, persist_seq=state.persist_seq + 1, persisting=True,
                       batch=records)
        state = replace(state, **changes)
    else:
        state = copy_for_write(state, phase, state.persist_seq + 1, True, records)
    out.append(new_persist(key=state.persist_key, records=records))
    return state


def persist_response(state: TurnState, response: ResponseRecord, next_step: NextStep,
                     out: Commands) -> TurnState:
    """Write a completed response: its calls are the current ones, none has a result yet."""
    records = (response,)
    state = copy_for_response(state, P.SAVING_RESPONSE, state.persist_seq + 1, True, records,
                              response.finish_reason, response.tool_calls, 0, next_step)
    out.append(new_persist(key=state.persist_key, records=records))
    return state


def persist_result(state: TurnState, result: ToolResultRecord, out: Commands) -> TurnState:
    """Write the running call's result: the call no longer runs, the next one is current."""
    records = (result,)
    state = copy_for_result(state, P.SAVING_RESULTS, state.persist_seq + 1, True, records,
                            False, state.next_call + 1)
    out.append(new_persist(key=state.persist_key, records=records))
    return state


def results_for_rest(state: TurnState, status: ToolResultStatus,
                     reason: str) -> tuple[ToolResultRecord, ...]:
    return tuple(
        new_tool_result(call_id=call.call_id, name=call.name, status=status, reason=reason)
        for call in state.calls[state.next_call:]
    )


def next_request(state: TurnState, out: Commands) -> TurnState:
    limit = state.config.max_requests
    if limit is not None and state.request_seq >= limit:
        return finalize(state, out, make_outcome(
            state, OutcomeKind.ACTION_BUDGET,
            f"The turn reached the host's limit of {limit} model requests."))
    queue, taken = lead.take_saved_entries(state.lead)
    retry = state.next_step is NextStep.RETRY
    state = copy_for_request(state, P.AWAITING_STREAM, state.request_seq + 1, queue, (), 0,
                             False, taken, NextStep.RETRY if retry else NextStep.REQUEST)
    out.append(new_request(request_id=state.request_id,
                                   lead_ids=tuple(entry.lead_id for entry in taken),
                                   corrective=retry))
    return state


def start_call(state: TurnState, out: Commands, acknowledged: bool = False) -> TurnState:
    call = state.calls[state.next_call]
    if call.refusal:
        # The host refused the call (``ToolCall.refusal``): it never runs and is never asked
        # about; its result, the host's reason, is saved for the model and the turn goes on.
        refused = new_tool_result(call_id=call.call_id, name=call.name,
                                  status=ToolResultStatus.REFUSED, output="", reason=call.refusal)
        return persist(state, (refused,), P.SAVING_RESULTS, out, next_call=state.next_call + 1)
    if call.needs_permission:
        out.append(new_ask_permission(call=call))
        phase, running = P.AWAITING_PERMISSION, state.tool_in_flight
    else:
        out.append(new_execute_tool(call=call))
        phase, running = P.RUNNING_TOOL, True
    if acknowledged:
        return copy_for_call_after_write(state, phase, running, False, ())
    return copy_for_call(state, phase, running)


def advance(state: TurnState, out: Commands, acknowledged: bool = False) -> TurnState:
    """Pick the next action at a boundary (see the module docstring for the order).

    ``acknowledged``: ``state`` still shows the write that was just acknowledged in flight. The
    commonest boundary of a turn, a response's next call after a write, then makes one copy
    instead of two (no Lead instruction pending and no naming request running, the order
    below reaches the next tool at once); any other boundary clears the write first.
    """
    if acknowledged:
        if (not state.lead.entries and state.next_call < len(state.calls)
                and not titles.naming_in_flight(state.title)):
            return start_call(state, out, acknowledged=True)
        state = copy_write_done(state, False, ())
    pending = bool(state.lead.entries)  # Lead bookkeeping only while instructions are pending
    if pending and lead.has_unsaved(state.lead):
        return replace(state, phase=P.AWAITING_LEAD_SAVES)
    leads_ready = pending and bool(lead.saved_ids(state.lead))
    if leads_ready and state.next_call < len(state.calls):
        skipped = results_for_rest(state, ToolResultStatus.SKIPPED, LEAD_SKIP)
        return persist(state, skipped, P.SAVING_RESULTS, out, next_call=len(state.calls))
    finishing = state.next_step is NextStep.FINISH or state.next_step is NextStep.FINISH_EMPTY
    if not leads_ready and state.next_call == len(state.calls) and finishing:
        # The end needs no model: it is not held for a naming request still running.
        if state.config.hold_natural_stops and not state.stop_decided:
            # A session applies its stop order here; Lead admission stays open meanwhile.
            out.append(DecideNaturalStop(turn_id=state.turn_id, request_id=state.request_id,
                                         empty=state.next_step is NextStep.FINISH_EMPTY))
            return replace(state, phase=P.AWAITING_STOP_DECISION)
        if state.next_step is NextStep.FINISH:
            return finalize(state, out, make_outcome(state, OutcomeKind.FINISHED,
                                                  "The agent finished."))
        return finalize(state, out, make_outcome(
            state, OutcomeKind.EMPTY_RESPONSE,
            "The model ended its turn without any text or tool call."))
    if titles.naming_in_flight(state.title):
        # TT-3: tools and requests wait for the naming request.
        return replace(state, phase=P.AWAITING_TITLE)
    if not leads_ready and state.next_call < len(state.calls):
        return start_call(state, out)
    return next_request(state, out)


def finalize(state: TurnState, out: Commands, outcome: TurnOutcome | None = None,
             extra: tuple[ToolResultRecord, ...] = ()) -> TurnState:
    """Drain final lifecycle work, then end the turn (see the module docstring)."""
    if outcome is not None and state.ending is None:
        state = replace(state, ending=outcome)
    ending = state.ending
    assert ending is not None  # every caller sets or has set the outcome
    queue_step = lead.close_admission(state.lead)
    out.extend(queue_step.commands)
    state = replace(state, phase=P.ENDING, lead=queue_step.state)
    if state.persisting or state.tool_in_flight:
        return state
    if not ending.resumable and (extra or state.next_call < len(state.calls)):
        records = extra + results_for_rest(state, *not_run(ending))
        state = replace(state, next_call=len(state.calls))
        return persist(state, records, P.ENDING, out)
    if lead.has_unsaved(state.lead):
        return state
    if ending.resumable:
        # TL-11: saved instructions wait for ContinueTurn (or are reported by a new prompt).
        kept = lead.suspend(state.lead)
        out.extend(kept.commands)
        out.append(EndTurn(turn_id=state.turn_id, outcome=ending))
        return replace(state, phase=P.IDLE, lead=kept.state, ending=None)
    released = lead.release(state.lead)
    out.extend(released.commands)
    out.append(EndTurn(turn_id=state.turn_id, outcome=ending))
    return replace(state, phase=P.IDLE, lead=released.state, ending=None, calls=(),
                   next_call=0, batch=(), resume_phase=None)


def current_call_id(state: TurnState) -> str:
    return state.calls[state.next_call].call_id


def undelivered(state: TurnState) -> TurnState:
    """The current request will never open: the Lead instructions it carried go back to the
    queue, so the turn's end reports them (or a ``ContinueTurn`` sends them again, LD-13)."""
    if not state.request_leads:
        return state
    return replace(state, lead=lead.restore(state.lead, state.request_leads), request_leads=())


def unknown(state: TurnState, event: object, expected: str) -> UnknownId:
    return UnknownId(part="turn", phase=state.phase.name, event=event, expected=expected)
