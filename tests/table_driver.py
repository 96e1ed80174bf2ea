"""Test harnesses that drive one compiled table the way the runtime does.

:class:`TableDriver` keeps a live store, runs rows in place with :meth:`Machine.execute`,
records every effect as it is reached, and lets a test install *reactions*: callbacks that run
inside a notifying effect and may fire more events re-entrantly, exactly as a synchronous
listener does.

The rest reads the conformance vectors (specs/vectors/, ``fsm-core vectors``) and replays one
through a host of the table, as a port does (:func:`replay`), and gives a story's steps to the
tests that pin what the story shows (:class:`Story`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from fsm_core import HostedMachine, NotEnabled, Rejected
from fsm_core._paths import specs_dir
from fsm_core.table import Effect, Machine, State
from fsm_core.table._expr import Value
from fsm_core.table._machine import Perform

Reaction = Callable[["TableDriver", Effect], object]


@dataclass
class TableDriver:
    machine: Machine
    store: list[Value] = field(default_factory=list)
    log: list[Effect] = field(default_factory=list)
    rows: list[str | None] = field(default_factory=list)
    reactions: dict[str, list[Reaction]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.store:
            self.store = list(self.machine.initial)

    def fire(self, event: str, **kwargs: Value) -> str | None:
        """Fire ``event`` on the live store; return the row id (None when ignored)."""
        args = self.machine.arguments(event, **kwargs)
        row = self.machine.select(self.store, event, args)
        self.rows.append(row.row.id if row is not None else None)
        if row is not None:
            self.machine.execute(row, self.store, args, self._perform)
        return row.row.id if row is not None else None

    def on(self, effect: str, reaction: Reaction, *, once: bool = True) -> None:
        """Run ``reaction`` inside the next (or every) ``effect`` performed."""

        def wrapped(driver: TableDriver, e: Effect) -> object:
            if once:
                self.reactions[effect].remove(wrapped)
            return reaction(driver, e)

        self.reactions.setdefault(effect, []).append(wrapped)

    def _perform(self, name: str, args: tuple[Value, ...]) -> None:
        effect = Effect(name, args)
        self.log.append(effect)
        for reaction in list(self.reactions.get(name, ())):
            reaction(self, effect)

    def __getitem__(self, name: str) -> Value:
        return self.machine.get(self.store, name)

    @property
    def state(self) -> State:
        return tuple(self.store)

    def effects(self) -> list[str]:
        """The effects performed so far as text, then forget them."""
        out = [str(e) for e in self.log]
        self.log.clear()
        return out


# --- the conformance vectors ---------------------------------------------------------------------
#
# ``fsm-core vectors`` writes specs/vectors/<machine>.jsonl (specs/vectors.schema.json). The
# helpers below read a vector file and replay each vector through a host of the table, as a port
# would: the interpreter (``Machine.select`` and ``Machine.execute``) or the ``transitions``
# host (:class:`~fsm_core.HostedMachine`).

Json = dict[str, Any]
VECTORS = specs_dir() / "vectors"


class Mismatch(AssertionError):
    """A host did something other than what a vector says."""


_PARSED: dict[Path, list[Json]] = {}
"""Each vector file read so far, by its resolved path: its lines parsed, the header first."""


@dataclass(frozen=True, slots=True)
class VectorFile:
    """One vector file: its header and its vectors, in order."""

    path: Path
    header: Json
    vectors: list[Json]

    machine: Machine

    @classmethod
    def read(cls, machine: Machine, root: Path = VECTORS) -> VectorFile:
        """``root/MACHINE.jsonl``, parsed once per process (the agent's 25 MB take seconds, and
        five test modules read them as they are collected): the vectors are shared, so a test
        edits a copy of one (``json.loads(json.dumps(v))``), never the vector itself."""
        path = root / f"{machine.name}.jsonl"
        key = path.resolve()
        if key not in _PARSED:
            text = path.read_text(encoding="utf-8")
            _PARSED[key] = [json.loads(line) for line in text.splitlines()]
        lines = _PARSED[key]
        return cls(path, lines[0], lines[1:], machine)

    def story(self, name: str) -> Story:
        steps = [v for v in self.vectors if v.get("story", {}).get("name") == name]
        if not steps:
            raise KeyError(f"{self.path.name} has no story {name!r}")
        return Story(name, steps, self.machine)


class Host(Protocol):
    """What replaying a vector needs of a host of one table: a live control state per
    instance, fired with a ``perform`` callback that may fire again re-entrantly."""

    def begin(self) -> None:
        """A new vector starts: no instance of the last one is used again."""
        ...

    def start(self, state: State) -> object: ...

    def fire(
        self, live: object, event: str, args: Mapping[str, Any], perform: Perform
    ) -> str | None:
        """Fire and return the row taken (None when ignored); raise ``Rejected``,
        ``NotEnabled``, or (a bad call) ``KeyError``, ``TypeError`` or ``ValueError``."""
        ...

    def snapshot(self, live: object) -> State: ...


class Interpreter:
    """The pure interpreter on a store of its own."""

    def __init__(self, machine: Machine) -> None:
        self.m = machine

    def begin(self) -> None:
        return None

    def start(self, state: State) -> object:
        return list(state)

    def fire(
        self, live: object, event: str, args: Mapping[str, Any], perform: Perform
    ) -> str | None:
        store = cast(list[Value], live)
        values = self.m.arguments(event, **args)
        row = self.m.select(store, event, values)
        if row is not None:
            self.m.execute(row, store, values, perform)
        return None if row is None else row.row.id

    def snapshot(self, live: object) -> State:
        return tuple(cast(list[Value], live))


class Hosted:
    """The ``transitions`` host: one :class:`HostedMachine` per instance."""

    def __init__(self, machine: Machine) -> None:
        self.m = machine
        self._perform: list[Perform] = []
        self._pool: list[HostedMachine] = []
        self._used = 0

    def begin(self) -> None:
        self._used = 0

    def start(self, state: State) -> object:
        """A hosted machine in ``state``; building one costs a ``transitions`` machine, so
        the ones a finished vector used are loaded afresh."""
        if self._used == len(self._pool):
            self._pool.append(
                HostedMachine(self.m, perform=lambda e: self._perform[-1](e.name, e.args))
            )
        hosted = self._pool[self._used]
        self._used += 1
        hosted.load(state)
        return hosted

    def fire(
        self, live: object, event: str, args: Mapping[str, Any], perform: Perform
    ) -> str | None:
        self._perform.append(perform)
        try:
            return cast(HostedMachine, live).step(event, **args).row
        finally:
            self._perform.pop()

    def snapshot(self, live: object) -> State:
        return cast(HostedMachine, live).snapshot()


def sparse(m: Machine, state: Sequence[Value], base: Sequence[Value] | None = None) -> Json:
    """A state as vectors write it: the values that differ from ``base`` (the initial state)."""
    base = m.initial if base is None else base
    return {n: v for n, b, v in zip(m.names, base, state, strict=True) if b != v}


def full(m: Machine, values: Mapping[str, Value]) -> State:
    """A vector's sparse state as a whole state."""
    return tuple(values.get(n, init) for n, init in zip(m.names, m.initial, strict=True))


class _Fault(Exception):
    """An effect's ``requires`` failed as it was about to run: the whole step stops."""


def _number(value: Any) -> Any:
    """A JSON value as a table value: a number with an integral value is an integer (``1.0``
    is 1; SEMANTICS.md, "Values"), anything else is left as it is for the host to judge."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _arguments(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _number(v) for k, v in args.items()}


def replay(host: Host, m: Machine, vector: Json) -> None:
    """Replay one vector through ``host``; raise :class:`Mismatch` saying what differs."""
    if vector["kind"] == "holds":
        _holds(m, vector)
        return
    multi = "instances" in vector
    given = vector["instances"] if multi else {"": vector["state"]}
    host.begin()
    live = {name: host.start(full(m, values)) for name, values in given.items()}
    before = {name: host.snapshot(x) for name, x in live.items()}
    script: list[Json] = vector.get("script", [])
    for i, entry in enumerate(script):
        if entry.get("by") not in ("listener", "wiring"):
            raise Mismatch(f"script entry {i}: `by` is {entry.get('by')!r}")
        if multi and "create" not in entry and "on" not in entry:
            raise Mismatch(f"script entry {i} of a tree's vector names no instance (`on`)")
    ran: set[int] = set()
    notifying = {n for n, e in m.table.effects.items() if e.notifies}
    ordinal = 0

    def call(on: str, event: str, args: Mapping[str, Any]) -> Json:
        nonlocal ordinal
        node: Json = {"row": None, "effects": []}
        inside: list[Json] = []
        observed: list[Json] = []

        def perform(name: str, values: tuple[Value, ...]) -> None:
            nonlocal ordinal
            effect = str(Effect(name, values))
            if m.unmet(name, host.snapshot(live[on]), values):
                raise _Fault(effect)
            index = len(node["effects"])
            node["effects"].append(effect)
            if name in notifying:
                observed.append({"at": index, "state": sparse(m, host.snapshot(live[on]))})
            at = ordinal
            ordinal += 1
            for i, entry in enumerate(script):
                if entry["at"] != at:
                    continue
                ran.add(i)
                if "create" in entry:
                    live[entry["create"]] = host.start(m.initial)
                    continue
                if entry["by"] == "listener" and name not in notifying:
                    raise Mismatch(f"script entry {i}: a listener inside {effect}, no notification")
                target = entry["on"] if multi else on
                inside.append({"at": index, **call(target, entry["event"], entry["args"])})

        try:
            node["row"] = host.fire(live[on], event, _arguments(args), perform)
        except Rejected as e:
            return {"refused": "rejected", "message": str(e)}
        except NotEnabled as e:
            return {"refused": "not-enabled", "message": str(e)}
        except (KeyError, TypeError, ValueError) as e:
            return {"refused": "bad-call", "message": str(e)}
        if inside:
            node["inside"] = inside
        node["observed"] = observed
        return node

    root = vector["call"]["on"] if multi else ""
    want = vector["expect"]
    try:
        got = call(root, vector["call"]["event"], vector["call"]["args"])
    except _Fault as fault:
        _same("fault", ("requires", str(fault)), (want.get("fault"), want.get("effect")))
        _unreached(script, ran, want)
        return
    if "fault" in want:
        raise Mismatch(f"no fault: expected the requires of {want['effect']} to fail")
    _unreached(script, ran, want)
    after = {name: host.snapshot(x) for name, x in live.items()}
    if "refused" in want:
        _same("refusal", got.get("refused"), want["refused"])
        if "message" in want:
            _same("message", got.get("message"), want["message"])
        _same("state after a refusal", after, before)
        return
    if "refused" in got:
        raise Mismatch(f"refused ({got['refused']}): {got['message']}")
    _compare("call", got, want)
    # An instance the step created is a change even when it stays in the initial state.
    changes = {
        name: diff
        for name, state in after.items()
        if (diff := sparse(m, state, before.get(name, m.initial))) or name not in before
    }
    _same("changes", changes if multi else changes.get("", {}), want["changes"])


def _unreached(script: list[Json], ran: set[int], want: Json) -> None:
    """The script entries the step never reached, by index, are the ones the vector names."""
    unreached = [i for i in range(len(script)) if i not in ran]
    _same("unreached script entries", unreached, want.get("unreached", []))


def _compare(where: str, got: Json, want: Json) -> None:
    if "refused" in want or "refused" in got:
        _same(
            f"{where}: refusal",
            (got.get("refused"), got.get("message")),
            (want.get("refused"), want.get("message")),
        )
        return
    _same(f"{where}: row", got["row"], want["row"])
    _same(f"{where}: effects", got["effects"], want["effects"])
    if "observed" in want:
        _same(f"{where}: observed states", got["observed"], want["observed"])
    inner, wanted = got.get("inside", []), want.get("inside", [])
    _same(f"{where}: calls inside", [c["at"] for c in inner], [c["at"] for c in wanted])
    for g, w in zip(inner, wanted, strict=True):
        _compare(f"{where} > inside {want['effects'][w['at']]}", g, w)


def _holds(m: Machine, vector: Json) -> None:
    what, name = vector["predicate"]["what"], vector["predicate"]["name"]
    state = full(m, vector["state"])
    if what == "requires":
        values = tuple(vector["args"][p] for p, _ in m.table.effects[name].params)
        holds = not m.unmet(name, state, values)
    elif what == "invariant":
        holds = name not in m.violated(state)
    elif what == "step_invariant":
        holds = name not in m.unstable(state, full(m, vector["after"]))
    else:
        holds = m.holds(name, state)
    _same("holds", holds, vector["expect"]["holds"])


def _same(what: str, got: object, want: object) -> None:
    if got != want:
        raise Mismatch(f"{what}: got {got!r}, expected {want!r}")


@dataclass(frozen=True, slots=True)
class Story:
    """A story's steps as its vectors say them: what a port replays, step by step."""

    name: str
    steps: list[Json]
    machine: Machine

    @property
    def rows(self) -> list[str | None]:
        """The row each step took (None when ignored), or its refusal kind."""
        return [s["expect"].get("row", s["expect"].get("refused")) for s in self.steps]

    def effects(self, step: int) -> list[str]:
        """Every effect the step performed, nested calls' included, in the order performed."""
        return _performed(self.steps[step]["expect"])

    def refusal(self, step: int) -> tuple[str, str]:
        expect = self.steps[step]["expect"]
        return expect["refused"], expect["message"]

    def before(self, step: int) -> Json:
        """The whole state before the step, as ``{name: value}``."""
        return self.machine.describe(full(self.machine, self.steps[step]["state"]))

    def after(self, step: int) -> Json:
        """The whole state after the step (unchanged by a refusal)."""
        s = self.steps[step]
        return {**self.before(step), **s["expect"].get("changes", {})}

    def observed(self, step: int) -> list[Json]:
        """The whole state each notification of the step showed its listeners, in order."""
        m = self.machine
        return [m.describe(full(m, seen)) for seen in _observed(self.steps[step]["expect"])]


def _performed(node: Json) -> list[str]:
    out: list[str] = []
    inside = node.get("inside", [])
    for index, effect in enumerate(node.get("effects", [])):
        out.append(effect)
        for child in (c for c in inside if c["at"] == index):
            out += _performed(child)
    return out


def _observed(node: Json) -> list[Json]:
    out: list[Json] = []
    inside = node.get("inside", [])
    seen = {o["at"]: o["state"] for o in node.get("observed", [])}
    for index in range(len(node.get("effects", []))):
        if index in seen:
            out.append(seen[index])
        for child in (c for c in inside if c["at"] == index):
            out += _observed(child)
    return out
