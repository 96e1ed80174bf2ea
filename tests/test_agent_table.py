"""Seed 000's races, decided by specs/agent.toml alone.

Each test drives the compiled agent table as the runtime does (listeners re-enter inside
notifying effects) and asserts the rows taken and the effects in order. These are the test
vectors a port can replay: same events in, same effects out.
"""

from __future__ import annotations

import pytest

from fsm_core import NotEnabled, Rejected
from fsm_core.table import Effect, Machine, load_spec
from tests.table_driver import TableDriver


@pytest.fixture
def agent() -> TableDriver:
    return TableDriver(load_spec().machines["agent"])


def followup(d: TableDriver) -> str | None:
    return d.fire("send", wake=True, lane="next_turn")


def running(d: TableDriver) -> TableDriver:
    """Bring the agent into a live turn: followup, driver start, claim, take the prompt."""
    followup(d)
    d.fire("start")
    d.fire("claim")
    d.fire("take_prompt", rest=False)
    d.effects()
    return d


def test_machine_is_exported_for_introspection() -> None:
    agent = load_spec().machines["agent"]
    assert isinstance(agent, Machine)
    assert agent.names[0] == "phase"
    assert agent.describe(agent.initial)["holder"] == "none"


def test_idle_cancel_emits_nothing_and_arms_nothing(agent: TableDriver) -> None:
    before = agent.state
    assert agent.fire("cancel", cause="user", keep_inbox=False) == "cancel.noop"
    assert agent.effects() == []
    assert agent.state == before
    followup(agent)
    assert agent.fire("start") == "start.turn"


def test_cancel_discarding_idle_queued_work_notifies_first(agent: TableDriver) -> None:
    agent.fire("send", wake=False, lane="next_turn")
    agent.effects()
    assert agent.fire("cancel", cause="user", keep_inbox=False) == "cancel.discard"
    assert agent.effects() == ["notify_cancel_requested(user)", "clear_inbox()"]
    assert agent["marker"] is False


def test_wake_is_asynchronous(agent: TableDriver) -> None:
    assert followup(agent) == "send.idle.wake"
    assert agent.effects() == ["enqueue(next_turn)", "schedule_driver()"]
    assert agent["phase"] == "idle"


def test_pre_run_cancel_opens_no_turn_and_publishes_no_status(agent: TableDriver) -> None:
    followup(agent)
    assert agent.fire("cancel", cause="user", keep_inbox=False) == "cancel.prerun"
    assert agent["marker"] is True
    assert agent.fire("start") == "start.skip"
    assert agent.effects() == [
        "enqueue(next_turn)",
        "schedule_driver()",
        "notify_cancel_requested(user)",
        "clear_inbox()",
        "settle_idle()",
    ]
    assert agent.machine.holds("quiescent", agent.state)


def test_replacement_queued_after_pre_run_cancel_runs(agent: TableDriver) -> None:
    followup(agent)
    agent.fire("cancel", cause="user", keep_inbox=False)
    assert followup(agent) == "send.idle.wake_again"
    assert agent["marker"] is False
    assert agent.fire("start") == "start.turn"


def test_pre_run_keep_inbox_cancel_parks_until_a_later_wake(agent: TableDriver) -> None:
    followup(agent)
    agent.fire("cancel", cause="parent", keep_inbox=True)
    assert agent.fire("start") == "start.skip"
    assert agent["pending"] is True
    agent.fire("send", wake=False, lane="next_turn")
    assert agent["scheduled"] is False, "a non-waking send does not wake parked work"
    followup(agent)
    assert agent.fire("start") == "start.turn"
    assert agent.fire("claim") == "claim.turn"


def test_holder_is_installed_before_running_is_published(agent: TableDriver) -> None:
    seen: list[object] = []
    agent.on("publish_status", lambda d, e: seen.append(d["holder"]))
    followup(agent)
    agent.fire("start")
    assert seen == ["live"]


def test_replacement_from_running_listener_gets_fresh_holder_without_idle(
    agent: TableDriver,
) -> None:
    def cancel_and_replace(d: TableDriver, e: Effect) -> None:
        d.fire("cancel", cause="user", keep_inbox=False)
        followup(d)

    agent.on("publish_status", cancel_and_replace)
    followup(agent)
    agent.effects()
    assert agent.fire("start") == "start.turn"
    assert agent.fire("claim") == "claim.replacement"
    assert agent.fire("claim") == "claim.turn"
    effects = agent.effects()
    assert "publish_status(idle)" not in effects
    assert effects == [
        "open_holder()",
        "publish_status(running)",
        "notify_cancel_requested(user)",
        "clear_inbox()",
        "abort_holder(user)",
        "enqueue(next_turn)",
        "release_holder()",
        "open_holder()",
        "publish_turn_start()",
    ]
    assert (agent["holder"], agent["reason"], agent["latch"]) == ("live", "none", False)
    assert agent.fire("take_prompt", rest=False) == "take_prompt"
    assert agent.effects() == ["claim_inbox()"]


def test_a_turn_opens_before_it_claims_one_prompt_and_the_rest_runs_next(
    agent: TableDriver,
) -> None:
    """Issue 11 items 1 and 5: turn/start precedes the claim; a claim that leaves work
    pending keeps ``pending`` true, and the driver continues without publishing idle."""
    followup(agent)
    followup(agent)
    agent.fire("start")
    agent.effects()
    assert agent.fire("claim") == "claim.turn"
    assert agent.effects() == ["publish_turn_start()"]
    assert (agent["turn"], agent["pending"]) == (True, True), "the prompt is still queued"
    assert agent.fire("take_prompt", rest=True) == "take_prompt"
    assert agent.effects() == ["claim_inbox()"]
    assert (agent["turn"], agent["pending"]) == (True, True), "the second is left for turn 2"
    agent.fire("retire", end="completed")
    agent.effects()
    assert agent.fire("converge") == "converge.continue"
    assert agent.effects() == ["open_holder()"]
    assert agent.fire("claim") == "claim.turn"
    assert agent.fire("take_prompt", rest=False) == "take_prompt"
    assert (agent["turn"], agent["pending"]) == (True, False)
    agent.fire("retire", end="completed")
    assert agent.fire("converge") == "converge.idle"


def test_a_turn_start_observer_cancel_discards_the_unclaimed_prompt(agent: TableDriver) -> None:
    agent.on("publish_turn_start", lambda d, e: d.fire("cancel", cause="user", keep_inbox=False))
    followup(agent)
    agent.fire("start")
    agent.effects()
    assert agent.fire("claim") == "claim.turn"
    assert agent.effects() == [
        "publish_turn_start()",
        "notify_cancel_requested(user)",
        "clear_inbox()",
        "abort_holder(user)",
    ]
    assert (agent["phase"], agent["pending"], agent["turn"]) == ("cancelling", False, True)
    with pytest.raises(Rejected, match=r"^no live turn takes queued work$"):
        agent.fire("take_prompt", rest=False)  # nothing to claim: the driver never asks
    assert agent.fire("retire", end="completed") == "retire.aborted"
    assert agent.fire("converge") == "converge.parked"


def test_effective_cancel_notifies_then_clears_then_aborts(agent: TableDriver) -> None:
    running(agent)
    assert agent.fire("cancel", cause="user", keep_inbox=False) == "cancel.turn"
    assert agent.effects() == [
        "notify_cancel_requested(user)",
        "clear_inbox()",
        "abort_holder(user)",
    ]
    assert (agent["phase"], agent["holder"], agent["reason"]) == ("cancelling", "aborted", "user")


def test_repeated_cancel_is_first_wins_but_still_clears_new_work(agent: TableDriver) -> None:
    running(agent)
    agent.fire("cancel", cause="user", keep_inbox=True)
    assert agent.fire("cancel", cause="parent", keep_inbox=True) == "cancel.noop"
    followup(agent)  # post-abort: latched
    assert agent["latch"] is True
    assert agent.fire("cancel", cause="parent", keep_inbox=False) == "cancel.discard"
    assert agent.effects()[-2:] == ["notify_cancel_requested(parent)", "clear_inbox()"]
    assert (agent["reason"], agent["latch"], agent["pending"]) == ("user", False, False)


def test_cancel_from_cancel_requested_observer_wins_the_reason(agent: TableDriver) -> None:
    running(agent)
    agent.on(
        "notify_cancel_requested", lambda d, e: d.fire("cancel", cause="parent", keep_inbox=False)
    )
    agent.fire("cancel", cause="user", keep_inbox=False)
    effects = agent.effects()
    assert effects.count("abort_holder(parent)") == 1
    assert "abort_holder(user)" not in effects
    assert agent["reason"] == "parent"


def test_observer_work_is_cleared_abort_observer_work_is_latched(agent: TableDriver) -> None:
    running(agent)
    agent.on("notify_cancel_requested", lambda d, e: followup(d))
    agent.on("abort_holder", lambda d, e: followup(d))
    agent.fire("cancel", cause="user", keep_inbox=False)
    assert agent.effects() == [
        "notify_cancel_requested(user)",
        "enqueue(next_turn)",
        "clear_inbox()",
        "abort_holder(user)",
        "enqueue(next_turn)",
    ]
    assert (agent["latch"], agent["pending"]) == (True, True)
    assert agent.fire("retire", end="completed") == "retire.aborted"
    assert agent.fire("converge") == "converge.replay"
    assert agent.effects() == [
        "release_holder()",
        "publish_turn_end(aborted)",
        "flush_session()",
        "publish_status(idle)",
        "schedule_driver()",
    ]
    assert agent.fire("start") == "start.turn"


def test_keep_inbox_parks_pre_abort_work_and_replays_post_abort_wakes(agent: TableDriver) -> None:
    running(agent)
    followup(agent)  # queued for the live turn: pre-abort
    agent.fire("cancel", cause="user", keep_inbox=True)
    assert agent["latch"] is False
    agent.fire("retire", end="completed")
    assert agent.fire("converge") == "converge.parked"
    assert agent["pending"] is True

    running(agent)
    agent.fire("cancel", cause="user", keep_inbox=True)
    assert followup(agent) == "send.latched"
    agent.fire("retire", end="completed")
    assert agent.fire("converge") == "converge.replay"


def test_removing_the_latched_message_suppresses_its_replay(agent: TableDriver) -> None:
    running(agent)
    agent.fire("cancel", cause="user", keep_inbox=False)
    followup(agent)
    agent.fire("remove", rest=False)
    assert agent["latch"] is False
    agent.fire("retire", end="completed")
    assert agent.fire("converge") == "converge.parked"


def test_turn_end_observers_and_flush_have_no_cancel_authority(agent: TableDriver) -> None:
    running(agent)
    agent.on("publish_turn_end", lambda d, e: d.fire("cancel", cause="user", keep_inbox=False))
    assert agent.fire("retire", end="completed") == "retire.ended"
    assert "abort_holder(user)" not in agent.effects()
    assert agent.fire("cancel", cause="user", keep_inbox=True) == "cancel.noop"
    assert agent.fire("converge") == "converge.idle"


def test_wake_during_flush_continues_without_publishing_idle(agent: TableDriver) -> None:
    running(agent)
    agent.fire("retire", end="completed")
    followup(agent)
    agent.effects()
    assert agent.fire("converge") == "converge.continue"
    assert agent.effects() == ["open_holder()"]
    assert agent.fire("claim") == "claim.turn"


def test_when_idle_does_not_resolve_if_an_idle_listener_queues_work(agent: TableDriver) -> None:
    running(agent)
    agent.fire("retire", end="completed")
    agent.on("publish_status", lambda d, e: followup(d))
    agent.effects()
    agent.fire("converge")
    assert agent.effects() == ["publish_status(idle)", "enqueue(next_turn)", "schedule_driver()"]


def test_maintenance_latches_wakes_and_replays_them(agent: TableDriver) -> None:
    assert agent.fire("maintenance_start") == "maintenance.start"
    assert followup(agent) == "send.latched"
    assert agent.fire("maintenance_finish") == "maintenance.finish.replay"
    assert agent.fire("start") == "start.turn"


def test_disposal_aborts_with_disposed_and_never_latches(agent: TableDriver) -> None:
    running(agent)
    agent.on("abort_holder", lambda d, e: followup(d))
    assert agent.fire("dispose") == "dispose.turn"
    assert agent.effects() == [
        "abort_holder(disposed)",
        "enqueue(next_turn)",
        "publish_disposing()",
    ]
    assert (agent["latch"], agent["pending"]) == (False, True)
    assert agent.fire("retire", end="completed") == "retire.disposed"
    assert agent.fire("converge") == "converge.disposing"
    assert agent.fire("dispose_finish") == "dispose.finish"
    with pytest.raises(Rejected, match=r"^the agent is disposed; it accepts no more messages$"):
        followup(agent)


@pytest.mark.parametrize("first", ["cancel", "dispose"])
def test_cancel_versus_dispose_ends_disposed_and_quiescent(agent: TableDriver, first: str) -> None:
    running(agent)
    if first == "cancel":
        agent.fire("cancel", cause="user", keep_inbox=False)
        assert agent.fire("dispose") == "dispose.converging"
        assert agent["reason"] == "user", "the first cause keeps the signal reason"
    else:
        agent.fire("dispose")
        assert agent.fire("cancel", cause="user", keep_inbox=False) == "cancel.noop"
        assert agent["reason"] == "disposed"
    agent.effects()
    agent.fire("retire", end="completed")
    assert "publish_turn_end(disposed)" in agent.effects()
    agent.fire("converge")
    agent.fire("dispose_finish")
    assert agent["phase"] == "disposed"
    assert agent.machine.holds("quiescent", agent.state)


def test_disposal_cancels_a_scheduled_driver(agent: TableDriver) -> None:
    followup(agent)
    assert agent.fire("dispose") == "dispose.idle"
    with pytest.raises(
        NotEnabled, match=r"^agent: no row of dispose_finish\(\) is enabled in disposing\{"
    ):
        agent.fire("dispose_finish")
    assert agent.fire("start") == "start.disposing"
    assert agent.effects()[-1] == "settle_idle()"
    assert agent.fire("dispose_finish") == "dispose.finish"


def test_driver_events_outside_a_driver_are_refused(agent: TableDriver) -> None:
    with pytest.raises(Rejected, match=r"^no driver owns the agent$"):
        agent.fire("claim")
    with pytest.raises(
        NotEnabled,
        match=(
            r"^agent: no row of start\(\) is enabled in idle\{holder=none, reason=none, "
            r"turn=false, pending=false, latch=false, marker=false, scheduled=false, "
            r"closing=false\}$"
        ),
    ):
        agent.fire("start")


def test_maintenance_needs_an_idle_agent_with_no_driver(agent: TableDriver) -> None:
    followup(agent)
    with pytest.raises(Rejected, match=r"^a driver is scheduled; maintenance needs an idle agent"):
        agent.fire("maintenance_start")
