"""The compiled composition is the interpreted one, made fast: state by state, both give the
same steps in the same order (the same moves, the same next states, once the compiled engine's
packed states are unpacked), and the same verdicts.

Every reachable state of every default agent and tree model is compared (an even sample of
them for the deepest, ``agent_deep`` and ``activation_three_levels``), and, for each spec
mutant, the states of its counterexample and an even sample of the states the search reached
before it. The interpreted engine is the slow reference: comparing every state of those would
cost minutes.

The explorer takes the compiled engine's steps folded by where they lead
(``_composed._compiled.CompiledEngine.grouped``); each of those searches is compared
with the search over the steps one by one: the same states, transitions, parents (so the same
shortest traces), labels taken and verdict.
"""

from __future__ import annotations

import gc
import itertools
import shutil
import weakref
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fsm_core._paths import models_dir
from fsm_core.check import Model, _system, check, load_model
from fsm_core.check import _explore as explore_module
from fsm_core.check._composed import _compiled as compiled_module
from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._composed._compose import Composition
from fsm_core.check._explore import Result, System, explore
from fsm_core.check._moves import Move
from fsm_core.check._system import compose
from fsm_core.tools._mutants import MUTANTS, Mutant
from tests.helpers import copy_specs, shipped_models, sweep

COMPOSED = [m for m in shipped_models() if m.kind != "table" and m.tier == "default"]

SAMPLE = 40
"""How many of a mutant's reached states are compared, besides its counterexample's."""

DEEP = {"agent_deep": 300, "activation_three_levels": 1500}
"""How many states of the deepest default models are compared."""


def steps(c: Composition, state: Any) -> list[tuple[Move, tuple[Any, ...]]]:
    """The steps from ``state``, as moves and unpacked states."""
    return [(c.moves[label], c.unpack(nxt)) for label, nxt in c.steps(state)]


def folds(c: CompiledEngine, state: Any) -> bool:
    """True iff the grouped steps from ``state`` are its steps folded: to each next state the
    first step there, in order, with how many steps there are and every step's label."""
    every = c.steps(state)
    firsts, count, labels = c.grouped(state)
    return (
        count == len(every)
        and sorted(label for group in labels for label in group) == sorted(s for s, _ in every)
        and set(firsts) <= set(every)
        and first_to_each(firsts) == first_to_each(every)
    )


def first_to_each(steps: list[tuple[int, Any]]) -> list[tuple[Any, int]]:
    """The first step's label to each next state, in order."""
    first: dict[Any, int] = {}
    for label, nxt in steps:
        first.setdefault(nxt, label)
    return list(first.items())


def searched(result: Result[Any]) -> tuple[Any, ...]:
    """Everything a search found, but its time."""
    return (
        result.states, result.transitions, result.depth, result.complete, result.violation,
        result.labels_taken, result.parent,
    )  # fmt: skip


def agree(model: Model, sample: int | None = None) -> int:
    """Explore ``model`` compiled and compare both engines on the states reached (``sample``
    of them, evenly spread in search order, plus the counterexample's; None: all of them).
    Returns how many states were compared."""
    compiled, interpreted = compose(model), compose(model, interpreted=True)
    assert isinstance(compiled, CompiledEngine)
    system = System(
        model.name, compiled.initial(), compiled.steps, compiled.moves,
        compiled.first_violated, compiled.quiescent, "deadlock", compiled.unpack,
    )  # fmt: skip
    result = explore(system)
    folded = explore(replace(system, grouped=compiled.grouped))
    assert searched(folded) == searched(result)
    reached = list(result.parent)
    chosen = reached if sample is None else reached[:: max(1, len(reached) // sample)]
    if result.violation is not None:
        # The trace is unpacked: pack it back (packing a state the engine made finds its number).
        chosen += [compiled.pack(state) for _, state in result.violation.trace]
    assert compiled.unpack(compiled.initial()) == interpreted.initial()
    for packed in chosen:
        state = compiled.unpack(packed)
        broken = interpreted.first_violated(state)
        assert compiled.first_violated(packed) == broken, state
        assert compiled.quiescent(packed) == interpreted.quiescent(state), state
        if broken is None:  # the explorer asks for no step of a state that breaks a property
            assert steps(compiled, packed) == steps(interpreted, state), state
            assert folds(compiled, packed), state
    return len(chosen)


@pytest.mark.parametrize(
    "model", sweep(COMPOSED, lambda m: m.name, fast={"activation_three_levels"})
)
def test_compiled_steps_equal_interpreted_steps_in_every_reachable_state(model: Model) -> None:
    assert model.expect is not None
    sample = DEEP.get(model.name)
    compared = agree(model, sample)
    assert compared == model.expect.states if sample is None else compared >= sample


@pytest.mark.parametrize(
    "mutant",
    sweep(
        [m for m in MUTANTS if not m.load_killed],
        lambda m: m.name,
        fast={"last_wins_cause", "close_never_cancels_agent"},
    ),
)
def test_compiled_steps_equal_interpreted_steps_on_a_spec_mutant(
    mutant: Mutant, tmp_path: Path
) -> None:
    copy_specs(tmp_path)
    shutil.copytree(models_dir(), tmp_path / "models")
    mutant.plant(tmp_path / "specs")
    for name in mutant.models:
        assert agree(load_model(tmp_path / "models" / f"{name}.toml"), SAMPLE) > 0


def test_a_report_keeps_no_engine_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's memo (every step of every state without budgets) is a check's largest
    structure: once the check is reported, nothing holds it."""
    engines: list[weakref.ref[Composition]] = []

    def recorded(model: Model, *, interpreted: bool = False) -> Composition:
        c = compose(model, interpreted=interpreted)
        engines.append(weakref.ref(c))
        return c

    monkeypatch.setattr(_system, "compose", recorded)
    model = next(m for m in COMPOSED if m.name == "agent_races")
    report = check(model)
    gc.collect()
    assert report.verdict == "ok"
    assert len(engines) == 1
    assert engines[0]() is None


def test_an_agent_check_reports_progress_every_1024_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress is reported per state searched, however many steps each has: with a clock
    that moves two seconds a reading, every 1,024th state reports. (agent_races: 2,830 states
    of 113 steps each, where a report per 1,024 steps would make 313.)"""
    ticks = itertools.count(step=2.0)
    monkeypatch.setattr(explore_module, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    seen: list[int] = []
    model = next(m for m in COMPOSED if m.name == "agent_races")
    report = check(model, progress=lambda states, *_: seen.append(states))
    assert (report.result.states, report.result.transitions) == (2_830, 320_600)
    assert len(seen) == 2_830 // 1024


def test_a_bounded_notice_cache_changes_no_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The answers kept for what listeners observe are bounded; past the bound they are
    computed again, the same."""
    monkeypatch.setattr(compiled_module, "NOTICED", 100)
    model = next(m for m in COMPOSED if m.name == "agent_races")
    c = compose(model)
    assert isinstance(c, CompiledEngine) and model.expect is not None
    system = System(
        model.name, c.initial(), c.steps, c.moves, c.first_violated, c.quiescent, "deadlock",
        c.unpack, c.grouped,
    )  # fmt: skip
    result = explore(system)
    assert (result.states, result.transitions) == (model.expect.states, model.expect.transitions)
    assert len(c._noticed) == 100
