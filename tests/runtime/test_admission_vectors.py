"""The door's conformance vectors (specs/vectors/admission.jsonl), told by the real runtime.

Each ``step/N`` vector is one event fired on the door of ``rt.subagents`` from a state
(``admitting``, or ``drained`` once ``drain()`` ran), with what the registry knows of a named
parent. Here a fresh runtime reaches that state and that parent through the public API, then
makes the user call (or lets the teardown run) that fires the event: ``admit`` is ``start()``,
``spawn`` a tool's ``spawn()`` (after its parent's turn was cancelled, for ``aborted``),
``name_parent`` is ``drain_children()``, ``drain_below`` is ``drain_descendants()``,
``release`` and ``root_settled`` are a child's convergence, ``parent_disposing`` and
``parent_disposed`` an agent's disposal (a host with a root, or an activation's agent in its
teardown), ``drain`` is ``drain()``. The parent is made what the vector says: ``activation``
the agent of a resident activation, ``host`` a host-owned agent, ``host_drained`` one that
drain_descendants named, ``host_disposing`` one whose disposal is held at its final flush,
``stale`` a disposed one.

The lockstep recorder of tests/race records every event the registry fires on its door; the
runtime must fire the vector's call from the vector's state, with the vector's outcome and
effects, and the lockstep oracle replays everything it fired on the interpreter besides.
A vector the runtime cannot reach is listed with its reason (:data:`UNREACHED`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Mapping
from typing import Any

import pytest

from fsm_core.runtime import (
    AbortSignal,
    Agent,
    Reply,
    Runtime,
    SubagentError,
    SubagentSpec,
    ToolCall,
    UserMessage,
)
from fsm_core.table import load_spec
from fsm_core.testing import Gate, Wait
from tests.race.lockstep import Fire, Oracle, Recorder
from tests.runtime.subagent_support import HeldSession, Models
from tests.table_driver import Json, VectorFile

pytestmark = pytest.mark.timeout(30)

ADMISSION = load_spec().machines["admission"]
VECTORS = VectorFile.read(ADMISSION)
STEPS = {v["id"]: v for v in VECTORS.vectors if v["id"].startswith("step/")}

UNREACHED = {
    ("drain_below", "stale", "admitting"): (
        "drain_descendants names every parent live first, and nothing between naming and "
        "draining can finish an agent's disposal: that needs awaits, and the call makes none"
    ),
    ("root_settled", "activation", "admitting"): (
        "a root's parent is host-owned by definition; a child of an activation's agent "
        "notifies its parent activation's table (child_settled), never the door"
    ),
    ("drain_below", "host_disposing", "drained"): (
        "a named parent turns disposing only from a listener inside an earlier parent's drain; "
        "after drain() every activation is closing, so no drain below one runs an effect a "
        "listener could act in"
    ),
}
"""(event, parent, state) -> why the runtime cannot fire it; the same pair from the other
state is reached when the reason names one state only."""
_DISPOSING = (
    "agent/disposing is announced inside the dispose call, once the agent is disposing and "
    "before it leaves the runtime: a host-owned agent is host_disposing then, an activation's "
    "agent is its activation's"
)
UNREACHED |= {
    ("parent_disposing", kind, state): _DISPOSING
    for kind in ("host", "host_drained", "stale")
    for state in ("admitting", "drained")
}
UNREACHED |= {
    ("drain_below", "stale", "drained"): UNREACHED["drain_below", "stale", "admitting"],
    ("root_settled", "activation", "drained"): UNREACHED["root_settled", "activation", "admitting"],
}


def _key(vector: Json) -> tuple[str, str, str]:
    call = vector["call"]
    kind = str(next(iter(call["args"].values()), ""))
    return call["event"], kind, vector["state"].get("registry", ADMISSION.initial[0])


class Spawner:
    """A tool that spawns ``s1``, once ``gate`` (if any) opens, ignoring its signal."""

    name = "spawner"

    def __init__(self) -> None:
        self.rt: Runtime | None = None
        self.gate: Gate | None = None

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        assert self.rt is not None
        if self.gate is not None:
            await self.gate.wait()
        return (await self.rt.subagents.spawn(signal, SubagentSpec("s1", "work"))).text


class World:
    """A fresh runtime with a host-owned agent ``host``, its door recorded."""

    def __init__(self) -> None:
        self.models = Models()
        self.spawner = Spawner()
        self.rt = Runtime(self.models, [self.spawner])
        self.spawner.rt = self.rt
        self.registry = self.rt.subagents
        self.recorder = Recorder(self.registry._door.control)
        self.gates: list[Gate] = []
        self.pending: list[Awaitable[Any]] = []
        self.host: Agent

    async def begin(self) -> None:
        self.host = (await self.rt.create_agent("host")).agent

    def held(self) -> HeldSession:
        gate = Gate("flush")
        self.gates.append(gate)
        return HeldSession().hold(gate)

    async def child(self, parent: Agent, child_id: str, *, held: bool = True) -> Any:
        """A continuable child inside its first model request (and its flushes held)."""
        gate = Gate(child_id)
        self.gates.append(gate)
        self.models.script(child_id, Wait(gate, Reply("late")))
        session = self.held().session if held else None
        act = await self.registry.start(parent, child_id, "work", session=session)
        await gate.reached.wait()
        return act

    async def parent(self, kind: str) -> Agent:
        """An agent that the registry takes for ``kind``."""
        if kind == "activation":
            return (await self.child(self.host, "p")).agent  # type: ignore[no-any-return]
        if kind == "host":
            return self.host
        if kind == "host_drained":
            self.pending.append(self.registry.drain_descendants([self.host]))
            return self.host
        handle = await self.rt.create_agent("h", self.held().session)
        if kind == "host_disposing":
            self.pending.append(handle.dispose())
        else:
            assert kind == "stale"
            self.gates[-1].open()
            await handle.dispose()
        return handle.agent

    def drain(self) -> None:
        self.pending.append(self.registry.drain())

    async def settle(self) -> None:
        """Let everything held go on, and await every teardown begun."""
        for gate in self.gates:
            gate.open()
        for pending in self.pending:
            with contextlib.suppress(Exception):
                await pending

    async def close(self) -> None:
        await self.settle()
        await self.rt.aclose()


def _refused(call: Any) -> None:
    with contextlib.suppress(SubagentError):
        call()


async def _refused_async(call: Awaitable[Any]) -> None:
    with contextlib.suppress(SubagentError):
        await call


async def _settle(world: World, kind: str, drained: bool) -> None:
    """A child converges (release, and root_settled for a root) below a ``kind`` parent."""
    registry = world.registry
    if kind == "activation":
        p = await world.child(world.host, "p")
        c = await world.child(p.agent, "c")
        if drained:
            world.drain()  # p's teardown disposes c first
        else:
            world.pending.append(registry.dispose(c))
        return
    if kind in ("host", "host_drained"):
        r = await world.child(world.host, "r")
        if kind == "host_drained":
            world.pending.append(registry.drain_descendants([world.host]))
        else:
            world.pending.append(registry.dispose(r))
        if drained:
            world.drain()
        return
    h = await world.rt.create_agent("h", world.held().session)
    parent_flush = world.gates[-1]
    r = await world.child(h.agent, "r")
    child_flush = world.gates[-1]
    teardown = registry.dispose(r)
    if drained:
        world.drain()
    if kind == "host_disposing":
        world.pending.append(h.dispose())
    else:
        parent_flush.open()
        await h.dispose()
    child_flush.open()
    await teardown


async def _drain_below_disposing(world: World) -> None:
    """drain_descendants([h1, h]): a listener on h1's root's cancel disposes h, named live."""
    h1 = (await world.rt.create_agent("h1")).agent
    await world.child(h1, "r1")
    h = await world.rt.create_agent("h", world.held().session)

    def dispose_h(event: Any) -> None:
        if event.agent.id == "r1" and h.agent.phase != "disposing":
            world.pending.append(h.dispose())

    world.rt.events.on("agent/cancel-requested", dispose_h)
    _refused(lambda: world.registry.drain_descendants([h1, h.agent]))


async def _spawn(world: World, aborted: bool, drained: bool) -> None:
    gate = world.spawner.gate = Gate("the tool") if aborted else None
    call = ToolCall("t0", "spawner", {})
    world.models.script("host", Reply(tool_calls=(call,), finish="tool_calls"))
    if drained:
        world.drain()
    world.host.followup(UserMessage("m1", "go"))
    if gate is not None:
        await gate.reached.wait()
        world.host.cancel()
        gate.open()
    await world.host.when_idle()


async def _tell(world: World, event: str, kind: str, drained: bool) -> None:
    registry = world.registry
    if event == "spawn":
        await _spawn(world, kind == "True", drained)
    elif event in {"release", "root_settled"}:
        await _settle(world, kind, drained)
    elif event == "parent_disposing" and kind == "activation":
        p = await world.child(world.host, "p")
        if drained:
            world.drain()
        else:
            world.pending.append(registry.dispose(p))
    elif event == "parent_disposing":
        assert kind == "host_disposing"
        h = await world.rt.create_agent("h")
        await world.child(h.agent, "r")
        if drained:
            world.drain()
        world.pending.append(h.dispose())
    elif event == "parent_disposed":
        if drained:
            world.drain()
        h = await world.rt.create_agent("h")
        await h.dispose()
    elif event == "drain":
        world.drain()
        if drained:
            world.drain()
    elif event == "drain_below" and kind == "host_disposing":
        assert not drained
        await _drain_below_disposing(world)
    else:
        parent = await world.parent(kind)
        if drained:
            world.drain()
        if event == "admit":
            await _refused_async(registry.start(parent, "n", "work"))
        elif event == "name_parent":
            _refused(lambda: registry.drain_children(parent, []))
        else:
            assert event == "drain_below"
            _refused(lambda: registry.drain_descendants([parent]))


def _walk(roots: list[Fire]) -> list[tuple[str, Fire]]:
    """Every fire in call order with the door's state when it began (a row moves to its
    ``to`` before its effects, so calls nested in them see it)."""
    out: list[tuple[str, Fire]] = []
    state = ADMISSION.initial[0]

    def visit(fire: Fire) -> None:
        nonlocal state
        out.append((str(state), fire))
        if fire.outcome == "ok" and fire.event == "drain":
            state = "drained"
        for child in fire.children:
            visit(child)

    for root in roots:
        visit(root)
    return out


@pytest.mark.parametrize(
    "vector_id",
    [i for i in sorted(STEPS, key=lambda i: int(i[5:])) if _key(STEPS[i]) not in UNREACHED],
)
def test_the_runtime_fires_the_doors_vector(vector_id: str) -> None:
    vector = STEPS[vector_id]
    event, kind, state = _key(vector)

    async def main() -> list[Fire]:
        world = World()
        await world.begin()
        try:
            await _tell(world, event, kind, state == "drained")
            await world.settle()
            told = len(world.recorder.roots)
        finally:
            await world.close()
        Oracle(ADMISSION).follow(world.recorder.roots)  # the interpreter agrees on every fire
        return world.recorder.roots[:told]

    roots = asyncio.run(main())
    args = vector["call"]["args"]
    fired = [f for s, f in _walk(roots) if s == state and (f.event, f.kwargs) == (event, args)]
    assert fired, f"{vector_id}: the runtime never fired {event}({args}) in {state}"
    expect = vector["expect"]
    for fire in fired:
        if "refused" in expect:
            assert fire.outcome == expect["refused"], (vector_id, fire.outcome)
        else:
            assert fire.outcome == "ok", (vector_id, fire.outcome)
            assert [str(e) for e in fire.effects] == expect["effects"], vector_id


def test_every_unreached_pair_has_vectors() -> None:
    keys = {_key(v) for v in STEPS.values()}
    assert set(UNREACHED) <= keys
