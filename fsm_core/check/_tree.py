"""A tree of activations, wired as seed 004 wires them.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fsm_core.check._explore import System
from fsm_core.check._moves import Labels, Move
from fsm_core.check._needs import Needs
from fsm_core.table._expr import Value
from fsm_core.table._machine import REFUSED, Perform

if TYPE_CHECKING:  # the model loader imports this module for NEEDS, PROPERTIES, node_names
    from fsm_core.check._modelfile import Model

PARENT_LEAVES_AFTER_CHILDREN = "parent_leaves_after_children"
NOTICE_DELIVERED = "settlement_notice_delivered"
TEARDOWN_ONCE = "teardown_runs_once"
NOTICE_ONCE = "notice_sent_once"

PROPERTIES = (PARENT_LEAVES_AFTER_CHILDREN, NOTICE_DELIVERED, TEARDOWN_ONCE, NOTICE_ONCE)
"""The tree composition's own properties; the table's are named per node (``id@a.1``)."""

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

Node = tuple[Value, ...] | None
TreeState = tuple[object, ...]
"""(node slots..., budgets..., close counts..., notice counts...)."""

_WIRED_ONLY = frozenset({"child_settled"})


class _Stop(Exception):
    """A property broke inside a step; the step ends where it broke."""

    def __init__(self, prop: str) -> None:
        super().__init__(prop)
        self.prop = prop


class _Refused(Exception):
    pass


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


def node_names(depth: int, width: int) -> tuple[str, ...]:
    """Every node's name, root first: ``a``, ``a.1``, ..., as traces and properties name them."""
    return _shape(depth, width).names


class TreeSystem:
    """Builds the explorer's view of an ``activation-tree`` model."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.machine = m = model.machine
        self.shape = shape = _shape(model.depth, model.width)
        self.size = n = len(shape.names)
        self.budget_events = tuple(model.budgets)
        self._budget = {e: n + i for i, e in enumerate(self.budget_events)}
        self._failures = n + len(self.budget_events)
        self._closes = self._failures + 1
        self._notices = self._closes + n
        self._broken = self._notices + n
        self._resident = m.names.index("resident")
        self._offered = [
            (e, list(m.all_arguments(e))) for e in m.table.events if e not in _WIRED_ONLY
        ]
        self._params = {e: [p for p, _ in spec.params] for e, spec in m.table.events.items()}
        self._labels = Labels()
        self.labels = self._labels.moves
        slots: list[object] = [tuple(m.initial)] + [None] * (n - 1)
        initial: TreeState = (
            *slots,
            *(model.budgets[e] for e in self.budget_events),
            model.failures,
            *([0] * n),
            *([0] * n),
            "",
        )
        self.names: tuple[str, ...] = (
            *shape.names,
            *(f"budget.{e}" for e in self.budget_events),
            "budget.failures",
            *(f"ghost.closes.{x}" for x in shape.names),
            *(f"ghost.notices.{x}" for x in shape.names),
            "ghost.broken",
        )
        self.system: System[TreeState] = System(
            model.name, initial, self.successors, self.labels, self.first_violated, self.quiescent
        )

    # --- properties ----------------------------------------------------------------------------

    def first_violated(self, s: Sequence[Any]) -> str | None:
        if s[self._broken]:
            return str(s[self._broken])
        for i in range(self.size):
            node = s[i]
            if node is None:
                continue
            assert isinstance(node, tuple)
            bad = self.machine.violated(node)
            if bad:
                return f"{bad[0]}@{self.shape.names[i]}"
            if not node[self._resident]:
                for c in self.shape.children[i]:
                    child = s[c]
                    if isinstance(child, tuple) and child[self._resident]:
                        return PARENT_LEAVES_AFTER_CHILDREN
        for i in range(self.size):
            if s[self._closes + i] > 1:
                return TEARDOWN_ONCE
            if s[self._notices + i] > 1:
                return NOTICE_ONCE
        return None

    def quiescent(self, s: Sequence[object]) -> bool:
        return all(
            node is None or (isinstance(node, tuple) and self.machine.holds("quiescent", node))
            for node in s[: self.size]
        )

    # --- successors ----------------------------------------------------------------------------

    def successors(self, s: TreeState) -> list[tuple[int, TreeState]]:
        out: list[tuple[int, TreeState]] = []
        for i in range(self.size):
            if s[i] is None:
                continue
            for event, arguments in self._offered:
                slot = self._budget.get(event)
                if slot is not None and s[slot] == 0:
                    continue
                if event == "admit" and all(s[c] is not None for c in self.shape.children[i]):
                    continue
                for args in arguments:
                    if event == "handle_disposed" and args[0] and s[self._failures] == 0:
                        continue
                    step = self._step(s, i, event, args)
                    if step is not None:
                        move, nxt = step
                        out.append((self._labels.index(move), nxt))
        return out

    def _step(
        self, s: TreeState, node: int, event: str, args: tuple[Value, ...]
    ) -> tuple[Move, TreeState] | None:
        store: list[Any] = list(s)
        nodes: dict[int, list[Value]] = {}
        shape = self.shape
        # The last state of each node a listener observed (the step's start until then).
        observed: dict[int, Any] = {}

        def live(i: int) -> list[Value]:
            if i not in nodes:
                current = store[i]
                assert isinstance(current, tuple)
                nodes[i] = list(current)
            return nodes[i]

        def flush() -> None:
            for i, values in nodes.items():
                store[i] = tuple(values)

        def fire(i: int, ev: str, a: tuple[Value, ...]) -> Move:
            values = live(i)
            row = self.machine.lookup(values, ev, a)
            if row is REFUSED:
                raise _Refused
            inside: list[tuple[str, Move]] = []
            if row is not None:
                self.machine.execute(row, values, a, performer(i, inside))
            return Move(
                ev,
                tuple(zip(self._params[ev], a, strict=True)),
                row.row.id if row is not None else None,
                self.shape.names[i],
                tuple(inside),
            )

        def performer(i: int, inside: list[tuple[str, Move]]) -> Perform:
            def perform(name: str, values: tuple[Value, ...]) -> None:
                node = nodes[i]
                if self.machine.unmet(name, node, values):
                    flush()
                    store[self._broken] = f"{name}.requires@{shape.names[i]}"
                    raise _Stop(store[self._broken])
                if self.machine.table.effects[name].notifies:
                    flush()
                    before, observed[i] = observed.get(i, s[i]), tuple(node)
                    unstable = self.machine.unstable(before, node)
                    if unstable:
                        store[self._broken] = f"{unstable[0]}@{shape.names[i]}"
                        raise _Stop(store[self._broken])
                    bad = self.first_violated(store)
                    if bad is not None:
                        raise _Stop(bad)
                for target, ev, a in self._wire(store, i, name, values):
                    try:
                        nested = fire(target, ev, a)
                    except _Refused:
                        if ev == "child_settled":
                            raise _Stop(NOTICE_DELIVERED) from None
                        continue
                    inside.append((f"{name}()", nested))

            return perform

        slot = self._budget.get(event)
        if slot is not None:
            store[slot] = store[slot] - 1
        if event == "handle_disposed" and args[0]:
            store[self._failures] = store[self._failures] - 1
        try:
            move = fire(node, event, args)
        except _Refused:
            return None
        except _Stop as stop:
            flush()
            named = tuple(zip(self._params[event], args, strict=True))
            stopped = Move(event, named, None, shape.names[node], (), stopped=stop.prop)
            return stopped, tuple(store)
        for i, values in nodes.items():
            unstable = self.machine.unstable(observed.get(i, s[i]), values)
            if unstable:
                store[self._broken] = f"{unstable[0]}@{shape.names[i]}"
        flush()
        return move, tuple(store)

    def _wire(
        self, store: list[Any], i: int, effect: str, values: tuple[Value, ...]
    ) -> list[tuple[int, str, tuple[Value, ...]]]:
        """The events an effect of node ``i`` fires on other nodes (or on ``i`` itself)."""
        shape = self.shape
        if effect == "close_inbox":
            store[self._closes + i] = store[self._closes + i] + 1
        elif effect == "dispose_children":
            return [(c, "dispose", (False,)) for c in shape.children[i] if store[c] is not None]
        elif effect == "request_dispose":
            return [(i, "dispose", (False,))]
        elif effect == "dispose_in_maintenance":
            return [(i, "dispose", (True,))]
        elif effect == "admit_child":
            free = next(c for c in shape.children[i] if store[c] is None)
            store[free] = tuple(self.machine.initial)
        elif effect == "notify_parent":
            store[self._notices + i] = store[self._notices + i] + 1
            p = shape.parent[i]
            if p is not None:
                others = [c for c in shape.children[p] if c != i and store[c] is not None]
                last = all(self._settled(store[c]) for c in others)
                return [(p, "child_settled", (values[0], last))]
        return []

    def _settled(self, node: object) -> bool:
        # The table's ``quiescent``: the activation reached ``settled``.
        return isinstance(node, tuple) and self.machine.holds("quiescent", node)
