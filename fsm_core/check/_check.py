"""One model checked: explore it, then judge the result (see :func:`check`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, final

from fsm_core.check._composed._symmetry import concrete_trace
from fsm_core.check._config import Model
from fsm_core.check._explore import (
    Progress,
    Result,
    Violation,
    Visited,
    explore,
    trace_to,
    unreachable_quiescence,
)
from fsm_core.check._moves import Move
from fsm_core.check._property import Property
from fsm_core.check._reentry import unreached, unreacted
from fsm_core.check._system import Built, build

__all__ = ["Backend", "Report", "check"]

Backend = Literal["auto", "vector", "python"]
"""Which explorer checks a model: ``vector`` (:mod:`fsm_core.check._vector`, table models
only), ``python`` (:mod:`fsm_core.check._explore`, every model), or ``auto``: vector wherever
the model fits. The results are the same, number for number and trace for trace."""


@final
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
    unreacted: tuple[str, ...] = ()
    """The notifying effects no listener and no wiring call re-enters in the model and its
    file does not excuse: each a finding that fails ``fsm-core check``
    (:mod:`fsm_core.check._reentry`)."""
    unreached: tuple[str, ...] = ()
    """The notifying effects the model re-enters (its reactions, its wiring) inside which no
    step of a complete, violation-free search made a call: each a finding that fails too."""
    backend: Literal["vector", "python"] = "python"
    """The backend that explored the model."""
    fallback: str | None = None
    """Why the vector backend did not explore it, when it was asked to (``auto`` included)."""
    unreduced_states: int | None = None
    """With ``[tree] symmetry``: the states the search's representatives stand for (the sum
    of their orbits' sizes), the unreduced search's count (``tests/test_symmetry.py`` holds
    them equal on the default trees); ``result.states`` counts the representatives."""

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
    backend: Backend = "auto",
    interpreted: bool = False,
) -> Report:
    """Explore ``model`` with ``backend`` and report. ``liveness`` defaults to on except for
    bench models. The report names the backend that explored, and why the vector backend did
    not when it was asked to. ``interpreted`` runs an agent's or a tree's steps through the
    interpreted composition, the slow reference the compiled one is tested against."""
    built = build(model, interpreted=interpreted)
    live = model.tier != "bench" if liveness is None else liveness
    fallback: str | None = None
    result: Result[Any] | None = None
    unsettled: tuple[tuple[int | None, Any], ...] | None = None
    if backend != "python":
        if model.kind != "table":
            fallback = f"it is an {model.kind} model; the vector backend explores table models"
        else:
            # Imported here: NumPy is the vector backend's alone, and a runtime has no use for it.
            from fsm_core.check import _vector  # noqa: PLC0415

            try:
                search = _vector.VectorSearch(model, built.system)
                result = search.explore(max_states=max_states, keep_graph=live, progress=progress)
                if result.violation is None and result.complete and live:
                    unsettled = search.unsettled()
            except _vector.Unfit as e:
                fallback, result = str(e), None
    stuck: list[Any] = []
    if result is None:
        result = explore(built.system, max_states=max_states, keep_graph=live, progress=progress)
        visited, graph = result.parent, result.graph
        if result.violation is None and result.complete and live and graph is not None:
            assert isinstance(visited, Visited)
            stuck = unreachable_quiescence(graph, visited, built.system.quiescent)
            if stuck:  # in BFS order, so the first has a shortest trace
                unsettled = trace_to(visited, stuck[0], built.system.unpack)
    violation = result.violation
    if unsettled is not None:
        eventually = next(p.name for p in built.properties if p.kind == "eventually")
        violation = Violation(eventually, unsettled)
    unreduced: int | None = None
    if built.reduction is not None:
        unreduced = sum(map(built.reduction.orbit_size, result.parent))
        if violation is not None:
            end = stuck[0] if stuck else built.reduction.pack(violation.trace[-1][1])
            violation = _concrete(built, result, end, violation.name)
    moves = [built.moves[i] for i in result.labels_taken]
    taken = {row for move in moves for row in move.rows()}
    idle = unreached(model, moves) if result.complete and violation is None else ()
    dead = tuple(r.id for r in model.machine.table.rows if r.reject is None and r.id not in taken)
    result.graph = None  # edges served the liveness check; do not keep them alive
    used: Literal["vector", "python"] = "python" if fallback or backend == "python" else "vector"
    return Report(
        model,
        result,
        built.names,
        built.moves,
        built.properties,
        dead,
        violation,
        unreacted(model),
        idle,
        used,
        fallback,
        unreduced,
    )


def _concrete(built: Built, result: Result[Any], end: Any, name: str) -> Violation[Any]:
    """The representatives' path to ``end`` as a run of the unreduced system, naming the
    property as its last state breaks it (a table's on the node it breaks it on)."""
    assert built.reduction is not None
    system, engine = built.system, built.reduction.engine
    reps = [state for _, state in trace_to(result.parent, end)]
    run = concrete_trace(reps, system.initial, engine.steps, built.reduction.canonical)
    broken = system.first_violated(run[-1][1])
    trace = tuple((label, system.unpack(state)) for label, state in run)  # type: ignore[misc]
    return Violation(broken or name, trace)
