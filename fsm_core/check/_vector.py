"""The vector backend: breadth-first search over a table model's whole frontier at once.

The default explorer (:mod:`fsm_core.check._explore`) takes one state at a time and stores it in
a dict, about 250 bytes and a few microseconds each. A ``table`` model's state is a handful of
values from finite domains, so this backend packs each state into one integer over the mixed
radix of its domains (the state variable most significant) and explores a whole BFS level per
step with NumPy::

    for each state s of the table, over the frontier's states in s:
        for each (row, arguments) that can leave s:          # one label, as _codegen numbers it
            enabled = guard(frontier)                        # a boolean mask
            next    = code + sum((new - old) * stride)       # each effect an array expression
    new level = first discovery of each unvisited code, in (parent, label) order

Guards, effects, invariants and ``quiescent`` are compiled from the table's checked syntax
trees into closures over arrays (no source is generated): the state variable becomes the
row's source state in a guard and its target in an effect, parameters become the label's
arguments, definitions are expanded, and each effect's statements are substituted into one
expression per variable, so an assignment that reads an earlier one sees what the generated
successor function sees. Constants fold away: ``not keep`` costs nothing per state.

The visited set is a byte per code of the domain when that fits in :data:`BYTES_LIMIT`, else a
sorted array of codes. Each level keeps its codes with, per state, the index of its parent in
the previous level and the label that reached it: a trace is a walk back through the levels.

The result is the default explorer's, number for number: within a level a state is taken by
the first (parent, label) pair in BFS order, so levels list their states in the order the
default explorer appends them; a violation is the first bad state in that order, and a search
stopped by a violation or by ``max_states`` counts only what the default explorer had counted
when it stopped, transitions and rows taken included. The tests prove it on every default
table model, on the spec mutants' tables and at a state limit.

A model does not fit, and :class:`Unfit` says why in one line, when it is not a ``table``
model, when its domain does not pack into 64 bits, or when a row assigns a value outside its
variable's domain (the loader proves domains only at the table's declared constants); the
caller then explores it with the default backend.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt

from fsm_core.check._config import Model
from fsm_core.check._explore import Progress, Result, System, Violation
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
from fsm_core.table._table import Table

__all__ = ["BYTES_LIMIT", "Unfit", "VectorSearch"]

BYTES_LIMIT: Final = 1 << 28
"""The largest domain (in states) whose visited set is a byte array (256 MiB); a larger one
keeps a sorted array of the codes it has visited."""

Codes: TypeAlias = npt.NDArray[np.int64]
Mask: TypeAlias = npt.NDArray[np.bool_]
Indices: TypeAlias = npt.NDArray[np.int32]
Column: TypeAlias = npt.NDArray[Any]
"""A value per state: booleans, integers, or codes of enumeration values in a :class:`_Val`'s
``space``."""


class Unfit(Exception):
    """The model does not fit this backend; the message says why, in one line."""


# --- the packed domain ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Layout:
    """How a state packs into an integer: position ``i`` is the digit ``(code // stride[i]) %
    radix[i]``, the state variable first and most significant."""

    names: tuple[str, ...]
    kinds: tuple[str, ...]
    """Per position: ``bool``, ``int`` or ``enum`` (the state variable is an ``enum``)."""
    spaces: tuple[tuple[Value, ...], ...]
    """Per position, its values in digit order."""
    lows: tuple[int, ...]
    """Per integer position, its smallest value (the value of digit 0); 0 elsewhere."""
    radix: tuple[int, ...]
    stride: tuple[int, ...]
    size: int
    """How many codes the domain has: the product of the radices."""

    @staticmethod
    def of(table: Table) -> _Layout:
        kinds = ["enum", *(v.type.kind for v in table.variables)]
        spaces = [tuple(table.state_names), *(tuple(v.type.values) for v in table.variables)]
        lows = [int(s[0]) if k == "int" else 0 for k, s in zip(kinds, spaces, strict=True)]
        radix = [len(s) for s in spaces]
        size = math.prod(radix)
        if size >= 2**63:
            raise Unfit(f"its domain has {size:,} states, more than a 64-bit code can number")
        stride = [math.prod(radix[i + 1 :]) for i in range(len(radix))]
        return _Layout(
            table.names, tuple(kinds), tuple(spaces), tuple(lows), tuple(radix), tuple(stride),
            size,
        )  # fmt: skip

    def encode(self, state: Sequence[Value]) -> int:
        code = 0
        for i, value in enumerate(state):
            if value not in self.spaces[i]:
                raise Unfit(f"{self.names[i]} starts at {value!r}, outside its domain")
            code += self.spaces[i].index(value) * self.stride[i]
        return code

    def decode(self, code: int) -> State:
        return tuple(
            self.spaces[i][(code // self.stride[i]) % self.radix[i]] for i in range(len(self.names))
        )


# --- expressions over a frontier ----------------------------------------------------------------


class _Env:
    """States of one frontier group (all in the same table state), decoded lazily: a digit
    array per position, computed the first time an expression reads it, and each compiled
    expression's column, computed once however many rows read it.

    ``base`` is each state's code shifted left plus its key (see :class:`_Level`), or its
    code alone when ``keys`` holds the keys. :meth:`select` narrows the group to the states
    a guard enables: a subset, whose digits are its group's, picked by ``sel``; only a group
    decodes its ``codes``, which a subset shares.
    """

    __slots__ = ("base", "codes", "digits", "keys", "layout", "memo", "parent", "sel", "subsets")

    def __init__(
        self,
        layout: _Layout,
        codes: Codes,
        base: Codes,
        keys: Codes | None,
        parent: _Env | None = None,
        sel: npt.NDArray[np.intp] | None = None,
    ) -> None:
        self.layout = layout
        self.codes = codes
        self.base = base
        self.keys = keys
        self.parent = parent
        self.sel = sel
        self.digits: dict[int, Column] = {}
        self.memo: dict[object, Column] = {}
        self.subsets: dict[int, tuple[Mask, _Env | None]] = {}

    def digit(self, i: int) -> Column:
        found = self.digits.get(i)
        if found is None:
            if self.parent is not None:
                found = self.parent.digit(i)[self.sel]
            else:
                quotient = self.codes // self.layout.stride[i]
                radix = self.layout.radix[i]
                found = quotient if i == 0 else quotient - (quotient // radix) * radix
            self.digits[i] = found
        return found

    def scaled(self, i: int, factor: int) -> Column:
        """Position ``i``'s digits times ``factor``."""
        key = (i, factor)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self.digit(i) * factor
        return found

    def select(self, guard: _Val) -> _Env | None:
        """The states where ``guard`` holds, or None when it holds nowhere."""
        found = self.subsets.get(id(guard))
        if found is None:
            mask = guard.column(self)
            sel = np.flatnonzero(mask)
            sub = None
            if sel.size:
                keys = None if self.keys is None else self.keys[sel]
                # A subset decodes nothing itself (see digit): it needs no codes of its own.
                sub = _Env(self.layout, self.codes, self.base[sel], keys, self, sel)
            found = self.subsets[id(guard)] = (mask, sub)
        return found[1]

    def enabled(self) -> Mask:
        """Where some guard :meth:`select` was asked about holds."""
        out = np.zeros(self.base.size, dtype=np.bool_)
        for mask, _ in self.subsets.values():
            out |= mask
        return out

    def close(self) -> None:
        """Drop every column: a subset refers back to its group, and the cycle would keep
        them alive until the garbage collector ran."""
        self.subsets.clear()
        self.memo.clear()
        self.digits.clear()


Fn: TypeAlias = Callable[[_Env], Any]
"""A compiled expression over a group: a column, or a scalar NumPy broadcasts."""

_OPS: Final[Mapping[str, Callable[[Any, Any], Any]]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "+": operator.add,
    "-": operator.sub,
}


@dataclass(frozen=True, slots=True)
class _Val:
    """A compiled expression of ``kind`` ``bool``, ``int`` or ``enum``: a constant when ``fn``
    is None (an enumeration's constant is its value's name), else ``fn`` gives a column (an
    enumeration's column holds indices into ``space``)."""

    kind: str
    const: Value = False
    fn: Fn | None = None
    space: tuple[Value, ...] = ()

    @property
    def column(self) -> Fn:
        assert self.fn is not None, "a constant has no column"
        return self.fn

    def lifted(self) -> Fn:
        """A function giving the column, or the constant for NumPy to broadcast (an
        enumeration's constant as its index in ``space``)."""
        if self.fn is not None:
            return self.fn
        value: Any = self.space.index(self.const) if self.kind == "enum" else self.const
        return lambda env: value


def _constant(kind: str, value: Value) -> _Val:
    return _Val(kind, value)


class _Compiler:
    """Compile substituted expressions (no ``Def`` or ``Param``; the state variable already a
    ``Sym``) into :class:`_Val` closures over a group's columns, folding constants."""

    def __init__(self, layout: _Layout, table: Table) -> None:
        self.layout = layout
        self.position = {n: i for i, n in enumerate(layout.names)}
        # Where two enumerations of different spaces meet (a comparison, the branches of an
        # ``if``), both become indices into every value any enumeration has.
        names = [*table.state_names, *(v for t in table.types.values() for v in t.values)]
        names += [v for i, s in enumerate(layout.spaces) if layout.kinds[i] == "enum" for v in s]
        self.everything: tuple[Value, ...] = tuple(dict.fromkeys(names))
        self._compiled: dict[str, _Val] = {}
        self._shared: dict[int, _Val] = {}
        """Every memoized value, by id (and kept alive, so an id is never reused)."""

    def compile(self, e: Expr) -> _Val:
        """``e`` compiled; the same expression compiles to the same :class:`_Val`, whose column
        a group computes once."""
        key = repr(e)  # not ``e``: Lit(True) == Lit(1)
        found = self._compiled.get(key)
        if found is None:
            found = self._compile(e)
            if id(found) not in self._shared:  # not a part's, folded through
                found = _memoized(found)
                self._shared[id(found)] = found
            self._compiled[key] = found
        return found

    def _compile(self, e: Expr) -> _Val:
        match e:
            case Lit(value=bool() as b):
                return _constant("bool", b)
            case Lit(value=n):
                return _constant("int", n)
            case Sym(name=n):
                return _constant("enum", n)
            case Var(name=n):
                return self._var(self.position[n])
            case Not(operand=o):
                return _not(self.compile(o))
            case In(operand=o, members=members):
                return self._in(self.compile(o), frozenset(members))
            case Cond(test=test, then=x, orelse=y):
                return self._cond(self.compile(test), self.compile(x), self.compile(y))
            case BinOp(op="implies", left=left, right=right):
                return _logic("or", _not(self.compile(left)), self.compile(right))
            case BinOp(op="and" | "or" as op, left=left, right=right):
                return _logic(op, self.compile(left), self.compile(right))
            case BinOp(op=op, left=left, right=right):
                return self._binary(op, self.compile(left), self.compile(right))
        raise AssertionError(f"unsubstituted expression {e!r}")

    def _var(self, i: int) -> _Val:
        kind = self.layout.kinds[i]
        if kind == "bool":
            return _Val("bool", fn=lambda env: env.digit(i) != 0)
        low = self.layout.lows[i]
        if kind == "int" and low != 0:
            return _Val("int", fn=lambda env: env.digit(i) + low)
        return _Val(kind, fn=lambda env: env.digit(i), space=self.layout.spaces[i])

    @staticmethod
    def _in(v: _Val, members: frozenset[str]) -> _Val:
        if v.fn is None:
            return _constant("bool", v.const in members)
        f = v.fn
        hits = [i for i, n in enumerate(v.space) if n in members]
        if not hits or len(hits) == len(v.space):
            return _constant("bool", bool(hits))
        if len(hits) == 1:
            only = hits[0]
            return _Val("bool", fn=lambda env: f(env) == only)
        table = np.array([n in members for n in v.space])
        return _Val("bool", fn=lambda env: table[f(env)])

    def _binary(self, op: str, a: _Val, b: _Val) -> _Val:
        kind = "int" if op in ("+", "-") else "bool"
        operation = _OPS[op]
        if a.fn is None and b.fn is None:
            return _constant(kind, operation(a.const, b.const))
        if a.kind == "enum":
            # Only == and != compare enumerations. A constant outside the column's space
            # equals none of its values.
            a, b = self._common(a, b)
            for side in (a, b):
                if side.fn is None and side.const not in side.space:
                    return _constant("bool", op == "!=")
        f, g = a.lifted(), b.lifted()
        return _Val(kind, fn=lambda env: operation(f(env), g(env)))

    def _common(self, a: _Val, b: _Val) -> tuple[_Val, _Val]:
        """Two enumerations, at least one a column, over one space: the column's, or every
        value's when both are columns of different spaces."""
        if a.fn is None:
            return _Val("enum", a.const, space=b.space), b
        if b.fn is None:
            return a, _Val("enum", b.const, space=a.space)
        if a.space == b.space:
            return a, b
        return self._everywhere(a), self._everywhere(b)

    def _everywhere(self, v: _Val) -> _Val:
        """``v`` as indices into :attr:`everything`."""
        if v.fn is None:
            return _Val("enum", v.const, space=self.everything)
        f = v.fn
        table = np.array([self.everything.index(n) for n in v.space], dtype=np.int64)
        return _Val("enum", fn=lambda env: table[f(env)], space=self.everything)

    def _cond(self, test: _Val, x: _Val, y: _Val) -> _Val:
        if test.fn is None:
            return x if test.const else y
        if x.fn is None and y.fn is None and x.const == y.const:
            return x
        space: tuple[Value, ...] = ()
        if x.kind == "enum":
            columns = {v.space for v in (x, y) if v.fn is not None}
            constants = {v.const for v in (x, y) if v.fn is None}
            space = next(iter(columns)) if len(columns) == 1 else self.everything
            if not constants <= set(space):
                space = self.everything
            if space == self.everything:
                x, y = self._everywhere(x), self._everywhere(y)
            x = x if x.fn is not None else _Val("enum", x.const, space=space)
            y = y if y.fn is not None else _Val("enum", y.const, space=space)
        t, fx, fy = test.column, x.lifted(), y.lifted()
        return _Val(x.kind, fn=lambda env: np.where(t(env), fx(env), fy(env)), space=space)


def _memoized(v: _Val) -> _Val:
    """``v``, computing its column once per group."""
    if v.fn is None:
        return v
    f = v.fn
    slot = object()

    def once(env: _Env) -> Column:
        found = env.memo.get(slot)
        if found is None:
            found = env.memo[slot] = f(env)
        return found

    return _Val(v.kind, fn=once, space=v.space)


def _not(v: _Val) -> _Val:
    if v.fn is None:
        return _constant("bool", not v.const)
    f = v.fn
    return _Val("bool", fn=lambda env: ~f(env))


def _logic(op: str, a: _Val, b: _Val) -> _Val:
    """``a and b`` or ``a or b``, folding a constant side away."""
    absorbing = op == "or"
    for const, other in ((a, b), (b, a)):
        if const.fn is None:
            return const if bool(const.const) == absorbing else other
    f, g = a.column, b.column
    if op == "and":
        return _Val("bool", fn=lambda env: f(env) & g(env))
    return _Val("bool", fn=lambda env: f(env) | g(env))


# --- rows as labels ----------------------------------------------------------------------------

_MAX_SUBSTITUTED: Final = 20_000
"""The most terms one variable's new value may have once a row's effects are substituted
into each other (a chain of ``x := x + x`` doubles it with every link)."""
_MAX_DEPTH: Final = 200
"""How deep that value may nest (a chain of ``x := x + 1`` deepens it with every link)."""


def _substitute(
    e: Expr, now: Mapping[str, Expr], args: Mapping[str, Value], defs: Mapping[str, Expr]
) -> Expr:
    """``e`` with variables replaced by ``now``'s expressions, parameters by the label's
    arguments and definitions by their expansions."""

    def sub(x: Expr) -> Expr:
        return _substitute(x, now, args, defs)

    match e:
        case Var(name=n):
            return now.get(n, e)
        case Param(name=n):
            value = args[n]
            return Sym(value) if isinstance(value, str) else Lit(value)
        case Def(name=n):
            return sub(defs[n])
        case Not(operand=o):
            return Not(sub(o))
        case In(operand=o, members=m):
            return In(sub(o), m)
        case Cond(test=t, then=x, orelse=y):
            return Cond(sub(t), sub(x), sub(y))
        case BinOp(op=op, left=left, right=right):
            return BinOp(op, sub(left), sub(right))
    return e


def _effects(
    stmts: Sequence[Stmt],
    now: dict[str, Expr],
    args: Mapping[str, Value],
    defs: Mapping[str, Expr],
) -> None:
    """Run ``stmts`` symbolically: afterwards ``now`` maps each variable they assign to its
    new value as an expression over the state before the row (a block's assignments guarded
    by its ``when``). Calls change no variable here, as in the generated successors."""
    for s in stmts:
        match s:
            case Assign(var=v, value=value):
                now[v] = _substitute(value, now, args, defs)
            case Call():
                continue
            case Block(when=when, body=body):
                test = _substitute(when, now, args, defs)
                inner = dict(now)
                _effects(body, inner, args, defs)
                for v, x in inner.items():
                    before = now.get(v, Var(v))
                    if x is not before:
                        now[v] = Cond(test, x, before)


def _fits(e: Expr) -> bool:
    """True iff ``e``, expanded as a tree, has at most :data:`_MAX_SUBSTITUTED` terms and
    nests at most :data:`_MAX_DEPTH` deep: compiling it recurses through every term. Counted
    without recursion, and giving up at the limit: a substituted value shares its parts, and
    the tree it stands for may be exponentially larger."""
    budget = _MAX_SUBSTITUTED
    stack: list[tuple[Expr, int]] = [(e, 1)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > _MAX_DEPTH:
            return False
        match node:
            case Not(operand=o) | In(operand=o):
                stack.append((o, depth + 1))
            case Cond(test=t, then=x, orelse=y):
                stack += [(t, depth + 1), (x, depth + 1), (y, depth + 1)]
            case BinOp(left=left, right=right):
                stack += [(left, depth + 1), (right, depth + 1)]
    return True


Change: TypeAlias = Callable[[_Env, int, Codes], None]
"""One assignment of a label, applied to the edges leaving a group's states: it adds to each
edge (a code shifted left by the ``int``, see :class:`_Level`) the change in its digit."""


@dataclass(frozen=True, slots=True)
class _Label:
    """One (source state, row, arguments) triple: the generated successor function's label."""

    index: int
    guard: _Val
    offset: int
    """What the label adds to every code it leaves: the target's and the constants' digits."""
    changes: tuple[Change, ...]


@dataclass(frozen=True, slots=True)
class _Group:
    """What a frontier's states in one table state are checked against, and leave by."""

    state: int
    labels: tuple[_Label, ...]
    healthy: _Val
    """Every invariant holds."""
    quiescent: _Val


def _change(
    layout: _Layout,
    i: int,
    value: Expr,
    v: _Val,
    row: str,
    offset: list[int],
    admitted: Callable[[], tuple[Value, ...]],
) -> Change:
    """The change of position ``i`` to ``value``, compiled as ``v``; a constant part goes to
    ``offset[0]``. It raises :class:`Unfit` when a state that takes the row would get a value
    outside the position's domain. ``admitted()`` are the values position ``i`` may hold in a
    state that takes the row and satisfies every invariant."""
    stride, radix, space = layout.stride[i], layout.radix[i], layout.spaces[i]
    name, kind, low = layout.names[i], layout.kinds[i], layout.lows[i]

    def outside(digit: Column) -> Unfit:
        wrong = (digit < 0) | (digit >= radix)
        return _outside(row, name, space, kind, int(digit[np.argmax(wrong)]) + low)

    step = _counter_step(value, name)
    if step is not None and kind == "int":
        # ``x := x + 1``: the same change in every code, once the old digits leave room;
        # no check at all when the guard rules out every old value that leaves none.
        offset[0] += step * stride
        if all(0 <= space.index(x) + step < radix for x in admitted()):
            return _unchanged

        def counter(env: _Env, shift: int, edge: Codes) -> None:
            digit = env.digit(i)
            if digit.min() + step < 0 or digit.max() + step >= radix:
                raise outside(digit + step)

        return counter

    if v.fn is None:
        if v.const not in space:
            const = v.const

            def never(env: _Env, shift: int, edge: Codes) -> None:
                raise _outside(row, name, space, kind, const)

            return never
        offset[0] += space.index(v.const) * stride
        before = admitted()
        if len(before) == 1:  # the guard and the invariants pin the old value
            offset[0] -= space.index(before[0]) * stride
            return _unchanged

        def reset(env: _Env, shift: int, edge: Codes) -> None:
            edge -= env.scaled(i, stride << shift)

        return reset
    f = v.fn
    if kind == "bool" or (kind == "enum" and v.space == space):

        def assign(env: _Env, shift: int, edge: Codes) -> None:
            edge += (f(env) - env.digit(i)) * (stride << shift)

        return assign
    if kind == "int":

        def number(env: _Env, shift: int, edge: Codes) -> None:
            digit = f(env) - low if low else f(env)
            if digit.min() < 0 or digit.max() >= radix:
                raise outside(digit)
            edge += (digit - env.digit(i)) * (stride << shift)

        return number
    table = np.array([space.index(n) if n in space else -1 for n in v.space], dtype=np.int64)
    missing = any(n not in space for n in v.space)

    def translate(env: _Env, shift: int, edge: Codes) -> None:
        codes = f(env)
        digit = table[codes]
        if missing and digit.min() < 0:
            raise _outside(row, name, space, kind, v.space[int(codes[np.argmax(digit < 0)])])
        edge += (digit - env.digit(i)) * (stride << shift)

    return translate


def _unchanged(env: _Env, shift: int, edge: Codes) -> None:
    """A change wholly in the label's offset."""


def _counter_step(value: Expr, name: str) -> int | None:
    """``c`` when ``value`` is ``name + c`` or ``name - c`` (or ``c + name``), else None."""
    match value:
        case BinOp(op="+", left=Var(name=n), right=Lit(value=int() as c)) if n == name:
            return None if isinstance(c, bool) else c
        case BinOp(op="+", left=Lit(value=int() as c), right=Var(name=n)) if n == name:
            return None if isinstance(c, bool) else c
        case BinOp(op="-", left=Var(name=n), right=Lit(value=int() as c)) if n == name:
            return None if isinstance(c, bool) else -c
    return None


def _outside(row: str, name: str, space: Sequence[Value], kind: str, value: Value) -> Unfit:
    shown = str(value).lower() if isinstance(value, bool) else value
    return Unfit(f"row {row} makes {name} {shown}, outside its domain {_domain(space, kind)}")


def _domain(space: Sequence[Value], kind: str) -> str:
    if kind == "int":
        return f"int[{space[0]}..{space[-1]}]"
    if kind == "bool":
        return "bool"
    return "{" + ", ".join(map(str, space)) + "}"


_MAX_PINNED: Final = 64
"""The most values of a variable :func:`_admitted` tries one by one; a wider domain is taken
as admitted whole."""


def _admitted(
    compiler: _Compiler, assumed: Sequence[Expr], name: str, space: tuple[Value, ...]
) -> tuple[Value, ...]:
    """The values of ``name`` that ``assumed`` (the conjuncts of a row's guard and of every
    invariant, substituted) does not rule out on its own: pinned to one of the others, some
    conjunct folds to false whatever the other variables hold."""
    relevant = [e for e in assumed if _mentions(e, name)]
    if len(space) > _MAX_PINNED or not relevant:
        return space
    out: list[Value] = []
    for value in space:
        pinned: dict[str, Expr] = {name: Sym(value) if isinstance(value, str) else Lit(value)}
        folded = [compiler.compile(_substitute(e, pinned, {}, {})) for e in relevant]
        if all(v.fn is not None or v.const for v in folded):
            out.append(value)
    return tuple(out)


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op == "and":
        return [*_conjuncts(e.left), *_conjuncts(e.right)]
    return [e]


def _mentions(e: Expr, name: str) -> bool:
    match e:
        case Var(name=n):
            return n == name
        case Not(operand=o) | In(operand=o):
            return _mentions(o, name)
        case Cond(test=t, then=x, orelse=y):
            return _mentions(t, name) or _mentions(x, name) or _mentions(y, name)
        case BinOp(left=left, right=right):
            return _mentions(left, name) or _mentions(right, name)
    return False


def _compile_groups(machine: Machine, layout: _Layout) -> tuple[tuple[_Group, ...], int]:
    """The groups of every table state, and how many labels there are, numbered as
    :func:`fsm_core.table._codegen.compile_successors` numbers them."""
    t = machine.table
    defs = {name: d.expr for name, d in t.defs.items()}
    compiler = _Compiler(layout, t)
    phase = layout.names[0]
    # Successors matter only from states that satisfy every invariant: the search stops at
    # the first that does not, counting none of its successors.
    invariants: Expr = Lit(True)
    for inv in t.invariants:
        invariants = BinOp("and", invariants, inv.expr)
    groups: list[_Group] = []
    index = 0
    for k, state in enumerate(t.state_names):
        here = {phase: Sym(state)}
        labels: list[_Label] = []
        for row in t.rows:
            if state not in row.sources or row.reject is not None:
                continue
            params = [p for p, _ in t.events[row.event].params]
            for args in machine.all_arguments(row.event):
                env = dict(zip(params, args, strict=True))
                guard = compiler.compile(_substitute(row.guard, here, env, defs))
                now: dict[str, Expr] = {phase: Sym(row.target or state)}
                _effects(row.effects, now, env, defs)
                offset = [0]
                changes: list[Change] = []
                assumed = _conjuncts(
                    _substitute(BinOp("and", row.guard, invariants), here, env, defs)
                )
                for name, value in now.items():
                    i = compiler.position[name]
                    if value == Var(name):
                        continue
                    if not _fits(value):
                        raise Unfit(f"row {row.id}'s effects on {name} are too large to expand")
                    if i == 0 and isinstance(value, Sym):
                        # The target: every state of the group has the source's digit.
                        offset[0] += (layout.spaces[0].index(value.name) - k) * layout.stride[0]
                        continue
                    compiled = compiler.compile(value)
                    if compiled is compiler.compile(Var(name)):
                        continue  # a block whose ``when`` is false for these arguments
                    admitted = partial(_admitted, compiler, assumed, name, layout.spaces[i])
                    changes.append(_change(layout, i, value, compiled, row.id, offset, admitted))
                if guard.fn is not None or guard.const:
                    labels.append(_Label(index, guard, offset[0], tuple(changes)))
                index += 1
        healthy = _constant("bool", True)
        for inv in t.invariants:
            healthy = _logic(
                "and", healthy, compiler.compile(_substitute(inv.expr, here, {}, defs))
            )
        quiet = compiler.compile(_substitute(t.defs["quiescent"].expr, here, {}, defs))
        groups.append(_Group(k, tuple(labels), healthy, quiet))
    return tuple(groups), index


# --- the search ------------------------------------------------------------------------------


class _Visited:
    """The codes found so far: a byte per code of the domain, or a sorted array of codes."""

    def __init__(self, size: int, bytes_limit: int) -> None:
        self.bytes: npt.NDArray[np.uint8] | None = (
            np.zeros(size, dtype=np.uint8) if size <= bytes_limit else None
        )
        self.sorted: Codes = np.empty(0, dtype=np.int64)

    def unseen(self, codes: Codes) -> Mask:
        if self.bytes is not None:
            return self.bytes[codes] == 0  # type: ignore[no-any-return]
        at = np.searchsorted(self.sorted, codes)
        found = np.zeros(codes.size, dtype=np.bool_)
        inside = at < self.sorted.size
        found[inside] = self.sorted[at[inside]] == codes[inside]
        return ~found

    def add(self, codes: Codes) -> None:
        """Add ``codes``, sorted, none of them already here."""
        if self.bytes is not None:
            self.bytes[codes] = 1
        else:
            self.sorted = np.insert(self.sorted, np.searchsorted(self.sorted, codes), codes)


@dataclass(slots=True)
class _Level:
    """What one frontier gave: its first bad state, every edge leaving it, and the next level.

    An edge is a code and a key, ``parent * labels + label``: the key orders edges as the
    default explorer finds them. When the code shifted left by ``shift`` bits and the key fit
    in 63 bits, each edge is one integer, ``code << shift | key``, and ``keys`` is None.
    """

    bad: int | None
    """The index of the first state that breaks an invariant or deadlocks, if any."""
    edges: Codes
    keys: Codes | None
    shift: int
    taken: set[int]
    """The labels of every edge."""
    codes: Codes
    parents: Indices
    labels: Indices
    """The next level: its new codes in BFS order, each with its parent's index and label."""

    def edge_keys(self) -> Codes:
        if self.keys is not None:
            return self.keys
        return self.edges & ((1 << self.shift) - 1)

    def edge_codes(self) -> Codes:
        return self.edges if self.keys is not None else self.edges >> self.shift


def _first_discoveries(
    level: _Level, size: int, code_bits: int, visited: _Visited, count: int
) -> None:
    """Fill in ``level``'s next level, and add it to ``visited``: each unvisited code once,
    with the least key that reached it, ordered by that key: the order in which the default
    explorer appends them.

    A code outside the domain's ``size`` is dropped: only a state that breaks an invariant
    leads there (labels assume the invariants, see :func:`_admitted`), and the search stops
    at the first such state, before any state it leads to counts.
    """
    edges = level.edges
    if not edges.size:
        return
    if level.keys is None:
        shift = level.shift
        edges.sort()  # the level's own array: its order does not matter
        ordered = edges
        head = np.empty(ordered.size, dtype=np.bool_)
        head[0] = True
        code = ordered >> shift
        np.not_equal(code[1:], code[:-1], out=head[1:])
        won = ordered[head]
        code = won >> shift
        inside = (code >= 0) & (code < size)
        if not inside.all():
            won, code = won[inside], code[inside]
        new = visited.unseen(code)
        won = won[new]
        visited.add(code[new])
        packed = np.sort(((won & ((1 << shift) - 1)) << code_bits) | (won >> shift))
        codes, keys = packed & ((1 << code_bits) - 1), packed >> code_bits
    else:
        order = np.lexsort((level.keys, edges))
        code, key = edges[order], level.keys[order]
        head = np.empty(code.size, dtype=np.bool_)
        head[0] = True
        np.not_equal(code[1:], code[:-1], out=head[1:])
        code, key = code[head], key[head]
        inside = (code >= 0) & (code < size)
        code, key = code[inside], key[inside]
        new = visited.unseen(code)
        code, key = code[new], key[new]
        visited.add(code)
        by_key = np.argsort(key)
        codes, keys = code[by_key], key[by_key]
    level.codes = codes
    parents, labels = np.divmod(keys, count)
    level.parents, level.labels = parents.astype(np.int32), labels.astype(np.int32)


class VectorSearch:
    """A table model compiled for the vector backend; :meth:`explore` runs the search.

    Raises :class:`Unfit` when the model does not fit (see the module's docstring).
    """

    def __init__(
        self, model: Model, system: System[Any], *, bytes_limit: int = BYTES_LIMIT
    ) -> None:
        if model.kind != "table":
            raise Unfit(f"it is an {model.kind} model; the vector backend explores table models")
        self.system = system
        self.layout = _Layout.of(model.machine.table)
        self.groups, self.label_count = _compile_groups(model.machine, self.layout)
        if self.label_count != len(system.labels):
            raise AssertionError("the vector backend numbers labels unlike _codegen")
        self.initial = self.layout.encode(system.initial)
        self.bytes_limit = bytes_limit
        self._levels: list[tuple[Codes, Indices, Indices]] = []
        self._edges: tuple[Codes, Codes] | None = None

    def explore(
        self,
        *,
        max_states: int | None = None,
        keep_graph: bool = False,
        progress: Progress | None = None,
    ) -> Result[State]:
        """Explore as :func:`fsm_core.check._explore.explore` does, with the same result; the
        result holds no parent pointers and no graph (:meth:`unsettled` reads the edges)."""
        start = time.perf_counter()
        count = max(1, self.label_count)
        code_bits = max(1, (self.layout.size - 1).bit_length())
        visited = _Visited(self.layout.size, self.bytes_limit)
        frontier = np.array([self.initial], dtype=np.int64)
        visited.add(frontier)
        empty = np.empty(0, dtype=np.int64)
        none = np.empty(0, dtype=np.int32)
        self._levels = [(frontier, none, none)]
        sources: list[Codes] = []
        targets: list[Codes] = []
        taken: set[int] = set()
        states, transitions, depth, offset = 1, 0, 0, 0
        next_report = start + 1.0
        while frontier.size:
            key_bits = max(1, (frontier.size * count).bit_length())
            shift = key_bits if code_bits + key_bits <= 63 else 0
            level = self._level(frontier, shift, count)
            _first_discoveries(level, self.layout.size, code_bits, visited, count)
            keys = level.edge_keys()
            stop = self._stop(level, states, max_states)
            if stop is not None:
                processed, violated = stop
                before = keys < processed * count
                states += int(np.searchsorted(level.parents, processed))
                transitions += int(np.count_nonzero(before))
                taken.update(np.unique(keys[before] % count).tolist())
                violation = self._violation(len(self._levels) - 1, processed) if violated else None
                return Result(
                    self.system.name, states, transitions, depth, time.perf_counter() - start,
                    complete=False, violation=violation, labels_taken=taken,
                )  # fmt: skip
            states += level.codes.size
            transitions += level.edges.size
            taken |= level.taken
            if keep_graph:
                sources.append(keys // count + offset)
                targets.append(level.edge_codes())
            if level.codes.size:
                self._levels.append((level.codes, level.parents, level.labels))
                depth += 1
            offset += frontier.size
            frontier = level.codes
            now = time.perf_counter()
            if progress is not None and now >= next_report:
                progress(states, frontier.size, depth, now - start)
                next_report = now + 1.0
        if keep_graph:
            self._edges = (np.concatenate(sources or [empty]), np.concatenate(targets or [empty]))
        return Result(
            self.system.name, states, transitions, depth, time.perf_counter() - start,
            complete=True, labels_taken=taken,
        )  # fmt: skip

    @staticmethod
    def _stop(level: _Level, states: int, max_states: int | None) -> tuple[int, bool] | None:
        """Where the default explorer stops in this level, if it does: (how many of the
        frontier's states it processed, whether it stopped at a violation)."""
        limit: int | None = None
        if max_states is not None:
            room = max_states - states
            if room < 0:
                limit = 0
            elif room < level.codes.size:
                limit = int(level.parents[room])
        if level.bad is not None and (limit is None or level.bad <= limit):
            return level.bad, True
        if limit is not None:
            return limit + 1, False
        return None

    def _level(self, frontier: Codes, shift: int, count: int, ranks: Codes | None = None) -> _Level:
        """Check every state of ``frontier`` and take every label it enables. An edge's key
        counts its parent by its position in ``frontier``, or by its rank in ``ranks`` (a
        partitioned search's frontier is one slice of the level: see ``_partition``)."""
        layout = self.layout
        phase = frontier // layout.stride[0]
        present = np.bincount(phase, minlength=layout.radix[0])
        bad: int | None = None
        edges: list[Codes] = []
        keys: list[Codes] = []
        taken: set[int] = set()
        for group in self.groups:
            size = int(present[group.state])
            if not size:
                continue
            whole = size == frontier.size
            pos = np.arange(size) if whole else np.flatnonzero(phase == group.state)
            codes = frontier if whole else frontier[pos]
            key = (pos if ranks is None else ranks[pos]) * count
            base = (codes << shift) + key if shift else codes
            env = _Env(layout, codes, base, None if shift else key)
            always = False
            for label in group.labels:
                sub: _Env | None = env
                if label.guard.fn is None:
                    always = True
                else:
                    sub = env.select(label.guard)
                if sub is None:
                    continue
                if shift:
                    edge = sub.base + ((label.offset << shift) + label.index)
                else:
                    edge = sub.base + label.offset
                    assert sub.keys is not None
                    keys.append(sub.keys + label.index)
                for change in label.changes:
                    change(sub, shift, edge)
                edges.append(edge)
                taken.add(label.index)
            broken = _holds_not(group.healthy, env, size)
            if not always:
                stuck = ~env.enabled()
                if stuck.any():
                    broken |= stuck & _holds_not(group.quiescent, env, size)
            env.close()
            if broken.any():
                at = int(pos[int(np.argmax(broken))])
                bad = at if bad is None else min(bad, at)
        empty = np.empty(0, dtype=np.int64)
        return _Level(
            bad,
            np.concatenate(edges) if edges else empty,
            None if shift else (np.concatenate(keys) if keys else empty),
            shift, taken, empty, np.empty(0, dtype=np.int32), np.empty(0, dtype=np.int32),
        )  # fmt: skip

    def _trace(self, depth: int, index: int) -> tuple[tuple[int | None, State], ...]:
        """The path to state ``index`` of level ``depth``, through its parents."""
        steps: list[tuple[int | None, State]] = []
        for level in range(depth, 0, -1):
            codes, parents, labels = self._levels[level]
            steps.append((int(labels[index]), self.layout.decode(int(codes[index]))))
            index = int(parents[index])
        steps.append((None, self.layout.decode(int(self._levels[0][0][index]))))
        return tuple(reversed(steps))

    def _violation(self, depth: int, index: int) -> Violation[State]:
        trace = self._trace(depth, index)
        name = self.system.first_violated(trace[-1][1]) or self.system.deadlock
        return Violation(name, trace)

    def unsettled(self) -> tuple[tuple[int | None, State], ...] | None:
        """The trace to the first state, in BFS order, from which no quiescent state is
        reachable; None when there is none. Needs a complete search that kept the graph."""
        assert self._edges is not None, "explore(keep_graph=True) first"
        sources, targets = self._edges
        every = np.concatenate([codes for codes, _, _ in self._levels])
        order = np.argsort(every)
        target = order[np.searchsorted(every[order], targets)]
        settles = np.zeros(every.size, dtype=np.bool_)
        phase = every // self.layout.stride[0]
        for group in self.groups:
            pos = np.flatnonzero(phase == group.state)
            if pos.size:
                env = _Env(self.layout, every[pos], every[pos], None)
                settles[pos] = ~_holds_not(group.quiescent, env, pos.size)
        # Backwards from the quiescent states, over the edges sorted by target.
        by_target = np.argsort(target, kind="stable")
        into = sources[by_target]
        starts = np.searchsorted(target[by_target], np.arange(every.size + 1))
        frontier = np.flatnonzero(settles)
        while frontier.size:
            lo, hi = starts[frontier], starts[frontier + 1]
            width = hi - lo
            total = int(width.sum())
            if not total:
                break
            begin = np.repeat(lo - np.cumsum(width) + width, width)
            preds = into[begin + np.arange(total)]
            preds = np.unique(preds[~settles[preds]])
            settles[preds] = True
            frontier = preds
        stuck = np.flatnonzero(~settles)
        if not stuck.size:
            return None
        first = int(stuck[0])
        sizes = np.cumsum([codes.size for codes, _, _ in self._levels])
        depth = int(np.searchsorted(sizes, first, side="right"))
        index = first - (int(sizes[depth - 1]) if depth else 0)
        return self._trace(depth, index)


def _holds_not(v: _Val, env: _Env, size: int) -> Mask:
    """Where ``v`` is false, per state of the group."""
    if v.fn is None:
        return np.full(size, not v.const, dtype=np.bool_)
    return ~np.asarray(v.fn(env), dtype=np.bool_)
