"""The composition engine's parts: the state layout, every reportable property a record, and
how a tree step that a property stops is folded into one move.

The tree traces come from spec mutants made here, on a private copy of ``specs/`` (the
catalogue in ``fsm_core.tools._mutants`` pins kills, not these texts).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm_core._paths import models_dir
from fsm_core.check import Model, Report, check, load_model, load_models
from fsm_core.check._composed._compose import Layout
from fsm_core.check._composed._tree import NOTICE_DELIVERED
from fsm_core.check._report import format_trace
from fsm_core.check._system import build, declared
from tests.helpers import edit, write_model

# --- layout ---------------------------------------------------------------------------------------


def test_a_layout_finds_each_position_by_its_name() -> None:
    layout = Layout(["a", "a.1", "budget.admit", "ghost.broken"])
    assert layout.names == ("a", "a.1", "budget.admit", "ghost.broken")
    assert [layout[n] for n in layout.names] == [0, 1, 2, 3]
    assert layout.get("budget.admit") == 2
    assert layout.get("budget.dispose") is None
    with pytest.raises(KeyError):
        layout["budget.dispose"]


def test_a_layout_refuses_a_name_given_twice() -> None:
    with pytest.raises(ValueError, match="a layout names a position twice"):
        Layout(["a", "ghost.broken", "a"])


# --- property records -----------------------------------------------------------------------------


@pytest.mark.parametrize("model", load_models(models_dir()), ids=lambda m: m.name)
def test_every_model_names_each_property_once_and_declares_what_it_checks(model: Model) -> None:
    """The loader validates ``[expect] property`` against :func:`declared`, which for a table
    model skips compiling the successors: it must name what the check itself reports."""
    properties = build(model).properties
    assert len({p.name for p in properties}) == len(properties)
    assert [p.name for p in declared(model)] == [p.name for p in properties]
    kinds = [p.kind for p in properties]
    assert kinds.count("deadlock-free") == kinds.count("eventually") == 1


# --- tree mutants ---------------------------------------------------------------------------------

TREE = """\
[model]
table = "../specs/activation.toml"
kind = "activation-tree"

[tree]
depth = 1
width = 1

[environment]
budgets = { admit = 1, dispose = 1, drain = 0, drain_child = 0 }
"""


def tree_report(tmp_path: Path, old: str, new: str) -> Report:
    """Check a one-child tree over a copy of activation.toml with ``old`` replaced by ``new``."""
    path = write_model(tmp_path, "tree", TREE)
    edit(tmp_path / "specs" / "activation.toml", old, new)
    return check(load_model(path))


SETTLED_JOINING = (
    'do = ["children := not last", "failure := failure or failed", "notice_agent(false)"]'
)
"""The body of row ``child.settled.joining``: a joining parent takes its child's notice."""


TO_RELEASING = (
    "0. initial: a.stage=active a.children=false a.flushed=false a.natural=false "
    "a.failure=false a.draining=none a.resident=true a.slot=true a.announced=false a.owned=true "
    "a.1=absent budget.admit=1 budget.dispose=1 budget.drain=0 budget.drain_child=0 "
    "budget.failures=0 ghost.closes.a=0 ghost.closes.a.1=0 ghost.notices.a=0 "
    "ghost.notices.a.1=0 ghost.broken=\n"
    "1. a.admit() -> admit   changed: a.children false->true, a.1 "
    "absent->active{children=false, flushed=false, natural=false, failure=false, "
    "draining=none, resident=true, slot=true, announced=false, owned=true}, budget.admit 1->0\n"
    "2. a.dispose(final_state_flushed=false) -> dispose.begin   changed: a.stage "
    "active->joining, a.1.stage active->joining, budget.dispose 1->0, ghost.closes.a "
    "0->1, ghost.closes.a.1 0->1\n"
    "   inside dispose_children(true): a.1.dispose(final_state_flushed=false) -> "
    "dispose.begin\n"
    "3. a.1.children_joined() -> children.joined   changed: a.1.stage "
    "joining->awaiting_idle\n"
    "4. a.1.agent_idle() -> idle.flush   changed: a.1.stage awaiting_idle->flushing\n"
    "5. a.1.final_flushed() -> flush.done   changed: a.1.stage flushing->releasing, "
    "a.1.flushed false->true\n"
)
"""The first five steps both tree traces below share: admit a child, dispose the root, and
take the child through its teardown up to its ledger's convergence."""


def test_a_tree_step_stopped_inside_shows_its_row_the_calls_inside_and_where_it_stopped(
    tmp_path: Path,
) -> None:
    """The joining parent closes again when its child's notice arrives: the close count breaks
    ``teardown_runs_once``, which the child's next notification (``settle``) sees, so the
    child's step stops there with the parent's row folded inside its ``notify_parent``."""
    report = tree_report(
        tmp_path,
        SETTLED_JOINING,
        'do = ["children := not last", "failure := failure or failed", "notice_agent(false)", '
        '"close_inbox()"]',
    )
    assert format_trace(report) == TO_RELEASING + (
        "6. a.1.handle_disposed(failed=false) -> ledger.converge (stopped at settle(false))"
        "   changed: a.children true->false, a.1.stage releasing->settled, a.1.resident "
        "true->false, a.1.slot true->false, a.1.announced false->true, a.1.owned true->false,"
        " ghost.closes.a 1->2, ghost.notices.a.1 0->1\n"
        "   inside notify_parent(false): a.child_settled(failed=false, last=true) -> "
        "child.settled.joining\n"
        "violated: teardown_runs_once (a node's memoized close ran twice) in state 6, at "
        "settle(false) inside step 6: a.stage=joining a.children=false a.flushed=false "
        "a.natural=false a.failure=false a.draining=none a.resident=true a.slot=true "
        "a.announced=false a.owned=true a.1.stage=settled a.1.children=false a.1.flushed=true "
        "a.1.natural=false a.1.failure=false"
        " a.1.draining=none a.1.resident=false a.1.slot=false a.1.announced=true "
        "a.1.owned=false budget.admit=0 budget.dispose=0 budget.drain=0 budget.drain_child=0 "
        "budget.failures=0 ghost.closes.a=2 ghost.closes.a.1=1 ghost.notices.a=0 "
        "ghost.notices.a.1=1 ghost.broken=\n"
    )


def test_a_refused_settlement_notice_breaks_settlement_notice_delivered(tmp_path: Path) -> None:
    """A joining parent that refuses its child's notice: the child's step stops at the
    ``notify_parent`` whose wired ``child_settled`` was refused, and the ghost records it."""
    report = tree_report(tmp_path, SETTLED_JOINING, 'reject = "the notice is refused"')
    assert report.violation is not None
    assert report.violation.name == NOTICE_DELIVERED
    assert format_trace(report) == TO_RELEASING + (
        "6. a.1.handle_disposed(failed=false) -> ledger.converge (stopped at "
        "notify_parent(false))   changed: a.1.stage releasing->settled, a.1.resident "
        "true->false, a.1.slot true->false, a.1.announced false->true, ghost.notices.a.1 "
        "0->1, ghost.broken ->settlement_notice_delivered\n"
        "violated: settlement_notice_delivered (a parent refused its child's settlement "
        "notice) in state 6, at notify_parent(false) inside step 6: a.stage=joining "
        "a.children=true a.flushed=false a.natural=false a.failure=false a.draining=none "
        "a.resident=true a.slot=true a.announced=false a.owned=true a.1.stage=settled "
        "a.1.children=false a.1.flushed=true a.1.natural=false a.1.failure=false "
        "a.1.draining=none a.1.resident=false a.1.slot=false a.1.announced=true a.1.owned=true "
        "budget.admit=0 budget.dispose=0 "
        "budget.drain=0 budget.drain_child=0 budget.failures=0 ghost.closes.a=1 "
        "ghost.closes.a.1=1 ghost.notices.a=0 ghost.notices.a.1=1 "
        "ghost.broken=settlement_notice_delivered\n"
    )
