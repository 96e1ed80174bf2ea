"""A bad model file (or a bad table under it) is refused at load, whole, as a SpecError naming
the file, the place and the fault; nothing of it runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fsm_core import SpecError
from fsm_core._paths import models_dir
from fsm_core.check import check, load_model
from tests.helpers import edit, exactly


def _bench_model(tmp_path: Path) -> Path:
    """bench_S's model beside a private copy of its table, ``bench/turncancel.toml``."""
    shutil.copytree(models_dir() / "bench", tmp_path / "bench")
    model = tmp_path / "bench_S.toml"
    shutil.copy(models_dir() / "bench_S.toml", model)
    return model


def test_a_row_id_that_is_code_is_refused_at_load_and_never_runs(tmp_path: Path) -> None:
    model = _bench_model(tmp_path)
    marker = tmp_path / "ran"
    # Valid TOML; before ids were checked, fsm-core check spliced it into generated source.
    hostile = (
        "followup\\n            pass\\n"
        f"import pathlib; pathlib.Path({str(marker)!r}).touch()\\n"
        "def _(s):\\n    if s:\\n        if s:  #"
    )
    edit(tmp_path / "bench" / "turncancel.toml", 'id = "followup"', f'id = "{hostile}"')
    with pytest.raises(
        SpecError,
        match=exactly(
            "bench/turncancel.toml: rows[0]: id 'followup\\n            pass\\nimport pa"
            "...def _(s):\\n    if s:\\n        if s:  #' is not a valid id "
            "(lower_snake_case words joined by dots, e.g. send.idle.wake)"
        ),
    ):
        check(load_model(model))  # what fsm-core check does
    assert not marker.exists()
