"""The vector backend finds what the default explorer finds: the same counts, the same verdict,
the same shortest trace, the same rows taken, wherever the two are compared.

The comparison runs on every default table model, on a table model over each shipped table
and over each spec mutant's table (the loader's proofs skipped: the backends must agree on a
broken table too), at state limits that cut levels anywhere, and on models built to break an
invariant, to deadlock and to lose quiescence. A model the backend cannot take falls back to
the default explorer and says why.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fsm_core._paths import models_dir, specs_dir
from fsm_core.check import Model, Report, check, load_model
from fsm_core.check._system import build
from fsm_core.check._vector import VectorSearch
from fsm_core.table import Machine
from fsm_core.table._codegen import compile_successors
from fsm_core.table._limits import DEFAULT_LIMITS
from fsm_core.table._load import _File, _parse, load_clauses, read_toml
from fsm_core.tools._mutants import MUTANTS, Mutant
from tests.helpers import edit, shipped_models
from tests.test_bench import _seed_the_dispose_bug
from tests.test_check_cli import run
from tests.test_spec_faults import write_specs

DEFAULT_TABLE_MODELS = [m for m in shipped_models() if m.kind == "table" and m.tier == "default"]


def outcome(report: Report) -> tuple[Any, ...]:
    """Everything a check reports that a backend decides."""
    r, v = report.result, report.violation
    return (
        report.verdict,
        r.states,
        r.transitions,
        r.depth,
        r.complete,
        None if v is None else (v.name, v.trace),
        sorted(r.labels_taken),
        report.dead_rows,
    )


def assert_same(model: Model, **options: Any) -> Report:
    """Check ``model`` with both backends; they must agree. The vector backend's report."""
    python = check(model, backend="python", **options)
    vector = check(model, backend="vector", **options)
    assert (python.backend, vector.backend, vector.fallback) == ("python", "vector", None)
    assert outcome(vector) == outcome(python)
    return vector


@pytest.mark.parametrize("model", DEFAULT_TABLE_MODELS, ids=lambda m: m.name)
def test_every_default_table_model_is_explored_alike(model: Model) -> None:
    report = assert_same(model)
    assert report.mismatches() == []


def _table_model(name: str, machine: Machine) -> Model:
    return Model(name, f"{name}.toml", "", "table", "default", machine)


def _unproven(table: str, mutant: Mutant | None = None) -> Machine:
    """specs/TABLE, with ``mutant`` planted, parsed and type-checked but not proven."""
    path = specs_dir() / table
    data = read_toml(path, f"specs/{table}")
    if mutant is not None:
        data = copy.deepcopy(data)
        mutant.apply(data)
    clauses = load_clauses(specs_dir() / "clauses.toml")
    return Machine(_parse(_File(f"specs/{table}"), data, clauses, {}, DEFAULT_LIMITS))


@pytest.mark.parametrize("table", ["agent.toml", "activation.toml"])
def test_a_table_model_over_each_shipped_table_is_explored_alike(table: str) -> None:
    assert_same(_table_model(table, _unproven(table)))


TABLE_MUTANTS = [m for m in MUTANTS if m.table != "wiring.toml"]
"""The mutants of a table (a mutant of the wiring has no table model to explore)."""


@pytest.mark.parametrize("mutant", TABLE_MUTANTS, ids=[m.name for m in TABLE_MUTANTS])
def test_a_table_model_over_each_spec_mutant_is_explored_alike(mutant: Mutant) -> None:
    assert_same(_table_model(mutant.name, _unproven(mutant.table, mutant)))


def test_the_mutants_break_table_models_too() -> None:
    """So the comparison above covers violations and their traces, not only clean runs."""
    broken = [
        m.name
        for m in TABLE_MUTANTS
        if check(_table_model(m.name, _unproven(m.table, m))).violation is not None
    ]
    assert len(broken) >= 5, broken


def _bench(scale: str) -> Model:
    return next(m for m in DEFAULT_TABLE_MODELS if m.name == f"bench_{scale}")


@pytest.mark.parametrize(
    ("scale", "limit"),
    [("S", n) for n in (1, 2, 3, 10, 100, 796, 797)] + [("M", n) for n in (4_321, 30_000)],
)
def test_a_state_limit_stops_both_at_the_same_state(scale: str, limit: int) -> None:
    report = assert_same(_bench(scale), max_states=limit)
    assert report.result.complete == (scale == "S" and limit >= 797)


def test_a_limit_at_a_level_boundary_stops_both_alike() -> None:
    model = _bench("S")
    # The states found up to each depth: a limit there stops at a level's last state.
    reached = [check(model, backend="python", max_states=n).result.states for n in range(1, 60, 7)]
    for limit in sorted(set(reached)):
        assert_same(model, max_states=limit)


def test_a_broken_invariant_has_the_same_shortest_trace(tmp_path: Path) -> None:
    model = load_model(_seed_the_dispose_bug(tmp_path))
    report = assert_same(model)
    assert report.violation is not None
    assert (report.violation.name, len(report.violation.trace)) == ("dispose_precedence", 5)
    for limit in range(1, report.result.states + 2, 11):
        assert_same(model, max_states=limit)


def test_successors_of_a_state_that_breaks_an_invariant_never_count(tmp_path: Path) -> None:
    """The vector backend computes a label's change assuming the invariants (here: that
    latch is set in maintenance, so ``latch := false`` is a known change); the state that
    breaks one gets successors that are wrong, and the search stops before they count."""
    path = _seed_the_dispose_bug(tmp_path)
    table = tmp_path / "bench" / "turncancel.toml"
    table.write_text(
        table.read_text(encoding="utf-8")
        + '\n[[invariants]]\nid = "maintenance_latches"\n'
        + 'holds = "phase == maintenance implies latch"\ndoc = "A test."\n'
        + 'clauses = ["B.invariants"]\n',
        encoding="utf-8",
    )
    report = assert_same(load_model(path))
    assert report.violation is not None
    assert (report.violation.name, len(report.violation.trace)) == ("maintenance_latches", 2)


def _tiny(tmp_path: Path, old: str, new: str) -> Model:
    """A table model over the spec faults' small table, with one edit."""
    specs = write_specs(tmp_path)
    edit(specs / "t.toml", old, new)
    path = tmp_path / "t_model.toml"
    path.write_text('[model]\ntable = "specs/t.toml"\nkind = "table"\n', encoding="utf-8")
    return load_model(path)


def test_a_deadlock_has_the_same_shortest_trace(tmp_path: Path) -> None:
    finish = 'from = ["stopping"]\nto = "idle"'
    model = _tiny(tmp_path, finish, f'{finish}\nguard = "false"')
    report = assert_same(model)
    assert report.violation is not None
    assert report.violation.name == "deadlock"


def test_a_state_that_cannot_settle_has_the_same_shortest_trace(tmp_path: Path) -> None:
    stays = 'from = ["stopping"]\nto = "idle"\ndo = ["holder := none", "settle()"]'
    model = _tiny(tmp_path, stays, 'from = ["stopping"]\ndo = ["settle()"]')
    report = assert_same(model)
    assert report.violation is not None
    assert report.violation.name == "quiescence_reachable"
    assert report.violation.state[0] == "stopping"


def test_the_sorted_visited_set_finds_what_the_byte_array_finds(tmp_path: Path) -> None:
    for model in [_bench("S"), load_model(_seed_the_dispose_bug(tmp_path))]:
        built = build(model)
        python = check(model, backend="python", liveness=False)
        search = VectorSearch(model, built.system, bytes_limit=0)
        result = search.explore()
        assert (result.states, result.transitions, result.depth, result.labels_taken) == (
            python.result.states,
            python.result.transitions,
            python.result.depth,
            python.result.labels_taken,
        )
        assert result.violation == python.violation


def test_labels_are_numbered_as_the_generated_successors_number_them() -> None:
    """A trace's labels index the same moves whichever backend found it."""
    model = _bench("S")
    search = VectorSearch(model, build(model).system)
    assert search.label_count == len(compile_successors(model.machine).labels)


# --- when the vector backend does not fit ---------------------------------------------------


def test_an_agent_model_falls_back_saying_why() -> None:
    model = load_model(models_dir() / "agent_races.toml")
    report = check(model, backend="vector", max_states=50)
    assert (report.backend, report.fallback) == (
        "python",
        "it is an agent model; the vector backend explores table models",
    )


def test_a_value_outside_its_domain_at_scale_falls_back_naming_the_row(tmp_path: Path) -> None:
    """The loader proves domains at the table's declared constants; at K = 2 this row makes
    nt 3, which the default explorer follows and the vector backend cannot pack."""
    bench = tmp_path / "bench"
    path = _seed_the_dispose_bug(tmp_path)
    edit(bench / "turncancel.toml", 'do = ["nt := nt + 1"', 'do = ["nt := nt + K"')
    model = load_model(path)
    python = check(model, backend="python")
    vector = check(model, backend="vector")
    assert (vector.backend, vector.fallback) == (
        "python",
        "row inject makes nt 3, outside its domain int[0..2]",
    )
    assert outcome(vector) == outcome(python)


def test_effects_too_large_to_expand_fall_back_naming_the_row(tmp_path: Path) -> None:
    """Each statement reads the last one's value three times: substituted into each other,
    twelve of them stand for 3^12 terms, which the generated successors never expand."""
    saturate = '"count := if count < 2 then count + 1 else count",'
    model = _tiny(tmp_path, saturate, saturate * 12)
    python = check(model, backend="python")
    vector = check(model, backend="vector")
    assert (vector.backend, vector.fallback) == (
        "python",
        "row finish.done's effects on count are too large to expand",
    )
    assert outcome(vector) == outcome(python)


def test_auto_takes_the_vector_backend_for_a_table_model_and_python_for_the_others() -> None:
    table = check(_bench("S"))
    agent = check(load_model(models_dir() / "agent_races.toml"), max_states=10)
    assert (table.backend, table.fallback) == ("vector", None)
    assert agent.backend == "python"


# --- the command line -------------------------------------------------------------------------


def test_check_backend_vector_reports_the_backend_in_json() -> None:
    r = run("bench_S", "--backend", "vector", "--json")
    assert r.code == 0
    (model,) = json.loads(r.out)["models"]
    assert (model["backend"], model["fallback"]) == ("vector", None)


def test_check_backend_vector_says_why_a_model_falls_back() -> None:
    r = run("agent_races", "--backend", "vector", "--max-states", "20")
    assert r.err == (
        "agent_races: explored by the python backend: it is an agent model; the vector "
        "backend explores table models\n"
    )


def test_check_backend_python_runs_the_default_explorer() -> None:
    r = run("bench_S", "--backend", "python", "--json")
    (model,) = json.loads(r.out)["models"]
    assert (model["backend"], model["fallback"]) == ("python", None)
