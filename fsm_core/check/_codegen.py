"""Compile a table into one straight-line Python successor function, for the checker.

The interpreter (:class:`fsm_core.spec.Machine`) evaluates closures row by row; that is right
for the runtime, where effects must run as they are reached. The checker only needs, for a
state, every (row, arguments) that is enabled and the state it leads to, millions of times.
So this module turns the *same resolved syntax trees* into Python source::

    def successors(s):
        phase, holder, reason, ... = s
        out = []
        if phase == 'idle':
            if (wake and not scheduled):   # row send.idle.wake, args (True, 'next_turn')
                ...
                out.append((17, ('idle', ...)))
        ...
        return out

Event arguments are finite, so each (row, argument tuple) gets its own block with the
arguments substituted as literals. The source is generated from the checked AST only (names
are table identifiers, values are repr() of booleans, integers and identifier strings), never
from table text, and compiled with :func:`compile`. A test proves it agrees with the
interpreter on every state of the domain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast

from fsm_core.spec import Machine, State
from fsm_core.spec._expr import (
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
    local = {n: f"v_{n}" for n in names}
    defs = {name: d.expr for name, d in t.defs.items()}
    labels: list[Label] = []
    lines = ["def successors(s):", f"    {', '.join(local[n] for n in names)}, = s", "    out = []"]
    for state in t.state_names:
        body: list[str] = []
        for row in t.rows:
            if state not in row.sources or row.reject is not None:
                continue
            params = [p for p, _ in t.events[row.event].params]
            for args in machine.all_arguments(row.event):
                env = dict(zip(params, args, strict=True))
                labels.append((row.event, row.id, tuple(args)))
                guard = _py(row.guard, local, env, defs)
                body.append(f"        if {guard}:  # {row.id}{_show(args)}")
                new = {n: f"n_{n}" for n in names}
                block = [f"            n_{n} = v_{n}" for n in names[1:]]
                target = row.target if row.target is not None else state
                block.append(f"            n_{names[0]} = {target!r}")
                block += _stmts(row.effects, new, env, defs, "            ")
                tup = ", ".join(new[n] for n in names)
                block.append(f"            out.append(({len(labels) - 1}, ({tup},)))")
                body += block
        if body:
            lines.append(f"    if v_{names[0]} == {state!r}:")
            lines += body
    lines.append("    return out")
    source = "\n".join(lines) + "\n"
    namespace: dict[str, object] = {}
    exec(compile(source, f"<successors of {t.name}>", "exec"), namespace)
    return CompiledSuccessors(cast(Successors, namespace["successors"]), tuple(labels), source)


def compile_predicates(
    machine: Machine, exprs: Mapping[str, Expr]
) -> Callable[[State], str | None]:
    """Generate ``first_violated(state) -> name | None`` over named boolean expressions."""
    t = machine.table
    defs = {name: d.expr for name, d in t.defs.items()}
    local = {n: f"v_{n}" for n in machine.names}
    lines = ["def first_violated(s):", f"    {', '.join(local.values())}, = s"]
    for name, expr in exprs.items():
        lines.append(f"    if not ({_py(expr, local, {}, defs)}):")
        lines.append(f"        return {name!r}")
    lines.append("    return None")
    namespace: dict[str, object] = {}
    exec(compile("\n".join(lines) + "\n", f"<predicates of {t.name}>", "exec"), namespace)
    return cast(Callable[[State], str | None], namespace["first_violated"])


def _stmts(
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
                out.append(f"{indent}{local[v]} = {_py(value, local, env, defs)}")
            case Call():
                continue
            case Block(when=when, body=body):
                inner = _stmts(body, local, env, defs, indent + "    ")
                if inner:
                    out.append(f"{indent}if {_py(when, local, env, defs)}:")
                    out += inner
    return out


def _py(
    e: Expr, local: Mapping[str, str], env: Mapping[str, Value], defs: Mapping[str, Expr]
) -> str:
    """Python source for a resolved expression; parameters become literals."""

    def c(x: Expr) -> str:
        return _py(x, local, env, defs)

    match e:
        case Lit(value=v):
            return repr(v)
        case Sym(name=n):
            return repr(n)
        case Var(name=n):
            return local[n]
        case Param(name=n):
            return repr(env[n])
        case Def(name=n):
            return c(defs[n])
        case Not(operand=o):
            return f"(not {c(o)})"
        case In(operand=o, members=m):
            return f"({c(o)} in {tuple(m)!r})"
        case Cond(test=t, then=x, orelse=y):
            return f"({c(x)} if {c(t)} else {c(y)})"
        case BinOp(op="implies", left=left, right=right):
            return f"((not {c(left)}) or {c(right)})"
        case BinOp(op=op, left=left, right=right):
            return f"({c(left)} {op} {c(right)})"
    raise AssertionError(f"unresolved expression {e!r}")


def _show(args: Sequence[Value]) -> str:
    return f" {tuple(args)!r}" if args else ""
