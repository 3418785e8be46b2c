"""``python -m agentturn``: the command line (:mod:`agentturn.tools.cli`)."""

from .tools.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
