"""Seed 004's activation registry, ``rt.subagents``: continuable children and their teardown.

:class:`Subagents` is the public face; the plumbing is split by what it hosts, each part in a
module of its own beside its table, talking through small protocols:

- ``_node.py``: one activation (specs/activation.toml hosted, its effects, its teardown);
- ``_door.py``: the registry's door (specs/admission.toml hosted, its effects);
- ``_wires.py``: every call between instances, made as specs/wiring.toml declares it;
- ``_watcher.py``: the settlement watcher, one task per activation;
- ``_ledger.py``: the bookkeeping (resident, slots, ownership, dormant children).

Two directions, as the seed says. Cancel runs top-down: ``dispose`` fires the table's
``dispose`` on the activation, whose row cancels its agent with ``PARENT`` and
``keep_inbox=True``, then fires ``dispose`` on every owned child, each in the same call, so the
whole subtree is cancelled before the first await. Dispose converges bottom-up
(``Node._finish``), and its last row runs the six convergence steps.

``dispose`` is memoized: the table's first ``dispose`` closes the inbox (``close_inbox``
starts the one teardown task) and every later ``dispose`` or ``drain`` is ignored by the
table, and a ``drain_child`` by the child's own parent joins it, so every caller awaits that
one teardown.

A teardown cannot be awaited from inside what it tears down: the activation's own turn, or any
turn below it (a child's, a spawned child's), would wait for itself. Every entry asks who
initiated the call (``rt.agents.current()``) and refuses that with
:class:`~fsm_core.UsageError` inside the call, before anything is torn down; awaiting a
:class:`Pending` from there later is refused as well.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Iterable
from functools import partial
from typing import TypeVar, cast, final

from fsm_core._errors import FsmError, Rejected, UsageError, echo
from fsm_core.runtime._activation import (
    Activation,
    ActivationTeardownFailed,
    SubagentError,
    SubagentResult,
    SubagentSpec,
)
from fsm_core.runtime._agent import Agent
from fsm_core.runtime._core import AgentHandle
from fsm_core.runtime._door import Drain, DrainBelow, Route, Spawn, refusal
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._hosting import check_handlers
from fsm_core.runtime._inbox import UserMessage
from fsm_core.runtime._ledger import Ledger
from fsm_core.runtime._node import AWAITS, Admission, Delivery, Node, Tree, failures, last_outcome
from fsm_core.runtime._scope import initiating_agent
from fsm_core.runtime._session import Session
from fsm_core.runtime._signal import AbortSignal
from fsm_core.runtime._teardown import Pending, persist, reported_elsewhere
from fsm_core.runtime._watcher import Watcher
from fsm_core.runtime._wires import Wires
from fsm_core.table import Machine, Wiring

__all__ = ["Subagents"]

_T = TypeVar("_T")


@final
class Subagents:
    """The activation registry of one runtime (``rt.subagents``).

        act = await rt.subagents.start(parent, "c1", "hello")   # a continuable child
        await rt.subagents.followup("c1", UserMessage("m2", "more"))
        await rt.subagents.drain()                               # every root, then refuse

    Every teardown entry (``dispose``, the three drains, the settlement watcher) begins its
    work inside the call, before its first await, and returns an awaitable of the one
    memoized teardown of each activation it reached. Nobody need await it: each activation's
    settlement tells its failure (``subagent/settled``, :attr:`Activation.failed`, the
    parent's notice), and asyncio is given nothing to warn about.

    An activation's own turn (or a turn below it) calling an entry that tears the activation
    down is refused with :class:`~fsm_core.UsageError`, nothing torn down: awaiting the
    teardown there would wait for that turn to end.
    """

    def __init__(
        self,
        machine: Machine,
        door: Machine,
        wiring: Wiring,
        *,
        events: EventBus,
        create: Callable[[str, Session], AgentHandle],
        host_agent: Callable[[str], Agent | None],
        in_use: Callable[[str], bool],
    ) -> None:
        check_handlers(Node, machine)
        declared = {(w.event, w.until_text) for w in wiring.awaits if w.machine == "activation"}
        if declared != AWAITS:
            raise FsmError(
                f"the runtime and {wiring.file} disagree on what the activation awaits: the "
                f"runtime awaits {sorted(AWAITS)}, the wiring {sorted(declared)}"
            )
        self._in_use = in_use
        self._ledger = ledger = Ledger(host_agent)
        self._wires = wires = Wires(wiring, ledger, door, create)
        self._door = wires.door
        """The registry's door (specs/admission.toml): registry-wide drains, live parents."""
        self._watcher = watcher = Watcher(ledger.resident)
        self._tree = Tree(machine, events, create, ledger, wires, watcher.start)
        self._resident = ledger.resident
        self._followups = 0
        self._spawners: dict[Agent, Agent] = {}
        """A child :meth:`spawn` runs -> the agent whose tool spawned it, until it is disposed:
        the lineage a teardown covering the spawner covers too."""
        events.on("inbox/inserted", watcher.poke)
        events.on("inbox/discarded", watcher.poke)
        events.on("agent/disposing", self._door.parent_disposing)
        events.on("agent/disposed", self._door.parent_gone)

    # --- reading ----------------------------------------------------------------------------

    def get(self, child_id: str) -> Activation | None:
        """The resident activation ``child_id``, if any."""
        _check_str("get()", "a child id", child_id)
        node = self._resident.get(child_id)
        return None if node is None else node.public

    @property
    def resident(self) -> tuple[str, ...]:
        """The ids of the resident activations, in admission order."""
        return tuple(self._resident)

    @property
    def slots_held(self) -> int:
        """How many pool slots are held (one per activation until convergence step 2)."""
        return len(self._ledger.slots)

    def owner(self, child_id: str) -> str | None:
        """The id of the agent owning ``child_id`` until convergence step 4, or None."""
        _check_str("owner()", "a child id", child_id)
        return self._ledger.owners.get(child_id)

    @property
    def draining(self) -> bool:
        """True iff ``drain()`` has closed admission registry-wide."""
        return self._door.state == "drained"

    @property
    def dormant(self) -> tuple[str, ...]:
        """The ids of the settled continuable children a ``followup`` would resume cold."""
        return tuple(self._ledger.dormant)

    def holds(self, agent_id: str) -> bool:
        """True iff ``agent_id`` is an activation's id until its ownership is released."""
        _check_str("holds()", "an agent id", agent_id)
        return agent_id in self._ledger.owners

    # --- admission --------------------------------------------------------------------------

    async def start(
        self,
        parent: Agent,
        child_id: str,
        prompt: str | UserMessage,
        *,
        session: Session | None = None,
    ) -> Activation:
        """Admit a continuable child ``child_id`` of ``parent`` and give it ``prompt``.

        ``parent`` is a live agent of this runtime: host-owned, or the agent of a resident
        activation. Raises :class:`SubagentError` ``DRAINING`` after a drain covering
        ``parent``, ``UNAUTHORIZED`` for a parent that is not live here, and
        :class:`~fsm_core.UsageError` for an id in use, a bad prompt or session.
        """
        message = self._message(prompt, f"{child_id}:prompt")
        if session is not None and not isinstance(session, Session):
            raise UsageError(f"a child's session is a Session, not {echo(session)}")
        return self._admit(parent, child_id, session or Session(), message).public

    def _message(self, prompt: str | UserMessage, default_id: str) -> UserMessage:
        """The message ``prompt`` gives, checked as the child's inbox will check it: a
        message it would refuse must be refused before anything is admitted."""
        if isinstance(prompt, str):
            return UserMessage(default_id, prompt)
        if type(prompt) is not UserMessage:
            raise UsageError(f"a prompt is a str or a UserMessage, not {echo(prompt)}")
        for field in ("id", "text"):
            value = getattr(prompt, field)
            if type(value) is not str:
                raise UsageError(f"a message's {field} must be a str, not {type(value).__name__}")
        return prompt

    def _admit(self, parent: Agent, child_id: str, session: Session, message: UserMessage) -> Node:
        """Ask the door (specs/admission.toml) whether ``parent`` may admit now, then
        admit: through the parent activation's own ``admit`` row (the wiring's
        ``door.admits_below``), or as a root; the new agent gets ``message`` as the wiring
        says (``admit.prompts_child``, ``door.prompts_root``)."""
        _check_id(child_id)
        kind, parent_node = self._ledger.parent_kind(parent)
        route = Route()
        self._door.ask("admit", route, parent, parent=kind)
        if child_id in self._ledger.owners or self._in_use(child_id):
            raise UsageError(f"an agent named {echo(child_id)} already exists")
        if session._owner is not None:
            raise UsageError(f"agent {session._owner!r} already records into that session")
        if route.value == "root":
            node = self._tree.plant(child_id, parent, None, session)
            self._wires.connect("admission", "admit_root", (), None, new=node, context=message)
        else:
            assert route.value == "below" and parent_node is not None
            admission = Admission(child_id, session, message)
            try:
                self._wires.connect("admission", "admit_below", (), None, named=parent_node,
                                    context=admission)  # fmt: skip
            except Rejected as refused:
                raise refusal(refused, parent, parent_node.id) from None
            assert admission.node is not None
            node = admission.node
        return node

    def _live_parent(self, parent: Agent) -> Node | None:
        """The activation whose agent is exactly ``parent``, None for a host-owned parent;
        the door refuses anything else ``UNAUTHORIZED``."""
        kind, node = self._ledger.parent_kind(parent)
        self._door.ask("name_parent", None, parent, parent=kind)
        return node

    # --- delivery ---------------------------------------------------------------------------

    async def followup(self, child_id: str, message: str | UserMessage) -> Activation:
        """Deliver ``message`` to the continuable child ``child_id``, waking it.

        A str is sent as a :class:`UserMessage` with the id ``<child_id>:followup:<n>``,
        ``n`` counting the registry's followups.

        A child that settled (or loses the race with its natural-end disposal) is resumed
        cold: a fresh activation on the same session, under the same parent, gets the
        message. Raises :class:`SubagentError` ``ACTIVATION_CLOSING`` while someone's
        dispose or drain tears the child down, ``DRAINING`` after a drain, and
        :class:`~fsm_core.UsageError` for an id that is neither resident nor a settled child
        of a live parent (never a continuable child here, or its parent agent is disposed, or
        is a host-owned agent disposing, whichever side of that disposal the child settled on).
        """
        _check_str("followup()", "a child id", child_id)
        self._followups += 1
        message = self._message(message, f"{child_id}:followup:{self._followups}")
        while True:
            node = self._resident.get(child_id)
            if node is None:
                return self._resume(child_id, message)
            delivery = Delivery(message)
            try:
                node.fire("deliver", delivery, drained=self.draining)
            except Rejected as refused:
                raise refusal(refused, None, child_id) from None
            if not delivery.resume:
                return node.public
            assert node.closing is not None
            await asyncio.wait([node.closing])

    def _resume(self, child_id: str, message: UserMessage) -> Activation:
        dormant = self._ledger.dormant.get(child_id)
        if dormant is None:
            raise UsageError(f"no continuable subagent is named {echo(child_id)}")
        return self._admit(dormant.parent_agent, child_id, dormant.session, message).public

    # --- teardown entries -------------------------------------------------------------------

    def dispose(self, activation: Activation) -> Pending:
        """Tear ``activation`` down, child-first; memoized: every caller awaits one teardown.

        The subtree is cancelled inside this call. Awaiting raises
        :class:`ActivationTeardownFailed` if some boundary failed, after the activation
        settled. Raises :class:`~fsm_core.UsageError`, tearing nothing down, from the turn of
        ``activation``'s own agent or of an agent below it: that teardown waits for the turn.
        """
        node = activation._node if type(activation) is Activation else None
        if not isinstance(node, Node) or node.tree is not self._tree:
            raise UsageError(
                f"dispose() takes an Activation of this runtime, not {echo(activation)}"
            )
        covers = partial(operator.is_, node)
        self._refuse_inside("dispose()", covers, begun=False)
        return self._pending(asyncio.shield(self._dispose(node, False)), "dispose()", covers)

    def _dispose(self, node: Node, flushed: bool) -> asyncio.Future[None]:
        node.fire("dispose", final_state_flushed=flushed, drain=False)
        assert node.closing is not None
        return node.closing

    def drain(self) -> Pending:
        """Close admission registry-wide, then tear every root down; await them all.

        Every later admission is refused with ``DRAINING``. Failures are raised together
        as one :class:`ActivationTeardownFailed` naming each. Raises
        :class:`~fsm_core.UsageError`, draining nothing, from the turn of an activation's agent
        or of an agent below one: the drain waits for that turn.
        """
        self._refuse_inside("drain()", _everything, begun=False)
        return self._drain()

    def _drain(self) -> Pending:
        drain = Drain()
        self._door.fire("drain", drain)
        closing = [n.closing for n in self._resident.values() if n.closing is not None]
        drained = self._pending(
            asyncio.shield(self._join("the drain", closing)), "drain()", _everything
        )
        if drain.escaped:
            raise drain.escaped[0]
        return drained

    def drain_descendants(self, parents: Iterable[Agent]) -> Pending:
        """Tear down every continuable descendant of the exact live ``parents``.

        Every parent is named first: ``UNAUTHORIZED``, draining nothing, when some parent is
        not live here; :class:`~fsm_core.UsageError`, draining nothing, from the turn of a
        descendant's agent or of an agent below one. Then the door drains below each in turn,
        admission below it closing first; a parent a listener disposed meanwhile drains
        nothing, and its ``UNAUTHORIZED`` is raised once the others' drains began.
        """
        given: object = parents  # typed as the caller should pass it, checked as it may not
        if isinstance(given, str | Agent) or not isinstance(given, Iterable):
            raise UsageError(f"parents are a collection of Agent, not {echo(given)}")
        parents = list(parents)
        for parent in parents:
            self._live_parent(parent)
        named = frozenset(parents)

        def covers(node: Node) -> bool:
            return node.parent_agent in named

        self._refuse_inside("drain_descendants()", covers, begun=False)
        below: list[Node] = []
        escaped = _each(parents, partial(self._drain_below, below))
        closing = [c.closing for c in below if c.closing is not None]
        drained = self._pending(
            asyncio.shield(self._join("the drain", closing)), "drain_descendants()", covers
        )
        if escaped is not None:
            raise escaped
        return drained

    def _drain_below(self, below: list[Node], parent: Agent) -> None:
        """The door's ``drain_below`` for one named parent: it says how, and its effects
        add the activations whose teardown the drain awaits to ``below``."""
        kind, node = self._ledger.parent_kind(parent)
        drain = DrainBelow(parent, node, below)
        self._door.ask("drain_below", drain, parent, parent=kind)
        if drain.escaped is not None:
            raise drain.escaped

    def drain_children(self, parent: Agent, child_ids: Iterable[str]) -> Pending:
        """Tear down the named direct children of the exact live ``parent``.

        Lineage is checked for every id before anything is torn down: ``UNAUTHORIZED`` if
        ``parent`` is not live or some named child is not its direct child. Ids of no
        resident activation are skipped. Raises :class:`~fsm_core.UsageError`, draining
        nothing, from the turn of a named child's agent or of an agent below one: the drain
        waits for that turn.
        """
        self._live_parent(parent)
        given: object = child_ids  # typed as the caller should pass it, checked as it may not
        if isinstance(given, str) or not isinstance(given, Iterable):
            raise UsageError(f"child ids are a collection of str, not {echo(given)}")
        child_ids = list(child_ids)
        if not all(type(i) is str for i in child_ids):
            raise UsageError(f"child ids are a collection of str, not {echo(child_ids)}")
        named = [self._resident[i] for i in dict.fromkeys(child_ids) if i in self._resident]
        for node in named:
            if node.parent_agent is not parent:
                try:
                    node.fire("drain_child", lineage=False)
                except Rejected as refused:
                    raise SubagentError(
                        "UNAUTHORIZED", f"{parent.id!r} cannot drain {node.id!r}: {refused}"
                    ) from None
        covers = frozenset(named).__contains__
        self._refuse_inside("drain_children()", covers, begun=False)
        escaped = _each(named, lambda node: node.fire("drain_child", lineage=True))
        closing = [n.closing for n in named if n.closing is not None]
        drained = self._pending(
            asyncio.shield(self._join("the drain", closing)), "drain_children()", covers
        )
        if escaped is not None:
            raise escaped
        return drained

    def _pending(
        self, teardown: asyncio.Future[None], call: str, covers: Callable[[Node], bool]
    ) -> Pending:
        """The :class:`Pending` of ``call``'s (shielded) ``teardown``: awaiting it from inside
        what ``covers`` is refused, and a failure nobody awaits is no asyncio warning (each
        activation's settlement tells its own)."""
        refuse = partial(self._refuse_inside, call, covers, begun=True)
        return Pending(reported_elsewhere(teardown), refuse)

    def _refuse_inside(self, call: str, covers: Callable[[Node], bool], *, begun: bool) -> None:
        """Raise :class:`~fsm_core.UsageError` when the initiating agent (``rt.agents.
        current()``) is the agent of an activation ``covers`` says ``call`` tears down, or
        descends from one (a child activation's, a spawned child's): ``call``'s teardown
        awaits that activation's idle, which waits for the initiator's turn to end."""
        initiator = initiating_agent()
        node = self._covering(initiator, covers)
        if node is None:
            return
        assert initiator is not None
        what = (
            f"its activation {echo(node.id)}"
            if node.agent is initiator
            else f"activation {echo(node.id)} above it"
        )
        after = "the teardown has begun" if begun else "nothing was torn down"
        raise UsageError(
            f"agent {echo(initiator.id)}: its own turn cannot await {call}, which tears down "
            f"{what} and so waits for that turn to end; {after}, return from the turn"
        )

    def _covering(self, agent: Agent | None, covers: Callable[[Node], bool]) -> Node | None:
        """The first activation ``covers`` names among ``agent``'s own and its ancestors'
        (the activations above it, the spawners of the spawned children on the way)."""
        seen: set[Agent] = set()
        while agent is not None and agent not in seen:
            seen.add(agent)
            node = self._resident.get(agent.id)
            if node is not None and node.agent is agent:
                if covers(node):
                    return node
                agent = node.parent_agent
            else:
                agent = self._spawners.get(agent)
        return None

    async def _join(self, what: str, closing: list[asyncio.Future[None]]) -> None:
        """Await every teardown in ``closing``; raise their failures as one."""
        while pending := [f for f in closing if not f.done()]:
            await asyncio.wait(pending)
        failed = failures(closing)
        if failed:
            raise ActivationTeardownFailed(what, failed)

    def _close(self) -> asyncio.Future[None]:
        """The runtime's final switch: drain, inside the caller's call; also await every
        teardown already running. Never refused: ``aclose()`` refuses its own way."""
        drained = self._drain()._future
        everything = [n.closing for n in self._resident.values() if n.closing is not None]
        return persist(lambda: self._join("the runtime's close", [drained, *everything]), "drain")

    # --- spawn and fork ---------------------------------------------------------------------

    async def spawn(self, parent_signal: AbortSignal, spec: SubagentSpec) -> SubagentResult:
        """From a tool: run a fresh child ``spec.child_id`` on ``spec.prompt`` to its end.

            async def execute(self, args, signal):          # a tool holding the runtime
                spec = SubagentSpec(args["id"], args["prompt"])
                return (await self.rt.subagents.spawn(signal, spec)).text

        This is seed 000's subagent seam: "a child driver shadows the parent initiator while
        its parent request signal still travels through the subagent seam". Pass the signal
        your tool was given, the parent turn's. The child's driver is its own initiator
        (``rt.agents.current()`` in its turns is the child) and its turns get their own
        signals; aborting the parent's turn cancels the child with ``PARENT``, the child's
        turn ends ``aborted``, and this raises :class:`~fsm_core.Aborted` with the parent's
        reason once the child is disposed. Raises ``DRAINING`` after ``drain()``, and
        :class:`~fsm_core.UsageError` outside a tool of a live agent.
        """
        return await self._spawn_child(parent_signal, spec, Session())

    async def fork(self, parent_signal: AbortSignal, spec: SubagentSpec) -> SubagentResult:
        """As :meth:`spawn`, but the child starts from a copy of the parent's session.

        The same subagent seam: the parent turn's ``parent_signal`` travels through it, and
        its abort cancels the child with ``PARENT``.
        """
        parent = self._initiator("fork")
        return await self._spawn_child(parent_signal, spec, Session.seed(parent.session.events))

    def _initiator(self, call: str) -> Agent:
        parent = initiating_agent()
        if parent is None:
            raise UsageError(f"{call}() runs from a tool of a live agent, which is its parent")
        return parent

    async def _spawn_child(
        self, parent_signal: AbortSignal, spec: SubagentSpec, session: Session
    ) -> SubagentResult:
        parent = self._initiator("spawn")
        if type(spec) is not SubagentSpec:
            raise UsageError(f"spawn() and fork() take a SubagentSpec, not {echo(spec)}")
        _check_id(spec.child_id)
        if type(spec.prompt) is not str:
            raise UsageError(f"a prompt is a str, not {echo(spec.prompt)}")
        if not isinstance(parent_signal, AbortSignal):
            raise UsageError(
                f"spawn() takes the parent turn's AbortSignal, not {echo(parent_signal)}"
            )
        if spec.child_id in self._ledger.owners or self._in_use(spec.child_id):
            raise UsageError(f"an agent named {echo(spec.child_id)} already exists")
        run = Spawn(spec.child_id, spec.prompt, session, parent_signal)
        try:
            self._door.ask("spawn", run, None, aborted=parent_signal.aborted)
            assert run.handle is not None
            self._spawners[run.handle.agent] = parent
            await run.handle.agent.when_idle()
        finally:
            run.off()
            if run.handle is not None:
                try:
                    await run.handle.dispose()
                finally:
                    self._spawners.pop(run.handle.agent, None)
        parent_signal.raise_if_aborted()
        return SubagentResult(spec.child_id, last_outcome(session), _last_text(session))

    def __repr__(self) -> str:
        state = " draining" if self.draining else ""
        return f"<Subagents resident={len(self._resident)} slots={len(self._ledger.slots)}{state}>"


def _check_str(call: str, what: str, value: object) -> None:
    if type(value) is not str:
        raise UsageError(f"{call} takes {what}, a str, not {echo(value)}")


def _everything(node: Node) -> bool:
    """A registry-wide drain tears every activation down."""
    return True


def _check_id(child_id: object) -> None:
    if type(child_id) is not str or not 0 < len(child_id) <= 200 or not child_id.isprintable():
        raise UsageError(f"a child id is 1 to 200 printable characters, not {echo(child_id)}")


def _each(items: Iterable[_T], begin: Callable[[_T], object]) -> BaseException | None:
    """``begin`` every item, even when one raises (a listener's BaseException held until the
    activations' outermost fire returned): a drain begins every teardown it names inside the call.
    Returns the first exception, for the caller to raise once its work has begun."""
    escaped: BaseException | None = None
    for item in items:
        try:
            begin(item)
        except BaseException as error:
            escaped = escaped or error
    return escaped


def _last_text(session: Session) -> str:
    for event in reversed(session.events):
        if event.type == "assistant/message":
            return cast(str, event.data["text"])
    return ""
