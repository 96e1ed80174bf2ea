"""The command line as a whole: ``--specs`` in every subcommand, flags that make no sense,
faults of the environment."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from fsm_core._paths import models_dir, specs_dir
from fsm_core.cli import main
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import copy_specs, edit

SUBCOMMANDS = ("check", "spec", "diagrams", "bench", "mutants")


@dataclass(frozen=True, slots=True)
class Run:
    code: int
    out: str
    err: str


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Run:
    code = main(argv)
    out, err = capsys.readouterr()
    return Run(code, out, err)


# --- --specs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_specs_that_do_not_exist_exit_2_naming_the_flag(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent"
    r = run(capsys, "--specs", str(missing), command)
    assert (r.code, r.out, r.err) == (2, "", f"fsm-core: --specs {missing}: no such directory\n")


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_specs_naming_a_file_exit_2_naming_the_flag(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = copy_specs(tmp_path) / "agent.toml"
    r = run(capsys, "--specs", str(file), command)
    assert (r.code, r.out, r.err) == (2, "", f"fsm-core: --specs {file}: not a directory\n")


def last_wins_specs(tmp_path: Path) -> Path:
    """A copy of the shipped specs/ whose agent table has the ``last_wins_cause`` bug."""
    specs = copy_specs(tmp_path)
    BY_NAME["last_wins_cause"].plant(specs)
    return specs


def test_check_reads_the_agent_table_from_specs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """agent_races names ``../specs/agent.toml``; with --specs it checks DIR/agent.toml."""
    specs = last_wins_specs(tmp_path)
    r = run(capsys, "--specs", str(specs), "check", "agent_races")
    assert r.code == 1
    assert r.out.splitlines()[1].split()[:2] == ["agent_races", "violation"]
    assert "\nagent_races: reason_first_wins is violated; " in r.out


def test_check_reads_a_missing_table_from_specs_and_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = copy_specs(tmp_path)
    (specs / "agent.toml").unlink()
    r = run(capsys, "--specs", str(specs), "check", "agent_races")
    assert (r.code, r.out) == (2, "")
    assert r.err == (
        "fsm-core: models/agent_races.toml:7: [model]: table '../specs/agent.toml' names no file: "
        f"tried {specs / 'agent.toml'} (in --specs)\n"
    )


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_specs_after_the_subcommand_is_the_same_option(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent"
    r = run(capsys, command, "--specs", str(missing))
    assert (r.code, r.out, r.err) == (2, "", f"fsm-core: --specs {missing}: no such directory\n")


def test_specs_after_check_reads_the_agent_table_from_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = last_wins_specs(tmp_path)
    r = run(capsys, "check", "--specs", str(specs), "agent_races")
    assert r.code == 1
    assert r.out.splitlines()[1].split()[:2] == ["agent_races", "violation"]
    same = run(capsys, "--specs", str(specs), "check", "--specs", str(specs), "agent_races")
    assert same.code == 1


def test_specs_given_before_and_after_the_subcommand_with_two_values_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = copy_specs(tmp_path / "a"), copy_specs(tmp_path / "b")
    with pytest.raises(SystemExit) as exit:
        main(["--specs", str(a), "check", "--specs", str(b), "window"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"fsm-core: error: --specs is given twice, {a} before check and {b} after it: give it once"
    )


def test_a_shipped_model_copied_elsewhere_names_the_path_tried_and_suggests_specs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copy(models_dir() / "agent_races.toml", mine / "my_agent.toml")
    monkeypatch.chdir(tmp_path)
    r = run(capsys, "check", "mine/my_agent.toml")
    assert (r.code, r.out) == (2, "")
    assert r.err == (
        "fsm-core: mine/my_agent.toml:7: [model]: table '../specs/agent.toml' names no file: "
        "tried mine/../specs/agent.toml (relative to the model file); fsm-core --specs DIR "
        f"reads it as 'agent.toml' in DIR (the shipped tables are in {specs_dir()})\n"
    )
    assert run(capsys, "check", "--specs", str(specs_dir()), "mine/my_agent.toml").code == 0


@pytest.mark.parametrize("command", [*SUBCOMMANDS, "vectors", "acp"])
def test_every_subcommand_describes_itself_in_its_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    description = capsys.readouterr().out.split("\n\n")[1]
    assert len(description.split()) >= 15, description


def test_specs_leave_the_bench_models_own_table_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bench model's table lives in models/bench/, not in a specs directory: an empty
    --specs does not touch it."""
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run(capsys, "--specs", str(empty), "check", "bench_S")
    assert r.code == 0, r.err
    assert r.out.splitlines()[1].split()[:2] == ["bench_S", "ok"]


def test_bench_loads_the_default_models_with_specs_before_running_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "agent.toml", 'id = "cancel.turn"\non = "cancel"\n', 'id = "cancel.turn"\n')
    r = run(capsys, "--specs", str(specs), "bench", "--no-baseline", "--scale", "S")
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith("fsm-core: specs/agent.toml:347: row 'cancel.turn': "), r.err


def test_mutants_copy_the_tables_from_specs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mutant's edit is checked against DIR's agent.toml, where it no longer applies."""
    specs = last_wins_specs(tmp_path)
    r = run(capsys, "--specs", str(specs), "mutants", "--spec", "last_wins_cause")
    assert (r.code, r.out) == (2, "")
    assert r.err == (
        "fsm-core: mutant 'last_wins_cause': specs/agent.toml: row 'cancel.turn' has no do entry "
        "{'when': 'holder == live', 'do': ['holder := aborted', 'reason := cause', "
        "'abort_holder(cause)']}; update the mutant to the current table\n"
    )


def test_runtime_mutants_refuse_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = run(capsys, "--specs", str(copy_specs(tmp_path)), "mutants", "--runtime")
    assert (r.code, r.out, r.err) == (
        2,
        "",
        "fsm-core: --specs applies to --spec mutants only: runtime mutants race the runtime on "
        "the shipped tables\n",
    )


# --- flags that make no sense --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["check", "--max-states", "0"], "fsm-core check: error: argument --max-states: "),
        (["check", "--max-states", "-5"], "fsm-core check: error: argument --max-states: "),
        (["bench", "--repeat", "0"], "fsm-core bench: error: argument --repeat: "),
        (["mutants", "--jobs", "0"], "fsm-core mutants: error: argument --jobs: "),
    ],
    ids=["max-states-0", "max-states-negative", "repeat-0", "jobs-0"],
)
def test_a_count_below_one_is_refused_by_argparse_naming_the_flag(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    out, err = capsys.readouterr()
    assert (exited.value.code, out) == (2, "")
    assert err.splitlines()[-1] == f"{error}must be a positive integer, not {argv[-1]!r}"


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "soon", ""])
def test_progress_after_is_a_number_of_seconds_from_zero(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", "--progress-after", bad, "agent_races"])
    out, err = capsys.readouterr()
    assert (exited.value.code, out) == (2, "")
    assert err.splitlines()[-1] == (
        f"fsm-core check: error: argument --progress-after: a number of seconds from 0, not {bad!r}"
    )


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["mutants", "--no-shrink"],
            "--no-shrink applies only to --runtime: a spec mutant's trace is a shortest one",
        ),
        (
            ["check", "--json", "--trace-format", "itf", "bench_S"],
            "--trace-format with --json needs --trace-out: the JSON has both forms",
        ),
        (
            ["--specs", ".", "diagrams"],
            "diagrams with --specs needs --out DIR: the default directory holds the shipped "
            "tables' diagrams",
        ),
    ],
    ids=["no-shrink-without-runtime", "trace-format-with-json", "diagrams-specs-without-out"],
)
def test_a_flag_without_effect_is_refused_before_anything_runs(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(capsys, *argv)
    assert (r.code, r.out, r.err) == (2, "", f"fsm-core: {error}\n")


# --- faults of the environment -------------------------------------------------------------------


def test_a_file_that_cannot_be_written_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No traceback: the operating system's reason and the file it was about."""
    file = tmp_path / "file"
    file.write_text("", encoding="utf-8")
    r = run(capsys, "diagrams", "--out", str(file / "diagrams"))
    assert (r.code, r.out, r.err) == (2, "", f"fsm-core: {file / 'diagrams'}: Not a directory\n")
