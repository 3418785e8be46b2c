"""Runners: each starts one agent runtime on the suite's tasks (see
:mod:`agentturn.tools.conform.protocol`).

:mod:`.agentturn_driver` is the reference runner: agentturn's own host on the driver, which
passes every scenario. Runners for other runtimes load those runtimes, so none is imported
here: ``--runner agentturn.tools.conform.runners.agentturn_driver:Runner`` loads one by name.
"""
