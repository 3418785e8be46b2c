"""Phase graphs: declared once with ``transitions``, compiled to a table, drawn as Mermaid.

Theory of operation
-------------------
Each part that has phases declares its graph once, as a list of edges ``(event name, sources,
destinations)``, in a :class:`PhaseGraph`, which compiles them into a frozen mapping
``(phase, event name) -> destinations`` (every phase named must be a member of the part's phase
enum, or building the graph raises). :meth:`PhaseGraph.validate` hands the same edges to a
``transitions.Machine(model=None, auto_transitions=False)``, which validates the states and the
transitions; it runs when the graph is drawn (the tests draw every graph) and on demand, not at
import: ``import agentturn`` does not load ``transitions``.

Reducers consult only that table (:meth:`PhaseGraph.check`): a missing entry is host misuse and
raises :class:`agentturn.UnexpectedEvent` before anything is computed. Reducers never call
``Machine.trigger`` at run time (one trigger costs tens of microseconds; a dict lookup well under
one). :meth:`PhaseGraph.mermaid` draws the same declaration with ``transitions``' Mermaid engine
(every edge, each label once, without ``transitions``' "current state" colours, which mean
nothing in a static graph), and the tests check that the drawing's edges equal the table's, so
the docs cannot drift. :mod:`agentturn.tools.diagrams` draws the readable main-path view.

An edge whose event is not an event class (for example ``request_title``) is a transition a part
takes on its own initiative, inside a step caused by another event; it is drawn and tabled like
any other edge so the graph stays complete.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Generic, NoReturn, TypeVar

from .errors import UnexpectedEvent

__all__ = ["Edge", "PhaseGraph"]

P = TypeVar("P", bound=enum.Enum)
H = TypeVar("H")

#: One declared edge: the event (class) name, the phases it leaves, the phases it may enter.
Edge = tuple[str, Iterable[P], Iterable[P]]


class PhaseGraph(Generic[P]):
    """A part's phase graph: declared once, used as a plain table, validated and drawn by
    ``transitions`` on demand."""

    def __init__(self, part: str, phases: type[P], initial: P,
                 edges: Sequence[tuple[str, Iterable[P], Iterable[P]]]) -> None:
        self.part = part
        self.phases = phases
        self.initial = initial
        triples: list[tuple[P, str, P]] = []
        for trigger, source_phases, dests in edges:
            sources, dest_list = list(source_phases), list(dests)
            for phase in (*sources, *dest_list):
                if not isinstance(phase, phases):
                    raise TypeError(f"{part}: {phase!r} in the edge {trigger!r} is not a "
                                    f"{phases.__name__}")
            for source in sources:
                triples.extend((source, trigger, dest) for dest in dest_list)
        self._triples = triples
        # Grouped by name first: an Enum member hashes in Python, its name in C.
        grouped: dict[tuple[str, str], dict[str, P]] = {}
        for source, trigger, dest in triples:
            grouped.setdefault((source._name_, trigger), {})[dest._name_] = dest
        table = {(phases[source], trigger): frozenset(dests.values())
                 for (source, trigger), dests in grouped.items()}
        self.table: Mapping[tuple[P, str], frozenset[P]] = MappingProxyType(table)
        accepts: dict[P, set[str]] = {phase: set() for phase in phases}
        for source, trigger in table:
            accepts[source].add(trigger)
        self.accepts: Mapping[P, frozenset[str]] = MappingProxyType(
            {phase: frozenset(names) for phase, names in accepts.items()}
        )
        # The hot-path copy of the table's keys: Enum members hash through a Python-level
        # ``__hash__``, their ``_name_`` strings in C, and every reducer step does this lookup.
        self._keys = frozenset(grouped)

    def _machine_spec(self) -> dict[str, Any]:
        """The declaration as ``transitions`` takes it."""
        return {
            "states": [phase.name for phase in self.phases],
            "initial": self.initial.name,
            "transitions": [
                {"trigger": trigger, "source": source.name, "dest": dest.name}
                for source, trigger, dest in dict.fromkeys(self._triples)  # each edge once
            ],
            "auto_transitions": False,
        }

    def validate(self) -> None:
        """Build the declaration as a ``transitions.Machine``, which raises on an unknown state
        or a malformed transition. Drawing the graph (:meth:`mermaid`) validates it too."""
        from transitions import Machine

        Machine(model=None, **self._machine_spec())

    def check(self, phase: P, event: Any) -> None:
        """Raise :class:`UnexpectedEvent` unless ``event``'s type is accepted in ``phase``."""
        if (phase._name_, type(event).__name__) not in self._keys:
            self.refuse(phase, event)

    def refuse(self, phase: P, event: Any) -> NoReturn:
        """Raise :class:`UnexpectedEvent` for ``event`` in ``phase``, naming what it accepts."""
        raise UnexpectedEvent(
            part=self.part,
            phase=phase.name,
            event=event,
            expected="one of " + ", ".join(sorted(self.accepts[phase]) or ["nothing"]),
        )

    def routes(self, handlers: Mapping[type, H]) -> Mapping[tuple[str, type], H]:
        """The table joined with a reducer's handlers: ``(phase name, event class) -> handler``
        for every edge whose event has a handler. A reducer builds it once, so the graph stays
        the one place that says what each phase accepts."""
        by_name = {cls.__name__: cls for cls in handlers}
        if len(by_name) != len(handlers):
            raise TypeError(f"{self.part}: two handled event classes share a name")
        return MappingProxyType({(phase._name_, by_name[name]): handlers[by_name[name]]
                                 for (phase, name) in self.table if name in by_name})

    def edges(self) -> frozenset[tuple[str, str, str]]:
        """Every edge as ``(source name, event name, destination name)``."""
        return frozenset(
            (source.name, trigger, dest.name)
            for (source, trigger), dests in self.table.items()
            for dest in dests
        )

    def events(self) -> tuple[str, ...]:
        """Every event name of the declaration, in the order it is first declared."""
        return tuple(dict.fromkeys(trigger for _, trigger, _ in self._triples))

    def mermaid(self) -> str:
        """A Mermaid ``stateDiagram-v2`` of the whole declaration, drawn by ``transitions``:
        every edge, self-loops included, each label once, no styling."""
        from transitions.extensions import GraphMachine

        class _Model:
            pass

        model = _Model()
        GraphMachine(model=model, graph_engine="mermaid", title=self.part,
                     **self._machine_spec())
        text = str(model.get_graph().draw(None))  # type: ignore[attr-defined]
        # transitions writes the bare title as front matter; Mermaid reads ``title: ...`` only.
        heading = f"---\n{self.part}\n---\n"
        if text.startswith(heading):
            text = f"---\ntitle: {self.part}\n---\n" + text[len(heading):]
        # transitions colours the machine's current state (the initial one here): a static
        # graph has no current state, so every style line goes.
        return "\n".join(line for line in text.splitlines()
                         if not line.lstrip().startswith(("classDef ", "Class ")))
