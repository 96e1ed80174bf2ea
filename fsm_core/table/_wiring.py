"""Load ``specs/wiring.toml``: how instances of the tables meet, declared once.

A :class:`Wiring` is read by the checker's tree compositions and by the runtime's registry, so
a connection changed in the file changes both. It is validated against the tables it wires, as
a table is validated: an unknown machine, effect, event, target, argument or budget, an
argument of the wrong type, a fact the target cannot know, fails the load with
``FILE:LINE: WHERE: FAULT``, and a wiring with any fault is rejected whole.

The Python on either side only resolves *which* instance a target names (:data:`TARGETS`,
:data:`LISTENER_TARGETS`) and the facts a target knows (:data:`FACTS`); everything else (which
event, which arguments, what a refusal means, which state an await waits for, what a listener
may call and which budget that spends) is data here.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, final

from fsm_core._errors import did_you_mean, echo, known
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
from fsm_core.table._lines import Path as _Place
from fsm_core.table._load import _File
from fsm_core.table._machine import Machine
from fsm_core.table._table import Clause, EffectSpec, Table

__all__ = ["ANY", "WiredAwait", "WiredCall", "WiredListener", "Wiring", "load_wiring"]

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

LISTENER_TARGETS: Mapping[str, Mapping[str, str]] = {
    "activation": {
        "parent": "activation",
        "parent_agent": "agent",
        "below_parent": "admission",
        "door": "admission",
    },
}
"""Per machine whose notifying effect a listener hears, the instances the listener may call and
the machine each one runs: ``parent``, the notifying activation's parent activation (none for a
root: its parent agent is host-owned); ``parent_agent``, that parent's own agent;
``below_parent``, the door, naming the parent (an admission or a drain below it, which the door
hands on to the parent's own row); ``door``, the door's own calls (the registry's drain, a drain
below a host-owned parent). The notifying instance itself is no target: a listener of a
settlement hears of an activation that has left the registry."""

NAMED_PARENT = "activation"
"""The value of the door's ``parent`` type that names an activation (the door hands such a call
on to that node's own row); its other values name a host-owned parent agent."""

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
class WiredListener:
    """A listener of ``machine.effect`` (a notifying effect) may fire ``event`` on the instance
    ``target`` names, inside the effect, each such call spending ``budget``.

    A call is made every time its effect runs; a listener's is what the listeners a user
    registers *may* make there, so a checker tries each of :meth:`arguments` wherever the
    model's ``budget`` allows. The runtime does not read listeners: a listener registered there
    may call anything, and what it calls beyond these entries is outside what the models prove.
    """

    id: str
    machine: str
    effect: str
    target: str
    event: str
    values: tuple[Value | None, ...]
    """Each of the event's arguments, in its parameter order: the value the entry fixes, or
    None for :data:`ANY` (every value the parameter takes)."""
    domains: tuple[tuple[Value, ...], ...]
    """Per parameter, the values a listener may pass: the fixed one, or the type's values."""
    arg_text: tuple[tuple[str, str], ...]
    budget: str
    """The model budget each call spends: the environment's same call's (``EVENT``, or
    ``agent.EVENT`` on an agent)."""
    clauses: tuple[str, ...]
    doc: str
    arg_exprs: tuple[Expr | None, ...]
    """Each argument's resolved expression (a constant), or None for :data:`ANY`."""

    def arguments(self) -> tuple[tuple[Value, ...], ...]:
        """Every argument tuple a listener may pass, in the order of the parameters' values."""
        return tuple(itertools.product(*self.domains))

    def __str__(self) -> str:
        args = ", ".join(f"{p}={v}" for p, v in self.arg_text)
        return f"{self.machine}.{self.effect} ~> {self.target}.{self.event}({args})"


@final
@dataclass(frozen=True, slots=True)
class Wiring:
    """Every connection between instances, as ``specs/wiring.toml`` declares it."""

    file: str
    doc: str
    calls: tuple[WiredCall, ...]
    awaits: tuple[WiredAwait, ...]
    listeners: tuple[WiredListener, ...] = ()
    """What the listeners of a notifying effect may call on other instances (none: a model
    may let no listener of that machine's effects in)."""

    def fired_by(self, machine: str, effect: str) -> tuple[WiredCall, ...]:
        """The calls ``machine.effect`` makes, in file order."""
        return tuple(c for c in self.calls if c.machine == machine and c.effect == effect)

    def effects(self, machine: str) -> frozenset[str]:
        """The effects of ``machine`` that fire a call."""
        return frozenset(c.effect for c in self.calls if c.machine == machine)

    def awaiting(self, machine: str, event: str) -> WiredAwait | None:
        return next((a for a in self.awaits if a.machine == machine and a.event == event), None)

    def listening(self, machine: str, effect: str) -> tuple[WiredListener, ...]:
        """What the listeners of ``machine.effect`` may call, in file order."""
        return tuple(x for x in self.listeners if x.machine == machine and x.effect == effect)

    def heard(self, machine: str) -> tuple[str, ...]:
        """The effects of ``machine`` whose listeners the wiring declares, in file order."""
        return tuple(dict.fromkeys(x.effect for x in self.listeners if x.machine == machine))


def load_wiring(
    path: Path, machines: Mapping[str, Machine], clauses: Mapping[str, Clause], display: str
) -> Wiring:
    """Load and validate the wiring at ``path`` against ``machines`` (by table name)."""
    f = _WiringFile(display)
    data = f.keys("", f.read(path), ["wiring"], ["calls", "awaits", "listeners"])
    head = f.keys("[wiring]", data["wiring"], [], ["doc"])
    for role in TARGETS:
        if role not in machines:
            f.fail("[wiring]", f"the wiring connects a machine {echo(role)}; no table names it")
    loader = _Loader(f, machines, clauses)
    calls = _entries(f, data, "calls", loader.call)
    awaits = _entries(f, data, "awaits", loader.wait)
    heard = _entries(f, data, "listeners", loader.listener)
    entries = [
        *(("call", c.id) for c in calls),
        *(("await", a.id) for a in awaits),
        *(("listener", x.id) for x in heard),
    ]
    seen: dict[str, str] = {}
    for kind, ident in entries:
        if ident in seen:
            f.fail(f"{kind} {echo(ident)}", f"the id is used twice (a {seen[ident]} has it too)")
        seen[ident] = kind
    events = [(a.machine, a.event) for a in awaits]
    for machine, event in events:
        if events.count((machine, event)) > 1:
            f.fail(f"await of {machine}.{event}", "the event is awaited twice")
    doc = f.text("[wiring]", head.get("doc", ""), "doc")
    return Wiring(display, doc, calls, awaits, heard)


_ENTRY = re.compile(
    r"(?P<kind>call|await|listener) (?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
)
_ENTRY_INDEXED = re.compile(r"listeners\[(?P<index>[0-9]+)\]")

_T = TypeVar("_T")


class _WiringFile(_File):
    """A wiring's faults name an entry by its id (``listener 'settle.disposes_parent'``) or,
    before its id is read, by its index (``listeners[2]``): both lead back to its line."""

    def _place(self, where: str) -> _Place | None:
        if (m := _ENTRY_INDEXED.fullmatch(where)) is not None:
            return ("listeners", int(m["index"]))
        if (m := _ENTRY.fullmatch(where)) is None:
            return super()._place(where)
        try:
            name = ast.literal_eval(m["name"])
        except (ValueError, SyntaxError):  # shortened by echo(): no longer the id
            return None
        return self._by_id(f"{m['kind']}s", name)


def _entries(
    f: _File, data: Mapping[str, Any], key: str, read: Callable[[int, object], _T]
) -> tuple[_T, ...]:
    """Each entry of the array of tables ``key``, read by ``read(index, body)`` with its faults
    placed at its own line (:meth:`_File.at`), whatever other entry has its id."""
    out = []
    for i, body in enumerate(_array(f, data, key)):
        with f.at(key, i):
            out.append(read(i, body))
    return tuple(out)


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
        if not body.get("clauses"):
            f.fail(where, "missing clause tag (every connection names the clause it implements)")
        tags = f.names(where, body["clauses"], "clauses")
        for tag in tags:
            if tag not in self.clauses:
                meant = did_you_mean(tag, self.clauses)
                f.fail(
                    where, f"unknown clause {echo(tag)} ({meant}see specs/clauses.toml)", "clauses"
                )
            if self.clauses[tag].not_implemented is not None:  # as a table's tag is refused
                f.fail(
                    where,
                    f"clause {echo(tag)} says no row implements it (its not_implemented in "
                    "specs/clauses.toml): drop the tag, or the not_implemented",
                    "clauses",
                )
        return ident, tags, f.text(where, body.get("doc", ""), "doc")

    def _dotted(
        self, where: str, value: object, key: str, machines: Mapping[str, object]
    ) -> tuple[str, str]:
        """``MACHINE.NAME`` split, for ``key`` (``effect`` or ``event``), MACHINE one of
        ``machines``."""
        f = self.f
        text = f.text(where, value, key)
        machine, dot, name = text.partition(".")
        if not dot or machine not in machines:
            meant = did_you_mean(machine, machines)
            f.fail(where, f"{key} {echo(text)} is not MACHINE.{key.upper()} "
                   f"({meant}machines: {known(machines)})", key)  # fmt: skip
        return machine, name

    def _effect(self, where: str, source: Table, machine: str, effect: str) -> EffectSpec:
        spec = source.effects.get(effect)
        if spec is None:
            self.f.fail(
                where,
                f"{machine} has no effect {echo(effect)} "
                f"({did_you_mean(effect, source.effects)}effects: {known(source.effects)})",
                "effect",
            )
        return spec

    def _target(
        self,
        where: str,
        value: object,
        machine: str,
        targets: Mapping[str, Mapping[str, str]],
        verb: str,
    ) -> tuple[str, Table]:
        """The target ``value`` names from an effect of ``machine``, and the table it runs."""
        target = self.f.text(where, value, "target")
        if target not in targets[machine]:
            self.f.fail(
                where,
                f"an effect of {machine} cannot {verb} target {echo(target)} "
                f"({did_you_mean(target, targets[machine])}targets: {known(targets[machine])})",
                "target",
            )
        return target, self.machines[targets[machine][target]].table

    def _event(self, where: str, value: object, target: str, aimed: Table) -> str:
        event = self.f.text(where, value, "event")
        if event not in aimed.events:
            self.f.fail(
                where,
                f"target {target} runs {aimed.name}, which has no event {echo(event)} "
                f"({did_you_mean(event, aimed.events)}events: {known(aimed.events)})",
                "event",
            )
        return event

    def call(self, index: int, body: object) -> WiredCall:
        f = self.f
        where = f"calls[{index}]"
        body = f.keys(
            where, body, ["id", "effect", "target", "event"],
            ["args", "only", "refused", "clauses", "doc"],
        )  # fmt: skip
        where = f"call {echo(body['id'])}" if isinstance(body["id"], str) else where
        ident, tags, doc = self._head(where, body)
        machine, effect = self._dotted(where, body["effect"], "effect", TARGETS)
        source = self.machines[machine].table
        spec = self._effect(where, source, machine, effect)
        target, aimed = self._target(where, body["target"], machine, TARGETS, "reach")
        event = self._event(where, body["event"], target, aimed)
        only = body.get("only")
        if only is not None and (machine != "activation" or only not in ("root", "child")):
            f.fail(
                where,
                f"only must be 'root' or 'child', for an activation's effect, not {echo(only)}",
            )
        refused = body.get("refused", "never")
        if refused not in ("never", "caller"):
            f.fail(where, f"refused must be 'never' or 'caller', not {echo(refused)}", "refused")
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
        machine, event = self._dotted(where, body["event"], "event", TARGETS)
        table = self.machines[machine].table
        spec = table.events.get(event)
        if spec is None:
            f.fail(
                where,
                f"{machine} has no event {echo(event)} "
                f"({did_you_mean(event, table.events)}events: {known(table.events)})",
                "event",
            )
        if spec.kind != "internal":
            f.fail(
                where,
                f"{machine}.{event} is an input event: only the runtime's own (internal) "
                "events wait",
                "event",
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

    def listener(self, index: int, body: object) -> WiredListener:
        f = self.f
        where = f"listeners[{index}]"
        body = f.keys(
            where, body, ["id", "effect", "target", "event", "budget"], ["args", "clauses", "doc"]
        )
        where = f"listener {echo(body['id'])}" if isinstance(body["id"], str) else where
        ident, tags, doc = self._head(where, body)
        machine, effect = self._dotted(where, body["effect"], "effect", LISTENER_TARGETS)
        source = self.machines[machine].table
        if not self._effect(where, source, machine, effect).notifies:
            notifying = [e for e, spec in source.effects.items() if spec.notifies]
            f.fail(
                where,
                f"{machine}.{effect} does not notify: listeners run only inside an effect with "
                f"notifies = true ({did_you_mean(effect, notifying)}notifying: {known(notifying)})",
                "effect",
            )
        target, aimed = self._target(where, body["target"], machine, LISTENER_TARGETS, "call")
        event = self._event(where, body["event"], target, aimed)
        spec = aimed.events[event]
        if spec.kind != "input":
            f.fail(
                where,
                f"{aimed.name}.{event} is internal: a listener calls what a user may call "
                "(an input event)",
                "event",
            )
        scope = Scope({}, {}, {}, _symbols(aimed))
        exprs, text = self._arguments(where, body.get("args", {}), spec.params, scope, star=True)
        values = tuple(None if e is None else compile_expr(e, {}, {}, {})((), ()) for e in exprs)
        domains = tuple(
            tuple(t.values) if v is None else (v,)
            for v, (_, t) in zip(values, spec.params, strict=True)
        )
        names = (p for p, _ in spec.params)
        self._door_naming(where, target, dict(zip(names, domains, strict=True)))
        budget = f.text(where, body["budget"], "budget")
        spends = f"agent.{event}" if aimed.name == self.machines["agent"].table.name else event
        if budget != spends:
            f.fail(
                where,
                f"budget {echo(budget)} is not what the call spends: a listener's call spends "
                f"the budget of the environment's same call ({did_you_mean(budget, [spends])}"
                f"budget: {spends})",
                "budget",
            )
        return WiredListener(
            ident, machine, effect, target, event, values, domains, text, budget, tags, doc,
            tuple(exprs),
        )  # fmt: skip

    def _door_naming(
        self, where: str, target: str, domains: Mapping[str, tuple[Value, ...]]
    ) -> None:
        """A door call of a listener names a node exactly when its target is ``below_parent``:
        that call needs ``parent = activation`` (the door hands it on to the parent's row), and
        a call on the door's own (``door``) may not name an activation, which it would hand on
        to no node."""
        f = self.f
        parent = domains.get("parent")
        if target == "below_parent" and parent != (NAMED_PARENT,):
            f.fail(
                where,
                "target below_parent calls the door naming the parent: its event needs "
                f"parent = {NAMED_PARENT}"
                + ("" if parent is None else f", not {' or '.join(map(str, parent))}"),
                "args" if parent is not None else "event",
            )
        if target == "door" and parent is not None and NAMED_PARENT in parent:
            f.fail(
                where,
                f"target door makes the door's own call, which names no node: parent = "
                f"{NAMED_PARENT} is target below_parent's",
                "args",
            )

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
            f.fail(
                where, f"args must be a table of PARAMETER = EXPRESSION, not {echo(given)}", "args"
            )
        names = [p for p, _ in params]
        for key in given:
            if key not in names:
                f.fail(where, f"args names {echo(key)}, which is no parameter (parameters: "
                       f"{known(names) or 'none'})", "args")  # fmt: skip
        exprs: list[Expr | None] = []
        text: list[tuple[str, str]] = []
        for name, t in params:
            if name not in given:
                f.fail(where, f"args gives no value for the parameter {echo(name)}", "args")
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
            f.fail(where, f"{key}: {e} in {echo(text)}", key.partition(".")[0])
        if not wanted.admits(t):
            f.fail(
                where,
                f"{key}: type mismatch: expected {wanted}, found {t} in {echo(text)}",
                key.partition(".")[0],
            )
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
