"""The runtime asserts each effect's table contract as it performs it."""

from __future__ import annotations

import asyncio
import re

import pytest

from fsm_core import FsmError, Runtime, UserMessage
from fsm_core.runtime import Reply
from fsm_core.testing import ScriptedModel


def test_an_effect_performed_outside_its_contract_stops_the_driver_loudly() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([Reply("never")]))
        agent = (await rt.create_agent("a1")).agent
        claim = agent._handlers["claim_inbox"]

        def claim_then_cancel() -> None:
            # A runtime bug: letting a listener in during an effect the table does not mark as
            # notifying. The cancel aborts the holder before publish_turn_start runs.
            claim()
            agent.cancel()

        agent._handlers["claim_inbox"] = claim_then_cancel
        agent.followup(UserMessage("m1", "hi"))
        driver = agent._driver  # scheduled by the wake; it runs from the next loop iteration
        assert driver is not None
        with pytest.raises(
            FsmError,
            match=re.escape(
                "agent a1: publish_turn_start() runs where its contract "
                "'holder == live and turn' does not hold"
            ),
        ):
            await driver

    asyncio.run(main())
