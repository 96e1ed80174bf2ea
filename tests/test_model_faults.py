"""A bad model file (or a bad table under it) is refused at load, whole, as a SpecError naming
the file, the place and the fault; nothing of it runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fsm_core import SpecError
from fsm_core._errors import echo
from fsm_core._paths import models_dir, specs_dir
from fsm_core.check import check, load_model
from tests.helpers import edit, exactly, write_model


def _bench_model(tmp_path: Path) -> Path:
    """bench_S's model beside a private copy of its table, ``bench/turncancel.toml``."""
    shutil.copytree(models_dir() / "bench", tmp_path / "bench")
    model = tmp_path / "bench_S.toml"
    shutil.copy(models_dir() / "bench_S.toml", model)
    return model


def test_a_row_id_that_is_code_is_refused_at_load_and_never_runs(tmp_path: Path) -> None:
    model = _bench_model(tmp_path)
    marker = tmp_path / "ran"
    # Valid TOML; before ids were checked, fsm-core check spliced it into generated source.
    hostile = (
        "followup\\n            pass\\n"
        f"import pathlib; pathlib.Path({str(marker)!r}).touch()\\n"
        "def _(s):\\n    if s:\\n        if s:  #"
    )
    edit(tmp_path / "bench" / "turncancel.toml", 'id = "followup"', f'id = "{hostile}"')
    with pytest.raises(
        SpecError,
        match=exactly(
            "bench/turncancel.toml:59: rows[0]: id 'followup\\n            pass\\nimport pa"
            "...def _(s):\\n    if s:\\n        if s:  #' is not a valid id "
            "(lower_snake_case words joined by dots, e.g. send.idle.wake)"
        ),
    ):
        check(load_model(model))  # what fsm-core check does
    assert not marker.exists()


AGENT_ENV = "[environment]\nbudgets = { send = 1 }\n"
TREE = (
    '[tree]\ndepth = 1\nwidth = 2\ndoor = "../specs/admission.toml"\n'
    'wiring = "../specs/wiring.toml"\n\n'
    "[environment]\nbudgets = { admit = 1, dispose = 1 }\n"
)
INVARIANT = "reason_iff_aborted"
"""An invariant of specs/agent.toml."""
TREE_INVARIANT = "slot_after_registry"
"""An invariant of specs/activation.toml."""


def _model(table: str, kind: str, rest: str, model: str = "") -> str:
    return f'[model]\ntable = "../specs/{table}"\nkind = "{kind}"\n{model}\n{rest}'


def _expect(verdict: str, extra: str = "") -> str:
    return f'\n[expect]\nstates = 1\ntransitions = 1\ndepth = 1\nverdict = "{verdict}"\n{extra}'


MODEL_FAULTS = [
    pytest.param(
        _model("activation.toml", "agent", AGENT_ENV),
        "models/m.toml:1: [model]: kind 'agent' needs a boolean variable closing in its table; "
        "specs/activation.toml has none",
        id="agent-kind-on-the-activation-table",
    ),
    pytest.param(
        _model("agent.toml", "activation-tree", TREE),
        "models/m.toml:1: [model]: kind 'activation-tree' needs a boolean variable resident in its "
        "table; specs/agent.toml has none",
        id="tree-kind-on-the-agent-table",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV, 'name = "../escape"'),
        "models/m.toml:4: [model]: name '../escape' is not a valid model name (letters, digits, _ "
        "and -; a file name's stem unless [model] name says otherwise)",
        id="name-with-a-slash",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV).replace("../specs/agent.toml", "agent.toml"),
        "models/m.toml:2: [model]: table 'agent.toml' names no file: tried <models>/agent.toml "
        "(relative to the model file)",
        id="table-not-found",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV).replace("../specs/agent.toml", "x" * 300),
        "models/m.toml:2: [model]: table "
        "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' "
        "names no file: tried <long> (relative to the model file)",
        id="table-name-too-long-for-the-file-system",
    ),
    pytest.param(
        _model("agent.toml", "agent", ""),
        "models/m.toml:1: [model]: a model of kind 'agent' needs an [environment] section",
        id="agent-without-environment",
    ),
    pytest.param(
        _model("agent.toml", "agent", "[environment]\nbudgets = { send = 1, start = 1 }\n"),
        "models/m.toml:6: [environment] budgets: 'start' is an internal event the runtime fires "
        "itself; a budget bounds what the user calls "
        "(send, cancel, dispose, shut, maintenance_start, remove)",
        id="budget-on-an-internal-event",
    ),
    pytest.param(
        _model("agent.toml", "table", AGENT_ENV),
        "models/m.toml:5: [environment]: a table model takes no budgets, reactions or failures: "
        "the table bounds its own run and no listener calls it (it may say why in unreacted)",
        id="environment-on-a-table-model",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + 'unreacted = { start = "why" }\n'),
        "models/m.toml:7: [environment] unreacted: 'start' is no notifying effect of this "
        "model's tables (notifying: enqueue, notify_cancel_requested, clear_inbox, "
        "discard_removed, abort_holder, publish_status, claim_inbox, claim_steering, "
        "publish_turn_start, publish_turn_end, publish_turn_error, publish_disposing, "
        "publish_disposed)",
        id="unreacted-names-no-notifying-effect",
    ),
    pytest.param(
        _model(
            "agent.toml",
            "agent",
            AGENT_ENV + 'reactions = ["enqueue"]\nunreacted = { enqueue = "why" }\n',
        ),
        "models/m.toml:8: [environment] unreacted: 'enqueue' is re-entered here (by listeners): "
        "unreacted names only effects neither reactions nor the wiring re-enter",
        id="unreacted-names-a-reaction-point",
    ),
    pytest.param(
        _model(
            "activation.toml",
            "activation-tree",
            TREE
            + 'reactions = ["activation.settle"]\n'
            + 'unreacted = { "activation.settle" = "a gap" }\n',
        ),
        "models/m.toml:14: [environment] unreacted: 'activation.settle' is re-entered here (by "
        "listeners): unreacted names only effects neither reactions nor the wiring re-enter",
        id="unreacted-excuses-settle-its-listeners-re-enter",
    ),
    pytest.param(
        _model(
            "activation.toml",
            "activation-tree",
            TREE + 'reactions = ["activation.notify_parent"]\n',
        ),
        "models/m.toml:13: [environment] reactions: 'activation.notify_parent': a tree lets "
        "listeners of a node's effect in only where specs/wiring.toml declares what they call "
        "(listeners are declared for activation.settle)",
        id="reactions-name-a-node-effect-without-declared-listeners",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + 'unreacted = { enqueue = " " }\n'),
        "models/m.toml:7: [environment] unreacted: 'enqueue': say why nothing re-enters "
        "it, in words",
        id="unreacted-without-a-reason",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + "unreacted = { enqueue = 1 }\n"),
        "models/m.toml:7: [environment] unreacted: enqueue must be a string, found int",
        id="unreacted-reason-not-text",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + 'unreacted = ["enqueue"]\n'),
        "models/m.toml:7: [environment] unreacted: expected a table, found list",
        id="unreacted-not-a-table",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + "\n[tree]\ndepth = 1\nwidth = 1\n"),
        "models/m.toml:8: [tree]: a model of kind 'agent' has no tree (kind 'activation-tree' has)",
        id="tree-on-an-agent-model",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + _expect("ok").replace("states", "stats")),
        "models/m.toml:9: [expect]: unknown key 'stats' "
        "(did you mean 'states'? expected one of: depth, property, states, transitions, "
        "untaken, verdict)",
        id="expect-key-typo",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + _expect("violation")),
        "models/m.toml:8: [expect]: verdict = 'violation' names the property that breaks",
        id="violation-without-property",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + _expect("ok", f'property = "{INVARIANT}"')),
        "models/m.toml:8: [expect]: a property is expected to break only with verdict = "
        "'violation'",
        id="property-with-verdict-ok",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV + _expect("violation", 'property = "holder"')),
        "models/m.toml:13: [expect]: a model of kind 'agent' has no property 'holder' (it checks "
        "the table's "
        "invariants and step invariants, EFFECT.requires, no_parked_wake, "
        "prerun_cancel_opens_no_turn, deadlock, quiescence_reachable)",
        id="unknown-property",
    ),
    pytest.param(
        _model(
            "activation.toml",
            "activation-tree",
            TREE + _expect("violation", f'property = "{TREE_INVARIANT}@a.3"'),
        ),
        f"models/m.toml:19: [expect]: a model of kind 'activation-tree' has no property "
        f"'{TREE_INVARIANT}@a.3' (did you mean '{TREE_INVARIANT}@a.2'? it checks "
        "INVARIANT@NODE and EFFECT.requires@NODE for a node of "
        "its tree, parent_leaves_after_children, settlement_notice_delivered, "
        "wired_call_accepted, teardown_runs_once, notice_sent_once, notice_after_children, "
        "drained_door_leaves_no_active_node, teardown_cancels_subtree, "
        "drained_scope_refuses_draining, deadlock, quiescence_reachable)",
        id="property-at-a-node-outside-the-tree",
    ),
    pytest.param(
        _model(
            "activation.toml", "activation-tree", TREE.replace("depth = 1", "depth = 6")
        ).replace("width = 2", "width = 6"),
        "models/m.toml:5: [tree]: depth 6 and width 6 make more nodes than the limit of 100 "
        "(a model may raise it: [model] limits = { tree = N })",
        id="a-6x6-tree",
    ),
    pytest.param(
        _model(
            "activation.toml",
            "activation-tree",
            TREE.replace('door = "../specs/admission.toml"\n', ""),
        ),
        "models/m.toml:5: [tree]: missing key 'door': a tree composes the registry's door and "
        'the wiring that connects it to its nodes (door = "../specs/admission.toml")',
        id="a-tree-from-before-the-door",
    ),
    pytest.param(
        _model(
            "activation.toml",
            "activation-tree",
            TREE.replace('wiring = "../specs/wiring.toml"\n', ""),
        ),
        "models/m.toml:5: [tree]: missing key 'wiring': a tree composes the registry's door and "
        'the wiring that connects it to its nodes (wiring = "../specs/wiring.toml")',
        id="a-tree-from-before-the-wiring",
    ),
    pytest.param(
        _model("activation.toml", "activation-tree", TREE.replace("admission.toml", "gone.toml")),
        "models/m.toml:8: [tree]: door '../specs/gone.toml' names no file: tried "
        "<models>/../specs/gone.toml (relative to the model file); fsm-core --specs DIR reads it "
        "as 'gone.toml' in DIR (the shipped tables are in <shipped>)",
        id="a-door-that-is-no-file",
    ),
    pytest.param(
        _model("activation.toml", "activation-tree", TREE.replace("admission.toml", "agent.toml")),
        "models/m.toml:5: [tree]: the tree's wiring needs an event drain() in the door; "
        "specs/agent.toml has none",
        id="a-door-without-a-drain",
    ),
    pytest.param(
        _model(
            "activation.toml",
            "activation-tree",
            TREE.replace("admit = 1, dispose = 1", "drain_below = 1, spawn = 1"),
        ),
        "models/m.toml:12: [environment] budgets: unknown event 'spawn' (events: dispose, drain, "
        "drain_child, deliver, admit, child_settled, children_joined, agent_idle, "
        "final_flushed, handle_disposed, watch, watch_gone, drain_below)",
        id="a-budget-on-a-door-event-the-tree-never-calls",
    ),
    pytest.param(
        _model("agent.toml", "agent", AGENT_ENV, "limits = { states = 5 }"),
        "models/m.toml:4: [model] limits: unknown key 'states' (expected one of: domain, tree, "
        "values)",
        id="unknown-limit",
    ),
]


# A 6x6 tree took over a minute to build: fail rather than wait for it.
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("body", "message"), MODEL_FAULTS)
def test_a_faulty_model_is_refused_at_load_before_anything_runs(
    tmp_path: Path, body: str, message: str
) -> None:
    path = write_model(tmp_path, "m", body)
    # A path tried is named as it is, or by echo() when too long to quote whole.
    message = message.replace("<models>", str(path.parent))
    message = message.replace("<long>", echo(str(path.parent / ("x" * 300))))
    message = message.replace("<shipped>", str(specs_dir()))
    with pytest.raises(SpecError, match=exactly(message)):
        check(load_model(path), max_states=10)  # what fsm-core check does


def test_a_tree_naming_settle_is_refused_when_the_wiring_declares_no_listener(
    tmp_path: Path,
) -> None:
    """A wiring without ``[[listeners]]`` loads (its calls and awaits stand alone); a model that
    lets a settled node's listeners in is then refused, naming what is missing."""
    import tomllib

    from fsm_core.tools._row_edits import dump_toml

    path = write_model(tmp_path, "m", _model("activation.toml", "activation-tree", TREE))
    path.write_text(
        path.read_text(encoding="utf-8") + 'reactions = ["activation.settle"]\n', encoding="utf-8"
    )
    wiring = tmp_path / "specs" / "wiring.toml"
    data = tomllib.loads(wiring.read_text(encoding="utf-8"))
    del data["listeners"]
    wiring.write_text(dump_toml(data), encoding="utf-8")
    with pytest.raises(
        SpecError,
        match=exactly(
            "models/m.toml:13: [environment] reactions: 'activation.settle': a tree lets "
            "listeners of a node's effect in only where specs/wiring.toml declares what they "
            "call (it declares no [[listeners]])"
        ),
    ):
        load_model(path)


@pytest.mark.parametrize(
    "prop", [INVARIANT, "reason_first_wins", "publish_status.requires", "no_parked_wake"]
)
def test_an_agent_model_may_expect_any_property_it_checks(tmp_path: Path, prop: str) -> None:
    body = _model("agent.toml", "agent", AGENT_ENV + _expect("violation", f'property = "{prop}"'))
    model = load_model(write_model(tmp_path, "m", body))
    assert model.expect is not None and model.expect.property == prop


def test_a_tree_model_may_expect_a_property_of_one_of_its_nodes(tmp_path: Path) -> None:
    prop = f"{TREE_INVARIANT}@a.2"
    body = _model(
        "activation.toml", "activation-tree", TREE + _expect("violation", f'property = "{prop}"')
    )
    model = load_model(write_model(tmp_path, "m", body))
    assert model.expect is not None and model.expect.property == prop


def test_a_model_may_raise_the_tree_limit(tmp_path: Path) -> None:
    body = _model("activation.toml", "activation-tree", TREE.replace("depth = 1", "depth = 3"))
    body = body.replace("width = 2", "width = 5")  # 156 nodes
    with pytest.raises(SpecError, match=r"^models/m\.toml:5: \[tree\]: depth 3 and width 5 make"):
        load_model(write_model(tmp_path, "m", body))
    raised = body.replace(
        'kind = "activation-tree"\n', 'kind = "activation-tree"\nlimits = { tree = 156 }\n'
    )
    model = load_model(write_model(tmp_path, "m", raised))
    assert (model.depth, model.width) == (3, 5)


def test_a_model_may_raise_the_values_limit(tmp_path: Path) -> None:
    model = _bench_model(tmp_path)
    edit(model, "constants = { K = 2,", "constants = { K = 2000,")
    with pytest.raises(
        SpecError,
        match=exactly(
            "bench/turncancel.toml: 2 faults; nothing of it was loaded:\n"
            + "".join(
                f"  bench/turncancel.toml:{line}: var {var!r}: int[0..2000] has 2,001 values, "
                "over the limit of 1,000 (a model may raise it: [model] limits = { values = N })"
                + end
                for line, var, end in [(35, "nt", "\n"), (36, "ns", "")]
            )
        ),
    ):
        load_model(model)
    edit(model, 'kind = "table"\n', 'kind = "table"\nlimits = { values = 2001 }\n')
    assert load_model(model).machine.table.variables[2].type.name == "int[0..2000]"


def test_every_fault_of_a_model_is_reported_with_its_line_and_a_guess(tmp_path: Path) -> None:
    body = _model(
        "agent.toml",
        "agent",
        "[environment]\n"
        "budgets = { send = 1, cancl = 1 }\n"
        'reactions = ["notify_cancel_requestd", "publish_status"]\n',
    )
    path = write_model(tmp_path, "m", body)
    with pytest.raises(SpecError) as caught:
        load_model(path)
    message = str(caught.value).splitlines()
    assert message[0] == "models/m.toml: 2 faults; nothing of it was loaded:"
    assert message[1].startswith(
        "  models/m.toml:6: [environment] budgets: unknown event 'cancl' (did you mean 'cancel'? "
        "events: send, cancel,"
    )
    assert message[2].startswith(
        "  models/m.toml:7: [environment] reactions: 'notify_cancel_requestd' is not a notifying "
        "effect (did you mean 'notify_cancel_requested'? notifying: enqueue, "
    )
