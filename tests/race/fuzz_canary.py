"""A state machine that fails at once, for the HypoFuzz smoke run only.

``test_fuzz.py`` fuzzes it beside the race machines to prove that a failure the fuzzer finds is
seen: saved in the shared example database, and replayed from there by plain pytest. Its name
does not start with ``test_``, so a normal run never collects it.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule

MESSAGE = "the canary's n reached 128"


class CanaryMachine(RuleBasedStateMachine):
    """One rule, which fails for half of its arguments: shrunk, the failure is
    ``state.step(n=128)``."""

    @rule(n=st.integers(0, 255))
    def step(self, n: int) -> None:
        if n >= 128:
            raise AssertionError(MESSAGE)


TestCanary = CanaryMachine.TestCase
