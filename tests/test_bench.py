"""The shared bench model: our checker reproduces the reference counts, and refutes the bug.

Five independent checkers agree on the bench model's reachable-state counts (``FIGURES.md``);
ours must give the same numbers, so any difference is a fault in our table or our checker.
``fsm-core bench`` itself is tested for what it reports, never for how fast it was.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from fsm_core._paths import models_dir
from fsm_core.check import check, load_model
from fsm_core.tools._bench import BASELINE, REFERENCE, Reference, _ours, configure, run
from fsm_core.tools._mutants import BY_NAME
from tests.helpers import FSM_CORE, copy_specs


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


def _bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fsm-core bench")
    configure(parser)
    return parser.parse_args(argv)


def test_bench_at_s_agrees_with_the_baseline_and_ends_with_a_done_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(_bench_args("--scale", "S", "--no-models")) == 0
    out = capsys.readouterr().out
    assert "FAILED" not in out
    last = out.splitlines()[-1]
    assert re.fullmatch(
        r"Done\. bench=S ratio=\d+\.\d\d ours_s=\d+\.\d\d baseline_s=\d+\.\d\d states=797 "
        r"transitions=3553 states_per_s=\d+ ours_mib=\d+ baseline_mib=\d+ models=0 "
        r"problems=0 sec=\d+\.\d",
        last,
    ), last


def test_bench_exits_1_naming_the_scale_when_counts_disagree(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = Reference((2, 2, 4, 2), 798, 3_553, None, None, 0.0, 0.0)
    monkeypatch.setitem(REFERENCE, "S", wrong)
    assert run(_bench_args("--scale", "S", "--no-models")) == 1
    out = capsys.readouterr().out
    assert (
        "FAILED: bench S: ours found states=797 transitions=3553 verdict=ok, "
        "the reference is states=798 transitions=3553 verdict=ok\n"
    ) in out
    assert (
        "FAILED: bench S: baseline found states=797 transitions=3553 verdict=ok, "
        "the reference is states=798 transitions=3553 verdict=ok\n"
    ) in out
    assert " problems=2 " in out.splitlines()[-1]


def test_bench_checks_a_default_model_on_the_tables_of_specs(tmp_path: Path) -> None:
    """The child process that times a default model reads its table from ``--specs``."""
    specs = copy_specs(tmp_path)
    BY_NAME["dispose_not_memoized"].plant(specs)
    assert _ours(models_dir() / "activation_tree.toml", None, specs).verdict == "violation"


def test_sigint_during_bench_exits_130_with_one_line_of_its_own() -> None:
    argv = [*FSM_CORE, "bench", "--scale", "L", "--no-baseline", "--no-models"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stderr is not None
        started = "bench L run 1/1: ours ..."  # then the run; its line ends when it does
        assert p.stderr.read(len(started)) == started
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    assert (p.returncode, out, err) == (130, "", "\nfsm-core: interrupted\n")
