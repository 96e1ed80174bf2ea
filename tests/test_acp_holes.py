"""The ACP adapter's teardown holes found by review: each test failed before its fix."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from acp.schema import CloseSessionResponse, TextContentBlock

from fsm_core.acp import AcpAgent, EchoModel, serve
from fsm_core.acp._adapter import LINE_LIMIT

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


def test_a_deeply_nested_line_is_refused_and_the_agent_goes_on_serving() -> None:
    async def main() -> list[dict[str, Any]]:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        written: list[bytes] = []

        async def write(data: bytes) -> None:
            written.append(data)

        params: dict[str, Any] = {"cwd": "/", "mcpServers": []}
        new = {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": params}
        reader.feed_data(b"[" * 200_000 + b"]" * 200_000 + b"\n")
        reader.feed_data(json.dumps(new).encode() + b"\n")
        reader.feed_eof()
        await serve(EchoModel(), (reader, write))
        return [json.loads(line) for line in written]

    answers = asyncio.run(main())
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700),
        (2, None),
    ]
    assert answers[0]["error"]["data"] == {"details": "a line nested too deeply to parse"}
