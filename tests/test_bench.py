"""The shared bench model: our checker reproduces the reference counts, and refutes the bug.

Five independent checkers agree on the bench model's reachable-state counts (``FIGURES.md``);
ours must give the same numbers, so any difference is a fault in our table or our checker.
``fsm-core bench`` itself is tested for what it reports, never for how fast it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from fsm_core import FsmError
from fsm_core._paths import models_dir
from fsm_core.check import check, load_model
from fsm_core.tools import _bench
from fsm_core.tools._bench import (
    BASELINE,
    PEERS,
    REFERENCE,
    Reference,
    Run,
    _engines,
    _ours,
    configure,
    run,
)
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import FSM_CORE, copy_specs, write_model


def test_bench_model_reproduces_the_reference_counts() -> None:
    """At S here; every scale's [expect] is pinned to the reference below, and
    tests/test_models.py checks the default tier (S and M) against its [expect]."""
    report = check(load_model(models_dir() / "bench_S.toml"))
    assert report.mismatches() == []
    assert (report.result.states, report.result.transitions) == (797, 3_553)
    assert report.verdict == "ok"


@pytest.mark.parametrize("scale", list(REFERENCE))
def test_every_bench_model_records_the_reference_counts(scale: str) -> None:
    model = load_model(models_dir() / f"bench_{scale}.toml")
    ref = REFERENCE[scale]
    assert model.tier == ("default" if scale in ("S", "M") else "bench")
    assert model.expect is not None
    assert (model.expect.states, model.expect.transitions) == (ref.states, ref.transitions)
    assert model.expect.verdict == "ok"


def _seed_the_dispose_bug(tmp_path: Path) -> Path:
    """bench-model.md's seeded BUG: dispose keeps an existing cause instead of overriding it."""
    shutil.copytree(models_dir() / "bench", tmp_path / "bench")
    table = tmp_path / "bench" / "turncancel.toml"
    rows = table.read_text().split("[[rows]]")
    busy = [i for i, row in enumerate(rows) if 'id = "dispose.busy"' in row]
    assert len(busy) == 1
    row = rows[busy[0]]
    assert row.count('"reason := disposed"') == 1
    rows[busy[0]] = row.replace(
        '"reason := disposed"', '"reason := if reason == none then disposed else reason"'
    )
    table.write_text("[[rows]]".join(rows))
    model = tmp_path / "bench_bug.toml"
    model.write_text(
        '[model]\ntable = "bench/turncancel.toml"\nkind = "table"\n'
        "constants = { K = 2, T = 2, S = 4, C = 2 }\n"
    )
    return model


def test_dispose_keeping_an_earlier_cause_is_refuted_in_four_steps(tmp_path: Path) -> None:
    report = check(load_model(_seed_the_dispose_bug(tmp_path)))
    assert report.verdict == "violation"
    assert report.violation is not None
    assert report.violation.name == "dispose_precedence"
    assert len(report.violation.trace) == 1 + 4  # the initial state, then four steps
    steps = [report.moves[label] for label, _ in report.violation.trace if label is not None]
    assert [m.event for m in steps] == ["followup", "claim", "cancel", "dispose"]
    assert dict(steps[2].args)["cause"] in ("user", "parent")
    assert steps[3].row == "dispose.busy"
    state = dict(zip(report.names, report.violation.state, strict=True))
    assert (state["phase"], state["disp"]) == ("cancelling", True)
    assert state["reason"] in ("user", "parent")


def test_the_baseline_is_a_verbatim_copy_of_the_shared_script() -> None:
    lines = BASELINE.read_text().splitlines(keepends=True)
    rules = [i for i, line in enumerate(lines) if line.startswith("# -----")]
    assert len(rules) == 2
    header = "".join(lines[rules[0] : rules[1] + 1])
    original = "".join(lines[: rules[0]] + lines[rules[1] + 1 :])
    recorded = re.search(r"original-sha256: ([0-9a-f]{64})", header)
    assert recorded is not None
    assert hashlib.sha256(original.encode()).hexdigest() == recorded.group(1)


def _bench_args(*argv: str, startup: bool = False) -> argparse.Namespace:
    """``fsm-core bench ARGV``'s arguments; the agents and trees and the partitioned searches
    only when ``argv`` asks for them, the start-up only when ``startup``."""
    parser = argparse.ArgumentParser(prog="fsm-core bench")
    configure(parser)
    quiet = ["--composed", "none"] if "--composed" not in argv else []
    quiet += [] if "--workers-speedup" in argv else ["--no-workers-speedup"]
    quiet += [] if startup else ["--no-startup"]
    return parser.parse_args([*argv, *quiet])


DONE_AT_S = re.compile(
    r"Done\. bench=S states=797 spin_s=(?P<spin>[-0-9.]+) rumur_s=(?P<rumur>[-0-9.]+) "
    r"vector_s=\d+\.\d\d python_s=\d+\.\d\d baseline_s=\d+\.\d\d "
    r"vector_x_spin=(?P<x_spin>[-0-9.]+) vector_x_baseline=\d+\.\d\d "
    r"vector_x_spin_cpu=[-0-9.]+ python_x_spin=[-0-9.]+ python_x_baseline=\d+\.\d\d "
    r"python_x_spin_cpu=[-0-9.]+ spin_mib=[-0-9]+ rumur_mib=[-0-9]+ "
    r"vector_mib=\d+ python_mib=\d+ baseline_mib=\d+ models=0 composed=0 speedup=- "
    r"problems=0 sec=\d+\.\d"
)


def test_bench_at_s_agrees_with_the_baseline_and_ends_with_a_done_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(_bench_args("--scale", "S", "--no-models", "--no-peers")) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out
    last = out.splitlines()[-1]
    done = DONE_AT_S.fullmatch(last)
    assert done is not None, last
    assert (done["spin"], done["rumur"], done["x_spin"]) == ("-", "-", "-")


def test_bench_times_the_start_up_with_the_table_proofs_cached_and_proved_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    args = _bench_args(*SMALL, "--no-workers-speedup", startup=True)
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "Start-up: `fsm-core spec`" in out
    lines = out.splitlines()
    table = lines[next(i for i, ln in enumerate(lines) if ln.startswith("proofs ")) :][:4]
    assert [row.split("  ")[0] for row in table] == [
        "proofs", "cached", "proved", "cached / proved"
    ]  # fmt: skip
    assert "FAILED" not in out
    assert any((tmp_path / "fsm-core" / "proofs").iterdir())


def test_bench_exits_1_naming_the_scale_and_checker_when_counts_disagree(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(REFERENCE, "S", Reference((2, 2, 4, 2), 798, 3_553))
    assert run(_bench_args("--scale", "S", "--no-models", "--no-peers")) == 1
    out = capsys.readouterr().out
    for checker in ("vector", "python", "baseline"):
        assert (
            f"FAILED: bench S: {checker} found states=797 transitions=3553 verdict=ok, "
            "the reference is states=798 transitions=3553 verdict=ok\n"
        ) in out
    assert " problems=3 " in out.splitlines()[-1]


def _fake_tools(tmp_path: Path, states: int) -> Path:
    """A directory of stand-ins for spin, gcc, rumur and cc: each "build" writes a checker
    that reports ``states`` states and no error, in its checker's words."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    spin_says = f"State-vector 20 byte, depth reached 9, errors: 0\\n  {states} states, stored"
    rumur_says = f"Status:\\n\\n\\tNo error found.\\n\\t{states} states, 3 rules fired in 0s."
    scripts = {
        "spin": "exit 0",
        "rumur": "exit 0",
        # Both compilers are called with the checker's name as the fourth argument, after -o.
        "gcc": f'printf \'#!/bin/sh\\nprintf "{spin_says}\\\\n"\\n\' > "$4"; chmod +x "$4"',
        "cc": f'printf \'#!/bin/sh\\nprintf "{rumur_says}\\\\n"\\n\' > "$4"; chmod +x "$4"',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        path.chmod(0o755)
    return bin_dir


def test_bench_says_clearly_when_a_peer_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    args = _bench_args("--scale", "S", "--no-models", "--no-baseline", "--backend", "vector")
    assert run(args) == 0
    out = capsys.readouterr().out
    assert (
        "SPIN DFS -DSAFETY is missing: spin is not installed (apt-get install spin); "
        "no figures or ratios for it.\n"
        "rumur, 1 thread is missing: rumur is not installed (apt-get install rumur); "
        "no figures or ratios for it.\n"
    ) in out
    assert " spin_s=- rumur_s=- vector_s=" in out.splitlines()[-1]


def test_bench_says_which_model_file_a_peer_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{_fake_tools(tmp_path, 797)}{os.pathsep}{os.environ['PATH']}")
    empty = tmp_path / "peers"
    empty.mkdir()
    args = _bench_args("--scale", "S", "--no-models", "--no-baseline", "--peers", str(empty))
    assert run(args) == 0
    assert (
        f"SPIN DFS -DSAFETY is missing: there is no turncancel.pml in {empty} (--peers DIR "
        "names another); no figures or ratios for it.\n"
    ) in capsys.readouterr().out


def test_a_peer_that_finds_other_counts_fails_the_bench_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    peers = tmp_path / "peers"
    peers.mkdir()
    (peers / "turncancel.pml").write_text("/* stand-in */\n", encoding="utf-8")
    (peers / "turncancel.m").write_text("const\n  K: 1;\n  T: 1;\n  S: 1;\n  C: 1;\n")
    monkeypatch.setenv("PATH", f"{_fake_tools(tmp_path, 796)}{os.pathsep}{os.environ['PATH']}")
    args = _bench_args("--scale", "S", "--no-models", "--backend", "vector", "--peers", str(peers))
    assert run(args) == 1
    out = capsys.readouterr().out
    for peer in ("spin", "rumur"):
        assert (
            f"FAILED: bench S: {peer} found states=796 verdict=ok, the reference is "
            "states=797 verdict=ok\n"
        ) in out
    last = out.splitlines()[-1]
    assert " spin_s=0." in last and " vector_x_spin=" in last and " problems=2 " in last


NATIVE = all(shutil.which(tool) for tool in ("spin", "rumur", "gcc", "cc"))


@pytest.mark.skipif(
    not NATIVE or not PEERS.is_dir(), reason="needs spin, rumur, gcc and ../shared/bench"
)
def test_bench_builds_and_runs_spin_and_rumur_and_their_counts_agree(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(_bench_args("--scale", "S", "--no-models")) == 0
    out = capsys.readouterr().out
    done = DONE_AT_S.fullmatch(out.splitlines()[-1])
    assert done is not None, out
    assert done["spin"] != "-" and done["rumur"] != "-" and done["x_spin"] != "-"
    rows = [line.split("  ")[0] for line in out.splitlines() if line.startswith("S ")]
    assert len(rows) == 5


def test_bench_checks_a_default_model_on_the_tables_of_specs(tmp_path: Path) -> None:
    """The child process that times a default model reads its table from ``--specs``."""
    specs = copy_specs(tmp_path)
    BY_NAME["dispose_not_memoized"].plant(specs)
    run = _ours(models_dir() / "activation_tree.toml", None, "auto", specs)
    assert run.verdict == "violation"


def test_sigint_during_bench_exits_130_with_one_line_of_its_own() -> None:
    argv = [*FSM_CORE, "bench", "--scale", "L", "--no-baseline", "--no-models", "--no-peers"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stderr is not None
        started = "bench L run 1/1: vector ..."  # then the run; its line ends when it does
        assert p.stderr.read(len(started)) == started
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    assert (p.returncode, out, err) == (130, "", "\nfsm-core: interrupted\n")


# --- the agents and trees, and the partitioned search ---------------------------------------


@pytest.fixture
def tiny_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A models directory of bench_S and ``tiny``, activation_tree with smaller budgets (357
    states; 233 over sibling orbits) and no [expect], which the bench reads instead of models/."""
    shutil.copy(models_dir() / "bench_S.toml", tmp_path / "bench_S.toml")
    body = (models_dir() / "activation_tree.toml").read_text(encoding="utf-8")
    body = re.sub(
        r"(?m)^budgets = .*$",
        "budgets = { admit = 2, dispose = 1, drain = 0, drain_below = 0, drain_child = 0 }",
        body[: body.index("[expect]")],
    ).replace("\nfailures = 1\n", "\nfailures = 0\n")
    root = write_model(tmp_path, "tiny", body).parent
    shutil.copy(models_dir() / "bench_S.toml", root / "bench_S.toml")
    shutil.copytree(models_dir() / "bench", root / "bench")
    monkeypatch.setattr(_bench, "models_dir", lambda: root)
    return root


SMALL = ("--scale", "S", "--no-peers", "--no-baseline", "--backend", "vector", "--no-models")


def _rows(out: str, *head: str) -> list[list[str]]:
    """The rows of the table whose head starts with the columns ``head``, each row split into
    its columns (at runs of spaces)."""
    lines = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]
    start = next(i for i, line in enumerate(lines) if tuple(line[: len(head)]) == head)
    return list(itertools.takewhile(lambda row: len(row) >= len(head), lines[start + 1 :]))


def test_bench_times_a_tree_engine_against_engine_and_one_process_against_two(
    tiny_models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _bench_args(
        *SMALL, "--composed", "default", "--engine", "interpreted", "symmetry",
        "--workers-speedup", "tiny",
    )  # fmt: skip
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out
    engines = _rows(out, "model", "tier", "engine")
    assert [row[:7] for row in engines] == [
        ["tiny", "default", "compiled", "357", "-", "10,244", "15"],
        ["tiny", "default", "interpreted", "357", "-", "10,244", "15"],
        ["tiny", "default", "symmetry", "233", "357", "6,434", "15"],
    ]
    assert engines[0][9] == "1.00"  # x compiled
    split = _rows(out, "model", "kind", "backend")
    assert [row[:5] for row in split] == [["tiny", "activation-tree", "python", "357", "10,244"]]
    last = out.splitlines()[-1]
    assert re.search(r" models=0 composed=1 speedup=\d+\.\d\d problems=0 ", last), last


def _corrupt(which: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the runs of ``which`` (an engine, or ``split``: the partitioned search) find
    one state more (``symmetry``: stand for one more) than they do."""
    ours = _bench._ours

    def corrupted(*args: object, **options: object) -> Run:
        found: Run = ours(*args, **options)  # type: ignore[arg-type]
        engine = args[4] if len(args) > 4 else "compiled"
        workers = args[5] if len(args) > 5 else 1
        if which == "split" and workers != 1:
            return dataclasses.replace(found, states=found.states + 1)
        if which == engine == "interpreted":
            return dataclasses.replace(found, states=found.states + 1)
        if which == engine == "symmetry":
            assert found.unreduced is not None
            return dataclasses.replace(found, unreduced=found.unreduced + 1)
        return found

    monkeypatch.setattr(_bench, "_ours", corrupted)


@pytest.mark.parametrize(
    ("which", "argv", "failed"),
    [
        (
            "interpreted",
            ("--composed", "default", "--engine", "interpreted"),
            "composed tiny: the interpreted composition found states=358 transitions=10244 "
            "depth=15 verdict=ok, the compiled one states=357 transitions=10244 depth=15 "
            "verdict=ok",
        ),
        (
            "symmetry",
            ("--composed", "default", "--engine", "symmetry"),
            "composed tiny: the search over sibling orbits found states=233 transitions=6434 "
            "depth=15 verdict=ok unreduced=358, the search of every state states=357 "
            "transitions=10244 depth=15 verdict=ok",
        ),
        (
            "split",
            ("--composed", "none", "--workers-speedup", "tiny"),
            "workers tiny: the search partitioned across 2 processes found states=358 "
            "transitions=10244 depth=15 verdict=ok, the search in one process states=357 "
            "transitions=10244 depth=15 verdict=ok",
        ),
    ],
)
def test_bench_exits_1_naming_the_model_when_two_searches_disagree(
    which: str,
    argv: tuple[str, ...],
    failed: str,
    tiny_models: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _corrupt(which, monkeypatch)
    assert run(_bench_args(*SMALL, *argv)) == 1
    out = capsys.readouterr().out
    assert f"FAILED: {failed}\n" in out
    assert " problems=1 " in out.splitlines()[-1]


def test_bench_refuses_a_partitioned_search_it_cannot_run(
    tiny_models: Path,
) -> None:
    with pytest.raises(
        FsmError, match=r"^--workers-speedup nope: there is no models/nope\.toml; the models "
        r"are bench_S, tiny$",
    ):  # fmt: skip
        run(_bench_args(*SMALL, "--workers-speedup", "nope"))
    with pytest.raises(FsmError, match=r"^--workers 1: a partitioned search needs 2 or more$"):
        run(_bench_args(*SMALL, "--workers-speedup", "tiny", "--workers", "1"))


def test_the_engines_timed_unasked_are_those_a_model_can_afford() -> None:
    by_name = {n: load_model(models_dir() / f"{n}.toml") for n in _AFFORD}
    assert {n: _engines(m, None) for n, m in by_name.items()} == _AFFORD
    # Asked for, an engine runs wherever it applies: symmetry only on a tree of width 2 or more.
    asked = ["symmetry", "interpreted"]
    assert _engines(by_name["agent_deep"], asked) == ["compiled", "interpreted"]
    assert _engines(by_name["agent_tree_three"], asked) == ["compiled", "symmetry", "interpreted"]


_AFFORD = {
    "agent_races": ["compiled", "interpreted"],  # 320,600 transitions
    "agent_deep": ["compiled"],  # 5,963,472
    "activation_tree": ["compiled", "symmetry"],  # 946,701 transitions, 30,489 states
    "agent_tree_three": ["compiled"],  # 989,758 states
}


def test_outside_a_checkout_the_peers_need_a_directory_and_the_bench_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed package has no ../shared/bench: no default, and the message says why."""
    monkeypatch.setattr(_bench, "BASELINE", tmp_path / "site-packages" / "ref_bfs.py")
    monkeypatch.setenv("PATH", f"{_fake_tools(tmp_path, 797)}{os.pathsep}{os.environ['PATH']}")
    parser = argparse.ArgumentParser(prog="fsm-core bench")
    configure(parser)
    assert "(default: none outside a checkout: give it to run SPIN and rumur)" in " ".join(
        parser.format_help().split()
    )
    assert run(_bench_args("--scale", "S", "--no-models", "--no-baseline")) == 0
    out = capsys.readouterr().out
    assert (
        "SPIN DFS -DSAFETY is missing: no --peers DIR names where turncancel.pml is, and an "
        "installed fsm-core has no default (a checkout reads ../shared/bench beside it); no "
        "figures or ratios for it.\n"
    ) in out
