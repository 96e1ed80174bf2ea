"""The loaded, type-checked form of one transition table (before compilation)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, final

from fsm_core.table._expr import Expr, Stmt, Type, Value

EventKind = Literal["input", "internal"]

NAME = re.compile(r"[a-z_][a-z0-9_]*")
"""A name in a table (machine, state, type, enumeration value, variable, event, parameter,
effect, definition): lower_snake_case. Generated code may splice a name; nothing else."""

ID = re.compile(r"[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*")
"""A row or invariant id: lower_snake_case words joined by dots, e.g. ``send.idle.wake``."""

CLAUSE_ID = re.compile(r"[A-Za-z0-9_]+(?:[.-][A-Za-z0-9_]+)*")
"""A clause id or source key of the clause catalogue, e.g. ``S000.first-wins``, ``D1``."""


@final
@dataclass(frozen=True, slots=True)
class Clause:
    """A seed sentence or pinned decision that rows implement, quoted verbatim.

    ``not_implemented`` is None for a clause some row, pair rule or invariant cites; for one
    that nothing cites, it says why no row implements it (``load_spec`` holds the catalogue to
    exactly one of the two).
    """

    id: str
    source: str
    quote: str
    summary: str
    not_implemented: str | None = None


@dataclass(frozen=True, slots=True)
class StateSpec:
    name: str
    doc: str


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    type: Type
    init: Value
    doc: str


@dataclass(frozen=True, slots=True)
class EventSpec:
    """An event. ``input`` events are user calls and must be handled in every valid state."""

    name: str
    kind: EventKind
    params: tuple[tuple[str, Type], ...]
    doc: str


@dataclass(frozen=True, slots=True)
class EffectSpec:
    """A named effect the runtime performs. ``notifies``: listeners run inside it."""

    name: str
    params: tuple[tuple[str, Type], ...]
    notifies: bool
    doc: str
    requires: Expr | None = None
    """What must hold whenever the effect runs, over the state and the effect's arguments."""
    requires_text: str | None = None


@dataclass(frozen=True, slots=True)
class Definition:
    """A named boolean predicate over the state, usable in guards, effects and invariants."""

    name: str
    expr: Expr
    text: str
    doc: str


@dataclass(frozen=True, slots=True)
class Row:
    """One guarded transition.

    ``target`` is None when the row stays in its source state. ``reject`` is the reason when
    the row refuses the event (then it has no target and no effects).
    """

    id: str
    event: str
    sources: tuple[str, ...]
    guard: Expr
    guard_text: str | None
    target: str | None
    reject: str | None
    effects: tuple[Stmt, ...]
    clauses: tuple[str, ...]
    doc: str


@dataclass(frozen=True, slots=True)
class PairRule:
    """(state, event) pairs handled on purpose without a row: ignored, or rejected."""

    kind: Literal["ignored", "rejected"]
    index: int
    events: tuple[str, ...]
    states: tuple[str, ...]
    why: str
    clauses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Invariant:
    """A named state predicate that must hold in every reachable state."""

    id: str
    expr: Expr
    text: str
    doc: str
    clauses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Stability:
    """A step invariant: ``var`` keeps its value while ``when`` holds before and after.

    Checked between every two moments a listener can observe: each effect and each step's end.
    """

    id: str
    var: str
    when: Expr
    text: str
    doc: str
    clauses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Table:
    """Everything one ``specs/*.toml`` file says, resolved and type-checked."""

    file: str
    name: str
    title: str
    doc: str
    state_var: str
    states: tuple[StateSpec, ...]
    initial: str
    types: dict[str, Type]
    variables: tuple[Variable, ...]
    events: dict[str, EventSpec]
    effects: dict[str, EffectSpec]
    defs: dict[str, Definition]
    rows: tuple[Row, ...]
    pair_rules: tuple[PairRule, ...]
    invariants: tuple[Invariant, ...]
    stable: tuple[Stability, ...] = ()

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states)

    @property
    def names(self) -> tuple[str, ...]:
        """Positions in a state tuple: the state variable first, then the variables."""
        return (self.state_var, *(v.name for v in self.variables))
