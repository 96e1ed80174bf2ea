"""The composition engine's parts: the state layout, every reportable property a record, how
a tree step that a property stops is folded into one move, and how a tree is wired to the
registry's door.

The tree traces come from spec mutants made here, on a private copy of ``specs/`` (the
catalogue in ``fsm_core.tools._mutants`` pins kills, not these texts).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm_core._paths import models_dir
from fsm_core.check import Model, Report, check, load_model
from fsm_core.check._composed._compose import Engine, Layout
from fsm_core.check._composed._tree import DOOR, NO_ACTIVE_AFTER_DRAIN, NOTICE_DELIVERED
from fsm_core.check._explore import System, explore
from fsm_core.check._moves import Move
from fsm_core.check._report import format_trace
from fsm_core.check._system import build, compose, declared
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import edit, shipped_models, write_model

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


@pytest.mark.parametrize("model", shipped_models(), ids=lambda m: m.name)
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
door = "../specs/admission.toml"
wiring = "../specs/wiring.toml"

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
    "a.by_drain=false a.1=absent door.registry=admitting budget.admit=1 budget.dispose=1 "
    "budget.drain=0 budget.drain_child=0 "
    "budget.failures=0 ghost.closes.a=0 ghost.closes.a.1=0 ghost.notices.a=0 "
    "ghost.notices.a.1=0 ghost.broken=\n"
    "1. door.admit(parent=activation) for a -> admit.below   changed: a.children false->true, "
    "a.1 absent->active{children=false, flushed=false, natural=false, failure=false, "
    "draining=none, resident=true, slot=true, announced=false, owned=true, by_drain=false}, "
    "budget.admit 1->0\n"
    "   inside admit_below(): a.admit() -> admit\n"
    "2. a.dispose(final_state_flushed=false, drain=false) -> dispose.begin   changed: a.stage "
    "active->joining, a.1.stage active->joining, budget.dispose 1->0, ghost.closes.a "
    "0->1, ghost.closes.a.1 0->1\n"
    "   inside dispose_children(true, false): a.1.dispose(final_state_flushed=false, "
    "drain=false) -> "
    "dispose.begin\n"
    "3. a.1.children_joined() -> children.joined   changed: a.1.stage "
    "joining->awaiting_idle\n"
    "4. a.1.agent_idle() -> idle.flush   changed: a.1.stage awaiting_idle->flushing\n"
    "5. a.1.final_flushed() -> flush.done   changed: a.1.stage flushing->releasing, "
    "a.1.flushed false->true\n"
)
"""The first five steps both tree traces below share: admit a child (the door hands the
admission on to the root's own row), dispose the root, and take the child through its teardown
up to its ledger's convergence."""


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
        "   inside release_ownership(): door.release(parent=activation) -> release.remember\n"
        "violated: teardown_runs_once (a node's memoized close ran twice) in state 6, at "
        "settle(false) inside step 6: a.stage=joining a.children=false a.flushed=false "
        "a.natural=false a.failure=false a.draining=none a.resident=true a.slot=true "
        "a.announced=false a.owned=true a.by_drain=false a.1.stage=settled a.1.children=false "
        "a.1.flushed=true a.1.natural=false a.1.failure=false"
        " a.1.draining=none a.1.resident=false a.1.slot=false a.1.announced=true "
        "a.1.owned=false a.1.by_drain=false door.registry=admitting budget.admit=0 "
        "budget.dispose=0 budget.drain=0 "
        "budget.drain_child=0 "
        "budget.failures=0 ghost.closes.a=2 ghost.closes.a.1=1 ghost.notices.a=0 "
        "ghost.notices.a.1=1 ghost.broken=\n"
        "clauses: S004.memoized-close, S004.one-quiescence (specs/clauses.toml)\n"
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
        "a.resident=true a.slot=true a.announced=false a.owned=true a.by_drain=false "
        "a.1.stage=settled a.1.children=false a.1.flushed=true a.1.natural=false "
        "a.1.failure=false a.1.draining=none a.1.resident=false a.1.slot=false "
        "a.1.announced=true a.1.owned=true a.1.by_drain=false door.registry=admitting "
        "budget.admit=0 budget.dispose=0 "
        "budget.drain=0 budget.drain_child=0 budget.failures=0 ghost.closes.a=1 "
        "ghost.closes.a.1=1 ghost.notices.a=0 ghost.notices.a.1=1 "
        "ghost.broken=settlement_notice_delivered\n"
        "clauses: S004.notify-by-name, S004.step-3-notify-parent (specs/clauses.toml)\n"
    )


# --- the registry's door beside the tree ---------------------------------------------------------


@pytest.fixture(scope="module")
def tree_moves() -> list[Move]:
    """Every move the default ``activation_tree`` check took (its search's: the liveness pass
    after it takes no row)."""
    report = check(load_model(models_dir() / "activation_tree.toml"), liveness=False)
    assert report.verdict == "ok"
    return [report.moves[label] for label in sorted(report.result.labels_taken)]


def nested(moves: list[Move]) -> list[Move]:
    """``moves`` and every call made inside them, depth first."""
    out: list[Move] = []
    for move in moves:
        out.append(move)
        out += nested([m for _, m in move.inside])
    return out


def test_a_registry_drain_is_the_doors_and_reaches_only_the_root(tree_moves: list[Move]) -> None:
    """No node is offered a drain: the door's ``drain()`` fires ``drain(scope=registry)`` on
    the root inside ``drain_roots()``, and a drain below an activation is the door's too."""
    assert [m.call() for m in tree_moves if m.event == "drain" and m.instance != DOOR] == []
    registry = [m for m in nested(tree_moves) if m.args == (("scope", "registry"),)]
    assert registry and {m.instance for m in registry} == {"a"}
    drains = [m for m in tree_moves if m.instance == DOOR and m.event == "drain"]
    assert {m.row for m in drains} == {"drain"}
    assert {(e, m.call()) for m in drains for e, m in m.inside} == {
        ("drain_roots()", "a.drain(scope=registry)")
    }
    below = {m.call() for m in tree_moves if m.event == "drain_below"}
    assert below == {
        "door.drain_below(parent=host)",
        "door.drain_below(parent=activation) for a",
        "door.drain_below(parent=activation) for a.1",
        "door.drain_below(parent=activation) for a.2",
    }


def test_the_host_parent_disposes_the_root_and_hears_its_settlement(
    tree_moves: list[Move],
) -> None:
    host = [m for m in tree_moves if m.call() == "door.drain_below(parent=host)"]
    assert {(e, m.call()) for h in host for e, m in h.inside} == {
        ("dispose_roots(true)", "a.dispose(final_state_flushed=false, drain=true)")
    }
    notices = {
        (effect, m.call(), m.row)
        for move in nested(tree_moves)
        if move.instance == "a"
        for effect, m in move.inside
        if m.instance == DOOR
    }
    assert notices == {
        ("notify_parent(false)", "door.root_settled(parent=host)", "root_settled"),
        ("notify_parent(true)", "door.root_settled(parent=host)", "root_settled"),
        ("release_ownership()", "door.release(parent=host)", "release.remember"),
        # The root's subagent/settled listeners may drain the registry (no parent in the tree).
        ("settle(false)", "door.drain()", "drain"),
        ("settle(true)", "door.drain()", "drain"),
        ("settle(false)", "door.drain_below(parent=host)", "drain_below.host"),
        ("settle(true)", "door.drain_below(parent=host)", "drain_below.host"),
    }


def test_a_settled_childs_listeners_reach_its_parent_and_the_door_never_the_child(
    tree_moves: list[Move],
) -> None:
    """Step 5's listeners (``settle``, the runtime's ``subagent/settled``) call other
    instances: a child's dispose its parent, admit a sibling and drain below the parent through
    the door, and drain the registry or below the host parent; the root's, whose parent is the
    host's, only drain.
    Nothing a listener calls lands on the node that settled (a.2 is the second admission: no
    admission is left to make inside its settlement)."""
    calls = {
        (move.instance, m.call(), m.row)
        for move in nested(tree_moves)
        for effect, m in move.inside
        if effect.startswith("settle(")
    }
    below = {
        ("a.dispose(final_state_flushed=false, drain=false)", "dispose.begin"),
        ("a.dispose(final_state_flushed=false, drain=false)", "dispose.memoized"),
        ("door.drain()", "drain"),
        ("door.drain_below(parent=activation) for a", "drain_below.activation"),
        ("door.drain_below(parent=host)", "drain_below.host"),
    }
    assert calls == {
        ("a", "door.drain()", "drain"),
        ("a", "door.drain_below(parent=host)", "drain_below.host"),
        ("a.1", "door.admit(parent=activation) for a", "admit.below"),
        *(("a.1", *call) for call in below),
        *(("a.2", *call) for call in below),
    }


def test_an_admission_goes_through_the_door_and_one_the_node_refuses_is_no_step(
    tree_moves: list[Move],
) -> None:
    """The door hands an admission below node n on to n's own ``admit`` row; when n refuses
    (it is closing, or a drain closed admission below it) the whole call is refused, as the
    runtime raises it: no move admits through the door without the node's row admitting.
    (Only the root has child slots in this tree.)"""
    admits = [m for m in tree_moves if m.event == "admit"]
    assert {m.target for m in admits} == {"a"}
    assert all(m.instance == DOOR and m.row == "admit.below" for m in admits)
    assert {(e, m.instance == a.target, m.row) for a in admits for e, m in a.inside} == {
        ("admit_below()", True, "admit")
    }


def test_a_delivery_says_drained_exactly_when_the_door_is_drained() -> None:
    """``deliver`` is offered with ``drained`` the door's state; a drained door leaves no node
    active, so a delivery that says drained is always refused (DRAINING) and never a step."""
    model = load_model(models_dir() / "activation_chain.toml")
    c = compose(model)
    assert isinstance(c, Engine)
    system = System(
        model.name, c.initial(), c.steps, c.moves, c.first_violated, c.quiescent, "deadlock"
    )
    result = explore(system)
    assert result.violation is None
    door, nodes = c.layout[DOOR], range(len(c.wiring.instances) - 1)
    doors = set()
    for packed in result.parent:
        state = c.unpack(packed)
        drained = state[door] == ("drained",)
        doors.add(drained)
        for i in nodes:
            if state[i] is not None:
                offered = [d for d in (False, True) if c.wiring.offers(state, i, "deliver", (d,))]
                assert offered == [drained]
        for label, _ in c.steps(packed):
            move = c.moves[label]
            if move.event == "deliver":
                assert move.args == (("drained", False),), (move, state)
    assert doors == {False, True}


def test_a_drain_that_tears_nothing_down_is_shown_behind_the_drained_door(tmp_path: Path) -> None:
    """A door whose drain only closes admission (its teardown deleted): the first step drains
    the door while the root stays active, and the trace says so in the door's own slot."""
    path = write_model(
        tmp_path, "tree", TREE.replace("drain = 0", "drain = 1").replace("admit = 1", "admit = 0")
    )
    BY_NAME["drain_closes_door_only"].plant(tmp_path / "specs")
    report = check(load_model(path))
    assert report.violation is not None
    assert report.violation.name == NO_ACTIVE_AFTER_DRAIN
    lines = format_trace(report).splitlines()
    assert lines[1] == (
        "1. door.drain() -> drain   changed: door.registry admitting->drained, budget.drain 1->0"
    )
    assert lines[2].startswith(
        f"violated: {NO_ACTIVE_AFTER_DRAIN} (the door is drained while an admitted node is "
        "still active (a delivery would reach it with drained=true)) in state 1: a.stage=active "
    )
    assert " door.registry=drained " in lines[2]


def test_a_door_that_drops_the_roots_notice_breaks_settlement_notice_delivered(
    tmp_path: Path,
) -> None:
    """The root's settlement notice reaches its host parent through the door: a door that
    takes it only for a disposing parent refuses it, at the root's ``notify_parent``."""
    path = write_model(tmp_path, "tree", TREE)
    BY_NAME["root_notice_refused"].plant(tmp_path / "specs")
    report = check(load_model(path))
    assert report.violation is not None
    assert report.violation.name == NOTICE_DELIVERED
    lines = format_trace(report).splitlines()
    assert lines[-3].startswith(
        "4. a.handle_disposed(failed=false) -> ledger.converge (stopped at notify_parent(false))"
    )
    assert lines[-2].startswith(
        "violated: settlement_notice_delivered (a parent refused its child's settlement notice) "
        "in state 4, at notify_parent(false) inside step 4: a.stage=settled "
    )
