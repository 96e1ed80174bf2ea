"""Turn a model into what the explorer needs: a :class:`System` plus names for its states."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsm_core.check._agent import AgentSystem
from fsm_core.check._codegen import compile_predicates, compile_successors
from fsm_core.check._explore import System
from fsm_core.check._modelfile import Model
from fsm_core.check._moves import Move
from fsm_core.check._tree import TreeSystem


@dataclass(frozen=True, slots=True)
class Built:
    """A model ready to explore: the system, the names of a state's positions, the moves."""

    # A model's state is a tuple whose layout ``names`` describes; its element types vary
    # by kind (values for a table, node tuples for a tree), so the system is typed loosely.
    system: System[Any]
    names: tuple[str, ...]
    moves: list[Move]


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
        system = System(
            model.name, m.initial, compiled.successors, moves, violated,
            lambda s: quiet(s) is None,
        )  # fmt: skip
        return Built(system, m.names, moves)
    if model.kind == "agent":
        agent = AgentSystem(model)
        return Built(agent.system, agent.names, agent.labels)
    tree = TreeSystem(model)
    return Built(tree.system, tree.names, tree.labels)
