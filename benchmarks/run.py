"""Benchmark: one session step on a recorded daemon session, against a floor, a peer and a limit.

Run:  python benchmarks/run.py [--repeats K] [--size-rounds N] [--import-runs M]

What is timed, per event, in one interleaved run (the order of the four is rotated every repeat,
so machine noise and cache warmth hit them alike; every ratio is taken inside one repeat and the
median of those paired ratios is reported, with its spread):

* **step**: ``agentturn.session.reduce`` over a recorded daemon session (:func:`record_trace`):
  three prompts, many tool rounds with 1-4 calls per response, permission prompts (some denied),
  Lead instructions typed while tools run, a title, todo-write results that arm the todo stop
  guard and its continuations, a mid-turn drain at every natural stop, and a prompt queued while
  a turn runs. Each event is **built inside the timed loop** (``cls(**fields)``, validators and
  all), as a host does, then reduced;
* **floor**: the least an immutable reducer can do per event: one ``isinstance`` dispatch and one
  direct keyword construction of a 12-field frozen slotted attrs class;
* **transitions** (the peer): one trigger of a ``transitions.Machine`` on a bound model of a turn
  (11 states, 20 transitions, with conditions and after-callbacks, trigger arguments read by
  them), written as a user of ``transitions`` writes one;
* **limit**: a hand-written ``__slots__`` class with a positional constructor and a dict
  dispatch: what plain Python can do at best, for scale.

Floor, peer and limit get their events ready-made; only the step pays for building them. Two
more lines explain the distance to the floor: the **skeleton** (:func:`time_skeleton`: build the
event, copy the turn and the session state once, one command, the ``Step``; no decision), the
least a step composed of immutable parts costs; and the **turn alone** (:func:`time_turn`: the
turn reducer on ready-made one-call rounds, the trace issue 13's first figures were measured on)
against the floor over the same events.

Then the deep size of the session state (``sys.getsizeof`` over everything reachable, each
container counted once, Lead texts excluded: they are bounded at 8 x 32 KiB) after 10 and after
``--size-rounds`` tool rounds of one turn, driven by a plain loop; and the cumulative import time
(``python -X importtime``, fresh interpreters, median of ``--import-runs``) of ``agentturn`` over
``attrs``, both from cached bytecode (as after an install). The garbage collector stays on
throughout, as in a host.

The lines ``ratio step/floor``, ``ratio step/transitions``, ``ratio step/limit``,
``state bytes at ...`` and ``import ms ratio agentturn/attrs`` are the figures DESIGN.md sets
goals for; ``ratio skeleton/floor``, ``ratio step/skeleton`` and ``ratio turn alone/floor``
are reported. This is a measurement, not a test: absolute numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import enum
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
from transitions import Machine

import agentturn as at
from agentturn import guard as g
from agentturn import session as ss
from agentturn.testing import EngineResponse, ScriptedHost

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: walks.py
import walks  # found through the line above

#: One recorded event: its class, its plain fields, and the fields that hold values the host
#: builds too (the tool calls of a response), as ``(name, ((class, fields), ...))``.
Spec = tuple[type, dict[str, Any], tuple[tuple[str, tuple[tuple[type, dict[str, Any]], ...]], ...]]

CONFIG = ss.SessionConfig(chat_id="chat-1", guard=g.GuardConfig(todo_stop_guard=True,
                                                                 daemon=True))
TOOLS = ("read_file", "grep", "edit_file", "run_tests", "list_dir")
ARGS = '{"path": "src/parser.py", "pattern": "def parse", "limit": 200}'
#: A tool's output: Python source with a non-ASCII comment, as real files have.
OUTPUT = "def parse(text: str) -> Tree:  # Ünicode → Baum\n    ...\n" * 8


def _todos(done: int, total: int = 4) -> dict[str, Any]:
    return {"type": "todo_list", "todos": [
        {"id": str(n), "content": f"step {n} of the port",
         "status": "completed" if n <= done else "in_progress" if n == done + 1 else "pending"}
        for n in range(1, total + 1)]}


# --- the recorded session ---------------------------------------------------------------------


class DaemonWorld(ScriptedHost):
    """The benchmark's world, on agentturn's scripted host (answers go to the back of a queue).

    The model is scripted per turn: ``rounds`` tool rounds, response ``k`` calling ``1 + k % 4``
    tools (every third call needs permission, every fifth permission is denied; a todo-write
    call every sixth round, marking one more item done), then a final text. A Lead instruction
    is typed while every eleventh tool runs. At the natural stop the todos are unfinished, so the
    guard continues; that continuation's todo-write finishes them and its result goes back in a
    guard-sponsored follow-up (two guard streams per turn). Prompt ``q1`` is queued while the
    first turn runs: at its natural stop the queued prompt wins, and it starts when the first
    turn ends.
    """

    def __init__(self, rounds: int) -> None:
        super().__init__(CONFIG)
        self.rounds = rounds
        self.title_text = "Port the parser to the tree API"
        self.drain = lambda command: ss.MidTurnDrained(drain_id=command.drain_id,
                                                       has_queued_prompt=False)
        self.counted = {"responses": 0, "tools": 0, "permissions": 0, "leads": 0}
        self.done = 0

    def stream(self, request: at.RequestModelStream | None = None) -> EngineResponse | None:
        assert request is not None
        self.counted["responses"] += 1
        number = self.counted["responses"]
        k = int(request.request_id.rpartition("/r")[2])  # the request's number in its turn
        if k == 1:
            self.done = 0
        if k > self.rounds:
            todo = self.done < 4 and k > self.rounds + 1  # in the guard's first continuation
            calls: tuple[at.ToolCall, ...] = ()
            if todo:
                self.done = 4
                calls = (at.ToolCall(call_id=f"c{number}-todo", name="todo_write",
                                     arguments="{}"),)
            return EngineResponse(text="Done: the parser uses the new tree API — tests pass ✓",
                                  raw_finish_reason="tool_use" if calls else "end_turn",
                                  calls=calls)
        calls = tuple(
            at.ToolCall(call_id=f"c{number}-{n}", name=TOOLS[(k + n) % len(TOOLS)],
                        arguments=ARGS, needs_permission=(number + n) % 3 == 0)
            for n in range(1 + k % 4))
        if k % 6 == 1 and self.done < 3:
            calls = (*calls[:-1], at.ToolCall(call_id=f"c{number}-todo",
                                              name="todo_write", arguments="{}"))
        return EngineResponse(text="Reading the parser first." if k % 2 else "",
                              raw_finish_reason="tool_use", calls=calls)

    def ask(self, call: at.ToolCall) -> at.PermissionDecision:
        self.counted["permissions"] += 1
        return (at.PermissionDecision.DENY if self.counted["permissions"] % 5 == 0
                else at.PermissionDecision.ALLOW)

    def run(self, call: at.ToolCall) -> tuple[str, Any]:
        if call.name == "todo_write":
            self.done = min(self.done + 1, 4)
            return "Todos updated.", _todos(self.done)
        return OUTPUT, None

    def reply(self, command: at.Command) -> list[at.Event]:
        answers = super().reply(command)
        if isinstance(command, at.ExecuteTool):
            self.counted["tools"] += 1
            if self.counted["tools"] % 11 == 0:  # typed while this tool runs
                self.counted["leads"] += 1
                lead = at.LeadSubmitted(chat_id="chat-1", lead_id=f"lead-{self.counted['leads']}",
                                        text="Keep the old entry point as an alias (≥ 2 releases).")
                return [lead, *answers]
        return answers


def _spec(event: at.Event) -> Spec:
    """``event`` as the host built it: its class, the fields it was given (the ones that differ
    from their defaults), and the tool calls among them."""
    given: dict[str, Any] = {}
    for field in attrs.fields(type(event)):
        value = getattr(event, field.name)
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory()
        if default is attrs.NOTHING or value != default:
            given[field.name] = value
    nested = tuple(
        (name, tuple((type(item), attrs.asdict(item, recurse=False)) for item in value))
        for name, value in given.items()
        if type(value) is tuple and value and attrs.has(type(value[0])))
    plain = {name: value for name, value in given.items()
             if name not in {name for name, _ in nested}}
    return (type(event), plain, nested)


def record_trace(rounds: int = 40) -> list[Spec]:
    """Record a daemon session of three turns of about ``rounds`` tool rounds each."""
    host = DaemonWorld(rounds)
    for turn in (1, 2):
        events: list[at.Event] = [at.PromptSubmitted(
            turn_id=f"t{turn}", message_id=f"m{turn}",
            text="Port the parser to the new tree API — tests green (日本語 too).")]
        if turn == 1:
            events.append(ss.PromptQueued(prompt_id="q1", message_id="mq1",
                                          text="Then update the changelog « Änderungen »."))
        host.send(*events)
    if host.state.phase is not ss.SessionPhase.IDLE or host.state.fifo or host.held:
        raise SystemExit("the recorded session did not end idle with the queue empty")
    return [_spec(event) for event, _ in host.steps]


def build(spec: Spec) -> object:
    """Build one recorded event as the host does, its tool calls included."""
    cls, fields, nested = spec
    if nested:
        fields = {**fields, **{name: tuple(item(**values) for item, values in items)
                               for name, items in nested}}
    return cls(**fields)


def trace_summary(trace: list[Spec]) -> str:
    counts: dict[str, int] = {}
    for cls, _, _ in trace:
        counts[cls.__name__] = counts.get(cls.__name__, 0) + 1
    return ", ".join(f"{name} {n}" for name, n in sorted(counts.items(), key=lambda x: -x[1]))


def time_reduce(events: list[object], loops: int) -> float:
    """``session.reduce`` alone over the recorded trace's events, built beforehand."""
    reduce, create = ss.reduce, ss.Session.create
    started = time.perf_counter_ns()
    for _ in range(loops):
        state = create(CONFIG)
        for event in events:
            state = reduce(state, event).state
    return (time.perf_counter_ns() - started) / (loops * len(events))


def time_build(trace: list[Spec], loops: int) -> float:
    """Building the recorded trace's events alone, as :func:`time_step` builds them."""
    started = time.perf_counter_ns()
    for _ in range(loops):
        for cls, fields, nested in trace:
            if nested:
                fields = {**fields, **{name: tuple(item(**values) for item, values in items)
                                       for name, items in nested}}
            cls(**fields)
    return (time.perf_counter_ns() - started) / (loops * len(trace))


def time_step(trace: list[Spec], loops: int) -> float:
    reduce, create = ss.reduce, ss.Session.create
    started = time.perf_counter_ns()
    for _ in range(loops):
        state = create(CONFIG)
        for cls, fields, nested in trace:
            if nested:  # a response's tool calls, built like the response itself
                fields = {**fields, **{name: tuple(item(**values) for item, values in items)
                                       for name, items in nested}}
            state = reduce(state, cls(**fields)).state
    return (time.perf_counter_ns() - started) / (loops * len(trace))


# --- what a composed step cannot avoid, and the turn alone ----------------------------------


def time_skeleton(trace: list[Spec], loops: int) -> float:
    """The fixed work of a session step with none of its logic: build the event as
    :func:`time_step` does, copy the turn state and the session state once each (with the
    cheapest copies the library has), build one command and the :class:`~agentturn.Step`."""
    from agentturn._trusted import builder, new_step, replacer

    with_seq = replacer(at.TurnState, "persist_seq")
    with_turn = replacer(ss.SessionState, "turn")
    persist = builder(at.Persist)
    started = time.perf_counter_ns()
    for _ in range(loops):
        state = ss.Session.create(CONFIG)
        for cls, fields, nested in trace:
            if nested:
                fields = {**fields, **{name: tuple(item(**values) for item, values in items)
                                       for name, items in nested}}
            event = cls(**fields)
            turn = with_seq(state.turn, state.turn.persist_seq + 1)
            command = persist(key=type(event).__name__, records=())
            state = new_step(state=with_turn(state, turn), commands=(command,)).state
    return (time.perf_counter_ns() - started) / (loops * len(trace))


def one_call_rounds(rounds: int = 200) -> tuple[at.TurnState, list[object]]:
    """The trace the figure "about 4.8" in issue 13 was measured on: the turn reducer alone, no
    titles, ``rounds`` rounds of one call each (opened, completed, saved, finished, saved)."""
    state = at.TurnState.create("bench", at.TurnConfig(auto_title=False))
    for event in (at.PromptSubmitted(turn_id="t", message_id="m", text="go"),
                  at.Persisted(key="t/p1")):
        state = at.reduce(state, event).state
    events: list[object] = []
    for number in range(1, rounds + 1):
        request_id, call = f"t/r{number}", at.ToolCall(call_id=f"c{number}", name="read_file",
                                                       arguments="{}")
        events += [at.StreamOpened(request_id=request_id),
                   at.StreamCompleted(request_id=request_id, text="", finish_reason="tool_calls",
                                      tool_calls=(call,)),
                   at.Persisted(key=f"t/p{2 * number}"),
                   at.ToolFinished(call_id=call.call_id, output="ok"),
                   at.Persisted(key=f"t/p{2 * number + 1}")]
    return state, events


def time_turn(start: at.TurnState, events: list[object], loops: int) -> float:
    reduce = at.reduce
    started = time.perf_counter_ns()
    for _ in range(loops):
        state = start
        for event in events:
            state = reduce(state, event).state
    return (time.perf_counter_ns() - started) / (loops * len(events))


# --- the floor --------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Floor12:
    """The floor's state: twelve fields, frozen and slotted like agentturn's states."""

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


def floor_reduce(s: Floor12, event: object) -> Floor12:
    if isinstance(event, at.Persisted):
        return Floor12(a=s.a + 1, b=s.b, c=s.c, d=s.d, e=s.e, f=s.f, g=s.g, h=s.h, i=s.i,
                       j=s.j, k=s.k, n=s.n)
    return Floor12(a=s.a, b=s.b + 1, c=s.c, d=s.d, e=s.e, f=s.f, g=s.g, h=s.h, i=s.i, j=s.j,
                   k=s.k, n=s.n)


def time_floor(events: list[object], loops: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(loops):
        state = Floor12()
        for event in events:
            state = floor_reduce(state, event)
    return (time.perf_counter_ns() - started) / (loops * len(events))


# --- the limit --------------------------------------------------------------------------------


class Limit12:
    """Plain Python at its best: ``__slots__``, a positional constructor."""

    __slots__ = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "n")

    def __init__(self, a: int, b: int, c: int, d: int, e: int, f: int, g: int, h: int, i: int,
                 j: int, k: int, n: int) -> None:
        self.a = a
        self.b = b
        self.c = c
        self.d = d
        self.e = e
        self.f = f
        self.g = g
        self.h = h
        self.i = i
        self.j = j
        self.k = k
        self.n = n


def _limit_persisted(s: Limit12, event: object) -> Limit12:
    return Limit12(s.a + 1, s.b, s.c, s.d, s.e, s.f, s.g, s.h, s.i, s.j, s.k, s.n)


def _limit_other(s: Limit12, event: object) -> Limit12:
    return Limit12(s.a, s.b + 1, s.c, s.d, s.e, s.f, s.g, s.h, s.i, s.j, s.k, s.n)


def time_limit(events: list[object], loops: int) -> float:
    handlers: dict[type, Callable[[Limit12, object], Limit12]] = {
        cls: _limit_other for cls in {type(event) for event in events}}
    handlers[at.Persisted] = _limit_persisted
    started = time.perf_counter_ns()
    for _ in range(loops):
        state = Limit12(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        for event in events:
            state = handlers[type(event)](state, event)
    return (time.perf_counter_ns() - started) / (loops * len(events))


# --- the peer: transitions --------------------------------------------------------------------


class TurnModel:
    """A turn as a ``transitions`` user models it: data on the model, guards as conditions,
    effects as after-callbacks that read the trigger's arguments."""

    def __init__(self) -> None:
        self.calls: tuple[at.ToolCall, ...] = ()
        self.next_call = 0
        self.requests = 0
        self.writes = 0
        self.leads_saving = 0
        self.naming = False
        self.commands: list[tuple[str, object]] = []

    # conditions
    def finished(self, **_: Any) -> bool:
        return not self.calls

    def needs_permission(self, **_: Any) -> bool:
        return self.next_call < len(self.calls) and self.calls[self.next_call].needs_permission

    def more_calls(self, **_: Any) -> bool:
        return self.next_call < len(self.calls)

    def allowed(self, decision: at.PermissionDecision | None = None, **_: Any) -> bool:
        return decision is at.PermissionDecision.ALLOW

    def lead_saving(self, **_: Any) -> bool:
        return self.leads_saving > 0

    def title_running(self, **_: Any) -> bool:
        return self.naming

    # after-callbacks
    def persist(self, **_: Any) -> None:
        self.writes += 1
        self.commands.append(("persist", self.writes))

    def request(self, **_: Any) -> None:
        self.requests += 1
        self.calls, self.next_call = (), 0
        self.commands.append(("request", self.requests))

    def store_response(self, calls: tuple[at.ToolCall, ...] = (), **_: Any) -> None:
        self.calls, self.next_call = calls, 0
        self.persist()

    def ask(self, **_: Any) -> None:
        self.commands.append(("ask", self.calls[self.next_call]))

    def start_tool(self, **_: Any) -> None:
        self.commands.append(("execute", self.calls[self.next_call]))

    def record_result(self, **_: Any) -> None:
        self.next_call += 1
        self.persist()

    def end_turn(self, **_: Any) -> None:
        self.commands.append(("end", self.requests))
        if len(self.commands) > 64:
            del self.commands[:32]


TURN_STATES = ["idle", "saving_prompt", "awaiting_stream", "streaming", "saving_response",
               "awaiting_permission", "running_tool", "saving_results", "awaiting_title",
               "awaiting_lead_saves", "ending"]
TURN_TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": "prompt", "source": "idle", "dest": "saving_prompt", "after": "persist"},
    {"trigger": "persisted", "source": "saving_prompt", "dest": "awaiting_stream",
     "after": "request"},
    {"trigger": "opened", "source": "awaiting_stream", "dest": "streaming"},
    {"trigger": "failed", "source": ["awaiting_stream", "streaming"], "dest": "ending",
     "after": "persist"},
    {"trigger": "completed", "source": "streaming", "dest": "saving_response",
     "after": "store_response"},
    {"trigger": "persisted", "source": "saving_response", "dest": "ending",
     "conditions": "finished", "after": "persist"},
    {"trigger": "persisted", "source": "saving_response", "dest": "awaiting_title",
     "conditions": "title_running"},
    {"trigger": "persisted", "source": "saving_response", "dest": "awaiting_permission",
     "conditions": "needs_permission", "after": "ask"},
    {"trigger": "persisted", "source": "saving_response", "dest": "running_tool",
     "after": "start_tool"},
    {"trigger": "decided", "source": "awaiting_permission", "dest": "running_tool",
     "conditions": "allowed", "after": "start_tool"},
    {"trigger": "decided", "source": "awaiting_permission", "dest": "saving_results",
     "unless": "allowed", "after": "record_result"},
    {"trigger": "finished_tool", "source": "running_tool", "dest": "saving_results",
     "after": "record_result"},
    {"trigger": "persisted", "source": "saving_results", "dest": "awaiting_lead_saves",
     "conditions": "lead_saving"},
    {"trigger": "persisted", "source": "saving_results", "dest": "awaiting_permission",
     "conditions": ["more_calls", "needs_permission"], "after": "ask"},
    {"trigger": "persisted", "source": "saving_results", "dest": "running_tool",
     "conditions": "more_calls", "after": "start_tool"},
    {"trigger": "persisted", "source": "saving_results", "dest": "awaiting_stream",
     "after": "request"},
    {"trigger": "lead_saved", "source": "awaiting_lead_saves", "dest": "awaiting_stream",
     "after": "request"},
    {"trigger": "titled", "source": "awaiting_title", "dest": "awaiting_stream",
     "after": "request"},
    {"trigger": "persisted", "source": "ending", "dest": "idle", "after": "end_turn"},
    {"trigger": "stop", "source": ["saving_results", "running_tool", "awaiting_permission"],
     "dest": "ending", "after": "persist"},
]


def transitions_round() -> tuple[TurnModel, list[tuple[Callable[..., bool], dict[str, Any]]]]:
    """A bound model in ``awaiting_stream`` and one tool round of triggers that returns there:
    a response with two calls, the first behind a permission prompt."""
    model = TurnModel()
    Machine(model=model, states=TURN_STATES, transitions=TURN_TRANSITIONS,
            initial="awaiting_stream", auto_transitions=False)
    calls = (at.ToolCall(call_id="c1", name="edit_file", needs_permission=True),
             at.ToolCall(call_id="c2", name="read_file"))
    m: Any = model
    cycle: list[tuple[Callable[..., bool], dict[str, Any]]] = [
        (m.opened, {}), (m.completed, {"calls": calls}), (m.persisted, {}),
        (m.decided, {"decision": at.PermissionDecision.ALLOW}), (m.finished_tool, {}),
        (m.persisted, {}), (m.finished_tool, {}), (m.persisted, {})]
    return model, cycle


def time_transitions(cycle: list[tuple[Callable[..., bool], dict[str, Any]]],
                     count: int) -> float:
    rounds = max(1, count // len(cycle))
    started = time.perf_counter_ns()
    for _ in range(rounds):
        for trigger, fields in cycle:
            trigger(**fields)
    return (time.perf_counter_ns() - started) / (rounds * len(cycle))


# --- state size -------------------------------------------------------------------------------


_SCALARS = (str, int, float, bytes)


def deep_size(root: object) -> int:
    """Bytes reachable from ``root``: every attrs instance and container once, every scalar once
    per reference (so a shared small int or id string counts as if each field owned it). Enum
    members, classes, ``None`` and booleans are shared constants and not counted. Lead texts are
    left out (bounded at 8 x 32 KiB by LD-5, LD-6)."""
    seen: set[int] = set()
    total = 0
    stack: list[object] = [root]
    while stack:
        obj = stack.pop()
        if obj is None or obj is True or obj is False or isinstance(obj, (enum.Enum, type)):
            continue
        if isinstance(obj, _SCALARS):
            total += sys.getsizeof(obj)
            continue
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, (tuple, list, frozenset, set)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif attrs.has(type(obj)):
            lead_entry = isinstance(obj, at.lead.LeadEntry)
            for field in attrs.fields(type(obj)):  # type: ignore[arg-type]  # attrs.has said so
                if lead_entry and field.name == "text":
                    continue
                stack.append(getattr(obj, field.name))
        else:
            raise TypeError(f"deep_size does not know {type(obj).__name__}")
    return total


def tool_rounds(count: int) -> Iterator[ss.SessionState]:
    """One turn of tool rounds (each: a response with one tool call, its result), yielding the
    state after each round. Host ids have a fixed width, as real ones (``toolu_...``) do."""
    reduce = ss.reduce
    state = ss.Session.create(CONFIG)
    for event in (at.PromptSubmitted(turn_id="t1", message_id="m1", text="Go."),
                  at.Persisted(key="t1/p1")):
        state = reduce(state, event).state
    persist = 1
    for number in range(1, count + 1):
        request_id = f"t1/r{number}"
        call = at.ToolCall(call_id=f"call_{number:08d}", name="read_file", arguments=ARGS)
        state = reduce(state, at.StreamOpened(request_id=request_id)).state
        state = reduce(state, at.StreamCompleted(request_id=request_id, text="",
                                                 finish_reason="tool_use",
                                                 tool_calls=(call,))).state
        state = reduce(state, at.Persisted(key=f"t1/p{persist + 1}")).state
        state = reduce(state, at.ToolFinished(call_id=call.call_id, output=OUTPUT)).state
        state, commands = reduce(state, at.Persisted(key=f"t1/p{persist + 2}"))
        persist += 2
        for command in commands:  # after the first round: the chat's title (TT-2)
            if isinstance(command, at.RequestTitle):
                state = reduce(state, at.TitleGenerated(request_id=command.request_id,
                                                        title="Reading files")).state
        yield state


def state_bytes(counts: list[int]) -> dict[int, int]:
    wanted = set(counts)
    sizes: dict[int, int] = {}
    for number, state in enumerate(tool_rounds(max(counts)), 1):
        if number in wanted:
            sizes[number] = deep_size(state)
    return sizes


# --- import time ------------------------------------------------------------------------------


def import_env(cache: str) -> dict[str, str]:
    """The environment of the import runs: bytecode cached under ``cache`` (as after an install,
    where every module has its ``.pyc``) and nothing written into the source tree. The runs
    start in ``cache`` too, so the package imported is the installed one (or the one on
    ``PYTHONPATH``), never a copy that happens to be in the current directory."""
    env = {name: value for name, value in os.environ.items()
           if name != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    subprocess.run([sys.executable, "-c", "import agentturn, attrs"], env=env, check=True,
                   cwd=cache)
    return env


def import_ms(module: str, env: dict[str, str]) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter (``-X importtime``), in ms."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                            capture_output=True, text=True, check=True, env=env,
                            cwd=env["PYTHONPYCACHEPREFIX"])
    for line in reversed(result.stderr.splitlines()):
        parts = [part.strip() for part in line.split("|")]
        if len(parts) == 3 and parts[2] == module:
            return int(parts[1]) / 1000
    raise RuntimeError(f"no import time for {module}")


# --- the run ----------------------------------------------------------------------------------


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    q1, _, q3 = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else (ordered * 3)
    return f"median {statistics.median(ordered):.2f}, IQR {q1:.2f}-{q3:.2f}, " \
           f"range {ordered[0]:.2f}-{ordered[-1]:.2f}"


def walk_figures(args: argparse.Namespace) -> None:
    """The explorer's and the fuzzer's cost against the reduce they check (paired, interleaved),
    and the deep walk's wall time with one and two workers (see ``walks.py``)."""
    explore_ratios, fuzz_ratios, explore_seconds, fuzz_seconds = [], [], [], []
    for _ in range(args.walk_repeats):
        walk, reduce, transitions = walks.explore_pair()
        explore_ratios.append(walk / reduce)
        explore_seconds.append(walk)
        step, reduce, steps = walks.fuzz_pair()
        fuzz_ratios.append(step / reduce)
        fuzz_seconds.append(step)
    print(f"ratio explore transition/reduce: {statistics.median(explore_ratios):.2f}")
    print(f"  paired ratios explore transition/reduce: {_spread(explore_ratios)} "
          f"(daemon/armed to depth 4, {transitions} transitions, one worker)")
    print(f"ratio fuzz step/reduce: {statistics.median(fuzz_ratios):.2f}")
    print(f"  paired ratios fuzz step/reduce: {_spread(fuzz_ratios)} ({steps} steps)")
    # The same walks in absolute terms: what a user of `agentturn explore` and `fuzz` waits
    # for, which the ratios above do not show (a faster reduce raises them).
    print(f"explore transitions per core per second: "
          f"{1 / statistics.median(explore_seconds):,.0f}")
    print(f"fuzz steps per core per second: {1 / statistics.median(fuzz_seconds):,.0f}")
    if args.explore_depth < 1:
        return
    before = walks.parallel_capacity()
    two, states, transitions = walks.explore_wall(args.explore_depth, 2)
    print(f"explore depth {args.explore_depth} wall seconds, 2 workers: {two:.1f}")
    print(f"  ({states} states, {transitions} transitions, five starts)")
    one, _, _ = walks.explore_wall(args.explore_depth, 1)
    after = walks.parallel_capacity()
    print(f"explore speedup 2 workers/1: {one / two:.2f}")
    print(f"  (one worker: {one:.1f} s wall; cores two processes got at the time, "
          f"before and after: {before:.2f}, {after:.2f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31, help="interleaved repeats")
    parser.add_argument("--loops", type=int, default=5, help="trace replays per repeat")
    parser.add_argument("--size-rounds", type=int, default=1_000_000,
                        help="tool rounds for the second state size")
    parser.add_argument("--import-runs", type=int, default=15, help="fresh interpreters each")
    parser.add_argument("--walk-repeats", type=int, default=5,
                        help="paired explorer and fuzzer measurements")
    parser.add_argument("--explore-depth", type=int, default=6,
                        help="depth of the timed five-start walk (0: skip it)")
    args = parser.parse_args(argv)

    trace = record_trace()
    events = [build(spec) for spec in trace]
    _, cycle = transitions_round()
    count = len(trace) * args.loops
    turn_start, turn_events = one_call_rounds()
    timers: dict[str, Callable[[], float]] = {
        "step": lambda: time_step(trace, args.loops),
        "reduce": lambda: time_reduce(events, args.loops),
        "build": lambda: time_build(trace, args.loops),
        "non-ascii build": lambda: walks.time_text_build(walks.NON_ASCII_OUTPUT, 20 * args.loops),
        "ascii build": lambda: walks.time_text_build(walks.ASCII_OUTPUT, 20 * args.loops),
        "floor": lambda: time_floor(events, args.loops),
        "transitions": lambda: time_transitions(cycle, count),
        "limit": lambda: time_limit(events, args.loops),
        "skeleton": lambda: time_skeleton(trace, args.loops),
        "turn": lambda: time_turn(turn_start, turn_events, args.loops),
        "turn floor": lambda: time_floor(turn_events, args.loops),
    }
    names = list(timers)
    for name in names:  # warm-up, not recorded
        timers[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(args.repeats):
        order = names[repeat % len(names):] + names[:repeat % len(names)]
        for name in order:
            samples[name].append(timers[name]())
    def paired(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(samples[a], samples[b], strict=True)]

    ratios = {other: paired("step", other) for other in ("floor", "transitions", "limit")}

    print(f"python {sys.version.split()[0]}; attrs {attrs.__version__}; "
          f"{len(trace)} events per replay, {args.loops} replays per repeat, "
          f"{args.repeats} interleaved repeats (order rotated); ns per event")
    print(f"trace: {trace_summary(trace)}")
    labels = {"step": "step (build the event + session.reduce)",
              "reduce": "reduce (session.reduce on ready-made events)",
              "build": "event build (the events of the trace, validated)",
              "non-ascii build": "ToolFinished with 100 KB of non-ASCII output",
              "ascii build": "ToolFinished with 100 KB of ASCII output",
              "floor": "floor (isinstance + 12-field attrs construction)",
              "transitions": "transitions (one trigger, bound model)",
              "limit": "limit (__slots__, positional, dict dispatch)",
              "skeleton": "skeleton (build the event + copy turn and session + a command + Step)",
              "turn": "turn (agentturn.reduce alone, ready-made one-call rounds)",
              "turn floor": "floor over those one-call rounds"}
    for name in names:
        print(f"{labels[name]}: {_spread(samples[name])}")
    for other in ("floor", "transitions", "limit"):
        print(f"ratio step/{other}: {statistics.median(ratios[other]):.2f}")
        print(f"  paired ratios step/{other}: {_spread(ratios[other])}")
    for label, (top, bottom) in {"reduce/floor": ("reduce", "floor"),
                                 "event build/floor": ("build", "floor"),
                                 "non-ascii build/ascii build": ("non-ascii build",
                                                                 "ascii build")}.items():
        values = paired(top, bottom)
        print(f"ratio {label}: {statistics.median(values):.2f}")
        print(f"  paired ratios {label}: {_spread(values)}")
    steps_per_second = 1e9 / statistics.median(samples["step"])
    print(f"daemon session steps per core per second: {steps_per_second:,.0f}")
    walk_figures(args)
    # Why step/floor stays where it is: the skeleton is what any step composed of immutable
    # parts pays before its first decision. And the turn alone, on the trace issue 13's
    # "about 4.8" was measured on, for comparison with that figure.
    for label, (top, bottom) in {"skeleton/floor": ("skeleton", "floor"),
                                 "step/skeleton": ("step", "skeleton"),
                                 "turn alone/floor": ("turn", "turn floor")}.items():
        values = paired(top, bottom)
        print(f"ratio {label}: {statistics.median(values):.2f}")
        print(f"  paired ratios {label}: {_spread(values)}")

    small, large = 10, args.size_rounds
    started = time.perf_counter()
    sizes = state_bytes([small, large])
    seconds = time.perf_counter() - started
    print(f"state bytes at {small} rounds: {sizes[small]}")
    print(f"state bytes at {large} rounds: {sizes[large]}")
    print(f"  ({large} tool rounds, {5 * large} events, in {seconds:.1f} s)")

    agentturn_ms, attrs_ms, ratio = [], [], []
    with tempfile.TemporaryDirectory() as cache:
        env = import_env(cache)
        for _ in range(args.import_runs):
            a, b = import_ms("agentturn", env), import_ms("attrs", env)
            agentturn_ms.append(a)
            attrs_ms.append(b)
            ratio.append(a / b)
    print(f"import ms: agentturn {statistics.median(agentturn_ms):.1f}, "
          f"attrs {statistics.median(attrs_ms):.1f} (medians of {args.import_runs})")
    print(f"import ms ratio agentturn/attrs: {statistics.median(ratio):.2f}")
    print(f"  paired import ratios: {_spread(ratio)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
