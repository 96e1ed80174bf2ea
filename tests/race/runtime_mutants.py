"""Runtime mutants: plausible bugs in the runtime's own Python, each of which the race search
must kill.

The spec mutants (``fsm_core/tools/_mutants.py``) plant bugs in the tables, for the checker.
These plant bugs in the code that *runs* the table: the effect handlers, the driver's order of
events and awaits, signal handling, the waiters. A mutant is a list of exact textual edits of
runtime functions (``old`` -> ``new``), each in the function's own (dedented) source, and a
sentence saying what bug it plants::

    with activated(BY_NAME["last_wins_cause"]):
        ...  # fsm_core.runtime now has the bug, in this process only

    kill = hunt(BY_NAME["last_wins_cause"])  # the race machine under the ci profile
    kill.killed, kill.examples, kill.seconds, kill.steps

How a mutant is switched on, and why it never ships enabled: :func:`activated` compiles the
edited source of each target function in a copy of its module's namespace and installs the new
function with pytest's ``MonkeyPatch``, which puts the original back on exit. Nothing under
``fsm_core/`` knows about mutants: the mechanism and the catalogue live only here, in
``tests/``, which the wheel does not carry, and no edit is ever written to a file.

An edit whose ``old`` text does not occur exactly once in its target's current source raises
:class:`~fsm_core.tools._mutants.MutantError` (before anything runs, in :func:`check_edits`):
a runtime change that invalidates a mutant fails loudly instead of silently testing nothing.

:func:`hunt` runs the race machine (``tests/race``'s ``AgentRaceMachine``) with a mutant
switched on, under the ``ci`` profile's settings, through Hypothesis' own stateful runner, and
records what the kill table shows: whether it was killed, how many machines (examples) were
built up to and including the first failing one, the seconds to that first failure, and the
number of steps in the shrunk program Hypothesis finally reports.
"""

from __future__ import annotations

import gc
import importlib
import inspect
import linecache
import textwrap
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FunctionType
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.errors import UnsatisfiedAssumption
from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import Constants
from hypothesis.reporting import with_reporter
from hypothesis.stateful import RuleBasedStateMachine, get_state_machine_test

from fsm_core.tools._mutants import MutantError

__all__ = [
    "BY_NAME",
    "MUTANTS",
    "UNMUTATED",
    "Edit",
    "RuntimeKill",
    "RuntimeMutant",
    "activated",
    "check_edits",
    "ci_settings",
    "hunt",
    "hunt_by_name",
    "race_machine",
    "select",
]

CORE = "fsm_core.runtime._core"
TURN = "fsm_core.runtime._turn"
SIGNAL = "fsm_core.runtime._signal"
HISTORY = "fsm_core.runtime._history"


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace ``old`` by ``new`` in the source of ``target``, ``"module:Qualified.name"``."""

    target: str
    old: str
    new: str

    @property
    def owner_and_name(self) -> tuple[Any, str]:
        module_name, _, qualname = self.target.partition(":")
        owner: Any = importlib.import_module(module_name)
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        return owner, name


@dataclass(frozen=True, slots=True)
class RuntimeMutant:
    """One planted runtime bug: ``edits`` to runtime functions and what the bug is."""

    name: str
    doc: str
    edits: tuple[Edit, ...]

    def compiled(self) -> list[tuple[Any, str, FunctionType]]:
        """``(owner, attribute, mutated function)`` for each target, edits applied in order.

        Raises :class:`MutantError` if some ``old`` text does not occur exactly once.
        """
        out: list[tuple[Any, str, FunctionType]] = []
        for target in dict.fromkeys(e.target for e in self.edits):
            edits = [e for e in self.edits if e.target == target]
            owner, attr = edits[0].owner_and_name
            original = vars(owner)[attr]
            if not isinstance(original, FunctionType):
                raise MutantError(f"mutant {self.name!r}: {target} is not a plain function")
            source = textwrap.dedent(inspect.getsource(original))
            for edit in edits:
                found = source.count(edit.old)
                if found != 1:
                    raise MutantError(
                        f"mutant {self.name!r}: its old text occurs {found} times in {target}, "
                        "not exactly once; update the mutant to the current runtime"
                    )
                source = source.replace(edit.old, edit.new)
            out.append((owner, attr, _compile(self.name, target, source, original)))
        return out

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Switch the bug on; ``monkeypatch`` puts every original back when it is undone."""
        for owner, attr, function in self.compiled():
            monkeypatch.setattr(owner, attr, function)


def _compile(mutant: str, target: str, source: str, original: FunctionType) -> FunctionType:
    """The function ``source`` defines, with ``original``'s module globals and names."""
    filename = f"<runtime mutant {mutant}: {target}>"
    # Tracebacks (and Hypothesis' reports) then show the mutated lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(original.__globals__)  # a copy: a module-level def must not leak into it
    exec(compile(source, filename, "exec"), namespace)
    function = namespace[original.__name__]
    assert isinstance(function, FunctionType)
    function.__qualname__ = original.__qualname__
    function.__module__ = original.__module__
    return function


@contextmanager
def activated(mutant: RuntimeMutant | None) -> Iterator[None]:
    """Run the block with ``mutant`` switched on (the unmutated runtime for None)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        if mutant is not None:
            mutant.apply(monkeypatch)
        yield


def check_edits(mutants: Iterable[RuntimeMutant]) -> None:
    """Raise :class:`MutantError` for the first mutant whose edits no longer apply."""
    for mutant in mutants:
        mutant.compiled()


# --- the catalogue -------------------------------------------------------------------------------
# Each edit's text is matched in the target's dedented source: a method's ``def`` starts at column
# 0, its body at 4.

_CANCEL = f"{CORE}:AgentCore.cancel"
_FIRE_CANCEL = '    self._fire("cancel", cause, cause=cause.kind, keep_inbox=keep_inbox)\n'
_NOTIFY_STEP_START = (
    '    self.events.notify("step/start", StepBoundary, self.agent, signal, turn, step)\n'
)

MUTANTS: tuple[RuntimeMutant, ...] = (
    RuntimeMutant(
        "last_wins_cause",
        "cancel() re-aborts an already-aborted holder with its own cause (a fresh controller "
        "replaces the aborted one), so the last cause wins over the first.",
        (
            Edit(
                _CANCEL,
                _FIRE_CANCEL,
                _FIRE_CANCEL
                + "    if self._controller is not None and self._controller.signal.aborted:\n"
                "        self._controller = AbortController()\n"
                "        self._controller.abort(cause)\n",
            ),
        ),
    ),
    RuntimeMutant(
        "cancel_requested_after_clear",
        "agent/cancel-requested is published with call_soon, after the cancel's clear and "
        "abort, so the work its observers queue escapes the clear.",
        (
            Edit(
                f"{CORE}:AgentCore._notify_cancel_requested",
                "    self.events.emit(\n",
                "    asyncio.get_running_loop().call_soon(\n        self.events.emit,\n",
            ),
        ),
    ),
    RuntimeMutant(
        "abort_observer_work_cleared",
        "cancel() clears the inbox once more after its row returns, discarding the work abort "
        "observers queued (which the table latched, to replay).",
        (
            Edit(
                _CANCEL,
                _FIRE_CANCEL,
                _FIRE_CANCEL + "    if not keep_inbox:\n        self._clear_inbox()\n",
            ),
        ),
    ),
    RuntimeMutant(
        "clearing_cancel_keeps_latched_work",
        "clear_inbox assumes an aborted holder's first cancel already cleared everything, so "
        "a repeated clearing cancel keeps the latched post-abort work the table cleared.",
        (
            Edit(
                f"{CORE}:AgentCore._clear_inbox",
                "    self._discard(self.inbox._clear())\n",
                "    if self._controller is not None and self._controller.signal.aborted:\n"
                "        return\n"
                "    self._discard(self.inbox._clear())\n",
            ),
        ),
    ),
    RuntimeMutant(
        "clear_spares_steering",
        "clear_inbox discards the next_turn lane only: steering messages survive a clearing "
        "cancel the table recorded as emptying the inbox.",
        (
            Edit(
                f"{CORE}:AgentCore._clear_inbox",
                "    self._discard(self.inbox._clear())\n",
                "    discarded = list(self.inbox.next_turn)\n"
                '    self.inbox._lanes["next_turn"].clear()\n'
                "    self._discard(discarded)\n",
            ),
        ),
    ),
    RuntimeMutant(
        "holder_cleared_after_turn_end",
        "The retiring turn's controller is dropped only after turn/end is published, so "
        "turn/end observers still find a holder.",
        (
            Edit(
                f"{CORE}:AgentCore._release_holder",
                "    self._controller = None\n",
                "    self._retiring, self._controller = self._controller, None\n",
            ),
            Edit(
                f"{CORE}:AgentCore._publish_turn_end",
                '    self.events.notify("turn/end", TurnEnded, self.agent, self._turn, durable)\n',
                '    self._controller = getattr(self, "_retiring", None)\n'
                "    try:\n"
                "        self.events.notify(\n"
                '            "turn/end", TurnEnded, self.agent, self._turn, durable\n'
                "        )\n"
                "    finally:\n"
                "        self._controller = None\n",
            ),
        ),
    ),
    RuntimeMutant(
        "replacement_reuses_aborted_holder",
        "claim.replacement's release keeps the aborted controller aside and open_holder reuses "
        "it, so the replacement turn runs under the aborted signal.",
        (
            Edit(
                f"{CORE}:AgentCore._release_holder",
                "    self._controller = None\n",
                '    if self.phase == "running" and self._controller is not None:\n'
                "        if self._controller.signal.aborted:\n"
                "            self._spare = self._controller\n"
                "    self._controller = None\n",
            ),
            Edit(
                f"{CORE}:AgentCore._open_holder",
                "    self._controller = AbortController()\n",
                '    self._controller = getattr(self, "_spare", None) or AbortController()\n'
                "    self._spare = None\n",
            ),
        ),
    ),
    RuntimeMutant(
        "prerun_cancel_opens_turn",
        "cancel() returns at once while the phase reads idle, so a pre-run cancel (a driver "
        "scheduled, no turn yet) never reaches the table and the driver runs the work.",
        (
            Edit(
                _CANCEL,
                _FIRE_CANCEL,
                '    if self.phase == "idle":\n        return\n' + _FIRE_CANCEL,
            ),
        ),
    ),
    RuntimeMutant(
        "flush_not_awaited",
        "The driver starts the session flush as a task and converges without awaiting it, so "
        "idle (or the next turn) does not wait for the durability point.",
        (
            Edit(
                f"{CORE}:AgentCore._await_flush",
                "        await flushing\n",
                "        self._track(asyncio.ensure_future(flushing))\n",
            ),
        ),
    ),
    RuntimeMutant(
        "when_idle_before_replacement_work",
        "Publishing agent/status idle resolves the when_idle() waiters even when work is about "
        "to run: the latched replay's driver, or an idle listener's send.",
        (
            Edit(
                f"{CORE}:AgentCore._publish_status",
                '    self.events.notify("agent/status", StatusChanged, self.agent, self._status)\n',
                '    self.events.notify("agent/status", StatusChanged, self.agent, self._status)\n'
                '    if status == "idle":\n'
                "        self._settle_idle()\n",
            ),
        ),
    ),
    RuntimeMutant(
        "when_idle_resolves_immediately",
        "when_idle() reads the phase alone, so in the pre-run window (a driver scheduled, the "
        "phase still idle) it returns at once, before the queued work runs.",
        (
            Edit(
                f"{CORE}:AgentCore.when_idle",
                '    if self.control.holds("quiescent"):\n',
                '    if self.phase in ("idle", "disposing", "disposed"):\n',
            ),
        ),
    ),
    RuntimeMutant(
        "disposal_not_preceding_aborted",
        "dispose() begins disposal inside its teardown task, a loop iteration after the call, "
        "so a turn a cancel has just aborted retires as aborted, not disposed.",
        (
            Edit(
                f"{CORE}:AgentHandle._begin",
                "            self._core.request_disposal()\n",
                "            pass\n",
            ),
            Edit(
                f"{CORE}:AgentCore.dispose",
                "    await self.when_idle()\n",
                "    self.request_disposal()\n    await self.when_idle()\n",
            ),
        ),
    ),
    RuntimeMutant(
        "keep_inbox_discards_work",
        "cancel() does not pass keep_inbox on to the table, so a keep_inbox cancel still "
        "discards the queued work.",
        (Edit(_CANCEL, "keep_inbox=keep_inbox)", "keep_inbox=False)"),),
    ),
    RuntimeMutant(
        "maintenance_not_latching",
        "send() downgrades a waking send during maintenance to a quiet one (nothing can run "
        "meanwhile), so nothing replays it when the task finishes.",
        (
            Edit(
                f"{CORE}:AgentCore.send",
                'self._fire("send", message, wake=wakeup, lane=target)',
                'self._fire("send", message, wake=wakeup and self.phase != "maintenance", '
                "lane=target)",
            ),
        ),
    ),
    RuntimeMutant(
        "claim_takes_every_followup",
        "A turn's claim takes the whole inbox, as before issue 11: the table, told that work "
        "is left, keeps pending while the inbox is empty.",
        (Edit(f"{CORE}:AgentCore._claim_inbox", "self.inbox._claim()", "self.inbox._clear()"),),
    ),
    RuntimeMutant(
        "claim_reports_no_rest",
        "The driver tells the table a claim leaves nothing, so followups left queued are never "
        "run by the same driver (the table says the agent is idle with work pending).",
        (
            Edit(
                f"{CORE}:AgentCore._drive",
                "rest = len(self.inbox.next_turn) > 1",
                "rest = False",
            ),
        ),
    ),
    RuntimeMutant(
        "steering_never_claimed",
        "The turn reads the steering lane once, as it starts (empty right after its claim), so "
        "no step boundary ever takes the steering sent to the running turn.",
        (
            Edit(
                f"{TURN}:TurnRunner.run",
                "    step = 0\n",
                "    step = 0\n    steering = self.inbox.next_step\n",
            ),
            Edit(f"{TURN}:TurnRunner.run", "if self.inbox.next_step:", "if steering:"),
        ),
    ),
    RuntimeMutant(
        "steering_rest_counts_itself",
        "The step boundary reports what is left before taking the steering, counting the "
        "steering itself, so the table believes work remains after the inbox emptied.",
        (
            Edit(
                f"{TURN}:TurnRunner.run",
                "self._host.take_steering(rest=bool(self.inbox.next_turn))",
                "self._host.take_steering(rest=self.inbox.pending)",
            ),
        ),
    ),
    RuntimeMutant(
        "disposal_skipped_while_cancelling",
        "Disposal requested while a cancelled activity converges is left to the cancel: the "
        "lifecycle flag is never set, so a latched wake replays and teardown fails.",
        (
            Edit(
                f"{CORE}:AgentCore.request_disposal",
                '    self._fire("dispose")\n',
                '    if self.phase != "cancelling":\n        self._fire("dispose")\n',
            ),
        ),
    ),
    RuntimeMutant(
        "remove_forgets_steering",
        "inbox.remove() computes what is left from the next_turn lane only, so removing the "
        "last followup tells the table nothing is left while steering work waits.",
        (
            Edit(
                f"{CORE}:AgentCore._remove",
                "    rest = any(m.id != message_id for m in queued)\n",
                "    rest = any(m.id != message_id for m in self.inbox.next_turn)\n",
            ),
        ),
    ),
    RuntimeMutant(
        "aborted_step_left_open",
        "An interrupted step records and publishes no step/end, so step/start and step/end no "
        "longer balance.",
        (
            Edit(
                f"{TURN}:TurnRunner._step",
                "    finally:\n"
                '        self.session.append("step/end", {"turn": turn, "step": step})\n'
                '        self.events.notify("step/end", StepBoundary, self.agent, signal, turn, '
                "step)\n",
                "    finally:\n"
                "        if not signal.aborted:\n"
                '            self.session.append("step/end", {"turn": turn, "step": step})\n'
                "            self.events.notify(\n"
                '                "step/end", StepBoundary, self.agent, signal, turn, step\n'
                "            )\n",
            ),
        ),
    ),
    RuntimeMutant(
        "driver_stops_on_cancelling",
        "The driver loops only while the phase reads running, so when a status(running) "
        "listener cancels before the claim it exits without claiming or converging.",
        (
            Edit(
                f"{CORE}:AgentCore._drive",
                '        while self.phase in ("running", "cancelling") '
                'and not self._value("turn"):\n',
                '        while self.phase == "running" and not self._value("turn"):\n',
            ),
        ),
    ),
    RuntimeMutant(
        "assembly_inside_the_step",
        "Prompt assembly runs after step/start, so a cancel while it blocks leaves an empty "
        "step pair in the log where the original opens no step.",
        (
            Edit(
                f"{TURN}:TurnRunner.run",
                "messages = await self.assemble(signal)",
                "messages = ()",
            ),
            Edit(
                f"{TURN}:TurnRunner._step",
                _NOTIFY_STEP_START,
                _NOTIFY_STEP_START + "        messages = await self.assemble(signal)\n",
            ),
        ),
    ),
    RuntimeMutant(
        "turn_error_unannounced",
        "A turn that ends in error records its outcome and publishes turn/end, but never "
        "turn/error.",
        (
            Edit(
                f"{CORE}:AgentCore._publish_turn_error",
                '    self.events.emit("turn/error", failed)\n',
                "    del failed\n",
            ),
        ),
    ),
    RuntimeMutant(
        "steering_announced_before_recorded",
        "A step boundary announces the steering it claimed before recording it, so a "
        "user/message listener reading the log does not find the message yet.",
        (
            Edit(
                f"{CORE}:AgentCore._claim_steering",
                "    self._turns.record_claim(self._turn, steering)\n"
                "    self._turns.announce(controller.signal, self._turn, steering)\n",
                "    self._turns.announce(controller.signal, self._turn, steering)\n"
                "    self._turns.record_claim(self._turn, steering)\n",
            ),
        ),
    ),
    RuntimeMutant(
        "history_folded_twice",
        "The history folds the whole log again at every request instead of only what was "
        "appended since, so each request repeats the conversation before it.",
        (
            Edit(
                f"{HISTORY}:History.read",
                "for event in events[self._read :]:",
                "for event in events:",
            ),
        ),
    ),
)
"""The catalogue, in the order the kill table lists it."""

BY_NAME = {m.name: m for m in MUTANTS}

UNMUTATED = "(unmutated)"
"""The ``mutant`` name of the sanity run: the race machine on the shipped runtime."""


def select(names: Iterable[str] | None = None) -> list[RuntimeMutant]:
    """The named mutants in catalogue order (every one for None); an unknown name raises."""
    if names is None:
        return list(MUTANTS)
    wanted = set(names)
    for name in sorted(wanted):
        if name not in BY_NAME:
            known = ", ".join(m.name for m in MUTANTS)
            raise MutantError(f"unknown runtime mutant {name!r} (mutants: {known})")
    return [m for m in MUTANTS if m.name in wanted]


# --- hunting -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuntimeKill:
    """What running the race machine against one mutant found.

    ``examples`` counts the machines built up to and including the first failing one (every
    machine built, for a survivor); ``seconds`` is the time to that first failure (the whole
    search, for a survivor); ``steps`` is the number of rule steps in the shrunk program
    Hypothesis reports (None for a survivor, or when shrinking was skipped); ``error`` names
    the final failure, ``"Type: first line"``; ``total`` includes shrinking; ``program`` is
    the reported program, one line per step (invariant checks included).
    """

    mutant: str
    killed: bool
    examples: int
    seconds: float
    steps: int | None
    error: str | None
    total: float
    program: tuple[str, ...] = field(default=(), compare=False)
    shrink_cut: bool = False
    """Hypothesis gave up shrinking at its time limit: ``steps`` is an upper bound."""


def race_machine() -> type[RuleBasedStateMachine]:
    """The stateful machine over the runtime: ``tests/race``'s ``AgentRaceMachine``."""
    from tests.race.agent import AgentRaceMachine

    return AgentRaceMachine


def ci_settings(**changes: Any) -> settings:
    """The race test's budget: the ``ci`` profile registered in tests/conftest.py, with the
    race test's ``STEPS`` rules per program; then ``changes``."""
    from tests import conftest  # noqa: F401  (registers the profiles outside pytest too)
    from tests.race.test_agent_race import STEPS

    return settings(settings.get_profile("ci"), stateful_step_count=STEPS, **changes)


def hunt(
    mutant: RuntimeMutant | None,
    *,
    machine: Callable[[], RuleBasedStateMachine] | None = None,
    using: settings | None = None,
    shrink: bool = True,
) -> RuntimeKill:
    """Run ``machine`` (the race machine) with ``mutant`` switched on, under ``using`` (the
    ``ci`` profile), until Hypothesis gives up or reports a (shrunk) failure."""
    kill = _hunt(mutant, machine, using, shrink)
    # A mutant leaves failed tasks behind on closed loops, referenced from the failure's
    # traceback; collect them now that it is gone, so asyncio's "exception was never
    # retrieved" is logged here, where the caller captures it, not at some later test.
    gc.collect()
    return kill


def _hunt(
    mutant: RuntimeMutant | None,
    machine: Callable[[], RuleBasedStateMachine] | None,
    using: settings | None,
    shrink: bool,
) -> RuntimeKill:
    name = mutant.name if mutant is not None else UNMUTATED
    factory = machine if machine is not None else race_machine()
    base = using if using is not None else ci_settings()
    if not shrink:
        base = settings(base, phases=[p for p in base.phases if p is not Phase.shrink])

    built = 0
    first: tuple[int, float] | None = None
    checks: set[str] = set()

    def counted() -> RuleBasedStateMachine:
        nonlocal built
        built += 1
        instance = factory()
        checks.update(i.function.__name__ for i in instance.invariants)
        return instance

    # Any callable returning a machine is a factory (the stub says a class).
    test = get_state_machine_test(counted, settings=base)  # type: ignore[arg-type]
    inner = test.hypothesis.inner_test  # type: ignore[attr-defined]

    def watched(*args: Any, **kwargs: Any) -> None:
        nonlocal first
        try:
            inner(*args, **kwargs)
        except UnsatisfiedAssumption:
            raise
        except Exception:
            if first is None:
                first = (built, time.perf_counter() - start)
            raise

    test.hypothesis.inner_test = watched  # type: ignore[attr-defined]
    error: BaseException | None = None
    reports: list[object] = []  # what Hypothesis would print (here: only a warning, if any)
    start = time.perf_counter()
    with activated(mutant), _no_local_constants(), with_reporter(reports.append):
        try:
            test()
        except Exception as e:
            error = e
    total = time.perf_counter() - start
    if first is None:
        if error is not None:  # Hypothesis itself refused to run: not a kill
            raise error
        return RuntimeKill(name, False, built, total, None, None, total)
    program = _program(error)
    steps = _rule_steps(program, checks) if shrink and program else None
    cut = any(_SLOW_SHRINK in str(r) for r in reports)
    return RuntimeKill(name, True, first[0], first[1], steps, _describe(error), total, program, cut)


_SLOW_SHRINK = "stopped because it is making very slow progress"
"""What Hypothesis reports when it gives up shrinking after its time limit (five minutes)."""


@contextmanager
def _no_local_constants() -> Iterator[None]:
    """Generate as if no module of this repository were loaded.

    Hypothesis mixes integer (and other) constants found in every *local* module loaded so far
    into what it draws, rule choices included. So which modules a process happened to import
    (which test files pytest collected, what ran before in a worker) can change a derandomized
    search, and with it the examples a kill takes, or whether it happens. Pinned to none while
    hunting, that pool is the same in pytest, in any worker and in ``fsm-core mutants``.
    """
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(providers, "_get_local_constants", Constants)
        providers.CONSTANTS_CACHE.cache.clear()  # it caches the constants drawn from so far
        try:
            yield
        finally:
            providers.CONSTANTS_CACHE.cache.clear()


def _program(error: BaseException | None) -> tuple[str, ...]:
    """The failing program Hypothesis attached to ``error`` as notes, one line per step."""
    if isinstance(error, BaseExceptionGroup) and not getattr(error, "__notes__", None):
        error = error.exceptions[0]
    notes = getattr(error, "__notes__", None) or []
    return tuple(
        note for note in notes if note.startswith(("state = ", "state.")) or " = state." in note
    )


def _rule_steps(program: Sequence[str], invariants: set[str]) -> int:
    """The rule calls in a printed program (initialize rules included): every ``state.NAME(``
    line, with or without a bundle assignment, except invariant checks and the teardown."""
    steps = 0
    for line in program:
        call = line.rpartition(" = ")[2] if " = state." in line else line
        name = call.partition("(")[0].removeprefix("state.")
        if call.startswith("state.") and name not in invariants and name != "teardown":
            steps += 1
    return steps


def _describe(error: BaseException | None) -> str | None:
    if error is None:
        return None
    if isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    text = traceback.format_exception_only(type(error), error)[0].strip()
    return text.splitlines()[0] if text else type(error).__name__


def hunt_by_name(name: str, shrink: bool = True) -> RuntimeKill:
    """:func:`hunt` for the mutant called ``name`` (:data:`UNMUTATED`: the shipped runtime);
    a picklable entry point for worker processes."""
    return hunt(None if name == UNMUTATED else BY_NAME[name], shrink=shrink)
