"""A complete host loop: a scripted model, real file writes, an in-memory transcript.

Run:  python examples/scripted_host.py [--trace FILE]   (then: agentturn check FILE)

The host owns every effect; agentturn only decides. Each command is carried out at once and its
completion goes to the back of an event queue, the way an event loop would deliver it. While the
agent's file write runs, the user types a Lead instruction ("also add a docstring"): the write
finishes, the unstarted test run is skipped, and the model's next request carries the
instruction, so the final file has the docstring.
"""

from __future__ import annotations

import json
import pathlib
import sys
import tempfile
from collections import deque
from typing import NoReturn

import agentturn as at

FIRST_VERSION = "def add(a, b):\n    return a + b\n"
SECOND_VERSION = 'def add(a, b):\n    """Return a + b."""\n    return a + b\n'


def assert_never(value: NoReturn) -> NoReturn:
    """Unreachable when the match above is exhaustive; mypy checks that it is."""
    raise AssertionError(f"unhandled command: {value!r}")


def scripted_model(request: at.RequestModelStream) -> at.StreamCompleted:
    """The 'model': one answer per request, the third one reacting to the Lead."""
    number = int(request.request_id.rsplit("r", 1)[1])
    if number == 1:
        return at.StreamCompleted(
            request_id=request.request_id, text="I'll create calc.py and run the tests.",
            finish_reason="tool_use", tool_calls=(
                at.ToolCall(call_id="w1", name="write_file", needs_permission=True,
                            arguments=json.dumps({"path": "calc.py", "content": FIRST_VERSION})),
                at.ToolCall(call_id="t1", name="run_tests", arguments="{}"),
            ))
    if request.lead_ids:
        return at.StreamCompleted(
            request_id=request.request_id, text="Adding the docstring as asked.",
            finish_reason="tool_use", tool_calls=(
                at.ToolCall(call_id="w2", name="write_file", arguments=json.dumps(
                    {"path": "calc.py", "content": SECOND_VERSION})),))
    return at.StreamCompleted(request_id=request.request_id, finish_reason="end_turn",
                              text="calc.py is written, with a docstring.")


class Host:
    """Carries out agentturn's commands with real I/O and reports completions as events."""

    def __init__(self, workdir: pathlib.Path) -> None:
        self.workdir = workdir
        self.state = at.TurnState.create("chat-1")
        self.queue: deque[at.Event] = deque()
        self.transcript: list[str] = []
        self.outcome: at.TurnOutcome | None = None
        self.title = ""
        self.steps: list[tuple[at.Event, tuple[at.Command, ...]]] = []  # for a trace

    def run(self, first: at.Event) -> None:
        self.queue.append(first)
        while self.queue:
            event = self.queue.popleft()
            self.state, commands = at.reduce(self.state, event)
            self.steps.append((event, commands))
            for command in commands:
                self.carry_out(command)

    def carry_out(self, command: at.Command) -> None:
        # An exhaustive match: mypy reports a command this host forgot (``assert_never``).
        assert isinstance(command, at.TurnCommand)
        match command:
            case at.Persist():
                for record in command.records:
                    self.transcript.append(type(record).__name__)
                self.queue.append(at.Persisted(key=command.key))
            case at.RequestModelStream():
                self.queue.append(at.StreamOpened(request_id=command.request_id))
                self.queue.append(scripted_model(command))
            case at.AskPermission():
                self.queue.append(at.PermissionDecided(call_id=command.call.call_id,
                                                       decision=at.PermissionDecision.ALLOW))
            case at.ExecuteTool():
                self.queue.append(self.execute(command.call))
            case at.SaveLead():
                self.transcript.append(f"user: {command.record.text}")
                self.queue.append(at.LeadSaved(lead_id=command.lead_id))
            case at.RequestTitle():
                self.queue.append(at.TitleGenerated(request_id=command.request_id,
                                                    title="Write calc.py"))
            case at.DecideNaturalStop():  # only with TurnConfig(hold_natural_stops=True)
                self.queue.append(at.NaturalStopDecided(request_id=command.request_id))
            case at.SetTitle():
                self.title = command.title
            case at.EndTurn():
                self.outcome = command.outcome
            case at.ReturnDraft():
                self.transcript.append(f"draft back ({command.reason.value}): {command.draft}")
            case at.LeadUnapplied():
                self.transcript.append(f"saved, unapplied: {command.lead_id}")
            case at.UnsavedRecords():  # only from CloseChat, which this host never sends
                self.transcript.append(f"unsaved: {len(command.records)} record(s)")
            case (at.LeadAccepted() | at.CancelStream() | at.CancelTool()
                  | at.DismissPermission() | at.StaleAnswerIgnored()):
                pass  # nothing to do in this scripted host: no UI, nothing cancellable
            case _:
                assert_never(command)

    def execute(self, call: at.ToolCall) -> at.ToolFinished:
        if call.name == "write_file":
            arguments = json.loads(call.arguments)
            (self.workdir / arguments["path"]).write_text(arguments["content"])
            if call.call_id == "w1":
                # The user types a Lead while this write runs; it arrives before the write ends.
                self.queue.append(at.LeadSubmitted(chat_id="chat-1", lead_id="lead-1",
                                                   text="also add a docstring"))
            return at.ToolFinished(call_id=call.call_id, output=f"wrote {arguments['path']}")
        return at.ToolFinished(call_id=call.call_id, output="3 passed")


def main(workdir: pathlib.Path | None = None, trace_path: pathlib.Path | None = None) -> Host:
    """Run the scripted turn in ``workdir`` (a fresh temporary folder by default, which the
    caller removes), writing its trace to ``trace_path`` when given."""
    folder = workdir or pathlib.Path(tempfile.mkdtemp(prefix="agentturn-example-"))
    host = Host(folder)
    host.run(at.PromptSubmitted(turn_id="t1", message_id="m1", text="Create calc.py"))
    if trace_path is not None:
        from agentturn import trace

        lines = trace.write_trace("turn", host.state.config, host.steps, chat_id="chat-1")
        trace_path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return host


if __name__ == "__main__":
    arguments = sys.argv[1:]
    # The tools' folder lives as long as the run: nothing is left behind in the temp folder.
    with tempfile.TemporaryDirectory(prefix="agentturn-example-") as scratch:
        finished = main(pathlib.Path(scratch),
                        trace_path=pathlib.Path(arguments[1]) if arguments[:1] == ["--trace"]
                        else None)
        assert finished.outcome is not None
        print(f"title: {finished.title!r}")
        print(f"outcome: {finished.outcome.kind.value} ({finished.outcome.message})")
        print(f"calc.py:\n{(finished.workdir / 'calc.py').read_text()}")
    sys.exit(0)
