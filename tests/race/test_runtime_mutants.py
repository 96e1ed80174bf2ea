"""Runtime mutants: the race machine kills every planted runtime bug within the ci budget.

Each mutant is one test, so ``pytest -n 2`` spreads the catalogue over both workers. A test
runs the race machine (``tests/race/agent.py``) with the mutant switched on, under exactly the
race test's budget: the ``ci`` profile (derandomized, its ``max_examples``) with the race
test's ``STEPS`` rules per program. It skips only Hypothesis' shrink phase: what the test
asserts is the kill, and shrinking a stateful program costs far more than finding it.
``fsm-core mutants --runtime`` shrinks, to print each shrunk program's length. That the
unmutated runtime passes the same machine is test_agent_race.py's own test, not repeated here.

There is no allowance for a survivor: a mutant the search does not kill within the budget fails
its test, and the fix is a rule that reaches the bug or an invariant that sees it (as
``on_pre_step_steer`` was added for ``steering_rest_counts_itself``). The kills do not depend on
what else the process ran: Hypothesis draws constants from every local module loaded so far,
so :func:`~tests.race.runtime_mutants.hunt` pins that pool to empty.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from fsm_core.runtime import Runtime, UserMessage, _core
from fsm_core.testing import ScriptedModel
from fsm_core.tools import _mutants
from fsm_core.tools._mutants import MutantError, configure, run
from tests.race import runtime_mutants, teardown_mutants
from tests.race.runtime_mutants import (
    BY_NAME,
    MUTANTS,
    UNMUTATED,
    Edit,
    RuntimeKill,
    RuntimeMutant,
    activated,
    ci_settings,
    hunt,
)

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a race search per mutant: the kill table, in CI's slow stage
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_race_machine_kills_the_mutant_within_the_ci_budget(mutant: RuntimeMutant) -> None:
    budget = ci_settings()
    kill = hunt(mutant, using=budget, shrink=False)
    assert kill.killed, f"{mutant.name} survived: no rule reached the bug or no invariant saw it"
    assert 1 <= kill.examples <= budget.max_examples * 2, kill  # overruns are not examples
    assert kill.error is not None
    assert kill.steps is None  # not shrunk


def test_the_catalogue_is_large_and_its_names_are_unique() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)) >= 13
    assert {m.name: m for m in MUTANTS} == BY_NAME
    assert UNMUTATED not in BY_NAME
    for m in MUTANTS:
        assert re.fullmatch(r"[a-z][a-z_]+", m.name), m.name
        assert m.doc.endswith("."), m.name
        assert m.edits, m.name


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_edit_applies_exactly_once_to_the_current_runtime(mutant: RuntimeMutant) -> None:
    for edit in mutant.edits:
        assert edit.new != edit.old
        assert edit.target.startswith("fsm_core.runtime."), edit.target
    patched = mutant.compiled()
    assert len(patched) == len({e.target for e in mutant.edits})
    for owner, attr, function in patched:
        original = vars(owner)[attr]
        assert function is not original
        assert function.__qualname__ == original.__qualname__


def test_a_stale_edit_fails_loudly() -> None:
    stale = RuntimeMutant(
        "stale",
        "Gone.",
        (Edit("fsm_core.runtime._core:AgentCore.cancel", "self.gone()", "self.also_gone()"),),
    )
    with pytest.raises(
        MutantError,
        match=r"^mutant 'stale': its old text occurs 0 times in "
        r"fsm_core\.runtime\._core:AgentCore\.cancel, not exactly once; update the mutant to the "
        r"current runtime$",
    ):
        stale.compiled()


def test_a_mutant_is_on_only_inside_activated_and_only_in_this_process() -> None:
    mutant = BY_NAME["disposal_not_preceding_aborted"]
    originals = (_core.AgentHandle._begin, _core.AgentCore.dispose, _core.AgentCore.cancel)
    with activated(mutant):
        assert _core.AgentHandle._begin is not originals[0]
        assert _core.AgentCore.dispose is not originals[1]
        assert _core.AgentCore.cancel is originals[2]  # only the targets change
        assert "request_disposal" not in _source(_core.AgentHandle._begin)
    assert (_core.AgentHandle._begin, _core.AgentCore.dispose, _core.AgentCore.cancel) == originals
    with pytest.raises(RuntimeError), activated(mutant):
        raise RuntimeError("the block failed")
    assert _core.AgentHandle._begin is originals[0]


def _source(function: object) -> str:
    import inspect

    return inspect.getsource(function)  # type: ignore[arg-type]


def test_the_mechanism_never_ships_enabled() -> None:
    """The package holds no mutant and no switch: only the command that finds tests/race."""
    package = PROJECT / "fsm_core"
    mentions = sorted(
        str(path.relative_to(PROJECT))
        for path in package.rglob("*.py")
        if "runtime_mutants" in path.read_text(encoding="utf-8")
    )
    assert mentions == ["fsm_core/tools/_mutants.py"]
    # A fresh interpreter importing the whole runtime imports nothing from tests/.
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, fsm_core, fsm_core.cli, fsm_core.runtime; "
            "print(sorted(m for m in sys.modules if m == 'tests' or m.startswith('tests.')))",
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "[]"


# --- the runner ----------------------------------------------------------------------------------


class _Toy(RuleBasedStateMachine):
    """A small machine over a real agent: queued work survives a keep_inbox cancel."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.rt = Runtime(model=ScriptedModel())
        self.agent = self.loop.run_until_complete(self.rt.create_agent("a1")).agent
        self.sent = 0

    @rule()
    def inject(self) -> None:
        self.sent += 1
        self.agent.inject(UserMessage(f"m{self.sent}", "queued"))

    @rule()
    def look(self) -> None:
        assert self.agent.phase == "idle"

    @rule()
    def cancel_keeping_the_inbox(self) -> None:
        before = self.agent.inbox.next_turn
        self.agent.cancel(keep_inbox=True)
        assert self.agent.inbox.next_turn == before, "a keep_inbox cancel discarded work"

    @invariant()
    def nothing_runs(self) -> None:
        assert self.agent.status == "idle"

    def teardown(self) -> None:
        self.loop.close()


def test_hunt_counts_machines_times_the_first_failure_and_shrinks() -> None:
    """The runner on a machine whose kill is known: the count includes the failing machine,
    and ``steps`` counts the shrunk program's rules (not its invariant checks)."""
    kill = hunt(BY_NAME["keep_inbox_discards_work"], machine=_Toy, using=ci_settings())
    assert kill.killed and kill.mutant == "keep_inbox_discards_work"
    assert 1 <= kill.examples <= ci_settings().max_examples
    assert 0 < kill.seconds <= kill.total
    assert kill.error == "AssertionError: a keep_inbox cancel discarded work"
    assert [line for line in kill.program if "nothing_runs" not in line] == [
        "state = _Toy()",
        "state.inject()",
        "state.cancel_keeping_the_inbox()",
        "state.teardown()",
    ]
    assert kill.steps == 2


def test_hunt_reports_a_survivor_and_the_unmutated_runtime() -> None:
    using = ci_settings(max_examples=5)
    survivor = hunt(BY_NAME["flush_not_awaited"], machine=_Toy, using=using)
    assert (survivor.mutant, survivor.killed, survivor.steps, survivor.error) == (
        "flush_not_awaited",
        False,
        None,
        None,
    )
    assert survivor.examples >= 5
    unmutated = hunt(None, machine=_Toy, using=using, shrink=False)
    assert (unmutated.mutant, unmutated.killed, unmutated.steps) == (UNMUTATED, False, None)


def test_a_hunt_draws_no_constants_from_the_modules_loaded() -> None:
    """Hypothesis mixes constants from every local module loaded so far into its draws (rule
    choices included), so a search could depend on what else the process imported; a hunt
    pins that pool to empty, and puts Hypothesis' own back afterwards."""
    from hypothesis.internal.conjecture import providers

    pools: list[int] = []

    class Probe(_Toy):
        def __init__(self) -> None:
            super().__init__()
            pools.append(len(providers._get_local_constants().integers))

    hunt(None, machine=Probe, using=ci_settings(max_examples=3), shrink=False)
    assert pools and set(pools) == {0}
    assert providers._get_local_constants().integers  # fsm_core's own modules are local


# --- the command ---------------------------------------------------------------------------------


def _args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fsm-core mutants")
    configure(parser)
    return parser.parse_args(argv)


def _fake_hunts(
    monkeypatch: pytest.MonkeyPatch, kills: dict[str, RuntimeKill], seen: list[str]
) -> None:
    def fake(name: str, shrink: bool = True) -> RuntimeKill:
        seen.append(name)
        return kills[name]

    monkeypatch.setattr(runtime_mutants, "hunt_by_name", fake)
    monkeypatch.setattr(teardown_mutants, "hunt_by_name", fake)


def test_command_prints_the_runtime_kill_table_and_a_done_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str] = []
    kills = {
        UNMUTATED: RuntimeKill(UNMUTATED, False, 104, 5.0, None, None, 5.0),
        "last_wins_cause": RuntimeKill(
            "last_wins_cause", True, 12, 0.4, 3, "AssertionError: reason=user but " + "x" * 80, 9
        ),
        "flush_not_awaited": RuntimeKill(
            "flush_not_awaited", True, 7, 1.3, 2, "AssertionError: turn 2 started", 4.0
        ),
        "when_idle_resolves_immediately": RuntimeKill(
            "when_idle_resolves_immediately", True, 3, 0.2, 1, "NeverSettled: a hang", 1.0
        ),
        "remove_forgets_steering": RuntimeKill(
            "remove_forgets_steering", True, 7, 0.6, 9, "AssertionError: x", 301.0, (), True
        ),
    }
    _fake_hunts(monkeypatch, kills, seen)
    argv = ["--runtime", "--jobs", "1", *reversed([k for k in kills if k != UNMUTATED])]
    assert run(_args(argv)) == 0
    out, err = capsys.readouterr()
    assert seen[0] == UNMUTATED  # the sanity run comes first, then catalogue order
    assert seen[1:] == [m.name for m in MUTANTS if m.name in kills]
    lines = out.splitlines()
    assert re.fullmatch(
        r"mutant +result +examples +sec +steps +first line of the failure", lines[0]
    ), lines[0]
    rows = {line.split()[0]: line for line in lines[1:-2]}
    assert re.fullmatch(
        r"last_wins_cause +killed +12 +0\.40 +3 +AssertionError: reason=user but x+\.\.\.",
        rows["last_wins_cause"],
    ), rows["last_wins_cause"]
    assert len(rows["last_wins_cause"].split("  ")[-1]) <= 60
    assert re.fullmatch(
        r"flush_not_awaited +killed +7 +1\.30 +2 +AssertionError: turn 2 started",
        rows["flush_not_awaited"],
    )
    assert re.fullmatch(
        r"remove_forgets_steering +killed +7 +0\.60 +<=9 +AssertionError: x",
        rows["remove_forgets_steering"],
    )
    assert lines[-2] == (
        "remove_forgets_steering: Hypothesis stopped shrinking at its time limit; the program "
        "may be shorter than the steps shown"
    )
    assert re.fullmatch(
        r"Done\. mutants=4 killed=4 survived=0 median_kill_sec=0\.50 sec=\d+\.\d", lines[-1]
    ), lines[-1]
    assert len(lines) == 7
    assert err == ""


def test_command_exits_1_and_says_what_a_survivor_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = (BY_NAME["remove_forgets_steering"], BY_NAME["last_wins_cause"])
    monkeypatch.setattr(runtime_mutants, "MUTANTS", chosen)
    monkeypatch.setattr(runtime_mutants, "BY_NAME", {m.name: m for m in chosen})
    torn = teardown_mutants.BY_NAME["memo_lost"]
    monkeypatch.setattr(teardown_mutants, "BY_NAME", {torn.name: torn})
    _fake_hunts(
        monkeypatch,
        {
            m: RuntimeKill(m, False, 104, 5.0, None, None, 5.0)
            for m in (UNMUTATED, *(c.name for c in chosen), torn.name)
        },
        [],
    )
    assert run(_args(["--runtime", "--jobs", "1"])) == 1
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert re.fullmatch(r"remove_forgets_steering +SURVIVED +104 +5\.00 +- +-", lines[1]), lines[1]
    for name in ("remove_forgets_steering", "last_wins_cause"):
        assert (
            f"{name} survived: no rule reached the bug or no invariant saw it within the budget; "
            "add the rule or invariant to tests/race/agent.py"
        ) in lines
    assert re.fullmatch(r"memo_lost +SURVIVED +104 +5\.00 +-", lines[-3]), lines[-3]
    assert lines[-2] == (
        "memo_lost survived: no subagent test failed; add the test to "
        "tests/runtime/test_subagents.py"
    )
    assert re.fullmatch(
        r"Done\. mutants=3 killed=0 survived=3 median_kill_sec=- sec=\d+\.\d", lines[-1]
    )


def test_command_refuses_a_kill_table_when_the_unmutated_runtime_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_hunts(
        monkeypatch,
        {
            UNMUTATED: RuntimeKill(UNMUTATED, True, 9, 0.3, 2, "AssertionError: broken", 2.0),
            "last_wins_cause": RuntimeKill("last_wins_cause", True, 1, 0.1, 1, "x", 0.1),
        },
        [],
    )
    assert run(_args(["--runtime", "--jobs", "1", "last_wins_cause"])) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "fsm-core: the race machine already fails on the unmutated runtime after 9 examples "
        "(AssertionError: broken); a kill table would prove nothing\n"
    )


def test_command_rejects_an_unknown_mutant(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_args(["--runtime", "no_such_mutant"])) == 2
    _, err = capsys.readouterr()
    assert err.startswith("fsm-core: unknown runtime mutant 'no_such_mutant' (mutants: ")


def test_command_needs_the_repository_tests(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Installed from a wheel there is no tests/race beside the package: a clear error."""
    installed = tmp_path / "site-packages" / "fsm_core" / "check" / "_mutants.py"
    monkeypatch.setattr(_mutants, "__file__", str(installed))
    assert run(_args(["--runtime"])) == 2
    _, err = capsys.readouterr()
    assert err == (
        "fsm-core: runtime mutants need the repository's tests/race/ (a developer tool): no "
        f"tests/race/runtime_mutants.py beside the package at {installed.parents[1]}; run "
        "fsm-core from a checkout of the repository "
        "(python3 -m uv run --locked fsm-core mutants --runtime)\n"
    )


def test_spec_and_runtime_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        _args(["--spec", "--runtime"])
    assert exit.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_runs_end_to_end_in_worker_processes() -> None:
    """``fsm-core mutants --runtime NAME`` from the checkout, as a developer runs it (not
    shrinking, which takes tens of seconds per mutant)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fsm_core",
            "mutants",
            "--runtime",
            "--jobs",
            "2",
            "--no-shrink",
            "failure_swallowed",
            "cancel_requested_after_clear",
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("mutant ")
    assert re.match(r"cancel_requested_after_clear +killed +\d+ +\d+\.\d\d +- +\S", lines[1])
    assert re.fullmatch(r"teardown mutant +result +tests +sec +killed by", lines[3]), lines[3]
    assert re.fullmatch(
        r"failure_swallowed +killed +\d+ +\d+\.\d\d +test_subagents\w*::test_\w+: \w+", lines[4]
    ), lines[4]
    assert re.fullmatch(
        r"Done\. mutants=2 killed=2 survived=0 median_kill_sec=\d+\.\d\d sec=\d+\.\d", lines[5]
    )
    assert done.stderr == ""
