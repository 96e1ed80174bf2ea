"""Seed 004's teardown, decided by specs/activation.toml alone, read from the conformance
vectors (specs/vectors/activation.jsonl; see tests/test_agent_table.py for how)."""

from __future__ import annotations

import pytest

from fsm_core.table import load_spec
from tests.table_driver import Story, VectorFile

VECTORS = VectorFile.read(load_spec().machines["activation"])


def story(name: str) -> Story:
    return VECTORS.story(name)


def test_dispose_cancels_self_then_disposes_children() -> None:
    s = story("dispose_cancels_self_then_disposes_children")
    assert s.rows[2] == "dispose.begin"
    assert s.effects(2) == [
        "close_inbox()",
        "cancel_agent(parent)",
        "dispose_children(true, false)",
    ]


def test_dispose_is_memoized() -> None:
    s = story("dispose_is_memoized")
    assert s.rows == ["dispose.begin", "dispose.memoized"]
    assert s.effects(1) == []
    assert s.after(1)["flushed"] is False, "the first caller's finalStateFlushed stands"


def test_parent_awaits_own_idle_only_after_every_child_settled() -> None:
    s = story("parent_awaits_own_idle_only_after_every_child_settled")
    kind, message = s.refusal(3)
    assert kind == "rejected"
    assert message.startswith("finishDisposal awaits its agent's idle only after")
    assert s.rows[6:] == ["children.joined", "idle.flush", "flush.done"]


def test_convergence_runs_six_steps_in_order_and_throws_last() -> None:
    s = story("convergence_runs_six_steps_in_order_and_throws_last")
    assert s.rows[-1] == "ledger.converge"
    assert s.effects(len(s.steps) - 1) == [
        "leave_registry()",
        "release_slot()",
        "notify_parent(true)",
        "release_ownership()",
        "settle(true)",
        "rethrow()",
    ]


def test_natural_end_skips_the_final_flush() -> None:
    s = story("natural_end_skips_the_final_flush")
    assert s.rows[2] == "idle.already_flushed"
    assert s.effects(2)[-2:] == ["capture()", "dispose_handle()"]


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("ready", "ready"),
        ("retry_when_not_current", "retry"),
        ("retry_when_busy", "retry"),
        ("wait_for_pending_work", "wait"),
        ("wait_for_children", "wait"),
    ],
)
def test_settlement_watcher_verdicts(name: str, verdict: str) -> None:
    s = story(f"settlement_watcher_{name}")
    last = len(s.steps) - 1
    assert s.steps[last]["call"]["event"] == "watch"
    assert s.effects(last)[0] == f"verdict({verdict})"


def test_watcher_after_close_stops() -> None:
    s = story("watcher_after_close_stops")
    assert s.effects(1) == ["verdict(closed)"]


def test_drain_refuses_admission_explicitly() -> None:
    s = story("drain_refuses_admission_explicitly")
    assert s.refusal(1) == (
        "rejected",
        "DRAINING: continuable subagents below this parent are draining",
    )
    root = story("registry_drain_requests_disposal")
    assert root.effects(0) == ["request_dispose(true)"]


def test_drain_children_checks_lineage() -> None:
    s = story("drain_children_checks_lineage")
    assert s.refusal(0) == ("rejected", "the named parent does not own this activation")
    assert s.rows[1] == "drain_child"
