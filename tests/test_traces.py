"""A printed counterexample is real: it replays through the interpreter to the same violation.

Each test plants a one-row bug in a copy of ``specs/`` (a mutant of ``fsm-core mutants``'
catalogue, or one of two more made with the same row edits), lets the checker refute it, prints the
shortest trace with :func:`format_trace` (or writes it as ITF), parses what was printed, and
replays it through the compiled table the way the runtime runs it: each step's event with its
arguments, listeners re-entering inside the notifying effect the trace names. The replay must
take the same rows, pass through the same states and stop in a state that breaks the same
property. The replay keeps its own books for the checker's additions (the environment's
budgets, decision 9's ``owed`` ghost, decision 1's ``prerun`` ghost and the ``broken`` slot
where a broken contract or step invariant is recorded), so the whole state is compared, not
only the table's.

Every planted bug loads: the loader proves each row's contracts and step invariants from
every valid state on its own, so each bug here is one only the checker can refute.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fsm_core.check import DEADLOCK, Report, check, load_model
from fsm_core.check._composed._agent import NO_PARKED_WAKE, PRERUN_OPENS_NO_TURN
from fsm_core.check._report import format_trace, to_itf
from fsm_core.check._system import build
from fsm_core.table import Effect, Machine, State
from fsm_core.table._expr import Value
from fsm_core.tools._mutants import AGENT, BY_NAME, Mutant
from fsm_core.tools._row_edits import Remove
from tests.helpers import copy_specs, write_model
from tests.table_driver import TableDriver

BUDGETS = "{ send = 2, cancel = 2, dispose = 1, maintenance_start = 1, remove = 1 }"
REACTIONS = (
    '["publish_status", "notify_cancel_requested", "abort_holder", "publish_turn_end", "enqueue"]'
)


LATCH_AFTER_INSERTION = BY_NAME["latch_after_insertion"]
"""send.latched latches only after publishing the insertion: an inbox listener's dispose
finds no latch to clear, then the row latches the wake under disposal."""

# Two bugs of this file's own, outside the catalogue, planted with the same edits.
MAINTENANCE_FORGETS_HOLDER = Mutant(
    "maintenance_forgets_holder",
    "agent.toml",
    (Remove("maintenance.finish.idle", "holder := none", "reason := none", "release_holder()"),),
    "maintenance.finish.idle forgets the task's holder (and its reason): idle with a live one.",
    AGENT,
)

REPLAY_KEEPS_LATCH = Mutant(
    "replay_keeps_latch",
    "agent.toml",
    (Remove("converge.replay", "latch := false"),),
    "converge.replay forgets to clear the latch: the idle status is published with it set.",
    AGENT,
)

DISCARD_UNLATCHES_FIRST = BY_NAME["clearing_cancel_keeps_latch"]
"""cancel.discard drops the latch before it notifies: a cancel-requested observer's wake
latches again, and clear_inbox() runs with the latch set. From every valid state the row alone
keeps clear_inbox's contract (the loader proves it); only a listener re-entering breaks it."""

LAST_WINS_CAUSE = BY_NAME["last_wins_cause"]
"""cancel.turn aborts even when a cancel-requested observer's abort already won: the outer
cause rewrites the reason of a holder that stays aborted (the step invariant
reason_first_wins)."""

PRERUN_LEAVES_NO_MARKER = BY_NAME["prerun_cancel_opens_turn"]
"""cancel.prerun leaves no marker: the scheduled driver opens a turn anyway (decision 1)."""


def mutant_report(tmp_path: Path, mutant: Mutant, *, reactions: bool = True) -> Report:
    """Check one agent model (agent_races' environment) over a mutated copy of specs/."""
    mutant.plant(copy_specs(tmp_path))
    listeners = f"reactions = {REACTIONS}\n" if reactions else ""
    model = write_model(
        tmp_path,
        "mutant",
        '[model]\ntable = "../specs/agent.toml"\nkind = "agent"\n\n'
        f"[environment]\nbudgets = {BUDGETS}\n{listeners}",
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
LAST = re.compile(
    r"^violated: (?P<prop>\S+)(?: \(.+\))? in state (?P<n>\d+)(?:, at [^:]+)?: (?P<s>.+)$"
)


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


def _steps(text: str) -> list[str]:
    """The trace's lines up to the ``violated:`` line (without the clauses it breaks, or a
    broken step invariant's values before and after)."""
    lines = text.splitlines()
    while not lines[-1].startswith("violated: "):
        assert lines[-1].startswith(("clauses: ", "changed: ")), lines[-1]
        lines.pop()
    return lines


def parse_trace(text: str) -> Trace:
    """Read :func:`format_trace`'s output back into calls; fail on any line it cannot read."""
    lines = _steps(text)
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
    """A property broke inside a step: at an effect whose contract fails, or at a notifying
    effect where a listener would see a broken invariant. The step ends there."""


class Replay:
    """Run a trace's calls on the interpreter, as the runtime and its listeners would.

    The books the checker adds to the table's state are kept here independently: the
    environment's budgets; ``owed`` (DESIGN.md decision 9: a waking send accepted before
    disposal is owed a turn until a claim leaves nothing pending, or it is discarded, parked by
    a keep_inbox cancel, or excused by disposal); ``prerun`` (decision 1: a cancel on an idle
    agent with a driver scheduled, until a waking send or the driver's start); and ``broken``,
    the contract or step invariant found broken. What is proven, and when, is the checker's:
    each effect's ``requires`` as it runs; at a notifying effect, before its listeners, the
    step invariants since the last state a listener saw, decision 1 and every invariant; at the
    step's end the step invariants again.
    """

    def __init__(self, report: Report) -> None:
        self.machine: Machine = report.model.machine
        self.budgets = dict(report.model.budgets)
        assert report.names == (
            *self.machine.names,
            *(f"budget.{e}" for e in self.budgets),
            "ghost.owed",
            "ghost.prerun",
            "ghost.broken",
        ), "the checker keeps books this replay does not"
        self.owed = False
        self.prerun = False
        self.broken = ""
        self.driver = TableDriver(self.machine)
        self.observed: State = self.driver.state  # the last state a listener could see
        effects = self.machine.table.effects
        self.notifying = frozenset(n for n, e in effects.items() if e.notifies)
        for name in effects:  # first in line: before any listener inside the effect
            self.driver.on(name, self._observe, once=False)

    def _observe(self, driver: TableDriver, effect: Effect) -> None:
        now = driver.state
        now_pending = driver["pending"]  # what a claim left: work left over stays owed
        if effect.name == "clear_inbox" or (effect.name == "claim_inbox" and not now_pending):
            self.owed = False
        if self.machine.unmet(effect.name, now, effect.args):
            self.broken = f"{effect.name}.requires"
        elif effect.name in self.notifying:
            before, self.observed = self.observed, now
            unstable = self.machine.unstable(before, now)
            if unstable:
                self.broken = unstable[0]
            elif effect.name == "publish_status" and effect.args == ("running",) and self.prerun:
                self.broken = PRERUN_OPENS_NO_TURN
        if self.broken or (effect.name in self.notifying and self.violated() is not None):
            raise Stopped(str(effect))

    def violated(self) -> str | None:
        """The first property the current state breaks, in the checker's order."""
        if self.broken:
            return self.broken
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
        fired = self.machine.select(self.driver.store, call.event, args) is not None
        prerun = self.driver["phase"] == "idle" and self.driver["scheduled"]
        if fired and call.event == "send" and kw["wake"]:
            self.prerun = False
            if not self.driver["closing"]:
                self.owed = True
        elif fired and call.event == "cancel" and prerun:
            self.prerun = True
        self.driver.fire(call.event, **call.args)
        assert not pending, f"{call.event}: reactions never reached: {pending}"
        if fired and call.event == "start":
            self.prerun = False
        if fired and (
            (call.event == "cancel" and kw["keep_inbox"])
            or call.event == "dispose"
            or (call.event in ("remove", "take_steering") and not kw["rest"])
        ):
            self.owed = False

    def step(self, call: Call) -> str:
        """Run one step of the trace; return the effect it stopped at ('' if it ran out)."""
        self.observed = self.driver.state
        try:
            self.run(call)
        except Stopped as stop:
            return str(stop)
        unstable = self.machine.unstable(self.observed, self.driver.store)
        if unstable:
            self.broken = unstable[0]
        return ""

    @property
    def state(self) -> State:
        budgets = tuple(self.budgets[e] for e in self.budgets)
        return (*self.driver.store, *budgets, self.owed, self.prerun, self.broken)


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
    report = refute(LATCH_AFTER_INSERTION, True)
    text = format_trace(report)
    trace = parse_trace(text)
    assert trace.prop == "disposal_never_latches"
    # The refuting step is re-entrant: an inbox listener disposes while the wake is unlatched.
    last = trace.steps[-1]
    assert (last.event, last.row, last.stopped) == ("send", "send.latched", "")
    assert [(effect, c.row) for effect, c in last.inside] == [
        ("enqueue(next_turn)", "dispose.maintenance")
    ]
    assert _steps(text)[-2] == "   inside enqueue(next_turn): dispose() -> dispose.maintenance"
    assert _steps(text)[-1].startswith(
        "violated: disposal_never_latches (closing implies not latch) in state 2: "
        "phase=maintenance holder=aborted reason=disposed "
    )
    assert_replays(report, trace)


def test_a_plain_counterexample_replays_to_the_same_violation(refute: Refute) -> None:
    report = refute(MAINTENANCE_FORGETS_HOLDER, False)
    text = format_trace(report)
    assert text.splitlines()[:3] == [
        "0. initial: phase=idle holder=none reason=none turn=false pending=false latch=false "
        "marker=false scheduled=false closing=false shut=false unwound=false budget.send=2 "
        "budget.cancel=2 "
        "budget.dispose=1 budget.maintenance_start=1 budget.remove=1 ghost.owed=false "
        "ghost.prerun=false ghost.broken=",
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
    assert _steps(text)[-1].startswith(
        "violated: latch_only_while_busy (latch implies phase in {cancelling, maintenance}) "
        "in state 6, at publish_status(idle) inside step 6: phase=idle "
    )
    assert_replays(report, trace)


def test_a_contract_broken_only_through_reentrancy_replays_to_the_same_violation(
    refute: Refute,
) -> None:
    """The loader accepted the row (alone it keeps clear_inbox's contract from every valid
    state); the checker breaks it with a listener, and the replay breaks it the same way."""
    report = refute(DISCARD_UNLATCHES_FIRST, True)
    text = format_trace(report)
    trace = parse_trace(text)
    assert trace.prop == "clear_inbox.requires"
    assert trace.final["ghost.broken"] == "clear_inbox.requires"
    assert trace.final["latch"] is True
    # Inside the last step, an abort observer's cancel discards; inside that cancel's
    # notification a wake latches again, and the discard's clear_inbox() runs with it set.
    assert _steps(text)[-3:-1] == [
        "   inside abort_holder(user): cancel(cause=parent, keep_inbox=false) -> cancel.discard "
        "(stopped at clear_inbox())",
        "      inside notify_cancel_requested(parent): send(wake=true, lane=next_step) "
        "-> send.latched",
    ]
    assert _steps(text)[-1].startswith(
        "violated: clear_inbox.requires (clear_inbox requires not pending and not latch) "
        "in state 2, at clear_inbox() inside step 2: "
        "phase=maintenance "
    )
    assert stop_point(trace.steps[-1]) == "clear_inbox()"
    assert_replays(report, trace)
    # Without the listener's wake the same calls keep the contract: the replay runs out.
    lines = text.splitlines()
    tampered = "\n".join(line for line in lines if "inside notify_cancel_requested" not in line)
    with pytest.raises(AssertionError, match="step 2"):
        assert_replays(report, parse_trace(tampered))


def test_a_broken_step_invariant_replays_to_the_same_violation(refute: Refute) -> None:
    report = refute(LAST_WINS_CAUSE, True)
    text = format_trace(report)
    trace = parse_trace(text)
    assert trace.prop == "reason_first_wins"
    # Inside the cancel, a cancel-requested observer's dispose wins the reason; the cancel's
    # own abort then rewrites it, and its abort observers would see the second reason.
    assert _steps(text)[-3:-1] == [
        "   inside publish_status(running): cancel(cause=parent, keep_inbox=true) -> cancel.turn "
        "(stopped at abort_holder(parent))",
        "      inside notify_cancel_requested(parent): dispose() -> dispose.turn",
    ]
    assert _steps(text)[-1].startswith(
        "violated: reason_first_wins (reason unchanged while holder == aborted) in state 2, "
        "at abort_holder(parent) inside step 2: "
        "phase=cancelling holder=aborted reason=parent "
    )
    assert_replays(report, trace)


def test_a_prerun_cancel_that_opens_a_turn_replays_to_the_same_violation(refute: Refute) -> None:
    report = refute(PRERUN_LEAVES_NO_MARKER, True)
    text = format_trace(report)
    trace = parse_trace(text)
    assert trace.prop == PRERUN_OPENS_NO_TURN
    assert (trace.final["ghost.prerun"], trace.final["marker"]) == (True, False)
    assert (trace.steps[-1].row, stop_point(trace.steps[-1])) == (
        "start.turn",
        "publish_status(running)",
    )
    assert_replays(report, trace)


def test_a_trace_without_its_reentrant_call_does_not_replay(refute: Refute) -> None:
    report = refute(LATCH_AFTER_INSERTION, True)
    lines = format_trace(report).splitlines()
    tampered = "\n".join(line for line in lines if "dispose() -> dispose.maintenance" not in line)
    assert len(tampered.splitlines()) == len(lines) - 1
    trace = parse_trace(tampered)  # still well formed: the parser is not what refuses it
    _, states = replay(report, trace)
    assert report.violation is not None
    checked = [s for _, s in report.violation.trace]
    assert states[:2] == checked[:2]
    assert states[2] != checked[2]  # the listener's dispose is what made the violating state


@pytest.mark.parametrize(
    "mutant",
    [LATCH_AFTER_INSERTION, REPLAY_KEEPS_LATCH, DISCARD_UNLATCHES_FIRST, LAST_WINS_CAUSE],
    ids=["insertion", "latch", "contract", "step_invariant"],
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
    report = refute(LATCH_AFTER_INSERTION, True)
    doc = json.loads(json.dumps(to_itf(report)))
    assert set(doc) == {"#meta", "vars", "states"}
    meta = doc["#meta"]
    assert meta["format"] == "ITF"
    assert meta["format-description"] == "https://apalache-mc.org/docs/adr/015adr-trace.html"
    assert meta["property"] == "disposal_never_latches"
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
    s0, s1, s2 = doc["states"]
    assert s0["#meta"] == {"index": 0}
    assert s0["phase"] == "idle" and s0["turn"] is False
    assert s0["budget.send"] == {"#bigint": "2"}
    assert s0["ghost.broken"] == ""
    assert s1["#meta"]["action"] == "send(wake=false, lane=next_turn)"
    assert s1["#meta"]["args"] == {"wake": False, "lane": "next_turn"}
    assert s1["#meta"]["row"] == "send.idle.quiet"
    assert s2["#meta"]["row"] == "send.latched"
    assert "stopped" not in s2["#meta"]
    assert s2["#meta"]["inside"] == [
        {
            "effect": "enqueue(next_turn)",
            "action": "dispose()",
            "event": "dispose",
            "args": {},
            "row": "dispose.maintenance",
        }
    ]
    assert (s2["latch"], s2["closing"]) == (True, True)


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
                bad = DEADLOCK
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
            LATCH_AFTER_INSERTION,
            True,
            2,
            "a wake latches only while an activity owns the agent: maintenance starts (inside "
            "the first send's insertion at the earliest), then the latched send",
        ),
        (MAINTENANCE_FORGETS_HOLDER, False, 2, "maintenance must start before it can finish"),
        (
            REPLAY_KEEPS_LATCH,
            True,
            6,
            "converge.replay needs a retired aborted turn: send, start, claim, cancel (no "
            "listener runs inside claim), retire, converge",
        ),
        (
            DISCARD_UNLATCHES_FIRST,
            True,
            2,
            "a discard with a latching observer needs an aborted activity and queued work "
            "first; with two listener calls a step cannot also start and abort it",
        ),
        (
            LAST_WINS_CAUSE,
            True,
            2,
            "cancel.turn needs a live turn holder: a send schedules the driver, whose start "
            "publishes running",
        ),
    ],
    ids=["insertion", "maintenance", "latch", "contract", "step_invariant"],
)
def test_the_trace_is_a_shortest_one(
    refute: Refute, mutant: Mutant, reactions: bool, minimal: int, why: str
) -> None:
    report = refute(mutant, reactions)
    assert report.violation is not None
    assert len(report.violation.trace) - 1 == minimal, why
    assert violations_within(report, minimal - 1) == []


def test_a_model_that_holds_has_no_trace_to_print(tmp_path: Path) -> None:
    path = write_model(
        tmp_path,
        "quiet",
        '[model]\ntable = "../specs/agent.toml"\nkind = "agent"\n\n'
        "[environment]\nbudgets = { send = 1 }\n",
    )
    report = check(load_model(path))
    assert report.verdict == "ok"
    with pytest.raises(ValueError, match=r"^quiet holds: there is no counterexample$"):
        format_trace(report)


def test_a_tree_trace_names_each_node_and_its_slot(tmp_path: Path) -> None:
    """Tree states hold one activation per slot: shown as ``node.var``, ITF records in variants."""
    BY_NAME["parent_leaves_before_children"].plant(copy_specs(tmp_path))
    path = write_model(
        tmp_path,
        "tree",
        '[model]\ntable = "../specs/activation.toml"\nkind = "activation-tree"\n\n'
        '[tree]\ndepth = 1\nwidth = 1\ndoor = "../specs/admission.toml"\n'
        'wiring = "../specs/wiring.toml"\n\n'
        "[environment]\nbudgets = { admit = 1, dispose = 1 }\n",
    )
    report = check(load_model(path))
    assert report.violation is not None
    lines = format_trace(report).splitlines()
    assert lines[0].startswith("0. initial: a.stage=active a.children=false ")
    assert " a.1=absent door.registry=admitting budget.admit=1 " in lines[0]
    assert lines[1].startswith(
        "1. door.admit(parent=activation) for a -> admit.below   changed: a.children "
        "false->true, a.1 absent->active{"
    )
    assert lines[2] == "   inside admit_below(): a.admit() -> admit"
    assert lines[-2].startswith(f"violated: {report.violation.name} (")
    assert lines[-1].startswith("clauses: S004.")
    doc = json.loads(json.dumps(to_itf(report)))
    assert doc["vars"][:2] == ["a", "a.1"]
    assert doc["states"][0]["a.1"] == {"tag": "None", "value": {"#tup": []}}
    assert doc["states"][1]["a.1"]["tag"] == "Some"
    assert doc["states"][1]["a.1"]["value"]["stage"] == "active"
    assert doc["states"][1]["#meta"]["instance"] == "door"
    assert doc["states"][1]["#meta"]["target"] == "a"
    assert doc["states"][1]["#meta"]["inside"][0]["instance"] == "a"
    assert doc["states"][0]["door"] == {"tag": "Some", "value": {"registry": "admitting"}}
