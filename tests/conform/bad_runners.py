"""Runners that break the turn rules on purpose, for the suite's own tests: each scenario's
verdict must be able to fail, and fail on the right rows.

:class:`NaiveRunner` is a tool loop as agent frameworks often write it, on the openai SDK: it
runs whatever calls a response holds, whatever its finish reason; it returns the last text as
a success, empty or cut; it sends an unparsable call's error back to the model as the call's
result, again and again; it never asks for usage; it stops after ``round_cap`` rounds. Options
make it run a response's calls concurrently or in reverse.

:class:`LimitBlindRunner` is agentturn's own host with its output limit withheld from the
driver: it trusts the finish label, so only the mislabelled cuts get past it.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai

import agentturn as at
from agentturn import aio
from agentturn.engines import AnthropicMessagesStream, ChatCompletionsStream
from agentturn.tools.conform import Mode, RunResult, Task, Tools
from agentturn.tools.conform.runners import agentturn_driver


class NaiveRunner:
    name = "naive"
    modes = (Mode("openai-chat", True), Mode("openai-chat", False))

    def __init__(self, round_cap: int | None = 10, parallel: bool = False,
                 reverse: bool = False) -> None:
        self.round_cap = round_cap
        self.parallel = parallel
        self.reverse = reverse

    def run(self, task: Task, tools: Tools) -> RunResult:
        client = openai.OpenAI(base_url=task.base_url, api_key="naive", max_retries=0)
        specs = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                   "parameters": dict(t.parameters)}}
                 for t in task.tools]
        messages: list[dict[str, Any]] = [{"role": "user", "content": task.prompt}]
        rounds = 0
        try:
            while True:
                if self.round_cap is not None and rounds >= self.round_cap:
                    raise RuntimeError(f"the run exceeded {self.round_cap} rounds")
                rounds += 1
                text, calls = self._ask(client, task, messages, specs)
                if not calls:
                    return RunResult(success=True, text=text, outcome="final_output")
                messages.append({"role": "assistant", "content": text or None,
                                 "tool_calls": [{"id": i, "type": "function", "function": {
                                     "name": n, "arguments": a}} for i, n, a in calls]})
                order = list(reversed(calls)) if self.reverse else calls
                if self.parallel:
                    with ThreadPoolExecutor(len(order)) as pool:
                        outputs = list(pool.map(lambda c: self._call(tools, c), order))
                else:
                    outputs = [self._call(tools, c) for c in order]
                for (call_id, _, _), output in zip(order, outputs, strict=True):
                    messages.append({"role": "tool", "tool_call_id": call_id,
                                     "content": output})
        finally:
            client.close()

    @staticmethod
    def _call(tools: Tools, call: tuple[str, str, str]) -> str:
        try:
            arguments = json.loads(call[2] or "{}")
        except ValueError:
            return "error: invalid JSON arguments, send the call again"
        return tools.call(call[1], arguments)

    @staticmethod
    def _ask(client: openai.OpenAI, task: Task, messages: list[dict[str, Any]],
             specs: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, str]]]:
        request: dict[str, Any] = {"model": task.model, "messages": messages, "tools": specs,
                                   "max_tokens": task.max_tokens}
        if not task.stream:
            message = client.chat.completions.create(**request).choices[0].message
            return message.content or "", [(c.id, c.function.name, c.function.arguments)
                                           for c in message.tool_calls or ()]
        text = ""
        calls: dict[int, list[str]] = {}
        for chunk in client.chat.completions.create(**request, stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for part in delta.tool_calls or ():
                entry = calls.setdefault(part.index, ["", "", ""])
                entry[0] = part.id or entry[0]
                if part.function is not None:
                    entry[1] = part.function.name or entry[1]
                    entry[2] += part.function.arguments or ""
        return text, [(i, n, a) for i, n, a in (calls[k] for k in sorted(calls))]


class LimitBlindRunner(agentturn_driver.Runner):
    name = "agentturn-driver, output limit not given to the driver"

    async def _run(self, task: Task, tools: Tools) -> RunResult:
        host = agentturn_driver._Host(task, tools)
        wire = ChatCompletionsStream if task.api == "openai-chat" else AnthropicMessagesStream
        try:
            driver = aio.TurnDriver(
                "blind", at.TurnConfig(auto_title=False),
                aio.Effects(persist=host.persist, model=host.model,
                            permission=host.permission, tool=host.tool),
                max_output_tokens=None, wire=wire)  # the bug: the limit is not watched
            async with driver:
                ending = await driver.run_turn(at.PromptSubmitted(
                    turn_id="t", message_id="t/p", text=task.prompt))
        finally:
            await host.close()
        outcome = ending.outcome
        return RunResult(success=outcome.kind is at.OutcomeKind.FINISHED, text=host.last_text,
                         outcome=outcome.kind.value,
                         finish_reason=outcome.finish_reason.raw if outcome.finish_reason
                         else None)


class Raising:
    """Not a runner at all (no modes): ``load_runner`` must refuse it."""

    name = "raising"


# --- runners from the outside review of issue 35 ----------------------------------------------

OPENAI_NS = (Mode("openai-chat", False),)


def _loop(task: Task, on_calls: Any) -> RunResult:
    """A plain openai loop (not streamed) that runs every call, then reports a cut
    honestly: the runners below differ only in how they run a response's calls."""
    client = openai.OpenAI(base_url=task.base_url, api_key="x", max_retries=0)
    specs: Any = [{"type": "function", "function": {
        "name": t.name, "description": t.description, "parameters": dict(t.parameters)}}
        for t in task.tools]
    messages: list[Any] = [{"role": "user", "content": task.prompt}]
    with client:
        while True:
            response = client.chat.completions.create(model=task.model, messages=messages,
                                                      tools=specs, max_tokens=task.max_tokens)
            choice = response.choices[0]
            calls: list[Any] = list(choice.message.tool_calls or ())
            if not calls:
                ok = choice.finish_reason == "stop" and bool(choice.message.content)
                return RunResult(success=ok, text=choice.message.content, outcome="end",
                                 finish_reason=choice.finish_reason)
            messages.append(choice.message.model_dump(exclude_none=True))
            outputs = on_calls(calls)
            for call, output in zip(calls, outputs, strict=True):
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
            if choice.finish_reason != "tool_calls":
                # it ran the calls of a cut response, then reports the cut honestly
                return RunResult(success=False, text=choice.message.content, outcome="cut",
                                 finish_reason=choice.finish_reason)


class RawArgs:
    """Runs every call with the raw argument text (as a lax parser or a one-parameter tool
    wrapper would); then surfaces the cut honestly."""

    name = "raw-args"
    modes = OPENAI_NS

    def run(self, task: Task, tools: Tools) -> RunResult:
        return _loop(task, lambda calls: [
            tools.call(c.function.name, c.function.arguments) for c in calls])


class RawAsParameter:
    """A one-parameter tool wrapper: arguments that do not parse become the one parameter
    (what smolagents does with a cut ``read_file``)."""

    name = "raw-as-parameter"
    modes = OPENAI_NS

    def run(self, task: Task, tools: Tools) -> RunResult:
        def arguments(text: str) -> Any:
            try:
                return json.loads(text)
            except ValueError:
                return {"path": text}
        return _loop(task, lambda calls: [
            tools.call(c.function.name, arguments(c.function.arguments)) for c in calls])


class StaggeredParallel:
    """Runs a response's calls concurrently in threads started 5 ms apart, each doing 20 ms
    of its own work around the suite's tool."""

    name = "staggered-parallel"
    modes = OPENAI_NS

    def run(self, task: Task, tools: Tools) -> RunResult:
        import threading
        import time

        def run_all(calls: list[Any]) -> list[str]:
            outputs = [""] * len(calls)

            def one(index: int, call: Any) -> None:
                time.sleep(0.02)  # the runtime's own part of the tool
                outputs[index] = tools.call(call.function.name,
                                            json.loads(call.function.arguments))
                time.sleep(0.02)
            threads = []
            for index, call in enumerate(calls):
                thread = threading.Thread(target=one, args=(index, call))
                thread.start()
                threads.append(thread)
                time.sleep(0.005)
            for thread in threads:
                thread.join()
            return outputs
        return _loop(task, run_all)


class SilentRetry:
    """On a malformed call, sends the same request again without telling the model."""

    name = "silent-retry"
    modes = OPENAI_NS

    def run(self, task: Task, tools: Tools) -> RunResult:
        client = openai.OpenAI(base_url=task.base_url, api_key="x", max_retries=0)
        specs: Any = [{"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": dict(t.parameters)}}
            for t in task.tools]
        messages: list[Any] = [{"role": "user", "content": task.prompt}]
        retried = False
        with client:
            while True:
                response = client.chat.completions.create(
                    model=task.model, messages=messages, tools=specs,
                    max_tokens=task.max_tokens)
                choice = response.choices[0]
                calls: list[Any] = list(choice.message.tool_calls or ())
                if not calls:
                    return RunResult(success=True, text=choice.message.content)
                try:
                    parsed = [json.loads(c.function.arguments) for c in calls]
                except ValueError:
                    if retried:
                        return RunResult(success=False, outcome="malformed")
                    retried = True
                    continue  # the same messages, no corrective note
                retried = False
                messages.append(choice.message.model_dump(exclude_none=True))
                for call, arguments in zip(calls, parsed, strict=True):
                    messages.append({"role": "tool", "tool_call_id": call.id,
                                     "content": tools.call(call.function.name, arguments)})


class NoModes:
    """Speaks no mode at all: every row would be n/a."""

    name = "no-modes"
    modes = ()

    def run(self, task: Task, tools: Tools) -> RunResult:
        raise AssertionError("never called")
