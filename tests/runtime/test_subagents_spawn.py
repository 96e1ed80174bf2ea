"""spawn and fork from a tool (seed 000's subagent clauses): parent cancellation reaches the
child as ``PARENT``, and each driver keeps its own initiator identity and signal."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from fsm_core import UsageError
from fsm_core.runtime import (
    PARENT,
    AbortSignal,
    Agent,
    Reply,
    Runtime,
    SubagentError,
    SubagentSpec,
    ToolCall,
    UserMessage,
    initiating_agent,
)
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import Models, turn_outcomes

pytestmark = pytest.mark.timeout(30)


class Delegate:
    """A tool that spawns (or forks) ``args["id"]`` on ``args["prompt"]``, noting who the
    initiating agent is before and after the child ran."""

    name = "delegate"

    def __init__(self, fork: bool = False) -> None:
        self.rt: Runtime | None = None
        self.fork = fork
        self.seen: list[tuple[str, str | None, str | None]] = []
        self.errors: list[SubagentError] = []

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        assert self.rt is not None
        before = initiating_agent()
        spec = SubagentSpec(args["id"], args["prompt"])
        run = self.rt.subagents.fork if self.fork else self.rt.subagents.spawn
        try:
            result = await run(signal, spec)
        except SubagentError as error:
            self.errors.append(error)
            raise
        finally:
            after = initiating_agent()
            self.seen.append((args["id"], before and before.id, after and after.id))
        return result.text


class Probe:
    """A tool that notes the initiating agent and the signal it was given."""

    name = "probe"

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, AbortSignal]] = []

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        agent = initiating_agent()
        self.seen.append((agent and agent.id, signal))
        return "probed"


def calls(*pairs: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(
        tool_calls=tuple(ToolCall(f"t{i}", n, a) for i, (n, a) in enumerate(pairs)),
        finish="tool_calls",
    )


async def runtime(fork: bool = False) -> tuple[Runtime, Models, Delegate, Probe]:
    models, delegate, probe = Models(), Delegate(fork), Probe()
    rt = Runtime(models, [delegate, probe])
    delegate.rt = rt
    return rt, models, delegate, probe


def tool_results(agent: Agent) -> list[tuple[object, object]]:
    events = agent.session.events
    return [(e.data["ok"], e.data["result"]) for e in events if e.type == "tool/result"]


def recorder(agent_id: str, into: list[Agent]) -> Callable[[Any], None]:
    """A ``turn/start`` listener that keeps the agent ``agent_id`` once it opens a turn."""

    def seen(event: Any) -> None:
        if event.agent.id == agent_id and event.agent not in into:
            into.append(event.agent)

    return seen


def test_spawn_runs_a_fresh_child_to_its_end_and_returns_its_answer() -> None:
    async def main() -> None:
        rt, models, delegate, _probe = await runtime()
        parent = (await rt.create_agent("parent")).agent
        models.script("parent", calls(("delegate", {"id": "s1", "prompt": "do it"})), Reply("ok"))
        models.script("s1", Reply("the child's answer"))
        parent.followup(UserMessage("m1", "go"))
        await parent.when_idle()
        assert tool_results(parent) == [(True, "the child's answer")]
        assert delegate.seen == [("s1", "parent", "parent")]
        assert "s1" not in rt.agents  # disposed once it ended
        await rt.aclose()

    asyncio.run(main())


def test_aborting_the_parents_turn_cancels_the_spawned_child_with_parent() -> None:
    _aborting_the_parents_turn_cancels_the_child_with_parent(fork=False)


def test_aborting_the_parents_turn_cancels_the_forked_child_with_parent() -> None:
    _aborting_the_parents_turn_cancels_the_child_with_parent(fork=True)


def _aborting_the_parents_turn_cancels_the_child_with_parent(fork: bool) -> None:
    """The subagent seam: the child's driver and signal are its own, and the parent turn's
    signal, passed by the tool, still reaches it. (Two tests without parameters: the teardown
    mutants' killer tests take every argument-free test of this module.)"""

    async def main() -> None:
        rt, models, _delegate, _probe = await runtime(fork)
        parent = (await rt.create_agent("parent")).agent
        gate = Gate("the child's request")
        models.script("parent", calls(("delegate", {"id": "s1", "prompt": "do it"})))
        models.script("s1", Wait(gate, Reply("late")))
        children: list[Agent] = []
        rt.events.on("turn/start", recorder("s1", children))
        parent.followup(UserMessage("m1", "go"))
        await gate.reached.wait()
        parent.cancel()
        await parent.when_idle()
        assert models.signals["s1"][0].reason == PARENT  # the child's request saw parent
        assert models.signals["s1"][0] is not models.signals["parent"][0]  # a signal of its own
        assert turn_outcomes(children[0]) == ["aborted"]
        assert tool_results(parent) == [(False, "aborted")]
        assert turn_outcomes(parent) == ["aborted"]
        assert children[0].phase == "disposed"
        await rt.aclose()

    asyncio.run(main())


def test_concurrent_children_shadow_only_their_parents_identity() -> None:
    async def main() -> None:
        rt, models, delegate, probe = await runtime()
        parents = [(await rt.create_agent(n)).agent for n in ("a", "b")]
        for n in ("a", "b"):
            models.script(
                n,
                calls(("delegate", {"id": f"{n}1", "prompt": "x"})),
                calls(("probe", {})),
                Reply("ok"),
            )
            models.script(f"{n}1", calls(("probe", {})), Reply(f"{n}1 done"))
        for p in parents:
            p.followup(UserMessage("m", "go"))
        for p in parents:
            await p.when_idle()
        assert sorted(delegate.seen) == [("a1", "a", "a"), ("b1", "b", "b")]
        who = [str(agent) for agent, _signal in probe.seen]
        assert sorted(who) == ["a", "a1", "b", "b1"]
        assert len({id(signal) for _agent, signal in probe.seen}) == 4  # a signal each
        await rt.aclose()

    asyncio.run(main())


def test_fork_starts_the_child_from_the_parents_session() -> None:
    async def main() -> None:
        rt, models, delegate, _probe = await runtime(fork=True)
        parent = (await rt.create_agent("parent")).agent
        models.script("parent", calls(("delegate", {"id": "f1", "prompt": "branch"})), Reply("ok"))
        models.script("f1", Reply("forked answer"))
        children: list[Agent] = []
        rt.events.on("turn/start", recorder("f1", children))
        parent.followup(UserMessage("m1", "go"))
        await parent.when_idle()
        forked, original = children[0].session.events, parent.session.events
        opened = next(e.seq for e in forked if e.type == "turn/start" and e.data["turn"] == 2)
        # The child's log begins with the parent's, up to its tool call, then its own turn.
        assert forked[:opened] == original[:opened]
        assert original[opened - 1].type == "tool/call"
        assert tool_results(parent) == [(True, "forked answer")]
        assert delegate.seen == [("f1", "parent", "parent")]
        await rt.aclose()

    asyncio.run(main())


def test_spawn_is_refused_after_drain_and_outside_a_tool() -> None:
    async def main() -> None:
        rt, models, delegate, _probe = await runtime()
        outside = r"^spawn\(\) runs from a tool of a live agent, which is its parent$"
        with pytest.raises(UsageError, match=outside):
            await rt.subagents.spawn(AbortSignal(), SubagentSpec("s", "x"))
        await rt.subagents.drain()
        parent = (await rt.create_agent("parent")).agent
        models.script("parent", calls(("delegate", {"id": "s", "prompt": "x"})), Reply("ok"))
        parent.followup(UserMessage("m", "go"))
        await parent.when_idle()
        assert [(type(e), e.code) for e in delegate.errors] == [(SubagentError, "DRAINING")]
        assert tool_results(parent) == [(False, "failed")]
        assert "s" not in rt.agents
        await rt.aclose()

    asyncio.run(main())
