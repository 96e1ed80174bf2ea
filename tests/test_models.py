"""Every default model proves and reproduces its recorded numbers exactly.

A changed number is a changed meaning: when a table edit moves one of these, review the new
figures and update the model's ``[expect]`` in the same change.
"""

from __future__ import annotations

import pytest

from fsm_core.check import Model, check
from tests.helpers import shipped_models, sweep

MODELS = [m for m in shipped_models() if m.tier == "default"]


def test_there_are_models_of_every_kind() -> None:
    assert {m.kind for m in MODELS} == {"table", "agent", "activation-tree"}


# The default `fsm-core check` of tests/test_check_cli.py proves every model at every change;
# here each one's numbers and untaken rows, the big ones in CI's slow stage.
@pytest.mark.parametrize(
    "model",
    sweep(
        MODELS,
        lambda m: m.name,
        fast={m.name for m in MODELS if m.expect and m.expect.states < 20_000},
    ),
)
def test_model_holds_and_matches_its_manifest(model: Model) -> None:
    assert model.expect is not None, f"{model.file} records no [expect]"
    report = check(model)
    assert report.violation is None, report.violation
    assert report.mismatches() == []
    assert report.dead_rows == model.expect.untaken, f"rows no step takes: {report.dead_rows}"
