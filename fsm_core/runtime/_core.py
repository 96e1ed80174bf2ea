"""The plumbing of one agent: its control state is the agent table, its work is the driver's.

An :class:`AgentCore` owns what the public :class:`~fsm_core.Agent` only asks for: the
:class:`~fsm_core.HostedMachine` of specs/agent.toml, the effect handlers, the driver task, the
cancellation holder, and teardown. It creates its agent (``core.agent``) and is the only object
that fires table events; the agent reaches it through the ``_Core`` protocol of ``_agent.py``.

Every phase, holder, latch and marker change happens by firing an event of the table; the
effects the table lists run here, in the table's order, as the row reaches them, each by the
handler declared for it (``@performs``), as ``_hosting.py`` hosts every table. What an event is
about that the table does not model (the message a ``send`` enqueues, the cause a ``cancel``
requests) travels with the fire itself, as its context (:data:`AgentContext`), and the handler
reads it back from the innermost fire: listeners re-enter, and each fire keeps its own.

The driver (:meth:`AgentCore._drive`) only sequences: start, claim (open the turn), take its
prompt, run the turn's seams (the core's :class:`~fsm_core.runtime._turn.TurnRunner`, in
``_turn.py``), retire, await the flush, converge; what each of those does to the control state
is the table's decision, read back from the state.

Cancellation is cooperative: the driver checks the signal around awaited seams but never
abandons work. ``when_idle()`` and disposal wait for work that ignores the signal.

Whatever escapes, the table converges, so ``when_idle()`` and disposal always return:

- a seam that raises an ``Exception`` (``CancelledError`` included, unless the driver's own task
  is being cancelled) ends the turn as ``error``; a notification listener's is contained;
- a ``BaseException`` that is not contained (the driver task cancelled from outside,
  ``KeyboardInterrupt``, ...) retires the open turn and *halts* the driver (the table's
  ``halt`` rows), then propagates; queued work stays parked until a later wake;
- a listener's uncontained ``BaseException`` inside a row is held until the row completes,
  then raised to whoever fired the event, so no row ever stops half-way (``_hosting.py``).

Whoever owns agents (the :class:`~fsm_core.Runtime`, later seed 004's activation registry)
uses one API: build an :class:`AgentCore` with the seams it lends (:class:`Seams`) and the
``track``/``forget`` callables for its bookkeeping, wrap it in an :class:`AgentHandle`, and
``dispose()`` that handle.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, TypeAlias, TypeVar, cast, final, get_args

from fsm_core._errors import FsmError, UsageError
from fsm_core.runtime._agent import Agent, Phase, Status
from fsm_core.runtime._causes import (
    DISPOSED,
    PARENT,
    USER,
    AgentCancelCause,
    Interruption,
    ParentCause,
    UserCause,
    detach,
)
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._hosting import Hosted, check_handlers, hosts, performs
from fsm_core.runtime._inbox import Inbox, Lane, UserMessage
from fsm_core.runtime._payloads import (
    CancelRequested,
    DisposalEnded,
    DisposalStarted,
    Flush,
    MessageDiscarded,
    MessageInserted,
    MessagesClaimed,
    StatusChanged,
    TurnEnded,
    TurnStarted,
)
from fsm_core.runtime._scope import context_for
from fsm_core.runtime._session import Session
from fsm_core.runtime._signal import AbortController, AbortSignal
from fsm_core.runtime._teardown import Pending, persist, raise_if_cancelling
from fsm_core.runtime._turn import TurnRunner, TurnSeams
from fsm_core.table import Machine
from fsm_core.table._expr import Value

__all__ = ["AgentCore", "AgentHandle", "Seams"]

T = TypeVar("T")
"""What a maintenance task returns."""

AgentContext: TypeAlias = UserMessage | UserCause | ParentCause
"""What a fire of the agent table carries beside its arguments: the message a ``send``
enqueues or a ``remove`` discards, or the cause a ``cancel`` requests (as the caller gave
it, detached when published)."""

log = logging.getLogger("fsm_core.runtime")

_INTERRUPTIONS: Mapping[str, Interruption] = {"user": USER, "parent": PARENT, "disposed": DISPOSED}


def _check_literals(machine: Machine) -> None:
    """Raise :class:`FsmError` unless the runtime's literal types are the table's.

    ``Phase``, ``Lane`` and ``Status`` type what the runtime reads back from the table; a table
    that renamed a state or a value would otherwise reach the runtime as a string its types
    say cannot occur.
    """
    spec = machine.table

    def values(name: str) -> Sequence[Value]:
        return spec.types[name].values if name in spec.types else ()

    pairs = (
        ("Phase", get_args(Phase), "states are", spec.state_names),
        ("Lane", get_args(Lane), "type lane is", values("lane")),
        ("Status", get_args(Status), "type status is", values("status")),
    )
    for name, ours, where, theirs in pairs:
        if set(ours) != set(theirs):
            raise FsmError(
                f"the runtime and {spec.file} disagree on {name}: the runtime's {name} is "
                f"{sorted(ours)}, the table's {where} {sorted(theirs)}"
            )


_CHECKED: weakref.WeakSet[Machine] = weakref.WeakSet()
"""The compiled tables :func:`_check_table` has accepted; each is checked once."""


def _check_table(machine: Machine) -> None:
    """Raise :class:`FsmError` unless :class:`AgentCore` performs exactly the table's effects
    and reads back its literal types (checked once per compiled table)."""
    if machine in _CHECKED:
        return
    check_handlers(AgentCore, machine)
    _check_literals(machine)
    _CHECKED.add(machine)


class Seams(TurnSeams, Protocol):
    """What an agent's owner lends its core: the bus, and the model, tools and hooks its turns
    call (:class:`~fsm_core.runtime._turn.TurnSeams`), read live."""

    @property
    def events(self) -> EventBus: ...
    def unwind(self, agent: Agent) -> Awaitable[None]:
        """Dispose ``agent``'s scope: refuse new boundaries of it, and resolve once every
        boundary run on its behalf settled (the seed's ``await machine.scope.dispose()``)."""
        ...

    def refuse_inside(self, agent: Agent, call: str) -> None:
        """Raise :class:`~fsm_core.UsageError` when the current context runs inside a
        boundary of ``agent``: awaiting ``call`` would wait for that boundary to end."""
        ...


@final
@hosts("agent")
class AgentCore(Hosted[AgentContext]):
    """One agent's plumbing; ``core.agent`` is its public face. Build one per agent.

        core = AgentCore("a1", machine, Session(), seams=rt, track=tasks.add, forget=names.pop)
        handle = AgentHandle(core)      # handle.agent is core.agent

    Raises :class:`FsmError` when the table and the runtime disagree on the effects to
    perform (their handlers, declared below with ``@performs``) or on the literal types the
    runtime reads back (``Phase``, ``Lane``, ``Status``).
    """

    def __init__(
        self,
        agent_id: str,
        machine: Machine,
        session: Session,
        *,
        seams: Seams,
        track: Callable[[asyncio.Task[None]], None],
        forget: Callable[[str], None],
    ) -> None:
        self.id = agent_id
        self.session = session
        self.seams = seams
        self.events = seams.events
        self._track = track
        """Told of every driver task this core starts (the owner awaits them at close)."""
        self._forget = forget
        """Told this agent's id once its disposal finished."""
        self.inbox = Inbox(self._remove)
        _check_table(machine)
        self._host(machine)
        # Invariant: _controller is set iff the table's holder is live or aborted.
        self._controller: AbortController | None = None
        self._status: Status = "idle"
        # Turns continue the session's numbering: a resumed log never repeats a turn number.
        self._turn = max(
            (cast(int, e.data["turn"]) for e in session.events if e.type == "turn/start"),
            default=0,
        )
        self._claimed: list[UserMessage] = []
        self._flush_owed = False
        """Set by the table's ``flush_session`` effect, cleared once that flush settled. A
        driver that halted before settling it leaves it owed to the next driver."""
        self._waiters: list[asyncio.Future[None]] = []
        self._closing_write: asyncio.Future[None] | None = None
        """The last write of the log, started by ``close_session``; disposal awaits it."""
        self.driver: asyncio.Task[None] | None = None
        """The driver task last scheduled, if any."""
        self._started = False
        """True iff the driver task last scheduled has begun to run."""
        self.agent = Agent(self)
        self._turns = TurnRunner(self)
        """Runs each turn's steps between its claim and its retire (``_turn.py``)."""
        # Last: a refusal (the session has a live writer) leaves nothing of this agent behind.
        session._attach(agent_id)

    def _who(self) -> str:
        return f"agent {self.id}"

    # --- what the agent asks for: read access and one method per user call ------------------

    @property
    def phase(self) -> Phase:
        return cast(Phase, self.control.state)  # _check_literals: the table's states

    @property
    def status(self) -> Status:
        return self._status

    @property
    def turn(self) -> int:
        """The number of the turn last opened (0 before the first)."""
        return self._turn

    @property
    def table_state(self) -> Mapping[str, Value]:
        return MappingProxyType(self.control.values)

    def send(self, message: UserMessage, target: Lane, wakeup: bool) -> None:
        """Fire ``send``; the message is the fire's context, for ``enqueue``."""
        self._fire("send", message, wake=wakeup, lane=target)

    def cancel(self, cause: AgentCancelCause, keep_inbox: bool) -> None:
        """Fire ``cancel``; the cause is the fire's context, for ``notify_cancel_requested``."""
        self._fire("cancel", cause, cause=cause.kind, keep_inbox=keep_inbox)

    def fire_wired(
        self, event: str, context: AgentContext | None, args: Mapping[str, Value]
    ) -> None:
        """Fire ``event`` as a call of specs/wiring.toml makes it (the hosting activation's
        close shutting the agent, its cancel, a child's notice), with the fire's
        ``context`` (the cause, the message) for the effects that need it."""
        self._fire(event, context, **args)

    def when_idle(self) -> Pending:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.control.holds("quiescent"):
            waiter.set_result(None)
        else:
            self._waiters.append(waiter)
        return Pending(waiter, self._refuse_own_turn("when_idle()", "return from the turn"))

    def _refuse_own_turn(self, call: str, instead: str) -> Callable[[], None]:
        """A guard that refuses awaiting ``call`` from this agent's own driver task."""

        def refuse() -> None:
            if asyncio.current_task() is self.driver:
                raise UsageError(
                    f"agent {self.id}: its own turn cannot await {call}, which waits for that "
                    f"turn to end; {instead}"
                )

        return refuse

    async def assemble(self) -> Sequence[Mapping[str, Any]]:
        """Assembly outside any turn: the turn runner's, with no signal; no table event."""
        return await self._turns.assemble(None)

    async def run_maintenance(self, task: Callable[[AbortSignal], Awaitable[T]]) -> T:
        self._fire("maintenance_start")
        controller = self._controller
        assert controller is not None
        try:
            return await task(controller.signal)
        finally:
            self._fire("maintenance_finish")

    # --- disposal ---------------------------------------------------------------------------

    def request_disposal(self) -> None:
        """Begin disposal inside the caller's call, as the seed's ``dispose()`` does before its
        first await: a turn that a cancel has just aborted must not retire before the lifecycle
        flag is set, or it would record ``aborted`` where decision 6 says ``disposed``."""
        self._fire("dispose")

    async def dispose(self) -> None:
        """The reverse teardown after ``dispose``'s cancel, as the table's rows order it:
        await idle, dispose the scope (every boundary of the agent settles), then
        ``scope_unwound`` closes the session's write path, and ``dispose_finish`` leaves the
        registries and publishes ``agent/disposed``. A failed write is raised after disposal
        completed, so it reaches every caller of ``dispose()`` and the agent is disposed
        either way."""
        await self.when_idle()
        await self.seams.unwind(self.agent)
        self._fire("scope_unwound")
        closing, self._closing_write = self._closing_write, None
        assert closing is not None, "scope_unwound closes the session's write path"
        try:
            await closing
        finally:
            self._fire("dispose_finish")

    # --- the driver -------------------------------------------------------------------------

    async def _drive(self) -> None:
        """One driver: start, then turns until the table says the agent converged.

        Whatever escapes (a cancelled task, a ``BaseException`` from a seam or a listener), the
        driver retires the open turn and halts before it propagates, so the table converges.
        """
        self._started = True
        try:
            self._fire("start")
            if self._flush_owed and self.phase in ("running", "cancelling"):
                # A halted driver's last turn: its flush settles before the next claim (D7).
                await self._await_flush()
            while self.phase in ("running", "cancelling") and not self._value("turn"):
                raise_if_cancelling()
                self._fire("claim")
                if not self._value("turn"):
                    continue  # a replacement got a fresh holder, or the claim converged
                rest = len(self.inbox.next_turn) > 1
                if self._enabled("take_prompt", rest=rest):
                    # After turn/start, unless its listeners cancelled or took the work: one
                    # next-turn message (and all steering); the rest stays queued for this
                    # driver's next turn (converge.continue).
                    self._fire("take_prompt", rest=rest)
                controller = self._controller
                assert controller is not None
                ending = await self._turns.run(controller.signal, self._turn, self._claimed)
                self._fire("retire", end=ending)
                if self._flush_owed:
                    await self._await_flush()
                raise_if_cancelling()
                self._fire("converge")
        except BaseException as error:
            self._halt(error)
            raise

    def _enabled(self, event: str, **args: Value) -> bool:
        """True iff a row of the table takes ``event`` now: the table decides, not the driver."""
        return self.control.takes(event, **args)

    def _halt(self, escape: BaseException) -> None:
        """Converge the table after ``escape``, with no await: retire the open turn, halt.

        The retired turn's flush stays owed: the next driver settles it before its claim.
        """
        for event, args in (("retire", {"end": "error"}), ("halt", {})):
            if self.phase not in ("running", "cancelling"):
                return  # the driver no longer owns the agent (it converged, or replayed)
            if not self._enabled(event, **args):
                continue
            if event == "retire":
                self._turns.halted(escape)
            try:
                self._fire(event, **args)
            except BaseException:  # a listener's, held to the row's end: the first one wins
                log.exception("agent %s: a listener raised while the driver halted", self.id)

    async def _await_flush(self) -> None:
        # With no session/flush listener, the chain is the flush alone: await it directly.
        flushing = (
            self.events.waterfall("session/flush", Flush(self.agent, self.session), self._flush)
            if self.events.heard("session/flush")
            else self.session.flush()
        )
        try:
            await flushing
        except (Exception, asyncio.CancelledError):
            # The turn's outcome is already recorded; a failed flush is reported and must
            # not strand the agent in running (when_idle() and dispose would never return).
            # Disposal flushes the whole log again and raises if that fails too.
            raise_if_cancelling()
            log.exception("agent %s: the flush after turn %d failed", self.id, self._turn)
        self._flush_owed = False

    async def _flush(self, payload: Flush) -> None:
        await payload.session.flush()

    # --- what a turn asks of its core (the TurnHost protocol of _turn.py) --------------------

    def take_steering(self, rest: bool) -> None:
        """Fire ``take_steering`` at a step boundary of the open turn."""
        self._fire("take_steering", rest=rest)

    # --- effects: what the table's rows tell the runtime to do --------------------------------

    def _value(self, name: str) -> Value:
        return self.control.get(name)

    @performs("enqueue")
    def _enqueue(self, lane: str) -> None:
        message = self._about(UserMessage)  # only send's rows enqueue: the message being sent
        queued = cast(Lane, lane)  # _check_literals: the table's lanes
        self.inbox._insert(message, queued)
        self.events.notify("inbox/inserted", MessageInserted, self.agent, message, queued)

    @performs("schedule_driver")
    def _schedule_driver(self) -> None:
        task = asyncio.get_running_loop().create_task(
            self._drive(), name=f"driver {self.id}", context=context_for(self.agent)
        )
        self.driver = task
        self._started = False
        task.add_done_callback(self._driver_ended)
        self._track(task)

    def _driver_ended(self, task: asyncio.Task[None]) -> None:
        """A driver task cancelled before its first step never ran ``_drive``: halt its
        schedule, or the agent would wait for it forever."""
        if task is self.driver and not self._started and self._value("scheduled"):
            try:
                self._fire("halt")
            except BaseException:
                log.exception("agent %s: a listener raised while the driver halted", self.id)

    @performs("notify_cancel_requested")
    def _notify_cancel_requested(self, cause: str) -> None:
        requested = self._context  # only cancel's rows notify: the cause requested
        assert isinstance(requested, UserCause | ParentCause) and requested.kind == cause
        self.events.emit(
            "agent/cancel-requested",
            CancelRequested(self.agent, cast(AgentCancelCause, detach(requested))),
        )

    @performs("clear_inbox")
    def _clear_inbox(self) -> None:
        self._discard(self.inbox._clear())

    def _discard(self, messages: list[UserMessage]) -> None:
        """Record the discarded messages (one durable event), then announce each."""
        if messages:
            self.session.append("inbox/discarded", {"ids": [m.id for m in messages]})
        for message in messages:
            self.events.notify("inbox/discarded", MessageDiscarded, self.agent, message)

    @performs("discard_removed")
    def _discard_removed(self) -> None:
        removed = self._about(UserMessage)  # remove's fire carries the message it removes
        taken = self.inbox._take(removed.id)
        assert taken is not None
        self._discard([taken])

    @performs("abort_holder")
    def _abort_holder(self, signal_reason: str) -> None:
        assert self._controller is not None
        self._controller.abort(_INTERRUPTIONS[signal_reason])

    @performs("open_holder")
    def _open_holder(self) -> None:
        self._controller = AbortController()

    @performs("release_holder")
    def _release_holder(self) -> None:
        self._controller = None

    @performs("publish_status")
    def _publish_status(self, status: str) -> None:
        self._status = cast(Status, status)
        self.events.notify("agent/status", StatusChanged, self.agent, self._status)

    @performs("claim_inbox")
    def _claim_inbox(self) -> None:
        """The open turn's claim: every steering message and one next-turn message, recorded,
        then announced, the claim first, then each message (listeners may re-enter: the
        table's effect notifies)."""
        controller = self._controller
        assert controller is not None
        claimed = self._claimed = self.inbox._claim()
        self._turns.record_claim(self._turn, claimed)
        self.events.notify(
            "inbox/claimed", MessagesClaimed, self.agent, controller.signal, self._turn, (*claimed,)
        )
        self._turns.announce(controller.signal, self._turn, claimed)

    @performs("claim_steering")
    def _claim_steering(self) -> None:
        """A step boundary's claim of the steering messages, recorded, then announced."""
        controller = self._controller
        assert controller is not None
        steering = self.inbox._claim_steering()
        self._turns.record_claim(self._turn, steering)
        self._turns.announce(controller.signal, self._turn, steering)

    @performs("publish_turn_start")
    def _publish_turn_start(self) -> None:
        """Open the next turn, before its claim (specs/README.md): its prompt is still queued
        while turn/start observers run."""
        controller = self._controller
        assert controller is not None
        self._turn += 1
        self._claimed = []
        self.session.append("turn/start", {"turn": self._turn})
        self.events.notify("turn/start", TurnStarted, self.agent, controller.signal, self._turn)

    @performs("publish_turn_end")
    def _publish_turn_end(self, outcome: str) -> None:
        durable = self._turns.ended(self._turn, outcome)
        self.session.append("turn/end", {"turn": self._turn, "outcome": durable})
        self.events.notify("turn/end", TurnEnded, self.agent, self._turn, durable)

    @performs("publish_turn_error")
    def _publish_turn_error(self) -> None:
        """After turn/end: the failure again, with what the log never holds, the exception."""
        failed = self._turns.failure()
        self.events.emit("turn/error", failed)

    @performs("flush_session")
    def _flush_session(self) -> None:
        """An effect cannot await: the driver owes the flush, and awaits it before converge."""
        self._flush_owed = True

    @performs("settle_idle")
    def _settle_idle(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    @performs("close_session")
    def _close_session(self) -> None:
        self._closing_write = asyncio.ensure_future(self.session.flush())

    @performs("finalize_disposal")
    def _finalize_disposal(self) -> None:
        self.session._detach()
        self._forget(self.id)

    @performs("publish_disposing")
    def _publish_disposing(self) -> None:
        self.events.notify("agent/disposing", DisposalStarted, self.agent)

    @performs("publish_disposed")
    def _publish_disposed(self) -> None:
        self.events.notify("agent/disposed", DisposalEnded, self.agent)

    def _remove(self, message_id: str) -> bool:
        queued = (*self.inbox.next_turn, *self.inbox.next_step)
        removed = next((m for m in queued if m.id == message_id), None)
        if removed is None:
            return False
        rest = any(m.id != message_id for m in queued)
        self._fire("remove", removed, rest=rest)  # refused on a disposed agent: nothing removed
        return True


@final
class AgentHandle:
    """Owns one agent's lifetime. ``dispose()`` is memoized: racing callers await one teardown."""

    def __init__(self, core: AgentCore) -> None:
        self.agent = core.agent
        self._core = core
        self._disposal: asyncio.Future[None] | None = None

    def dispose(self) -> Pending:
        """Interrupt the agent's work inside this call; await the result for it to settle,
        the log to be flushed and disposal to finish.

        Every caller awaits the same teardown; cancelling one caller does not cancel it. A
        failed final flush is raised to every caller, after the agent is disposed. A
        synchronous listener may call it to begin disposal in-line and never await it.
        """
        disposal = asyncio.shield(self._begin())
        own_turn = self._core._refuse_own_turn(
            "its disposal", "the disposal has begun, return from the turn"
        )

        def refuse() -> None:
            own_turn()
            self._core.seams.refuse_inside(self.agent, "its disposal")

        return Pending(disposal, refuse)

    def _begin(self) -> asyncio.Future[None]:
        """Request disposal now, inside the caller's call, and start the teardown once."""
        if self._disposal is None:
            try:
                self._core.request_disposal()
            finally:
                # Even when a listener's BaseException escapes the request, the table is
                # disposing now, and teardown must run.
                self._disposal = persist(self._core.dispose, f"dispose {self.agent.id}")
        return self._disposal
