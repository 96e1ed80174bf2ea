"""How much the reference runtime costs: per-turn driver overhead and cancel-to-idle latency,
each beside the pure interpreter firing the same table events, then memory per idle agent and
the time to create one.

    python3 -m uv run --locked python benchmarks/runtime_bench.py
    python3 -m uv run --locked python benchmarks/runtime_bench.py --turns 5000 --runs 1000

Each figure is measured on one asyncio loop in this process:

- **turn**: one agent runs ``--turns`` turns back to back against a model that answers at once
  (``followup`` then ``await when_idle()``), so the time is the driver's own: scheduling, the
  table events, the seams with no listeners, the session appends and the flush.
- **cancel-to-idle**: ``--runs`` times, a turn blocks in a model call that cooperates with its
  signal; the clock runs from ``agent.cancel()`` to ``await agent.when_idle()`` returning.
- **interpreter**: beside each of those, :meth:`Machine.fire` (pure: a new state tuple and the
  effect list per event, nothing performed) on the exact table events the runtime fired for
  one such turn (or for one cancel-to-idle), recorded from the agent's own control state. The
  two are timed in alternating rounds, so both see the same machine load; the ratio is what
  the host costs over the table alone.
- **memory**: ``--agents`` agents in one runtime, measured with ``tracemalloc`` (the delta of
  traced memory over creating them, divided by their number): freshly created and idle, then
  idle again after each ran one turn (which adds its session events).
- **create_agent**: the time to create ``--agents`` agents in a fresh runtime (no tracing),
  per agent.

Speed is reported, never asserted. The last line is for scripts: ``Done. key=value ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fsm_core import HostedMachine, Machine, State, load_spec
from fsm_core.runtime import AbortSignal, Agent, Reply, Request, Runtime, UserMessage
from fsm_core.testing import Gate, ScriptedModel, Wait

Fired = list[tuple[str, dict[str, Any]]]
"""Table events in the order an agent fired them, with their keyword arguments."""

ROUNDS = 10
"""How many alternating rounds the runtime and the interpreter are timed in."""


class InstantModel:
    """A model adapter that answers every request at once, without awaiting anything."""

    def __init__(self) -> None:
        self.reply = Reply("ok")

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        return self.reply


@contextlib.contextmanager
def recording() -> Iterator[Fired]:
    """Record every table event any hosted control state fires while the block runs.

    The outermost fires only: a nested fire (a listener re-entering) is part of its outer
    event's row, and there are no listeners here.
    """
    fired: Fired = []
    original = HostedMachine.fire
    depth = 0

    def fire(self: HostedMachine, event: str, context: object = None, /, **kwargs: Any) -> Any:
        nonlocal depth
        if depth == 0:
            fired.append((event, dict(kwargs)))
        depth += 1
        try:
            return original(self, event, context, **kwargs)
        finally:
            depth -= 1

    HostedMachine.fire = fire  # type: ignore[method-assign]
    try:
        yield fired
    finally:
        HostedMachine.fire = original  # type: ignore[method-assign]


def interpret(table: Machine, fired: Fired, start: State, times: int) -> float:
    """Seconds to fire ``fired`` from ``start`` on the pure interpreter, ``times`` times."""
    began = time.perf_counter()
    for _ in range(times):
        state = start
        for event, kwargs in fired:
            state = table.fire(state, event, **kwargs).target
    return time.perf_counter() - began


def start_state(table: Machine, agent: Agent) -> State:
    return tuple(agent.table_state[name] for name in table.names)


async def turn_overhead(turns: int, warmup: int = 200) -> tuple[float, float, Fired]:
    """Seconds per turn of one agent with an instant model, and of the interpreter firing the
    same events; and those events."""
    rt = Runtime(model=InstantModel())
    table = load_spec().machines["agent"]
    agent = (await rt.create_agent("bench")).agent
    for i in range(warmup):
        agent.followup(UserMessage(f"w{i}", "warm up"))
        await agent.when_idle()
    start = start_state(table, agent)
    with recording() as fired:
        agent.followup(UserMessage("r", "record"))
        await agent.when_idle()
    assert start_state(table, agent) == start, "a turn must leave the agent as it found it"
    ours = theirs = 0.0
    per_round = max(1, turns // ROUNDS)
    for r in range(ROUNDS):
        began = time.perf_counter()
        for i in range(per_round):
            agent.followup(UserMessage(f"m{r}.{i}", "hello"))
            await agent.when_idle()
        ours += time.perf_counter() - began
        theirs += interpret(table, fired, start, per_round)
    await rt.aclose()
    runs = per_round * ROUNDS
    return ours / runs, theirs / runs, fired


async def cancel_to_idle(runs: int, warmup: int = 50) -> tuple[list[float], float, Fired]:
    """Seconds from ``cancel()`` to ``when_idle()`` returning, for each cooperative turn; the
    interpreter's seconds for the same events; and those events."""
    model = ScriptedModel()
    rt = Runtime(model=model)
    table = load_spec().machines["agent"]
    agent = (await rt.create_agent("bench")).agent

    async def blocked(name: str) -> None:
        gate = Gate(name)
        model.then(Wait(gate, Reply("never")))
        agent.followup(UserMessage(name, "hello"))
        await gate.reached.wait()

    for i in range(warmup):
        await blocked(f"w{i}")
        agent.cancel()
        await agent.when_idle()
    await blocked("r")
    start = start_state(table, agent)
    with recording() as fired:
        agent.cancel()
        await agent.when_idle()
    samples: list[float] = []
    theirs = 0.0
    per_round = max(1, runs // ROUNDS)
    for r in range(ROUNDS):
        for i in range(per_round):
            await blocked(f"m{r}.{i}")
            began = time.perf_counter()
            agent.cancel()
            await agent.when_idle()
            samples.append(time.perf_counter() - began)
        theirs += interpret(table, fired, start, per_round)
    await rt.aclose()
    return samples, theirs / len(samples), fired


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


async def create_time(agents: int) -> float:
    """Seconds per ``create_agent`` call, creating ``agents`` agents in a fresh runtime."""
    rt = Runtime(model=InstantModel())
    await rt.create_agent("warm")
    began = time.perf_counter()
    for i in range(agents):
        await rt.create_agent(f"a{i}")
    elapsed = time.perf_counter() - began
    await rt.aclose()
    return elapsed / agents


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))
    return ordered[index]


def events(fired: Fired) -> str:
    return " ".join(event for event, _ in fired)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000, help="turns for the overhead figure")
    parser.add_argument("--runs", type=int, default=500, help="cancelled turns for the latency")
    parser.add_argument("--agents", type=int, default=1000, help="agents for memory and create")
    args = parser.parse_args(argv)

    run: Callable[..., Any] = asyncio.run
    per_turn, interp_turn, turn_events = run(turn_overhead(args.turns))
    latencies, interp_cancel, cancel_events = run(cancel_to_idle(args.runs))
    fresh_kib, ran_kib = run(memory_per_agent(args.agents))
    create_s = run(create_time(args.agents))
    median, p95 = statistics.median(latencies), percentile(latencies, 0.95)

    us = 1e6
    rows = [
        ("turn overhead", f"{per_turn * us:,.1f} µs/turn", f"{1 / per_turn:,.0f} turns/s"),
        (
            "  Machine.fire, same events",
            f"{interp_turn * us:,.1f} µs/turn",
            f"runtime {per_turn / interp_turn:,.1f}x",
        ),
        ("cancel-to-idle", f"{median * us:,.1f} µs median", f"{p95 * us:,.1f} µs p95"),
        (
            "  Machine.fire, same events",
            f"{interp_cancel * us:,.1f} µs",
            f"runtime {median / interp_cancel:,.1f}x",
        ),
        (
            "memory per idle agent",
            f"{fresh_kib:,.1f} KiB fresh",
            f"{ran_kib:,.1f} KiB after a turn",
        ),
        ("create_agent", f"{create_s * 1e3:,.3f} ms/agent", f"{1 / create_s:,.0f} agents/s"),
    ]
    print(f"turns={args.turns} runs={args.runs} agents={args.agents}")
    print(f"  a turn fires: {events(turn_events)}")
    print(f"  cancel-to-idle fires: {events(cancel_events)}")
    width = max(len(name) for name, _, _ in rows)
    for name, first, second in rows:
        print(f"  {name:<{width}}  {first:>18}  {second:>24}")
    print(
        f"Done. us_per_turn={per_turn * us:.1f} interp_us_per_turn={interp_turn * us:.1f} "
        f"turn_ratio={per_turn / interp_turn:.2f} turns_per_s={1 / per_turn:.0f} "
        f"cancel_idle_median_us={median * us:.1f} cancel_idle_p95_us={p95 * us:.1f} "
        f"interp_cancel_us={interp_cancel * us:.1f} cancel_ratio={median / interp_cancel:.2f} "
        f"kib_per_idle_agent={fresh_kib:.1f} kib_per_idle_agent_after_turn={ran_kib:.1f} "
        f"create_agent_ms={create_s * 1e3:.3f}"
    )


if __name__ == "__main__":
    main()
