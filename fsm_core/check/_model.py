"""Model files: which table, composed how, with which environment, expecting which result.

A model (``models/*.toml``) is a bounded configuration of the specification. It never changes
a table; it says how many instances run, what the environment may do and how often, and what
the checker found last time, so that any change in the model's meaning shows up in review as a
changed number::

    [model]
    doc = "One agent; users send, cancel and dispose; listeners re-enter."
    table = "../specs/agent.toml"
    kind = "agent"

    [environment]
    budgets = { send = 2, cancel = 2, dispose = 1 }
    reactions = ["publish_status", "notify_cancel_requested", "abort_holder"]

    [expect]
    states = 1234
    transitions = 5678
    depth = 19
    verdict = "ok"

``kind = "table"`` explores a table on its own: every event is always offered and the table's
own variables bound the run (the benchmark model counts its budgets down itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fsm_core._errors import SpecError, echo, known
from fsm_core.spec import Machine
from fsm_core.spec._load import _File, load_clauses, load_table, read_toml

Kind = Literal["table", "agent", "activation-tree"]
Verdict = Literal["ok", "violation"]
_KINDS: tuple[Kind, ...] = ("table", "agent", "activation-tree")


@dataclass(frozen=True, slots=True)
class Expectation:
    """The result a model recorded: a test and ``fsm-core check`` compare against it."""

    states: int
    transitions: int
    depth: int
    verdict: Verdict
    property: str | None = None


@dataclass(frozen=True, slots=True)
class Model:
    """A loaded model file, with its table compiled at the model's scale."""

    name: str
    file: str
    doc: str
    kind: Kind
    tier: Literal["default", "bench"]
    machine: Machine
    budgets: Mapping[str, int] = field(default_factory=dict)
    reactions: tuple[str, ...] = ()
    depth: int = 0
    width: int = 0
    failures: int = 0
    expect: Expectation | None = None


def load_model(path: Path, display: str | None = None) -> Model:
    """Load one model file; a fault raises :class:`SpecError` naming the file and key."""
    f = _File(display or f"{path.parent.name}/{path.name}")
    data = f.keys("", read_toml(path, f.display), ["model"], ["environment", "tree", "expect"])
    m = f.keys("[model]", data["model"], ["table", "kind"], ["doc", "name", "tier", "constants"])
    kind = m["kind"]
    if kind not in _KINDS:
        f.fail("[model]", f"kind must be one of {known(_KINDS)}, not {echo(kind)}")
    tier = m.get("tier", "default")
    if tier not in ("default", "bench"):
        f.fail("[model]", f"tier must be 'default' or 'bench', not {echo(tier)}")
    table_path = path.parent / f.text("[model]", m["table"], "table")
    constants = _ints(f, "[model] constants", m.get("constants", {}))
    clauses = load_clauses(table_path.parent / "clauses.toml")
    machine = load_table(table_path, clauses, constants=constants or None)

    budgets: dict[str, int] = {}
    reactions: tuple[str, ...] = ()
    if "environment" in data:
        env = f.keys("[environment]", data["environment"], [], ["budgets", "reactions", "failures"])
        budgets = _ints(f, "[environment] budgets", env.get("budgets", {}))
        for event in budgets:
            if event not in machine.table.events:
                names = known(machine.table.events)
                f.fail("[environment] budgets", f"unknown event {echo(event)} (events: {names})")
        reactions = f.names("[environment]", env.get("reactions", ["-"]), "reactions")
        if reactions == ("-",):
            reactions = ()
        for effect in reactions:
            spec = machine.table.effects.get(effect)
            if spec is None or not spec.notifies:
                notifying = known(n for n, e in machine.table.effects.items() if e.notifies)
                f.fail(
                    "[environment] reactions",
                    f"{echo(effect)} is not a notifying effect (notifying: {notifying})",
                )
    elif kind != "table":
        f.fail("", f"a {kind} model needs an [environment] section")

    failures = _ints(
        f, "[environment]", {"failures": data.get("environment", {}).get("failures", 0)}
    )
    if failures["failures"] and kind != "activation-tree":
        f.fail(
            "[environment]", "failures budgets failing child teardown, in activation-tree models"
        )
    if reactions and kind == "activation-tree":
        f.fail("[environment] reactions", "activation-tree models take no reactions")
    depth = width = 0
    if kind == "activation-tree":
        if "tree" not in data:
            f.fail("", "an activation-tree model needs a [tree] section")
        tree = _ints(f, "[tree]", f.keys("[tree]", data["tree"], ["depth", "width"]))
        depth, width = tree["depth"], tree["width"]

    expect = None
    if "expect" in data:
        e = f.keys(
            "[expect]", data["expect"], ["states", "transitions", "depth", "verdict"], ["property"]
        )
        nums = _ints(f, "[expect]", {k: e[k] for k in ("states", "transitions", "depth")})
        if e["verdict"] not in ("ok", "violation"):
            f.fail("[expect]", f"verdict must be 'ok' or 'violation', not {echo(e['verdict'])}")
        prop = e.get("property")
        expect = Expectation(nums["states"], nums["transitions"], nums["depth"], e["verdict"], prop)

    return Model(
        name=f.text("[model]", m.get("name", path.stem), "name"),
        file=f.display,
        doc=" ".join(f.text("[model]", m.get("doc", ""), "doc").split()),
        kind=kind,
        tier=tier,
        machine=machine,
        budgets=budgets,
        reactions=reactions,
        depth=depth,
        width=width,
        failures=failures["failures"],
        expect=expect,
    )


def load_models(root: Path) -> list[Model]:
    """Every ``*.toml`` directly in ``root`` (the tables they use live in subfolders)."""
    return [load_model(p, f"{root.name}/{p.name}") for p in sorted(root.glob("*.toml"))]


def _ints(f: _File, where: str, table: Mapping[str, Any]) -> dict[str, int]:
    if not isinstance(table, dict):
        f.fail(where, f"expected a table, found {type(table).__name__}")
    out: dict[str, int] = {}
    for key, value in table.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            f.fail(where, f"{echo(key)} must be a non-negative integer, not {echo(value)}")
        out[key] = value
    return out


__all__ = ["Expectation", "Model", "SpecError", "load_model", "load_models"]
