"""A parent's cancel is local to its own agent (the original runtime's behaviour, which fsm_core
keeps): a user's ``parent.cancel()`` stops the parent's turn, while its continuable children and
grandchildren keep running; when one settles, its notice wakes the stopped parent into a new
turn that takes it."""

from __future__ import annotations

import pytest

from fsm_core.runtime import Agent, Reply, Runtime, UserMessage
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import Models, Settlements, run, turn_outcomes

pytestmark = pytest.mark.timeout(30)


def claimed(agent: Agent) -> list[str]:
    """The ids of the messages the agent's turns took, in order."""
    return [str(e.data["id"]) for e in agent.session.events if e.type == "user/message"]


def test_a_parents_cancel_stops_its_turn_and_leaves_its_children_running() -> None:
    """p's turn is cancelled while its child c and grandchild g wait in their model calls:
    neither is cancelled, and p starts no turn until c's notice arrives; then it takes it."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        gates = {name: Gate(f"{name}'s turn") for name in ("p", "c", "g")}
        for name, gate in gates.items():
            models.script(name, Wait(gate, Reply(f"{name} done")))
        p = await rt.subagents.start(host, "p", "work")
        await gates["p"].reached.wait()
        c = await rt.subagents.start(p.agent, "c", "job")
        await gates["c"].reached.wait()
        g = await rt.subagents.start(c.agent, "g", "detail")
        await gates["g"].reached.wait()

        p.agent.cancel()  # the user stops the parent
        await p.agent.when_idle()
        assert turn_outcomes(p.agent) == ["aborted"]
        assert [p.stage, c.stage, g.stage] == ["active"] * 3
        assert [c.agent.phase, g.agent.phase] == ["running", "running"]
        assert not models.signals["c"][0].aborted and not models.signals["g"][0].aborted

        gates["c"].open()  # c's turn ends; it waits, idle, for g
        await c.agent.when_idle()
        gates["g"].open()  # g ends its work; its notice wakes c, whose next turn ends it
        await settled.of("g")
        await c.agent.when_idle()
        assert any(i.startswith("g:settled:") for i in claimed(c.agent)), claimed(c.agent)
        await settled.of("c")
        await p.agent.when_idle()  # c's notice woke the stopped parent into a new turn
        assert len(models.signals["p"]) == 2
        assert turn_outcomes(p.agent) == ["aborted", "completed"]
        notice = [i for i in claimed(p.agent) if i.startswith("c:settled:")]
        assert len(notice) == 1, claimed(p.agent)
        await settled.of("p")  # nothing left: p ends naturally
        assert settled.ids == ["g", "c", "p"]

    run(test)


def test_a_parents_keep_inbox_cancel_parks_its_queued_work_until_a_notice_wakes_it() -> None:
    """With keep_inbox, what was queued for p stays queued and runs no turn on its own; the
    child's notice wakes p, and its turns take the kept message and the notice."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        p_turn, c_turn = Gate("p's turn"), Gate("c's turn")
        models.script("p", Wait(p_turn, Reply("p done")))
        models.script("c", Wait(c_turn, Reply("c done")))
        p = await rt.subagents.start(host, "p", "work")
        await p_turn.reached.wait()
        c = await rt.subagents.start(p.agent, "c", "job")
        await c_turn.reached.wait()
        await rt.subagents.followup("p", UserMessage("m2", "more"))  # queued behind the turn

        p.agent.cancel(keep_inbox=True)
        await p.agent.when_idle()
        assert turn_outcomes(p.agent) == ["aborted"]
        assert [m.id for m in p.agent.inbox.next_turn] == ["m2"]  # kept, parked
        assert c.stage == "active" and not models.signals["c"][0].aborted

        c_turn.open()
        await settled.of("c")
        await p.agent.when_idle()  # woken by the notice, p took both in two turns
        assert "m2" in claimed(p.agent)
        assert any(i.startswith("c:settled:") for i in claimed(p.agent)), claimed(p.agent)
        assert turn_outcomes(p.agent) == ["aborted", "completed", "completed"]
        await settled.of("p")

    run(test)
