"""mini-swe-agent 2.4.6 with agentturn deciding: its model client and its command execution kept,
its loop replaced by :class:`agentturn.aio.TurnDriver` (``pip install -e '.[mini-swe]'``).

Theory of operation
-------------------
mini-swe-agent's ``DefaultAgent.run`` is a ``while True`` over ``step()``: query the model,
parse its bash calls (a response without one is a ``FormatError``), run each through the
environment, stop at ``step_limit`` / ``cost_limit`` or when a command prints
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``. Here that loop is not run. :mod:`.host` gives the
driver one effect per awaiting command, each a thin call into mini-swe-agent:

* the model: ``LitellmModel._query`` (litellm, mini-swe-agent's bash tool schema and its
  ``model_kwargs``) in a worker thread; the whole ``chat.completion``'s ``model_dump()`` goes to
  agentturn's reader, which decides whether the calls may run (a cut at the output limit never
  does, whatever the finish reason says);
* the tools: ``LocalEnvironment.execute`` in a worker thread, its output rendered by the model's
  ``observation_template``; the submit sentinel (``Submitted``) ends the turn
  (``ToolFinished(ends_task=True)``);
* the conversation: ``DefaultAgent.messages`` in mini-swe-agent's own message format, the
  task framed by its ``instance_template``.

The rest is agentturn's: no round cap, Stop, Lead joined at the safe boundary, the title. See
``README.md`` for what is kept, what is decided, and what cannot be seen.

Importing ``minisweagent`` prints a banner, creates its global configuration folder and loads
the ``.env`` in it; importing ``litellm`` fetches the model cost map from GitHub. An embedding
host chooses: the defaults below turn the banner and the fetch off (the map that ships with
litellm is used) and leave the folder to ``MSWEA_GLOBAL_CONFIG_DIR`` if it is set. They must be
set before either package is imported, hence here, in the package's ``__init__``.
"""

from __future__ import annotations

import os

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
