"""Spec mutants: every planted one-row bug is killed by a property with a counterexample.

Each mutant is one test, so ``pytest -n 2`` spreads the catalogue over both workers. A mutant
with a known ``gap`` survives (its missing property is reported); its test is a strict xfail,
so closing the gap turns it into an XPASS that fails until the mutant's ``gap`` is removed and
its killer pinned in ``KILLED_BY``. A mutant the loader rejects (``load_killed``) is pinned in
``LOAD_KILLED_BY`` to the check that rejects it.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path

import pytest

from fsm_core._errors import SpecError
from fsm_core._paths import models_dir, specs_dir
from fsm_core.cli import main
from fsm_core.table._lines import key_lines
from fsm_core.table._load import read_toml
from fsm_core.tools import _mutants
from fsm_core.tools._mutants import (
    MUTANTS,
    UNMUTATED,
    Kill,
    Mutant,
    MutantError,
    _copy_tables,
    configure,
    format_table,
    run,
    run_mutant,
    run_mutants,
    run_unmutated,
)
from fsm_core.tools._row_edits import (
    AddRow,
    Block,
    DropCall,
    DropEffect,
    DropRow,
    Edit,
    Insert,
    Move,
    Remove,
    Replace,
    Set,
    SetCall,
    Unignore,
    dump_toml,
)
from tests.helpers import copy_specs, sweep

KILLED_BY = {
    "last_wins_cause": "reason_first_wins",
    "latch_set_on_disposed": "latch_only_while_busy",
    "clearing_cancel_keeps_latch": "clear_inbox.requires",
    "keep_inbox_parks_post_abort_wake": "no_parked_wake",
    "removal_keeps_latch": "latch_has_work",
    "notify_after_clear": "no_parked_wake",
    "prerun_marker_carries_cause": "reason_iff_aborted",
    "prerun_cancel_opens_turn": "prerun_cancel_opens_no_turn",
    "maintenance_not_latching": "no_parked_wake",
    "disposal_replays_latched_wake": "disposal_never_latches",
    "replacement_reuses_aborted_holder": "running_never_aborted",
    "when_idle_settles_while_driver_scheduled": "settle_idle.requires",
    "latch_after_insertion": "disposal_never_latches",
    "replay_idle_before_scheduling": "no_parked_wake",
    "parent_leaves_before_children": "children_settle_before_own_idle@a",
    "settlement_notice_dropped": "quiescence_reachable",
    "dispose_not_memoized": "teardown_runs_once",
    "handle_disposed_before_final_flush": "released_only_after_flush@a",
    "drain_closes_door_only": "drained_door_leaves_no_active_node",
    "root_notice_refused": "settlement_notice_delivered",
    "close_leaves_agent_awake": "no_turn_after_close",
    "notice_never_reaches_parent": "quiescence_reachable",
    "teardown_leaves_children": "teardown_cancels_subtree",
    "close_never_cancels_agent": "no_turn_after_close",
    "release_keeps_agent": "quiescence_reachable",
    "every_notice_last": "parent_leaves_after_children",
    "shut_at_release": "no_turn_after_close",
    "teardown_disposes_itself": "teardown_cancels_subtree",
    "notice_to_itself": "settlement_notice_delivered",
    "shut_aimed_at_new_agent": "no_turn_after_close",
    "door_swallows_admit_refusal": "wired_call_accepted",
    "teardown_clears_inbox": "teardown_keeps_inbox",
}
"""The property that kills each mutant the checker kills: a change here is a change of meaning."""

LOAD_KILLED_BY = {
    "holder_cleared_after_turn_end": "row 'retire.ended': publish_turn_end(completed) requires ",
    "replay_without_pending_check": "row 'converge.parked': rows 'converge.replay' and "
    "'converge.parked' are both enabled ",
    "running_before_holder": "row 'start.turn': publish_status(running) requires ",
    "notify_after_ownership_release": "row 'ledger.converge': release_ownership() requires ",
    "notify_before_leaving_registry": "row 'ledger.converge': notify_parent(false) requires ",
    "door_admits_after_drain": "row 'admit.after_drain': admit_below() requires ",
}
"""What the loader finds wrong with each mutant it rejects (after ``load: specs/<table>: ``).

No variant of these bugs reaches the checker. ``replay_without_pending_check`` overlaps
converge.parked only where the latch has no work, a state ``latch_has_work`` excludes: the
checker could never tell the two guards apart. Each other one breaks the contract of an effect
only a driver event performs (``retire``, ``start``, ``handle_disposed``), never a listener,
with no notification before it in the mutated row and no wiring back into its node: only that
row changes the state the effect runs in. The loader proves the row from every state the
invariants admit, and a state they do not admit fails the checker before the row runs.
``door_admits_after_drain`` breaks the contract of the door's ``admit_below()``, which only the
door's ``admit`` performs, as a step's first call: a drained door admits nothing in any variant
that gets past the loader, and a closing activation refuses an admission in its own table.
"""


def row_line(table: str, row: str, key: str | None = None) -> int | None:
    """The line of row ``row`` (at ``key``) in the shipped ``specs/<table>``, None if no row
    there has that id."""
    text = (specs_dir() / table).read_text(encoding="utf-8")
    rows = tomllib.loads(text)["rows"]
    index = next((i for i, r in enumerate(rows) if r["id"] == row), None)
    if index is None:
        return None
    return key_lines(text)[("rows", index, key) if key else ("rows", index)]


def load_killed_at(mutant: Mutant) -> str:
    """Where a load-killed mutant's fault is cited: its row's line in specs/<table> as written,
    or the file alone for a row the mutant adds."""
    m = re.match(r"row '([^']+)'", LOAD_KILLED_BY[mutant.name])
    assert m is not None
    line = row_line(mutant.table, m[1])
    return f"specs/{mutant.table}" + ("" if line is None else f":{line}")


def _catalogue() -> list[object]:
    return [
        pytest.param(
            m,
            id=m.name,
            marks=[pytest.mark.xfail(strict=True, raises=AssertionError, reason=m.gap)]
            if m.gap
            else [],
        )
        for m in MUTANTS
    ]


@pytest.mark.slow  # a model check per mutant: the kill table, in CI's slow stage
@pytest.mark.parametrize("mutant", _catalogue())
def test_mutant_is_killed_by_a_property_with_a_counterexample(mutant: Mutant) -> None:
    kill = run_mutant(mutant)
    assert kill.killed, f"{mutant.name} survived: {mutant.gap or 'no property caught it'}"
    if mutant.gap is not None:
        return  # the gap closed: this strict xfail now fails; remove `gap`, pin the killer
    assert kill.model in mutant.models
    if mutant.load_killed:
        assert kill.property is not None
        # The line is the table's as written, not the rewritten copy's the loader read.
        at = load_killed_at(mutant)
        assert kill.property.startswith(f"load: {at}: {LOAD_KILLED_BY[mutant.name]}")
        added = f" (in what the mutant adds: no line of specs/{mutant.table} holds it)"
        assert kill.property.endswith(added) == (":" not in at), kill.property
        assert kill.trace == 0
        return
    assert kill.trace > 0
    assert kill.property == KILLED_BY[mutant.name]


def test_the_catalogue_is_large_and_mostly_killed_by_the_checker() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)) >= 14
    assert sorted(KILLED_BY) == sorted(
        m.name for m in MUTANTS if not m.load_killed and m.gap is None
    )
    assert sorted(LOAD_KILLED_BY) == sorted(m.name for m in MUTANTS if m.load_killed)
    assert len(KILLED_BY) >= 10
    assert len(KILLED_BY) > 2 * len(LOAD_KILLED_BY)
    # Some kills need a listener re-entering mid-row: a contract the loader cannot see broken.
    assert {"clear_inbox.requires", "settle_idle.requires"} <= set(KILLED_BY.values())
    assert {m.table for m in MUTANTS} == {
        "agent.toml",
        "activation.toml",
        "admission.toml",
        "wiring.toml",
    }


def test_the_wiring_mutants_drop_retarget_retime_and_reargue_connections() -> None:
    """Each way a connection of specs/wiring.toml can be wrong has mutants the checker kills: a
    call dropped, aimed at the wrong instance, made by a later effect, its refusal swallowed,
    an argument changed."""
    wiring = [m for m in MUTANTS if m.table == "wiring.toml"]
    assert not any(m.load_killed or m.gap for m in wiring)
    edits = [e for m in wiring for e in m.edits]
    assert {e.call for e in edits if isinstance(e, DropCall)} >= {
        "close.shuts_agent",
        "close.cancels_agent",
        "release.disposes_agent",
        "settle.notifies_parent",
        "teardown.disposes_children",
    }
    assert {e.key for e in edits if isinstance(e, SetCall)} >= {
        "target",
        "effect",
        "refused",
        "args.last",
        "args.keep_inbox",
    }
    # A bug only a node's real agent shows runs against the tree whose nodes carry one.
    for m in wiring:
        killer = KILLED_BY[m.name]
        if killer in ("no_turn_after_close", "teardown_keeps_inbox"):
            assert m.models == ("agent_tree",), m.name


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_edit_applies_to_the_current_tables_and_writes_back(
    mutant: Mutant, tmp_path: Path
) -> None:
    original = read_toml(specs_dir() / mutant.table, mutant.table)
    data = copy.deepcopy(original)
    mutant.apply(data)
    assert data != original
    specs = copy_specs(tmp_path)
    mutant.plant(specs)
    assert tomllib.loads((specs / mutant.table).read_text(encoding="utf-8")) == data
    assert mutant.doc.endswith(".")
    assert mutant.models
    for model in mutant.models:
        assert (models_dir() / f"{model}.toml").is_file()


@pytest.mark.parametrize(
    "table", ["agent.toml", "activation.toml", "admission.toml", "clauses.toml", "wiring.toml"]
)
def test_a_table_written_back_reads_as_the_same_data(table: str) -> None:
    data = read_toml(specs_dir() / table, table)
    text = dump_toml(data)
    assert tomllib.loads(text) == data
    assert list(tomllib.loads(text)) == list(data)  # the sections keep their order


@pytest.mark.parametrize(
    "table", ["agent.toml", "activation.toml", "admission.toml", "wiring.toml"]
)
def test_every_key_of_a_table_written_back_is_cited_at_its_own_line(table: str) -> None:
    """A fault at any key, header or array entry of the rewritten copy (one fault per place,
    nested tables' headers and keys included) is cited at the line of the same place in the
    table as written."""
    original = (specs_dir() / table).read_text(encoding="utf-8")
    planted = _mutants.Planted(f"specs/{table}", original, dump_toml(tomllib.loads(original)))
    places = key_lines(planted.planted)
    faults = [SpecError(planted.display, str(path), "f", line) for path, line in places.items()]
    cited = planted.cite_table(SpecError.of(faults)).faults
    want = key_lines(original)
    assert [(f.where, f.line) for f in cited] == [(str(p), want[p]) for p in places]


def test_a_fault_in_a_planted_table_cites_the_line_of_the_table_as_written() -> None:
    """(It cited the rewritten copy's line, where every row stood on one line.) A row dropped
    before the edited one moves nothing: rows are found by id."""
    mutant = Mutant(
        "misspelt_target",
        "agent.toml",
        (DropRow("send.idle.wake"), Set("start.turn", "to", "running", "runing")),
        "start.turn goes to a state no table has.",
        ("agent_races",),
    )
    kill = run_mutant(mutant)
    assert kill.property == (
        f"load: specs/agent.toml:{row_line('agent.toml', 'start.turn', 'to')}: row "
        "'start.turn': unknown state 'runing' in to (did you mean 'running'? states: idle, "
        "running, cancelling, maintenance, disposing, disposed)"
    )


def test_a_fault_in_a_row_a_mutant_adds_says_no_line_of_the_table_holds_it() -> None:
    row = 'id = "start.extra"\non = "start"\nfrom = ["idle"]\nto = "nowhere"\nclauses = ["D1"]'
    mutant = Mutant("extra_row", "agent.toml", (AddRow(row),), "A row too many.", ("agent_races",))
    kill = run_mutant(mutant)
    assert kill.property == (
        "load: specs/agent.toml: row 'start.extra': unknown state 'nowhere' in to (states: idle, "
        "running, cancelling, maintenance, disposing, disposed) (in what the mutant adds: no "
        "line of specs/agent.toml holds it)"
    )


def test_written_strings_escape_what_toml_cannot_hold_as_itself() -> None:
    data = {"odd key": ['"quoted" \\ back\nslash\x7f\x00', "é ✓ 😀"], "n": -3, "b": False}
    assert tomllib.loads(dump_toml(data)) == data


def _stale(*edits: Edit) -> Mutant:
    return Mutant("stale", "agent.toml", edits, "Gone.", ("m",))


@pytest.mark.parametrize(
    ("edit", "fault"),
    [
        (Remove("cancel.gone", "x"), "no row 'cancel.gone'"),
        (Remove("cancel.noop", "x"), "row 'cancel.noop' has no do"),
        (Remove("cancel.turn", "x := 1"), "row 'cancel.turn' has no do entry 'x := 1'"),
        (
            Insert("send.latched", "x := 1", after="gone()"),
            "row 'send.latched' has no do entry 'gone()'",
        ),
        (
            Move("cancel.turn", "notify_cancel_requested(cause)", before="gone()"),
            "row 'cancel.turn' has no do entry 'gone()'",
        ),
        (
            Replace("cancel.discard", Block("gone", ()), "x := 1"),
            "row 'cancel.discard' has no do entry {'when': 'gone', 'do': []}",
        ),
        (
            Set("converge.replay", "guard", "latch", None),
            "row 'converge.replay' has no guard 'latch'",
        ),
        (Set("cancel.turn", "to", "idle", "running"), "row 'cancel.turn' has no to 'idle'"),
        (AddRow('id = "cancel.turn"'), "a row 'cancel.turn' exists already"),
        (Unignore("send"), "0 [[ignored]] entries list 'send', not exactly one"),
        (Unignore("cancel", "rejected"), "0 [[rejected]] entries list 'cancel', not exactly one"),
        (DropEffect("gone"), "no effect 'gone'"),
    ],
)
def test_a_stale_edit_fails_loudly_naming_the_mutant_table_and_row(edit: Edit, fault: str) -> None:
    data = read_toml(specs_dir() / "agent.toml", "agent.toml")
    with pytest.raises(MutantError) as e:
        _stale(edit).apply(data)
    assert str(e.value) == (
        f"mutant 'stale': specs/agent.toml: {fault}; update the mutant to the current table"
    )


@pytest.mark.parametrize(
    "edit",
    [Insert("remove", "x := 1"), Move("remove", "pending := rest", before="x", after="y")],
)
def test_a_position_is_before_or_after_an_entry(edit: Edit) -> None:
    data = read_toml(specs_dir() / "agent.toml", "agent.toml")
    with pytest.raises(TypeError, match=r"^give exactly one of before= and after=$"):
        _stale(edit).apply(data)


def test_an_entry_that_occurs_twice_is_stale_too() -> None:
    twice = Insert("remove", "pending := rest", before="pending := rest")
    data = read_toml(specs_dir() / "agent.toml", "agent.toml")
    with pytest.raises(
        MutantError, match="row 'remove' has 2 do entries 'pending := rest', not one"
    ):
        _stale(twice, Remove("remove", "pending := rest")).apply(data)


# Each model checked on a copy of the shipped tables, as the kill table does. The default
# `fsm-core check` (tests/test_check_cli.py) proves every default model on the shipped tables at
# every change; here agent_races (the smallest) runs at every change too, the rest in CI's slow
# stage.
@pytest.mark.parametrize(
    "model", sweep(sorted({n for m in MUTANTS for n in m.models}), str, fast={"agent_races"})
)
def test_the_unmutated_tables_hold_on_every_model_the_catalogue_uses(model: str) -> None:
    kill = run_unmutated([model])
    assert kill == Kill(UNMUTATED, False, None, 0, kill.seconds)


def test_run_mutants_uses_processes_and_keeps_catalogue_order() -> None:
    names = ["dispose_not_memoized", "parent_leaves_before_children"]  # catalogue: the reverse
    kills = run_mutants(names, jobs=2)
    assert [k.mutant for k in kills] == ["parent_leaves_before_children", "dispose_not_memoized"]
    assert [(k.killed, k.property) for k in kills] == [
        (True, "children_settle_before_own_idle@a"),
        (True, "teardown_runs_once"),
    ]


def test_a_mutants_copy_holds_the_tables_and_models_but_not_the_vectors(tmp_path: Path) -> None:
    """Each mutant is checked over a copy of specs/: it once took the port kit's 27 MB of
    vectors along, which no check reads."""
    _copy_tables(tmp_path, None)
    copied = {p.name for p in (tmp_path / "specs").iterdir()}
    assert {"agent.toml", "activation.toml", "wiring.toml", "clauses.toml"} <= copied
    assert "vectors" not in copied
    assert (tmp_path / "models" / "agent_races.toml").is_file()


# --- the command ----------------------------------------------------------------------------------


def _args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fsm-core mutants")
    configure(parser)
    return parser.parse_args(argv)


@pytest.mark.slow
def test_command_prints_the_kill_table_and_a_done_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--spec", "--jobs", "1", "dispose_not_memoized", "parent_leaves_before_children"]
    assert run(_args(argv)) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert re.fullmatch(r"mutant +killed by +model +steps", lines[0])
    assert re.fullmatch(
        r"parent_leaves_before_children +children_settle_before_own_idle@a +activation_tree +3",
        lines[1],
    ), lines[1]
    assert lines[2] == (
        "    children.joined fires before every owned child settled, so the parent converges first."
    )
    assert lines[3].startswith("dispose_not_memoized ")
    assert lines[4].startswith("    dispose() is not memoized")
    assert re.fullmatch(r"Done\. mutants=2 killed=2 survived=0 sec=\d+\.\d", lines[-1])
    assert err == ""


def test_command_exits_1_and_names_the_gap_of_a_survivor(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def survives(mutant: Mutant, specs: Path | None) -> Kill:
        return Kill(mutant.name, False, None, 0, 0.5)

    gap = "no property says the holder's reason never changes once set"
    known = dataclasses.replace(_mutants.BY_NAME["last_wins_cause"], gap=gap)
    unknown = _mutants.BY_NAME["latch_set_on_disposed"]
    monkeypatch.setattr(_mutants, "MUTANTS", (known, unknown))
    monkeypatch.setattr(_mutants, "BY_NAME", {m.name: m for m in (known, unknown)})
    monkeypatch.setattr(_mutants, "run_mutant", survives)
    monkeypatch.setattr(
        _mutants, "run_unmutated", lambda _, specs: Kill(UNMUTATED, False, None, 0, 1)
    )
    assert run(_args(["--jobs", "1"])) == 1
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"last_wins_cause +SURVIVED +- +-", out[1])
    assert out[2].startswith("    cancel.turn aborts ")
    rows = [line for line in out[1:] if not line.startswith(" ")]
    assert rows[1].startswith("latch_set_on_disposed ")
    assert rows[2] == f"last_wins_cause survived: {gap}"
    assert rows[3] == "latch_set_on_disposed survived: no property caught it"
    assert re.fullmatch(r"Done\. mutants=2 killed=0 survived=2 sec=\d+\.\d", rows[4])


def test_command_refuses_a_kill_table_when_the_unmutated_tables_fail(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(_: object, specs: Path | None) -> Kill:
        return Kill(UNMUTATED, True, "latch_has_work", 3, 1.0, "agent_races")

    monkeypatch.setattr(_mutants, "run_mutant", lambda m, specs: Kill(m.name, True, "x", 1, 0.1))
    monkeypatch.setattr(_mutants, "run_unmutated", broken)
    assert run(_args(["--jobs", "1", "latch_set_on_disposed"])) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "fsm-core: the unmutated tables already fail latch_has_work on agent_races (3 steps); "
        "a kill table would prove nothing\n"
    )


def test_command_exits_2_on_a_stale_edit_before_checking_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = _stale(Remove("cancel.gone", "x"))
    monkeypatch.setattr(_mutants, "MUTANTS", (stale,))
    monkeypatch.setattr(_mutants, "BY_NAME", {"stale": stale})
    assert run(_args(["stale"])) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "fsm-core: mutant 'stale': specs/agent.toml: no row 'cancel.gone'; update the mutant to "
        "the current table\n"
    )


def test_command_exits_2_on_an_unknown_mutant(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(_args(["--spec", "last_wins_cuase"])) == 2
    out, err = capsys.readouterr()
    known = ", ".join(m.name for m in MUTANTS)
    assert out == ""
    assert err == (
        f"fsm-core: unknown mutant 'last_wins_cuase'; did you mean last_wins_cause? "
        f"(mutants: {known})\n"
    )


def test_the_kill_table_fits_100_columns_on_the_whole_catalogue() -> None:
    """Each mutant killed by what kills it, in its first model (where every kill of the
    catalogue is found today), with a long load message: every line at most 100 characters."""
    load = "load: specs/agent.toml: row 'x': " + "a requires b, which does not hold " * 8
    kills = [
        Kill(
            m.name,
            True,
            load if m.load_killed else KILLED_BY[m.name],
            0 if m.load_killed else 12,
            123.4,
            m.models[0],
        )
        for m in MUTANTS
    ]
    lines = format_table(MUTANTS, kills).splitlines()
    assert [line for line in lines if len(line) > 100] == []
    assert len([line for line in lines if not line.startswith(" ")]) == 1 + 2 * len(MUTANTS) - len(
        KILLED_BY
    )


# --- --show NAME: one mutant's counterexample ---------------------------------------------------


def test_show_prints_the_counterexample_as_check_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(_args(["--spec", "--show", "last_wins_cause"])) == 0
    shown = capsys.readouterr().out
    specs = copy_specs(tmp_path)
    _mutants.BY_NAME["last_wins_cause"].plant(specs)
    assert main(["--specs", str(specs), "check", "--workers", "1", "agent_races"]) == 1
    checked = capsys.readouterr().out
    heading = "agent_races: reason_first_wins is violated; a shortest counterexample, 2 steps:\n"
    trace = checked[checked.index(heading) : checked.index("\nDone. ") + 1]
    assert trace.startswith(heading) and "violated: reason_first_wins (" in trace
    doc = _mutants.BY_NAME["last_wins_cause"].doc
    assert shown.startswith("last_wins_cause (specs/agent.toml): cancel.turn aborts ")
    assert (
        " ".join(shown[: shown.index("\n\n")].split())
        == f"last_wins_cause (specs/agent.toml): {doc}"
    )
    assert shown[shown.index("\n\n") + 2 :] == trace


def test_show_a_mutant_the_loader_refuses_prints_its_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(_args(["--show", "running_before_holder"])) == 0
    out = capsys.readouterr().out.replace("\n  ", " ")
    assert "\nagent_races: the loader refuses the mutated specs/agent.toml:\n" in out
    # The line is the table's as written, not the rewritten copy's the loader read.
    at = load_killed_at(_mutants.BY_NAME["running_before_holder"])
    assert f"\n{at}: {LOAD_KILLED_BY['running_before_holder']}" in out


def test_show_a_survivor_exits_1_naming_its_gap(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_mutants, "_first_failure", lambda root, models: None)
    assert run(_args(["--show", "latch_set_on_disposed"])) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "latch_set_on_disposed survives on agent_races: no property caught it"


def test_show_an_unknown_mutant_exits_2_suggesting_the_closest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(_args(["--spec", "--show", "latch_set_on_dispose"])) == 2
    out, err = capsys.readouterr()
    known = ", ".join(m.name for m in MUTANTS)
    assert out == ""
    assert err == (
        "fsm-core: unknown mutant 'latch_set_on_dispose'; did you mean latch_set_on_disposed? "
        f"(mutants: {known})\n"
    )


@pytest.mark.parametrize(
    ("argv", "fault"),
    [
        (["--runtime", "--show", "x"], "--show applies to --spec mutants only"),
        (
            ["--show", "x", "last_wins_cause"],
            "--show checks its one mutant in this process; drop NAME arguments",
        ),
        (
            ["--show", "x", "--jobs", "2"],
            "--show checks its one mutant in this process; drop --jobs",
        ),
    ],
)
def test_show_refuses_what_it_cannot_use(
    argv: list[str], fault: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(_args(argv)) == 2
    assert capsys.readouterr() == ("", f"fsm-core: {fault}\n")
