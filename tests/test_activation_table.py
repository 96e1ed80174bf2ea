"""Seed 004's teardown, decided by specs/activation.toml alone."""

from __future__ import annotations

import pytest

from fsm_core import Rejected
from fsm_core.table import load_spec
from tests.table_driver import TableDriver


@pytest.fixture
def activation() -> TableDriver:
    return TableDriver(load_spec().machines["activation"])


def with_children(d: TableDriver, n: int) -> TableDriver:
    for _ in range(n):
        d.fire("admit")
    d.effects()
    return d


def test_dispose_cancels_self_then_disposes_children(activation: TableDriver) -> None:
    with_children(activation, 2)
    assert activation.fire("dispose", final_state_flushed=False) == "dispose.begin"
    assert activation.effects() == [
        "close_inbox()",
        "cancel_agent(parent)",
        "dispose_children()",
    ]


def test_dispose_is_memoized(activation: TableDriver) -> None:
    activation.fire("dispose", final_state_flushed=False)
    activation.effects()
    assert activation.fire("dispose", final_state_flushed=True) is None
    assert activation.effects() == []
    assert activation["flushed"] is False, "the first caller's finalStateFlushed stands"


def test_parent_awaits_own_idle_only_after_every_child_settled(activation: TableDriver) -> None:
    with_children(activation, 2)
    activation.fire("dispose", final_state_flushed=False)
    with pytest.raises(Rejected, match=r"^finishDisposal awaits its agent's idle only after"):
        activation.fire("agent_idle")
    activation.fire("child_settled", failed=False, last=False)
    activation.fire("child_settled", failed=False, last=True)
    assert activation.fire("children_joined") == "children.joined"
    assert activation.fire("agent_idle") == "idle.flush"
    assert activation.fire("final_flushed") == "flush.done"


def test_convergence_runs_six_steps_in_order_and_throws_last(activation: TableDriver) -> None:
    with_children(activation, 2)
    activation.fire("dispose", final_state_flushed=False)
    activation.fire("child_settled", failed=True, last=False)
    activation.fire("child_settled", failed=False, last=True)
    activation.fire("children_joined")
    activation.fire("agent_idle")
    activation.fire("final_flushed")
    activation.effects()
    assert activation.fire("handle_disposed", failed=False) == "ledger.converge"
    assert activation.effects() == [
        "leave_registry()",
        "release_slot()",
        "notify_parent(true)",
        "release_ownership()",
        "settle(true)",
        "rethrow()",
    ]


def test_natural_end_skips_the_final_flush(activation: TableDriver) -> None:
    activation.fire("dispose", final_state_flushed=True)
    activation.fire("children_joined")
    assert activation.fire("agent_idle") == "idle.already_flushed"
    assert activation.effects()[-2:] == ["capture()", "dispose_handle()"]


@pytest.mark.parametrize(
    ("current", "busy", "pending", "children", "verdict"),
    [
        (True, False, False, 0, "ready"),
        (False, False, False, 0, "retry"),
        (True, True, False, 0, "retry"),
        (True, False, True, 0, "wait"),
        (True, False, False, 1, "wait"),
    ],
)
def test_settlement_watcher_verdicts(
    activation: TableDriver, current: bool, busy: bool, pending: bool, children: int, verdict: str
) -> None:
    with_children(activation, children)
    activation.fire("watch", current=current, busy=busy, pending=pending)
    assert activation.effects()[0] == f"verdict({verdict})"


def test_watcher_after_close_stops(activation: TableDriver) -> None:
    activation.fire("dispose", final_state_flushed=False)
    activation.effects()
    activation.fire("watch", current=True, busy=False, pending=False)
    assert activation.effects() == ["verdict(closed)"]


def test_drain_refuses_admission_explicitly(activation: TableDriver) -> None:
    activation.fire("drain", scope="descendants")
    with pytest.raises(
        Rejected, match=r"^DRAINING: continuable subagents below this parent are draining$"
    ):
        activation.fire("admit")
    root = TableDriver(activation.machine)
    root.fire("drain", scope="registry")
    assert root.effects() == ["request_dispose()"]


def test_drain_children_checks_lineage(activation: TableDriver) -> None:
    with pytest.raises(Rejected, match=r"^the named parent does not own this activation$"):
        activation.fire("drain_child", lineage=False)
    assert activation.fire("drain_child", lineage=True) == "drain_child"
