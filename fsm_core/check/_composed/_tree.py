"""The activation-tree protocol: a tree of activations, wired as seed 004 wires them.

Everything this composition adds to the table is declared here, and :mod:`._compose` runs
it: the layout of node slots, budgets and ghosts, which effects fire which events on which
node, and the tree's properties with their meanings.

Nodes are named by path: ``a`` is the root, ``a.1`` .. ``a.W`` its children, ``a.1.1`` a
grandchild, down to the model's ``depth``. A child slot is empty until its parent admits it.
Every node runs the activation table; the composition wires the effects that reach another
node, synchronously, as the runtime calls them:

- ``dispose_children()`` on p fires ``dispose(final_state_flushed=false)`` on each admitted
  child of p, in order, inside p's row (children are disposed before p awaits its own idle);
- ``request_dispose()`` on n fires ``dispose(false)`` on n; ``dispose_in_maintenance()`` fires
  ``dispose(true)`` (the natural end: the watcher's ``ready``);
- ``notify_parent(failed)`` on n fires ``child_settled(failed, last)`` on n's parent, where
  ``last`` says no other admitted child of the parent is still unsettled;
- ``admit_child()`` on p fills p's next empty child slot with a fresh activation.

Beside the nodes runs the registry's door, one instance ``door`` of the model's ``[tree]
door`` table (specs/admission.toml), wired as ``fsm_core/runtime/_subagents.py`` wires it:

- ``drain()`` is the door's (the registry-wide drain): its ``drain_roots()`` fires
  ``drain(scope=registry)`` on the root ``a``. No node is offered ``drain(registry)`` directly;
- ``drain_below(parent=activation)``, naming node n (the step's target), is ``drain_descendants``
  with n's agent as the parent: its ``drain_activation()`` fires ``drain(scope=descendants)``
  on n. The root's parent is a host-owned agent: ``drain_below(parent=host)`` closes admission
  below it and its ``dispose_roots()`` fires ``dispose(false)`` on ``a``;
- an admission below node n is the door's ``admit(parent=activation)`` naming n; its
  ``admit_below()`` fires ``admit`` on n. A refusal there is the caller's (the door's effects
  that fire on a node are *binding*): the step is refused as a whole, as the runtime raises it
  with nothing changed;
- ``deliver(drained)`` is offered with ``drained`` true iff the door is drained;
- ``notify_parent(failed)`` on ``a`` fires the door's ``root_settled(parent=host)``: the host
  parent is live throughout (nothing in the tree disposes it).

The door's other events are left out, because the tree cannot tie them to a node and they
change nothing a node or the door's state holds: ``spawn`` runs a child that is not
continuable (no activation), ``release`` and ``parent_disposed`` keep or forget what a cold
resume needs (the tree resumes nothing cold: a settled slot stays settled), ``parent_disposing``
is the host parent's own disposal (the tree never disposes it; were it fired, its row's
``dispose_roots()`` would be ``drain_below(parent=host)``'s ``dispose(false)`` on ``a``, with
``forget_below()`` changing nothing the tree holds, and the root's later ``root_settled``
would find the parent gone), ``name_parent``
only checks a parent before ``drain_below`` (which the tree names live), and ``admit`` with a
host parent makes a second root, for which the tree has no slot. models/admission.toml proves
their rows on their own. For the same reason the host parent is always passed as ``host``:
``host_drained`` takes the same rows, and with a single root nothing tells them apart.

The environment calls the budgeted events (``admit``, ``dispose``, ``drain``, ``drain_below``,
``drain_child``); ``failures`` budgets ``handle_disposed(failed=true)``. A drain below a parent
spends the ``drain_below`` budget when the model gives one, else the ``drain`` budget: then
``drain`` bounds every drain, registry-wide or below a parent, as it bounded
``drain(scope)`` on the nodes before the door. The other events
(``deliver``, ``children_joined``, ``agent_idle``, ``final_flushed``, ``handle_disposed``,
``watch`` with every verdict's inputs) fire whenever enabled; ``child_settled`` only ever
arrives through the wiring.

Every effect's ``requires`` contract is checked as it runs; every node's invariants and step
invariants at each notifying effect and between steps. Tree properties besides:

- ``parent_leaves_after_children``: a node out of the registry has every admitted child out;
- ``settlement_notice_delivered``: a parent always accepts its child's settlement notice (the
  root's host parent through the door's ``root_settled``);
- ``teardown_runs_once``: a node's memoized close (``close_inbox``) runs at most once;
- ``notice_sent_once``: a node notifies its parent at most once;
- ``drained_door_leaves_no_active_node``: once the door is drained no admitted node is
  ``active``, so no ``deliver(drained=true)`` reaches an active activation (whose ``deliver``
  row ignores ``drained``: the property proves that row never needs it).

That no node admits after the door drained needs no property of its own: the door refuses
every admission once drained (its ``admit_below()`` contract, ``registry == admitting``, is
proven at load and at every step), and an activation that is not ``active`` refuses one too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._composed._compose import BROKEN, Args, Engine, Layout, Offer, Reaction
from fsm_core.check._config import Model
from fsm_core.check._needs import Needs
from fsm_core.check._property import Notice, Property, at_node
from fsm_core.table._codegen import compile_predicates
from fsm_core.table._table import Table

PARENT_LEAVES_AFTER_CHILDREN = "parent_leaves_after_children"
NOTICE_DELIVERED = "settlement_notice_delivered"
TEARDOWN_ONCE = "teardown_runs_once"
NOTICE_ONCE = "notice_sent_once"
NO_ACTIVE_AFTER_DRAIN = "drained_door_leaves_no_active_node"
DOOR = "door"
"""The door's instance name, and the name of its slot in the layout."""
DRAINED = "drained"
"""The door's state once ``drain()`` closed admission registry-wide (the runtime reads it so)."""

NEEDS = Needs(
    variables=("resident",),
    events={
        "admit": (),
        "dispose": ("final_state_flushed",),
        "child_settled": ("failed", "last"),
        "handle_disposed": ("failed",),
    },
    effects={"notify_parent": ("failed",)},
    by_position=True,
)
"""What the wiring fires, passes and reads (the wired effects without parameters are only
matched by name: a table without them wires nothing there)."""

_WIRED_ONLY = frozenset({"child_settled"})

_THROUGH_DOOR = {"admit": "admit", "drain": "drain_below"}
"""Node events the environment reaches only through the door: a call naming a node is the
door's event (the value) with ``parent=activation``, which the door hands on to the node."""

_DOOR_EVENTS = {"drain": (), "admit": ("parent",), "drain_below": ("parent",)}
DOOR_CALLS = tuple(_DOOR_EVENTS)
"""The door's events the environment calls, which a model may budget."""
_DOOR_VALUES = {("admit", "parent"), ("drain_below", "parent"), ("root_settled", "parent")}
"""What the wiring fires on the door, and the parent values it passes: :func:`door_lacking`
checks these. The door's effects it wires (``drain_roots``, ``dispose_roots``,
``admit_below``, ``drain_activation``) take no parameter and are matched by name only: a door
without one wires nothing there."""
_NODE_VALUES = {("drain", "scope"): ("registry", "descendants")}


def door_lacking(door: Table, node: Table) -> str | None:
    """What the door table ``door`` or the node table ``node`` lacks for the wiring, as
    ``an event root_settled(parent) whose parent takes host``; else None."""
    for event, params in _DOOR_EVENTS.items():
        spec = door.events.get(event)
        if spec is None or tuple(p for p, _ in spec.params) != params:
            return f"an event {event}({', '.join(params)}) in the door"
    for event, param in sorted(_DOOR_VALUES):
        spec = door.events.get(event)
        kinds = dict(spec.params) if spec is not None else {}
        values = kinds[param].values if param in kinds else ()
        if spec is None or tuple(kinds) != (param,) or not {"activation", "host"} <= set(values):
            return f"an event {event}({param}) in the door whose {param} takes activation and host"
    for (event, param), wanted in _NODE_VALUES.items():
        spec = node.events.get(event)
        kinds = dict(spec.params) if spec is not None else {}
        values = kinds[param].values if param in kinds else ()
        if spec is None or tuple(kinds) != (param,) or not set(wanted) <= set(values):
            return f"an event {event}({param}) whose {param} takes {' and '.join(wanted)}"
    if DRAINED not in {st.name for st in door.states}:
        return f"a state {DRAINED} in the door"
    spec = node.events.get("deliver")
    if spec is None or [t.kind for _, t in spec.params] != ["bool"]:
        return "an event deliver(drained: bool)"
    return None


_Predicates = Callable[[Sequence[Any]], str | None]


@dataclass(frozen=True, slots=True)
class _Shape:
    names: tuple[str, ...]
    parent: tuple[int | None, ...]
    children: tuple[tuple[int, ...], ...]


def _shape(depth: int, width: int) -> _Shape:
    names = ["a"]
    parent: list[int | None] = [None]
    children: list[list[int]] = [[]]
    frontier = [0]
    for _ in range(depth):
        following = []
        for p in frontier:
            for k in range(1, width + 1):
                names.append(f"{names[p]}.{k}")
                parent.append(p)
                children.append([])
                children[p].append(len(names) - 1)
                following.append(len(names) - 1)
        frontier = following
    return _Shape(tuple(names), tuple(parent), tuple(tuple(c) for c in children))


def tree_size(depth: int, width: int, limit: int) -> int:
    """The nodes of a tree of ``depth`` and ``width`` (``1 + width + ... + width^depth``), or
    ``limit + 1`` as soon as the count passes ``limit``: the model loader bounds a tree before
    any of it is built, in a few steps whatever the depth."""
    if width <= 1:
        return min(depth * width + 1, limit + 1)
    total, level = 1, 1
    for _ in range(depth):
        level *= width
        total += level
        if total > limit:
            return limit + 1
    return total


class TreeWiring:
    """The activation-tree protocol as a :class:`~fsm_core.check._composed._compose.Wiring`.

    The state is one slot per node (its activation's state, None until admitted) and the
    door's slot, then ``budget.EVENT`` for each budgeted event and ``budget.failures``, then
    the ghosts ``ghost.closes.NODE`` and ``ghost.notices.NODE`` (how often each node closed
    and notified its parent) and ``ghost.broken``.
    """

    flat = False
    reactions: frozenset[str] = frozenset()
    hooked_events: frozenset[str] = frozenset()
    hooked_effects = frozenset(
        {
            "close_inbox",
            "dispose_children",
            "request_dispose",
            "dispose_in_maintenance",
            "admit_child",
            "notify_parent",
            "drain_roots",
            "dispose_roots",
            "admit_below",
            "drain_activation",
        }
    )
    binding = frozenset({"admit_below", "drain_activation", "drain_roots", "dispose_roots"})
    listener_calls: tuple[tuple[str, Args], ...] = ()
    max_reactions = 0

    def __init__(self, model: Model) -> None:
        assert model.door is not None, "the model loader gives every tree its door"
        self.model = model
        self.machine = m = model.machine
        self.door = door = model.door
        self.shape = shape = _shape(model.depth, model.width)
        self.instances = (*shape.names, DOOR)
        self.machines = (*(m for _ in shape.names), door)
        self.layout = layout = Layout(
            (
                *self.instances,
                *(f"budget.{e}" for e in model.budgets),
                "budget.failures",
                *(f"ghost.closes.{x}" for x in shape.names),
                *(f"ghost.notices.{x}" for x in shape.names),
                BROKEN,
            )
        )
        self._slots = range(len(shape.names))  # first in the layout: instance i is slot i
        self._door = layout[DOOR]
        self._budget = {e: layout[f"budget.{e}"] for e in model.budgets}
        if "drain_below" not in self._budget and "drain" in self._budget:
            self._budget["drain_below"] = self._budget["drain"]
        self._failures = layout["budget.failures"]
        self._closes = tuple(layout[f"ghost.closes.{x}"] for x in shape.names)
        self._notices = tuple(layout[f"ghost.notices.{x}"] for x in shape.names)
        self._resident = m.names.index("resident")
        self._stage = m.names.index(m.table.state_var)
        self._active = m.table.initial  # an activation begins active: resident and admitting
        self._registry = door.names.index(door.table.state_var)
        # Compiled once: evaluated on every node of every state and notification.
        self._violated = tuple(
            cast(_Predicates, compile_predicates(t, {i.id: i.expr for i in t.table.invariants}))
            for t in (m, door)
        )
        self._unsettled = tuple(
            cast(_Predicates, compile_predicates(t, {"quiescent": t.table.defs["quiescent"].expr}))
            for t in (m, door)
        )
        node_offers: list[Offer] = []
        for e in m.table.events:
            if e in _THROUGH_DOOR:
                via = _THROUGH_DOOR[e]
                node_offers.append((via, (door.arguments(via, parent="activation"),), self._door))
            elif e not in _WIRED_ONLY:
                node_offers.append((e, tuple(m.all_arguments(e)), -1))
        self.offered = (
            *(tuple((e, a, i if on < 0 else on) for e, a, on in node_offers) for i in self._slots),
            (
                ("drain", tuple(door.all_arguments("drain")), self._door),
                ("drain_below", (door.arguments("drain_below", parent="host"),), self._door),
            ),
        )
        self._registry_scope = m.arguments("drain", scope="registry")
        self._descendants = m.arguments("drain", scope="descendants")
        self._host = door.arguments("root_settled", parent="host")
        self.own: tuple[Property, ...] = (
            Property(
                PARENT_LEAVES_AFTER_CHILDREN,
                "always",
                "a node left the registry while an admitted child is in it",
                self._parent_leaves_after_children,
            ),
            Property(
                NOTICE_DELIVERED,
                "delivered",
                "a parent refused its child's settlement notice",
                lambda _, at: at is None or at[0] not in ("child_settled", "root_settled"),
            ),
            Property(
                TEARDOWN_ONCE,
                "always",
                "a node's memoized close ran twice",
                lambda s, _: all(s[c] <= 1 for c in self._closes),
            ),
            Property(
                NOTICE_ONCE,
                "always",
                "a node notified its parent twice",
                lambda s, _: all(s[c] <= 1 for c in self._notices),
            ),
            Property(
                NO_ACTIVE_AFTER_DRAIN,
                "always",
                "the door is drained while an admitted node is still active (a delivery "
                "would reach it with drained=true)",
                self._no_active_after_drain,
            ),
        )

    def initial(self) -> tuple[Any, ...]:
        n = len(self._slots)
        budgets = (self.model.budgets[e] for e in self.model.budgets)
        root: list[object] = [tuple(self.machine.initial)]
        return (
            *root, *([None] * (n - 1)), tuple(self.door.initial), *budgets, self.model.failures,
            *([0] * (2 * n)), "",
        )  # fmt: skip

    # --- properties ------------------------------------------------------------------------------

    def table_violated(self, state: Sequence[Any]) -> str | None:
        for i in (*self._slots, self._door):
            node = state[i]
            if node is not None:
                bad = self._violated[i == self._door](node)
                if bad is not None:
                    return at_node(bad, self.instances[i])
        return None

    def _parent_leaves_after_children(self, s: Sequence[Any], _: Notice | None) -> bool:
        """A node out of the registry has every admitted child out."""
        for i in self._slots:
            node = s[i]
            if node is not None and not node[self._resident]:
                for c in self.shape.children[i]:
                    child = s[c]
                    if child is not None and child[self._resident]:
                        return False
        return True

    def _no_active_after_drain(self, s: Sequence[Any], _: Notice | None) -> bool:
        if not self._is_drained(s):
            return True
        stage, active = self._stage, self._active
        return all(s[i] is None or s[i][stage] != active for i in self._slots)

    def _is_drained(self, s: Sequence[Any]) -> bool:
        return bool(s[self._door][self._registry] == DRAINED)

    def quiescent(self, state: Sequence[Any]) -> bool:
        return self._unsettled[1](state[self._door]) is None and all(
            self._settled(state[i]) for i in self._slots if state[i] is not None
        )

    def _settled(self, node: tuple[Any, ...]) -> bool:
        # The table's ``quiescent``: the activation reached ``settled``.
        return self._unsettled[0](node) is None

    # --- environment -----------------------------------------------------------------------------

    def charges(self, event: str, args: Args) -> tuple[int, ...]:
        slot = self._budget.get(event)
        spent = () if slot is None else (slot,)
        if event == "handle_disposed" and args[0]:
            spent = (*spent, self._failures)
        return spent

    def offers(self, state: Sequence[Any], instance: int, event: str, args: Args) -> bool:
        """An admission below a node needs a free child slot; ``deliver``'s ``drained`` is
        the door's state. Budgets are counted by :meth:`charges`."""
        if event == "admit":
            return any(state[c] is None for c in self.shape.children[instance])
        if event == "deliver":
            return bool(args[0]) == self._is_drained(state)
        return True

    # --- wiring ----------------------------------------------------------------------------------

    def before(self, store: list[Any], instance: int, event: str, args: Args) -> None:
        return None

    def after(self, store: list[Any], instance: int, event: str, args: Args) -> None:
        return None

    def effect(self, store: list[Any], instance: int, name: str, values: Args) -> None:
        return None

    def wire(
        self, store: list[Any], instance: int, name: str, values: Args, target: int | None
    ) -> Sequence[Reaction]:
        """The events an effect of node ``instance`` (or of the door) fires on other nodes,
        on itself or on the door, counting closes and notices as it goes."""
        shape, i = self.shape, instance
        if i == self._door:
            return self._door_wire(name, target)
        if name == "close_inbox":
            store[self._closes[i]] += 1
        elif name == "dispose_children":
            return [(c, "dispose", (False,)) for c in shape.children[i] if store[c] is not None]
        elif name == "request_dispose":
            return [(i, "dispose", (False,))]
        elif name == "dispose_in_maintenance":
            return [(i, "dispose", (True,))]
        elif name == "admit_child":
            free = next(c for c in shape.children[i] if store[c] is None)
            store[free] = tuple(self.machine.initial)
        elif name == "notify_parent":
            store[self._notices[i]] += 1
            p = shape.parent[i]
            if p is None:
                return [(self._door, "root_settled", self._host)]
            others = [c for c in shape.children[p] if c != i and store[c] is not None]
            last = all(self._settled(store[c]) for c in others)
            return [(p, "child_settled", (values[0], last))]
        return ()

    def _door_wire(self, name: str, target: int | None) -> Sequence[Reaction]:
        """The events an effect of the door fires on the root, or on the node the step's
        call named (``target``)."""
        if name == "drain_roots":
            return [(0, "drain", self._registry_scope)]
        if name == "dispose_roots":
            return [(0, "dispose", (False,))]
        if name == "admit_below":
            assert target is not None, "the door admits below the node the environment named"
            return [(target, "admit", ())]
        if name == "drain_activation":
            assert target is not None, "the door drains below the node the environment named"
            return [(target, "drain", self._descendants)]
        return ()


def tree_engine(model: Model, *, interpreted: bool = False) -> Engine:
    """The composition of an ``activation-tree`` model, ready to explore: compiled unless
    ``interpreted`` (the reference the compiled engine is tested against)."""
    wiring = TreeWiring(model)
    return Engine(model.name, wiring) if interpreted else CompiledEngine(model.name, wiring)
