"""agentturn's spec kit: hypothesis strategies and a session state machine hosts reuse.

Needs the ``test`` extra (hypothesis); ``import agentturn`` never loads it. See the README's
"Check your host against the spec" section.
"""

from .machine import Adapter, EngineResponse, ReferenceAdapter, SessionSpec, World
from .strategies import any_command, any_event, commands, events, register

__all__ = [
    "Adapter",
    "EngineResponse",
    "ReferenceAdapter",
    "SessionSpec",
    "World",
    "any_command",
    "any_event",
    "commands",
    "events",
    "register",
]
