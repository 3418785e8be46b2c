"""Benchmark: the cost of one turn-reducer step against a floor and against ``transitions``.

Run:  python benchmarks/run.py [--rounds N] [--repeats K]

Three things are timed, interleaved in every repeat so that machine noise hits them alike:

* **step**: :func:`agentturn.reduce` over a long scripted turn (N tool rounds, each: stream
  opened, stream completed with one call, write acked, tool finished, write acked), per event;
* **floor**: the least a minimal immutable reducer can do per event: one ``isinstance`` dispatch
  plus one ``attrs.evolve`` of a 12-field frozen slotted class;
* **transitions**: one ``trigger`` on a model bound to a ``transitions.Machine`` of a comparable
  graph (the turn's phases, ``auto_transitions=False``), per event.

It prints the median of each (nanoseconds per event) and the two ratios DESIGN.md sets goals for:
``ratio step/floor`` (goal: at most 3) and ``ratio step/transitions`` (goal: below 1). This is a
measurement, not a test: the numbers depend on the machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import attrs
from transitions import Machine

import agentturn as at


def scripted_turn(rounds: int) -> tuple[at.TurnState, list[at.Event]]:
    """A turn state just after the prompt's first request, and ``rounds`` tool rounds of events."""
    state = at.TurnState.create("bench", at.TurnConfig(auto_title=False))
    for event in (at.PromptSubmitted(turn_id="t", message_id="m", text="go"),
                  at.Persisted(key="t/p1")):
        state = at.reduce(state, event).state
    events: list[at.Event] = []
    persist = 1
    for number in range(1, rounds + 1):
        request_id = f"t/r{number}"
        call = at.ToolCall(call_id=f"c{number}", name="read_file", arguments="{}")
        events.append(at.StreamOpened(request_id=request_id))
        events.append(at.StreamCompleted(request_id=request_id, text="", finish_reason="tool_calls",
                                         tool_calls=(call,)))
        persist += 1
        events.append(at.Persisted(key=f"t/p{persist}"))
        events.append(at.ToolFinished(call_id=call.call_id, output="ok"))
        persist += 1
        events.append(at.Persisted(key=f"t/p{persist}"))
    return state, events


@attrs.frozen(kw_only=True)
class Floor12:
    """The floor's state: twelve fields, frozen and slotted like agentturn's."""

    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0
    e: int = 0
    f: int = 0
    g: int = 0
    h: int = 0
    i: int = 0
    j: int = 0
    k: int = 0
    n: int = 0


def floor_reduce(state: Floor12, event: object) -> Floor12:
    if isinstance(event, at.Persisted):
        return attrs.evolve(state, a=state.a + 1)
    return attrs.evolve(state, b=state.b + 1)


def time_step(state: at.TurnState, events: list[at.Event]) -> float:
    reduce = at.reduce
    started = time.perf_counter_ns()
    for event in events:
        state = reduce(state, event).state
    return (time.perf_counter_ns() - started) / len(events)


def time_floor(events: list[at.Event]) -> float:
    state = Floor12()
    started = time.perf_counter_ns()
    for event in events:
        state = floor_reduce(state, event)
    return (time.perf_counter_ns() - started) / len(events)


class _Model:
    pass


def transitions_machine() -> tuple[_Model, list[str]]:
    """A bound model on the turn's phases, and one round of triggers in a cycle."""
    model = _Model()
    phases = [phase.name for phase in at.TurnPhase]
    cycle = [
        ("opened", "AWAITING_STREAM", "STREAMING"),
        ("completed", "STREAMING", "SAVING_RESPONSE"),
        ("persisted", "SAVING_RESPONSE", "RUNNING_TOOL"),
        ("finished", "RUNNING_TOOL", "SAVING_RESULTS"),
        ("persisted", "SAVING_RESULTS", "AWAITING_STREAM"),
    ]
    Machine(model=model, states=phases, initial="AWAITING_STREAM", auto_transitions=False,
            transitions=[{"trigger": t, "source": s, "dest": d} for t, s, d in cycle])
    return model, [trigger for trigger, _, _ in cycle]


def time_transitions(model: _Model, triggers: list[str], count: int) -> float:
    calls: list[Callable[[], bool]] = [getattr(model, name) for name in triggers]
    rounds = count // len(calls)
    started = time.perf_counter_ns()
    for _ in range(rounds):
        for trigger in calls:
            trigger()
    return (time.perf_counter_ns() - started) / (rounds * len(calls))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2_000, help="tool rounds in the turn")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved repeats")
    args = parser.parse_args(argv)
    state, events = scripted_turn(args.rounds)
    model, triggers = transitions_machine()
    steps, floors, triggered = [], [], []
    for _ in range(args.repeats):
        steps.append(time_step(state, events))
        floors.append(time_floor(events))
        triggered.append(time_transitions(model, triggers, len(events)))
    step, floor, trigger = (statistics.median(x) for x in (steps, floors, triggered))
    print(f"python {sys.version.split()[0]}; {len(events)} events per repeat, "
          f"{args.repeats} interleaved repeats; medians in ns per event")
    print(f"step (agentturn.reduce): {step:,.0f} ns")
    print(f"floor (isinstance + evolve of 12 fields): {floor:,.0f} ns")
    print(f"transitions trigger (bound model): {trigger:,.0f} ns")
    print(f"ratio step/floor: {step / floor:.2f}")
    print(f"ratio step/transitions: {step / trigger:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
