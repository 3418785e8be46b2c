"""The driver under a schedule hypothesis draws (issue 33, item 6).

Hypothesis draws the world (which effect answers after how many scheduling points, raises, or
hangs until the driver cancels it; what the model answers: text, a read, a write, a todo
list; what the user answers a dialog, what the Stop hooks say, what the client drains) and the
user (prompts, queued prompts, Lead, Stop, renames, clients coming and going, background work,
time passing, each after some scheduling points). One run drives a real ``SessionDriver`` on
asyncio in debug mode, with warnings as errors, then finishes: the world stops hanging, the
user presses Stop, time passes, the session quiesces, the driver closes. Checked on every run:

* every awaited answer arrives, or its failure event is fed, or the command was cancelled by
  the reducer (``CancelStream``, ``DismissPermission``, ``CancelTimer``) or released by it
  (no longer ``outstanding``), and nothing is answered after a cancel unless absorbed;
* a tool call is answered exactly once;
* never two model streams at once;
* no task left behind (no effect running, no asyncio task but the main one);
* the session's three invariants on every step of the trace (no text lost, never stuck, the
  hard bound), and ``check`` finds the trace clean.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import anyio
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from world import BACKEND, Act, World

import agentturn as at
from agentturn import aio
from agentturn import guard as g
from agentturn import session as se
from agentturn.session.invariants import HardBound, lost_texts, stuck
from agentturn.tools.check import check
from agentturn.trace import read_trace

CONFIG = se.SessionConfig(chat_id="chat", guard=g.GuardConfig(todo_stop_guard=True, daemon=True),
                          stop_hooks=True)

def acts(*values: str, hang: bool = True, ok: int = 3) -> st.SearchStrategy[list[Act]]:
    """One effect's script: how each call goes (``ok`` times as often fine as failing), and
    what it answers."""
    kinds = ["ok"] * ok + ["raise", *(["hang"] if hang else [])]
    act = st.builds(Act, kind=st.sampled_from(kinds), pause=st.integers(0, 4),
                    value=st.sampled_from(values or ("",)))
    return st.lists(act, max_size=12)


#: A script per effect. What nothing cancels never hangs (a hang there is the world's fault,
#: not the driver's: a save, a title, the Stop hooks).
plans = st.fixed_dictionaries({
    "persist": acts(hang=False, ok=12),  # a failed save ends the turn: rarer
    "model": acts("", "read", "read", "write", "todo_write", "todo_write"),
    "permission": acts("allow", "deny"),
    "tool": acts(),
    "lead": acts(hang=False, ok=6),
    "title": acts(hang=False),
    "hooks": acts("pass", "block", hang=False),
    "drain": acts("", "msg"),
})

user_actions = st.tuples(
    st.integers(0, 80),  # scheduling points before the action
    st.sampled_from(["prompt", "queue", "queue_partial", "complete", "abort", "lead", "stop",
                     "rename", "attach", "detach", "advance", "background", "background_end"]))


def answer_id(event: at.Event) -> str | None:
    """The id an answering event echoes (None for the host's own input)."""
    for field in ("key", "request_id", "call_id", "lead_id", "drain_id", "run_id"):
        if type(event).__name__ in aio.ANSWERS and hasattr(event, field):
            return str(getattr(event, field))
    return None


TERMINAL = {"StreamCompleted", "StreamFailed", "CompactionFailed", "TokenLimitRejected"}
CANCELS = {"CancelStream": ("RequestModelStream", "request_id"),
           "DismissPermission": ("AskPermission", "call_id"),
           "CancelTimer": ("StartTimer", "key")}


async def user(d: aio.SessionDriver, clock: aio.ManualClock,
               script: list[tuple[int, str]]) -> None:
    partial: list[str] = []
    for number, (points, action) in enumerate(script, 1):
        for _ in range(points):
            await anyio.lowlevel.checkpoint()
        event: at.Event | None = None
        if action == "prompt":
            event = at.PromptSubmitted(turn_id=f"p{number}", message_id=f"pm{number}",
                                       text=f"prompt {number}")
        elif action in ("queue", "queue_partial"):
            complete = action == "queue"
            event = se.PromptQueued(prompt_id=f"q{number}", message_id=f"qm{number}",
                                    text=f"queued {number}", complete=complete)
            if not complete:
                partial.append(f"q{number}")
        elif action == "complete" and partial:
            event = se.PromptCompleted(prompt_id=partial.pop(0))
        elif action == "abort" and partial:
            event = se.PromptAborted(prompt_id=partial.pop())
        elif action == "lead":
            event = at.LeadSubmitted(chat_id="chat", lead_id=f"l{number}", text="Use tabs")
        elif action == "stop":
            event = at.StopPressed()
        elif action == "rename":
            event = at.ManualRename(title="My chat")
        elif action == "attach":
            event = se.ClientAttached(client_id="c1")
        elif action == "detach":
            event = se.ClientDetached(client_id="c1")
        elif action == "background":
            event = se.BackgroundStarted(kind=se.BackgroundKind.SHELL, item_id="b1")
        elif action == "background_end":
            event = se.BackgroundEnded(item_id="b1", notification_id=None)
        elif action == "advance":
            clock.advance(2.0)
        if event is not None:
            d.send_nowait(event)
    for prompt_id in partial:
        d.send_nowait(se.PromptCompleted(prompt_id=prompt_id))


async def within(points: int, wait: Any) -> bool:
    """Whether ``wait()`` returns within ``points`` scheduling points (no clock involved)."""
    done = False

    async def waiter() -> None:
        nonlocal done
        await wait()
        done = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        for _ in range(points):
            if done:
                break
            await anyio.lowlevel.checkpoint()
        tg.cancel_scope.cancel()
    return done


async def finish(d: aio.SessionDriver, world: World, clock: aio.ManualClock) -> None:
    """The world stops hanging (what it answers is still drawn); whatever still hangs, the user
    stops; time runs out every timer; until the session rests (a hang here is a bug:
    ``fail_after`` fails the run)."""
    world.calm = True
    with anyio.fail_after(20):
        for _ in range(50):
            if not await within(400, d.quiescent):
                d.send_nowait(at.StopPressed())  # something hangs: the user stops it
                continue
            if not any(w.command is se.StartTimer for w in se.waiting_for(d.state)):
                return
            clock.advance(1000.0)
        raise AssertionError(f"the session never came to rest: {d.state.phase}")


def check_answers(trace: Any) -> None:
    """Every awaited answer came, failed, was cancelled or released, and nothing answers a
    command after its cancel unless the reducer absorbed it."""
    state = se.Session.create(CONFIG)
    awaited: dict[tuple[str, str], int] = {}  # (command, answer id) -> step asked
    cancelled: set[tuple[str, str]] = set()
    tool_answers: dict[str, int] = {}
    for step in trace.steps:
        event, commands = step.event, step.commands
        state, _ = se.reduce(state, event)
        rid = answer_id(event)
        if rid is not None:
            name = type(event).__name__
            absorbed = any(isinstance(c, at.StaleAnswerIgnored) for c in commands)
            for command, key in list(awaited):
                cls = getattr(at, command, None) or getattr(se, command)
                if key == rid and name in cls.answered_by:
                    if (command, key) in cancelled:
                        assert absorbed, f"step {step.number}: {name} after its cancel"
                    if command != "RequestModelStream" or name in TERMINAL:
                        del awaited[(command, key)]
            if name == "ToolFinished":
                tool_answers[rid] = tool_answers.get(rid, 0) + 1
        for command in commands:
            cname = type(command).__name__
            if isinstance(command, at.AwaitingCommand):
                awaited[(cname, str(command.answer_id))] = step.number
                cancelled.discard((cname, str(command.answer_id)))
                if isinstance(command, at.ExecuteTool):
                    tool_answers.setdefault(command.call.call_id, 0)
            elif cname in CANCELS:
                target, field = CANCELS[cname]
                pair = (target, str(getattr(command, field)))
                if pair in awaited:
                    cancelled.add(pair)
                    del awaited[pair]
        outstanding = {(o.command.__name__, o.answer_id) for o in se.outstanding(state)}
        for pair in list(awaited):
            if pair not in outstanding:
                del awaited[pair]  # released: the reducer no longer waits for it
    assert not awaited, f"never answered: {sorted(awaited)}"
    assert not se.outstanding(state), "the closed session still awaits an answer"
    assert all(count == 1 for count in tool_answers.values()), tool_answers


def check_invariants(trace: Any) -> None:
    """The session's three invariants, on every step the driver took."""
    state, bound = se.Session.create(CONFIG), HardBound()
    for step in trace.steps:
        after, commands = se.reduce(state, step.event)
        problems = lost_texts(state, step.event, after, commands) + stuck(after)
        bound, broken = bound.step(state, step.event, after, commands)
        assert not problems + broken, f"step {step.number}: {problems + broken}"
        state = after


@pytest.mark.filterwarnings("error")
# A quarter of the profile's examples (50 under ci: a few seconds), at least five.
@settings(max_examples=max(settings().max_examples // 4, 5))
@given(plan=plans, actions=st.lists(user_actions, max_size=10))
def test_the_driver_keeps_every_promise_under_any_schedule(
        plan: dict[str, list[Act]], actions: list[tuple[int, str]]) -> None:
    """Whatever the world and the user do, and when: every answer comes or fails, one stream at
    a time, no task left, the invariants hold and the trace checks clean."""
    world, clock, out = World(plan=plan), aio.ManualClock(), io.StringIO()
    tasks_left: list[int] = []
    refused: list[object] = []

    async def main() -> None:
        async with aio.SessionDriver(CONFIG, world.effects(), trace=out, clock=clock,
                                     max_output_tokens=1000) as d:
            await d.send(se.ClientAttached(client_id="c1"))
            await d.send(at.PromptSubmitted(turn_id="t0", message_id="m0", text="Start"))
            await user(d, clock, actions)
            await finish(d, world, clock)
        refused.extend(d.refused)
        if BACKEND == "asyncio":  # (on trio a task cannot outlive its nursery)
            tasks_left.append(len(asyncio.all_tasks()) - 1)

    if BACKEND == "asyncio":
        anyio.run(main, backend_options={"debug": True})
        assert tasks_left == [0]
    else:
        anyio.run(main, backend=BACKEND)
    assert world.running == 0
    assert world.most_streams_open <= 1
    trace = read_trace(out.getvalue())
    check_answers(trace)
    check_invariants(trace)
    report = check(trace)
    assert report.ok, report
    seen = {type(x).__name__ for step in trace.steps for x in (step.event, *step.commands)}
    for name in sorted(seen & NOTABLE):
        event(name)  # what the runs reached: --hypothesis-show-statistics
    if any(isinstance(c, se.Publish) and c.entry.kind is se.EntryKind.GUARD_CHUNK
           for step in trace.steps for c in step.commands):
        event("a guard continuation")
    if refused:
        event("input the reducer refused")


#: What a run should reach often: the statistics name how often each was seen.
NOTABLE = {"CancelStream", "DismissPermission", "CancelTool", "TimerFired", "CancelTimer",
           "PersistFailed", "StreamFailed", "LeadSaveFailed", "StopHookFailed", "ReturnDraft",
           "PromptRefused", "RestoreMidTurnMessages", "StaleAnswerIgnored", "UnsavedRecords",
           "ContinueWithGuardPrompt", "Publish", "LeadUnapplied", "AutomaticTurnDropped",
           "CloseSession", "RunStopHooks", "MidTurnDrained", "ToolFinished", "EndTurn"}
