"""agentturn's spec kit: a scripted host, the reference adapter, hypothesis strategies and a
session state machine hosts reuse.

:class:`ScriptedHost` and :class:`ReferenceAdapter` need nothing beyond agentturn;
:class:`SessionSpec`, :class:`World` and the strategies need the ``test`` extra (hypothesis),
which is imported only when one of them is first used: ``import agentturn`` never loads this
package, and ``from agentturn.testing import ScriptedHost`` does not load hypothesis. See the
README's "Check your host against the spec" section.
"""

from typing import TYPE_CHECKING, Any

from .adapter import Adapter, EngineFailure, EngineResponse, ReferenceAdapter, WorldLike
from .host import ScriptedHost, say

if TYPE_CHECKING:
    from .machine import SessionSpec, World
    from .strategies import any_command, any_event, commands, events, register

#: The names that need hypothesis, by the module that holds them.
_WITH_HYPOTHESIS = {"SessionSpec": "machine", "World": "machine", "any_command": "strategies",
                    "any_event": "strategies", "commands": "strategies", "events": "strategies",
                    "register": "strategies"}


def __getattr__(name: str) -> Any:
    """Import the hypothesis-backed part of the kit on first use."""
    module = _WITH_HYPOTHESIS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    try:
        return getattr(import_module(f"{__name__}.{module}"), name)
    except ModuleNotFoundError as error:
        if error.name != "hypothesis":
            raise
        raise ModuleNotFoundError(
            f"agentturn.testing.{name} needs hypothesis, which the test extra installs: "
            "pip install 'agentturn[test]'", name="hypothesis") from None


__all__ = [
    "Adapter",
    "EngineFailure",
    "EngineResponse",
    "ReferenceAdapter",
    "ScriptedHost",
    "SessionSpec",
    "World",
    "WorldLike",
    "any_command",
    "any_event",
    "commands",
    "events",
    "register",
    "say",
]
