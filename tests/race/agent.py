"""The agent race machine: Hypothesis drives a real agent against specs/agent.toml.

:class:`AgentRaceMachine` owns a private event loop (:class:`~tests.race.bridge.LoopBridge`),
a :class:`~fsm_core.runtime.Runtime` with one agent, and a
:class:`~tests.race.lockstep.Recorder` on the agent's control machine. Each rule makes user
calls (sends, cancels, disposal, maintenance, removals), opens or fails a gate a seam waits at,
or installs a listener that re-enters the agent; the bridge then turns the loop until every task
waits again (at a gate, or because the agent is quiescent). After each rule the invariants check
that:

- the runtime's control state is the table's: the oracle replays every table event the runtime
  fired (re-entrant ones inside the effect they happened in) and lands in the same state, with
  the same effects and refusals; every table invariant holds there and at each notification,
  and no step invariant breaks between notifications; and each user call fired exactly the
  event, with exactly the arguments, that the call means;
- what a user can see matches that state, after each rule and at every notification: the
  holder's controller and its signal (aborted iff the holder is, with the table's reason), the
  inbox, the published status, the lifecycle flag once ``dispose()`` was called;
- the notifications and the durable log keep the protocol: every accepted message ends once,
  claimed or discarded, unless still queued; turns and steps are ordered and balanced, and a
  step starts with the steering sent before it taken; a cancel notifies before it discards; a
  turn starts only after the previous turn's flush settled; one signal per turn at every seam,
  and a fresh one per turn; ``turn/end`` records the table's outcome as exactly
  ``{"kind": ...}``; nothing durable carries a cause, a signal or any object;
- nothing runs once the agent is quiescent, ``when_idle()`` resolves only there, and no task
  of the runtime or of the machine fails (the runtime logs no error a rule did not plant).

Seams (``SEAMS``) pass straight through unless armed (``gates`` at the start, ``arm`` later):
every call at an armed seam waits at a fresh :class:`~fsm_core.runtime.Gate`, cooperating with
the turn's signal or ignoring it, until a rule opens or fails it. ``hook`` is the tool-approval
hook (``agent/tool-approval``); ``flush`` has no signal to cooperate with. Once the agent is
disposed, ``restart`` checks that it refuses work and goes on with a fresh runtime, so a long
program lives through several agents.

A failing run prints the rules as a program (``state = AgentRaceMachine()``, then one
``state.<rule>(...)`` per step, invariant checks included); pasted into a test it replays the
failure (``test_replay.py`` proves it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast, get_args

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fsm_core import (
    AssembleContext,
    AssistantMessageRecorded,
    CancelRequested,
    DisposalEnded,
    DisposalStarted,
    Flush,
    MessageDiscarded,
    MessageInserted,
    MessagesClaimed,
    PreStep,
    Rejected,
    RequestConfig,
    RequestError,
    State,
    StatusChanged,
    StepBoundary,
    TurnEnded,
    TurnFailed,
    TurnStarted,
    UserMessageRecorded,
)
from fsm_core.runtime import (
    Aborted,
    AbortSignal,
    Agent,
    AgentCancelCause,
    AgentHandle,
    Lane,
    ParentCause,
    Reply,
    Request,
    Runtime,
    Session,
    ToolCall,
    UserCause,
    UserMessage,
)
from fsm_core.runtime._llm import Finish
from fsm_core.runtime._session import ERROR_CODES, OUTCOME_KINDS, ErrorCode
from fsm_core.table._expr import Value
from fsm_core.testing import Gate
from tests.helpers import NOTIFICATIONS, core_of
from tests.race.bridge import LoopBridge
from tests.race.lockstep import Fire, Oracle, Recorder

__all__ = ["SEAMS", "AgentRaceMachine", "SeamFailure"]

P = TypeVar("P")
R = TypeVar("R")
Next = Callable[[P], Awaitable[R]]

Seam = Literal[
    "pre-step",
    "assembly",
    "request",
    "model",
    "request-error",
    "tool",
    "turn-stopping",
    "flush",
    "hook",
]
SEAMS: tuple[Seam, ...] = get_args(Seam)
ReplyKind = Literal["stop", "max_tokens", "blocked", "tool_calls", "error", "error_retry"]
REPLIES: tuple[ReplyKind, ...] = (
    "stop",
    "max_tokens",
    "blocked",
    "tool_calls",
    "error",
    "error_retry",
)
Mode = Literal["cooperate", "ignore", "off"]
MODES: tuple[Mode, ...] = ("cooperate", "ignore", "off")
CauseKind = Literal["user", "parent"]
CAUSES: tuple[CauseKind, ...] = ("user", "parent")

_DURABLE = {"max_tokens": "max-tokens"}
_TURN_FAILED = "agent %s: turn %d failed"
"""What the runtime logs, with the exception, when a turn's own work fails."""
_FINISH: Mapping[str, Finish] = {"stop": "stop", "max_tokens": "max_tokens", "blocked": "blocked"}
_PLAIN = (str, int, float, bool, type(None))

causes = st.sampled_from(CAUSES)
picks = st.integers(min_value=0, max_value=3)
"""Which of the gates (or queued messages) a rule takes, modulo how many there are."""


def _alive(machine: AgentRaceMachine) -> bool:
    """The agent is not disposed (most rules do nothing useful on a disposed agent)."""
    return machine.agent.phase != "disposed"


class SeamFailure(Exception):
    """What a failed gate (or a scripted request error) raises at its seam.

    ``retry`` tells the request-error listener to ask for the request again.
    """

    def __init__(self, seam: str, *, retry: bool = False) -> None:
        super().__init__(f"{seam} failed")
        self.seam = seam
        self.retry = retry


class SeamEscape(BaseException):
    """What an escaping gate raises: not an ``Exception``, so no seam contains it and the
    driver halts (like ``KeyboardInterrupt`` or a supervisor's cancellation)."""

    def __init__(self, seam: str) -> None:
        super().__init__(f"{seam} escaped")
        self.seam = seam


@dataclass(eq=False, slots=True)
class Held:
    """A gate some work is waiting at right now."""

    seam: str
    gate: Gate
    cooperate: bool

    def __repr__(self) -> str:
        return f"{self.seam}({'cooperating' if self.cooperate else 'ignoring the signal'})"


class _ErrorLog(logging.Handler):
    """Collects what the runtime logs at ERROR that a seam failure does not explain."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.problems = problems
        self.turn_codes: dict[int, ErrorCode] = {}
        """The error code each failed turn must record, by turn: the class of the seam whose
        planted failure ended it. A turn that ends in error without one halted."""

    def emit(self, record: logging.LogRecord) -> None:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, SeamFailure) and record.msg == _TURN_FAILED:
            turn = cast(tuple[str, int], record.args)[1]
            self.turn_codes[turn] = "model-failed" if error.seam == "model" else "seam-failed"
            return
        if isinstance(error, SeamFailure) and record.msg != "a driver failed":
            return  # a tool or flush that failed because a rule failed its gate
        if isinstance(error, SeamEscape) and record.msg == "a driver failed":
            return  # the driver halted because a rule made its gate escape
        kind = "" if error is None else f" ({type(error).__name__}: {error})"
        self.problems.append(f"the runtime logged an error: {record.getMessage()}{kind}")


class RaceModel:
    """The model seam: each request may wait at a gate, then plays the next scripted reply."""

    def __init__(self, machine: AgentRaceMachine) -> None:
        self._machine = machine

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        m = self._machine
        m._saw_signal("model", signal, request.turn)
        m._check_request(request)
        await m._pass("model", signal)
        kind = m.replies.pop(0) if m.replies else "stop"
        if kind in ("error", "error_retry"):
            raise SeamFailure("model", retry=kind == "error_retry")
        if kind == "tool_calls":
            m.tool_calls += 1
            call = ToolCall(f"c{m.tool_calls}", "probe", {"n": m.tool_calls})
            return Reply("calling", (call,), finish="tool_calls")
        return Reply("done", finish=_FINISH[kind])


class RaceTool:
    """The tool seam: each call may wait at a gate, then answers."""

    name = "probe"

    def __init__(self, machine: AgentRaceMachine) -> None:
        self._machine = machine

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        self._machine._saw_signal("tool", signal)
        await self._machine._pass("tool", signal)
        return "ok"


class AgentRaceMachine(RuleBasedStateMachine):
    """One agent of a real runtime, driven rule by rule against specs/agent.toml."""

    def __init__(self, *, check_each_step: bool = False) -> None:
        super().__init__()
        self.check_each_step = check_each_step
        """Run every invariant after each step that runs the loop (for fixed programs; under
        Hypothesis the runner calls the invariants itself)."""
        self.problems: list[str] = []
        """Protocol violations found as they happened (at a notification, a seam, a log)."""
        self.held: list[Held] = []
        self.armed: dict[str, bool] = {}
        """Seams whose calls wait at a gate: seam -> cooperates with the signal."""
        self.replies: list[ReplyKind] = []
        self.tool_calls = 0
        self.messages = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.waiters: list[asyncio.Task[None]] = []
        self.bridge = LoopBridge(self._settled, self._describe)
        self._errors = _ErrorLog(self.problems)
        logging.getLogger("fsm_core.runtime").addHandler(self._errors)
        self.agents = 0
        self._start()

    def _start(self) -> None:
        """A fresh runtime with one agent, recorded from its first table event."""
        self.agents += 1
        self.rt = Runtime(model=RaceModel(self), tools=[RaceTool(self)])
        create = self.rt.create_agent(f"a{self.agents}")
        self.handle: AgentHandle = self.bridge.loop.run_until_complete(create)
        self.agent: Agent = self.handle.agent
        self.spec = core_of(self.agent).control.spec
        self.recorder = Recorder(core_of(self.agent).control)
        self.oracle = Oracle(self.spec)

        # What the notifications said, kept to check the protocol over the whole run.
        self.seen: list[tuple[str, Any]] = []
        """Every notification, in order, as ``(name, payload)``."""
        self.status = "idle"
        self.dispose_called = False
        self.disposal_notices: list[str] = []
        """``agent/disposing`` and ``agent/disposed``, in the order they were published."""
        self.failures_announced: list[int] = []
        """The turns ``turn/error`` announced, in order."""
        """True once ``handle.dispose()`` has been called (it sets the lifecycle flag inside
        the call)."""
        self.accepted: list[str] = []
        """The messages whose send() returned (a refused send raises)."""
        self.followups: set[str] = set()
        """The accepted messages sent to the next-turn lane."""
        self.inserted: list[str] = []
        """The messages ``inbox/inserted`` announced, in order."""
        self.discard_notices: Counter[str] = Counter()
        self.removing: str | None = None
        self.callers: list[AgentCancelCause] = []
        self.cancel_notices: list[tuple[CancelRequested, str]] = []
        self.notified_cancels: list[Fire] = []
        self.turn = 0
        """The open turn's number (0: none open)."""
        self.turns_ended = 0
        self.step: tuple[int, int] | None = None
        self.turn_signals: dict[int, AbortSignal] = {}
        self.flushes_settled = 0
        self.in_seams = 0
        self.abort_senders = 0
        """Abort observers waiting for the next turn's signal."""
        self.pre_step_steers = 0
        """Steers the next ``agent/pre-step`` handlers send, one each."""
        self.idle_seen: list[tuple[State, int]] = []
        """The state, and how many turns had ended, each time a when_idle() waiter resumed."""
        # The durable log, read incrementally.
        self.read = 0
        self.ended: Counter[str] = Counter()
        self.log_turn = 0
        self.log_turns_ended = 0
        self.log_step: tuple[int, int] | None = None
        self.log_last_step = 0
        """The step of the open turn's last step/start in the log (0 before its first)."""

        events = self.rt.events
        for name in NOTIFICATIONS:
            events.on(name, self._guarded(name, self._noted(name)))
        events.on("agent/pre-step", self._pre_step)
        events.on("agent/assemble", self._assemble)
        events.on("agent/request", self._configure)
        events.on("agent/request-error", self._request_error)
        events.on("agent/tool-approval", self._passing("hook"))
        events.on("agent/turn-stopping", self._passing("turn-stopping", turn=True))
        events.on("session/flush", self._flush)

    # --- rules: what users call ---------------------------------------------------------------

    @precondition(_alive)
    @rule()
    def followup(self) -> None:
        self._run(lambda: self._send("next_turn", True))

    @precondition(_alive)
    @rule()
    def steer(self) -> None:
        self._run(lambda: self._send("next_step", True))

    @precondition(_alive)
    @rule()
    def inject(self) -> None:
        self._run(lambda: self._send("next_turn", False))

    @precondition(_alive)
    @rule(lane=st.sampled_from(("next_turn", "next_step")))
    def send_without_wake(self, lane: Lane) -> None:
        self._run(lambda: self._send(lane, False))

    @precondition(_alive)
    @rule(cause=causes, keep_inbox=st.booleans(), mutate=st.booleans())
    def cancel(self, cause: CauseKind, keep_inbox: bool, mutate: bool) -> None:
        """Cancel with a cause object of the caller's own; ``mutate``: the caller changes that
        object's kind afterwards (nothing the runtime kept may change with it)."""
        self._run(lambda: self._cancel(cause, keep_inbox, mutate))

    @precondition(_alive)
    @rule(then_followup=st.booleans())
    def dispose(self, then_followup: bool) -> None:
        """Start the handle's memoized ``dispose()`` as a task (it begins disposal when the
        loop next turns); ``then_followup``: a followup in the same iteration, so its driver is
        scheduled when disposal begins."""

        def race() -> None:
            self._spawn(self._dispose(), "dispose")
            if then_followup:
                self._followup()

        self._run(race)

    @precondition(lambda self: self.agent.phase == "idle")
    @rule(cooperate=st.booleans(), then_followup=st.booleans())
    def run_maintenance(self, cooperate: bool, then_followup: bool) -> None:
        """Start ``run_maintenance`` with a task that waits at a gate; ``then_followup``: a
        followup in the same iteration schedules a driver first, so the table refuses it."""

        async def task(signal: AbortSignal) -> None:
            await self._pass("maintenance", signal, cooperate)

        async def maintain() -> None:
            # Refused (the oracle checks that the table refuses too), aborted, or failed.
            with contextlib.suppress(Rejected, Aborted, SeamFailure, SeamEscape):
                await self.agent.run_maintenance(task)

        def race() -> None:
            self._spawn(maintain(), "maintenance")
            if then_followup:
                self._followup()

        self._run(race)

    @precondition(_alive)
    @rule(
        sends=st.integers(min_value=1, max_value=2),
        cause=causes,
        keep_inbox=st.booleans(),
        replacement=st.booleans(),
        waiter=st.booleans(),
    )
    def prerun(
        self, sends: int, cause: CauseKind, keep_inbox: bool, replacement: bool, waiter: bool
    ) -> None:
        """In one loop iteration: (a ``when_idle()`` waiter,) followups, a cancel, (a
        replacement followup); the scheduled driver has not started yet."""

        def race() -> None:
            if waiter:
                self._wait_idle()  # its task runs first, while the driver is still scheduled
            for _ in range(sends):
                self._send("next_turn", True)
            self._cancel(cause, keep_inbox, False)
            if replacement:
                self._send("next_turn", True)

        self._run(race)

    @precondition(_alive)
    @rule()
    def wait_idle(self) -> None:
        self._run(self._wait_idle)

    @precondition(lambda self: _alive(self) and self._queued())
    @rule(pick=picks)
    def remove(self, pick: int) -> None:
        """Remove a queued message through ``agent.inbox.remove``."""
        self._run(lambda: self._remove(pick))

    @precondition(lambda self: not _alive(self))
    @rule()
    def restart(self) -> None:
        """The agent is disposed: it rejects sends and removals; go on with a fresh runtime and
        agent (same loop, seams and script), so the rest of the run still explores."""

        def refused() -> None:
            self._followup()
            if self._queued():
                self._remove(0)

        self._run(refused)
        self.check()
        self._start()

    # --- rules: seams -----------------------------------------------------------------------

    @initialize(
        cooperating=st.lists(st.sampled_from(SEAMS), unique=True, max_size=3),
        ignoring=st.lists(st.sampled_from(SEAMS), unique=True, max_size=2),
    )
    def gates(self, cooperating: list[Seam], ignoring: list[Seam]) -> None:
        """Arm some seams from the start, so that turns wait at gates from the first one."""
        for seam in cooperating:
            self.arm(seam, "cooperate")
        for seam in ignoring:
            self.arm(seam, "ignore")

    @precondition(_alive)
    @rule(seam=st.sampled_from(SEAMS), mode=st.sampled_from(MODES))
    def arm(self, seam: Seam, mode: Mode) -> None:
        """From now on every call at ``seam`` waits at a fresh gate, cooperating with the
        turn's signal or ignoring it (``flush`` has no signal); ``off`` stops that."""
        if mode == "off":
            self.armed.pop(seam, None)
        else:
            self.armed[seam] = mode == "cooperate"

    @precondition(_alive)
    @rule(reply=st.sampled_from(REPLIES))
    def script_model(self, reply: ReplyKind) -> None:
        """Queue what the model answers next (``stop`` once the script runs out)."""
        self.replies.append(reply)

    @precondition(lambda self: self.held)
    @rule(pick=picks, fail=st.booleans())
    def open_gate(self, pick: int, fail: bool) -> None:
        """Open (or fail, raising at its seam) one of the gates work is waiting at."""
        held = self.held[pick % len(self.held)]

        def release() -> None:
            if fail:
                held.gate.fail(SeamFailure(held.seam))
            else:
                held.gate.open()

        self._run(release)

    @precondition(lambda self: self.held)
    @rule(pick=picks)
    def escape_gate(self, pick: int) -> None:
        """Fail one gate with an exception no seam contains: the driver retires its turn and
        halts (the table's ``halt``), or the maintenance task ends."""
        held = self.held[pick % len(self.held)]
        self._run(lambda: held.gate.fail(SeamEscape(held.seam)))

    @precondition(_alive)
    @rule(dispose=st.booleans())
    def finish(self, dispose: bool) -> None:
        """Open every gate until the agent is quiescent and no task runs (it must get there);
        then, if ``dispose``, dispose it and drain again: it must end disposed."""
        self._drain()
        if dispose:
            self._run(lambda: self._spawn(self._dispose(), "dispose"))
            self._drain()
            assert self.agent.phase == "disposed", f"disposal did not complete: {self}"
        replayed = Session.from_jsonl(self.agent.session.to_jsonl())
        assert replayed.events == self.agent.session.events, "the durable log does not round-trip"

    # --- rules: listeners that re-enter -------------------------------------------------------

    @precondition(_alive)
    @rule(cause=causes, replace=st.booleans())
    def on_running_cancel(self, cause: CauseKind, replace: bool) -> None:
        """Once: when ``running`` is published, cancel (and ``replace``: send a replacement)."""

        def cancel() -> None:
            self._cancel(cause, False, False)
            if replace:
                self._followup()

        self._once("agent/status", lambda p: p.status == "running", cancel)

    @precondition(_alive)
    @rule()
    def on_running_remove(self) -> None:
        """Once: when ``running`` is published, remove every queued message (the driver then
        has nothing to claim)."""

        def remove_all() -> None:
            while self._queued():
                self._remove(0)

        self._once("agent/status", lambda p: p.status == "running", remove_all)

    @precondition(_alive)
    @rule()
    def on_cancel_requested_send(self) -> None:
        """Once: an ``agent/cancel-requested`` observer sends a followup."""
        self._once("agent/cancel-requested", lambda _p: True, self._followup)

    @precondition(_alive)
    @rule()
    def on_discard_send(self) -> None:
        """Once: an ``inbox/discarded`` observer sends a followup, from inside the clear (issue
        23: later work, latched or run, never parked)."""
        self._once("inbox/discarded", lambda _p: True, self._followup)

    @precondition(_alive)
    @rule()
    def on_abort_send(self) -> None:
        """Once: an abort observer on the turn's signal (this turn's, else the next's) sends."""
        if self.turn:
            self._on_abort_send(self.turn_signals[self.turn])
        else:
            self.abort_senders += 1

    @precondition(_alive)
    @rule()
    def on_pre_step_steer(self) -> None:
        """Once: the next ``agent/pre-step`` handler steers, just before the step boundary reads
        the steering lane. A turn claims one followup as it opens, so on a first step the
        boundary takes this steering with any later followups left (``rest``). A steer sent
        while a turn waits at a gate gets there only if no followup comes in between, which
        random programs rarely do."""
        self.pre_step_steers += 1

    @precondition(_alive)
    @rule(cause=causes, keep_inbox=st.booleans())
    def on_turn_end_cancel(self, cause: CauseKind, keep_inbox: bool) -> None:
        """Once: a ``turn/end`` observer cancels (it has no authority over the ended turn)."""
        self._once("turn/end", lambda _p: True, lambda: self._cancel(cause, keep_inbox, False))

    @precondition(_alive)
    @rule()
    def on_idle_send(self) -> None:
        """Once: when ``idle`` is published, send a followup."""
        self._once("agent/status", lambda p: p.status == "idle", self._followup)

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def runtime_state_is_the_tables(self) -> None:
        """The oracle, fed every table event the runtime fired, is in the runtime's state;
        every table invariant holds, here and at every notification."""
        self.oracle.follow(self.recorder.roots)
        now = core_of(self.agent).control.snapshot()
        assert self.oracle.state == now, (
            f"the runtime is in {self.spec.format_state(now)}, "
            f"the table in {self.spec.format_state(self.oracle.state)}"
        )
        assert self.spec.violated(now) == [], f"invariants fail in {self.spec.format_state(now)}"
        assert self.recorder.problems == [], self.recorder.problems[0]

    @invariant()
    def what_users_see_is_the_tables_state(self) -> None:
        """The holder's controller exists iff the table has a holder; its signal is aborted iff
        the holder is, with the table's reason; the inbox and the status agree too. (Also
        checked at every notification, where listeners look.)"""
        problem = self._unseen_difference()
        assert problem is None, problem

    @invariant()
    def every_message_ends_once(self) -> None:
        """Every accepted message was announced as inserted, and is claimed or discarded
        exactly once, or still queued."""
        assert sorted(self.inserted) == sorted(self.accepted), (
            f"inbox/inserted announced {self.inserted} but send() accepted {self.accepted}"
        )
        self._read_log()
        queued = self._queued()
        for message in self.accepted:
            ends = self.ended[message]
            expected = 0 if message in queued else 1
            assert ends == expected, (
                f"message {message} ended {ends} times"
                f"{' but is still queued' if message in queued else ''}"
            )
        strays = (set(self.ended) | set(queued)) - set(self.accepted)
        assert not strays, f"messages {sorted(strays)} were never accepted"
        discarded = Counter(
            i
            for event in self.agent.session.events
            if event.type == "inbox/discarded"
            for i in event.data["ids"]  # type: ignore[union-attr]
        )
        assert discarded == self.discard_notices, (
            f"durable discards {dict(discarded)} but notified {dict(self.discard_notices)}"
        )

    @invariant()
    def protocol_holds_in_the_notifications(self) -> None:
        """Turns, steps, discards, signals and causes as the notifications showed them."""
        assert self.problems == [], self.problems[0]
        for payload, kind in self.cancel_notices:
            assert payload.cause.kind == kind, (
                f"an agent/cancel-requested cause changed from {kind} to {payload.cause.kind}"
            )
        failed = [
            e.data["turn"]
            for e in self.agent.session.events
            if e.type == "turn/end"
            and cast(Mapping[str, Any], e.data["outcome"])["kind"] == "error"
        ]
        assert self.failures_announced == failed, (
            f"turn/error announced turns {self.failures_announced}; the log's errors are {failed}"
        )
        control = core_of(self.agent).control
        announced = ["agent/disposing", "agent/disposed"][
            : (control.state == "disposed") + bool(control.get("closing"))
        ]
        assert self.disposal_notices == announced, (
            f"{control.state} (closing={control.get('closing')}) announced {self.disposal_notices}"
        )

    @invariant()
    def nothing_runs_when_quiescent(self) -> None:
        """Quiescent: no seam in progress, no driver, no pending ``when_idle()``; every waiter
        resolved at quiescence; no task the machine started failed."""
        for snapshot, _ in self.idle_seen:
            assert self.spec.holds("quiescent", snapshot), (
                f"when_idle() resolved in {self.spec.format_state(snapshot)}"
            )
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                error = task.exception()
                raise AssertionError(
                    f"task {task.get_name()} failed: {type(error).__name__}: {error}"
                )
        if not self._quiescent():
            return
        state = self.spec.format_state(core_of(self.agent).control.snapshot())
        assert self.in_seams == 0 and not self.held, f"a seam is still running in {state}"
        drivers = [t for t in self.rt._tasks if not t.done()]
        assert not drivers, f"a driver is still running in {state}"
        waiting = [t for t in self.waiters if not t.done()]
        assert not waiting, f"{len(waiting)} when_idle() waiters still wait in {state}"

    # --- teardown -----------------------------------------------------------------------------

    def teardown(self) -> None:
        logging.getLogger("fsm_core.runtime").removeHandler(self._errors)
        self.bridge.close(self._open_everything)

    def check(self) -> None:
        """Run every ``@invariant`` now, as Hypothesis does after each step."""
        for checked in self.invariants:
            checked.function(self)

    def __repr__(self) -> str:
        return f"<AgentRaceMachine {self._describe()}>"

    # --- helpers: user calls ----------------------------------------------------------------

    def _send(self, lane: Lane, wakeup: bool) -> None:
        self.messages += 1
        message = UserMessage(f"m{self.messages}", f"message {self.messages}")
        disposed = self.agent.phase == "disposed"
        try:
            self._fires(
                "send",
                {"wake": wakeup, "lane": lane},
                lambda: self.agent.send(message, lane, wakeup),
            )
        except Rejected:
            assert disposed, f"send({message.id}) was rejected by a {self.agent.phase} agent"
            return
        assert not disposed, f"a disposed agent accepted {message.id}"
        self.accepted.append(message.id)
        if lane == "next_turn":
            self.followups.add(message.id)

    def _run(self, action: Callable[[], object]) -> None:
        """Run ``action`` in the loop and let the loop settle (checking, if asked)."""
        self.bridge.run(action)
        if self.check_each_step:
            self.check()

    def _followup(self) -> None:
        self._send("next_turn", True)

    def _cancel(self, cause: CauseKind, keep_inbox: bool, mutate: bool) -> None:
        mine: AgentCancelCause = UserCause() if cause == "user" else ParentCause()
        self.callers.append(mine)
        self._fires(
            "cancel",
            {"cause": cause, "keep_inbox": keep_inbox},
            lambda: self.agent.cancel(mine, keep_inbox=keep_inbox),
        )
        if mutate:
            object.__setattr__(mine, "kind", "parent" if cause == "user" else "user")

    def _remove(self, pick: int) -> None:
        queued = self._queued()
        message = queued[pick % len(queued)]
        disposed = self.agent.phase == "disposed"
        removed: list[bool] = []
        self.removing = message
        try:
            self._fires(
                "remove",
                {"rest": len(queued) > 1},  # what is left once it is gone
                lambda: removed.append(self.agent.inbox.remove(message)),
            )
        except Rejected:
            assert disposed, f"remove({message}) was rejected by a {self.agent.phase} agent"
            return
        finally:
            self.removing = None
        assert removed == [True], f"remove({message}) found nothing though it was queued"

    async def _dispose(self) -> None:
        self.dispose_called = True
        await self.handle.dispose()

    def _drain(self) -> None:
        for _ in range(200):
            self.bridge.settle()
            if self._quiescent() and not self.bridge.pending():
                return
            assert self.held, f"nothing to open but the agent does not settle: {self._describe()}"
            for held in list(self.held):
                held.gate.open()
        raise AssertionError(f"opening every gate never let the agent settle: {self}")

    def _wait_idle(self) -> None:
        async def wait() -> None:
            await self.agent.when_idle()
            self.idle_seen.append((core_of(self.agent).control.snapshot(), self.turns_ended))

        self.waiters.append(self._spawn(wait(), "when_idle"))

    def _spawn(self, coroutine: Awaitable[None], name: str) -> asyncio.Task[None]:
        async def run() -> None:
            await coroutine

        task = self.bridge.spawn(run(), name)
        self.tasks.append(task)
        return task

    def _once(self, name: str, when: Callable[[Any], bool], do: Callable[[], None]) -> None:
        """Install a listener on ``name`` that, the first time ``when(payload)``, removes
        itself and calls ``do()``."""
        offs: list[Callable[[], None]] = []

        def once(payload: Any) -> None:
            if when(payload):
                offs[0]()
                do()

        offs.append(self.rt.events.on(name, self._guarded(name, once)))

    def _on_abort_send(self, signal: AbortSignal) -> None:
        signal.add_listener(self._guarded("abort", lambda _s: self._followup()))

    def _guarded(self, where: str, listener: Callable[[Any], object]) -> Callable[[Any], None]:
        """The bus and the signal contain what a listener raises; record it instead."""

        def guarded(payload: Any) -> None:
            try:
                listener(payload)
            except Exception as error:
                failure = f"{type(error).__name__}: {error}"
                self.problems.append(f"a listener on {where} failed: {failure}")

        return guarded

    # --- helpers: state -----------------------------------------------------------------------

    def _unseen_difference(self) -> str | None:
        """How what a user sees differs from the table's state, or None."""
        values = core_of(self.agent).control.values
        holder, reason = values["holder"], values["reason"]
        controller = core_of(self.agent)._controller
        if (controller is not None) != (holder != "none"):
            return f"holder={holder} but the agent {'has' if controller else 'has no'} controller"
        if controller is not None:
            signal = controller.signal
            if signal.aborted != (holder == "aborted"):
                live = "aborted" if signal.aborted else "live"
                return f"holder={holder} but the runtime's signal is {live}"
            if signal.reason is not None and signal.reason.kind != reason:
                return f"reason={reason} but the signal's reason is {signal.reason.kind}"
        if self.agent.inbox.pending != values["pending"]:
            return f"pending={values['pending']} but the inbox is {self.agent.inbox!r}"
        if self.agent.status != self.status:
            return f"agent.status is {self.agent.status} but {self.status} was published last"
        if self.turn:
            if controller is None:
                return f"turn {self.turn} is open without a holder"
            if controller.signal is not self.turn_signals[self.turn]:
                return f"turn {self.turn}'s holder changed while the turn was open"
        if self.dispose_called and not values["closing"]:
            return "dispose() was called but the table's lifecycle flag is not set"
        return None

    def _fires(self, event: str, arguments: Mapping[str, Value], call: Callable[[], None]) -> None:
        """``call()`` must fire exactly one table ``event``, inside the call, with the
        ``arguments`` the caller's call means (the oracle replays what the runtime fired, so
        this ties that to what the user asked)."""
        parent = self.recorder.current
        siblings = self.recorder.roots if parent is None else parent.children
        before = len(siblings)
        try:
            call()
        finally:
            made = siblings[before:]
            meant = Fire(event, dict(arguments), -1)
            assert [(n.event, n.kwargs) for n in made] == [(event, meant.kwargs)], (
                f"the call meaning {meant} fired {[str(n) for n in made] or 'nothing'}"
            )

    def _queued(self) -> list[str]:
        inbox = self.agent.inbox
        return [m.id for m in (*inbox.next_turn, *inbox.next_step)]

    def _quiescent(self) -> bool:
        return self.spec.holds("quiescent", core_of(self.agent).control.snapshot())

    def _settled(self) -> bool:
        return self._quiescent() or bool(self.held)

    def _describe(self) -> str:
        state = self.spec.format_state(core_of(self.agent).control.snapshot())
        closed = self.bridge.loop.is_closed()
        tasks = [] if closed else sorted(t.get_name() for t in self.bridge.pending())
        return f"{state}, gates held: {self.held}, tasks pending: {tasks}"

    def _open_everything(self) -> bool:
        for held in list(self.held):
            held.gate.open()
        return bool(self.held)

    # --- seams --------------------------------------------------------------------------------

    async def _pass(
        self, seam: str, signal: AbortSignal | None, cooperate: bool | None = None
    ) -> None:
        """Wait at a fresh gate if ``seam`` is armed (or ``cooperate`` is given)."""
        if cooperate is None:
            cooperate = self.armed.get(seam)
            if cooperate is None:
                return
        held = Held(seam, Gate(seam), cooperate)
        self.held.append(held)
        try:
            await held.gate.wait(signal, cooperate=cooperate)
        finally:
            self.held.remove(held)

    async def _seam(self, seam: str, signal: AbortSignal | None, turn: int | None = None) -> None:
        self._saw_signal(seam, signal, turn)
        await self._pass(seam, signal)

    async def _pre_step(self, payload: PreStep, next: Next[PreStep, Any]) -> Any:
        self.in_seams += 1
        try:
            if self.pre_step_steers:
                self.pre_step_steers -= 1
                self._guarded("pre-step", lambda _p: self._send("next_step", True))(payload)
            await self._seam("pre-step", payload.signal, payload.turn)
            return await next(payload)
        finally:
            self.in_seams -= 1

    async def _assemble(
        self, payload: AssembleContext, next: Next[AssembleContext, AssembleContext]
    ) -> AssembleContext:
        # Assembly runs right after the step boundary read the steering lane, before the
        # step opens: a steer sent while it blocks waits for the next boundary.
        steering = [m.id for m in self.agent.inbox.next_step]
        if steering:
            self.problems.append(
                f"assembly in turn {self.turn} began with the steering {steering} sent before "
                "the step boundary still queued"
            )
        if self.step is not None:
            self.problems.append(f"assembly in turn {self.turn} ran inside step {self.step}")
        return await self._passing("assembly")(payload, next)  # type: ignore[no-any-return]

    async def _configure(
        self, payload: RequestConfig, next: Next[RequestConfig, RequestConfig]
    ) -> RequestConfig:
        # Request configuration runs inside the step it configures, before the model call.
        if self.step != (payload.turn, payload.step):
            self.problems.append(
                f"request configuration {payload.turn}.{payload.step} ran in step {self.step}"
            )
        return await self._passing("request", turn=True)(payload, next)  # type: ignore[no-any-return]

    def _passing(self, seam: Seam, *, turn: bool = False) -> Callable[[Any, Next[Any, Any]], Any]:
        """A waterfall listener that passes ``seam`` (its gate, if armed), then the chain on;
        ``turn``: the payload names its turn."""

        async def listener(payload: Any, next: Next[Any, Any]) -> Any:
            self.in_seams += 1
            try:
                await self._seam(seam, payload.signal, payload.turn if turn else None)
                return await next(payload)
            finally:
                self.in_seams -= 1

        return listener

    async def _request_error(self, payload: RequestError, next: Next[RequestError, str]) -> str:
        self.in_seams += 1
        try:
            await self._seam("request-error", payload.signal)
            error = payload.error
            return "retry" if isinstance(error, SeamFailure) and error.retry else "fail"
        finally:
            self.in_seams -= 1

    async def _flush(self, payload: Flush, next: Next[Flush, None]) -> None:
        self.in_seams += 1
        try:
            await self._pass("flush", None)
            await next(payload)
        finally:
            self.in_seams -= 1
            self.flushes_settled += 1

    def _check_request(self, request: Request) -> None:
        """A request is made inside its open step and carries the log's conversation: every
        claimed message, answer and tool result recorded so far, each once, in log order, but
        those of a turn that ended ``blocked`` (a refusal unsays its turn: ``_history.py``)."""
        if self.step != (request.turn, request.step):
            self.problems.append(
                f"request {request.turn}.{request.step} made in step {self.step}, not its own"
            )
        said = {"user/message": "user", "assistant/message": "assistant", "tool/result": "tool"}
        logged: list[tuple[str, Any]] = []
        began = 0
        for e in self.agent.session.events:
            if e.type == "turn/start":
                began = len(logged)
            elif e.type == "turn/end":
                if cast(Mapping[str, Any], e.data["outcome"])["kind"] == "blocked":
                    del logged[began:]
            elif e.type in said:
                logged.append((said[e.type], e.data.get("id")))
        asked = [(m["role"], m.get("id")) for m in request.messages]
        if asked != logged:
            self.problems.append(
                f"request {request.turn}.{request.step} carries {asked}, the log says {logged}"
            )

    def _saw_signal(self, seam: str, signal: AbortSignal | None, turn: int | None = None) -> None:
        """One signal per turn at every seam, and a fresh one for each turn."""
        if turn is None:
            turn = self.turn
        if not turn:
            self.problems.append(f"{seam} ran outside any turn")
            return
        if signal is None:
            self.problems.append(f"{seam} of turn {turn} got no signal")
            return
        known = self.turn_signals.get(turn)
        if known is None:
            if any(signal is s for s in self.turn_signals.values()):
                self.problems.append(f"turn {turn} reuses an earlier turn's signal")
            self.turn_signals[turn] = signal
        elif known is not signal:
            self.problems.append(f"{seam} of turn {turn} got another signal than the turn's")

    # --- notifications ------------------------------------------------------------------------

    def _noted(self, name: str) -> Callable[[Any], None]:
        def noted(payload: Any) -> None:
            self.seen.append((name, payload))
            handler(payload)
            problem = self._unseen_difference()
            if problem is not None:
                self.problems.append(f"at {name}: {problem}")

        handlers: dict[str, Callable[[Any], None]] = {
            "agent/status": self._on_status,
            "agent/cancel-requested": self._on_cancel_requested,
            "inbox/inserted": self._on_inserted,
            "inbox/discarded": self._on_discarded,
            "inbox/claimed": self._on_claimed,
            "turn/start": self._on_turn_start,
            "turn/end": self._on_turn_end,
            "step/start": self._on_step_start,
            "step/end": self._on_step_end,
            "user/message": self._on_user_message,
            "assistant/message": self._on_assistant_message,
            "turn/error": self._on_turn_error,
            "agent/disposing": self._on_disposal("agent/disposing", "dispose"),
            "agent/disposed": self._on_disposal("agent/disposed", "dispose_finish"),
        }
        handler = handlers[name]
        return noted

    def _on_status(self, payload: StatusChanged) -> None:
        self.status = payload.status

    def _on_cancel_requested(self, payload: CancelRequested) -> None:
        node = self.recorder.current
        if node is None or node.event != "cancel":
            self.problems.append(f"agent/cancel-requested published outside a cancel ({node})")
            return
        if payload.cause.kind != node.kwargs["cause"]:
            self.problems.append(f"{node} published the cause {payload.cause.kind}")
        if any(payload.cause is mine for mine in self.callers):
            self.problems.append("agent/cancel-requested carries the caller's own cause object")
        self.notified_cancels.append(node)
        self.cancel_notices.append((payload, payload.cause.kind))

    def _on_inserted(self, payload: MessageInserted) -> None:
        if payload.message.id in self.inserted:
            self.problems.append(f"message {payload.message.id} was inserted twice")
        self.inserted.append(payload.message.id)

    def _on_discarded(self, payload: MessageDiscarded) -> None:
        message = payload.message.id
        self.discard_notices[message] += 1
        if message == self.removing:
            return  # inbox.remove(): no cancel involved
        node = self.recorder.current
        if node is None or node.event != "cancel":
            where = "outside any table event" if node is None else f"inside {node}"
            self.problems.append(f"{message} was discarded {where}, not by a cancel or a removal")
        elif not any(node is notified for notified in self.notified_cancels):
            self.problems.append(f"{node} discarded {message} before agent/cancel-requested")

    def _on_claimed(self, payload: MessagesClaimed) -> None:
        self._saw_signal("inbox/claimed", payload.signal, payload.turn)

    def _on_turn_start(self, payload: TurnStarted) -> None:
        number = payload.turn
        if self.turn or number != self.turns_ended + 1:
            self.problems.append(
                f"turn/start {number} after turn/end {self.turns_ended}"
                f"{f' with turn {self.turn} open' if self.turn else ''}"
            )
        if self.flushes_settled < number - 1:
            self.problems.append(f"turn {number} started before turn {number - 1}'s flush settled")
        self._saw_signal("turn/start", payload.signal, number)
        self.turn = number
        for _ in range(self.abort_senders):
            self._on_abort_send(payload.signal)
        self.abort_senders = 0

    def _on_turn_end(self, payload: TurnEnded) -> None:
        if payload.turn != self.turn:
            self.problems.append(f"turn/end {payload.turn} while turn {self.turn} is open")
        if self.step is not None:
            self.problems.append(f"turn/end {payload.turn} inside step {self.step}")
        outcome = payload.outcome
        if not _durable_outcome(outcome):
            self.problems.append(f"turn {payload.turn} ended with the outcome {dict(outcome)}")
        node = self.recorder.current
        effect = node.effects[-1] if node is not None and node.effects else None
        if effect is None or effect.name != "publish_turn_end":
            self.problems.append(f"turn/end {payload.turn} published outside publish_turn_end")
        else:
            table = str(effect.args[0])
            if outcome["kind"] != _DURABLE.get(table, table):
                self.problems.append(
                    f"turn {payload.turn} ended {dict(outcome)} where the table says {table}"
                )
        self.turn = 0
        self.turns_ended = payload.turn

    def _on_step_start(self, payload: StepBoundary) -> None:
        if self.step is not None or payload.turn != self.turn:
            self.problems.append(
                f"step/start {payload.turn}.{payload.step} in turn {self.turn}, step {self.step}"
            )
        self._saw_signal("step/start", payload.signal, payload.turn)
        self.step = (payload.turn, payload.step)

    def _on_step_end(self, payload: StepBoundary) -> None:
        if self.step != (payload.turn, payload.step):
            self.problems.append(f"step/end {payload.turn}.{payload.step} in step {self.step}")
        self._saw_signal("step/end", payload.signal, payload.turn)
        self.step = None

    def _inside_effect(self, name: str, effects: tuple[str, ...]) -> bool:
        """True iff the innermost table event's latest effect is one of ``effects``."""
        node = self.recorder.current
        effect = node.effects[-1] if node is not None and node.effects else None
        if effect is None or effect.name not in effects:
            self.problems.append(f"{name} published outside {' or '.join(effects)} ({node})")
            return False
        return True

    def _on_user_message(self, payload: UserMessageRecorded) -> None:
        message = payload.message.id
        if payload.turn != self.turn:
            self.problems.append(f"user/message {message} of turn {payload.turn} in {self.turn}")
        self._saw_signal("user/message", payload.signal, payload.turn)
        self._inside_effect("user/message", ("claim_inbox", "claim_steering"))
        # Announced after its record, and the record after the claim that took it.
        for event in reversed(self.agent.session.events):
            if event.type == "user/message" and event.data["id"] == message:
                break
            if event.type == "inbox/claimed":
                self.problems.append(f"user/message {message} announced before it was recorded")
                break
        else:
            self.problems.append(f"user/message {message} announced but never claimed")

    def _on_assistant_message(self, payload: AssistantMessageRecorded) -> None:
        if self.step != (payload.turn, payload.step):
            self.problems.append(
                f"assistant/message {payload.turn}.{payload.step} in step {self.step}"
            )
        self._saw_signal("assistant/message", payload.signal, payload.turn)
        last = self.agent.session.events[-1]
        if last.type != "assistant/message" or dict(last.data) != {
            "turn": payload.turn,
            "step": payload.step,
            "text": payload.reply.text,
        }:
            self.problems.append(f"assistant/message announced, but the log ends with {last}")

    def _on_turn_error(self, payload: TurnFailed) -> None:
        if self.turn or self.turns_ended != payload.turn:
            self.problems.append(f"turn/error {payload.turn} before its turn/end")
        if payload.turn in self.failures_announced:
            self.problems.append(f"turn/error {payload.turn} announced twice")
        self.failures_announced.append(payload.turn)
        self._inside_effect("turn/error", ("publish_turn_error",))
        ends = [e for e in self.agent.session.events if e.type == "turn/end"]
        recorded = dict(ends[-1].data["outcome"]) if ends else None  # type: ignore[arg-type]
        if recorded != {"kind": "error", "step": payload.step, "code": payload.code}:
            self.problems.append(
                f"turn/error {payload.turn} says step {payload.step}, {payload.code}; the log "
                f"recorded {recorded}"
            )

    def _on_disposal(
        self, name: str, event: str
    ) -> Callable[[DisposalStarted | DisposalEnded], None]:
        """``agent/disposing`` once, inside the ``dispose`` that began disposal, then
        ``agent/disposed`` once, inside ``dispose_finish``."""
        expected = ["agent/disposing", "agent/disposed"][: 1 if event == "dispose" else 2]

        def on(payload: DisposalStarted | DisposalEnded) -> None:
            self.disposal_notices.append(name)
            if self.disposal_notices != expected:
                self.problems.append(f"{name} after {self.disposal_notices[:-1]}")
            node = self.recorder.current
            if node is None or node.event != event:
                self.problems.append(f"{name} published outside {event} ({node})")
            if not self.dispose_called:
                self.problems.append(f"{name} before dispose() was called")

        return on

    # --- the durable log ----------------------------------------------------------------------

    def _read_log(self) -> None:
        """Read the durable events appended since the last call: order, shape, endings."""
        events = self.agent.session.events
        while self.read < len(events):
            event = events[self.read]
            self.read += 1
            data = event.data
            where = f"durable event {event.seq} {event.type}"
            leak = _not_plain(data)
            assert leak is None, f"{where} carries {leak}"
            if event.type in ("inbox/claimed", "inbox/discarded"):
                for message in data["ids"]:  # type: ignore[union-attr]
                    self.ended[str(message)] += 1
            if event.type == "inbox/claimed":
                # Inside its turn, between steps; a turn's own claim (right after its
                # turn/start) takes at most one next-turn message.
                assert data["turn"] == self.log_turn and self.log_step is None, (
                    f"{where} {data} in turn {self.log_turn}, step {self.log_step}"
                )
                if events[self.read - 2].type == "turn/start":
                    ids = cast(Sequence[str], data["ids"])
                    taken = [i for i in ids if i in self.followups]
                    assert len(taken) <= 1, f"{where}: turn {self.log_turn} claimed {taken}"
            elif event.type == "turn/start":
                assert not self.log_turn and data["turn"] == self.log_turns_ended + 1, (
                    f"{where} {data['turn']} after turn/end {self.log_turns_ended}"
                )
                self.log_turn = int(data["turn"])
            elif event.type == "turn/end":
                assert data["turn"] == self.log_turn and self.log_step is None, (
                    f"{where} {data['turn']} with turn {self.log_turn}, step {self.log_step} open"
                )
                outcome = data["outcome"]
                assert isinstance(outcome, Mapping) and _durable_outcome(outcome), (
                    f"{where} outcome {outcome} is not exactly {{'kind': ...}} (or, for an "
                    "error, {'kind', 'step', 'code'})"
                )
                code = self._errors.turn_codes.pop(self.log_turn, "halted")
                if outcome["kind"] == "error":
                    assert outcome["step"] == self.log_last_step, (
                        f"{where} outcome {outcome} names a step other than the turn's last "
                        f"step/start ({self.log_last_step})"
                    )
                    assert outcome["code"] == code, (
                        f"{where} outcome {outcome} where the turn's failure says {code!r}"
                    )
                self.log_last_step = 0
                self.log_turns_ended, self.log_turn = self.log_turn, 0
            elif event.type == "step/start":
                assert self.log_step is None and data["turn"] == self.log_turn, (
                    f"{where} {data} in turn {self.log_turn}, step {self.log_step}"
                )
                self.log_step = (int(data["turn"]), int(data["step"]))  # type: ignore[arg-type]
                self.log_last_step = self.log_step[1]
            elif event.type == "step/end":
                assert self.log_step == (data["turn"], data["step"]), (
                    f"{where} {data} in step {self.log_step}"
                )
                self.log_step = None


def _durable_outcome(outcome: Mapping[str, object]) -> bool:
    """Exactly ``{"kind"}`` of a known kind, or for an error ``{"kind", "step", "code"}``."""
    kind = outcome.get("kind")
    if kind == "error":
        step = outcome.get("step")
        return (
            set(outcome) == {"kind", "step", "code"}
            and outcome.get("code") in ERROR_CODES
            and isinstance(step, int)
            and step >= 0
        )
    return set(outcome) == {"kind"} and kind in OUTCOME_KINDS


def _not_plain(value: object, path: str = "data") -> str | None:
    """What in a durable value is not plain JSON (a cause, a signal, any object), or None."""
    if isinstance(value, MappingProxyType | dict):
        for key, item in value.items():
            if key in ("cause", "reason", "signal"):
                return f"a {key} at {path}.{key}"
            found = _not_plain(item, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(value, tuple | list):
        for i, item in enumerate(value):
            found = _not_plain(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if type(value) not in _PLAIN:
        return f"a {type(value).__name__} object at {path}"
    return None
