"""The hook bridge runs real processes: a cancelled or disposed turn stops its hook's whole
process tree, and ``when_idle()`` returns only once every one of them is reaped.

A blocking hook tells the test it is ready through a FIFO (the test's read returns once the hook
wrote), never through a sleep; a process is gone when ``os.kill(pid, 0)`` finds no process at
all, which a zombie would still answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal as signals
from pathlib import Path
from typing import Any

import pytest

from fsm_core import (
    USER,
    AbortController,
    Hooks,
    Reply,
    RunHookOptions,
    Runtime,
    ToolCall,
    UsageError,
    UserMessage,
    run_hook,
)
from fsm_core.runtime import _hooks as hooks_module
from fsm_core.runtime._hooks import HookResult, run_hooks
from fsm_core.testing import Gate, ScriptedModel, ScriptedTool
from tests.helpers import alive

pytestmark = pytest.mark.timeout(60)  # a hook that is never stopped sleeps for 1000 s


class Tree:
    """A hook that records its PID, starts a child that starts a grandchild, says it is ready
    and waits: three processes that a stopped hook must leave none of."""

    def __init__(self, tmp: Path, *, escape: bool = False) -> None:
        self.dir = tmp
        self.fifo = tmp / "ready"
        os.mkfifo(self.fifo)
        d = shlex.quote(str(tmp))
        # With escape=True the grandchild leaves the hook's session (setsid), as a daemon
        # would; the supervisor still finds it.
        spawn = "setsid sleep 1000" if escape else "sleep 1000"
        self.command = (
            f"echo $$ > {d}/hook.pid; "
            f"sh -c 'echo $$ > {d}/child.pid; {spawn} & echo $! > {d}/grandchild.pid; wait' & "
            f"while [ ! -s {d}/grandchild.pid ]; do sleep 0.01; done; "
            f"echo ready > {d}/ready; "
            f"sleep 1000"
        )

    async def ready(self) -> list[int]:
        """Wait until the hook wrote to its FIFO; return the three PIDs, all alive."""
        await asyncio.to_thread(self.fifo.read_text)
        pids = [int((self.dir / f"{name}.pid").read_text()) for name in self.NAMES]
        assert all(alive(pid) for pid in pids)
        return pids

    NAMES = ("hook", "child", "grandchild")


def _outcomes(rt_session: Any) -> list[Any]:
    return [e.data["outcome"] for e in rt_session.events if e.type == "turn/end"]


def test_a_cancelled_prompt_hook_is_reaped_before_idle(tmp_path: Path) -> None:
    tree = Tree(tmp_path)

    async def main() -> None:
        model = ScriptedModel([Reply("after")])
        rt = Runtime(model=model, hooks=Hooks(prompt=[tree.command]))
        handle = await rt.create_agent("a1")
        agent = handle.agent
        agent.followup(UserMessage("m1", "hi"))
        pids = await tree.ready()
        agent.cancel()
        await agent.when_idle()
        assert [pid for pid in pids if alive(pid)] == []
        assert _outcomes(agent.session) == [{"kind": "aborted"}]
        assert model.requests == [], "the turn never reached the model"
        # The next turn gets a fresh signal and runs its hook again, to completion this time.
        rt.hooks = Hooks(prompt=["exit 0"])
        agent.followup(UserMessage("m2", "again"))
        await agent.when_idle()
        assert _outcomes(agent.session)[-1] == {"kind": "completed"}
        await rt.aclose()

    asyncio.run(main())


def test_a_disposed_agents_prompt_hook_is_reaped_before_disposal_returns(tmp_path: Path) -> None:
    tree = Tree(tmp_path)

    async def main() -> None:
        rt = Runtime(model=ScriptedModel([]), hooks=Hooks(prompt=[tree.command]))
        handle = await rt.create_agent("a1")
        handle.agent.followup(UserMessage("m1", "hi"))
        pids = await tree.ready()
        await handle.dispose()
        assert [pid for pid in pids if alive(pid)] == []
        assert _outcomes(handle.agent.session) == [{"kind": "disposed"}]
        await rt.aclose()

    asyncio.run(main())


def test_a_process_that_left_the_hooks_session_is_reaped_too(tmp_path: Path) -> None:
    tree = Tree(tmp_path, escape=True)

    async def main() -> None:
        controller = AbortController()
        running = asyncio.ensure_future(
            run_hook(tree.command, RunHookOptions(signal=controller.signal))
        )
        pids = await tree.ready()
        controller.abort(USER)
        result = await running
        assert [pid for pid in pids if alive(pid)] == []
        assert (result.exit_code, result.decision, result.killed) == (None, None, True)

    asyncio.run(main())


def test_a_hook_whose_caller_is_cancelled_is_reaped_before_the_cancellation_propagates(
    tmp_path: Path,
) -> None:
    tree = Tree(tmp_path)

    async def main() -> None:
        running = asyncio.ensure_future(
            run_hook(tree.command, RunHookOptions(signal=AbortController().signal))
        )
        pids = await tree.ready()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert [pid for pid in pids if alive(pid)] == []

    asyncio.run(main())


def test_what_a_hook_leaves_running_is_stopped_when_it_exits(tmp_path: Path) -> None:
    marker = tmp_path / "bg.pid"

    async def main() -> None:
        command = f"sleep 1000 & echo $! > {shlex.quote(str(marker))}; echo done"
        result = await run_hook(command, RunHookOptions(signal=AbortController().signal))
        assert (result.exit_code, result.stdout) == (0, "done\n")
        assert not alive(int(marker.read_text()))

    asyncio.run(main())


@pytest.mark.parametrize(
    ("command", "exit_code", "decision", "reason"),
    [
        ("exit 0", 0, None, ""),
        ("""echo '{"decision": "block", "reason": "not today"}'""", 0, "block", "not today"),
        ("""echo '{"decision": "allow"}'""", 0, "allow", ""),
        ("echo 'not today' >&2; exit 2", 2, "block", "not today"),
        ("""echo '{"decision": "block"}'; exit 1""", 1, None, ""),
        ("echo '{not json'", 0, None, ""),
        ("""echo '{"decision": "maybe"}'""", 0, None, ""),
        ("kill -9 $$", None, None, ""),
        ("no-such-command-anywhere", 127, None, ""),
    ],
)
def test_a_hook_answers_with_its_exit_status_and_stdout(
    command: str, exit_code: int | None, decision: str | None, reason: str
) -> None:
    result = asyncio.run(run_hook(command, RunHookOptions(signal=AbortController().signal)))
    assert (result.exit_code, result.decision, result.reason) == (exit_code, decision, reason)
    assert not result.killed


def test_a_hook_reads_its_input_and_its_output_is_capped() -> None:
    async def main() -> None:
        signal = AbortController().signal
        echoed = await run_hook("cat", RunHookOptions(signal=signal, input=b'{"x": 1}'))
        assert echoed.stdout == '{"x": 1}'
        chatty = await run_hook(
            "head -c 3000000 /dev/zero | tr '\\0' a; echo é >&2",
            RunHookOptions(signal=signal, limit=10),
        )
        assert (chatty.exit_code, chatty.stdout, chatty.stderr) == (0, "a" * 10, "é\n")

    asyncio.run(main())


def test_an_aborted_signal_starts_no_hook(tmp_path: Path) -> None:
    controller = AbortController()
    controller.abort(USER)
    marker = tmp_path / "ran"
    command = f"touch {shlex.quote(str(marker))}"
    result = asyncio.run(run_hook(command, RunHookOptions(signal=controller.signal)))
    assert (result.exit_code, result.decision, result.killed) == (None, None, True)
    assert not marker.exists()


def test_bad_hook_arguments_are_refused() -> None:
    signal = AbortController().signal
    with pytest.raises(UsageError, match=r"^a hook command is a non-empty shell command string"):
        asyncio.run(run_hook("  ", RunHookOptions(signal=signal)))
    with pytest.raises(UsageError, match=r"^run_hook takes RunHookOptions, not dict$"):
        asyncio.run(run_hook("true", {"signal": signal}))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^Hooks.prompt is a sequence of non-empty shell"):
        Hooks(prompt="true")
    with pytest.raises(
        TypeError, match=r"^Hooks.grace is a number of seconds from 0 to 60, not True$"
    ):
        Hooks(grace=True)
    with pytest.raises(UsageError, match=r"^RunHookOptions.grace is a number of seconds"):
        RunHookOptions(signal=signal, grace=float("nan"))
    with pytest.raises(UsageError, match=r"^RunHookOptions.signal is an AbortSignal, not None$"):
        RunHookOptions(signal=None)  # type: ignore[arg-type]


def test_a_blocking_prompt_hook_ends_the_turn_blocked_before_any_request(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"

    async def main() -> None:
        model = ScriptedModel([])
        block = f"cat > {shlex.quote(str(seen))}; echo 'no prompts today' >&2; exit 2"
        rt = Runtime(model=model, hooks=Hooks(prompt=[block, "echo never-runs > /dev/null"]))
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        assert _outcomes(agent.session) == [{"kind": "blocked"}]
        assert model.requests == []
        assert json.loads(seen.read_text()) == {
            "hook": "prompt",
            "agent": "a1",
            "turn": 1,
            "prompt": ["hi"],
        }
        await rt.aclose()

    asyncio.run(main())


def test_a_blocking_tool_hook_answers_the_call_blocked_and_stop_hooks_see_the_ending(
    tmp_path: Path,
) -> None:
    seen = tmp_path / "tool.json"
    stopped = tmp_path / "stop.json"

    async def main() -> None:
        call = ToolCall("c1", "rm", {"path": "/"})
        model = ScriptedModel([Reply(tool_calls=(call,), finish="tool_calls"), Reply("ok")])
        tool = ScriptedTool("rm", ["removed"])
        hooks = Hooks(
            tool=[f"cat > {shlex.quote(str(seen))}; exit 2"],
            stop=[f"cat > {shlex.quote(str(stopped))}"],
        )
        rt = Runtime(model=model, tools=[tool], hooks=hooks)
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "clean up"))
        await agent.when_idle()
        assert tool.calls == []
        results = [e.data for e in agent.session.events if e.type == "tool/result"]
        assert results == [{"turn": 1, "step": 1, "id": "c1", "ok": False, "result": "blocked"}]
        assert json.loads(seen.read_text()) == {
            "hook": "tool",
            "agent": "a1",
            "turn": 1,
            "step": 1,
            "id": "c1",
            "tool": "rm",
            "args": {"path": "/"},
        }
        assert json.loads(stopped.read_text())["ending"] == "completed"
        await rt.aclose()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ("deep", "nests deeper than 64 levels, under 'args'"),
        ("circular", "nests deeper than 64 levels, under 'args'"),
        (
            "tuple key",
            "cannot be written as JSON: keys must be str, int, float, bool or None, not tuple",
        ),
    ],
)
def test_a_payload_that_cannot_be_json_blocks_without_running_a_hook(
    tmp_path: Path, args: str, why: str
) -> None:
    """Nested deeper than the stack allows, circular, or not JSON: the tool hook is not run,
    and the call is blocked (fail closed) with a reason naming the seam, instead of raising."""
    value: Any = []
    if args == "deep":
        for _ in range(100_000):
            value = [value]
    elif args == "circular":
        value.append(value)
    else:
        value = {(1, 2): "a key JSON cannot hold"}
    ran = tmp_path / "ran"

    async def main() -> HookResult | None:
        payload = {"hook": "tool", "agent": "a1", "turn": 1, "args": {"path": value}}
        signal = AbortController().signal
        return await run_hooks([f"touch {shlex.quote(str(ran))}"], payload, signal, Hooks())

    result = asyncio.run(main())
    assert result == HookResult(None, "block", f"the tool hooks did not run: their payload {why}")
    assert not ran.exists()


def test_a_hook_cancelled_while_its_supervisor_starts_is_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller is cancelled after the supervisor (and the hook) started but before the
    start returned: run_hook still stops and reaps them before the cancellation propagates."""
    tree = Tree(tmp_path)
    spawn = hooks_module._spawn

    async def main() -> None:
        started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        gate = Gate("the rest of the supervisor's start")

        async def held_start(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
            process = await spawn(*args, **kwargs)
            started.set_result(process.pid)
            await gate.wait()
            return process

        monkeypatch.setattr(hooks_module, "_spawn", held_start)
        running = asyncio.ensure_future(
            run_hook(tree.command, RunHookOptions(signal=AbortController().signal))
        )
        supervisor = await started
        pids = [supervisor, *await tree.ready()]
        await gate.reached.wait()
        running.cancel()  # lands inside the start: the gate is not open yet
        gate.open()
        try:
            with pytest.raises(asyncio.CancelledError):
                await running
            assert [pid for pid in pids if alive(pid)] == []
        finally:
            for pid in pids[1:]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signals.SIGKILL)

    asyncio.run(main())


def test_a_tool_hook_sees_the_deepest_args_the_session_records(tmp_path: Path) -> None:
    """The bound on hook payloads is the session's: arguments the log holds reach the hook."""
    seen = tmp_path / "tool.json"
    deep: list[Any] = []
    for _ in range(62):  # with "path" and the args object: 64 levels, the session's limit
        deep = [deep]

    async def main() -> None:
        call = ToolCall("c1", "rm", {"path": deep})
        model = ScriptedModel([Reply(tool_calls=(call,), finish="tool_calls"), Reply("ok")])
        tool = ScriptedTool("rm", ["removed"])
        rt = Runtime(
            model=model, tools=[tool], hooks=Hooks(tool=[f"cat > {shlex.quote(str(seen))}"])
        )
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "clean up"))
        await agent.when_idle()
        results = [e.data["result"] for e in agent.session.events if e.type == "tool/result"]
        assert results == ["removed"]
        await rt.aclose()

    asyncio.run(main())
    assert json.loads(seen.read_text())["args"] == {"path": deep}
