"""How the registry's instances meet: every call specs/wiring.toml declares, made as declared.

:class:`Wires` is the registry's dispatcher. An effect of one instance (an activation's, the
door's, an agent's disposal seen on the bus) that the wiring names is passed to
:meth:`Wires.connect`, which makes each call the wiring declares for it, in file order, on each
instance its target names (:meth:`Wires._targets`), with the arguments and facts the wiring
says. That is all the Python a connection has: no call between instances is written by hand.

It owns the :class:`~fsm_core.runtime._hosting.Scope` every activation of the registry fires
in, and that scope's ``settle``: the ``dispose`` of each child a row's ``dispose_children``
names fires once that row returned, still inside the caller's call, level by level, so a
subtree of any depth is cancelled before the first await without a Python frame per
generation. The row ends with that effect, so no later effect of it could tell the difference.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import cast, final

from fsm_core._errors import FsmError, Rejected
from fsm_core.runtime._agent import Agent
from fsm_core.runtime._causes import CAUSES
from fsm_core.runtime._core import AgentContext, AgentCore, AgentHandle
from fsm_core.runtime._door import Door, DoorContext, DrainBelow
from fsm_core.runtime._hosting import Scope
from fsm_core.runtime._ledger import Ledger
from fsm_core.runtime._node import Node, NodeContext
from fsm_core.runtime._session import Session
from fsm_core.table import Machine, WiredCall, Wiring
from fsm_core.table._expr import Value

__all__ = ["Wires"]

_Target = Node | AgentHandle | Agent | Door


@final
class Wires:
    """The dispatcher of one registry: specs/wiring.toml's calls between its instances.

    It builds the registry's :class:`Door` (a target of the wiring like any instance).
    """

    def __init__(
        self,
        wiring: Wiring,
        ledger: Ledger,
        door: Machine,
        create: Callable[[str, Session], AgentHandle],
    ) -> None:
        self._wiring = wiring
        self._ledger = ledger
        self.scope = Scope(self._settle)
        """The scope every activation of the registry fires in."""
        self.door = Door(door, ledger, self, create)
        self._cascade: deque[tuple[Node, Node, bool, WiredCall, tuple[Value, ...]]] = deque()
        """Children a row's ``dispose_children`` reaches (the parent, the child, whether the
        parent joins it, the wiring's call and the effect's arguments), fired once that row
        returns."""

    def queue_children(
        self, node: Node, effect: str, values: tuple[Value, ...], *, join: bool
    ) -> None:
        """The wiring's calls of ``effect`` (``dispose_children``, ``cover_children``) on every
        owned child of ``node``, made once the outermost row returned (:meth:`_settle`); with
        ``join``, the parent's teardown joins each child's."""
        for call in self._wiring.fired_by("activation", effect):
            for child in self._targets(call, node):
                assert isinstance(child, Node)
                self._cascade.append((node, child, join, call, values))

    def _settle(self) -> None:
        """The scope's outermost fire returned: dispose the queued children, level by level
        (a fire made here is part of that outermost one)."""
        while self._cascade:
            parent, child, join, call, values = self._cascade.popleft()
            self._call(call, child, values, {}, None)
            if join and child.closing is not None:
                parent.child_teardowns.append(child.closing)

    def connect(
        self,
        machine: str,
        effect: str,
        values: tuple[Value, ...],
        source: Node | None,
        *,
        context: object = None,
        new: Node | AgentHandle | None = None,
        named: Node | None = None,
        host: Agent | None = None,
        each: bool = False,
    ) -> BaseException | None:
        """Make every call specs/wiring.toml declares for ``machine.effect``, in file order, on
        each instance its target names (:meth:`_targets`), with the fire's ``context``.

        A refusal of a ``refused = "caller"`` call propagates: the caller's call is refused
        whole. One of a ``never`` call is a bug between the tables: it is held, like a
        listener's BaseException, and raised once the outermost row has run to its end, so
        the row converges either way. With ``each``, where one target's fire raises (a
        listener's BaseException), the others are still reached, and the first is returned
        for the caller to raise once its work has begun (a drain begins every teardown it
        names); without, it propagates at once."""
        escaped: BaseException | None = None
        for call in self._wiring.fired_by(machine, effect):
            for target in self._targets(call, source, new=new, named=named, host=host):
                try:
                    self._call(call, target, values, self._facts(call, source), context)
                except Rejected as refused:
                    if call.refused == "caller":
                        raise
                    about = f"activation {source.id}" if source is not None else "the registry"
                    bug = FsmError(
                        f"{about}: a table allowed the wiring's call {call.id}, but "
                        f"{_named(target)} refused it: {refused}"
                    )
                    self.scope.held = self.scope.held or bug
                except BaseException as error:
                    if not each:
                        raise
                    escaped = escaped or error
        return escaped

    def agent_to_door(self, effect: str, context: DrainBelow, kind: str | None) -> None:
        """An agent's ``effect`` (its disposal, seen on the bus) reaches the door as the
        wiring's calls say; ``kind`` is the ``parent`` fact, what the agent is now."""
        for call in self._wiring.fired_by("agent", effect):
            facts: dict[str, Value] = {} if kind is None else {"parent": kind}
            self.door.fire(call.event, context, **call.keywords((), facts))

    def _targets(
        self,
        call: WiredCall,
        source: Node | None,
        *,
        new: Node | AgentHandle | None = None,
        named: Node | None = None,
        host: Agent | None = None,
    ) -> list[_Target]:
        """The instances ``call.target`` names: from the activation ``source`` performing the
        effect, or from what the door's call named (``named``, ``host``), or the instance the
        effect just created (``new``). This is all the Python a connection has."""
        t = call.target
        if call.machine == "agent":
            return [self.door]
        if call.machine == "admission":
            if t == "roots":
                return [n for n in self._ledger.resident.values() if n.parent is None]
            if t == "host_roots":
                assert host is not None
                return list(self._ledger.roots_of(host))
            if t == "named":
                assert named is not None
                return [named]
            if t == "host":
                assert source is not None  # the root whose notice it is
                return [source.parent_agent]
            assert t == "new_agent" and new is not None
            return [new.handle if isinstance(new, Node) else new]
        assert source is not None
        root = source.parent is None
        if (call.only == "root" and not root) or (call.only == "child" and root):
            return []
        if t == "self":
            return [source]
        if t == "agent":
            return [source.handle]
        if t == "children":
            return list(self._ledger.children_of(source))
        if t == "parent":
            assert source.parent is not None
            return [source.parent]
        if t == "door":
            return [self.door]
        assert t == "new_agent" and isinstance(new, Node)
        return [new.handle]

    def _facts(self, call: WiredCall, source: Node | None) -> dict[str, Value]:
        """The facts ``call``'s arguments read: ``last`` (no other owned child of the parent
        is unsettled: the child already left ``owned``), ``parent`` (what the source's parent
        agent is now, as the door's type says)."""
        facts: dict[str, Value] = {}
        if source is not None and "last" in call.facts:
            assert source.parent is not None
            facts["last"] = not source.parent.owned
        if source is not None and "parent" in call.facts:
            facts["parent"] = self._ledger.parent_kind(source.parent_agent)[0]
        return facts

    def _call(
        self,
        call: WiredCall,
        target: _Target,
        values: tuple[Value, ...],
        facts: Mapping[str, Value],
        context: object,
    ) -> None:
        """Fire ``call``'s event on ``target`` with ``context``, as the wiring declares it (the
        declaration, not this code, says which context each call carries). An agent's
        ``dispose`` is its handle's ``dispose()`` (the event, then the agent's own reverse
        teardown); its ``cancel`` takes the cause the ``cause`` argument names."""
        args = call.keywords(values, facts)
        if isinstance(target, Node):
            target.fire(call.event, cast(NodeContext, context), **args)
        elif isinstance(target, Door):
            target.fire(call.event, cast(DoorContext, context), **args)
        else:
            handle = target if isinstance(target, AgentHandle) else None
            agent = target.agent if isinstance(target, AgentHandle) else target
            if call.event == "dispose" and handle is not None:
                node = self._ledger.resident[agent.id]
                try:
                    handle._begin()  # a listener's BaseException escapes once it has begun
                finally:
                    node.handle_disposal = handle.dispose()  # the teardown awaits it anyway
                return
            if call.event == "cancel":
                context = CAUSES[str(args["cause"])]
            cast(AgentCore, agent._core).fire_wired(call.event, cast(AgentContext, context), args)


def _named(target: object) -> str:
    """How a refusal names the instance that refused a wiring's call."""
    if isinstance(target, Node):
        return f"activation {target.id!r}"
    if isinstance(target, AgentHandle | Agent):
        agent = target.agent if isinstance(target, AgentHandle) else target
        return repr(agent.id)
    return "the registry's door"
