"""Every default model proves and reproduces its recorded numbers exactly.

A changed number is a changed meaning: when a table edit moves one of these, review the new
figures and update the model's ``[expect]`` in the same change.
"""

from __future__ import annotations

import pytest

from fsm_core._paths import models_dir
from fsm_core.check import Model, check, load_models

MODELS = [m for m in load_models(models_dir()) if m.tier == "default"]


def test_there_are_models_of_every_kind() -> None:
    assert {m.kind for m in MODELS} == {"table", "agent", "activation-tree"}


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_model_holds_and_matches_its_manifest(model: Model) -> None:
    assert model.expect is not None, f"{model.file} records no [expect]"
    report = check(model)
    assert report.violation is None, report.violation
    assert report.mismatches() == []
    assert report.dead_rows == model.expect.untaken, f"rows no step takes: {report.dead_rows}"
