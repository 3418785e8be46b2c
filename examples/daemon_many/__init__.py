"""Many sessions in one process: a daemon serving concurrent ``SessionDriver``s on one event loop.

Run:  python -m examples.daemon_many [--sessions N] [--rounds R]

Each session is an ``agentturn.aio.SessionDriver`` with scripted in-memory effects
(:mod:`examples.daemon_many.host`): a fake engine that streams OpenAI Chat Completions chunk
dicts, in-memory storage, one tool. Every session runs a prompt through a few tool rounds; some
also get a prompt queued while the first turn runs (it starts when that turn ends), some a Lead
instruction typed while a tool runs (the next request carries it), and some a Stop pressed
while a tool runs (the tool stops, the turn ends cancelled). Then every session is idle at the
same time, and the daemon closes them all. It prints a short summary: sessions, turns ended by
outcome, events, wall time (:mod:`examples.daemon_many.daemon`).
"""

from .daemon import Summary, serve
from .host import Plan, SessionHost, plan_for

__all__ = ["Plan", "SessionHost", "Summary", "plan_for", "serve"]
