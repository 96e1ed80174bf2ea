"""Load ``specs/wiring.toml``: how instances of the tables meet, declared once.

A :class:`Wiring` is read by the checker's tree compositions and by the runtime's registry, so
a connection changed in the file changes both. It is validated against the tables it wires, as
a table is validated: an unknown machine, effect, event, target or argument, an argument of
the wrong type, a fact the target cannot know, fails the load with ``FILE: WHERE: FAULT``, and
a wiring with any fault is rejected whole.

The Python on either side only resolves *which* instance a target names (:data:`TARGETS`) and
the facts a target knows (:data:`FACTS`); everything else (which event, which arguments, what a
refusal means, which state an await waits for) is data here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, final

from fsm_core._errors import echo, known
from fsm_core.table._expr import (
    BOOL,
    Evaluator,
    Expr,
    ExprError,
    Param,
    Scope,
    Type,
    Value,
    _children,
    check,
    compile_expr,
    parse_expr,
)
from fsm_core.table._load import _File
from fsm_core.table._machine import Machine
from fsm_core.table._table import Clause

__all__ = ["ANY", "WiredAwait", "WiredCall", "Wiring", "load_wiring"]

TARGETS: Mapping[str, Mapping[str, str]] = {
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
"""Per machine whose effect fires, the targets it may name and the machine each one runs."""

FACTS: Mapping[str, tuple[str, str | None]] = {
    "last": ("parent", None),
    "parent": ("door", "parent"),
}
"""A fact an argument may read: the target that knows it, and the door type it takes (None:
``bool``). ``last``: no other owned child of the parent is unsettled. ``parent``: what the
agent in question is now, as the door's ``parent`` type says (the node's parent agent for a
settlement, the disposing agent itself for a disposal)."""

ANY = "*"
"""An await's argument the environment chooses: every value of the parameter's type."""

Refused = Literal["never", "caller"]


@final
@dataclass(frozen=True, slots=True)
class WiredCall:
    """Inside ``machine.effect``, fire ``event`` on every instance ``target`` names.

    ``args`` evaluates the event's arguments, in its declared order, from the effect's
    arguments followed by the values of ``facts``.
    """

    id: str
    machine: str
    effect: str
    target: str
    only: Literal["root", "child"] | None
    event: str
    args: Evaluator
    """``args((), (*effect_args, *fact_values))`` gives the event's argument tuple."""
    arg_text: tuple[tuple[str, str], ...]
    facts: tuple[str, ...]
    refused: Refused
    clauses: tuple[str, ...]
    doc: str
    arg_exprs: tuple[Expr, ...]
    """The resolved expression of each argument, in the event's parameter order (what
    ``args`` evaluates; ``param`` names the effect's parameters and the facts)."""

    def arguments(self, values: Sequence[Value], facts: Mapping[str, Value]) -> tuple[Value, ...]:
        """The event's arguments, given the effect's ``values`` and the target's ``facts``."""
        return cast(tuple[Value, ...], self.args((), (*values, *(facts[f] for f in self.facts))))

    def keywords(self, values: Sequence[Value], facts: Mapping[str, Value]) -> dict[str, Value]:
        """:meth:`arguments` by parameter name."""
        names = (p for p, _ in self.arg_text)
        return dict(zip(names, self.arguments(values, facts), strict=True))

    def __str__(self) -> str:
        args = ", ".join(f"{p}={v}" for p, v in self.arg_text)
        return f"{self.machine}.{self.effect} -> {self.target}.{self.event}({args})"


@final
@dataclass(frozen=True, slots=True)
class WiredAwait:
    """``machine.event`` fires as a step of its own once ``target`` satisfies ``until``.

    ``args`` holds, per parameter of the event, an evaluator over the target's state, or
    None for :data:`ANY`.
    """

    id: str
    machine: str
    event: str
    target: str
    until: Evaluator
    until_text: str
    args: tuple[Evaluator | None, ...]
    arg_text: tuple[tuple[str, str], ...]
    clauses: tuple[str, ...]
    doc: str
    until_expr: Expr
    """``until``'s resolved expression, over the target's table."""
    arg_exprs: tuple[Expr | None, ...]
    """Each argument's resolved expression, or None for :data:`ANY`."""

    def admits(self, target_state: Sequence[Value], args: Sequence[Value]) -> bool:
        """True iff the event may fire with ``args`` while the target is in ``target_state``."""
        if not self.until(target_state, ()):
            return False
        pairs = zip(self.args, args, strict=True)
        return all(f is None or f(target_state, ()) == a for f, a in pairs)


@final
@dataclass(frozen=True, slots=True)
class Wiring:
    """Every connection between instances, as ``specs/wiring.toml`` declares it."""

    file: str
    doc: str
    calls: tuple[WiredCall, ...]
    awaits: tuple[WiredAwait, ...]

    def fired_by(self, machine: str, effect: str) -> tuple[WiredCall, ...]:
        """The calls ``machine.effect`` makes, in file order."""
        return tuple(c for c in self.calls if c.machine == machine and c.effect == effect)

    def effects(self, machine: str) -> frozenset[str]:
        """The effects of ``machine`` that fire a call."""
        return frozenset(c.effect for c in self.calls if c.machine == machine)

    def awaiting(self, machine: str, event: str) -> WiredAwait | None:
        return next((a for a in self.awaits if a.machine == machine and a.event == event), None)


def load_wiring(
    path: Path, machines: Mapping[str, Machine], clauses: Mapping[str, Clause], display: str
) -> Wiring:
    """Load and validate the wiring at ``path`` against ``machines`` (by table name)."""
    f = _File(display)
    data = f.keys("", f.read(path), ["wiring"], ["calls", "awaits"])
    head = f.keys("[wiring]", data["wiring"], [], ["doc"])
    for role in TARGETS:
        if role not in machines:
            f.fail("[wiring]", f"the wiring connects a machine {echo(role)}; no table names it")
    loader = _Loader(f, machines, clauses)
    calls = tuple(loader.call(i, c) for i, c in enumerate(_array(f, data, "calls")))
    awaits = tuple(loader.wait(i, a) for i, a in enumerate(_array(f, data, "awaits")))
    ids = [c.id for c in calls] + [a.id for a in awaits]
    for i in ids:
        if ids.count(i) > 1:
            f.fail(f"id {echo(i)}", "the id is used twice")
    events = [(a.machine, a.event) for a in awaits]
    for machine, event in events:
        if events.count((machine, event)) > 1:
            f.fail(f"await of {machine}.{event}", "the event is awaited twice")
    return Wiring(display, f.text("[wiring]", head.get("doc", ""), "doc"), calls, awaits)


def _array(f: _File, data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        f.fail(f"[[{key}]]", f"{key} must be an array of tables ([[{key}]])")
    return value


class _Loader:
    def __init__(
        self, f: _File, machines: Mapping[str, Machine], clauses: Mapping[str, Clause]
    ) -> None:
        self.f = f
        self.machines = machines
        self.clauses = clauses

    def _head(self, where: str, body: Mapping[str, Any]) -> tuple[str, tuple[str, ...], str]:
        f = self.f
        ident = f.id(where, body["id"])
        tags = f.names(where, body.get("clauses", []) or ["-"], "clauses")
        if tags == ("-",):
            f.fail(where, "missing clause tag (every connection names the clause it implements)")
        for tag in tags:
            if tag not in self.clauses:
                f.fail(where, f"unknown clause {echo(tag)} (see specs/clauses.toml)")
            if self.clauses[tag].not_implemented is not None:  # as a table's tag is refused
                f.fail(
                    where,
                    f"clause {echo(tag)} says no row implements it (its not_implemented in "
                    "specs/clauses.toml): drop the tag, or the not_implemented",
                )
        return ident, tags, f.text(where, body.get("doc", ""), "doc")

    def _dotted(self, where: str, value: object, key: str) -> tuple[str, str]:
        """``MACHINE.NAME`` split, for ``key`` (``effect`` or ``event``)."""
        f = self.f
        text = f.text(where, value, key)
        machine, dot, name = text.partition(".")
        if not dot or machine not in TARGETS:
            f.fail(where, f"{key} {echo(text)} is not MACHINE.{key.upper()} (machines: "
                   f"{known(TARGETS)})")  # fmt: skip
        return machine, name

    def call(self, index: int, body: object) -> WiredCall:
        f = self.f
        where = f"calls[{index}]"
        body = f.keys(
            where, body, ["id", "effect", "target", "event"],
            ["args", "only", "refused", "clauses", "doc"],
        )  # fmt: skip
        where = f"call {echo(body['id'])}" if isinstance(body["id"], str) else where
        ident, tags, doc = self._head(where, body)
        machine, effect = self._dotted(where, body["effect"], "effect")
        source = self.machines[machine].table
        spec = source.effects.get(effect)
        if spec is None:
            f.fail(
                where, f"{machine} has no effect {echo(effect)} (effects: {known(source.effects)})"
            )
        target = f.text(where, body["target"], "target")
        if target not in TARGETS[machine]:
            f.fail(
                where,
                f"an effect of {machine} cannot reach target {echo(target)} "
                f"(targets: {known(TARGETS[machine])})",
            )
        aimed = self.machines[TARGETS[machine][target]].table
        event = f.text(where, body["event"], "event")
        if event not in aimed.events:
            f.fail(
                where,
                f"target {target} runs {aimed.name}, which has no event {echo(event)} "
                f"(events: {known(aimed.events)})",
            )
        only = body.get("only")
        if only is not None and (machine != "activation" or only not in ("root", "child")):
            f.fail(
                where,
                f"only must be 'root' or 'child', for an activation's effect, not {echo(only)}",
            )
        refused = body.get("refused", "never")
        if refused not in ("never", "caller"):
            f.fail(where, f"refused must be 'never' or 'caller', not {echo(refused)}")
        facts = {
            name: (BOOL if door_type is None else self._door_type(door_type))
            for name, (knower, door_type) in FACTS.items()
            if knower == target
        }
        params = {**dict(spec.params), **facts}
        clash = set(dict(spec.params)) & set(facts)
        if clash:
            f.fail(where, f"the effect's parameter {echo(min(clash))} shadows a fact of {target}")
        scope = Scope({}, params, {}, _symbols(source, aimed))
        given = body.get("args", {})
        exprs, text = self._arguments(where, given, aimed.events[event].params, scope, star=False)
        resolved = tuple(cast(Expr, e) for e in exprs)
        named = {n for e in resolved for n in _params(e)}
        used = tuple(f for f in facts if f in named)  # the facts its arguments read
        positions = {p: i for i, p in enumerate((*dict(spec.params), *used))}
        evaluators = [compile_expr(e, {}, positions, {}) for e in resolved]

        def args(s: Sequence[Value], a: Sequence[Value]) -> Value:
            return cast(Value, tuple(ev(s, a) for ev in evaluators))

        return WiredCall(
            ident, machine, effect, target, only, event, args, text, used,
            cast(Refused, refused), tags, doc, resolved,
        )  # fmt: skip

    def wait(self, index: int, body: object) -> WiredAwait:
        f = self.f
        where = f"awaits[{index}]"
        body = f.keys(where, body, ["id", "event", "target", "until"], ["args", "clauses", "doc"])
        where = f"await {echo(body['id'])}" if isinstance(body["id"], str) else where
        ident, tags, doc = self._head(where, body)
        machine, event = self._dotted(where, body["event"], "event")
        table = self.machines[machine].table
        spec = table.events.get(event)
        if spec is None:
            f.fail(where, f"{machine} has no event {echo(event)} (events: {known(table.events)})")
        if spec.kind != "internal":
            f.fail(
                where,
                f"{machine}.{event} is an input event: only the runtime's own (internal) "
                "events wait",
            )
        target = f.text(where, body["target"], "target")
        if TARGETS[machine].get(target) != "agent" or target == "new_agent":
            f.fail(
                where, f"an await reads its own agent: target must be 'agent', not {echo(target)}"
            )
        watched = self.machines["agent"]
        scope = _table_scope(watched)
        until_text = f.text(where, body["until"], "until")
        until = self._expr(where, until_text, scope, BOOL, "until")
        exprs, text = self._arguments(where, body.get("args", {}), spec.params, scope, star=True)
        positions = {n: i for i, n in enumerate(watched.names)}
        compiled = tuple(
            None if e is None else compile_expr(e, positions, {}, watched.defs) for e in exprs
        )
        return WiredAwait(
            ident, machine, event, target, compile_expr(until, positions, {}, watched.defs),
            until_text, compiled, text, tags, doc, until, tuple(exprs),
        )  # fmt: skip

    def _door_type(self, name: str) -> Type:
        return self.machines["admission"].table.types[name]

    def _arguments(
        self,
        where: str,
        given: object,
        params: Sequence[tuple[str, Type]],
        scope: Scope,
        *,
        star: bool,
    ) -> tuple[list[Expr | None], tuple[tuple[str, str], ...]]:
        f = self.f
        if not isinstance(given, dict):
            f.fail(where, f"args must be a table of PARAMETER = EXPRESSION, not {echo(given)}")
        names = [p for p, _ in params]
        for key in given:
            if key not in names:
                f.fail(where, f"args names {echo(key)}, which is no parameter (parameters: "
                       f"{known(names) or 'none'})")  # fmt: skip
        exprs: list[Expr | None] = []
        text: list[tuple[str, str]] = []
        for name, t in params:
            if name not in given:
                f.fail(where, f"args gives no value for the parameter {echo(name)}")
            value = f.text(where, given[name], f"args.{name}")
            text.append((name, value))
            if star and value == ANY:
                exprs.append(None)
                continue
            exprs.append(self._expr(where, value, scope, t, f"args.{name}"))
        return exprs, tuple(text)

    def _expr(self, where: str, text: str, scope: Scope, wanted: Type, key: str) -> Expr:
        f = self.f
        try:
            expr, t = check(parse_expr(text), scope)
        except ExprError as e:
            f.fail(where, f"{key}: {e} in {echo(text)}")
        if not wanted.admits(t):
            f.fail(where, f"{key}: type mismatch: expected {wanted}, found {t} in {echo(text)}")
        return expr


def _params(e: Expr) -> set[str]:
    """The parameter names a resolved expression reads."""
    if isinstance(e, Param):
        return {e.name}
    return {n for child in _children(e) for n in _params(child)}


def _symbols(*tables: Any) -> frozenset[str]:
    return frozenset(
        str(v) for t in tables for ty in t.types.values() if ty.kind == "enum" for v in ty.values
    )


def _table_scope(m: Machine) -> Scope:
    t = m.table
    variables = {t.state_var: t.types[t.state_var], **{v.name: v.type for v in t.variables}}
    return Scope(variables, {}, {n: d.expr for n, d in t.defs.items()}, _symbols(t))
