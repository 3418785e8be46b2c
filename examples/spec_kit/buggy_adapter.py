"""Checking a host's adapter with agentturn's spec kit, and watching it catch a real bug.

Run:  python -m pytest examples/spec_kit/buggy_adapter.py

``TranslatingAdapter`` is the kind of adapter a host writes when it puts an Anthropic-style
engine behind code that expects OpenAI's vocabulary: it translates finish reasons. Its table
knows ``end_turn`` and ``tool_use`` and sends everything else on as ``stop``, so a response
the engine cut at ``max_tokens`` reaches agentturn as a normal stop, and its half-written tool
calls run. The spec kit's machine plays the engine, storage, tools and user in random
interleavings, sees the world run a call from a cut-off response, and hypothesis shrinks the
run to a few steps. The fix is one line: pass the raw reason through (agentturn knows the
engines' reasons, and ``TurnConfig(finish_reasons=...)`` takes a host's own).
"""

from __future__ import annotations

from typing import ClassVar

from hypothesis import settings

from agentturn.testing import ReferenceAdapter, SessionSpec


class TranslatingAdapter(ReferenceAdapter):
    """Translates Anthropic finish reasons to OpenAI ones, with the usual bug."""

    TABLE: ClassVar[dict[str, str]] = {"end_turn": "stop", "tool_use": "tool_calls"}

    def normalize(self, raw: str) -> str:
        return self.TABLE.get(raw, "stop")  # the bug: max_tokens and refusal become "stop"


class FixedAdapter(ReferenceAdapter):
    """The same translation with the fix: unknown reasons pass through unchanged."""

    TABLE: ClassVar[dict[str, str]] = {"end_turn": "stop", "tool_use": "tool_calls"}

    def normalize(self, raw: str) -> str:
        return self.TABLE.get(raw, raw)


class BuggyHostSpec(SessionSpec):
    def make_adapter(self) -> TranslatingAdapter:
        return TranslatingAdapter()


class FixedHostSpec(SessionSpec):
    def make_adapter(self) -> FixedAdapter:
        return FixedAdapter()


TestFixedHost = FixedHostSpec.TestCase
TestFixedHost.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
