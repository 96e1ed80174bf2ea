"""The composition root: one event bus, the model seam, the tools, and the agents."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import final

from fsm_core._errors import SpecError, UsageError, echo, known
from fsm_core.runtime._agent import Agent
from fsm_core.runtime._core import AgentCore, AgentHandle, _check_table
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._hooks import Hooks
from fsm_core.runtime._initiators import AgentRegistry
from fsm_core.runtime._llm import ModelAdapter, Tool
from fsm_core.runtime._session import Session
from fsm_core.runtime._subagents import Subagents
from fsm_core.runtime._teardown import Pending, persist
from fsm_core.table import load_spec

__all__ = ["Runtime"]

log = logging.getLogger("fsm_core.runtime")


@final
class Runtime:
    """Create agents that share one event bus, one model seam and one set of tools.

    ``aclose()`` stops admitting agents, disposes every agent and returns only when all their
    work has settled, including work that ignores its signal: nothing is raced or abandoned,
    but a session writer's call past its flush deadline (:class:`~fsm_core.runtime.Session`'s
    ``flush_timeout``), which the flush cancelled and stopped waiting for.
    """

    def __init__(
        self,
        model: ModelAdapter,
        tools: Iterable[Tool] = (),
        *,
        specs: Path | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        self.events = EventBus()
        self.model = model
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        self.hooks = hooks if hooks is not None else Hooks()
        """The hook commands every agent's driver runs (:class:`~fsm_core.Hooks`)."""
        spec = load_spec(specs)
        if "agent" not in spec.machines:
            raise SpecError(
                str(spec.root),
                "",
                f"no table defines the machine 'agent' that the runtime runs "
                f"(machines: {known(spec.machines) or 'none'})",
            )
        for machine, runner in (
            ("activation", "rt.subagents"),
            ("admission", "rt.subagents' door"),
        ):
            if machine not in spec.machines:
                raise SpecError(
                    str(spec.root),
                    "",
                    f"no table defines the machine {machine!r} that {runner} runs "
                    f"(machines: {known(spec.machines)})",
                )
        self._table = spec.machines["agent"]
        _check_table(self._table)  # the agent table first: the registry's wiring reads it too
        self._handles: dict[str, AgentHandle] = {}
        self.agents = AgentRegistry(self._handles)
        """The live agents by id, the initiator scope and boundaries (``AgentRegistry``)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing: asyncio.Future[None] | None = None
        if spec.wiring is None:
            raise SpecError(
                str(spec.root), "", "no wiring.toml connects the tables that rt.subagents runs"
            )
        self.subagents = Subagents(
            spec.machines["activation"],
            spec.machines["admission"],
            spec.wiring,
            events=self.events,
            create=self._new_agent,
            host_agent=self._host_agent,
            in_use=self._handles.__contains__,
        )
        """The activation registry (seed 004): continuable children, drains, spawn, fork."""

    async def create_agent(self, agent_id: str, session: Session | None = None) -> AgentHandle:
        """A new agent recording into ``session`` (a fresh in-memory one by default).

        Raises :class:`~fsm_core.UsageError` once ``aclose()`` has begun, for an id in use,
        and for a session another live agent records into.
        """
        return self._new_agent(agent_id, session or Session())

    def _new_agent(self, agent_id: str, session: Session) -> AgentHandle:
        if self._closing is not None:
            raise UsageError(f"the runtime is closing; agent {echo(agent_id)} was not created")
        if type(agent_id) is not str or not 0 < len(agent_id) <= 200 or not agent_id.isprintable():
            raise UsageError(f"an agent id is 1 to 200 printable characters, not {echo(agent_id)}")
        if agent_id in self._handles or self.subagents.holds(agent_id):
            raise UsageError(f"an agent named {echo(agent_id)} already exists")
        core = AgentCore(
            agent_id,
            self._table,
            session,
            seams=self,
            track=self._track,
            forget=self._forget,
        )
        handle = self._handles[agent_id] = AgentHandle(core)
        return handle

    def aclose(self) -> Pending:
        """Stop admitting, and begin tearing down every activation (child-first: each disposes
        its agent once its children settled) and disposing every other agent, inside this
        call; await the result for every driver this runtime started to have settled.

        Memoized: every caller awaits the same close, and cancelling a caller does not cancel
        it. Agents that failed to dispose (a failed final flush) are raised together, as an
        ``BaseExceptionGroup``, once everything has settled. Awaiting it from an agent's own
        turn raises :class:`~fsm_core.UsageError` (it would wait for that turn).
        """
        if self._closing is None:
            # Every agent's disposal begins inside this call, before any await, so no agent
            # takes or runs new work once aclose() was called (seed 004: stop accepting). The
            # subagent trees go first: drained (admission closed, every tree cancelled with
            # PARENT and torn down child-first), then every other agent's disposal begins.
            # An activation's agent is disposed by its own teardown, after its children
            # settled (finishDisposal ends with handle.dispose): disposing it here would
            # close its inbox to their settlement notices.
            escaped: BaseException | None = None
            try:
                drained = self.subagents._close()
            except BaseException as error:  # a listener's; the drain began anyway
                escaped = error
                drained = self.subagents._close()
            disposals = [drained]
            for handle in list(self._handles.values()):
                if self.subagents.holds(handle.agent.id):
                    continue
                try:
                    handle._begin()
                except BaseException as error:  # a listener's; the disposal began anyway
                    escaped = escaped or error
                assert handle._disposal is not None
                disposals.append(handle._disposal)
            self._closing = persist(lambda: self._close(disposals), "aclose")
            if escaped is not None:
                raise escaped
        return Pending(asyncio.shield(self._closing), self._refuse_own_turn)

    def _refuse_own_turn(self) -> None:
        if asyncio.current_task() in self._tasks:
            raise UsageError(
                "an agent's own turn cannot await aclose(), which waits for that turn to end; "
                "the close has begun, return from the turn"
            )
        self.agents._refuse_inside("aclose()")

    async def _close(self, disposals: list[asyncio.Future[None]]) -> None:
        # asyncio.wait, unlike gather, never cancels what it waits for.
        while pending := [t for t in (*disposals, *self._tasks) if not t.done()]:
            await asyncio.wait(pending)
        # disposeInitiators, then closeInitiators (seed 004): every agent's disposal disposed
        # its scope (its boundaries settled), and only then does the registry close.
        self.agents._begin_close()
        await self.agents._wait_closed()
        failures = [t.exception() for t in disposals if t.exception() is not None]
        if failures:
            raise BaseExceptionGroup(
                "some agents failed to dispose", [f for f in failures if f is not None]
            )

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a driver failed", exc_info=task.exception())

    def _host_agent(self, agent_id: str) -> Agent | None:
        """The live agent ``agent_id`` unless it is an activation's (the registry owns it)."""
        handle = self._handles.get(agent_id)
        return None if handle is None or self.subagents.holds(agent_id) else handle.agent

    def _forget(self, agent_id: str) -> None:
        handle = self._handles.pop(agent_id, None)
        if handle is not None:
            self.agents._forget(handle.agent)

    def unwind(self, agent: Agent) -> Awaitable[None]:
        """Dispose ``agent``'s scope (:class:`~fsm_core.runtime._core.Seams`)."""
        return self.agents._unwind(agent)

    def refuse_inside(self, agent: Agent, call: str) -> None:
        """Refuse awaiting ``call`` inside a boundary of ``agent`` (``Seams``)."""
        self.agents._refuse_inside_of(agent, call)
