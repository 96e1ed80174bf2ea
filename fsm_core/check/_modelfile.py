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

``kind = "activation-tree"`` composes a tree of activations with the registry's door; its
``[tree]`` section says how deep and wide, which table the door runs and which wiring connects
them (paths resolved like ``table``; the wiring is validated against the node table, the door
and the ``agent.toml`` beside it), whether each node carries its own agent, and whether the
search takes one state per orbit of sibling orders (``symmetry``, :mod:`~._composed._symmetry`)::

    [tree]
    depth = 1
    width = 2
    door = "../specs/admission.toml"
    wiring = "../specs/wiring.toml"
    agents = true

Its budgets name the input events of either table the environment calls (``admit``, ``drain``
and ``drain_below`` are the door's), and with agents ``agent.EVENT`` for a node's agent
(``agent.send``: a followup straight to it); ``reactions`` then name the agent's notifying
effects inside which listeners call it, and ``activation.settle`` lets a settled node's
listeners call the parent, its agent and the door as the wiring's ``[[listeners]]`` declare (no
agents needed; a listener of the parent's agent only with them).
A tree model written before the door or the wiring existed is refused, naming the key to add.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from fsm_core._errors import ECHO_LIMIT, SpecError, did_you_mean, echo, known
from fsm_core._paths import specs_dir
from fsm_core.check._composed import _agent, _tree
from fsm_core.check._config import Expectation, Kind, Model
from fsm_core.check._needs import Needs
from fsm_core.check._property import Property
from fsm_core.check._reactions import split
from fsm_core.check._reentry import notification_points
from fsm_core.check._system import declared
from fsm_core.table._limits import DEFAULT_LIMITS, MAX_FILE_BYTES, Limits
from fsm_core.table._load import _exists, _File, load_clauses, load_table
from fsm_core.table._machine import Machine
from fsm_core.table._table import EventSpec
from fsm_core.table._wiring import Wiring, load_wiring

_KINDS: tuple[Kind, ...] = ("table", "agent", "activation-tree")
_NEEDS: dict[Kind, Needs] = {"agent": _agent.NEEDS, "activation-tree": _tree.NEEDS}
_TABLE_FORMS: dict[Kind, str] = {
    "table": "the table's invariants",
    "agent": "the table's invariants and step invariants, EFFECT.requires",
    "activation-tree": "INVARIANT@NODE and EFFECT.requires@NODE for a node of its tree",
}
"""How a refusal names the table's properties a kind checks, instead of listing each."""
_USER_INTERNAL: dict[Kind, frozenset[str]] = {"agent": _agent.USER_INTERNAL}
_MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
"""A model's name: it names the model in reports and its trace files (``PATH.<name>.json``)."""


def load_model(path: Path, display: str | None = None, *, specs: Path | None = None) -> Model:
    """Load one model file; a fault raises :class:`SpecError` naming the file and key.

    Everything a check relies on is proven here, before the check runs: the model's name
    (it names trace files), that its table has what its kind's composition reads, that the
    environment budgets only input events, and that ``[expect]`` names a property the kind
    can break.

    With ``specs``, a table the model takes from a directory named ``specs`` (the shipped
    models' ``../specs/agent.toml``) is read from ``specs`` by its file name; a table anywhere
    else (the benchmark's own ``bench/turncancel.toml``) is read where the model says.
    """
    f = _File(display or f"{path.parent.name}/{path.name}")
    data = f.keys("", f.read(path), ["model"], ["environment", "tree", "expect"])
    m = f.keys(
        "[model]", data["model"], ["table", "kind"], ["doc", "name", "tier", "constants", "limits"]
    )
    name = f.text("[model]", m.get("name", path.stem), "name")
    with f.each():
        if not _MODEL_NAME.fullmatch(name):
            f.fail(
                "[model]",
                f"name {echo(name)} is not a valid model name (letters, digits, _ and -; "
                "a file name's stem unless [model] name says otherwise)",
                "name",
            )
    kind = m["kind"]
    if kind not in _KINDS:
        f.fail(
            "[model]",
            f"kind must be one of {known(_KINDS)}, not {echo(kind)}{_meant(kind, _KINDS)}",
            "kind",
        )
    tier = m.get("tier", "default")
    with f.each():
        if tier not in ("default", "bench"):
            f.fail(
                "[model]",
                f"tier must be 'default' or 'bench', not {echo(tier)}"
                f"{_meant(tier, ('default', 'bench'))}",
                "tier",
            )
    table_path = _table_path(f, "[model]", "table", m["table"], path, specs)
    constants = _ints(f, "[model] constants", m.get("constants", {}))
    raised = f.keys("[model] limits", m.get("limits", {}), [], ["domain", "values", "tree"])
    limits = replace(DEFAULT_LIMITS, **_ints(f, "[model] limits", raised))
    machine = _table(table_path, constants, limits)
    t = machine.table
    door: Machine | None = None
    wiring: Wiring | None = None
    agent: Machine | None = None
    if kind == "activation-tree" and isinstance(data.get("tree"), dict):
        tree = data["tree"]
        for key, example in (("door", "admission.toml"), ("wiring", "wiring.toml")):
            if key not in tree:
                f.fail(
                    "[tree]",
                    f"missing key {key!r}: a tree composes the registry's door and the wiring "
                    f'that connects it to its nodes ({key} = "../specs/{example}")',
                )
        door_path = _table_path(f, "[tree]", "door", tree["door"], path, specs)
        door = _table(door_path)
    if kind in _NEEDS:
        lacking = _NEEDS[kind].lacking(t)
        if lacking is not None:
            f.fail("[model]", f"kind {echo(kind)} needs {lacking} in its table; {t.file} has none")
    if door is not None:
        lacking = _tree.door_lacking(door.table, t)
        if lacking is not None:
            f.fail("[tree]", f"the tree's wiring needs {lacking}; {door.table.file} has none")
        tree = data["tree"]
        wiring_path = _table_path(f, "[tree]", "wiring", tree["wiring"], path, specs)
        beside = wiring_path.parent
        agent_path = beside / "agent.toml"
        if not _exists(agent_path, Path.is_file):
            f.fail("[tree]", f"the wiring reads agent.toml beside it; {beside} has none")
        wired = {"activation": machine, "admission": door}
        catalogue = load_clauses(beside / "clauses.toml")
        wired["agent"] = _table(agent_path)
        wiring = load_wiring(wiring_path, wired, catalogue, f"{beside.name}/{wiring_path.name}")
        agents = tree.get("agents", False)
        if not isinstance(agents, bool):
            f.fail("[tree]", f"agents must be true or false, not {echo(agents)}", "agents")
        agent = wired["agent"] if agents else None

    budgets: dict[str, int] = {}
    reactions: tuple[str, ...] = ()
    failures = 0
    if "environment" in data:
        env = f.keys(
            "[environment]",
            data["environment"],
            [],
            ["budgets", "reactions", "failures", "unreacted"],
        )
        if kind == "table" and set(env) - {"unreacted"}:
            f.fail(
                "[environment]",
                "a table model takes no budgets, reactions or failures: the table bounds its "
                "own run and no listener calls it (it may say why in unreacted)",
            )
        budgets = _ints(f, "[environment] budgets", env.get("budgets", {}))
        events = dict(t.events)
        if door is not None:  # the door's calls the environment makes (admit is the door's)
            events |= {e: door.table.events[e] for e in _tree.DOOR_CALLS}
        if agent is not None:  # a node's agent's calls, named apart
            for call, spec in agent.table.events.items():
                if spec.kind == "input" or call in ("halt", "remove"):
                    events[f"agent.{call}"] = spec
        for event in budgets:
            with f.each():
                _budget(f, kind, event, events, agent is not None)
        if "reactions" in env:
            reactions = f.names("[environment]", env["reactions"], "reactions")
        notifiers = agent.table if agent is not None else t
        notifying = [n for n, e in notifiers.effects.items() if e.notifies]
        for effect in reactions:
            table, own = split(effect)
            if table is not None and wiring is not None and table == t.name:
                if own not in wiring.heard("activation"):
                    with f.each():
                        f.fail("[environment] reactions", _unheard(effect, t.name, wiring))
                continue
            if effect not in notifying:
                with f.each():
                    f.fail(
                        "[environment] reactions",
                        f"{echo(effect)} is not a notifying effect "
                        f"({did_you_mean(effect, notifying)}notifying: {known(notifying)})",
                    )
        failures = _ints(f, "[environment]", {"failures": env.get("failures", 0)})["failures"]
    elif kind != "table":
        f.fail("[model]", f"a model of kind {echo(kind)} needs an [environment] section")

    if failures and kind != "activation-tree":
        f.fail(
            "[environment]", "failures budgets failing child teardown, in activation-tree models"
        )
    if any("." not in r for r in reactions) and kind == "activation-tree" and agent is None:
        f.fail(
            "[environment] reactions",
            "an activation-tree model takes reactions only with agents = true (listeners "
            "re-enter a node's agent)",
        )
    depth = width = 0
    symmetry = False
    if kind == "activation-tree":
        if "tree" not in data:
            f.fail("[model]", "an activation-tree model needs a [tree] section")
        shape = f.keys(
            "[tree]", data["tree"], ["depth", "width", "door", "wiring"], ["agents", "symmetry"]
        )
        tree = _ints(f, "[tree]", {k: shape[k] for k in ("depth", "width")})
        depth, width = tree["depth"], tree["width"]
        symmetry = shape.get("symmetry", False)
        if not isinstance(symmetry, bool):
            f.fail("[tree]", f"symmetry must be true or false, not {echo(symmetry)}", "symmetry")
        if _tree.tree_size(depth, width, limits.tree) > limits.tree:
            f.fail(
                "[tree]",
                f"depth {echo(depth)} and width {echo(width)} make more nodes than the limit "
                f"of {limits.tree:,} (a model may raise it: [model] limits = {{ tree = N }})",
            )
    elif "tree" in data:
        f.fail("[tree]", f"a model of kind {echo(kind)} has no tree (kind 'activation-tree' has)")

    model = Model(
        name=name,
        file=f.display,
        doc=" ".join(f.text("[model]", m.get("doc", ""), "doc").split()),
        kind=kind,
        tier=tier,
        machine=machine,
        budgets=budgets,
        reactions=reactions,
        depth=depth,
        width=width,
        failures=failures,
        door=door,
        wiring=wiring,
        agent=agent,
        symmetry=symmetry,
    )
    # A model with faults so far is refused here: what follows reads the model they are in.
    f.done()
    if "environment" in data and "unreacted" in data["environment"]:
        model = replace(model, unreacted=_unreacted(f, model, data["environment"]["unreacted"]))
    if "expect" not in data:
        return model
    e = f.keys(
        "[expect]",
        data["expect"],
        ["states", "transitions", "depth", "verdict"],
        ["property", "untaken"],
    )
    untaken = f.names("[expect]", e["untaken"], "untaken") if "untaken" in e else ()
    rows = {r.id for r in t.rows}
    for row in untaken:
        if row not in rows:
            with f.each():
                f.fail(
                    "[expect]",
                    f"untaken names {echo(row)}, which is no row of {t.file}{_meant(row, rows)}",
                    "untaken",
                )
    f.done()
    nums = _ints(f, "[expect]", {k: e[k] for k in ("states", "transitions", "depth")})
    verdict = e["verdict"]
    if verdict not in ("ok", "violation"):
        f.fail("[expect]", f"verdict must be 'ok' or 'violation', not {echo(verdict)}")
    prop = e.get("property")
    if verdict == "ok" and prop is not None:
        f.fail("[expect]", "a property is expected to break only with verdict = 'violation'")
    if verdict == "violation":
        if prop is None:
            f.fail("[expect]", "verdict = 'violation' names the property that breaks")
        prop = f.text("[expect]", prop, "property")
        records = declared(model)
        if all(p.name != prop for p in records):
            f.fail(
                "[expect]",
                f"a model of kind {echo(kind)} has no property {echo(prop)} "
                f"({did_you_mean(prop, [p.name for p in records])}it checks "
                f"{_property_forms(kind, records)})",
                "property",
            )
    expect = Expectation(nums["states"], nums["transitions"], nums["depth"], verdict, prop, untaken)
    return replace(model, expect=expect)


def _unheard(effect: str, node: str, wiring: Wiring) -> str:
    """Why a tree model may not name ``effect`` (``MACHINE.EFFECT`` of its node table) in
    ``reactions``: no listener of it is declared, and what is."""
    heard = wiring.heard("activation")
    close = difflib.get_close_matches(split(effect)[1], heard, n=1)  # by the effect's own name
    meant = f"did you mean {echo(f'{node}.{close[0]}')}? " if close else ""
    declared = (
        f"listeners are declared for {known(f'{node}.{e}' for e in heard)}"
        if heard
        else "it declares no [[listeners]]"
    )
    return (
        f"{echo(effect)}: a tree lets listeners of a node's effect in only where {wiring.file} "
        f"declares what they call ({meant}{declared})"
    )


def _unreacted(f: _File, model: Model, value: object) -> dict[str, str]:
    """``[environment] unreacted``: each notifying effect nothing re-enters here, with why."""
    where = "[environment] unreacted"
    entries = f.table(where, value)
    points = notification_points(model)
    out: dict[str, str] = {}
    for name, why in entries.items():
        with f.each():
            if name not in points:
                f.fail(
                    where,
                    f"{echo(name)} is no notifying effect of this model's tables "
                    f"({did_you_mean(name, points)}notifying: {known(points)})",
                    name,
                )
            if points[name]:
                f.fail(
                    where,
                    f"{echo(name)} is re-entered here (by {points[name]}): unreacted names only "
                    "effects neither reactions nor the wiring re-enter",
                    name,
                )
            out[name] = f.text(where, why, name)
            if not out[name].strip():
                f.fail(where, f"{echo(name)}: say why nothing re-enters it, in words", name)
    f.done()
    return out


def load_models(root: Path, *, specs: Path | None = None) -> list[Model]:
    """Every ``*.toml`` directly in ``root`` (the tables they use live in subfolders); ``specs``
    as for :func:`load_model`."""
    if not _exists(root, Path.is_dir):
        raise SpecError(str(root), "", "not a directory; expected a directory of models")
    return [
        load_model(p, f"{root.name}/{p.name}", specs=specs) for p in sorted(root.glob("*.toml"))
    ]


_Key = tuple[object, ...]
_LOADED: OrderedDict[_Key, Machine] = OrderedDict()
"""Tables already loaded and proven, by content and scale, the last few used: a run of
several models proves each table once, not once per model (a tree's wiring reads the agent
table too)."""
_KEEP = 16


def _table(
    path: Path, constants: Mapping[str, int] | None = None, limits: Limits = DEFAULT_LIMITS
) -> Machine:
    """The table at ``path`` (with the catalogue beside it), loaded once per content: the key
    holds both files' bytes' digest, so an edited table is loaded anew."""
    catalogue = path.parent / "clauses.toml"
    versions = []
    for p in (path, catalogue):
        try:
            if p.stat().st_size > MAX_FILE_BYTES:  # not read here: the loader refuses it
                return load_table(path, load_clauses(catalogue), constants=constants or None,
                                  limits=limits)  # fmt: skip
            versions.append((str(p.resolve()), hashlib.sha256(p.read_bytes()).digest()))
        except (OSError, RuntimeError):  # the loader reports it, naming the file
            versions.append((str(p), b""))
    key: _Key = (*versions, tuple(sorted((constants or {}).items())), limits)
    found = _LOADED.get(key)
    if found is None:
        found = load_table(path, load_clauses(catalogue), constants=constants or None,
                           limits=limits)  # fmt: skip
        _LOADED[key] = found
        if len(_LOADED) > _KEEP:
            _LOADED.popitem(last=False)
    else:
        _LOADED.move_to_end(key)
    return found


def _table_path(
    f: _File, where: str, key: str, value: object, path: Path, specs: Path | None
) -> Path:
    """The table file ``value`` names, relative to the model file at ``path``; a table in a
    directory named ``specs`` is read from ``specs`` instead, when given.

    A missing one is refused naming the path tried; a table of a directory named ``specs``
    (a shipped model's ``../specs/agent.toml``, copied elsewhere) is one ``--specs DIR``
    finds, so the refusal says so, and where the shipped tables are."""
    table = f.text(where, value, key)
    table_path = path.parent / table
    found = "relative to the model file"
    if specs is not None and table_path.parent.name == "specs":
        table_path, found = specs / table_path.name, "in --specs"
    # Before the catalogue beside it, which would otherwise be the file reported missing.
    if not _exists(table_path, Path.is_file):
        hint = ""
        if specs is None and table_path.parent.name == "specs":
            hint = (
                f"; fsm-core --specs DIR reads it as {echo(table_path.name)} in DIR (the "
                f"shipped tables are in {specs_dir()})"
            )
        tried = str(table_path)
        if not tried.isprintable() or len(tried) > 4 * ECHO_LIMIT:
            tried = echo(tried)
        f.fail(where, f"{key} {echo(table)} names no file: tried {tried} ({found}){hint}", key)
    return table_path


def _budget(
    f: _File, kind: Kind, event: str, events: Mapping[str, EventSpec], agents: bool
) -> None:
    """Refuse a budget on ``event`` unless the user may call it (``events``: what the
    model's tables offer, a node's agent's as ``agent.EVENT`` when ``agents``)."""
    where = "[environment] budgets"
    if event == "agent.shut" and agents:
        f.fail(where, "'agent.shut' is the wiring's call (an activation's close), not the user's")
    if event not in events:
        f.fail(
            where,
            f"unknown event {echo(event)} ({did_you_mean(event, events)}events: {known(events)})",
        )
    user = _USER_INTERNAL.get(kind, frozenset()) | {"agent.halt", "agent.remove"}
    if events[event].kind != "input" and event not in user:
        calls = known(e for e, x in events.items() if x.kind == "input" or e in user)
        f.fail(
            where,
            f"{echo(event)} is an internal event the runtime fires itself; a budget "
            f"bounds what the user calls ({calls})",
        )


def _meant(name: object, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when ``name`` is close to one of ``choices``, else ``""``."""
    mean = did_you_mean(name, choices)
    return f" ({mean.rstrip()})" if mean else ""


def _property_forms(kind: Kind, records: tuple[Property, ...]) -> str:
    """What a ``kind`` model checks: the table's properties by form, then the others by name."""
    table = ("invariant", "step", "requires")
    explorer = ("eventually", "deadlock-free")
    own = [p.name for p in records if p.kind not in (*table, *explorer)]
    common = known(p.name for p in records if p.kind in explorer)
    return ", ".join([_TABLE_FORMS[kind], *([known(own)] if own else []), common])


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
