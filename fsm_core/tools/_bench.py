"""``fsm-core bench``: time the checker against the baseline and the native checkers, on the
shared model, in one run.

The shared benchmark model (``models/bench/turncancel.toml``, from ``bench-model.md``) has
reference state counts that five independent checkers agree on (``FIGURES.md``). This command
checks it at each scale point with each of our backends, with the hand-written Python BFS those
figures call the baseline (``benchmarks/ref_bfs.py``, a verbatim copy), and with SPIN and rumur
built from the same model's Promela and Murphi versions (``turncancel.pml``, ``turncancel.m``
in ``../shared/bench/`` beside the repository, or ``--peers DIR``), when ``spin``, ``rumur``
and a C compiler are installed; then it times every default model::

    fsm-core bench                         # bench L: every checker, then the default models
    fsm-core bench --scale L XL --repeat 3 --no-models

Every run is a whole fresh process, timed from start until it is reaped, with its own peak
RSS, as ``FIGURES.md`` measured its peers: wall times include start-up, and for us the loading
of the model file. The native checkers are built once per scale before the runs (``spin -a``
and ``gcc -O2 -DSAFETY``; ``rumur`` and ``cc -O3``) and their build is timed apart, as
``FIGURES.md`` did. The runs are interleaved, round by round (each checker once per scale in
a round), so a machine shared with other work slows them alike; a figure is the median of
``--repeat`` rounds, and every time is also given as a ratio to SPIN's and to the baseline's in
the same run. On a bench scale our checker checks what the others check (four invariants and
deadlock freedom): the liveness check ``fsm-core check`` adds to default-tier models is off.

The benchmark is also a check: it exits 1 when a count disagrees with the reference (ours,
the baseline's, and SPIN's and rumur's states), when a model misses its ``[expect]``, or when a
run fails; never on a time. A missing peer is said so, with what would bring it, and leaves
its figures and the ratios to it empty.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
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
from fsm_core.check import Backend, check, load_model, load_models
from fsm_core.check._report import aligned
from fsm_core.table._load import read_toml

_REPO = Path(fsm_core.__file__).resolve().parent.parent
BASELINE: Final = _REPO / "benchmarks" / "ref_bfs.py"
"""The baseline script. It ships with the repository, not with the wheel."""
PEERS: Final = _REPO.parent / "shared" / "bench"
"""Where the native checkers' models are, by default: ``shared/bench`` beside the repository."""


@dataclass(frozen=True, slots=True)
class Reference:
    """One scale point of ``FIGURES.md``: its parameters and the counts every checker agrees
    on (SPIN and rumur count transitions their own way, so only their states are compared)."""

    params: tuple[int, int, int, int]
    states: int
    transitions: int


REFERENCE: Final[dict[str, Reference]] = {
    "S": Reference((2, 2, 4, 2), 797, 3_553),
    "M": Reference((5, 6, 16, 8), 157_202, 1_019_859),
    "L": Reference((8, 10, 30, 12), 1_773_385, 12_210_118),
    "XL": Reference((10, 12, 40, 16), 5_866_716, 41_311_015),
}

BACKENDS: Final = ("vector", "python")
"""Our backends, each a checker of its own here."""


@dataclass(frozen=True, slots=True)
class Run:
    """One whole-process run: what it found and what it cost.

    ``wall_s`` runs from process start until it is reaped, and ``cpu_s`` is the processor time
    it used (user and system); ``search_s`` is the search alone, as
    the process timed it (``check()`` for us, the baseline's own ``time=``; the whole run for
    a native checker); ``load_s`` is our loading of the model file. ``transitions`` and
    ``depth`` are None where a checker counts them its own way.
    """

    states: int
    transitions: int | None
    depth: int | None
    verdict: str
    wall_s: float
    cpu_s: float
    search_s: float
    peak_mib: float
    load_s: float | None = None
    mismatches: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Median:
    """The median of repeated runs, whose counts must all be the same."""

    first: Run
    wall_s: float
    cpu_s: float
    search_s: float
    peak_mib: float
    load_s: float | None


class _Failed(Exception):
    """A run or a build did not produce a result; the message says which and shows output."""


# -- the native checkers -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Peer:
    """A native checker: the tools it needs, its model file, how to build and read it."""

    key: str
    name: str
    tools: tuple[tuple[str, str], ...]
    """(command, Debian package) pairs that must be on PATH."""
    source: str
    """Its model file, in the peers' directory."""
    build: Callable[[Path, Path, tuple[int, int, int, int]], list[list[str]]]
    """The commands that build it from the model file copied into a directory, for a scale
    point; the last one's output is ``checker`` there."""
    run: tuple[str, ...]
    """Arguments of the built ``checker``."""
    states: re.Pattern[str]
    """Finds the state count in its output."""
    clean: re.Pattern[str]
    """Matches its output iff it found no error."""

    def missing(self, peers: Path) -> str | None:
        """Why this peer cannot run here, or None."""
        for command, package in self.tools:
            if shutil.which(command) is None:
                return f"{command} is not installed (apt-get install {package})"
        if not (peers / self.source).is_file():
            return f"there is no {self.source} in {peers} (--peers DIR names another)"
        return None


def _spin_build(source: Path, out: Path, params: tuple[int, int, int, int]) -> list[list[str]]:
    shutil.copy(source, out / source.name)
    defines = [f"-D{name}={value}" for name, value in zip("KTSC", params, strict=True)]
    return [
        ["spin", *defines, "-a", source.name],
        ["gcc", "-O2", "-DSAFETY", "-o", "checker", "pan.c"],
    ]


def _rumur_build(source: Path, out: Path, params: tuple[int, int, int, int]) -> list[list[str]]:
    text = source.read_text(encoding="utf-8")
    for name, value in zip("KTSC", params, strict=True):
        text, found = re.subn(rf"(?m)^  {name}: [0-9]+;", f"  {name}: {value};", text)
        if found != 1:
            raise _Failed(f"{source} does not declare the constant {name} as `  {name}: N;`")
    (out / source.name).write_text(text, encoding="utf-8")
    return [
        ["rumur", "--deadlock-detection", "stuck", "--threads", "1", source.name,
         "--output", "checker.c"],
        ["cc", "-std=c11", "-O3", "-o", "checker", "checker.c", "-lpthread", "-mcx16"],
    ]  # fmt: skip


PEER_LIST: Final = (
    Peer(
        "spin",
        "SPIN DFS -DSAFETY",
        (("spin", "spin"), ("gcc", "gcc")),
        "turncancel.pml",
        _spin_build,
        ("-m10000",),
        re.compile(r"^\s*(\d+) states, stored", re.MULTILINE),
        re.compile(r"errors: 0\b"),
    ),
    Peer(
        "rumur",
        "rumur, 1 thread",
        (("rumur", "rumur"), ("cc", "gcc")),
        "turncancel.m",
        _rumur_build,
        (),
        re.compile(r"^\s*(\d+) states, \d+ rules fired", re.MULTILINE),
        re.compile(r"No error found"),
    ),
)
PEERS_BY_KEY: Final = {p.key: p for p in PEER_LIST}

CHECKERS: Final = ("spin", "rumur", *BACKENDS, "baseline")
"""Every checker, in the order the runs of a round and the rows of a scale go."""
_NAMES: Final = {
    "spin": "SPIN DFS -DSAFETY (C)",
    "rumur": "rumur, 1 thread (C)",
    "vector": "fsm-core, vector backend",
    "python": "fsm-core, python backend",
    "baseline": "Python BFS (ref_bfs.py)",
}


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``fsm-core bench``'s options to ``parser``."""
    parser.description = (
        "Time the model checker's backends against SPIN, rumur and the hand-written baseline "
        "BFS on the shared bench model, interleaved, then time every default model. Exits 1 "
        "if counts disagree."
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
        help="rounds; each figure is the median of its N runs",
    )
    parser.add_argument(
        "--backend",
        nargs="+",
        action="extend",
        choices=list(BACKENDS),
        help="our backends to time (default: both)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="do not run the baseline")
    parser.add_argument("--no-peers", action="store_true", help="do not run SPIN and rumur")
    parser.add_argument(
        "--peers",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where turncancel.pml and turncancel.m are (default: {PEERS})",
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
    ours: list[str] = list(dict.fromkeys(args.backend or BACKENDS))
    if not args.no_baseline and not BASELINE.is_file():
        raise FsmError(
            f"the baseline {BASELINE} is missing: it ships with the repository, not the wheel. "
            "Run from a checkout, or pass --no-baseline"
        )
    peers_dir: Path = args.peers or PEERS
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
    missing: dict[str, str] = {}
    if not args.no_peers:
        missing = {p.key: why for p in PEER_LIST if (why := p.missing(peers_dir)) is not None}
    peers = [] if args.no_peers else [p for p in PEER_LIST if p.key not in missing]
    checkers = [p.key for p in peers] + ours + ([] if args.no_baseline else ["baseline"])

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fsm-core-bench-") as scratch:
        binaries: dict[tuple[str, str], Path] = {}
        builds: dict[tuple[str, str], float] = {}
        for scale in scales:
            for peer in peers:
                out = Path(scratch) / f"{peer.key}-{scale}"
                out.mkdir()
                tag = f"bench {scale}: building {peer.name}"
                try:
                    print(f"{tag} ...", end="", file=sys.stderr, flush=True)
                    builds[(peer.key, scale)] = _build(peer, peers_dir, out, params[scale])
                except _Failed as e:
                    print(" failed", file=sys.stderr)
                    problems.append(f"{tag}: {e}")
                    continue
                print(f" {builds[(peer.key, scale)]:.2f} s", file=sys.stderr)
                binaries[(peer.key, scale)] = out / "checker"

        runs: dict[tuple[str, str], list[Run]] = {(c, s): [] for c in checkers for s in scales}
        for i in range(repeat):
            for scale in scales:
                for key in checkers:
                    if key in PEERS_BY_KEY and (key, scale) not in binaries:
                        continue
                    one = _runner(key, scale, paths[scale], params[scale], binaries)
                    tag = f"bench {scale} run {i + 1}/{repeat}: {key}"
                    _attempt(problems, runs[(key, scale)], tag, one)

    bench: dict[str, dict[str, _Median]] = {}
    for scale in scales:
        bench[scale] = {}
        for key in checkers:
            median = _median(problems, f"bench {scale} ({key})", runs[(key, scale)])
            if median is not None:
                bench[scale][key] = median
        _compare(problems, scale, params[scale], bench[scale])

    timed: list[tuple[str, str, _Median | None]] = []
    for model in models:
        path = root / Path(model.file).name
        model_runs: list[Run] = []
        for i in range(repeat):
            tag = f"model {model.name} run {i + 1}/{repeat}"
            _attempt(problems, model_runs, tag, partial(_ours, path, None, "auto", specs))
        median = _median(problems, f"model {model.name}", model_runs)
        if median is not None:
            problems += [f"model {model.name}: {m}" for m in median.first.mismatches]
        timed.append((model.name, model.kind, median))

    _print_bench(bench, params, builds, missing, peers_dir, repeat)
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


def _runner(
    key: str,
    scale: str,
    path: Path,
    params: tuple[int, int, int, int],
    binaries: dict[tuple[str, str], Path],
) -> Callable[[], Run]:
    if key in BACKENDS:
        return partial(_ours, path, False, key, None)
    if key == "baseline":
        return partial(_base, params)
    return partial(_native, PEERS_BY_KEY[key], binaries[(key, scale)])


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
        statistics.median(r.cpu_s for r in runs),
        statistics.median(r.search_s for r in runs),
        statistics.median(r.peak_mib for r in runs),
        statistics.median(loads) if (loads := [r.load_s for r in runs if r.load_s]) else None,
    )


def _compare(
    problems: list[str],
    scale: str,
    params: tuple[int, int, int, int],
    found: dict[str, _Median],
) -> None:
    """Every checker's counts must be the reference's (a native checker's states only)."""
    ref = REFERENCE[scale]
    if params != ref.params:
        problems.append(
            f"bench {scale}: models/bench_{scale}.toml sets (K,T,S,C) = {params}, "
            f"but FIGURES.md's {scale} is {ref.params}"
        )
    for key, m in found.items():
        r = m.first
        if key in PEERS_BY_KEY:
            if (r.states, r.verdict) != (ref.states, "ok"):
                problems.append(
                    f"bench {scale}: {key} found states={r.states} verdict={r.verdict}, "
                    f"the reference is states={ref.states} verdict=ok"
                )
            continue
        if (r.states, r.transitions, r.verdict) != (ref.states, ref.transitions, "ok"):
            problems.append(
                f"bench {scale}: {key} found states={r.states} transitions={r.transitions} "
                f"verdict={r.verdict}, the reference is states={ref.states} "
                f"transitions={ref.transitions} verdict=ok"
            )
        problems += [f"bench {scale}: {key}: {mismatch}" for mismatch in r.mismatches]


# -- each checker in a fresh process ---------------------------------------------------------------

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


def _ours(path: Path, liveness: bool | None, backend: str, specs: Path | None) -> Run:
    """Check ``path`` in a fresh process (``liveness`` None: as ``fsm-core check`` would) with
    ``backend``, with its tables from ``specs`` as ``--specs`` reads them."""
    flag = {None: "default", False: "off", True: "on"}[liveness]
    cmd = [sys.executable, "-m", __name__, str(path), flag, backend]
    cmd += [str(specs)] if specs else []
    out, code, wall, cpu, peak = _measure(cmd)
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith("{")), None)
    if code != 0 or line is None:
        raise _Failed(f"`{' '.join(cmd)}` exited {code}:\n{out.rstrip()}")
    d = json.loads(line)
    if backend != "auto" and d["backend"] != backend:
        raise _Failed(f"`{' '.join(cmd)}` fell back to the {d['backend']} backend: {d['fallback']}")
    return Run(
        d["states"], d["transitions"], d["depth"], d["verdict"], wall, cpu, d["seconds"], peak,
        d["load_seconds"], tuple(d["mismatches"]),
    )  # fmt: skip


_BASELINE_LINE = re.compile(r"states=(\d+) transitions=(\d+) time=([0-9.]+)s")


def _base(params: tuple[int, int, int, int]) -> Run:
    """Run the baseline at ``params`` in a fresh process and read its report."""
    cmd = [sys.executable, "-c", _RUN_BASELINE, str(BASELINE), *map(str, params)]
    out, code, wall, cpu, peak = _measure(cmd)
    found = _BASELINE_LINE.search(out)
    if found is None or code not in (0, 1):
        shown = " ".join(["python", str(BASELINE), *map(str, params)])
        raise _Failed(f"`{shown}` exited {code}:\n{out.rstrip()}")
    verdict = "ok" if code == 0 and "OK: all invariants hold" in out else "violation"
    states, transitions, seconds = found.groups()
    return Run(int(states), int(transitions), None, verdict, wall, cpu, float(seconds), peak)


def _build(peer: Peer, peers: Path, out: Path, params: tuple[int, int, int, int]) -> float:
    """Build ``peer`` for ``params`` in ``out``; the seconds it took."""
    start = time.perf_counter()
    for cmd in peer.build(peers / peer.source, out, params):
        try:
            done = subprocess.run(cmd, cwd=out, capture_output=True, text=True, check=False)
        except OSError as e:
            raise _Failed(f"cannot run `{' '.join(cmd)}`: {e.strerror or e}") from None
        if done.returncode != 0:
            shown = (done.stdout + done.stderr).strip()[-2000:]
            raise _Failed(f"`{' '.join(cmd)}` exited {done.returncode}:\n{shown}")
    return time.perf_counter() - start


def _native(peer: Peer, binary: Path) -> Run:
    """Run a built native checker in a fresh process and read its report."""
    cmd = [str(binary), *peer.run]
    try:
        out, code, wall, cpu, peak = _measure(cmd, cwd=binary.parent)
    except OSError as e:  # the build made no checker
        raise _Failed(f"cannot run `{' '.join(cmd)}`: {e.strerror or e}") from None
    found = peer.states.search(out)
    if found is None:
        raise _Failed(f"`{' '.join(cmd)}` exited {code}:\n{out.strip()[-2000:]}")
    verdict = "ok" if code == 0 and peer.clean.search(out) else "violation"
    return Run(int(found.group(1)), None, None, verdict, wall, cpu, wall, peak)


def _measure(cmd: list[str], cwd: Path | None = None) -> tuple[str, int, float, float, float]:
    """Run ``cmd`` to the end: (output, exit status, wall seconds, processor seconds, peak RSS
    in MiB).

    The peak is the one the child printed at exit (Linux ``VmHWM``: this process image's
    high-water mark). Failing that (a native checker prints none) it is ``wait4``'s
    ``ru_maxrss``, which Linux floors at this parent's own RSS when it forked (about 20 MiB),
    so it overstates small runs.
    """
    env = dict(os.environ)
    package_root = str(Path(fsm_core.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd
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
    cpu = usage.ru_utime + usage.ru_stime
    reported = [ln for ln in out.splitlines() if ln.startswith(_PEAK)]
    if reported:
        return out, proc.returncode, wall, cpu, int(reported[-1].removeprefix(_PEAK)) / 1024
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return out, proc.returncode, wall, cpu, usage.ru_maxrss * unit / 2**20


def _child(argv: Sequence[str]) -> int:
    """The process ``_ours`` starts: check one model file, print one JSON line and the peak.

    ``argv`` is the model file, the liveness flag, the backend and, optionally, the
    ``--specs`` directory.
    """
    path, flag, name, *specs = argv
    liveness = {"default": None, "off": False, "on": True}[flag]
    backend = _BACKEND[name]
    start = time.perf_counter()
    # Parse, and prove the table at its declared constants.
    model = load_model(Path(path), specs=Path(specs[0]) if specs else None)
    loaded = time.perf_counter()
    # Compile, search, and liveness when it is on.
    report = check(model, liveness=liveness, backend=backend)
    seconds = time.perf_counter() - loaded
    result = report.result
    line = {
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "verdict": report.verdict,
        "backend": report.backend,
        "fallback": report.fallback,
        "seconds": seconds,
        "load_seconds": loaded - start,
        "mismatches": report.mismatches(),
    }
    print(json.dumps(line))
    peak = _vmhwm_kib()
    if peak is not None:
        print(f"{_PEAK}{peak}")
    return 0


_BACKEND: Final[dict[str, Backend]] = {"auto": "auto", "vector": "vector", "python": "python"}


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
    bench: dict[str, dict[str, _Median]],
    params: dict[str, tuple[int, int, int, int]],
    builds: dict[tuple[str, str], float],
    missing: dict[str, str],
    peers: Path,
    repeat: int,
) -> None:
    if not bench:
        return
    rounds = "one round" if repeat == 1 else f"the median of {repeat} interleaved rounds"
    _say(
        f"fsm-core bench on the shared bench model; CPython {sys.version.split()[0]} on "
        f"{_machine()}. Each figure is {rounds} of a whole process: wall seconds and peak "
        "RSS. x SPIN and x baseline are wall time over SPIN's and over the hand-written "
        "BFS's in the same run (lower is better); cpu s is the processor time the process "
        "used, which other work on the machine inflates less than wall time, and x SPIN cpu "
        "its ratio; states/s = states / wall seconds; build s is a native checker's one-off "
        "build, not in its wall time."
    )
    for key, why in missing.items():
        print(f"{PEERS_BY_KEY[key].name} is missing: {why}; no figures or ratios for it.")
    head = (
        "scale", "(K,T,S,C)", "checker", "states", "wall s", "x SPIN", "x baseline",
        "cpu s", "x SPIN cpu", "states/s", "MiB", "build s",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for scale, found in bench.items():
        spin, base = found.get("spin"), found.get("baseline")
        for key, m in found.items():
            rows.append(
                (
                    scale,
                    "(" + ",".join(map(str, params[scale])) + ")",
                    _NAMES[key],
                    f"{m.first.states:,}",
                    _num(m.wall_s, 2),
                    _num(m.wall_s / spin.wall_s if spin else None, 2),
                    _num(m.wall_s / base.wall_s if base else None, 2),
                    _num(m.cpu_s, 2),
                    _num(m.cpu_s / spin.cpu_s if spin and spin.cpu_s > 0 else None, 2),
                    _rate(m.first.states / m.wall_s),
                    _num(m.peak_mib, 0),
                    _num(builds.get((key, scale)), 2),
                )
            )
    _table(head, rows, left=3)
    print("Inside our processes (the search as check() times it, and the model's loading):")
    for scale, found in bench.items():
        for key in BACKENDS:
            if key in found:
                m = found[key]
                print(f"  {scale} {key}: {m.search_s:.2f} s search + {_num(m.load_s, 2)} s load")


def _print_models(timed: list[tuple[str, str, _Median | None]]) -> None:
    print()
    _say(
        "Default models, each as `fsm-core check` runs it (the backend it picks, with the "
        "liveness check), in a process of its own: check s is the check inside the process "
        "(states/s is states / check s), wall s and MiB the whole process."
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
    bench: dict[str, dict[str, _Median]], models: int, problems: list[str], seconds: float
) -> str:
    """The last line, for scripts: ``key=value`` pairs, one comma-separated item per scale."""

    def each(show: Callable[[dict[str, _Median]], str | None]) -> str:
        return ",".join(show(found) or "-" for found in bench.values()) or "-"

    def wall(key: str) -> Callable[[dict[str, _Median]], str | None]:
        return lambda found: f"{found[key].wall_s:.2f}" if key in found else None

    def peak(key: str) -> Callable[[dict[str, _Median]], str | None]:
        return lambda found: f"{found[key].peak_mib:.0f}" if key in found else None

    def ratio(key: str, to: str, cpu: bool = False) -> Callable[[dict[str, _Median]], str | None]:
        def show(found: dict[str, _Median]) -> str | None:
            if key not in found or to not in found:
                return None
            if cpu:
                spent = found[to].cpu_s
                return f"{found[key].cpu_s / spent:.2f}" if spent > 0 else None
            return f"{found[key].wall_s / found[to].wall_s:.2f}"

        return show

    def states(found: dict[str, _Median]) -> str | None:
        return str(next(iter(found.values())).first.states) if found else None

    fields = {"bench": ",".join(bench) or "-", "states": each(states)}
    for key in CHECKERS:
        fields[f"{key}_s"] = each(wall(key))
    for key in BACKENDS:
        fields[f"{key}_x_spin"] = each(ratio(key, "spin"))
        fields[f"{key}_x_baseline"] = each(ratio(key, "baseline"))
        fields[f"{key}_x_spin_cpu"] = each(ratio(key, "spin", cpu=True))
    for key in CHECKERS:
        fields[f"{key}_mib"] = each(peak(key))
    fields["models"] = str(models)
    fields["problems"] = str(len(problems))
    fields["sec"] = f"{seconds:.1f}"
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
