"""The JSON export ports consume, its schema, and the listing people read."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator

from fsm_core._paths import specs_dir
from fsm_core.export import FORMAT, VERSION, spec_to_json, spec_to_text
from fsm_core.table import Spec, WiredCall, Wiring, load_spec
from fsm_core.table._expr import BOOL, Scope, Type, check, int_type, parse_expr, to_json
from tests.helpers import schema_validator

SPEC = load_spec()
MACHINES = list(SPEC.machines)
ROWS = [(m.name, r.id) for m in SPEC.machines.values() for r in m.table.rows]
AGENT_ROWS = [r.id for r in SPEC.machines["agent"].table.rows]


def exported(names: Sequence[str] = MACHINES, spec: Spec = SPEC) -> Any:
    """The export as a port reads it: parsed back from its JSON text."""
    return json.loads(json.dumps(spec_to_json(spec, names)))


def schema() -> Any:
    return json.loads((specs_dir() / "schema.json").read_text(encoding="utf-8"))


VALIDATOR = schema_validator(schema())
"""One validator for the module: it remembers the parts of the export it found valid."""


def validator() -> Validator:
    return VALIDATOR


# --- the schema ----------------------------------------------------------------------------------


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(schema())


def test_export_of_every_machine_matches_the_schema() -> None:
    doc = exported()
    validator().validate(doc)
    assert (doc["format"], doc["version"]) == (FORMAT, VERSION)
    assert list(doc["machines"]) == ["activation", "admission", "agent"]


@pytest.mark.parametrize("name", MACHINES)
def test_export_of_one_machine_matches_the_schema(name: str) -> None:
    doc = exported([name])
    validator().validate(doc)
    assert list(doc["machines"]) == [name]


_DELETE = object()
_BUSY = AGENT_ROWS.index("maintenance.busy")
_ROW0: list[str | int] = ["machines", "agent", "rows", 0]
_EFFECT0: list[str | int] = ["machines", "agent", "effects", 0]
_STEP0: list[str | int] = ["machines", "agent", "step_invariants", 0]
_CALL1: list[str | int] = ["wiring", "calls", 1]  # close.cancels_agent: two arguments
_AWAIT2: list[str | int] = ["wiring", "awaits", 2]  # watch.after_idle: "*" and expressions

MUTATIONS: list[tuple[str, list[str | int], object]] = [
    ("row without id", [*_ROW0, "id"], _DELETE),
    ("unknown expression form", [*_ROW0, "guard", "expr"], {"xor": [{"lit": True}]}),
    ("expression in two forms", [*_ROW0, "guard", "expr"], {"var": "turn", "lit": True}),
    (
        "operator with three operands",
        [*_ROW0, "guard", "expr"],
        {"op": "and", "args": [{"lit": True}, {"lit": True}, {"lit": True}]},
    ),
    ("unknown operator", [*_ROW0, "guard", "expr", "op"], "xor"),
    ("membership without its set", [*_ROW0, "guard", "expr"], {"in": {"var": "phase"}}),
    ("guard without its text", [*_ROW0, "guard", "text"], _DELETE),
    ("unknown statement form", [*_ROW0, "do", 0], {"emit": "enqueue"}),
    ("row without a clause", [*_ROW0, "clauses"], []),
    ("row with a stray key", [*_ROW0, "priority"], 1),
    (
        "reject row with effects",
        ["machines", "agent", "rows", _BUSY, "do"],
        [{"call": "open_holder", "args": []}],
    ),
    ("reject row with a target", ["machines", "agent", "rows", _BUSY, "to"], "running"),
    ("another format", ["format"], "fsm-core/other"),
    ("the previous version", ["version"], 3),
    ("a later version", ["version"], 5),
    ("stray top-level key", ["generated"], "today"),
    ("invalid state name", ["machines", "agent", "states", 0, "name"], "Idle"),
    ("effect without requires", [*_EFFECT0, "requires"], _DELETE),
    ("requires as bare text", [*_EFFECT0, "requires"], "scheduled"),
    ("requires without its tree", [*_EFFECT0, "requires", "expr"], _DELETE),
    ("machine without step invariants", ["machines", "agent", "step_invariants"], _DELETE),
    ("step invariant without while", [*_STEP0, "while"], _DELETE),
    ("step invariant while as bare text", [*_STEP0, "while"], "holder == aborted"),
    ("step invariant of no variable", [*_STEP0, "unchanged"], ""),
    ("step invariant without a clause", [*_STEP0, "clauses"], []),
    ("step invariant with holds", [*_STEP0, "holds"], {"text": "true", "expr": {"lit": True}}),
    ("export without its wiring", ["wiring"], _DELETE),
    ("wiring as a file name", ["wiring"], "specs/wiring.toml"),
    ("wiring without awaits", ["wiring", "awaits"], _DELETE),
    ("wiring without facts", ["wiring", "facts"], _DELETE),
    ("target naming no machine", ["wiring", "targets", "activation", "agent"], 1),
    ("call without its effect's machine", [*_CALL1, "effect", "machine"], _DELETE),
    ("call naming its effect as text", [*_CALL1, "effect"], "activation.cancel_agent"),
    ("call argument as bare text", [*_CALL1, "args", 0, "value"], "cause"),
    ("call argument without its tree", [*_CALL1, "args", 0, "value", "expr"], _DELETE),
    ("call argument any value", [*_CALL1, "args", 0, "value"], "*"),
    ("call with an unknown refusal", [*_CALL1, "refused"], "maybe"),
    ("call only for siblings", [*_CALL1, "only"], "sibling"),
    ("call without only", [*_CALL1, "only"], _DELETE),
    ("call without a clause", [*_CALL1, "clauses"], []),
    ("call with a stray key", [*_CALL1, "when"], "always"),
    ("await until as bare text", [*_AWAIT2, "until"], "phase == idle"),
    ("await argument any other word", [*_AWAIT2, "args", 0, "value"], "any"),
    ("await without its event's machine", [*_AWAIT2, "event", "machine"], _DELETE),
]


@pytest.mark.parametrize(("label", "path", "value"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_mutated_export_fails_the_schema(label: str, path: list[str | int], value: object) -> None:
    doc = copy.deepcopy(exported())
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    error = best_match(validator().iter_errors(doc))
    assert error is not None, f"{label}: the schema accepts it"
    # The schema blames the mutated place (the object holding it, or a part of it), nothing else.
    blamed = list(error.absolute_path)
    common = min(len(blamed), len(path))
    assert blamed[:common] == path[:common], error.message


def test_the_remembering_validator_reports_what_jsonschema_reports() -> None:
    """``schema_validator`` skips what it found valid before: on an export mutated in two
    places it must give the plain validator's errors, each where that one places it."""
    doc = copy.deepcopy(exported())
    doc["machines"]["agent"]["rows"][0]["guard"]["expr"] = {"xor": [{"lit": True}]}
    doc["wiring"]["calls"][1]["only"] = "sibling"

    def errors(v: Validator) -> list[tuple[str, list[object], list[object]]]:
        found = v.iter_errors(doc)
        return [(e.message, list(e.absolute_path), list(e.absolute_schema_path)) for e in found]

    assert len(errors(VALIDATOR)) == 2
    assert errors(VALIDATOR) == errors(Draft202012Validator(schema()))


# --- stability and clauses -----------------------------------------------------------------------


def test_export_keeps_the_order_machines_were_named_in_once_each() -> None:
    assert list(exported(["agent", "activation", "agent"])["machines"]) == ["agent", "activation"]


def test_unknown_machine_is_a_key_error_naming_it() -> None:
    with pytest.raises(
        KeyError, match=r"^\"unknown machine 'agnet' \(machines: activation, admission, agent\)\"$"
    ):
        spec_to_json(SPEC, ["agnet"])


def _tagged(machine: Any) -> Iterator[tuple[str, Any]]:
    for row in machine["rows"]:
        yield f"row {row['id']!r}", row
    for inv in machine["invariants"]:
        yield f"invariant {inv['id']!r}", inv
    for step in machine["step_invariants"]:
        yield f"step invariant {step['id']!r}", step
    for kind in ("ignored", "rejected"):
        for i, rule in enumerate(machine[kind]):
            yield f"{kind}[{i}]", rule


@pytest.mark.parametrize("name", MACHINES)
def test_every_row_pair_invariant_and_step_invariant_cites_an_exported_clause(name: str) -> None:
    doc = exported([name])
    for where, entry in _tagged(doc["machines"][name]):
        assert entry["clauses"], f"{name}: {where} has no clause tag"
        missing = set(entry["clauses"]) - set(doc["clauses"])
        assert not missing, f"{name}: {where} cites {sorted(missing)}, not in the export"


def _wired(doc: Any) -> Iterator[tuple[str, Any]]:
    wiring = doc["wiring"] or {"calls": [], "awaits": []}
    for call in wiring["calls"]:
        yield f"call {call['id']!r}", call
    for wait in wiring["awaits"]:
        yield f"await {wait['id']!r}", wait


@pytest.mark.parametrize("names", [MACHINES, ["agent"], ["activation"]])
def test_export_carries_exactly_the_clauses_its_machines_and_wiring_cite(names: list[str]) -> None:
    doc = exported(names)
    cited = {tag for m in doc["machines"].values() for _, e in _tagged(m) for tag in e["clauses"]}
    cited |= {tag for _, e in _wired(doc) for tag in e["clauses"]}
    assert set(doc["clauses"]) == cited
    assert list(doc["clauses"]) == [c for c in SPEC.clauses if c in cited]  # catalogue order


def test_clause_carries_source_quote_and_summary() -> None:
    clause = exported(["agent"])["clauses"]["S000.pre-run-marker"]
    assert clause == {
        "source": "S000",
        "quote": "The driver keeps only a cause-less pre-run marker for queued work cancelled "
        "before a turn is claimed.",
        "summary": "Cancelling queued work before a turn is claimed leaves only a cause-less "
        "marker.",
    }


# --- rows ----------------------------------------------------------------------------------------


def _row(machine: str, row_id: str) -> Any:
    rows = exported([machine])["machines"][machine]["rows"]
    return next(r for r in rows if r["id"] == row_id)


def _texts(stmts: list[Any]) -> list[object]:
    """Statements as their texts; a when-block as (condition, [body])."""
    out: list[object] = []
    for s in stmts:
        if "assign" in s:
            out.append(f"{s['assign']} := {s['value']['text']}")
        elif "call" in s:
            out.append(f"{s['call']}({', '.join(a['text'] for a in s['args'])})")
        else:
            out.append((s["when"]["text"], _texts(s["do"])))
    return out


def test_cancel_turn_exports_its_effects_in_order() -> None:
    row = _row("agent", "cancel.turn")
    assert (row["on"], row["from"], row["to"], row["reject"]) == (
        "cancel",
        ["running", "cancelling"],
        "cancelling",
        None,
    )
    assert row["guard"] == {
        "text": "holder == live",
        "expr": {"op": "==", "args": [{"var": "holder"}, {"sym": "live"}]},
    }
    assert row["do"][0] == {
        "call": "notify_cancel_requested",
        "args": [{"text": "cause", "expr": {"param": "cause"}}],
    }
    assert _texts(row["do"]) == [
        "notify_cancel_requested(cause)",
        ("holder == live", ["latch := false"]),
        ("not keep_inbox", ["pending := false", "latch := false", "clear_inbox()"]),
        ("holder == live", ["holder := aborted", "reason := cause", "abort_holder(cause)"]),
    ]


def test_row_without_guard_exports_true_and_row_without_target_stays() -> None:
    dispose = _row("agent", "dispose.idle")
    assert dispose["guard"] == {"text": "true", "expr": {"lit": True}}
    assert dispose["to"] == "disposing"
    assert _row("agent", "send.idle.wake")["to"] is None


def test_reject_row_exports_its_reason_and_nothing_to_do() -> None:
    row = _row("agent", "maintenance.busy")
    assert row["reject"].startswith("a driver is scheduled")
    assert (row["to"], row["do"]) == (None, [])


def test_variables_and_params_carry_their_domains() -> None:
    agent = exported(["agent"])["machines"]["agent"]
    holder = next(v for v in agent["variables"] if v["name"] == "holder")
    assert holder == {
        "name": "holder",
        "type": "holder",
        "domain": ["none", "live", "aborted"],
        "init": "none",
        "doc": "The active activity's cancellation holder: none, live, or aborted.",
    }
    cancel = next(e for e in agent["events"] if e["name"] == "cancel")
    assert cancel["params"] == [
        {"name": "cause", "type": "cause", "domain": ["user", "parent"]},
        {"name": "keep_inbox", "type": "bool", "domain": [False, True]},
    ]
    assert agent["types"]["phase"] == [s["name"] for s in agent["states"]]


# --- contracts and step invariants ---------------------------------------------------------------


def _effect(machine: str, name: str) -> Any:
    effects = exported([machine])["machines"][machine]["effects"]
    return next(e for e in effects if e["name"] == name)


def test_effect_exports_its_contract_over_its_own_params() -> None:
    effect = _effect("agent", "abort_holder")
    assert list(effect) == ["name", "params", "notifies", "requires", "doc"]
    assert effect["requires"] == {
        "text": "holder == aborted and reason == signal_reason",
        "expr": {
            "op": "and",
            "args": [
                {"op": "==", "args": [{"var": "holder"}, {"sym": "aborted"}]},
                {"op": "==", "args": [{"var": "reason"}, {"param": "signal_reason"}]},
            ],
        },
    }


def test_effect_without_a_contract_exports_null() -> None:
    assert _effect("agent", "notify_cancel_requested")["requires"] is None


@pytest.mark.parametrize("name", MACHINES)
def test_every_declared_contract_is_exported(name: str) -> None:
    table = SPEC.machines[name].table
    effects = exported([name])["machines"][name]["effects"]
    assert [e["name"] for e in effects] == list(table.effects)
    for e in effects:
        spec = table.effects[e["name"]]
        assert (e["requires"] or {}).get("text") == spec.requires_text, e["name"]


def test_step_invariants_are_exported_apart_from_the_invariants() -> None:
    agent = exported(["agent"])["machines"]["agent"]
    assert agent["step_invariants"] == [
        {
            "id": "reason_first_wins",
            "unchanged": "reason",
            "while": {
                "text": "holder == aborted",
                "expr": {"op": "==", "args": [{"var": "holder"}, {"sym": "aborted"}]},
            },
            "doc": "Once an abort wins the holder's reason, nothing rewrites it while that holder "
            "lasts.",
            "clauses": ["S000.first-wins", "S000.disposal-precedence"],
        }
    ]
    assert "reason_first_wins" not in [i["id"] for i in agent["invariants"]]
    assert exported(["activation"])["machines"]["activation"]["step_invariants"] == []


def test_step_invariant_names_a_variable_of_its_machine() -> None:
    for name in MACHINES:
        m = exported([name])["machines"][name]
        variables = {v["name"] for v in m["variables"]}
        for step in m["step_invariants"]:
            assert step["unchanged"] in variables, (name, step["id"])


def test_semantics_say_what_requires_and_step_invariants_mean() -> None:
    semantics = exported(["agent"])["machines"]["agent"]["semantics"]
    assert "`requires`" in semantics
    assert "holds whenever the effect runs" in semantics
    assert "`unchanged`" in semantics
    assert "`while`" in semantics
    assert "`notifies: true`" in semantics


# --- round trip: every text parses back to its tree, using nothing but the export ----------------


def _type(name: str, domain: list[Any]) -> Type:
    if name == "bool":
        return BOOL
    if name.startswith("int["):
        return int_type(min(domain), max(domain))
    return Type("enum", name, tuple(domain))


def _scope(machine: Any, params: list[Any]) -> Scope:
    """What names mean, rebuilt from the export alone (as a port would)."""
    variables = {
        machine["state_var"]: _type(machine["state_var"], machine["types"][machine["state_var"]])
    }
    variables |= {v["name"]: _type(v["type"], v["domain"]) for v in machine["variables"]}
    return Scope(
        variables=variables,
        params={p["name"]: _type(p["type"], p["domain"]) for p in params},
        defs={d["name"]: parse_expr(d["text"]) for d in machine["definitions"]},
        symbols=frozenset(v for values in machine["types"].values() for v in values),
    )


def _statement_exprs(stmts: list[Any]) -> Iterator[Any]:
    for s in stmts:
        if "assign" in s:
            yield s["value"]
        elif "call" in s:
            yield from s["args"]
        else:
            yield s["when"]
            yield from _statement_exprs(s["do"])


def _reparsed(text: str, scope: Scope) -> object:
    resolved, _ = check(parse_expr(text), scope)
    return to_json(resolved)


@pytest.mark.parametrize(("machine", "row_id"), ROWS, ids=[f"{m}:{r}" for m, r in ROWS])
def test_row_texts_parse_back_to_the_exported_trees(machine: str, row_id: str) -> None:
    m = exported([machine])["machines"][machine]
    row = next(r for r in m["rows"] if r["id"] == row_id)
    event = next(e for e in m["events"] if e["name"] == row["on"])
    scope = _scope(m, event["params"])
    assert _reparsed(row["guard"]["text"], scope) == row["guard"]["expr"]
    for item in _statement_exprs(row["do"]):
        assert _reparsed(item["text"], scope) == item["expr"], item["text"]


@pytest.mark.parametrize("name", MACHINES)
def test_definition_and_invariant_texts_parse_back_to_the_exported_trees(name: str) -> None:
    m = exported([name])["machines"][name]
    scope = _scope(m, [])
    for d in m["definitions"]:
        assert _reparsed(d["text"], scope) == d["expr"], d["name"]
    for inv in m["invariants"]:
        assert _reparsed(inv["holds"]["text"], scope) == inv["holds"]["expr"], inv["id"]
    for step in m["step_invariants"]:
        assert _reparsed(step["while"]["text"], scope) == step["while"]["expr"], step["id"]


@pytest.mark.parametrize("name", MACHINES)
def test_requires_texts_parse_back_with_the_effects_params(name: str) -> None:
    m = exported([name])["machines"][name]
    contracts = [e for e in m["effects"] if e["requires"] is not None]
    assert contracts, f"{name} declares no contract"
    for e in contracts:
        scope = _scope(m, e["params"])
        assert _reparsed(e["requires"]["text"], scope) == e["requires"]["expr"], e["name"]


def _params_in(tree: Any) -> Iterator[str]:
    if isinstance(tree, dict):
        if "param" in tree:
            yield tree["param"]
        for value in tree.values():
            yield from _params_in(value)
    elif isinstance(tree, list):
        for item in tree:
            yield from _params_in(item)


def test_requires_params_are_the_effects_own() -> None:
    seen = set()
    for name in MACHINES:
        for e in exported([name])["machines"][name]["effects"]:
            if e["requires"] is None:
                continue
            used = set(_params_in(e["requires"]["expr"]))
            assert used <= {p["name"] for p in e["params"]}, (name, e["name"], used)
            seen |= {(name, e["name"], p) for p in used}
    # Some contract does read an argument (so the round trip above exercises params).
    assert ("agent", "abort_holder", "signal_reason") in seen
    assert ("agent", "publish_status", "status") in seen


# --- the wiring ----------------------------------------------------------------------------------


def _shipped_wiring() -> Wiring:
    assert SPEC.wiring is not None, "specs/ has a wiring.toml"
    return SPEC.wiring


WIRING = _shipped_wiring()


def _call(doc: Any, call_id: str) -> Any:
    return next(c for c in doc["wiring"]["calls"] if c["id"] == call_id)


def _await(doc: Any, await_id: str) -> Any:
    return next(a for a in doc["wiring"]["awaits"] if a["id"] == await_id)


def test_the_wiring_is_exported_whole_in_file_order() -> None:
    wiring = exported()["wiring"]
    assert list(wiring) == [
        "file", "doc", "semantics", "targets", "facts", "calls", "awaits", "listener_targets",
        "listeners",
    ]  # fmt: skip
    assert wiring["file"] == "specs/wiring.toml"
    assert wiring["doc"] == " ".join(WIRING.doc.split())
    assert [c["id"] for c in wiring["calls"]] == [c.id for c in WIRING.calls]
    assert [a["id"] for a in wiring["awaits"]] == [a.id for a in WIRING.awaits]
    assert [x["id"] for x in wiring["listeners"]] == [x.id for x in WIRING.listeners]
    assert wiring["listeners"][-1] == {
        "id": "settle.sends_parent_agent",
        "effect": {"machine": "activation", "name": "settle"},
        "target": "parent_agent",
        "event": "send",
        "args": [{"name": "wake", "value": "*"}, {"name": "lane", "value": "*"}],
        "budget": "agent.send",
        "clauses": ["S004.step-5-settle"],
        "doc": (
            "A settled child's listener may send the parent's agent any message, waking it or not."
        ),
    }


@pytest.mark.parametrize(
    "names", [["agent"], ["activation"], ["activation", "agent"], ["admission", "agent"]]
)
def test_an_export_lacking_a_machine_the_wiring_connects_carries_no_wiring(
    names: list[str],
) -> None:
    doc = exported(names)
    assert doc["wiring"] is None
    validator().validate(doc)


def test_a_spec_without_wiring_exports_null() -> None:
    doc = exported(MACHINES, Spec(SPEC.root, SPEC.clauses, SPEC.machines))
    assert doc["wiring"] is None
    validator().validate(doc)
    cited = {tag for m in doc["machines"].values() for _, e in _tagged(m) for tag in e["clauses"]}
    assert set(doc["clauses"]) == cited


def test_a_call_exports_its_effect_target_event_and_parsed_arguments() -> None:
    assert _call(exported(), "close.cancels_agent") == {
        "id": "close.cancels_agent",
        "effect": {"machine": "activation", "name": "cancel_agent"},
        "target": "agent",
        "only": None,
        "event": "cancel",
        "args": [
            {"name": "cause", "value": {"text": "cause", "expr": {"param": "cause"}}},
            {"name": "keep_inbox", "value": {"text": "true", "expr": {"lit": True}}},
        ],
        "refused": "never",
        "clauses": ["S004.cancel-keep-inbox", "S004.child-first"],
        "doc": "finishDisposal cancels its own agent with the parent cause, keeping its inbox.",
    }


def test_a_call_exports_only_refused_and_enumeration_arguments() -> None:
    doc = exported()
    settle = _call(doc, "settle.notifies_parent")
    assert (settle["only"], settle["target"], settle["refused"]) == ("child", "parent", "never")
    assert [(a["name"], a["value"]["expr"]) for a in settle["args"]] == [
        ("failed", {"param": "failed"}),
        ("last", {"param": "last"}),  # a fact the parent's resolution knows
    ]
    drain = _call(doc, "door.drains_roots")
    assert (drain["effect"], drain["target"], drain["refused"]) == (
        {"machine": "admission", "name": "drain_roots"},
        "roots",
        "caller",
    )
    assert drain["args"] == [
        {"name": "scope", "value": {"text": "registry", "expr": {"sym": "registry"}}}
    ]
    assert _call(doc, "close.shuts_agent")["args"] == []


def test_an_await_exports_its_until_and_arguments_any_value_as_a_star() -> None:
    assert _await(exported(), "watch.after_idle") == {
        "id": "watch.after_idle",
        "event": {"machine": "activation", "name": "watch"},
        "target": "agent",
        "until": {
            "text": "phase in {idle, running, cancelling, maintenance}",
            "expr": {
                "in": {"var": "phase"},
                "set": ["idle", "running", "cancelling", "maintenance"],
            },
        },
        "args": [
            {"name": "current", "value": "*"},
            {
                "name": "busy",
                "value": {
                    "text": "not (phase == idle and not scheduled)",
                    "expr": {
                        "not": {
                            "op": "and",
                            "args": [
                                {"op": "==", "args": [{"var": "phase"}, {"sym": "idle"}]},
                                {"not": {"var": "scheduled"}},
                            ],
                        }
                    },
                },
            },
            {"name": "pending", "value": {"text": "pending", "expr": {"var": "pending"}}},
        ],
        "clauses": ["S004.watch-verdicts", "S004.watch-loop"],
        "doc": "The settlement watcher wakes after whenIdle() and asks for maintenance: an agent "
        "busy again refuses it (busy). It reads the inbox (pending), never the agent's execution "
        "state.",
    }
    idle = _await(exported(), "teardown.awaits_idle")
    assert (idle["until"], idle["args"]) == (
        {"text": "quiescent", "expr": {"def": "quiescent"}},
        [],
    )


def test_the_targets_and_facts_are_exported_with_what_they_name() -> None:
    wiring = exported()["wiring"]
    assert wiring["targets"] == {
        "activation": {
            "self": "activation",
            "agent": "agent",
            "children": "activation",
            "parent": "activation",
            "door": "admission",
            "new_agent": "agent",
        },
        "admission": {
            "roots": "activation",
            "host_roots": "activation",
            "named": "activation",
            "host": "agent",
            "new_agent": "agent",
        },
        "agent": {"door": "admission"},
    }
    door = SPEC.machines["admission"].table.types["parent"]
    assert wiring["facts"] == [
        {"name": "last", "target": "parent", "type": "bool", "domain": [False, True]},
        {"name": "parent", "target": "door", "type": "parent", "domain": list(door.values)},
    ]


def test_every_wired_name_resolves_in_the_export_alone() -> None:
    """A port finds every machine, effect, event and parameter the wiring names in the export."""
    doc = exported()
    wiring, machines = doc["wiring"], doc["machines"]
    for call in wiring["calls"]:
        source = machines[call["effect"]["machine"]]
        assert call["effect"]["name"] in [e["name"] for e in source["effects"]], call["id"]
        aimed = machines[wiring["targets"][call["effect"]["machine"]][call["target"]]]
        event = next(e for e in aimed["events"] if e["name"] == call["event"])
        assert [a["name"] for a in call["args"]] == [p["name"] for p in event["params"]]
    for wait in wiring["awaits"]:
        event = next(
            e
            for e in machines[wait["event"]["machine"]]["events"]
            if e["name"] == wait["event"]["name"]
        )
        assert event["kind"] == "internal", wait["id"]
        assert [a["name"] for a in wait["args"]] == [p["name"] for p in event["params"]]
        assert wiring["targets"][wait["event"]["machine"]][wait["target"]] == "agent"


def test_wiring_texts_parse_back_to_the_exported_trees() -> None:
    """With a scope rebuilt from the export: a call's over the effect's parameters and the facts
    its target knows, an await's over its target's table."""
    doc = exported()
    wiring, machines = doc["wiring"], doc["machines"]
    seen = 0
    for call in wiring["calls"]:
        source = machines[call["effect"]["machine"]]
        aimed = machines[wiring["targets"][call["effect"]["machine"]][call["target"]]]
        effect = next(e for e in source["effects"] if e["name"] == call["effect"]["name"])
        facts = [f for f in wiring["facts"] if f["target"] == call["target"]]
        scope = Scope(
            variables={},
            params={p["name"]: _type(p["type"], p["domain"]) for p in [*effect["params"], *facts]},
            defs={},
            symbols=frozenset(v for m in (source, aimed) for vs in m["types"].values() for v in vs),
        )
        for arg in call["args"]:
            assert _reparsed(arg["value"]["text"], scope) == arg["value"]["expr"], call["id"]
            seen += 1
    for wait in wiring["awaits"]:
        target = machines[wiring["targets"][wait["event"]["machine"]][wait["target"]]]
        scope = _scope(target, [])
        assert _reparsed(wait["until"]["text"], scope) == wait["until"]["expr"], wait["id"]
        for arg in wait["args"]:
            if arg["value"] != "*":
                assert _reparsed(arg["value"]["text"], scope) == arg["value"]["expr"], wait["id"]
                seen += 1
    assert seen > 20


def test_the_wiring_semantics_say_how_a_call_and_an_await_run() -> None:
    semantics = exported()["wiring"]["semantics"]
    words = ["`target`", "`args`", "`facts`", "`only`", "`refused: never`", "`refused: caller`"]
    words += ["`until`", '"*"', "`notifies: true`", "synchronously"]
    for word in words:
        assert word in semantics, word


# --- the listing ---------------------------------------------------------------------------------


def test_listing_opens_with_an_overview_of_every_machine() -> None:
    lines = spec_to_text(SPEC, MACHINES).splitlines()
    rows = sum(len(m.table.rows) for m in SPEC.machines.values())
    invariants = sum(len(m.table.invariants) for m in SPEC.machines.values())
    assert sum(len(m.table.stable) for m in SPEC.machines.values()) == 1
    cited = len(exported()["clauses"])
    assert lines[:4] == [
        f"fsm-core spec: 3 machines from specs/, {rows} rows, {invariants} invariants, "
        f"1 step invariant, {cited} seed clauses cited",
        f"  activation  {SPEC.machines['activation'].table.title}",
        f"  admission   {SPEC.machines['admission'].table.title}",
        f"  agent       {SPEC.machines['agent'].table.title}",
    ]


def test_listing_shows_a_row_with_its_numbered_effects_and_clauses() -> None:
    lines = spec_to_text(SPEC, ["agent"]).splitlines()
    head = lines.index(
        "  cancel.turn  running|cancelling --cancel(cause, keep_inbox) [holder == live]--> "
        "cancelling"
    )
    body = lines[head + 1 : lines.index("", head)]
    doc = " ".join(_row("agent", "cancel.turn")["doc"].split())
    assert " ".join(line.strip() for line in body[:3]) == doc  # the doc, wrapped
    assert body[3:] == [
        "      1. notify_cancel_requested(cause)  (notifies)",
        "      2. when holder == live:",
        "         2.1. latch := false",
        "      3. when not keep_inbox:",
        "         3.1. pending := false",
        "         3.2. latch := false",
        "         3.3. clear_inbox()  (notifies)",
        "      4. when holder == live:",
        "         4.1. holder := aborted",
        "         4.2. reason := cause",
        "         4.3. abort_holder(cause)  (notifies)",
        "      clauses: S000.cause-union, S000.effective-cancel, S000.frozen-reason, "
        "S000.first-wins, S000.observer-work, S004.agent-cancel, S004.cancel-keep-inbox",
    ]


def test_listing_shows_stays_rejects_pairs_and_invariants() -> None:
    text = spec_to_text(SPEC, ["agent"])
    assert "  send.idle.quiet  idle --send(wake, lane) [not wake and not shut]--> (stays)\n" in text
    assert (
        '  maintenance.busy  idle --maintenance_start [scheduled]--> rejected: "a driver is '
        'scheduled; maintenance needs an idle agent with no driver pending"\n'
    ) in text
    assert "ignored pairs without a row (nothing happens)\n  cancel in disposed\n" in text
    assert (
        '  send in disposed\n      "the agent is disposed; it accepts no more messages"\n' in text
    )
    assert "  reason_iff_aborted: (reason != none) == (holder == aborted)\n" in text
    assert "== activation" not in text


def test_listing_shows_each_effect_with_its_contract() -> None:
    lines = spec_to_text(SPEC, ["agent"]).splitlines()
    assert (
        "  abort_holder(signal_reason: {user, parent, disposed})  (notifies)  requires: "
        "holder == aborted and reason == signal_reason"
    ) in lines
    assert "  schedule_driver()  requires: scheduled" in lines
    assert "  notify_cancel_requested(cause: {user, parent})  (notifies)" in lines


def test_listing_shows_step_invariants_after_the_invariants() -> None:
    lines = spec_to_text(SPEC, ["agent"]).splitlines()
    invariants = lines.index("invariants (hold in every reachable state)")
    step = next(i for i, line in enumerate(lines) if line.startswith("step invariants ("))
    assert invariants < step
    assert lines[step + 1 :] == [
        "  reason_first_wins: reason unchanged while holder == aborted",
        "      Once an abort wins the holder's reason, nothing rewrites it while that holder "
        "lasts.",
        "      clauses: S000.first-wins, S000.disposal-precedence",
    ]
    assert not any(
        line.startswith("step invariants")
        for line in spec_to_text(SPEC, ["activation"]).splitlines()
    )


def _call_line(c: WiredCall) -> str:
    marks = [f"{c.only} only"] if c.only is not None else []
    marks += ["refused: caller"] if c.refused == "caller" else []
    flag = f"  [{'; '.join(marks)}]" if marks else ""
    return f"  {c.id}  {c}{flag}"  # str(c): MACHINE.EFFECT -> TARGET.EVENT(PARAM=VALUE, ...)


def test_listing_names_the_wiring_in_its_overview_and_lists_it_last() -> None:
    lines = spec_to_text(SPEC, MACHINES).splitlines()
    assert lines[4] == (
        "  connected by specs/wiring.toml: 21 calls, 4 awaits, 6 listeners (listed last)"
    )
    assert len(WIRING.calls) == 21 and len(WIRING.awaits) == 4
    head = lines.index("== wiring: how instances meet  (specs/wiring.toml)")
    assert head > lines.index(f"== agent: {SPEC.machines['agent'].table.title}  (specs/agent.toml)")
    calls = lines.index(
        "calls (in file order; each fires inside its effect, on each instance its target names)"
    )
    assert lines[calls + 1 : calls + 1 + len(WIRING.calls)] == [_call_line(c) for c in WIRING.calls]
    awaits = lines.index(
        "awaits (each fires as a step of its own while its target's state allows; *: any value)"
    )
    assert lines[awaits + 1 : awaits + 1 + len(WIRING.awaits)] == [
        "  teardown.awaits_idle  agent until quiescent -> activation.agent_idle()",
        "  teardown.awaits_handle  agent until phase == disposed -> "
        "activation.handle_disposed(failed=*)",
        "  watch.after_idle  agent until phase in {idle, running, cancelling, maintenance} -> "
        "activation.watch(current=*, busy=not (phase == idle and not scheduled), "
        "pending=pending)",
        "  watch.agent_gone  agent until phase in {disposing, disposed} -> activation.watch_gone()",
    ]
    heard = lines.index(
        "listeners (what a listener of the effect may call, when a model lets it in; *: any value)"
    )
    assert lines[heard + 1 :] == [
        "  settle.disposes_parent  activation.settle ~> parent.dispose(final_state_flushed=false, "
        "drain=false)  [spends dispose]",
        "  settle.admits_sibling  activation.settle ~> below_parent.admit(parent=activation)  "
        "[spends admit]",
        "  settle.drains_below_parent  activation.settle ~> "
        "below_parent.drain_below(parent=activation)  [spends drain_below]",
        "  settle.drains_registry  activation.settle ~> door.drain()  [spends drain]",
        "  settle.drains_below_host  activation.settle ~> door.drain_below(parent=host)  "
        "[spends drain_below]",
        "  settle.sends_parent_agent  activation.settle ~> parent_agent.send(wake=*, lane=*)  "
        "[spends agent.send]",
    ]


def test_listing_shows_a_call_on_one_line_with_what_qualifies_it() -> None:
    lines = spec_to_text(SPEC, MACHINES).splitlines()
    assert "  close.shuts_agent  activation.close_inbox -> agent.shut()" in lines
    assert (
        "  close.cancels_agent  activation.cancel_agent -> agent.cancel(cause=cause, "
        "keep_inbox=true)"
    ) in lines
    assert (
        "  settle.notifies_parent  activation.notify_parent -> "
        "parent.child_settled(failed=failed, last=last)  [child only]"
    ) in lines
    assert (
        "  door.drains_roots  admission.drain_roots -> roots.drain(scope=registry)  "
        "[refused: caller]"
    ) in lines


@pytest.mark.parametrize("names", [["agent"], ["activation", "agent"]])
def test_listing_of_fewer_machines_than_the_wiring_connects_leaves_it_out(
    names: list[str],
) -> None:
    text = spec_to_text(SPEC, names)
    assert "== wiring" not in text
    assert "connected by" not in text
    assert "activation.close_inbox -> agent.shut()" not in text  # (agent.toml's docs name ids)
