"""The cache of passed proofs: a table proved once loads without its domain search, and
nothing the cache holds, lacks or cannot write changes what a load reports."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from fsm_core import SpecError, load_spec
from fsm_core._paths import models_dir, specs_dir
from fsm_core.table import _proofs
from fsm_core.table._codegen import compile_successors
from fsm_core.table._domain import domain_holds
from fsm_core.table._load import load_clauses, load_table
from fsm_core.table._machine import Machine
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import FSM_CORE, copy_specs

_load = importlib.import_module("fsm_core.table._load")  # the package's _load is a function


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache of this test's own; returns the directory its entries go to."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("FSM_CORE_NO_CACHE", raising=False)
    return tmp_path / "xdg" / "fsm-core" / "proofs"


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tables whose domain is searched from now on, by machine name, in order."""
    seen: list[str] = []

    def spy(m: Machine) -> bool:
        seen.append(m.name)
        return domain_holds(m)

    monkeypatch.setattr(_load, "domain_holds", spy)
    return seen


def test_a_proved_table_is_not_searched_again(
    cache: Path, searches: list[str], tmp_path: Path
) -> None:
    clauses = load_clauses(specs_dir() / "clauses.toml")
    load_table(specs_dir() / "agent.toml", clauses)
    load_table(specs_dir() / "agent.toml", clauses)
    assert searches == ["agent"]
    assert len(list(cache.iterdir())) == 1
    bench = models_dir() / "bench" / "turncancel.toml"
    bench_clauses = load_clauses(bench.parent / "clauses.toml")
    load_table(bench, bench_clauses)
    load_table(bench, bench_clauses, constants={"K": 2, "T": 2})
    # The proof runs at the declared constants whatever a model overrides: the same proof.
    assert searches == ["agent", "turncancel"]


def test_an_edited_checker_proves_every_table_again(
    cache: Path, searches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clauses = load_clauses(specs_dir() / "clauses.toml")
    load_table(specs_dir() / "admission.toml", clauses)
    monkeypatch.setattr(_proofs, "_checker", lambda: b"the loader's source, edited")
    load_table(specs_dir() / "admission.toml", clauses)
    assert searches == ["admission", "admission"]
    assert len(list(cache.iterdir())) == 2


def test_an_edited_table_is_proved_again_and_its_fault_reported(
    cache: Path, searches: list[str], tmp_path: Path
) -> None:
    specs = copy_specs(tmp_path / "a")
    load_spec(specs)
    entries = sorted(cache.iterdir())
    assert sorted(searches) == ["activation", "admission", "agent"]
    mutant = BY_NAME["running_before_holder"]  # a fault only the domain search finds
    mutated = copy_specs(tmp_path / "b")
    mutant.plant(mutated)
    for _ in range(2):
        with pytest.raises(SpecError, match=r"publish_status\(running\) requires "):
            load_spec(mutated)
    assert sorted(cache.iterdir()) == entries  # a fault is never recorded
    assert searches.count("agent") == 3


def test_a_corrupt_entry_is_no_proof(cache: Path, searches: list[str]) -> None:
    clauses = load_clauses(specs_dir() / "clauses.toml")
    load_table(specs_dir() / "admission.toml", clauses)
    (entry,) = cache.iterdir()
    good = entry.read_bytes()
    for bad in [b"", good[:-2], good.replace(b"passed", b"failed"), b"\xff" * 300]:
        entry.write_bytes(bad)
        load_table(specs_dir() / "admission.toml", clauses)
        assert entry.read_bytes() == good  # proved again, and recorded again
    entry.unlink()
    entry.mkdir()  # not even a file
    load_table(specs_dir() / "admission.toml", clauses)
    assert searches == ["admission"] * 6


def test_an_entry_another_user_could_have_planted_is_no_proof(
    cache: Path, searches: list[str]
) -> None:
    """A key is computed from public inputs: in a directory others may write, or owned by
    someone else, an entry could pass a faulty table, so it counts for nothing."""
    clauses = load_clauses(specs_dir() / "clauses.toml")
    load_table(specs_dir() / "admission.toml", clauses)
    (entry,) = cache.iterdir()
    for mode in (0o777, 0o720, 0o702):
        cache.chmod(mode)
        load_table(specs_dir() / "admission.toml", clauses)
    cache.chmod(0o700)
    load_table(specs_dir() / "admission.toml", clauses)  # private again: the entry counts
    assert searches == ["admission"] * 4
    if os.getuid() == 0:  # only root can hand a file to another user
        os.chown(entry, 12345, -1)
        load_table(specs_dir() / "admission.toml", clauses)
        assert searches == ["admission"] * 5


def test_a_cache_that_cannot_be_written_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, searches: list[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    clauses = load_clauses(specs_dir() / "clauses.toml")
    for _ in range(2):
        load_table(specs_dir() / "admission.toml", clauses)
    assert searches == ["admission", "admission"]
    assert blocker.read_text(encoding="utf-8") == "not a directory"


def test_no_cache_turns_it_off(
    cache: Path, searches: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FSM_CORE_NO_CACHE", "1")
    clauses = load_clauses(specs_dir() / "clauses.toml")
    for _ in range(2):
        load_table(specs_dir() / "admission.toml", clauses)
    assert searches == ["admission", "admission"]
    assert not cache.exists()


def test_a_table_loaded_from_the_cache_is_the_table_proved(cache: Path) -> None:
    clauses = load_clauses(specs_dir() / "clauses.toml")
    proved = load_table(specs_dir() / "agent.toml", clauses)
    cached = load_table(specs_dir() / "agent.toml", clauses)
    assert cached.table == proved.table
    assert compile_successors(cached).source == compile_successors(proved).source


def test_a_cached_proof_gives_the_same_check_figures(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("FSM_CORE_NO_CACHE", None)

    def figures() -> list[tuple[str, str, int, int, int]]:
        out = subprocess.run(
            [*FSM_CORE, "check", "window", "admission", "--json"],
            capture_output=True, text=True, env=env, check=True,
        ).stdout  # fmt: skip
        return [
            (m["name"], m["verdict"], m["states"], m["transitions"], m["depth"])
            for m in json.loads(out)["models"]
        ]

    cold = figures()
    assert any((tmp_path / "fsm-core" / "proofs").iterdir())
    assert figures() == cold == [("window", "ok", 24, 87, 5), ("admission", "ok", 2, 49, 1)]


def test_the_cache_keeps_its_most_recently_used_entries(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write past KEEP entries removes the least recently used down to three quarters of
    KEEP; an entry read (a hit) counts as used, so the tables in use stay proved."""
    monkeypatch.setattr(_proofs, "KEEP", 8)
    keys = [f"{n:064x}" for n in range(8)]
    for n, key in enumerate(keys):
        _proofs.record(key)
        os.utime(cache / key, ns=(n * 10**9, n * 10**9))  # written in this order
    assert _proofs.proved(keys[0])  # the oldest written, used just now
    stray = cache / ".not-a-key.tmp"
    stray.write_text("another writer's temporary file")
    _proofs.record(f"{8:064x}")
    left = sorted(p.name for p in cache.iterdir())
    assert left == sorted([keys[0], *keys[4:], f"{8:064x}", stray.name])
    assert all(_proofs.proved(k) for k in left if k != stray.name)
    assert not _proofs.proved(keys[1])
