"""Seed 004's activation registry, ``rt.subagents``: continuable children and their teardown.

Each activation's control state is a :class:`~fsm_core.HostedMachine` of
specs/activation.toml, and the registry changes it only by firing that table's events; the
effects the rows list run here, in the table's order (:meth:`Subagents._perform`), as the
agent's core runs the agent table's. What an event is about that the table does not model (the
child an ``admit`` creates, the verdict a ``watch`` returns) travels as the fire's context.

Two directions, as the seed says. Cancel runs top-down: ``dispose`` fires the table's
``dispose`` on the activation, whose row cancels its agent with ``PARENT`` and
``keep_inbox=True``, then fires ``dispose`` on every owned child, each in the same call, so the
whole subtree is cancelled before the first await. Dispose converges bottom-up
(:meth:`Subagents._finish`): await the children (each failure caught apart), the agent's idle,
the final flush, the handle's disposal; then the six convergence steps run in one row: leave
the registry, release the pool slot, notify the parent (addressed directly), release ownership,
settle, rethrow the aggregated failure.

``dispose`` is memoized: the table's first ``dispose`` closes the inbox (``close_inbox``
starts the one teardown task) and every later ``dispose`` or ``drain`` is ignored by the
table, and a ``drain_child`` by the child's own parent joins it, so every caller awaits that
one teardown.

What is registry-wide rather than one activation's (a drain of the whole registry, or of the
roots below a host-owned parent, which no activation represents, whether a named parent is
live at all, whether a settled child is remembered for a cold resume, whether a root's notice
has anyone to reach, which roots a host-owned agent's disposal tears down, and whether a
spawned child wakes) is decided by the registry's door, a
:class:`~fsm_core.HostedMachine` of specs/admission.toml; the registry tells it what the named
parent is, as it tells an activation's ``drain_child`` the lineage, and performs its effects
(:meth:`Subagents._perform_door`) with the fire's context, as it does an activation's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Literal, TypeVar, cast, final

from fsm_core._errors import FsmError, Rejected, UsageError, echo
from fsm_core.host import HostedMachine
from fsm_core.runtime._activation import (
    Activation,
    ActivationSettled,
    ActivationTeardownFailed,
    SubagentCode,
    SubagentError,
    SubagentResult,
    SubagentSpec,
    TeardownFailure,
    Terminal,
)
from fsm_core.runtime._agent import Agent
from fsm_core.runtime._causes import CAUSES, PARENT
from fsm_core.runtime._core import AgentCore, AgentHandle, _raise_if_cancelling
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._inbox import UserMessage
from fsm_core.runtime._payloads import (
    DisposalEnded,
    DisposalStarted,
    MessageDiscarded,
    MessageInserted,
)
from fsm_core.runtime._scope import initiating_agent
from fsm_core.runtime._session import Session
from fsm_core.runtime._signal import AbortSignal
from fsm_core.runtime._teardown import Pending, persist
from fsm_core.table import Effect, Machine, WiredCall, Wiring
from fsm_core.table._expr import Value

__all__ = ["Subagents"]

log = logging.getLogger("fsm_core.runtime")

_T = TypeVar("_T")

_Boundary = Literal["final flush", "handle dispose"]


def _draining_below(parent: str) -> str:
    return (
        f"continuable subagents below parent {parent!r} are draining; "
        "the operation was not admitted"
    )


@dataclass(slots=True)
class _Admission:
    """The context of an ``admit`` fire: the child to create with its first message, and the
    node once created."""

    child_id: str
    session: Session
    message: UserMessage
    node: _Node | None = None


@dataclass(slots=True)
class _Route:
    """The context of the door's ``admit``: where its row sends the child."""

    value: str = ""


@dataclass(slots=True)
class _DrainBelow:
    """The context of the door's ``drain_below`` (and of ``parent_disposing`` and
    ``parent_disposed``): the named parent, its activation if it has one, and the
    activations the drain awaits (its effects add them)."""

    parent: Agent
    node: _Node | None
    below: list[_Node]
    escaped: BaseException | None = None
    """The first listener's BaseException a teardown it began raised, raised after the row."""


@dataclass(slots=True)
class _Spawn:
    """The context of the door's ``spawn``: the child to run, and its handle once created."""

    child_id: str
    prompt: str
    session: Session
    signal: AbortSignal
    handle: AgentHandle | None = None
    off: Callable[[], None] = lambda: None
    """Removes the listener cancelling the child when the parent turn's signal aborts."""


@dataclass(slots=True)
class _Delivery:
    """The context of a ``deliver`` fire: the message, and whether the row said to resume
    it cold once the running teardown settled."""

    message: UserMessage
    resume: bool = False


@dataclass(slots=True)
class _Verdict:
    """The context of a ``watch`` fire: the verdict its row gives."""

    value: str = ""


@final
class _Node:
    """One activation's plumbing: its hosted table, agent handle and teardown bookkeeping."""

    def __init__(
        self,
        registry: Subagents,
        child_id: str,
        parent_agent: Agent,
        parent: _Node | None,
        handle: AgentHandle,
    ) -> None:
        self.id = child_id
        self.registry = registry
        self.parent_agent = parent_agent
        self.parent = parent
        """The parent's activation, or None for a root (its parent is host-owned)."""
        self.handle = handle
        self.agent = handle.agent
        self.control = HostedMachine(registry._table, perform=registry._performer(self))
        self.public = Activation(self)
        # Invariant: owned is non-empty iff the table's ``children`` is true.
        self.owned: dict[str, None] = {}
        """The ids of the children it owns that have not notified their settlement (an
        ordered set: children are disposed in admission order)."""
        self.closing: asyncio.Future[None] | None = None
        """The memoized teardown; set by the table's ``close_inbox``."""
        self.child_teardowns: list[asyncio.Future[None]] = []
        """The teardowns of the children its own teardown disposed, which it joins."""
        self.flush_owed = False
        self.handle_disposal: Pending | None = None
        self.failures: list[TeardownFailure] = []
        self.rethrow = False
        self.escaped: BaseException | None = None
        """What a child's teardown raised that is no boundary failure (a listener's
        BaseException): this teardown goes on, and raises it last."""
        self.terminal: Terminal | None = None
        self.failed: bool | None = None
        self.pokes = 0
        """How many messages were inserted into or discarded from the agent's inbox (the
        watcher's pokes)."""
        self.poked = asyncio.Event()

    @property
    def stage(self) -> str:
        return self.control.state

    @property
    def table_state(self) -> Mapping[str, Value]:
        return MappingProxyType(self.control.values)

    def value(self, name: str) -> Value:
        return self.control.values[name]

    def __repr__(self) -> str:
        return f"<_Node {self.id} {self.control!r}>"


@dataclass(frozen=True, slots=True)
class _Dormant:
    """A settled continuable child: enough to resume it cold on its session."""

    parent_agent: Agent
    session: Session


@final
class Subagents:
    """The activation registry of one runtime (``rt.subagents``).

        act = await rt.subagents.start(parent, "c1", "hello")   # a continuable child
        await rt.subagents.followup("c1", UserMessage("m2", "more"))
        await rt.subagents.drain()                               # every root, then refuse

    Every teardown entry (``dispose``, the three drains, the settlement watcher) begins its
    work inside the call, before its first await, and returns an awaitable of the one
    memoized teardown of each activation it reached.
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
        self._table = machine
        missing = set(machine.table.effects) ^ self._EFFECTS
        if missing:
            raise FsmError(
                f"the runtime and {machine.table.file} disagree on effects: {sorted(missing)}"
            )
        missing = set(door.table.effects) ^ self._DOOR_EFFECTS
        if missing:
            raise FsmError(
                f"the runtime and {door.table.file} disagree on effects: {sorted(missing)}"
            )
        self._wiring = wiring
        """specs/wiring.toml: every call an effect makes on another instance is made as it
        declares it (:meth:`_connect`); the awaits are this module's (``_finish``, ``_watch``),
        checked against it here."""
        declared = {(w.event, w.until_text) for w in wiring.awaits if w.machine == "activation"}
        if declared != self._AWAITS:
            raise FsmError(
                f"the runtime and {wiring.file} disagree on what the activation awaits: the "
                f"runtime awaits {sorted(self._AWAITS)}, the wiring {sorted(declared)}"
            )
        self._door = HostedMachine(door, perform=self._perform_door)
        """The registry's door (specs/admission.toml): registry-wide drains, live parents."""
        self._events = events
        self._create = create
        self._host_agent = host_agent
        self._in_use = in_use
        self._resident: dict[str, _Node] = {}
        """Convergence step 1: the activations deliveries find, by id."""
        self._slots: set[str] = set()
        """Step 2: the pool slots held."""
        self._owners: dict[str, str] = {}
        """Step 4: child id -> parent agent id, held from admission until ownership release."""
        self._roots: dict[Agent, dict[str, None]] = {}
        """Host-owned parent agent -> the ids of the roots it owns (ordered); no entry for a
        parent owning none, so the map never outgrows the live roots. Keyed by the agent, not
        its id: a later agent of the same name is another parent."""
        self._dormant: dict[str, _Dormant] = {}
        """Settled continuable children a followup resumes cold, by id. An entry goes when
        the child is resumed, or when its parent agent is disposed: nobody could resume it
        then (the parent is no live parent), so the map never outgrows the live parents."""
        self._below: dict[Agent, dict[str, None]] = {}
        """Parent agent -> the ids of its dormant children, to forget them with it."""
        self._followups = 0
        self._drained_hosts: dict[Agent, None] = {}
        """The host-owned agents drain_descendants closed admission below, until each is
        disposed (a later agent of the same name is another parent)."""
        self._watchers: set[asyncio.Task[None]] = set()
        self._notices = 0
        self._firing = 0
        self._held: BaseException | None = None
        self._cascade: deque[tuple[_Node, _Node, bool, WiredCall, tuple[Value, ...]]] = deque()
        """Children a row's ``dispose_children`` reaches (the parent, the child, whether the
        parent joins it, the wiring's call and the effect's arguments), fired once that row
        returns."""
        self._cascading = False
        events.on("inbox/inserted", self._poke)
        events.on("inbox/discarded", self._poke)
        events.on("agent/disposing", self._parent_disposing)
        events.on("agent/disposed", self._parent_gone)

    # --- reading ----------------------------------------------------------------------------

    def get(self, child_id: str) -> Activation | None:
        """The resident activation ``child_id``, if any."""
        node = self._resident.get(child_id)
        return None if node is None else node.public

    @property
    def resident(self) -> tuple[str, ...]:
        """The ids of the resident activations, in admission order."""
        return tuple(self._resident)

    @property
    def slots_held(self) -> int:
        """How many pool slots are held (one per activation until convergence step 2)."""
        return len(self._slots)

    def owner(self, child_id: str) -> str | None:
        """The id of the agent owning ``child_id`` until convergence step 4, or None."""
        return self._owners.get(child_id)

    @property
    def draining(self) -> bool:
        """True iff ``drain()`` has closed admission registry-wide."""
        return self._door.state == "drained"

    @property
    def dormant(self) -> tuple[str, ...]:
        """The ids of the settled continuable children a ``followup`` would resume cold."""
        return tuple(self._dormant)

    def holds(self, agent_id: str) -> bool:
        """True iff ``agent_id`` is an activation's id until its ownership is released."""
        return agent_id in self._owners

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

    def _admit(self, parent: Agent, child_id: str, session: Session, message: UserMessage) -> _Node:
        """Ask the door (specs/admission.toml) whether ``parent`` may admit now, then
        admit: through the parent activation's own ``admit`` row (the wiring's
        ``door.admits_below``), or as a root; the new agent gets ``message`` as the wiring
        says (``admit.prompts_child``, ``door.prompts_root``)."""
        _check_id(child_id)
        kind, parent_node = self._parent_kind(parent)
        route = _Route()
        self._ask_door("admit", route, parent, parent=kind)
        if child_id in self._owners or self._in_use(child_id):
            raise UsageError(f"an agent named {echo(child_id)} already exists")
        if session._owner is not None:
            raise UsageError(f"agent {session._owner!r} already records into that session")
        if route.value == "root":
            node = self._new_node(child_id, parent, None, session)
            self._connect("admission", "admit_root", (), None, new=node, context=message)
        else:
            assert route.value == "below" and parent_node is not None
            admission = _Admission(child_id, session, message)
            try:
                self._connect("admission", "admit_below", (), None, named=parent_node,
                              context=admission)  # fmt: skip
            except Rejected as refused:
                raise _refusal(refused, parent, parent_node.id) from None
            assert admission.node is not None
            node = admission.node
        return node

    def _parent_kind(self, parent: object) -> tuple[str, _Node | None]:
        """What ``parent`` is, as the door's ``parent`` type says, and its activation if it
        is the exact agent of a resident one. Facts only: the door decides."""
        if not isinstance(parent, Agent):
            return "stale", None
        node = self._resident.get(parent.id)
        if node is not None and node.agent is parent:
            return "activation", node
        if self._host_agent(parent.id) is not parent or parent.phase == "disposed":
            return "stale", None
        if parent.phase == "disposing":
            return "host_disposing", None
        return ("host_drained" if parent in self._drained_hosts else "host"), None

    def _live_parent(self, parent: Agent) -> _Node | None:
        """The activation whose agent is exactly ``parent``, None for a host-owned parent;
        the door refuses anything else ``UNAUTHORIZED``."""
        kind, node = self._parent_kind(parent)
        self._ask_door("name_parent", None, parent, parent=kind)
        return node

    def _ask_door(self, event: str, context: object, parent: object, /, **args: Value) -> None:
        try:
            self._door.fire(event, context, **args)
        except Rejected as refused:
            raise _refusal(refused, parent) from None

    def _new_node(
        self, child_id: str, parent_agent: Agent, parent: _Node | None, session: Session
    ) -> _Node:
        handle = self._create(child_id, session)
        node = _Node(self, child_id, parent_agent, parent, handle)
        self._resident[child_id] = node
        self._slots.add(child_id)
        self._owners[child_id] = parent_agent.id
        if parent is None:
            self._roots.setdefault(parent_agent, {})[child_id] = None
        else:
            parent.owned[child_id] = None
        dormant = self._dormant.pop(child_id, None)
        if dormant is not None:
            self._below.get(dormant.parent_agent, {}).pop(child_id, None)
        self._start_watcher(node)  # before its first message wakes the agent
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
        self._followups += 1
        message = self._message(message, f"{child_id}:followup:{self._followups}")
        while True:
            node = self._resident.get(child_id)
            if node is None:
                return self._resume(child_id, message)
            delivery = _Delivery(message)
            try:
                self._fire(node, "deliver", delivery, drained=self.draining)
            except Rejected as refused:
                raise _refusal(refused, None, child_id) from None
            if not delivery.resume:
                return node.public
            assert node.closing is not None
            await asyncio.wait([node.closing])

    def _resume(self, child_id: str, message: UserMessage) -> Activation:
        dormant = self._dormant.get(child_id)
        if dormant is None:
            raise UsageError(f"no continuable subagent is named {echo(child_id)}")
        return self._admit(dormant.parent_agent, child_id, dormant.session, message).public

    def _parent_disposing(self, started: DisposalStarted) -> None:
        """agent/disposing, inside the dispose call: the door's ``parent_disposing``, whose
        row disposes a host-owned agent's roots (each cancelled before this returns) and
        forgets its settled children. A listener's BaseException a root's teardown raised is
        raised once every root's teardown began."""
        kind, _ = self._parent_kind(started.agent)
        drain = _DrainBelow(started.agent, None, [])
        roots = self._roots.get(started.agent, {})
        running = {r for r in roots if self._resident[r].closing is not None}
        self._agent_to_door("publish_disposing", drain, kind)
        for root in drain.below:  # nobody awaits the teardowns it began: each settlement tells
            if root.id not in running and root.closing is not None:
                root.closing.add_done_callback(partial(_read, "a teardown a host's disposal began"))
        if drain.escaped is not None:
            raise drain.escaped

    def _parent_gone(self, ended: DisposalEnded) -> None:
        """agent/disposed: the door's ``parent_disposed`` (whose row forgets below it)."""
        self._agent_to_door("publish_disposed", _DrainBelow(ended.agent, None, []), None)

    def _forget_below(self) -> None:
        """An agent disposing or disposed is no live parent: its dormant children can never
        resume, and the drain below it ends with it."""
        context = self._door.context
        assert isinstance(context, _DrainBelow)
        ended = context.parent
        self._drained_hosts.pop(ended, None)
        for child_id in self._below.pop(ended, {}):
            dormant = self._dormant.get(child_id)
            if dormant is not None and dormant.parent_agent is ended:
                del self._dormant[child_id]

    def _poke(self, changed: MessageInserted | MessageDiscarded) -> None:
        """The agent's inbox changed: a watcher waiting on queued work decides again (a
        user's cancel or remove that empties the inbox of an idle agent ends its work as
        surely as an idle with nothing queued; no other idle follows it)."""
        node = self._resident.get(changed.agent.id)
        if node is not None and node.agent is changed.agent:
            node.pokes += 1
            node.poked.set()

    # --- teardown entries -------------------------------------------------------------------

    def dispose(self, activation: Activation) -> Pending:
        """Tear ``activation`` down, child-first; memoized: every caller awaits one teardown.

        The subtree is cancelled inside this call. Awaiting raises
        :class:`ActivationTeardownFailed` if some boundary failed, after the activation
        settled.
        """
        node = activation._node if type(activation) is Activation else None
        if not isinstance(node, _Node) or node.registry is not self:
            raise UsageError(
                f"dispose() takes an Activation of this runtime, not {echo(activation)}"
            )
        return Pending(asyncio.shield(self._dispose(node, False)), _nobody)

    def _dispose(self, node: _Node, flushed: bool) -> asyncio.Future[None]:
        self._fire(node, "dispose", final_state_flushed=flushed, drain=False)
        assert node.closing is not None
        return node.closing

    def drain(self) -> Pending:
        """Close admission registry-wide, then tear every root down; await them all.

        Every later admission is refused with ``DRAINING``. Failures are raised together
        as one :class:`ActivationTeardownFailed` naming each.
        """
        escaped: list[BaseException] = []
        self._door.fire("drain", escaped)
        closing = [n.closing for n in self._resident.values() if n.closing is not None]
        drained = Pending(asyncio.shield(self._join("the drain", closing)), _nobody)
        if escaped:
            _unclaimed(drained)
            raise escaped[0]
        return drained

    def drain_descendants(self, parents: Iterable[Agent]) -> Pending:
        """Tear down every continuable descendant of the exact live ``parents``.

        Every parent is named first: ``UNAUTHORIZED``, draining nothing, when some parent is
        not live here. Then the door drains below each in turn, admission below it closing
        first; a parent a listener disposed meanwhile drains nothing, and its
        ``UNAUTHORIZED`` is raised once the others' drains began.
        """
        given: object = parents  # typed as the caller should pass it, checked as it may not
        if isinstance(given, str | Agent) or not isinstance(given, Iterable):
            raise UsageError(f"parents are a collection of Agent, not {echo(given)}")
        parents = list(parents)
        for parent in parents:
            self._live_parent(parent)
        below: list[_Node] = []
        escaped = _each(parents, partial(self._drain_below, below))
        closing = [c.closing for c in below if c.closing is not None]
        drained = Pending(asyncio.shield(self._join("the drain", closing)), _nobody)
        if escaped is not None:
            _unclaimed(drained)
            raise escaped
        return drained

    def _drain_below(self, below: list[_Node], parent: Agent) -> None:
        """The door's ``drain_below`` for one named parent: it says how, and its effects
        add the activations whose teardown the drain awaits to ``below``."""
        kind, node = self._parent_kind(parent)
        drain = _DrainBelow(parent, node, below)
        self._ask_door("drain_below", drain, parent, parent=kind)
        if drain.escaped is not None:
            raise drain.escaped

    def drain_children(self, parent: Agent, child_ids: Iterable[str]) -> Pending:
        """Tear down the named direct children of the exact live ``parent``.

        Lineage is checked for every id before anything is torn down: ``UNAUTHORIZED`` if
        ``parent`` is not live or some named child is not its direct child. Ids of no
        resident activation are skipped.
        """
        self._live_parent(parent)
        if isinstance(child_ids, str):
            raise UsageError(f"child ids are a collection of str, not {echo(child_ids)}")
        child_ids = list(child_ids)
        if not all(type(i) is str for i in child_ids):
            raise UsageError(f"child ids are a collection of str, not {echo(child_ids)}")
        named = [self._resident[i] for i in dict.fromkeys(child_ids) if i in self._resident]
        for node in named:
            if node.parent_agent is not parent:
                try:
                    self._fire(node, "drain_child", lineage=False)
                except Rejected as refused:
                    raise SubagentError(
                        "UNAUTHORIZED", f"{parent.id!r} cannot drain {node.id!r}: {refused}"
                    ) from None
        escaped = _each(named, lambda node: self._fire(node, "drain_child", lineage=True))
        closing = [n.closing for n in named if n.closing is not None]
        drained = Pending(asyncio.shield(self._join("the drain", closing)), _nobody)
        if escaped is not None:
            _unclaimed(drained)
            raise escaped
        return drained

    async def _join(self, what: str, closing: list[asyncio.Future[None]]) -> None:
        """Await every teardown in ``closing``; raise their failures as one."""
        while pending := [f for f in closing if not f.done()]:
            await asyncio.wait(pending)
        failures = _failures(closing)
        if failures:
            raise ActivationTeardownFailed(what, failures)

    def _close(self) -> asyncio.Future[None]:
        """The runtime's final switch: drain, inside the caller's call; also await every
        teardown already running."""
        drained = self.drain()._future
        everything = [n.closing for n in self._resident.values() if n.closing is not None]
        return persist(lambda: self._join("the runtime's close", [drained, *everything]), "drain")

    # --- spawn and fork ---------------------------------------------------------------------

    async def spawn(self, parent_signal: AbortSignal, spec: SubagentSpec) -> SubagentResult:
        """From a tool: run a fresh child ``spec.child_id`` on ``spec.prompt`` to its end.

        Aborting the parent's turn cancels the child with ``PARENT``; the child's turn ends
        ``aborted`` and this raises :class:`~fsm_core.Aborted` with the parent's reason once
        the child is disposed. Raises ``DRAINING`` after ``drain()``.
        """
        return await self._spawn_child(parent_signal, spec, Session())

    async def fork(self, parent_signal: AbortSignal, spec: SubagentSpec) -> SubagentResult:
        """As :meth:`spawn`, but the child starts from a copy of the parent's session."""
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
        self._initiator("spawn")
        if type(spec) is not SubagentSpec:
            raise UsageError(f"spawn() and fork() take a SubagentSpec, not {echo(spec)}")
        _check_id(spec.child_id)
        if type(spec.prompt) is not str:
            raise UsageError(f"a prompt is a str, not {echo(spec.prompt)}")
        if not isinstance(parent_signal, AbortSignal):
            raise UsageError(
                f"spawn() takes the parent turn's AbortSignal, not {echo(parent_signal)}"
            )
        if spec.child_id in self._owners or self._in_use(spec.child_id):
            raise UsageError(f"an agent named {echo(spec.child_id)} already exists")
        run = _Spawn(spec.child_id, spec.prompt, session, parent_signal)
        try:
            self._ask_door("spawn", run, None, aborted=parent_signal.aborted)
            assert run.handle is not None
            await run.handle.agent.when_idle()
        finally:
            run.off()
            if run.handle is not None:
                await run.handle.dispose()
        parent_signal.raise_if_aborted()
        return SubagentResult(spec.child_id, _last_outcome(session), _last_text(session))

    # --- the settlement watcher -------------------------------------------------------------

    def _start_watcher(self, node: _Node) -> None:
        task = asyncio.get_running_loop().create_task(self._watch(node), name=f"watch {node.id}")
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _watch(self, node: _Node) -> None:
        """After each idle, ask the table for a verdict from the inbox and the ledger alone.

        The verdict is taken inside ``run_maintenance``, which only an idle agent grants:
        on ``ready`` the disposal starts there, under idle ownership. An agent that became
        busy again refuses the maintenance, and the verdict is taken with ``busy``.

        The watcher has no caller to raise to: whatever a listener raises inside it (a
        BaseException too) is logged, and the watcher goes on with the verdict the table
        gave before it, or, given none, waits for a poke, so it neither dies with an error
        nobody reads nor spins. Its own cancellation, and an interrupt or exit (which
        asyncio raises out of the loop), end it.
        """
        while node.stage == "active":
            await node.agent.when_idle()
            seen = node.pokes
            verdict = _Verdict()

            async def decide(
                _signal: AbortSignal, verdict: _Verdict = verdict, seen: int = seen
            ) -> None:
                self._watch_verdict(node, verdict, seen, busy=False)

            try:
                if node.stage != "active":
                    # The inbox is closing: the table's verdict is closed, with no need to
                    # own the agent to learn it.
                    self._watch_verdict(node, verdict, seen, busy=False)
                    return
                try:
                    await node.agent.run_maintenance(decide)
                except Rejected:
                    self._watch_verdict(node, verdict, seen, busy=True)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException:
                _raise_if_cancelling()
                log.exception("the settlement watcher of %s failed", node.id)
            if verdict.value in ("closed", "ready"):
                return
            if verdict.value != "retry":
                while node.pokes == seen and node.stage == "active":
                    node.poked.clear()
                    await node.poked.wait()

    def _watch_verdict(self, node: _Node, verdict: _Verdict, seen: int, *, busy: bool) -> None:
        if node.agent.phase in ("disposing", "disposed"):
            # Idle at once and refusing maintenance for good: the table says wait for a poke
            # (the activation's own dispose pokes it) rather than retry and spin.
            self._fire(node, "watch_gone", verdict)
            return
        pending = node.agent.inbox.pending
        self._fire(node, "watch", verdict, current=node.pokes == seen, busy=busy, pending=pending)

    # --- the teardown -----------------------------------------------------------------------

    async def _finish(self, node: _Node) -> None:
        """finishDisposal after the ``dispose`` row: join the children, await idle, flush,
        capture, dispose the handle; then the convergence row. Each stage reads the table,
        so a run cancelled from outside resumes where it stopped (:func:`persist`)."""
        if node.stage == "joining":
            while pending := [f for f in node.child_teardowns if not f.done()]:
                await asyncio.wait(pending)
            escaped: list[BaseException] = []
            node.failures[:0] = _failures(node.child_teardowns, escaped)
            node.escaped = node.escaped or (escaped[0] if escaped else None)
            node.child_teardowns.clear()
            self._fire(node, "children_joined")
        if node.stage == "awaiting_idle":
            await node.agent.when_idle()
            self._fire(node, "agent_idle")
        if node.stage == "flushing":
            if node.flush_owed:
                await self._boundary(node, "final flush", node.agent.session.flush())
                node.flush_owed = False
            self._fire(node, "final_flushed")
        if node.stage == "releasing":
            assert node.handle_disposal is not None
            await self._boundary(node, "handle dispose", node.handle_disposal)
            own = any(f.activation == node.id for f in node.failures)
            self._fire(node, "handle_disposed", failed=own)
        if node.escaped is not None:
            raise node.escaped  # a child's listener's, raised once this activation settled too
        if node.rethrow:
            raise ActivationTeardownFailed(node.id, node.failures)

    async def _boundary(self, node: _Node, boundary: _Boundary, work: Awaitable[None]) -> None:
        """Await one boundary of ``node``'s teardown. Whatever it raises is that boundary's
        failure (a CancelledError too: the session's writer raised it), except this task's
        own cancellation, which :func:`persist` runs again; one that is no Exception is also
        raised last, once the activation settled."""
        try:
            await work
        except BaseException as error:
            _raise_if_cancelling()
            node.failures.append(TeardownFailure(node.id, boundary, error))
            if not isinstance(error, Exception | asyncio.CancelledError):
                node.escaped = node.escaped or error

    # --- firing and effects -----------------------------------------------------------------

    def _fire(self, node: _Node, event: str, context: object = None, /, **args: Value) -> None:
        """Fire a table event on ``node``; a listener's held BaseException is raised after
        the outermost row, so no row stops half-way.

        The ``dispose`` of each child a row's ``dispose_children`` names fires once that row
        returned, still inside this call, level by level, so a subtree of any depth is
        cancelled before the first await without nesting a Python frame per generation. The
        row ends with that effect, so no later effect of it could tell the difference.
        """
        self._firing += 1
        try:
            node.control.fire(event, context, **args)
        except BaseException:
            if self._firing == 1:
                self._held = None
            raise
        finally:
            self._firing -= 1
        if self._firing == 0 and not self._cascading:
            self._cascading = True
            try:
                while self._cascade:
                    parent, child, join, call, values = self._cascade.popleft()
                    self._call(call, child, values, {}, None)
                    if join and child.closing is not None:
                        parent.child_teardowns.append(child.closing)
            finally:
                self._cascading = False
        # A fire inside the cascade is part of the outermost one: it must not raise the held
        # exception half-way, or the children still queued would never be disposed.
        if self._firing == 0 and not self._cascading and self._held is not None:
            held, self._held = self._held, None
            raise held

    def _performer(self, node: _Node) -> Callable[[Effect], None]:
        return lambda effect: self._perform(node, effect)

    def _perform(self, node: _Node, effect: Effect) -> None:
        spec = node.control.spec
        if spec.unmet(effect.name, node.control.snapshot(), effect.args):
            requires = spec.table.effects[effect.name].requires_text
            raise FsmError(
                f"activation {node.id}: {effect} runs where its contract {requires!r} does not "
                f"hold ({spec.format_state(node.control.snapshot())})"
            )
        try:
            getattr(self, f"_{effect.name}")(node, *effect.args)
        except Exception:
            raise
        except BaseException as error:
            self._held = self._held or error

    def _close_inbox(self, node: _Node) -> None:
        node.closing = persist(lambda: self._finish(node), f"teardown {node.id}")
        node.poked.set()  # the watcher finds the inbox closing
        self._connect("activation", "close_inbox", (), node)  # shuts the agent's waking

    def _cancel_agent(self, node: _Node, cause: str) -> None:
        self._connect("activation", "cancel_agent", (cause,), node)

    def _dispose_children(self, node: _Node, join: bool, drain: bool) -> None:
        """The wiring's calls on every owned child, queued for :meth:`_fire` to make once the
        row returned (a subtree of any depth, no Python frame per generation)."""
        values = (join, drain)
        for call in self._wiring.fired_by("activation", "dispose_children"):
            for child in self._targets(call, node):
                assert isinstance(child, _Node)
                self._cascade.append((node, child, join, call, values))

    def _flush_final_state(self, node: _Node) -> None:
        node.flush_owed = True  # an effect cannot await: _finish awaits it

    def _capture(self, node: _Node) -> None:
        session = node.agent.session
        turns = sum(1 for e in session.events if e.type == "turn/start")
        pending = tuple(m.id for m in (*node.agent.inbox.next_step, *node.agent.inbox.next_turn))
        node.terminal = Terminal(turns, _last_outcome(session), pending)

    def _dispose_handle(self, node: _Node) -> None:
        self._connect("activation", "dispose_handle", (), node)  # the handle's dispose()

    def _leave_registry(self, node: _Node) -> None:
        del self._resident[node.id]

    def _release_slot(self, node: _Node) -> None:
        if node.id not in self._slots:
            raise FsmError(f"activation {node.id}: its pool slot was already released")
        self._slots.remove(node.id)

    def _notify_parent(self, node: _Node, failed: bool) -> None:
        """Step 3: tell the parent by name, not through the registry (the child left it): a
        parent activation's ``child_settled``, or for a root (whose parent is host-owned) the
        door's ``root_settled``, which decides whether anyone is left to tell."""
        if node.parent is None:
            roots = self._roots.get(node.parent_agent, {})
            roots.pop(node.id, None)
            if not roots:  # the parent's last root: its entry goes too (hosts come and go)
                self._roots.pop(node.parent_agent, None)
        else:
            del node.parent.owned[node.id]
        self._connect("activation", "notify_parent", (failed,), node, context=(node, failed))

    def _notice_agent(self, node: _Node, wake: bool) -> None:
        child, failed = cast(tuple[_Node, bool], node.control.context)
        self._connect(
            "activation", "notice_agent", (wake,), node, context=self._notice(child, failed)
        )

    def _notice_host(self) -> None:
        child, failed = cast(tuple[_Node, bool], self._door.context)
        self._connect("admission", "notice_host", (), child, context=self._notice(child, failed))

    def _notice(self, child: _Node, failed: bool) -> UserMessage:
        """``child``'s settlement notice, the message its parent agent is sent."""
        self._notices += 1
        text = f"subagent {child.id} {'failed' if failed else 'settled'}"
        return UserMessage(f"{child.id}:settled:{self._notices}", text)

    def _release_ownership(self, node: _Node) -> None:
        """Step 4; the door decides whether a followup may resume it cold
        (``release.tells_door``)."""
        del self._owners[node.id]
        self._connect("activation", "release_ownership", (), node, context=node)

    def _remember_child(self) -> None:
        node = self._door.context
        assert isinstance(node, _Node)
        parent = node.parent_agent
        self._dormant[node.id] = _Dormant(parent, node.agent.session)
        self._below.setdefault(parent, {})[node.id] = None

    def _settle(self, node: _Node, failed: bool) -> None:
        node.failed = failed
        self._events.emit("subagent/settled", ActivationSettled(node.public, failed))

    def _rethrow(self, node: _Node) -> None:
        node.rethrow = True  # _finish raises once the row returns: failure last

    def _deliver_message(self, node: _Node) -> None:
        delivery = node.control.context
        assert isinstance(delivery, _Delivery)
        node.agent.followup(delivery.message)

    def _resume_after_teardown(self, node: _Node) -> None:
        delivery = node.control.context
        assert isinstance(delivery, _Delivery)
        delivery.resume = True  # followup awaits the teardown, then resumes cold

    def _request_dispose(self, node: _Node, drain: bool) -> None:
        self._connect("activation", "request_dispose", (drain,), node)

    def _admit_child(self, node: _Node) -> None:
        admission = node.control.context
        assert isinstance(admission, _Admission)
        child = self._new_node(admission.child_id, node.agent, node, admission.session)
        admission.node = child
        self._connect("activation", "admit_child", (), node, new=child, context=admission.message)

    def _verdict(self, node: _Node, verdict: str) -> None:
        holder = node.control.context
        assert isinstance(holder, _Verdict)
        holder.value = verdict

    def _dispose_in_maintenance(self, node: _Node) -> None:
        # The natural end's teardown has no caller to raise to: its failure reaches the
        # settlement (``failed``) and the parent's notice, so it is read here, not left to
        # asyncio's "exception was never retrieved".
        self._connect("activation", "dispose_in_maintenance", (), node)
        assert node.closing is not None
        node.closing.add_done_callback(partial(_read, "a natural end's teardown"))

    # --- the wiring: specs/wiring.toml's calls, made on the instances their targets name ---------

    def _connect(
        self,
        machine: str,
        effect: str,
        values: tuple[Value, ...],
        source: _Node | None,
        *,
        context: object = None,
        new: _Node | AgentHandle | None = None,
        named: _Node | None = None,
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
                    self._held = self._held or bug
                except BaseException as error:
                    if not each:
                        raise
                    escaped = escaped or error
        return escaped

    def _targets(
        self,
        call: WiredCall,
        source: _Node | None,
        *,
        new: _Node | AgentHandle | None = None,
        named: _Node | None = None,
        host: Agent | None = None,
    ) -> list[_Node | AgentHandle | Agent | HostedMachine]:
        """The instances ``call.target`` names: from the activation ``source`` performing the
        effect, or from what the door's call named (``named``, ``host``), or the instance the
        effect just created (``new``). This is all the Python a connection has."""
        t = call.target
        if call.machine == "agent":
            return [self._door]
        if call.machine == "admission":
            if t == "roots":
                return [n for n in self._resident.values() if n.parent is None]
            if t == "host_roots":
                assert host is not None
                return [self._resident[r] for r in self._roots.get(host, ())]
            if t == "named":
                assert named is not None
                return [named]
            if t == "host":
                assert source is not None  # the root whose notice it is
                return [source.parent_agent]
            assert t == "new_agent" and new is not None
            return [new.handle if isinstance(new, _Node) else new]
        assert source is not None
        root = source.parent is None
        if (call.only == "root" and not root) or (call.only == "child" and root):
            return []
        if t == "self":
            return [source]
        if t == "agent":
            return [source.handle]
        if t == "children":
            return [c for c in map(self._resident.get, source.owned) if c is not None]
        if t == "parent":
            assert source.parent is not None
            return [source.parent]
        if t == "door":
            return [self._door]
        assert t == "new_agent" and isinstance(new, _Node)
        return [new.handle]

    def _facts(self, call: WiredCall, source: _Node | None) -> dict[str, Value]:
        """The facts ``call``'s arguments read: ``last`` (no other owned child of the parent
        is unsettled: the child already left ``owned``), ``parent`` (what the source's parent
        agent is now, as the door's type says)."""
        facts: dict[str, Value] = {}
        if source is not None and "last" in call.facts:
            assert source.parent is not None
            facts["last"] = not source.parent.owned
        if source is not None and "parent" in call.facts:
            facts["parent"] = self._parent_kind(source.parent_agent)[0]
        return facts

    def _call(
        self,
        call: WiredCall,
        target: _Node | AgentHandle | Agent | HostedMachine,
        values: tuple[Value, ...],
        facts: Mapping[str, Value],
        context: object,
    ) -> None:
        """Fire ``call``'s event on ``target``. An agent's ``dispose`` is its handle's
        ``dispose()`` (the event, then the agent's own reverse teardown); its ``cancel`` takes
        the cause the ``cause`` argument names, as the fire's context."""
        args = call.keywords(values, facts)
        if isinstance(target, _Node):
            self._fire(target, call.event, context, **args)
        elif isinstance(target, HostedMachine):
            target.fire(call.event, context, **args)
        else:
            handle = target if isinstance(target, AgentHandle) else None
            agent = target.agent if isinstance(target, AgentHandle) else target
            if call.event == "dispose" and handle is not None:
                node = self._resident[agent.id]
                node.handle_disposal = handle.dispose()
                return
            if call.event == "cancel":
                context = CAUSES[str(args["cause"])]
            cast(AgentCore, agent._core).fire_wired(call.event, context, args)

    def _agent_to_door(self, effect: str, context: _DrainBelow, kind: str | None) -> None:
        """An agent's ``effect`` (its disposal, seen on the bus) reaches the door as the
        wiring's calls say; ``kind`` is the ``parent`` fact, what the agent is now."""
        for call in self._wiring.fired_by("agent", effect):
            facts: dict[str, Value] = {} if kind is None else {"parent": kind}
            self._door.fire(call.event, context, **call.keywords((), facts))

    def _perform_door(self, effect: Effect) -> None:
        spec = self._door.spec
        if spec.unmet(effect.name, self._door.snapshot(), effect.args):
            requires = spec.table.effects[effect.name].requires_text
            raise FsmError(f"the registry's door: {effect} runs where {requires!r} does not hold")
        getattr(self, f"_{effect.name}")(*effect.args)

    def _admit_root(self) -> None:
        route = self._door.context
        assert isinstance(route, _Route)
        route.value = "root"

    def _admit_below(self) -> None:
        route = self._door.context
        assert isinstance(route, _Route)
        route.value = "below"

    def _drain_roots(self) -> None:
        """Begin every root's teardown, even when one raises (a listener's BaseException
        held by :meth:`_fire`); the first is raised by :meth:`drain` once all began."""
        escaped = self._door.context
        assert isinstance(escaped, list)
        error = self._connect("admission", "drain_roots", (), None, each=True)
        if error is not None:
            escaped.append(error)

    def _drain_activation(self) -> None:
        drain = self._door.context
        assert isinstance(drain, _DrainBelow) and drain.node is not None
        node = drain.node
        drain.below += [c for c in map(self._resident.get, node.owned) if c is not None]
        drain.escaped = self._connect(
            "admission", "drain_activation", (), None, named=node, each=True
        )

    def _close_below_host(self) -> None:
        drain = self._door.context
        assert isinstance(drain, _DrainBelow)
        self._drained_hosts[drain.parent] = None

    def _dispose_roots(self, drain_: bool) -> None:
        """Begin the teardown of every root of the named host parent, even when one raises
        (a listener's BaseException, held by :meth:`_fire`); the first is raised once the
        door's row returned."""
        drain = self._door.context
        assert isinstance(drain, _DrainBelow)
        drain.below += [self._resident[root] for root in self._roots.get(drain.parent, ())]
        drain.escaped = self._connect(
            "admission", "dispose_roots", (drain_,), None, host=drain.parent, each=True
        )

    def _run_child(self, wake: bool) -> None:
        """Create the spawned child, its parent signal's listener, and give it the prompt,
        waking it or parked unwoken, as the door's row says."""
        run = self._door.context
        assert isinstance(run, _Spawn)
        run.handle = self._create(run.child_id, run.session)
        child = run.handle.agent
        run.off = run.signal.add_listener(lambda _s: child.cancel(PARENT))
        message = UserMessage(f"{run.child_id}:prompt", run.prompt)
        self._connect("admission", "run_child", (wake,), None, new=run.handle, context=message)

    _AWAITS = frozenset(
        {
            ("agent_idle", "quiescent"),
            ("handle_disposed", "phase == disposed"),
            ("watch", "phase in {idle, running, cancelling, maintenance}"),
            ("watch_gone", "phase in {disposing, disposed}"),
        }
    )
    """What the runtime awaits before firing each activation event: ``agent_idle`` after the
    agent's ``when_idle()`` (its table's ``quiescent``), ``handle_disposed`` after the handle's
    ``dispose()`` (its agent ``disposed``), ``watch`` while the agent is not disposing and
    ``watch_gone`` once it is (:meth:`_watch_verdict`)."""

    _DOOR_EFFECTS = frozenset(
        {
            "admit_root",
            "admit_below",
            "drain_roots",
            "run_child",
            "drain_activation",
            "close_below_host",
            "dispose_roots",
            "remember_child",
            "forget_below",
            "notice_host",
        }
    )
    """The door's effects, each performed by the method named for it with a leading ``_``."""

    _EFFECTS = frozenset(
        {
            "close_inbox",
            "cancel_agent",
            "dispose_children",
            "flush_final_state",
            "capture",
            "dispose_handle",
            "leave_registry",
            "release_slot",
            "notify_parent",
            "release_ownership",
            "settle",
            "rethrow",
            "request_dispose",
            "admit_child",
            "verdict",
            "dispose_in_maintenance",
            "deliver_message",
            "resume_after_teardown",
            "notice_agent",
        }
    )
    """The table's effects; each is performed by the method named for it with a leading ``_``
    (looked up when performed, so a test may patch one)."""

    def __repr__(self) -> str:
        state = " draining" if self.draining else ""
        return f"<Subagents resident={len(self._resident)} slots={len(self._slots)}{state}>"


def _refusal(refused: Rejected, parent: object, activation: str | None = None) -> SubagentError:
    """The table's refusal ``CODE: why`` as the caller's :class:`SubagentError`, naming the
    parent or the activation the table's text calls "this parent" or "the activation"."""
    code, _, why = str(refused).partition(": ")
    if "below this parent" in why:
        why = _draining_below(getattr(parent, "id", "?"))
    elif code == "UNAUTHORIZED" and why.startswith("not a live parent"):
        why = f"{echo(parent)} is {why}"
    elif activation is not None:
        why = why.replace("the activation", f"activation {activation!r}", 1)
    return SubagentError(cast(SubagentCode, code), why)


def _named(target: object) -> str:
    """How a refusal names the instance that refused a wiring's call."""
    if isinstance(target, _Node):
        return f"activation {target.id!r}"
    if isinstance(target, AgentHandle | Agent):
        agent = target.agent if isinstance(target, AgentHandle) else target
        return repr(agent.id)
    return "the registry's door"


def _check_id(child_id: object) -> None:
    if type(child_id) is not str or not 0 < len(child_id) <= 200 or not child_id.isprintable():
        raise UsageError(f"a child id is 1 to 200 printable characters, not {echo(child_id)}")


def _nobody() -> None:
    """No task awaits its own teardown through these entries; nothing to refuse."""


def _each(items: Iterable[_T], begin: Callable[[_T], object]) -> BaseException | None:
    """``begin`` every item, even when one raises (a listener's BaseException held by
    :meth:`Subagents._fire`): a drain begins every teardown it names inside the call.
    Returns the first exception, for the caller to raise once its work has begun."""
    escaped: BaseException | None = None
    for item in items:
        try:
            begin(item)
        except BaseException as error:
            escaped = escaped or error
    return escaped


def _unclaimed(drained: Pending) -> None:
    """A drain that raises a listener's exception returns no :class:`Pending`: nobody can
    await its outcome, whose failures each activation's settlement tells. Read it when it
    settles, so asyncio does not log it as never retrieved."""
    drained._future.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _read(what: str, teardown: asyncio.Future[None]) -> None:
    """A teardown with no caller (``what``: a natural end's, or one a host's disposal began):
    a failure reaches its settlement, but a bug between the tables (an :class:`FsmError`) is
    logged, not dropped."""
    if not teardown.cancelled() and isinstance(teardown.exception(), FsmError):
        log.error("%s found a bug", what, exc_info=teardown.exception())


def _failures(
    teardowns: Iterable[asyncio.Future[None]], escaped: list[BaseException] | None = None
) -> list[TeardownFailure]:
    """Every failure of the settled ``teardowns``, flattened, in order. Any other exception
    is raised, or added to ``escaped`` when given."""
    out: list[TeardownFailure] = []
    for teardown in teardowns:
        error = teardown.exception()
        if isinstance(error, ActivationTeardownFailed):
            out += [f for f in error.failures if f not in out]
        elif error is not None and escaped is not None:
            escaped.append(error)
        elif error is not None:
            raise error
    return out


def _last_outcome(session: Session) -> Mapping[str, str | int] | None:
    for event in reversed(session.events):
        if event.type == "turn/end":
            return cast(Mapping[str, str | int], event.data["outcome"])
    return None


def _last_text(session: Session) -> str:
    for event in reversed(session.events):
        if event.type == "assistant/message":
            return cast(str, event.data["text"])
    return ""
