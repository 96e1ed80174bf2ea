"""How much the reference runtime costs: per-turn driver overhead and cancel-to-idle latency,
each beside the pure interpreter firing the same table events, then memory per idle agent and
the time to create one.

    python3 -m uv run --locked python benchmarks/runtime_bench.py
    python3 -m uv run --locked python benchmarks/runtime_bench.py --turns 5000 --runs 1000

Each figure is measured on one asyncio loop in this process:

- **turn**: one agent runs ``--turns`` turns back to back against a model that answers at once
  (``followup`` then ``await when_idle()``), so the time is the driver's own: scheduling, the
  table events, the seams with no listeners, the session appends and the flush. Each request
  carries the whole conversation (a snapshot view, see ``_history.py``), and the durable log
  grows; so, in the same rounds, as many turns again run on fresh agents that each run
  ``FRESH`` turns (**turn, fresh conversation**), and the difference is what a long
  conversation adds.
- **cancel-to-idle**: ``--runs`` times, a turn blocks in a model call that cooperates with its
  signal; the clock runs from ``agent.cancel()`` to ``await agent.when_idle()`` returning.
- **interpreter**: beside each of those, :meth:`Machine.fire` (pure: a new state tuple and the
  effect list per event, nothing performed) on the exact table events the runtime fired for
  one such turn (or for one cancel-to-idle), recorded from the agent's own control state. The
  two are timed in alternating rounds, so both see the same machine load; the ratio is what
  the host costs over the table alone.
- **wall and CPU**: each time is taken twice, as wall time (``perf_counter``) and as this
  thread's CPU time (``thread_time``). On a quiet machine they agree. On a shared one the wall
  time also counts the waits for a core, which hit the runtime (it yields to the event loop
  twice a turn) far more than the interpreter (it never yields), so the CPU time is the figure
  to compare across runs there. Turn figures are the median of ``ROUNDS`` rounds.
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

ROUNDS = 20
"""How many alternating rounds the runtime and the interpreter are timed in."""

FRESH = 50
"""Turns each agent of the fresh-conversation figure runs before a new one takes over."""


class Clock:
    """Wall and CPU seconds since it was made: ``Clock().read()`` later gives both."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.thread_time() - self.cpu


Times = tuple[float, float]
"""(wall, CPU) seconds."""


def median_per(rounds: list[Times], per: int) -> Times:
    """The median round's wall and CPU seconds, each divided by ``per``."""
    return (
        statistics.median(w for w, _ in rounds) / per,
        statistics.median(c for _, c in rounds) / per,
    )


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


def interpret(table: Machine, fired: Fired, start: State, times: int) -> Times:
    """Wall and CPU seconds to fire ``fired`` from ``start`` on the pure interpreter, ``times``
    times."""
    clock = Clock()
    for _ in range(times):
        state = start
        for event, kwargs in fired:
            state = table.fire(state, event, **kwargs).target
    return clock.read()


def start_state(table: Machine, agent: Agent) -> State:
    return tuple(agent.table_state[name] for name in table.names)


async def turn_overhead(turns: int, warmup: int = 200) -> tuple[Times, Times, Times, Fired]:
    """Wall and CPU seconds per turn of one agent with an instant model, of agents whose
    conversation is at most ``FRESH`` turns long, and of the interpreter firing the same
    events; and those events."""
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
    ours: list[Times] = []
    fresh: list[Times] = []
    theirs: list[Times] = []
    per_round = max(1, turns // ROUNDS)
    short, short_turns = agent, FRESH
    for r in range(ROUNDS):
        clock = Clock()
        for i in range(per_round):
            agent.followup(UserMessage(f"m{r}.{i}", "hello"))
            await agent.when_idle()
        ours.append(clock.read())
        clock = Clock()
        for i in range(per_round):
            if short_turns == FRESH:
                short, short_turns = (await rt.create_agent(f"fresh {r}.{i}")).agent, 0
            short_turns += 1
            short.followup(UserMessage(f"m{r}.{i}", "hello"))
            await short.when_idle()
        fresh.append(clock.read())
        theirs.append(interpret(table, fired, start, per_round))
    await rt.aclose()
    return (
        median_per(ours, per_round),
        median_per(fresh, per_round),
        median_per(theirs, per_round),
        fired,
    )


async def cancel_to_idle(runs: int, warmup: int = 50) -> tuple[list[Times], Times, Fired]:
    """Wall and CPU seconds from ``cancel()`` to ``when_idle()`` returning, for each
    cooperative turn; the interpreter's for the same events; and those events."""
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
    samples: list[Times] = []
    theirs: list[Times] = []
    per_round = max(1, runs // ROUNDS)
    for r in range(ROUNDS):
        for i in range(per_round):
            await blocked(f"m{r}.{i}")
            clock = Clock()
            agent.cancel()
            await agent.when_idle()
            samples.append(clock.read())
        theirs.append(interpret(table, fired, start, per_round))
    await rt.aclose()
    return samples, median_per(theirs, per_round), fired


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
    long, fresh, interp, turn_events = run(turn_overhead(args.turns))
    (turn_wall, turn_cpu), (fresh_wall, fresh_cpu), (interp_wall, interp_cpu) = long, fresh, interp
    latencies, (icancel_wall, icancel_cpu), cancel_events = run(cancel_to_idle(args.runs))
    fresh_kib, ran_kib = run(memory_per_agent(args.agents))
    create_s = run(create_time(args.agents))
    walls = [w for w, _ in latencies]
    cancel_wall, cancel_p95 = statistics.median(walls), percentile(walls, 0.95)
    cancel_cpu = statistics.median(c for _, c in latencies)

    us = 1e6
    rows = [
        ("turn overhead", f"{turn_wall * us:,.1f} µs/turn", f"{turn_cpu * us:,.1f} µs CPU"),
        (
            "  fresh conversation",
            f"{fresh_wall * us:,.1f} µs/turn",
            f"{fresh_cpu * us:,.1f} µs CPU",
        ),
        (
            "  Machine.fire, same events",
            f"{interp_wall * us:,.1f} µs/turn",
            f"{interp_cpu * us:,.1f} µs CPU",
        ),
        (
            "  runtime / Machine.fire",
            f"{turn_wall / interp_wall:,.1f}x wall",
            f"{turn_cpu / interp_cpu:,.1f}x CPU",
        ),
        ("cancel-to-idle", f"{cancel_wall * us:,.1f} µs median", f"{cancel_cpu * us:,.1f} µs CPU"),
        ("  p95", f"{cancel_p95 * us:,.1f} µs", ""),
        (
            "  Machine.fire, same events",
            f"{icancel_wall * us:,.1f} µs",
            f"{icancel_cpu * us:,.1f} µs CPU",
        ),
        (
            "  runtime / Machine.fire",
            f"{cancel_wall / icancel_wall:,.1f}x wall",
            f"{cancel_cpu / icancel_cpu:,.1f}x CPU",
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
        print(f"  {name:<{width}}  {first:>18}  {second:>20}")
    print(
        f"Done. us_per_turn={turn_wall * us:.1f} cpu_us_per_turn={turn_cpu * us:.1f} "
        f"fresh_us_per_turn={fresh_wall * us:.1f} fresh_cpu_us_per_turn={fresh_cpu * us:.1f} "
        f"interp_us_per_turn={interp_wall * us:.1f} interp_cpu_us_per_turn={interp_cpu * us:.1f} "
        f"turn_ratio={turn_wall / interp_wall:.2f} turn_cpu_ratio={turn_cpu / interp_cpu:.2f} "
        f"cancel_idle_median_us={cancel_wall * us:.1f} cancel_idle_p95_us={cancel_p95 * us:.1f} "
        f"cancel_idle_cpu_us={cancel_cpu * us:.1f} interp_cancel_us={icancel_wall * us:.1f} "
        f"cancel_ratio={cancel_wall / icancel_wall:.2f} "
        f"kib_per_idle_agent={fresh_kib:.1f} kib_per_idle_agent_after_turn={ran_kib:.1f} "
        f"create_agent_ms={create_s * 1e3:.3f}"
    )


if __name__ == "__main__":
    main()
