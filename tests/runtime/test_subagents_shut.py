"""Seed 004: "disposal never latches, so teardown waits on no model turn". From the moment an
activation's close begins (specs/wiring.toml: close.shuts_agent), a send straight to its agent
is parked, whatever the agent was doing: no turn runs, none replays, and the work reaches the
teardown's capture."""

from __future__ import annotations

import pytest

from fsm_core.runtime import Agent, Reply, Runtime, UserMessage
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import Models, Settlements, run, turn_outcomes

pytestmark = pytest.mark.timeout(30)


def test_a_followup_to_an_idle_agent_whose_activation_closes_runs_no_turn() -> None:
    """The parent's agent is idle while its teardown waits for a child that ignores the
    signal; a followup sent straight to that agent is parked, not run as a model turn."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        parent_turn, child_turn = Gate("p's turn"), Gate("c's turn")
        models.script("p", Wait(parent_turn, Reply("p done")))
        models.script("c", Wait(child_turn, Reply("c done"), cooperate=False))
        p = await rt.subagents.start(host, "p", "work")
        await parent_turn.reached.wait()
        await rt.subagents.start(p.agent, "c", "job")
        parent_turn.open()
        await child_turn.reached.wait()
        await p.agent.when_idle()  # p's turn ended; its watcher waits for c
        teardown = rt.subagents.dispose(p)
        p.agent.followup(UserMessage("m2", "more"))
        try:
            assert p.agent.table_state["scheduled"] is False  # parked: no driver woken
        finally:
            child_turn.open()  # c ignores the signal: a failure here must not wedge the close
        await teardown
        assert len(models.signals["p"]) == 1  # the prompt's request, and no other
        assert turn_outcomes(p.agent) == ["completed"]
        assert p.terminal is not None and p.terminal.turns == 1
        assert "m2" in p.terminal.pending

    run(test)


def test_a_wake_sent_while_the_closing_agent_converges_is_not_replayed() -> None:
    """The teardown's cancel aborts the turn in progress; a followup sent before the turn has
    converged is parked, not latched: the terminal outcome stays aborted."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        gate = Gate("c's turn")
        models.script("c", Wait(gate, Reply("too late")))
        act = await rt.subagents.start(host, "c", "work")
        await gate.reached.wait()
        teardown = rt.subagents.dispose(act)
        act.agent.followup(UserMessage("m2", "more"))  # the turn is still converging
        assert act.agent.table_state["latch"] is False
        await teardown
        assert len(models.signals["c"]) == 1
        assert turn_outcomes(act.agent) == ["aborted"]
        assert act.terminal is not None and act.terminal.pending == ("m2",)
        assert act.terminal.outcome == {"kind": "aborted"}

    run(test)


def test_a_parents_stop_leaves_its_children_running_and_a_notice_wakes_it_again() -> None:
    """specs/README.md: a parent's stop is local to its agent. Its cancel aborts its own turn;
    its continuable child runs on, and the child's settlement notice wakes the stopped parent
    into a new turn (the original's behaviour: no wiring call leaves an agent's cancel)."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        parent_turn, child_turn = Gate("p's turn"), Gate("c's turn")
        models.script("p", Wait(parent_turn, Reply("p done")))
        models.script("c", Wait(child_turn, Reply("c done")))
        p = await rt.subagents.start(host, "p", "work")
        await parent_turn.reached.wait()
        c = await rt.subagents.start(p.agent, "c", "job")
        await child_turn.reached.wait()
        p.agent.cancel()  # the stop button, on the parent
        await p.agent.when_idle()
        assert turn_outcomes(p.agent) == ["aborted"]
        assert c.stage == "active" and not models.signals["c"][-1].aborted
        child_turn.open()
        await settled.of("c", "p")  # c's notice woke p; p's new turn ended, then p settled
        assert turn_outcomes(c.agent) == ["completed"]
        assert turn_outcomes(p.agent) == ["aborted", "completed"]
        assert len(models.signals["p"]) == 2

    run(test)
