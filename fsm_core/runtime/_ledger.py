"""The activation registry's bookkeeping: who is resident, who holds a slot, who owns whom.

A :class:`Ledger` holds what seed 004's convergence steps release (the resident activations,
the pool slots, the ownership of ids) and what outlives an activation (the settled children a
followup resumes cold, the host-owned parents a drain closed admission below). It decides
nothing: the tables do, and their effects change it through the :class:`~fsm_core.runtime.
_node.Ledger` protocol (a node's) and the door's handlers. It also tells what a parent *is*
now (:meth:`Ledger.parent_kind`), as the door's ``parent`` type names it: facts only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import final

from fsm_core._errors import FsmError
from fsm_core.runtime._agent import Agent
from fsm_core.runtime._inbox import UserMessage
from fsm_core.runtime._node import Node
from fsm_core.runtime._session import Session

__all__ = ["Dormant", "Ledger"]


@dataclass(frozen=True, slots=True)
class Dormant:
    """A settled continuable child: enough to resume it cold on its session."""

    parent_agent: Agent
    session: Session


@final
class Ledger:
    """The registry's bookkeeping. ``host_agent`` names the live host-owned agent of an id."""

    def __init__(self, host_agent: Callable[[str], Agent | None]) -> None:
        self._host_agent = host_agent
        self.resident: dict[str, Node] = {}
        """Convergence step 1: the activations deliveries find, by id."""
        self.slots: set[str] = set()
        """Step 2: the pool slots held."""
        self.owners: dict[str, str] = {}
        """Step 4: child id -> parent agent id, held from admission until ownership release."""
        self.roots: dict[Agent, dict[str, None]] = {}
        """Host-owned parent agent -> the ids of the roots it owns (ordered); no entry for a
        parent owning none, so the map never outgrows the live roots. Keyed by the agent, not
        its id: a later agent of the same name is another parent."""
        self.dormant: dict[str, Dormant] = {}
        """Settled continuable children a followup resumes cold, by id. An entry goes when
        the child is resumed, or when its parent agent is disposed: nobody could resume it
        then (the parent is no live parent), so the map never outgrows the live parents."""
        self.below: dict[Agent, dict[str, None]] = {}
        """Parent agent -> the ids of its dormant children, to forget them with it."""
        self.drained_hosts: dict[Agent, None] = {}
        """The host-owned agents drain_descendants closed admission below, until each is
        disposed (a later agent of the same name is another parent)."""
        self._notices = 0

    def parent_kind(self, parent: object) -> tuple[str, Node | None]:
        """What ``parent`` is, as the door's ``parent`` type says, and its activation if it
        is the exact agent of a resident one. Facts only: the door decides."""
        if not isinstance(parent, Agent):
            return "stale", None
        node = self.resident.get(parent.id)
        if node is not None and node.agent is parent:
            return "activation", node
        if self._host_agent(parent.id) is not parent or parent.phase == "disposed":
            return "stale", None
        if parent.phase == "disposing":
            return "host_disposing", None
        return ("host_drained" if parent in self.drained_hosts else "host"), None

    def roots_of(self, host: Agent) -> list[Node]:
        """The resident roots ``host`` owns, in admission order."""
        return [self.resident[root] for root in self.roots.get(host, ())]

    def children_of(self, node: Node) -> list[Node]:
        """The resident children ``node`` owns, in admission order."""
        return [c for c in map(self.resident.get, node.owned) if c is not None]

    # --- a node's effects (the _node.Ledger protocol) ------------------------------------------

    def enter(self, node: Node) -> None:
        self.resident[node.id] = node
        self.slots.add(node.id)
        self.owners[node.id] = node.parent_agent.id
        if node.parent is None:
            self.roots.setdefault(node.parent_agent, {})[node.id] = None
        else:
            node.parent.owned[node.id] = None
        dormant = self.dormant.pop(node.id, None)
        if dormant is not None:
            self.below.get(dormant.parent_agent, {}).pop(node.id, None)

    def leave(self, node: Node) -> None:
        del self.resident[node.id]

    def release_slot(self, node: Node) -> None:
        if node.id not in self.slots:
            raise FsmError(f"activation {node.id}: its pool slot was already released")
        self.slots.remove(node.id)

    def detach(self, node: Node) -> None:
        if node.parent is None:
            roots = self.roots.get(node.parent_agent, {})
            roots.pop(node.id, None)
            if not roots:  # the parent's last root: its entry goes too (hosts come and go)
                self.roots.pop(node.parent_agent, None)
        else:
            del node.parent.owned[node.id]

    def disown(self, node: Node) -> None:
        del self.owners[node.id]

    def notice(self, child: Node, failed: bool) -> UserMessage:
        """``child``'s settlement notice, for its parent agent (``child.parent_agent``, the
        agent both the parent activation's ``notice_agent`` and the door's ``notice_host``
        send it to). Its text says how the child ended: ``failed`` (some boundary of its
        teardown failed), ``finished`` (its natural end: the watcher's ready verdict), or
        ``stopped`` (someone's dispose or drain).

        Its id is ``<child>:settled:<n>``, ``n`` counting the registry's notices, bumped past
        any id the parent agent holds pending: the wiring's send skips the duplicate check a
        user's send makes (:meth:`Agent.send`), so the check is made here, and a notice never
        takes the id of a message its parent holds (a user's sending that id later is refused
        as any pending id is)."""
        pending = child.parent_agent.inbox
        while True:
            self._notices += 1
            notice_id = f"{child.id}:settled:{self._notices}"
            if not pending._holds(notice_id):
                break
        how = "failed" if failed else "finished" if child.value("natural") else "stopped"
        return UserMessage(notice_id, f"subagent {child.id} {how}")

    # --- the door's effects ---------------------------------------------------------------------

    def remember(self, node: Node) -> None:
        """Keep a settled child for a cold resume below its parent agent."""
        parent = node.parent_agent
        self.dormant[node.id] = Dormant(parent, node.agent.session)
        self.below.setdefault(parent, {})[node.id] = None

    def forget_below(self, ended: Agent) -> None:
        """An agent disposing or disposed is no live parent: its dormant children can never
        resume, and the drain below it ends with it."""
        self.drained_hosts.pop(ended, None)
        for child_id in self.below.pop(ended, {}):
            dormant = self.dormant.get(child_id)
            if dormant is not None and dormant.parent_agent is ended:
                del self.dormant[child_id]

    def __repr__(self) -> str:
        return f"<Ledger resident={len(self.resident)} slots={len(self.slots)}>"
