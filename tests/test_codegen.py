"""The generated successor function and rows agree with the interpreter on every state of the
domain, and hold nothing of the table's text: a table can never make the checker run its code."""

from __future__ import annotations

import ast
import io
import itertools
import re
import tokenize
from dataclasses import replace
from pathlib import Path

import pytest

from fsm_core import Machine, SpecError, TransitionError, load_spec
from fsm_core._paths import models_dir
from fsm_core.check import load_model
from fsm_core.table import State
from fsm_core.table._codegen import (
    IGNORED,
    REFUSED,
    CompiledRows,
    compile_contracts,
    compile_predicates,
    compile_rows,
    compile_stability,
    compile_successors,
)
from fsm_core.table._expr import BOOL, Value
from fsm_core.table._machine import REFUSED as MACHINE_REFUSED
from fsm_core.table._machine import Effect
from fsm_core.table._table import StateSpec, Variable
from tests.helpers import exactly, sweep

SPEC = load_spec()


@pytest.mark.parametrize(
    "name", sweep(sorted(SPEC.machines), str, fast={"activation", "admission"})
)
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


# --- rows as segments, for the compiled composition -----------------------------------------------


def run_rows(
    rows: CompiledRows, state: State, event: str, args: tuple[Value, ...]
) -> tuple[int, State, list[Effect]] | None:
    """Fire ``event`` through the generated code, performing each handed-over effect by
    resuming at once: the lookup's result, then the final state and every effect reached.
    None when the code stopped at a broken contract."""
    found = rows.lookups[event](state, args)
    if found < 0:
        return found, state, []
    row = rows.rows[found]
    values = list(state)
    reached: list[Effect] = []
    segment = 0
    while (handed := row.segments[segment](values, args)) is not None:
        site, arguments = handed
        reached.append(Effect(row.sites[site].effect, arguments))
        segment = row.sites[site].resume
        if segment < 0:
            return None
    return found, tuple(values), reached


@pytest.mark.parametrize("handed", ["every", "notifying"])
@pytest.mark.parametrize(
    "name", sweep(sorted(SPEC.machines), str, fast={"activation", "admission"})
)
def test_generated_rows_run_as_the_interpreter_runs_them(name: str, handed: str) -> None:
    """Each row run on from each effect it hands over (every effect, or the notifications):
    the same row, the same effects with the same arguments, the same state, from every state
    of the domain. From a state that breaks no invariant no contract breaks (the loader
    proved them), so the code never stops at one."""
    machine = SPEC.machines[name]
    performed = [n for n, e in machine.table.effects.items() if handed == "every" or e.notifies]
    rows = compile_rows(machine, performed)
    row_ids = [r.id for r in rows.rows]
    for state in machine.domain():
        valid = not machine.violated(state)
        for event in machine.table.events:
            for args in machine.all_arguments(event):
                found = machine.lookup(state, event, args)
                expected = (
                    IGNORED if found is None else REFUSED if found is MACHINE_REFUSED else None
                )
                ran = run_rows(rows, state, event, args)
                if ran is None:
                    assert not valid, (machine.format_state(state), event, args)
                    continue
                index, after, handed_over = ran
                if expected is not None:
                    assert index == expected, (machine.format_state(state), event, args)
                    continue
                step = machine.fire_args(state, event, args)
                assert row_ids[index] == step.row
                if valid:
                    reached = tuple(e for e in step.effects if e.name in performed)
                    assert (after, tuple(handed_over)) == (step.target, reached)


@pytest.mark.parametrize(
    "name", sweep(sorted(SPEC.machines), str, fast={"activation", "admission"})
)
def test_generated_contracts_and_step_invariants_equal_the_interpreter(name: str) -> None:
    machine = SPEC.machines[name]
    contracts = compile_contracts(machine)
    first_unstable = compile_stability(machine)
    stable = [s.id for s in machine.table.stable]
    states = list(machine.domain())
    for state in states:
        for effect, spec in machine.table.effects.items():
            for values in itertools.product(*(t.values for _, t in spec.params)):
                holds = effect not in contracts or contracts[effect](state, values)
                assert holds == (not machine.unmet(effect, state, values))
    # Every state against its successors and against the states a few positions on.
    for n, before in enumerate(states):
        afters = [states[(n + k) % len(states)] for k in (1, 7, 97)]
        for event in machine.table.events:
            for args in machine.all_arguments(event):
                if machine.lookup(before, event, args) not in (None, MACHINE_REFUSED):
                    afters.append(machine.fire_args(before, event, args).target)
        for after in afters:
            broken = machine.unstable(before, after)
            k = first_unstable(before, after)
            assert (stable[k] if k >= 0 else None) == (broken[0] if broken else None)


@pytest.mark.parametrize("machine", _shipped_machines(), ids=lambda m: m.name)
def test_generated_rows_hold_only_names_and_literals_the_generator_controls(
    machine: Machine,
) -> None:
    # Every other effect handed over, so both kinds of site are generated.
    source = compile_rows(machine, list(machine.table.effects)[::2]).source
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    assert [tok.string for tok in tokens if tok.type == tokenize.COMMENT] == []
    values: set[object] = {*machine.table.state_names, None}
    values |= {v for t in machine.table.types.values() if t.kind == "enum" for v in t.values}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            assert re.fullmatch(r"r\d+_\d+|e\d+", node.name), node.name
            assert [a.arg for a in node.args.args] == ["v", "a"]
        elif isinstance(node, ast.Name):
            assert node.id in {"v", "a", "p"}, node.id
        elif isinstance(node, ast.Attribute):
            raise AssertionError(ast.unparse(node))
        elif isinstance(node, ast.Constant):
            assert type(node.value) in (bool, int) or node.value in values, node.value
    t = machine.table
    texts = [r.id for r in t.rows if "." in r.id] + [r.doc for r in t.rows if r.doc]
    texts += [e.doc for e in t.effects.values() if e.doc] + [t.title]
    assert [text for text in texts if text in source] == []


def test_a_hostile_row_id_reaches_the_row_code_but_never_its_source(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hostile = f"x\nimport pathlib; pathlib.Path({str(marker)!r}).touch()\n"
    table = SPEC.machines["agent"].table
    rows = (replace(table.rows[0], id=hostile), *table.rows[1:])
    compiled = compile_rows(Machine(replace(table, rows=rows)), ["publish_status"])
    assert not marker.exists()
    assert hostile not in compiled.source
    assert hostile in {row.id for row in compiled.rows}
