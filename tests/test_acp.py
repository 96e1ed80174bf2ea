"""``fsm-core acp`` end to end: the ``agent-client-protocol`` package's own client spawns it as a
process, prompts, cancels mid-turn, prompts again and closes; bad input gets JSON-RPC errors and
the agent goes on serving. No network: the default model is the scripted echo."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from acp import PROTOCOL_VERSION, RequestError, spawn_agent_process, text_block
from acp.interfaces import Client
from acp.schema import AgentMessageChunk, AgentThoughtChunk

from fsm_core.acp import EchoModel
from tests.helpers import alive

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(sys.executable).with_name("fsm-core")
"""The ``fsm-core`` console script of the environment running the tests."""


class Recorder:
    """An ACP client that records the session updates it gets; ``stepped`` is set at each
    model request the agent announces (a thought ``step N``)."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.stepped = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if isinstance(update, AgentMessageChunk):
            self.messages.append(update.content.text)
        elif isinstance(update, AgentThoughtChunk):
            self.stepped.set()


@pytest.mark.skipif(not SCRIPT.exists(), reason="the fsm-core script is not installed")
def test_prompt_cancel_mid_turn_prompt_again_and_close(tmp_path: Path) -> None:
    recorder = Recorder()

    async def main() -> int:
        client = cast(Client, recorder)
        command = (str(SCRIPT), "acp", "--hold", "wait for cancel")
        async with spawn_agent_process(
            client,
            *command,
            use_unstable_protocol=True,
            # The package waits 2 s for the exit before it signals: short on a busy machine.
            transport_kwargs={"shutdown_timeout": 60.0},
        ) as (conn, process):
            hello = await conn.initialize(protocol_version=PROTOCOL_VERSION)
            assert hello.protocol_version == PROTOCOL_VERSION
            assert hello.agent_info is not None and hello.agent_info.name == "fsm-core"
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id

            first = await conn.prompt(session_id=sid, prompt=[text_block("hello")])
            assert (first.stop_reason, recorder.messages) == ("end_turn", ["echo: hello"])

            recorder.stepped.clear()
            held = asyncio.ensure_future(
                conn.prompt(session_id=sid, prompt=[text_block("wait for cancel")])
            )
            await recorder.stepped.wait()  # the turn is inside its model request
            with pytest.raises(RequestError) as busy:
                await conn.prompt(session_id=sid, prompt=[text_block("meanwhile")])
            assert busy.value.code == -32600
            assert "a prompt is already running in session-1" in str(busy.value.data)
            await conn.cancel(session_id=sid)
            assert (await held).stop_reason == "cancelled"

            again = await conn.prompt(session_id=sid, prompt=[text_block("again")])
            assert (again.stop_reason, recorder.messages[-1]) == ("end_turn", "echo: again")

            with pytest.raises(RequestError) as unknown:
                await conn.prompt(session_id="session-9", prompt=[text_block("hi")])
            assert unknown.value.code == -32002
            assert unknown.value.data == {"details": "no session 'session-9'"}

            await conn.close_session(session_id=sid)
            with pytest.raises(RequestError) as closed:
                await conn.prompt(session_id=sid, prompt=[text_block("hi")])
            assert closed.value.code == -32002
            pid = process.pid
        # Leaving the block closed the agent's stdin; it exited by itself, not by a signal.
        assert process.returncode == 0
        return pid

    pid = asyncio.run(main())
    assert not alive(pid)


def test_bad_input_gets_json_rpc_errors_and_the_agent_keeps_serving() -> None:
    lines = [
        b"not json at all",
        b"[1, 2]",
        b'{"jsonrpc": "2.0", "id": [1], "method": "initialize"}',
        b'{"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {"sessionId": 5}}',
        b'{"jsonrpc": "2.0", "id": 2, "method": "session/prompt", '
        b'"params": {"sessionId": "nope", "prompt": []}}',
        b'{"jsonrpc": "2.0", "id": 3, "method": "no/such/method", "params": {}}',
        b"\xff\xfe not utf-8",
        b'{"jsonrpc": "2.0", "id": 4, "method": "session/new", '
        b'"params": {"cwd": "/", "mcpServers": []}}',
    ]

    async def main() -> list[dict[str, Any]]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fsm_core.acp",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdin is not None and process.stdout is not None
        answers = []
        for line in lines:  # one at a time: each answer before the next line
            process.stdin.write(line + b"\n")
            await process.stdin.drain()
            answers.append(json.loads(await process.stdout.readline()))
        process.stdin.close()
        assert await process.wait() == 0
        return answers

    answers = asyncio.run(main())
    codes = [(a.get("id"), a["error"]["code"] if "error" in a else None) for a in answers]
    assert codes == [
        (None, -32700),
        (None, -32600),
        (None, -32600),
        (1, -32602),
        (2, -32002),
        (3, -32601),
        (None, -32700),
        (4, None),
    ]
    assert answers[-1]["result"] == {"sessionId": "session-1"}


def test_the_echo_model_holds_only_its_hold_prompt() -> None:
    from fsm_core import AbortController, Request

    async def main() -> None:
        model = EchoModel(hold="hold")
        plain = Request("a1", 1, 1, ({"role": "user", "id": "m", "text": "hi"},), ())
        assert (await model.generate(plain, AbortController().signal)).text == "echo: hi"

    asyncio.run(main())


@pytest.mark.parametrize(
    ("option", "refusal"),
    [
        (
            ("--model", "no_such_module:make"),
            "fsm-core: --model 'no_such_module:make': cannot import no_such_module",
        ),
        (
            ("--hook-tool", " "),
            "fsm-core: --hook-tool is a sequence of non-empty shell commands, not [' ']",
        ),
    ],
    ids=["model", "empty-hook"],
)
def test_a_bad_option_is_refused_before_serving(option: tuple[str, str], refusal: str) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "fsm_core.acp", *option],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(refusal)


def test_closing_stdin_mid_turn_answers_the_prompt_cancelled_then_exits() -> None:
    """The client closes stdin while a prompt's turn runs: the agent cancels it (``USER``),
    answers it ``cancelled``, writes everything out and exits 0."""

    def request(rid: int, method: str, **params: Any) -> bytes:
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        return json.dumps(message).encode() + b"\n"

    async def main() -> tuple[list[dict[str, Any]], int, int]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fsm_core.acp",
            "--hold",
            "wait",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(request(1, "initialize", protocolVersion=PROTOCOL_VERSION))
        process.stdin.write(request(2, "session/new", cwd="/", mcpServers=[]))
        prompt = [{"type": "text", "text": "wait"}]
        process.stdin.write(request(3, "session/prompt", sessionId="session-1", prompt=prompt))
        await process.stdin.drain()
        seen: list[dict[str, Any]] = []
        while not seen or seen[-1].get("method") != "session/update":  # the turn has begun
            seen.append(json.loads(await process.stdout.readline()))
        process.stdin.close()
        seen += [json.loads(line) for line in (await process.stdout.read()).splitlines()]
        return seen, await process.wait(), process.pid

    seen, status, pid = asyncio.run(main())
    answers = {m["id"]: m for m in seen if "id" in m}
    assert sorted(answers) == [1, 2, 3]
    assert answers[3]["result"] == {"stopReason": "cancelled"}
    assert status == 0
    assert not alive(pid)


def test_hook_options_run_the_hooks_on_each_prompt(tmp_path: Path) -> None:
    """``--hook-prompt`` blocks the turn (stop reason ``refusal``) before the model is asked;
    ``--hook-stop`` sees the turn end ``blocked``."""
    seen, stopped = tmp_path / "prompt.json", tmp_path / "stop.json"
    command = (
        *(sys.executable, "-m", "fsm_core.acp"),
        *("--hook-prompt", f"cat > {shlex.quote(str(seen))}; echo not today >&2; exit 2"),
        *("--hook-stop", f"cat > {shlex.quote(str(stopped))}"),
    )
    recorder = Recorder()

    async def main() -> str:
        client = cast(Client, recorder)
        async with spawn_agent_process(client, *command, use_unstable_protocol=True) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            sid = (await conn.new_session(cwd=str(tmp_path), mcp_servers=[])).session_id
            answer = await conn.prompt(session_id=sid, prompt=[text_block("rm -rf /")])
            return answer.stop_reason

    assert asyncio.run(main()) == "refusal"
    assert recorder.messages == []  # no model request: nothing streamed
    payload = json.loads(seen.read_text())
    assert payload == {"hook": "prompt", "agent": "session-1", "turn": 1, "prompt": ["rm -rf /"]}
    assert json.loads(stopped.read_text())["ending"] == "blocked"


def test_ctrl_c_while_serving_exits_130_saying_interrupted() -> None:
    """SIGINT (Ctrl-C) reports itself as every subcommand does; the acp package's receive
    loop swallows the cancellation, which made the process exit 0 as if stdin had closed."""
    import signal
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-m", "fsm_core.acp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    params = {"cwd": "/", "mcpServers": []}
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": params}
    process.stdin.write(json.dumps(new).encode() + b"\n")
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["id"] == 1  # serving
    process.send_signal(signal.SIGINT)
    _, err = process.communicate()
    assert (process.returncode, err) == (130, b"fsm-core: interrupted\n")


def test_a_client_that_closes_stdout_then_stdin_ends_the_agent_quietly() -> None:
    """The client stops reading for good (it closed its end of our stdout), then closes stdin:
    the answers that cannot be written are dropped, and the agent exits 0 with no traceback."""
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-m", "fsm_core.acp", "--hold", "wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    params: dict[str, Any] = {"cwd": "/", "mcpServers": []}
    new = {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": params}
    process.stdin.write(json.dumps(new).encode() + b"\n")
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["id"] == 1
    process.stdout.close()
    params = {"sessionId": "session-1", "prompt": [{"type": "text", "text": "wait"}]}
    for rid in (2, 3):
        prompt = {"jsonrpc": "2.0", "id": rid, "method": "session/prompt", "params": params}
        process.stdin.write(json.dumps(prompt).encode() + b"\n")
    _, err = process.communicate()
    assert (process.returncode, err.decode()) == (0, "")


def test_the_readmes_zed_configuration_is_json_the_cli_accepts() -> None:
    """The README's editor configuration (Zed's ``agent_servers`` entry) is valid JSON whose
    command line ``fsm-core acp`` parses as written."""
    import re

    from fsm_core.cli import _parser

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(\{\s*\"agent_servers\".*?)```", readme, re.S)
    assert block is not None
    (server,) = json.loads(block.group(1))["agent_servers"].values()
    assert (server["type"], server["command"]) == ("custom", "fsm-core")
    args = _parser().parse_args(server["args"])
    assert (args.command, args.model, args.hook_prompt) == (
        "acp",
        "mypkg.models:make",
        ["./policy.sh"],
    )
