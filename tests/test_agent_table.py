"""Seed 000's races, decided by specs/agent.toml alone, read from the conformance vectors.

Each story of ``fsm_core/tools/_stories.py`` is a sequence of events (listeners re-enter
inside notifications, as the runtime's do); ``fsm-core vectors`` runs it on the interpreter and
writes each step to specs/vectors/agent.jsonl with its row, its effects in order, the state
every notification showed and the state it left. These tests read those vectors and pin what
each story shows, so the vectors a port replays are the ones these tests check, and
``tests/test_vectors.py`` proves the file is what the tables do now.
"""

from __future__ import annotations

import pytest

from fsm_core.table import Machine, load_spec
from fsm_core.table._expr import Value
from tests.table_driver import Story, VectorFile

AGENT = load_spec().machines["agent"]
VECTORS = VectorFile.read(AGENT)


def story(name: str) -> Story:
    return VECTORS.story(name)


def quiescent(state: dict[str, Value]) -> bool:
    return AGENT.holds("quiescent", tuple(state[n] for n in AGENT.names))


def test_machine_is_exported_for_introspection() -> None:
    agent = load_spec().machines["agent"]
    assert isinstance(agent, Machine)
    assert agent.names[0] == "phase"
    assert agent.describe(agent.initial)["holder"] == "none"


def test_every_story_starts_from_the_initial_state_and_each_step_from_the_last() -> None:
    names = {v["story"]["name"] for v in VECTORS.vectors if "story" in v}
    assert len(names) == 26
    for name in names:
        s = story(name)
        assert s.before(0) == AGENT.describe(AGENT.initial), name
        for k in range(1, len(s.steps)):
            assert s.before(k) == s.after(k - 1), (name, k)


def test_idle_cancel_emits_nothing_and_arms_nothing() -> None:
    s = story("idle_cancel_emits_nothing_and_arms_nothing")
    assert s.rows == ["cancel.noop", "send.idle.wake", "start.turn"]
    assert s.effects(0) == []
    assert s.after(0) == s.before(0)


def test_cancel_discarding_idle_queued_work_notifies_first() -> None:
    s = story("cancel_discarding_idle_queued_work_notifies_first")
    assert s.rows[1] == "cancel.discard"
    assert s.effects(1) == ["notify_cancel_requested(user)", "clear_inbox()"]
    assert s.after(1)["marker"] is False


def test_wake_is_asynchronous() -> None:
    s = story("wake_is_asynchronous")
    assert s.rows == ["send.idle.wake"]
    assert s.effects(0) == ["enqueue(next_turn)", "schedule_driver()"]
    assert s.after(0)["phase"] == "idle"


def test_pre_run_cancel_opens_no_turn_and_publishes_no_status() -> None:
    s = story("pre_run_cancel_opens_no_turn_and_publishes_no_status")
    assert s.rows == ["send.idle.wake", "cancel.prerun", "start.skip"]
    assert s.after(1)["marker"] is True
    assert [e for k in range(3) for e in s.effects(k)] == [
        "enqueue(next_turn)",
        "schedule_driver()",
        "notify_cancel_requested(user)",
        "clear_inbox()",
        "settle_idle()",
    ]
    assert quiescent(s.after(2))


def test_replacement_queued_after_pre_run_cancel_runs() -> None:
    s = story("replacement_queued_after_pre_run_cancel_runs")
    assert s.rows[2:] == ["send.idle.wake_again", "start.turn"]
    assert s.after(2)["marker"] is False


def test_pre_run_keep_inbox_cancel_parks_until_a_later_wake() -> None:
    s = story("pre_run_keep_inbox_cancel_parks_until_a_later_wake")
    assert s.rows[2] == "start.skip"
    assert s.after(2)["pending"] is True
    assert s.after(3)["scheduled"] is False, "a non-waking send does not wake parked work"
    assert s.rows[5:] == ["start.turn", "claim.turn"]


def test_holder_is_installed_before_running_is_published() -> None:
    s = story("holder_is_installed_before_running_is_published")
    assert s.effects(1) == ["open_holder()", "publish_status(running)"]
    assert s.observed(1)[0]["holder"] == "live"


def test_replacement_from_running_listener_gets_fresh_holder_without_idle() -> None:
    s = story("replacement_from_running_listener_gets_fresh_holder_without_idle")
    assert s.rows[1:4] == ["start.turn", "claim.replacement", "claim.turn"]
    effects = [e for k in (1, 2, 3) for e in s.effects(k)]
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
    after = s.after(3)
    assert (after["holder"], after["reason"], after["latch"]) == ("live", "none", False)
    assert s.rows[4] == "take_prompt"
    assert s.effects(4) == ["claim_inbox()"]


def test_a_turn_opens_before_it_claims_one_prompt_and_the_rest_runs_next() -> None:
    """Issue 11 items 1 and 5: turn/start precedes the claim; a claim that leaves work
    pending keeps ``pending`` true, and the driver continues without publishing idle."""
    s = story("a_turn_opens_before_it_claims_one_prompt_and_the_rest_runs_next")
    assert s.rows[3] == "claim.turn"
    assert s.effects(3) == ["publish_turn_start()"]
    assert (s.after(3)["turn"], s.after(3)["pending"]) == (True, True), "the prompt is queued"
    assert s.rows[4] == "take_prompt"
    assert s.effects(4) == ["claim_inbox()"]
    assert (s.after(4)["turn"], s.after(4)["pending"]) == (True, True), "the second waits"
    assert s.rows[6] == "converge.continue"
    assert s.effects(6) == ["open_holder()"]
    assert s.rows[7:9] == ["claim.turn", "take_prompt"]
    assert (s.after(8)["turn"], s.after(8)["pending"]) == (True, False)
    assert s.rows[10] == "converge.idle"


def test_a_turn_start_observer_cancel_discards_the_unclaimed_prompt() -> None:
    s = story("a_turn_start_observer_cancel_discards_the_unclaimed_prompt")
    assert s.rows[2] == "claim.turn"
    assert s.effects(2) == [
        "publish_turn_start()",
        "notify_cancel_requested(user)",
        "clear_inbox()",
        "abort_holder(user)",
    ]
    after = s.after(2)
    assert (after["phase"], after["pending"], after["turn"]) == ("cancelling", False, True)
    # nothing to claim: the driver never asks
    assert s.refusal(3) == ("rejected", "no live turn takes queued work")
    assert s.rows[4:] == ["retire.aborted", "converge.parked"]


def test_effective_cancel_notifies_then_clears_then_aborts() -> None:
    s = story("effective_cancel_notifies_then_clears_then_aborts")
    assert s.rows[4] == "cancel.turn"
    assert s.effects(4) == [
        "notify_cancel_requested(user)",
        "clear_inbox()",
        "abort_holder(user)",
    ]
    after = s.after(4)
    assert (after["phase"], after["holder"], after["reason"]) == ("cancelling", "aborted", "user")


def test_repeated_cancel_is_first_wins_but_still_clears_new_work() -> None:
    s = story("repeated_cancel_is_first_wins_but_still_clears_new_work")
    assert s.rows[5] == "cancel.noop"
    assert s.after(6)["latch"] is True, "post-abort: latched"
    assert s.rows[7] == "cancel.discard"
    assert s.effects(7) == ["notify_cancel_requested(parent)", "clear_inbox()"]
    after = s.after(7)
    assert (after["reason"], after["latch"], after["pending"]) == ("user", False, False)


def test_cancel_from_cancel_requested_observer_wins_the_reason() -> None:
    s = story("cancel_from_cancel_requested_observer_wins_the_reason")
    effects = s.effects(4)
    assert effects.count("abort_holder(parent)") == 1
    assert "abort_holder(user)" not in effects
    assert s.after(4)["reason"] == "parent"


def test_observer_work_is_cleared_abort_observer_work_is_latched() -> None:
    s = story("observer_work_is_cleared_abort_observer_work_is_latched")
    assert s.effects(4) == [
        "notify_cancel_requested(user)",
        "enqueue(next_turn)",
        "clear_inbox()",
        "abort_holder(user)",
        "enqueue(next_turn)",
    ]
    assert (s.after(4)["latch"], s.after(4)["pending"]) == (True, True)
    assert s.rows[5:] == ["retire.aborted", "converge.replay", "start.turn"]
    assert s.effects(5) + s.effects(6) == [
        "release_holder()",
        "publish_turn_end(aborted)",
        "flush_session()",
        "publish_status(idle)",
        "schedule_driver()",
    ]


def test_keep_inbox_parks_pre_abort_work_and_replays_post_abort_wakes() -> None:
    s = story("keep_inbox_parks_pre_abort_work_and_replays_post_abort_wakes")
    assert s.rows[4] == "send.turn", "queued for the live turn: pre-abort"
    assert s.after(5)["latch"] is False
    assert s.rows[7] == "converge.parked"
    assert s.after(7)["pending"] is True
    assert s.rows[13] == "send.latched"
    assert s.rows[15] == "converge.replay"


def test_removing_the_latched_message_suppresses_its_replay() -> None:
    s = story("removing_the_latched_message_suppresses_its_replay")
    assert s.rows[6] == "remove"
    assert s.after(6)["latch"] is False
    assert s.rows[8] == "converge.parked"


def test_turn_end_observers_and_flush_have_no_cancel_authority() -> None:
    s = story("turn_end_observers_and_flush_have_no_cancel_authority")
    assert s.rows[4] == "retire.ended"
    assert "abort_holder(user)" not in s.effects(4)
    assert "publish_turn_end(completed)" in s.effects(4)
    assert "notify_cancel_requested(user)" in s.effects(4), "effective: it cuts the next turn"
    assert s.rows[5:] == ["cancel.noop", "converge.parked"]


def test_wake_during_flush_continues_without_publishing_idle() -> None:
    s = story("wake_during_flush_continues_without_publishing_idle")
    assert s.rows[6] == "converge.continue"
    assert s.effects(6) == ["open_holder()"]
    assert s.rows[7] == "claim.turn"


def test_when_idle_does_not_resolve_if_an_idle_listener_queues_work() -> None:
    s = story("when_idle_does_not_resolve_if_an_idle_listener_queues_work")
    assert s.effects(5) == ["publish_status(idle)", "enqueue(next_turn)", "schedule_driver()"]
    assert not quiescent(s.after(5))


def test_maintenance_latches_wakes_and_replays_them() -> None:
    s = story("maintenance_latches_wakes_and_replays_them")
    assert s.rows == [
        "maintenance.start",
        "send.latched",
        "maintenance.finish.replay",
        "start.turn",
    ]


def test_disposal_aborts_with_disposed_and_never_latches() -> None:
    s = story("disposal_aborts_with_disposed_and_never_latches")
    assert s.rows[4] == "dispose.turn"
    assert s.effects(4) == ["abort_holder(disposed)", "enqueue(next_turn)", "publish_disposing()"]
    assert (s.after(4)["latch"], s.after(4)["pending"]) == (False, True)
    assert s.rows[5:9] == [
        "retire.disposed",
        "converge.disposing",
        "dispose.unwind",
        "dispose.finish",
    ]
    assert s.effects(7) == ["close_session()"]
    assert s.refusal(9) == ("rejected", "the agent is disposed; it accepts no more messages")


@pytest.mark.parametrize("first", ["cancel", "dispose"])
def test_cancel_versus_dispose_ends_disposed_and_quiescent(first: str) -> None:
    second = "dispose" if first == "cancel" else "cancel"
    s = story(f"{first}_then_{second}_ends_disposed_and_quiescent")
    if first == "cancel":
        assert s.rows[5] == "dispose.converging"
        assert s.after(5)["reason"] == "user", "the first cause keeps the signal reason"
    else:
        assert s.rows[5] == "cancel.noop"
        assert s.after(5)["reason"] == "disposed"
    assert "publish_turn_end(disposed)" in s.effects(6)
    assert s.after(9)["phase"] == "disposed"
    assert quiescent(s.after(9))


def test_disposal_cancels_a_scheduled_driver() -> None:
    s = story("disposal_cancels_a_scheduled_driver")
    assert s.rows[1] == "dispose.idle"
    kind, message = s.refusal(2)
    assert kind == "not-enabled"
    assert message.startswith("agent: no row of scope_unwound() is enabled in disposing{")
    assert s.rows[3] == "start.disposing"
    assert s.effects(3)[-1] == "settle_idle()"
    assert s.rows[4:6] == ["dispose.unwind", "dispose.finish"]


def test_driver_events_outside_a_driver_are_refused() -> None:
    s = story("driver_events_outside_a_driver_are_refused")
    assert s.refusal(0) == ("rejected", "no driver owns the agent")
    assert s.refusal(1) == (
        "not-enabled",
        "agent: no row of start() is enabled in idle{holder=none, reason=none, turn=false, "
        "pending=false, latch=false, marker=false, scheduled=false, closing=false, shut=false, "
        "unwound=false}",
    )


def test_maintenance_needs_an_idle_agent_with_no_driver() -> None:
    s = story("maintenance_needs_an_idle_agent_with_no_driver")
    kind, message = s.refusal(1)
    assert kind == "rejected"
    assert message.startswith("a driver is scheduled; maintenance needs an idle agent")
