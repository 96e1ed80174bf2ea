"""Conformance vectors: what the tables do, as data a port replays without Python.

``fsm-core vectors`` writes one JSONL file per machine of the default models
(``specs/vectors/<machine>.jsonl``) and the export of those machines (``tables.json``, the
``fsm-core spec --json`` format, with the model-only tables such as the credit window too, and
``specs/wiring.toml``, which connects the shipped ones).
``specs/vectors.schema.json`` describes a line; ``specs/SEMANTICS.md`` says what a port must do
with one. Every line but the header is one *vector*, a question with its answer:

- ``fire``: from a state (or, for a tree of activations, the state of each instance), fire an
  event with arguments, running a *script*: at the n-th effect of the step (counting every
  effect, nested ones included, in the order performed) a listener or the tree's wiring
  fires an event (each entry says which, ``by``), or the wiring creates an instance. The
  answer is the call tree (the row each call took, its effects rendered ``name(args)``, the
  calls made inside each effect) and what the step changed (a created instance always, ``{}``
  when it stays initial), or the refusal (``rejected`` or ``not-enabled``, with its exact
  message, or ``bad-call``), or the fault of a broken ``requires`` (the effect named, not
  performed); and the script entries the step never reached (``unreached``), if any. States
  are sparse: only the values that differ from the initial state.
- ``holds``: a predicate of the table (an effect's ``requires``, an invariant, a step
  invariant, a definition) evaluated on a state (and arguments, or a second state): true or
  false.

What they cover, and where each comes from:

- ``step/...``: every event with every argument tuple, from every state of the machine the
  checker reached in the default models (for a table only table models check, the states a
  table model of it reaches at its declared constants). A row or a refusal entry no reached
  state exercises is taken from the first state of the domain that does, preferring states the
  invariants admit.
- ``holds/...``: for each predicate a case where it holds and one where it fails, when the
  domain has one, from the reached states first.
- ``call/...``: calls an implementation must refuse before anything changes (``bad-call``),
  and how a JSON number types (``call/EVENT/PARAM/integral``: ``1.0`` is an integer;
  ``fraction`` and ``boolean``: ``1.5`` and ``true`` are not).
- ``fault/...``: for each contract some row breaks from some state of the domain, the first
  such step; and listener plans that break one (:data:`BROKEN`).
- ``script/unreached``: a script entry at an ordinal the step never reaches.
- ``story/...``: the hand-written stories of :mod:`fsm_core.tools._stories`, step by step,
  with the state each notification showed its listeners.
- ``scenario/<model>/...``: for each move of a composed default model (an agent with
  re-entrant listeners, a tree of activations) that calls anything inside an effect, and each
  distinct outcome of it, one vector from the first state the checker found it in, with the
  listener or wiring calls as the script: so every edge the checker proves is an instance of
  some vector (a move's plain steps are the ``step`` vectors). A tree's door runs another
  table: a move the door begins is replayed as the node's call the door makes inside it, and
  a call a node makes on the door (a root's settlement notice) is left out of the node's
  script; the door's own rows are the admission vectors'. A tree's move that creates a child
  (an admission, whose wiring calls no activation) is one of these too.
- pins (:meth:`_Builder.pins`): vectors for the rules a port misreads while passing nearly
  everything else (``ports/js/misread.js`` counts the vectors each misreading fails):
  ``scenario/<model>/observed/...`` (a scenario with the state each notification showed),
  ``call/<event>/true/...`` and ``call/<event>/refused/...`` (bad calls).

:func:`generate` prints what is covered and by how much; every row, refusal entry, ignored
entry, contract and invariant must be, every move and creation of the models, each breakable
contract's fault, each integer parameter's typing and an unreached script entry, or the
command fails. ``--replay CMD`` runs a port's replayer on the files (:mod:`._replay`, which
treats it as untrusted input).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from fsm_core._errors import FsmError, NotEnabled, Rejected, SpecError, echo, shown
from fsm_core._options import positive_seconds
from fsm_core._paths import models_dir, specs_dir
from fsm_core.check import Model, load_model
from fsm_core.check._composed._compose import Composition, Engine
from fsm_core.check._moves import Move
from fsm_core.check._reactions import listened as heard_effects
from fsm_core.check._system import compose
from fsm_core.export import spec_to_json
from fsm_core.table import (
    Clause,
    Effect,
    Machine,
    Spec,
    Wiring,
    load_clauses,
    load_spec,
    load_table,
)
from fsm_core.table._expr import Block, Call, Stmt, Value
from fsm_core.table._load import read_toml
from fsm_core.table._machine import REFUSED
from fsm_core.tools._replay import REASON_SHOWN, REPLAY_TIMEOUT, Failure, replay
from fsm_core.tools._stories import STORIES, Do, Listen, Story

__all__ = ["FORMAT", "VERSION", "configure", "generate", "render_vectors", "run"]

FORMAT: Final = "fsm-core/vectors"
VERSION: Final = 2
"""2: script entries say who made each call (``by``); a step may end in a ``fault``; a vector
records the script entries its step never reached (``unreached``)."""
TABLES: Final = "tables.json"
COMMAND: Final = "fsm-core vectors"
CREATES: Final = "admit_child"
"""The one effect that creates an instance (a tree's child), in the initial state."""
SHOWN: Final = 20
"""The most failures ``--replay`` prints for one file (a broken port fails thousands)."""

Json = dict[str, Any]
State = tuple[Value, ...]


class VectorError(FsmError):
    """The vectors cannot be generated: a model does not hold, or a replay disagrees with the
    checker (a bug of the generator or the checker, never of a port)."""


class _Fault(VectorError):
    """An effect's ``requires`` failed as it was about to run (SEMANTICS.md, "Contracts"): the
    step stops there, the effect not performed. A vector that expects it says so (``fault``);
    anywhere else it is a bug of the tables or of the generator."""

    def __init__(self, effect: str) -> None:
        super().__init__(f"the requires of {effect} fails as it is about to run")
        self.effect = effect


# --- what the vectors cover ----------------------------------------------------------------------


@dataclass(slots=True)
class Subject:
    """One machine the vectors cover, and the default models that explore it."""

    machine: Machine
    clauses: Mapping[str, Clause]
    table: str
    """The table's file as the export names it (``specs/agent.toml``)."""
    composed: list[Model] = field(default_factory=list)
    """Default models that compose the table (an agent, a tree) at its declared constants."""
    models: list[str] = field(default_factory=list)
    """Every default model's file that uses the table, for the header."""


def subjects(specs: Path | None = None) -> list[Subject]:
    """The machines of the default models, in model-file order; each table once."""
    spec = load_spec(specs)
    root = models_dir()
    found: dict[str, Subject] = {}
    for path in sorted(root.glob("*.toml")):
        display = f"{root.name}/{path.name}"
        declared = read_toml(path, display).get("model")
        if isinstance(declared, dict) and declared.get("tier") == "bench":
            continue  # not a default model: loading it would prove its table for nothing
        model = load_model(path, display, specs=specs)  # refuses a malformed file, naming it
        assert isinstance(declared, dict)
        table_path = path.parent / str(declared["table"])
        name = model.machine.name
        if table_path.parent.name == "specs":
            machine, clauses = spec.machines[name], spec.clauses
        else:
            clauses = load_clauses(table_path.parent / "clauses.toml")
            machine = load_table(table_path, clauses)  # at its declared constants
        subject = found.get(name)
        if subject is None:
            subject = found[name] = Subject(machine, clauses, machine.table.file)
        elif subject.table != machine.table.file:
            raise SpecError(
                display,
                "[model]",
                f"machine {echo(name)} is also {subject.table}'s; the vectors name files by "
                "machine",
            )
        subject.models.append(display)
        if model.kind != "table" and model.machine.table == machine.table:
            # At the table's declared constants, the model's states are the machine's.
            subject.composed.append(replace(model, machine=machine))
    return list(found.values())


BROKEN: Final[Mapping[str, tuple[Do, ...]]] = {
    "agent": (Do("send", {"wake": True, "lane": "next_turn"}, (Listen("enqueue", "start"),)),),
}
"""Listener plans that break a contract (SEMANTICS.md, "Notifications and listeners"): a
listener fires the internal ``start`` inside the ``enqueue`` of ``send.idle.wake``, before
``schedule_driver()``, whose ``requires`` then fails. A port fires it as written (an event's
kind never refuses it) and answers with the fault."""


# --- running a step on the interpreter -----------------------------------------------------------


@dataclass(slots=True)
class _Frame:
    """A call in progress: its node of the expected tree, its instance, and, for a checker's
    move, the calls still to come inside its effects."""

    node: Json
    on: str
    plan: deque[tuple[str, Move]] | None


class _Scene:
    """One step on the interpreter: a fire, and whatever its script makes happen inside it.

    ``instances`` maps each instance to its live store (``None`` until the step creates it; one
    instance ``""`` for a single machine). Calls inside an effect come from a checker's move
    (:meth:`fire` with ``plan``, each nested call with its own), from a story's listeners
    (``listen``), and in a tree from the wiring's one act that is not an event:
    ``admit_child()`` creates the parent's first free child. Each is written to :attr:`script`
    at the ordinal of the effect it happened in, and to the expected tree under that effect.
    """

    def __init__(
        self,
        machine: Machine,
        instances: dict[str, list[Value] | None],
        *,
        multi: bool = False,
        listen: Sequence[Listen] = (),
        observe: bool = False,
        listened: frozenset[str] = frozenset(),
    ) -> None:
        self.m = machine
        self.instances = instances
        self.multi = multi
        self.listened = listened
        """A tree's effects whose checker moves are listeners' (``activation.settle``'s calls
        on other nodes), not the wiring's."""
        self.listen = list(listen)
        self.observe = observe
        """Record the state each notifying effect shows its listeners (``observed``)."""
        self.notifying = frozenset(n for n, e in machine.table.effects.items() if e.notifies)
        self.performed: dict[str, int] = {}
        self.ordinal = 0
        self.script: list[Json] = []

    def fire(self, on: str, event: str, args: tuple[Value, ...], plan: Move | None = None) -> Json:
        """The expected node of ``event(args)`` on ``on``: its row, its effects and the calls
        inside them, or its refusal."""
        store = self.instances[on]
        assert store is not None
        try:
            row = self.m.select(store, event, args)
        except Rejected as e:
            return {"refused": "rejected", "message": str(e)}
        except NotEnabled as e:
            return {"refused": "not-enabled", "message": str(e)}
        node: Json = {"row": row.row.id if row is not None else None, "effects": []}
        frame = _Frame(node, on, deque(plan.inside) if plan is not None else None)
        if row is not None:
            self.m.execute(row, store, args, lambda name, a: self._perform(frame, name, a))
        if frame.plan:
            raise VectorError(f"calls of the checker's move never happened: {list(frame.plan)}")
        return node

    def _perform(self, frame: _Frame, name: str, values: tuple[Value, ...]) -> None:
        node, effect = frame.node, Effect(name, values)
        store = self.instances[frame.on]
        assert store is not None
        if self.m.unmet(name, store, values):
            raise _Fault(str(effect))
        index = len(node["effects"])
        node["effects"].append(str(effect))
        at = self.ordinal
        self.ordinal += 1
        if self.observe and name in self.notifying:
            node.setdefault("observed", []).append({"at": index, "state": _state(self.m, store)})
        # A tree's checker moves are the wiring's calls, but inside an effect whose listeners
        # the model lets in (the wiring fires nothing there); a single machine's, listeners'.
        by = "wiring" if self.multi and name not in self.listened else "listener"
        calls: list[tuple[str, str, str, tuple[Value, ...], Move | None]] = []
        while frame.plan and frame.plan[0][0] == str(effect):
            _, move = frame.plan.popleft()
            calls.append((by, move.instance, move.event, tuple(v for _, v in move.args), move))
        if self.multi and name == CREATES:
            child = self._free_child(frame.on)
            self.instances[child] = list(self.m.initial)
            self.script.append({"at": at, "by": "wiring", "create": child})
        count = self.performed[name] = self.performed.get(name, 0) + 1
        for listener in [x for x in self.listen if x.effect == name and x.nth == count]:
            self.listen.remove(listener)
            args = self.m.arguments(listener.event, **listener.args)
            calls.append(("listener", frame.on, listener.event, args, None))
        for by, on, event, args, plan in calls:
            if by == "listener" and name not in self.notifying:
                raise VectorError(f"a listener fires {event} inside {effect}, no notification")
            where: Json = {"at": at, "by": by, "on": on} if self.multi else {"at": at, "by": by}
            self.script.append({**where, "event": event, "args": _args(self.m, event, args)})
            nested = self.fire(on, event, args, plan)
            node.setdefault("inside", []).append({"at": index, **nested})

    def _free_child(self, parent: str) -> str:
        for name, store in self.instances.items():
            if store is None and name.rpartition(".")[0] == parent:
                return name
        raise VectorError(f"admit_child() on {parent} with no free child slot")


def _state(m: Machine, store: Sequence[Value]) -> Json:
    """A state as a vector writes it: only the values that differ from the initial state."""
    return _changes(m, m.initial, store)


def _changes(m: Machine, before: Sequence[Value], after: Sequence[Value]) -> Json:
    """The values (the state variable's first) that differ between two states, as in ``after``."""
    return {n: b for n, a, b in zip(m.names, before, after, strict=True) if a != b}


def _args(m: Machine, event: str, args: Sequence[Value]) -> Json:
    return dict(zip((p for p, _ in m.table.events[event].params), args, strict=True))


def _expect(node: Json, changes: Json) -> Json:
    """A fire vector's answer: its refusal, or its call tree and what the step changed."""
    return node if "refused" in node else {**node, "changes": changes}


def _rows(node: Json) -> Iterator[str]:
    """Every row a call tree took, in call order."""
    if node.get("row"):
        yield node["row"]
    for child in node.get("inside", ()):
        yield from _rows(child)


# --- exploring the default models ----------------------------------------------------------------


@dataclass(slots=True)
class _Explored:
    """One default model explored breadth-first, as the checker explores it."""

    model: Model
    composition: Composition
    states: list[tuple[Any, ...]]
    """Every reached state, in the order found."""
    edges: list[tuple[tuple[Any, ...], int, tuple[Any, ...]]]
    """Every (source, move, target) whose move calls anything inside an effect."""

    @property
    def instances(self) -> tuple[str, ...] | None:
        """A tree's names of the instances of the model's table (slot i holds the i-th), or
        None for one machine."""
        c = self.composition
        if not isinstance(c, Engine) or c.wiring.flat:
            return None
        w, t = c.wiring, self.model.machine.table
        return tuple(n for n, m in zip(w.instances, w.machines, strict=True) if m.table == t)

    def tables(self, s: tuple[Any, ...], width: int) -> tuple[Any, ...]:
        """The table states of a model state: each instance's slot, or the model's front."""
        names = self.instances
        return tuple(s[: len(names)]) if names is not None else (tuple(s[:width]),)

    def creates(self, move: Move) -> bool:
        """True iff ``move``, as the model's table sees it, creates an instance: a row it takes
        performs :data:`CREATES` (a tree's admission, whose wiring calls no activation)."""
        if self.instances is None:
            return False
        mine = self.ours(move)
        rows = set(mine.rows()) if mine is not None else set()
        return any(
            r.id in rows and _performs(r.effects, CREATES) for r in self.model.machine.table.rows
        )

    def ours(self, move: Move) -> Move | None:
        """``move`` as the model's table sees it: without the calls on another table's
        instances; a move another table's instance begins, as the one call it makes on ours
        (None if it makes none)."""
        names = self.instances
        if names is None:
            return move
        if move.instance not in names:
            mine = [m for _, nested in move.inside if (m := self.ours(nested)) is not None]
            if len(mine) > 1:
                raise VectorError(f"{move}: a vector replays one call, not {len(mine)}")
            return mine[0] if mine else None
        inside = tuple(
            (effect, m) for effect, nested in move.inside if (m := self.ours(nested)) is not None
        )
        return replace(move, inside=inside, target="")


def _performs(statements: Sequence[Stmt], effect: str) -> bool:
    """True iff some statement (a ``when`` body's included) performs ``effect``."""
    return any(
        (isinstance(x, Call) and x.effect == effect)
        or (isinstance(x, Block) and _performs(x.body, effect))
        for x in statements
    )


def _explore(model: Model) -> _Explored:
    """Explore ``model`` breadth-first, as the checker does; refuse one that breaks a property
    (its vectors would pin a bug)."""
    c = compose(model)
    moves, unpack = c.moves, c.unpack
    init = c.initial()
    seen = {init}
    found = _Explored(model, c, [unpack(init)], [])
    acts: dict[int, bool] = {}
    frontier = [init]
    while frontier:
        following = []
        for s in frontier:
            bad = c.first_violated(s)
            if bad is not None:
                raise VectorError(f"{model.name} breaks {bad}: run `fsm-core check {model.name}`")
            for label, t in c.steps(s):
                if label not in acts:
                    acts[label] = bool(moves[label].inside) or found.creates(moves[label])
                if acts[label]:
                    found.edges.append((unpack(s), label, unpack(t)))
                if t not in seen:
                    seen.add(t)
                    found.states.append(unpack(t))
                    following.append(t)
        frontier = following
    return found


# --- the vectors of one machine ------------------------------------------------------------------


@dataclass(slots=True)
class Coverage:
    """What a machine's vectors must cover, by group, and whether some vector covers each."""

    items: dict[str, dict[str, bool]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    """How many vectors of each kind there are."""

    def need(self, group: str, item: str) -> None:
        self.items.setdefault(group, {}).setdefault(item, False)

    def cover(self, group: str, item: str) -> None:
        self.items.setdefault(group, {})[item] = True

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    @property
    def missing(self) -> list[str]:
        return [f"{g}: {i}" for g, items in self.items.items() for i, ok in items.items() if not ok]

    @property
    def total(self) -> tuple[int, int]:
        """(covered, required) items."""
        done = sum(ok for items in self.items.values() for ok in items.values())
        return done, sum(len(items) for items in self.items.values())


@dataclass(slots=True)
class Vectors:
    """One machine's vector file as lines (the header first), and what it covers."""

    subject: Subject
    lines: list[Json]
    coverage: Coverage


class _Builder:
    """The vectors of one machine, in file order."""

    def __init__(self, subject: Subject) -> None:
        self.m = m = subject.machine
        self.t = t = m.table
        self.lines: list[Json] = []
        self.ids: set[str] = set()
        self.cov = cov = Coverage()
        for row in t.rows:
            cov.need("rows", row.id)
        for rule in t.pair_rules:
            for s in rule.states:
                for e in rule.events:
                    cov.need(f"{rule.kind} pairs", f"{e} in {s}")
        for name, spec in t.effects.items():
            if spec.requires is not None:
                cov.need("requires", name)
        for inv in t.invariants:
            cov.need("invariants", inv.id)
        for st in t.stable:
            cov.need("step invariants", st.id)
        for d in t.defs:
            cov.need("definitions", d)
        self.pairs = {(s, e): r for r in t.pair_rules for s in r.states for e in r.events}
        self.reached: list[State] = []

    def add(self, kind: str, vector: Json) -> None:
        if vector["id"] in self.ids:
            raise VectorError(f"{self.m.name}: two vectors named {vector['id']}")
        self.ids.add(vector["id"])
        self.lines.append(vector)
        self.cov.count(kind)

    # --- steps ---------------------------------------------------------------------------------

    def steps(self, reached: Sequence[State]) -> None:
        """Every event with every argument tuple from every reached state, then, for each row
        or refusal entry none of those exercised, one case from the domain."""
        n = 0
        for state in reached:
            for event in self.t.events:
                for args in self.m.all_arguments(event):
                    self.step(f"step/{n}", state, event, args)
                    n += 1
        for state, event, args in self._uncovered():
            self.step(f"step/{n}", state, event, args)
            n += 1

    def step(self, vid: str, state: State, event: str, args: tuple[Value, ...]) -> None:
        m = self.m
        store = list(state)
        node = _Scene(m, {"": store}).fire("", event, args)
        rule = self.pairs.get((str(state[0]), event))
        if rule is not None:
            self.cov.cover(f"{rule.kind} pairs", f"{event} in {state[0]}")
        for row in m.enabled(state, event, args):
            self.cov.cover("rows", row.row.id)
        self.add(
            "steps",
            {
                "kind": "fire",
                "id": vid,
                "state": _state(m, state),
                "call": {"event": event, "args": _args(m, event, args)},
                "expect": _expect(node, _changes(m, state, store)),
            },
        )

    def _uncovered(self) -> Iterator[tuple[State, str, tuple[Value, ...]]]:
        """For each row or pair no vector covers yet, the first state of the domain (one the
        invariants admit if there is one) and arguments that exercise it."""
        m, items = self.m, self.cov.items
        domain = list(m.domain())
        ordered = [s for s in domain if not m.violated(s)] + [s for s in domain if m.violated(s)]
        for row in self.t.rows:
            guard = m.rows[row.id].guard
            if not items["rows"][row.id]:
                yield from itertools.islice(
                    (
                        (s, row.event, a)
                        for s in ordered
                        if s[0] in row.sources
                        for a in m.all_arguments(row.event)
                        if guard(s, a)
                    ),
                    1,
                )
        for (state, event), rule in self.pairs.items():
            if not items[f"{rule.kind} pairs"][f"{event} in {state}"]:
                first = next(s for s in ordered if s[0] == state)
                yield first, event, next(m.all_arguments(event))

    # --- predicates ----------------------------------------------------------------------------

    def predicates(self, reached: Sequence[State]) -> None:
        """For each predicate, a case where it holds and one where it fails (when the domain
        has one), from the reached states first."""
        m, t = self.m, self.t
        known = set(reached)
        pool = [*reached, *(s for s in m.domain() if s not in known)]

        def emit(what: str, name: str, holds: bool, state: State, **extra: Json) -> None:
            self.add(
                "predicates",
                {
                    "kind": "holds",
                    "id": f"holds/{what}/{name}/{'true' if holds else 'false'}",
                    "predicate": {"what": what, "name": name},
                    "state": _state(m, state),
                    **extra,
                    "expect": {"holds": holds},
                },
            )
            group = {"step_invariant": "step invariants", "requires": "requires"}
            self.cov.cover(group.get(what, f"{what}s"), name)

        for name, e in t.effects.items():
            if e.requires is not None:
                arguments = list(itertools.product(*(ty.values for _, ty in e.params)))
                for want in (True, False):
                    case = next(
                        ((s, a) for s in pool for a in arguments if m.unmet(name, s, a) != want),
                        None,
                    )
                    if case is not None:
                        named = dict(zip((p for p, _ in e.params), case[1], strict=True))
                        emit("requires", name, want, case[0], args=named)
        for inv_id, holds in m.invariants:
            for want in (True, False):
                found = next((s for s in pool if bool(holds(s, ())) == want), None)
                if found is not None:
                    emit("invariant", inv_id, want, found)
        for st in t.stable:
            i = m.names.index(st.var)
            values = next(v.type.values for v in t.variables if v.name == st.var)
            for want in (True, False):
                pair = next(
                    (
                        (s, after)
                        for s in pool
                        for v in values
                        if v != s[i]
                        for after in [(*s[:i], v, *s[i + 1 :])]
                        if (st.id not in m.unstable(s, after)) == want
                    ),
                    None,
                )
                if pair is not None:
                    emit("step_invariant", st.id, want, pair[0], after=_state(m, pair[1]))
        for d in t.defs:
            for want in (True, False):
                found = next((s for s in pool if m.holds(d, s) == want), None)
                if found is not None:
                    emit("definition", d, want, found)

    # --- bad calls -----------------------------------------------------------------------------

    def bad_calls(self) -> None:
        """Calls an implementation refuses before anything changes, from the initial state: an
        unknown event, an extra or a missing parameter, a value of the wrong JSON type or outside
        its domain."""
        m = self.m
        calls: list[tuple[str, str, Json]] = [("unknown", "no_such_event", {})]
        for event, spec in self.t.events.items():
            good = _args(m, event, next(m.all_arguments(event)))
            calls.append(("extra", event, {**good, "extra": True}))
            if not spec.params:
                continue
            first, ptype = spec.params[0]
            calls.append(("missing", event, {k: v for k, v in good.items() if k != first}))
            wrong = {"bool": 1, "int": True, "enum": 0}[ptype.kind]
            calls.append(("type", event, {**good, first: wrong}))
            if ptype.kind != "bool":  # every value of the right type is a boolean's
                last = ptype.values[-1]
                outside = last + 1 if isinstance(last, int) else "no_such_value"
                calls.append(("domain", event, {**good, first: outside}))
        for what, event, args in calls:
            self.add(
                "bad calls",
                {
                    "kind": "fire",
                    "id": f"call/{event}/{what}",
                    "state": {},
                    "call": {"event": event, "args": args},
                    "expect": {"refused": "bad-call"},
                },
            )

    # --- the vector format's own answers --------------------------------------------------------
    #
    # Kept apart from the steps: each method below pins one answer of the format that no table
    # row shows by itself (SEMANTICS.md, "Checking a port").

    def argument_typing(self) -> None:
        """For each integer parameter of an event: ``1.0`` is the integer 1 (JSON has one number
        type), ``1.5`` and ``true`` are no integers (``bad-call``). The integral call is fired
        where the table answers it with a row when some reached state does."""
        m = self.m
        for event, spec in self.t.events.items():
            for i, (p, ptype) in enumerate(spec.params):
                if ptype.kind != "int":
                    continue
                state, args = next(
                    (
                        (s, a)
                        for s in self.reached
                        for a in m.all_arguments(event)
                        if m.lookup(s, event, a) not in (None, REFUSED)
                    ),
                    (m.initial, next(m.all_arguments(event))),
                )
                good = _args(m, event, args)
                number = args[i]
                assert isinstance(number, int)
                store = list(state)
                node = _Scene(m, {"": store}).fire("", event, args)
                cases: list[tuple[str, Value | float, Json]] = [
                    ("integral", float(number), _expect(node, _changes(m, state, store))),
                    ("fraction", number + 0.5, {"refused": "bad-call"}),
                    ("boolean", True, {"refused": "bad-call"}),
                ]
                for what, value, expect in cases:
                    self.cov.need("argument typing", f"{event}({p}): {what}")
                    self.add(
                        "argument typing",
                        {
                            "kind": "fire",
                            "id": f"call/{event}/{p}/{what}",
                            "state": _state(m, state if what == "integral" else m.initial),
                            "call": {"event": event, "args": {**good, p: value}},
                            "expect": expect,
                        },
                    )
                    self.cov.cover("argument typing", f"{event}({p}): {what}")

    def faults(self) -> None:
        """For each effect whose ``requires`` some row breaks from some state of the domain, the
        first such step (states the invariants do not admit first: from one they admit, the
        loader proves no row breaks a contract); then the listener plans of :data:`BROKEN`.
        The answer is the fault, naming the effect, which is not performed."""
        m, t = self.m, self.t
        domain = list(m.domain())
        ordered = [s for s in domain if m.violated(s)] + [s for s in domain if not m.violated(s)]
        wanted = {n for n, e in t.effects.items() if e.requires is not None}
        found: set[str] = set()
        rows = [r for r in t.rows if r.reject is None]
        for state in ordered:
            if not wanted - found:
                break
            for row in rows:
                left = wanted - found
                if state[0] not in row.sources or not any(_performs(row.effects, e) for e in left):
                    continue
                for args in m.all_arguments(row.event):
                    if not m.rows[row.id].guard(state, args):
                        continue
                    try:
                        _Scene(m, {"": list(state)}).fire("", row.event, args)
                    except _Fault as fault:
                        name = fault.effect.partition("(")[0]
                        if name not in found:
                            found.add(name)
                            self._fault(f"fault/{name}", state, row.event, args, [], fault)
        for k, step in enumerate(BROKEN.get(m.name, ())):
            args = m.arguments(step.event, **step.args)
            scene = _Scene(m, {"": list(m.initial)}, listen=step.listen)
            try:
                scene.fire("", step.event, args)
            except _Fault as fault:
                self._fault(f"fault/listener/{k}", m.initial, step.event, args, scene.script, fault)
            else:
                raise VectorError(f"{m.name}: the broken plan {step} breaks no contract")

    def _fault(
        self,
        vid: str,
        state: State,
        event: str,
        args: tuple[Value, ...],
        script: list[Json],
        fault: _Fault,
    ) -> None:
        item = fault.effect.partition("(")[0]
        self.cov.need("requires verdicts", item)
        self.add(
            "requires verdicts",
            {
                "kind": "fire",
                "id": vid,
                "state": _state(self.m, state),
                "call": {"event": event, "args": _args(self.m, event, args)},
                **({"script": script} if script else {}),
                "expect": {"fault": "requires", "effect": fault.effect},
            },
        )
        self.cov.cover("requires verdicts", item)

    def unreached(self) -> None:
        """A script entry at an ordinal the step never reaches: the vector records it by its
        index in the script (``unreached``), and a port that reaches it, or that ignores an
        entry it never reached, fails."""
        m = self.m
        state = m.initial
        event, args = next(
            (
                (e, a)
                for e in self.t.events
                for a in m.all_arguments(e)
                if m.lookup(state, e, a) is not REFUSED
            ),
            (next(iter(self.t.events)), ()),
        )
        store = list(state)
        scene = _Scene(m, {"": store})
        node = scene.fire("", event, args)
        first = next(iter(self.t.events))
        entry = {
            "at": scene.ordinal,
            "by": "listener",
            "event": first,
            "args": _args(m, first, next(m.all_arguments(first))),
        }
        self.cov.need("script points", "unreached")
        self.add(
            "script points",
            {
                "kind": "fire",
                "id": "script/unreached",
                "state": _state(m, state),
                "call": {"event": event, "args": _args(m, event, args)},
                "script": [entry],
                "expect": {**_expect(node, _changes(m, state, store)), "unreached": [0]},
            },
        )
        self.cov.cover("script points", "unreached")

    # --- stories -------------------------------------------------------------------------------

    def stories(self, stories: Iterable[Story]) -> None:
        """Each story step by step from the initial state, with the state every notification
        shows its listeners."""
        m = self.m
        for story in stories:
            store = list(m.initial)
            for k, step in enumerate(story.steps):
                before = tuple(store)
                args = m.arguments(step.event, **step.args)
                scene = _Scene(m, {"": store}, listen=step.listen, observe=True)
                node = scene.fire("", step.event, args)
                if scene.listen:
                    raise VectorError(f"story {story.name} step {k}: {scene.listen} never ran")
                self.add(
                    "story steps",
                    {
                        "kind": "fire",
                        "id": f"story/{story.name}/{k}",
                        "story": {"name": story.name, "step": k, "of": len(story.steps)},
                        **({"doc": story.doc} if k == 0 else {}),
                        "state": _state(m, before),
                        "call": {"event": step.event, "args": _args(m, step.event, args)},
                        **({"script": scene.script} if scene.script else {}),
                        "expect": _expect(node, _changes(m, before, store)),
                    },
                )

    # --- scenarios -----------------------------------------------------------------------------

    def scenarios(self, explored: _Explored) -> None:
        """One vector per move of the model that calls inside an effect and per distinct
        outcome of it, from the first state the checker found it in; each replay must take the
        move's rows and reach the checker's states."""
        m, model, c = self.m, explored.model, explored.composition
        names = explored.instances
        multi = names is not None
        width = len(m.names)
        group = f"moves of {model.name}"
        moves = [explored.ours(move) for move in c.moves]
        creating = {i for i, move in enumerate(c.moves) if explored.creates(move)}
        # The moves the model takes: the compiled engine also labels steps it searched within a
        # budget bound that no reachable state has left (they are no move of the model).
        for label in sorted({label for _, label, _ in explored.edges}):
            move = moves[label]
            if move is not None and (move.inside or label in creating):
                self.cov.need(group, str(label))
            if label in creating:
                self.cov.need("creates", f"{model.name}: {label}")
        replayed: set[tuple[int, tuple[Any, ...]]] = set()
        outcomes: set[tuple[int, str]] = set()
        for s, label, t in explored.edges:
            move = moves[label]
            if move is None or not (move.inside or label in creating):
                continue
            source = explored.tables(s, width)
            if (label, source) in replayed:
                continue
            replayed.add((label, source))
            slots = names if names is not None else ("",)
            instances = {
                k: None if v is None else list(v) for k, v in zip(slots, source, strict=True)
            }
            heard = heard_effects(model, m.table.name) if multi else frozenset()
            scene = _Scene(m, instances, multi=multi, listened=heard)
            node = scene.fire(move.instance, move.event, tuple(v for _, v in move.args), move)
            after: tuple[State | None, ...] = tuple(
                None if v is None else tuple(v) for v in scene.instances.values()
            )
            if list(_rows(node)) != list(move.rows()) or after != explored.tables(t, width):
                raise VectorError(
                    f"{model.name}: replaying {move} from {source} disagrees with the checker"
                )
            outcome = json.dumps(node, sort_keys=True)
            if (label, outcome) in outcomes:
                continue
            outcomes.add((label, outcome))
            self.cov.cover(group, str(label))
            if label in creating:
                self.cov.cover("creates", f"{model.name}: {label}")
            vector: Json = {"kind": "fire", "id": f"scenario/{model.name}/{len(outcomes) - 1}"}
            call: Json = {"event": move.event, "args": dict(move.args)}
            if names is None:
                vector |= {"state": _state(m, source[0]), "call": call}
                assert after[0] is not None
                changes = _changes(m, source[0], after[0])
            else:
                vector |= {
                    "instances": {
                        k: _state(m, v) for k, v in zip(names, source, strict=True) if v is not None
                    },
                    "call": {"on": move.instance, **call},
                }
                # An instance the step created is a change even when it stays initial ({}).
                changes = {
                    k: diff
                    for k, old, new in zip(names, source, after, strict=True)
                    if new is not None
                    for diff in [_changes(m, old if old is not None else m.initial, new)]
                    if diff or old is None
                }
            vector |= {"script": scene.script, "expect": _expect(node, changes)}
            self.add("scenarios", vector)

    # --- pins ----------------------------------------------------------------------------------

    def pins(self, reached: Sequence[State], explored: Sequence[_Explored]) -> None:
        """Vectors for the rules a port can misread while passing nearly every other vector,
        so that each such misreading fails by the hundreds (``node ports/js/misread.js``
        switches each on in the JavaScript port and counts the vectors that catch it;
        specs/README.md keeps the counts):

        - which state ``observed`` records (SEMANTICS.md, section 5: the store as the effect is
          reached, before its listeners run): for each shape of move (its row, and each call's
          effect and row) that calls inside a notifying effect, in the models of one machine
          with listeners, the first such move's scenario with the state each notification
          showed (``scenario/<model>/observed/<n>``; a tree's vector has no ``observed``);
        - ``true`` is no integer: ``true`` passed for an integer parameter whose domain holds
          1, from every state of the domain (step 1 reads no state: ``call/<event>/true/<n>``);
        - a call's arguments are checked first, before any guard (section 3): an extra argument
          in each state and event the table refuses or ignores, once per way it does
          (``call/<event>/refused/<n>``).
        """
        self._pin_true_is_no_integer()
        self._pin_arguments_checked_first(reached)
        shapes: set[object] = set()
        for e in explored:
            if e.model.kind != "table":
                self._pin_observed(e, shapes)

    def _bad_call(self, vid: str, state: State, event: str, args: Json) -> None:
        self.add(
            "pinned bad calls",
            {
                "kind": "fire",
                "id": vid,
                "state": _state(self.m, state),
                "call": {"event": event, "args": args},
                "expect": {"refused": "bad-call"},
            },
        )

    def _pin_true_is_no_integer(self) -> None:
        m = self.m
        n = 0
        for event, spec in self.t.events.items():
            good = _args(m, event, next(m.all_arguments(event)))
            ints = [p for p, ty in spec.params if ty.kind == "int" and 1 in ty.values]
            for state in m.domain() if ints else ():
                for p in ints:
                    self._bad_call(f"call/{event}/true/{n}", state, event, {**good, p: True})
                    n += 1

    def _pin_arguments_checked_first(self, reached: Sequence[State]) -> None:
        m = self.m
        ways: set[tuple[Value, str, str]] = set()
        for state in reached:
            for event in self.t.events:
                args = next(m.all_arguments(event))
                try:
                    row = m.select(state, event, args)
                except Rejected as e:
                    way = f"rejected: {e}"
                except NotEnabled:
                    way = "not-enabled"
                else:
                    if row is not None:
                        continue
                    way = "ignored"
                if (state[0], event, way) in ways:
                    continue
                ways.add((state[0], event, way))
                extra = {**_args(m, event, args), "extra": True}
                self._bad_call(f"call/{event}/refused/{len(ways) - 1}", state, event, extra)

    def _pin_observed(self, explored: _Explored, shapes: set[object]) -> None:
        m, model, c = self.m, explored.model, explored.composition
        if explored.instances is not None:
            return  # a tree's vector has no ``observed`` (vectors.schema.json)
        notifying = {n for n, e in self.t.effects.items() if e.notifies}

        def listened(move: Move) -> bool:
            """True iff something is called inside one of ``move``'s notifying effects."""
            return any(
                effect.partition("(")[0] in notifying or listened(nested)
                for effect, nested in move.inside
            )

        done = 0
        for s, label, _ in explored.edges:
            move = c.moves[label]
            if not listened(move):
                continue
            shape = (move.row, tuple((e.partition("(")[0], n.row) for e, n in move.inside))
            if shape in shapes:
                continue
            shapes.add(shape)
            source = tuple(s[: len(m.names)])
            store = list(source)
            scene = _Scene(m, {"": store}, observe=True)
            node = scene.fire("", move.event, tuple(v for _, v in move.args), move)
            self.add(
                "pinned observations",
                {
                    "kind": "fire",
                    "id": f"scenario/{model.name}/observed/{done}",
                    "state": _state(m, source),
                    "call": {"event": move.event, "args": dict(move.args)},
                    "script": scene.script,
                    "expect": _expect(node, _changes(m, source, store)),
                },
            )
            done += 1


def build(subject: Subject) -> Vectors:
    """The vectors of one machine (the module docstring says what they cover)."""
    m = subject.machine
    models = subject.composed or [
        Model(name=m.name, file=subject.table, doc="", kind="table", tier="default", machine=m)
    ]
    explored = [_explore(model) for model in models]
    reached: dict[State, None] = {}
    for e in explored:
        for s in e.states:
            for part in e.tables(s, len(m.names)):
                if part is not None:
                    reached.setdefault(tuple(part), None)
    b = _Builder(subject)
    b.steps(list(reached))
    b.predicates(list(reached))
    b.bad_calls()
    b.stories(s for s in STORIES if s.machine == m.name)
    b.reached = list(reached)
    b.argument_typing()
    b.faults()
    b.unreached()
    for e in explored:
        if e.model.kind != "table":
            b.scenarios(e)
    b.pins(list(reached), explored)
    header: Json = {
        "kind": "header",
        "id": "header",
        "format": FORMAT,
        "version": VERSION,
        "machine": m.name,
        "tables": TABLES,
        "vectors": len(b.lines),
        "generated": (
            f"Generated by `{COMMAND}` from {subject.table} and {', '.join(subject.models)}; "
            "do not edit."
        ),
    }
    return Vectors(subject, [header, *b.lines], b.cov)


# --- files ---------------------------------------------------------------------------------------


def render_vectors(specs: Path | None = None) -> tuple[dict[str, str], list[Vectors]]:
    """Every generated file as ``{name: exact text}``, and each machine's vectors."""
    chosen = subjects(specs)
    built = [build(s) for s in chosen]
    files: dict[str, str] = {}
    for v in built:
        files[f"{v.subject.machine.name}.jsonl"] = "".join(
            json.dumps(line, separators=(",", ":")) + "\n" for line in v.lines
        )
    files[TABLES] = json.dumps(_tables(chosen, load_spec(specs).wiring), indent=2) + "\n"
    return files, built


def _tables(chosen: Sequence[Subject], wiring: Wiring | None) -> Json:
    """The export of every machine the vectors cover, with the clauses they cite, and the
    wiring of the tables in ``specs/`` (exported when it connects machines the vectors cover)."""
    clauses: dict[str, Clause] = {}
    for s in chosen:
        for cid, clause in s.clauses.items():
            if clauses.setdefault(cid, clause) != clause:
                raise VectorError(f"clause {cid} means two things in two catalogues")
    machines = {s.machine.name: s.machine for s in chosen}
    return spec_to_json(Spec(Path("."), clauses, machines, wiring), list(machines))


def default_out_dir() -> Path:
    """Where ``fsm-core vectors`` writes: the checkout's ``specs/vectors``, else ``./vectors``."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file():
        return root / "specs" / "vectors"
    return Path.cwd() / "vectors"


def shipped_vectors_dir() -> Path:
    """Where the shipped vectors are, which ``--replay`` reads without ``--out``: the
    checkout's ``specs/vectors``, or the copy inside an installed wheel."""
    return specs_dir() / "vectors"


def _generated(path: Path) -> bool:
    """True iff ``path`` is a file this command wrote (its first line is a vectors header)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            head = fh.readline(4096)
    except OSError:
        return False
    return f'"format":"{FORMAT}"' in head


def stale(files: Mapping[str, str], out: Path) -> list[str]:
    """One problem per stale, missing or orphaned file in ``out``; ``[]`` when all are current."""
    problems: list[str] = []
    for name, text in files.items():
        path = out / name
        if not path.is_file():
            problems.append(f"{path} is missing")
        elif path.read_bytes() != text.encode("utf-8"):
            problems.append(f"{path} differs from the tables")
    for path in sorted(out.glob("*.jsonl")):
        if path.name not in files and _generated(path):
            problems.append(f"{path} is generated from no table; delete it")
    return problems


def write(files: Mapping[str, str], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = out / name
        path.write_text(text, encoding="utf-8", newline="\n")
        written.append(path)
    for path in sorted(out.glob("*.jsonl")):
        if path.name not in files and _generated(path):
            path.unlink()
    return written


def coverage_lines(built: Sequence[Vectors]) -> list[str]:
    """What each machine's vectors cover, then one line with the whole figure."""
    lines: list[str] = []
    done = total = 0
    for v in built:
        cov = v.coverage
        counts = ", ".join(f"{n} {kind}" for kind, n in cov.counts.items())
        lines.append(f"{v.subject.machine.name} ({v.subject.table}): {counts}")
        for group, items in cov.items.items():
            ok = sum(items.values())
            lines.append(f"  {group}: {ok}/{len(items)}")
        for item in cov.missing:
            lines.append(f"  not covered: {item}")
        d, t = cov.total
        done, total = done + d, total + t
    percent = 100.0 * done / total if total else 100.0
    lines.append(f"coverage: {percent:.1f}% ({done}/{total} items)")
    return lines


def generate(specs: Path | None = None) -> tuple[dict[str, str], list[Vectors], bool]:
    """The files, each machine's vectors, and True iff everything is covered."""
    files, built = render_vectors(specs)
    complete = all(not v.coverage.missing for v in built)
    return files, built, complete


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Generate the conformance vectors (JSONL, specs/vectors.schema.json) from the tables and "
        "the default models, print what they cover, and fail under 100%. With --replay, run a "
        "port's replayer on them."
    )
    parser.add_argument("--out", type=Path, default=None, metavar="DIR", help="output directory")
    parser.add_argument(
        "--check", action="store_true", help="fail and name each stale file; write nothing"
    )
    parser.add_argument(
        "--replay",
        default=None,
        metavar="CMD",
        help="run CMD TABLES once per vector file in --out DIR (default: the shipped vectors), the "
        "file on its standard input; it "
        "prints one verdict per line (see specs/SEMANTICS.md); exit 1 naming each failure",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=REPLAY_TIMEOUT,
        metavar="SECONDS",
        help=f"with --replay: stop a replayer (its whole process tree) that has not finished a "
        f"vector file after SECONDS, naming the vector it was on (default {REPLAY_TIMEOUT:g})",
    )


def _command(text: str) -> list[str]:
    """A ``--replay`` command as the replayer's argv, refused (exit 2) before anything runs when
    it cannot run: unbalanced quotes, nothing, or a program that is neither an executable file
    nor a command on ``PATH``."""
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise FsmError(f"--replay {echo(text)}: {e}; quote it as a shell would") from None
    if not argv:
        raise FsmError("--replay needs a command")
    if shutil.which(argv[0]) is None:
        raise FsmError(
            f"--replay {echo(text)}: {echo(argv[0])} is neither an executable file nor a command "
            "on PATH"
        )
    return argv


def run(args: argparse.Namespace) -> int:
    specs: Path | None = getattr(args, "specs", None)
    if specs is not None and args.out is None:
        raise FsmError(
            "vectors with --specs needs --out DIR: the default directory holds the shipped "
            "tables' vectors"
        )
    out: Path = args.out if args.out is not None else default_out_dir()
    if args.replay is not None and args.out is None:
        out = shipped_vectors_dir()  # what a port replays: the shipped vectors, wheel or checkout
    if args.replay is not None:
        command = _command(args.replay)
        if args.check:
            code = _check(specs, out)
            if code:
                return code
        given = sorted(p for p in out.glob("*.jsonl") if _generated(p))
        if not given:
            raise FsmError(f"{out}: no vector files; run `{COMMAND} --out {out}` first")
        full = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept when a vector fails
            "w", encoding="utf-8", prefix="fsm-core-replay-", suffix=".jsonl", delete=False
        )
        failures: list[Failure] = []
        try:
            with full:
                count, failures = replay(command, given, out / TABLES, args.timeout, full)
        finally:
            if not failures:
                os.unlink(full.name)
        for name in dict.fromkeys(f.file for f in failures):
            mine = [f for f in failures if f.file == name]
            for failure in mine[:SHOWN]:
                print(f"fail: {failure}")
            if len(mine) > SHOWN:
                print(f"fail: {shown(name, REASON_SHOWN)}: {len(mine) - SHOWN:,} more vectors fail")
        if failures:
            print(f"every failure in full, one JSON line each: {full.name}")
        passed = count - len(failures)
        print(
            f"replayed {count} vectors with {shown(shlex.join(command), REASON_SHOWN)}: "
            f"{passed} pass"
        )
        return 1 if failures else 0
    if args.check:
        return _check(specs, out)
    files, built, complete = generate(specs)
    for line in coverage_lines(built):
        print(line)
    if not complete:
        print(f"{COMMAND}: coverage is under 100%; nothing written", file=sys.stderr)
        return 1
    for path in write(files, out):
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


def _check(specs: Path | None, out: Path) -> int:
    files, _, complete = generate(specs)
    problems = stale(files, out)
    for problem in problems:
        print(f"stale: {problem}", file=sys.stderr)
    if problems:
        print(f"{COMMAND}: vectors are stale; run `{COMMAND}`", file=sys.stderr)
        return 1
    if not complete:
        print(f"{COMMAND}: coverage is under 100%", file=sys.stderr)
        return 1
    print(f"vectors up to date in {out}")
    return 0
