"""A failing race search prints a program, and that program replays the failure.

The test plants a runtime bug (``Agent._abort_holder`` does nothing: the table says the holder
is aborted, the signal never is), lets Hypothesis find and shrink a failing run, captures the
program it prints, then executes that program as plain Python against the same bug: it must
fail with the same assertion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from fsm_core.runtime._core import AgentCore
from tests.race.agent import AgentRaceMachine

pytestmark = pytest.mark.timeout(120)

SEARCH = settings(
    max_examples=200,
    stateful_step_count=30,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    report_multiple_bugs=False,
    phases=[Phase.generate, Phase.shrink],
)


def printed_program(printed: Sequence[object]) -> list[str]:
    """The lines of the printed program: ``state = ...`` then ``state.<step>(...)``."""
    lines = (line for text in printed for line in str(text).splitlines())
    return [line for line in lines if line.startswith("state")]


def test_a_printed_failing_program_replays_to_the_same_assertion(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def abort_nothing(self: AgentCore, signal_reason: str) -> None:
        """The planted bug: the holder's signal is never aborted."""

    monkeypatch.setattr(AgentCore, "_abort_holder", abort_nothing)

    reported: list[object] = []
    with with_reporter(reported.append), pytest.raises(AssertionError) as found:
        run_state_machine_as_test(AgentRaceMachine, settings=SEARCH)
    # Hypothesis prints the program through its reporter or, as pytest shows it, in the
    # failure's notes (recent versions); take it from wherever it went.
    notes: list[str] = getattr(found.value, "__notes__", [])
    program = printed_program(notes or reported)
    assert program[0] == "state = AgentRaceMachine()"
    assert program[-1] == "state.teardown()"
    assert any("cancel" in line or "dispose" in line for line in program), program

    namespace: dict[str, Any] = {"AgentRaceMachine": AgentRaceMachine}
    try:
        with pytest.raises(AssertionError) as replayed:
            exec("\n".join(program), namespace)  # the program as printed, invariants included
    finally:
        if "state" in namespace:
            namespace["state"].teardown()
    assert str(replayed.value) == str(found.value)
    assert type(replayed.value) is type(found.value)

    # And without the bug, the same program passes.
    monkeypatch.undo()
    clean: dict[str, Any] = {"AgentRaceMachine": AgentRaceMachine}
    exec("\n".join(program), clean)
