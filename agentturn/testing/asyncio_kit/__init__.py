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

import asyncio
import sys
from typing import Any

from hypothesis import Phase, given, seed
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.errors import Flaky

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
from .pasting import spec_source
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


def _places(spec: AsyncSpec, caller: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Where the spec may have a name: the caller's module, then the host's."""
    effects = spec.make_effects
    owner = getattr(effects, "__self__", None)
    host = sys.modules.get(getattr(owner if isinstance(owner, type) else effects,
                                   "__module__", "") or "")
    return [*([caller] if caller is not None else []),
            *([vars(host)] if host is not None else [])]


def report(spec: AsyncSpec, run: Run, violations: list[str],
           caller: dict[str, Any] | None = None) -> str:
    """The broken rules, what happened, and the program as a test to paste (the spec by its
    name in ``caller``'s module or the host's, else written out: :mod:`.pasting`)."""
    moves = "".join(f"        {move!r},\n" for move in run.program)
    imports = {"from agentturn.testing.asyncio_kit import answer, replay, tick, user"}
    spec_text = spec_source(spec, _places(spec, caller), imports)
    return "\n".join([
        *violations, "",
        *run.log, "",
        f"The schedule, as a test ({len(run.program)} moves):", "",
        *sorted(imports), "",
        "def test_the_async_kit_finding() -> None:",
        f"    replay({spec_text}, [",
        moves + "    ])"])


def _caller() -> dict[str, Any] | None:
    """The globals of the module that called :func:`check` or :func:`replay`."""
    frame = sys._getframe(2)
    return frame.f_globals if frame is not None else None


def _a_spec(spec: Any, what: str) -> None:
    if not isinstance(spec, AsyncSpec):
        raise TypeError(f"{what}(spec, ...): spec must be an AsyncSpec, got "
                        f"{type(spec).__name__}")


def _not_in_a_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{what}() runs the host on an event loop of its own: call it from a "
                       "plain (synchronous) test function, not from async code")


def replay(spec: AsyncSpec, moves: list[Move]) -> None:
    """Play ``moves`` (then the calm world and the close) against the host; a broken rule
    raises ``AssertionError`` with the rules and what happened."""
    _not_in_a_loop("replay")
    _a_spec(spec, "replay")
    if not isinstance(moves, list | tuple) or not all(isinstance(m, Move) for m in moves):
        raise TypeError("replay(spec, moves): moves must be a list of moves (answer(...), "
                        f"user(...), tick()), got {type(moves).__name__}")
    caller = _caller()
    run = Run(spec, Listed(moves), steps=len(moves), verbose=True)
    violations = run.play()
    if violations:
        raise AssertionError(report(spec, run, violations, caller))


def check(spec: AsyncSpec, settings: Settings | None = None, *,
          run_seed: int | None = None) -> None:
    """Check the host under hypothesis (``settings``: :data:`agentturn.testing.profiles.CI`
    by default, whose ``stateful_step_count`` is the most moves per example); a broken rule
    raises ``AssertionError`` naming it, with the shrunk program as a test to paste."""
    from ..profiles import CI

    _not_in_a_loop("check")
    _a_spec(spec, "check")
    if settings is not None and not isinstance(settings, Settings):
        raise TypeError("check(spec, settings): settings must be hypothesis settings (for "
                        f"example settings(profiles.CI, max_examples=50)), got "
                        f"{type(settings).__name__}")
    caller = _caller()
    chosen = CI if settings is None else settings
    steps = chosen.stateful_step_count
    # Without hypothesis's explain phase: it traces every line of the shrink's runs (about five
    # times the cost of a run) to name the lines only failing runs reach, which the kit's own
    # report (the rules, the moves, the program) says better.
    chosen = Settings(chosen, phases=[phase for phase in chosen.phases
                                      if phase is not Phase.explain])

    found: list[str] = []  # what failing runs found, for a finding that does not replay

    @Settings(chosen)
    @given(st.data())
    def the_async_kit(data: Any) -> None:
        verbose = _final()
        run = Run(spec, Drawn(data, steps, TABLE), steps=steps, verbose=verbose)
        violations = run.play()
        if violations:
            found.append(violations[0])
            raise AssertionError(report(spec, run, violations, caller) if verbose
                                 else "\n".join(violations))

    test = the_async_kit if run_seed is None else seed(run_seed)(the_async_kit)
    try:
        test()
    except Flaky as flaky:
        raise AssertionError(
            "The same schedule gave different results when played again, so the finding "
            "cannot be replayed: does the host keep state between examples (a module-level "
            "cache, a counter, a client made once)? make_effects(world) is called once per "
            "example and must build all of the host's state afresh.\n\nWhat the first "
            f"failing run found: {found[0] if found else flaky}") from flaky
