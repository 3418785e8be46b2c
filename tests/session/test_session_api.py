"""The session as a host author meets it: one class per concept across the parts, what its
commands say (which authority halted a turn, where a turn came from), ``waiting_for``, the graph
it draws, and the shape of a step (only the message loop calls a part's reducer).
"""

from __future__ import annotations

import math

import pytest
from session_host import PROMPT, Host, say

import agentturn as at
from agentturn import guard as g
from agentturn import session as se


def test_one_class_per_concept_across_the_parts() -> None:
    """``HardStopped`` and ``ClientAttached`` are each one class, whichever part's namespace a
    host imports them from; ``HardStopKind`` is one enum."""
    assert at.HardStopped is se.HardStopped is g.HardStopped
    assert se.ClientAttached is g.ClientAttached
    assert at.HardStopKind is g.HardStopKind
    assert not hasattr(at, "HaltTurn") and not hasattr(g, "HardStop")


@pytest.mark.req("SG-S1", "SG-S3")
def test_a_halted_turn_says_which_authority_halted_it() -> None:
    """req: SG-S1, SG-S3 — a ``HardStopped`` the host sends halts the running turn with a
    ``HALTED`` outcome whose ``halt_kind`` is the stop's kind and whose message is its reason."""
    host = Host()
    host.send(PROMPT)  # no response scripted: the request waits
    host.send(at.HardStopped(kind=at.HardStopKind.LOOP_PROTECTION, reason="Loop protection."))
    (end,) = host.commands(at.EndTurn)
    assert (end.outcome.kind, end.outcome.halt_kind, end.outcome.message) == (
        at.OutcomeKind.HALTED, at.HardStopKind.LOOP_PROTECTION, "Loop protection.")
    assert host.state.guard.phase is g.GuardPhase.SUSPENDED


@pytest.mark.req("BG-4")
def test_end_turn_says_where_the_turn_came_from() -> None:
    """req: BG-4 — a prompt, a queued prompt and a cron turn each end with their origin; a
    continued turn keeps the origin of the turn it continues."""
    host = Host(guard=g.GuardConfig(daemon=True))
    host.send(PROMPT)  # its request waits
    host.send(se.PromptQueued(prompt_id="q1", message_id="mq", text="queued"),
              se.AutomaticTurnDue(turn_id="c1", message_id="mc", text="cron",
                                  kind=se.AutomaticKind.CRON, source_id="task"))
    host.responses.extend([say("one"), say("two"), say("three")])
    host.answer(host.held.pop())
    host.send()
    assert [(c.turn_id, c.origin) for c in host.commands(at.EndTurn)] == [
        ("t1", at.TurnOrigin.PROMPT), ("q1", at.TurnOrigin.QUEUED_PROMPT),
        ("c1", at.TurnOrigin.CRON)]


def test_waiting_for_names_answers_the_client_held_prompt_and_a_retry() -> None:
    """``waiting_for`` lists outstanding answers as ``ANSWER`` entries (the same as
    ``outstanding``), a prompt the client reported holding, a queued prompt still arriving, and
    the user's retry of a turn that ended with a resumable error; ``held`` lists what waits."""
    host = Host(retry_window=math.inf)
    host.send(PROMPT)
    request = host.held.pop()
    waits = se.waiting_for(host.state)
    assert [(w.kind, w.command, w.answer_id) for w in waits] == [
        (se.WaitKind.ANSWER, at.RequestModelStream, "t1/r1")]
    host.send(se.PromptQueued(prompt_id="q1", message_id="mq", text="part", complete=False),
              at.StreamFailed(request_id=request.request_id, error="503"))
    assert {(w.kind, w.answer_id) for w in se.waiting_for(host.state)} == {
        (se.WaitKind.PROMPT_CONTENT, "q1"), (se.WaitKind.RETRY, "t1")}
    assert se.held(host.state) == (se.Held(turn_id="q1", kind="queued_prompt"),)


def test_only_the_message_loop_calls_a_parts_reducer() -> None:
    """No handler of the session re-enters a part: the package's only calls of the turn's or
    the guard's reducers are the two in ``translate.run`` (the message loop), so the order in
    which parts hear things is the inbox's order; and the direct lane's, which build the plain
    steps the loop would make, calling each part once at the top of the step
    (``tests/session/test_lane.py`` proves them equal). (A source scan: it fails if anyone adds
    a direct call.)"""
    import ast
    from pathlib import Path

    root = Path(se.__file__).parent
    calls: list[str] = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if (name in ("reduce_into", "guard_into", "turn_into", "reduce")
                        and path.name != "__init__.py"):
                    owner = getattr(func, "value", None)
                    calls.append(f"{path.name}:{name}:{getattr(owner, 'id', '')}")
    assert sorted(calls) == ["lane.py:guard_into:", "lane.py:turn_into:", "lane.py:turn_into:",
                             "lane.py:turn_into:", "translate.py:guard_into:",
                             "translate.py:reduce_into:turn_part"]


def test_the_session_graph_is_drawn_from_its_table() -> None:
    """``agentturn diagram session`` draws the declared graph."""
    from agentturn.tools.cli import main

    assert main(["diagram", "session"]) == 0
