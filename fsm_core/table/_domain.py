"""The loader's search over a table's whole domain, as generated code that only says yes or no.

The loader proves a table well-formed by trying every event, with every argument tuple, in
every state of the domain (:func:`fsm_core.table._load._validate`): at most one row enabled,
every input event handled in every state the invariants admit, every value a row assigns or
passes to an effect inside its domain, every ``requires`` met, no step invariant broken. Its
interpreted search names each fault it finds, but it costs a second per table, on every load.

:func:`domain_holds` runs the same checks as one generated function per state, with the
event's arguments substituted as literals (as :func:`~fsm_core.table._codegen.compile_successors`
does), and answers only whether every case passes. True means the interpreted search would
find nothing; False (or any trouble generating or running the code) means it may find
something, and the loader runs it to find and name the fault: a fault is always reported by
the interpreted search, so its message and order do not depend on this module. A test holds
the two to the same verdict on every table and every mutant.

The source holds only what :mod:`~fsm_core.table._codegen` lets it hold (checked names and
literals) and its own names (``ok``, ``k``, ``o``, ``c`` and ``d`` with a number, ``fu``);
each variable's and parameter's domain is data the source indexes, like the successors'
labels.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import cast

from fsm_core.table._codegen import _literal, _locals, _py, compile_predicates, compile_stability
from fsm_core.table._expr import Assign, Block, Call, Expr, Stmt, Value
from fsm_core.table._machine import Machine
from fsm_core.table._table import Row, Table

_Check = Callable[[list[tuple[Value, ...]], list[bool]], bool]
"""One state's search: ``(valuations, valid) -> True iff no case fails``."""

MIN_VALUATIONS = 64
"""Below this many valuations of the variables, the code for a case costs more to generate
than the interpreter spends on it: :func:`domain_holds` leaves the search to the loader."""

MAX_CASES = 5_000
"""At most this many (state, row, argument tuple) cases are generated, each some thirty lines:
past it, compiling the source would cost seconds, and :func:`domain_holds` declines."""


def domain_holds(m: Machine) -> bool:
    """True iff the loader's interpreted search over ``m``'s domain finds no fault.

    False when it may find one; when the domain is too small or has too many cases for
    generated code to pay (see :data:`MIN_VALUATIONS`, :data:`MAX_CASES`); or when the code
    could not be generated or run (a name the generator refuses, an expression that raises on
    a value out of its domain). The caller then runs the interpreted search, which decides.
    """
    t = m.table
    valuations = math.prod(len(v.type.values) for v in t.variables)
    cases = sum(
        math.prod(len(ty.values) for _, ty in t.events[r.event].params) * len(r.sources)
        for r in t.rows
    )
    if valuations < MIN_VALUATIONS or cases > MAX_CASES:
        return False
    return generated_search(m)


def generated_search(m: Machine) -> bool:
    """The verdict of the generated search, whatever the domain's size: True iff no case
    fails; False on a failing case or on any trouble generating or running the code."""
    try:
        return _search(m)
    except Exception:  # any trouble: the interpreted search decides, and names the fault
        return False


def _search(m: Machine) -> bool:
    t = m.table
    checks = _compile(m)
    first_violated = compile_predicates(m, {inv.id: inv.expr for inv in t.invariants})
    valuations = list(itertools.product(*(v.type.values for v in t.variables)))
    for state, check in checks.items():
        valid = [first_violated((state, *vals)) is None for vals in valuations]
        if not check(valuations, valid):
            return False
    return True


def _compile(m: Machine) -> dict[str, _Check]:
    """One generated search per state that handles some event, by state name."""
    t = m.table
    gen = _Generator(t)
    lines: list[str] = []
    functions: dict[str, str] = {}
    for state in t.state_names:
        body = gen.state_body(state)
        if not body:
            continue
        functions[state] = name = f"s{len(functions)}"
        lines.append(f"def {name}(vals, valid):")
        lines.append(f"    {gen.local[t.names[0]]} = {_literal(t, state)}")
        lines.append("    for v, ok in zip(vals, valid):")
        if len(t.names) > 1:
            lines.append(f"        {''.join(gen.local[n] + ', ' for n in t.names[1:])}= v")
        lines += body
        lines.append("    return True")
    namespace: dict[str, object] = {**gen.data, "fu": compile_stability(m)}
    exec(compile("\n".join(lines) + "\n", "<domain>", "exec"), namespace)
    return {state: cast(_Check, namespace[name]) for state, name in functions.items()}


class _Generator:
    """The source of each state's search, and the domains it indexes."""

    def __init__(self, t: Table) -> None:
        self.t = t
        self.local = _locals(t, "v_", t.names)
        self.new = _locals(t, "n_", t.names)
        self.defs = {name: d.expr for name, d in t.defs.items()}
        self.data: dict[str, object] = {}
        self._domains: dict[tuple[Value, ...], str] = {}
        self._temps = 0

    def domain(self, values: Sequence[Value]) -> str:
        """The name the source reads a set of values by (each distinct set once)."""
        key = tuple(values)
        if key not in self._domains:
            self._domains[key] = name = f"d{len(self._domains)}"
            self.data[name] = frozenset(values)
        return self._domains[key]

    def state_body(self, state: str) -> list[str]:
        """Every handled event, with every argument tuple, in one valuation of ``state``."""
        t, out = self.t, []
        indent = "        "
        for event, spec in t.events.items():
            rows = [r for r in t.rows if r.event == event and state in r.sources]
            if not rows:
                continue
            params = [p for p, _ in spec.params]
            for args in itertools.product(*(ty.values for _, ty in spec.params)):
                env = {p: _literal(t, a) for p, a in zip(params, args, strict=True)}
                guards = [_py(t, r.guard, self.local, env, self.defs) for r in rows]
                bodies = [self.row_body(r, state, env, indent + "    ") for r in rows]
                if len(rows) == 1:
                    out.append(f"{indent}if {guards[0]}:")
                    out += bodies[0] or [f"{indent}    pass"]
                    if spec.kind == "input":
                        out.append(f"{indent}elif ok:")
                        out.append(f"{indent}    return False")
                    continue
                # Two rows enabled at once is a fault: k is the one found so far, else -1.
                out.append(f"{indent}k = -1")
                for i, guard in enumerate(guards):
                    out.append(f"{indent}if {guard}:")
                    if i:
                        out.append(f"{indent}    if k >= 0:")
                        out.append(f"{indent}        return False")
                    out.append(f"{indent}    k = {i}")
                for i, body in enumerate(bodies):
                    out.append(f"{indent}{'elif' if i else 'if'} k == {i}:")
                    out += body or [f"{indent}    pass"]
                if spec.kind == "input":
                    out.append(f"{indent}elif ok:")
                    out.append(f"{indent}    return False")
        return out

    def row_body(self, row: Row, state: str, env: Mapping[str, str], indent: str) -> list[str]:
        """``row`` run on a copy of the valuation, failing on what the loader's search refuses:
        a value out of its domain (at each effect and at the end) and, from a state the
        invariants admit (``ok``), an unmet ``requires`` or a broken step invariant between
        two observed moments (each notifying effect and the end)."""
        if row.reject is not None:
            return []  # a refusal changes nothing: only that it is the one row enabled counts
        t = self.t
        assigned = [v.name for v in t.variables if v.name in set(_assigned(row.effects))]
        cur = dict(self.local)
        out = [f"{indent}{self.new[n]} = {self.local[n]}" for n in assigned]
        for n in assigned:
            cur[n] = self.new[n]
        if row.target is not None:
            cur[t.names[0]] = _literal(t, row.target)
        if t.stable:
            out.append(f"{indent}o = ({self.local[t.names[0]]}, *v)")
        self._stmts(row.effects, cur, env, assigned, indent, out)
        self._in_domain(cur, assigned, indent, out)
        if t.stable:
            out.append(f"{indent}if ok:")
            self._stable(cur, indent + "    ", out)
        return out

    def _stmts(
        self,
        stmts: Sequence[Stmt],
        cur: Mapping[str, str],
        env: Mapping[str, str],
        assigned: Sequence[str],
        indent: str,
        out: list[str],
    ) -> None:
        t = self.t
        for s in stmts:
            match s:
                case Assign(var=var, value=value):
                    out.append(f"{indent}{cur[var]} = {self.py(value, cur, env)}")
                case Call(effect=name, args=args):
                    spec = t.effects[name]
                    bound: dict[str, str] = {}
                    for (p, _), a in zip(spec.params, args, strict=True):
                        self._temps += 1
                        bound[p] = temp = f"c{self._temps}"
                        out.append(f"{indent}{temp} = {self.py(a, cur, env)}")
                    for p, ptype in spec.params:
                        out.append(f"{indent}if {bound[p]} not in {self.domain(ptype.values)}:")
                        out.append(f"{indent}    return False")
                    self._in_domain(cur, assigned, indent, out)
                    checks: list[str] = []
                    if spec.requires is not None:
                        params = _locals(t, "", [p for p, _ in spec.params])
                        by_param = {params[p]: bound[p] for p in params}
                        checks += [
                            f"{indent}    if not {self.py(spec.requires, cur, by_param)}:",
                            f"{indent}        return False",
                        ]
                    if spec.notifies and t.stable:
                        self._stable(cur, indent + "    ", checks)
                    if checks:
                        out.append(f"{indent}if ok:")
                        out += checks
                case Block(when=when, body=body):
                    out.append(f"{indent}if {self.py(when, cur, env)}:")
                    out.append(f"{indent}    pass")  # a block may hold nothing checked
                    self._stmts(body, cur, env, assigned, indent + "    ", out)

    def _in_domain(
        self, cur: Mapping[str, str], assigned: Sequence[str], indent: str, out: list[str]
    ) -> None:
        """Fail unless every variable the row assigns holds a value of its type (the others
        still hold the valuation's, which are)."""
        types = {v.name: v.type for v in self.t.variables}
        for n in assigned:
            out.append(f"{indent}if {cur[n]} not in {self.domain(types[n].values)}:")
            out.append(f"{indent}    return False")

    def _stable(self, cur: Mapping[str, str], indent: str, out: list[str]) -> None:
        """Fail if a step invariant broke since the last observed moment ``o``; observe now."""
        out.append(f"{indent}c0 = ({''.join(cur[n] + ', ' for n in self.t.names)})")
        out.append(f"{indent}if fu(o, c0) >= 0:")
        out.append(f"{indent}    return False")
        out.append(f"{indent}o = c0")

    def py(self, e: Expr, cur: Mapping[str, str], env: Mapping[str, str]) -> str:
        return _py(self.t, e, cur, env, self.defs)


def _assigned(stmts: Sequence[Stmt]) -> Sequence[str]:
    """The variables ``stmts`` may assign, anywhere."""
    out: list[str] = []
    for s in stmts:
        if isinstance(s, Assign):
            out.append(s.var)
        elif isinstance(s, Block):
            out += _assigned(s.body)
    return out


__all__ = ["MAX_CASES", "MIN_VALUATIONS", "domain_holds", "generated_search"]
