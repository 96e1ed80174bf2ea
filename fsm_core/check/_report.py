"""What ``fsm-core check`` prints: counterexamples, ITF traces, the summary and the last line.

A counterexample reads like a test: the initial state, then one numbered step per event, what
listeners did inside it (indented under the effect that let them in), the variables the step
changed, and last the property that broke and the state where it broke::

    0. initial: phase=idle holder=none reason=none ... budget.send=2 ... ghost.owed=false
    1. send(wake=true, lane=next_turn) -> send.idle.wake   changed: pending false->true, ...
    2. start() -> start.turn   changed: phase idle->cancelling, holder none->aborted, ...
       inside publish_status(running): cancel(cause=user, keep_inbox=false) -> cancel.turn
    ...
    violated: reason_iff_aborted ((reason != none) == (holder == aborted)) in state 4: ...
    clauses: S000.frozen-reason, S000.first-wins (specs/clauses.toml)

The last line names the clauses of the seeds (or pinned decisions) the broken property proves,
so a counterexample says which promise it breaks; ``--json`` lists them for the violation and,
per model, every clause its properties prove.

The same trace is available as Apalache's ITF JSON (:func:`to_itf`), for replay against the
runtime or a port. The run ends with one line a script can read (:func:`done_line`)::

    Done. models=5 states=168840 transitions=1354302 depth=37 violations=0 sec=10.12
"""

from __future__ import annotations

import textwrap
from collections.abc import Container, Iterable, Sequence
from typing import Any, final

from fsm_core.check import Report
from fsm_core.check._composed._tree import AGENT, DOOR
from fsm_core.check._config import Model
from fsm_core.check._explore import Violation
from fsm_core.check._moves import Move
from fsm_core.table._expr import show
from fsm_core.table._machine import Machine

__all__ = [
    "Summary",
    "done_line",
    "format_trace",
    "print_wrapped",
    "symmetry_lines",
    "to_itf",
    "to_json",
    "violation_heading",
]

ITF_FORMAT = "https://apalache-mc.org/docs/adr/015adr-trace.html"

_ABSENT = "absent"
"""How a tree slot that holds no activation yet is shown in a text trace."""

# --- text traces ----------------------------------------------------------------------------------


def format_trace(report: Report) -> str:
    """The shortest counterexample of ``report`` as numbered steps, ending in the broken property.

    Raises ValueError when the model holds (there is no counterexample to print).
    """
    violation = _violation(report)
    trace = violation.trace
    lines = [f"0. initial: {_show_state(report, trace[0][1])}"]
    previous = trace[0][1]
    for i, (label, state) in enumerate(trace[1:], start=1):
        assert label is not None
        move = report.moves[label]
        changed = _changes(report, previous, state)
        head = f"{i}. {_call(move)}"
        lines.append(f"{head}   changed: {', '.join(changed) if changed else 'nothing'}")
        lines += _inside(move, depth=1)
        previous = state
    n = len(trace) - 1
    where = f"state {n}"
    last = trace[-1][0]
    at = _stopped_at(report.moves[last]) if last is not None else ""
    if at:
        where += f", at {at} inside step {n}"
    broken = _property(report, violation.name)
    lines.append(f"violated: {broken} in {where}: {_show_state(report, violation.state)}")
    lines += _overwritten(report)
    clauses = _clauses(report, violation.name)
    if clauses:
        lines.append(f"clauses: {', '.join(clauses)} (specs/clauses.toml)")
    return "\n".join(lines) + "\n"


def _overwritten(report: Report) -> list[str]:
    """For a broken step invariant, the line that shows its variable's value before and after:
    before is what a listener last saw (or the step's start), which the trace's states do not
    show when a call inside the step set it and the step then overwrote it::

        changed: reason disposed->parent since a listener last observed it

    The last step is run again by the interpreted composition, which records both values."""
    violation = _violation(report)
    record = next(p for p in report.properties if p.name == violation.name)
    label = violation.trace[-1][0]
    if record.kind != "step" or label is None:
        return []
    # Imported here: only a broken step invariant needs the composition again.
    from fsm_core.check._composed._compose import Engine  # noqa: PLC0415
    from fsm_core.check._system import compose  # noqa: PLC0415

    engine = compose(report.model, interpreted=True)
    assert isinstance(engine, Engine)  # a step invariant is an agent's or a tree's
    found = engine.unstable(violation.trace[-2][1], report.moves[label])
    if found is None:
        return []
    machine = engine.machines[found.instance]
    stable = next(s for s in machine.table.stable if s.id == found.invariant)
    at = machine.names.index(stable.var)
    slot = "" if engine.wiring.flat else f"{report.names[found.instance]}."
    since = "a listener last observed it" if found.observed else "the step began"
    return [
        f"changed: {slot}{stable.var} {show(found.before[at])}->{show(found.after[at])} "
        f"since {since}"
    ]


def _clauses(report: Report, name: str) -> tuple[str, ...]:
    """The clauses the property ``name`` proves (an invariant's tags, a composition's own)."""
    return next(p.clauses for p in report.properties if p.name == name)


def _violation(report: Report) -> Violation[Any]:
    if report.violation is None:
        raise ValueError(f"{report.model.name} holds: there is no counterexample")
    return report.violation


def _call(move: Move) -> str:
    text = f"{move.call()} -> {move.row or '(ignored)'}"
    return f"{text} (stopped at {move.stopped})" if move.stopped else text


def _inside(move: Move, depth: int) -> list[str]:
    out: list[str] = []
    for effect, nested in move.inside:
        out.append(f"{'   ' * depth}inside {effect}: {_call(nested)}")
        out += _inside(nested, depth + 1)
    return out


def _stopped_at(move: Move) -> str:
    """The notifying effect where a stopped move (or a reaction inside it) was cut short."""
    if move.stopped:
        return move.stopped
    for _, nested in move.inside:
        at = _stopped_at(nested)
        if at:
            return at
    return ""


def _property(report: Report, name: str) -> str:
    """``name (what it says)``: the statement of the property record of that name (every
    property a check reports has one)."""
    record = next(p for p in report.properties if p.name == name)
    return f"{name} ({record.statement})"


def _machine(report: Report, slot: str) -> Machine:
    """The table whose state a tree's slot holds: the door's in the door's slot, the agent's
    in a node's agent slot (``a.1:agent``)."""
    model = report.model
    if model.door is not None and slot == DOOR:
        return model.door
    if model.agent is not None and slot.endswith(AGENT):
        return model.agent
    return model.machine


def _flat(report: Report, state: Sequence[object]) -> list[tuple[str, str]]:
    """The state as ``(name, shown value)`` pairs; a tree node's variables as ``node.var``."""
    out: list[tuple[str, str]] = []
    for name, value in zip(report.names, state, strict=True):
        if value is None:
            out.append((name, _ABSENT))
        elif isinstance(value, tuple):
            names = _machine(report, name).names
            out += [(f"{name}.{n}", show(v)) for n, v in zip(names, value, strict=True)]
        else:
            out.append((name, show(value)))
    return out


def _show_state(report: Report, state: Sequence[object]) -> str:
    return " ".join(f"{k}={v}" for k, v in _flat(report, state))


def _changes(report: Report, before: Sequence[object], after: Sequence[object]) -> list[str]:
    out: list[str] = []
    for name, old, new in zip(report.names, before, after, strict=True):
        if old == new:
            continue
        if isinstance(old, tuple) and isinstance(new, tuple):
            pairs = zip(_machine(report, name).names, old, new, strict=True)
            out += [f"{name}.{n} {show(a)}->{show(b)}" for n, a, b in pairs if a != b]
        else:
            shown = [_show_value(report, name, v) for v in (old, new)]
            out.append(f"{name} {shown[0]}->{shown[1]}")
    return out


def _show_value(report: Report, slot: str, value: object) -> str:
    if value is None:
        return _ABSENT
    if isinstance(value, tuple):
        return _machine(report, slot).format_state(value)
    return show(value)


# --- ITF ------------------------------------------------------------------------------------------


def to_itf(report: Report) -> dict[str, Any]:
    """The shortest counterexample as an Apalache ITF trace (a JSON-ready dict).

    Each state's ``#meta`` carries the step that reached it: ``action`` (the call as text),
    ``event``, ``args``, ``row`` (null when the table ignores the event there), ``inside`` (the
    listeners' re-entrant calls, each with the ``effect`` that let it in), ``target`` when the
    call named another instance than the one that took it (an admission below ``a.1`` that the
    tree's ``door`` takes first), and ``stopped`` when the step was cut short at a notifying
    effect because the property broke there. Integers are
    ``{"#bigint": "2"}``; a tree slot is a variant, ``{"tag": "None", "value": {"#tup": []}}``
    until an activation is admitted into it, then ``{"tag": "Some", "value": {record}}``.
    """
    violation = _violation(report)
    model = report.model
    states: list[dict[str, Any]] = []
    for i, (label, state) in enumerate(violation.trace):
        meta: dict[str, Any] = {"index": i}
        if label is not None:
            meta.update(_itf_move(report.moves[label]))
        values = {n: _itf_value(report, n, v) for n, v in zip(report.names, state, strict=True)}
        states.append({"#meta": meta, **values})
    return {
        "#meta": {
            "format": "ITF",
            "format-description": ITF_FORMAT,
            "description": (
                f"Shortest counterexample to {violation.name} in model {model.name}, "
                "found by `fsm-core check` (breadth-first)"
            ),
            "source": model.file,
            "model": model.name,
            "kind": model.kind,
            "table": model.machine.name,
            "property": violation.name,
        },
        "vars": list(report.names),
        "states": states,
    }


def _itf_move(move: Move) -> dict[str, Any]:
    out: dict[str, Any] = {"action": move.call(), "event": move.event}
    if move.instance:
        out["instance"] = move.instance
    if move.target:
        out["target"] = move.target
    out["args"] = {k: _itf_scalar(v) for k, v in move.args}
    out["row"] = move.row
    if move.stopped:
        out["stopped"] = move.stopped
    if move.inside:
        out["inside"] = [{"effect": e, **_itf_move(m)} for e, m in move.inside]
    return out


def _itf_scalar(value: object) -> Any:
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return {"#bigint": str(value)}
    raise TypeError(f"no ITF encoding for {value!r}")


def _itf_value(report: Report, slot: str, value: object) -> Any:
    if value is None:
        return {"tag": "None", "value": {"#tup": []}}
    if isinstance(value, tuple):
        names = _machine(report, slot).names
        record = {n: _itf_scalar(v) for n, v in zip(names, value, strict=True)}
        return {"tag": "Some", "value": record}
    return _itf_scalar(value)


# --- summary --------------------------------------------------------------------------------------

WIDTH = 100
"""The columns the summary, a counterexample's heading and the findings fit on the default
models (a longer model name widens its column; ``--json`` holds every figure)."""

_COLUMNS = (
    "model", "verdict", "states", "transitions", "depth", "sec", "untaken", "unreacted", "expect",
)  # fmt: skip
_LEFT = frozenset({"model", "verdict", "expect"})
_VERDICTS = ("ok", "violation")
"""The verdicts of a complete search, or one a violation cut short; ``incomplete`` too once a
state limit may cut it."""


@final
class Summary:
    """The summary table, printed a row at a time as each model's check ends.

    Every column's width is fixed before any model is checked, from what is known then: the
    models' names, the verdicts possible, the figures their ``[expect]`` records (a figure
    wider than its column widens its own row only). So a row can be printed the moment its
    model is done, in whatever order the models finish::

        summary = Summary(models)
        print(summary.header())
        print(summary.row(report))

    The columns: the model, its verdict, its states, transitions and depth, the search's
    seconds, ``untaken`` (the table's rows no step took, counted only for a complete search:
    ``-`` otherwise, as a search cut short has not tried every row), ``unreacted`` (the
    notifying effects nothing re-enters and the model does not excuse, and those re-entered
    in name only, :mod:`~._reentry`) and ``expect`` (:func:`_expectation_mark`). ``--json``
    has the rest: kind, backend, states per second, the rows and effects by name.
    """

    __slots__ = ("_right", "_widths")

    def __init__(self, models: Iterable[Model], *, limited: bool = False) -> None:
        models = list(models)
        verdicts = (*_VERDICTS, "incomplete") if limited else _VERDICTS
        expected = [m.expect for m in models if m.expect is not None]
        widest = {
            "model": max((len(m.name) for m in models), default=0),
            "verdict": max(map(len, verdicts)),
            "states": max((len(str(e.states)) for e in expected), default=0),
            "transitions": max((len(str(e.transitions)) for e in expected), default=0),
            "depth": 3,
            "sec": len("100.00"),
        }
        self._widths = [max(len(c), widest.get(c, 0)) for c in _COLUMNS]
        self._right = {i for i, column in enumerate(_COLUMNS) if column not in _LEFT}

    def header(self) -> str:
        return self._line(_COLUMNS)

    def row(self, report: Report) -> str:
        res = report.result
        return self._line(
            (
                report.model.name,
                report.verdict,
                str(res.states),
                str(res.transitions),
                str(res.depth),
                f"{res.seconds:.2f}",
                str(len(report.dead_rows)) if res.complete else "-",
                str(len(report.unreacted) + len(report.unreached)),
                _expectation_mark(report),
            )
        )

    def _line(self, cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(w) if i in self._right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, self._widths, strict=True))
        ).rstrip()


def _expectation_mark(report: Report) -> str:
    """``✓`` the result matches the model's ``[expect]``, ``✗`` it does not, ``-`` it has
    none or the search was cut short by a state limit (then nothing was compared)."""
    if report.model.expect is None or report.verdict == "incomplete":
        return "-"
    return "✗" if report.mismatches() else "✓"


def symmetry_lines(reports: Iterable[Report]) -> list[str]:
    """A line for each model searched over sibling orbits (``[tree] symmetry``): its
    representatives, and the states they stand for."""
    return [
        f"symmetry: {r.model.name}: {r.result.states} states stand for {r.unreduced_states} "
        "(one per orbit of sibling orders)"
        for r in reports
        if r.unreduced_states is not None
    ]


def print_wrapped(line: str) -> None:
    """Print ``line`` in lines of at most :data:`WIDTH` columns, the later ones indented two
    spaces (a word longer than that, a path, stays whole)."""
    print(
        textwrap.fill(
            line, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
    )


def violation_heading(report: Report) -> str:
    """The line above a counterexample: the model, the broken property, the trace's length."""
    violation = _violation(report)
    steps = len(violation.trace) - 1
    return (
        f"{report.model.name}: {violation.name} is violated; "
        f"a shortest counterexample, {steps} step{'s' if steps != 1 else ''}:"
    )


def aligned(rows: Sequence[Sequence[str]], right: Container[int]) -> list[str]:
    """``rows`` of cells as lines of columns two spaces apart, each as wide as its widest
    cell: the columns whose index is in ``right`` aligned right (numbers), the others left;
    no trailing spaces. The checker's, the kill tables' and the benchmark's tables."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def done_line(reports: Sequence[Report], seconds: float) -> str:
    """``Done. models=N states=… transitions=… depth=<max> violations=<count> sec=…``."""
    states = sum(r.result.states for r in reports)
    transitions = sum(r.result.transitions for r in reports)
    depth = max((r.result.depth for r in reports), default=0)
    violations = sum(r.violation is not None for r in reports)
    return (
        f"Done. models={len(reports)} states={states} transitions={transitions} "
        f"depth={depth} violations={violations} sec={seconds:.2f}"
    )


def _rate(states: int, seconds: float) -> float:
    return states / seconds if seconds > 0 else 0.0


# --- JSON -----------------------------------------------------------------------------------------


def to_json(reports: Sequence[Report], seconds: float | None = None) -> dict[str, Any]:
    """Everything the run found, for ``fsm-core check --json``.

    ``seconds`` is the whole run's wall time for the ``done`` line (default: the sum of the
    models' search times). A violation carries its trace twice: as the text steps and as ITF.
    """
    total = sum(r.result.seconds for r in reports) if seconds is None else seconds
    return {
        "format": "fsm-core/check",
        "models": [_model_json(r) for r in reports],
        "done": done_line(reports, total),
    }


def _model_json(r: Report) -> dict[str, Any]:
    res = r.result
    e = r.model.expect
    violation = None
    if r.violation is not None:
        violation = {
            "property": r.violation.name,
            "clauses": list(_clauses(r, r.violation.name)),
            "steps": len(r.violation.trace) - 1,
            "text": format_trace(r).splitlines(),
            "itf": to_itf(r),
        }
    return {
        "name": r.model.name,
        "file": r.model.file,
        "kind": r.model.kind,
        "tier": r.model.tier,
        "backend": r.backend,
        "fallback": r.fallback,
        "verdict": r.verdict,
        "states": res.states,
        "transitions": res.transitions,
        "depth": res.depth,
        "seconds": round(res.seconds, 3),
        "states_per_second": round(_rate(res.states, res.seconds)),
        "complete": res.complete,
        "symmetry": r.model.symmetry,
        "unreduced_states": r.unreduced_states,
        "dead_rows": list(r.dead_rows),
        "unreacted": list(r.unreacted),
        "unreached": list(r.unreached),
        "clauses": sorted({c for p in r.properties for c in p.clauses}),
        "violation": violation,
        "expect": None
        if e is None
        else {
            "states": e.states,
            "transitions": e.transitions,
            "depth": e.depth,
            "verdict": e.verdict,
            "property": e.property,
        },
        "mismatches": r.mismatches(),
    }
