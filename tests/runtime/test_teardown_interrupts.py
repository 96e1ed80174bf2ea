"""Holes found by review of the activation registry: each test failed before its fix."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from fsm_core import UsageError
from fsm_core.runtime import (
    AbortController,
    AbortSignal,
    Activation,
    ActivationSettled,
    Agent,
    Reply,
    RunHookOptions,
    Runtime,
    SubagentError,
    SubagentSpec,
    UserMessage,
    run_hook,
)
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import HeldSession, Models, Settlements, run

pytestmark = pytest.mark.timeout(30)


class Interrupt(BaseException):
    """A listener's BaseException (as KeyboardInterrupt would be)."""


def test_a_listener_interrupt_during_dispose_still_cancels_and_settles_every_child() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        gates = {n: Gate(n) for n in ("p", "c1", "c2")}
        for name, gate in gates.items():
            models.script(name, Wait(gate, Reply("late")))
        p = await rt.subagents.start(host, "p", "work")
        await gates["p"].reached.wait()
        kids = []
        for name in ("c1", "c2"):
            kids.append(await rt.subagents.start(p.agent, name, "work"))
            await gates[name].reached.wait()
        fired = []

        def interrupt(_signal: AbortSignal) -> None:
            fired.append(True)
            raise Interrupt

        # p's model call hears the abort first, and its listener raises.
        models.signals["p"][-1].add_listener(interrupt)
        with pytest.raises(Interrupt):
            rt.subagents.dispose(p)
        assert fired  # the listener did interrupt the dispose
        # The interrupt is raised once the whole subtree was cancelled, not half-way.
        assert [k.stage for k in kids] == ["joining", "joining"]
        await settled.of("p")
        assert settled.log == [("c1", False), ("c2", False), ("p", False)]
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0

    run(test)


async def roots(rt: Runtime, models: Models, host: Agent, *names: str) -> list[Activation]:
    """Root activations of ``host``, each inside its first model request."""
    acts = []
    for name in names:
        gate = Gate(name)
        models.script(name, Wait(gate, Reply("late")))
        acts.append(await rt.subagents.start(host, name, "work"))
        await gate.reached.wait()
    return acts


def interrupt_on_abort(models: Models, agent_id: str) -> None:
    """The model call of ``agent_id`` raises a BaseException when its signal aborts."""

    def interrupt(_signal: AbortSignal) -> None:
        raise Interrupt

    models.signals[agent_id][-1].add_listener(interrupt)


def test_a_listener_interrupt_during_drain_still_tears_every_root_down() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        acts = await roots(rt, models, host, "r1", "r2", "r3")
        interrupt_on_abort(models, "r1")
        with pytest.raises(Interrupt):
            rt.subagents.drain()
        assert [a.stage for a in acts] == ["joining"] * 3
        await settled.of("r1", "r2", "r3")
        assert rt.subagents.resident == ()

    run(test)


@pytest.mark.parametrize("entry", ["drain", "drain_descendants", "drain_children"])
def test_a_drain_that_raised_an_interrupt_leaves_no_failure_unretrieved(entry: str) -> None:
    """A drain raising a listener's interrupt returns no Pending, so nobody can await its
    outcome: a failing teardown is told by its settlement, not by asyncio's "exception was
    never retrieved" once the drain's dropped future is collected."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        unhandled: list[str] = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: unhandled.append(context["message"]))
        settled = Settlements(rt)
        gate = Gate("r1")
        models.script("r1", Wait(gate, Reply("late")))
        await rt.subagents.start(host, "r1", "work", session=HeldSession().fail().session)
        await gate.reached.wait()
        interrupt_on_abort(models, "r1")
        with pytest.raises(Interrupt):
            if entry == "drain":
                rt.subagents.drain()
            elif entry == "drain_descendants":
                rt.subagents.drain_descendants([host])
            else:
                rt.subagents.drain_children(host, ["r1"])
        await settled.of("r1")
        await rt.aclose()
        gc.collect()
        assert settled.log == [("r1", True)]
        assert unhandled == []

    run(test)


def test_a_listener_interrupt_during_drain_descendants_still_tears_every_root_down() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        acts = await roots(rt, models, host, "r1", "r2")
        interrupt_on_abort(models, "r1")
        with pytest.raises(Interrupt):
            rt.subagents.drain_descendants([host])
        assert [a.stage for a in acts] == ["joining"] * 2
        await settled.of("r1", "r2")

    run(test)


def test_a_listener_interrupt_below_one_named_parent_still_drains_below_the_next() -> None:
    """drain_descendants drains below each named parent through the door in turn: an interrupt
    raised while the first parent's roots are cancelled is raised only once the drain below the
    second one began too, and admission below both is closed."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        other = (await rt.create_agent("other")).agent
        acts = [*await roots(rt, models, host, "r1"), *await roots(rt, models, other, "r2")]
        interrupt_on_abort(models, "r1")
        with pytest.raises(Interrupt):
            rt.subagents.drain_descendants([host, other])
        assert [a.stage for a in acts] == ["joining"] * 2
        await settled.of("r1", "r2")
        for parent in (host, other):
            with pytest.raises(SubagentError) as caught:
                await rt.subagents.start(parent, "late", "work")
            assert caught.value.code == "DRAINING"

    run(test)


def test_a_listener_interrupt_during_drain_children_still_tears_every_named_child_down() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        acts = await roots(rt, models, host, "r1", "r2")
        interrupt_on_abort(models, "r1")
        with pytest.raises(Interrupt):
            rt.subagents.drain_children(host, ["r1", "r2"])
        assert [a.stage for a in acts] == ["joining"] * 2
        await settled.of("r1", "r2")

    run(test)


def test_aclose_converges_when_listeners_interrupt_two_roots() -> None:
    async def main() -> None:
        models = Models()
        rt = Runtime(models)
        host = (await rt.create_agent("host")).agent
        acts = await roots(rt, models, host, "r1", "r2", "r3")
        interrupt_on_abort(models, "r1")
        interrupt_on_abort(models, "r2")
        with pytest.raises(Interrupt):
            rt.aclose()
        # The close began inside the call all the same: every tree and every agent.
        assert [a.stage for a in acts] == ["joining"] * 3
        assert host.phase in ("disposing", "disposed")
        await rt.aclose()
        assert [a.agent.phase for a in acts] == ["disposed"] * 3
        assert host.phase == "disposed" and rt.subagents.resident == ()

    asyncio.run(main())


def test_a_hook_answering_deeply_nested_json_is_no_decision_not_an_exception() -> None:
    # 200 000 nested arrays: well under the output cap, far over the JSON decoder's recursion.
    deep = '{"a": ' + "[" * 200_000 + "]" * 200_000 + "}"
    brackets = "head -c 200000 /dev/zero | tr '\\0' '{}'"
    command = f"printf '{{\"a\": '; {brackets.format('[')}; {brackets.format(']')}; printf '}}'"
    result = asyncio.run(run_hook(command, RunHookOptions(signal=AbortController().signal)))
    assert (result.exit_code, result.decision, len(result.stdout)) == (0, None, len(deep))


def test_a_prompt_the_child_cannot_take_admits_nothing() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        bad = UserMessage("m", 5)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="text must be a str, not int"):
            await rt.subagents.start(host, "c", bad)
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0
        assert rt.subagents.owner("c") is None and "c" not in rt.agents
        await host.when_idle()
        assert settled.log == [] and not host.inbox.pending
        # The id was never taken: a good prompt admits it now.
        act = await rt.subagents.start(host, "c", "work")
        await rt.subagents.dispose(act)

    run(test)


def test_teardown_entries_refuse_what_is_not_theirs_by_name() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        (act,) = await roots(rt, models, host, "c1")  # held in its model request
        with pytest.raises(UsageError, match=r"dispose\(\) takes an Activation of this runtime"):
            rt.subagents.dispose("c1")  # type: ignore[arg-type]
        other = Runtime(Models())
        try:
            with pytest.raises(UsageError, match="an Activation of this runtime"):
                other.subagents.dispose(act)
        finally:
            await other.aclose()
        # A bare string is one id, not a collection of one-letter ids.
        with pytest.raises(UsageError, match="child ids are a collection of str, not 'c1'"):
            rt.subagents.drain_children(host, "c1")
        for parents in ("host", host, None):
            with pytest.raises(UsageError, match=r"^parents are a collection of Agent, not "):
                rt.subagents.drain_descendants(parents)  # type: ignore[arg-type]
        assert act.stage == "active"
        spec = SubagentSpec(["x"], "p")  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="a child id is 1 to 200 printable characters"):
            await rt.agents.run(host, lambda: rt.subagents.spawn(AbortSignal(), spec))

    run(test)


def test_a_watcher_whose_agent_was_disposed_under_it_waits_instead_of_spinning() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        (act,) = await roots(rt, models, host, "c")
        verdicts = 0
        judge = rt.subagents._watcher._verdict

        def counted(*args: Any, **kwargs: Any) -> None:
            nonlocal verdicts
            verdicts += 1
            if verdicts > 100:  # a spinning watcher never yields: break it, and fail below
                raise RuntimeError("the watcher spins")
            judge(*args, **kwargs)

        rt.subagents._watcher._verdict = counted  # type: ignore[method-assign]
        # No public call disposes an activation's agent alone (aclose drains the trees
        # first); a fault in the runtime could. The watcher must not spin on it.
        await act._node.handle.dispose()  # type: ignore[attr-defined]
        probe = Gate("the loop is free")
        models.script("host", Wait(probe, Reply("done")))
        host.followup(UserMessage("m", "go"))
        await probe.reached.wait()  # the event loop still runs other work
        probe.open()
        await host.when_idle()
        assert act.stage == "active" and act.agent.phase == "disposed"
        assert verdicts <= 2
        await rt.subagents.dispose(act)
        assert settled.ids == ["c"] and rt.subagents.resident == ()

    run(test)


def test_a_settlement_listeners_interrupt_does_not_strand_the_parents_teardown() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        (p,) = await roots(rt, models, host, "p")
        gate = Gate("c")
        models.script("c", Wait(gate, Reply("late")))
        c = await rt.subagents.start(p.agent, "c", "work")
        await gate.reached.wait()

        def interrupt(event: ActivationSettled) -> None:
            if event.activation is c:
                raise Interrupt

        rt.events.on("subagent/settled", interrupt)
        teardown = rt.subagents.dispose(p)
        with pytest.raises(Interrupt):
            await teardown
        # The child settled before its listener interrupted; the parent went on to settle.
        assert settled.ids == ["c", "p"]
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0

    run(test)


def test_spawn_with_a_bad_signal_or_prompt_creates_no_agent() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        def spawn(signal: object, spec: SubagentSpec) -> Any:
            return rt.agents.run(host, lambda: rt.subagents.spawn(signal, spec))  # type: ignore[arg-type]

        with pytest.raises(UsageError, match="spawn\\(\\) takes the parent turn's AbortSignal"):
            await spawn(None, SubagentSpec("s", "p"))
        assert "s" not in rt.agents
        with pytest.raises(UsageError, match="a prompt is a str, not 5"):
            await spawn(AbortSignal(), SubagentSpec("s", 5))  # type: ignore[arg-type]
        assert "s" not in rt.agents
        result = await spawn(AbortSignal(), SubagentSpec("s", "p"))  # the id is free
        assert result.text == "s: ok"

    run(test)
