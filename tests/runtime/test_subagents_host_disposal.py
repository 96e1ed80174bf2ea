"""A disposing host-owned agent tears its continuable roots down (admission.toml's
``parent_disposing``): seed 004's cancel runs top-down, so an agent stopped leaves no working
child, whether a user disposes it or ``spawn`` disposes the child it ran.

Each test drives real agents and asserts what a user sees: the activations' stages, the
children's model requests and turn outcomes, the registry's ledgers, and the errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from fsm_core import UsageError
from fsm_core.runtime import (
    PARENT,
    AbortSignal,
    Activation,
    Agent,
    Reply,
    Runtime,
    SubagentSpec,
    ToolCall,
    UserMessage,
)
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import HeldSession, Models, Settlements, run, turn_outcomes

pytestmark = pytest.mark.timeout(30)


def nothing_left(rt: Runtime) -> None:
    """No activation, pool slot, ownership, root or settled child is left behind."""
    subagents = rt.subagents
    assert subagents.resident == () and subagents.slots_held == 0
    assert (
        subagents.dormant == () and subagents._ledger.owners == {} and subagents._ledger.roots == {}
    )
    assert subagents._ledger.below == {} and subagents._ledger.drained_hosts == {}


async def working(rt: Runtime, models: Models, parent: Agent, name: str) -> Activation:
    """A continuable child of ``parent`` inside its first model request."""
    gate = Gate(name)
    models.script(name, Wait(gate, Reply("late")))
    act = await rt.subagents.start(parent, name, f"work {name}")
    await gate.reached.wait()
    return act


def test_a_disposed_host_leaves_no_working_root_below_it() -> None:
    """The host's dispose cancels its roots and their children with PARENT inside the call,
    without awaiting them, and no drain_descendants is needed for them to converge."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        h = await rt.create_agent("h")
        r1 = await working(rt, models, h.agent, "r1")
        g = await working(rt, models, r1.agent, "g")
        r2 = await working(rt, models, h.agent, "r2")
        disposal = h.dispose()
        # Inside the call: the whole subtree below h is cancelled with the parent cause.
        assert [models.signals[a.id][-1].reason for a in (r1, g, r2)] == [PARENT] * 3
        assert [a.stage for a in (r1, g, r2)] == ["joining"] * 3
        await disposal
        await settled.of("r1", "g", "r2")
        assert settled.ids.index("g") < settled.ids.index("r1")  # child-first below h
        assert [turn_outcomes(a.agent) for a in (r1, g, r2)] == [["aborted"]] * 3
        nothing_left(rt)

    run(test)


class Starter:
    """A tool that starts a continuable child ``args["id"]`` of the agent running it."""

    name = "starter"

    def __init__(self) -> None:
        self.rt: Runtime | None = None

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        assert self.rt is not None
        me = self.rt.agents.current()
        assert me is not None
        await self.rt.subagents.start(me, args["id"], "work")
        return "started"


class Spawner:
    """A tool that spawns ``s`` and returns its last text."""

    name = "spawner"

    def __init__(self) -> None:
        self.rt: Runtime | None = None

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        assert self.rt is not None
        return (await self.rt.subagents.spawn(signal, SubagentSpec("s", "delegate"))).text


def test_roots_a_spawned_child_started_end_when_spawn_returns() -> None:
    """spawn disposes its child when the child's run ends; the root that child started below
    itself is disposed by that disposal, so none runs once the tool has its result."""

    async def main() -> None:
        models, starter, spawner = Models(), Starter(), Spawner()
        rt = Runtime(models, [starter, spawner])
        starter.rt = spawner.rt = rt
        settled = Settlements(rt)
        gate = Gate("r")
        models.script("r", Wait(gate, Reply("late")))
        start = ToolCall("t1", "starter", {"id": "r"})
        models.script("s", Reply(tool_calls=(start,), finish="tool_calls"), Reply("s done"))
        spawn = ToolCall("t0", "spawner", {})
        models.script("parent", Reply(tool_calls=(spawn,), finish="tool_calls"), Reply("ok"))
        parent = (await rt.create_agent("parent")).agent
        parent.followup(UserMessage("m1", "go"))
        await parent.when_idle()
        results = [e.data["result"] for e in parent.session.events if e.type == "tool/result"]
        assert results == ["s done"]
        r = models.signals["r"][-1]
        assert r.aborted and r.reason == PARENT
        await settled.of("r")
        nothing_left(rt)
        await rt.aclose()

    asyncio.run(main())


def test_a_followup_to_a_settled_child_of_a_disposing_host_gets_one_answer() -> None:
    """Remembered before its host parent began disposing, or settled while it disposes: a
    followup to the child is the same UsageError either way, and nothing is kept."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        parent_flush, late_flush = Gate("h's final flush"), Gate("late's flushes")
        h_session = HeldSession()
        h = await rt.create_agent("h", h_session.session)
        await rt.subagents.start(h.agent, "early", "work")
        await settled.of("early")
        await h.agent.when_idle()  # early's notice woke h for a turn
        h_session.hold(parent_flush)
        assert list(rt.subagents.dormant) == ["early"]
        await rt.subagents.start(
            h.agent, "late", "work", session=HeldSession().hold(late_flush).session
        )
        await late_flush.reached.wait()  # late's turn ended; its flush is held
        disposal = h.dispose()
        try:
            assert h.agent.phase == "disposing" and rt.subagents.dormant == ()
            late_flush.open()
            await settled.of("late")
            for child in ("early", "late"):
                with pytest.raises(
                    UsageError, match=rf"^no continuable subagent is named '{child}'$"
                ):
                    await rt.subagents.followup(child, "more")
        finally:
            parent_flush.open()
        await disposal
        nothing_left(rt)

    run(test)
