"""Stdio MCP servers of ``fsm-core acp`` sessions (``fsm_core/acp/_mcp.py``): started with the
session, their tools offered to the model and called with the turn's signal, and every process
of theirs reaped when the session closes or the agent exits.

The servers are ``tests/mcp_server.py`` (the ``mcp`` SDK's ``MCPServer``), whose tools the
model calls, and, where only starting and reaping matter, ``tests/mcp_tiny_server.py`` (the
standard library alone, to start in milliseconds; it forks a child, and can ignore SIGTERM).
Most tests serve the agent in process over in-memory lines (``Wire``); those about the agent's
exit run ``python -m fsm_core.acp``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION

from fsm_core import AbortSignal, Hooks, Reply, Request, Tool, ToolCall, ToolSpec
from fsm_core.acp._adapter import AcpAgent, _serve
from fsm_core.acp._mcp import TOOLS_LIMIT
from tests.helpers import alive, exits

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts processes in /proc"),
]

HERE = Path(__file__).resolve().parent
SERVER = [sys.executable, str(HERE / "mcp_server.py")]
TINY = [sys.executable, "-I", "-S", str(HERE / "mcp_tiny_server.py")]


def stdio(name: str, argv: list[str], **env: str) -> dict[str, Any]:
    """An ``mcpServers`` entry of ``session/new``."""
    return {
        "name": name,
        "command": argv[0],
        "args": argv[1:],
        "env": [{"name": k, "value": v} for k, v in env.items()],
    }


class ToolModel:
    """A model that calls the tool a prompt names (``call NAME {json args}``) and answers
    with what the call gave (``ok: <result as JSON>`` or ``failed: ...``); any other prompt
    is echoed. ``requests`` records every request."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        self.requests.append(request)
        last = request.messages[-1]
        if last["role"] == "tool":
            verdict = "ok" if last["ok"] else "failed"
            return Reply(f"{verdict}: {json.dumps(last['result'], sort_keys=True)}")
        text = str(last["text"])
        if text.startswith("call "):
            _, name, args = text.split(" ", 2)
            call = ToolCall("c1", name, json.loads(args))
            return Reply(tool_calls=(call,), finish="tool_calls")
        return Reply(f"echo: {text}")


class Wire:
    """An ACP client speaking JSON-RPC lines to an :class:`AcpAgent` served in this process."""

    def __init__(
        self,
        model: ToolModel,
        hooks: Hooks | None = None,
        *,
        tools: Sequence[Tool] = (),
        sessions: Path | None = None,
    ) -> None:
        self.agent = AcpAgent(model, hooks=hooks, tools=tools, sessions=sessions)
        self.reader = asyncio.StreamReader()
        self.answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.updates: list[dict[str, Any]] = []
        """Every ``session/update`` the agent sent, in order."""
        self.texts: list[str] = []
        self.ids = itertools.count(1)
        self.task = asyncio.ensure_future(_serve(self.agent, self.reader, self._write))

    async def _write(self, data: bytes) -> None:
        message = json.loads(data)
        if message.get("method") == "session/request_permission":  # every tool call is allowed
            outcome = {"outcome": "selected", "optionId": "allow_once"}
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}}
            self.reader.feed_data(json.dumps(answer).encode() + b"\n")
        elif "method" in message:
            update = message["params"]["update"]
            self.updates.append(update)
            if update.get("sessionUpdate") == "agent_message_chunk":
                self.texts.append(update["content"]["text"])
        else:
            self.answers[message["id"]].set_result(message)

    def send(self, method: str, **params: Any) -> asyncio.Future[dict[str, Any]]:
        rid = next(self.ids)
        self.answers[rid] = asyncio.get_running_loop().create_future()
        line = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        self.reader.feed_data(json.dumps(line).encode() + b"\n")
        return self.answers[rid]

    async def result(self, method: str, **params: Any) -> Any:
        answer = await self.send(method, **params)
        assert "result" in answer, answer
        return answer["result"]

    async def new(self, cwd: Path, *servers: dict[str, Any]) -> str:
        result = await self.result("session/new", cwd=str(cwd), mcpServers=list(servers))
        return str(result["sessionId"])

    async def prompt(self, sid: str, text: str) -> str:
        prompt = [{"type": "text", "text": text}]
        answer = await self.result("session/prompt", sessionId=sid, prompt=prompt)
        return str(answer["stopReason"])

    def cancel(self, sid: str) -> None:
        line = {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}
        self.reader.feed_data(json.dumps(line).encode() + b"\n")

    async def close(self) -> None:
        self.reader.feed_eof()
        await self.task


def children() -> list[int]:
    """This process's child processes, zombies included."""
    found: list[int] = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children", encoding="ascii") as listing:
            found += [int(pid) for pid in listing.read().split()]
    return found


def marked(marker: str) -> Iterator[int]:
    """The processes whose command line holds ``marker``."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                yield int(entry)


def test_tools_are_listed_offered_called_and_their_result_reaches_the_answer(
    tmp_path: Path,
) -> None:
    model = ToolModel()

    async def main() -> None:
        wire = Wire(model)
        hello = await wire.result("initialize", protocolVersion=PROTOCOL_VERSION)
        assert hello["agentCapabilities"]["mcpCapabilities"] == {"http": False, "sse": False}
        sid = await wire.new(tmp_path, stdio("test", SERVER))
        plain = await wire.new(tmp_path)
        assert await wire.prompt(sid, 'call mcp__test__add {"a": 2, "b": 3}') == "end_turn"
        assert wire.texts[-1] == (
            'ok: {"content": [{"text": "5", "type": "text"}], "isError": false, '
            '"structuredContent": {"result": 5}}'
        )
        assert await wire.prompt(plain, "hi") == "end_turn"
        await wire.close()

    asyncio.run(main())
    first, _, other = model.requests
    assert first.tools == ("mcp__test__add", "mcp__test__cancellations", "mcp__test__wait")
    add = first.tool_specs[0]
    assert (add.name, add.description) == ("mcp__test__add", "Add two integers.")
    assert add.input_schema["required"] == ["a", "b"]
    assert [spec.name for spec in first.tool_specs] == list(first.tools)
    assert (other.tools, other.tool_specs) == ((), ())  # a session sees only its own servers
    assert isinstance(add, ToolSpec)


def test_a_server_runs_in_the_session_cwd_with_its_args_and_env(tmp_path: Path) -> None:
    work, where = tmp_path / "work", tmp_path / "where.json"
    work.mkdir()
    server = stdio("tiny", [*TINY, "--where", str(where), "two words"], MCP_TEST_VALUE="42")

    async def main() -> None:
        wire = Wire(ToolModel())
        await wire.new(work, server)
        await wire.close()

    asyncio.run(main())
    assert json.loads(where.read_text()) == {
        "cwd": str(work),
        "value": "42",
        "args": ["--where", str(where), "two words"],
    }


def test_a_cancel_during_a_slow_mcp_call_ends_the_turn_cancelled_and_the_server_sees_it(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "reached"
    os.mkfifo(fifo)

    async def main() -> None:
        wire = Wire(ToolModel())
        sid = await wire.new(tmp_path, stdio("test", SERVER, MCP_TEST_FIFO=str(fifo)))
        reached = asyncio.ensure_future(asyncio.to_thread(fifo.read_text))
        held = asyncio.ensure_future(wire.prompt(sid, "call mcp__test__wait {}"))
        assert await reached == "waiting"  # the server is running the call
        wire.cancel(sid)
        assert await held == "cancelled"
        assert await wire.prompt(sid, "call mcp__test__cancellations {}") == "end_turn"
        assert json.loads(wire.texts[-1].removeprefix("ok: "))["structuredContent"] == {"result": 1}
        await wire.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (
            ["/nonexistent/mcp-server"],
            "exited with status 127 before it answered initialize; its stderr ends: ",
        ),
        (
            [sys.executable, "-c", "import sys; print('no config', file=sys.stderr); sys.exit(3)"],
            "exited with status 3 before it answered initialize; its stderr ends: 'no config'",
        ),
    ],
    ids=["not-found", "exits-at-once"],
)
def test_a_server_that_does_not_start_refuses_the_session_naming_it(
    tmp_path: Path, argv: list[str], why: str
) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        wire = Wire(ToolModel())
        refused = await wire.send(
            "session/new", cwd=str(tmp_path), mcpServers=[stdio("broken", argv)]
        )
        prompt = [{"type": "text", "text": "hi"}]
        after = await wire.send("session/prompt", sessionId="session-1", prompt=prompt)
        await wire.close()
        return refused, after

    refused, after = asyncio.run(main())
    assert refused["error"]["code"] == -32603
    details = refused["error"]["data"]["details"]
    assert details.startswith(f"the MCP server 'broken' did not start: it {why}")
    assert after["error"]["code"] == -32002  # no session was made (Resource not found)
    assert children() == []


def test_a_servers_stderr_is_logged_with_its_control_characters_escaped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server's stderr reached the debug log raw: its terminal escapes drove the terminal."""
    noisy = [sys.executable, "-c", "import sys; sys.stderr.write('\\x1b[2Jwiped\\n'); sys.exit(3)"]

    async def main() -> None:
        wire = Wire(ToolModel())
        await wire.send("session/new", cwd=str(tmp_path), mcpServers=[stdio("noisy", noisy)])
        await wire.close()

    with caplog.at_level(logging.DEBUG, logger="fsm_core.acp"):
        asyncio.run(main())
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("MCP server")]
    assert "MCP server noisy: \\x1b[2Jwiped" in logged, logged


def test_a_server_that_pages_its_tools_forever_is_refused_at_the_tools_limit(
    tmp_path: Path,
) -> None:
    """Its pages were read until the start timeout, every tool kept in memory."""

    async def main() -> dict[str, Any]:
        wire = Wire(ToolModel())
        wire.agent.mcp.timeout = 600.0  # the limit ends it, not the clock
        endless = stdio("endless", [*TINY, "--endless"])
        refused = await wire.send("session/new", cwd=str(tmp_path), mcpServers=[endless])
        await wire.close()
        return refused

    refused = asyncio.run(main())
    assert refused["error"]["data"]["details"] == (
        f"the MCP server 'endless' did not start: it lists more than {TOOLS_LIMIT} tools"
    )
    assert children() == []


def test_a_server_that_never_answers_is_given_up_after_the_start_timeout(tmp_path: Path) -> None:
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # reads, never answers

    async def main() -> dict[str, Any]:
        wire = Wire(ToolModel())
        wire.agent.mcp.timeout = 0.5
        refused = await wire.send(
            "session/new", cwd=str(tmp_path), mcpServers=[stdio("mute", silent)]
        )
        await wire.close()
        return refused

    error = asyncio.run(main())["error"]
    assert error["data"]["details"] == (
        "the MCP server 'mute' did not start: it did not answer initialize within 0.5 s"
    )
    assert children() == []


def test_a_server_still_starting_is_stopped_when_the_agent_closes(tmp_path: Path) -> None:
    """Ctrl-C (the agent's ``aclose``) while ``session/new`` waits for its server: the server
    is stopped and reaped, and ``session/new`` answers that it did not start."""
    fifo = tmp_path / "up"
    os.mkfifo(fifo)
    code = f"import sys; open({str(fifo)!r}, 'w').write('up'); sys.stdin.read()"
    slow = [sys.executable, "-c", code]  # says it is up, then never answers

    async def main() -> dict[str, Any]:
        wire = Wire(ToolModel())
        up = asyncio.ensure_future(asyncio.to_thread(fifo.read_text))
        new = wire.send("session/new", cwd=str(tmp_path), mcpServers=[stdio("slow", slow)])
        assert await up == "up"
        await wire.agent.aclose()
        answer = await new
        await wire.close()
        return answer

    error = asyncio.run(main())["error"]
    assert error["data"]["details"] == (
        "the MCP server 'slow' did not start: it was stopped while it started"
    )
    assert children() == []


@pytest.mark.parametrize(
    ("servers", "details"),
    [
        (
            [{"type": "http", "name": "web", "url": "http://127.0.0.1:9/", "headers": []}],
            "mcpServers[0] is an http server; this agent runs stdio MCP servers only",
        ),
        (
            [stdio("twice", TINY), stdio("twice", TINY)],
            "mcpServers[1]: a second server named 'twice'",
        ),
    ],
    ids=["http-not-advertised", "name-twice"],
)
def test_servers_this_agent_cannot_run_are_refused_before_any_starts(
    tmp_path: Path, servers: list[dict[str, Any]], details: str
) -> None:
    async def main() -> dict[str, Any]:
        wire = Wire(ToolModel())
        refused = await wire.send("session/new", cwd=str(tmp_path), mcpServers=servers)
        await wire.close()
        return refused

    error = asyncio.run(main())["error"]
    assert (error["code"], error["data"]["details"]) == (-32602, details)


def test_close_reaps_a_server_that_ignores_the_shutdown_and_its_forked_child(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    server = stdio("tiny", [*TINY, "--pids", str(pids), "--stubborn"])

    async def main() -> list[int]:
        wire = Wire(ToolModel())
        sid = await wire.new(tmp_path, server)
        started = [int(pid) for pid in pids.read_text().split()]
        assert all(alive(pid) for pid in started) and len(children()) == 1  # the supervisor
        assert await wire.result("session/close", sessionId=sid) == {}
        await wire.close()
        return started

    started = asyncio.run(main())
    assert [pid for pid in started if alive(pid)] == []
    assert children() == []


@pytest.mark.parametrize("how", ["stdin-closed", "SIGTERM", "SIGINT"])
def test_the_agent_exiting_reaps_its_servers(tmp_path: Path, how: str) -> None:
    pids = tmp_path / "pids"
    server = stdio("tiny", [*TINY, "--pids", str(pids), "--stubborn"])

    async def main() -> tuple[int | None, list[int]]:
        agent = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fsm_core.acp",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert agent.stdin is not None and agent.stdout is not None
        params = {"cwd": str(tmp_path), "mcpServers": [server]}
        line = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": params}
        agent.stdin.write(json.dumps(line).encode() + b"\n")
        await agent.stdin.drain()
        assert "result" in json.loads(await agent.stdout.readline())
        started = [int(pid) for pid in pids.read_text().split()]
        if how == "stdin-closed":
            agent.stdin.close()
        else:
            agent.send_signal(getattr(signal, how))
        await agent.communicate()
        return agent.returncode, started

    status, started = asyncio.run(main())
    assert status == (0 if how == "stdin-closed" else 130)
    assert [pid for pid in started if alive(pid)] == []


def test_an_agent_killed_outright_still_has_its_servers_stopped(tmp_path: Path) -> None:
    """SIGKILL leaves the agent no say: each server's supervisor gets SIGTERM from the kernel
    (``PR_SET_PDEATHSIG``) and stops and reaps the server's processes itself."""
    pids = tmp_path / "pids"
    server = stdio("tiny", [*TINY, "--pids", str(pids), "--stubborn"])
    agent = subprocess.Popen(
        [sys.executable, "-m", "fsm_core.acp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert agent.stdin is not None and agent.stdout is not None
    params = {"cwd": str(tmp_path), "mcpServers": [server]}
    line = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": params}
    agent.stdin.write(json.dumps(line).encode() + b"\n")
    agent.stdin.flush()
    assert "result" in json.loads(agent.stdout.readline())
    started = [int(pid) for pid in pids.read_text().split()]
    agent.kill()
    agent.communicate()
    assert [pid for pid in started if not exits(pid)] == []


@pytest.mark.slow  # 300 processes: CI's slow stage; every change runs the reaping tests above
def test_leak_measure_100_sessions_with_a_server_leave_no_process(tmp_path: Path) -> None:
    """The issue's measure: 100 sessions opened, prompted once and closed, each with a stdio
    server that forks a child and a prompt hook that leaves a child running behind it; every
    MCP server and hook process is gone, and none of this process's children is left (not
    even a zombie)."""
    marker = str(tmp_path / "leak-marker")
    server = stdio("tiny", [*TINY, marker])
    ran = Path(f"{marker}.hooks")
    lingering = shlex.quote(f"sleep 60; : {marker}")  # the marker keeps it a shell, not sleep
    hook = f"echo ran >> {shlex.quote(str(ran))}; sh -c {lingering} >/dev/null 2>&1 &"

    async def main() -> int:
        wire = Wire(ToolModel(), hooks=Hooks(prompt=[hook]))
        for _ in range(10):
            sids = await asyncio.gather(*(wire.new(tmp_path, server) for _ in range(10)))
            assert len(list(marked(marker))) >= 10  # each server and its child run
            stops = await asyncio.gather(*(wire.prompt(s, "hi") for s in sids))
            assert stops == ["end_turn"] * 10
            await asyncio.gather(*(wire.result("session/close", sessionId=s) for s in sids))
        opened = next(wire.ids) - 1
        await wire.close()
        return opened

    assert asyncio.run(main()) == 300
    assert ran.read_text().split() == ["ran"] * 100  # every prompt ran its hook
    servers, hooks = 0, 0
    for pid in marked(marker):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"sleep 60" in cmdline or ran.name.encode() in cmdline:
            hooks += 1
        else:
            servers += 1
    left = len(children())
    print(
        "MCP leak measure: 100 sessions opened, prompted and closed; surviving processes: "
        f"{servers} of MCP servers, {hooks} of hooks, {left} children of this process"
    )
    assert (servers, hooks, left) == (0, 0, 0)


def test_an_answer_too_long_to_read_fails_the_call_instead_of_hanging(tmp_path: Path) -> None:
    """A server's line over 16 MiB (here the answer to a tool call) cannot be read: the session
    with that server ends, so the call fails and the turn goes on (it once waited forever, and
    the rest of such a line was read as a message of its own)."""
    model = ToolModel()

    async def main() -> str:
        wire = Wire(model)
        await wire.result("initialize", protocolVersion=PROTOCOL_VERSION)
        sid = await wire.new(tmp_path, stdio("tiny", [*TINY, "--huge"]))
        stop = await wire.prompt(sid, "call mcp__tiny__ping {}")
        await wire.close()
        return stop

    assert asyncio.run(main()) == "end_turn"
    assert model.requests[-1].messages[-1]["ok"] is False
