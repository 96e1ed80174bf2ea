"""specs/wiring.toml: how instances meet, declared once, validated like a table, and proved in
trees whose nodes carry real agents.

The last tests keep the bug the composition with agents found: on the wiring from before the
close shut its agent (no ``close.shuts_agent``), a teardown waits on a model turn."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fsm_core import SpecError, load_spec
from fsm_core._paths import models_dir
from fsm_core.check import check, load_model
from fsm_core.check._composed._tree import NO_TURN_AFTER_CLOSE
from fsm_core.check._report import format_trace
from fsm_core.tools._row_edits import DropCall, apply_edits, dump_toml
from tests.helpers import copy_specs, edit, exactly

# --- the declaration ----------------------------------------------------------------------------


def test_the_shipped_wiring_connects_the_close_to_its_agent_before_the_cancel() -> None:
    wiring = load_spec().wiring
    assert wiring is not None
    close = [str(c) for c in wiring.fired_by("activation", "close_inbox")]
    cancel = [str(c) for c in wiring.fired_by("activation", "cancel_agent")]
    assert close == ["activation.close_inbox -> agent.shut()"]
    assert cancel == ["activation.cancel_agent -> agent.cancel(cause=cause, keep_inbox=true)"]
    call = wiring.fired_by("activation", "cancel_agent")[0]
    assert call.keywords(("parent",), {}) == {"cause": "parent", "keep_inbox": True}


def test_a_call_computes_its_arguments_from_the_effect_and_the_targets_facts() -> None:
    wiring = load_spec().wiring
    assert wiring is not None
    to_parent, to_door = wiring.fired_by("activation", "notify_parent")
    assert (to_parent.target, to_parent.only, to_door.target, to_door.only) == (
        "parent", "child", "door", "root",
    )  # fmt: skip
    assert to_parent.arguments((True,), {"last": False}) == (True, False)
    assert to_door.arguments((True,), {"parent": "host"}) == ("host",)


def test_an_await_reads_the_agents_state() -> None:
    spec = load_spec()
    assert spec.wiring is not None
    agent = spec.machines["agent"]
    watch = spec.wiring.awaiting("activation", "watch")
    assert watch is not None
    idle_with_work = agent.state(pending=True)
    # current is the environment's (*); busy and pending are read from the agent
    assert watch.admits(idle_with_work, (True, False, True))
    assert not watch.admits(idle_with_work, (True, True, True))
    assert not watch.admits(agent.state(phase="disposed", closing=True), (True, False, False))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'effect = "activation.close_inbox"',
            'effect = "activation.close_door"',
            "call 'close.shuts_agent': activation has no effect 'close_door' (effects: ",
        ),
        (
            'target = "agent"\nevent = "shut"',
            'target = "sibling"\nevent = "shut"',
            "call 'close.shuts_agent': an effect of activation cannot reach target 'sibling' "
            "(targets: self, agent, children, parent, door, new_agent)",
        ),
        (
            'event = "shut"',
            'event = "shutdown"',
            "call 'close.shuts_agent': target agent runs agent, which has no event 'shutdown' "
            "(events: ",
        ),
        (
            'args = { cause = "cause", keep_inbox = "true" }',
            'args = { cause = "cause", keep_inbox = "1" }',
            "call 'close.cancels_agent': args.keep_inbox: type mismatch: expected bool, found "
            "int[1..1] in '1'",
        ),
        (
            'args = { cause = "cause", keep_inbox = "true" }',
            'args = { cause = "cause" }',
            "call 'close.cancels_agent': args gives no value for the parameter 'keep_inbox'",
        ),
        (
            'args = { parent = "parent" }\n'
            'clauses = ["S004.step-3-notify-parent", "R.root-notice"]\n'
            'doc = "A root\'s parent',
            'args = { parent = "last" }\n'
            'clauses = ["S004.step-3-notify-parent", "R.root-notice"]\n'
            'doc = "A root\'s parent',
            "call 'settle.notifies_host': args.parent: unknown name 'last' in 'last'",
        ),
        (
            'id = "door.admits_below"\neffect = "admission.admit_below"\ntarget = "named"\n'
            'event = "admit"\nrefused = "caller"',
            'id = "door.admits_below"\neffect = "admission.admit_below"\ntarget = "named"\n'
            'event = "admit"\nrefused = "maybe"',
            "call 'door.admits_below': refused must be 'never' or 'caller', not 'maybe'",
        ),
        (
            'until = "quiescent"',
            'until = "idle"',
            "await 'teardown.awaits_idle': until: type mismatch: expected bool, found idle in "
            "'idle'",
        ),
        (
            'event = "activation.agent_idle"',
            'event = "activation.dispose"',
            "await 'teardown.awaits_idle': activation.dispose is an input event: only the "
            "runtime's own (internal) events wait",
        ),
        (
            'id = "close.cancels_agent"',
            'id = "close.shuts_agent"',
            "id 'close.shuts_agent': the id is used twice",
        ),
    ],
    ids=[
        "unknown-effect", "unknown-target", "unknown-event", "ill-typed-argument",
        "missing-argument", "fact-the-target-cannot-know", "bad-refusal", "until-not-bool",
        "await-of-an-input", "duplicate-id",
    ],
)  # fmt: skip
def test_a_faulty_wiring_is_refused_whole_naming_file_entry_and_fault(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "wiring.toml", old, new)
    with pytest.raises(SpecError) as refused:
        load_spec(specs)
    assert str(refused.value).startswith(f"specs/wiring.toml: {message}")


def test_a_wiring_that_is_not_toml_is_refused(tmp_path: Path) -> None:
    specs = copy_specs(tmp_path)
    (specs / "wiring.toml").write_bytes(b"[wiring\n\xff")
    with pytest.raises(SpecError, match=r"^specs/wiring\.toml: "):
        load_spec(specs)


def test_a_wiring_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "wiring.toml", 'id = "close.shuts_agent"', 'id = "close.shuts_agent"\nwhen = 1')
    with pytest.raises(
        SpecError,
        match=exactly(
            "specs/wiring.toml: calls[0]: unknown key 'when' (expected one of: args, clauses, "
            "doc, effect, event, id, only, refused, target)"
        ),
    ):
        load_spec(specs)


# --- the composition with real agents ------------------------------------------------------------


def _without(specs: Path, call: str) -> None:
    path = specs / "wiring.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    apply_edits([DropCall(call)], data)
    path.write_text(dump_toml(data), encoding="utf-8")


def test_without_the_shut_a_teardown_waits_on_a_model_turn(tmp_path: Path) -> None:
    """The wiring before ``close.shuts_agent``: a followup straight to the agent of an
    activation being disposed wakes it, and it opens a model turn while its activation sits in
    ``joining`` (the seed: "disposal never latches, so teardown waits on no model turn")."""
    specs = copy_specs(tmp_path)
    _without(specs, "close.shuts_agent")
    model = load_model(models_dir() / "agent_tree.toml", specs=specs)
    report = check(model)
    assert report.violation is not None
    assert report.violation.name == NO_TURN_AFTER_CLOSE
    lines = format_trace(report).splitlines()
    steps = [line.split("   changed")[0] for line in lines if line[0].isdigit()][1:]
    assert steps == [
        "1. a.dispose(final_state_flushed=false) -> dispose.begin",
        "2. a:agent.send(wake=true, lane=next_turn) -> send.idle.wake",
        "3. a:agent.start() -> start.turn",
        "4. a:agent.claim() -> claim.turn",
    ]
    (violated,) = [line for line in lines if line.startswith("violated")]
    assert violated.startswith(
        "violated: no_turn_after_close (an agent opened a model turn while its activation was "
        "tearing down) in state 4: a.stage=joining "
    )


def test_the_shipped_wiring_proves_no_turn_after_close() -> None:
    report = check(load_model(models_dir() / "agent_tree.toml"))
    assert report.violation is None
    assert NO_TURN_AFTER_CLOSE in {p.name for p in report.properties}
