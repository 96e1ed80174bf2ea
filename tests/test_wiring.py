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
from fsm_core.check._composed._tree import KEEPS_INBOX, NO_TURN_AFTER_CLOSE, REFUSES_DRAINING
from fsm_core.check._report import format_trace
from fsm_core.check._system import build
from fsm_core.tools._row_edits import DropCall, Edit, SetCall, apply_edits, dump_toml
from tests.helpers import copy_specs, edit, exactly
from tests.test_check_cli import Run, default_run

__all__ = ["default_run"]  # test_check_cli's fixture, shared

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
            "60: call 'close.shuts_agent': activation has no effect 'close_door' (did you mean "
            "'close_inbox'? effects: ",
        ),
        (
            'target = "agent"\nevent = "shut"',
            'target = "sibling"\nevent = "shut"',
            "61: call 'close.shuts_agent': an effect of activation cannot reach target 'sibling' "
            "(targets: self, agent, children, parent, door, new_agent)",
        ),
        (
            'event = "shut"',
            'event = "shutdown"',
            "62: call 'close.shuts_agent': target agent runs agent, which has no event 'shutdown' "
            "(did you mean 'shut'? events: ",
        ),
        (
            'args = { cause = "cause", keep_inbox = "true" }',
            'args = { cause = "cause", keep_inbox = "1" }',
            "73: call 'close.cancels_agent': args.keep_inbox: type mismatch: expected bool, found "
            "int[1..1] in '1'",
        ),
        (
            'args = { cause = "cause", keep_inbox = "true" }',
            'args = { cause = "cause" }',
            "73: call 'close.cancels_agent': args gives no value for the parameter 'keep_inbox'",
        ),
        (
            'event = "root_settled"\nargs = { parent = "parent" }',
            'event = "root_settled"\nargs = { parent = "last" }',
            "163: call 'settle.notifies_host': args.parent: unknown name 'last' in 'last'",
        ),
        (
            'id = "door.admits_below"\neffect = "admission.admit_below"\ntarget = "named"\n'
            'event = "admit"\nrefused = "caller"',
            'id = "door.admits_below"\neffect = "admission.admit_below"\ntarget = "named"\n'
            'event = "admit"\nrefused = "maybe"',
            "192: call 'door.admits_below': refused must be 'never' or 'caller', not 'maybe'",
        ),
        (
            'until = "quiescent"',
            'until = "idle"',
            "269: await 'teardown.awaits_idle': until: type mismatch: expected bool, found idle in "
            "'idle'",
        ),
        (
            'event = "activation.agent_idle"',
            'event = "activation.dispose"',
            "267: await 'teardown.awaits_idle': activation.dispose is an input event: only the "
            "runtime's own (internal) events wait",
        ),
        (
            'id = "close.cancels_agent"',
            'id = "close.shuts_agent"',
            "68: call 'close.shuts_agent': the id is used twice (a call has it too)",
        ),
        (
            'clauses = ["R.watch-gone"]',
            'clauses = ["S004.idle-waiter-first"]',
            "298: await 'watch.agent_gone': clause 'S004.idle-waiter-first' says no row implements "
            "it (its not_implemented in specs/clauses.toml): drop the tag, or the not_implemented",
        ),
    ],
    ids=[
        "unknown-effect", "unknown-target", "unknown-event", "ill-typed-argument",
        "missing-argument", "fact-the-target-cannot-know", "bad-refusal", "until-not-bool",
        "await-of-an-input", "duplicate-id", "tag-of-an-unimplemented-clause",
    ],
)  # fmt: skip
def test_a_faulty_wiring_is_refused_whole_naming_file_line_entry_and_fault(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "wiring.toml", old, new)
    with pytest.raises(SpecError) as refused:
        load_spec(specs)
    assert str(refused.value).startswith(f"specs/wiring.toml:{message}")


DISPOSES_PARENT = (
    'id = "settle.disposes_parent"\neffect = "activation.settle"\ntarget = "parent"\n'
    'event = "dispose"\nargs = { final_state_flushed = "false", drain = "false" }\n'
    'budget = "dispose"\n'
)
"""The first listener entry of specs/wiring.toml, as written."""


def _entry(**changed: str) -> str:
    """:data:`DISPOSES_PARENT` with the keys ``changed`` written anew ("": left out)."""
    lines = []
    for line in DISPOSES_PARENT.splitlines():
        key = line.partition(" = ")[0]
        if key not in changed:
            lines.append(line)
        elif changed[key]:
            lines.append(f"{key} = {changed[key]}")
    return "\n".join(lines) + "\n"


LISTENER = "specs/wiring.toml:{line}: listener 'settle.disposes_parent': "


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            _entry(effect='"activation.setle"'),
            "305: activation has no effect 'setle' (did you mean 'settle'? effects: close_inbox, ",
        ),
        (
            _entry(effect='"agent.publish_status"'),
            "305: effect 'agent.publish_status' is not MACHINE.EFFECT (machines: activation)",
        ),
        (
            _entry(effect='"activation.close_inbox"'),
            "305: activation.close_inbox does not notify: listeners run only inside an effect "
            "with notifies = true (notifying: notify_parent, settle)",
        ),
        (
            _entry(target='"parnet"'),
            "306: an effect of activation cannot call target 'parnet' (did you mean 'parent'? "
            "targets: parent, parent_agent, below_parent, door)",
        ),
        (
            _entry(target='"self"'),
            "306: an effect of activation cannot call target 'self' (targets: parent, "
            "parent_agent, below_parent, door)",
        ),
        (
            _entry(event='"disposes"'),
            "307: target parent runs activation, which has no event 'disposes' (did you mean "
            "'dispose'? events: dispose, drain, ",
        ),
        (
            _entry(event='"child_settled"'),
            "307: activation.child_settled is internal: a listener calls what a user may call "
            "(an input event)",
        ),
        (
            _entry(args='{ final_state_flushed = "false", drain = "false", force = "true" }'),
            "308: args names 'force', which is no parameter (parameters: final_state_flushed, "
            "drain)",
        ),
        (
            _entry(args='{ final_state_flushed = "false" }'),
            "308: args gives no value for the parameter 'drain'",
        ),
        (
            _entry(args='{ final_state_flushed = "false", drain = "1" }'),
            "308: args.drain: type mismatch: expected bool, found int[1..1] in '1'",
        ),
        (
            _entry(args='{ final_state_flushed = "false", drain = "failed" }'),
            "308: args.drain: unknown name 'failed' in 'failed'",
        ),
        (
            _entry(budget='"disposes"'),
            "309: budget 'disposes' is not what the call spends: a listener's call spends the "
            "budget of the environment's same call (did you mean 'dispose'? budget: dispose)",
        ),
        (
            _entry(budget='"agent.dispose"'),
            "309: budget 'agent.dispose' is not what the call spends: a listener's call spends "
            "the budget of the environment's same call (did you mean 'dispose'? budget: dispose)",
        ),
    ],
    ids=[
        "unknown-effect", "effect-of-a-machine-no-listener-hears", "effect-that-does-not-notify",
        "unknown-target", "the-settled-node-itself", "unknown-event", "internal-event",
        "unknown-argument", "missing-argument", "ill-typed-argument", "argument-naming-a-name",
        "unknown-budget", "budget-the-call-does-not-spend",
    ],
)  # fmt: skip
def test_a_faulty_listener_is_refused_whole_naming_file_line_entry_and_fault(
    tmp_path: Path, entry: str, message: str
) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "wiring.toml", DISPOSES_PARENT, entry)
    line, _, fault = message.partition(": ")
    with pytest.raises(SpecError) as refused:
        load_spec(specs)
    assert str(refused.value).startswith(LISTENER.format(line=line) + fault)


@pytest.mark.parametrize(
    ("entry", "edited", "message"),
    [
        (
            "settle.drains_below_host",
            ('target = "door"\nevent = "drain_below"\nargs = { parent = "host" }',
             'target = "door"\nevent = "drain_below"\nargs = { parent = "activation" }'),
            "350: target door makes the door's own call, which names no node: parent = "
            "activation is target below_parent's",
        ),
        (
            "settle.drains_below_host",
            ('target = "door"\nevent = "drain_below"\nargs = { parent = "host" }',
             'target = "door"\nevent = "drain_below"\nargs = { parent = "*" }'),
            "350: target door makes the door's own call, which names no node: parent = "
            "activation is target below_parent's",
        ),
        (
            "settle.drains_below_parent",
            ('args = { parent = "activation" }', 'args = { parent = "host" }'),
            "331: target below_parent calls the door naming the parent: its event needs "
            "parent = activation, not host",
        ),
        (
            "settle.drains_below_parent",
            ('event = "drain_below"\nargs = { parent = "activation" }\nbudget = "drain_below"',
             'event = "drain"\nbudget = "drain"'),
            "330: target below_parent calls the door naming the parent: its event needs "
            "parent = activation",
        ),
    ],
    ids=["door-naming-a-node", "door-naming-any-parent", "below-parent-naming-the-host",
         "below-parent-naming-nothing"],
)  # fmt: skip
def test_a_listener_door_call_names_a_node_exactly_when_it_targets_below_parent(
    tmp_path: Path, entry: str, edited: tuple[str, str], message: str
) -> None:
    """Without this a door call naming a node through target ``door`` crashed the tree's
    resolution, and one through ``below_parent`` naming no node drained the whole registry."""
    specs = copy_specs(tmp_path)
    text = (specs / "wiring.toml").read_text(encoding="utf-8")
    start = text.index(f'id = "{entry}"')
    at = text.index(edited[0], start)
    (specs / "wiring.toml").write_text(
        text[:at] + edited[1] + text[at + len(edited[0]) :], encoding="utf-8"
    )
    line, _, fault = message.partition(": ")
    with pytest.raises(SpecError) as refused:
        load_spec(specs)
    assert str(refused.value) == f"specs/wiring.toml:{line}: listener {entry!r}: {fault}"


def test_a_fault_of_an_entry_whose_id_repeats_later_is_placed_at_its_own_line(
    tmp_path: Path,
) -> None:
    """(It was placed at the later entry, whose id only repeats the first's.)"""
    specs = copy_specs(tmp_path)
    text = (specs / "wiring.toml").read_text(encoding="utf-8")
    text = text.replace('id = "settle.admits_sibling"', 'id = "settle.disposes_parent"', 1)
    first = text.index('id = "settle.disposes_parent"')
    at = text.index('event = "dispose"', first)
    text = text[:at] + 'event = "disposee"' + text[at + len('event = "dispose"') :]
    (specs / "wiring.toml").write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as refused:
        load_spec(specs)
    assert str(refused.value).startswith(
        "specs/wiring.toml:307: listener 'settle.disposes_parent': target parent runs "
        "activation, which has no event 'disposee' (did you mean 'dispose'?"
    ), str(refused.value)


def test_a_listener_missing_a_key_is_refused_by_its_index(tmp_path: Path) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "wiring.toml", DISPOSES_PARENT, _entry(budget=""))
    with pytest.raises(
        SpecError, match=exactly("specs/wiring.toml:303: listeners[0]: missing key 'budget'")
    ):
        load_spec(specs)


def test_a_listener_reusing_an_id_is_refused_at_the_later_entry(tmp_path: Path) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "wiring.toml", 'id = "settle.drains_registry"', 'id = "close.shuts_agent"')
    with pytest.raises(
        SpecError,
        match=exactly(
            "specs/wiring.toml:336: listener 'close.shuts_agent': the id is used twice (a call "
            "has it too)"
        ),
    ):
        load_spec(specs)


def test_a_listener_citing_an_unknown_clause_is_refused(tmp_path: Path) -> None:
    specs = copy_specs(tmp_path)
    edit(specs / "wiring.toml", '"S004.step-5-settle", "S004.dispose-up"', '"S004.step-5-settl"')
    with pytest.raises(
        SpecError,
        match=exactly(
            "specs/wiring.toml:310: listener 'settle.disposes_parent': unknown clause "
            "'S004.step-5-settl' (did you mean 'S004.step-5-settle'? see specs/clauses.toml)"
        ),
    ):
        load_spec(specs)


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
            "specs/wiring.toml:60: calls[0]: unknown key 'when' (expected one of: args, clauses, "
            "doc, effect, event, id, only, refused, target)"
        ),
    ):
        load_spec(specs)


# --- the composition with real agents ------------------------------------------------------------


def _without(specs: Path, call: str) -> None:
    _rewired(specs, DropCall(call))


def _rewired(specs: Path, *edits: Edit) -> None:
    path = specs / "wiring.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    apply_edits(edits, data)
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
        "1. a.dispose(final_state_flushed=false, drain=false) -> dispose.begin",
        "2. a:agent.send(wake=true, lane=next_turn) -> send.idle.wake",
        "3. a:agent.start() -> start.turn",
        "4. a:agent.claim() -> claim.turn",
    ]
    (violated,) = [line for line in lines if line.startswith("violated")]
    assert violated.startswith(
        "violated: no_turn_after_close (an agent opened a model turn while its activation was "
        "tearing down) in state 4: a.stage=joining "
    )


def test_the_shipped_wiring_proves_no_turn_after_close_and_keeps_the_inbox(
    default_run: Run,
) -> None:
    """agent_tree checks both properties, and the default ``fsm-core check`` (run once per
    pytest run, ``test_check_cli.default_run``) finds it ok."""
    built = build(load_model(models_dir() / "agent_tree.toml"))
    assert {NO_TURN_AFTER_CLOSE, KEEPS_INBOX} <= {p.name for p in built.properties}
    rows = [line.split() for line in default_run.out.splitlines()]
    assert [row[1] for row in rows if row[:1] == ["agent_tree"]] == ["ok"]


def test_a_teardown_that_clears_its_agents_inbox_discards_a_childs_prompt(tmp_path: Path) -> None:
    """With the teardown's cancel clearing the inbox (keep_inbox = false), the prompt of a child
    admitted but not yet run is discarded by its own cancel, inside the root's dispose: seed
    004's disposal path keeps the inbox, so that work reaches the final capture."""
    specs = copy_specs(tmp_path)
    _rewired(specs, SetCall("close.cancels_agent", "args.keep_inbox", "true", "false"))
    report = check(load_model(models_dir() / "agent_tree.toml", specs=specs))
    assert report.violation is not None
    assert report.violation.name == KEEPS_INBOX
    lines = format_trace(report).splitlines()
    steps = [line.split("   changed")[0] for line in lines if line[0].isdigit()][1:]
    assert steps == [
        "1. door.admit(parent=activation) for a -> admit.below",
        "2. a.dispose(final_state_flushed=false, drain=false) -> dispose.begin",
    ]
    assert (
        "a.1:agent.cancel(cause=parent, keep_inbox=false) -> cancel.prerun (stopped at "
        "clear_inbox())" in format_trace(report)
    )


def test_a_drain_that_finds_a_child_closing_makes_its_teardown_the_drains(tmp_path: Path) -> None:
    """Before ``dispose.drain_covers``, a drain that found a subtree already closing by someone's
    dispose left the teardowns below the node it named someone's: a followup to the child was
    refused ACTIVATION_CLOSING while its drained parent was registered, where the original (and
    the decision: one code per drained scope) answers DRAINING. Here drain_children() names the
    root a user's dispose is tearing down: the root's teardown becomes the drain's, its child's
    must too."""
    specs = copy_specs(tmp_path)
    edit(
        specs / "activation.toml",
        'guard = "drain and not by_drain"\ndo = ["by_drain := true", "cover_children()"]',
        'guard = "drain and not by_drain"',
    )
    report = check(load_model(models_dir() / "activation_tree.toml", specs=specs))
    assert report.violation is not None
    assert report.violation.name == REFUSES_DRAINING
    lines = format_trace(report).splitlines()
    assert lines[-1] == "clauses: S004.drain-gate, S004.drain-admission (specs/clauses.toml)"
    steps = [line.split("   changed")[0] for line in lines if line[0].isdigit()][1:]
    assert steps == [
        "1. door.admit(parent=activation) for a -> admit.below",
        "2. a.dispose(final_state_flushed=false, drain=false) -> dispose.begin",
        "3. a.drain_child(lineage=true) -> drain_child.covers",
    ]
    assert "a.1.dispose(final_state_flushed=false, drain=true) -> dispose.drain_covers" in (
        format_trace(report)
    )


def test_drain_children_naming_a_closing_child_makes_its_teardown_the_drains() -> None:
    """The same through drain_children() naming the child itself: the caller awaits the
    teardown running, which from then on is the drain's (``drain_child.covers``). The tree's
    property reads a drain's scope off the node it named, so this one row is pinned here."""
    from fsm_core import Rejected

    activation = load_spec().machines["activation"]
    closing = activation.fire(
        activation.initial, "dispose", final_state_flushed=False, drain=False
    ).target
    with pytest.raises(Rejected, match=r"^ACTIVATION_CLOSING: "):
        activation.fire(closing, "deliver", drained=False)
    drained = activation.fire(closing, "drain_child", lineage=True)
    assert drained.row == "drain_child.covers"
    with pytest.raises(Rejected, match=r"^DRAINING: "):
        activation.fire(drained.target, "deliver", drained=False)
    with pytest.raises(Rejected, match=r"^DRAINING: "):
        activation.fire(drained.target, "admit")


def test_a_runtime_refuses_a_wiring_whose_awaits_it_does_not_implement(tmp_path: Path) -> None:
    """The runtime awaits the agent's idle (when_idle(): quiescent) before agent_idle; a wiring
    that says otherwise is refused when the runtime is built, not followed half-way."""
    from fsm_core import FsmError, Runtime
    from fsm_core.testing import ScriptedModel

    specs = copy_specs(tmp_path)
    edit(specs / "wiring.toml", 'until = "quiescent"', 'until = "phase == idle"')
    with pytest.raises(FsmError, match=r"^the runtime and specs/wiring\.toml disagree on what "):
        Runtime(ScriptedModel(), specs=specs)


def test_every_tree_property_names_the_clauses_it_proves() -> None:
    """Each promise of seed 004 the tree proves is a named property with its clause, and each
    clause is one of specs/clauses.toml's."""
    from fsm_core.check._system import declared

    catalogue = load_spec().clauses
    own = {
        p.name: p.clauses
        for p in declared(load_model(models_dir() / "agent_tree.toml"))
        if p.kind in ("always", "between", "delivered")
    }
    assert NO_TURN_AFTER_CLOSE in own and all(own.values()), own
    assert {c for clauses in own.values() for c in clauses} <= set(catalogue)
    assert own[NO_TURN_AFTER_CLOSE] == ("S004.never-latch", "D8")


# --- listeners: what a notification's listeners may call, declared beside the calls ------------

SMALL_TREE = """[model]
doc = "A root and one child slot; a settled child's listeners call what the wiring lets them."
table = "../specs/activation.toml"
kind = "activation-tree"

[tree]
depth = 1
width = 1
door = "../specs/admission.toml"
wiring = "../specs/wiring.toml"

[environment]
budgets = { admit = 1, dispose = 1, drain = 1 }
reactions = ["activation.settle"]
"""


def _settle_listeners_calls(tmp_path: Path, listeners: list[dict[str, object]] | None) -> set[str]:
    """The calls the checker explored listeners making inside ``settle``, on the small tree,
    with the wiring's ``[[listeners]]`` replaced by ``listeners`` (None: as shipped)."""
    from fsm_core.check._moves import Move
    from tests.helpers import write_model

    path = write_model(tmp_path, "small_tree", SMALL_TREE)
    if listeners is not None:
        wiring = tmp_path / "specs" / "wiring.toml"
        data = tomllib.loads(wiring.read_text(encoding="utf-8"))
        data["listeners"] = listeners
        wiring.write_text(dump_toml(data), encoding="utf-8")
    report = check(load_model(path))
    assert report.violation is None and report.result.complete
    found: set[str] = set()

    def walk(move: Move) -> None:
        for effect, nested in move.inside:
            if effect.startswith("settle("):
                found.add(nested.call())
            walk(nested)

    for move in report.moves:
        walk(move)
    return found


def _shipped_listeners() -> list[dict[str, object]]:
    listeners: list[dict[str, object]] = tomllib.loads(
        (Path(load_spec().root) / "wiring.toml").read_text(encoding="utf-8")
    )["listeners"]
    return listeners


def test_the_checker_lets_a_settled_childs_listeners_make_the_calls_the_wiring_declares(
    tmp_path: Path,
) -> None:
    """Inside a child's ``settle``, the checker explores listeners disposing the parent,
    draining below it through the door, and draining the registry and below the host parent
    (the model budgets no ``drain_below``: a drain below falls back to ``drain``). No admission
    below the parent: its one child slot stays taken."""
    assert _settle_listeners_calls(tmp_path, None) == {
        "a.dispose(final_state_flushed=false, drain=false)",
        "door.drain_below(parent=activation) for a",
        "door.drain()",
        "door.drain_below(parent=host)",
    }


def test_a_listener_dropped_from_the_wiring_is_no_longer_explored(tmp_path: Path) -> None:
    kept = [x for x in _shipped_listeners() if x["id"] != "settle.disposes_parent"]
    calls = _settle_listeners_calls(tmp_path, kept)
    assert "a.dispose(final_state_flushed=false, drain=false)" not in calls
    assert "door.drain()" in calls


def test_a_listener_planted_in_the_wiring_is_explored(tmp_path: Path) -> None:
    """A mutant listener draining the parent straight, past the door: the checker now explores
    it, so the section is what the checker reads, not a copy of it."""
    planted: dict[str, object] = {
        "id": "settle.drains_parent_straight",
        "effect": "activation.settle",
        "target": "parent",
        "event": "drain",
        "args": {"scope": "registry"},
        "budget": "drain",
        "clauses": ["S004.step-5-settle"],
        "doc": "A planted mutant.",
    }
    calls = _settle_listeners_calls(tmp_path, [*_shipped_listeners(), planted])
    assert "a.drain(scope=registry)" in calls


def test_a_wiring_without_listeners_loads_and_lets_no_node_listener_in(tmp_path: Path) -> None:
    specs = copy_specs(tmp_path)
    path = specs / "wiring.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    del data["listeners"]
    path.write_text(dump_toml(data), encoding="utf-8")
    wiring = load_spec(specs).wiring
    assert wiring is not None
    assert (wiring.listeners, wiring.heard("activation")) == ((), ())
    assert len(wiring.calls) == 21
