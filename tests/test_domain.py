"""The generated search over a table's domain gives the interpreted search's verdict.

The loader trusts :func:`~fsm_core.table._domain.domain_holds` to skip its interpreted search:
a True where the interpreted search finds a fault would load a faulty table. These tests hold
the two to the same verdict on the shipped tables, on every planted mutant of them and on every
faulty table of ``tests/test_spec_faults.py``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from fsm_core import SpecError
from fsm_core._paths import specs_dir
from fsm_core.table._domain import domain_holds, generated_search
from fsm_core.table._limits import DEFAULT_LIMITS
from fsm_core.table._load import load_clauses
from fsm_core.table._machine import Machine
from fsm_core.tools._mutants import MUTANTS, Mutant
from tests.helpers import copy_specs
from tests.test_spec_faults import BASE, TABLE_FAULTS, edit, write_specs

_load = importlib.import_module("fsm_core.table._load")  # the package's _load is a function


def verdicts(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bool, bool] | None:
    """(generated, interpreted): whether each search over ``path``'s domain finds no fault; None
    when the table is refused before that search."""
    f = _load._File(path.name)
    try:
        data = f.read(path)
        clauses = load_clauses(path.parent / "clauses.toml")
        machine = Machine(_load._parse(f, data, clauses, {}, DEFAULT_LIMITS))
        _load._validate(f, machine, DEFAULT_LIMITS, exhaustive=False)
        _load._domain_fits(f, machine.table, DEFAULT_LIMITS)
    except SpecError:
        return None
    generated = generated_search(machine)
    with monkeypatch.context() as patch:
        patch.setattr(_load, "domain_holds", lambda m: False)
        try:
            _load._validate(f, machine, DEFAULT_LIMITS, exhaustive=True)
        except SpecError:
            return generated, False
    return generated, True


@pytest.mark.parametrize("table", ["agent.toml", "activation.toml", "admission.toml"])
def test_the_shipped_tables_hold_in_both_searches(
    table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert verdicts(specs_dir() / table, monkeypatch) == (True, True)


def test_the_loader_generates_code_only_where_it_pays() -> None:
    clauses = load_clauses(specs_dir() / "clauses.toml")
    agent, admission = (
        _load.load_table(specs_dir() / f"{name}.toml", clauses) for name in ("agent", "admission")
    )
    assert domain_holds(agent)  # 3,072 valuations, 212 cases
    assert not domain_holds(admission)  # one valuation: the interpreter is as quick
    assert generated_search(admission)


@pytest.mark.slow  # the interpreted search per mutant: CI's slow stage
@pytest.mark.parametrize(
    "mutant", [pytest.param(m, id=m.name) for m in MUTANTS if m.table != "wiring.toml"]
)
def test_the_searches_agree_on_every_mutant(
    mutant: Mutant, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = copy_specs(tmp_path)
    mutant.plant(specs)
    found = verdicts(specs / mutant.table, monkeypatch)
    if found is not None:
        generated, interpreted = found
        assert generated == interpreted


def test_the_load_killed_mutants_fail_the_generated_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutants the loader refuses for a domain fault: the generated search sees each."""
    killed = [m for m in MUTANTS if m.load_killed]
    assert killed
    for mutant in killed:
        specs = copy_specs(tmp_path / mutant.name)
        mutant.plant(specs)
        assert verdicts(specs / mutant.table, monkeypatch) == (False, False), mutant.name


@pytest.mark.parametrize(("old", "new", "message"), TABLE_FAULTS)
def test_the_searches_agree_on_every_faulty_table(
    old: str, new: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = write_specs(tmp_path, {"t.toml": edit(BASE, old, new)})
    found = verdicts(specs / "t.toml", monkeypatch)
    if found is not None:
        generated, interpreted = found
        assert generated == interpreted
