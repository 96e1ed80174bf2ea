"""The tables as data for ports, and as a listing for people.

:func:`spec_to_json` is the export port authors consume (``fsm-core spec --json``); its shape is
pinned by ``specs/schema.json`` (JSON Schema draft 2020-12) and named by ``format`` and
``version``. :func:`spec_to_text` is the listing ``fsm-core spec`` prints::

    >>> from fsm_core.table import load_spec
    >>> spec = load_spec()
    >>> doc = spec_to_json(spec, ["agent"])
    >>> doc["format"], doc["version"], list(doc["machines"]), doc["wiring"]
    ('fsm-core/spec', 4, ['agent'], None)
    >>> doc["machines"]["agent"]["rows"][0]["guard"]["text"]
    'wake and not scheduled and not shut'
    >>> doc["machines"]["agent"]["rows"][0]["guard"]["expr"]["args"][1]
    {'not': {'var': 'shut'}}
    >>> [e["requires"]["text"] for e in doc["machines"]["agent"]["effects"][:2]]
    ['pending and (lane == next_turn or holder == live)', 'scheduled']
    >>> [(s["id"], s["unchanged"]) for s in doc["machines"]["agent"]["step_invariants"]]
    [('reason_first_wins', 'reason')]
    >>> wiring = spec_to_json(spec, list(spec.machines))["wiring"]
    >>> call = wiring["calls"][1]
    >>> call["id"], call["effect"], call["target"], call["event"]
    ('close.cancels_agent', {'machine': 'activation', 'name': 'cancel_agent'}, 'agent', 'cancel')
    >>> [(a["name"], a["value"]["expr"]) for a in call["args"]]
    [('cause', {'param': 'cause'}), ('keep_inbox', {'lit': True})]

``wiring`` is ``specs/wiring.toml`` as data (how instances meet): every call, await and listener,
with its arguments parsed like any other expression. It is exported whole when every machine it
connects is exported (``activation``, ``admission`` and ``agent``), else it is ``null``: a part
of it would name instances of machines the export does not hold.

The export carries only the clauses the chosen machines (and the wiring, when exported) cite, in
catalogue order, so every clause in it is one a row, pair, invariant, step invariant, call or
await or listener names (``specs/clauses.toml`` holds the rest). Every expression appears twice: as
``text`` (the table's own words where it has them, else the canonical form) and as ``expr``, the
resolved tree a port evaluates without parsing anything. Keys come in a fixed order and lists in
table order, so the same tables give the same bytes.

Version 2 added each effect's contract, ``requires`` (``{text, expr}``, or ``null`` for an effect
without one; its ``param`` nodes name the effect's own parameters), and each machine's
``step_invariants`` (``{id, unchanged, while, doc, clauses}``). The schema admits no key it does
not name, so this is a breaking change: a port validating against version 1 rejects a version 2
export, and must learn both fields (and may assert them) before it accepts version 2.

Version 3 added the top-level ``wiring`` (an object, or ``null``) and the clauses it cites. A
port that hosts one machine at a time may ignore it, but must accept the key.

Version 4 added the wiring's ``listeners`` (what the listeners of a notifying effect may call on
another instance: ``{id, effect, target, event, args, budget, clauses, doc}``, an argument
``"*"`` for any value) and ``listener_targets`` (the machine each listener target runs), which
the checker used to declare in Python.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from typing import Final

from fsm_core.table import Machine, Spec, WiredAwait, WiredCall, WiredListener, Wiring
from fsm_core.table._expr import (
    BOOL,
    Assign,
    Block,
    Call,
    Expr,
    Stmt,
    Type,
    show,
    to_json,
    unparse,
    unparse_stmt,
)
from fsm_core.table._table import PairRule, Table
from fsm_core.table._wiring import ANY as _ANY
from fsm_core.table._wiring import FACTS as _FACTS
from fsm_core.table._wiring import LISTENER_TARGETS as _LISTENER_TARGETS
from fsm_core.table._wiring import TARGETS as _TARGETS

__all__ = ["FORMAT", "SEMANTICS", "VERSION", "spec_to_json", "spec_to_text"]

FORMAT: Final = "fsm-core/spec"
# Bumped whenever a field changes meaning or disappears; adding a field is also a bump, since
# the schema is strict (a port validating against version 1 rejects what it does not know).
VERSION: Final = 4  # 2: `requires`, `step_invariants`; 3: `wiring`; 4: its `listeners`

SEMANTICS: Final = (
    "A row handles event `on` in each state of `from` whose `guard` holds on the state as it is "
    "when the event fires; a valid table never enables two rows together. A row with a `reject` "
    "reason refuses the event and changes nothing. Otherwise the state variable moves to `to` "
    "first (null: it stays), then `do` runs in order: `assign` sets a variable, `call` performs "
    "an effect with its arguments evaluated when the call is reached, and a `when` block tests "
    "its condition once, when it is reached, and runs its body iff it holds. Each statement "
    "sees the state left by the ones before it, including whatever listeners did re-entrantly "
    "inside an earlier effect with `notifies: true`. A (state, event) pair with no row is listed "
    "under `ignored` (nothing happens) or `rejected` (refused with `why`). When a pair has rows "
    "but no guard holds, the event is not enabled: for an `input` event this cannot happen in a "
    "state that satisfies the invariants; an `internal` event fired then is a runtime bug. "
    "An effect's `requires`, when not null, holds whenever the effect runs: evaluated on the "
    "state as it is at that moment (the statements before it and any re-entrant listeners "
    "included), with each `param` bound to the argument the call passes. A port may assert it "
    "before performing the effect. A step invariant says that variable `unchanged` keeps its "
    "value between any two successive moments a listener can observe, namely each effect with "
    "`notifies: true` (as it runs) and the end of each step (an event's handling, with "
    "everything listeners did inside it), whenever `while` holds at both moments. Invariants "
    "constrain single states; step invariants constrain the change between two observed ones."
)

# How the wiring's entries run (SEMANTICS.md, "How instances meet", says it in full).
_WIRING_SEMANTICS: Final = (
    "A call runs each time an instance of `effect.machine` performs the effect `effect.name`: "
    "once the effect is recorded (and before the listeners of an effect with `notifies: true` "
    "run), `event` is fired with `args` on each instance `target` names, in that order, "
    "synchronously; each fire runs its whole row, the calls its own effects make included, "
    "before the next begins, and the calls of one effect are made in the order of `calls`. "
    "The calling row then goes on, on the state the calls left. `targets` says which machine "
    "each target runs. An argument is evaluated as its call is made, each `param` bound to the "
    "effect's argument of that name or to the fact of that name (`facts`, known by the target "
    "it names). `only` restricts a call to an activation that is a `root` (its parent agent is "
    "host-owned) or a `child` (its parent is an activation); otherwise the call names no "
    "instance. A call is refused when the target's table refuses the event (`rejected` or "
    "`not-enabled`; an `ignored` pair is no refusal). `refused: never` is the tables' promise "
    "that no refusal happens there: a refused call changes nothing and the calling row goes on, "
    "and a host that meets one reports it as a bug once the outermost row ran to its end. "
    "`refused: caller` makes the refusal the caller's: the call that began the step is refused "
    "whole, with that refusal, and nothing it did stays done. An await's `event` is an internal "
    "event of `event.machine`, fired as a step of its own, never inside another step: it may "
    "fire only while the state of the instance `target` names satisfies `until` (its `var` and "
    "`def` nodes are that instance's), with each argument equal to its value on that state, or, "
    'for "*", any value of the parameter\'s type. An await says when the event may fire; when '
    "a runtime fires it is SEMANTICS.md's section 7. A listener is no call: it says what the "
    "listeners a user registers on the notifying effect `effect` may do inside it, namely fire "
    '`event` with `args` ("*": any value of the parameter\'s type) on the instance `target` '
    "names (`listener_targets` says which machine it runs), as a user's same call would, "
    "spending the model budget `budget`; a checker explores each such call wherever a model "
    "lets that effect's listeners in."
)

# The same, short, for the listing's reader (who sees rows, not JSON keys).
_HOW_A_ROW_RUNS: Final = (
    "How a row runs: its [guard] is tested on the state as the event fires (at most one row is "
    "enabled); the state moves to the target; then the numbered effects run in order, each "
    "seeing the state left by the ones before it and by listeners that re-entered during an "
    "earlier (notifies) effect. A `when` block tests its condition once, when it is reached. "
    "An effect's `requires` holds whenever it runs, with its arguments bound. A step invariant "
    "`v unchanged while p` says v keeps its value between two moments a listener can observe "
    "(each notifies effect, each step's end) whenever p holds at both."
)

_WIDTH: Final = 100


# --- JSON ----------------------------------------------------------------------------------------


def spec_to_json(spec: Spec, machines: Sequence[str]) -> dict[str, object]:
    """The export of ``machines`` (in the order given), with the clauses they cite.

    >>> from fsm_core.table import load_spec
    >>> sorted(spec_to_json(load_spec(), ["agent"]))
    ['clauses', 'format', 'machines', 'version', 'wiring']

    Raises :class:`KeyError` naming an unknown machine.
    """
    chosen = _choose(spec, machines)
    wiring = _wiring_shown(spec, chosen)
    cited = {tag for m in chosen for tag in _cited(m.table)}
    cited |= {tag for entry in _wired(wiring) for tag in entry.clauses}
    return {
        "format": FORMAT,
        "version": VERSION,
        "clauses": {
            cid: {"source": c.source, "quote": _prose(c.quote), "summary": _prose(c.summary)}
            for cid, c in spec.clauses.items()
            if cid in cited
        },
        "machines": {m.name: _machine_json(m.table) for m in chosen},
        "wiring": _wiring_json(wiring, spec) if wiring is not None else None,
    }


def _machine_json(t: Table) -> dict[str, object]:
    return {
        "name": t.name,
        "title": t.title,
        "doc": _prose(t.doc),
        "file": t.file,
        "semantics": SEMANTICS,
        "state_var": t.state_var,
        "initial": t.initial,
        "states": [{"name": s.name, "doc": _prose(s.doc)} for s in t.states],
        # Every enumeration, the state variable's included (its values are the states).
        "types": {name: list(ty.values) for name, ty in t.types.items() if ty.kind == "enum"},
        "variables": [
            {
                "name": v.name,
                "type": v.type.name,
                "domain": list(v.type.values),
                "init": v.init,
                "doc": _prose(v.doc),
            }
            for v in t.variables
        ],
        "definitions": [
            {"name": d.name, "text": _prose(d.text), "expr": to_json(d.expr), "doc": _prose(d.doc)}
            for d in t.defs.values()
        ],
        "events": [
            {"name": e.name, "kind": e.kind, "params": _params(e.params), "doc": _prose(e.doc)}
            for e in t.events.values()
        ],
        "effects": [
            {
                "name": e.name,
                "params": _params(e.params),
                "notifies": e.notifies,
                "requires": (
                    _expr(e.requires, e.requires_text) if e.requires is not None else None
                ),
                "doc": _prose(e.doc),
            }
            for e in t.effects.values()
        ],
        "rows": [
            {
                "id": r.id,
                "on": r.event,
                "from": list(r.sources),
                "guard": _expr(r.guard, r.guard_text),
                "to": r.target,
                "reject": r.reject,
                "do": [_stmt(s) for s in r.effects],
                "clauses": list(r.clauses),
                "doc": _prose(r.doc),
            }
            for r in t.rows
        ],
        "ignored": [_pair(p) for p in t.pair_rules if p.kind == "ignored"],
        "rejected": [_pair(p) for p in t.pair_rules if p.kind == "rejected"],
        "invariants": [
            {
                "id": i.id,
                "holds": _expr(i.expr, i.text),
                "doc": _prose(i.doc),
                "clauses": list(i.clauses),
            }
            for i in t.invariants
        ],
        "step_invariants": [
            {
                "id": s.id,
                "unchanged": s.var,
                "while": _expr(s.when, s.text),
                "doc": _prose(s.doc),
                "clauses": list(s.clauses),
            }
            for s in t.stable
        ],
    }


def _wiring_json(w: Wiring, spec: Spec) -> dict[str, object]:
    door = spec.machines["admission"].table
    facts = []
    for name, (knower, door_type) in _FACTS.items():
        t = BOOL if door_type is None else door.types[door_type]
        facts.append({"name": name, "target": knower, "type": t.name, "domain": list(t.values)})
    return {
        "file": w.file,
        "doc": _prose(w.doc),
        "semantics": _WIRING_SEMANTICS,
        "targets": {machine: dict(targets) for machine, targets in _TARGETS.items()},
        "facts": facts,
        "calls": [_call_json(c) for c in w.calls],
        "awaits": [_await_json(a) for a in w.awaits],
        "listener_targets": {m: dict(targets) for m, targets in _LISTENER_TARGETS.items()},
        "listeners": [_listener_json(x) for x in w.listeners],
    }


def _args_json(
    texts: Sequence[tuple[str, str]], exprs: Sequence[Expr | None]
) -> list[dict[str, object]]:
    """A wiring entry's arguments, each by name: its expression, or ``*`` (None: any value)."""
    return [
        {"name": name, "value": _ANY if e is None else _expr(e, text)}
        for (name, text), e in zip(texts, exprs, strict=True)
    ]


def _call_json(c: WiredCall) -> dict[str, object]:
    return {
        "id": c.id,
        "effect": {"machine": c.machine, "name": c.effect},
        "target": c.target,
        "only": c.only,
        "event": c.event,
        "args": _args_json(c.arg_text, c.arg_exprs),
        "refused": c.refused,
        "clauses": list(c.clauses),
        "doc": _prose(c.doc),
    }


def _await_json(a: WiredAwait) -> dict[str, object]:
    return {
        "id": a.id,
        "event": {"machine": a.machine, "name": a.event},
        "target": a.target,
        "until": _expr(a.until_expr, a.until_text),
        "args": _args_json(a.arg_text, a.arg_exprs),
        "clauses": list(a.clauses),
        "doc": _prose(a.doc),
    }


def _listener_json(x: WiredListener) -> dict[str, object]:
    return {
        "id": x.id,
        "effect": {"machine": x.machine, "name": x.effect},
        "target": x.target,
        "event": x.event,
        "args": _args_json(x.arg_text, x.arg_exprs),
        "budget": x.budget,
        "clauses": list(x.clauses),
        "doc": _prose(x.doc),
    }


def _params(params: Iterable[tuple[str, Type]]) -> list[dict[str, object]]:
    return [{"name": p, "type": t.name, "domain": list(t.values)} for p, t in params]


def _expr(e: Expr, text: str | None = None) -> dict[str, object]:
    """``{text, expr}``: the table's words when it kept them, else the canonical text.

    Guards, definitions, invariants, step invariants' ``while``, effects' ``requires`` and the
    wiring's arguments and ``until`` keep the words a reader finds in the TOML; statement values
    and arguments are stored parsed only, so theirs are :func:`unparse`'s. Either way the text
    parses back to ``expr`` (``tests/test_export.py`` checks every one).
    """
    return {"text": _prose(text) if text is not None else unparse(e), "expr": to_json(e)}


def _stmt(s: Stmt) -> dict[str, object]:
    match s:
        case Assign(var=var, value=value):
            return {"assign": var, "value": _expr(value)}
        case Call(effect=name, args=args):
            return {"call": name, "args": [_expr(a) for a in args]}
        case Block(when=when, body=body):
            return {"when": _expr(when), "do": [_stmt(b) for b in body]}
    raise AssertionError(s)


def _pair(p: PairRule) -> dict[str, object]:
    return {"on": list(p.events), "in": list(p.states), "why": p.why, "clauses": list(p.clauses)}


# --- text ----------------------------------------------------------------------------------------


def spec_to_text(spec: Spec, machines: Sequence[str]) -> str:
    """The listing ``fsm-core spec`` prints: an overview, then each machine in full.

    A row reads ``cancel.turn  running|cancelling --cancel(cause, keep_inbox) [holder == live]-->
    cancelling``, then its numbered effects in the order they run and its clause tags.
    Raises :class:`KeyError` naming an unknown machine.
    """
    chosen = _choose(spec, machines)
    lines = _overview(spec, chosen)
    for m in chosen:
        lines += ["", "", *_listing(m.table)]
    wiring = _wiring_shown(spec, chosen)
    if wiring is not None:
        lines += ["", "", *_wiring_listing(wiring)]
    return "\n".join(lines) + "\n"


def _overview(spec: Spec, chosen: Sequence[Machine]) -> list[str]:
    rows = sum(len(m.table.rows) for m in chosen)
    invariants = sum(len(m.table.invariants) for m in chosen)
    step_invariants = sum(len(m.table.stable) for m in chosen)
    wiring = _wiring_shown(spec, chosen)
    cited = {tag for m in chosen for tag in _cited(m.table)}
    cited |= {tag for entry in _wired(wiring) for tag in entry.clauses}
    plural = "machine" if len(chosen) == 1 else "machines"
    width = max((len(m.name) for m in chosen), default=0)
    connected = (
        [
            f"  connected by {wiring.file}: {_count(len(wiring.calls), 'call')}, "
            f"{_count(len(wiring.awaits), 'await')}, {_count(len(wiring.listeners), 'listener')} "
            "(listed last)"
        ]
        if wiring is not None
        else []
    )
    return [
        f"fsm-core spec: {len(chosen)} {plural} from {spec.root.name}/, {rows} rows, "
        f"{invariants} invariants, {_count(step_invariants, 'step invariant')}, "
        f"{len(cited)} seed clauses cited",
        *(f"  {m.name:<{width}}  {m.table.title}" for m in chosen),
        *connected,
        "",
        *_wrap(_HOW_A_ROW_RUNS, ""),
        "",
        "Clause tags name seed sentences and pinned decisions in specs/clauses.toml.",
        f"Ports: `fsm-core spec --json` prints this as JSON (format {FORMAT} v{VERSION}, "
        "specs/schema.json).",
    ]


def _listing(t: Table) -> list[str]:
    out = [f"== {t.name}: {t.title}  ({t.file})", *_wrap(t.doc, "   ")]

    out += ["", f"states ({t.state_var}; initial {t.initial})"]
    width = max(len(s.name) for s in t.states)
    for s in t.states:
        lines = _wrap(s.doc, " " * (width + 4)) or [""]
        out.append(f"  {s.name:<{width}}  {lines[0].lstrip()}".rstrip())
        out += lines[1:]

    out += ["", "variables (name: type = initial value)"]
    for v in t.variables:
        out.append(f"  {v.name}: {_type_text(v.type)} = {show(v.init)}")
        out += _wrap(v.doc, "      ")

    if t.defs:
        out += ["", "definitions"]
        for d in t.defs.values():
            out.append(f"  {d.name} := {_prose(d.text)}")
            out += _wrap(d.doc, "      ")

    if t.effects:
        out += [
            "",
            "effects (notifies: listeners run inside it and may re-enter; "
            "requires: holds whenever it runs)",
        ]
        for e in t.effects.values():
            flag = "  (notifies)" if e.notifies else ""
            if e.requires_text is not None:
                flag += f"  requires: {_prose(e.requires_text)}"
            out.append(f"  {e.name}({_signature(e.params)}){flag}")
            out += _wrap(e.doc, "      ")

    out += ["", "rows, by event ([guard]; effects run in order after the state moves)"]
    for event in t.events.values():
        out += ["", f"{event.name}({_signature(event.params)})  [{event.kind}]"]
        out += _wrap(event.doc, "  ")
        for r in (r for r in t.rows if r.event == event.name):
            out.append("")
            names = ", ".join(p for p, _ in event.params)
            arrow = f"--{event.name}({names})" if names else f"--{event.name}"
            guard = f" [{_prose(r.guard_text)}]" if r.guard_text is not None else ""
            if r.reject is not None:
                to = f'rejected: "{r.reject}"'
            else:
                to = r.target if r.target is not None else "(stays)"
            out.append(f"  {r.id}  {'|'.join(r.sources)} {arrow}{guard}--> {to}")
            out += _wrap(r.doc, "      ")
            out += _effect_lines(t, r.effects, "      ", "")
            out.append(f"      clauses: {', '.join(r.clauses)}")

    for kind, says in (("ignored", "nothing happens"), ("rejected", "refused with the reason")):
        rules = [p for p in t.pair_rules if p.kind == kind]
        if rules:
            out += ["", f"{kind} pairs without a row ({says})"]
            for p in rules:
                out.append(f"  {'|'.join(p.events)} in {'|'.join(p.states)}")
                why = f'"{p.why}"' if kind == "rejected" else p.why
                out += _wrap(why, "      ")
                out.append(f"      clauses: {', '.join(p.clauses)}")

    out += ["", "invariants (hold in every reachable state)"]
    for i in t.invariants:
        out.append(f"  {i.id}: {_prose(i.text)}")
        out += _wrap(i.doc, "      ")
        out.append(f"      clauses: {', '.join(i.clauses)}")

    if t.stable:
        out += [
            "",
            "step invariants (the variable keeps its value between observed moments while the "
            "predicate holds)",
        ]
        for step in t.stable:
            out.append(f"  {step.id}: {step.var} unchanged while {_prose(step.text)}")
            out += _wrap(step.doc, "      ")
            out.append(f"      clauses: {', '.join(step.clauses)}")
    return out


def _wiring_listing(w: Wiring) -> list[str]:
    """The wiring, one line an entry: ``ID  MACHINE.EFFECT -> TARGET.EVENT(ARGS)`` for a call,
    ``ID  TARGET until PREDICATE -> MACHINE.EVENT(ARGS)`` for an await,
    ``ID  MACHINE.EFFECT ~> TARGET.EVENT(ARGS)  [spends BUDGET]`` for a listener."""
    out = [f"== wiring: how instances meet  ({w.file})", *_wrap(w.doc, "   ")]
    out += [
        "",
        "calls (in file order; each fires inside its effect, on each instance its target names)",
    ]
    for c in w.calls:
        marks = [f"{c.only} only"] if c.only is not None else []
        marks += ["refused: caller"] if c.refused == "caller" else []
        flag = f"  [{'; '.join(marks)}]" if marks else ""
        out.append(f"  {c.id}  {c}{flag}")
    out += [
        "",
        "awaits (each fires as a step of its own while its target's state allows; *: any value)",
    ]
    for a in w.awaits:
        args = ", ".join(f"{p}={_prose(v)}" for p, v in a.arg_text)
        out.append(
            f"  {a.id}  {a.target} until {_prose(a.until_text)} -> {a.machine}.{a.event}({args})"
        )
    if w.listeners:
        out += [
            "",
            "listeners (what a listener of the effect may call, when a model lets it in; *: any "
            "value)",
        ]
        out += [f"  {x.id}  {x}  [spends {x.budget}]" for x in w.listeners]
    return out


def _effect_lines(t: Table, stmts: Sequence[Stmt], indent: str, prefix: str) -> list[str]:
    out: list[str] = []
    for n, s in enumerate(stmts, 1):
        number = f"{prefix}{n}."
        match s:
            case Block(when=when, body=body):
                out.append(f"{indent}{number} when {unparse(when)}:")
                out += _effect_lines(t, body, indent + " " * (len(number) + 1), number)
            case Call(effect=name) if t.effects[name].notifies:
                out.append(f"{indent}{number} {unparse_stmt(s)}  (notifies)")
            case _:
                out.append(f"{indent}{number} {unparse_stmt(s)}")
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _signature(params: Iterable[tuple[str, Type]]) -> str:
    return ", ".join(f"{p}: {_domain(t)}" for p, t in params)


def _type_text(t: Type) -> str:
    """``bool``, ``int[0..3]``, or an enumeration's name and values."""
    return f"{t.name} {_domain(t)}" if t.kind == "enum" else t.name


def _domain(t: Type) -> str:
    if t.kind == "enum":
        return "{" + ", ".join(str(v) for v in t.values) + "}"
    return t.name


def _wrap(text: str, indent: str) -> list[str]:
    prose = _prose(text)
    if not prose:
        return []
    return textwrap.wrap(
        prose, _WIDTH, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
    )


# --- shared --------------------------------------------------------------------------------------


def _choose(spec: Spec, machines: Sequence[str]) -> list[Machine]:
    for name in machines:
        if name not in spec.machines:
            known = ", ".join(spec.machines)
            raise KeyError(f"unknown machine {name!r} (machines: {known})")
    return [spec.machines[name] for name in dict.fromkeys(machines)]


def _wiring_shown(spec: Spec, chosen: Sequence[Machine]) -> Wiring | None:
    """The spec's wiring when every machine it connects is chosen, else None."""
    names = {m.name for m in chosen}
    return spec.wiring if spec.wiring is not None and set(_TARGETS) <= names else None


def _wired(w: Wiring | None) -> tuple[WiredCall | WiredAwait | WiredListener, ...]:
    return () if w is None else (*w.calls, *w.awaits, *w.listeners)


def _cited(t: Table) -> Iterable[str]:
    for r in t.rows:
        yield from r.clauses
    for p in t.pair_rules:
        yield from p.clauses
    for i in t.invariants:
        yield from i.clauses
    for s in t.stable:
        yield from s.clauses


def _prose(text: str) -> str:
    """Table prose on one line: TOML multi-line strings wrap where the author's editor did."""
    return " ".join(text.split())
