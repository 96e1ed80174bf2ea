"""The activation registry's race search (``tests/race/activation.py``).

``TestActivationRaces`` runs :class:`~tests.race.activation.ActivationRaceMachine` under the
loaded Hypothesis profile (``ci``: derandomized); ``STEPS`` rules per example keep it to a few
seconds. ``deep`` is for local or nightly search:
``scripts/test --hypothesis-profile=deep tests/race/test_activation_race.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.race.activation import ActivationRaceMachine

STEPS = 30
"""Rules per generated program: enough for a three-level tree, its races and a drain."""

EXAMPLES = 200
"""Programs per run under ``ci`` (3 to 8 s on this machine): fewer, and the derandomized search
stops reaching some of the teardown mutants (``python -m tests.race.teardown_mutants``); the
other profiles keep their own count."""

TestActivationRaces = ActivationRaceMachine.TestCase
TestActivationRaces.settings = settings(
    stateful_step_count=STEPS,
    deadline=None,
    max_examples=EXAMPLES if settings().derandomize else settings().max_examples,
)
TestActivationRaces.pytestmark = [pytest.mark.timeout(0)]  # type: ignore[attr-defined]
