"""The agent's reverse teardown and the runtime's close order (issue 22), each planted as a
runtime bug that its behaviour test must kill, and that the shipped runtime passes.

- ``boundaries_not_awaited``: the disposal stops waiting for the agent's scope, so
  ``agent/disposed`` is published while work in a boundary of the agent still runs;
- ``initiators_closed_first``: ``aclose()`` closes the agent registry in the call that begins
  the disposals (closeInitiators before disposeInitiators), so a boundary a disposal's own
  listener opens is refused.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.race.runtime_mutants import Edit, RuntimeMutant, activated
from tests.runtime import test_issue22_initiators as initiators

MUTANTS = (
    RuntimeMutant(
        "boundaries_not_awaited",
        "The agent's disposal no longer awaits its scope: agent/disposed comes first.",
        (
            Edit(
                "fsm_core.runtime._core:AgentCore.dispose",
                "await self.seams.unwind(self.agent)",
                "self.seams.unwind(self.agent)",
            ),
        ),
    ),
    RuntimeMutant(
        "initiators_closed_first",
        "aclose() closes the agent registry before the agents are disposed.",
        (
            Edit(
                "fsm_core.runtime._runtime:Runtime.aclose",
                '        self._closing = persist(lambda: self._close(disposals), "aclose")',
                "        self.agents._begin_close()\n"
                '        self._closing = persist(lambda: self._close(disposals), "aclose")',
            ),
        ),
    ),
)

KILLERS: dict[str, Callable[[], None]] = {
    "boundaries_not_awaited": (
        initiators.test_disposal_waits_for_the_work_inside_the_agents_boundaries
    ),
    "initiators_closed_first": (
        initiators.test_aclose_disposes_the_agents_before_it_closes_the_initiator_scope
    ),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_behaviour_test_kills_the_mutant_and_passes_without_it(mutant: RuntimeMutant) -> None:
    test = KILLERS[mutant.name]
    test()  # the shipped runtime passes
    with activated(mutant), pytest.raises(AssertionError):
        test()
