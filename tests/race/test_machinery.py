"""The race machinery itself: the bridge stops at the first iteration where nothing can run and
notices hangs and livelocks, the recorder attaches re-entrant events to the effect they
happened in, and the oracle notices what differs. No test sleeps to wait: the bridge turns the
loop. The ``sleep(0)`` and ``sleep(3600)`` below are the workloads under test (steps and a timer
the bridge must count or refuse to pass), not waits."""

from __future__ import annotations

import asyncio
import re

import pytest

from fsm_core import Effect, HostedMachine, Rejected, load_spec
from tests.race.bridge import LoopBridge, NeverSettled
from tests.race.lockstep import LockstepError, Oracle, Recorder

pytestmark = pytest.mark.timeout(30)


def bridge_tasks(bridge: LoopBridge) -> list[str]:
    return sorted(task.get_name() for task in bridge.pending())


def test_the_bridge_stops_exactly_when_nothing_can_run() -> None:
    seen: list[dict[str, bool]] = []
    tasks: list[asyncio.Task[None]] = []
    ping, pong = asyncio.Event(), asyncio.Event()

    def settled() -> bool:
        seen.append({task.get_name(): task.done() for task in tasks} | {"pong": pong.is_set()})
        return True

    bridge = LoopBridge(settled, lambda: "")

    async def wait() -> None:
        await asyncio.Event().wait()  # nobody sets it: a gate only the next rule would open

    async def relay() -> None:
        await ping.wait()  # woken by a future's callback, not by a step of its own
        pong.set()

    async def work() -> None:
        ping.set()
        await asyncio.sleep(0)

    def start() -> None:
        tasks.extend(bridge.spawn(f(), f.__name__) for f in (wait, relay, work))

    try:
        bridge.run(start)
        # settled() ran once, when the relay and the worker had finished and the waiter waited.
        assert seen == [{"wait": False, "relay": True, "work": True, "pong": True}]
        assert bridge_tasks(bridge) == ["wait"]
        # Iteration 1 starts the three tasks (``work`` wakes ``relay``); 2 runs ``relay`` and
        # resumes ``work``, and both finish; 3 finds nothing ready. So the bridge stopped at the
        # first iteration where nothing could run: neither before it nor after it.
        assert bridge.iterations == 3
        bridge.settle()  # nothing to do: the first iteration is idle
        assert bridge.iterations == 1
        assert len(seen) == 2
    finally:
        bridge.close()
    assert bridge.loop.is_closed()


@pytest.mark.parametrize("n", [0, 1, 7, 1_000])
def test_a_chain_of_sleeps_settles_after_its_last_step(n: int) -> None:
    bridge = LoopBridge(lambda: True, lambda: "")
    done: list[int] = []

    async def chain() -> None:
        for _ in range(n):
            await asyncio.sleep(0)
        done.append(n)

    try:
        bridge.run(lambda: bridge.spawn(chain(), f"chain {n}"))
        assert done == [n]
        assert not bridge.pending()
        assert bridge.iterations == n + 2  # the first step, n resumptions, the idle one
    finally:
        bridge.close()


def test_the_bridge_runs_every_task_the_action_wakes() -> None:
    bridge = LoopBridge(lambda: True, lambda: "")
    done: list[int] = []

    async def chain(n: int) -> None:
        for _ in range(n):
            await asyncio.sleep(0)
        done.append(n)

    try:
        bridge.run(lambda: [bridge.spawn(chain(n), f"chain {n}") for n in (3, 1, 7)])
        assert done == [1, 3, 7]
        assert not bridge.pending()
    finally:
        bridge.close()


def test_the_bridge_fails_when_the_loop_idles_short_of_a_settled_point() -> None:
    bridge = LoopBridge(lambda: False, lambda: f"pending {bridge_tasks(bridge)}")

    async def hang() -> None:
        await asyncio.Event().wait()  # nobody sets it

    try:
        with pytest.raises(NeverSettled, match=r"is idle but .* \(a hang\): pending \['hang'\]$"):
            bridge.run(lambda: bridge.spawn(hang(), "hang"))
        assert bridge.iterations == 2  # it started, and the next iteration was idle
    finally:
        bridge.close()  # cancels the waiting task
    assert bridge.loop.is_closed()


@pytest.mark.parametrize("kind", ["task", "callback"])
def test_the_bridge_fails_when_the_loop_never_idles(kind: str) -> None:
    bridge = LoopBridge(lambda: True, lambda: "spinning", max_iterations=50)
    spins: list[int] = []

    async def spin() -> None:
        while True:
            spins.append(1)
            await asyncio.sleep(0)

    def again() -> None:
        spins.append(1)
        bridge.loop.call_soon(again)

    def start() -> None:
        if kind == "task":
            bridge.spawn(spin(), "spin")
        else:
            bridge.loop.call_soon(again)

    try:
        with pytest.raises(NeverSettled, match=r"still busy after 50 iterations .*: spinning$"):
            bridge.run(start)
        assert bridge.iterations == 50
        # One spin per watched iteration, and one more in the iteration that stops the loop:
        # the bound counts loop iterations, not wall time.
        assert len(spins) == 51
    finally:
        bridge.close()  # cancels the spinning task
    assert bridge.loop.is_closed()


def test_a_pending_timer_is_a_wait_the_bridge_does_not_pass() -> None:
    bridge = LoopBridge(lambda: True, lambda: "")
    woke: list[bool] = []

    async def nap() -> None:
        await asyncio.sleep(3600)
        woke.append(True)

    try:
        bridge.run(lambda: bridge.spawn(nap(), "nap"))
        assert bridge.iterations == 2
        assert woke == []
        assert bridge_tasks(bridge) == ["nap"]
    finally:
        bridge.close()  # cancels the nap
    assert bridge.loop.is_closed()


def hosted() -> HostedMachine:
    """An agent table's hosted machine whose ``cancel-requested`` observer sends."""
    control: HostedMachine

    def perform(effect: Effect) -> None:
        if effect.name == "notify_cancel_requested":
            control.fire("send", wake=True, lane="next_turn")

    control = HostedMachine(load_spec().machines["agent"], perform=perform)
    return control


def test_a_re_entrant_fire_is_attached_to_the_effect_it_happened_in() -> None:
    control = hosted()
    recorder = Recorder(control)
    control.fire("send", wake=True, lane="next_turn")
    control.fire("cancel", cause="user", keep_inbox=False)  # pre-run: the observer sends

    _, cancel = recorder.roots
    assert [str(e) for e in cancel.effects] == ["notify_cancel_requested(user)", "clear_inbox()"]
    (inner,) = cancel.children
    assert (str(inner), inner.at) == ("send(wake=true, lane=next_turn)", 0)

    oracle = Oracle(control.spec)
    oracle.follow(recorder.roots)
    assert oracle.state == control.snapshot()
    assert oracle.rows == ["send.idle.wake", "cancel.prerun", "send.idle.wake_again"]
    assert recorder.problems == []


def test_the_oracle_names_the_first_effect_the_table_does_not_perform() -> None:
    control = hosted()
    recorder = Recorder(control)
    control.fire("send", wake=True, lane="next_turn")
    recorder.roots[0].effects.pop()  # as if the runtime had not scheduled its driver

    with pytest.raises(LockstepError) as found:
        Oracle(control.spec).follow(recorder.roots)
    assert re.fullmatch(
        r"table event #1 send\(wake=true, lane=next_turn\) in idle\{.*\}: effect 2: the table "
        r"performs schedule_driver\(\), the runtime nothing more",
        str(found.value),
    )


def test_the_oracle_expects_the_same_refusals() -> None:
    control = hosted()
    recorder = Recorder(control)
    with pytest.raises(Rejected, match=r"^no driver owns the agent$"):
        control.fire("claim")  # no driver runs: the table rejects a claim in idle...
    recorder.roots[0].outcome = "ok"  # ...but suppose the runtime's fire had gone through

    with pytest.raises(LockstepError, match=r"the table rejects it, the runtime's fire was ok$"):
        Oracle(control.spec).follow(recorder.roots)


def test_the_recorder_reports_each_refused_call_and_the_oracle_reads_the_tables_refusal() -> None:
    control = hosted()
    refused: list[str] = []
    recorder = Recorder(control, lambda fire: refused.append(str(fire)))
    control.fire("send", wake=True, lane="next_turn")
    with pytest.raises(Rejected, match=r"^no driver owns the agent$"):
        control.fire("claim")
    assert refused == ["claim()"]  # the refused root, once it returned; the send was not

    oracle = Oracle(control.spec)
    oracle.follow(recorder.roots)
    assert oracle.refusals == {recorder.roots[1]: "no driver owns the agent"}
