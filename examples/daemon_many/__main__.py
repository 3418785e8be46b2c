"""Run the daemon: ``python -m examples.daemon_many [--sessions N] [--rounds R]``."""

from __future__ import annotations

import argparse
import sys

import anyio

from .daemon import Summary, serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.daemon_many",
                                     description="Many agentturn sessions on one event loop.")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="tool rounds of each first turn")
    args = parser.parse_args(argv)

    async def run() -> Summary:
        return await serve(args.sessions, args.rounds)

    summary = anyio.run(run)
    for line in summary.lines():
        print(line)
    ok = summary.tasks_left == 0 and all(host.outcomes == host.plan.expected()
                                         for host in summary.hosts)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
