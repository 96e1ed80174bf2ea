"""Seed 004's teardown as a user of ``rt.subagents`` sees it: child-first disposal, the six
convergence steps, the memoized close, the settlement watcher, cold resume and the drains.

Each test drives real agents through the runtime and asserts what a user can observe: the
``subagent/settled`` notifications, the registry's ``resident``, ``slots_held`` and ``owner``,
the agents' signals and logs, the captured terminal facts and the errors. Nothing sleeps.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from functools import partial

import pytest

from fsm_core import Rejected, UsageError
from fsm_core.runtime import (
    PARENT,
    Activation,
    ActivationTeardownFailed,
    Agent,
    MessageInserted,
    Reply,
    Runtime,
    Session,
    SubagentError,
    UserMessage,
)
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import HeldSession, Models, Settlements, run, turn_outcomes

pytestmark = pytest.mark.timeout(30)


async def tree(
    rt: Runtime, models: Models, host: Agent, sessions: dict[str, Session] | None = None
) -> tuple[Activation, ...]:
    """host -> p -> c -> g, each agent inside its first model request (a cooperative gate)."""
    acts = []
    parent = host
    for name in ("p", "c", "g"):
        gate = Gate(name)
        models.script(name, Wait(gate, Reply("late")))
        session = (sessions or {}).get(name)
        act = await rt.subagents.start(parent, name, f"work {name}", session=session)
        await gate.reached.wait()
        acts.append(act)
        parent = act.agent
    return tuple(acts)


async def after_the_watcher(activation: Activation, busy: Gate) -> None:
    """Open ``busy`` (the gate the activation's first turn waits on) and return once its agent
    is idle and the settlement watcher has taken its verdict on that idle.

    The watcher has awaited ``when_idle()`` since its activation was admitted, before the
    turn reached ``busy``; the agent resolves its idle waiters in the order they were
    registered, and the watcher takes its verdict in the step that wakes it (inside
    ``run_maintenance``, with nothing to await). So it decided before the waiter registered
    here resumes.
    """
    idle = activation.agent.when_idle()
    busy.open()
    await idle


# --- finishDisposal, child-first ------------------------------------------------------------------


def test_dispose_cancels_the_whole_subtree_with_parent_before_the_first_await() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p, c, g = await tree(rt, models, host)
        pending = rt.subagents.dispose(p)
        # Inside the call: every turn of the subtree is aborted with the parent cause.
        assert [models.signals[a.id][-1].reason for a in (p, c, g)] == [PARENT] * 3
        assert [a.stage for a in (p, c, g)] == ["joining"] * 3
        await pending
        assert [turn_outcomes(a.agent) for a in (p, c, g)] == [["aborted"]] * 3

    run(test)


def test_children_settle_and_leave_the_registry_before_their_parent() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        p, _c, _g = await tree(rt, models, host)
        await rt.subagents.dispose(p)
        assert settled.log == [("g", False), ("c", False), ("p", False)]
        assert settled.resident_then == {"g": ("p", "c"), "c": ("p",), "p": ()}

    run(test)


def test_the_parent_awaits_its_own_idle_only_after_its_children_settled() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        stubborn = Gate("p ignores its signal")
        models.script("p", Wait(stubborn, Reply("late"), cooperate=False))
        p = await rt.subagents.start(host, "p", "work")
        await stubborn.reached.wait()
        c = await rt.subagents.start(p.agent, "c", "work")
        await c.agent.when_idle()  # c finished its turn; its watcher would wait for nothing
        pending = rt.subagents.dispose(p)
        await settled.of("c")
        assert p.agent.phase == "cancelling" and settled.ids == ["c"]  # p's turn still runs
        stubborn.open()
        await pending
        assert settled.ids == ["c", "p"]

    run(test)


def test_disposal_keeps_the_inbox_so_queued_work_and_notices_reach_the_capture() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p, c, _g = await tree(rt, models, host)
        p.agent.inject(UserMessage("later", "queued work"))
        await rt.subagents.dispose(p)
        assert p.terminal is not None and c.terminal is not None
        # p's queued work and c's settlement notice (injected, never woke p) survive.
        assert p.terminal.pending == ("later", "c:settled:2")
        assert p.terminal.outcome == {"kind": "aborted"}
        assert c.terminal.pending == ("g:settled:1",)

    run(test)


def test_a_failing_child_does_not_stop_its_siblings_and_every_failure_is_named_last() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        p = await rt.subagents.start(host, "p", "work")
        broken = HeldSession()
        slow = Gate("c2 ignores its signal")
        inside = [Gate("c1"), slow, Gate("c3")]
        models.script("c1", Wait(inside[0], Reply("late")))
        models.script("c2", Wait(slow, Reply("late"), cooperate=False))
        models.script("c3", Wait(inside[2], Reply("late")))
        kids = [
            await rt.subagents.start(p.agent, "c1", "work", session=broken.session),
            await rt.subagents.start(p.agent, "c2", "work"),
            await rt.subagents.start(p.agent, "c3", "work", session=HeldSession().fail().session),
        ]
        await asyncio.gather(*(gate.reached.wait() for gate in inside))  # each in a request
        broken.fail()
        pending = rt.subagents.dispose(p)
        await settled.of("c1", "c3")  # both failed; c2's teardown still waits for its turn
        assert p.stage == "joining" and kids[1].stage == "awaiting_idle"
        slow.open()
        with pytest.raises(ActivationTeardownFailed) as caught:
            await pending
        error = caught.value
        assert error.code == "ACTIVATION_TEARDOWN_FAILED"
        assert [(f.activation, f.boundary) for f in error.failures] == [
            ("c1", "final flush"),
            ("c1", "handle dispose"),
            ("c3", "final flush"),
            ("c3", "handle dispose"),
        ]
        full = "SessionError('disk: cannot write the log: full')"
        assert str(error) == (
            "the teardown of p failed at 4 boundaries: "
            f"activation 'c1' at final flush: {full}; activation 'c1' at handle dispose: {full}; "
            f"activation 'c3' at final flush: {full}; activation 'c3' at handle dispose: {full}"
        )
        assert settled.log == [("c1", True), ("c3", True), ("c2", False), ("p", True)]
        assert [k.failed for k in kids] == [True, False, True]
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0

    run(test)


def test_the_natural_end_does_not_flush_the_final_state_twice() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        natural, disposed = HeldSession(), HeldSession()
        settled = Settlements(rt)
        gate = Gate("b")
        models.script("b", Wait(gate, Reply("late")))
        await rt.subagents.start(host, "a", "work", session=natural.session)
        b = await rt.subagents.start(host, "b", "work", session=disposed.session)
        await gate.reached.wait()
        await rt.subagents.dispose(b)
        await settled.of("a")
        assert natural.flushes == 2  # the turn's flush, the handle's
        assert disposed.flushes == 3  # the aborted turn's flush, the final flush, the handle's

    run(test)


def test_a_deep_chain_is_cancelled_inside_the_call_and_settles_deepest_first() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        depth = 150  # nesting the rows would take some 2,500 frames: past the default limit
        gate = Gate("every request")
        chain: list[Activation] = []
        parent = host
        for i in range(depth):
            models.script(f"a{i}", Wait(gate, Reply("late")))
            chain.append(await rt.subagents.start(parent, f"a{i}", "work"))
            parent = chain[-1].agent
        while len(models.signals) < depth:
            await gate.reached.wait()
            gate.reached.clear()
        pending = rt.subagents.dispose(chain[0])
        assert {a.stage for a in chain} == {"joining"}
        assert {models.signals[a.id][0].reason for a in chain} == {PARENT}
        await pending
        assert settled.ids == [f"a{i}" for i in reversed(range(depth))]

    run(test)


# --- the six convergence steps --------------------------------------------------------------------


def test_the_six_convergence_steps_run_in_order() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        seen: list[tuple[str, ...]] = []
        subagents = rt.subagents

        def ledger(step: str) -> tuple[str, ...]:
            return (
                step,
                str(subagents.get("c")),
                str(subagents.slots_held),
                str(subagents.owner("c")),
            )

        def noticed(event: MessageInserted) -> None:
            if event.agent.id == "host" and event.message.id.startswith("c:settled"):
                seen.append(ledger("notice"))

        rt.events.on("inbox/inserted", noticed)
        rt.events.on("subagent/settled", lambda _e: seen.append(ledger("settle")))
        held_c = HeldSession()
        c = await rt.subagents.start(host, "c", "work", session=held_c.session)
        assert ledger("start") == ("start", str(c), "1", "host")
        await c.agent.when_idle()
        held_c.fail()
        with pytest.raises(ActivationTeardownFailed):
            await rt.subagents.dispose(c)
        # notice: out of the registry (1), slot released (2), still owned (4 not yet);
        # settle: ownership released (4); the failure was raised only after all (6).
        assert seen == [("notice", "None", "0", "host"), ("settle", "None", "0", "None")]

    run(test)


def test_a_parent_being_torn_down_gets_the_notice_without_being_woken() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p, _c, _g = await tree(rt, models, host)
        host_turns = len(turn_outcomes(host))
        await rt.subagents.dispose(p)
        assert turn_outcomes(p.agent) == ["aborted"]  # no turn for c's notice
        await host.when_idle()
        assert len(turn_outcomes(host)) == host_turns + 1  # the live host woke for p's notice
        claimed = [e.data["id"] for e in host.session.events if e.type == "user/message"]
        assert claimed[-1] == "p:settled:3"

    run(test)


# --- the memoized close ---------------------------------------------------------------------------


def test_four_racing_teardowns_of_a_three_level_tree_run_once_and_fail_together() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        broken = HeldSession()
        p, _c, _g = await tree(rt, models, host, {"g": broken.session})
        broken.fail()
        racing = [
            rt.subagents.dispose(p),
            rt.subagents.drain(),
            rt.subagents.drain_descendants([host]),
            rt.subagents.drain_children(host, ["p"]),
            rt.subagents.dispose(p),
        ]
        errors = await asyncio.gather(*racing, return_exceptions=True)
        assert [type(e) for e in errors] == [ActivationTeardownFailed] * 5
        assert {str(e).partition(": ")[2] for e in errors} == {
            "activation 'g' at final flush: SessionError('disk: cannot write the log: full'); "
            "activation 'g' at handle dispose: SessionError('disk: cannot write the log: full')"
        }
        assert settled.log == [("g", True), ("c", True), ("p", True)]  # each teardown once
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0

    run(test)


def test_dispose_after_settlement_returns_the_same_settled_teardown() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        c = await rt.subagents.start(host, "c", "work")
        await rt.subagents.dispose(c)
        await rt.subagents.dispose(c)
        assert settled.ids == ["c"]

    run(test)


# --- the settlement watcher and cold resume -------------------------------------------------------


def test_a_child_that_finished_its_work_settles_on_its_own() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        c = await rt.subagents.start(host, "c", "work")
        await settled.of("c")
        assert settled.log == [("c", False)]
        assert c.terminal is not None and c.terminal.outcome == {"kind": "completed"}
        assert c.agent.phase == "disposed"
        await host.when_idle()
        assert [e.data["text"] for e in host.session.events if e.type == "user/message"] == [
            "subagent c finished"
        ]

    run(test)


def test_a_notice_takes_an_id_its_parent_does_not_hold_and_says_how_its_child_ended() -> None:
    """The parent holds a user's message ``c:settled:1``, the id c's notice would take: the
    notice takes the next number instead, so the parent's inbox holds each id once and takes
    each back. A child that finished its work is ``finished``; one disposed inside its turn,
    ``stopped``."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        hold, slow = Gate("p"), Gate("d")
        models.script("p", Wait(hold, Reply("p done"), cooperate=False))
        models.script("d", Wait(slow, Reply("late")))
        p = await rt.subagents.start(host, "p", "work")
        await hold.reached.wait()  # p stays in its turn: what it is sent stays queued
        try:
            await rt.subagents.followup("p", UserMessage("c:settled:1", "mine"))
            await rt.subagents.start(p.agent, "c", "work")
            d = await rt.subagents.start(p.agent, "d", "work")
            await settled.of("c")
            await slow.reached.wait()
            await rt.subagents.dispose(d)
            queued = [(m.id, m.text) for m in p.agent.inbox.next_turn]
            assert queued == [
                ("c:settled:1", "mine"),
                ("c:settled:2", "subagent c finished"),
                ("d:settled:3", "subagent d stopped"),
            ]
            assert [p.agent.inbox.remove(i) for i, _ in queued] == [True, True, True]
            assert not p.agent.inbox.pending
        finally:
            hold.open()  # p's turn ignores its signal: only the gate ends it
        await settled.of("p")
        assert settled.log == [("c", False), ("d", False), ("p", False)]

    run(test)


def test_the_watcher_waits_while_the_child_owns_unsettled_children() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        slow, busy = Gate("g"), Gate("c")
        models.script("g", Wait(slow, Reply("g done")))
        models.script("c", Wait(busy, Reply("c done")))
        c = await rt.subagents.start(host, "c", "work")
        g = await rt.subagents.start(c.agent, "g", "work")
        await asyncio.gather(busy.reached.wait(), slow.reached.wait())
        await after_the_watcher(c, busy)
        assert c.stage == "active" and settled.log == []
        slow.open()
        await settled.of("g")
        await c.agent.when_idle()  # g's notice woke c (a parked one would wedge it: fail now)
        assert turn_outcomes(c.agent) == ["completed", "completed"]  # woken by g's notice
        await settled.of("c")
        assert settled.ids == ["g", "c"]
        assert turn_outcomes(g.agent) == ["completed"]  # never cancelled by c's disposal

    run(test)


def test_the_watcher_waits_while_work_is_queued_in_the_inbox() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)

        def park(event: object) -> None:
            agent = event.agent  # type: ignore[attr-defined]
            if agent.id == "c" and event.status == "idle":  # type: ignore[attr-defined]
                agent.inject(UserMessage("parked", "for later"))  # queued, no wake: idle

        off = rt.events.on("agent/status", park)
        busy = Gate("c")
        models.script("c", Wait(busy, Reply("c done")))
        c = await rt.subagents.start(host, "c", "work")
        await busy.reached.wait()
        await after_the_watcher(c, busy)
        off()
        assert c.stage == "active" and c.agent.inbox.pending
        await rt.subagents.followup("c", UserMessage("m3", "wake up"))
        await settled.of("c")
        claimed = [e.data["id"] for e in c.agent.session.events if e.type == "user/message"]
        assert claimed == ["c:prompt", "parked", "m3"]  # nothing queued was lost
        assert rt.subagents.get("c") is None

    run(test)


def test_a_watcher_that_finds_its_agent_busy_again_retries() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        loop = asyncio.get_running_loop()
        sent: list[str] = []

        def at_idle(event: object) -> None:
            agent = event.agent  # type: ignore[attr-defined]
            if agent.id == "c" and event.status == "idle" and not sent:  # type: ignore[attr-defined]
                sent.append("m2")
                # Lands after the idle, before the watcher runs: the agent is busy again.
                loop.call_soon(agent.followup, UserMessage("m2", "more"))

        rt.events.on("agent/status", at_idle)
        c = await rt.subagents.start(host, "c", "work")
        await settled.of("c")
        assert turn_outcomes(c.agent) == ["completed", "completed"]  # not disposed while busy

    run(test)


def test_a_delivery_losing_the_race_with_final_disposal_resumes_cold() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        held = Gate("the handle's last flush")
        session = HeldSession()
        first = await rt.subagents.start(host, "c", "work", session=session.session)
        await first.agent.when_idle()
        session.hold(held)
        await held.reached.wait()  # the natural end is disposing the handle
        assert first.stage == "releasing"
        parked = asyncio.Event()

        async def deliver() -> Activation:
            parked.set()  # the followup below runs up to its wait for the teardown in this step
            return await rt.subagents.followup("c", UserMessage("m2", "more"))

        delivery = asyncio.ensure_future(deliver())
        await parked.wait()
        assert not delivery.done()  # it waits for the teardown
        ended_after_release: list[bool] = []
        delivery.add_done_callback(lambda _: ended_after_release.append(first.stage == "settled"))
        session.gate = None
        held.open()
        second = await delivery
        assert ended_after_release == [True]
        assert second is not first and first.stage == "settled"
        await second.agent.when_idle()
        claimed = [e.data["id"] for e in session.session.events if e.type == "user/message"]
        assert claimed == ["c:prompt", "m2"]  # one session, resumed: nothing lost

    run(test)


def test_followup_of_a_settled_child_resumes_it_on_its_session() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        c = await rt.subagents.start(host, "c", "work")
        await rt.subagents.dispose(c)
        again = await rt.subagents.followup("c", UserMessage("m2", "more"))
        await again.agent.when_idle()
        turns = [e.data["turn"] for e in again.agent.session.events if e.type == "turn/start"]
        assert turns == [1]  # c's first prompt was parked by the dispose; m2 is turn 1
        assert again.agent.session is c.agent.session

    run(test)


def test_followup_during_someone_elses_teardown_is_refused_closing() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        gate = Gate("c")
        models.script("c", Wait(gate, Reply("late"), cooperate=False))
        c = await rt.subagents.start(host, "c", "work")
        await gate.reached.wait()
        pending = rt.subagents.dispose(c)
        with pytest.raises(
            SubagentError,
            match=r"^activation 'c' is being torn down; the message was not delivered$",
        ) as caught:
            await rt.subagents.followup("c", UserMessage("m2", "more"))
        assert caught.value.code == "ACTIVATION_CLOSING"
        gate.open()
        await pending

    run(test)


def test_a_followup_given_text_gets_a_message_id_of_its_own() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        c = await rt.subagents.start(host, "c", "work")
        await rt.subagents.followup("c", "more")
        await rt.subagents.followup("c", "and more")
        await c.agent.when_idle()
        claimed = [e.data["id"] for e in c.agent.session.events if e.type == "user/message"]
        assert claimed == ["c:prompt", "c:followup:1", "c:followup:2"]

    run(test)


def test_settled_children_are_forgotten_when_their_parent_agent_is_disposed() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p = await rt.subagents.start(host, "p", "work")
        c = await rt.subagents.start(p.agent, "c", "work")
        await rt.subagents.dispose(c)
        assert list(rt.subagents.dormant) == ["c"]  # a followup would resume it
        await rt.subagents.dispose(p)  # p's agent is disposed: nobody can resume c now
        assert list(rt.subagents.dormant) == ["p"]
        with pytest.raises(UsageError, match=r"^no continuable subagent is named 'c'$"):
            await rt.subagents.followup("c", "more")
        other = await rt.create_agent("other")
        q = await rt.subagents.start(other.agent, "q", "work")
        await rt.subagents.dispose(q)
        assert list(rt.subagents.dormant) == ["p", "q"]
        await other.dispose()
        assert list(rt.subagents.dormant) == ["p"]

    run(test)


def test_followup_of_an_unknown_child_is_a_usage_error() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        with pytest.raises(UsageError, match=r"^no continuable subagent is named 'x'$"):
            await rt.subagents.followup("x", UserMessage("m", "hi"))

    run(test)


# --- drains and admission -------------------------------------------------------------------------

DRAINING = "continuable subagents are draining; the operation was not admitted"


def test_drain_tears_every_root_down_and_refuses_every_later_admission() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        other = (await rt.create_agent("other")).agent
        _p, _c, _g = await tree(rt, models, host)
        q = await rt.subagents.start(other, "q", "work")
        await rt.subagents.drain()
        assert sorted(settled.ids) == ["c", "g", "p", "q"]
        assert settled.ids.index("g") < settled.ids.index("c") < settled.ids.index("p")
        with pytest.raises(SubagentError, match=f"^{re.escape(DRAINING)}$") as caught:
            await rt.subagents.start(host, "n", "work")
        assert caught.value.code == "DRAINING"
        with pytest.raises(SubagentError, match=f"^{re.escape(DRAINING)}$") as caught:
            await rt.subagents.followup("q", UserMessage("m", "more"))
        assert caught.value.code == "DRAINING"
        assert rt.subagents.resident == () and q.failed is False

    run(test)


def test_drain_descendants_of_a_host_parent_closes_admission_below_it_only() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        other = (await rt.create_agent("other")).agent
        p, _c, _g = await tree(rt, models, host)
        models.script("q", Wait(Gate("q"), Reply("late")))
        q = await rt.subagents.start(other, "q", "work")
        await rt.subagents.drain_descendants([host])
        assert p.stage == "settled" and rt.subagents.resident == ("q",)
        below = (
            "continuable subagents below parent 'host' are draining; the operation was not admitted"
        )
        with pytest.raises(SubagentError, match=f"^{re.escape(below)}$") as caught:
            await rt.subagents.start(host, "n", "work")
        assert caught.value.code == "DRAINING"
        await rt.subagents.start(other, "n", "work")  # another parent still admits
        await rt.subagents.dispose(q)

    run(test)


def test_drain_descendants_of_an_activation_keeps_it_and_closes_admission_below_it() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p, c, g = await tree(rt, models, host)
        await rt.subagents.drain_descendants([p.agent])
        assert (p.stage, c.stage, g.stage) == ("active", "settled", "settled")
        below = (
            "continuable subagents below parent 'p' are draining; the operation was not admitted"
        )
        with pytest.raises(SubagentError, match=f"^{re.escape(below)}$"):
            await rt.subagents.start(p.agent, "n", "work")

    run(test)


def test_drain_children_checks_every_lineage_before_tearing_anything_down() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        p, c, g = await tree(rt, models, host)
        c2 = await rt.subagents.start(p.agent, "c2", "work")
        with pytest.raises(
            SubagentError,
            match=r"^'p' cannot drain 'g': the named parent does not own this activation$",
        ) as caught:
            rt.subagents.drain_children(p.agent, ["c2", "g"])
        assert caught.value.code == "UNAUTHORIZED"
        assert (c.stage, c2.stage, g.stage) == ("active", "active", "active")
        await rt.subagents.drain_children(p.agent, ["c2", "nobody"])  # absent ids are skipped
        assert (c.stage, c2.stage) == ("active", "settled")

    run(test)


def test_drain_children_checks_the_lineage_of_a_child_already_closing() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        p, c, _g = await tree(rt, models, host)
        closing = rt.subagents.dispose(c)  # c and g are closing, held in their model requests
        assert c.stage == "joining"
        with pytest.raises(
            SubagentError,
            match=r"^'host' cannot drain 'c': the named parent does not own this activation$",
        ) as caught:
            rt.subagents.drain_children(host, ["c"])
        assert caught.value.code == "UNAUTHORIZED"
        joined = rt.subagents.drain_children(p.agent, ["c"])  # the parent joins the teardown
        await asyncio.gather(closing, joined)
        assert settled.ids == ["g", "c"]

    run(test)


def test_a_stale_parent_identity_is_unauthorized() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        c = await rt.subagents.start(host, "c", "work")
        stale = c.agent
        await rt.subagents.dispose(c)
        await rt.subagents.followup("c", UserMessage("m2", "more"))  # a fresh c, a fresh agent
        calls: list[Callable[[], object]] = [
            lambda: rt.subagents.drain_children(stale, ["x"]),
            lambda: rt.subagents.drain_descendants([stale]),
        ]
        for call in calls:
            with pytest.raises(
                SubagentError,
                match=r"^<Agent c phase=disposed .*> is not a live parent agent of this runtime$",
            ) as caught:
                call()
            assert caught.value.code == "UNAUTHORIZED"
        with pytest.raises(SubagentError) as caught:
            await rt.subagents.start(stale, "n", "work")
        assert caught.value.code == "UNAUTHORIZED"

    run(test)


def test_an_id_becomes_reusable_only_after_its_activation_settled() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        held = Gate("c's last flush")
        c = await rt.subagents.start(host, "c", "work", session=HeldSession().hold(held).session)
        pending = rt.subagents.dispose(c)
        await held.reached.wait()
        for call in (rt.subagents.start(host, "c", "again"), rt.create_agent("c")):
            with pytest.raises(UsageError, match=r"^an agent named 'c' already exists$"):
                await call
        held.open()
        await pending
        fresh = await rt.subagents.start(host, "c", "again")
        assert fresh is not c and rt.subagents.owner("c") == "host"

    run(test)


def test_bad_admissions_are_refused_at_the_door() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        with pytest.raises(
            UsageError, match=r"^a child id is 1 to 200 printable characters, not ''$"
        ):
            await rt.subagents.start(host, "", "work")
        with pytest.raises(UsageError, match=r"^a prompt is a str or a UserMessage, not 3$"):
            await rt.subagents.start(host, "c", 3)  # type: ignore[arg-type]
        with pytest.raises(
            SubagentError, match=r"^'host' is not a live parent agent of this runtime$"
        ):
            await rt.subagents.start("host", "c", "work")  # type: ignore[arg-type]
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0

    run(test)


# --- the runtime's final switch -------------------------------------------------------------------


def test_aclose_tears_the_trees_down_child_first_and_returns() -> None:
    async def main() -> None:
        models = Models()
        rt = Runtime(models)
        host = (await rt.create_agent("host")).agent
        settled = Settlements(rt)
        p, c, g = await tree(rt, models, host)
        await rt.aclose()
        assert settled.ids == ["g", "c", "p"]
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0
        assert [a.agent.phase for a in (p, c, g)] == ["disposed"] * 3
        with pytest.raises(SubagentError, match=f"^{re.escape(DRAINING)}$"):
            await rt.subagents.start(host, "n", "work")
        with pytest.raises(Rejected):
            host.followup(UserMessage("m", "hi"))

    asyncio.run(main())


def test_drain_disposes_a_parent_agent_only_after_its_children_settled() -> None:
    run(partial(_parent_agent_outlives_its_children, "drain"))


def test_aclose_disposes_a_parent_agent_only_after_its_children_settled() -> None:
    """aclose() is drain() and more: a parent activation's agent is disposed by its own
    teardown, after its children settled (finishDisposal ends with handle.dispose), so the
    child's settlement notice reaches the parent's inbox and its terminal capture, as under
    drain(). The runtime's close does not dispose an activation's agent out from under it."""
    run(partial(_parent_agent_outlives_its_children, "aclose"))


async def _parent_agent_outlives_its_children(
    close: str, rt: Runtime, _models: Models, host: Agent
) -> None:
    p = await rt.subagents.start(host, "p", "work p")
    await p.agent.when_idle()
    held = HeldSession()
    c = await rt.subagents.start(p.agent, "c", "work c", session=held.session)
    await c.agent.when_idle()
    gate = Gate("c's final flush")
    held.hold(gate)
    closing = rt.aclose() if close == "aclose" else rt.subagents.drain()
    await gate.reached.wait()  # c's teardown is held at its final flush
    seen = (p.agent.phase, p.stage)
    gate.open()
    await closing
    await rt.aclose()
    assert seen == ("idle", "joining")
    assert p.terminal is not None and p.terminal.pending == ("c:settled:1",)
    assert [a.agent.phase for a in (p, c)] == ["disposed"] * 2
