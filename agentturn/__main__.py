"""Command line: ``agentturn demo`` prints a scripted turn; ``agentturn diagram`` draws a graph."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the ``agentturn`` command."""
    parser = argparse.ArgumentParser(prog="agentturn", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="print one scripted turn as a timeline of events and commands")
    diagram = commands.add_parser("diagram", help="print a part's phase graph as Mermaid")
    diagram.add_argument("part", nargs="?", default="turn",
                         choices=["turn", "lead", "titles", "guard", "session"])
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import timeline
        from .demo_daemon import daemon_timeline

        print(timeline())
        print(daemon_timeline())
        return 0
    from . import LEAD_GRAPH, TITLE_GRAPH, TURN_GRAPH, PhaseGraph
    from .guard import GUARD_GRAPH
    from .session import SESSION_GRAPH

    graphs: dict[str, PhaseGraph[Any]] = {
        "turn": TURN_GRAPH, "lead": LEAD_GRAPH, "titles": TITLE_GRAPH, "guard": GUARD_GRAPH,
        "session": SESSION_GRAPH}
    print(graphs[args.part].mermaid())
    return 0


if __name__ == "__main__":
    sys.exit(main())
