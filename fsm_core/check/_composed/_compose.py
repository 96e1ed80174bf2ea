"""One engine for every composed model kind: tables wired together and to an environment.

A composition is shaped like stateright's ``Model``: it gives its :meth:`~Composition.initial`
state, its labelled :meth:`~Composition.steps` in a deterministic order, and its
:meth:`~Composition.properties`, each one :class:`Property` record. The explorer needs nothing
else. A model kind that composes a table with others (``agent``, ``activation-tree``) declares
only what is its own, as a :class:`Wiring`: its state :class:`Layout`, its ghosts, what the
environment may call, which effects reach which events, and its properties. :class:`Engine`
runs every step of every such kind the same way:

- An *instance* is one copy of a table. A flat wiring (one agent) runs its instance on the
  front of the composite state itself; a tree runs each node on the tuple in its slot, and
  instances may run different tables (a tree's nodes run the activation table, its door the
  admission table): :attr:`Wiring.machines` says which.
- A step begins with a call the environment or the driver makes naming an instance. Most are
  fired on that instance; a call the wiring *routes* (an :data:`Offer` whose ``on`` is another
  instance) is fired on ``on`` instead, and the named instance is the step's *target*: the
  wiring's effects that address "the node the environment named" (a door's ``admit_below()``)
  read it, and the move records it.
- An event is fired on an instance; its row runs effect by effect. At every effect the engine
  proves the effect's ``requires`` contract. At a notifying effect, where a listener observes
  the state, it also proves the table's step invariants, the wiring's ``notified``
  properties, the invariants and the ``always`` properties.
- After the checks, the effect's *reactions* run inside it, re-entrantly: first the wiring's
  deterministic ones (a tree's ``dispose_children()`` disposes each child), then, at an effect
  the model lists in ``reactions``, the listener call the current *plan* chooses: on the
  instance whose notification it is (:attr:`Wiring.listener_calls`), or on another instance
  the wiring resolves from it (:attr:`Wiring.aimed_calls`: a tree's settled child's listener
  disposes its parent). The engine explores every plan up to ``max_reactions`` listener calls
  per step.
- A broken contract, step invariant or ``notified``/``delivered`` property is recorded in the
  ghost ``ghost.broken``; any broken property ends the step where it broke, and the move keeps
  the calls in progress and the effect it stopped at, so the trace shows (and replays) it.
- A wired reaction the table refuses is checked against the ``delivered`` properties, and the
  step goes on; inside an effect the wiring lists in ``binding`` (a door's ``admit_below()``
  hands the caller's admission on to the node's own row) the refusal is the caller's: the
  whole step is refused, as the runtime raises it to the caller with nothing changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, final

from fsm_core.check._moves import Labels, Move
from fsm_core.check._property import (
    Property,
    at_node,
    explorer_properties,
    predicates,
    requires_name,
    table_properties,
)
from fsm_core.table._expr import Value, show
from fsm_core.table._machine import REFUSED, Machine

Args = tuple[Value, ...]

Store = MutableSequence[Any]
"""The composite state of a step in progress, as the wiring's hooks change it (a list; the
compiled engine's may record what the hooks read and write)."""

Reaction = tuple[int, str, Args]
"""An event fired inside an effect: (instance, event, arguments)."""

Aimed = tuple[str, str, Args]
"""A listener's call on another instance: (the aim :meth:`Wiring.aim` resolves, event,
arguments)."""

Offer = tuple[str, tuple[Args, ...], int]
"""A call the environment or the driver may begin a step with, naming an instance: (event,
every argument tuple in order, the instance it is fired on: the named one, or another that
takes it for the named one, the step's target)."""

BROKEN = "ghost.broken"
"""The layout name of the slot where a broken contract or step property is recorded."""


class Composition(Protocol):
    """What the explorer checks: a model kind's states, steps and properties.

    A state is whatever the composition finds cheapest to store (a tuple, or a number the
    compiled engine packs one into); :meth:`unpack` gives it as the layout names it.
    """

    name: str
    layout: Layout
    moves: list[Move]
    """The labels :meth:`steps` returns, by index."""

    def initial(self) -> Any: ...

    def unpack(self, state: Any) -> tuple[Any, ...]:
        """``state`` as a tuple whose positions :attr:`layout` names."""
        ...

    def steps(self, state: Any) -> list[tuple[int, Any]]:
        """Every ``(label, next state)`` from ``state``, in a deterministic order."""
        ...

    def properties(self) -> tuple[Property, ...]:
        """Every property the model can report broken, the table's own included."""
        ...

    def first_violated(self, state: Any) -> str | None:
        """The first property ``state`` breaks between steps (a table invariant, an ``always``
        property, or what the step that reached it recorded broken), or None."""
        ...

    def quiescent(self, state: Any) -> bool: ...


class Layout:
    """The names of a composite state's positions: ``layout["budget.send"]`` is its index.

    Names are unique; a tree node's slot is named by its path (``a.1``), the environment's
    budgets ``budget.EVENT`` and the checker's bookkeeping ``ghost.NAME``.
    """

    __slots__ = ("_index", "names")

    def __init__(self, names: Iterable[str]) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self._index = {n: i for i, n in enumerate(self.names)}
        if len(self._index) != len(self.names):
            raise ValueError(f"a layout names a position twice: {self.names}")

    def __getitem__(self, name: str) -> int:
        return self._index[name]

    def get(self, name: str) -> int | None:
        return self._index.get(name)


class Wiring(Protocol):
    """What a composed model kind declares; :class:`Engine` runs it.

    The hooks mutate ``store``, the composite state of the step in progress (a flat wiring's
    instance 0 is its front). ``before`` and ``after`` bracket every event a row handles;
    ``effect`` runs as an effect is reached, before it is checked; ``wire`` runs after the
    checks and returns the events the effect fires, in order.
    """

    machines: tuple[Machine, ...]
    """Each instance's table, by instance (one for a flat wiring)."""
    layout: Layout
    flat: bool
    """True iff the one instance runs on the front of the composite state; else instance i
    lives as a tuple in slot i (None until it exists): the layout names instances first."""
    instances: tuple[str, ...]
    """Each instance's name, as moves and per-instance properties name it ("" for flat)."""
    offered: tuple[tuple[Offer, ...], ...]
    """Per instance, the calls naming it that begin a step on their own (the environment and
    the runtime's driver), in the order steps are tried."""
    listener_calls: tuple[tuple[str, Args], ...]
    """What a listener may call inside a ``reactions`` effect on the instance whose
    notification it is, in the order plans try them."""
    aimed_calls: tuple[Aimed, ...]
    """What a listener may call on another instance, which :meth:`aim` resolves: tried after
    :attr:`listener_calls`, in this order."""
    reactions: frozenset[str]
    """The notifying effects inside which listeners may call."""
    binding: frozenset[str]
    """The effects that hand the step's call on: a refusal of their wired reactions refuses
    the step (never one a listener may call inside: a refused plan is then no plan at all).
    Their hooks read and change nothing of the state, and their reactions depend on the
    step's target alone: the compiled engine memoizes a step that only hands its call on
    by the variables of the instances it reaches."""
    hooked_events: frozenset[str]
    """The events :meth:`before` or :meth:`after` acts on: on any other both do nothing."""
    hooked_effects: frozenset[str]
    """The effects :meth:`effect` or :meth:`wire` acts on: on any other both do nothing. (The
    compiled engine calls the hooks only where they act.)"""
    max_reactions: int
    own: tuple[Property, ...]
    """The wiring's own properties, checked in this order after the table's invariants."""

    def initial(self) -> tuple[Any, ...]: ...

    def charges(self, event: str, args: Args, on: int | None) -> tuple[int, ...]:
        """The budget slots one call of ``event(args)`` fired on instance ``on`` spends (None:
        a listener's call on the instance whose notification it is in; a listener's aimed
        call names the instance it is fired on); a call needs each above 0."""
        ...

    def offers(self, state: Sequence[Any], instance: int, event: str, args: Args) -> bool:
        """True iff ``event(args)`` may be offered naming ``instance`` here (budgets aside)."""
        ...

    def aim(self, instance: int, effect: str, aim: str) -> tuple[int, int | None] | None:
        """Where a listener's call aimed ``aim`` (``""``: the notifying instance itself) goes
        from the effect ``effect`` of ``instance``: (the instance it is fired on, the instance
        it names when the wiring routes it there, else None), or None when no listener there
        can make it. Decided by the composition's shape alone, never by a state (the
        compiled engine resolves it once per instance and effect); an aimed call is then
        made only where :meth:`offers` offers it naming the same instance."""
        ...

    def table_violated(self, state: Sequence[Any]) -> str | None:
        """The first table invariant broken in ``state``, by the name of its record in
        :func:`~fsm_core.check._property.table_properties` (``id@node`` on a tree's node)."""
        ...

    def quiescent(self, state: Sequence[Any]) -> bool: ...

    def before(self, store: Store, instance: int, event: str, args: Args) -> None: ...

    def after(self, store: Store, instance: int, event: str, args: Args) -> None: ...

    def effect(self, store: Store, instance: int, name: str, values: Args) -> None: ...

    def wire(
        self, store: Store, instance: int, name: str, values: Args, target: int | None
    ) -> Sequence[Reaction]:
        """The events the effect fires; ``target`` is the step's (None unless routed)."""
        ...


Choice = Aimed | None
"""What a listener does at one reaction point of a plan: nothing, or one call (aimed ``""``:
on the notifying instance)."""


@final
@dataclass(frozen=True, slots=True)
class Unstable:
    """A step invariant broken inside a step: on which instance, which one, and the
    instance's values when a listener last observed it (``observed``; else at the step's
    start) and when it broke."""

    instance: int
    invariant: str
    before: tuple[Any, ...]
    after: tuple[Any, ...]
    observed: bool


class _Stop(Exception):
    """A property broke inside a step: end the step where it broke."""

    def __init__(self, at: str) -> None:
        super().__init__(at)
        self.at = at  # the effect as a listener saw it, e.g. ``publish_status(idle)``


class _Refused(Exception):
    """The table rejects the event here, or no row is enabled."""


class _Invalid(Exception):
    """This plan asks a listener for something the budget or the table does not allow."""


def _notice(name: str, values: Args) -> str:
    return f"{name}({', '.join(show(v) for v in values)})"


class Engine:
    """A :class:`Composition` of a :class:`Wiring`: runs its steps and decides its properties."""

    def __init__(self, name: str, wiring: Wiring) -> None:
        self.name = name
        self.wiring = w = wiring
        self.machines = w.machines
        self.layout = w.layout
        self.broken = w.layout[BROKEN]
        if w.binding & w.reactions:
            raise ValueError(f"{name}: listeners may not call inside a binding effect")
        self.notifying = tuple(
            frozenset(n for n, e in m.table.effects.items() if e.notifies) for m in w.machines
        )
        """Per instance, its table's notifying effects."""
        self._params = tuple(
            {e: tuple(p for p, _ in spec.params) for e, spec in m.table.events.items()}
            for m in w.machines
        )
        self._always = predicates(w.own, "always")
        self._between = predicates(w.own, "between")
        self.notified = predicates(w.own, "notified")
        self.delivered = predicates(w.own, "delivered")
        self._labels = Labels()
        self.moves = self._labels.moves
        self.options: tuple[Aimed, ...] = (
            *(("", event, args) for event, args in w.listener_calls),
            *w.aimed_calls,
        )
        """Every call a listener may make, in the order plans try them."""

    def initial(self) -> Any:
        return self.wiring.initial()

    def unpack(self, state: Any) -> tuple[Any, ...]:
        return tuple(state)

    def properties(self) -> tuple[Property, ...]:
        w = self.wiring
        own = [
            p for m, i in zip(w.machines, w.instances, strict=True)
            for p in table_properties(m.table, (i,))
        ]  # fmt: skip
        # The wiring's quiescence, not the engine's: a property decides a state as the layout
        # names it, and a report keeps its properties, not the engine's memo.
        return (*own, *w.own, *explorer_properties(w.quiescent))

    def quiescent(self, state: Any) -> bool:
        return self.wiring.quiescent(state)

    def first_violated(self, state: Any, *, between: bool = True) -> str | None:
        """The first property ``state`` breaks; ``between`` (a state between steps, not one
        a listener observes mid-step) adds the ``between`` properties."""
        broken = state[self.broken]
        if broken:
            return str(broken)
        bad = self.wiring.table_violated(state)
        if bad is not None:
            return bad
        for prop, holds in self._always:
            if not holds(state, None):
                return prop
        if between:
            for prop, holds in self._between:
                if not holds(state, None):
                    return prop
        return None

    def steps(self, state: Any) -> list[tuple[int, Any]]:
        w = self.wiring
        out: list[tuple[int, tuple[Any, ...]]] = []
        instances = (0,) if w.flat else [i for i in range(len(w.instances)) if state[i] is not None]
        for i in instances:
            for event, arguments, on in w.offered[i]:
                target = None if on == i else i
                for args in arguments:
                    if not w.offers(state, i, event, args):
                        continue
                    if any(state[slot] == 0 for slot in w.charges(event, args, on)):
                        continue
                    for move, nxt in self._runs(state, on, event, args, target):
                        out.append((self._labels.index(move), nxt))
        return out

    def _runs(
        self, state: tuple[Any, ...], instance: int, event: str, args: Args, target: int | None
    ) -> list[tuple[Move, tuple[Any, ...]]]:
        """Every way the step can go: one run per plan of listener calls."""
        try:
            return [
                (move, tuple(run.store))
                for run, move in self._plans(state, instance, event, args, target)
            ]
        except _Refused:
            return []

    def _plans(
        self, state: tuple[Any, ...], instance: int, event: str, args: Args, target: int | None
    ) -> Iterator[tuple[_Run, Move]]:
        """Each run of the step that its plan allows, with its move; raises :class:`_Refused`
        (after the runs before) when the table rejects the event."""
        plans: list[tuple[Choice, ...]] = [()]
        options = self.options
        while plans:
            plan = plans.pop()
            run = _Run(self, state, plan, target)
            try:
                move = run.step(instance, event, args)
            except _Invalid:
                continue
            yield run, move
            if sum(c is not None for c in plan) >= self.wiring.max_reactions:
                continue
            for i in range(len(plan), run.points):
                gap: tuple[Choice, ...] = (None,) * (i - len(plan))
                plans.extend((*plan, *gap, option) for option in options)

    def unstable(self, state: Sequence[Any], move: Move) -> Unstable | None:
        """Run ``move`` again from ``state`` (a trace's last step and the state before it):
        where a step invariant broke in it, or None if none did (or the move is not one of
        the step's runs)."""
        names = self.wiring.instances
        on = names.index(move.instance)
        target = names.index(move.target) if move.target else None
        args = tuple(value for _, value in move.args)
        try:
            for run, again in self._plans(tuple(state), on, move.event, args, target):
                if again == move:
                    return run.unstable
        except _Refused:
            pass
        return None

    def move(
        self,
        instance: int,
        event: str,
        args: Args,
        row: str | None,
        inside: tuple[tuple[str, Move], ...],
        stopped: str = "",
        target: int | None = None,
    ) -> Move:
        named = tuple(zip(self._params[instance][event], args, strict=True))
        names = self.wiring.instances
        aimed = "" if target is None else names[target]
        return Move(event, named, row, names[instance], inside, stopped, aimed)


class _Run:
    """One step in progress, under one plan of listener calls."""

    def __init__(
        self, engine: Engine, state: tuple[Any, ...], plan: tuple[Choice, ...], target: int | None
    ) -> None:
        self.e = engine
        self.target = target
        """The instance the step's call named, when the wiring routed it to another."""
        self.w = engine.wiring
        self.start = state
        self.store: list[Any] = list(state)
        self.plan = plan
        self.points = 0
        """Reaction points reached so far: where a plan may place a listener call."""
        self.nodes: dict[int, list[Value]] = {}
        """A tree's instances touched by the step, as mutable copies of their slots."""
        self.observed: dict[int, Sequence[Any]] = {}
        """The last state of each instance a listener observed (the step's start until then)."""
        # The calls in progress, the moves each one's reactions made, and the effects they
        # re-entered through, so that a stopped step still shows (and replays) what led there.
        self.calls: list[tuple[int, str, Args, str | None, int | None]] = []
        self.frames: list[list[tuple[str, Move]]] = [[]]
        self.entered: list[str] = []
        self.unstable: Unstable | None = None
        """Where a step invariant broke, once one has."""
        self.aims: list[int | None] = []
        """Per call in progress, the instance the wiring's targets read as the one named:
        the step's target, or a listener's routed call's, inherited by the calls inside."""

    def step(self, instance: int, event: str, args: Args) -> Move:
        """Run ``event`` and everything inside it; raises :class:`_Refused` if not enabled."""
        store = self.store
        for slot in self.w.charges(event, args, instance):
            store[slot] -= 1
        try:
            move = self.fire(instance, event, args, self.target)
        except _Stop as stop:
            self.flush()
            return self.fold(stop.at)
        for i in (0,) if self.w.flat else tuple(self.nodes):
            unstable = self.e.machines[i].unstable(self.before(i), self.live(i))
            if unstable:
                store[self.e.broken] = self.named(unstable[0], i)
                self.unstable = Unstable(
                    i, unstable[0], tuple(self.before(i)), tuple(self.live(i)), i in self.observed
                )
        self.flush()
        return move

    # --- instances -------------------------------------------------------------------------------

    def live(self, i: int) -> list[Any]:
        if self.w.flat:
            return self.store
        node = self.nodes.get(i)
        if node is None:
            node = self.nodes[i] = list(self.store[i])
        return node

    def flush(self) -> None:
        for i, values in self.nodes.items():
            self.store[i] = tuple(values)

    def before(self, i: int) -> Sequence[Any]:
        """What a listener last observed of instance ``i``: the step's start until then (an
        instance created inside the step, as it is now: nothing observed it before)."""
        observed = self.observed.get(i)
        if observed is not None:
            return observed
        start = self.start if self.w.flat else self.start[i]
        return self.live(i) if start is None else start

    def named(self, prop: str, i: int) -> str:
        """The table property ``prop`` as broken on instance ``i``."""
        return at_node(prop, self.w.instances[i])

    # --- firing ----------------------------------------------------------------------------------

    def fire(self, i: int, event: str, args: Args, aimed: int | None = None) -> Move:
        """Fire ``event`` on ``i``; ``aimed``: the instance the call names, when routed (the
        step's call, or a listener's), which the move shows and the calls inside inherit."""
        m = self.e.machines[i]
        values = self.live(i)
        row = m.lookup(values, event, args)
        if row is REFUSED:
            raise _Refused
        row_id = row.row.id if row is not None else None
        self.frames.append([])
        self.calls.append((i, event, args, row_id, aimed))
        self.aims.append(aimed if aimed is not None or not self.aims else self.aims[-1])
        if row is not None:
            self.w.before(self.store, i, event, args)
            m.execute(row, values, args, partial(self.perform, i))
            self.w.after(self.store, i, event, args)
        self.calls.pop()
        self.aims.pop()
        return self.e.move(i, event, args, row_id, tuple(self.frames.pop()), target=aimed)

    def perform(self, i: int, name: str, values: Args) -> None:
        e, w, store = self.e, self.w, self.store
        node = self.live(i)
        w.effect(store, i, name, values)
        if e.machines[i].unmet(name, node, values):
            self.stop(self.named(requires_name(name), i), name, values)
        if name in e.notifying[i]:
            self.flush()
            observed = i in self.observed
            before, self.observed[i] = self.before(i), tuple(node)
            unstable = e.machines[i].unstable(before, node)
            if unstable:
                self.unstable = Unstable(i, unstable[0], tuple(before), tuple(node), observed)
                self.stop(self.named(unstable[0], i), name, values)
            for prop, holds in e.notified:
                if not holds(store, (name, values)):
                    self.stop(prop, name, values)
            if e.first_violated(store, between=False) is not None:
                raise _Stop(_notice(name, values))
        for target, event, args in w.wire(store, i, name, values, self.aims[-1]):
            try:
                self.react(name, values, target, event, args)
            except _Refused:
                if name in w.binding:
                    raise
                for prop, holds in e.delivered:
                    if not holds(store, (event, args)):
                        self.stop(prop, name, values)
        if name not in w.reactions:
            return
        choice = self.plan[self.points] if self.points < len(self.plan) else None
        self.points += 1
        if choice is None:
            return
        aim, event, args = choice
        where = w.aim(i, name, aim)
        if where is None:
            raise _Invalid
        on, named = where
        if aim and not w.offers(store, on if named is None else named, event, args):
            raise _Invalid
        for slot in w.charges(event, args, on if aim else None):
            if store[slot] == 0:
                raise _Invalid
            store[slot] -= 1
        try:
            self.react(name, values, on, event, args, named)
        except _Refused:
            raise _Invalid from None

    def react(
        self, name: str, values: Args, target: int, event: str, args: Args, aimed: int | None = None
    ) -> None:
        """Fire ``event`` on ``target`` inside the effect ``name(values)`` (``aimed``: the
        instance a listener's routed call names)."""
        effect = _notice(name, values)
        self.entered.append(effect)
        try:
            nested = self.fire(target, event, args, aimed)
        except _Refused:
            self.entered.pop()
            raise
        self.entered.pop()
        self.frames[-1].append((effect, nested))

    def stop(self, prop: str, name: str, values: Args) -> None:
        """Record ``prop`` as broken and end the step at the effect ``name(values)``."""
        self.flush()
        self.store[self.e.broken] = prop
        raise _Stop(_notice(name, values))

    def fold(self, at: str) -> Move:
        """The calls in progress as one move, innermost first: the innermost stopped ``at``."""
        nested: Move | None = None
        for depth in range(len(self.calls) - 1, -1, -1):
            i, event, args, row, aimed = self.calls[depth]
            inside = self.frames[depth + 1] + ([(self.entered[depth], nested)] if nested else [])
            nested = self.e.move(i, event, args, row, tuple(inside), "" if nested else at, aimed)
        assert nested is not None
        return nested
