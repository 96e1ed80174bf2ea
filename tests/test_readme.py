"""The README's Python examples run and print what the README says; its counts are current."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from fsm_core.check._mutants import MUTANTS as SPEC_MUTANTS
from tests.race.runtime_mutants import MUTANTS as RUNTIME_MUTANTS

README = Path(__file__).resolve().parents[1] / "README.md"


BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_its_examples() -> None:
    assert len(BLOCKS) == 2


@pytest.mark.parametrize("code", BLOCKS, ids=["tables", "runtime"])
def test_readme_example_prints_what_it_claims(code: str) -> None:
    claimed = [
        re.sub(r"\s+<-.*$", "", line[2:]).rstrip()
        for line in code.splitlines()
        if line.startswith("# ")
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    assert out.getvalue().splitlines() == claimed


def test_readme_counts_the_mutant_catalogues_as_they_are() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert f"`fsm-core mutants --spec` plants {len(SPEC_MUTANTS)} plausible" in text
    assert f"plants {len(RUNTIME_MUTANTS)} plausible bugs in the runtime's own Python" in text
