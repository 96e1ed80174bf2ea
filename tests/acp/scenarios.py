"""The official clients' scenarios, driven by the Python SDK (``agent-client-protocol``):
:func:`main_suite` against ``fsm-core acp --model tests.acp.agent:make --hook-prompt HOOK``
and :func:`tools_suite` against ``python -m tests.acp.agent``. ``client.mjs`` runs the same
scenarios with the TypeScript SDK; both give the same observations (a JSON object), which
``test_official_clients.py`` compares to what the schema and the issue ask for."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from acp import RequestError, spawn_agent_process, text_block
from acp.interfaces import Client
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    EnvVariable,
    ImageContentBlock,
    McpServerStdio,
    RequestPermissionResponse,
    ResourceContentBlock,
)

Observed = dict[str, Any]

MCP_SERVERS: dict[str, dict[str, Any]] = {
    "test": {
        "name": "test",
        "command": sys.executable,
        "args": [str(Path(__file__).parent.parent / "mcp_server.py")],
        "env": [{"name": "MCP_TEST_FIFO", "value": ""}],  # an env list on the wire; no FIFO
    },
    "missing": {"name": "missing", "command": "/nonexistent/mcp-server", "args": [], "env": []},
}
"""The ``mcpServers`` entries (``McpServerStdio``) of the tools suite's MCP scenario:
``tests/mcp_server.py`` (the ``mcp`` SDK's server: ``add``, ``wait``, ``cancellations``), and
one whose command does not exist. ``client.mjs`` gets them as JSON in ``$ACP_MCP_SERVERS``."""

PATIENT = {"shutdown_timeout": 60.0}
"""How long the client waits for the agent to exit once it closed stdin before it signals it
(the package's default, 2 s, is short on a busy CI machine: the test asserts a clean exit)."""


def compact(update: Mapping[str, Any]) -> list[Any]:
    """A session update as a short list both SDKs' tests compare: its kind and what counts."""
    kind = update["sessionUpdate"]
    if kind in ("agent_thought_chunk", "agent_message_chunk", "user_message_chunk"):
        return [kind, update["content"]["text"]]
    if kind == "tool_call":
        return [
            kind,
            update["toolCallId"],
            update["title"],
            update.get("status"),
            update.get("rawInput"),
        ]
    if kind == "tool_call_update":
        return [kind, update["toolCallId"], update.get("status"), update.get("rawOutput")]
    return [kind]


class Recorder:
    """The client: records every session update (by session, in order) and answers each
    permission request with its session's policy: an option id, or ``"hold"`` (the scenario
    answers it)."""

    def __init__(self) -> None:
        self.updates: dict[str, list[list[Any]]] = {}
        self.arrived: dict[str, asyncio.Event] = {}
        self.policy: dict[str, str] = {}
        self.asked: dict[str, list[str]] = {}
        self.held: dict[str, asyncio.Future[RequestPermissionResponse]] = {}

    def arrival(self, sid: str) -> asyncio.Event:
        return self.arrived.setdefault(sid, asyncio.Event())

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        dumped = update.model_dump(by_alias=True, exclude_none=True, mode="json")
        self.updates.setdefault(session_id, []).append(compact(dumped))
        self.arrival(session_id).set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: Any, **_: Any
    ) -> RequestPermissionResponse:
        self.asked.setdefault(session_id, []).append(tool_call.title)
        policy = self.policy.get(session_id, "reject_once")
        if policy == "hold":
            held = self.held[session_id] = asyncio.get_running_loop().create_future()
            self.arrival(session_id).set()
            return cast(RequestPermissionResponse, await held)
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=policy)
        )

    def take(self, sid: str) -> list[list[Any]]:
        return self.updates.pop(sid, [])

    async def until(self, sid: str, seen: Callable[[], bool]) -> None:
        while not seen():
            event = self.arrival(sid)
            event.clear()
            await event.wait()


async def _code(call: Any) -> int | dict[str, Any]:
    """The error code a request is answered with, or its result (as JSON)."""
    try:
        result = await call
    except RequestError as error:
        return error.code
    return cast(dict[str, Any], result.model_dump(by_alias=True, exclude_none=True, mode="json"))


async def _error(call: Any) -> list[Any]:
    """The error code and ``data.details`` a request is answered with (it must fail)."""
    try:
        await call
    except RequestError as error:
        return [error.code, (error.data or {}).get("details")]
    raise AssertionError("the request succeeded")


def _stdio(name: str) -> McpServerStdio:
    server = MCP_SERVERS[name]
    env = [EnvVariable(name=v["name"], value=v["value"]) for v in server["env"]]
    return McpServerStdio(name=name, command=server["command"], args=server["args"], env=env)


def _last_request_id(conn: Any) -> Any:
    """The id of the request ``conn`` sent last and still waits for (the Python SDK has no
    public way to cancel a request, so ``$/cancel_request`` is sent by hand)."""
    return max(conn._conn._pending)


async def main_suite(
    command: Sequence[str], dirs: Sequence[Path], env: Mapping[str, str]
) -> Observed:
    client = Recorder()
    seen: Observed = {}
    async with spawn_agent_process(
        cast(Client, client), *command, env=dict(env), transport_kwargs=PATIENT
    ) as (
        conn,
        process,
    ):
        hellos = [await conn.initialize(protocol_version=v) for v in (1, 0, 7)]
        seen["versions"] = [h.protocol_version for h in hellos]
        capabilities = hellos[0].agent_capabilities
        assert capabilities is not None
        seen["capabilities"] = capabilities.model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )
        seen["relative_cwd"] = await _code(conn.new_session(cwd="relative/dir", mcp_servers=[]))

        async def session(i: int) -> str:
            return (await conn.new_session(cwd=str(dirs[i]), mcp_servers=[])).session_id

        a = await session(0)
        answer = await conn.prompt(session_id=a, prompt=[text_block("hello")])
        seen["end_turn"] = {"stop": answer.stop_reason, "updates": client.take(a)}

        b = await session(1)
        link = ResourceContentBlock(type="resource_link", name="a.py", uri="file:///w/a.py")
        await conn.prompt(session_id=b, prompt=[text_block("read"), link])
        seen["resource_link"] = client.take(b)[-1][1]
        image = ImageContentBlock(type="image", data="AAAA", mime_type="image/png")
        seen["image"] = await _code(conn.prompt(session_id=b, prompt=[image]))

        c = await session(2)
        stops = [
            (await conn.prompt(session_id=c, prompt=[text_block(t)])).stop_reason
            for t in ("first", "forbidden request", "refuse", "history")
        ]
        seen["refusal"] = {"stops": stops, "last": client.take(c)[-1][1]}

        d = await session(3)
        held = asyncio.ensure_future(conn.prompt(session_id=d, prompt=[text_block("hold")]))
        await client.until(d, lambda: bool(client.updates.get(d)))  # the turn is in its step
        await conn.cancel(session_id=d)
        after = (await held).stop_reason
        await conn.prompt(session_id=d, prompt=[text_block("after")])
        seen["cancel"] = {"stop": after, "next": client.take(d)[-1][1]}

        e = await session(4)
        held = asyncio.ensure_future(conn.prompt(session_id=e, prompt=[text_block("hold")]))
        await client.until(e, lambda: bool(client.updates.get(e)))
        await conn._conn.send_notification(
            "$/cancel_request", {"requestId": _last_request_id(conn)}
        )
        seen["cancel_request"] = (await held).stop_reason

        f, g = await session(5), await session(6)
        held = asyncio.ensure_future(conn.prompt(session_id=f, prompt=[text_block("hold")]))
        await client.until(f, lambda: bool(client.updates.get(f)))
        await conn.prompt(session_id=g, prompt=[text_block("hi")])
        other = client.take(g)[-1][1]
        await conn.cancel(session_id=f)
        seen["isolated"] = {"other": other, "held": (await held).stop_reason}

        seen["close"] = [
            await _code(conn.close_session(session_id=a)),
            await _code(conn.close_session(session_id=a)),
            await _code(conn.prompt(session_id=a, prompt=[text_block("hi")])),
        ]
    seen["exit"] = process.returncode
    return seen


async def tools_suite(
    command: Sequence[str], dirs: Sequence[Path], env: Mapping[str, str]
) -> Observed:
    client = Recorder()
    seen: Observed = {}
    call_add: list[Any] = [text_block("call add " + json.dumps({"a": 1, "b": 2}))]
    call_boom: list[Any] = [text_block("call boom {}")]
    async with spawn_agent_process(
        cast(Client, client), *command, env=dict(env), transport_kwargs=PATIENT
    ) as (
        conn,
        process,
    ):
        await conn.initialize(protocol_version=1)

        async def session(i: int, policy: str) -> str:
            sid = (await conn.new_session(cwd=str(dirs[i]), mcp_servers=[])).session_id
            client.policy[sid] = policy
            return sid

        t1 = await session(0, "allow_once")
        answer = await conn.prompt(session_id=t1, prompt=call_add)
        seen["completed"] = {"stop": answer.stop_reason, "updates": client.take(t1)}
        client.policy[t1] = "allow_always"
        await conn.prompt(session_id=t1, prompt=call_boom)
        seen["failed"] = client.take(t1)
        await conn.prompt(session_id=t1, prompt=call_boom)
        client.take(t1)
        seen["asked"] = client.asked[t1]

        t2 = await session(1, "reject_once")
        answer = await conn.prompt(session_id=t2, prompt=call_add)
        seen["rejected"] = {"stop": answer.stop_reason, "updates": client.take(t2)}

        t3 = await session(2, "hold")
        held = asyncio.ensure_future(conn.prompt(session_id=t3, prompt=call_add))
        await client.until(t3, lambda: t3 in client.held)
        await conn.cancel(session_id=t3)  # then, as the schema asks of a client: "cancelled"
        client.held[t3].set_result(
            RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        )
        seen["permission_cancel"] = {"stop": (await held).stop_reason, "updates": client.take(t3)}

        t4 = await session(3, "hold")
        held = asyncio.ensure_future(conn.prompt(session_id=t4, prompt=call_add))
        await client.until(t4, lambda: t4 in client.held)
        await conn._conn.send_notification(
            "$/cancel_request", {"requestId": _last_request_id(conn)}
        )
        stop = (await held).stop_reason
        client.held[t4].set_result(
            RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        )
        seen["permission_cancel_request"] = {"stop": stop, "updates": client.take(t4)}

        t5 = (await conn.new_session(cwd=str(dirs[4]), mcp_servers=[_stdio("test")])).session_id
        client.policy[t5] = "allow_once"
        await conn.prompt(session_id=t5, prompt=[text_block("tools")])
        offered = client.take(t5)[-1][1]
        call_mcp: list[Any] = [text_block("call mcp__test__add " + json.dumps({"a": 2, "b": 3}))]
        answer = await conn.prompt(session_id=t5, prompt=call_mcp)
        seen["mcp"] = {
            "offered": offered,
            "stop": answer.stop_reason,
            "updates": client.take(t5),
            "asked": client.asked[t5],
        }
        seen["mcp_missing"] = await _error(
            conn.new_session(cwd=str(dirs[5]), mcp_servers=[_stdio("missing")])
        )
    seen["exit"] = process.returncode
    return seen
