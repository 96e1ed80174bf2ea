"""Load, validate and compile the transition tables in ``specs/``.

>>> spec = load_spec()
>>> agent = spec.machines["agent"]
>>> step = agent.fire(agent.initial, "send", wake=True, lane="next_turn")
>>> step.row, [str(e) for e in step.effects]
('send.idle.wake', ['enqueue(next_turn)', 'schedule_driver()'])
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import final

from fsm_core._errors import SpecError, echo
from fsm_core._paths import specs_dir
from fsm_core.table._expr import Value
from fsm_core.table._load import _exists, load_clauses, load_table
from fsm_core.table._machine import Effect, Machine, State, Step
from fsm_core.table._table import Clause
from fsm_core.table._wiring import WiredAwait, WiredCall, WiredListener, Wiring, load_wiring

__all__ = [
    "Clause",
    "Effect",
    "Machine",
    "Spec",
    "State",
    "Step",
    "Value",
    "WiredAwait",
    "WiredCall",
    "WiredListener",
    "Wiring",
    "load_clauses",
    "load_spec",
    "load_table",
    "load_wiring",
]

_CLAUSES_FILE = "clauses.toml"
_WIRING_FILE = "wiring.toml"
"""The file of a specs directory that connects its tables (not a table itself)."""
_NOT_TABLES = frozenset({_CLAUSES_FILE, _WIRING_FILE})
"""The files of a specs directory that are no table."""


@final
@dataclass(frozen=True, slots=True)
class Spec:
    """Every table of a specs directory, compiled, with the clause catalogue they cite and
    the wiring that connects them (None for a directory without ``wiring.toml``)."""

    root: Path
    clauses: dict[str, Clause]
    machines: dict[str, Machine]
    wiring: Wiring | None = None


def load_spec(root: Path | None = None) -> Spec:
    """Load ``specs/``: the clause catalogue, every other ``*.toml`` as a machine, then
    ``wiring.toml`` (if present) against those machines.

    Raises :class:`SpecError` for the first fault found, naming file and row; a ``root``
    that is not a directory is a fault too. A failed load keeps nothing: only a whole
    :class:`Spec` is cached.
    """
    if root is None:
        return _load(specs_dir())
    try:
        resolved = root.resolve()
    except OSError as e:
        raise SpecError(str(root), "", f"cannot resolve the path: {e.strerror or e}") from None
    except RuntimeError:  # how Path.resolve reports a symlink loop before Python 3.13
        raise SpecError(str(root), "", "cannot resolve the path: a symlink loop") from None
    if not _exists(resolved, Path.is_dir):
        raise SpecError(str(root), "", "not a directory; expected a directory of tables")
    return _load(resolved)


@cache
def _load(root: Path) -> Spec:
    clauses = load_clauses(root / _CLAUSES_FILE, f"{root.name}/{_CLAUSES_FILE}")
    machines: dict[str, Machine] = {}
    for path in sorted(root.glob("*.toml")):
        if path.name in _NOT_TABLES:
            continue
        display = f"{root.name}/{path.name}"
        machine = load_table(path, clauses, display)
        if machine.name in machines:
            raise SpecError(
                display, "[machine]", f"machine name {echo(machine.name)} is used twice"
            )
        machines[machine.name] = machine
    wiring_path = root / _WIRING_FILE
    wiring = None
    if _exists(wiring_path, Path.is_file):
        wiring = load_wiring(wiring_path, machines, clauses, f"{root.name}/{_WIRING_FILE}")
    return Spec(root, clauses, machines, wiring)
