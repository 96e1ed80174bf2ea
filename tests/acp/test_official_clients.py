"""``fsm-core acp`` driven by the official ACP clients (issue 26): the Python SDK's client side
(``agent-client-protocol``) and the TypeScript SDK from npm (``@agentclientprotocol/sdk``,
installed once per checkout into pytest's cache by node's npm; skipped, saying why, only where
``node`` is absent). Each suite runs every scenario in one agent process, through a wire tap;
every message on the wire is then checked against the v1 schema the npm package ships."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acp.scenarios import MCP_SERVERS, main_suite, tools_suite
from tests.acp.wire import Wire
from tests.helpers import npm_install

pytestmark = pytest.mark.timeout(240)

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
SCRIPT = Path(sys.executable).with_name("fsm-core")
TAP = HERE / "tap.py"
SDK = "@agentclientprotocol/sdk"
SDK_VERSION = "2.4.0"
HOOK = 'pwd > .hook-cwd; if grep -q forbidden; then echo "not this" >&2; exit 2; fi'
"""The prompt hook of the main suite: notes where it runs, blocks a prompt saying forbidden."""

COMMANDS = {
    "main": [str(SCRIPT), "acp", "--model", "tests.acp.agent:make", "--hook-prompt", HOOK],
    "tools": [sys.executable, "-m", "tests.acp.agent"],
}
SESSIONS = 7
"""How many session directories a suite gets (one a session)."""


@pytest.fixture(scope="session")
def npm_prefix(request: pytest.FixtureRequest) -> Path | None:
    """Where the TypeScript SDK is installed (once per checkout, under pytest's cache); None
    where there is no node, which the TypeScript tests skip on, saying so."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        print("node or npm is absent: the TypeScript SDK tests are skipped")
        return None
    prefix = npm_install(request, "acp-npm", SDK, SDK_VERSION)
    return prefix


@pytest.fixture(scope="session")
def wire(npm_prefix: Path | None) -> Wire | None:
    if npm_prefix is None:
        return None
    return Wire(npm_prefix / "node_modules" / SDK / "schema" / "v1" / "schema.json")


@contextlib.contextmanager
def _suite_dirs(tmp_path: Path) -> Iterator[list[Path]]:
    dirs = [tmp_path / f"s{i}" for i in range(SESSIONS)]
    for d in dirs:
        d.mkdir()
    yield dirs


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _run_typescript(prefix: Path, suite: str, command: list[str], dirs: list[Path]) -> Any:
    done = subprocess.run(
        ["node", str(HERE / "client.mjs"), suite, json.dumps([str(d) for d in dirs]), *command],
        capture_output=True,
        text=True,
        env={
            **_env(),
            "ACP_SDK": str(prefix / "node_modules" / SDK),
            "ACP_MCP_SERVERS": json.dumps(MCP_SERVERS),
        },
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _observe(sdk: str, suite: str, tmp_path: Path, npm_prefix: Path | None) -> tuple[Any, Path]:
    log = tmp_path / "wire.jsonl"
    command = [sys.executable, str(TAP), str(log), *COMMANDS[suite]]
    with _suite_dirs(tmp_path) as dirs:
        if sdk == "python":
            run = main_suite if suite == "main" else tools_suite
            seen = asyncio.run(run(command, dirs, _env()))
        else:
            if npm_prefix is None:
                pytest.skip("node is absent: the TypeScript SDK cannot run")
            seen = _run_typescript(npm_prefix, suite, command, dirs)
    return seen, log


def _check_wire(wire: Wire | None, log: Path) -> None:
    if wire is None:
        print("node is absent: no schema from the npm package to check the wire against")
        return
    count, faults = wire.faults(log)
    assert count > 20 and faults == []


def _thought(n: int) -> list[Any]:
    return ["agent_thought_chunk", f"step {n}"]


def _said(text: str) -> list[Any]:
    return ["agent_message_chunk", text]


@pytest.mark.parametrize("sdk", ["python", "typescript"])
def test_the_main_scenarios(
    sdk: str, tmp_path: Path, npm_prefix: Path | None, wire: Wire | None
) -> None:
    """Version negotiation, capabilities, sessions, end_turn with its chunks before the
    answer, resource_link, refusals left out of the next request, cwd (checked; the hooks run
    there), session/cancel and $/cancel_request answered cancelled, two sessions isolated,
    session/close and its error codes, and a clean exit when stdin closes."""
    seen, log = _observe(sdk, "main", tmp_path, npm_prefix)
    capabilities = seen.pop("capabilities")
    assert capabilities["promptCapabilities"] == {
        "image": False,
        "audio": False,
        "embeddedContext": False,
    }
    assert capabilities["sessionCapabilities"] == {"close": {}}
    assert capabilities["loadSession"] is False
    again: int | dict[str, Any] = (
        -32002 if sdk == "python" else {}
    )  # TS 2.4.0 takes -32002 to a close as done
    assert seen == {
        "versions": [1, 1, 1],
        "relative_cwd": -32602,
        "end_turn": {"stop": "end_turn", "updates": [_thought(1), _said("echo: hello")]},
        "resource_link": "echo: read\n[a.py](file:///w/a.py)",
        "image": -32602,
        "refusal": {
            "stops": ["end_turn", "refusal", "refusal", "end_turn"],
            "last": "echo: first | history",
        },
        "cancel": {"stop": "cancelled", "next": "echo: hold | after"},
        "cancel_request": "cancelled",
        "isolated": {"other": "echo: hi", "held": "cancelled"},
        "close": [{}, again, -32002],
        "exit": 0,
    }
    ran = tmp_path / "s2" / ".hook-cwd"
    assert ran.read_text().strip() == os.path.realpath(tmp_path / "s2")
    _check_wire(wire, log)


@pytest.mark.parametrize("sdk", ["python", "typescript"])
def test_tool_calls_and_permissions(
    sdk: str, tmp_path: Path, npm_prefix: Path | None, wire: Wire | None
) -> None:
    """Each model tool call is a tool_call update, asked about with
    session/request_permission, then a tool_call_update completed or failed; allow_always is
    not asked again; a turn cancelled (session/cancel, or $/cancel_request of its prompt) while
    the client is asked answers cancelled, the call failed as aborted. A stdio MCP server given
    in session/new starts with the session: its tools are offered to the model, and a call of
    one is asked about, completed, its result in the answer; a server whose command does not
    exist refuses the session with -32603, naming it."""
    seen, log = _observe(sdk, "tools", tmp_path, npm_prefix)
    if sdk == "typescript":  # its handler saw the ask of the turn $/cancel_request cancelled
        assert seen.pop("withdrawn") is True  # withdrawn, by the agent's own $/cancel_request
    code, details = seen.pop("mcp_missing")
    assert code == -32603
    assert details.startswith(
        "the MCP server 'missing' did not start: it exited with status 127 before it answered"
        " initialize; its stderr ends: "  # then the shell's own words (dash, bash differ)
    )

    def call(turn: int, name: str, args: Any, status: str, result: Any) -> list[list[Any]]:
        wire_id = f"{turn}.1.c1"
        running = (
            [["tool_call_update", wire_id, "in_progress", None]]
            if status == "completed" or result == "failed"
            else []
        )
        return [
            ["tool_call", wire_id, name, "pending", args],
            *running,
            ["tool_call_update", wire_id, status, {"result": result}],
        ]

    add = {"a": 1, "b": 2}
    five: dict[str, Any] = {  # the MCP result, its keys in the order the server sends them
        "content": [{"type": "text", "text": "5"}],
        "structuredContent": {"result": 5},
        "isError": False,
    }
    cancelled = {
        "stop": "cancelled",
        "updates": [_thought(1), *call(1, "add", add, "failed", "aborted")],
    }
    assert seen == {
        "completed": {
            "stop": "end_turn",
            "updates": [
                _thought(1),
                *call(1, "add", add, "completed", 3),
                _thought(2),
                _said("done: 3"),
            ],
        },
        "failed": [
            _thought(1),
            *call(2, "boom", {}, "failed", "failed"),
            _thought(2),
            _said('done: "failed"'),
        ],
        "asked": ["add", "boom"],
        "rejected": {
            "stop": "end_turn",
            "updates": [
                _thought(1),
                *call(1, "add", add, "failed", "refused"),
                _thought(2),
                _said('done: "refused"'),
            ],
        },
        "permission_cancel": cancelled,
        "permission_cancel_request": cancelled,
        "mcp": {
            "offered": (
                "tools: add, boom, mcp__test__add, mcp__test__cancellations, mcp__test__wait"
            ),
            "stop": "end_turn",
            "updates": [
                _thought(1),
                *call(2, "mcp__test__add", {"a": 2, "b": 3}, "completed", five),
                _thought(2),
                _said(f"done: {json.dumps(five)}"),
            ],
            "asked": ["mcp__test__add"],
        },
        "exit": 0,
    }
    _check_wire(wire, log)
    sent = [
        json.loads(entry["line"])
        for entry in map(json.loads, log.read_text().splitlines())
        if entry["from"] == "agent"
    ]
    asks = [m["id"] for m in sent if m.get("method") == "session/request_permission"]
    withdrawn = {m["params"]["requestId"] for m in sent if m.get("method") == "$/cancel_request"}
    # Before the MCP call's ask come those of the cancelled turns: the one cancelled by
    # $/cancel_request is withdrawn (so is the other, unless the client's "cancelled" answer
    # came first).
    *_, on_cancel, on_cancel_request, _mcp = asks
    assert on_cancel_request in withdrawn and withdrawn <= {on_cancel, on_cancel_request}
