"""What ``fsm-core check`` prints while it works and after: a row per model as its check ends,
lines that fit 100 columns, one line for a search cut short, a word when no trace is written."""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import fsm_core.check
from fsm_core import cli
from fsm_core.check import Report, _parallel, check
from fsm_core.check._parallel import Source
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import copy_specs
from tests.test_check_cli import DONE, Run, default_run, run

__all__ = ["default_run"]  # the module's fixture, shared

HEADER = re.compile(
    r"^model +verdict +states +transitions +depth +sec +untaken +unreacted +expect$"
)


def test_each_row_is_printed_as_its_check_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard output as each check starts: nothing before the first (a run refused or
    interrupted then prints nothing), the header and the first row before the second."""
    out = io.StringIO()
    seen: list[list[str]] = []

    def spy(model: Any, **kwargs: Any) -> Report:
        seen.append(out.getvalue().splitlines())
        return check(model, **kwargs)

    monkeypatch.setattr(fsm_core.check, "check", spy)  # what `fsm-core check` imports
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["check", "--workers", "1", "window", "admission"]) == 0
    assert [len(lines) for lines in seen] == [0, 2]
    assert HEADER.match(seen[1][0])
    assert seen[1][1].split()[:2] == ["window", "ok"]
    assert out.getvalue().splitlines()[2].split()[:2] == ["admission", "ok"]


def test_workers_rows_come_in_finishing_order_and_the_rest_in_the_order_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A stand-in for the workers reports the second model first: its row is printed at once,
    before the first model's; what follows the table keeps the order of the command line."""
    out = io.StringIO()
    printed: list[str] = []

    def workers(
        jobs: Sequence[tuple[Any, Source]],
        count: int,
        *,
        on_report: Callable[[Report], None],
        **kwargs: Any,
    ) -> list[Report]:
        reports = [check(model) for model, _ in jobs]
        for report in reversed(reports):
            on_report(report)
            printed.append(out.getvalue().splitlines()[-1])
        return reports

    monkeypatch.setattr(_parallel, "check_in_workers", workers)
    monkeypatch.setattr(_parallel, "warm_up", lambda: None)
    trace = tmp_path / "trace.txt"
    argv = ["check", "--workers", "2", "window", "admission", "--trace-out", str(trace)]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(argv) == 0
    assert [line.split()[0] for line in printed] == ["admission", "window"]
    lines = out.getvalue().splitlines()
    assert lines[1:3] == printed
    assert [line.split()[0] for line in lines[4:6]] == ["window", "admission"]
    assert DONE.match(lines[-1])


def test_every_line_of_the_default_check_fits_100_columns(default_run: Run) -> None:
    assert default_run.code == 0
    lines = default_run.out.splitlines()
    assert HEADER.match(lines[0])
    assert [line for line in lines if len(line) > 100] == []


def test_a_state_limit_says_once_that_expect_was_not_compared() -> None:
    r = run("bench_S", "admission", "--workers", "1", "--max-states", "10")
    assert r.code == 1
    lines = r.out.splitlines()
    assert [line.split()[-1] for line in lines[1:3]] == ["-", "✓"]  # bench_S not compared
    assert lines[3:-1] == [
        "incomplete: bench_S cut at 12 states by --max-states 10: nothing is proven, [expect] "
        "not compared"
    ]
    assert not any(line.startswith("mismatch:") for line in lines)


def test_trace_out_without_a_violation_says_it_wrote_nothing(tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    r = run("window", "--trace-out", str(out))
    assert r.code == 0
    assert f"window holds: no counterexample, nothing written to {out}" in r.out.splitlines()
    assert not out.exists()


def test_trace_out_with_force_leaves_an_older_file_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    out.write_text("an older trace\n", encoding="utf-8")
    r = run("window", "--trace-out", str(out), "--force")
    assert r.code == 0
    assert (
        f"window holds: no counterexample, nothing written to {out}; the file there is left as "
        "it was"
    ) in r.out.splitlines()
    assert out.read_text(encoding="utf-8") == "an older trace\n"


def test_trace_out_of_a_search_cut_short_says_it_found_none_yet(tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    r = run("bench_S", "--max-states", "10", "--trace-out", str(out))
    assert r.code == 1
    assert (
        f"bench_S was cut short before any violation: no counterexample, nothing written to {out}"
    ) in r.out.splitlines()


def test_json_says_on_stderr_that_no_trace_was_written(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    r = run("window", "--json", "--trace-out", str(out))
    assert r.code == 0
    assert r.err == f"window holds: no counterexample, nothing written to {out}\n"


def test_a_broken_step_invariant_shows_the_value_it_overwrote(tmp_path: Path) -> None:
    """Inside the cancel, a listener's dispose sets the reason to disposed; the cancel's own
    abort then overwrites it with parent. The step's changes show none->parent; the line after
    the violation shows what the invariant compared."""
    specs = copy_specs(tmp_path)
    BY_NAME["last_wins_cause"].plant(specs)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main(["--specs", str(specs), "check", "--workers", "1", "agent_races"]) == 1
    lines = out.getvalue().splitlines()
    violated = next(i for i, line in enumerate(lines) if line.startswith("violated: "))
    assert lines[violated].startswith("violated: reason_first_wins (")
    assert (
        lines[violated + 1] == "changed: reason disposed->parent since a listener last observed it"
    )


def test_a_broken_invariant_of_one_state_adds_no_line(tmp_path: Path) -> None:
    specs = copy_specs(tmp_path)
    BY_NAME["latch_set_on_disposed"].plant(specs)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main(["--specs", str(specs), "check", "--workers", "1", "agent_races"]) == 1
    lines = out.getvalue().splitlines()
    violated = next(i for i, line in enumerate(lines) if line.startswith("violated: "))
    assert lines[violated + 1].startswith("clauses: ")


def test_a_check_that_took_seconds_to_start_reports_at_its_search_first_tick(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker proves its model's tables before the search starts: 2.5 s after the model was
    handed out, the search's first tick (1 s in) is printed."""
    clock = iter([100.0, 102.5])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    report = cli._progress("agent_tree")
    report(5000, 900, 7, 1.0)
    assert capsys.readouterr().err == (
        "agent_tree: states=5000 frontier=900 depth=7 states/s=5000\n"
    )
