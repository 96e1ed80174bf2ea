"""The composition root: one event bus, the model seam, the tools, and the agents."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path

from fsm_core._errors import FsmError, SpecError, known
from fsm_core.runtime._agent import Agent, AgentHandle
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._model import ModelAdapter, Tool
from fsm_core.runtime._session import Session
from fsm_core.spec import load_spec

__all__ = ["Runtime"]

log = logging.getLogger("fsm_core.runtime")


class Runtime:
    """Create agents that share one event bus, one model seam and one set of tools.

    ``aclose()`` disposes every agent and returns only when all their work has settled,
    including work that ignores its signal: nothing is raced or abandoned.
    """

    def __init__(
        self, model: ModelAdapter, tools: Iterable[Tool] = (), *, specs: Path | None = None
    ) -> None:
        self.events = EventBus()
        self.model = model
        self.tools: dict[str, Tool] = {t.name: t for t in tools}
        spec = load_spec(specs)
        if "agent" not in spec.machines:
            raise SpecError(
                str(spec.root),
                "",
                f"no table defines the machine 'agent' that the runtime runs "
                f"(machines: {known(spec.machines) or 'none'})",
            )
        self._table = spec.machines["agent"]
        self._handles: dict[str, AgentHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def agents(self) -> dict[str, Agent]:
        return {name: h.agent for name, h in self._handles.items()}

    async def create_agent(self, agent_id: str, session: Session | None = None) -> AgentHandle:
        if agent_id in self._handles:
            raise FsmError(f"an agent named {agent_id!r} already exists")
        agent = Agent(self, agent_id, self._table, session or Session())
        handle = self._handles[agent_id] = AgentHandle(agent)
        return handle

    async def aclose(self) -> None:
        """Dispose every agent, then wait for every driver this runtime started."""
        await asyncio.gather(*(h.dispose() for h in list(self._handles.values())))
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a driver failed", exc_info=task.exception())

    def _forget(self, agent: Agent) -> None:
        self._handles.pop(agent.id, None)
