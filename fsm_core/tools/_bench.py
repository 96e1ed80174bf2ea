"""``fsm-core bench``: time the checker against the baseline and the native checkers, on the
shared model, in one run.

The shared benchmark model (``models/bench/turncancel.toml``, from ``bench-model.md``) has
reference state counts that five independent checkers agree on (``FIGURES.md``). This command
checks it at each scale point with each of our backends, with the hand-written Python BFS those
figures call the baseline (``benchmarks/ref_bfs.py``, a verbatim copy), and with SPIN and rumur
built from the same model's Promela and Murphi versions (``turncancel.pml``, ``turncancel.m``
in ``../shared/bench/`` beside the checkout, or ``--peers DIR``), when ``spin``, ``rumur``
and a C compiler are installed. Then it times the agent and tree models engine against engine
(the compiled composition, the interpreted one it is tested against, and the search with the
other ``[tree] symmetry`` setting), one model's search in one process against the same search
partitioned across ``--workers`` processes, and every default model as ``fsm-core check``
checks it::

    fsm-core bench                         # bench L, the default tier's agents and trees, ...
    fsm-core bench --scale L XL --repeat 3 --no-models --composed none --no-workers-speedup
    fsm-core bench --scale S --composed bench --workers-speedup bench_XL agent_tree_wide

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
the baseline's, and SPIN's and rumur's states), when two engines or the one-process and the
partitioned search of a model disagree (a search over sibling orbits must stand for as many
states as the unreduced search finds), when a model misses its ``[expect]``, or when a run
fails; never on a time. A missing peer is said so, with what would bring it, and leaves
its figures and the ratios to it empty.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import fsm_core
from fsm_core._errors import FsmError, SpecError
from fsm_core._options import positive_int
from fsm_core._paths import models_dir
from fsm_core.check import Backend, Model, check, load_model, load_models
from fsm_core.check._parallel import Source
from fsm_core.check._report import aligned
from fsm_core.table._load import read_toml
from fsm_core.table._proofs import NO_CACHE

_REPO = Path(fsm_core.__file__).resolve().parent.parent
BASELINE: Final = _REPO / "benchmarks" / "ref_bfs.py"
"""The baseline script. It ships with the repository, not with the wheel."""
PEERS: Final = _REPO.parent / "shared" / "bench"
"""Where the native checkers' models are, by default, in a checkout: ``shared/bench`` beside it."""


def default_peers() -> Path | None:
    """:data:`PEERS` when this runs from a checkout (the baseline is there), else None: an
    installed package has no repository for a directory to be beside."""
    return PEERS if BASELINE.is_file() else None


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

COMPOSED_ENGINES: Final = ("compiled", "interpreted", "symmetry")
"""What explores an agent or tree model here: the compiled composition (``fsm-core check``'s),
the interpreted one it is tested against, and the compiled one with the other ``[tree]
symmetry`` setting (a tree of width 2 or more): over sibling orbits if the model searches every
state, every state if it searches orbits."""
INTERPRETED_UP_TO: Final = 360_000
"""The transitions a model's ``[expect]`` may record for the bench to run its interpreted
composition unasked: it runs 3 to 20 times slower than the compiled one."""
SYMMETRY_UP_TO: Final = 100_000
"""The states a tree's ``[expect]`` may record for the bench to search it with the other
symmetry setting unasked: searched without its orbits, a width-3 tree has four times the states."""
SPEEDUP_MODEL: Final = "agent_deep"
"""The composed model whose search ``fsm-core bench`` partitions by default: the default tier's
with the most transitions."""


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
    unreduced: int | None = None
    """With ``[tree] symmetry``: the states the search's orbits stand for."""
    backend: str | None = None
    """Ours: the backend that explored (``vector``, ``python``)."""


@dataclass(frozen=True, slots=True)
class _Median:
    """The median of repeated runs, whose counts must all be the same."""

    first: Run
    wall_s: float
    cpu_s: float
    search_s: float
    peak_mib: float
    load_s: float | None


@dataclass(frozen=True, slots=True)
class _Startup:
    """The median wall and processor seconds of one way of starting ``fsm-core spec``."""

    wall_s: float
    cpu_s: float


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

    def missing(self, peers: Path | None) -> str | None:
        """Why this peer cannot run here, or None (``peers`` None: no directory was given and
        there is no default)."""
        for command, package in self.tools:
            if shutil.which(command) is None:
                return f"{command} is not installed (apt-get install {package})"
        if peers is None:
            return (
                f"no --peers DIR names where {self.source} is, and an installed fsm-core has "
                "no default (a checkout reads ../shared/bench beside it)"
            )
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
        "BFS on the shared bench model, the agent and tree models engine against engine, "
        "searches in one process against the same partitioned, interleaved, then time every "
        "default model. Exits 1 if counts disagree."
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
    peers = default_peers()
    parser.add_argument(
        "--peers",
        type=Path,
        default=None,
        metavar="DIR",
        help="where turncancel.pml and turncancel.m are (default: "
        + (f"{peers})" if peers else "none outside a checkout: give it to run SPIN and rumur)"),
    )
    parser.add_argument("--no-models", action="store_true", help="do not time the default models")
    parser.add_argument(
        "--no-startup",
        action="store_true",
        help="do not time `fsm-core spec`'s start-up with its table proofs cached and without",
    )
    parser.add_argument(
        "--composed",
        choices=("default", "bench", "none"),
        default="default",
        help="the agent and tree models to time engine against engine: the default tier's "
        "(default), those and the bench tier's (minutes), or none",
    )
    parser.add_argument(
        "--engine",
        nargs="+",
        action="extend",
        choices=COMPOSED_ENGINES,
        help="the engines to time on those models: the compiled composition always; by "
        "default the interpreted one and the other symmetry setting too where a model's "
        f"[expect] is small (up to {INTERPRETED_UP_TO:,} transitions, {SYMMETRY_UP_TO:,} "
        "states); naming one runs it on every model it applies to",
    )
    parser.add_argument(
        "--workers-speedup",
        nargs="+",
        action="extend",
        metavar="MODEL",
        help="models whose search is timed in one process and partitioned across --workers "
        f"processes (default: bench_<scale> and {SPEEDUP_MODEL})",
    )
    parser.add_argument(
        "--no-workers-speedup", action="store_true", help="time no partitioned search"
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        default=2,
        metavar="N",
        help="the processes a partitioned search runs in (default: 2)",
    )


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
    peers_dir: Path | None = args.peers or default_peers()
    # --specs is the top-level parser's; a caller that built only this parser has none.
    specs: Path | None = getattr(args, "specs", None)
    root = models_dir()
    paths = {scale: root / f"bench_{scale}.toml" for scale in scales}
    params: dict[str, tuple[int, int, int, int]] = {}
    for scale, path in paths.items():
        if not path.is_file():
            raise FsmError(f"{path} is missing: bench scale {scale} needs its model file")
        params[scale] = _params(path)
    every = {m.name: m for m in load_models(root, specs=specs)}
    models = [] if args.no_models else [m for m in every.values() if m.tier == "default"]
    tiers = {"default": ("default",), "bench": ("default", "bench"), "none": ()}[args.composed]
    composed = [
        (m, _engines(m, args.engine))
        for m in every.values()
        if m.kind != "table" and m.tier in tiers
    ]
    workers: int = args.workers
    speedup = _speedup_models(args, scales, every)
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
                assert peers_dir is not None  # a peer with no directory is missing
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

    # The engines of a model run back to back, round after round, as the checkers do.
    engine_runs: dict[tuple[str, str], list[Run]] = {}
    for i in range(repeat):
        for model, asked in composed:
            for engine in asked:
                tag = f"composed {model.name} run {i + 1}/{repeat}: {engine}"
                timer = partial(_ours, root / Path(model.file).name, False, "auto", specs, engine)
                _attempt(problems, engine_runs.setdefault((model.name, engine), []), tag, timer)
    split_runs: dict[tuple[str, int], list[Run]] = {}
    for i in range(repeat):
        for model in speedup:
            for n in (1, workers):
                tag = f"workers {model.name} run {i + 1}/{repeat}: {n}"
                path = root / Path(model.file).name
                timer = partial(_ours, path, False, "auto", specs, "compiled", n)
                _attempt(problems, split_runs.setdefault((model.name, n), []), tag, timer)

    bench: dict[str, dict[str, _Median]] = {}
    for scale in scales:
        bench[scale] = {}
        for key in checkers:
            median = _median(problems, f"bench {scale} ({key})", runs[(key, scale)])
            if median is not None:
                bench[scale][key] = median
        _compare(problems, scale, params[scale], bench[scale])

    engines: list[tuple[Model, dict[str, _Median]]] = []
    for model, asked in composed:
        found: dict[str, _Median] = {}
        for engine in asked:
            what = f"composed {model.name} ({engine})"
            median = _median(problems, what, engine_runs.get((model.name, engine), []))
            if median is not None:
                found[engine] = median
        _agree_engines(problems, model, found)
        engines.append((model, found))
    splits: list[tuple[Model, _Median | None, _Median | None]] = []
    for model in speedup:
        alone, split = (
            _median(problems, f"workers {model.name} ({n})", split_runs.get((model.name, n), []))
            for n in (1, workers)
        )
        _agree_split(problems, model, alone, split, workers)
        splits.append((model, alone, split))

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

    startup = {} if args.no_startup else _startups(problems, repeat, specs)

    _print_bench(bench, params, builds, missing, repeat)
    if engines:
        _print_engines(engines, repeat)
    if splits:
        _print_splits(splits, workers, repeat)
    if models:
        _print_models(timed)
    if startup:
        _print_startup(startup, repeat)
    for problem in problems:
        print(f"FAILED: {problem}")
    speedups = [(one, split) for _, one, split in splits]
    seconds = time.perf_counter() - started
    print(_done(bench, len(models), len(engines), speedups, problems, seconds))
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


def _engines(model: Model, asked: Sequence[str] | None) -> list[str]:
    """The engines to time on the composed ``model``: the compiled one, then those ``asked``
    that apply to it, or unasked those its ``[expect]`` says are affordable."""
    tree = model.kind == "activation-tree" and model.width >= 2
    applies = {"compiled": True, "interpreted": True, "symmetry": tree}
    if asked is None:
        e = model.expect
        applies["interpreted"] = e is not None and e.transitions <= INTERPRETED_UP_TO
        applies["symmetry"] = tree and e is not None and e.states <= SYMMETRY_UP_TO
        asked = COMPOSED_ENGINES
    return ["compiled", *(e for e in dict.fromkeys(asked) if e != "compiled" and applies[e])]


def _speedup_models(
    args: argparse.Namespace, scales: Sequence[str], every: dict[str, Model]
) -> list[Model]:
    """The models of ``--workers-speedup``; refused, naming it, when one is not in models/ or
    cannot be partitioned."""
    if args.no_workers_speedup:
        return []
    if args.workers < 2:
        raise FsmError(f"--workers {args.workers}: a partitioned search needs 2 or more")
    names = args.workers_speedup or [f"bench_{scales[0]}", SPEEDUP_MODEL]
    chosen: list[Model] = []
    for name in dict.fromkeys(names):
        model = every.get(name)
        if model is None:
            raise FsmError(
                f"--workers-speedup {name}: there is no models/{name}.toml; the models are "
                + ", ".join(sorted(every))
            )
        if model.symmetry:
            raise FsmError(
                f"--workers-speedup {name}: a search over sibling orbits ([tree] symmetry) is "
                "not partitioned"
            )
        chosen.append(model)
    return chosen


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
    counts = {(r.states, r.transitions, r.depth, r.verdict, r.unreduced) for r in runs}
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


def _counts(r: Run) -> str:
    shown = f"states={r.states} transitions={r.transitions} depth={r.depth} verdict={r.verdict}"
    return shown + ("" if r.unreduced is None else f" unreduced={r.unreduced}")


def _agree_engines(problems: list[str], model: Model, found: dict[str, _Median]) -> None:
    """Every engine finds what the compiled one finds, which must be the model's ``[expect]``;
    a search with the other symmetry setting finds as many states as the orbits stand for."""
    compiled = found.get("compiled")
    if compiled is None:
        return
    ref = compiled.first
    problems += [f"composed {model.name}: {mismatch}" for mismatch in ref.mismatches]
    for engine, m in found.items():
        r = m.first
        if engine == "interpreted" and _counts(r) != _counts(ref):
            problems.append(
                f"composed {model.name}: the interpreted composition found {_counts(r)}, the "
                f"compiled one {_counts(ref)}"
            )
        if engine == "symmetry":
            orbits, whole = (ref, r) if model.symmetry else (r, ref)
            if (orbits.unreduced, orbits.depth, orbits.verdict) != (
                whole.states,
                whole.depth,
                whole.verdict,
            ):
                problems.append(
                    f"composed {model.name}: the search over sibling orbits found "
                    f"{_counts(orbits)}, the search of every state {_counts(whole)}"
                )


def _agree_split(
    problems: list[str], model: Model, one: _Median | None, split: _Median | None, workers: int
) -> None:
    """The partitioned search finds what the one-process search finds, and that ``[expect]``."""
    if one is None:
        return
    problems += [f"workers {model.name}: {mismatch}" for mismatch in one.first.mismatches]
    if split is not None and _counts(split.first) != _counts(one.first):
        problems.append(
            f"workers {model.name}: the search partitioned across {workers} processes found "
            f"{_counts(split.first)}, the search in one process {_counts(one.first)}"
        )


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


def _ours(
    path: Path,
    liveness: bool | None,
    backend: str,
    specs: Path | None,
    engine: str = "compiled",
    workers: int = 1,
) -> Run:
    """Check ``path`` in a fresh process (``liveness`` None: as ``fsm-core check`` would) with
    ``backend``, with its tables from ``specs`` as ``--specs`` reads them; a composed model's
    steps by ``engine`` (one of :data:`COMPOSED_ENGINES`); its search partitioned across
    ``workers`` processes when more than one (without the liveness pass)."""
    flag = {None: "default", False: "off", True: "on"}[liveness]
    cmd = [sys.executable, "-m", __name__, str(path), flag, backend, engine, str(workers)]
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
        d["load_seconds"], tuple(d["mismatches"]), d["unreduced"], d["backend"],
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


def _measure(
    cmd: list[str], cwd: Path | None = None, environ: Mapping[str, str | None] | None = None
) -> tuple[str, int, float, float, float]:
    """Run ``cmd`` to the end: (output, exit status, wall seconds, processor seconds, peak RSS
    in MiB).

    The peak is the one the child printed at exit (Linux ``VmHWM``: this process image's
    high-water mark). Failing that (a native checker prints none) it is ``wait4``'s
    ``ru_maxrss``, which Linux floors at this parent's own RSS when it forked (about 20 MiB),
    so it overstates small runs. ``environ`` sets (or, as None, removes) environment variables.
    """
    env = dict(os.environ)
    for name, value in (environ or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
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

    ``argv`` is the model file, the liveness flag, the backend, the engine, the workers and,
    optionally, the ``--specs`` directory. The ``symmetry`` engine searches the model with the
    other ``[tree] symmetry`` setting, which its ``[expect]`` does not describe.
    """
    path, flag, name, engine, workers, *specs = argv
    liveness = {"default": None, "off": False, "on": True}[flag]
    backend = _BACKEND[name]
    tables = Path(specs[0]) if specs else None
    start = time.perf_counter()
    # Parse, and prove the table at its declared constants.
    model = load_model(Path(path), specs=tables)
    if engine == "symmetry":
        model = dataclasses.replace(model, symmetry=not model.symmetry, expect=None)
    loaded = time.perf_counter()
    # Compile, search, and liveness when it is on.
    if int(workers) > 1:
        from fsm_core.check._partition import check_partitioned  # noqa: PLC0415

        source = Source(Path(path), specs=tables)
        report = check_partitioned(model, source, int(workers), backend=backend)
    else:
        interpreted = engine == "interpreted"
        report = check(model, liveness=liveness, backend=backend, interpreted=interpreted)
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
        "unreduced": report.unreduced_states,
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


def _rounds(repeat: int) -> str:
    return "one round" if repeat == 1 else f"the median of {repeat} interleaved rounds"


def _print_engines(engines: list[tuple[Model, dict[str, _Median]]], repeat: int) -> None:
    print()
    _say(
        "Agent and tree models, engine against engine, each run a process of its own without "
        f"the liveness pass ({_rounds(repeat)}): compiled is the composition `fsm-core check` "
        "runs, interpreted the one it is tested against; with symmetry and unreduced, the "
        "compiled one searches over sibling orbits or every state, the other way from the "
        "model file. unreduced is the states the orbits stand for. check s is the check "
        "inside the process (compiling included; states/s is states / check s), x compiled "
        "its ratio to the compiled engine's in the same run, wall s and cpu s the whole process."
    )
    head = (
        "model", "tier", "engine", "states", "unreduced", "transitions", "depth", "check s",
        "states/s", "x compiled", "wall s", "cpu s", "MiB",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for model, found in engines:
        compiled = found.get("compiled")
        for key, m in found.items():
            r = m.first
            engine = ("unreduced" if model.symmetry else "symmetry") if key == "symmetry" else key
            ratio = compiled and compiled.search_s > 0 and m.search_s / compiled.search_s
            rows.append(
                (
                    model.name,
                    model.tier,
                    engine,
                    f"{r.states:,}",
                    "-" if r.unreduced is None else f"{r.unreduced:,}",
                    f"{r.transitions:,}",
                    str(r.depth),
                    _num(m.search_s, 2),
                    _rate(r.states / m.search_s) if m.search_s > 0 else "-",
                    _num(ratio or None, 2),
                    _num(m.wall_s, 2),
                    _num(m.cpu_s, 2),
                    _num(m.peak_mib, 0),
                )
            )
    _table(head, rows, left=3)


def _print_splits(
    splits: list[tuple[Model, _Median | None, _Median | None]], workers: int, repeat: int
) -> None:
    print()
    _say(
        f"One search in one process against the same search partitioned across {workers} "
        f"processes (`--workers {workers}` on a lone model), without the liveness pass, "
        f"alternating ({_rounds(repeat)}); whole processes. speed-up is wall 1 over wall "
        f"{workers}; cpu {workers}/1 is the processor time of the {workers} processes over the "
        "one's: what partitioning costs in all."
    )
    n = str(workers)
    head = (
        "model", "kind", "backend", "states", "transitions", "wall 1 s", f"wall {n} s",
        "speed-up", "cpu 1 s", f"cpu {n} s", f"cpu {n}/1", "MiB 1", f"MiB {n}",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for model, one, split in splits:
        if one is None or split is None:
            rows.append((model.name, model.kind, *["-"] * (len(head) - 2)))
            continue
        r = one.first
        rows.append(
            (
                model.name,
                model.kind,
                r.backend or "-",
                f"{r.states:,}",
                f"{r.transitions:,}",
                _num(one.wall_s, 2),
                _num(split.wall_s, 2),
                _num(one.wall_s / split.wall_s, 2),
                _num(one.cpu_s, 2),
                _num(split.cpu_s, 2),
                _num(split.cpu_s / one.cpu_s if one.cpu_s > 0 else None, 2),
                _num(one.peak_mib, 0),
                _num(split.peak_mib, 0),
            )
        )
    _table(head, rows, left=3)


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
    bench: dict[str, dict[str, _Median]],
    models: int,
    composed: int,
    speedups: Sequence[tuple[_Median | None, _Median | None]],
    problems: list[str],
    seconds: float,
) -> str:
    """The last line, for scripts: ``key=value`` pairs, one comma-separated item per scale
    (``speedup``: per ``--workers-speedup`` model, wall time in one process over partitioned)."""

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
    fields["composed"] = str(composed)
    fields["speedup"] = (
        ",".join(f"{a.wall_s / b.wall_s:.2f}" if a and b else "-" for a, b in speedups) or "-"
    )
    fields["problems"] = str(len(problems))
    fields["sec"] = f"{seconds:.1f}"
    return "Done. " + " ".join(f"{k}={v}" for k, v in fields.items())


_STARTUPS: Final[dict[str, dict[str, str | None]]] = {
    "cached": {NO_CACHE: None},
    "proved": {NO_CACHE: "1"},
}
"""How ``fsm-core spec`` is started for each start-up figure: with the table proofs it finds in
the cache, and with the cache turned off, proving every table again."""


def _startups(problems: list[str], repeat: int, specs: Path | None) -> dict[str, _Startup]:
    """``fsm-core spec``'s start-up, cached against proved, interleaved: a first round, not
    counted, fills the cache; each figure is the median of the ``repeat`` rounds after it."""
    cmd = [sys.executable, "-m", "fsm_core", "spec", *(["--specs", str(specs)] if specs else [])]
    runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in _STARTUPS}
    for i in range(repeat + 1):
        for kind, environ in _STARTUPS.items():
            tag = f"start-up run {i}/{repeat}: {kind}"
            print(f"{tag} ...", end="", file=sys.stderr, flush=True)
            out, code, wall, cpu, _ = _measure(cmd, environ=environ)
            if code != 0:
                print(" failed", file=sys.stderr)
                problems.append(f"{tag}: `{' '.join(cmd)}` exited {code}:\n{out.rstrip()}")
                return {}
            print(
                f" {wall:.2f} s" + ("" if i else " (fills the cache, not counted)"), file=sys.stderr
            )
            if i:
                runs[kind].append((wall, cpu))
    return {
        kind: _Startup(
            statistics.median(w for w, _ in found), statistics.median(c for _, c in found)
        )
        for kind, found in runs.items()
    }


def _print_startup(startup: dict[str, _Startup], repeat: int) -> None:
    print()
    _say(
        "Start-up: `fsm-core spec` (load every table of specs/ and prove it over its whole "
        "domain) in a process of its own, with the proofs the cache holds and with "
        f"{NO_CACHE}=1, {_rounds(repeat)} after one that fills the cache."
    )
    cached, proved = startup["cached"], startup["proved"]
    rows = [(kind, _num(s.wall_s, 2), _num(s.cpu_s, 2)) for kind, s in startup.items()]
    rows.append(
        (
            "cached / proved",
            _num(cached.wall_s / proved.wall_s if proved.wall_s > 0 else None, 2),
            _num(cached.cpu_s / proved.cpu_s if proved.cpu_s > 0 else None, 2),
        )
    )
    _table(("proofs", "wall s", "cpu s"), rows, left=1)


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
