"""The compiled interpreter: one table, fired as a pure function or executed in place.

A *state* is a tuple of values in :attr:`Machine.names` order: the state variable first
(``phase`` for the agent), then the table's variables. :meth:`Machine.fire` is pure: it returns
the next state and the ordered effects, or raises. :meth:`Machine.execute` runs the same row in
place on a mutable store and performs each effect as it is reached, so a listener that re-enters
sees exactly the state the table says it sees. The runtime uses ``execute``; the checker and the
tests use ``fire``; both select the row with :meth:`Machine.select`.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterator, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import TypeAlias, final

from fsm_core._errors import NotEnabled, Rejected, echo
from fsm_core.table._expr import (
    Assign,
    Block,
    Call,
    Evaluator,
    Expr,
    Stmt,
    Value,
    compile_expr,
    show,
)
from fsm_core.table._table import Row, Table

_PYTHON_TYPE: Mapping[str, type] = {"bool": bool, "int": int, "enum": str}
"""The exact Python type of an argument of each kind of table type."""

State: TypeAlias = tuple[Value, ...]
Perform: TypeAlias = Callable[[str, tuple[Value, ...]], None]


class Refused(enum.Enum):
    """The type of :data:`REFUSED`."""

    REFUSED = "refused"


REFUSED = Refused.REFUSED
"""What :meth:`Machine.lookup` returns when the event is rejected or not enabled."""


@final
@dataclass(frozen=True, slots=True)
class Effect:
    """One effect a row performs, with its arguments evaluated when it was reached."""

    name: str
    args: tuple[Value, ...]

    def __str__(self) -> str:
        return f"{self.name}({', '.join(show(a) for a in self.args)})"


@final
@dataclass(frozen=True, slots=True)
class Step:
    """The result of firing one event: which row ran, the next state and the effects in order.

    ``row`` is None when the table ignores the event here on purpose; then ``target`` is
    ``source`` and there are no effects.
    """

    event: str
    args: tuple[Value, ...]
    row: str | None
    source: State
    target: State
    effects: tuple[Effect, ...]


@dataclass(frozen=True, slots=True)
class _Assign:
    """A compiled :class:`Assign`: the variable's position and its new value."""

    index: int
    value: Evaluator


@dataclass(frozen=True, slots=True)
class _Call:
    """A compiled :class:`Call`: the effect and its arguments, evaluated when reached."""

    effect: str
    args: tuple[Evaluator, ...]


@dataclass(frozen=True, slots=True)
class _Block:
    """A compiled :class:`Block`: its body runs iff ``when`` holds when it is reached."""

    when: Evaluator
    body: tuple[_Stmt, ...]


_Stmt: TypeAlias = _Assign | _Call | _Block


@dataclass(frozen=True, slots=True)
class CompiledRow:
    row: Row
    guard: Evaluator
    target: str | None
    ops: tuple[_Stmt, ...]


@final
class Machine:
    """A compiled table. Build it with :func:`fsm_core.table.load_spec`."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.name = table.name
        self.names: tuple[str, ...] = table.names
        self._index = {n: i for i, n in enumerate(self.names)}
        self.defs: dict[str, Evaluator] = {}
        for d in table.defs.values():
            self.defs[d.name] = compile_expr(d.expr, self._index, {}, self.defs)
        self.invariants: tuple[tuple[str, Evaluator], ...] = tuple(
            (inv.id, compile_expr(inv.expr, self._index, {}, self.defs)) for inv in table.invariants
        )
        self.requires: dict[str, Evaluator] = {
            name: compile_expr(
                e.requires, self._index, {p: i for i, (p, _) in enumerate(e.params)}, self.defs
            )
            for name, e in table.effects.items()
            if e.requires is not None
        }
        self.stable: tuple[tuple[str, int, Evaluator], ...] = tuple(
            (st.id, self._index[st.var], compile_expr(st.when, self._index, {}, self.defs))
            for st in table.stable
        )
        self.initial: State = (table.initial, *(v.init for v in table.variables))
        self._candidates: dict[tuple[str, str], list[CompiledRow]] = {}
        self.rows: dict[str, CompiledRow] = {}
        for row in table.rows:
            params = {p: i for i, (p, _) in enumerate(table.events[row.event].params)}
            compiled = CompiledRow(
                row,
                compile_expr(row.guard, self._index, params, self.defs),
                row.target,
                tuple(self._compile_stmt(s, params) for s in row.effects),
            )
            self.rows[row.id] = compiled
            for source in row.sources:
                self._candidates.setdefault((source, row.event), []).append(compiled)
        # Each event's parameters in declaration order, with the exact Python type and the
        # values each admits, so that checking a call's arguments is a few lookups.
        self._params: dict[str, tuple[tuple[str, type, frozenset[Value]], ...]] = {
            name: tuple((p, _PYTHON_TYPE[t.kind], frozenset(t.values)) for p, t in e.params)
            for name, e in table.events.items()
        }
        self._param_names = {
            name: frozenset(p for p, _ in e.params) for name, e in table.events.items()
        }
        self._pairs: dict[tuple[str, str], tuple[str, str]] = {}
        for rule in table.pair_rules:
            for state in rule.states:
                for event in rule.events:
                    self._pairs[(state, event)] = (rule.kind, rule.why)

    def _compile_stmt(self, stmt: Stmt, params: Mapping[str, int]) -> _Stmt:
        def ev(e: Expr) -> Evaluator:
            return compile_expr(e, self._index, params, self.defs)

        match stmt:
            case Assign(var=v, value=value):
                return _Assign(self._index[v], ev(value))
            case Call(effect=name, args=args):
                return _Call(name, tuple(ev(a) for a in args))
            case Block(when=when, body=body):
                return _Block(ev(when), tuple(self._compile_stmt(b, params) for b in body))
        raise AssertionError(stmt)

    # --- querying ---------------------------------------------------------------------------

    def state(self, **values: Value) -> State:
        """Build a state from the initial one, overriding the named values."""
        unknown = set(values) - set(self.names)
        if unknown:
            raise KeyError(f"{self.name} has no variable {sorted(unknown)[0]!r}")
        return tuple(values.get(n, v) for n, v in zip(self.names, self.initial, strict=True))

    def describe(self, state: Sequence[Value]) -> dict[str, Value]:
        """The state as ``{name: value}``, in table order."""
        return dict(zip(self.names, state, strict=True))

    def get(self, state: Sequence[Value], name: str) -> Value:
        return state[self._index[name]]

    def holds(self, definition: str, state: Sequence[Value]) -> bool:
        """Evaluate a named definition of the table (e.g. ``quiescent``) on a state."""
        return bool(self.defs[definition](state, ()))

    def violated(self, state: Sequence[Value]) -> list[str]:
        """The ids of the invariants that do not hold in ``state``."""
        return [name for name, fn in self.invariants if not fn(state, ())]

    def unmet(self, effect: str, state: Sequence[Value], values: Sequence[Value]) -> bool:
        """True iff ``effect``'s ``requires`` fails when it runs with ``values`` in ``state``."""
        requires = self.requires.get(effect)
        return requires is not None and not requires(state, values)

    def unstable(self, before: Sequence[Value], after: Sequence[Value]) -> list[str]:
        """The step invariants broken between two observed states."""
        return [
            sid
            for sid, i, when in self.stable
            if before[i] != after[i] and when(before, ()) and when(after, ())
        ]

    def arguments(self, event: str, **kwargs: Value) -> tuple[Value, ...]:
        """Order keyword arguments as the event declares its parameters; reject strays."""
        params = self._params.get(event)
        if params is None:
            raise KeyError(f"{self.name} has no event {event!r}")
        if not params and not kwargs:
            return ()
        if kwargs.keys() != self._param_names[event]:
            raise TypeError(
                f"{self.name}.{event} takes ({', '.join(p for p, _, _ in params)}), "
                f"got ({', '.join(kwargs)})"
            )
        out: list[Value] = []
        for p, kind, values in params:
            value = kwargs[p]
            # Exact types: 1 is not true, and a str subclass could compare equal to every value.
            if type(value) is not kind or value not in values:
                raise ValueError(
                    f"{self.name}.{event}: {p}={echo(value)} is not a value of "
                    f"{self.table.events[event].params[len(out)][1]}"
                )
            out.append(value)
        return tuple(out)

    def domain(self) -> Iterator[State]:
        """Every state of the finite domain, reachable or not."""
        domains = [self.table.state_names, *(v.type.values for v in self.table.variables)]
        return itertools.product(*domains)

    def all_arguments(self, event: str) -> Iterator[tuple[Value, ...]]:
        """Every argument tuple the event admits."""
        return itertools.product(*(t.values for _, t in self.table.events[event].params))

    # --- firing -----------------------------------------------------------------------------

    def enabled(
        self, state: Sequence[Value], event: str, args: Sequence[Value]
    ) -> list[CompiledRow]:
        """All rows whose guard holds (a valid table never has more than one)."""
        rows = self._candidates.get((str(state[0]), event), ())
        return [r for r in rows if r.guard(state, args)]

    def select(
        self, state: Sequence[Value], event: str, args: Sequence[Value]
    ) -> CompiledRow | None:
        """The row that handles ``event`` here, None if the table ignores it here.

        Raises :class:`Rejected` when the table refuses the event here, and
        :class:`NotEnabled` when no row is enabled.
        """
        found = self.lookup(state, event, args)
        if found is not REFUSED:
            return found
        for r in self._candidates.get((str(state[0]), event), ()):
            if r.guard(state, args):
                raise Rejected(r.row.reject)
        rule = self._pairs.get((str(state[0]), event))
        if rule is not None:
            raise Rejected(rule[1])
        if event not in self.table.events:
            raise KeyError(f"{self.name} has no event {event!r}")
        raise NotEnabled(
            f"{self.name}: no row of {event}({show_args(self, event, args)}) is enabled in "
            f"{self.format_state(state[: len(self.names)])}"
        )

    def lookup(
        self, state: Sequence[Value], event: str, args: Sequence[Value]
    ) -> CompiledRow | Refused | None:
        """:meth:`select` without exceptions, for the checker's inner loop.

        Returns the row, None when the table ignores the event here, or :data:`REFUSED` when
        it rejects the event or no row is enabled. ``state`` may be longer than the table's
        variables (a model appends its own); only the table's positions are read.
        """
        for r in self._candidates.get((str(state[0]), event), ()):
            if r.guard(state, args):
                return REFUSED if r.row.reject is not None else r
        rule = self._pairs.get((str(state[0]), event))
        if rule is not None and rule[0] == "ignored":
            return None
        return REFUSED

    def fire(self, state: Sequence[Value], event: str, **kwargs: Value) -> Step:
        """Fire ``event`` on ``state`` with keyword arguments; pure."""
        return self.fire_args(state, event, self.arguments(event, **kwargs))

    def fire_args(self, state: Sequence[Value], event: str, args: tuple[Value, ...]) -> Step:
        """Fire with arguments already in declaration order; pure."""
        source = tuple(state)
        row = self.select(source, event, args)
        if row is None:
            return Step(event, args, None, source, source, ())
        store = list(source)
        effects: list[Effect] = []
        self.execute(row, store, args, lambda name, a: effects.append(Effect(name, a)))
        return Step(event, args, row.row.id, source, tuple(store), tuple(effects))

    def execute(
        self,
        row: CompiledRow,
        store: MutableSequence[Value],
        args: Sequence[Value],
        perform: Perform,
    ) -> None:
        """Run ``row`` in place: move to its target, then its effects in order.

        Each effect reads ``store`` as it is when reached, so state changed by a listener
        inside an earlier notification is seen by the effects after it.
        """
        if row.target is not None:
            store[0] = row.target
        _run(row.ops, store, args, perform)

    def run_effects(
        self,
        row: CompiledRow,
        store: MutableSequence[Value],
        args: Sequence[Value],
        perform: Perform,
    ) -> None:
        """Run only ``row``'s effects in place, for a hosted machine that moves the state itself."""
        _run(row.ops, store, args, perform)

    def format_state(self, state: Sequence[Value]) -> str:
        """``idle{holder=none, latch=false, ...}``: the state variable, then the variables."""
        pairs = ", ".join(f"{n}={show(v)}" for n, v in zip(self.names[1:], state[1:], strict=True))
        return f"{state[0]}{{{pairs}}}"


def _run(
    ops: tuple[_Stmt, ...], store: MutableSequence[Value], args: Sequence[Value], perform: Perform
) -> None:
    # ``type(op) is`` rather than ``match``: this is the checker's innermost loop, and an
    # identity test per statement costs less than a class pattern's isinstance and lookups.
    for op in ops:
        if type(op) is _Assign:
            store[op.index] = op.value(store, args)
        elif type(op) is _Call:
            perform(op.effect, tuple([f(store, args) for f in op.args]) if op.args else ())
        elif type(op) is _Block and op.when(store, args):
            _run(op.body, store, args, perform)


def show_args(m: Machine, event: str, args: Sequence[Value]) -> str:
    """``wake=true, lane=next_turn``: an event's arguments named as it declares them."""
    params = [p for p, _ in m.table.events[event].params] if event in m.table.events else []
    return ", ".join(f"{p}={show(a)}" for p, a in zip(params, args, strict=False))
