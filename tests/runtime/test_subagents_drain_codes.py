"""One refusal code per drained scope (specs/activation.toml: by_drain): while an activation a
drain tore down is registered, a followup to it and an admission below it are refused
``DRAINING``, whichever drain it was, as the original answers (its admission check runs before
its closing check); someone's plain dispose answers ``ACTIVATION_CLOSING``. After
drain_children a settled child resumes cold and its parent admits again."""

from __future__ import annotations

import pytest

from fsm_core.runtime import Activation, Agent, Reply, Runtime, SubagentError, UserMessage
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import Models, Settlements, run

pytestmark = pytest.mark.timeout(30)


async def _stubborn_child(rt: Runtime, models: Models, host: Agent) -> tuple[Activation, ...]:
    """host -> p -> c, c inside a model request that ignores its signal (so its teardown
    stays in progress until the returned gate opens)."""
    models.script("p", Wait(Gate("p"), Reply("p")))
    p = await rt.subagents.start(host, "p", "work")
    gate = Gate("c ignores its signal")
    models.script("c", Wait(gate, Reply("late"), cooperate=False))
    c = await rt.subagents.start(p.agent, "c", "job")
    await gate.reached.wait()
    return p, c, gate  # type: ignore[return-value]


async def _refused(rt: Runtime, child: str) -> tuple[str, str]:
    with pytest.raises(SubagentError) as caught:
        await rt.subagents.followup(child, UserMessage(f"{child}:more", "more"))
    return caught.value.code, str(caught.value)


@pytest.mark.parametrize("parents", ["host", "p"])
def test_a_followup_below_drain_descendants_is_refused_draining_while_registered(
    parents: str,
) -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p, c, gate = await _stubborn_child(rt, models, host)
        drained = rt.subagents.drain_descendants([host if parents == "host" else p.agent])
        assert c.stage == "joining"  # torn down by the drain, still registered
        assert await _refused(rt, "c") == (
            "DRAINING",
            "continuable subagents are draining; the operation was not admitted",
        )
        gate.open()  # type: ignore[attr-defined]
        await drained

    run(test)


def test_a_followup_to_a_child_drain_children_is_tearing_down_is_refused_draining() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        p, _c, gate = await _stubborn_child(rt, models, host)
        drained = rt.subagents.drain_children(p.agent, ["c"])
        assert (await _refused(rt, "c"))[0] == "DRAINING"
        gate.open()  # type: ignore[attr-defined]
        await drained
        await settled.of("c")
        # Settled: the drain named only c, and admission below p never closed.
        resumed = await rt.subagents.followup("c", UserMessage("c:again", "again"))
        assert resumed.parent is p.agent and resumed.stage == "active"
        d = await rt.subagents.start(p.agent, "d", "new work")
        assert d.parent is p.agent

    run(test)


@pytest.mark.parametrize("drain", ["drain_descendants", "drain_children"])
def test_a_drain_that_finds_a_teardown_running_makes_it_the_drains(drain: str) -> None:
    """Someone's dispose closes p (and so c) first; then a drain covers p. From then on the
    drained scope answers DRAINING, not ACTIVATION_CLOSING: the teardowns already running
    became the drain's (dispose.drain_covers, drain_child.covers)."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p, c, gate = await _stubborn_child(rt, models, host)
        teardown = rt.subagents.dispose(p)
        assert (await _refused(rt, "c"))[0] == "ACTIVATION_CLOSING"
        if drain == "drain_descendants":
            drained = rt.subagents.drain_descendants([host])
        else:
            drained = rt.subagents.drain_children(host, ["p"])
        assert (p.stage, c.stage) == ("joining", "joining")
        assert (await _refused(rt, "c"))[0] == "DRAINING"
        assert (await _refused(rt, "p"))[0] == "DRAINING"
        gate.open()  # type: ignore[attr-defined]
        await drained
        await teardown

    run(test)


def test_someones_dispose_refuses_a_followup_and_an_admission_as_closing() -> None:
    """No drain: a plain dispose answers ACTIVATION_CLOSING to a delivery and to an
    admission below the activation alike."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p, _c, gate = await _stubborn_child(rt, models, host)
        teardown = rt.subagents.dispose(p)
        assert (await _refused(rt, "c"))[0] == "ACTIVATION_CLOSING"
        with pytest.raises(SubagentError) as caught:
            await rt.subagents.start(p.agent, "d", "work")
        assert (caught.value.code, str(caught.value)) == (
            "ACTIVATION_CLOSING",
            "activation 'p' is closing and admits no children",
        )
        gate.open()  # type: ignore[attr-defined]
        await teardown

    run(test)
