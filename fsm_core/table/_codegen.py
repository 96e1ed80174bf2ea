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

from collections.abc import Callable, Collection, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast

from fsm_core._errors import SpecError, echo
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
from fsm_core.table._machine import Machine, State
from fsm_core.table._table import NAME, Row, Table

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
                env = {p: _literal(t, a) for p, a in zip(params, args, strict=True)}
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
    """Generate ``first_violated(state) -> name | None`` over named boolean expressions.

    The function reads the table's positions by index, so ``state`` may be longer than the
    table's variables (a composition appends its own) and may be a list.
    """
    t = machine.table
    defs = {name: d.expr for name, d in t.defs.items()}
    local = _indexed(t, "s", machine.names)
    lines = ["def first_violated(s):"]
    for i, expr in enumerate(exprs.values()):
        lines.append(f"    if not ({_py(t, expr, local, {}, defs)}):")
        lines.append(f"        return names[{i}]")
    lines.append("    return None")
    # The names are data the source indexes, like the successors' labels.
    namespace: dict[str, object] = {"names": tuple(exprs)}
    exec(compile("\n".join(lines) + "\n", "<predicates>", "exec"), namespace)
    return cast(Callable[[State], str | None], namespace["first_violated"])


IGNORED = -1
"""What a generated lookup returns when the table ignores the event where it was fired."""

REFUSED = -2
"""What a generated lookup returns when the table rejects the event there, or no row is enabled."""

Segment: TypeAlias = Callable[
    [MutableSequence[Value], Sequence[Value]], tuple[int, tuple[Value, ...]] | None
]
"""A stretch of one row's code, run on an instance's variables and the event's arguments: None
when the row is done, else ``(site, values)`` for the effect it stopped at."""

Lookup: TypeAlias = Callable[[Sequence[Value], Sequence[Value]], int]
"""The row an event fires: its index into :attr:`CompiledRows.rows`, :data:`IGNORED` or
:data:`REFUSED`."""


@dataclass(frozen=True, slots=True)
class Site:
    """An effect a row's code stops at, handing it to the caller with its evaluated arguments."""

    effect: str
    resume: int
    """The segment that runs the rest of the row once the caller has performed the effect, or
    -1 when the code stopped there because the effect's ``requires`` does not hold."""


@dataclass(frozen=True, slots=True)
class RowCode:
    """One row as code: segment 0 moves to the row's target and runs its ``do`` up to the first
    site; each site that is performed has its own segment for the rest."""

    id: str
    segments: tuple[Segment, ...]
    sites: tuple[Site, ...]


@dataclass(frozen=True, slots=True)
class CompiledRows:
    """Every row of a table as code, with a generated lookup per event."""

    lookups: Mapping[str, Lookup]
    rows: tuple[RowCode, ...]
    source: str


def compile_rows(machine: Machine, performed: Collection[str]) -> CompiledRows:
    """Generate every row as :class:`RowCode`, run in place on an instance's variables.

    The caller performs the effects named in ``performed`` (notifications, effects wired to
    other instances): the code stops at each, and the caller, once it has run whatever
    re-entered there, resumes the row with the segment after it. Of every other effect the
    code only proves the ``requires`` contract, stopping with ``resume`` -1 when it breaks.
    A segment reads each variable as it is when reached, so what a re-entrant listener changed
    is seen. Reject rows are not rows here: the lookup refuses the event.
    """
    t = machine.table
    defs = {name: d.expr for name, d in t.defs.items()}
    local = _indexed(t, "v", machine.names)
    lines: list[str] = []
    shapes: list[tuple[str, int, tuple[Site, ...]]] = []
    index: dict[str, int] = {}
    for row in t.rows:
        if row.reject is not None:
            continue
        index[row.id] = k = len(shapes)
        env = _indexed(t, "a", [p for p, _ in t.events[row.event].params])
        segments, sites = _row_code(t, row, frozenset(performed), local, env, defs)
        for s, body in enumerate(segments):
            lines.append(f"def r{k}_{s}(v, a):")
            lines += body or ["    return None"]
        shapes.append((row.id, len(segments), sites))
    events = list(t.events)
    for k, event in enumerate(events):
        lines.append(f"def e{k}(v, a):")
        lines += _lookup_body(t, event, index, local, defs)
    source = "\n".join(lines) + "\n"
    namespace: dict[str, object] = {}
    exec(compile(source, "<rows>", "exec"), namespace)
    rows = tuple(
        RowCode(
            row_id,
            tuple(cast(Segment, namespace[f"r{k}_{s}"]) for s in range(count)),
            sites,
        )
        for k, (row_id, count, sites) in enumerate(shapes)
    )
    lookups = {e: cast(Lookup, namespace[f"e{k}"]) for k, e in enumerate(events)}
    return CompiledRows(lookups, rows, source)


def _row_code(
    t: Table,
    row: Row,
    performed: frozenset[str],
    local: Mapping[str, str],
    env: Mapping[str, str],
    defs: Mapping[str, Expr],
) -> tuple[list[list[str]], tuple[Site, ...]]:
    """The bodies of ``row``'s segments, and its sites (every effect call, in ``do`` order)."""
    position: dict[tuple[int, ...], int] = {}
    calls: list[tuple[tuple[int, ...], Call]] = []

    def walk(stmts: Sequence[Stmt], prefix: tuple[int, ...]) -> None:
        for j, st in enumerate(stmts):
            if isinstance(st, Call):
                position[(*prefix, j)] = len(calls)
                calls.append(((*prefix, j), st))
            elif isinstance(st, Block):
                walk(st.body, (*prefix, j))

    walk(row.effects, ())
    resume: dict[int, int] = {}
    for site, (_, call) in enumerate(calls):
        if call.effect in performed:
            resume[site] = len(resume) + 1

    def py(e: Expr, params: Mapping[str, str] = env) -> str:
        return _py(t, e, local, params, defs)

    def emit(
        stmts: Sequence[Stmt], prefix: tuple[int, ...], start: int, indent: str, out: list[str]
    ) -> bool:
        """Append the code of ``stmts[start:]`` (``prefix`` is their position in the row);
        True iff it ends in an unconditional return."""
        for j in range(start, len(stmts)):
            match stmts[j]:
                case Assign(var=var, value=value):
                    out.append(f"{indent}{local[var]} = {py(value)}")
                case Call(effect=effect, args=args):
                    site = position[(*prefix, j)]
                    values = "(" + "".join(f"{py(a)}, " for a in args) + ")"
                    if site in resume:
                        out.append(f"{indent}return ({site}, {values})")
                        return True
                    spec = t.effects[effect]
                    if spec.requires is not None:
                        names = _locals(t, "", [p for p, _ in spec.params])
                        bound = {p: f"({py(a)})" for p, a in zip(names, args, strict=True)}
                        out.append(f"{indent}if not {py(spec.requires, bound)}:")
                        out.append(f"{indent}    return ({site}, {values})")
                case Block(when=when, body=body):
                    inner: list[str] = []
                    emit(body, (*prefix, j), 0, indent + "    ", inner)
                    if inner:
                        out.append(f"{indent}if {py(when)}:")
                        out += inner
        return False

    def body_at(prefix: tuple[int, ...]) -> Sequence[Stmt]:
        stmts: Sequence[Stmt] = row.effects
        for j in prefix:
            block = stmts[j]
            assert isinstance(block, Block)
            stmts = block.body
        return stmts

    first: list[str] = []
    if row.target is not None:
        first.append(f"    {local[t.names[0]]} = {_literal(t, row.target)}")
    emit(row.effects, (), 0, "    ", first)
    segments = [first]
    for site in resume:
        pos = calls[site][0]
        rest: list[str] = []
        # The rest of the innermost body, then of each enclosing one: the blocks the site is in
        # were entered, so their conditions are not tested again.
        for depth in range(len(pos), 0, -1):
            prefix = pos[: depth - 1]
            if emit(body_at(prefix), prefix, pos[depth - 1] + 1, "    ", rest):
                break
        segments.append(rest)
    sites = tuple(Site(call.effect, resume.get(site, -1)) for site, (_, call) in enumerate(calls))
    return segments, sites


def _lookup_body(
    t: Table,
    event: str,
    index: Mapping[str, int],
    local: Mapping[str, str],
    defs: Mapping[str, Expr],
) -> list[str]:
    """The body of ``event``'s lookup, as :meth:`~fsm_core.table.Machine.lookup` decides."""
    env = _indexed(t, "a", [p for p, _ in t.events[event].params])
    ignored: dict[str, bool] = {}
    for rule in t.pair_rules:
        if event in rule.events:
            for state in rule.states:
                ignored[state] = rule.kind == "ignored"  # a later rule wins, as in Machine
    out = [f"    p = {local[t.names[0]]}"]
    for state in t.state_names:
        candidates = [r for r in t.rows if r.event == event and state in r.sources]
        otherwise = IGNORED if ignored.get(state, False) else REFUSED
        if not candidates and otherwise == REFUSED:
            continue
        out.append(f"    if p == {_literal(t, state)}:")
        for r in candidates:
            found = REFUSED if r.reject is not None else index[r.id]
            out.append(f"        if {_py(t, r.guard, local, env, defs)}:")
            out.append(f"            return {found}")
        out.append(f"        return {otherwise}")
    out.append(f"    return {REFUSED}")
    return out


Contract: TypeAlias = Callable[[Sequence[Value], Sequence[Value]], bool]
"""An effect's ``requires`` as ``holds(variables, arguments)``."""


def compile_contracts(machine: Machine) -> dict[str, Contract]:
    """Each effect's ``requires`` as ``holds(variables, arguments)``."""
    t = machine.table
    defs = {name: d.expr for name, d in t.defs.items()}
    local = _indexed(t, "v", machine.names)
    names = [n for n, e in t.effects.items() if e.requires is not None]
    lines: list[str] = []
    for k, name in enumerate(names):
        spec = t.effects[name]
        assert spec.requires is not None
        env = _indexed(t, "p", [p for p, _ in spec.params])
        lines += [f"def c{k}(v, p):", f"    return {_py(t, spec.requires, local, env, defs)}"]
    namespace: dict[str, object] = {}
    exec(compile("\n".join(lines) + "\n", "<contracts>", "exec"), namespace)
    return {name: cast(Contract, namespace[f"c{k}"]) for k, name in enumerate(names)}


def compile_stability(machine: Machine) -> Callable[[Sequence[Value], Sequence[Value]], int]:
    """The table's step invariants as ``first_unstable(before, after)``: the index into
    ``table.stable`` of the first one broken between the two states, or -1."""
    t = machine.table
    defs = {name: d.expr for name, d in t.defs.items()}
    before, after = _indexed(t, "b", machine.names), _indexed(t, "v", machine.names)
    lines = ["def first_unstable(b, v):"]
    for k, st in enumerate(t.stable):
        held = f"{_py(t, st.when, before, {}, defs)} and {_py(t, st.when, after, {}, defs)}"
        lines.append(f"    if {before[st.var]} != {after[st.var]} and {held}:")
        lines.append(f"        return {k}")
    lines.append("    return -1")
    namespace: dict[str, object] = {}
    exec(compile("\n".join(lines) + "\n", "<stability>", "exec"), namespace)
    return cast(Callable[[Sequence[Value], Sequence[Value]], int], namespace["first_unstable"])


def _indexed(t: Table, seq: str, names: Sequence[str]) -> dict[str, str]:
    """The generated source reading each table name from the sequence ``seq``, by position."""
    return {n: f"{seq}[{i}]" for i, n in enumerate(_locals(t, "", names))}


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
    env: Mapping[str, str],
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
    env: Mapping[str, str],
    defs: Mapping[str, Expr],
) -> str:
    """Python source for a resolved expression. ``local`` and ``env`` give the source of each
    variable and parameter: generated names, or literals the caller made with :func:`_literal`."""

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
            return env[n]
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
