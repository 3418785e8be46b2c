"""The example's scripted "model": deterministic replies chosen from the prompt text.

Theory of operation
-------------------
A real agent would call an engine here. This one answers from a script so a test (or a person at
an ACP client) can pick a scenario by what they type; a keyword anywhere in the prompt selects it,
checked in this order:

=================  ============================================================================
``todo``           writes a todo list with one item left in progress, then stops: the session's
                   todo stop guard continues twice, then reports exhaustion (with ``flaky``
                   too, the request after the todo list fails with a network error until the
                   turn is continued)
``slowly``         writes ``big.txt`` in chunks (about 0.6 s; ``over N seconds`` in the prompt:
                   N seconds, at most 60) and then runs the tests; a Lead typed meanwhile is
                   answered in the next reply
``max tokens``     a reply cut at the output limit, with a tool call that must never run
``refuse``         a reply withheld by the engine's safety filter
``flaky``          the first request of the turn fails with a network error (the turn ends with
                   a resumable error); once the turn is continued, a plain answer
``write``          writes a file (the first ``name.ext`` in the prompt, else ``notes.txt``) after
                   asking permission, then says whether it was written
anything else      a plain answer
=================  ============================================================================

Whatever the scenario, a request that carries Lead instructions is answered by following them
("Following your instruction: ..."), so a client sees that the model received them.

Pure: no I/O, no clock; :func:`respond` depends on its :class:`Context` only. It imports no ACP.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BIG_FILE",
    "BIG_FILE_CHUNKS",
    "MAX_WRITE_SECONDS",
    "PLAIN_PREFIX",
    "TODOS",
    "Call",
    "Context",
    "Reply",
    "Scenario",
    "big_file_content",
    "respond",
    "scenario_of",
    "written_content",
]

#: The file the ``slowly`` scenario writes, and in how many chunks.
BIG_FILE = "big.txt"
BIG_FILE_CHUNKS = 20
#: The plain answer starts with this.
PLAIN_PREFIX = "Hello! You said: "
#: The todo list of the ``todo`` scenario: one item done, one still in progress.
TODOS: tuple[dict[str, str], ...] = (
    {"id": "1", "content": "port the tokenizer", "status": "completed"},
    {"id": "2", "content": "port the parser", "status": "in_progress"},
)

_FILE_NAME = re.compile(r"[\w-]+\.[A-Za-z0-9]+")
_SECONDS = re.compile(r"over (\d{1,3}(?:\.\d+)?) seconds?")
#: The longest a paced ``slowly`` write takes.
MAX_WRITE_SECONDS = 60.0


class Scenario(enum.Enum):
    """What the scripted model does for a prompt."""

    #: A todo list left unfinished: the guard continues.
    TODO = "todo"
    #: A long file write, then a test run.
    SLOW_WRITE = "slowly"
    #: Cut at the output limit.
    MAX_TOKENS = "max tokens"
    #: Withheld by the safety filter.
    REFUSE = "refuse"
    #: A network error until the turn is continued.
    FLAKY = "flaky"
    #: A file write that needs permission.
    WRITE = "write"
    #: A plain answer.
    PLAIN = "plain"


@dataclass(frozen=True)
class Call:
    """One tool call the model asks for (the adapter gives it its id)."""

    name: str
    arguments: dict[str, Any]
    needs_permission: bool = False


@dataclass(frozen=True)
class Reply:
    """One model response."""

    text: str
    finish_reason: str = "end_turn"
    calls: tuple[Call, ...] = ()
    #: The request fails with this network error instead (no response at all).
    failure: str | None = None


@dataclass(frozen=True)
class Context:
    """What the model sees of the conversation when a request opens."""

    #: The prompt that started the turn.
    prompt: str
    #: 1 for the turn's first request, then 2, 3 ...
    round: int
    #: The texts of the Lead instructions this request carries, in save order.
    leads: tuple[str, ...] = ()
    #: The last user-role message is a todo stop guard continuation.
    after_guard_prompt: bool = False
    #: (tool name, result status) of each tool result since the last response.
    results: tuple[tuple[str, str], ...] = field(default=())
    #: The user asked to continue this turn after it ended with a resumable error.
    continued: bool = False


def scenario_of(prompt: str) -> Scenario:
    """The scenario a prompt selects (keywords checked in the documented order)."""
    text = prompt.lower()
    for scenario in (Scenario.TODO, Scenario.SLOW_WRITE, Scenario.MAX_TOKENS, Scenario.REFUSE,
                     Scenario.FLAKY, Scenario.WRITE):
        if scenario.value in text:
            return scenario
    return Scenario.PLAIN


def big_file_content() -> str:
    """What the ``slowly`` scenario writes: one line per chunk."""
    return "".join(f"line {n} of {BIG_FILE_CHUNKS}\n" for n in range(1, BIG_FILE_CHUNKS + 1))


def written_content(prompt: str) -> str:
    """What the ``write`` scenario writes."""
    return f"Written by the agentturn ACP example for: {prompt.strip()}\n"


def _pace(prompt: str) -> dict[str, float]:
    """``over N seconds`` in the prompt: the chunked write's delay between chunks."""
    match = _SECONDS.search(prompt)
    if match is None:
        return {}
    return {"delay": min(float(match.group(1)), MAX_WRITE_SECONDS) / BIG_FILE_CHUNKS}


def _target(prompt: str) -> str:
    match = _FILE_NAME.search(prompt)
    return match.group(0) if match else "notes.txt"


def respond(context: Context) -> Reply:
    """The scripted reply to one model request."""
    if context.leads:
        return Reply(text="Following your instruction: " + " / ".join(context.leads))
    scenario = scenario_of(context.prompt)
    first = context.round == 1
    if scenario is Scenario.TODO:
        flaky = Scenario.FLAKY.value in context.prompt.lower()
        if flaky and context.continued:
            pass  # the todo list was written before the error: go on from there
        elif first:
            return Reply(text="I'll track this with a todo list.", finish_reason="tool_use",
                         calls=(Call("todo_write", {"todos": [dict(t) for t in TODOS]}),))
        if flaky and not context.continued:
            return Reply(text="", failure="connection reset by the scripted engine")
        if context.after_guard_prompt:
            return Reply(text="Still working on the parser; stopping for now.")
        return Reply(text="The tokenizer is ported; I'll stop here.")
    if scenario is Scenario.SLOW_WRITE:
        if first:
            return Reply(text=f"Writing {BIG_FILE}, then running the tests.",
                         finish_reason="tool_use", calls=(
                             Call("write_file", {"path": BIG_FILE, "content": big_file_content(),
                                                 "chunks": BIG_FILE_CHUNKS,
                                                 **_pace(context.prompt)}),
                             Call("run_tests", {})))
        return Reply(text=f"{BIG_FILE} is written and the tests pass.")
    if scenario is Scenario.MAX_TOKENS:
        return Reply(text="This answer is cut off mid", finish_reason="max_tokens",
                     calls=(Call("write_file", {"path": "never.txt", "content": "x"}),))
    if scenario is Scenario.REFUSE:
        return Reply(text="", finish_reason="content_filter")
    if scenario is Scenario.FLAKY:
        if not context.continued:
            return Reply(text="", failure="connection reset by the scripted engine")
        return Reply(text="Continued after the network error: " + context.prompt.strip())
    if scenario is Scenario.WRITE:
        path = _target(context.prompt)
        if first:
            return Reply(text=f"I'll write {path}.", finish_reason="tool_use", calls=(
                Call("write_file", {"path": path, "content": written_content(context.prompt)},
                     needs_permission=True),))
        statuses = {status for _, status in context.results}
        if statuses == {"executed"}:
            return Reply(text=f"Wrote {path}.")
        return Reply(text=f"Understood: {path} was not written.")
    return Reply(text=PLAIN_PREFIX + context.prompt.strip())
