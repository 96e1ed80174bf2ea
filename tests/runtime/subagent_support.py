"""Doubles for the subagent tests: a model seam routed by agent, and sessions whose final
flushes a test holds or fails."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from fsm_core.runtime import (
    AbortSignal,
    ActivationSettled,
    Agent,
    Reply,
    Request,
    Runtime,
    Session,
    SessionError,
)
from fsm_core.testing import Gate, ScriptedModel


class Models:
    """The model seam of a runtime with many agents: each agent plays its own script, and an
    agent with no step left answers ``Reply("<id>: ok")``."""

    def __init__(self) -> None:
        self.scripts: dict[str, ScriptedModel] = {}
        self.signals: dict[str, list[AbortSignal]] = {}

    def script(self, agent_id: str, *steps: Any) -> ScriptedModel:
        model = self.scripts.setdefault(agent_id, ScriptedModel())
        model.then(*steps)
        return model

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        self.signals.setdefault(request.agent_id, []).append(signal)
        model = self.scripts.get(request.agent_id)
        if model is None or not model.script:
            return Reply(f"{request.agent_id}: ok")
        return await model.generate(request, signal)


class HeldSession:
    """A session whose flushes, once :meth:`hold` or :meth:`fail` armed it, wait on a gate or
    raise: the turns before run as usual, the teardown's flushes meet the trap.

    ``session`` is a plain :class:`~fsm_core.runtime.Session` writing through this helper (its
    ``writer``), so a test stands in for a slow or full disk without subclassing it: the
    teardown's flushes (the final flush, the handle's) call ``session.flush()`` directly, with
    no seam a listener could hold.
    """

    __slots__ = ("error", "flushes", "gate", "session")

    def __init__(self) -> None:
        self.gate: Gate | None = None
        self.error: BaseException | None = None
        self.flushes = 0
        self.session = Session(writer=self._write)

    def hold(self, gate: Gate) -> HeldSession:
        self.gate = gate
        return self

    def fail(self, error: BaseException | None = None) -> HeldSession:
        self.error = error or SessionError("disk", "", "cannot write the log: full")
        return self

    async def _write(self, _log: str) -> None:
        self.flushes += 1
        if self.gate is not None:
            await self.gate.wait(cooperate=False)
        if self.error is not None:
            raise self.error


class Settlements:
    """Every ``subagent/settled`` in order, with what the registry held at that moment."""

    def __init__(self, rt: Runtime) -> None:
        self.log: list[tuple[str, bool]] = []
        self.resident_then: dict[str, tuple[str, ...]] = {}
        self._events: dict[str, asyncio.Event] = {}
        rt.events.on("subagent/settled", self._seen)
        self._rt = rt

    def _seen(self, event: ActivationSettled) -> None:
        self.log.append((event.activation.id, event.failed))
        self.resident_then[event.activation.id] = self._rt.subagents.resident
        self._event(event.activation.id).set()

    def _event(self, activation: str) -> asyncio.Event:
        return self._events.setdefault(activation, asyncio.Event())

    async def of(self, *activations: str) -> None:
        """Return once each of ``activations`` has settled."""
        for activation in activations:
            await self._event(activation).wait()

    @property
    def ids(self) -> list[str]:
        return [i for i, _ in self.log]


def run(test: Callable[[Runtime, Models, Agent], Coroutine[Any, Any, None]]) -> None:
    """Run ``test(rt, models, host)`` on a fresh runtime with a host-owned agent ``host``, then
    close the runtime (every teardown must converge for this to return)."""

    async def main() -> None:
        models = Models()
        rt = Runtime(models)
        host = (await rt.create_agent("host")).agent
        try:
            await test(rt, models, host)
        finally:
            await rt.aclose()

    asyncio.run(main())


def turn_outcomes(agent: Agent) -> list[str]:
    """The ``kind`` of every ``turn/end`` in the agent's log."""
    outcomes = [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"]
    return [str(o["kind"]) for o in outcomes if isinstance(o, Mapping)]
