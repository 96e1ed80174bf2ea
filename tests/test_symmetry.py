"""Symmetry between siblings (``[tree] symmetry``): the search over sibling orbits finds what
the unreduced search finds, and every counterexample it prints is a real run.

The proof the reduction rests on is here: on every reachable state of the default trees, every
sibling permutation has the same verdict and successors in the same orbits
(:func:`~fsm_core.check._composed._symmetry.orbit_faults`), and the representatives' orbits add
up to the unreduced count. Then the reduced search gives the same verdict, depth and shortest
counterexample length, on the default trees and on the spec mutants that break a tree.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fsm_core import SpecError, UsageError
from fsm_core._paths import models_dir
from fsm_core.check import Model, check, load_model
from fsm_core.check._check import Report
from fsm_core.check._composed._compose import Engine
from fsm_core.check._composed._symmetry import Reduction, Siblings, orbit_faults
from fsm_core.check._composed._tree import TreeWiring
from fsm_core.check._explore import System, explore
from fsm_core.check._parallel import Source
from fsm_core.check._partition import check_partitioned
from fsm_core.check._system import build, compose
from fsm_core.tools._mutants import MUTANTS, Mutant, _copy_tables
from tests.helpers import exactly, reached, sweep, write_model

TREES = ("activation_tree", "activation_three_levels", "activation_chain", "agent_tree")
"""The default tree models."""


def _model(name: str, *, symmetry: bool) -> Model:
    return dataclasses.replace(load_model(models_dir() / f"{name}.toml"), symmetry=symmetry)


def _shown(report: Report) -> tuple[object, ...]:
    """What both searches must agree on."""
    v = report.violation
    trace = None if v is None else len(v.trace)
    return report.verdict, report.result.depth, v and v.name, trace, report.dead_rows


PROVEN = ("activation_tree", "activation_three_levels", "agent_tree_pair")
"""The trees proven state by state: the width-2 trees, and the smallest agent tree with
siblings (agent_tree_pair, 2.5 to 4 minutes of a core: slow)."""

ON_DEMAND = tuple(
    name.strip()
    for name in os.environ.get("FSM_CORE_PROVE_SYMMETRY", "").split(",")
    if name.strip()
)
"""More models to prove, named on demand (README, How the checker composes): a bench-tier
tree takes the reduced search's time and about as much again."""


PROOF_TIMEOUT = {"agent_tree_pair": 1800, **dict.fromkeys(ON_DEMAND, 0)}
"""Seconds of wall time a proof may take beyond the suite's 300 (0: no limit): the agent tree's
takes minutes of a core, more on a busy machine; one asked for on demand as long as it takes."""


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            p.values[0], id=p.id, marks=[*p.marks, pytest.mark.timeout(PROOF_TIMEOUT[p.id])]
        )
        if p.id in PROOF_TIMEOUT
        else p
        for p in sweep(dict.fromkeys(PROVEN + ON_DEMAND), str, fast={"activation_three_levels"})
    ],
)
def test_every_sibling_permutation_of_a_representative_is_a_symmetry(name: str) -> None:
    """The proof, on the representatives the reduced search reaches (every orbit it meets,
    all its members tried). A model that records its unreduced figures has its orbits add up
    to its states; one searched over orbits has the reduced search reach its states."""
    model = load_model(models_dir() / f"{name}.toml")
    assert model.expect is not None
    built = build(dataclasses.replace(model, symmetry=True))
    reduction = built.reduction
    assert reduction is not None
    result = explore(built.system)
    assert result.complete
    assert list(orbit_faults(reduction, result.parent)) == []
    if model.symmetry:
        assert result.states == model.expect.states
    else:
        assert sum(map(reduction.orbit_size, result.parent)) == model.expect.states
    # Permutations were tried: some orbit has two members.
    assert any(reduction.orbit_size(s) > 1 for s in result.parent)


def _first_slot_ahead() -> tuple[Reduction, Any, Any, Callable[[Any], bool]]:
    """activation_tree's reduction, the first 3,000 representatives its reduced search
    reaches, its engine, and a test of a stored state that reads the slots' order (a.1 ahead
    of a.2): what no symmetry may depend on."""
    built = build(_model("activation_tree", symmetry=True))
    reduction = built.reduction
    assert reduction is not None
    reps = explore(built.system, max_states=3000).parent
    engine: Any = reduction.engine
    slot = {x: i for i, x in enumerate(engine.layout.names)}

    def ahead(state: Any) -> bool:
        full = engine.unpack(state)
        one, two = full[slot["a.1"]], full[slot["a.2"]]
        return two is not None and repr(one) < repr(two)

    return reduction, reps, engine, ahead


def test_a_verdict_that_reads_a_slot_is_no_symmetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof can fail: a property that holds of a.1 but not of a.2 is found out."""
    reduction, reps, engine, ahead = _first_slot_ahead()
    fair = engine.first_violated

    def unfair(state: Any) -> str | None:
        return "first_slot_ahead" if ahead(state) else fair(state)

    monkeypatch.setattr(engine, "first_violated", unfair)
    fault = next(orbit_faults(reduction, reps))
    assert fault.startswith("verdict of ")


def test_a_step_whose_rows_read_a_slot_is_no_symmetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proof compares what steps take, not only where they lead: a step relabelled (the
    same successor, another row) only where a.1 is ahead of a.2 is found out. Before the labels
    were compared, the untaken rows a reduced search reports rested on the argument alone."""
    reduction, reps, engine, ahead = _first_slot_ahead()
    fair = engine.steps
    first = engine.moves[0].row
    other = next(i for i, m in enumerate(engine.moves) if m.row != first)

    def unfair(state: Any) -> list[tuple[int, Any]]:
        steps = list(fair(state))
        if ahead(state):
            return [(0 if label == other else other, t) for label, t in steps]
        return steps

    monkeypatch.setattr(engine, "steps", unfair)
    fault = next(orbit_faults(reduction, reps))
    assert fault.startswith("steps of "), fault
    assert fault.endswith(" by orbit or by what they take"), fault


@pytest.mark.parametrize("name", sweep(TREES, str, fast={"activation_chain"}))
def test_the_reduced_search_finds_what_the_unreduced_one_finds(name: str) -> None:
    whole = check(_model(name, symmetry=False))
    reduced = check(_model(name, symmetry=True))
    assert _shown(reduced) == _shown(whole)
    assert whole.unreduced_states is None
    assert reduced.unreduced_states == whole.result.states
    if _model(name, symmetry=False).width >= 2:
        assert reduced.result.states < whole.result.states
    else:
        assert reduced.result.states == whole.result.states


def _replays(report: Report) -> None:
    """``report``'s counterexample, as printed, runs step by step in the interpreted,
    unreduced engine, through the same states, to a state breaking the same property."""
    assert report.violation is not None
    unreduced = dataclasses.replace(report.model, symmetry=False)
    built = build(unreduced, interpreted=True)
    system = built.system
    unpack = system.unpack
    assert unpack is not None
    (_, state), *steps = report.violation.trace
    assert unpack(system.initial) == state
    at = system.initial
    for label, shown in steps:
        assert label is not None
        move = report.moves[label]
        nexts = [t for k, t in system.successors(at) if built.moves[k] == move]
        matching = [t for t in nexts if unpack(t) == shown]
        assert matching, f"no step {move} reaches the printed state"
        at = matching[0]
    broken = system.first_violated(at)
    if broken is not None:
        assert broken == report.violation.name
    elif system.successors(at):  # no quiescent state is reachable from the last one
        kind = {p.name: p.kind for p in report.properties}[report.violation.name]
        assert kind == "eventually"
        assert not any(map(system.quiescent, _reachable(system, at)))
    else:
        assert not system.quiescent(at)


def _reachable(system: System[Any], start: Any) -> set[Any]:
    seen = {start}
    stack = [start]
    while stack:
        for _, t in system.successors(stack.pop()):
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return seen


TREE_MUTANTS = [
    m
    for m in MUTANTS
    if m.table in ("activation.toml", "admission.toml", "wiring.toml") and not m.load_killed
]


@pytest.mark.parametrize(
    "mutant",
    sweep(
        TREE_MUTANTS,
        lambda m: m.name,
        fast={"teardown_clears_inbox", "door_swallows_admit_refusal"},
    ),
)
def test_a_mutant_breaks_the_same_property_as_soon_in_the_reduced_search(
    tmp_path: Path, mutant: Mutant
) -> None:
    _copy_tables(tmp_path, None)
    mutant.plant(tmp_path / "specs")
    for name in mutant.models:
        try:
            model = load_model(tmp_path / "models" / f"{name}.toml")
        except SpecError:
            return  # a load kill: nothing to search
        whole = check(dataclasses.replace(model, symmetry=False))
        reduced = check(dataclasses.replace(model, symmetry=True))
        assert _shown(reduced) == _shown(whole)
        if whole.violation is not None:
            _replays(reduced)
            return  # the first model that kills it, as fsm-core mutants --spec checks
    pytest.fail(f"{mutant.name} survives: no violation to compare")


AGENT_TREE_KILLS = {
    "parent_leaves_before_children", "dispose_not_memoized", "handle_disposed_before_final_flush",
    "drain_closes_door_only", "root_notice_refused", "teardown_leaves_children",
    "close_never_cancels_agent", "teardown_disposes_itself", "notice_to_itself",
    "door_swallows_admit_refusal", "teardown_clears_inbox",
}  # fmt: skip
"""The tree mutants agent_tree_pair kills within its first 60,000 orbits (the others it kills
deeper, or not at all: release_keeps_agent leaves it whole)."""

AGENT_TREE_MUTANTS = [m for m in TREE_MUTANTS if m.name in AGENT_TREE_KILLS]
assert {m.name for m in AGENT_TREE_MUTANTS} == AGENT_TREE_KILLS


@pytest.mark.slow
@pytest.mark.parametrize("mutant", AGENT_TREE_MUTANTS, ids=lambda m: m.name)
def test_a_mutant_breaks_an_agent_tree_as_soon_in_the_reduced_search(
    tmp_path: Path, mutant: Mutant
) -> None:
    """The same on agent_tree_pair, the agent tree with siblings, for the tree mutants it kills
    soon (one it kills deeper or not at all costs both searches of up to 464,668 states)."""
    _copy_tables(tmp_path, None)
    mutant.plant(tmp_path / "specs")
    model = load_model(tmp_path / "models" / "agent_tree_pair.toml")
    whole = check(dataclasses.replace(model, symmetry=False))
    reduced = check(dataclasses.replace(model, symmetry=True))
    assert whole.violation is not None
    assert _shown(reduced) == _shown(whole)
    _replays(reduced)


def test_a_tree_model_takes_symmetry_as_a_boolean(tmp_path: Path) -> None:
    body = (
        '[model]\ntable = "../specs/activation.toml"\nkind = "activation-tree"\n\n'
        '[tree]\ndepth = 1\nwidth = 2\ndoor = "../specs/admission.toml"\n'
        'wiring = "../specs/wiring.toml"\nsymmetry = "yes"\n\n'
        "[environment]\nbudgets = { admit = 1, dispose = 1 }\n"
    )
    path = write_model(tmp_path, "m", body)
    with pytest.raises(
        SpecError,
        match=exactly("models/m.toml:10: [tree]: symmetry must be true or false, not 'yes'"),
    ):
        load_model(path)
    path.write_text(body.replace('"yes"', "true"), encoding="utf-8")
    assert load_model(path).symmetry


def test_siblings_move_with_their_subtrees_agents_and_ghosts() -> None:
    model = _model("agent_tree_three", symmetry=True)
    wiring = TreeWiring(model)
    siblings = Siblings(wiring)
    node = {x: i for i, x in enumerate(wiring.layout.names)}
    s = list(wiring.initial())
    active = tuple(model.machine.initial)
    agent = tuple(model.agent.initial) if model.agent else None
    # a.1 admitted with a child a.1.1 that notified it once; a.2 admitted alone. A lone child
    # sorts before one with children, so a.2 takes the first slot and a.1's subtree the second.
    for x in ("a.1", "a.2", "a.1.1"):
        s[node[x]] = active
        s[node[f"{x}:agent"]] = agent
    s[node["ghost.notices.a.1.1"]] = 1
    s[node["ghost.broken"]] = "some_invariant@a.1.1:agent"
    state = tuple(s)
    canon = siblings.canonical(state)
    assert canon[node["a.2.1"]] == active
    assert canon[node["a.2.1:agent"]] == agent
    assert canon[node["ghost.notices.a.2.1"]] == 1
    assert canon[node["a.1.1"]] is None
    assert canon[node["a.1.1:agent"]] is None
    assert canon[node["ghost.notices.a.1.1"]] == 0
    assert canon[node["ghost.broken"]] == "some_invariant@a.2.1:agent"
    assert siblings.canonical(canon) == canon
    assert {siblings.canonical(p) for p in siblings.permuted(state)} == {canon}
    assert siblings.orbit_size(state) == 2


def test_every_process_picks_the_same_representative() -> None:
    """A partitioned search's shards canonicalise apart: the representative of a state must
    not depend on the order a process met the others (it did once, by numbering slots as met)."""
    e = compose(_model("activation_tree", symmetry=False))
    assert isinstance(e, Engine) and isinstance(e.wiring, TreeWiring)
    states = reached("activation_tree")  # every state, shared with test_property_scopes
    one, other = Siblings(e.wiring), Siblings(e.wiring)
    forward = [one.canonical(s) for s in states]
    backward = [other.canonical(s) for s in reversed(states)][::-1]
    assert len(set(forward)) < len(states)  # it does reduce
    assert forward == backward


def test_a_search_over_orbits_is_not_partitioned() -> None:
    model = _model("activation_tree", symmetry=True)
    with pytest.raises(UsageError, match=r"^activation_tree: a search over sibling orbits"):
        check_partitioned(model, Source(Path(model.file)), 2)
