"""A printed counterexample is real: it replays through the interpreter to the same violation.

Each test plants a one-row bug in a copy of ``specs/``, lets the checker refute it, prints the
shortest trace with :func:`format_trace` (or writes it as ITF), parses what was printed, and
replays it through the compiled table the way the runtime runs it: each step's event with its
arguments, listeners re-entering inside the notifying effect the trace names. The replay must
take the same rows, pass through the same states and stop in a state that breaks the same
property. The replay keeps its own books for the checker's additions (the environment's
budgets and decision 9's ``owed`` ghost), so the whole state is compared, not only the table's.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fsm_core._paths import specs_dir
from fsm_core.check import Report, check, load_model
from fsm_core.check._agent import NO_PARKED_WAKE
from fsm_core.check._report import format_trace, to_itf
from fsm_core.check._system import build
from fsm_core.spec import Effect, Machine, State
from fsm_core.spec._expr import Value
from tests.table_driver import TableDriver

BUDGETS = "{ send = 2, cancel = 2, dispose = 1, maintenance_start = 1, remove = 1 }"
REACTIONS = (
    '["publish_status", "notify_cancel_requested", "abort_holder", "publish_turn_end", "enqueue"]'
)


@dataclass(frozen=True, slots=True)
class Mutant:
    """A one-row bug: ``old`` becomes ``new`` in ``specs/agent.toml``."""

    old: str
    new: str


HOLDER_CLEARED_AFTER_TURN_END = Mutant(
    'do = ["turn := false", "holder := none", "release_holder()", "publish_turn_end(end)", '
    '"flush_session()"]',
    'do = ["turn := false", "release_holder()", "publish_turn_end(end)", "holder := none", '
    '"flush_session()"]',
)
"""retire.ended publishes turn/end while the holder is still live: a turn/end observer's
dispose (or cancel) aborts it, then the row clears the holder under the new reason."""

MAINTENANCE_KEEPS_HOLDER = Mutant(
    'do = ["holder := none", "reason := none", "latch := false", "release_holder()", '
    '{ when = "quiescent", do = ["settle_idle()"] }]\nclauses = ["S004.ready-in-maintenance"]',
    'do = ["reason := none", "latch := false", "release_holder()", '
    '{ when = "quiescent", do = ["settle_idle()"] }]\nclauses = ["S004.ready-in-maintenance"]',
)
"""maintenance.finish.idle releases the holder but never clears it: idle with a holder."""

REPLAY_KEEPS_LATCH = Mutant(
    'do = ["latch := false", "scheduled := true", "publish_status(idle)", "schedule_driver()"]',
    'do = ["scheduled := true", "publish_status(idle)", "schedule_driver()"]',
)
"""converge.replay forgets to clear the latch: the idle status is published with it set."""


def mutant_report(tmp_path: Path, mutant: Mutant, *, reactions: bool = True) -> Report:
    """Check one agent model (agent_races' environment) over a mutated copy of specs/."""
    shutil.copytree(specs_dir(), tmp_path / "specs")
    table = tmp_path / "specs" / "agent.toml"
    text = table.read_text(encoding="utf-8")
    assert text.count(mutant.old) == 1, "the mutant no longer matches specs/agent.toml"
    table.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")
    (tmp_path / "models").mkdir()
    model = tmp_path / "models" / "mutant.toml"
    listeners = f"reactions = {REACTIONS}\n" if reactions else ""
    model.write_text(
        '[model]\ntable = "../specs/agent.toml"\nkind = "agent"\n\n'
        f"[environment]\nbudgets = {BUDGETS}\n{listeners}",
        encoding="utf-8",
    )
    report = check(load_model(model))
    assert report.violation is not None, "the checker did not refute the mutant"
    return report


Refute = Callable[[Mutant, bool], Report]


@pytest.fixture(scope="module")
def refute(tmp_path_factory: pytest.TempPathFactory) -> Refute:
    """``refute(mutant, reactions)``: the checker's report on the mutant, checked once."""
    cache: dict[tuple[Mutant, bool], Report] = {}

    def get(mutant: Mutant, reactions: bool) -> Report:
        if (mutant, reactions) not in cache:
            where = tmp_path_factory.mktemp("mutant")
            cache[mutant, reactions] = mutant_report(where, mutant, reactions=reactions)
        return cache[mutant, reactions]

    return get


# --- the trace, parsed back ----------------------------------------------------------------------


@dataclass(slots=True)
class Call:
    """One call of a trace: a step's event, or a listener's call inside a notifying effect."""

    event: str
    args: dict[str, Value]
    row: str | None
    stopped: str = ""
    inside: list[tuple[str, Call]] = field(default_factory=list)

    def rows(self) -> Iterator[str | None]:
        yield self.row
        for _, nested in self.inside:
            yield from nested.rows()


@dataclass(frozen=True, slots=True)
class Trace:
    initial: dict[str, Value]
    steps: list[Call]
    prop: str
    final: dict[str, Value]


CALL = r"(?P<event>\w+)\((?P<args>[^)]*)\) -> (?P<row>\S+)(?: \(stopped at (?P<stopped>.+?)\))?"
STEP = re.compile(rf"^(?P<n>\d+)\. {CALL}   changed: .+$")
INSIDE = re.compile(rf"^(?P<indent>(?:   )+)inside (?P<effect>\w+\([^)]*\)): {CALL}$")
INITIAL = re.compile(r"^0\. initial: (?P<state>.+)$")
LAST = re.compile(r"^violated: (?P<prop>\S+) \(.+\) in state (?P<n>\d+)(?:, at [^:]+)?: (?P<s>.+)$")


def parse_value(text: str) -> Value:
    if text in ("true", "false"):
        return text == "true"
    return int(text) if text.isdigit() else text


def parse_state(text: str) -> dict[str, Value]:
    return {k: parse_value(v) for k, v in (pair.split("=") for pair in text.split(" "))}


def parse_call(m: re.Match[str]) -> Call:
    pairs = [a.split("=") for a in m["args"].split(", ")] if m["args"] else []
    row = None if m["row"] == "(ignored)" else m["row"]
    return Call(m["event"], {k: parse_value(v) for k, v in pairs}, row, m["stopped"] or "")


def parse_trace(text: str) -> Trace:
    """Read :func:`format_trace`'s output back into calls; fail on any line it cannot read."""
    lines = text.splitlines()
    first = INITIAL.match(lines[0])
    last = LAST.match(lines[-1])
    assert first is not None and last is not None, text
    steps: list[Call] = []
    open_calls: list[Call] = []  # open_calls[d] is the call at indentation depth d
    for line in lines[1:-1]:
        if m := STEP.match(line):
            assert int(m["n"]) == len(steps) + 1
            steps.append(parse_call(m))
            open_calls = [steps[-1]]
        elif m := INSIDE.match(line):
            depth = len(m["indent"]) // 3
            nested = parse_call(m)
            open_calls[depth - 1].inside.append((m["effect"], nested))
            open_calls[depth:] = [nested]
        else:
            raise AssertionError(f"unreadable trace line: {line!r}")
    assert int(last["n"]) == len(steps)
    return Trace(parse_state(first["state"]), steps, last["prop"], parse_state(last["s"]))


def itf_value(v: Any) -> Value:
    if isinstance(v, dict):
        return int(v["#bigint"])
    assert isinstance(v, bool | str), v
    return v


def itf_call(meta: dict[str, Any]) -> Call:
    args = {k: itf_value(v) for k, v in meta["args"].items()}
    call = Call(meta["event"], args, meta["row"], meta.get("stopped", ""))
    call.inside = [(r["effect"], itf_call(r)) for r in meta.get("inside", [])]
    return call


def itf_trace(doc: dict[str, Any]) -> Trace:
    """Read an ITF document (as JSON text would give it back) into calls."""
    names: list[str] = doc["vars"]
    states = [{n: itf_value(s[n]) for n in names} for s in doc["states"]]
    steps = [itf_call(s["#meta"]) for s in doc["states"][1:]]
    return Trace(states[0], steps, doc["#meta"]["property"], states[-1])


# --- replay --------------------------------------------------------------------------------------


class Stopped(Exception):
    """A property broke at a notifying effect: a listener there would see the broken state."""


class Replay:
    """Run a trace's calls on the interpreter, as the runtime and its listeners would.

    The books the checker adds to the table's state are kept here independently: the
    environment's budgets, and ``owed`` (DESIGN.md decision 9: a waking send accepted before
    disposal is owed a turn until claimed, discarded, parked by a keep_inbox cancel, or
    excused by disposal).
    """

    def __init__(self, report: Report) -> None:
        self.machine: Machine = report.model.machine
        self.budgets = dict(report.model.budgets)
        self.owed = False
        self.driver = TableDriver(self.machine)
        notifying = [n for n, e in self.machine.table.effects.items() if e.notifies]
        for name in ("claim_inbox", "clear_inbox"):
            self.driver.on(name, self._discharge, once=False)
        for name in notifying:
            self.driver.on(name, self._check, once=False)

    def _discharge(self, driver: TableDriver, effect: Effect) -> None:
        self.owed = False

    def _check(self, driver: TableDriver, effect: Effect) -> None:
        if self.violated() is not None:
            raise Stopped(str(effect))

    def violated(self) -> str | None:
        """The first property the current state breaks, in the checker's order."""
        bad = self.machine.violated(self.driver.store)
        if bad:
            return bad[0]
        d = self.driver
        idle = d["phase"] == "idle" and d["holder"] == "none" and not d["scheduled"]
        return NO_PARKED_WAKE if self.owed and idle else None

    def run(self, call: Call) -> None:
        """Fire ``call``; its listeners' calls fire inside the effects the trace names."""
        if call.event in self.budgets:
            self.budgets[call.event] -= 1
        pending = list(call.inside)

        def arm() -> None:
            if pending:
                self.driver.on(pending[0][0].partition("(")[0], react)

        def react(driver: TableDriver, effect: Effect) -> None:
            if str(effect) != pending[0][0]:
                arm()  # the same effect with other arguments: wait for the named one
                return
            _, nested = pending.pop(0)
            self.run(nested)
            arm()

        arm()
        args = self.machine.arguments(call.event, **call.args)
        kw = dict(call.args)
        ignored = self.machine.select(self.driver.store, call.event, args) is None
        if not ignored and call.event == "send" and kw["wake"] and not self.driver["closing"]:
            self.owed = True
        self.driver.fire(call.event, **call.args)
        assert not pending, f"{call.event}: reactions never reached: {pending}"
        if not ignored and (
            (call.event == "cancel" and kw["keep_inbox"])
            or call.event == "dispose"
            or (call.event in ("remove", "take_steering") and not kw["rest"])
        ):
            self.owed = False

    def step(self, call: Call) -> str:
        """Run one step of the trace; return the effect it stopped at ('' if it ran out)."""
        try:
            self.run(call)
        except Stopped as stop:
            return str(stop)
        return ""

    @property
    def state(self) -> State:
        budgets = tuple(self.budgets[e] for e in self.budgets)
        return (*self.driver.store, *budgets, self.owed)


def replay(report: Report, trace: Trace) -> tuple[Replay, list[State]]:
    """Replay ``trace``; return the replay and the state after each step (initial first)."""
    r = Replay(report)
    assert dict(zip(report.names, r.state, strict=True)) == trace.initial
    states = [r.state]
    for i, call in enumerate(trace.steps, start=1):
        stopped_at = r.step(call)
        last = i == len(trace.steps)
        assert stopped_at == (stop_point(call) if last else ""), f"step {i}"
        states.append(r.state)
    rows = [row for call in trace.steps for row in call.rows()]
    assert r.driver.rows == rows
    return r, states


def stop_point(call: Call) -> str:
    """The effect where the trace says ``call`` (or a listener's call inside it) was cut short."""
    return call.stopped or "".join(stop_point(nested) for _, nested in call.inside)


def assert_replays(report: Report, trace: Trace) -> None:
    """The replay reaches the checker's states and breaks the same property at the end."""
    assert report.violation is not None
    r, states = replay(report, trace)
    assert states == [s for _, s in report.violation.trace]
    assert dict(zip(report.names, states[-1], strict=True)) == trace.final
    assert trace.prop == report.violation.name
    assert r.violated() == report.violation.name


# --- the replay proof ----------------------------------------------------------------------------


def test_a_reentrant_counterexample_replays_to_the_same_violation(refute: Refute) -> None:
    report = refute(HOLDER_CLEARED_AFTER_TURN_END, True)
    text = format_trace(report)
    trace = parse_trace(text)
    assert trace.prop == "reason_iff_aborted"
    # The refuting step is re-entrant: a turn/end observer acts while the holder is live.
    last = trace.steps[-1]
    assert (last.event, last.row) == ("retire", "retire.ended")
    assert [(effect, c.row) for effect, c in last.inside] == [
        ("publish_turn_end(completed)", "dispose.turn")
    ]
    assert (
        text.splitlines()[-2] == "   inside publish_turn_end(completed): dispose() -> dispose.turn"
    )
    assert_replays(report, trace)


def test_a_plain_counterexample_replays_to_the_same_violation(refute: Refute) -> None:
    report = refute(MAINTENANCE_KEEPS_HOLDER, False)
    text = format_trace(report)
    assert text.splitlines()[:3] == [
        "0. initial: phase=idle holder=none reason=none turn=false pending=false latch=false "
        "marker=false scheduled=false closing=false budget.send=2 budget.cancel=2 "
        "budget.dispose=1 budget.maintenance_start=1 budget.remove=1 ghost.owed=false",
        "1. maintenance_start() -> maintenance.start   changed: phase idle->maintenance, "
        "holder none->live, budget.maintenance_start 1->0",
        "2. maintenance_finish() -> maintenance.finish.idle   changed: phase maintenance->idle",
    ]
    assert text.splitlines()[3].startswith(
        "violated: quiet_phases_hold_nothing (phase in {idle, disposing, disposed} implies "
        "holder == none and not turn) in state 2: phase=idle holder=live "
    )
    assert_replays(report, parse_trace(text))


def test_a_step_cut_short_at_a_notification_replays_to_the_same_violation(
    refute: Refute,
) -> None:
    report = refute(REPLAY_KEEPS_LATCH, True)
    text = format_trace(report)
    trace = parse_trace(text)
    last = trace.steps[-1]
    assert (last.row, last.stopped) == ("converge.replay", "publish_status(idle)")
    assert text.splitlines()[-1].startswith(
        "violated: latch_only_while_busy (latch implies phase in {cancelling, maintenance}) "
        "in state 6, at publish_status(idle) inside step 6: phase=idle "
    )
    assert_replays(report, trace)


def test_a_trace_without_its_reentrant_call_does_not_replay(refute: Refute) -> None:
    report = refute(HOLDER_CLEARED_AFTER_TURN_END, True)
    lines = format_trace(report).splitlines()
    tampered = "\n".join(line for line in lines if "inside publish_turn_end" not in line)
    with pytest.raises(AssertionError):
        assert_replays(report, parse_trace(tampered))


@pytest.mark.parametrize(
    "mutant", [HOLDER_CLEARED_AFTER_TURN_END, REPLAY_KEEPS_LATCH], ids=["turn_end", "latch"]
)
def test_the_itf_trace_replays_to_the_same_violation(refute: Refute, mutant: Mutant) -> None:
    report = refute(mutant, True)
    doc = json.loads(json.dumps(to_itf(report)))
    trace = itf_trace(doc)
    assert trace.steps == parse_trace(format_trace(report)).steps
    assert_replays(report, trace)


# --- the ITF shape -------------------------------------------------------------------------------


def walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


def test_the_itf_trace_has_the_itf_shape(refute: Refute) -> None:
    report = refute(HOLDER_CLEARED_AFTER_TURN_END, True)
    doc = json.loads(json.dumps(to_itf(report)))
    assert set(doc) == {"#meta", "vars", "states"}
    meta = doc["#meta"]
    assert meta["format"] == "ITF"
    assert meta["format-description"] == "https://apalache-mc.org/docs/adr/015adr-trace.html"
    assert meta["property"] == "reason_iff_aborted"
    assert meta["source"] == "models/mutant.toml"
    assert doc["vars"] == list(report.names)
    assert [s["#meta"]["index"] for s in doc["states"]] == list(range(len(doc["states"])))
    for state in doc["states"]:
        assert set(state) == {"#meta", *doc["vars"]}
        values = [state[n] for n in doc["vars"]]
        # Integers only as {"#bigint": "..."}; booleans and strings as themselves.
        for v in walk(values):
            assert not isinstance(v, int | float) or isinstance(v, bool), v
            if isinstance(v, dict):
                assert set(v) == {"#bigint"} and re.fullmatch(r"-?\d+", v["#bigint"]), v
    s0, s1, s4 = doc["states"][0], doc["states"][1], doc["states"][4]
    assert s0["#meta"] == {"index": 0}
    assert s0["phase"] == "idle" and s0["turn"] is False
    assert s0["budget.send"] == {"#bigint": "2"}
    assert s1["#meta"]["action"] == "send(wake=false, lane=next_turn)"
    assert s1["#meta"]["args"] == {"wake": False, "lane": "next_turn"}
    assert s4["#meta"]["row"] == "retire.ended"
    assert s4["#meta"]["inside"] == [
        {
            "effect": "publish_turn_end(completed)",
            "action": "dispose()",
            "event": "dispose",
            "args": {},
            "row": "dispose.turn",
        }
    ]


# --- shortest ------------------------------------------------------------------------------------


def violations_within(report: Report, steps: int) -> list[str]:
    """Every property broken within ``steps`` steps of the initial state, by a plain search.

    Independent of the checker's parent pointers: it follows the successor function level by
    level and checks every state it meets, as BFS would before reaching the next level.
    """
    system = build(report.model).system
    found: list[str] = []
    level = {system.initial}
    seen = set(level)
    for _ in range(steps + 1):
        following: set[Any] = set()
        for s in level:
            bad = system.first_violated(s)
            nexts = system.successors(s) if bad is None else ()
            if bad is None and not nexts and not system.quiescent(s):
                bad = "deadlock"
            if bad is not None:
                found.append(bad)
            following |= {t for _, t in nexts} - seen
        seen |= following
        level = following
    return found


@pytest.mark.parametrize(
    ("mutant", "reactions", "minimal", "why"),
    [
        (
            HOLDER_CLEARED_AFTER_TURN_END,
            True,
            4,
            "a live turn needs send, start and claim; only retire.ended clears the holder",
        ),
        (MAINTENANCE_KEEPS_HOLDER, False, 2, "maintenance must start before it can finish"),
        (
            REPLAY_KEEPS_LATCH,
            True,
            6,
            "converge.replay needs a retired aborted turn: send, start, claim, cancel (no "
            "listener runs inside claim), retire, converge",
        ),
    ],
    ids=["turn_end", "maintenance", "latch"],
)
def test_the_trace_is_a_shortest_one(
    refute: Refute, mutant: Mutant, reactions: bool, minimal: int, why: str
) -> None:
    report = refute(mutant, reactions)
    assert report.violation is not None
    assert len(report.violation.trace) - 1 == minimal, why
    assert violations_within(report, minimal - 1) == []


def test_a_model_that_holds_has_no_trace_to_print(tmp_path: Path) -> None:
    shutil.copytree(specs_dir(), tmp_path / "specs")
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / "quiet.toml"
    path.write_text(
        '[model]\ntable = "../specs/agent.toml"\nkind = "agent"\n\n'
        "[environment]\nbudgets = { send = 1 }\n",
        encoding="utf-8",
    )
    report = check(load_model(path))
    assert report.verdict == "ok"
    with pytest.raises(ValueError, match=r"^quiet holds: there is no counterexample$"):
        format_trace(report)


def test_a_tree_trace_names_each_node_and_its_slot(tmp_path: Path) -> None:
    """Tree states hold one activation per slot: shown as ``node.var``, ITF records in variants."""
    shutil.copytree(specs_dir(), tmp_path / "specs")
    table = tmp_path / "specs" / "activation.toml"
    old = 'on = "children_joined"\nfrom = ["joining"]\nguard = "not children"\n'
    text = table.read_text(encoding="utf-8")
    assert text.count(old) == 1
    table.write_text(
        text.replace(old, 'on = "children_joined"\nfrom = ["joining"]\n'), encoding="utf-8"
    )
    (tmp_path / "models").mkdir()
    path = tmp_path / "models" / "tree.toml"
    path.write_text(
        '[model]\ntable = "../specs/activation.toml"\nkind = "activation-tree"\n\n'
        "[tree]\ndepth = 1\nwidth = 1\n\n[environment]\nbudgets = { admit = 1, dispose = 1 }\n",
        encoding="utf-8",
    )
    report = check(load_model(path))
    assert report.violation is not None
    lines = format_trace(report).splitlines()
    assert lines[0].startswith("0. initial: a.stage=active a.children=false ")
    assert " a.1=absent budget.admit=1 " in lines[0]
    assert lines[1].startswith(
        "1. a.admit() -> admit   changed: a.children false->true, a.1 absent->active{"
    )
    assert lines[-1].startswith(f"violated: {report.violation.name} (")
    doc = json.loads(json.dumps(to_itf(report)))
    assert doc["vars"][:2] == ["a", "a.1"]
    assert doc["states"][0]["a.1"] == {"tag": "None", "value": {"#tup": []}}
    assert doc["states"][1]["a.1"]["tag"] == "Some"
    assert doc["states"][1]["a.1"]["value"]["stage"] == "active"
    assert doc["states"][1]["#meta"]["instance"] == "a"
