"""The spec kit for asyncio hosts on the driver: the host's real effects, the world behind them
faked, and hypothesis choosing the schedule.

Theory of operation
-------------------
A host on :mod:`agentturn.aio` writes effects, one async function per kind of awaiting command,
against its services. It hands the kit the same effects, built against the kit's world
(``make_effects(world) -> aio.Effects``: :class:`AsyncSpec`); the world's clients
(:class:`~.world.AsyncWorld`: storage, engine, tools, user, namer, client, hooks, clock) are
async fakes whose every call is a job the schedule ends. :func:`check` runs the real driver
(:class:`agentturn.aio.SessionDriver`, or :class:`agentturn.aio.TurnDriver` for a spec whose
``config`` is a :class:`~agentturn.TurnConfig`) on asyncio under hypothesis: at each point
where every task is blocked, one move (a job ends with an outcome, the user acts, time
passes), then the rules (:mod:`.world`, :mod:`.runner`). Same seed, same run: no wall
clock, one event loop, decisions only at quiescent points. A failure shrinks to a short
program, printed as a test to paste:
:func:`replay` runs a program written as ``[user("prompt"), answer("storage#1", "ok"), ...]``.

Loading this package loads anyio and hypothesis; ``import agentturn.testing`` does not load it.
"""

from __future__ import annotations

import sys
from typing import Any

from hypothesis import given, seed
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context

from ..received import (
    READERS,
    Sent,
    SentAssistant,
    SentOther,
    SentToolResult,
    SentUser,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
)
from .reference import ReferenceHost, chat_messages, reference_effects
from .runner import TABLE, AsyncSpec, Run
from .schedule import Drawn, Listed, Move, ProgramMismatch, answer, tick, user
from .world import TOOLS, AsyncWorld, ContextTooLong, StorageError, WorldError, WorldTool

__all__ = ["READERS", "TOOLS", "AsyncSpec", "AsyncWorld", "ContextTooLong", "Move",
           "ProgramMismatch", "ReferenceHost", "Sent", "SentAssistant", "SentOther",
           "SentToolResult", "SentUser", "StorageError", "WorldError", "WorldTool", "answer",
           "chat_messages", "check", "from_anthropic", "from_openai_chat",
           "from_openai_responses", "reference_effects", "replay", "tick", "user"]


def _final() -> bool:
    try:
        return bool(current_build_context().is_final)
    except Exception:  # outside a hypothesis run
        return True


def _spec_name(spec: AsyncSpec) -> tuple[str, str] | None:
    """The module and the name under which ``spec`` is defined, when its host's module (or its
    caller's) holds it as a module-level name."""
    effects = spec.make_effects
    owner = getattr(effects, "__self__", None)
    module = sys.modules.get(getattr(owner if isinstance(owner, type) else effects,
                                     "__module__", "") or "")
    if module is None:
        return None
    for name, value in vars(module).items():
        if value is spec and not name.startswith("_"):
            return module.__name__, name
    return None


def report(spec: AsyncSpec, run: Run, violations: list[str]) -> str:
    """The broken rules, what happened, and the program as a test to paste."""
    moves = "".join(f"        {move!r},\n" for move in run.program)
    named = _spec_name(spec)
    if named is not None:  # a spec the host's module names: the test names it too
        module, name = named
        imports, spec_text = f"from {module} import {name}", name
    else:
        effects = spec.make_effects
        owner = getattr(effects, "__self__", None)  # a classmethod: name it on its class
        name = (f"{owner.__name__}.{effects.__name__}" if isinstance(owner, type)
                else getattr(effects, "__qualname__", repr(effects)))
        module = getattr(owner if isinstance(owner, type) else effects, "__module__",
                         "your_host")
        options = "" if spec.request_format == "openai-chat" else \
            f", request_format={spec.request_format!r}"
        imports = f"from {module} import {name.split('.')[0]}"
        spec_text = f"AsyncSpec(make_effects={name}{options})"
    return "\n".join([
        *violations, "",
        *run.log, "",
        f"The schedule, as a test ({len(run.program)} moves):", "",
        "from agentturn.testing.asyncio_kit import AsyncSpec, answer, replay, tick, user",
        imports, "",
        "def test_the_async_kit_finding() -> None:",
        f"    replay({spec_text}, [",
        moves + "    ])"])


def replay(spec: AsyncSpec, moves: list[Move]) -> None:
    """Play ``moves`` (then the calm world and the close) against the host; a broken rule
    raises ``AssertionError`` with the rules and what happened."""
    run = Run(spec, Listed(moves), steps=len(moves), verbose=True)
    violations = run.play()
    if violations:
        raise AssertionError(report(spec, run, violations))


def check(spec: AsyncSpec, settings: Settings | None = None, *,
          run_seed: int | None = None) -> None:
    """Check the host under hypothesis (``settings``: :data:`agentturn.testing.profiles.CI`
    by default, whose ``stateful_step_count`` is the most moves per example); a broken rule
    raises ``AssertionError`` naming it, with the shrunk program as a test to paste."""
    from ..profiles import CI

    chosen = CI if settings is None else settings
    steps = chosen.stateful_step_count

    @Settings(chosen)
    @given(st.data())
    def the_async_kit(data: Any) -> None:
        verbose = _final()
        run = Run(spec, Drawn(data, steps, TABLE), steps=steps, verbose=verbose)
        violations = run.play()
        if violations:
            raise AssertionError(report(spec, run, violations) if verbose
                                 else "\n".join(violations))

    test = the_async_kit if run_seed is None else seed(run_seed)(the_async_kit)
    test()
