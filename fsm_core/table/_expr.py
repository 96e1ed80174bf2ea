"""The guard and effect language: parse, type-check and compile, without ``eval``.

Expressions range over finite domains (booleans, bounded integers, enumerations)::

    holder == live and not (latch and pending)
    phase in {idle, disposing} implies holder == none
    if keep_inbox then pending else false

Effects are statements: ``var := expr`` assigns a variable, ``name(args)`` performs a named
effect. Precedence, loosest first: ``if/then/else``, ``implies`` (right-assoc), ``or``,
``and``, ``not``, comparisons and ``in``, ``+``/``-``. specs/SEMANTICS.md gives the grammar
and the rules a port keeps; tests/test_semantics.py pins each.

A bare name is resolved, in order, as a state variable, an event parameter, a named
definition or an enumeration value; the loader rejects tables where one name means two
things, so the order never matters in a valid table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from fsm_core._errors import did_you_mean, echo, known
from fsm_core.table._limits import MAX_EXPR_DEPTH, MAX_EXPR_LENGTH, MAX_EXPR_NODES, MAX_INT

Value: TypeAlias = bool | int | str
"""The value of a table variable or event argument: a bool, an int or an enum's member name.
A state is a tuple of them; you pass them to ``fire`` and read them back from ``table_state``."""
Kind = Literal["bool", "int", "enum"]


class ExprError(Exception):
    """A malformed or ill-typed expression. The loader adds the file and row."""


# --- types ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Type:
    """A finite type: its kind, a display name and its whole domain in a fixed order.

    An integer type's domain is a ``range``, never a materialized list: the type of
    ``if c then 0 else 1000000000`` costs nothing, however wide.
    """

    kind: Kind
    name: str
    values: Sequence[Value]

    def __str__(self) -> str:
        return self.name

    def admits(self, other: Type) -> bool:
        """True iff every value of ``other`` is a value of this type."""
        if self.kind != other.kind:
            return False
        if self.kind == "int":
            return _bounds(self)[0] <= _bounds(other)[0] and _bounds(other)[1] <= _bounds(self)[1]
        return set(other.values) <= set(self.values)


BOOL = Type("bool", "bool", (False, True))


def int_type(lo: int, hi: int) -> Type:
    return Type("int", f"int[{lo}..{hi}]", range(lo, hi + 1))


def enum_type(name: str, values: Sequence[str]) -> Type:
    return Type("enum", name, tuple(values))


# --- syntax tree ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lit:
    value: bool | int


@dataclass(frozen=True, slots=True)
class Ident:
    """An unresolved name, as parsed."""

    name: str


@dataclass(frozen=True, slots=True)
class Sym:
    """An enumeration value."""

    name: str


@dataclass(frozen=True, slots=True)
class Var:
    name: str


@dataclass(frozen=True, slots=True)
class Param:
    name: str


@dataclass(frozen=True, slots=True)
class Def:
    name: str


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expr


@dataclass(frozen=True, slots=True)
class BinOp:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class In:
    operand: Expr
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Cond:
    test: Expr
    then: Expr
    orelse: Expr


Expr: TypeAlias = Lit | Ident | Sym | Var | Param | Def | Not | BinOp | In | Cond


@dataclass(frozen=True, slots=True)
class Assign:
    var: str
    value: Expr


@dataclass(frozen=True, slots=True)
class Call:
    effect: str
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Block:
    """``{ when = ..., do = [...] }``: the body runs iff ``when`` holds as the block is reached."""

    when: Expr
    body: tuple[Stmt, ...]


Stmt: TypeAlias = Assign | Call | Block

_PRECEDENCE = {"implies": 1, "or": 2, "and": 3}
_COMPARISONS = ("==", "!=", "<=", ">=", "<", ">")
KEYWORDS = frozenset({"and", "or", "not", "implies", "if", "then", "else", "in", "true", "false"})


def show(value: object) -> str:
    """A value as the tables write it: ``true``, ``false``, ``3``, ``idle``."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def unparse(e: Expr) -> str:
    """The canonical text of an expression (fully parenthesised where precedence needs it)."""
    return _unparse(e, 0)


def _unparse(e: Expr, outer: int) -> str:
    match e:
        case Lit(value=bool() as b):
            return "true" if b else "false"
        case Lit(value=v):
            return str(v)
        case Ident(name=n) | Sym(name=n) | Var(name=n) | Param(name=n) | Def(name=n):
            return n
        case Not(operand=o):
            # `not` binds looser than comparisons: `(not a) == b` needs its parentheses.
            text = f"not {_unparse(o, 9)}"
            return f"({text})" if outer > 4 else text
        case In(operand=o, members=m):
            text = f"{_unparse(o, 5)} in {{{', '.join(m)}}}"
            return f"({text})" if outer > 4 else text
        case Cond(test=t, then=a, orelse=b):
            text = f"if {_unparse(t, 0)} then {_unparse(a, 0)} else {_unparse(b, 0)}"
            return f"({text})" if outer > 0 else text
        case BinOp(op=op, left=left, right=right):
            level = _PRECEDENCE.get(op, 4 if op in _COMPARISONS else 5)
            if level == 4:
                # Comparisons do not chain: both sides are additive (`(a == b) == c`).
                lhs, rhs = _unparse(left, 5), _unparse(right, 5)
            else:
                # implies is right-associative; everything else associates left.
                lhs = _unparse(left, level + 1 if op == "implies" else level)
                rhs = _unparse(right, level if op == "implies" else level + 1)
            text = f"{lhs} {op} {rhs}"
            return f"({text})" if level < outer else text
    raise AssertionError(e)


def unparse_stmt(s: Stmt) -> str:
    match s:
        case Assign(var=v, value=e):
            return f"{v} := {unparse(e)}"
        case Call(effect=name, args=args):
            return f"{name}({', '.join(unparse(a) for a in args)})"
        case Block(when=w, body=body):
            return f"when {unparse(w)}: [{'; '.join(unparse_stmt(b) for b in body)}]"
    raise AssertionError(s)


# --- parser --------------------------------------------------------------------------------------

# ASCII only (specs/SEMANTICS.md, "Grammar"): Unicode's digits and spaces would make a table
# parse here and nowhere else.
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>:=|==|!=|<=|>=|[<>+\-(){},]))",
    re.ASCII,
)
_SPACE = " \t\n\r\f\v"
"""What ``\\s`` matches under ``re.ASCII``: the whitespace between tokens."""


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    stripped = text.rstrip(_SPACE)
    while pos < len(stripped):
        m = _TOKEN.match(stripped, pos)
        if m is None or m.end() == pos:
            rest = stripped[pos:]
            column = pos + len(rest) - len(rest.lstrip(_SPACE)) + 1
            found = rest.lstrip(_SPACE)[:1]
            raise ExprError(f"unexpected character {echo(found)} at column {column}")
        out.append(m.group(m.lastgroup or "op"))
        pos = m.end()
    return out


class _Parser:
    """A recursive-descent parser that refuses, with an :class:`ExprError`, text longer than
    ``MAX_EXPR_LENGTH`` and nesting deeper than ``MAX_EXPR_DEPTH``, before either can
    exhaust the stack."""

    def __init__(self, text: str) -> None:
        if len(text) > MAX_EXPR_LENGTH:
            raise ExprError(
                f"the text is {len(text):,} characters long; the limit is {MAX_EXPR_LENGTH:,}"
            )
        self.text = text
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_EXPR_DEPTH:
            raise ExprError(_too_deep())

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise ExprError(f"unexpected end of expression, expected {echo(expected or 'more')}")
        if expected is not None and tok != expected:
            raise ExprError(f"expected {echo(expected)} but found {echo(tok)}")
        self.i += 1
        return tok

    def done(self) -> None:
        if self.peek() is not None:
            raise ExprError(f"unexpected {echo(self.peek())} after a complete expression")

    def expr(self) -> Expr:
        self.nest()
        if self.peek() == "if":
            self.take()
            test = self.expr()
            self.take("then")
            then = self.expr()
            self.take("else")
            e: Expr = Cond(test, then, self.expr())
        else:
            e = self.binary(1)
        self.depth -= 1
        return e

    def binary(self, level: int) -> Expr:
        if level > 3:
            return self.unary()
        left = self.binary(level + 1)
        while (op := self.peek()) is not None and _PRECEDENCE.get(op) == level:
            self.take()
            right = self.binary(level) if op == "implies" else self.binary(level + 1)
            left = BinOp(op, left, right)
            if op == "implies":
                break
        return left

    def unary(self) -> Expr:
        if self.peek() == "not":
            self.take()
            self.nest()
            e = Not(self.unary())
            self.depth -= 1
            return e
        return self.comparison()

    def comparison(self) -> Expr:
        left = self.additive()
        op = self.peek()
        if op in _COMPARISONS:
            self.take()
            return BinOp(op, left, self.additive())
        if op == "in":
            self.take()
            self.take("{")
            members = [self.name()]
            while self.peek() == ",":
                self.take()
                members.append(self.name())
            self.take("}")
            return In(left, tuple(members))
        return left

    def additive(self) -> Expr:
        left = self.atom()
        while (op := self.peek()) in ("+", "-"):
            self.take()
            left = BinOp(op, left, self.atom())
        return left

    def name(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ExprError("unexpected end of expression, expected a name")
        self.i += 1
        if not re.fullmatch(r"[A-Za-z_]\w*", tok) or tok in KEYWORDS:
            raise ExprError(f"expected a name but found {echo(tok)}")
        return tok

    def atom(self) -> Expr:
        tok = self.peek()
        if tok == "(":
            self.take()
            inner = self.expr()
            self.take(")")
            return inner
        if tok in ("true", "false"):
            self.take()
            return Lit(tok == "true")
        if tok is not None and tok.isdigit():
            self.take()
            # Compare the text first: int() refuses over 4,300 digits.
            if len(tok) > len(str(MAX_INT)) or int(tok) > MAX_INT:
                raise ExprError(f"the integer {echo(tok)} is over the limit of {MAX_INT:,}")
            return Lit(int(tok))
        return Ident(self.name())


def parse_expr(text: str) -> Expr:
    """Parse one expression; raise :class:`ExprError` naming the fault."""
    p = _Parser(text)
    if p.peek() is None:
        raise ExprError("empty expression")
    e = p.expr()
    p.done()
    return _shallow(e)


def parse_stmt(text: str) -> Assign | Call:
    """Parse ``var := expr`` or ``effect(arg, ...)``."""
    p = _Parser(text)
    if p.peek() is None:
        raise ExprError("empty effect")
    head = p.name()
    if p.peek() == ":=":
        p.take()
        value = p.expr()
        p.done()
        return Assign(head, _shallow(value))
    if p.peek() == "(":
        p.take()
        args: list[Expr] = []
        if p.peek() != ")":
            args.append(p.expr())
            while p.peek() == ",":
                p.take()
                args.append(p.expr())
        p.take(")")
        p.done()
        return Call(head, tuple(_shallow(a) for a in args))
    raise ExprError(f"an effect is 'var := expr' or 'effect(args)', not {echo(text.strip())}")


def _too_deep() -> str:
    return f"the expression nests deeper than {MAX_EXPR_DEPTH} levels"


def _children(e: Expr) -> tuple[Expr, ...]:
    match e:
        case Not(operand=o) | In(operand=o):
            return (o,)
        case BinOp(left=left, right=right):
            return (left, right)
        case Cond(test=c, then=a, orelse=b):
            return (c, a, b)
    return ()


def _shallow(e: Expr) -> Expr:
    """``e``, checked without recursion to nest at most ``MAX_EXPR_DEPTH`` deep.

    The parser's own nesting guard does not see a chain like ``a + a + ... + a``, which it
    builds in a loop, but every later pass (type checking, compiling, printing) recurses
    through it.
    """
    stack = [(e, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPR_DEPTH:
            raise ExprError(_too_deep())
        stack.extend((child, depth + 1) for child in _children(node))
    return e


# --- type checking -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scope:
    """What names mean inside one row (or invariant, or definition)."""

    variables: Mapping[str, Type]
    params: Mapping[str, Type]
    defs: Mapping[str, Expr]
    symbols: frozenset[str]
    constants: Mapping[str, int] = field(default_factory=dict)
    """Named integers (a model's scale, e.g. ``K``); they resolve to literals."""


def check(e: Expr, scope: Scope) -> tuple[Expr, Type]:
    """Resolve names and type-check; return the resolved tree and its type.

    The resolved tree, with every definition it names expanded in place (as generated code
    inlines them), may nest at most ``MAX_EXPR_DEPTH`` deep and hold at most
    ``MAX_EXPR_NODES`` nodes: a chain of definitions, each naming the one before twice, would
    otherwise double the generated code with every link.
    """
    resolved, t = _check(e, scope)
    depth, nodes = _expanded(resolved, scope.defs, {})
    if depth > MAX_EXPR_DEPTH:
        raise ExprError(f"{_too_deep()}, with its definitions expanded")
    if nodes > MAX_EXPR_NODES:
        raise ExprError(
            f"the expression has {nodes:,} terms with its definitions expanded; "
            f"the limit is {MAX_EXPR_NODES:,}"
        )
    return resolved, t


def _expanded(
    e: Expr, defs: Mapping[str, Expr], seen: dict[str, tuple[int, int]]
) -> tuple[int, int]:
    """(depth, nodes) of a resolved expression with its definitions expanded; ``seen``
    memoizes each definition's. Recursion is bounded: every definition passed this check."""
    if isinstance(e, Def):
        if e.name not in seen:
            seen[e.name] = _expanded(defs[e.name], defs, seen)
        return seen[e.name]
    depth, nodes = 0, 0
    for child in _children(e):
        d, n = _expanded(child, defs, seen)
        depth, nodes = max(depth, d), nodes + n
    return depth + 1, nodes + 1


def _check(e: Expr, scope: Scope) -> tuple[Expr, Type]:
    match e:
        case Lit(value=bool()):
            return e, BOOL
        case Lit(value=int() as n):
            return e, int_type(n, n)
        case Ident(name=n):
            if n in scope.variables:
                return Var(n), scope.variables[n]
            if n in scope.params:
                return Param(n), scope.params[n]
            if n in scope.defs:
                return Def(n), BOOL
            if n in scope.constants:
                value = scope.constants[n]
                return Lit(value), int_type(value, value)
            if n in scope.symbols:
                return Sym(n), enum_type(n, (n,))
            names = [*scope.variables, *scope.params, *scope.defs, *scope.constants, *scope.symbols]
            mean = did_you_mean(n, names)
            raise ExprError(f"unknown name {echo(n)}" + (f" ({mean.rstrip()})" if mean else ""))
        case Not(operand=o):
            o2 = _expect_bool(o, scope, "not")
            return Not(o2), BOOL
        case In(operand=o, members=members):
            o2, t = _check(o, scope)
            if t.kind != "enum":
                raise ExprError(f"'in' needs an enumeration on its left, not {t}")
            for m in members:
                if m not in t.values:
                    raise ExprError(f"{echo(m)} is not a value of {t} (values: {_list(t.values)})")
            return In(o2, members), BOOL
        case Cond(test=c, then=a, orelse=b):
            c2 = _expect_bool(c, scope, "if")
            a2, ta = _check(a, scope)
            b2, tb = _check(b, scope)
            if ta.kind != tb.kind:
                raise ExprError(f"type mismatch: 'then' is {ta} but 'else' is {tb}")
            return Cond(c2, a2, b2), _union(ta, tb)
        case BinOp(op=op, left=left, right=right):
            if op in _PRECEDENCE:
                return BinOp(
                    op, _expect_bool(left, scope, op), _expect_bool(right, scope, op)
                ), BOOL
            l2, tl = _check(left, scope)
            r2, tr = _check(right, scope)
            if op in ("+", "-"):
                if tl.kind != "int" or tr.kind != "int":
                    raise ExprError(f"type mismatch: {echo(op)} needs integers, not {tl} and {tr}")
                lo1, hi1, lo2, hi2 = _bounds(tl) + _bounds(tr)
                bounds = (lo1 + lo2, hi1 + hi2) if op == "+" else (lo1 - hi2, hi1 - lo2)
                return BinOp(op, l2, r2), int_type(*bounds)
            if tl.kind != tr.kind:
                raise ExprError(f"type mismatch: cannot compare {tl} with {tr}")
            if op not in ("==", "!=") and tl.kind != "int":
                raise ExprError(f"type mismatch: {echo(op)} needs integers, not {tl}")
            if tl.kind == "enum":
                if isinstance(l2, Sym) and isinstance(r2, Sym):
                    raise ExprError(f"comparing two values ({l2.name}, {r2.name}) is constant")
                if not set(tl.values) & set(tr.values):
                    raise ExprError(f"type mismatch: {tl} and {tr} share no value")
            return BinOp(op, l2, r2), BOOL
    raise ExprError(f"cannot check {e!r}")


def check_stmt_value(
    value: Expr, target: Type, scope: Scope, var: str, effect: str | None = None
) -> Expr:
    """Type-check the right-hand side of ``var := value`` against the variable's type.

    With ``effect``, ``value`` is the argument for parameter ``var`` of that effect.
    """
    v2, t = check(value, scope)
    if t.kind != target.kind:
        what = var if effect is None else f"{effect}'s parameter {var}"
        raise ExprError(f"type mismatch: {what} is {target} but the value is {t}")
    if t.kind == "enum" and not target.admits(t):
        extra = [v for v in t.values if v not in target.values]
        what = (
            f"assignment: {var} := {unparse(value)}"
            if effect is None
            else f"argument: {effect}({var}={unparse(value)})"
        )
        raise ExprError(
            f"out-of-domain {what} may give {_list(extra)}, "
            f"not in {target} ({_list(target.values)})"
        )
    return v2


def _expect_bool(e: Expr, scope: Scope, where: str) -> Expr:
    e2, t = _check(e, scope)
    if t.kind != "bool":
        raise ExprError(f"type mismatch: {echo(where)} needs a boolean, not {t}")
    return e2


def _bounds(t: Type) -> tuple[int, int]:
    lo, hi = t.values[0], t.values[-1]  # an integer type's values are a range
    assert isinstance(lo, int) and isinstance(hi, int)
    return lo, hi


def _union(a: Type, b: Type) -> Type:
    if a == b:
        return a
    if a.kind == "int":
        lo = min(_bounds(a)[0], _bounds(b)[0])
        return int_type(lo, max(_bounds(a)[1], _bounds(b)[1]))
    if a.admits(b):
        return a  # `if c then holder else none` is a holder
    if b.admits(a):
        return b
    values = tuple(dict.fromkeys((*a.values, *b.values)))
    return Type(a.kind, f"{a}|{b}", values)


def _list(values: Sequence[Value]) -> str:
    return known(show(v) for v in values)


# --- compilation ---------------------------------------------------------------------------------
#
# A compiled expression is a closure over positions: ``fn(state, args)`` where ``state`` is the
# sequence of variable values (the state variable first) and ``args`` the event's arguments in
# declaration order. Nothing is evaluated from text.

Evaluator = Callable[[Sequence[Value], Sequence[Value]], Value]


def compile_expr(
    e: Expr,
    var_index: Mapping[str, int],
    param_index: Mapping[str, int],
    defs: Mapping[str, Evaluator],
) -> Evaluator:
    def c(x: Expr) -> Evaluator:
        return compile_expr(x, var_index, param_index, defs)

    match e:
        case Lit(value=v):
            return lambda s, a: v
        case Sym(name=n):
            return lambda s, a: n
        case Var(name=n):
            i = var_index[n]
            return lambda s, a: s[i]
        case Param(name=n):
            j = param_index[n]
            return lambda s, a: a[j]
        case Def(name=n):
            return defs[n]
        case Not(operand=o):
            f = c(o)
            return lambda s, a: not f(s, a)
        case In(operand=o, members=m):
            f, members = c(o), frozenset(m)
            return lambda s, a: f(s, a) in members
        case Cond(test=t, then=x, orelse=y):
            ft, fx, fy = c(t), c(x), c(y)
            return lambda s, a: fx(s, a) if ft(s, a) else fy(s, a)
        case BinOp(op=op, left=left, right=right):
            fl, fr = c(left), c(right)
            return _BINARY[op](fl, fr)
    raise AssertionError(f"unresolved expression {e!r}")


def _binary(
    fn: Callable[[Value, Value], Value],
) -> Callable[[Evaluator, Evaluator], Evaluator]:
    def make(fl: Evaluator, fr: Evaluator) -> Evaluator:
        return lambda s, a: fn(fl(s, a), fr(s, a))

    return make


def _and(fl: Evaluator, fr: Evaluator) -> Evaluator:
    return lambda s, a: bool(fl(s, a)) and bool(fr(s, a))


def _or(fl: Evaluator, fr: Evaluator) -> Evaluator:
    return lambda s, a: bool(fl(s, a)) or bool(fr(s, a))


def _implies(fl: Evaluator, fr: Evaluator) -> Evaluator:
    return lambda s, a: (not fl(s, a)) or bool(fr(s, a))


def _lt(x: Value, y: Value) -> bool:
    assert isinstance(x, int) and isinstance(y, int)
    return x < y


def _add(x: Value, y: Value) -> int:
    assert isinstance(x, int) and isinstance(y, int)
    return x + y


def _sub(x: Value, y: Value) -> int:
    assert isinstance(x, int) and isinstance(y, int)
    return x - y


_BINARY: dict[str, Callable[[Evaluator, Evaluator], Evaluator]] = {
    "and": _and,
    "or": _or,
    "implies": _implies,
    "==": _binary(lambda x, y: x == y),
    "!=": _binary(lambda x, y: x != y),
    "<": _binary(_lt),
    ">": _binary(lambda x, y: _lt(y, x)),
    "<=": _binary(lambda x, y: not _lt(y, x)),
    ">=": _binary(lambda x, y: not _lt(x, y)),
    "+": _binary(_add),
    "-": _binary(_sub),
}


def to_json(e: Expr) -> object:
    """The export form of a resolved expression: a small tree of JSON objects."""
    match e:
        case Lit(value=v):
            return {"lit": v}
        case Sym(name=n):
            return {"sym": n}
        case Var(name=n):
            return {"var": n}
        case Param(name=n):
            return {"param": n}
        case Def(name=n):
            return {"def": n}
        case Not(operand=o):
            return {"not": to_json(o)}
        case In(operand=o, members=m):
            return {"in": to_json(o), "set": list(m)}
        case Cond(test=t, then=x, orelse=y):
            return {"if": to_json(t), "then": to_json(x), "else": to_json(y)}
        case BinOp(op=op, left=left, right=right):
            return {"op": op, "args": [to_json(left), to_json(right)]}
    raise AssertionError(f"unresolved expression {e!r}")
