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

The environment calls the budgeted events on any node where the table takes them (``admit``,
``dispose``, ``drain``, ``drain_child``); ``failures`` budgets ``handle_disposed(failed=true)``.
The other internal events (``children_joined``, ``agent_idle``, ``final_flushed``,
``handle_disposed``, ``watch`` with every verdict's inputs) fire whenever enabled;
``child_settled`` only ever arrives through the wiring.

Every effect's ``requires`` contract is checked as it runs; every node's invariants and step
invariants at each notifying effect and between steps. Tree properties besides:

- ``parent_leaves_after_children``: a node out of the registry has every admitted child out;
- ``settlement_notice_delivered``: a parent always accepts its child's settlement notice;
- ``teardown_runs_once``: a node's memoized close (``close_inbox``) runs at most once;
- ``notice_sent_once``: a node notifies its parent at most once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._composed._compose import BROKEN, Args, Engine, Layout, Reaction
from fsm_core.check._config import Model
from fsm_core.check._needs import Needs
from fsm_core.check._property import Notice, Property, at_node
from fsm_core.table._codegen import compile_predicates

PARENT_LEAVES_AFTER_CHILDREN = "parent_leaves_after_children"
NOTICE_DELIVERED = "settlement_notice_delivered"
TEARDOWN_ONCE = "teardown_runs_once"
NOTICE_ONCE = "notice_sent_once"

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

    The state is one slot per node (its activation's state, None until admitted), then
    ``budget.EVENT`` for each budgeted event and ``budget.failures``, then the ghosts
    ``ghost.closes.NODE`` and ``ghost.notices.NODE`` (how often each node closed and
    notified its parent) and ``ghost.broken``.
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
        }
    )
    listener_calls: tuple[tuple[str, Args], ...] = ()
    max_reactions = 0

    def __init__(self, model: Model) -> None:
        self.model = model
        self.machine = m = model.machine
        self.shape = shape = _shape(model.depth, model.width)
        self.instances = shape.names
        self.layout = layout = Layout(
            (
                *shape.names,
                *(f"budget.{e}" for e in model.budgets),
                "budget.failures",
                *(f"ghost.closes.{x}" for x in shape.names),
                *(f"ghost.notices.{x}" for x in shape.names),
                BROKEN,
            )
        )
        self._slots = range(len(shape.names))  # first in the layout: instance i is slot i
        self._budget = {e: layout[f"budget.{e}"] for e in model.budgets}
        self._failures = layout["budget.failures"]
        self._closes = tuple(layout[f"ghost.closes.{x}"] for x in shape.names)
        self._notices = tuple(layout[f"ghost.notices.{x}"] for x in shape.names)
        self._resident = m.names.index("resident")
        # Compiled once: evaluated on every node of every state and notification.
        invariants = {i.id: i.expr for i in m.table.invariants}
        self._violated = cast(_Predicates, compile_predicates(m, invariants))
        self._unsettled = cast(
            _Predicates, compile_predicates(m, {"quiescent": m.table.defs["quiescent"].expr})
        )
        self.offered = tuple(
            (e, tuple(m.all_arguments(e))) for e in m.table.events if e not in _WIRED_ONLY
        )
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
                lambda _, at: at is None or at[0] != "child_settled",
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
        )

    def initial(self) -> tuple[Any, ...]:
        n = len(self._slots)
        budgets = (self.model.budgets[e] for e in self.model.budgets)
        root: list[object] = [tuple(self.machine.initial)]
        return (*root, *([None] * (n - 1)), *budgets, self.model.failures, *([0] * (2 * n)), "")

    # --- properties ------------------------------------------------------------------------------

    def table_violated(self, state: Sequence[Any]) -> str | None:
        for i in self._slots:
            node = state[i]
            if node is not None:
                bad = self._violated(node)
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

    def quiescent(self, state: Sequence[Any]) -> bool:
        return all(self._settled(state[i]) for i in self._slots if state[i] is not None)

    def _settled(self, node: tuple[Any, ...]) -> bool:
        # The table's ``quiescent``: the activation reached ``settled``.
        return self._unsettled(node) is None

    # --- environment -----------------------------------------------------------------------------

    def charges(self, event: str, args: Args) -> tuple[int, ...]:
        slot = self._budget.get(event)
        spent = () if slot is None else (slot,)
        if event == "handle_disposed" and args[0]:
            spent = (*spent, self._failures)
        return spent

    def offers(self, state: Sequence[Any], instance: int, event: str) -> bool:
        """``admit`` needs a free child slot; budgets are counted by :meth:`charges`."""
        return event != "admit" or any(state[c] is None for c in self.shape.children[instance])

    # --- wiring ----------------------------------------------------------------------------------

    def before(self, store: list[Any], instance: int, event: str, args: Args) -> None:
        return None

    def after(self, store: list[Any], instance: int, event: str, args: Args) -> None:
        return None

    def effect(self, store: list[Any], instance: int, name: str, values: Args) -> None:
        return None

    def wire(self, store: list[Any], instance: int, name: str, values: Args) -> Sequence[Reaction]:
        """The events an effect of node ``instance`` fires on other nodes (or on itself),
        counting closes and notices as it goes."""
        shape, i = self.shape, instance
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
            if p is not None:
                others = [c for c in shape.children[p] if c != i and store[c] is not None]
                last = all(self._settled(store[c]) for c in others)
                return [(p, "child_settled", (values[0], last))]
        return ()


def tree_engine(model: Model, *, interpreted: bool = False) -> Engine:
    """The composition of an ``activation-tree`` model, ready to explore: compiled unless
    ``interpreted`` (the reference the compiled engine is tested against)."""
    wiring = TreeWiring(model)
    return Engine(model.name, wiring) if interpreted else CompiledEngine(model.name, wiring)
