"""``fsm-core spec``: the listing, the JSON export, and how bad input is reported."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fsm_core.cli import main
from fsm_core.export import spec_to_json
from fsm_core.table import load_spec
from tests.helpers import FSM_CORE, copy_specs, edit, head


def test_spec_json_prints_every_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["format"] == "fsm-core/spec"
    assert list(doc["machines"]) == ["activation", "admission", "agent"]
    assert err == ""


def test_spec_json_prints_only_the_named_machine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "--json", "activation"]) == 0
    assert list(json.loads(capsys.readouterr().out)["machines"]) == ["activation"]


def test_spec_prints_the_listing_of_the_named_machine_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["spec", "agent"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("fsm-core spec: 1 machine from specs/, ")
    assert "\n== agent: " in out
    assert (
        "\n  cancel.turn  running|cancelling --cancel(cause, keep_inbox) [holder == live]--> "
        "cancelling\n"
    ) in out
    assert "== activation" not in out
    assert "dispose.begin" not in out
    assert err == ""


def test_spec_json_carries_contracts_and_step_invariants(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["spec", "--json", "agent"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 4
    agent = doc["machines"]["agent"]
    settle = next(e for e in agent["effects"] if e["name"] == "settle_idle")
    assert settle["requires"] == {"text": "quiescent", "expr": {"def": "quiescent"}}
    assert [s["id"] for s in agent["step_invariants"]] == ["reason_first_wins"]
    assert set(agent["step_invariants"][0]["clauses"]) <= set(doc["clauses"])


def test_spec_json_carries_the_wiring_only_with_every_machine_it_connects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["spec", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["wiring"]["calls"][0]["id"] == "close.shuts_agent"
    assert set(doc["wiring"]["calls"][0]["clauses"]) <= set(doc["clauses"])
    assert main(["spec", "--json", "agent"]) == 0
    assert json.loads(capsys.readouterr().out)["wiring"] is None


def test_spec_prints_the_wiring_last(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec"]) == 0
    out = capsys.readouterr().out
    assert out.index("\n== agent: ") < out.index(
        "\n== wiring: how instances meet  (specs/wiring.toml)\n"
    )
    assert "\n  close.shuts_agent  activation.close_inbox -> agent.shut()\n" in out
    assert "activation.watch_gone()\n\nlisteners (" in out
    assert out.endswith("parent_agent.send(wake=*, lane=*)  [spends agent.send]\n")


def test_spec_lists_contracts_and_step_invariants(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "agent"]) == 0
    out = capsys.readouterr().out
    assert "\n  settle_idle()  requires: quiescent\n" in out
    assert "\n  reason_first_wins: reason unchanged while holder == aborted\n" in out
    assert out.index("\ninvariants (") < out.index("\nstep invariants (")


def test_spec_with_unknown_machine_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "agent", "agnet"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "fsm-core: unknown machine 'agnet' (machines: activation, admission, agent)\n"


def test_spec_on_a_broken_table_exits_2_naming_file_and_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = copy_specs(tmp_path)
    edit(
        specs / "agent.toml",
        'id = "cancel.turn"\non = "cancel"\n',
        'id = "cancel.turn"\non = "cancle"\n',
    )

    assert main(["--specs", str(specs), "spec"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "fsm-core: specs/agent.toml:349: row 'cancel.turn': unknown event 'cancle' (did you "
        "mean 'cancel'? events: send, "
        "cancel, dispose, shut, maintenance_start, remove, start, claim, take_prompt, "
        "take_steering, retire, converge, halt, maintenance_finish, scope_unwound, "
        "dispose_finish)\n"
    )


def test_entry_point_prints_the_same_export_bytes(tmp_path: Path) -> None:
    """``python -m fsm_core`` runs from anywhere, on any terminal encoding, with identical bytes."""
    spec = load_spec()
    expected = json.dumps(spec_to_json(spec, list(spec.machines)), indent=2)
    done = subprocess.run(
        [*FSM_CORE, "spec", "--json"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert (done.returncode, done.stderr.decode()) == (0, "")
    assert done.stdout.decode("ascii") == expected + "\n"


def test_a_reader_that_leaves_early_ends_the_export_quietly_with_141() -> None:
    """``fsm-core spec --json | head -1``: no traceback, and the status of a tool that
    SIGPIPE stopped (128 + 13), as ``seq`` or ``cat`` would exit in the same pipeline."""
    assert head(["spec", "--json"]) == (141, b"{\n", b"")
    # The export must not fit in the pipe with room to spare, or it would be written whole
    # before the reader left (a pipe holds 64 KiB on Linux, the reader buffers 8 KiB).
    spec = load_spec()
    assert len(json.dumps(spec_to_json(spec, list(spec.machines)), indent=2)) > 2**17


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_output_that_cannot_be_written_exits_2_naming_the_fault() -> None:
    """``fsm-core spec > /dev/full``: one line naming the fault, no traceback."""
    with Path("/dev/full").open("w") as full:
        done = subprocess.run(
            [*FSM_CORE, "spec"], stdout=full, stderr=subprocess.PIPE, check=False, timeout=120
        )
    assert (done.returncode, done.stderr.decode()) == (
        2,
        "fsm-core: cannot write output: No space left on device\n",
    )
