"""The command line, as a process: a closed or broken standard output, a second Ctrl-C, and
arguments of 100,000 characters.

Each test runs ``fsm-core`` as its own process (``FSM_CORE``), since only a process shows
what the shell does to its descriptors and signals; each asserts exit statuses, lines and
bytes, never a time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from fsm_core._errors import ECHO_LIMIT
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import FSM_CORE, copy_specs

CLOSED = b"fsm-core: cannot write output: standard output is closed (>&-); >/dev/null drops it\n"
READ_ONLY = b"fsm-core: cannot write output: standard output is open for reading only\n"

EVERY_SUBCOMMAND = {
    "check": ["check", "bench_S"],
    "spec": ["spec"],
    "diagrams": ["diagrams", "--check"],
    "vectors": ["vectors", "--check"],
    "bench": ["bench", "--scale", "S", "--no-baseline", "--no-peers", "--no-models"],
    "mutants": ["mutants", "last_wins_cause"],
    "acp": ["acp"],
    "view": ["view", "--out", str(Path(tempfile.gettempdir()) / "fsm-core-attack-view.html")],
    "help": ["--help"],
}
"""A cheap run of each subcommand (and of ``--help``, which writes on standard output too)."""


def shell(redirections: str, argv: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    """``fsm-core ARGV REDIRECTIONS`` run by ``/bin/sh``, so ``>&-`` closes the descriptor the
    way a user's shell does (``stdout=DEVNULL`` would give it the null device instead)."""
    command = ["/bin/sh", "-c", f'exec "$@" {redirections}', "sh", *FSM_CORE, *argv]
    return subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, timeout=600, check=False
    )


def reader_gone(argv: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
    """``fsm-core ARGV`` writing into a pipe whose reader closed it before the process
    started (``fsm-core ... | true``, with ``true`` first to finish)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [*FSM_CORE, *argv],
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=subprocess.PIPE,
            timeout=600,
            check=False,
        )
    finally:
        os.close(write)


def violating_check(tmp_path: Path) -> tuple[list[str], Path]:
    """A ``check`` that finds a violation and writes its trace to the returned path (the
    agent table with a planted bug, through ``--specs``), so a test sees whether it ran."""
    specs = copy_specs(tmp_path)
    BY_NAME["last_wins_cause"].plant(specs)
    trace = tmp_path / "trace.txt"
    return ["--specs", str(specs), "check", "agent_races", "--trace-out", str(trace)], trace


# --- a closed standard output --------------------------------------------------------------------


@pytest.mark.parametrize("argv", EVERY_SUBCOMMAND.values(), ids=EVERY_SUBCOMMAND.keys())
def test_every_subcommand_with_standard_output_closed_exits_2_with_one_line(
    argv: list[str],
) -> None:
    """README: output that cannot be written is 2 (a closed descriptor is EBADF, not a reader
    that left: ``seq 3 >&-`` fails too), one line, and no traceback."""
    done = shell(">&-", argv)
    assert (done.returncode, done.stdout, done.stderr) == (2, b"", CLOSED)


def test_check_with_standard_output_closed_refuses_before_checking(tmp_path: Path) -> None:
    """Known at the start, so nothing runs: no trace file, where the check would write one."""
    argv, trace = violating_check(tmp_path)
    done = shell(">&-", argv)
    assert (done.returncode, done.stderr) == (2, CLOSED)
    assert not trace.exists()


def test_standard_output_open_for_reading_only_is_refused_before_checking(
    tmp_path: Path,
) -> None:
    argv, trace = violating_check(tmp_path)
    done = shell("1</dev/null", argv)
    assert (done.returncode, done.stderr) == (2, READ_ONLY)
    assert not trace.exists()


def test_both_output_streams_closed_exit_2_in_silence() -> None:
    done = shell(">&- 2>&-", ["check", "bench_S"])
    assert (done.returncode, done.stdout, done.stderr) == (2, b"", b"")


def test_a_closed_standard_error_sends_no_message_to_standard_output() -> None:
    """``print(file=sys.stderr)`` with no standard error writes on standard output: the
    refusal of an unknown model would have landed in the report a script reads."""
    done = shell("2>&-", ["check", "no_such_model"])
    assert (done.returncode, done.stdout, done.stderr) == (2, b"", b"")


def test_acp_with_standard_input_closed_exits_2_with_one_line() -> None:
    done = shell("<&-", ["acp"])
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr == (
        b"fsm-core: acp: standard input is closed (<&-): the client's requests arrive there\n"
    )


# --- a reader that left --------------------------------------------------------------------------


@pytest.mark.parametrize("argv", EVERY_SUBCOMMAND.values(), ids=EVERY_SUBCOMMAND.keys())
def test_every_subcommand_whose_reader_left_before_it_started_exits_141_quietly(
    argv: list[str],
) -> None:
    done = reader_gone(argv)
    assert (done.returncode, done.stderr) == (141, b"")


def test_a_long_check_whose_reader_left_does_not_run(tmp_path: Path) -> None:
    """bench_L by the python backend reports progress after two seconds; refused at the start,
    it prints none, and writes no trace."""
    argv, trace = violating_check(tmp_path)
    done = reader_gone([*argv, "bench_L", "--backend", "python"])
    assert (done.returncode, done.stderr) == (141, b"")
    assert not trace.exists()


def test_a_check_whose_reader_leaves_while_it_runs_stops_within_a_progress_tick(
    tmp_path: Path,
) -> None:
    """The reader leaves once bench_L reports progress: the check stops there (141, quietly),
    so the violating model after it is never checked and its trace never written."""
    argv, _ = violating_check(tmp_path)  # several models: trace.agent_races.txt
    check = argv.index("check")
    argv[check + 1 : check + 1] = ["bench_L"]  # first, then agent_races
    argv += ["--backend", "python", "--progress-after", "0"]
    with subprocess.Popen(
        [*FSM_CORE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as p:
        assert p.stdout is not None and p.stderr is not None
        progress: list[str] = []
        for line in p.stderr:
            progress.append(line)
            if line.startswith("bench_L: states="):
                break
        p.stdout.close()
        progress += p.stderr.readlines()
        p.wait(timeout=600)
    assert p.returncode == 141
    assert progress, "bench_L ended before it reported progress"
    assert all(line.startswith("bench_L: states=") for line in progress), progress
    assert sorted(path.name for path in tmp_path.iterdir()) == ["specs"]


# --- a second Ctrl-C -----------------------------------------------------------------------------


def test_a_second_ctrl_c_during_shutdown_is_as_quiet_as_the_first() -> None:
    """The second SIGINT comes once the first has been reported, while the process shuts
    down: it used to print "Exception ignored in threading._shutdown" and a traceback, or
    kill the process by SIGINT."""
    argv = [*FSM_CORE, "check", "bench_L", "--backend", "python", "--progress-after", "0"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stderr is not None
        progress: list[str] = []
        for line in p.stderr:
            progress.append(line)
            if line.startswith("bench_L: states="):
                break
        p.send_signal(signal.SIGINT)
        for line in p.stderr:
            progress.append(line)
            if line.startswith("fsm-core:"):
                break
        p.send_signal(signal.SIGINT)
        out, rest = p.communicate(timeout=120)
    assert (p.returncode, out) == (130, "")
    *progress, last = progress
    assert all(line.startswith("bench_L: states=") for line in progress), progress
    assert (last, rest) == ("fsm-core: interrupted\n", "")


# --- arguments of 100,000 characters -------------------------------------------------------------

LONG = "A" * 100_000
DIGITS = "1" * 100_000
"""More digits than ``int()`` converts (4,300): its own ValueError must not leak or echo."""
ECHOED_ARGUMENTS = {
    "check-name": ["check", LONG],
    "check-path": ["check", f"models/{LONG}"],
    "check-max-states": ["check", "--max-states", DIGITS],
    "check-max-states=": ["check", f"--max-states={DIGITS}"],
    "check-backend": ["check", "--backend", LONG],
    "check-trace-format": ["check", "--trace-format", LONG],
    "check-trace-out": ["check", "bench_S", "--trace-out", f"/tmp/{LONG}"],
    "check-json=": ["check", f"--json={LONG}"],
    "check-unknown-flag": ["check", f"--{LONG}"],
    "short-flag": ["check", f"-h{LONG}"],
    "subcommand": [LONG],
    "specs": ["--specs", f"/tmp/{LONG}", "spec"],
    "spec-machine": ["spec", LONG],
    "diagrams-out": ["diagrams", "--out", f"/{LONG}"],
    "bench-repeat": ["bench", "--repeat", DIGITS],
    "bench-scale": ["bench", "--scale", LONG],
    "bench-backend": ["bench", "--backend", LONG],
    "mutants-name": ["mutants", LONG],
    "mutants-runtime-name": ["mutants", "--runtime", LONG],
    "mutants-jobs": ["mutants", "--jobs", DIGITS],
    "vectors-timeout": ["vectors", "--timeout", DIGITS],
    "acp-model": ["acp", "--model", LONG],
    "acp-model-module": ["acp", "--model", f"{LONG}:make"],
    "acp-model-factory": ["acp", "--model", f"fsm_core:{LONG}"],
}


@pytest.mark.parametrize("argv", ECHOED_ARGUMENTS.values(), ids=ECHOED_ARGUMENTS.keys())
def test_an_argument_of_100_000_characters_is_echoed_in_at_most_80(argv: list[str]) -> None:
    """Every refusal quotes the argument through ``echo``: 80 characters at most, the usage
    lines argparse adds included in the bound."""
    done = shell("", argv)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.startswith((b"usage: ", b"fsm-core: ")), done.stderr[:200]
    assert len(done.stderr) < 2_000
    assert len(done.stderr.splitlines()) <= 12  # bench's usage is nine lines
    for run in (b"A" * ECHO_LIMIT, b"1" * ECHO_LIMIT):
        assert run not in done.stderr


def test_more_digits_than_python_converts_are_refused_as_too_many() -> None:
    done = shell("", ["check", "--max-states", DIGITS])
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        b"fsm-core check: error: argument --max-states: must be a positive integer of at most "
        b"4300 digits, not '" + b"1" * 37 + b"..." + b"1" * 38 + b"' (100000 digits)"
    )


@pytest.mark.parametrize(
    "argv",
    [["check", "--\x1b]0;owned\x07"], ["check", "--backend", "\x1b[2J"], ["spec", "\x1b[2J"]],
    ids=["unknown-flag", "choice", "machine"],
)
def test_a_terminal_escape_in_an_argument_is_echoed_as_text(argv: list[str]) -> None:
    done = shell("", argv)
    assert done.returncode == 2
    assert b"\x1b" not in done.stderr
    assert b"\\x1b" in done.stderr
