"""Turn a model into what the explorer needs: its :class:`Composition`, as a :class:`System`
plus names for its states.

Every kind is a composition: ``table`` is :class:`TableComposition`, ``agent`` and
``activation-tree`` are the :class:`~fsm_core.check._composed._compose.Engine` of their wiring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from fsm_core.check._composed._agent import agent_engine
from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._composed._compose import Composition, Engine, Layout
from fsm_core.check._composed._symmetry import Reduction, reduced_grouped, reduced_steps
from fsm_core.check._composed._tree import tree_engine
from fsm_core.check._config import Model
from fsm_core.check._explore import Grouped, System
from fsm_core.check._moves import Move
from fsm_core.check._property import Property, explorer_properties, table_properties
from fsm_core.table._codegen import compile_predicates, compile_successors
from fsm_core.table._machine import Machine


@dataclass(frozen=True, slots=True)
class Built:
    """A model ready to explore: the system, the names of a state's positions, the moves and
    every property it is checked against."""

    # A model's state is a tuple whose layout ``names`` describes; its element types vary
    # by kind (values for a table, node tuples for a tree), so the system is typed loosely.
    system: System[Any]
    names: tuple[str, ...]
    moves: list[Move]
    properties: tuple[Property, ...]
    composition: Composition
    """What the system runs (a partitioned search packs the states it receives with it)."""
    reduction: Reduction | None = None
    """With ``[tree] symmetry``: how ``system`` maps states to their orbits' representatives
    (its successors are already mapped), and the unreduced steps a trace is rebuilt on."""


class TableComposition:
    """The ``table`` kind: one table on its own, every event always offered, each row one
    atomic step (so no contract or step invariant is checked inside a row).

    The state is the table's variables. :meth:`steps` is the successor function the code
    generator compiles from the rows and :meth:`first_violated` one compiled pass over every
    invariant: the benchmark models' speed is theirs, and the engine's listener machinery,
    which a table on its own has no use for, is never entered.
    """

    def __init__(self, model: Model) -> None:
        m = model.machine
        self.name = model.name
        self.layout = Layout(m.names)
        self._initial = m.initial
        compiled = compile_successors(m)
        params = {e: [p for p, _ in spec.params] for e, spec in m.table.events.items()}
        self.moves = [
            Move(event, tuple(zip(params[event], args, strict=True)), row)
            for event, row, args in compiled.labels
        ]
        self.steps = compiled.successors
        # The generated code unpacks a state's positions, so any sequence of them will do.
        self.first_violated = cast(
            Callable[[Sequence[Any]], str | None],
            compile_predicates(m, {i.id: i.expr for i in m.table.invariants}),
        )
        self.quiescent = _quiescence(m)
        self._properties = table_kind_properties(m, self.quiescent)

    def initial(self) -> tuple[Any, ...]:
        return self._initial

    def unpack(self, state: Any) -> tuple[Any, ...]:
        return tuple(state)

    def properties(self) -> tuple[Property, ...]:
        return self._properties


def _quiescence(machine: Machine) -> Callable[[Sequence[Any]], bool]:
    """The table's ``quiescent`` definition, compiled."""
    quiet = compile_predicates(machine, {"quiescent": machine.table.defs["quiescent"].expr})
    return lambda s: quiet(tuple(s)) is None


def table_kind_properties(
    machine: Machine, quiescent: Callable[[Sequence[Any]], bool]
) -> tuple[Property, ...]:
    """A ``table`` model's properties: the table's invariants, then the explorer's."""
    own = table_properties(machine.table, ("",), contracts=False)
    return (*own, *explorer_properties(quiescent))


def compose(model: Model, *, interpreted: bool = False) -> Composition:
    """The composition of ``model``'s kind; an agent's or a tree's steps run compiled unless
    ``interpreted``."""
    if model.kind == "table":
        return TableComposition(model)
    engine = agent_engine if model.kind == "agent" else tree_engine
    return engine(model, interpreted=interpreted)


def declared(model: Model) -> tuple[Property, ...]:
    """Every property a check of ``model`` can report, without compiling a table's successors
    (the model loader validates ``[expect] property`` against these)."""
    if model.kind == "table":
        return table_kind_properties(model.machine, _quiescence(model.machine))
    return compose(model).properties()


def build(model: Model, *, interpreted: bool = False) -> Built:
    """``model`` ready to explore; ``interpreted`` as for :func:`compose`."""
    c = compose(model, interpreted=interpreted)
    properties = c.properties()
    deadlock = next(p.name for p in properties if p.kind == "deadlock-free")
    steps: Callable[[Any], Sequence[tuple[int, Any]]] = c.steps
    grouped: Grouped[Any] | None = None
    level_done: Callable[[Sequence[Any]], None] | None = None
    if isinstance(c, CompiledEngine):
        grouped, level_done = c.grouped, c.level_done
    reduction = None
    if model.symmetry and isinstance(c, Engine):
        reduction = Reduction(c)
        steps = reduced_steps(steps, reduction.canonical)
        grouped = None if grouped is None else reduced_grouped(grouped, reduction.canonical)
    system = System(
        model.name, c.initial(), steps, c.moves, c.first_violated, c.quiescent, deadlock,
        c.unpack, grouped, level_done,
    )  # fmt: skip
    return Built(system, c.layout.names, c.moves, properties, c, reduction)
