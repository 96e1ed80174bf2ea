"""The README's Python example runs and prints what the README says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_prints_what_it_claims() -> None:
    block = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert block is not None
    code = block.group(1)
    claimed = [
        re.sub(r"\s+<-.*$", "", line[2:]).rstrip()
        for line in code.splitlines()
        if line.startswith("# ")
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    assert out.getvalue().splitlines() == claimed
