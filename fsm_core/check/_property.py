"""What a model is proven against: one :class:`Property` record per property the checker reports.

Every name a counterexample can end in is a record here: the table's invariants, step
invariants and effect contracts (:func:`table_properties`), a composition's own properties,
and the two every model has (:func:`explorer_properties`). The report prints a record's
statement after its name, and the model loader accepts ``[expect] property`` iff a record of
the model's kind bears that name: neither derives a property from the table on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, final, overload

from fsm_core.table._expr import Value
from fsm_core.table._table import Table

Notice = tuple[str, tuple[Value, ...]]
"""A notifying effect as a listener sees it: its name and its evaluated arguments."""

PropertyKind = Literal[
    "invariant",
    "step",
    "requires",
    "always",
    "between",
    "notified",
    "delivered",
    "eventually",
    "deadlock-free",
]
"""How a property is decided; :class:`Property` says what each kind means."""

Predicate = Callable[[Sequence[Any], Notice | None], bool]
"""``predicate(state, at)``: True iff a property holds in ``state`` (``at``: the notifying
effect just taken, a ``(name, arguments)`` pair, or None)."""

Part = tuple[tuple[int, ...], Predicate]
"""One part of a property that holds iff each of its parts does: the positions of the state
the part reads (its *scope*), and its predicate, which reads nothing else."""

DEADLOCK = "deadlock"
"""The property name of a state with no successor that is not quiescent."""

QUIESCENCE = "quiescence_reachable"
"""The property name of "from every reachable state a quiescent state is reachable"."""


@final
@dataclass(frozen=True, slots=True)
class Property:
    """One property a model is proven against: what it is called, when it is checked, what it
    means, and how it is decided.

    ``predicate(state, at)`` is True iff the property holds. By ``kind``:

    - ``invariant``, ``step``, ``requires``: the table's invariants, step invariants and
      effect contracts. They have no predicate: the engine decides them in its compiled passes
      (every invariant of a state at once, a notification's stable variables, an effect's
      contract as it runs) and reports the broken one by this record's name;
    - ``always``: in every state between steps (``at`` None) and at every notification
      (``at`` the notifying effect);
    - ``between``: in every state between steps only: a step in progress may pass through
      states it forbids (a teardown spreading down a tree inside one call);
    - ``notified``: at every notification only, before the ``always`` properties;
    - ``delivered``: when an event the wiring fires is refused, ``at`` being that event; a
      refusal the property allows is skipped;
    - ``eventually``: a state satisfying the predicate stays reachable from every state
      (proven over the stored graph, so only for models small enough to keep it);
    - ``deadlock-free``: a state with no successor satisfies the predicate.
    """

    name: str
    kind: PropertyKind
    meaning: str
    """Why the property matters, in a sentence (a table property's ``doc``)."""
    predicate: Predicate | None = None
    formula: str = ""
    """The property as the table states it (an invariant's expression), if it is the table's."""
    clauses: tuple[str, ...] = ()
    """The clauses of specs/clauses.toml the property proves (an invariant's tags; a
    composition's promises name theirs)."""

    @property
    def statement(self) -> str:
        """What a counterexample prints after the name: the formula, else the meaning."""
        return self.formula or self.meaning


def predicates(
    properties: Sequence[Property], kind: PropertyKind
) -> tuple[tuple[str, Predicate], ...]:
    """The ``kind`` properties among ``properties``, as ``(name, predicate)`` pairs in order:
    what an engine evaluates (only the table's own kinds have no predicate)."""
    out: list[tuple[str, Predicate]] = []
    for p in properties:
        if p.kind == kind:
            if p.predicate is None:
                raise ValueError(f"property {p.name} of kind {kind} has no predicate")
            out.append((p.name, p.predicate))
    return tuple(out)


@final
class Conjunction:
    """A predicate that holds iff each of its :attr:`parts` does, each part declaring the
    positions it reads. The compiled engine, at a notification inside a step from a state that
    breaks nothing, rechecks only the parts whose scope the step changed
    (:func:`unscoped_reads` audits a scope)."""

    __slots__ = ("_tests", "parts")

    def __init__(self, parts: Sequence[Part]) -> None:
        self.parts = tuple(parts)
        self._tests = tuple(holds for _, holds in parts)

    def __call__(self, state: Sequence[Any], at: Notice | None) -> bool:
        return all(t(state, at) for t in self._tests)


def conjunction(name: str, meaning: str, parts: Sequence[Part]) -> Property:
    """The ``always`` property ``name`` that holds iff every one of ``parts`` does."""
    return Property(name, "always", meaning, Conjunction(parts))


def at_node(name: str, node: str) -> str:
    """A table property's name on one instance: ``name@node``, or ``name`` for a flat model."""
    return f"{name}@{node}" if node else name


def requires_name(effect: str) -> str:
    """The name of an effect's ``requires`` contract."""
    return f"{effect}.requires"


def table_properties(
    table: Table, instances: Sequence[str], *, contracts: bool = True
) -> tuple[Property, ...]:
    """The table's properties on each of ``instances`` (``("",)`` for one flat instance): its
    invariants, then, with ``contracts`` (when the checker looks inside rows), its step
    invariants and its effects' ``requires`` contracts."""
    own: list[Property] = [
        Property(i.id, "invariant", i.doc or i.text, formula=i.text, clauses=i.clauses)
        for i in table.invariants
    ]
    if contracts:
        own += [
            Property(s.id, "step", s.doc, formula=f"{s.var} unchanged while {s.text}")
            for s in table.stable
        ]
        own += [
            Property(
                requires_name(n),
                "requires",
                e.doc,
                formula=f"{n} requires {e.requires_text}",
            )
            for n, e in table.effects.items()
            if e.requires is not None
        ]
    return tuple(
        Property(at_node(p.name, node), p.kind, p.meaning, formula=p.formula, clauses=p.clauses)
        for node in instances
        for p in own
    )


def explorer_properties(quiescent: Callable[[Sequence[Any]], bool]) -> tuple[Property, ...]:
    """The two properties every model has, decided by its ``quiescent`` states."""
    return (
        Property(
            DEADLOCK,
            "deadlock-free",
            "no step is possible and the state is not quiescent",
            lambda s, _: quiescent(s),
        ),
        Property(
            QUIESCENCE,
            "eventually",
            "no quiescent state is reachable from this state",
            lambda s, _: quiescent(s),
        ),
    )


def unscoped_reads(part: Part, state: Sequence[Any]) -> set[int]:
    """The positions ``part``'s predicate reads of ``state`` outside its declared scope: empty
    iff the scope holds there (a test runs it over reachable states)."""
    scope, holds = part
    reading = Reading(state)
    holds(reading, None)
    return reading.read - set(scope)


class Reading(Sequence[Any]):
    """A state that records the positions read of it in ``read`` (a slice, or iterating, reads
    all); ``read`` may be a set the caller keeps adding to from several readings."""

    __slots__ = ("read", "state")

    def __init__(self, state: Sequence[Any], read: set[int] | None = None) -> None:
        self.state = state
        self.read: set[int] = set() if read is None else read

    def __len__(self) -> int:
        return len(self.state)

    @overload
    def __getitem__(self, k: int) -> Any: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[Any]: ...
    def __getitem__(self, k: int | slice) -> Any:
        if k.__class__ is int and k >= 0:  # the common case, first: a position as it is
            value = self.state[k]
            self.read.add(k)
            return value
        if isinstance(k, slice):
            self.read.update(range(*k.indices(len(self.state))))
        else:
            self.read.add(k % len(self.state))
        return self.state[k]

    def test(self, k: int, test: Callable[[Any], bool]) -> bool:
        """``test`` of the value at position ``k`` (``k`` >= 0), as :func:`ask` asks it: a
        plain reading reads the position; a reading that can remember the answer instead
        (the compiled engine's scoped search) may."""
        return test(self[k])


def ask(state: Sequence[Any], k: int, test: Callable[[Any], bool]) -> bool:
    """``test(state[k])``, where only the answer matters: a :class:`Reading` may record that
    answer rather than the value read, so that a memo keyed by what was read serves every
    state whose value there gives the same answer."""
    if isinstance(state, Reading):
        return state.test(k, test)
    return test(state[k])
