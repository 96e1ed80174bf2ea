"""How much the reference runtime costs: per-turn driver overhead, cancel-to-idle latency, and
memory per idle agent.

    python3 -m uv run --locked python benchmarks/runtime_bench.py
    python3 -m uv run --locked python benchmarks/runtime_bench.py --turns 5000 --runs 1000

Three figures, each on one asyncio loop in this process:

- **turn**: one agent runs ``--turns`` turns back to back against a model that answers at once
  (``followup`` then ``await when_idle()``), so the time is the driver's own: scheduling, the
  table events, the seams with no listeners, the session appends and the flush.
- **cancel-to-idle**: ``--runs`` times, a turn blocks in a model call that cooperates with its
  signal; the clock runs from ``agent.cancel()`` to ``await agent.when_idle()`` returning.
- **memory**: ``--agents`` agents in one runtime, measured with ``tracemalloc`` (the delta of
  traced memory over creating them, divided by their number): freshly created and idle, then
  idle again after each ran one turn (which adds its session events).

Speed is reported, never asserted. The last line is for scripts: ``Done. key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
from collections.abc import Sequence

from fsm_core.runtime import AbortSignal, Reply, Request, Runtime, UserMessage
from fsm_core.testing import Gate, ScriptedModel, Wait


class InstantModel:
    """A model adapter that answers every request at once, without awaiting anything."""

    def __init__(self) -> None:
        self.reply = Reply("ok")

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        return self.reply


async def turn_overhead(turns: int, warmup: int = 200) -> float:
    """Seconds per turn of one agent running ``turns`` turns with an instant model."""
    rt = Runtime(model=InstantModel())
    agent = (await rt.create_agent("bench")).agent
    for i in range(warmup):
        agent.followup(UserMessage(f"w{i}", "warm up"))
        await agent.when_idle()
    start = time.perf_counter()
    for i in range(turns):
        agent.followup(UserMessage(f"m{i}", "hello"))
        await agent.when_idle()
    elapsed = time.perf_counter() - start
    await rt.aclose()
    return elapsed / turns


async def cancel_to_idle(runs: int, warmup: int = 50) -> list[float]:
    """Seconds from ``cancel()`` to ``when_idle()`` returning, for each cooperative turn."""
    model = ScriptedModel()
    rt = Runtime(model=model)
    agent = (await rt.create_agent("bench")).agent
    samples: list[float] = []
    for i in range(warmup + runs):
        gate = Gate(f"run {i}")
        model.then(Wait(gate, Reply("never")))
        agent.followup(UserMessage(f"m{i}", "hello"))
        await gate.reached.wait()
        start = time.perf_counter()
        agent.cancel()
        await agent.when_idle()
        if i >= warmup:
            samples.append(time.perf_counter() - start)
    await rt.aclose()
    return samples


async def memory_per_agent(agents: int) -> tuple[float, float]:
    """KiB per idle agent: freshly created, and after each ran one turn."""
    rt = Runtime(model=InstantModel())
    warm = await rt.create_agent("warm")  # first-use caches are not per-agent cost
    warm.agent.followup(UserMessage("w", "warm up"))
    await warm.agent.when_idle()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    handles = [await rt.create_agent(f"a{i}") for i in range(agents)]
    gc.collect()
    created = tracemalloc.get_traced_memory()[0]
    for handle in handles:
        handle.agent.followup(UserMessage("m1", "hello"))
    for handle in handles:
        await handle.agent.when_idle()
    gc.collect()
    after_turn = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert all(h.agent.phase == "idle" for h in handles)
    await rt.aclose()
    return (created - before) / agents / 1024, (after_turn - before) / agents / 1024


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))
    return ordered[index]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000, help="turns for the overhead figure")
    parser.add_argument("--runs", type=int, default=500, help="cancelled turns for the latency")
    parser.add_argument("--agents", type=int, default=10_000, help="agents for the memory figure")
    args = parser.parse_args(argv)

    per_turn = asyncio.run(turn_overhead(args.turns))
    latencies = asyncio.run(cancel_to_idle(args.runs))
    fresh_kib, ran_kib = asyncio.run(memory_per_agent(args.agents))
    median, p95 = statistics.median(latencies), percentile(latencies, 0.95)

    rows = [
        ("turn overhead", f"{per_turn * 1e6:,.0f} µs/turn", f"{1 / per_turn:,.0f} turns/s"),
        ("cancel-to-idle", f"{median * 1e6:,.0f} µs median", f"{p95 * 1e6:,.0f} µs p95"),
        (
            "memory per idle agent",
            f"{fresh_kib:,.1f} KiB fresh",
            f"{ran_kib:,.1f} KiB after a turn",
        ),
    ]
    print(f"turns={args.turns} runs={args.runs} agents={args.agents}")
    width = max(len(name) for name, _, _ in rows)
    for name, first, second in rows:
        print(f"  {name:<{width}}  {first:>18}  {second:>24}")
    print(
        f"Done. us_per_turn={per_turn * 1e6:.1f} turns_per_s={1 / per_turn:.0f} "
        f"cancel_idle_median_us={median * 1e6:.1f} cancel_idle_p95_us={p95 * 1e6:.1f} "
        f"kib_per_idle_agent={fresh_kib:.1f} kib_per_idle_agent_after_turn={ran_kib:.1f}"
    )


if __name__ == "__main__":
    main()
