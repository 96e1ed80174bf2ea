"""The agent registry, ``rt.agents``: a runtime's agents by id, and which agent initiated the
work running.

``rt.agents`` is a read-only mapping of the live agents by id. It also answers which agent
initiated the current work, and opens *boundaries*: work run on an agent's behalf from outside
its driver (a protocol adapter answering for the agent, a parent running a child's step)::

    rt.agents["a1"]                              # the live agent named a1
    rt.agents.current()                          # the initiating Agent in a driver; None outside
    await rt.agents.run(agent, lambda: work())   # work() runs with agent as its initiator
    await rt.agents.close()                      # no new boundary; the active ones settle

The initiator is the exact :class:`~fsm_core.Agent` and nothing else: it never carries a turn,
a step or a signal (seed 000: cancellation authority ends with one turn, while the ambient
scope follows every asynchronous descendant for the driver's whole life). Cancellation travels
explicitly, as each seam's ``signal``.

Each agent has a scope of its own: its disposal disposes it once the agent is idle (seed 004's
``await machine.scope.dispose()``), refusing new boundaries of that agent and waiting for its
active ones, however long they ignore the signal, before ``agent/disposed``. A boundary of an
agent cannot await that agent's disposal (it would wait for itself): it is refused.

Closing refuses new boundaries at once and waits for the active ones to settle. A boundary that
itself awaits the close does not wait for itself: the close it awaits returns once every
boundary is either gone or also waiting for the close, so two boundaries that both await it do
not deadlock either. ``rt.aclose()`` disposes every agent first and closes the registry last
(seed 004: disposeInitiators, then closeInitiators); once closed, :meth:`current` refuses, as
the original's disposed initiator scope does.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar, final

from fsm_core._errors import UsageError, echo
from fsm_core.runtime._scope import _INITIATOR, initiating_agent
from fsm_core.runtime._teardown import Pending

if TYPE_CHECKING:
    from fsm_core.runtime._agent import Agent
    from fsm_core.runtime._core import AgentHandle

__all__ = ["AgentRegistry"]

T = TypeVar("T")


@final
class _Boundary:
    """One active :meth:`AgentRegistry.run`."""

    __slots__ = ("agent", "registry", "waiting")

    def __init__(self, registry: AgentRegistry, agent: Agent) -> None:
        self.registry = registry
        self.agent = agent
        self.waiting = 0
        """How many of the close's waiters started inside this boundary are still waiting."""


_BOUNDARIES: contextvars.ContextVar[tuple[_Boundary, ...]] = contextvars.ContextVar(
    "fsm_core_boundaries", default=()
)
"""The boundaries the current context runs inside, outermost first (bookkeeping for close:
a boundary holds its agent, never a turn or a signal)."""


@final
class AgentRegistry(Mapping[str, "Agent"]):
    """The live agents of one runtime by id, the initiator scope, and boundaries.

    Built by :class:`~fsm_core.Runtime` (``rt.agents``) over its own handles: an agent is in
    it from ``create_agent`` until its disposal finished.
    """

    def __init__(self, handles: Mapping[str, AgentHandle]) -> None:
        self._handles = handles
        self._active: set[_Boundary] = set()
        # Invariant: _closed is set iff close() was called; it is done iff _active was empty
        # at some point since.
        self._closed: asyncio.Future[None] | None = None
        self._inside: list[tuple[asyncio.Future[None], tuple[_Boundary, ...]]] = []
        """close() waiters that started inside boundaries, with those boundaries."""
        self._unwinding: dict[Agent, asyncio.Future[None]] = {}
        """The agents whose scope their disposal disposed (no boundary of them opens again),
        each with the future that resolves once its last boundary settled; an entry goes
        with the agent (:meth:`_forget`)."""

    # --- the mapping ------------------------------------------------------------------------

    def __getitem__(self, agent_id: str) -> Agent:
        return self._handles[agent_id].agent

    def __iter__(self) -> Iterator[str]:
        return iter(self._handles)

    def __len__(self) -> int:
        return len(self._handles)

    def __repr__(self) -> str:
        state = "closing" if self._closed is not None else "open"
        return f"<AgentRegistry agents={len(self)} boundaries={len(self._active)} {state}>"

    # --- the initiator ------------------------------------------------------------------------

    def current(self) -> Agent | None:
        """The agent whose driver (or boundary) runs the current task; None outside any.

        Raises :class:`~fsm_core.UsageError` once the registry closed: the initiator scope
        is disposed, so there is nothing left to ask.
        """
        if self._closed is not None and self._closed.done():
            raise UsageError(
                "agent initiator scope is disposed: the agent registry closed, and no agent "
                "initiates work any more"
            )
        return initiating_agent()

    @property
    def closing(self) -> bool:
        """True iff :meth:`close` was called: no new boundary opens."""
        return self._closed is not None

    async def run(self, agent: Agent, work: Callable[[], Awaitable[T]]) -> T:
        """Await ``work()`` in a boundary of ``agent``: inside it, and in every task it starts,
        :meth:`current` is ``agent``. Returns what ``work()`` returns.

        Raises :class:`~fsm_core.UsageError` once :meth:`close` was called, and for an agent
        that is not a live agent of this runtime.
        """
        agent_id = getattr(agent, "id", None)
        if self._closed is not None:
            named = echo(agent_id) if isinstance(agent_id, str) else echo(agent)
            raise UsageError(
                f"the agent registry is closing; no new boundary opens for agent {named}"
            )
        handle = self._handles.get(agent_id) if isinstance(agent_id, str) else None
        if handle is None or handle.agent is not agent:
            raise UsageError(
                f"{echo(agent)} is not a live agent of this runtime; a boundary needs one"
            )
        if agent in self._unwinding:
            raise UsageError(
                f"agent {echo(agent.id)} is disposing and its scope is disposed; no new "
                f"boundary opens for it"
            )
        boundary = _Boundary(self, agent)
        self._active.add(boundary)
        initiator = _INITIATOR.set(agent)
        stack = _BOUNDARIES.set((*_BOUNDARIES.get(), boundary))
        try:
            return await work()
        finally:
            _BOUNDARIES.reset(stack)
            _INITIATOR.reset(initiator)
            self._active.discard(boundary)
            self._settle()
            self._unwound(agent)

    def _unwind(self, agent: Agent) -> Awaitable[None]:
        """Dispose ``agent``'s scope: no boundary of it opens from now on; the result resolves
        once none is active (its disposal awaits it, once the agent is idle)."""
        done = self._unwinding.get(agent)
        if done is None:
            done = self._unwinding[agent] = asyncio.get_running_loop().create_future()
            self._unwound(agent)
        return asyncio.shield(done)

    def _unwound(self, agent: Agent) -> None:
        """Resolve ``agent``'s unwinding once its last boundary settled."""
        done = self._unwinding.get(agent)
        idle = not any(b.agent is agent for b in self._active)
        if done is not None and not done.done() and idle:
            done.set_result(None)

    def _refuse_inside_of(self, agent: Agent, call: str) -> None:
        """Raise :class:`~fsm_core.UsageError` when the current context runs inside an active
        boundary of ``agent``: ``call`` would wait for that boundary to end."""
        for boundary in _BOUNDARIES.get():
            if boundary.agent is agent and boundary in self._active:
                raise UsageError(
                    f"a boundary of agent {echo(agent.id)} cannot await {call}, which waits for "
                    f"every boundary of the agent to end; the disposal has begun, return from "
                    f"the boundary"
                )

    def _forget(self, agent: Agent) -> None:
        """``agent`` left the runtime: its scope's bookkeeping goes with it."""
        self._unwinding.pop(agent, None)

    def close(self) -> Pending:
        """Refuse new boundaries, inside this call; await the result for the active ones to
        settle.

        Memoized: every caller waits for the same close. Awaited from outside any boundary,
        it returns once no boundary is active. Awaited from inside boundaries (those of the
        current context), it returns once every active boundary is either one of those or
        also waiting for the close: it never waits for itself. A boundary counts as waiting
        only while something awaits its close: one that calls close() and works on, or
        whose awaiting task is cancelled, is still waited for.
        """
        self._begin_close()
        mine = tuple(b for b in _BOUNDARIES.get() if b.registry is self and b in self._active)
        if not mine:
            assert self._closed is not None
            return Pending(asyncio.shield(self._closed), _never)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        awaited = asyncio.shield(waiter)
        # The boundaries count as waiting only once the close is awaited: a close called
        # and never awaited (or whose awaiting task was cancelled) leaves them working.
        awaited.add_done_callback(lambda f: self._unwait(waiter, mine) if f.cancelled() else None)
        return Pending(awaited, lambda: self._wait(waiter, mine))

    def _wait(self, waiter: asyncio.Future[None], mine: tuple[_Boundary, ...]) -> None:
        """Count ``mine`` as waiting for the close ``waiter`` resolves (it is awaited now)."""
        if waiter.done() or any(w is waiter for w, _ in self._inside):
            return
        for boundary in mine:
            boundary.waiting += 1
        self._inside.append((waiter, mine))
        self._settle()

    def _unwait(self, waiter: asyncio.Future[None], mine: tuple[_Boundary, ...]) -> None:
        """The close ``waiter`` is no longer awaited: ``mine`` stop counting as waiting."""
        if waiter.done():
            return
        waiter.cancel()
        before = len(self._inside)
        self._inside = [(w, b) for w, b in self._inside if w is not waiter]
        if len(self._inside) < before:
            for boundary in mine:
                boundary.waiting -= 1
        self._settle()

    def _begin_close(self) -> None:
        """Refuse new boundaries from now on (what :meth:`close` does first)."""
        if self._closed is None:
            self._closed = asyncio.get_running_loop().create_future()
            self._settle()

    def _refuse_inside(self, call: str) -> None:
        """Raise :class:`~fsm_core.UsageError` when the current context runs inside one of
        this registry's boundaries: ``call`` would wait for that boundary to end."""
        for boundary in _BOUNDARIES.get():
            if boundary.registry is self and boundary in self._active:
                raise UsageError(
                    f"a boundary of agent {echo(boundary.agent.id)} cannot await {call}, which "
                    f"waits for every boundary to end; await rt.agents.close() or return"
                )

    def _settle(self) -> None:
        """Resolve the waiters whose condition now holds (see :meth:`close`)."""
        if self._closed is None:
            return
        if all(b.waiting for b in self._active):
            inside, self._inside = self._inside, []
            for waiter, boundaries in inside:
                for boundary in boundaries:
                    boundary.waiting -= 1
                if not waiter.done():
                    waiter.set_result(None)
        if not self._active and not self._closed.done():
            self._closed.set_result(None)

    async def _wait_closed(self) -> None:
        """Wait until no boundary is active (close() must have been called)."""
        assert self._closed is not None
        await asyncio.shield(self._closed)


def _never() -> None:
    """Nothing to refuse: close() never waits for the boundary that awaits it."""
