"""The demo: every scene against the local server, each in its own temporary folder."""

from __future__ import annotations

import asyncio

from .scenes import RUNS


async def main() -> None:
    for title, run in RUNS.items():
        result = await run()
        print(f"== {title}")
        for line in result.log:
            print(f"   {line}")
        cut = f" (cut off: {result.outcome.cut_off.value})" if result.outcome.cut_off else ""
        print(f"   -> outcome {result.outcome.kind.value}{cut}; files left: "
              f"{', '.join(result.files) or 'none'}; streams closed early: "
              f"{result.closed_early}")
        print()


if __name__ == "__main__":
    asyncio.run(main())
