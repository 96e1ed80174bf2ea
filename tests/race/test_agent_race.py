"""The agent's race search, and seed 000's named races as fixed programs of the same rules.

``TestAgentRaces`` runs :class:`~tests.race.agent.AgentRaceMachine` under the loaded Hypothesis
profile (``ci`` by default: derandomized, 100 examples). Its budget is ``STEPS`` rules per
example; under ``ci`` the whole search takes about 5 seconds on one core, so CI's run stays
well under a minute on 2 cores. ``deep`` (5000 examples, random) is for nightly or local
exploration: ``scripts/test --hypothesis-profile=deep tests/race``.

The named races below are short programs of the machine's own rules, written as Hypothesis
prints a failing run, so the random search can reach each of them too: seed 000's races, then a
steer racing a step boundary (what ``steering_rest_counts_itself`` needs to die). Each runs with
``check_each_step=True``: every invariant is checked after every step, then the test asserts
what the race is about.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import settings

from tests.helpers import core_of
from tests.race.agent import AgentRaceMachine

STEPS = 100
"""Rules per generated program. With ``restart`` after a disposal, one program lives through
several agents; 100 x the profile's examples keeps ``ci`` to a few seconds."""

TestAgentRaces = AgentRaceMachine.TestCase
TestAgentRaces.settings = settings(stateful_step_count=STEPS, deadline=None)
# The search's length is the profile's to choose (``deep`` runs for minutes); a hang cannot
# outlast a rule anyway, since the bridge bounds every rule's loop iterations.
TestAgentRaces.pytestmark = [pytest.mark.timeout(0)]  # type: ignore[attr-defined]

# A watchdog for the named races, not a clock.
pytestmark = pytest.mark.timeout(60)


@contextmanager
def race() -> Iterator[AgentRaceMachine]:
    """A race machine that checks every invariant after each step, torn down afterwards."""
    state = AgentRaceMachine(check_each_step=True)
    try:
        yield state
        state.check()
    finally:
        state.teardown()


def phase(state: AgentRaceMachine) -> str:
    return state.agent.phase


def names(state: AgentRaceMachine) -> list[str]:
    return [name for name, _ in state.seen]


def of(state: AgentRaceMachine, name: str) -> list[Any]:
    return [payload for seen, payload in state.seen if seen == name]


def statuses(state: AgentRaceMachine) -> list[str]:
    return [p.status for p in of(state, "agent/status")]


def discarded(state: AgentRaceMachine) -> list[str]:
    return [p.message.id for p in of(state, "inbox/discarded")]


def claimed(state: AgentRaceMachine) -> list[list[str]]:
    return [[m.id for m in p.messages] for p in of(state, "inbox/claimed")]


def outcomes(state: AgentRaceMachine) -> list[str]:
    return [p.outcome["kind"] for p in of(state, "turn/end")]


def causes(state: AgentRaceMachine) -> list[str]:
    """The cause of each agent/cancel-requested, as it was when published."""
    return [kind for _, kind in state.cancel_notices]


def test_idle_cancel_emits_nothing_and_arms_nothing() -> None:
    with race() as state:
        state.cancel(cause="user", keep_inbox=False, mutate=False)
        state.cancel(cause="parent", keep_inbox=True, mutate=False)
        assert state.seen == []
        assert state.oracle.rows == ["cancel.noop", "cancel.noop"]

        state.followup()  # runs normally: the idle cancels armed nothing
        assert statuses(state) == ["running", "idle"]
        assert outcomes(state) == ["completed"]
        assert not state.turn_signals[1].aborted


@pytest.mark.parametrize("replacement", [True, False], ids=["replacement", "no-replacement"])
def test_pre_run_cancel_with_a_waiter_opens_no_turn_until_the_replacement(
    replacement: bool,
) -> None:
    with race() as state:
        # One loop iteration: a when_idle() waiter, two followups, a cancel, a replacement.
        state.prerun(sends=2, cause="user", keep_inbox=False, replacement=replacement, waiter=True)
        assert discarded(state) == ["m1", "m2"]
        assert "cancel.prerun" in state.oracle.rows
        if replacement:
            assert claimed(state) == [["m3"]]
            assert statuses(state) == ["running", "idle"]
            assert outcomes(state) == ["completed"]
        else:
            assert "agent/status" not in names(state)  # no turn, no status (DESIGN.md 1)
            assert claimed(state) == []
        # The waiter resolved once, quiescent, after the replacement's turn (if any) ended.
        ((snapshot, turns_ended),) = state.idle_seen
        assert state.spec.holds("quiescent", snapshot)
        assert turns_ended == (1 if replacement else 0)


def test_a_replacement_submitted_from_a_running_listener_gets_a_fresh_holder() -> None:
    with race() as state:
        state.on_running_cancel(cause="user", replace=True)
        state.followup()
        assert discarded(state) == ["m1"]
        assert claimed(state) == [["m2"]]
        assert "claim.replacement" in state.oracle.rows
        # DESIGN.md decision 3: no idle between the aborted holder and the replacement.
        assert statuses(state) == ["running", "idle"]
        assert outcomes(state) == ["completed"]
        assert not state.turn_signals[1].aborted


def test_repeated_cancel_is_first_wins_though_the_caller_mutates_its_cause() -> None:
    with race() as state:
        state.arm(seam="model", mode="ignore")
        state.followup()
        state.cancel(cause="user", keep_inbox=False, mutate=True)  # then the caller edits it
        state.followup()  # queued after the abort: latched
        state.cancel(cause="parent", keep_inbox=False, mutate=True)
        signal = state.turn_signals[1]
        assert signal.reason is not None and signal.reason.kind == "user"
        assert causes(state) == ["user", "parent"]
        assert discarded(state) == ["m2"]

        state.open_gate(pick=0, fail=False)
        assert outcomes(state) == ["aborted"]
        assert statuses(state) == ["running", "idle"]
        assert signal.reason.kind == "user"


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-first", "dispose-first"])
def test_cancel_versus_dispose_with_an_uncooperative_seam_reaches_quiescence(
    cancel_first: bool,
) -> None:
    with race() as state:
        state.arm(seam="model", mode="ignore")
        state.followup()
        if cancel_first:
            state.cancel(cause="user", keep_inbox=False, mutate=False)
            state.dispose(then_followup=False)
        else:
            state.dispose(then_followup=False)
            state.cancel(cause="user", keep_inbox=False, mutate=False)
        # The seam ignores the signal: the turn is still inside the model, disposal waits.
        assert phase(state) == "cancelling"
        assert [h.seam for h in state.held] == ["model"]

        state.open_gate(pick=0, fail=False)
        assert phase(state) == "disposed"
        assert state.spec.holds("quiescent", core_of(state.agent).control.snapshot())
        # DESIGN.md decision 6: disposal beats the cause that won the signal's reason.
        assert outcomes(state) == ["disposed"]
        signal = state.turn_signals[1]
        assert signal.reason is not None
        assert signal.reason.kind == ("user" if cancel_first else "disposed")
        # A cancel after disposal aborted the holder has nothing to abort: it emits nothing.
        assert causes(state) == (["user"] if cancel_first else [])
        assert statuses(state) == ["running", "idle"]


def test_a_steer_racing_the_step_boundary_is_taken_by_that_step() -> None:
    with race() as state:
        state.on_pre_step_steer()  # steers as step 1 begins, after the turn claimed m1
        state.followup()
        durable = [
            (e.data["turn"], list(e.data["ids"]))  # type: ignore[arg-type]
            for e in state.agent.session.events
            if e.type == "inbox/claimed"
        ]
        assert durable == [(1, ["m1"]), (1, ["m2"])]
        assert "take_steering" in state.oracle.rows
        # Taken with nothing left: the wake the steer latched opens no second turn.
        assert not state.agent.inbox.pending
        assert statuses(state) == ["running", "idle"]
        assert outcomes(state) == ["completed"]
