"""The generated successor function agrees with the interpreter on every state of the domain,
and holds nothing of the table's text: a table can never make the checker run its code."""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import replace
from pathlib import Path

import pytest

from fsm_core import Machine, SpecError, TransitionError, load_spec
from fsm_core._paths import models_dir
from fsm_core.check import load_model
from fsm_core.check._codegen import compile_predicates, compile_successors
from fsm_core.table._expr import BOOL
from fsm_core.table._table import StateSpec, Variable
from tests.helpers import exactly

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


def _shipped_machines() -> list[Machine]:
    bench = load_model(models_dir() / "bench_S.toml").machine
    return [*SPEC.machines.values(), bench]


@pytest.mark.parametrize("machine", _shipped_machines(), ids=lambda m: m.name)
def test_generated_source_holds_only_names_and_literals_the_generator_controls(
    machine: Machine,
) -> None:
    source = compile_successors(machine).source
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    assert [tok.string for tok in tokens if tok.type == tokenize.COMMENT] == []
    own = {"s", "out", "successors", *(f"{p}{n}" for p in ("v_", "n_") for n in machine.names)}
    values: set[object] = {*machine.table.state_names}
    values |= {v for t in machine.table.types.values() if t.kind == "enum" for v in t.values}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            assert node.id in own, node.id
        elif isinstance(node, ast.Attribute):
            assert (ast.unparse(node.value), node.attr) == ("out", "append")
        elif isinstance(node, ast.Constant):
            assert type(node.value) in (bool, int) or node.value in values, node.value
    # So no id or doc of the table is in it (the only dot in the source is out.append's).
    t = machine.table
    texts = [r.id for r in t.rows if "." in r.id] + [r.doc for r in t.rows if r.doc]
    texts += [s.doc for s in t.states if s.doc] + [t.title]
    assert [text for text in texts if text in source] == []


def test_a_hostile_row_id_reaches_the_labels_but_never_the_source(tmp_path: Path) -> None:
    # The loader refuses such an id; here the table reaches the generator another way.
    marker = tmp_path / "ran"
    hostile = (
        f"x\nimport pathlib; pathlib.Path({str(marker)!r}).touch()\n"
        "def _(s):\n    if s:\n        if s:  #"
    )
    table = SPEC.machines["agent"].table
    rows = (replace(table.rows[0], id=hostile), *table.rows[1:])
    compiled = compile_successors(Machine(replace(table, rows=rows)))
    assert not marker.exists()
    assert hostile not in compiled.source
    assert hostile in {row for _, row, _ in compiled.labels}


HOSTILE = "x = __import__('os')"


def test_the_generator_refuses_a_name_that_is_not_an_identifier() -> None:
    table = SPEC.machines["agent"].table
    extra = Variable(HOSTILE, BOOL, False, "")
    with pytest.raises(
        SpecError,
        match=exactly(f"specs/agent.toml: refusing to generate code for the name {HOSTILE!r}"),
    ):
        compile_successors(Machine(replace(table, variables=(*table.variables, extra))))


def test_the_generator_refuses_a_value_that_is_not_an_identifier() -> None:
    table = SPEC.machines["agent"].table
    states = (*table.states, StateSpec(HOSTILE, ""))
    rows = (replace(table.rows[0], target=HOSTILE), *table.rows[1:])
    with pytest.raises(
        SpecError,
        match=exactly(f"specs/agent.toml: refusing to generate code for the value {HOSTILE!r}"),
    ):
        compile_successors(Machine(replace(table, states=states, rows=rows)))
