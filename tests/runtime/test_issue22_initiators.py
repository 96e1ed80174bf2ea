"""Issue 22, the initiator scope (``rt.agents``): faults 1, 3 and 11, each pinned as the
behaviour intended, expected to fail (``strict``) until it is fixed.

1. An agent's disposal waits for the work inside its boundaries before it publishes
   ``agent/disposed`` and leaves ``rt.agents``.
3. After the registry closed, ``run(None, ...)`` and ``current()`` refuse with UsageError.
11. ``aclose()`` disposes the agents (disposeInitiators) before it closes the initiator scope
    (closeInitiators).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest

from fsm_core import Agent, Runtime, UsageError
from fsm_core.runtime import DisposalEnded, DisposalStarted, Session
from fsm_core.testing import ScriptedModel
from tests.idle_loop import IdleLoop
from tests.runtime.issue22_support import GUARD, bounded, drive, no_thread_left

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    with no_thread_left():
        yield


# --- fault 1: disposal waits for the work inside the agent's boundaries ------------------------


def test_disposal_waits_for_the_work_inside_the_agents_boundaries() -> None:
    """Work in ``rt.agents.run(agent, ...)`` that ignores every signal: the agent's
    ``dispose()`` resolves, ``agent/disposed`` is published and the agent leaves
    ``rt.agents`` only once that work settled."""

    async def main(loop: IdleLoop) -> None:
        rt = Runtime(model=ScriptedModel([]))
        handle = await rt.create_agent("a1")
        entered, release = asyncio.Event(), asyncio.Event()
        disposed: list[bool] = []  # whether the boundary's work had settled by then

        settled: list[bool] = []

        async def work() -> str:
            entered.set()
            try:
                await release.wait()  # no signal reaches it: it ignores the disposal
            finally:
                settled.append(True)
            return "settled"

        def seen(event: DisposalEnded) -> None:
            disposed.append(bool(settled))

        rt.events.on("agent/disposed", seen)
        boundary = asyncio.ensure_future(rt.agents.run(handle.agent, work))
        await entered.wait()
        disposal = asyncio.ensure_future(bounded(handle.dispose(), GUARD))
        await loop.idle()  # whatever could happen without the work settling has happened
        early = (disposal.done(), list(disposed), "a1" in rt.agents)
        release.set()
        assert await boundary == "settled"
        await disposal
        await bounded(rt.aclose())
        assert early == (False, [], True), (
            "with the boundary's work still running: (dispose() resolved, agent/disposed "
            "published, a1 in rt.agents)"
        )
        assert disposed == [True] and "a1" not in rt.agents

    drive(main)


# --- fault 3: the registry refuses, after its close, as a disposed scope does ------------------


async def _closed_by_aclose(rt: Runtime) -> None:
    await rt.aclose()


async def _closed_by_registry_close(rt: Runtime) -> None:
    await rt.agents.close()


CLOSES: dict[str, Callable[[Runtime], Awaitable[None]]] = {
    "aclose": _closed_by_aclose,
    "agents.close": _closed_by_registry_close,
}


@pytest.mark.parametrize("close", CLOSES)
def test_run_with_no_agent_after_the_close_is_a_usage_error(close: str) -> None:
    async def main(loop: IdleLoop) -> None:
        rt = Runtime(model=ScriptedModel([]))
        await rt.create_agent("a1")
        await CLOSES[close](rt)

        async def work() -> None:
            raise AssertionError("no boundary opens after the close")

        try:
            with pytest.raises(UsageError):
                await rt.agents.run(None, work)  # type: ignore[arg-type]  # what is refused
        finally:
            await bounded(rt.aclose())

    drive(main)


@pytest.mark.parametrize("close", CLOSES)
def test_current_after_the_close_refuses_as_a_disposed_scope(close: str) -> None:
    async def main(loop: IdleLoop) -> None:
        rt = Runtime(model=ScriptedModel([]))
        await rt.create_agent("a1")
        await CLOSES[close](rt)
        try:
            with pytest.raises(UsageError, match="agent initiator scope is disposed"):
                rt.agents.current()
        finally:
            await bounded(rt.aclose())

    drive(main)


# --- fault 11: aclose disposes the agents, then closes the initiator scope ---------------------


def test_aclose_disposes_the_agents_before_it_closes_the_initiator_scope() -> None:
    """At the start of each agent's disposal (an ``agent/disposing`` listener) a boundary
    still opens and ``current()`` still answers: aclose() closes the registry only after
    every agent was disposed. The agent's own scope is disposed before its log's last write
    (seed 004: ``await machine.scope.dispose()`` before ``await handle?.close()``), so a
    boundary of it opened during that write is refused as the agent's, not the registry's;
    once ``aclose()`` returned, a new boundary is refused."""

    async def main(loop: IdleLoop) -> None:
        agents: dict[str, Agent] = {}
        during: list[tuple[str, object]] = []

        async def work() -> Agent | None:
            return rt.agents.current()

        async def opened(where: str, agent: Agent) -> None:
            try:
                during.append((where, await rt.agents.run(agent, work) is agent))
            except UsageError as refused:
                during.append((where, str(refused)))

        runs: list[asyncio.Future[None]] = []

        def disposing(event: DisposalStarted) -> None:
            during.append(("listener current()", rt.agents.current()))
            runs.append(asyncio.ensure_future(opened("listener run", event.agent)))

        async def write(_log: str) -> None:
            agent = agents.get("a1")
            if agent is not None and agent.phase == "disposing":
                await opened("final flush run", agent)

        rt = Runtime(model=ScriptedModel([]))
        rt.events.on("agent/disposing", disposing)
        agents["a1"] = (await rt.create_agent("a1", Session(writer=write))).agent
        await bounded(rt.aclose())
        await bounded(asyncio.gather(*runs))
        assert sorted(during, key=str) == sorted(
            [
                (
                    "final flush run",
                    "agent 'a1' is disposing and its scope is disposed; no new boundary opens "
                    "for it",
                ),
                ("listener current()", None),
                ("listener run", True),
            ],
            key=str,
        )
        with pytest.raises(UsageError, match=r"^the agent registry is closing; "):
            await rt.agents.run(agents["a1"], work)

    drive(main)


def test_a_boundary_of_an_agent_cannot_await_that_agents_disposal() -> None:
    """The disposal waits for every boundary of the agent, so a boundary awaiting it would wait
    for itself: refused, and the disposal it began completes once the boundary returned."""

    async def main(loop: IdleLoop) -> None:
        rt = Runtime(model=ScriptedModel([]))
        handle = await rt.create_agent("a1")
        disposal: list[object] = []

        async def work() -> str:
            pending = handle.dispose()
            disposal.append(pending)
            with pytest.raises(
                UsageError,
                match=r"^a boundary of agent 'a1' cannot await its disposal, which waits for "
                r"every boundary of the agent to end; the disposal has begun, return from the "
                r"boundary$",
            ):
                await pending
            return "returned"

        assert await rt.agents.run(handle.agent, work) == "returned"
        await bounded(handle.dispose())
        assert handle.agent.phase == "disposed" and "a1" not in rt.agents
        await bounded(rt.aclose())

    drive(main)
