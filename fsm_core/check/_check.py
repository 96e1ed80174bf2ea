"""One model checked: explore it, then judge the result (see :func:`check`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fsm_core.check._config import Model
from fsm_core.check._explore import (
    Progress,
    Result,
    Violation,
    explore,
    trace_to,
    unreachable_quiescence,
)
from fsm_core.check._moves import Move
from fsm_core.check._property import Property
from fsm_core.check._system import build

__all__ = ["Report", "check"]


@dataclass(slots=True)
class Report:
    """What checking one model found."""

    model: Model
    result: Result[Any]
    names: tuple[str, ...]
    moves: list[Move]
    properties: tuple[Property, ...]
    """Every property the model was checked against, the table's own included."""
    dead_rows: tuple[str, ...]
    violation: Violation[Any] | None

    @property
    def verdict(self) -> str:
        if self.violation is not None:
            return "violation"
        return "ok" if self.result.complete else "incomplete"

    def mismatches(self) -> list[str]:
        """How the result differs from the model's ``[expect]``, one line per number."""
        e = self.model.expect
        if e is None:
            return []
        got = {
            "states": self.result.states,
            "transitions": self.result.transitions,
            "depth": self.result.depth,
            "verdict": self.verdict,
        }
        want = {
            "states": e.states,
            "transitions": e.transitions,
            "depth": e.depth,
            "verdict": e.verdict,
        }
        out = [f"{k}: expected {want[k]}, found {got[k]}" for k in want if want[k] != got[k]]
        if e.property is not None and (self.violation is None or self.violation.name != e.property):
            found = self.violation.name if self.violation else "none"
            out.append(f"property: expected {e.property}, found {found}")
        return out


def check(
    model: Model,
    *,
    progress: Progress | None = None,
    max_states: int | None = None,
    liveness: bool | None = None,
    interpreted: bool = False,
) -> Report:
    """Explore ``model`` and report. ``liveness`` defaults to on except for bench models.
    ``interpreted`` runs an agent's or a tree's steps through the interpreted composition,
    the slow reference the compiled one is tested against."""
    built = build(model, interpreted=interpreted)
    live = model.tier != "bench" if liveness is None else liveness
    result = explore(built.system, max_states=max_states, keep_graph=live, progress=progress)
    violation = result.violation
    if violation is None and result.complete and live and result.graph is not None:
        stuck = unreachable_quiescence(result.graph, built.system.quiescent)
        if stuck:
            # In BFS order, so the first has a shortest trace.
            eventually = next(p.name for p in built.properties if p.kind == "eventually")
            trace = trace_to(result.parent, stuck[0], built.system.unpack)
            violation = Violation(eventually, trace)
    taken = {row for i in result.labels_taken for row in built.moves[i].rows()}
    dead = tuple(r.id for r in model.machine.table.rows if r.reject is None and r.id not in taken)
    result.graph = None  # edges served the liveness check; do not keep them alive
    return Report(model, result, built.names, built.moves, built.properties, dead, violation)
