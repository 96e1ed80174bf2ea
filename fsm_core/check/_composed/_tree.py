"""The activation-tree protocol: a tree of activations, connected as specs/wiring.toml says.

Everything this composition adds to the tables is declared here, and :mod:`._compose` runs
it: the layout of node slots, budgets and ghosts, which instance each target of the wiring
names, and the tree's properties with their meanings. *Which event an effect fires on which
instance, with which arguments, and what a refusal there means* is not here: it is read from
the model's wiring (``[tree] wiring``, specs/wiring.toml), the declaration the runtime's
registry reads too. This module only resolves each target to instances.

Nodes are named by path: ``a`` is the root, ``a.1`` .. ``a.W`` its children, ``a.1.1`` a
grandchild, down to the model's ``depth``. A child slot is empty until its parent admits it.
Every node runs the activation table. With ``[tree] agent`` each node also carries its own
agent (``a:agent``, specs/agent.toml), created with it: the wiring's calls aimed at ``agent``
and ``new_agent`` fire on it, and the wiring's ``[[awaits]]`` gate the activation's internal
events on its state (``agent_idle`` waits for the agent's ``quiescent``, ``handle_disposed``
for ``disposed``, the watcher reads its inbox). Without it the agent is abstracted: those
calls go nowhere and the awaited events fire whenever the activation's table enables them.

Beside the nodes runs the registry's door, one instance ``door`` of the model's ``[tree]
door`` table. The targets resolve so:

- ``self``: the node; ``children``: its admitted children, in order; ``parent``: its parent
  node (the fact ``last`` says no other admitted sibling is unsettled); ``door``: the door
  (the fact ``parent`` is ``host`` for a root's settlement: the root's host parent is live
  throughout, nothing in the tree disposes it; for an agent's disposal, ``activation``);
  ``agent``: the node's agent; ``new_agent``: the agent of the child an ``admit_child()``
  created, in the slot it filled;
- from the door: ``roots`` and ``host_roots`` are the root ``a`` (the tree has one root, owned
  by the host parent); ``named`` is the node the step's call named (the step's *target*):
  ``admit`` and ``drain_below`` naming node n are the door's ``admit(parent=activation)`` and
  ``drain_below(parent=activation)``; ``host`` and ``new_agent`` (a host agent, a root or
  spawned child the door creates) are not in the tree, so those calls go nowhere.

A call the wiring marks ``refused = "caller"`` hands the step's call on (*binding*): a refusal
there refuses the step as a whole, as the runtime raises it with nothing changed. Any other
refused call breaks ``wired_call_accepted`` (or ``settlement_notice_delivered`` for a
settlement notice).

The door's events the tree cannot tie to a node are not offered: ``spawn`` (no activation),
``release`` and ``parent_disposed`` (what a cold resume needs: the tree resumes nothing cold),
``parent_disposing`` of a host agent (the tree never disposes it), ``name_parent`` (it only
checks a parent ``drain_below`` names live) and ``admit`` with a host parent (a second root,
for which the tree has no slot). models/admission.toml proves their rows on their own.

The environment calls the budgeted events (``admit``, ``dispose``, ``drain``, ``drain_below``,
``drain_child``, and the agents' ``agent.EVENT``: ``agent.send`` is a user's followup straight
to a node's agent); ``failures`` budgets ``handle_disposed(failed=true)``. A drain below a
parent spends the ``drain_below`` budget when the model gives one, else the ``drain`` budget.
The activation's other events fire whenever enabled (and, with agents, the wiring's awaits
allow); ``child_settled`` only ever arrives through the wiring. An agent's driver events fire
whenever its table enables them; ``halt`` and ``remove`` (an escape, a user's removal) and every
input event only within an ``agent.EVENT`` budget; ``shut`` only through the wiring. With
``reactions``, listeners re-enter a node's agent inside those notifying effects (``agent.EVENT``
budgets bound them), up to two calls per step. A model that names a node's effect in ``reactions``
(``activation.settle``) lets that effect's listeners call other instances, as the wiring's
``[[listeners]]`` declare: seed 004's step 5 (``observer.settle(failure)``, the runtime's
``subagent/settled``) tells listeners a child settled, and specs/wiring.toml lets them dispose
its parent, admit a sibling below it (through the door), drain the registry, below the parent or
below the root's host parent, or send to the parent's agent; never the settled node, which has
left the registry. This module resolves a listener's target as it resolves a call's
(:meth:`TreeWiring.aim`); a listener's call is offered where the model gives its budget (a drain
below a parent falls back to ``drain``) and where the environment's same call is (an admission
needs a free slot), spends that budget, and counts among the two calls per step.

Every effect's ``requires`` contract is checked as it runs; every instance's invariants and
step invariants at each notifying effect and between steps. Tree properties besides:

- ``parent_leaves_after_children``: a node out of the registry has every admitted child out;
- ``settlement_notice_delivered``: a parent always accepts its child's settlement notice;
- ``wired_call_accepted``: no other call the wiring promises is ever refused;
- ``teardown_runs_once``: a node's memoized close (``close_inbox``) runs at most once;
- ``notice_sent_once``: a node notifies its parent at most once;
- ``notice_after_children``: a node notifies its parent only after every admitted child did;
- ``drained_door_leaves_no_active_node``: once the door is drained no admitted node is
  ``active``, so no ``deliver(drained=true)`` reaches an active activation;
- ``teardown_cancels_subtree``: between steps, every admitted child of a node that is tearing
  down is tearing down too: a teardown's cancel reaches the whole subtree inside the call that
  began it;
- ``drained_scope_refuses_draining``: between steps, every admission to a drained scope still
  registered is refused ``DRAINING``, whichever entry drained it and whatever closed a node
  before: a delivery to a node, and an admission below it (the door's verdict first, then the
  node's). A registry drain (the door drained) covers every node; a node a drain closed
  (``by_drain``) covers its subtree, and one a drain named as the parent to drain below
  (``draining``) the admissions below it and its subtree. The drain sets those on the node it
  names (its own row); the property proves the wiring carries them down the tree and every
  row answers the code (no ghost: one would split states the variables already tell apart);
- with agents, ``no_turn_after_close``: no agent publishes ``turn/start`` while its activation
  is tearing down (seed 004: "disposal never latches, so teardown waits on no model turn");
- with agents, ``no_parked_wake``: an agent of an active activation that is idle with no driver
  scheduled owes no waking send its turn (the agent model's ghost, per node);
- with agents, ``teardown_keeps_inbox``: no agent's inbox is cleared while its activation is
  tearing down (seed 004: the disposal path cancels with ``keepInbox: true``, so the queued
  work and the children's settlement notices reach the final capture). Nothing else in a tree
  cancels a node's agent: the runtime hands out no handle to it, so a clear there is the
  teardown's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, cast

from fsm_core._errors import NotEnabled, Rejected
from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._composed._compose import (
    BROKEN,
    Aimed,
    Args,
    Engine,
    Layout,
    Offer,
    Reaction,
    Store,
)
from fsm_core.check._config import Model
from fsm_core.check._needs import Needs
from fsm_core.check._property import Notice, Part, Property, ask, at_node, conjunction
from fsm_core.check._reactions import listened
from fsm_core.table import Machine, WiredCall, Wiring
from fsm_core.table._codegen import compile_predicates
from fsm_core.table._table import Table

PARENT_LEAVES_AFTER_CHILDREN = "parent_leaves_after_children"
NOTICE_DELIVERED = "settlement_notice_delivered"
CALL_ACCEPTED = "wired_call_accepted"
TEARDOWN_ONCE = "teardown_runs_once"
NOTICE_ONCE = "notice_sent_once"
NOTICE_AFTER_CHILDREN = "notice_after_children"
NO_ACTIVE_AFTER_DRAIN = "drained_door_leaves_no_active_node"
CANCELS_SUBTREE = "teardown_cancels_subtree"
REFUSES_DRAINING = "drained_scope_refuses_draining"
NO_TURN_AFTER_CLOSE = "no_turn_after_close"
NO_PARKED_WAKE = "no_parked_wake"
KEEPS_INBOX = "teardown_keeps_inbox"
DOOR = "door"
"""The door's instance name, and the name of its slot in the layout."""
DRAINED = "drained"
"""The door's state once ``drain()`` closed admission registry-wide (the runtime reads it so)."""
NO_DRAIN = "none"
"""A node's ``draining`` while no drain named it as the parent to drain below."""
AGENT = ":agent"
"""A node's agent is named by the node's path and this suffix (``a.1:agent``)."""

PROPERTY_CLAUSES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        PARENT_LEAVES_AFTER_CHILDREN: ("S004.child-first", "S004.children-settled-first"),
        NOTICE_DELIVERED: ("S004.notify-by-name", "S004.step-3-notify-parent"),
        CALL_ACCEPTED: ("S004.notify-by-name", "S004.drain-gate"),
        TEARDOWN_ONCE: ("S004.memoized-close", "S004.one-quiescence"),
        NOTICE_ONCE: ("S004.step-3-notify-parent",),
        NOTICE_AFTER_CHILDREN: ("S004.child-first", "S004.notice-between"),
        NO_ACTIVE_AFTER_DRAIN: ("S004.drain-registry", "S004.drain-gate"),
        CANCELS_SUBTREE: ("S004.child-first", "S004.dispose-up"),
        REFUSES_DRAINING: ("S004.drain-gate", "S004.drain-admission"),
        NO_TURN_AFTER_CLOSE: ("S004.never-latch", "D8"),
        NO_PARKED_WAKE: ("D9", "S000.observer-work"),
        KEEPS_INBOX: ("S004.cancel-keep-inbox",),
    }
)
"""The seed clause (or pinned decision) each tree property proves."""

NEEDS = Needs(
    variables=("resident", "children", "by_drain"), events={"dispose": ("final_state_flushed",)}
)
"""What the tree reads of the node table by name (the rest is the wiring's, validated when
the wiring loaded against the same tables)."""

_WIRED_ONLY = frozenset({"child_settled"})
_AGENT_WIRED = frozenset({"shut"})
"""Agent events only the wiring fires."""
_AGENT_BUDGETED = frozenset({"halt", "remove"})
"""Agent internal events the environment causes (an escape, a user's removal): offered only
within an ``agent.EVENT`` budget."""

_THROUGH_DOOR = {"admit": "admit", "drain": "drain_below"}
"""Node events the environment reaches only through the door: a call naming a node is the
door's event (the value) with ``parent=activation``, which the door hands on to the node."""

_DOOR_EVENTS = {"drain": (), "admit": ("parent",), "drain_below": ("parent",)}
DOOR_CALLS = tuple(_DOOR_EVENTS)
"""The door's events the environment calls, which a model may budget."""
_NODE_VALUES = {("drain", "scope"): ("registry", "descendants")}


def door_lacking(door: Table, node: Table) -> str | None:
    """What the door table ``door`` or the node table ``node`` lacks for the tree, as
    ``an event drain_below(parent) in the door``; else None."""
    for event, params in _DOOR_EVENTS.items():
        spec = door.events.get(event)
        if spec is None or tuple(p for p, _ in spec.params) != params:
            return f"an event {event}({', '.join(params)}) in the door"
    for event in ("admit", "drain_below"):
        kinds = dict(door.events[event].params)
        if not {"activation", "host"} <= set(kinds["parent"].values):
            return f"an event {event}(parent) in the door whose parent takes activation and host"
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
    draining = next((v for v in node.variables if v.name == "draining"), None)
    if draining is None or NO_DRAIN not in draining.type.values:
        return f"a variable draining that takes {NO_DRAIN}"
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

    The state is one slot per node (its activation's state, None until admitted), then, with
    agents, one per node's agent, then the door's slot; then ``budget.EVENT`` for each
    budgeted event and ``budget.failures``; then the ghosts ``ghost.closes.NODE`` and
    ``ghost.notices.NODE`` (how often each node closed and notified its parent), with agents
    ``ghost.owed.NODE`` (the node's agent owes a waking send its turn), ``ghost.late_turn``
    (an agent opened a turn while its activation tore down) and ``ghost.discarded`` (an agent's
    inbox was cleared while its activation tore down), and ``ghost.broken``.
    """

    flat = False
    max_reactions = 2

    def __init__(self, model: Model) -> None:
        assert model.door is not None, "the model loader gives every tree its door"
        assert model.wiring is not None, "the model loader gives every tree its wiring"
        self.model = model
        self.machine = m = model.machine
        self.door = door = model.door
        self.agent: Machine | None = model.agent
        self.wiring: Wiring = model.wiring
        self.shape = shape = _shape(model.depth, model.width)
        n = len(shape.names)
        agents = () if self.agent is None else tuple(x + AGENT for x in shape.names)
        self.instances = (*shape.names, *agents, DOOR)
        a = self.agent
        self.machines: tuple[Machine, ...] = (
            *(m for _ in shape.names), *(a for _ in agents if a is not None), door,
        )  # fmt: skip
        self.layout = layout = Layout(
            (
                *self.instances,
                *(f"budget.{e}" for e in model.budgets),
                "budget.failures",
                *(f"ghost.closes.{x}" for x in shape.names),
                *(f"ghost.notices.{x}" for x in shape.names),
                *(f"ghost.owed.{x}" for x in (shape.names if agents else ())),
                *(("ghost.late_turn", "ghost.discarded") if agents else ()),
                BROKEN,
            )
        )
        self._slots = range(n)  # first in the layout: instance i is slot i
        self._agents = range(n, n + len(agents))  # node i's agent is instance n + i
        self._n = n
        self._door = layout[DOOR]
        self._budget = {e: layout[f"budget.{e}"] for e in model.budgets}
        if "drain_below" not in self._budget and "drain" in self._budget:
            self._budget["drain_below"] = self._budget["drain"]
        self._failures = layout["budget.failures"]
        self._closes = tuple(layout[f"ghost.closes.{x}"] for x in shape.names)
        self._notices = tuple(layout[f"ghost.notices.{x}"] for x in shape.names)
        self._owed = tuple(layout[f"ghost.owed.{x}"] for x in shape.names) if agents else ()
        self._late = layout.get("ghost.late_turn")
        dispose = [p for p, _ in m.table.events["dispose"].params]
        self._drain_arg = dispose.index("drain") if "drain" in dispose else None
        self._discarded = layout.get("ghost.discarded")
        self._resident = m.names.index("resident")
        self._children = m.names.index("children")
        self._draining = m.names.index("draining")
        self._by_drain = m.names.index("by_drain")
        # Where an agent keeps what the ghosts read (an agent table from before the wiring
        # shut it has no ``shut``: only disposal parks its sends).
        names = a.names if a is not None else ()
        self._pending_index = names.index("pending") if a is not None else -1
        self._closing_index = names.index("closing") if a is not None else -1
        self._shut_index = names.index("shut") if "shut" in names else None
        self._stage = m.names.index(m.table.state_var)
        self._active = m.table.initial  # an activation begins active: resident and admitting
        self._registry = door.names.index(door.table.state_var)
        # Compiled once: evaluated on every instance of every state and notification.
        tables = (m, door) if a is None else (m, door, a)
        self._violated = tuple(
            cast(_Predicates, compile_predicates(t, {i.id: i.expr for i in t.table.invariants}))
            for t in tables
        )
        self._unsettled = tuple(
            cast(_Predicates, compile_predicates(t, {"quiescent": t.table.defs["quiescent"].expr}))
            for t in tables
        )
        # The wiring, per machine and effect: what the hooks resolve.
        self._calls = {
            (c.machine, c.effect): self.wiring.fired_by(c.machine, c.effect)
            for c in self.wiring.calls
        }
        self.binding = frozenset(
            c.effect
            for c in self.wiring.calls
            if c.machine in ("activation", "admission")
            and all(x.refused == "caller" for x in self._calls[(c.machine, c.effect)])
        )
        self._awaits = {
            w.event: w for w in self.wiring.awaits if w.machine == "activation" and a is not None
        }
        ghosts_node = {"close_inbox", "notify_parent", "admit_child"}
        ghosts_agent = {"publish_turn_start", "clear_inbox", "claim_inbox"} if a else set()
        self.hooked_effects = frozenset({e for (_, e) in self._calls} | ghosts_node | ghosts_agent)
        self.hooked_events: frozenset[str] = (
            frozenset({"send", "cancel", "halt", "dispose", "shut", "remove", "take_steering"})
            if a is not None
            else frozenset()
        )
        self._listened = listened(model, m.table.name)
        """The node's notifying effects whose listeners call other instances."""
        self.reactions: frozenset[str] = self._listened | (
            listened(model, a.table.name) if a is not None else frozenset()
        )
        self._heard = {
            heard.id: heard
            for effect in sorted(self._listened)
            for heard in self.wiring.listening("activation", effect)
            if heard.budget in self._budget  # drain_below falls back to drain there
            if heard.target != "parent_agent" or a is not None
        }
        """The wiring's listeners a model lets in, by id: the aim of their calls."""
        self.aimed_calls: tuple[Aimed, ...] = tuple(
            (heard.id, heard.event, args)
            for heard in self._heard.values()
            for args in heard.arguments()
        )
        self.listener_calls: tuple[tuple[str, Args], ...] = ()
        self._agent_budget: dict[str, int] = {}
        if a is not None:
            self.listener_calls = tuple(
                (e[len("agent.") :], args)
                for e in model.budgets
                if e.startswith("agent.") and a.table.events[e[len("agent.") :]].kind == "input"
                for args in a.all_arguments(e[len("agent.") :])
            )
            self._agent_budget = {
                e[len("agent.") :]: self._budget[e] for e in model.budgets if e.startswith("agent.")
            }
        node_offers: list[Offer] = []
        for e in m.table.events:
            if e in _THROUGH_DOOR:
                via = _THROUGH_DOOR[e]
                node_offers.append((via, (door.arguments(via, parent="activation"),), self._door))
            elif e not in _WIRED_ONLY:
                node_offers.append((e, tuple(m.all_arguments(e)), -1))
        agent_offers: list[Offer] = []
        if a is not None:
            for e, spec in a.table.events.items():
                user = spec.kind == "input" or e in _AGENT_BUDGETED
                if e in _AGENT_WIRED or (user and f"agent.{e}" not in model.budgets):
                    continue
                agent_offers.append((e, tuple(a.all_arguments(e)), -1))
        self.offered = (
            *(tuple((e, x, i if on < 0 else on) for e, x, on in node_offers) for i in self._slots),
            *(tuple((e, x, j) for e, x, _ in agent_offers) for j in self._agents),
            (
                ("drain", tuple(door.all_arguments("drain")), self._door),
                ("drain_below", (door.arguments("drain_below", parent="host"),), self._door),
            ),
        )
        self._wake = 0 if a is None else [p for p, _ in a.table.events["send"].params].index("wake")
        self._keep = (
            0 if a is None else [p for p, _ in a.table.events["cancel"].params].index("keep_inbox")
        )
        self._refusals: dict[tuple[Any, ...], str | None] = {}
        """:meth:`_code`'s answers."""
        self.own: tuple[Property, ...] = self._properties()

    def _properties(self) -> tuple[Property, ...]:
        own = [
            conjunction(
                PARENT_LEAVES_AFTER_CHILDREN,
                "a node left the registry while an admitted child is in it",
                [self._leaves_after_children(i) for i in self._slots],
            ),
            Property(
                NOTICE_DELIVERED,
                "delivered",
                "a parent refused its child's settlement notice",
                lambda _, at: at is None or at[0] not in ("child_settled", "root_settled"),
            ),
            Property(
                CALL_ACCEPTED,
                "delivered",
                "an instance refused a call the wiring says is never refused",
                lambda _, at: at is not None and at[0] in ("child_settled", "root_settled"),
            ),
            conjunction(
                TEARDOWN_ONCE,
                "a node's memoized close ran twice",
                [_at_most_once(c) for c in self._closes],
            ),
            conjunction(
                NOTICE_ONCE,
                "a node notified its parent twice",
                [_at_most_once(c) for c in self._notices],
            ),
            conjunction(
                NOTICE_AFTER_CHILDREN,
                "a node notified its parent before an admitted child notified it",
                [self._notified_after_children(i) for i in self._slots],
            ),
            Property(
                NO_ACTIVE_AFTER_DRAIN,
                "between",
                "the door is drained while an admitted node is still active (a delivery "
                "would reach it with drained=true)",
                self._no_active_after_drain,
            ),
            Property(
                CANCELS_SUBTREE,
                "between",
                "a node tears down while an admitted child is still active",
                self._cancels_subtree,
            ),
            Property(
                REFUSES_DRAINING,
                "between",
                "an admission to a drained scope still registered (a delivery to a node, or an "
                "admission below it) is accepted or refused with another code than DRAINING",
                self._refuses_draining,
            ),
        ]
        if self.agent is not None:
            late, discarded = cast(int, self._late), cast(int, self._discarded)
            own += [
                conjunction(
                    NO_TURN_AFTER_CLOSE,
                    "an agent opened a model turn while its activation was tearing down",
                    [_unset(late)],
                ),
                conjunction(
                    NO_PARKED_WAKE,
                    "an active activation's agent is idle with no driver scheduled and still "
                    "owes a waking send its turn",
                    [self._wake_not_parked(i) for i in self._slots],
                ),
                conjunction(
                    KEEPS_INBOX,
                    "an agent's inbox was cleared while its activation was tearing down (its "
                    "queued work and settlement notices never reach the final capture)",
                    [_unset(discarded)],
                ),
            ]
        return tuple(replace(p, clauses=PROPERTY_CLAUSES[p.name]) for p in own)

    def initial(self) -> tuple[Any, ...]:
        n = len(self._slots)
        budgets = (self.model.budgets[e] for e in self.model.budgets)
        agents: list[object] = []
        if self.agent is not None:
            agents = [tuple(self.agent.initial), *([None] * (n - 1))]
        ghosts = [0] * (2 * n) + ([False] * (n + 2) if self.agent is not None else [])
        return (
            tuple(self.machine.initial), *([None] * (n - 1)), *agents, tuple(self.door.initial),
            *budgets, self.model.failures, *ghosts, "",
        )  # fmt: skip

    # --- properties ------------------------------------------------------------------------------

    def _table(self, i: int) -> int:
        """Which compiled table instance ``i`` runs: 0 a node, 1 the door, 2 an agent."""
        return 0 if i < self._n else 1 if i == self._door else 2

    def table_violated(self, state: Sequence[Any]) -> str | None:
        for i in range(len(self.instances)):
            node = state[i]
            if node is not None:
                bad = self._violated[self._table(i)](node)
                if bad is not None:
                    return at_node(bad, self.instances[i])
        return None

    def _leaves_after_children(self, i: int) -> Part:
        """Node ``i`` out of the registry has every admitted child out."""
        children, resident = self.shape.children[i], self._resident

        def holds(s: Sequence[Any], _: Notice | None) -> bool:
            node = s[i]
            if node is None or node[resident]:
                return True
            return not any(s[c] is not None and s[c][resident] for c in children)

        return (i, *children), holds

    def _notified_after_children(self, i: int) -> Part:
        """Node ``i`` notified its parent only after every admitted child notified it."""
        children, notices = self.shape.children[i], self._notices

        def holds(s: Sequence[Any], _: Notice | None) -> bool:
            return not s[notices[i]] or all(s[c] is None or s[notices[c]] for c in children)

        return (notices[i], *children, *(notices[c] for c in children)), holds

    def _no_active_after_drain(self, s: Sequence[Any], _: Notice | None) -> bool:
        if not self._is_drained(s):
            return True
        stage, active = self._stage, self._active
        return all(s[i] is None or s[i][stage] != active for i in self._slots)

    def _cancels_subtree(self, s: Sequence[Any], _: Notice | None) -> bool:
        """A node past ``active`` has no active admitted child (checked between steps: inside
        the step that begins a teardown it spreads). That the node's agent is shut too is
        ``no_turn_after_close``'s to prove, where it matters: at a turn."""
        stage, active = self._stage, self._active
        for i in self._slots:
            node = s[i]
            if node is None or node[stage] == active:
                continue
            if any(s[c] is not None and s[c][stage] == active for c in self.shape.children[i]):
                return False
        return True

    def _refuses_draining(self, s: Sequence[Any], _: Notice | None) -> bool:
        """Every registered node in a drained scope refuses a delivery, and an admission below
        it, ``DRAINING`` (nodes come parents first, so each inherits its parent's scope)."""
        drained = self._is_drained(s)
        draining, by_drain = self._draining, self._by_drain
        covered = [drained] * self._n  # the node and its subtree are a drain's
        door = self._code(self.door, s[self._door], "admit", ("activation",))  # one for all
        for i in self._slots:
            node = s[i]
            if node is None:
                continue
            p = self.shape.parent[i]
            if p is not None and (covered[p] or s[p][draining] != NO_DRAIN):
                covered[i] = True
            covered[i] = covered[i] or node[by_drain]
            if not node[self._resident] or not (covered[i] or node[draining] != NO_DRAIN):
                continue
            if covered[i] and self._code(self.machine, node, "deliver", (drained,)) != "DRAINING":
                return False
            admit = door if door is not None else self._code(self.machine, node, "admit", ())
            if admit != "DRAINING":
                return False
        return True

    def _code(self, machine: Machine, state: Sequence[Any], event: str, args: Args) -> str | None:
        """:func:`_code`, kept by the instance's variables (a refusal is an exception raised
        and caught: the between-steps properties ask the same few thousand times)."""
        where = (machine is self.door, tuple(state), event, args)
        if where not in self._refusals:
            self._refusals[where] = _code(machine, state, event, args)
        return self._refusals[where]

    def _shut(self, agent: Sequence[Any]) -> bool:
        """True iff no send wakes ``agent`` any more: disposing, or shut by its activation (an
        agent table without ``shut``, as before the wiring shut it, has only disposal)."""
        shut = self._shut_index is not None and agent[self._shut_index]
        return bool(shut or agent[self._closing_index])

    def _wake_not_parked(self, i: int) -> Part:
        """Node ``i``'s agent, its activation active, is not idle with no driver scheduled
        while it owes a waking send its turn."""
        agent, owed, stage, active = self._n + i, self._owed[i], self._stage, self._active
        unsettled = self._unsettled[2]

        def holds(s: Sequence[Any], _: Notice | None) -> bool:
            a = s[agent]
            if a is None or not s[owed] or s[i][stage] != active:
                return True
            return not (a[0] == "idle" and unsettled(a) is None)

        return (agent, owed, i), holds

    def _is_drained(self, s: Sequence[Any]) -> bool:
        return bool(s[self._door][self._registry] == DRAINED)

    def quiescent(self, state: Sequence[Any]) -> bool:
        """The door quiet and every admitted node settled (its agent is disposed by its
        teardown, so quiet too); with agents, a node may also rest active while its agent is
        quiescent and its watcher waits on work parked unwoken (a user's inject) or on
        children: nothing runs until someone wakes or disposes it."""
        if self._unsettled[1](state[self._door]) is not None:
            return False
        for i in self._slots:
            node = state[i]
            if self._gone(node):
                continue
            if self.agent is None or node[self._stage] != self._active:
                return False
            agent = state[self._n + i]
            if self._unsettled[2](agent) is not None:
                return False
            if not (agent[self._pending_index] or node[self._children]):
                return False
        return True

    def _settled(self, node: tuple[Any, ...]) -> bool:
        # The table's ``quiescent``: the activation reached ``settled``.
        return self._unsettled[0](node) is None

    def _gone(self, node: tuple[Any, ...] | None) -> bool:
        """A child slot holds no activation, or one that settled."""
        return node is None or self._settled(node)

    # --- environment -----------------------------------------------------------------------------

    def charges(self, event: str, args: Args, on: int | None) -> tuple[int, ...]:
        """A call on a node's agent, or a listener's on the agent it listens to, spends
        ``agent.EVENT``; any other ``EVENT`` (a settle listener's aimed call too, as the
        environment's same call), and a failed handle ``failures`` too."""
        if on is None or self._n <= on < self._door:
            slot = self._agent_budget.get(event)
            return () if slot is None else (slot,)
        slot = self._budget.get(event)
        spent = () if slot is None else (slot,)
        if event == "handle_disposed" and args[0]:
            spent = (*spent, self._failures)
        return spent

    def aim(self, instance: int, effect: str, aim: str) -> tuple[int, int | None] | None:
        """A listener of an agent's notification calls that agent; one of a node's notification
        makes the calls of the wiring's listener ``aim`` (its id) where that listener hears
        ``effect``, on the instance its target names: ``parent``, the parent node;
        ``parent_agent``, the parent's agent; ``door``, the door; ``below_parent``, the door
        naming the parent. A root's listener only calls the door's own events (its parent is
        the host's, not in the tree)."""
        if not aim:
            return (instance, None) if self._n <= instance < self._door else None
        heard = self._heard.get(aim)
        if instance >= self._n or heard is None or heard.effect != effect:
            return None
        if heard.target == "door":
            return self._door, None
        p = self.shape.parent[instance]
        if p is None:
            return None
        if heard.target == "parent":
            return p, None
        if heard.target == "parent_agent":
            return self._n + p, None
        assert heard.target == "below_parent", f"the loader admits no target {heard.target!r}"
        return self._door, p

    def offers(self, state: Sequence[Any], instance: int, event: str, args: Args) -> bool:
        """An admission below a node needs a free child slot; ``deliver``'s ``drained`` is
        the door's state; with agents, an awaited event waits for its agent's state. An
        agent's calls are offered as the table takes them (budgets spent in :meth:`charges`).
        A listener's aimed call is offered as the environment's naming the same instance."""
        if instance >= self._n:
            return True
        if event == "admit":
            return any(ask(state, c, _vacant) for c in self.shape.children[instance])
        if event == "deliver":
            return bool(args[0]) == self._is_drained(state)
        if event == "dispose":  # a user's dispose is no drain's
            return self._drain_arg is None or not args[self._drain_arg]
        waits = self._awaits.get(event)
        if waits is not None:
            return waits.admits(state[self._n + instance], args)
        return True

    # --- ghosts ----------------------------------------------------------------------------------

    def before(self, store: Store, instance: int, event: str, args: Args) -> None:
        """An agent's waking send owes a wake as it is accepted, unless disposal or its
        activation's teardown began (the agent model's ``owed``, per node)."""
        if self.agent is None or not self._n <= instance < self._door:
            return
        node = instance - self._n
        if event == "send" and args[self._wake]:
            agent = store[instance]
            if not self._shut(agent):
                store[self._owed[node]] = True
        elif event == "halt":
            store[self._owed[node]] = False

    def after(self, store: Store, instance: int, event: str, args: Args) -> None:
        """A ``keep_inbox`` cancel parks, and disposal, the shut or removing the last message
        excuses, what was owed when it finishes."""
        if self.agent is None or not self._n <= instance < self._door:
            return
        if (
            (event == "cancel" and args[self._keep])
            or event in ("dispose", "shut")
            or (event in ("remove", "take_steering") and not args[0])
        ):
            store[self._owed[instance - self._n]] = False

    def effect(self, store: Store, instance: int, name: str, values: Args) -> None:
        """Discarding an agent's inbox settles what was owed; discarding it while its
        activation tears down is ``teardown_keeps_inbox``'s to report."""
        if self.agent is None or not self._n <= instance < self._door:
            return
        if name == "clear_inbox":
            node = instance - self._n
            store[self._owed[node]] = False
            if store[node][self._stage] != self._active:
                store[cast(int, self._discarded)] = True

    # --- wiring ----------------------------------------------------------------------------------

    def wire(
        self, store: Store, instance: int, name: str, values: Args, target: int | None
    ) -> Sequence[Reaction]:
        """The events the effect ``name`` of ``instance`` fires, as the wiring declares them,
        on the instances its targets name; counting closes and notices, and creating the
        child an ``admit_child()`` admits, as it goes."""
        n = self._n
        if instance == self._door:
            return self._fire(store, "admission", name, values, instance, target, None)
        if instance >= n:  # an agent
            node = instance - n
            if name == "claim_inbox" and not store[instance][self._pending_index]:
                store[self._owed[node]] = False
            elif name == "publish_turn_start" and store[node][self._stage] != self._active:
                store[cast(int, self._late)] = True
            return self._fire(store, "agent", name, values, instance, target, node)
        created = None
        if name == "close_inbox":
            store[self._closes[instance]] += 1
        elif name == "notify_parent":
            store[self._notices[instance]] += 1
        elif name == "admit_child":
            created = next(c for c in self.shape.children[instance] if store[c] is None)
            store[created] = tuple(self.machine.initial)
            if self.agent is not None:
                store[n + created] = tuple(self.agent.initial)
        return self._fire(store, "activation", name, values, instance, target, created)

    def _fire(
        self,
        store: Store,
        machine: str,
        name: str,
        values: Args,
        i: int,
        target: int | None,
        extra: int | None,
    ) -> list[Reaction]:
        out: list[Reaction] = []
        for call in self._calls.get((machine, name), ()):
            for k in self._resolve(store, call, i, target, extra):
                out.append((k, call.event, call.arguments(values, self._facts(store, call, i))))
        return out

    def _resolve(
        self, store: Store, call: WiredCall, i: int, target: int | None, extra: int | None
    ) -> list[int]:
        """The instances ``call.target`` names, from the effect of instance ``i``."""
        n, shape, t = self._n, self.shape, call.target
        agents = self.agent is not None
        if call.machine == "admission":
            if t in ("roots", "host_roots"):
                return [0]
            if t == "named":
                assert target is not None, "the door hands a call on to the node it names"
                return [target]
            return []  # host, new_agent: a host agent or a spawned child is not in the tree
        if call.machine == "agent":
            return [self._door] if t == "door" else []
        root = shape.parent[i] is None
        if (call.only == "root" and not root) or (call.only == "child" and root):
            return []
        if t == "self":
            return [i]
        if t == "agent":
            return [n + i] if agents else []
        if t == "children":
            return [c for c in shape.children[i] if store[c] is not None]
        if t == "parent":
            p = shape.parent[i]
            return [] if p is None else [p]
        if t == "door":
            return [self._door]
        if t == "new_agent":
            return [n + extra] if agents and extra is not None else []
        raise AssertionError(f"the wiring loader admits no target {t!r} for an activation")

    def _facts(self, store: Store, call: WiredCall, i: int) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        if "last" in call.facts:
            p = self.shape.parent[i]
            assert p is not None
            # Only whether each sibling is settled matters: asked as a test, a scoped search
            # serves every state whose siblings answer the same (:func:`ask`).
            gone = self._gone
            facts["last"] = all(ask(store, c, gone) for c in self.shape.children[p] if c != i)
        if "parent" in call.facts:
            # A root's parent is the host agent, live throughout; a child's is its parent
            # node's agent, the exact agent of a resident activation (its teardown waits for
            # the child), and so is a disposing agent of the tree.
            root = call.machine == "activation" and self.shape.parent[i] is None
            facts["parent"] = "host" if root else "activation"
        return facts


def _vacant(node: tuple[Any, ...] | None) -> bool:
    """A child slot holds no activation."""
    return node is None


def _at_most_once(ghost: int) -> Part:
    """The counter at ``ghost`` is at most 1."""
    return (ghost,), lambda s, _: bool(s[ghost] <= 1)


def _unset(ghost: int) -> Part:
    """The flag at ``ghost`` is unset."""
    return (ghost,), lambda s, _: not s[ghost]


def _code(machine: Machine, state: Sequence[Any], event: str, args: Args) -> str | None:
    """The code ``machine`` refuses ``event(args)`` with in ``state`` (a reason's text before its
    colon, as the runtime raises it), None if it takes or ignores the event."""
    try:
        machine.select(state, event, args)
    except Rejected as refused:
        return str(refused).partition(":")[0]
    except NotEnabled:
        return "no row"
    return None


def tree_engine(model: Model, *, interpreted: bool = False) -> Engine:
    """The composition of an ``activation-tree`` model, ready to explore: compiled unless
    ``interpreted`` (the reference the compiled engine is tested against)."""
    wiring = TreeWiring(model)
    return Engine(model.name, wiring) if interpreted else CompiledEngine(model.name, wiring)
