"""The README's Python example runs and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

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
