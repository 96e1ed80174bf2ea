"""Edges of seed 004's registry found in review: a delivery at each stage of someone's
teardown."""

from __future__ import annotations

import asyncio

import pytest

from fsm_core.runtime import (
    Agent,
    Reply,
    Runtime,
    Session,
    SubagentError,
    UserMessage,
)
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import Models, run

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
