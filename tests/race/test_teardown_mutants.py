"""Every teardown mutant is killed by the subagent behaviour tests, and the unmutated registry
passes them (``tests/race/teardown_mutants.py``)."""

from __future__ import annotations

import logging

import pytest

from tests.race.runtime_mutants import RuntimeMutant
from tests.race.teardown_mutants import BY_NAME, TEARDOWN_MUTANTS, behaviour_tests, kills
from tests.runtime import test_subagents, test_subagents_spawn

# The deep chain costs seconds and kills nothing the others do not.
TESTS = [t for t in behaviour_tests(test_subagents, test_subagents_spawn) if "deep" not in t[0]]


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="fsm_core.runtime")


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
