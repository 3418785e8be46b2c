"""The demo: ``python -m examples.mini_swe_agent`` (needs ``pip install -e '.[mini-swe]'``).

Theory of operation
-------------------
Two scenes against the scripted OpenAI-compatible server of ``examples/openai_host`` on
127.0.0.1, each one turn of :class:`~.host.MiniSweHost` with real bash commands in a temporary
folder: a task of several rounds during which the user types a Lead while a slow command runs
(the command finishes, the next call of that response is skipped, the model reads the Lead),
named by the naming model; then a response cut at the output limit that the server labels
``tool_calls``, whose write never runs. Each scene prints what happened and the files left.
mini-swe-agent's global configuration folder is a temporary one too: the demo leaves nothing.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import anyio

import agentturn as at
from examples.openai_host.server import Reply, ScriptedServer

MAX_TOKENS = 512


def bash(call_id: str, command: str) -> tuple[str, str, str]:
    return (call_id, "bash", json.dumps({"command": command}))


SCENES = {
    "lead": [
        Reply(text="I'll write calc.py, then run the slow checks.", finish="tool_calls", calls=(
            bash("w1", "printf 'def add(a, b):\\n    return a + b\\n' > calc.py"),)),
        Reply(text="Running the checks.", finish="tool_calls", calls=(
            bash("c1", "sleep 0.3 && python3 -c 'import calc; print(calc.add(2, 3))'"),
            bash("c2", "echo more > checks.txt"))),
        Reply(text="Adding the docstring, as you asked.", finish="tool_calls", calls=(
            bash("d1", "sed -i '1a\\    \"\"\"Return a + b.\"\"\"' calc.py && cat calc.py"),)),
        Reply(text="calc.py has add() with a docstring.", finish="stop"),
    ],
    "lead-namer": [Reply(text="Write calc.py")],
    "cut": [Reply(text="Writing the report.", finish="tool_calls", output_tokens=MAX_TOKENS,
                  calls=(bash("r1", "echo report > report.txt"),))],
    "cut-namer": [Reply(text="Write the report")],
}


async def scene(name: str, prompt: str, lead: str | None = None) -> None:
    import litellm

    from .host import MiniSweHost  # after the configuration folder is set (main())

    # The scripted server's model name is in no price list: mini-swe-agent's cost bookkeeping
    # (cost_tracking="ignore_errors") counts 0, and litellm would print its provider list.
    litellm.suppress_debug_info = True

    print(f"== {name}: {prompt}")
    with tempfile.TemporaryDirectory() as folder:
        async with ScriptedServer(SCENES) as server:
            host = MiniSweHost(model_name=f"openai/{name}", namer_name=f"openai/{name}-namer",
                               model_kwargs={"api_base": f"{server.base_url}/v1",
                                             "api_key": "x", "max_tokens": MAX_TOKENS},
                               workdir=pathlib.Path(folder))
            async with host.driver:
                await host.driver.send(at.PromptSubmitted(turn_id="t1", message_id="m1",
                                                          text=prompt))
                if lead is not None:  # the user types it while the slow check runs
                    while not any(line.startswith("bash: sleep") for line in host.log):
                        await anyio.sleep(0.01)
                    print(f"   (user types a Lead: {lead!r})")
                    await host.driver.send(at.LeadSubmitted(chat_id="chat-1", lead_id="l1",
                                                            text=lead))
                await host.driver.turn_ended("t1")
        for line in host.log:
            print(f"   {line}")
        files = sorted(path.name for path in pathlib.Path(folder).iterdir())
        print(f"   files: {', '.join(files) or '(none)'}")


def main() -> None:
    with tempfile.TemporaryDirectory() as config:
        os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = config
        anyio.run(scene, "lead", "Write calc.py with add().", "Also add a docstring.")
        anyio.run(scene, "cut", "Write the report.")


if __name__ == "__main__":
    main()
