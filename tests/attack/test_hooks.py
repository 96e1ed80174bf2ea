"""The hook bridge under attack: hooks that fight their supervisor, options of the wrong type,
and an answer too long to keep.

Each hook runs under a real ``/bin/sh``. A hook tells the test it is ready through a FIFO (the
test's read returns once the hook wrote), never through a sleep. The bound asserted is the
number of the hook's processes still there afterwards (a zombie counts: ``os.kill(pid, 0)``
still finds it), never a time; a watchdog turns a wedged ``run_hook`` into a failure instead of
a hung run, and the ``reaped`` fixture kills (SIGCONT, then SIGKILL) whatever a failed test left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal as signals
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm_core import (
    USER,
    AbortController,
    Hooks,
    RunHookOptions,
    Runtime,
    UsageError,
    UserMessage,
    run_hook,
)
from fsm_core._errors import echo
from fsm_core.runtime._hooks import HookResult, run_hooks
from fsm_core.testing import ScriptedModel
from tests.helpers import alive, exactly, exits

pytestmark = pytest.mark.timeout(60)  # a hook that escapes sleeps for 1000 s

WATCHDOG = 20.0
"""Seconds a test waits for the bridge before failing it as wedged (a marker, not a bound)."""


def _kill(pids: list[int]) -> None:
    """Resume and kill each of ``pids`` that is still there."""
    for pid in pids:
        for sig in (signals.SIGCONT, signals.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


async def _unwedged(work: Any, pids: list[int]) -> Any:
    """Await ``work``; if it is not done within ``WATCHDOG`` seconds, kill ``pids`` (which
    unwedges it) and fail: the bridge did not end the hook itself."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait([task], timeout=WATCHDOG)
    if not done:
        _kill(pids)
        await asyncio.wait([task], timeout=WATCHDOG)
        pytest.fail(f"wedged: it returned only once the test killed the hook's {pids}")
    return task.result()


GRANDPARENT = f"$(awk '$4 != {os.getpid()} {{print $4}}' /proc/$PPID/stat)"
"""The parent of the hook's parent, unless that is this test's own process."""


class Fight:
    """A hook that records its PID, its parent's (the process it sees as its supervisor) and a
    child's, does ``attack`` to its parent, says it is ready and sleeps holding its pipes (as
    ``exec sleep``, so the PIDs it records are all of its processes)."""

    NAMES = ("hook", "parent", "child", "grandparent")

    def __init__(self, tmp: Path, attack: str) -> None:
        self.dir = tmp
        self.fifo = tmp / "ready"
        os.mkfifo(self.fifo)
        d = shlex.quote(str(tmp))
        self.command = (
            f"echo $$ > {d}/hook.pid; echo $PPID > {d}/parent.pid; "
            f"echo {GRANDPARENT} > {d}/grandparent.pid; "
            f"sleep 1000 & echo $! > {d}/child.pid; "
            f"{attack}; "
            f"echo ready > {d}/ready; "
            f"exec sleep 1000"  # the hook's PID sleeps: the fixture can clean up every one
        )

    async def ready(self, pids: list[int]) -> list[int]:
        """Wait until the hook wrote to its FIFO; add its three PIDs to ``pids`` (for the
        fixture's clean-up) and return them."""
        await asyncio.to_thread(self.fifo.read_text)
        texts = [(self.dir / f"{name}.pid").read_text().strip() for name in self.NAMES]
        mine = [int(text) for text in texts if text]
        pids.extend(mine)
        return mine


@pytest.fixture
def reaped() -> Iterator[list[int]]:
    """PIDs a test started; whatever of them is left afterwards is resumed and killed."""
    pids: list[int] = []
    yield pids
    _kill(pids)


ATTACKS = {
    "kill -KILL $PPID": "kill -KILL $PPID",
    "kill -STOP $PPID": "kill -STOP $PPID",
    "kill -STOP $PPID and its parent": f"kill -STOP $PPID {GRANDPARENT}",
}


async def _aborted(fight: Fight, reaped: list[int]) -> HookResult:
    """Run ``fight``'s hook, abort it once its attack is under way, and return its result
    (:func:`_unwedged`: the test fails, naming the wedge, if ``run_hook`` never returns)."""
    controller = AbortController()
    running = asyncio.ensure_future(
        run_hook(fight.command, RunHookOptions(signal=controller.signal, grace=0.1))
    )
    await fight.ready(reaped)
    controller.abort(USER)
    return await _unwedged(running, reaped)  # type: ignore[no-any-return]


@pytest.mark.parametrize("attack", list(ATTACKS.values()), ids=list(ATTACKS))
def test_a_hook_that_fights_its_supervisor_is_killed_and_reaped_after_the_abort(
    tmp_path: Path, reaped: list[int], attack: str
) -> None:
    fight = Fight(tmp_path, attack)

    result = asyncio.run(_aborted(fight, reaped))
    assert [pid for pid in reaped if alive(pid)] == []
    assert (result.exit_code, result.decision) == (None, None)


@pytest.mark.parametrize("attack", ["kill -KILL $PPID", "kill -STOP $PPID"])
def test_a_turn_whose_hook_fights_its_supervisor_goes_idle_and_disposes(
    tmp_path: Path, reaped: list[int], attack: str
) -> None:
    fight = Fight(tmp_path, attack)

    async def main() -> None:
        rt = Runtime(model=ScriptedModel([]), hooks=Hooks(prompt=[fight.command], grace=0.1))
        handle = await rt.create_agent("a1")
        handle.agent.followup(UserMessage("m1", "hi"))
        await fight.ready(reaped)
        handle.agent.cancel()
        await _unwedged(handle.agent.when_idle(), reaped)
        await _unwedged(handle.dispose(), reaped)
        await rt.aclose()

    asyncio.run(main())
    assert [pid for pid in reaped if alive(pid)] == []


def test_a_hook_that_stops_its_supervisor_and_exits_is_reaped_after_the_abort(
    tmp_path: Path, reaped: list[int]
) -> None:
    """The hook's shell is done, but the process it saw as its parent is stopped and cannot
    report it: the abort still ends the run, with every process gone."""
    d = shlex.quote(str(tmp_path))
    command = f"echo $PPID > {d}/parent.pid; kill -STOP $PPID; echo ready > {d}/ready"
    os.mkfifo(tmp_path / "ready")

    async def main() -> None:
        controller = AbortController()
        running = asyncio.ensure_future(
            run_hook(command, RunHookOptions(signal=controller.signal, grace=0.1))
        )
        await asyncio.to_thread((tmp_path / "ready").read_text)
        reaped.append(int((tmp_path / "parent.pid").read_text()))
        controller.abort(USER)
        await _unwedged(running, reaped)

    asyncio.run(main())
    assert [pid for pid in reaped if alive(pid)] == []


def test_a_hook_that_keeps_its_supervisor_stopped_is_killed_and_reaped_by_the_runtime(
    tmp_path: Path, reaped: list[int]
) -> None:
    """Past ``$PPID``: a process of the hook stops the supervisor again and again. The runtime
    kills the supervisor's tree itself (it is still the subreaper of all of it), then resumes
    it to reap them."""
    looper = shlex.quote(str(tmp_path / "looper.pid"))
    stops = f"trap '' TERM; while kill -STOP {GRANDPARENT}; do sleep 0.05; done"
    fight = Fight(tmp_path, f"({stops}) & echo $! > {looper}")

    async def main() -> HookResult:
        controller = AbortController()
        running = asyncio.ensure_future(
            run_hook(fight.command, RunHookOptions(signal=controller.signal, grace=0.1))
        )
        await fight.ready(reaped)
        reaped.append(int((tmp_path / "looper.pid").read_text()))
        controller.abort(USER)
        return await _unwedged(running, reaped)  # type: ignore[no-any-return]

    result = asyncio.run(main())
    assert [pid for pid in reaped if alive(pid)] == []
    assert (result.exit_code, result.decision, result.killed) == (None, None, True)


def test_a_hook_that_kills_its_supervisor_itself_is_killed_and_run_hook_returns(
    tmp_path: Path, reaped: list[int]
) -> None:
    """Past ``$PPID``: the hook kills the supervisor. Its processes are re-parented to init,
    out of the bridge's reach to reap; the runtime kills those that hold the hook's pipes,
    and ``run_hook`` returns. None is left running (init may leave them zombies)."""
    fight = Fight(tmp_path, f"kill -KILL {GRANDPARENT}")

    result = asyncio.run(_aborted(fight, reaped))
    # The runtime kills them (SIGKILL), but not being their parent it cannot wait for that:
    # a kill takes effect a moment later on a busy machine, so wait for each to exit.
    assert [pid for pid in reaped if not exits(pid)] == []
    assert (result.exit_code, result.decision) == (None, None)


def _options(**given: Any) -> RunHookOptions:
    return RunHookOptions(signal=AbortController().signal, **given)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"input": "text"}, "RunHookOptions.input is the hook's stdin as bytes, not 'text'"),
        ({"input": None}, "RunHookOptions.input is the hook's stdin as bytes, not None"),
        ({"grace": True}, "RunHookOptions.grace is a number of seconds from 0 to 60, not True"),
        ({"grace": "1"}, "RunHookOptions.grace is a number of seconds from 0 to 60, not '1'"),
        ({"grace": 61}, "RunHookOptions.grace is a number of seconds from 0 to 60, not 61"),
        ({"limit": True}, "RunHookOptions.limit is a byte count (an int from 0), not True"),
        ({"limit": -1}, "RunHookOptions.limit is a byte count (an int from 0), not -1"),
        ({"cwd": 3}, "RunHookOptions.cwd is a directory path (str or os.PathLike), not 3"),
        ({"cwd": ""}, "RunHookOptions.cwd is a directory path (str or os.PathLike), not ''"),
        (
            {"cwd": "a\0b"},
            "RunHookOptions.cwd is a directory path (str or os.PathLike), not 'a\\x00b'",
        ),
        (
            {"env": {"A": 1}},
            "RunHookOptions.env maps names to values, both strings without NUL "
            "(and names without '='), not {'A': 1}",
        ),
        (
            {"env": {"A=B": "c"}},
            "RunHookOptions.env maps names to values, both strings without NUL "
            "(and names without '='), not {'A=B': 'c'}",
        ),
        (
            {"env": ["A"]},
            "RunHookOptions.env maps names to values, both strings without NUL "
            "(and names without '='), not ['A']",
        ),
        (
            {"input": "x" * 10_000},
            "RunHookOptions.input is the hook's stdin as bytes, not " + echo("x" * 10_000),
        ),
    ],
    ids=lambda value: str(value)[:24],
)
def test_run_hook_options_of_the_wrong_type_are_refused_when_built(
    given: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=exactly(message)):
        _options(**given)


def test_run_hook_refuses_a_signal_that_is_not_one_and_a_bad_command() -> None:
    with pytest.raises(
        UsageError, match=exactly("RunHookOptions.signal is an AbortSignal, not None")
    ):
        RunHookOptions(signal=None)  # type: ignore[arg-type]
    with pytest.raises(
        UsageError, match=exactly("a hook command is a non-empty shell command string, not '  '")
    ):
        asyncio.run(run_hook("  ", _options()))


def test_a_hook_whose_cwd_does_not_exist_exits_127(tmp_path: Path) -> None:
    """What cannot start answers as the shell would: exit 127, the reason on stderr."""
    missing = tmp_path / "missing"
    result = asyncio.run(run_hook("exit 0", _options(cwd=missing)))
    assert (result.exit_code, result.decision, result.killed) == (127, None, False)
    assert str(missing) in result.stderr


def test_a_hook_runs_in_its_cwd(tmp_path: Path) -> None:
    result = asyncio.run(run_hook("pwd", _options(cwd=tmp_path)))
    assert (result.exit_code, result.stdout) == (0, f"{tmp_path}\n")


LONG = 2_000_000
"""Bytes of hook output past the 1 MiB limit."""

PAST_THE_LIMIT = {
    "a long reason": (
        'printf \'{"decision": "block", "reason": "\'; '
        f"head -c {LONG} /dev/zero | tr '\\0' x; printf '\"}}'"
    ),
    "an answer after whitespace": (
        f"head -c {LONG} /dev/zero | tr '\\0' ' '; echo '{{\"decision\": \"block\"}}'"
    ),
    "an allow too long to read": (
        'printf \'{"decision": "allow", "reason": "\'; '
        f"head -c {LONG} /dev/zero | tr '\\0' x; printf '\"}}'"
    ),
}


@pytest.mark.parametrize("command", list(PAST_THE_LIMIT.values()), ids=list(PAST_THE_LIMIT))
def test_an_answer_past_the_output_limit_blocks(command: str) -> None:
    """The runtime keeps 1 MiB of stdout; an exit-0 answer longer than that cannot be read
    whole, so it blocks (fail closed) instead of deciding nothing."""
    result = asyncio.run(run_hook(command, _options()))
    assert (result.exit_code, result.decision) == (0, "block")
    assert result.reason == (
        "the hook's stdout passed the limit of 1048576 bytes, so its answer could not be read whole"
    )
    assert len(result.stdout) == 1 << 20


def test_a_tool_gate_blocks_on_an_answer_past_the_output_limit() -> None:
    async def main() -> HookResult | None:
        payload = {"hook": "tool", "agent": "a1", "turn": 1, "tool": "rm", "args": {}}
        return await run_hooks(
            [PAST_THE_LIMIT["a long reason"]], payload, AbortController().signal, Hooks()
        )

    result = asyncio.run(main())
    assert result is not None and result.decision == "block"
