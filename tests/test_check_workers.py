"""``fsm-core check --workers N``: models checked in processes print what one process prints,
and no worker outlives the command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fsm_core.cli import main, usable_cores
from tests.helpers import FSM_CORE, exits
from tests.test_check_cli import DONE, LONG, Run, broken_model, finished, run

SMALL = ("activation_chain", "bench_S", "agent_races")
"""Three small default models of three kinds."""

TIMING = ("sec",)
"""The summary's columns that time a run: the only ones allowed to differ."""

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads the process tree in /proc"
)


def untimed(out: str) -> list[list[str]]:
    """``out`` as words per line, with the timing columns and the Done line's ``sec`` masked
    (the words are compared, not the spaces), and the summary's rows sorted: each is printed
    as its model's check ends, so workers print them in the order their models finish."""
    lines = [line.split() for line in out.splitlines()]
    header = next(i for i, words in enumerate(lines) if words[:1] == ["model"])
    timed = [lines[header].index(column) for column in TIMING]
    end = header + 1
    while end < len(lines) and lines[end] and not lines[end][0].endswith((":", ".")):
        for i in timed:
            lines[end][i] = "-"
        end += 1
    lines[header + 1 : end] = sorted(lines[header + 1 : end])
    assert DONE.match(" ".join(lines[-1]))
    lines[-1][-1] = "sec=-"
    return lines


PROGRESS = re.compile(r"^\S+: states=\d+ frontier=\d+ depth=\d+ states/s=\d+$")
"""A progress line: printed about once a second once a check has run a while, so how many a
run prints depends on how busy the machine is."""


def unprogressed(err: str) -> list[str]:
    """``err``'s lines but its progress lines."""
    return [line for line in err.splitlines() if not PROGRESS.match(line)]


def untimed_json(out: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(out)
    for model in document["models"]:
        model["seconds"] = model["states_per_second"] = None
    document["done"] = re.sub(r"sec=\S+$", "sec=-", document["done"])
    return document


def test_two_workers_print_what_one_prints_but_the_timings() -> None:
    one, two = run("--workers", "1", *SMALL), run("--workers", "2", *SMALL)
    assert (two.code, unprogressed(two.err)) == (one.code, unprogressed(one.err)) == (0, [])
    assert untimed(two.out) == untimed(one.out)


@pytest.mark.slow
def test_two_workers_give_the_same_json_but_the_timings() -> None:
    one, two = run("--json", "--workers", "1", *SMALL), run("--json", "--workers", "2", *SMALL)
    assert (two.code, unprogressed(two.err)) == (one.code, unprogressed(one.err)) == (0, [])
    assert untimed_json(two.out) == untimed_json(one.out)


@pytest.mark.slow
def test_a_violation_found_by_a_worker_prints_the_same_trace(tmp_path: Path) -> None:
    """The trace crosses from the worker's process whole: the same steps, listeners' calls
    and broken property, in the same place among the other models' output."""
    argv = ("bench_S", str(broken_model(tmp_path)), "activation_chain")
    one, two = run("--workers", "1", *argv), run("--workers", "2", *argv)
    assert (two.code, one.code) == (1, 1)
    assert "broken: " in two.out
    assert untimed(two.out) == untimed(one.out)
    json_one, json_two = (
        run("--json", "--workers", "1", *argv),
        run("--json", "--workers", "2", *argv),
    )
    assert untimed_json(json_two.out) == untimed_json(json_one.out)
    assert untimed_json(json_two.out)["models"][1]["violation"]["steps"] > 0


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_workers_must_be_a_positive_integer(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["check", "--workers", value, "bench_S"])
    assert exit.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert (
        last
        == f"fsm-core check: error: argument --workers: must be a positive integer, not {value!r}"
    )


def test_the_default_is_the_cores_this_process_may_use() -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert usable_cores() == cores


# --- no worker outlives the command --------------------------------------------------------------


def descendants(pid: int) -> Iterator[tuple[int, int]]:
    """Each process below ``pid``, as (pid, generation): 1 for a child, 2 for a grandchild..."""
    level = [pid]
    generation = 0
    while level:
        generation += 1
        below: list[int] = []
        for parent in level:
            for task in Path(f"/proc/{parent}/task").iterdir():
                with open(task / "children", encoding="ascii") as f:
                    below += [int(child) for child in f.read().split()]
        yield from ((child, generation) for child in below)
        level = below


def running(pid: int) -> bool:
    """True iff ``pid`` is a process that has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


AT_ONCE = ("--progress-after", "0")
"""Progress from a check's first tick (about a second in), not from its second second: the
tests that wait for a search to be under way wait on its first progress line."""


def under_way(argv: list[str], first: str) -> tuple[subprocess.Popen[str], list[str], list[int]]:
    """Start ``fsm-core ARGV`` and read its stderr to the first line starting with ``first``;
    the process, the lines read, and the workers then running (the forkserver's children)."""
    p = subprocess.Popen(
        [*FSM_CORE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert p.stderr is not None
    seen: list[str] = []
    for line in p.stderr:
        seen.append(line)
        if line.startswith(first):
            break
    workers = [pid for pid, generation in descendants(p.pid) if generation == 2]
    return p, seen, workers


@linux_only
def test_sigint_stops_every_worker_with_one_line_and_130() -> None:
    p, seen, workers = under_way(
        ["check", "--workers", "2", "--backend", "python", LONG, "bench_M", *AT_ONCE],
        f"{LONG}: states=",
    )
    helpers = [pid for pid, generation in descendants(p.pid) if generation == 1]
    with p:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    assert (p.returncode, finished(out)) in ((130, []), (130, ["bench_M"]))
    *progress, last = ("".join(seen) + err).splitlines()
    assert last == "fsm-core: interrupted"
    assert all(re.match(rf"^({LONG}|bench_M): states=\d+ ", line) for line in progress), progress
    assert workers, "no worker was running when the interrupt came"
    # The command stopped and reaped its workers before it exited...
    assert [pid for pid in workers if running(pid)] == []
    # ...and the forkserver, which had only it to serve, follows it.
    assert all(exits(pid) for pid in helpers)


@linux_only
def test_a_worker_killed_is_an_error_naming_its_model() -> None:
    """bench_S is reported long before bench_L's first progress line: of the workers killed
    then, one was checking bench_L, and the other waited for work."""
    p, _, workers = under_way(
        ["check", "--workers", "2", "--backend", "python", "bench_S", LONG, *AT_ONCE],
        f"{LONG}: states=",
    )
    with p:
        assert len(workers) == 2, workers
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        out, err = p.communicate(timeout=60)
    assert (p.returncode, finished(out)) == (2, ["bench_S"])
    assert err.splitlines()[-1] == (
        f"fsm-core: the worker checking {LONG} (models/{LONG}.toml) died (killed by SIGKILL) "
        "before it reported; the run is cut short: --workers 1 checks every model in this "
        "process"
    )


def test_one_model_is_checked_in_this_process_whatever_workers_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lone model gains nothing from a process of its own."""
    from fsm_core.check import _parallel

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("a worker was started for one model")

    monkeypatch.setattr(_parallel, "check_in_workers", refuse)
    r: Run = run("--workers", "2", "bench_S")
    assert r.code == 0, r.out


@pytest.mark.slow
def test_the_costliest_model_is_handed_out_first_and_reports_keep_their_order() -> None:
    """The model whose ``[expect]`` records the most transitions starts first, so it does not
    start last while the other workers idle; the reports still come in the order asked."""
    from fsm_core._paths import models_dir
    from fsm_core.check import load_model
    from fsm_core.check._parallel import Source, check_in_workers

    names = ("bench_S", "agent_races", "activation_chain")
    jobs = [
        (load_model(models_dir() / f"{n}.toml"), Source(models_dir() / f"{n}.toml")) for n in names
    ]
    handed: list[str] = []

    def progress(name: str) -> Any:
        handed.append(name)
        return None

    reports = check_in_workers(jobs, 1, progress=progress)
    costs = {m.name: m.expect.transitions for m, _ in jobs if m.expect is not None}
    assert handed == sorted(names, key=costs.__getitem__, reverse=True)
    assert [r.model.name for r in reports] == list(names)
