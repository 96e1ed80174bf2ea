"""Edges of seed 004's registry found in review: a delivery at each stage of someone's
teardown, a session writer raising what is no failure, a bad session, and a drain below a
host agent outliving that agent."""

from __future__ import annotations

import asyncio

import pytest

from fsm_core import UsageError
from fsm_core.runtime import (
    Activation,
    ActivationTeardownFailed,
    Agent,
    Reply,
    Runtime,
    Session,
    SubagentError,
    UserMessage,
)
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import HeldSession, Models, Settlements, run

pytestmark = pytest.mark.timeout(30)


def test_followup_while_someones_dispose_releases_the_handle_is_refused_closing() -> None:
    """Past the final flush, an explicit dispose is still someone's teardown: the delivery is
    refused as at every earlier stage, not parked and resumed cold."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        held = Gate("the handle's flush")
        stages: list[str] = []

        async def write(_log: str) -> None:
            stages.append(act.stage)
            if act.stage == "releasing":
                await held.wait(cooperate=False)

        gate = Gate("c")
        models.script("c", Wait(gate, Reply("late")))
        act = await rt.subagents.start(host, "c", "work", session=Session(writer=write))
        await gate.reached.wait()
        pending = rt.subagents.dispose(act)
        await held.reached.wait()
        delivery = asyncio.ensure_future(rt.subagents.followup("c", UserMessage("m2", "more")))
        held.open()
        with pytest.raises(SubagentError) as caught:
            await delivery
        assert caught.value.code == "ACTIVATION_CLOSING"
        await pending
        assert stages[-1] == "releasing" and rt.subagents.resident == ()

    run(test)


class Boom(BaseException):
    """What a writer may raise that is no Exception: a host's own control-flow exception."""


async def _disposing(
    rt: Runtime, models: Models, host: Agent, error: BaseException, calls: list[str]
) -> Activation:
    """Start ``c`` with a session whose writer raises ``error`` at the final flush (at most
    three times, so a teardown that retries it ends), and dispose it mid-turn."""
    act: Activation | None = None

    async def write(_log: str) -> None:
        assert act is not None
        calls.append(act.stage)
        if act.stage == "flushing" and calls.count("flushing") <= 3:
            raise error

    gate = Gate("c")
    models.script("c", Wait(gate, Reply("late")))
    act = await rt.subagents.start(host, "c", "work", session=Session(writer=write))
    await gate.reached.wait()
    return act


def test_a_writer_raising_cancelled_error_fails_the_final_flush_once() -> None:
    """A CancelledError the writer raises is a fault of that boundary, not the teardown being
    cancelled: it is not retried (a writer that always raises it would spin for good)."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        calls: list[str] = []
        act = await _disposing(rt, models, host, asyncio.CancelledError(), calls)
        with pytest.raises(ActivationTeardownFailed) as caught:
            await rt.subagents.dispose(act)
        assert [(f.activation, f.boundary) for f in caught.value.failures] == [("c", "final flush")]
        assert calls.count("flushing") == 1
        assert act.stage == "settled" and act.failed

    run(test)


def test_a_writer_raising_a_base_exception_still_lets_the_activation_converge() -> None:
    """Whatever the final flush raises, the six convergence steps run; a BaseException that is
    no failure is raised to the caller last, and the runtime still closes."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        calls: list[str] = []
        act = await _disposing(rt, models, host, Boom("the host stops"), calls)
        with pytest.raises(Boom):
            await rt.subagents.dispose(act)
        assert act.stage == "settled" and act.failed
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0
        assert rt.subagents.owner("c") is None

    run(test)


def test_start_given_no_session_object_is_a_usage_error_naming_it() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        with pytest.raises(UsageError, match=r"^a child's session is a Session, not 'log\.jsonl'$"):
            await rt.subagents.start(host, "c", "work", session="log.jsonl")  # type: ignore[arg-type]
        assert rt.subagents.resident == () and rt.subagents.owner("c") is None

    run(test)


def test_a_drain_below_a_host_agent_ends_with_that_agent_not_with_its_name() -> None:
    """drain_descendants closed admission below the host agent ``h``; once ``h`` is disposed,
    a new agent named ``h`` is another parent, and admits children."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        first = await rt.create_agent("h")
        await rt.subagents.drain_descendants([first.agent])
        await first.dispose()
        again = await rt.create_agent("h")
        c = await rt.subagents.start(again.agent, "c", "work")
        assert c.parent is again.agent and rt.subagents.resident == ("c",)

    run(test)


def test_a_teardown_runs_no_turn_from_work_queued_while_the_turn_flushed() -> None:
    """Seed 004: the teardown cancels with keep_inbox and waits on no model turn. Work queued
    while the agent's end-of-turn flush is held survives into the Terminal's pending capture;
    it does not run as one more turn before the teardown goes on."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        gate = Gate("c's end-of-turn flush")
        act = await rt.subagents.start(host, "c", "work", session=HeldSession().hold(gate).session)
        await gate.reached.wait()  # the turn ended; its flush is held
        await rt.subagents.followup("c", UserMessage("m2", "more"))
        teardown = rt.subagents.dispose(act)
        gate.open()
        await teardown
        assert len(models.signals["c"]) == 1  # one model request: the prompt's
        assert act.terminal is not None and act.terminal.turns == 1
        assert act.terminal.pending == ("m2",)

    run(test)


def test_a_users_cancel_clearing_the_queued_work_lets_the_activation_settle() -> None:
    """The watcher waits while the agent is idle with work parked; a user's cancel that then
    discards that work ends the activation's work as an idle with nothing queued would: it
    settles, without waiting for a drain or a dispose."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        gate = Gate("c")
        models.script("c", Wait(gate, Reply("late")))
        act = await rt.subagents.start(host, "c", "work")
        await gate.reached.wait()
        await rt.subagents.followup("c", UserMessage("m2", "more"))
        act.agent.cancel(keep_inbox=True)  # the turn aborts; m2 stays parked
        await act.agent.when_idle()  # after the watcher's own wake: it found m2 and waits
        assert act.stage == "active" and act.agent.inbox.pending
        act.agent.cancel()  # discards m2
        await settled.of("c")
        assert settled.log == [("c", False)] and rt.subagents.resident == ()
        assert act.terminal is not None and act.terminal.pending == ()

    run(test)
