"""The initiating-agent scope carries only the agent; the bus notifies synchronously and
contains failures, and waterfalls chain ``(payload, next)`` listeners."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fsm_core import Runtime, UserMessage
from fsm_core.runtime import AbortSignal, Agent, EventBus, Reply, initiating_agent
from fsm_core.testing import ScriptedModel


def test_every_hook_sees_its_own_agent_and_concurrent_agents_stay_apart() -> None:
    seen: dict[str, list[tuple[Agent | None, AbortSignal]]] = {"a1": [], "a2": []}

    async def main() -> None:
        rt = Runtime(model=ScriptedModel([Reply("one"), Reply("two")]))
        a1 = (await rt.create_agent("a1")).agent
        a2 = (await rt.create_agent("a2")).agent

        async def pre_step(payload: Any, next: Any) -> Any:
            seen[payload.agent.id].append((initiating_agent(), payload.signal))
            return await next(payload)

        rt.events.on("agent/pre-step", pre_step)
        a1.followup(UserMessage("m1", "hi"))
        a2.followup(UserMessage("m2", "hi"))
        await asyncio.gather(a1.when_idle(), a2.when_idle())
        assert initiating_agent() is None, "the caller's own context is untouched"
        await rt.aclose()
        assert [agent for agent, _ in seen["a1"]] == [a1]
        assert [agent for agent, _ in seen["a2"]] == [a2]
        assert seen["a1"][0][1] is not seen["a2"][0][1]

    asyncio.run(main())


def test_the_scope_carries_no_signal() -> None:
    import fsm_core.runtime._scope as scope

    public = {name for name in vars(scope) if not name.startswith("_")}
    assert "initiating_agent" in public
    assert not any("signal" in name for name in public)


def test_a_raising_listener_is_contained_and_the_rest_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus()
    calls: list[str] = []

    def boom(payload: object) -> None:
        calls.append("boom")
        raise RuntimeError("listener failure")

    bus.on("x", boom)
    bus.on("x", lambda p: calls.append(f"second {p}"))
    bus.emit("x", 1)
    assert calls == ["boom", "second 1"]
    assert "a listener of x raised" in caplog.text


def test_a_disposer_removes_exactly_its_listener() -> None:
    bus = EventBus()
    calls: list[int] = []
    off = bus.on("x", calls.append)
    bus.on("x", lambda p: calls.append(p * 10))
    off()
    off()
    bus.emit("x", 2)
    assert calls == [20]


def test_a_waterfall_chains_listeners_in_order_and_ends_in_the_runtime_step() -> None:
    bus = EventBus()
    order: list[str] = []

    async def first(payload: int, next: Any) -> Any:
        order.append(f"first {payload}")
        return await next(payload + 1)

    async def second(payload: int, next: Any) -> Any:
        order.append(f"second {payload}")
        return (await next(payload * 10)) + "!"

    async def last(payload: int) -> str:
        order.append(f"last {payload}")
        return str(payload)

    bus.on("w", first)
    bus.on("w", second)
    assert asyncio.run(bus.waterfall("w", 1, last)) == "20!"
    assert order == ["first 1", "second 2", "last 20"]


def test_a_waterfall_listener_may_end_the_chain() -> None:
    bus = EventBus()

    async def stop(payload: int, next: Any) -> str:
        return "stopped"

    async def last(payload: int) -> str:
        raise AssertionError("the chain was ended before the runtime's step")

    bus.on("w", stop)
    assert asyncio.run(bus.waterfall("w", 1, last)) == "stopped"
