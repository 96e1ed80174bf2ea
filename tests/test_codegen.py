"""The generated successor function agrees with the interpreter on every state of the domain."""

from __future__ import annotations

import pytest

from fsm_core import TransitionError, load_spec
from fsm_core.check._codegen import compile_predicates, compile_successors

SPEC = load_spec()


@pytest.mark.parametrize("name", sorted(SPEC.machines))
def test_generated_successors_equal_the_interpreter_everywhere(name: str) -> None:
    machine = SPEC.machines[name]
    compiled = compile_successors(machine)
    for state in machine.domain():
        generated = sorted((compiled.labels[i], t) for i, t in compiled.successors(state))
        interpreted = []
        for event in machine.table.events:
            for args in machine.all_arguments(event):
                try:
                    step = machine.fire_args(state, event, args)
                except TransitionError:
                    continue
                if step.row is not None:
                    interpreted.append(((event, step.row, args), step.target))
        assert generated == sorted(interpreted), machine.format_state(state)


@pytest.mark.parametrize("name", sorted(SPEC.machines))
def test_generated_invariants_equal_the_interpreter_everywhere(name: str) -> None:
    machine = SPEC.machines[name]
    first = compile_predicates(machine, {i.id: i.expr for i in machine.table.invariants})
    for state in machine.domain():
        broken = machine.violated(state)
        assert first(state) == (broken[0] if broken else None)
