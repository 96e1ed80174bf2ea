"""``fsm-core check``: what it proves, what it prints, and how it exits."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from fsm_core import load_spec
from fsm_core._paths import models_dir
from fsm_core.check import check, load_model
from fsm_core.cli import _progress, main
from tests.helpers import edit, interrupt, once_per_run, shipped_models, write_model

DEFAULT = [m for m in shipped_models() if m.tier == "default"]
NOBODY_LISTENS = (
    "unreacted = { "
    + ", ".join(
        f'{name} = "a scratch model"'
        for name, effect in load_spec().machines["agent"].table.effects.items()
        if effect.notifies
    )
    + " }\n"
)
"""A scratch agent model's excuse for re-entering none of the agent's notifications."""
DONE = re.compile(
    r"^Done\. models=(?P<models>\d+) states=(?P<states>\d+) transitions=(?P<transitions>\d+) "
    r"depth=(?P<depth>\d+) violations=(?P<violations>\d+) sec=(?P<sec>\d+\.\d\d)$"
)


@dataclass(frozen=True, slots=True)
class Run:
    code: int
    out: str
    err: str


def run(*argv: str) -> Run:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", *argv])
    return Run(code, out.getvalue(), err.getvalue())


def finished(out: str) -> list[str]:
    """The models whose rows ``out`` holds, of a run stopped midway: each row is printed as its
    check ends (the header with the first), and nothing else before the end."""
    if not out:
        return []
    header, *rows = out.splitlines()
    assert header.split()[:2] == ["model", "verdict"], out
    assert all(len(row.split()) == len(header.split()) for row in rows), out
    return [row.split()[0] for row in rows]


def unwrapped(out: str) -> list[str]:
    """``out``'s lines with each wrapped one (its later lines indented two spaces) joined."""
    return out.replace("\n  ", " ").splitlines()


@pytest.fixture(scope="session")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """``fsm-core check`` on the shipped models (half a minute), run once per pytest run for
    the tests that read it, in this module and others, on whichever xdist worker they are."""
    kept = once_per_run(tmp_path_factory, "default-check", lambda: json.dumps(asdict(run())))
    return Run(**json.loads(kept))


NAMED = ("activation_chain", "bench_S")
"""Two small models of two kinds, for the JSON tests (the text run covers every model)."""


@pytest.fixture(scope="module")
def named_json() -> Run:
    return run("--json", *NAMED)


# --- the real models -----------------------------------------------------------------------------


def test_check_proves_every_default_model_and_ends_with_the_done_line(default_run: Run) -> None:
    assert default_run.code == 0, default_run.out
    lines = default_run.out.splitlines()
    done = DONE.match(lines[-1])
    assert done is not None, lines[-1]
    assert int(done["models"]) == len(DEFAULT)
    assert int(done["violations"]) == 0
    # Every model is proven with the numbers it recorded (a model without [expect] shows "-").
    for model in DEFAULT:
        row = next(line for line in lines if line.split()[:1] == [model.name])
        cells = row.split()
        assert cells[1] == "ok"
        if model.expect is not None:
            assert cells[2:5] == [
                str(model.expect.states),
                str(model.expect.transitions),
                str(model.expect.depth),
            ]
        assert cells[-1] == ("✓" if model.expect is not None else "-")
    assert not any(line.startswith(("mismatch:", "incomplete:")) for line in lines)


def test_the_done_line_adds_up_the_table(default_run: Run) -> None:
    lines = default_run.out.splitlines()
    header = lines[0].split()
    assert header[:5] == ["model", "verdict", "states", "transitions", "depth"]
    rows = [line.split() for line in lines[1 : 1 + len(DEFAULT)]]
    assert sorted(r[0] for r in rows) == sorted(m.name for m in DEFAULT)
    done = DONE.match(lines[-1])
    assert done is not None
    assert int(done["states"]) == sum(int(r[2]) for r in rows)
    assert int(done["transitions"]) == sum(int(r[3]) for r in rows)
    assert int(done["depth"]) == max(int(r[4]) for r in rows)


def test_check_json_reports_each_named_model(named_json: Run) -> None:
    assert named_json.code == 0
    doc = json.loads(named_json.out)
    assert doc["format"] == "fsm-core/check"
    named = [m for m in DEFAULT if m.name in NAMED]
    assert [m["name"] for m in doc["models"]] == list(NAMED) == [m.name for m in named]
    for entry, model in zip(doc["models"], named, strict=True):
        assert entry["file"] == model.file
        assert entry["kind"] == model.kind
        assert entry["verdict"] == "ok"
        assert entry["complete"] is True
        assert entry["violation"] is None
        assert entry["mismatches"] == []
        if model.expect is not None:
            assert entry["states"] == model.expect.states
    assert DONE.match(doc["done"])


# --- bad input -----------------------------------------------------------------------------------


def test_a_bad_model_file_exits_2_naming_file_and_key(tmp_path: Path) -> None:
    path = write_model(
        tmp_path,
        "bad",
        '[model]\ntable = "../specs/agent.toml"\nkind = "agent"\n\n'
        "[environment]\nbudgets = { sned = 1 }\n",
    )
    r = run(str(path))
    assert (r.code, r.out) == (2, "")
    assert r.err == (
        f"fsm-core: {path}:6: [environment] budgets: unknown event 'sned' (did you mean 'send'? "
        "events: send, "
        "cancel, dispose, shut, maintenance_start, remove, start, claim, take_prompt, "
        "take_steering, retire, converge, halt, maintenance_finish, scope_unwound, "
        "dispose_finish)\n"
    )


def test_an_unknown_model_name_exits_2_listing_the_models() -> None:
    r = run("agent_racse")
    assert (r.code, r.out) == (2, "")
    assert r.err.startswith(
        "fsm-core: unknown model 'agent_racse' (did you mean 'agent_races'? models: "
    )
    assert "agent_races" in r.err


# --- violations ----------------------------------------------------------------------------------

BROKEN_MAINTENANCE = (
    'do = ["holder := none", "reason := none", "latch := false", "release_holder()", '
    '{ when = "quiescent", do = ["settle_idle()"] }]\nclauses = ["S004.ready-in-maintenance"]',
    'do = ["latch := false", '
    '{ when = "quiescent", do = ["settle_idle()"] }]\nclauses = ["S004.ready-in-maintenance"]',
)
"""maintenance.finish.idle forgets the task's holder: an idle agent keeps a live one.

(It drops the holder's release and reason with it: the loader rejects a row that releases a
live holder, or clears the reason of one that stays aborted.)"""


def broken_model(tmp_path: Path, expect: str = "") -> Path:
    path = write_model(
        tmp_path,
        "broken",
        '[model]\ntable = "../specs/agent.toml"\nkind = "agent"\n\n'
        "[environment]\nbudgets = { send = 1, maintenance_start = 1 }\n" + NOBODY_LISTENS + expect,
    )
    edit(tmp_path / "specs" / "agent.toml", *BROKEN_MAINTENANCE)
    return path


def test_a_violating_model_exits_1_and_prints_a_numbered_trace(tmp_path: Path) -> None:
    r = run(str(broken_model(tmp_path)))
    assert r.code == 1
    lines = r.out.splitlines()
    assert lines[1].split()[:2] == ["broken", "violation"]
    start = lines.index(
        "broken: quiet_phases_hold_nothing is violated; a shortest counterexample, 2 steps:"
    )
    assert lines[start + 1].startswith("0. initial: phase=idle holder=none ")
    assert lines[start + 2] == (
        "1. maintenance_start() -> maintenance.start   changed: phase idle->maintenance, "
        "holder none->live, budget.maintenance_start 1->0"
    )
    assert lines[start + 3] == (
        "2. maintenance_finish() -> maintenance.finish.idle   changed: phase maintenance->idle"
    )
    assert lines[start + 4].startswith("violated: quiet_phases_hold_nothing (")
    done = DONE.match(lines[-1])
    assert done is not None and done["violations"] == "1"


def test_itf_trace_out_writes_the_trace_to_the_file(tmp_path: Path) -> None:
    out = tmp_path / "trace.itf.json"
    r = run(str(broken_model(tmp_path)), "--trace-format", "itf", "--trace-out", str(out))
    assert r.code == 1
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["#meta"]["property"] == "quiet_phases_hold_nothing"
    assert doc["vars"][:2] == ["phase", "holder"]
    assert [s["#meta"]["index"] for s in doc["states"]] == [0, 1, 2]
    assert doc["states"][2]["#meta"]["row"] == "maintenance.finish.idle"
    assert doc["states"][2]["holder"] == "live"
    assert f"broken: wrote the itf trace to {out}" in r.out.splitlines()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "specs", "trace.itf.json"]
    assert "0. initial: phase=idle " in r.out  # the log still shows the trace to a reader
    assert DONE.match(r.out.splitlines()[-1])


def test_itf_without_trace_out_prints_the_itf_document(tmp_path: Path) -> None:
    r = run(str(broken_model(tmp_path)), "--trace-format", "itf")
    assert r.code == 1
    head = "broken: quiet_phases_hold_nothing is violated; a shortest counterexample, 2 steps:"
    after = r.out.split(head + "\n", 1)[1]
    doc, _ = json.JSONDecoder().raw_decode(after)
    assert doc["#meta"]["property"] == "quiet_phases_hold_nothing"
    assert len(doc["states"]) == 3


def test_json_carries_the_violation_with_its_trace(tmp_path: Path) -> None:
    r = run(str(broken_model(tmp_path)), "--json")
    assert r.code == 1
    (entry,) = json.loads(r.out)["models"]
    violation = entry["violation"]
    assert (violation["property"], violation["steps"]) == ("quiet_phases_hold_nothing", 2)
    assert violation["text"][2].startswith("2. maintenance_finish() -> maintenance.finish.idle")
    assert violation["itf"]["#meta"]["property"] == "quiet_phases_hold_nothing"


def test_trace_out_refuses_an_existing_file_before_checking(tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    out.write_text("an earlier trace\n", encoding="utf-8")
    r = run(str(broken_model(tmp_path)), "--trace-out", str(out))
    assert (r.code, r.out) == (2, "")
    assert r.err == f"fsm-core: --trace-out {out}: the file exists; --force overwrites it\n"
    assert out.read_text(encoding="utf-8") == "an earlier trace\n"


def test_trace_out_with_force_overwrites_the_file(tmp_path: Path) -> None:
    out = tmp_path / "trace.txt"
    out.write_text("an earlier trace\n", encoding="utf-8")
    r = run(str(broken_model(tmp_path)), "--trace-out", str(out), "--force")
    assert r.code == 1
    assert out.read_text(encoding="utf-8").startswith("0. initial: phase=idle ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models", "specs", "trace.txt"]


def test_trace_out_refuses_what_is_not_a_regular_file_even_with_force(tmp_path: Path) -> None:
    """A trace replaces its file by renaming over it, which must never replace a device or a
    FIFO (``--trace-out /dev/null`` as root) or a directory."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = run(str(broken_model(tmp_path)), "--trace-out", str(fifo), "--force")
    assert (r.code, r.out) == (2, "")
    assert r.err == f"fsm-core: --trace-out {fifo}: not a regular file\n"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_force_without_trace_out_is_refused() -> None:
    r = run("bench_S", "--force")
    assert (r.code, r.out, r.err) == (2, "", "fsm-core: --force applies only to --trace-out\n")


def test_trace_out_in_a_missing_directory_is_refused_before_checking(tmp_path: Path) -> None:
    out = tmp_path / "no" / "trace.txt"
    r = run(str(broken_model(tmp_path)), "--trace-out", str(out))
    assert (r.code, r.out) == (2, "")
    assert r.err == f"fsm-core: --trace-out {out}: no directory {out.parent}\n"


def test_several_models_name_each_trace_file_by_model(tmp_path: Path) -> None:
    """With several models checked, PATH.<model>.<ext> whichever of them fail, so a script
    knows the name before the run; a model that holds writes nothing."""
    out = tmp_path / "trace.txt"
    r = run(str(broken_model(tmp_path)), "bench_S", "--trace-out", str(out))
    assert r.code == 1
    assert f"broken: wrote the text trace to {tmp_path / 'trace.broken.txt'}" in r.out
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["models", "specs", "trace.broken.txt"]


def test_two_models_with_one_name_are_refused_before_checking(tmp_path: Path) -> None:
    """Their report rows could not be told apart, and one trace would overwrite the other."""
    first = broken_model(tmp_path / "a")
    second = broken_model(tmp_path / "b")
    r = run(str(first), str(second), "--trace-out", str(tmp_path / "trace.txt"))
    assert (r.code, r.out) == (2, "")
    assert r.err == (
        f"fsm-core: model name 'broken' is used twice ({first}, {second}): "
        "a run names its report and trace files by model; give one a different [model] name\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


# --- expectations --------------------------------------------------------------------------------


def test_a_model_that_does_not_match_its_expectation_exits_1_naming_the_numbers(
    tmp_path: Path,
) -> None:
    path = write_model(
        tmp_path,
        "small",
        '[model]\ntable = "../specs/agent.toml"\nkind = "agent"\n\n'
        "[environment]\nbudgets = { send = 1 }\n\n"
        '[expect]\nstates = 1\ntransitions = 2\ndepth = 3\nverdict = "ok"\n',
    )
    r = run(str(path))
    assert r.code == 1
    mismatches = [line for line in r.out.splitlines() if line.startswith("mismatch:")]
    assert mismatches == [
        f"mismatch: small ({path}) [expect] states: expected 1, found 189",
        f"mismatch: small ({path}) [expect] transitions: expected 2, found 1701",
        f"mismatch: small ({path}) [expect] depth: expected 3, found 7",
    ]
    assert r.out.splitlines()[1].split()[-1] == "✗"


def test_a_model_without_expectation_is_not_a_mismatch(tmp_path: Path) -> None:
    path = write_model(
        tmp_path,
        "small",
        '[model]\ntable = "../specs/agent.toml"\nkind = "agent"\n\n'
        "[environment]\nbudgets = { send = 1 }\n" + NOBODY_LISTENS,
    )
    r = run(str(path))
    assert r.code == 0
    assert r.out.splitlines()[1].split()[-1] == "-"


def test_a_violation_the_model_expects_is_reported_but_does_not_fail(tmp_path: Path) -> None:
    path = broken_model(tmp_path)
    found = check(load_model(path)).result
    path.write_text(
        path.read_text(encoding="utf-8")
        + f"\n[expect]\nstates = {found.states}\ntransitions = {found.transitions}\n"
        f'depth = {found.depth}\nverdict = "violation"\nproperty = "quiet_phases_hold_nothing"\n',
        encoding="utf-8",
    )
    r = run(str(path))
    assert r.code == 0, r.out
    assert "violated: quiet_phases_hold_nothing (" in r.out
    assert r.out.splitlines()[1].split()[-1] == "✓"


def test_a_state_limit_proves_nothing_and_fails() -> None:
    r = run("bench_S", "--max-states", "100")
    assert r.code == 1
    assert r.out.splitlines()[1].split()[:2] == ["bench_S", "incomplete"]
    assert r.out.splitlines()[1].split()[-1] == "-"  # [expect] was not compared
    assert r.out.splitlines()[2:] == [
        "incomplete: bench_S cut at 101 states by --max-states 100: nothing is proven, "
        "[expect] not compared",
        r.out.splitlines()[-1],
    ]


def test_a_bench_tier_model_runs_when_named() -> None:
    assert load_model(models_dir() / "bench_L.toml").tier == "bench"
    r = run("bench_L", "--max-states", "1000")
    assert r.out.splitlines()[1].split()[:2] == ["bench_L", "incomplete"]
    done = DONE.match(r.out.splitlines()[-1])
    assert done is not None and done["models"] == "1"


def test_progress_reads_states_frontier_depth_and_rate(capsys: pytest.CaptureFixture[str]) -> None:
    _progress("agent_races")(8192, 300, 7, 2.0)
    assert capsys.readouterr().err == (
        "agent_races: states=8192 frontier=300 depth=7 states/s=4096\n"
    )


def test_a_check_shorter_than_two_seconds_reports_no_progress(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _progress("bench_M")(150_000, 3_000, 30, 1.9)
    assert capsys.readouterr().err == ""


def test_progress_after_zero_reports_from_the_first_tick(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _progress("bench_M", after=0)(2048, 300, 9, 0.5)
    assert capsys.readouterr().err == "bench_M: states=2048 frontier=300 depth=9 states/s=4096\n"


# --- interrupts ----------------------------------------------------------------------------------

LONG = "bench_L"
"""A model whose search, by the python backend, runs for seconds and reports progress."""


def test_sigint_during_check_exits_130_with_one_line_and_writes_no_trace(tmp_path: Path) -> None:
    """Ctrl-C: one line and 130, like other tools; no trace file, though one model had
    already been refuted when the interrupt came, since traces are written only after a
    complete run."""
    trace = tmp_path / "trace.txt"
    argv = ["check", str(broken_model(tmp_path)), LONG, "--backend", "python"]
    argv += ["--progress-after", "0"]  # under way at its first progress tick
    argv += ["--trace-out", str(trace)]
    code, out, err = interrupt(argv, under_way=f"{LONG}: states=")
    assert code == 130
    assert finished(out) in ([], ["broken"])
    *progress, last = err.splitlines()
    assert last == "fsm-core: interrupted"
    assert progress, "the search was interrupted before it reported any progress"
    assert all(line.startswith(f"{LONG}: states=") for line in progress), err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["models", "specs"]


# --- reaction coverage ---------------------------------------------------------------------------


def _races_without(tmp_path: Path, effect: str) -> Path:
    """agent_races beside a copy of the specs, with ``effect`` left out of its reactions."""
    body = (models_dir() / "agent_races.toml").read_text(encoding="utf-8")
    body = body[: body.index("\n[expect]")]  # its numbers change with the listeners it lost
    path = write_model(tmp_path, "races", body + "\n")
    edit(path, f'"{effect}", ', "")
    return path


def test_a_notifying_effect_nothing_re_enters_fails_the_check_naming_it(tmp_path: Path) -> None:
    """Issue 23: the models chose where listeners re-enter, and the one they left out
    (``clear_inbox``) hid a parked followup; now leaving one out is a finding that fails."""
    path = _races_without(tmp_path, "clear_inbox")
    r = run(str(path))
    assert r.code == 1, r.out
    assert (
        "finding: races: 1 notifying effect nothing re-enters: clear_inbox (re-enter it in "
        f"[environment] reactions, or say why not in [environment] unreacted of {path})"
    ) in unwrapped(r.out)
    header, row = r.out.splitlines()[:2]
    assert row.split()[header.split().index("unreacted")] == "1"


def test_a_model_that_says_why_nothing_re_enters_an_effect_passes(tmp_path: Path) -> None:
    path = _races_without(tmp_path, "clear_inbox")
    path.write_text(
        path.read_text(encoding="utf-8") + '\n[environment.unreacted]\nclear_inbox = "a test"\n',
        encoding="utf-8",
    )
    r = run(str(path))
    assert r.code == 0, r.out
    assert "nothing re-enters" not in r.out


def test_json_lists_the_unreacted_effects(tmp_path: Path) -> None:
    path = _races_without(tmp_path, "enqueue")
    r = run("--json", str(path))
    assert r.code == 1
    (report,) = json.loads(r.out)["models"]
    assert report["unreacted"] == ["enqueue"]


def test_a_reaction_no_step_reaches_re_enters_nothing(tmp_path: Path) -> None:
    """Naming an effect in ``reactions`` proves nothing where no step performs it: here no
    user disposes the agent, so no listener ever runs inside the disposal notifications."""
    path = _races_without(tmp_path, "enqueue")  # any: the budgets are what matter
    edit(path, "dispose = 1, ", "dispose = 0, ")
    path.write_text(
        path.read_text(encoding="utf-8") + '\n[environment.unreacted]\nenqueue = "a test"\n',
        encoding="utf-8",
    )
    r = run(str(path))
    assert r.code == 1, r.out
    assert (
        "finding: races: 2 notifying effects re-entered in name only, no step made a call "
        "inside: publish_disposing, publish_disposed (raise the budgets that reach them, or drop "
        "them from [environment] reactions and say why in [environment] unreacted of "
        f"{path})" in unwrapped(r.out)
    )


# --- a user's own models -------------------------------------------------------------------------


def _own_window(parent: Path, name: str = "my_agent.toml", states: int = 24) -> Path:
    """The shipped window model (a table model, checked in a moment) copied to ``parent``
    with its table, its ``[expect] states`` set to ``states``."""
    shutil.copytree(models_dir() / "conformance", parent / "conformance", dirs_exist_ok=True)
    path = parent / name
    path.write_text(
        (models_dir() / "window.toml").read_text().replace("states = 24", f"states = {states}")
    )
    return path


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
def test_a_model_is_shown_by_its_path_as_typed(
    absolute: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _own_window(tmp_path, states=25)
    monkeypatch.chdir(tmp_path)
    typed = str(path) if absolute else "my_agent.toml"
    r = run("--workers", "1", typed)
    assert r.code == 1
    assert f"mismatch: my_agent ({typed}) [expect] states: expected 25, found 24\n" in r.out
    r = run("--workers", "1", "--json", typed)
    assert json.loads(r.out)["models"][0]["file"] == typed


def test_check_dir_checks_every_model_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    _own_window(mine, "one.toml")
    _own_window(mine, "two.toml", states=25)
    monkeypatch.chdir(tmp_path)
    r = run("--workers", "1", "mine")
    assert r.code == 1
    assert [line.split()[0] for line in r.out.splitlines()[1:3]] == ["one", "two"]
    assert "mismatch: two (mine/two.toml) [expect] states: expected 25, found 24\n" in r.out
    (tmp_path / "empty").mkdir()
    r = run("empty/")
    assert (r.code, r.err) == (
        2,
        "fsm-core: empty/: no default-tier model (*.toml) in the directory\n",
    )


# --- --accept ------------------------------------------------------------------------------------


def test_accept_rewrites_only_the_numbers_of_expect_and_says_what_changed(tmp_path: Path) -> None:
    path = _own_window(tmp_path, states=20)
    text = path.read_text().replace("depth = 5", "depth = 4  # deepest first\r")
    path.write_bytes(f"{text}\n# trailing words\n".encode())
    before = path.read_bytes()
    r = run("--accept", str(path))
    assert r.code == 0, r.out + r.err
    assert "mismatch:" not in r.out
    assert f"\naccepted: my_agent ({path}): [expect] states 20 -> 24, depth 4 -> 5\n" in r.out
    assert path.read_bytes() == before.replace(b"states = 20", b"states = 24").replace(
        b"depth = 4  # deepest first\r", b"depth = 5  # deepest first\r"
    )
    r = run("--accept", str(path))
    assert f"\naccepted: my_agent ({path}): [expect] unchanged\n" in r.out
    assert run(str(path)).code == 0


def test_accept_adds_expect_to_a_model_without_one(tmp_path: Path) -> None:
    path = _own_window(tmp_path)
    text = path.read_text()
    path.write_text(text[: text.index("[expect]")])
    assert run(str(path)).code == 0  # [expect] is optional
    r = run("--accept", str(path))
    assert r.code == 0
    assert (
        f"\naccepted: my_agent ({path}): [expect] added: states = 24, transitions = 87, "
        'depth = 5, verdict = "ok"\n'
    ) in r.out
    assert path.read_text() == text


def test_accept_refuses_a_model_with_a_violation_and_writes_nothing(tmp_path: Path) -> None:
    path = broken_model(tmp_path)
    before = path.read_bytes()
    r = run("--accept", str(path))
    assert r.code == 1
    assert (
        f"\nnot accepted: broken ({path}): quiet_phases_hold_nothing is violated; a model that "
        "does not hold is fixed, not accepted\n"
    ) in r.out
    assert path.read_bytes() == before


def test_accept_through_a_symlink_rewrites_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    """It replaced the link with a file of its own: the target kept the old numbers and the
    new file lost the target's permissions."""
    path = _own_window(tmp_path, "target.toml", states=20)
    path.chmod(0o600)
    link = tmp_path / "my_agent.toml"
    link.symlink_to(path.name)
    r = run("--accept", str(link))
    assert r.code == 0, r.out + r.err
    assert link.is_symlink() and "states = 24" in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600


def test_accept_refuses_a_property_spanning_lines_and_writes_nothing(tmp_path: Path) -> None:
    """A ``property = \"\"\"...\"\"\"`` over two lines was half dropped, and the text that
    was no TOML escaped as a traceback."""
    window = _own_window(tmp_path, states=20)
    text = window.read_text().replace('verdict = "ok"', 'verdict = "violation"')
    window.write_text(text + 'property = """\ndeadlock"""\n')
    before = window.read_bytes()
    r = run("--accept", str(window))
    assert r.code == 1, r.out + r.err
    assert "[expect] is not written as a [expect] table with one key per line" in r.out
    assert window.read_bytes() == before


def test_accept_refuses_an_expect_written_inline_and_writes_nothing(tmp_path: Path) -> None:
    path = _own_window(tmp_path, states=20)
    text = path.read_text()
    text = (
        'expect = { states = 20, transitions = 87, depth = 5, verdict = "ok" }\n'
        + text[: text.index("[expect]")]
    )
    path.write_text(text)
    r = run("--accept", str(path))
    assert r.code == 1
    assert "[expect] is not written as a [expect] table with one key per line" in r.out
    assert path.read_text() == text
