"""``fsm-core bench``: time the checker against the hand-written baseline, on the shared model.

The shared benchmark model (``models/bench/turncancel.toml``, from ``bench-model.md``) has
reference state counts that five independent checkers agree on, and peer timings measured on
the project's standard machine (``FIGURES.md``). This command runs our checker and the
hand-written Python BFS those figures call the baseline (``benchmarks/ref_bfs.py``, a verbatim
copy) on the same scale point, and then times every default model::

    fsm-core bench                         # bench L against the baseline, then the default models
    fsm-core bench --scale L XL --repeat 3 --no-models

Every run is a whole fresh process, timed from start until it is reaped, with its own peak
RSS, which is how ``FIGURES.md`` measured its peers; so wall times include start-up, and for us
the loading of the model file (about 0.4 s, spent proving the table at its declared constants).
A figure is the median of ``--repeat`` runs. On a bench scale our checker checks what the
baseline checks (four invariants and deadlock freedom) and nothing more: the liveness check
that ``fsm-core check`` adds to default-tier models is off there, and on in the timing of the
default models, which run as ``fsm-core check`` runs them.

The benchmark is also a check, and the non-obvious part is that it fails on numbers, not on
speed: it exits 1 when our counts, the baseline's and the reference's disagree, or when a model
misses its ``[expect]``, however fast the run was. It never fails on a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import fsm_core
from fsm_core._errors import FsmError, SpecError
from fsm_core._options import positive_int
from fsm_core._paths import models_dir
from fsm_core.check import check, load_model, load_models
from fsm_core.check._report import aligned
from fsm_core.table._load import read_toml

_REPO = Path(fsm_core.__file__).resolve().parent.parent
BASELINE: Final = _REPO / "benchmarks" / "ref_bfs.py"
"""The baseline script. It ships with the repository, not with the wheel."""


@dataclass(frozen=True, slots=True)
class Reference:
    """One scale point of ``FIGURES.md``: its parameters, agreed counts and peers' timings.

    Times are whole-process wall seconds and peaks are maximum RSS in MiB, each the median of 3
    runs; None where ``FIGURES.md`` has no figure ("-").
    """

    params: tuple[int, int, int, int]
    states: int
    transitions: int
    python_bfs_s: float | None
    python_bfs_mib: float | None
    spin_s: float
    rumur_s: float


# From shared/bench/FIGURES.md (2-core AMD EPYC, 24 GiB, CPython 3.12.1): the scale table, and
# the rows "Python BFS, hand-written (dict with parent pointers, shortest trace)" (the baseline;
# it was not run at XL, where only its visited-set variant was: 38.0 s, 938 MiB), "SPIN DFS
# (-DSAFETY, default -w24)" and "rumur, 1 thread" of "Wall time" and "Peak memory". SPIN and
# rumur exclude their one-off build step (1.15 s and 0.94 s). The S peak is GNU time's figure.
REFERENCE: Final[dict[str, Reference]] = {
    "S": Reference((2, 2, 4, 2), 797, 3_553, 0.024, 10.7, 0.127, 0.005),
    "M": Reference((5, 6, 16, 8), 157_202, 1_019_859, 0.731, 45.0, 0.232, 0.458),
    "L": Reference((8, 10, 30, 12), 1_773_385, 12_210_118, 9.52, 429.0, 2.20, 7.35),
    "XL": Reference((10, 12, 40, 16), 5_866_716, 41_311_015, None, None, 11.4, 27.6),
}


@dataclass(frozen=True, slots=True)
class Run:
    """One whole-process run: what it found and what it cost.

    ``wall_s`` runs from process start until it is reaped; ``search_s`` is the search alone, as
    the process timed it (``check()`` for us, the baseline's own ``time=``); ``load_s`` is our
    loading of the model file, which proves its table at the table's declared constants.
    """

    states: int
    transitions: int
    depth: int | None
    verdict: str
    wall_s: float
    search_s: float
    peak_mib: float
    load_s: float | None = None
    mismatches: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Median:
    """The median of repeated runs, whose counts must all be the same."""

    first: Run
    wall_s: float
    search_s: float
    peak_mib: float
    load_s: float | None


class _Failed(Exception):
    """A run did not produce a result; the message says which and shows its output."""


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``fsm-core bench``'s options to ``parser``."""
    parser.description = (
        "Time the model checker against the hand-written baseline BFS on the shared bench "
        "model, then time every default model. Exits 1 if counts disagree."
    )
    parser.add_argument(
        "--scale",
        nargs="+",
        action="extend",
        choices=list(REFERENCE),
        metavar="{" + ",".join(REFERENCE) + "}",
        help="bench scale points to run (default: L)",
    )
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        metavar="N",
        help="runs per figure; the median counts",
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="run only our checker on the bench scales"
    )
    parser.add_argument("--no-models", action="store_true", help="do not time the default models")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark ``args`` describe; 0 if every count agrees, 1 if not.

    Bad input (a missing baseline or model file, a malformed model) raises :class:`FsmError`
    before anything runs.
    """
    started = time.perf_counter()
    scales: list[str] = list(dict.fromkeys(args.scale or ["L"]))
    repeat: int = args.repeat
    if not args.no_baseline and not BASELINE.is_file():
        raise FsmError(
            f"the baseline {BASELINE} is missing: it ships with the repository, not the wheel. "
            "Run from a checkout, or pass --no-baseline"
        )
    # --specs is the top-level parser's; a caller that built only this parser has none.
    specs: Path | None = getattr(args, "specs", None)
    root = models_dir()
    paths = {scale: root / f"bench_{scale}.toml" for scale in scales}
    params: dict[str, tuple[int, int, int, int]] = {}
    for scale, path in paths.items():
        if not path.is_file():
            raise FsmError(f"{path} is missing: bench scale {scale} needs its model file")
        params[scale] = _params(path)
    models = (
        [] if args.no_models else [m for m in load_models(root, specs=specs) if m.tier == "default"]
    )

    problems: list[str] = []
    bench: dict[str, tuple[_Median | None, _Median | None]] = {}
    for scale in scales:
        ours_runs: list[Run] = []
        base_runs: list[Run] = []
        for i in range(repeat):
            tag = f"bench {scale} run {i + 1}/{repeat}"
            _attempt(problems, ours_runs, f"{tag}: ours", partial(_ours, paths[scale], False, None))
            if not args.no_baseline:
                _attempt(problems, base_runs, f"{tag}: baseline", partial(_base, params[scale]))
        ours = _median(problems, f"bench {scale} (ours)", ours_runs)
        base = _median(problems, f"bench {scale} (baseline)", base_runs)
        bench[scale] = (ours, base)
        _compare(problems, scale, params[scale], ours, base)

    timed: list[tuple[str, str, _Median | None]] = []
    for model in models:
        path = root / Path(model.file).name
        runs: list[Run] = []
        for i in range(repeat):
            tag = f"model {model.name} run {i + 1}/{repeat}"
            _attempt(problems, runs, tag, partial(_ours, path, None, specs))
        median = _median(problems, f"model {model.name}", runs)
        if median is not None:
            problems += [f"model {model.name}: {m}" for m in median.first.mismatches]
        timed.append((model.name, model.kind, median))

    _print_bench(bench, params, repeat)
    if models:
        _print_models(timed)
    for problem in problems:
        print(f"FAILED: {problem}")
    print(_done(bench, len(models), problems, time.perf_counter() - started))
    return 1 if problems else 0


def _params(path: Path) -> tuple[int, int, int, int]:
    """The (K, T, S, C) a bench model file sets in ``[model] constants``."""
    display = f"{path.parent.name}/{path.name}"
    constants = read_toml(path, display).get("model", {}).get("constants", {})
    try:
        k, t, s, c = (constants[name] for name in "KTSC")
    except (KeyError, TypeError):
        raise SpecError(display, "[model] constants", "a bench model sets K, T, S and C") from None
    return k, t, s, c


def _attempt(problems: list[str], runs: list[Run], tag: str, one: Callable[[], Run]) -> None:
    try:
        print(f"{tag} ...", end="", file=sys.stderr, flush=True)
        result = one()
    except _Failed as e:
        print(" failed", file=sys.stderr)
        problems.append(f"{tag}: {e}")
        return
    except BaseException:  # an interrupt: its one line starts a line of its own
        print(file=sys.stderr)
        raise
    print(f" {result.wall_s:.2f} s, {result.peak_mib:.0f} MiB", file=sys.stderr)
    runs.append(result)


def _median(problems: list[str], what: str, runs: Sequence[Run]) -> _Median | None:
    if not runs:
        return None
    counts = {(r.states, r.transitions, r.depth, r.verdict) for r in runs}
    if len(counts) > 1:
        problems.append(f"{what}: repeated runs found different counts: {sorted(counts)}")
    return _Median(
        runs[0],
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.search_s for r in runs),
        statistics.median(r.peak_mib for r in runs),
        statistics.median(loads) if (loads := [r.load_s for r in runs if r.load_s]) else None,
    )


def _compare(
    problems: list[str],
    scale: str,
    params: tuple[int, int, int, int],
    ours: _Median | None,
    base: _Median | None,
) -> None:
    """Ours, the baseline's and the reference's counts must be the same numbers."""
    ref = REFERENCE[scale]
    if params != ref.params:
        problems.append(
            f"bench {scale}: models/bench_{scale}.toml sets (K,T,S,C) = {params}, "
            f"but FIGURES.md's {scale} is {ref.params}"
        )
    want = (ref.states, ref.transitions, "ok")
    for side, m in (("ours", ours), ("baseline", base)):
        if m is None:
            continue
        got = (m.first.states, m.first.transitions, m.first.verdict)
        if got != want:
            problems.append(
                f"bench {scale}: {side} found states={got[0]} transitions={got[1]} "
                f"verdict={got[2]}, the reference is states={want[0]} transitions={want[1]} "
                "verdict=ok"
            )
    if ours is not None:
        problems += [f"bench {scale}: {m}" for m in ours.first.mismatches]


# -- the two sides, each in a fresh process ------------------------------------------------

_PEAK = "fsm-core bench: peak_kib="
"""The line a child prints at exit: its peak RSS in KiB (``VmHWM``), where Linux has it."""

# The baseline runs as written; this only adds an exit hook that prints the process's peak RSS.
_RUN_BASELINE = f"""\
import atexit, runpy, sys
def peak():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    print("{_PEAK}" + line.split()[1], flush=True)
    except OSError:
        pass
atexit.register(peak)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _ours(path: Path, liveness: bool | None, specs: Path | None) -> Run:
    """Check ``path`` in a fresh process (``liveness`` None: as ``fsm-core check`` would),
    with its tables from ``specs`` as ``--specs`` reads them."""
    flag = {None: "default", False: "off", True: "on"}[liveness]
    cmd = [sys.executable, "-m", __name__, str(path), flag, *([str(specs)] if specs else [])]
    out, code, wall, peak = _measure(cmd)
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("{")), None)
    if code != 0 or line is None:
        raise _Failed(f"`{' '.join(cmd)}` exited {code}:\n{out.rstrip()}")
    d = json.loads(line)
    return Run(
        d["states"], d["transitions"], d["depth"], d["verdict"], wall, d["seconds"], peak,
        d["load_seconds"], tuple(d["mismatches"]),
    )  # fmt: skip


_BASELINE_LINE = re.compile(r"states=(\d+) transitions=(\d+) time=([0-9.]+)s")


def _base(params: tuple[int, int, int, int]) -> Run:
    """Run the baseline at ``params`` in a fresh process and read its report."""
    cmd = [sys.executable, "-c", _RUN_BASELINE, str(BASELINE), *map(str, params)]
    out, code, wall, peak = _measure(cmd)
    found = _BASELINE_LINE.search(out)
    if found is None or code not in (0, 1):
        shown = " ".join(["python", str(BASELINE), *map(str, params)])
        raise _Failed(f"`{shown}` exited {code}:\n{out.rstrip()}")
    verdict = "ok" if code == 0 and "OK: all invariants hold" in out else "violation"
    states, transitions, seconds = found.groups()
    return Run(int(states), int(transitions), None, verdict, wall, float(seconds), peak)


def _measure(cmd: list[str]) -> tuple[str, int, float, float]:
    """Run ``cmd`` to the end: (output, exit status, wall seconds, peak RSS in MiB).

    The peak is the one the child printed at exit (Linux ``VmHWM``: this process image's
    high-water mark). Failing that it is ``wait4``'s ``ru_maxrss``, which Linux floors at
    this parent's own RSS when it forked (about 20 MiB), so it overstates small runs.
    """
    env = dict(os.environ)
    package_root = str(Path(fsm_core.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        try:
            out = proc.stdout.read()
            _, status, usage = os.wait4(proc.pid, 0)  # reap it here, keeping its resource usage
        except BaseException:  # interrupted: no run keeps a core busy after we have gone
            proc.kill()
            raise
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    reported = [ln for ln in out.splitlines() if ln.startswith(_PEAK)]
    if reported:
        return out, proc.returncode, wall, int(reported[-1].removeprefix(_PEAK)) / 1024
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return out, proc.returncode, wall, usage.ru_maxrss * unit / 2**20


def _child(argv: Sequence[str]) -> int:
    """The process ``_ours`` starts: check one model file, print one JSON line and the peak.

    ``argv`` is the model file, the liveness flag and, optionally, the ``--specs`` directory.
    """
    path, flag, *specs = argv
    liveness = {"default": None, "off": False, "on": True}[flag]
    start = time.perf_counter()
    # Parse, and prove the table at its declared constants.
    model = load_model(Path(path), specs=Path(specs[0]) if specs else None)
    loaded = time.perf_counter()
    report = check(model, liveness=liveness)  # compile, search, and liveness when it is on
    seconds = time.perf_counter() - loaded
    result = report.result
    line = {
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "verdict": report.verdict,
        "seconds": seconds,
        "load_seconds": loaded - start,
        "mismatches": report.mismatches(),
    }
    print(json.dumps(line))
    peak = _vmhwm_kib()
    if peak is not None:
        print(f"{_PEAK}{peak}")
    return 0


def _vmhwm_kib() -> int | None:
    """This process's peak RSS in KiB, from ``/proc/self/status``; None off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# -- printing ---------------------------------------------------------------------------------


def _print_bench(
    bench: dict[str, tuple[_Median | None, _Median | None]],
    params: dict[str, tuple[int, int, int, int]],
    repeat: int,
) -> None:
    if not bench:
        return
    runs = "one run" if repeat == 1 else f"the median of {repeat} runs"
    _say(
        f"fsm-core bench: our checker against the baseline, the hand-written BFS "
        f"{BASELINE.parent.name}/{BASELINE.name}, on the shared bench model; CPython "
        f"{sys.version.split()[0]} on {_machine()}. Each figure is {runs} of a whole "
        "process: wall seconds and peak RSS. ratio = ours / baseline, lower is better; "
        "states/s = states / our wall seconds. After the bar: FIGURES.md's figures for the "
        "same scale, from its own machine (2-core AMD EPYC, median of 3): the same baseline "
        "on CPython 3.12, SPIN DFS and rumur on 1 thread, both without their build step."
    )
    head = (
        "scale", "(K,T,S,C)", "states", "transitions", "ours s", "base s", "ratio", "states/s",
        "ours MiB", "base MiB", "|", "py-bfs s", "SPIN s", "rumur s", "py-bfs MiB",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for scale, (ours, base) in bench.items():
        ref = REFERENCE[scale]
        counts = ours or base
        rows.append(
            (
                scale,
                "(" + ",".join(map(str, params[scale])) + ")",
                f"{counts.first.states:,}" if counts else "-",
                f"{counts.first.transitions:,}" if counts else "-",
                _num(ours.wall_s if ours else None, 2),
                _num(base.wall_s if base else None, 2),
                _num(ours.wall_s / base.wall_s if ours and base else None, 2),
                _rate(ours.first.states / ours.wall_s) if ours else "-",
                _num(ours.peak_mib if ours else None, 0),
                _num(base.peak_mib if base else None, 0),
                "|",
                _num(ref.python_bfs_s, 2),
                _num(ref.spin_s, 2),
                _num(ref.rumur_s, 2),
                _num(ref.python_bfs_mib, 0),
            )
        )
    _table(head, rows, left=2)
    print("Inside the processes (the search as each side times it; our loading of the model):")
    for scale, (ours, base) in bench.items():
        if ours is None:
            continue
        text = f"  {scale}: ours {ours.search_s:.2f} s search + {_num(ours.load_s, 2)} s load"
        if base is not None:
            ratio = ours.search_s / base.search_s if base.search_s > 0 else None
            text += f"; baseline {base.search_s:.2f} s search; search ratio {_num(ratio, 2)}"
        print(text)


def _print_models(timed: list[tuple[str, str, _Median | None]]) -> None:
    print()
    _say(
        "Default models, each as `fsm-core check` runs it (with the liveness check), "
        "in a process of its own: check s is the check inside the process (states/s is "
        "states / check s), wall s and MiB the whole process."
    )
    head = (
        "model", "kind", "states", "transitions", "depth", "verdict", "check s", "states/s",
        "wall s", "MiB",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for name, kind, m in timed:
        if m is None:
            rows.append((name, kind, "-", "-", "-", "failed", "-", "-", "-", "-"))
            continue
        r = m.first
        rows.append(
            (
                name,
                kind,
                f"{r.states:,}",
                f"{r.transitions:,}",
                str(r.depth),
                r.verdict,
                _num(m.search_s, 2),
                _rate(r.states / m.search_s) if m.search_s > 0 else "-",
                _num(m.wall_s, 2),
                _num(m.peak_mib, 0),
            )
        )
    _table(head, rows, left=3)


def _done(
    bench: dict[str, tuple[_Median | None, _Median | None]],
    models: int,
    problems: list[str],
    seconds: float,
) -> str:
    """The last line, for scripts: ``key=value`` pairs, one comma-separated item per scale."""

    def each(side: int, show: Callable[[_Median], str]) -> str:
        return ",".join(show(m) if (m := pair[side]) else "-" for pair in bench.values()) or "-"

    ratios = [
        f"{ours.wall_s / base.wall_s:.2f}" if ours and base else "-"
        for ours, base in bench.values()
    ]
    fields = {
        "bench": ",".join(bench) or "-",
        "ratio": ",".join(ratios) or "-",
        "ours_s": each(0, lambda m: f"{m.wall_s:.2f}"),
        "baseline_s": each(1, lambda m: f"{m.wall_s:.2f}"),
        "states": each(0, lambda m: str(m.first.states)),
        "transitions": each(0, lambda m: str(m.first.transitions)),
        "states_per_s": each(0, lambda m: f"{m.first.states / m.wall_s:.0f}"),
        "ours_mib": each(0, lambda m: f"{m.peak_mib:.0f}"),
        "baseline_mib": each(1, lambda m: f"{m.peak_mib:.0f}"),
        "models": str(models),
        "problems": str(len(problems)),
        "sec": f"{seconds:.1f}",
    }
    return "Done. " + " ".join(f"{k}={v}" for k, v in fields.items())


def _machine() -> str:
    """The CPU model and count, and the memory, for the figures' record."""
    cpu, memory = "", ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            kib = next((int(ln.split()[1]) for ln in f if ln.startswith("MemTotal:")), 0)
            memory = f", {kib / 2**20:.0f} GiB" if kib else ""
    except OSError:
        pass
    return f"{cpu or sys.platform}, {os.cpu_count()} CPUs{memory}"


def _say(text: str) -> None:
    print(textwrap.fill(text, width=100))


def _num(x: float | None, places: int) -> str:
    return "-" if x is None else f"{x:,.{places}f}"


def _rate(per_second: float) -> str:
    return f"{per_second / 1000:,.0f} k" if per_second >= 10_000 else f"{per_second:,.0f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], left: int) -> None:
    """Print aligned columns: the first ``left`` to the left, numbers to the right."""
    for line in aligned([head, *rows], right=range(left, len(head))):
        print(line)


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
