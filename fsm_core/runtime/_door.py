"""The activation registry's door: specs/admission.toml, hosted.

What is registry-wide rather than one activation's (a drain of the whole registry, or of the
roots below a host-owned parent, which no activation represents, whether a named parent is live
at all, whether a settled child is remembered for a cold resume, whether a root's notice has
anyone to reach, which roots a host-owned agent's disposal tears down, and whether a spawned
child wakes) is decided by the :class:`Door`. The registry tells it what a named parent is
(:meth:`~fsm_core.runtime._ledger.Ledger.parent_kind`), and its effects run here, each by the
handler declared for it (``_hosting.py``), in a scope of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeAlias, cast, final

from fsm_core._errors import Rejected, echo
from fsm_core.runtime._activation import SubagentCode, SubagentError
from fsm_core.runtime._agent import Agent
from fsm_core.runtime._causes import PARENT
from fsm_core.runtime._core import AgentHandle
from fsm_core.runtime._hosting import Hosted, hosts, performs
from fsm_core.runtime._inbox import UserMessage
from fsm_core.runtime._ledger import Ledger
from fsm_core.runtime._node import Node, Settled, read
from fsm_core.runtime._payloads import DisposalEnded, DisposalStarted
from fsm_core.runtime._session import Session
from fsm_core.runtime._signal import AbortSignal
from fsm_core.table import Machine
from fsm_core.table._expr import Value

__all__ = ["Door", "DoorContext", "Drain", "DrainBelow", "Route", "Spawn", "draining_below"]

log = logging.getLogger("fsm_core.runtime")


def draining_below(parent: str) -> str:
    return (
        f"continuable subagents below parent {parent!r} are draining; "
        "the operation was not admitted"
    )


@dataclass(slots=True)
class Route:
    """The context of ``admit``: where its row sends the child."""

    value: str = ""


@dataclass(slots=True)
class Drain:
    """The context of ``drain``: the listeners' BaseExceptions the roots' teardowns raised,
    raised by the caller once every teardown began."""

    escaped: list[BaseException] = field(default_factory=list)


@dataclass(slots=True)
class DrainBelow:
    """The context of ``drain_below`` (and of ``parent_disposing`` and ``parent_disposed``):
    the named parent, its activation if it has one, and the activations the drain awaits (its
    effects add them)."""

    parent: Agent
    node: Node | None
    below: list[Node]
    escaped: BaseException | None = None
    """The first listener's BaseException a teardown it began raised, raised after the row."""


@dataclass(slots=True)
class Spawn:
    """The context of ``spawn``: the child to run, and its handle once created."""

    child_id: str
    prompt: str
    session: Session
    signal: AbortSignal
    handle: AgentHandle | None = None
    off: Callable[[], None] = lambda: None
    """Removes the listener cancelling the child when the parent turn's signal aborts."""


DoorContext: TypeAlias = Route | Drain | DrainBelow | Spawn | Settled | Node
"""What a fire of the door carries beside its arguments (``release`` carries the child)."""


class _Wires(Protocol):
    """The wiring between instances, as the door's effects make its calls."""

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
    ) -> BaseException | None: ...

    def agent_to_door(self, effect: str, context: DrainBelow, kind: str | None) -> None: ...


@final
@hosts("admission")
class Door(Hosted[DoorContext]):
    """The registry's door: registry-wide drains, live parents, spawned children."""

    def __init__(
        self,
        spec: Machine,
        ledger: Ledger,
        wires: _Wires,
        create: Callable[[str, Session], AgentHandle],
    ) -> None:
        self._ledger = ledger
        self._wires = wires
        self._create = create
        self._spawned: deque[Agent] = deque()
        """Spawned children whose parent turn aborted, not cancelled yet."""
        self._cancelling = False
        """True iff :meth:`_cancel_spawned` is cancelling children (``_spawned`` is non-empty
        only while it is)."""
        self._host(spec)

    def _who(self) -> str:
        return "the registry's door"

    @property
    def state(self) -> str:
        return self.control.state

    def fire(self, event: str, context: DoorContext | None = None, /, **args: Value) -> None:
        """Fire a door event (``_hosting.py``'s rules)."""
        self._fire(event, context, **args)

    def ask(
        self, event: str, context: DoorContext | None, parent: object, /, **args: Value
    ) -> None:
        """Fire ``event``; the table's refusal is raised as the caller's :class:`SubagentError`."""
        try:
            self._fire(event, context, **args)
        except Rejected as refused:
            raise refusal(refused, parent) from None

    # --- what the bus tells it --------------------------------------------------------------

    def parent_disposing(self, started: DisposalStarted) -> None:
        """agent/disposing, inside the dispose call: the door's ``parent_disposing``, whose
        row disposes a host-owned agent's roots (each cancelled before this returns) and
        forgets its settled children. A listener's BaseException a root's teardown raised is
        raised once every root's teardown began."""
        kind, _ = self._ledger.parent_kind(started.agent)
        drain = DrainBelow(started.agent, None, [])
        running = {r.id for r in self._ledger.roots_of(started.agent) if r.closing is not None}
        self._wires.agent_to_door("publish_disposing", drain, kind)
        for root in drain.below:  # nobody awaits the teardowns it began: each settlement tells
            if root.id not in running and root.closing is not None:
                root.closing.add_done_callback(partial(read, "a teardown a host's disposal began"))
        if drain.escaped is not None:
            raise drain.escaped

    def parent_gone(self, ended: DisposalEnded) -> None:
        """agent/disposed: the door's ``parent_disposed`` (whose row forgets below it)."""
        self._wires.agent_to_door("publish_disposed", DrainBelow(ended.agent, None, []), None)

    # --- effects ----------------------------------------------------------------------------

    @performs("admit_root")
    def _admit_root(self) -> None:
        self._about(Route).value = "root"

    @performs("admit_below")
    def _admit_below(self) -> None:
        self._about(Route).value = "below"

    @performs("drain_roots")
    def _drain_roots(self) -> None:
        """Begin every root's teardown, even when one raises (a listener's BaseException
        held by the activations' scope); the first is raised by the drain once all began."""
        drain = self._about(Drain)
        error = self._wires.connect("admission", "drain_roots", (), None, each=True)
        if error is not None:
            drain.escaped.append(error)

    @performs("drain_activation")
    def _drain_activation(self) -> None:
        drain = self._about(DrainBelow)
        node = drain.node
        assert node is not None
        drain.below += self._ledger.children_of(node)
        drain.escaped = self._wires.connect(
            "admission", "drain_activation", (), None, named=node, each=True
        )

    @performs("close_below_host")
    def _close_below_host(self) -> None:
        self._ledger.drained_hosts[self._about(DrainBelow).parent] = None

    @performs("dispose_roots")
    def _dispose_roots(self, drain: bool) -> None:
        """Begin the teardown of every root of the named host parent, even when one raises
        (a listener's BaseException, held by the activations' scope); the first is raised
        once the door's row returned."""
        below = self._about(DrainBelow)
        below.below += self._ledger.roots_of(below.parent)
        below.escaped = self._wires.connect(
            "admission", "dispose_roots", (drain,), None, host=below.parent, each=True
        )

    @performs("run_child")
    def _run_child(self, wake: bool) -> None:
        """Create the spawned child, its parent signal's listener, and give it the prompt,
        waking it or parked unwoken, as the door's row says."""
        run = self._about(Spawn)
        run.handle = self._create(run.child_id, run.session)
        child = run.handle.agent
        run.off = run.signal.add_listener(lambda _s: self._cancel_spawned(child))
        message = UserMessage(f"{run.child_id}:prompt", run.prompt)
        self._wires.connect(
            "admission", "run_child", (wake,), None, new=run.handle, context=message
        )

    def _cancel_spawned(self, child: Agent) -> None:
        """A spawning turn's signal aborted: cancel its child with ``PARENT``.

        Inside another such cancel (the child's own spawned child aborts inside it, and so
        on), the child is queued, and the outermost call cancels it once the cancel in
        progress returned: a chain of any depth is cancelled top-down, generation by
        generation, inside the caller's call and before any await, with no Python frame per
        generation (as the wiring's cascade disposes a subtree). Each child's cancel row runs
        whole, its own abort listeners inside it. What one cancel raises does not stop the
        others: an Exception is logged, as the signal logs a listener's; the first
        BaseException is raised once every child was cancelled."""
        self._spawned.append(child)
        if self._cancelling:
            return  # the outermost call cancels it
        self._cancelling = True
        escaped: BaseException | None = None
        try:
            while self._spawned:
                agent = self._spawned.popleft()
                try:
                    agent.cancel(PARENT)
                except (Exception, asyncio.CancelledError):
                    log.exception(
                        "cancelling the spawned child %s raised; the abort goes on", agent.id
                    )
                except BaseException as error:
                    escaped = escaped or error
        finally:
            self._cancelling = False
        if escaped is not None:
            raise escaped

    @performs("remember_child")
    def _remember_child(self) -> None:
        self._ledger.remember(self._about(Node))

    @performs("forget_below")
    def _forget_below(self) -> None:
        self._ledger.forget_below(self._about(DrainBelow).parent)

    @performs("notice_host")
    def _notice_host(self) -> None:
        settled = self._about(Settled)
        notice = self._ledger.notice(settled.child, settled.failed)
        self._wires.connect("admission", "notice_host", (), settled.child, context=notice)

    def __repr__(self) -> str:
        return f"<Door {self.control!r}>"


def refusal(refused: Rejected, parent: object, activation: str | None = None) -> SubagentError:
    """The table's refusal ``CODE: why`` as the caller's :class:`SubagentError`, naming the
    parent or the activation the table's text calls "this parent" or "the activation"."""
    code, _, why = str(refused).partition(": ")
    if "below this parent" in why:
        why = draining_below(getattr(parent, "id", "?"))
    elif code == "UNAUTHORIZED" and why.startswith("not a live parent"):
        why = f"{echo(parent)} is {why}"
    elif activation is not None:
        why = why.replace("the activation", f"activation {activation!r}", 1)
    return SubagentError(cast(SubagentCode, code), why)
