"""The compiled engine's memo of steps, bounded by level (``CompiledEngine.level_done``), finds
what the unbounded memo finds: the same states in the same order, the same parents and labels,
transitions, depth, verdicts and shortest traces.

The bound only starts past ``CompiledEngine.memo_keys`` keys, which no default model reaches:
here it is 0, so the memo is cut after every level of every search.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fsm_core._paths import models_dir
from fsm_core.check import Model, check, load_model
from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._explore import Visited, explore
from fsm_core.check._system import build
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import copy_specs


def _found(model: Model) -> tuple[Any, ...]:
    """Everything a check of ``model`` reports, and the order its search met states in."""
    report = check(model)
    visited = report.result.parent
    assert isinstance(visited, Visited)
    violation = report.violation
    return (
        list(visited.items()),
        report.result.transitions,
        report.result.depth,
        report.result.labels_taken,
        report.verdict,
        report.unreduced_states,
        None if violation is None else (violation.name, violation.trace),
    )


def _alike(model: Model, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    unbounded = _found(model)
    monkeypatch.setattr(CompiledEngine, "memo_keys", 0)
    bounded = _found(model)
    assert bounded == unbounded
    return bounded


@pytest.mark.parametrize("name", ["agent_races", "activation_chain"])
def test_a_memo_cut_at_every_level_searches_as_the_whole_memo_does(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = load_model(models_dir() / f"{name}.toml")
    visited, transitions, depth, _, verdict, *_ = _alike(model, monkeypatch)
    assert model.expect is not None
    assert (len(visited), transitions, depth, verdict) == (
        model.expect.states, model.expect.transitions, model.expect.depth, "ok",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mutant", "name", "broken"),
    [
        ("last_wins_cause", "agent_races", "reason_first_wins"),
        ("settlement_notice_dropped", "activation_chain", "quiescence_reachable"),
    ],
)
def test_a_memo_cut_at_every_level_finds_the_same_counterexample(
    mutant: str, name: str, broken: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = copy_specs(tmp_path)
    BY_NAME[mutant].plant(specs)
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / f"{name}.toml"
    path.write_text((models_dir() / f"{name}.toml").read_text(encoding="utf-8"), encoding="utf-8")
    *_, violation = _alike(load_model(path), monkeypatch)
    assert violation is not None and violation[0] == broken and len(violation[1]) > 1


def test_a_cut_memo_holds_only_the_last_two_levels_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the bound is for: past it, the memo keeps the steps of recent levels only."""
    built = build(load_model(models_dir() / "activation_chain.toml"))
    engine = built.composition
    assert isinstance(engine, CompiledEngine)
    seen: list[set[int]] = []
    done = engine.level_done

    def level_done(states: Any) -> None:
        seen.append({s // engine._codes for s in states})
        done(states)

    monkeypatch.setattr(CompiledEngine, "memo_keys", 0)
    result = explore(replace(built.system, level_done=level_done))
    held = {k for k, calls in enumerate(engine._calls_of) if calls is not None}
    assert result.complete and len(seen) == result.depth + 1
    assert held <= seen[-1] | seen[-2]
    assert len(held) < len(engine._calls_of) / 10
