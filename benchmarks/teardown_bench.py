"""How much seed 004's teardown costs: tearing down trees of 1,000 and 10,000 activations.

    python3 -m uv run --locked python benchmarks/teardown_bench.py
    python3 -m uv run --locked python benchmarks/teardown_bench.py --sizes 1000 --shapes deep

Each tree hangs below one host-owned agent. Every activation is inside its first model call
(a request that cooperates with its signal), so the teardown cancels live turns, not idle
agents. Three shapes of ``N`` activations:

- **wide**: one root owning ``N - 1`` children;
- **deep**: a chain of ``N`` generations (the cancel of the whole chain happens inside one
  call, before the first await, without a Python frame per generation);
- **mixed**: a tree where each activation owns up to 10 children, filled breadth-first.

For each tree: the seconds to build it (every ``start``), the seconds from ``dispose(root)``
until it returns (child-first: every activation cancelled, joined, flushed, captured, its
handle disposed, the six convergence steps), and memory measured with ``tracemalloc`` in a
second, separate build of the same tree: traced bytes per resident activation (agent,
activation, session, watcher and the blocked turn) and the peak over the teardown. Time is
measured without ``tracemalloc``, which slows Python down.

Speed is reported, never asserted. The last line is for scripts: ``Done. key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
import tracemalloc
from collections.abc import Sequence

from fsm_core.runtime import AbortSignal, Activation, Agent, Reply, Request, Runtime

SHAPES = ("wide", "deep", "mixed")


class BlockingModel:
    """A model whose every request waits for the turn's signal, then raises Aborted."""

    def __init__(self) -> None:
        self.reached = 0
        self.all_reached = asyncio.Event()
        self.expected = 0

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        self.reached += 1
        if self.reached >= self.expected:
            self.all_reached.set()
        await signal.wait()
        signal.raise_if_aborted()
        raise AssertionError("unreachable: the signal aborted")


def parent_index(shape: str, i: int) -> int:
    """The index of activation ``i``'s parent (``i >= 1``; 0 is the root)."""
    if shape == "wide":
        return 0
    if shape == "deep":
        return i - 1
    return (i - 1) // 10


async def build(rt: Runtime, model: BlockingModel, shape: str, n: int) -> Activation:
    model.expected = n
    host = (await rt.create_agent("host")).agent
    agents: list[Agent] = []
    root = await rt.subagents.start(host, "a0", "work")
    agents.append(root.agent)
    for i in range(1, n):
        act = await rt.subagents.start(agents[parent_index(shape, i)], f"a{i}", "work")
        agents.append(act.agent)
    await model.all_reached.wait()  # every activation is inside its model call
    return root


async def timed(shape: str, n: int) -> tuple[float, float]:
    model = BlockingModel()
    rt = Runtime(model)
    start = time.perf_counter()
    root = await build(rt, model, shape, n)
    built = time.perf_counter() - start
    start = time.perf_counter()
    await rt.subagents.dispose(root)
    torn = time.perf_counter() - start
    assert rt.subagents.resident == () and rt.subagents.slots_held == 0
    await rt.aclose()
    return built, torn


async def measured(shape: str, n: int) -> tuple[float, float]:
    """Traced bytes per resident activation, and the teardown's peak over the built tree."""
    model = BlockingModel()
    rt = Runtime(model)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    root = await build(rt, model, shape, n)
    gc.collect()
    resident = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.reset_peak()
    await rt.subagents.dispose(root)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    await rt.aclose()
    return resident / n, peak


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    args = parser.parse_args(argv)
    print(
        f"{'shape':<6} {'N':>6} {'build s':>8} {'teardown s':>10} {'us/act':>7} "
        f"{'KiB/act':>8} {'peak MiB':>9}"
    )
    done = []
    for n in args.sizes:
        for shape in args.shapes:
            built, torn = asyncio.run(timed(shape, n))
            per, peak = asyncio.run(measured(shape, n))
            print(
                f"{shape:<6} {n:>6} {built:>8.2f} {torn:>10.2f} {torn / n * 1e6:>7.0f} "
                f"{per / 1024:>8.1f} {peak / 2**20:>9.1f}"
            )
            done.append(f"{shape}{n}={torn:.3f}")
    print("Done.", " ".join(done))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
