"""Turn a model into what the explorer needs: a :class:`System` plus names for its states."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fsm_core.check._agent import agent_engine
from fsm_core.check._codegen import compile_predicates, compile_successors
from fsm_core.check._compose import Composition, Property, explorer_properties
from fsm_core.check._config import Model
from fsm_core.check._explore import System
from fsm_core.check._moves import Move
from fsm_core.check._tree import tree_engine


@dataclass(frozen=True, slots=True)
class Built:
    """A model ready to explore: the system, the names of a state's positions, the moves and
    the properties it is checked against besides the table's own."""

    # A model's state is a tuple whose layout ``names`` describes; its element types vary
    # by kind (values for a table, node tuples for a tree), so the system is typed loosely.
    system: System[Any]
    names: tuple[str, ...]
    moves: list[Move]
    properties: tuple[Property, ...]


def build(model: Model) -> Built:
    m = model.machine
    if model.kind == "table":
        compiled = compile_successors(m)
        params = {e: [p for p, _ in spec.params] for e, spec in m.table.events.items()}
        moves = [
            Move(event, tuple(zip(params[event], args, strict=True)), row)
            for event, row, args in compiled.labels
        ]
        violated = compile_predicates(m, {i.id: i.expr for i in m.table.invariants})
        quiet = compile_predicates(m, {"quiescent": m.table.defs["quiescent"].expr})

        def quiescent(s: Sequence[Any]) -> bool:
            return quiet(tuple(s)) is None

        system = System(model.name, m.initial, compiled.successors, moves, violated, quiescent)
        return Built(system, m.names, moves, explorer_properties(quiescent))
    c: Composition = agent_engine(model) if model.kind == "agent" else tree_engine(model)
    system = System(model.name, c.initial(), c.steps, c.moves, c.first_violated, c.quiescent)
    return Built(system, c.layout.names, c.moves, c.properties())
