"""The ACP adapter's teardown holes found by review: each test failed before its fix."""

from __future__ import annotations

import asyncio

import pytest
from acp.schema import CloseSessionResponse, TextContentBlock

from fsm_core.acp import AcpAgent, EchoModel

pytestmark = pytest.mark.timeout(30)


def test_aclose_answers_a_prompt_no_turn_claimed_cancelled() -> None:
    async def main() -> None:
        agent = AcpAgent(EchoModel())
        sid = (await agent.new_session("/")).session_id
        queued = asyncio.Event()
        agent.runtime.events.on("inbox/inserted", lambda _e: queued.set())
        prompt = asyncio.ensure_future(
            agent.prompt(sid, [TextContentBlock(type="text", text="hi")])
        )
        await queued.wait()  # queued; its turn has not claimed it yet
        await agent.aclose()
        assert (await prompt).stop_reason == "cancelled"

    asyncio.run(main())


def test_two_racing_closes_of_one_session_both_succeed() -> None:
    async def main() -> None:
        agent = AcpAgent(EchoModel())
        sid = (await agent.new_session("/")).session_id
        both = await asyncio.gather(agent.close_session(sid), agent.close_session(sid))
        assert list(both) == [CloseSessionResponse(), CloseSessionResponse()]
        await agent.aclose()

    asyncio.run(main())
