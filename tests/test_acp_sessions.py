"""``fsm-core acp --sessions DIR``: each session's durable log kept in DIR, and ``session/load``
taking a session up again in a later process, its conversation streamed to the client first."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from acp import spawn_agent_process, text_block
from acp.interfaces import Client as AcpClient

from fsm_core import AbortSignal, Hooks
from fsm_core.acp._lines import UPDATE_LIMIT
from tests.acp.scenarios import PATIENT, Recorder
from tests.acp.test_official_clients import TAP, npm_prefix, wire
from tests.acp.wire import Wire
from tests.test_acp_mcp import ToolModel
from tests.test_acp_mcp import Wire as Served

__all__ = ["npm_prefix", "wire"]  # test_official_clients' fixtures, shared

PATIENT_KW: dict[str, Any] = {"transport_kwargs": PATIENT}


class Adder:
    """A tool: the sum of ``a`` and ``b``."""

    name = "add"

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        return args["a"] + args["b"]


def served(model: ToolModel, sessions: Path | None) -> Served:
    """An agent served in this process, with the add tool, keeping sessions in ``sessions``."""
    return Served(model, Hooks(), tools=(Adder(),), sessions=sessions)


def load_once(kept: Path, sid: str) -> dict[str, Any]:
    """The answer to ``session/load`` of ``sid`` from an agent keeping sessions in ``kept``."""

    async def main() -> dict[str, Any]:
        client = served(ToolModel(), kept)
        answer = await client.send("session/load", cwd=str(kept), sessionId=sid, mcpServers=[])
        await client.close()
        return answer

    return asyncio.run(main())


def shown(update: Mapping[str, Any]) -> tuple[str, ...]:
    """A ``session/update`` as (kind, what it says)."""
    kind = update["sessionUpdate"]
    if kind.endswith("_chunk"):
        return (kind, update["content"]["text"])
    if kind.startswith("tool_call"):
        return (kind, update["toolCallId"], update.get("status", ""))
    return (kind, json.dumps(update, sort_keys=True))


def test_a_kept_session_is_loaded_by_a_later_agent_with_its_conversation_first(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "sessions"
    kept.mkdir()

    async def first() -> tuple[str, list[tuple[str, ...]]]:
        client = served(ToolModel(), kept)
        sid = str(
            (await client.result("session/new", cwd=str(tmp_path), mcpServers=[]))["sessionId"]
        )
        assert await client.prompt(sid, "hello") == "end_turn"
        assert await client.prompt(sid, 'call add {"a": 2, "b": 3}') == "end_turn"
        await client.close()
        return sid, [shown(u) for u in client.updates]

    sid, live = asyncio.run(first())
    assert re.fullmatch(r"session-[0-9a-f]{32}", sid)
    assert [p.name for p in kept.iterdir() if not p.name.startswith(".")] == [f"{sid}.jsonl"]

    model = ToolModel()

    async def later() -> tuple[dict[str, Any], list[tuple[str, ...]], list[tuple[str, ...]]]:
        client = served(model, kept)
        init = await client.result("initialize", protocolVersion=1)
        loaded = await client.result(
            "session/load", cwd=str(tmp_path), sessionId=sid, mcpServers=[]
        )
        assert loaded == {} or set(loaded) <= {"modes", "configOptions", "_meta"}
        replayed = [shown(u) for u in client.updates]
        assert await client.prompt(sid, "again") == "end_turn"
        await client.close()
        return init, replayed, [shown(u) for u in client.updates[len(replayed) :]]

    init, replayed, after = asyncio.run(later())
    assert init["agentCapabilities"]["loadSession"] is True
    # The conversation in the log's order: what the live client saw, each user message first.
    assert replayed == [
        ("user_message_chunk", "hello"),
        ("agent_message_chunk", "echo: hello"),
        ("user_message_chunk", 'call add {"a": 2, "b": 3}'),
        ("tool_call", "2.1.c1", "pending"),
        ("tool_call_update", "2.1.c1", "completed"),
        ("agent_message_chunk", "ok: 5"),
    ]
    # What the live client was told of the conversation, less its progress (thoughts, calls
    # under way).
    told = [u for u in live if u[0] != "agent_thought_chunk" and u[-1] != "in_progress"]
    assert [u for u in replayed if u[0] != "user_message_chunk"] == told
    assert after == [("agent_thought_chunk", "step 1"), ("agent_message_chunk", "echo: again")]
    # The model was given the conversation the loaded session holds.
    texts = [(m["role"], m.get("text")) for m in model.requests[-1].messages]
    assert texts[0] == ("user", "hello") and texts[-1] == ("user", "again")


def test_a_long_conversation_is_replayed_whole_however_many_updates_it_takes(
    tmp_path: Path,
) -> None:
    """Past UPDATE_LIMIT waiting updates, a turn's progress is merged or dropped; a loaded
    conversation is not progress: it waits for the client instead. (Queued all at once, the
    chunks past the limit were merged into one reply or dropped.)"""
    prompts = [f"p{i}" for i in range(UPDATE_LIMIT // 2 + 22)]

    async def first() -> str:
        client = served(ToolModel(), tmp_path)
        sid = str(
            (await client.result("session/new", cwd=str(tmp_path), mcpServers=[]))["sessionId"]
        )
        for text in prompts:
            assert await client.prompt(sid, text) == "end_turn"
        await client.close()
        return sid

    sid = asyncio.run(first())

    async def later() -> list[tuple[str, ...]]:
        client = served(ToolModel(), tmp_path)
        await client.result("session/load", cwd=str(tmp_path), sessionId=sid, mcpServers=[])
        await client.close()
        return [shown(u) for u in client.updates]

    expected = [
        chunk
        for text in prompts
        for chunk in (("user_message_chunk", text), ("agent_message_chunk", f"echo: {text}"))
    ]
    assert len(expected) > UPDATE_LIMIT
    assert asyncio.run(later()) == expected


@pytest.mark.parametrize(
    ("sid", "code", "detail"),
    [
        ("../../etc/passwd", -32002, "no session '../../etc/passwd'"),
        ("session-1", -32002, "no session 'session-1'"),
        ("session-" + "0" * 32, -32002, f"no session session-{'0' * 32} in "),
    ],
    ids=["a-path", "an-unkept-shape", "not-there"],
)
def test_session_load_refuses_what_is_not_a_kept_session(
    tmp_path: Path, sid: str, code: int, detail: str
) -> None:
    error = load_once(tmp_path, sid)["error"]
    assert error["code"] == code
    assert error["data"]["details"].startswith(detail), error


def test_session_load_without_a_sessions_directory_says_how_to_keep_them(tmp_path: Path) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        client = served(ToolModel(), None)
        init = await client.result("initialize", protocolVersion=1)
        sid = "session-" + "0" * 32
        answer = await client.send("session/load", cwd=str(tmp_path), sessionId=sid, mcpServers=[])
        await client.close()
        return init, answer

    init, answer = asyncio.run(main())
    assert init["agentCapabilities"]["loadSession"] is False
    assert answer["error"]["code"] == -32602
    assert "start it with --sessions DIR" in json.dumps(answer["error"])


def test_a_session_open_here_or_in_another_agent_is_not_loaded_twice(tmp_path: Path) -> None:
    """The log has one writer: a second load, in this agent or another, is refused, and the
    session goes on where it is open."""

    async def main() -> tuple[str, dict[str, Any], dict[str, Any], str]:
        one, two = served(ToolModel(), tmp_path), served(ToolModel(), tmp_path)
        sid = str((await one.result("session/new", cwd=str(tmp_path), mcpServers=[]))["sessionId"])
        assert await one.prompt(sid, "hi") == "end_turn"  # the log is written at its first event
        here = await one.send("session/load", cwd=str(tmp_path), sessionId=sid, mcpServers=[])
        there = await two.send("session/load", cwd=str(tmp_path), sessionId=sid, mcpServers=[])
        still = await one.prompt(sid, "hello")
        await one.close()
        await two.close()
        return sid, here, there, still

    sid, here, there, still = asyncio.run(main())
    assert (here["error"]["code"], here["error"]["data"]["details"]) == (
        -32600,
        f"{sid} is open already",
    )
    assert there["error"]["code"] == -32600
    assert f"{sid}.jsonl" in there["error"]["data"]["details"], there
    assert still == "end_turn"


def test_a_kept_file_that_is_not_a_session_log_is_refused_naming_it(tmp_path: Path) -> None:
    sid = "session-" + "a" * 32
    (tmp_path / f"{sid}.jsonl").write_bytes(b'{"seq": 1, "type": "user/message"}\n\xff\n')

    error = load_once(tmp_path, sid)["error"]
    assert error["code"] == -32602
    assert f"{sid}.jsonl" in error["data"]["details"], error


def test_the_official_python_client_loads_a_session_a_killed_agent_kept(
    tmp_path: Path, wire: Wire | None
) -> None:
    """Over the wire, as an editor does it, with the ACP package's own client (which parses
    every message into the protocol's types): the first agent process is killed outright
    mid-session; a second one loads the session, replaying what the log holds, and every
    message of that load is valid by the v1 schema the TypeScript SDK's npm package ships."""
    kept = tmp_path / "sessions"
    kept.mkdir()
    command = [sys.executable, "-m", "fsm_core.acp", "--sessions", str(kept)]

    async def first(client: Recorder) -> str:
        async with spawn_agent_process(cast(AcpClient, client), *command, **PATIENT_KW) as (
            conn,
            process,
        ):
            await conn.initialize(protocol_version=1)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            answer = await conn.prompt(session_id=sid, prompt=[text_block("hello")])
            assert answer.stop_reason == "end_turn"
            process.kill()
            return sid

    log = tmp_path / "wire.jsonl"
    tapped = [sys.executable, str(TAP), str(log), *command]

    async def later(client: Recorder, sid: str) -> tuple[bool, Any]:
        async with spawn_agent_process(cast(AcpClient, client), *tapped, **PATIENT_KW) as (
            conn,
            _,
        ):
            hello = await conn.initialize(protocol_version=1)
            loaded = await conn.load_session(cwd=str(tmp_path), session_id=sid, mcp_servers=[])
            capabilities = hello.agent_capabilities
            return capabilities is not None and capabilities.load_session is True, loaded

    sid = asyncio.run(first(Recorder()))
    client = Recorder()
    advertised, loaded = asyncio.run(later(client, sid))
    assert advertised and loaded is not None
    assert client.take(sid) == [
        ["user_message_chunk", "hello"],
        ["agent_message_chunk", "echo: hello"],
    ]
    if wire is None:
        print("node is absent: no schema from the npm package to check the wire against")
        return
    count, faults = wire.faults(log)
    assert (count, faults) == (6, [])  # initialize and load, their answers, two chunks


def test_acp_refuses_a_sessions_directory_that_is_not_one(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    done = subprocess.run(
        [sys.executable, "-m", "fsm_core.acp", "--sessions", str(missing)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"fsm-core: --sessions {missing}: no such directory\n"
