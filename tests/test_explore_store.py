"""The explorer's store of visited states (:class:`~fsm_core.check._explore.Visited`, states
numbered as met with their parents and labels in arrays, the liveness graph as compressed sparse
rows) finds what a dict of parent pointers and a dict of lists of edges found: the same states in
the same order, the same parents and labels, counts, depth, verdict, shortest trace and stuck
states. The reference below is the explorer as it was before the store, kept here as the oracle.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from fsm_core._paths import models_dir
from fsm_core.check import Model, check, load_model
from fsm_core.check._explore import (
    FREEZE_FROM,
    System,
    Visited,
    explore,
    paused_gc,
    trace_to,
    unreachable_quiescence,
)
from fsm_core.check._system import build
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import copy_specs

Found = tuple[int, int, int, bool, str | None, tuple[Any, ...], dict[Any, Any], list[Any]]
"""What the reference search found: states, transitions, depth, whether it finished, the
property broken and its trace, the parent pointers, and the states that never settle."""


def reference(system: System[Any], max_states: int | None = None) -> Found:
    """Breadth-first search with a dict of (parent, label) and a dict of lists of edges."""
    parent: dict[Any, tuple[Any, int] | None] = {system.initial: None}
    graph: dict[Any, list[Any]] = {}
    transitions = depth = 0
    frontier = [system.initial]
    while frontier:
        following: list[Any] = []
        for s in frontier:
            bad = system.first_violated(s)
            nexts: Sequence[tuple[int, Any]] = ()
            if bad is None:
                if system.grouped is None:
                    nexts = system.successors(s)
                    transitions += len(nexts)
                else:
                    nexts, pairs, _ = system.grouped(s)
                    transitions += pairs
                if not nexts and not system.quiescent(s):
                    bad = system.deadlock
            if bad is not None:
                trace = trace_to(parent, s, system.unpack)
                return len(parent), transitions, depth, False, bad, trace, parent, []
            graph[s] = [t for _, t in nexts]
            for label, t in nexts:
                if t not in parent:
                    parent[t] = (s, label)
                    following.append(t)
            if max_states is not None and len(parent) > max_states:
                return len(parent), transitions, depth, False, None, (), parent, []
        if following:
            depth += 1
        frontier = following
    return len(parent), transitions, depth, True, None, (), parent, stuck(graph, system)


def stuck(graph: dict[Any, list[Any]], system: System[Any]) -> list[Any]:
    """The states no quiescent state is reachable from, by a backward search over dicts."""
    reverse: dict[Any, list[Any]] = {s: [] for s in graph}
    for s, nexts in graph.items():
        for t in nexts:
            reverse[t].append(s)
    seen = {s for s in reverse if system.quiescent(s)}
    todo = list(seen)
    while todo:
        for p in reverse[todo.pop()]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return [s for s in graph if s not in seen]


def found(system: System[Any], max_states: int | None = None) -> Found:
    """What :func:`explore` finds, in the reference's terms."""
    r = explore(system, keep_graph=True, max_states=max_states)
    assert isinstance(r.parent, Visited)
    v = r.violation
    unsettled: list[Any] = []
    if r.complete and v is None:
        assert r.graph is not None
        unsettled = unreachable_quiescence(r.graph, r.parent, system.quiescent)
    return (
        r.states, r.transitions, r.depth, r.complete, None if v is None else v.name,
        () if v is None else v.trace, dict(r.parent.items()), unsettled,
    )  # fmt: skip


def agree(system: System[Any], max_states: int | None = None) -> Found:
    """Search ``system`` both ways, hold them equal (the parents in the same order), return it."""
    mine, theirs = found(system, max_states), reference(system, max_states)
    assert mine[:6] == theirs[:6]
    assert list(mine[6].items()) == list(theirs[6].items())
    assert mine[7] == theirs[7]
    return mine


def _model(name: str, root: Path | None = None) -> Model:
    return load_model((models_dir() if root is None else root / "models") / f"{name}.toml")


def _planted(tmp_path: Path, mutant: str, model: str) -> Model:
    """``model`` loaded beside a copy of the tables with ``mutant``'s bug planted."""
    specs = copy_specs(tmp_path)
    BY_NAME[mutant].plant(specs)
    models = tmp_path / "models"
    models.mkdir()
    (models / f"{model}.toml").write_text(
        (models_dir() / f"{model}.toml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    return load_model(models / f"{model}.toml")


@pytest.mark.parametrize(
    "name", ["window", "admission", "bench_S", "agent_races", "activation_chain"]
)
def test_default_models_search_as_the_dict_store_did(name: str) -> None:
    model = _model(name)
    states, transitions, depth, complete, *_ = agree(build(model).system)
    assert model.expect is not None
    assert (states, transitions, depth, complete) == (
        model.expect.states, model.expect.transitions, model.expect.depth, True,
    )  # fmt: skip


def test_a_sibling_reduced_tree_searches_as_the_dict_store_did() -> None:
    built = build(dataclasses.replace(_model("activation_tree"), symmetry=True))
    states, *_ = agree(built.system)
    assert states < 30489  # the orbits: fewer than the tree's unreduced states


def test_a_search_cut_by_max_states_stops_where_the_dict_store_did() -> None:
    states, _, depth, complete, *_ = agree(build(_model("activation_chain")).system, 500)
    assert states > 500 and not complete and depth > 0


def test_an_invariant_broken_has_the_trace_the_dict_store_found(tmp_path: Path) -> None:
    model = _planted(tmp_path, "last_wins_cause", "agent_races")
    *_, name, trace, _, _ = agree(build(model).system)
    assert name == "reason_first_wins" and len(trace) > 1
    report = check(model)
    assert report.violation is not None and report.violation.trace == trace


def test_states_that_never_settle_are_the_ones_the_dict_graph_found(tmp_path: Path) -> None:
    """On the three-generation chain (6,830 states with the mutant, 1,322 of them unsettled):
    which states settle is a walk back over the graph, whatever the tree's shape, and the
    two-child activation_tree only made the same walk over four times the states."""
    model = _planted(tmp_path, "settlement_notice_dropped", "activation_chain")
    system = build(model).system
    *_, parent, unsettled = agree(system)  # the parents agree() found in the explorer's store
    assert unsettled
    report = check(model)
    assert report.violation is not None and report.violation.name == "quiescence_reachable"
    assert report.violation.trace == trace_to(parent, unsettled[0], system.unpack)


def _line(edges: Iterable[tuple[int, int, int]], quiet: set[int]) -> System[int]:
    """A hand-made system: ``edges`` as (from, label, to), state 0 initial."""
    out: dict[int, list[tuple[int, int]]] = {}
    for a, label, b in edges:
        out.setdefault(a, []).append((label, b))
    return System(
        "line", 0, lambda s: out.get(s, []), ["a", "b", "c", "d"], lambda s: None,
        lambda s: s in quiet, "deadlock",
    )  # fmt: skip


def test_a_cycle_that_never_settles_is_found_behind_a_state_that_can() -> None:
    # 0 -> 1 -> 2 -> 1 (a cycle), 0 -> 3 (quiescent, no successor): 1 and 2 never settle.
    system = _line([(0, 0, 1), (0, 1, 3), (1, 2, 2), (2, 3, 1)], {3})
    *_, parent, unsettled = agree(system)
    assert unsettled == [1, 2]
    assert parent == {0: None, 1: (0, 0), 3: (0, 1), 2: (1, 2)}


def test_a_deadlock_two_steps_in_has_its_shortest_trace() -> None:
    system = _line([(0, 0, 1), (0, 1, 2), (1, 2, 3), (2, 3, 3)], set())
    *_, name, trace, _, _ = agree(system)
    assert (name, trace) == ("deadlock", ((None, 0), (0, 1), (2, 3)))


def test_a_search_leaves_what_its_caller_froze_frozen_and_freezes_nothing_of_its_own() -> None:
    """paused_gc thawed every frozen object as it ended, the caller's too (a test session's
    frozen collection was scanned again by every later collection); then it froze what each
    block left for good, where the caller had frozen anything, and asked how many objects were
    frozen (a walk over all of them) at every block, every level of a partitioned search."""
    kept = [[n] for n in range(1000)]
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with paused_gc():
            made = [[n] for n in range(FREEZE_FROM)]
        assert gc.get_freeze_count() == before
    finally:
        gc.unfreeze()
    assert kept and made


def test_what_a_large_search_left_joins_the_oldest_generation_unscanned() -> None:
    assert not gc.get_freeze_count()
    with paused_gc():
        made = [[n] for n in range(FREEZE_FROM)]
    assert not gc.get_freeze_count()
    assert gc.get_count()[0] < FREEZE_FROM // 10  # no longer young: a collection skips them
    assert made
