"""Every teardown mutant is killed by the subagent behaviour tests, and the unmutated registry
passes them (``tests/race/teardown_mutants.py``); the activation race machine alone kills the
mutants its newest moves were added for."""

from __future__ import annotations

import logging

import pytest

from tests.race.runtime_mutants import RuntimeMutant
from tests.race.teardown_mutants import (
    BY_NAME,
    RACE_KILLED,
    TEARDOWN_MUTANTS,
    killer_tests,
    kills,
    race_kills,
)

TESTS = killer_tests()


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="fsm_core.runtime")


@pytest.mark.slow  # the subagent tests once per mutant: the kill table, in CI's slow stage
@pytest.mark.timeout(120)
@pytest.mark.parametrize("mutant", TEARDOWN_MUTANTS, ids=[m.name for m in TEARDOWN_MUTANTS])
def test_the_subagent_tests_kill_the_teardown_mutant(mutant: RuntimeMutant) -> None:
    assert kills(mutant, TESTS) is not None, f"{mutant.name} survived the subagent tests"


def test_the_unmutated_registry_passes_them() -> None:
    assert kills(None, TESTS) is None


def test_the_catalogue_has_a_dozen_distinct_mutants_whose_edits_apply() -> None:
    assert len(BY_NAME) == len(TEARDOWN_MUTANTS) >= 12
    for mutant in TEARDOWN_MUTANTS:
        assert mutant.doc.endswith("."), mutant.name
        mutant.compiled()  # every old text occurs exactly once


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", RACE_KILLED)
def test_the_activation_race_machine_kills_the_mutant_its_moves_were_added_for(name: str) -> None:
    killed = race_kills(BY_NAME[name])
    assert killed is not None, f"{name} survived the activation race machine"
    assert not killed.startswith("_Hang"), killed  # an invariant saw it, not the watchdog
