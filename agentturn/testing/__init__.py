"""agentturn's spec kit: hypothesis strategies and a session state machine hosts reuse.

Needs the ``test`` extra (hypothesis); ``import agentturn`` never loads it. See the README's
"Check your host against the spec" section.
"""

from .strategies import any_command, any_event, commands, events, register

__all__ = ["any_command", "any_event", "commands", "events", "register"]
