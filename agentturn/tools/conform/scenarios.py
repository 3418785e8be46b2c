"""The scenarios, named by requirement ID: what the server answers, and how a run is judged.

Theory of operation
-------------------
A :class:`Scenario` is a script (the list of replies the server gives, one per request) and a
judge (from what was observed, a list of :class:`Check`, each tagged with the requirement it
tests). A fixed scenario has one script per mode; a drawn one (``draw``) has a hypothesis
strategy of scripts, for rules that are general: the suite runs the runtime on several drawn
scripts and, when one fails, keeps the example hypothesis shrank it to. A scenario whose script
cannot be said in a mode (cut arguments in a non-streamed Anthropic reply, which carries
arguments as an object) returns ``None`` there: not applicable.

The judges read only what the suite observed and the runner's :class:`~.protocol.RunResult`:

* which tools ran, with which arguments, in which order they started, and whether two
  calls' [start, end] intervals overlapped (the tools record that themselves; in the TL-4
  scenarios each call holds :data:`TL4_HOLD` seconds, so concurrency shows whatever its
  scheduling);
* how many requests the server received (a second corrective retry is a third request);
* whether the caller got an ordinary success, and the finish reason it was shown.

"Surfaced" (TL-7, TL-9, TL-10, TL-6's error) means the caller did not get an ordinary success;
TL-10 additionally asks for the engine's finish reason, unchanged, as the API spelled it (a
mislabelled cut keeps its ``tool_calls`` label: the requirement is to keep what the engine
said, while TL-9 is to not believe it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .protocol import Mode, RunResult, ToolRecord
from .server import LABELS, Call, Finish, Reply, RequestRecord

if TYPE_CHECKING:  # hypothesis is imported only when a drawn scenario runs
    from hypothesis.strategies import SearchStrategy

__all__ = ["SCENARIOS", "Check", "Evidence", "Scenario"]


@dataclass(frozen=True)
class Check:
    """One judged fact of a run."""

    requirement: str
    passed: bool
    says: str

    def to_dict(self) -> dict[str, Any]:
        return {"requirement": self.requirement, "passed": self.passed, "says": self.says}


@dataclass
class Evidence:
    """What one run did: the script, the requests, the tools that ran, what the caller got."""

    script: list[Reply]
    requests: list[RequestRecord]
    tools: list[ToolRecord]
    result: RunResult
    seconds: float
    mode: Mode

    def to_dict(self) -> dict[str, Any]:
        return {"script": [r.describe(self.mode.api) for r in self.script],
                "requests": [r.to_dict() for r in self.requests],
                "tools": [t.to_dict() for t in self.tools],
                "result": self.result.to_dict(), "seconds": round(self.seconds, 3)}


Judge = Callable[[Mode, list[Reply], Evidence], list[Check]]


@dataclass(frozen=True)
class Scenario:
    """A scenario: its id (requirement first), what it checks, its script or strategy."""

    id: str
    requirements: tuple[str, ...]
    title: str
    prompt: str
    judge: Judge
    script: Callable[[Mode], list[Reply] | None] | None = None
    draw: Callable[[Mode], SearchStrategy[list[Reply]] | None] | None = None
    #: Why the scenario is not applicable where ``script``/``draw`` returns None.
    not_applicable: str = ""
    notes: str = field(default="")
    #: Seconds each tool call holds: long enough, in the TL-4 scenarios, that calls a runtime
    #: runs concurrently overlap whatever its scheduling (judged by [start, end] intervals).
    tool_delay: float = 0.003


# --- building scripts -------------------------------------------------------------------------


def _args(**values: str) -> str:
    return json.dumps(values, ensure_ascii=False)


def write(call_id: str, path: str, content: str) -> Call:
    return Call(call_id, "write_file", _args(path=path, content=content))


def read(call_id: str, path: str) -> Call:
    return Call(call_id, "read_file", _args(path=path))


DONE = "Done: the work is finished."
#: A reply that ends the turn normally, after the calls.
FINISH = Reply(text=DONE, finish="stop")
#: Arguments that never parse, well below the limit: a malformed format (TL-6), not a cut.
MALFORMED = '{"path": "malformed.txt", "content": \'single quotes are not JSON\'}'
REPORT = "# Report\n\nThe first finding is that the cache is never invalidated."


def _cuttable(mode: Mode) -> bool:
    """Cut arguments can be said: a streamed reply, or a non-streamed OpenAI one (a string)."""
    return mode.stream or mode.api == "openai-chat"


# --- judging ----------------------------------------------------------------------------------


def _ran(evidence: Evidence) -> list[tuple[str, Any]]:
    def parsed(arguments: Any) -> Any:
        if isinstance(arguments, str):
            try:
                return json.loads(arguments)
            except ValueError:
                return arguments
        return arguments
    return [(t.name, parsed(t.arguments)) for t in evidence.tools]


def _show(calls: Sequence[tuple[str, Any]]) -> str:
    if not calls:
        return "no tool"
    return "; ".join(f"{name}({json.dumps(args, ensure_ascii=False)[:60]})"
                     for name, args in calls)


def _caller_got(result: RunResult) -> str:
    if result.success:
        return f"an ordinary success (text {_quote(result.text)})"
    what = result.outcome or "a failure"
    return f"{what}" + (f": {_quote(result.error)}" if result.error else "")


def _quote(text: str | None) -> str:
    if text is None:
        return "none"
    return repr(text if len(text) <= 60 else text[:59] + "…")


def _compare(ran: list[tuple[str, Any]], expected: list[tuple[str, Any]]) -> str:
    """``ran`` against ``expected``, down to the first difference."""
    head = f"{len(ran)} call(s) ran, {len(expected)} scripted"
    if ran == expected:
        return head + ", as the model sent them"
    for index, (got, want) in enumerate(zip(ran, expected, strict=False)):
        if got != want:
            return (f"{head}; call {index + 1} ran as {_show([got])}, the model sent "
                    f"{_show([want])}")
    if len(ran) < len(expected):
        return f"{head}; call {len(ran) + 1}, {_show([expected[len(ran)]])}, never ran"
    return f"{head}; an unscripted call ran: {_show([ran[len(expected)]])}"


def completes(requirement: str) -> Judge:
    """The run does every scripted call, in the model's order, one at a time, sends exactly
    the scripted requests and hands the caller the final text as a success."""
    def judge(mode: Mode, script: list[Reply], evidence: Evidence) -> list[Check]:
        expected = [(c.name, c.parsed) for r in script for c in r.calls
                    if c.parsed is not None and r.finish == "tool_calls" and not r.at_limit]
        ran = _ran(evidence)
        checks = [Check(requirement, ran == expected, _compare(ran, expected))]
        if expected and ran != expected and sorted(map(repr, ran)) == sorted(
                map(repr, expected)):
            checks.append(Check("TL-4", False, "the calls ran, but not in the model's order"))
        overlap = [t for t in evidence.tools if t.overlapping]
        checks.append(Check("TL-4", not overlap, "one tool at a time" if not overlap else
                            f"{len(overlap)} call(s) started while another ran"))
        sent = len(evidence.requests)
        checks.append(Check(requirement, sent == len(script),
                            f"{sent} request(s), {len(script)} scripted"))
        final = script[-1].text
        ok = evidence.result.success and final in (evidence.result.text or "")
        checks.append(Check(requirement, ok, f"the caller got {_caller_got(evidence.result)}"))
        return checks
    return judge


def surfaced(*requirements: str, withheld: bool = True, finish: bool = True) -> Judge:
    """The first reply ends the turn: none of its calls run, the caller does not get an
    ordinary success, and (``finish``) it is shown the finish reason as the engine sent it."""
    def judge(mode: Mode, script: list[Reply], evidence: Evidence) -> list[Check]:
        first = script[0]
        checks: list[Check] = []
        if withheld and first.calls:
            ran = _ran(evidence)
            checks.append(Check("TL-9", not ran, "no call of the cut response ran" if not ran
                                else f"ran {_show(ran)[:300]}"))
        result = evidence.result
        checks.append(Check(requirements[0], not result.success,
                            f"the caller got {_caller_got(result)}"))
        if finish:
            raw = LABELS[mode.api][first.finish]
            checks.append(Check("TL-10", result.finish_reason == raw,
                                f"finish reason shown: {_quote(result.finish_reason)}, "
                                f"the engine's: {raw!r}"))
        return checks
    return judge


def _malformed_reply(reply: Reply) -> bool:
    return not reply.at_limit and any(c.parsed is None for c in reply.calls)


def corrective(judge: Judge) -> Judge:
    """``judge``, plus TL-6's "corrective": each request after a malformed response tells
    the model about it (it carries more messages than the request before it), rather than
    sending the same conversation again."""
    def checked(mode: Mode, script: list[Reply], evidence: Evidence) -> list[Check]:
        checks = judge(mode, script, evidence)
        requests = evidence.requests
        for index, reply in enumerate(script[:-1]):
            if not _malformed_reply(reply) or index + 1 >= len(requests):
                continue
            before, after = requests[index].messages, requests[index + 1].messages
            checks.append(Check("TL-6", after > before, (
                f"the retry after response {index + 1} told the model about the error "
                f"({before} -> {after} messages)") if after > before else (
                f"the retry after response {index + 1} resent the conversation without the "
                f"error ({before} -> {after} messages): not a corrective retry")))
        return checks
    return checked


def second_malformed_ends(mode: Mode, script: list[Reply], evidence: Evidence) -> list[Check]:
    """Two malformed responses in a row: exactly two requests, no call, an error surfaced."""
    ran = _ran(evidence)
    sent = len(evidence.requests)
    return [
        Check("TL-6", sent == 2, f"{sent} request(s): one corrective retry, not more"
              if sent == 2 else f"{sent} request(s), expected exactly 2 (one retry)"),
        Check("TL-6", not ran, "no malformed call ran" if not ran else f"ran {_show(ran)}"),
        Check("TL-6", not evidence.result.success,
              f"the caller got {_caller_got(evidence.result)}"),
    ]


# --- the scripts ------------------------------------------------------------------------------


#: TL-1's rounds: more than every default cap the frameworks ship (10 rounds, 20 steps, 50
#: requests), so a cap that stops work by default is seen.
ROUNDS = 60


def _rounds(mode: Mode) -> list[Reply]:
    replies = [Reply(text=f"Step {i}." if i % 2 else "", finish="tool_calls",
                     calls=(write(f"call_{i:02d}", f"step-{i:02d}.txt", f"step {i}\n"),))
               for i in range(1, ROUNDS + 1)]
    return [*replies, Reply(text=f"All {ROUNDS} files are written.", finish="stop")]


def _ordered(mode: Mode) -> list[Reply]:
    return [Reply(text="Writing, then checking.", finish="tool_calls", calls=(
        write("call_a", "a.txt", "first\n"), read("call_b", "a.txt"),
        write("call_c", "b.txt", "second\n"), read("call_d", "b.txt"))), FINISH]


def _cut(text: str, calls: tuple[Call, ...], finish: Finish, unclosed: bool = False
         ) -> list[Reply]:
    return [Reply(text=text, calls=calls, finish=finish, at_limit=True, unclosed=unclosed),
            FINISH]


_REPORT_CALL = write("call_r1", "report.md", REPORT)
_CUT_CALL = Call("call_r1", "write_file", _REPORT_CALL.arguments[:45])
#: A one-parameter call cut mid-JSON: its raw text is what some runtimes pass as ``path``.
_CUT_READ = Call("call_q1", "read_file", read("call_q1", "notes/2026/summary.md").arguments[:25])
#: Whitespace and nothing else: no text (TL-7).
BLANK = " \n\t \n"
_ONLY_ANTHROPIC_STREAM = "only an Anthropic stream closes its tool blocks (content_block_stop)"


def _malformed(call_id: str) -> Reply:
    return Reply(text="Saving it.", finish="tool_calls",
                 calls=(Call(call_id, "write_file", MALFORMED),))


def _retry_once(mode: Mode) -> list[Reply] | None:
    if not _cuttable(mode):
        return None
    return [_malformed("call_m1"), Reply(finish="tool_calls", calls=(
        write("call_g1", "notes.txt", "saved\n"),)), FINISH]


def _no_second_retry(mode: Mode) -> list[Reply] | None:
    if not _cuttable(mode):
        return None
    return [_malformed("call_m1"), _malformed("call_m2"), FINISH]


def _allowance_resets(mode: Mode) -> list[Reply] | None:
    if not _cuttable(mode):
        return None
    return [_malformed("call_m1"), Reply(finish="tool_calls", calls=(
        write("call_g1", "one.txt", "1\n"),)), _malformed("call_m2"),
        Reply(finish="tool_calls", calls=(write("call_g2", "two.txt", "2\n"),)), FINISH]


# --- drawn scripts ----------------------------------------------------------------------------

_TEXTS = ("", "Writing the files now.")
_CONTENTS = ("x", "hello\n", "def add(a, b):\n    return a + b\n", "ß ✓ \"quoted\"\n")


def _drawn_cut(mode: Mode) -> SearchStrategy[list[Reply]]:
    """A response cut at the output limit: how many calls, which label (honest or the normal
    one), where the last call's arguments stop (shrinking towards complete arguments, the cut
    runtimes run most), whether an Anthropic stream closes the cut block."""
    from hypothesis import strategies as st

    @st.composite
    def script(draw: Any) -> list[Reply]:
        count = draw(st.integers(1, 3))
        calls = [write(f"call_{i}", f"drawn-{i}.txt", draw(st.sampled_from(_CONTENTS)))
                 for i in range(count)]
        # False first: the mislabelled case is the one shrinking should reach
        honest = draw(st.booleans())
        last = calls[-1].arguments
        dropped = draw(st.integers(0, len(last) - 1)) if _cuttable(mode) else 0
        calls[-1] = Call(calls[-1].call_id, "write_file", last[:len(last) - dropped])
        unclosed = (mode.api == "anthropic-messages" and mode.stream and dropped > 0
                    and draw(st.booleans()))
        text = draw(st.sampled_from(_TEXTS))
        return _cut(text, tuple(calls), "length" if honest else "tool_calls", unclosed)

    strategy: SearchStrategy[list[Reply]] = script()
    return strategy


def _drawn_order(mode: Mode) -> SearchStrategy[list[Reply]]:
    """A response with 2 to 5 calls, writes and reads of a few files, then the answer."""
    from hypothesis import strategies as st

    one = st.tuples(st.booleans(), st.sampled_from(("a.txt", "b.txt", "c.txt")),
                    st.sampled_from(_CONTENTS))

    def script(drawn: list[tuple[bool, str, str]]) -> list[Reply]:
        calls = tuple(write(f"call_{i}", path, content) if is_write else read(f"call_{i}", path)
                      for i, (is_write, path, content) in enumerate(drawn))
        return [Reply(text="Working through the files.", finish="tool_calls", calls=calls),
                FINISH]

    strategy: SearchStrategy[list[Reply]] = st.lists(one, min_size=2, max_size=5).map(script)
    return strategy


#: Seconds each tool call holds in the TL-4 scenarios (see :attr:`Scenario.tool_delay`).
TL4_HOLD = 0.05

_NOT_SAYABLE = ("a non-streamed Anthropic reply carries a call's arguments as an object: "
                "cut or malformed JSON cannot be said in it")

#: Every scenario, in the report's order.
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(f"TL-1/{ROUNDS}-rounds", ("TL-1", "TL-4"),
             f"{ROUNDS} tool rounds, then the answer: no round, step or request cap stops the "
             "work", f"Write the {ROUNDS} step files, one per step.", completes("TL-1"),
             script=_rounds),
    Scenario("TL-4/calls-in-order", ("TL-4",),
             "four calls in one response run one at a time, in the model's order",
             "Write a.txt and b.txt and check them.", completes("TL-4"), script=_ordered,
             tool_delay=TL4_HOLD),
    Scenario("TL-4/drawn", ("TL-4",),
             "drawn: 2 to 5 writes and reads in one response, in order, one at a time",
             "Work on the files.", completes("TL-4"), draw=_drawn_order,
             tool_delay=TL4_HOLD),
    Scenario("TL-6/one-retry", ("TL-6",),
             "a malformed call, then a good one: one corrective retry, the good call runs",
             "Save a note.", corrective(completes("TL-6")), script=_retry_once,
             not_applicable=_NOT_SAYABLE),
    Scenario("TL-6/no-second-retry", ("TL-6",),
             "two malformed responses in a row: the turn ends with the error, no third request",
             "Save a note.", corrective(second_malformed_ends), script=_no_second_retry,
             not_applicable=_NOT_SAYABLE),
    Scenario("TL-6/allowance-resets", ("TL-6",),
             "malformed, good, malformed, good: a well-formed response resets the allowance",
             "Save two notes.", corrective(completes("TL-6")), script=_allowance_resets,
             not_applicable=_NOT_SAYABLE),
    Scenario("TL-7/empty-answer", ("TL-7", "TL-10"),
             "a natural stop with no text and no calls is surfaced as empty",
             "Summarize the project.", surfaced("TL-7"), script=lambda mode: [Reply()]),
    Scenario("TL-7/whitespace-answer", ("TL-7", "TL-10"),
             "a natural stop with only whitespace and no calls is surfaced as empty",
             "Summarize the project.", surfaced("TL-7"),
             script=lambda mode: [Reply(text=BLANK)]),
    Scenario("TL-9/cut-answer", ("TL-9", "TL-10"),
             "an answer cut at the output limit is surfaced with its finish reason",
             "Write the report.", surfaced("TL-9"),
             script=lambda mode: [Reply(text=REPORT[:40], finish="length", at_limit=True)]),
    Scenario("TL-10/filtered-answer", ("TL-10",),
             "an answer withheld by the content filter is surfaced with its finish reason",
             "Tell me a story.", surfaced("TL-10"),
             script=lambda mode: [Reply(text="Once upon", finish="filter")]),
    Scenario("TL-9/length-complete-args", ("TL-9", "TL-10"),
             "honest `length`, the call's arguments complete: the call does not run",
             "Write the report.", surfaced("TL-9"),
             script=lambda mode: _cut("Writing the report.", (_REPORT_CALL,), "length")),
    Scenario("TL-9/length-cut-args", ("TL-9", "TL-10"),
             "honest `length`, the arguments cut mid-JSON: the call does not run",
             "Write the report.", surfaced("TL-9"),
             script=lambda mode: _cut("Writing the report.", (_CUT_CALL,), "length")
             if _cuttable(mode) else None, not_applicable=_NOT_SAYABLE),
    Scenario("TL-9/mislabelled-complete-args", ("TL-9", "TL-10"),
             "labelled `tool_calls` but output tokens = the limit, arguments complete",
             "Write the report.", surfaced("TL-9"),
             script=lambda mode: _cut("Writing the report.", (_REPORT_CALL,), "tool_calls")),
    Scenario("TL-9/mislabelled-cut-args", ("TL-9", "TL-10"),
             "labelled `tool_calls` at the limit, the arguments cut mid-JSON",
             "Write the report.", surfaced("TL-9"),
             script=lambda mode: _cut("Writing the report.", (_CUT_CALL,), "tool_calls",
                                      unclosed=mode.api == "anthropic-messages")
             if _cuttable(mode) else None, not_applicable=_NOT_SAYABLE),
    Scenario("TL-9/one-param-length-cut", ("TL-9", "TL-10"),
             "honest `length`, a one-parameter call (read_file) cut mid-JSON: it does not run "
             "(its raw text must not become the parameter)", "Read the summary.",
             surfaced("TL-9"),
             script=lambda mode: _cut("Reading the summary.", (_CUT_READ,), "length")
             if _cuttable(mode) else None, not_applicable=_NOT_SAYABLE),
    Scenario("TL-9/one-param-mislabelled-cut", ("TL-9", "TL-10"),
             "labelled `tool_calls` at the limit, a one-parameter call cut mid-JSON",
             "Read the summary.", surfaced("TL-9"),
             script=lambda mode: _cut("Reading the summary.", (_CUT_READ,), "tool_calls",
                                      unclosed=mode.api == "anthropic-messages")
             if _cuttable(mode) else None, not_applicable=_NOT_SAYABLE),
    Scenario("TL-9/unclosed-block", ("TL-9", "TL-10"),
             "an Anthropic stream whose tool block never closes, labelled `tool_use`, under "
             "the limit, arguments complete: the call does not run",
             "Write the report.", surfaced("TL-9"),
             script=lambda mode: [Reply(text="Writing the report.", calls=(_REPORT_CALL,),
                                        finish="tool_calls", unclosed=True), FINISH]
             if mode == Mode("anthropic-messages", True) else None,
             not_applicable=_ONLY_ANTHROPIC_STREAM),
    Scenario("TL-9/drawn", ("TL-9", "TL-10"),
             "drawn: 1 to 3 calls, cut anywhere in the last one's arguments, honest or "
             "mislabelled: no call runs", "Write the files.", surfaced("TL-9"),
             draw=_drawn_cut),
)
