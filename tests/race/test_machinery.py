"""The race machinery itself: the bridge notices hangs and livelocks, the recorder attaches
re-entrant events to the effect they happened in, and the oracle notices what differs."""

from __future__ import annotations

import asyncio
import re

import pytest

from fsm_core import Effect, HostedMachine, Rejected, load_spec
from tests.race.bridge import LoopBridge, NeverSettled
from tests.race.lockstep import LockstepError, Oracle, Recorder

pytestmark = pytest.mark.timeout(30)


def test_the_bridge_fails_when_the_loop_idles_short_of_a_settled_point() -> None:
    bridge = LoopBridge(lambda: False, lambda: "nothing runs")
    try:
        with pytest.raises(NeverSettled, match=r"is idle but .* \(a hang\): nothing runs$"):
            bridge.settle()
    finally:
        bridge.close()
    assert bridge.loop.is_closed()


def test_the_bridge_fails_when_the_loop_never_idles() -> None:
    bridge = LoopBridge(lambda: True, lambda: "spinning", max_iterations=50)

    async def spin() -> None:
        while True:
            await asyncio.sleep(0)

    try:
        with pytest.raises(NeverSettled, match=r"still busy after 50 iterations"):
            bridge.run(lambda: bridge.spawn(spin(), "spin"))
    finally:
        bridge.close()  # cancels the spinning task
    assert bridge.loop.is_closed()


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
