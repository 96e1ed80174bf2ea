"""The README's Python examples run and print what the README says; its counts are current;
its exit statuses are the command line's."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from fsm_core import cli
from fsm_core.tools._mutants import MUTANTS as SPEC_MUTANTS
from tests.helpers import head, interrupt
from tests.race.runtime_mutants import MUTANTS as RUNTIME_MUTANTS

README = Path(__file__).resolve().parents[1] / "README.md"


BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_its_examples() -> None:
    assert len(BLOCKS) == 3


@pytest.mark.parametrize("code", BLOCKS, ids=["tables", "runtime", "subagents"])
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


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """One row of the README's exit-status table."""

    status: int
    summary: str
    command: list[str]
    """The example's arguments, after ``fsm-core`` and before a ``| head -1``."""
    interrupted: bool
    """The example ends ", then Ctrl-C"."""
    piped: bool
    """The example ends ``| head -1``."""


_ROW = re.compile(
    r"^\| (?P<status>\d+) \| \*\*(?P<summary>[^*]+)\*\*.* \| "
    r"`fsm-core (?P<command>[^`]+?)(?P<piped> \\\| head -1)?`(?P<interrupted>, then Ctrl-C)? \|$"
)


def _exit_statuses() -> list[ExitStatus]:
    text = README.read_text(encoding="utf-8")
    table = text.split("<!-- exit-statuses -->\n", 1)[1].split("\n\n", 1)[0]
    rows = table.splitlines()[2:]  # after the header and its rule
    found = [_ROW.match(row) for row in rows]
    assert all(found), [row for row, m in zip(rows, found, strict=True) if m is None]
    return [
        ExitStatus(
            int(m["status"]),
            m["summary"],
            shlex.split(m["command"]),
            m["interrupted"] is not None,
            m["piped"] is not None,
        )
        for m in found
        if m is not None
    ]


EXIT_STATUSES = _exit_statuses()


def test_the_cli_docstring_lists_the_readmes_exit_statuses() -> None:
    assert cli.__doc__ is not None
    listed = re.findall(r"^- (\d+): (.+)$", cli.__doc__, re.M)
    assert [int(status) for status, _ in listed] == [e.status for e in EXIT_STATUSES]
    for (_, text), e in zip(listed, EXIT_STATUSES, strict=True):
        assert text.startswith(e.summary), (text, e.summary)


@pytest.mark.parametrize("e", EXIT_STATUSES, ids=[str(e.status) for e in EXIT_STATUSES])
def test_readme_exit_status_example_exits_with_it(
    e: ExitStatus, capsys: pytest.CaptureFixture[str]
) -> None:
    if e.interrupted:
        # The example checks one model, last on its command line.
        code, _, _ = interrupt(e.command, under_way=f"{e.command[-1]}: states=")
    elif e.piped:
        code, _, _ = head(e.command)
    else:
        code = cli.main(e.command)
        capsys.readouterr()
    assert code == e.status
