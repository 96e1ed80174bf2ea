"""Cancel a blocked prompt hook again and again: how many processes leak, and how long from
``cancel()`` until ``when_idle()`` returns with every process of the hook reaped.

Each run: an agent's turn starts a prompt hook that records its PID, starts a child that
starts a grandchild, says it is ready (through a FIFO) and sleeps; the bench cancels the turn,
awaits ``when_idle()``, and counts which of the three processes still exist (a zombie counts:
``os.kill(pid, 0)`` still finds it). Interleaved with each run, the peer does what a bare
``asyncio`` subprocess gives: the same tree started with ``start_new_session=True``, then
``os.killpg(SIGKILL)`` and ``await process.wait()``, which reaps only the direct child; the
processes it leaves are counted, then cleaned up so they do not pile up.

    python3 -m uv run --locked python benchmarks/hook_bench.py            # 1000 runs
    python3 -m uv run --locked python benchmarks/hook_bench.py --runs 20

The last line is for scripts: ``Done. runs=N leaked=L peer_leaked=P median_ms=... p99_ms=...
max_ms=... peer_median_ms=... ratio=...``. Exit status 1 iff a process leaked from the hook
bridge; the times are reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fsm_core import Hooks, Runtime, UserMessage
from fsm_core.testing import ScriptedModel

NAMES = ("hook", "child", "grandchild")


def tree(directory: Path) -> str:
    """The hook command: three processes, then ``ready`` written to the FIFO, then a sleep."""
    d = shlex.quote(str(directory))
    return (
        f"echo $$ > {d}/hook.pid; "
        f"sh -c 'echo $$ > {d}/child.pid; sleep 1000 & echo $! > {d}/grandchild.pid; wait' & "
        f"while [ ! -s {d}/grandchild.pid ]; do sleep 0.001; done; "
        f"echo ready > {d}/ready; sleep 1000"
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def fresh(root: Path, run: int, side: str) -> Path:
    directory = root / f"{side}{run}"
    directory.mkdir()
    os.mkfifo(directory / "ready")
    return directory


async def ready(directory: Path) -> list[int]:
    await asyncio.to_thread((directory / "ready").read_text)
    return [int((directory / f"{name}.pid").read_text()) for name in NAMES]


async def ours(rt: Runtime, root: Path, run: int) -> tuple[float, int]:
    """One cancelled turn with the hook bridge: (seconds from cancel to idle, leaked)."""
    directory = fresh(root, run, "ours")
    rt.hooks = Hooks(prompt=[tree(directory)], grace=0.5)
    agent = rt.agents["bench"]
    agent.followup(UserMessage(f"m{run}", "hi"))
    pids = await ready(directory)
    start = time.perf_counter()
    agent.cancel()
    await agent.when_idle()
    elapsed = time.perf_counter() - start
    return elapsed, sum(alive(pid) for pid in pids)


async def peer(root: Path, run: int) -> tuple[float, int]:
    """The same tree under a bare asyncio subprocess, killed by group: (seconds, leaked)."""
    directory = fresh(root, run, "peer")
    process = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", tree(directory), start_new_session=True
    )
    pids = await ready(directory)
    start = time.perf_counter()
    os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    elapsed = time.perf_counter() - start
    leaked = [pid for pid in pids if alive(pid)]
    for pid in leaked:  # orphans init has not reaped yet: make sure they at least die
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return elapsed, len(leaked)


async def bench(runs: int) -> int:
    rt = Runtime(model=ScriptedModel([]))
    await rt.create_agent("bench")
    times: list[float] = []
    peer_times: list[float] = []
    leaked = peer_leaked = 0
    with tempfile.TemporaryDirectory(prefix="hook_bench") as tmp:
        root = Path(tmp)
        for run in range(runs):
            elapsed, lost = await ours(rt, root, run)
            times.append(elapsed)
            leaked += lost
            elapsed, lost = await peer(root, run)
            peer_times.append(elapsed)
            peer_leaked += lost
    await rt.aclose()
    times.sort()
    ms = [t * 1000 for t in times]
    median = statistics.median(ms)
    peer_median = statistics.median(t * 1000 for t in peer_times)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(f"hook bridge: {runs} cancelled turns, {leaked} processes left ({3 * runs} started)")
    print(f"  cancel -> when_idle() with all reaped: median {median:.1f} ms, p99 {p99:.1f} ms")
    print(f"bare killpg + wait: {peer_leaked} of {3 * runs} processes left when it returned")
    print(f"  killpg -> wait(): median {peer_median:.1f} ms")
    print(
        f"Done. runs={runs} leaked={leaked} peer_leaked={peer_leaked} median_ms={median:.2f} "
        f"p99_ms={p99:.2f} max_ms={ms[-1]:.2f} peer_median_ms={peer_median:.2f} "
        f"ratio={median / peer_median:.1f}"
    )
    return 1 if leaked else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="cancelled turns (default 1000)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    return asyncio.run(bench(args.runs))


if __name__ == "__main__":
    sys.exit(main())
