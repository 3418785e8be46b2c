"""A Sphinx directive that writes the API reference of a part's vocabulary from the code itself.

Theory of operation
-------------------
``.. agentturn-vocabulary:: turn`` (in MyST pages, inside an ``{eval-rst}`` fence, so that the
generated text and the docstrings are read as reStructuredText) lists every event
and command class that :mod:`agentturn.registry` finds for the part, in the order of its
vocabulary modules, each as a ``py:class`` entry under its public module (``agentturn``,
``agentturn.guard`` or ``agentturn.session``) so pages can cross-reference it. Nothing in an
entry is typed by hand:

* the fields, their types and defaults come from ``attrs.fields``, and each field's ``#:``
  comment from Sphinx's own source analyzer (as autodoc reads them);
* what a field's validator checks (a non-empty id, a number >= 0): the first sentence of the
  validator's docstring (``is_id``: "the field is a non-empty ``str`` identifier"), or, for a
  validator without one, the ``FieldError`` message its source raises; validators that only
  repeat the field's type (``is_bool``, ``one_of``, ``tuple_of``) add nothing;
* an awaiting command's answers come from its ``answered_by`` and the id they echo from the
  source of its ``answer_id`` property (``return self.call.call_id``); a notice says nothing
  answers it;
* an event that answers a command says so (the inverse of every command's ``answered_by``, over
  every part); any other event says where it comes from: the ``# --- the user ---`` section of
  the vocabulary module that defines it;
* which reducer returns or accepts it: the part's, plus the session for the events its phase
  graph takes (``agentturn.session.state.SESSION_EVENTS``: the turn family's events, the
  guard's ``ClientAttached`` and the guard's facts it passes on as they are) and the commands
  the session's vocabulary re-exports; the session's page also lists, after its own events, the
  other parts' events it takes.

The generated reStructuredText is parsed in place, so docstrings keep their markup.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import io
import os
import re
from collections.abc import Iterator
from importlib import import_module
from typing import Any

import attrs
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

from agentturn import registry
from agentturn._base import AwaitingCommand, Command, Event, Notice

#: Where a host imports each part's classes from.
PUBLIC_MODULE = {"turn": "agentturn", "guard": "agentturn.guard", "session": "agentturn.session"}
#: The function that reduces each part's events.
REDUCER = {"turn": "agentturn.reduce", "guard": "agentturn.guard.reduce",
           "session": "agentturn.session.reduce"}
_SECTION = re.compile(r"^# --- (?P<name>.+?) -+$")
_CLASS = re.compile(r"^class (?P<name>\w+)\(")
_ANSWER_ID = re.compile(r"return self\.(?P<path>[\w.]+)")
#: The text of a ``FieldError`` a validator raises: ``f"{where} must be a number >= 0"``.
_RAISED = re.compile(r'FieldError\(\s*f?"(?P<text>[^"]*)"')
#: Validators that only check what the field's type already says.
_TYPE_ONLY = ("is_bool", "one_of.<locals>.check", "tuple_of.<locals>.check")


def checks(validator: Any) -> list[str]:
    """What ``validator`` refuses, as phrases (``it is a non-empty ``str`` identifier``),
    read from its docstring or from the ``FieldError`` messages in its source."""
    if validator is None or getattr(validator, "__qualname__", "") in _TYPE_ONLY:
        return []
    parts = getattr(validator, "_validators", None)  # attrs' and_ (a list of validators)
    if parts is not None:
        return [phrase for part in parts for phrase in checks(part)]
    if getattr(validator, "__qualname__", "") == "optional.<locals>.maybe":
        inner = inspect.getclosurevars(validator).nonlocals["check"]
        return [f"``None``, or {phrase}" for phrase in checks(inner)]
    doc = inspect.getdoc(validator) or ""
    if doc.startswith("Validator: the field "):
        sentence = " ".join(doc.removeprefix("Validator: the field ").split("\n\n")[0].split())
        return ["it " + sentence.split(" (see ")[0].rstrip(".")]
    found = []
    for raised in _RAISED.finditer(inspect.getsource(validator)):
        # drop the leading "Class.field" (or "{...}.{...}") and what the value was ("got ...")
        text = raised["text"].split(" ", 1)[-1].split(", got")[0].split(";")[0].strip()
        found.append(f"it {text}" if text.startswith("must") else f"refused if it {text}")
    if not found:
        raise RuntimeError(f"cannot read what the validator {validator!r} checks")
    return found


def session_events() -> frozenset[str]:
    """The names of every event a session takes (its phase graph's alphabet)."""
    from agentturn.session.state import SESSION_EVENTS

    return frozenset(SESSION_EVENTS)


def sections(module_name: str) -> dict[str, str]:
    """Class name -> the ``# --- section ---`` heading it is defined under."""
    found: dict[str, str] = {}
    current = ""
    for line in inspect.getsource(import_module(module_name)).splitlines():
        if (section := _SECTION.match(line)) is not None:
            current = section["name"]
        elif (cls := _CLASS.match(line)) is not None and current:
            found[cls["name"]] = current
    return found


def echoed(cls: type[AwaitingCommand]) -> str | None:
    """The attribute path ``answer_id`` returns (``key``, ``call.call_id``), None if no id."""
    getter = cls.answer_id.fget  # type: ignore[attr-defined]
    if getter is AwaitingCommand.answer_id.fget:  # type: ignore[attr-defined]
        return None
    match = _ANSWER_ID.search(inspect.getsource(getter))
    if match is None:
        raise RuntimeError(f"cannot read which field {cls.__name__}.answer_id returns")
    return match["path"]


def answered_commands() -> dict[str, list[type[AwaitingCommand]]]:
    """Event class name -> the awaiting commands (of every part) it answers."""
    found: dict[str, list[type[AwaitingCommand]]] = {}
    for cls in registry.command_types():
        if issubclass(cls, AwaitingCommand):
            for name in cls.answered_by:
                found.setdefault(name, []).append(cls)
    return found


def public_name(cls: type) -> str:
    """``agentturn.Persist``, ``agentturn.guard.NaturalStop``: where a host imports it from."""
    module = PUBLIC_MODULE[registry.part_of(cls)]
    return f"{module}.{cls.__name__}" if getattr(import_module(module), cls.__name__,
                                                  None) is cls else cls.__qualname__


def xref(cls: type) -> str:
    return f":py:class:`~{public_name(cls)}`"


def shown_default(field: attrs.Attribute[Any]) -> str | None:
    default: Any = field.default
    if default is attrs.NOTHING:
        return None
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return f"``{default.factory.__name__}()``"
    if isinstance(default, enum.Enum):
        return f"``{type(default).__name__}.{default.name}``"
    return f"``{default!r}``"


def _indent(text: str, by: str = "   ") -> list[str]:
    return [by + line if line else "" for line in text.splitlines()]


def entry(cls: type, part: str, answers: dict[str, list[type[AwaitingCommand]]],
          where: dict[str, str]) -> Iterator[str]:
    """The reStructuredText of one class's entry."""
    module, _, name = public_name(cls).rpartition(".")
    fields = attrs.fields(cls)
    signature = ", ".join(field.name for field in fields)
    yield f".. py:class:: {name}({'*, ' + signature if signature else ''})"
    yield f"   :module: {module or 'agentturn'}"
    yield ""
    if issubclass(cls, Command):
        returned = f"``{REDUCER[part]}``"
        if cls.__name__ == "DecideNaturalStop":
            returned += (" when ``TurnConfig(hold_natural_stops=True)``; a session sets that and "
                         "answers it itself with its stop order, so a session host never "
                         "receives it")
        elif part == "turn":
            returned += (" (and a session, which passes the turn's commands on to its host "
                         "unless it answers them itself)")
        if issubclass(cls, AwaitingCommand):
            yield f"   **Awaiting command**, returned by {returned}."
            path = echoed(cls)
            answered_by = ", ".join(
                f":py:class:`~{public_name(registry_event(answer))}`" for answer in cls.answered_by)
            echo = (f", echoing ``{path}`` in its ``{path.rsplit('.', 1)[-1]}`` field"
                    if path else " (no id: at most one is outstanding at a time)")
            yield f"   **Answered by** {answered_by}{echo}."
        else:
            assert issubclass(cls, Notice)
            yield f"   **Notice**, returned by {returned}. Nothing answers it."
    else:
        assert issubclass(cls, Event)
        accepted = f"``{REDUCER[part]}``"
        taken_by_session = part != "session" and cls.__name__ in session_events()
        if taken_by_session:
            accepted += " and ``agentturn.session.reduce``"
        yield f"   **Event**, accepted by {accepted}."
        if cls.__name__ in answers:
            listed = ", ".join(xref(command) for command in answers[cls.__name__])
            yield f"   **Answers** {listed}."
        elif cls.__name__ in where:
            sender = ("the session (or a host that runs the guard alone)"
                      if part == "guard" and not taken_by_session else "the host")
            yield (f"   **Sent by** {sender}, not as an answer; ``{cls.__module__}`` groups it "
                   f"under *{where[cls.__name__]}*.")
    yield ""
    yield from _indent(inspect.cleandoc(cls.__doc__ or ""))
    yield ""
    comments = ModuleAnalyzer.for_module(cls.__module__).find_attr_docs()
    for field in fields:
        yield f"   .. py:attribute:: {field.name}"
        if field.type is not None:
            shown = field.type if isinstance(field.type, str) else repr(field.type)
            yield f"      :type: {shown}"
        default = shown_default(field)
        yield ""
        if default is not None:
            yield f"      Default: {default}."
            yield ""
        for line in comments.get((cls.__name__, field.name), []):
            yield f"      {line}" if line else ""
        checked = checks(field.validator)
        if checked:
            yield ""
            yield f"      **Checked:** {'; '.join(checked)}."
        yield ""


def other_parts_events() -> Iterator[str]:
    """The paragraph after the session's own events: the other parts' events it also takes."""
    taken = session_events()
    session = import_module("agentturn.session")
    others = [cls for cls in registry.event_types()
              if registry.part_of(cls) != "session" and cls.__name__ in taken]
    shared = [cls for cls in others if getattr(session, cls.__name__, None) is cls]
    turn = [xref(cls) for cls in others if registry.part_of(cls) == "turn"]
    guard = [xref(cls) for cls in others if registry.part_of(cls) == "guard"]
    yield ".. rubric:: The other parts' events a session takes"
    yield ""
    yield ("A session host sends these too, to ``agentturn.session.reduce``; each is listed on "
           "its own part's page. Every event of the turn family: " + ", ".join(turn) + ".")
    yield ""
    yield ("And these events of the guard, which the session hands to the guard as they are "
           "(a client attaching, and facts about the user's settings and todos): "
           + ", ".join(guard) + ".")
    yield ""
    yield ("``agentturn.session`` exports " + ", ".join(f"``{cls.__name__}``" for cls in shared)
           + " as well: the same class under the same name, from either module.")
    yield ""


def registry_event(name: str) -> type:
    """The event class called ``name`` (every part's events have distinct names)."""
    for cls in registry.event_types():
        if cls.__name__ == name:
            return cls
    raise RuntimeError(f"an answered_by names {name!r}, which is no event")


class VocabularyDirective(SphinxDirective):
    """``.. agentturn-vocabulary:: PART [events|commands]``."""

    required_arguments = 1
    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        part = self.arguments[0]
        if part not in registry.PARTS:
            raise self.error(f"unknown part {part!r}; the parts are {registry.PARTS}")
        kind = self.arguments[1] if len(self.arguments) > 1 else "all"
        if kind not in ("all", "events", "commands"):
            raise self.error(f"the second argument is events or commands, not {kind!r}")
        answers = answered_commands()
        classes = [cls for cls in (*registry.event_types(), *registry.command_types())
                   if registry.part_of(cls) == part
                   and (kind == "all" or issubclass(cls, Event if kind == "events" else Command))]
        where: dict[str, str] = {}
        for module in {cls.__module__ for cls in classes}:
            where.update(sections(module))
        text = StringList()
        source = f"<agentturn-vocabulary {part}>"
        for cls in classes:
            for line in entry(cls, part, answers, where):
                text.append(line, source)
            text.append("", source)
        if part == "session" and kind in ("all", "events"):
            for line in other_parts_events():
                text.append(line, source)
        container = nodes.container()
        nested_parse_with_titles(self.state, text, container)
        return list(container.children)


class AnswersDirective(SphinxDirective):
    """``.. agentturn-answers::``: every awaiting command of every part, what answers it and
    the id the answer echoes, as a table."""

    def run(self) -> list[nodes.Node]:
        source = "<agentturn-answers>"
        text = StringList()
        rows = [".. list-table::", "   :header-rows: 1", "",
                "   * - awaiting command", "     - returned by", "     - answered by",
                "     - the answer echoes"]
        for cls in registry.command_types():
            if not issubclass(cls, AwaitingCommand):
                continue
            path = echoed(cls)
            rows += [f"   * - {xref(cls)}",
                     f"     - ``{REDUCER[registry.part_of(cls)]}``",
                     "     - " + ", ".join(xref(registry_event(name))
                                          for name in cls.answered_by),
                     f"     - ``{path}``" if path else "     - (no id: one at a time)"]
        for line in rows:
            text.append(line, source)
        container = nodes.container()
        nested_parse_with_titles(self.state, text, container)
        return list(container.children)


class CommandLineHelpDirective(SphinxDirective):
    """``.. agentturn-cli-help:: [COMMAND]``: the ``--help`` of ``agentturn`` (or of one of its
    commands), as the installed command line prints it."""

    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        from agentturn.tools.cli import main

        argv = [*self.arguments, "--help"]
        printed = io.StringIO()
        previous = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = "100"
        try:
            with contextlib.redirect_stdout(printed):
                main(argv)
        except SystemExit:
            pass
        finally:
            if previous is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = previous
        text = printed.getvalue()
        if "usage:" not in text:
            raise self.error(f"agentturn {' '.join(argv)} printed no usage: {text!r}")
        return [nodes.literal_block(text, text, language="text")]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("agentturn-cli-help", CommandLineHelpDirective)
    app.add_directive("agentturn-vocabulary", VocabularyDirective)
    app.add_directive("agentturn-answers", AnswersDirective)
    for module in ("agentturn.guard", "agentturn.session"):
        import_module(module)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}


__all__ = ["setup"]
