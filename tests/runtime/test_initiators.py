"""``rt.agents``: the live agents by id, the initiating agent of the running work (and only
the agent), and boundaries that the registry's close refuses, waits for, and never deadlocks
on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from fsm_core import Agent, AgentRegistry, Reply, Runtime, ToolCall, UsageError, UserMessage
from fsm_core.testing import ScriptedModel, ScriptedTool
from tests.idle_loop import IdleLoop

pytestmark = pytest.mark.timeout(60)  # a deadlock fails here rather than hanging the suite


def test_the_registry_is_a_mapping_of_the_live_agents() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([]))
        a1 = (await rt.create_agent("a1")).agent
        a2 = (await rt.create_agent("a2")).agent
        assert isinstance(rt.agents, AgentRegistry) and isinstance(rt.agents, Mapping)
        assert rt.agents == {"a1": a1, "a2": a2}
        assert rt.agents["a1"] is a1 and list(rt.agents) == ["a1", "a2"] and len(rt.agents) == 2
        with pytest.raises(KeyError):
            rt.agents["a3"]
        await rt.aclose()
        assert rt.agents == {} and rt.agents.closing

    asyncio.run(main())


def test_current_is_the_initiating_agent_in_every_seam_and_none_outside() -> None:
    seen: list[tuple[str, Agent | None]] = []

    async def main() -> None:
        tool = ScriptedTool("t", ["done"])
        model = ScriptedModel(
            [
                Reply(tool_calls=(ToolCall("c1", "t"),), finish="tool_calls"),
                Reply("a1 done"),
                Reply("a2 done"),
            ]
        )
        rt = Runtime(model=model, tools=[tool])
        a1 = (await rt.create_agent("a1")).agent
        a2 = (await rt.create_agent("a2")).agent

        async def pre_step(payload: Any, next: Any) -> Any:
            seen.append((payload.agent.id, rt.agents.current()))
            return await next(payload)

        rt.events.on("agent/pre-step", pre_step)
        rt.events.on("turn/end", lambda e: seen.append(("end " + e.agent.id, rt.agents.current())))
        a1.followup(UserMessage("m1", "hi"))
        a2.followup(UserMessage("m2", "hi"))
        await asyncio.gather(a1.when_idle(), a2.when_idle())
        assert rt.agents.current() is None
        await rt.aclose()
        by_id = {"a1": a1, "a2": a2}
        assert sorted(who for who, _ in seen) == ["a1", "a1", "a2", "end a1", "end a2"]
        assert all(current is by_id[who.removeprefix("end ")] for who, current in seen)

    asyncio.run(main())


def test_a_boundary_makes_its_agent_current_for_its_work_and_what_it_starts() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([]))
        a1 = (await rt.create_agent("a1")).agent
        a2 = (await rt.create_agent("a2")).agent

        async def spawned_reads() -> Agent | None:
            return rt.agents.current()  # read inside the task the boundary's work started

        async def inner() -> list[Agent | None]:
            spawned = asyncio.ensure_future(spawned_reads())
            return [rt.agents.current(), await spawned]

        async def outer() -> list[Agent | None]:
            nested = await rt.agents.run(a2, inner)  # a child shadows only the identity
            return [rt.agents.current(), *nested, rt.agents.current()]

        assert await rt.agents.run(a1, outer) == [a1, a2, a2, a1]
        assert rt.agents.current() is None
        await rt.aclose()

    asyncio.run(main())


def test_closing_refuses_new_boundaries_and_waits_for_the_active_ones() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([]))
        a1 = (await rt.create_agent("a1")).agent
        entered, release = asyncio.Event(), asyncio.Event()

        async def work() -> str:
            entered.set()
            await release.wait()
            return "settled"

        boundary = asyncio.ensure_future(rt.agents.run(a1, work))
        await entered.wait()
        closed = asyncio.ensure_future(rt.agents.close())
        with pytest.raises(
            UsageError,
            match=r"^the agent registry is closing; no new boundary opens for agent 'a1'$",
        ):
            await rt.agents.run(a1, work)
        await loop.idle()  # the close has had its chance to return early
        assert not closed.done()
        release.set()
        assert await boundary == "settled"
        await closed
        await rt.aclose()

    loop = IdleLoop()
    loop.run(main())


def test_boundaries_that_await_the_close_do_not_deadlock() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([]))
        a1 = (await rt.create_agent("a1")).agent
        a2 = (await rt.create_agent("a2")).agent
        a3 = (await rt.create_agent("a3")).agent
        order: list[str] = []
        entered, release, go = asyncio.Event(), asyncio.Event(), asyncio.Event()
        ready = {"a1": asyncio.Event(), "a2": asyncio.Event()}

        async def closer(name: str) -> None:
            ready[name].set()
            await go.wait()
            await rt.agents.close()
            order.append(name)

        async def busy() -> None:
            entered.set()
            await release.wait()
            order.append("a3")

        b3 = asyncio.ensure_future(rt.agents.run(a3, busy))
        b1 = asyncio.ensure_future(rt.agents.run(a1, lambda: closer("a1")))
        b2 = asyncio.ensure_future(rt.agents.run(a2, lambda: closer("a2")))
        await asyncio.gather(entered.wait(), ready["a1"].wait(), ready["a2"].wait())
        go.set()
        outside = asyncio.ensure_future(rt.agents.close())
        await loop.idle()  # the closers run up to their close and park there
        assert not (b1.done() or b2.done() or outside.done()), "a3 is still working"
        release.set()
        await asyncio.gather(b1, b2, b3, outside)
        assert order[0] == "a3" and sorted(order[1:]) == ["a1", "a2"]
        await rt.aclose()

    loop = IdleLoop()
    loop.run(main())


async def _two_boundaries(
    loop: IdleLoop,
    first: Callable[[Runtime], Awaitable[None]],
) -> tuple[list[str], asyncio.Future[None], asyncio.Future[None], asyncio.Event, Runtime]:
    """a1's boundary runs ``first`` (which must leave a1 working until released), then a2's
    awaits the close from inside its own boundary."""
    rt = Runtime(model=ScriptedModel([]))
    a1 = (await rt.create_agent("a1")).agent
    a2 = (await rt.create_agent("a2")).agent
    order: list[str] = []
    go, parked, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def working() -> None:
        await first(rt)
        parked.set()
        await release.wait()
        order.append("a1")

    async def closer() -> None:
        await go.wait()
        await rt.agents.close()
        order.append("a2")

    b2 = asyncio.ensure_future(rt.agents.run(a2, closer))
    b1 = asyncio.ensure_future(rt.agents.run(a1, working))
    await parked.wait()
    go.set()
    await loop.idle()  # the closer runs up to its close and parks there
    return order, b1, b2, release, rt


async def _begin_close(rt: Runtime) -> None:
    rt.agents.close()  # begun, never awaited


async def _await_the_close_then_give_up(rt: Runtime) -> None:
    awaiting = asyncio.Event()

    async def await_close() -> None:
        awaiting.set()  # in the step that awaits the close
        await rt.agents.close()

    closing = asyncio.ensure_future(await_close())
    await awaiting.wait()  # its task now awaits the close
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing


@pytest.mark.parametrize(
    "first",
    [_begin_close, _await_the_close_then_give_up],
    ids=["close-never-awaited", "awaited-close-cancelled"],
)
def test_a_boundary_not_awaiting_its_close_is_still_waited_for(
    first: Callable[[Runtime], Awaitable[None]],
) -> None:
    """a1 calls close() and goes on working, having never awaited it or having cancelled
    the task that awaited it: a2, awaiting the close from its own boundary, must still wait
    for a1's work to end."""

    async def main() -> None:
        order, b1, b2, release, rt = await _two_boundaries(loop, first)
        assert not b2.done(), "a1 is still working"
        release.set()
        await asyncio.gather(b1, b2)
        assert order == ["a1", "a2"]
        await rt.aclose()

    loop = IdleLoop()
    loop.run(main())


def test_a_boundary_cannot_await_the_runtimes_close_and_strangers_have_no_boundary() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([]))
        other = Runtime(model=ScriptedModel([]))
        a1 = (await rt.create_agent("a1")).agent
        stranger = (await other.create_agent("a1")).agent

        async def close_all() -> None:
            await rt.aclose()

        with pytest.raises(
            UsageError,
            match=r"^a boundary of agent 'a1' cannot await aclose\(\), which waits for every "
            r"boundary to end; await rt.agents.close\(\) or return$",
        ):
            await rt.agents.run(a1, close_all)
        await rt.aclose()  # it had begun: awaiting it from outside returns
        with pytest.raises(UsageError, match=r"^<Agent a1 .*> is not a live agent of this runtime"):
            await Runtime(model=ScriptedModel([])).agents.run(stranger, close_all)
        await other.aclose()

    asyncio.run(main())
