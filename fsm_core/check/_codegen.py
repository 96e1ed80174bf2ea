"""Compile a table into one straight-line Python successor function, for the checker.

The interpreter (:class:`fsm_core.table.Machine`) evaluates closures row by row; that is right
for the runtime, where effects must run as they are reached. The checker only needs, for a
state, every (row, arguments) that is enabled and the state it leads to, millions of times.
So this module turns the *same resolved syntax trees* into Python source::

    def successors(s):
        v_phase, v_holder, v_reason, ..., = s
        out = []
        if v_phase == 'idle':
            if (not v_scheduled):             # label 17: send.idle.wake(True, 'next_turn')
                n_holder = v_holder
                ...
                out.append((17, (n_phase, n_holder, ...)))
        ...
        return out

Event arguments are finite, so each (row, argument tuple) gets its own block with the
arguments substituted as literals. The source holds nothing but what the generator controls:
its own names (``s``, ``out``, ``v_`` and ``n_`` followed by a table name) and literals
(booleans, integers, and state names and enumeration values as ``repr()`` strings). No table
text reaches it, not even in a comment: a row is known by its index into ``labels``, which
carry the ids as data. The loader admits only lower_snake_case names; the generator checks
every name and literal it splices again and refuses anything else with a :class:`SpecError`,
so a table that reached it some other way cannot run code. A test proves the source agrees
with the interpreter on every state of the domain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast

from fsm_core._errors import SpecError, echo
from fsm_core.table import Machine, State
from fsm_core.table._expr import (
    Assign,
    BinOp,
    Block,
    Call,
    Cond,
    Def,
    Expr,
    In,
    Lit,
    Not,
    Param,
    Stmt,
    Sym,
    Value,
    Var,
)
from fsm_core.table._table import NAME, Table

Label: TypeAlias = tuple[str, str, tuple[Value, ...]]
"""(event, row id, arguments) of one transition."""

Successors: TypeAlias = Callable[[State], list[tuple[int, State]]]


@dataclass(frozen=True, slots=True)
class CompiledSuccessors:
    """A generated successor function and the labels its integer tags stand for."""

    successors: Successors
    labels: tuple[Label, ...]
    source: str


def compile_successors(machine: Machine) -> CompiledSuccessors:
    """Generate ``successors(state) -> [(label_index, next_state), ...]``.

    Every event's rows are included; reject rows are skipped (a refusal is not a transition).
    Effects that call out are ignored: the result is the atomic, listener-free semantics of
    each row.
    """
    t = machine.table
    names = machine.names
    local = _locals(t, "v_", names)
    new = _locals(t, "n_", names)
    defs = {name: d.expr for name, d in t.defs.items()}
    labels: list[Label] = []
    lines = ["def successors(s):", f"    {', '.join(local.values())}, = s", "    out = []"]
    for state in t.state_names:
        body: list[str] = []
        for row in t.rows:
            if state not in row.sources or row.reject is not None:
                continue
            params = [p for p, _ in t.events[row.event].params]
            for args in machine.all_arguments(row.event):
                env = dict(zip(params, args, strict=True))
                labels.append((row.event, row.id, tuple(args)))
                body.append(f"        if {_py(t, row.guard, local, env, defs)}:")
                block = [f"            {new[n]} = {local[n]}" for n in names[1:]]
                target = row.target if row.target is not None else state
                block.append(f"            {new[names[0]]} = {_literal(t, target)}")
                block += _stmts(t, row.effects, new, env, defs, "            ")
                tup = ", ".join(new.values())
                block.append(f"            out.append(({len(labels) - 1}, ({tup},)))")
                body += block
        if body:
            lines.append(f"    if {local[names[0]]} == {_literal(t, state)}:")
            lines += body
    lines.append("    return out")
    source = "\n".join(lines) + "\n"
    namespace: dict[str, object] = {}
    exec(compile(source, "<successors>", "exec"), namespace)
    return CompiledSuccessors(cast(Successors, namespace["successors"]), tuple(labels), source)


def compile_predicates(
    machine: Machine, exprs: Mapping[str, Expr]
) -> Callable[[State], str | None]:
    """Generate ``first_violated(state) -> name | None`` over named boolean expressions."""
    t = machine.table
    defs = {name: d.expr for name, d in t.defs.items()}
    local = _locals(t, "v_", machine.names)
    lines = ["def first_violated(s):", f"    {', '.join(local.values())}, = s"]
    for i, expr in enumerate(exprs.values()):
        lines.append(f"    if not ({_py(t, expr, local, {}, defs)}):")
        lines.append(f"        return names[{i}]")
    lines.append("    return None")
    # The names are data the source indexes, like the successors' labels.
    namespace: dict[str, object] = {"names": tuple(exprs)}
    exec(compile("\n".join(lines) + "\n", "<predicates>", "exec"), namespace)
    return cast(Callable[[State], str | None], namespace["first_violated"])


def _locals(t: Table, prefix: str, names: Sequence[str]) -> dict[str, str]:
    """The generated variable for each table name: ``prefix`` + a checked name."""
    for n in names:
        if not NAME.fullmatch(n):
            raise SpecError(t.file, "", f"refusing to generate code for the name {echo(n)}")
    return {n: f"{prefix}{n}" for n in names}


def _literal(t: Table, value: Value) -> str:
    """A literal the generated source may hold: a boolean, an integer or a checked name."""
    if isinstance(value, bool | int) or NAME.fullmatch(value):
        return repr(value)
    raise SpecError(t.file, "", f"refusing to generate code for the value {echo(value)}")


def _stmts(
    t: Table,
    stmts: Sequence[Stmt],
    local: Mapping[str, str],
    env: Mapping[str, Value],
    defs: Mapping[str, Expr],
    indent: str,
) -> list[str]:
    out: list[str] = []
    for s in stmts:
        match s:
            case Assign(var=v, value=value):
                out.append(f"{indent}{local[v]} = {_py(t, value, local, env, defs)}")
            case Call():
                continue
            case Block(when=when, body=body):
                inner = _stmts(t, body, local, env, defs, indent + "    ")
                if inner:
                    out.append(f"{indent}if {_py(t, when, local, env, defs)}:")
                    out += inner
    return out


def _py(
    t: Table,
    e: Expr,
    local: Mapping[str, str],
    env: Mapping[str, Value],
    defs: Mapping[str, Expr],
) -> str:
    """Python source for a resolved expression; parameters become literals."""

    def c(x: Expr) -> str:
        return _py(t, x, local, env, defs)

    match e:
        case Lit(value=v):
            return _literal(t, v)
        case Sym(name=n):
            return _literal(t, n)
        case Var(name=n):
            return local[n]
        case Param(name=n):
            return _literal(t, env[n])
        case Def(name=n):
            return c(defs[n])
        case Not(operand=o):
            return f"(not {c(o)})"
        case In(operand=o, members=m):
            return f"({c(o)} in ({''.join(_literal(t, x) + ', ' for x in m)}))"
        case Cond(test=test, then=x, orelse=y):
            return f"({c(x)} if {c(test)} else {c(y)})"
        case BinOp(op="implies", left=left, right=right):
            return f"((not {c(left)}) or {c(right)})"
        case BinOp(op=op, left=left, right=right):
            return f"({c(left)} {op} {c(right)})"
    raise AssertionError(f"unresolved expression {e!r}")
