"""A durable agentturn host on DBOS: the session reducer inside a workflow, every I/O a step.

SQLite by default, PostgreSQL with ``AGENTTURN_DBOS_URL``. Start with ``README.md`` beside this
file; :mod:`.host` is the deterministic loop, :mod:`.engine` the DBOS workflow, steps, worker and
client, :mod:`.effects` the I/O each step does, :mod:`.cli` the command line.
"""
