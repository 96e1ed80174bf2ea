"""Property parts and their scopes: a tree's ``always`` properties are conjunctions of parts, each
declaring the positions it reads, and the compiled engine, at a notification inside a step from a
state that breaks nothing, rechecks only the parts whose scope the step changed.

A scope that leaves out a position its part reads would let a property broken mid-step pass
unseen: every part is audited against its scope in every reachable state of the default trees,
and a mis-declared scope is shown to be caught, by the audit and by the differential test.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from fsm_core._paths import models_dir
from fsm_core.check import Model, check, load_model
from fsm_core.check._composed import _tree
from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._composed._search import Tracked
from fsm_core.check._property import (
    Conjunction,
    Part,
    Property,
    Reading,
    ask,
    unscoped_reads,
)
from fsm_core.check._system import compose
from tests.helpers import copy_specs, reachable, reached, shipped_models
from tests.test_compiled import SAMPLE, agree

TREES = [
    m
    for m in shipped_models()
    if m.kind == "activation-tree" and m.tier == "default" and m.name != "activation_three_levels"
]


def parts_of(p: Property) -> tuple[Part, ...]:
    """The parts of ``p``'s predicate, if it is a conjunction."""
    return p.predicate.parts if isinstance(p.predicate, Conjunction) else ()


@pytest.mark.parametrize("model", TREES, ids=lambda m: m.name)
def test_every_part_reads_only_its_scope_in_every_reachable_state(model: Model) -> None:
    c = compose(model)
    assert isinstance(c, CompiledEngine)
    states = reached(model.name)  # shared with test_symmetry's canonicaliser test
    parts = [(p.name, part) for p in c.properties() for part in parts_of(p)]
    assert parts, "a tree's always properties are split into parts"
    for state in states:
        for name, part in parts:
            assert not unscoped_reads(part, state), (name, part[0], state)


CLOSES_AGAIN = (
    'do = ["children := not last", "failure := failure or failed", "notice_agent(false)"]',
    'do = ["children := not last", "failure := failure or failed", "notice_agent(false)", '
    '"close_inbox()"]',
)
"""Row ``child.settled.joining`` made to close the joining parent again: the child's step that
notifies it breaks ``teardown_runs_once``, which the child's next notification sees."""


def closes_again(tmp_path: Path) -> Model:
    """activation_tree over a copy of the specs whose joining parent closes again."""
    copy_specs(tmp_path)
    shutil.copytree(models_dir(), tmp_path / "models")
    table = tmp_path / "specs" / "activation.toml"
    old, new = CLOSES_AGAIN
    assert table.read_text().count(old) == 1
    table.write_text(table.read_text().replace(old, new))
    return load_model(tmp_path / "models" / "activation_tree.toml")


def test_a_property_broken_mid_step_stops_the_scoped_step(tmp_path: Path) -> None:
    """The double close is seen at the child's next notification, inside its step, by the
    scoped engine as by the interpreted one."""
    model = closes_again(tmp_path)
    assert agree(model, SAMPLE) > 0
    violation = check(model).violation
    assert violation is not None and violation.name == _tree.TEARDOWN_ONCE


def test_a_part_that_reads_outside_its_scope_is_caught(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``teardown_runs_once`` declared as if its parts read nothing: the step that closes the
    parent twice is no longer stopped at the notification that sees it, as the interpreted
    engine stops it, and the audit finds the counter read outside the scope."""

    def unscoped(ghost: int) -> Part:
        return (), lambda s, _: bool(s[ghost] <= 1)

    monkeypatch.setattr(_tree, "_at_most_once", unscoped)
    model = closes_again(tmp_path)
    with pytest.raises(AssertionError):
        agree(model, SAMPLE)
    c, states = reachable(model)
    (once,) = [p for p in c.properties() if p.name == _tree.TEARDOWN_ONCE]
    assert any(unscoped_reads(part, s) for part in parts_of(once) for s in states)


def _vacant(value: object) -> bool:
    return value is None


def test_a_plain_reading_reads_the_position_a_test_asks_of() -> None:
    reading = Reading(("active", None))
    assert ask(reading, 1, _vacant)
    assert reading.read == {1}
    assert not ask(("active", None), 0, _vacant)


def test_a_scoped_search_keeps_the_answer_of_a_test_of_a_position_it_did_not_read() -> None:
    """Only the answer is kept, so the search serves every state that answers the same; a
    position the search read (or wrote) is read as usual, its value deciding the test."""
    tests: list[Any] = []
    view = Tracked(["active", ("settled",), None], {0}, set(), tests)
    assert not ask(view, 1, _vacant)
    assert tests == [(1, _vacant, False)]
    assert view.read == {0}
    assert not ask(view, 0, _vacant)
    assert tests == [(1, _vacant, False)]
