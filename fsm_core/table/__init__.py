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

from fsm_core._errors import SpecError, echo
from fsm_core._paths import specs_dir
from fsm_core.table._load import _exists, load_clauses, load_table
from fsm_core.table._machine import Effect, Machine, State, Step
from fsm_core.table._table import Clause

__all__ = [
    "Clause",
    "Effect",
    "Machine",
    "Spec",
    "State",
    "Step",
    "load_clauses",
    "load_spec",
    "load_table",
]

_CLAUSES_FILE = "clauses.toml"


@dataclass(frozen=True, slots=True)
class Spec:
    """Every table of a specs directory, compiled, with the clause catalogue they cite."""

    root: Path
    clauses: dict[str, Clause]
    machines: dict[str, Machine]


def load_spec(root: Path | None = None) -> Spec:
    """Load ``specs/``: the clause catalogue, then every other ``*.toml`` as a machine.

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
        if path.name == _CLAUSES_FILE:
            continue
        display = f"{root.name}/{path.name}"
        machine = load_table(path, clauses, display)
        if machine.name in machines:
            raise SpecError(
                display, "[machine]", f"machine name {echo(machine.name)} is used twice"
            )
        machines[machine.name] = machine
    return Spec(root, clauses, machines)
