"""One activation's plumbing: its hosted specs/activation.toml, its effects, its teardown.

A :class:`Node` is what :class:`~fsm_core.runtime.Activation` reads. Its control state changes
only by firing the table's events (``_hosting.py``: every activation of a registry fires in one
:class:`~fsm_core.runtime._hosting.Scope`); the effects its rows list run here, each by the
handler declared for it. A node talks to the rest of its registry through its :class:`Tree`:
the bookkeeping (:class:`Ledger`), the wiring between instances (:class:`Wires`), and the
settlement watcher, each a small protocol the registry's modules implement.

Dispose converges bottom-up (:meth:`Node._finish`): await the children (each failure caught
apart), the agent's idle, the final flush, the handle's disposal; then the six convergence steps
run in one row: leave the registry, release the pool slot, notify the parent (addressed
directly), release ownership, settle, rethrow the aggregated failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Literal, Protocol, TypeAlias, cast, final

from fsm_core._errors import FsmError
from fsm_core.runtime._activation import (
    Activation,
    ActivationSettled,
    ActivationTeardownFailed,
    TeardownFailure,
    Terminal,
)
from fsm_core.runtime._agent import Agent
from fsm_core.runtime._core import AgentHandle
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._hosting import Hosted, Scope, hosts, performs
from fsm_core.runtime._inbox import UserMessage
from fsm_core.runtime._session import Session
from fsm_core.runtime._teardown import Pending, persist, raise_if_cancelling
from fsm_core.table import Machine
from fsm_core.table._expr import Value

__all__ = [
    "AWAITS",
    "Admission",
    "Delivery",
    "Ledger",
    "Node",
    "NodeContext",
    "Settled",
    "Tree",
    "Verdict",
    "Wires",
    "failures",
    "last_outcome",
]

log = logging.getLogger("fsm_core.runtime")

_Boundary = Literal["final flush", "handle dispose"]

AWAITS = frozenset(
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
``watch_gone`` once it is (the watcher's verdict)."""


@dataclass(slots=True)
class Admission:
    """The context of an ``admit`` fire: the child to create with its first message, and the
    node once created."""

    child_id: str
    session: Session
    message: UserMessage
    node: Node | None = None


@dataclass(slots=True)
class Delivery:
    """The context of a ``deliver`` fire: the message, and whether the row said to resume
    it cold once the running teardown settled."""

    message: UserMessage
    resume: bool = False


@dataclass(slots=True)
class Verdict:
    """The context of a ``watch`` fire: the verdict its row gives."""

    value: str = ""


@dataclass(frozen=True, slots=True)
class Settled:
    """The context of a settlement notice (``child_settled`` on the parent, ``root_settled``
    on the door): the child that settled, and whether it failed."""

    child: Node
    failed: bool


NodeContext: TypeAlias = Admission | Delivery | Verdict | Settled
"""What a fire of the activation table carries beside its arguments."""


class Ledger(Protocol):
    """The registry's bookkeeping, as a node's effects change it (convergence steps 1-4)."""

    def enter(self, node: Node) -> None:
        """Record a new resident activation: its slot, its owner, its place below its parent."""

    def leave(self, node: Node) -> None:
        """Step 1: deliveries no longer find it."""

    def release_slot(self, node: Node) -> None:
        """Step 2; raises :class:`FsmError` for a slot already released."""

    def detach(self, node: Node) -> None:
        """Step 3's bookkeeping: its parent no longer owns it."""

    def disown(self, node: Node) -> None:
        """Step 4: its id is free again."""

    def notice(self, child: Node, failed: bool) -> UserMessage:
        """``child``'s settlement notice, the message its parent agent is sent: an id that
        agent holds no message of, and a text saying whether it finished, stopped or failed."""


class Wires(Protocol):
    """The wiring between instances (specs/wiring.toml), as a node's effects make its calls."""

    @property
    def scope(self) -> Scope:
        """The scope every activation of the registry fires in."""

    def connect(
        self,
        machine: str,
        effect: str,
        values: tuple[Value, ...],
        source: Node | None,
        *,
        context: object = None,
        new: Node | AgentHandle | None = None,
    ) -> BaseException | None:
        """Make every call the wiring declares for ``machine.effect`` of ``source``."""

    def queue_children(
        self, node: Node, effect: str, values: tuple[Value, ...], *, join: bool
    ) -> None:
        """Queue the wiring's calls of ``effect`` on the node's children, made once the
        outermost row returned."""


@final
class Tree:
    """What every node of one registry shares: its table, its bus, and the registry's parts.

    ``create`` builds an agent for an admitted child; ``watch`` starts a node's settlement
    watcher. :meth:`plant` is the one way a node comes to be.
    """

    def __init__(
        self,
        spec: Machine,
        events: EventBus,
        create: Callable[[str, Session], AgentHandle],
        ledger: Ledger,
        wires: Wires,
        watch: Callable[[Node], None],
    ) -> None:
        self.spec = spec
        self.events = events
        self.create = create
        self.ledger = ledger
        self.wires = wires
        self.watch = watch

    def plant(
        self, child_id: str, parent_agent: Agent, parent: Node | None, session: Session
    ) -> Node:
        """Create the agent and the node of an admitted child, record it, start its watcher
        (before its first message wakes the agent)."""
        node = Node(self, child_id, parent_agent, parent, self.create(child_id, session))
        self.ledger.enter(node)
        self.watch(node)
        return node


@final
@hosts("activation")
class Node(Hosted[NodeContext]):
    """One activation's plumbing: its hosted table, agent handle and teardown bookkeeping."""

    def __init__(
        self,
        tree: Tree,
        child_id: str,
        parent_agent: Agent,
        parent: Node | None,
        handle: AgentHandle,
    ) -> None:
        self.id = child_id
        self.tree = tree
        self.parent_agent = parent_agent
        self.parent = parent
        """The parent's activation, or None for a root (its parent is host-owned)."""
        self.handle = handle
        self.agent = handle.agent
        self._host(tree.spec, tree.wires.scope)
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
        """The first listener's BaseException (no Exception) this teardown met: raised by a
        child's teardown, by a boundary, or held by one of its own rows. It goes on, and
        raises it last."""
        self.terminal: Terminal | None = None
        self.failed: bool | None = None
        # Invariant: failure is not None iff failed is True.
        self.failure: ActivationTeardownFailed | None = None
        """What the teardown failed with, once settled: what ``subagent/settled`` carries and
        the teardown raises last (step 6)."""
        self.pokes = 0
        """How many messages were inserted into or discarded from the agent's inbox (the
        watcher's pokes)."""
        self.poked = asyncio.Event()

    def _who(self) -> str:
        return f"activation {self.id}"

    @property
    def stage(self) -> str:
        return self.control.state

    @property
    def table_state(self) -> Mapping[str, Value]:
        return MappingProxyType(self.control.values)

    def value(self, name: str) -> Value:
        return self.control.values[name]

    def fire(self, event: str, context: NodeContext | None = None, /, **args: Value) -> None:
        """Fire a table event on this activation (``_hosting.py``'s rules)."""
        self._fire(event, context, **args)

    def __repr__(self) -> str:
        return f"<Node {self.id} {self.control!r}>"

    # --- the teardown -----------------------------------------------------------------------

    async def _finish(self) -> None:
        """finishDisposal after the ``dispose`` row: join the children, await idle, flush,
        capture, dispose the handle; then the convergence row. Each stage reads the table,
        so a run cancelled from outside resumes where it stopped (:func:`persist`).

        Whatever a listener raises, it converges: a BaseException that is no Exception (a
        child's teardown's, a boundary's, one held by a stage's row) is kept, the stages go
        on, and the first is raised once the activation settled, to whoever awaits this
        teardown, in place of an aggregated failure (the settlement still says it failed)."""
        if self.stage == "joining":
            while pending := [f for f in self.child_teardowns if not f.done()]:
                await asyncio.wait(pending)
            escaped: list[BaseException] = []
            self.failures[:0] = failures(self.child_teardowns, escaped)
            self.escaped = self.escaped or (escaped[0] if escaped else None)
            self.child_teardowns.clear()
            self._step("children_joined")
        if self.stage == "awaiting_idle":
            await self.agent.when_idle()
            self._step("agent_idle")
        if self.stage == "flushing":
            if self.flush_owed:
                await self._boundary("final flush", self.agent.session.flush())
                self.flush_owed = False
            self._step("final_flushed")
        if self.stage == "releasing":
            assert self.handle_disposal is not None
            await self._boundary("handle dispose", self.handle_disposal)
            own = any(f.activation == self.id for f in self.failures)
            self._step("handle_disposed", failed=own)
        if self.escaped is not None:
            raise self.escaped  # a listener's, raised once this activation settled too
        if self.rethrow:
            assert self.failure is not None  # the settle step ran before rethrow
            raise self.failure

    def _step(self, event: str, **args: Value) -> None:
        """Fire one stage's event of the teardown. A listener's BaseException that is no
        Exception (``KeyboardInterrupt``) is raised once the row ran to its end: the teardown
        goes on from the stage the row reached, and raises it last, once this activation
        settled. An Exception is the runtime's own fault, and propagates."""
        try:
            self._fire(event, **args)
        except (Exception, asyncio.CancelledError):
            raise  # a fault, or this task's cancellation: persist() resumes from the stage
        except BaseException as error:
            self.escaped = self.escaped or error

    async def _boundary(self, boundary: _Boundary, work: Awaitable[None]) -> None:
        """Await one boundary of the teardown. Whatever it raises is that boundary's failure
        (a CancelledError too: the session's writer raised it), except this task's own
        cancellation, which :func:`persist` runs again; one that is no Exception is also
        raised last, once the activation settled."""
        try:
            await work
        except BaseException as error:
            raise_if_cancelling()
            self.failures.append(TeardownFailure(self.id, boundary, error))
            if not isinstance(error, Exception | asyncio.CancelledError):
                self.escaped = self.escaped or error

    # --- effects: what the table's rows tell the registry to do ---------------------------------

    @performs("close_inbox")
    def _close_inbox(self) -> None:
        self.closing = persist(self._finish, f"teardown {self.id}")
        self.poked.set()  # the watcher finds the inbox closing
        self.tree.wires.connect("activation", "close_inbox", (), self)  # shuts the agent's waking

    @performs("cancel_agent")
    def _cancel_agent(self, cause: str) -> None:
        self.tree.wires.connect("activation", "cancel_agent", (cause,), self)

    @performs("dispose_children")
    def _dispose_children(self, join: bool, drain: bool) -> None:
        """The wiring's calls on every owned child, made once the outermost row returned (a
        subtree of any depth, no Python frame per generation)."""
        self.tree.wires.queue_children(self, "dispose_children", (join, drain), join=join)

    @performs("cover_children")
    def _cover_children(self) -> None:
        """As :meth:`_dispose_children`; their teardowns already run (this node's close
        disposed them), so nothing joins."""
        self.tree.wires.queue_children(self, "cover_children", (), join=False)

    @performs("flush_final_state")
    def _flush_final_state(self) -> None:
        self.flush_owed = True  # an effect cannot await: _finish awaits it

    @performs("capture")
    def _capture(self) -> None:
        session = self.agent.session
        turns = sum(1 for e in session.events if e.type == "turn/start")
        pending = tuple(m.id for m in (*self.agent.inbox.next_step, *self.agent.inbox.next_turn))
        self.terminal = Terminal(turns, last_outcome(session), pending)

    @performs("dispose_handle")
    def _dispose_handle(self) -> None:
        self.tree.wires.connect("activation", "dispose_handle", (), self)  # the handle's dispose()

    @performs("leave_registry")
    def _leave_registry(self) -> None:
        self.tree.ledger.leave(self)

    @performs("release_slot")
    def _release_slot(self) -> None:
        self.tree.ledger.release_slot(self)

    @performs("notify_parent")
    def _notify_parent(self, failed: bool) -> None:
        """Step 3: tell the parent by name, not through the registry (the child left it): a
        parent activation's ``child_settled``, or for a root (whose parent is host-owned) the
        door's ``root_settled``, which decides whether anyone is left to tell."""
        self.tree.ledger.detach(self)
        self.tree.wires.connect(
            "activation", "notify_parent", (failed,), self, context=Settled(self, failed)
        )

    @performs("notice_agent")
    def _notice_agent(self, wake: bool) -> None:
        settled = self._about(Settled)
        notice = self.tree.ledger.notice(settled.child, settled.failed)
        self.tree.wires.connect("activation", "notice_agent", (wake,), self, context=notice)

    @performs("release_ownership")
    def _release_ownership(self) -> None:
        """Step 4; the door decides whether a followup may resume it cold
        (``release.tells_door``)."""
        self.tree.ledger.disown(self)
        self.tree.wires.connect("activation", "release_ownership", (), self, context=self)

    @performs("settle")
    def _settle(self, failed: bool) -> None:
        """Step 5: ``subagent/settled`` carries the failure object, the one step 6 raises."""
        self.failed = failed
        self.failure = ActivationTeardownFailed(self.id, self.failures) if failed else None
        self.tree.events.emit("subagent/settled", ActivationSettled(self.public, self.failure))

    @performs("rethrow")
    def _rethrow(self) -> None:
        self.rethrow = True  # _finish raises once the row returns: failure last

    @performs("deliver_message")
    def _deliver_message(self) -> None:
        self.agent.followup(self._about(Delivery).message)

    @performs("resume_after_teardown")
    def _resume_after_teardown(self) -> None:
        self._about(Delivery).resume = True  # followup awaits the teardown, then resumes cold

    @performs("request_dispose")
    def _request_dispose(self, drain: bool) -> None:
        self.tree.wires.connect("activation", "request_dispose", (drain,), self)

    @performs("admit_child")
    def _admit_child(self) -> None:
        admission = self._about(Admission)
        child = self.tree.plant(admission.child_id, self.agent, self, admission.session)
        admission.node = child
        self.tree.wires.connect(
            "activation", "admit_child", (), self, new=child, context=admission.message
        )

    @performs("verdict")
    def _verdict(self, verdict: str) -> None:
        self._about(Verdict).value = verdict

    @performs("dispose_in_maintenance")
    def _dispose_in_maintenance(self) -> None:
        # The natural end's teardown has no caller to raise to: its failure reaches the
        # settlement (``failed``) and the parent's notice, so it is read here, not left to
        # asyncio's "exception was never retrieved".
        self.tree.wires.connect("activation", "dispose_in_maintenance", (), self)
        assert self.closing is not None
        self.closing.add_done_callback(partial(read, "a natural end's teardown"))


def read(what: str, teardown: asyncio.Future[None]) -> None:
    """A teardown with no caller (``what``: a natural end's, or one a host's disposal began).

    Its failure (:class:`ActivationTeardownFailed`: a session that could not be written, say)
    reaches its settlement (``subagent/settled``'s ``failure``) and the parent's notice; it is
    logged as the ordinary failure it is, naming the activation, since nobody may be
    listening. A bug between the tables (any other :class:`FsmError`) is logged as one."""
    if teardown.cancelled():
        return
    error = teardown.exception()
    if isinstance(error, ActivationTeardownFailed):
        log.error("activation %r: %s failed", error.activation, what, exc_info=error)
    elif isinstance(error, FsmError):
        log.error("%s found a bug", what, exc_info=error)


def failures(
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


def last_outcome(session: Session) -> Mapping[str, str | int] | None:
    """The outcome of the session's last ``turn/end``, if any."""
    for event in reversed(session.events):
        if event.type == "turn/end":
            return cast(Mapping[str, str | int], event.data["outcome"])
    return None
