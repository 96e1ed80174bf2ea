"""The public face of one agent: what you call to give it work, cancel it and wait for it.

    handle = await rt.create_agent("a1")
    agent = handle.agent
    agent.followup(UserMessage("m1", "hi"))   # queues and schedules the driver: no turn yet
    agent.cancel()                            # same loop iteration: a pre-run cancel
    await agent.when_idle()                   # resolves: no turn opened, no status published

An :class:`Agent` *originates*: each call refuses bad input on entry, then asks its core to
fire one event of specs/agent.toml. How that event propagates (the hosted table, the effect
handlers, the driver task, the cancellation holder) is plumbing, in a private core the agent
holds but does not expose, as trio's ``CancelScope`` is apart from its ``CancelStatus``.

So an ``Agent`` can do nothing a user could not: it has no attribute that fires a table event,
loads a state or aborts a holder. That is what makes it safe for every agent-scoped payload to
carry the agent itself, as seed 000 says ("agent-scoped events carry agent and signal in the
payload"): a listener that receives it may send, cancel or wait, like any caller, and may read
:attr:`Agent.table_state`, but cannot corrupt the control state.

This module imports no plumbing: the core is typed by the small ``_Core`` protocol
below, and the core (``_core.py``) creates the agent, never the other way round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar, final, get_args

from fsm_core._errors import UsageError, echo
from fsm_core.runtime._causes import USER, AgentCancelCause, ParentCause, UserCause
from fsm_core.runtime._inbox import Inbox, Lane, UserMessage
from fsm_core.runtime._session import Session
from fsm_core.runtime._signal import AbortSignal
from fsm_core.table._expr import Value

__all__ = ["Agent", "Phase", "Status"]

T = TypeVar("T")
"""What a maintenance task returns."""

Phase = Literal["idle", "running", "cancelling", "maintenance", "disposing", "disposed"]
"""The agent table's states; the core refuses a table whose states differ."""

Status = Literal["idle", "running"]
"""What ``agent/status`` publishes: the agent table's ``status`` type."""

_LANES: tuple[Lane, ...] = get_args(Lane)


class _Core(Protocol):
    """What an :class:`Agent` asks of its core: one method per user call, and read access.

    Nothing here fires an event the user could not fire through the agent itself.
    """

    @property
    def id(self) -> str: ...
    @property
    def session(self) -> Session: ...
    @property
    def inbox(self) -> Inbox: ...
    @property
    def phase(self) -> Phase: ...
    @property
    def status(self) -> Status: ...
    @property
    def turn(self) -> int: ...
    @property
    def table_state(self) -> Mapping[str, Value]: ...

    def send(self, message: UserMessage, target: Lane, wakeup: bool) -> None: ...
    def cancel(self, cause: AgentCancelCause, keep_inbox: bool) -> None: ...
    def when_idle(self) -> Awaitable[None]: ...
    async def assemble(self) -> Sequence[Mapping[str, Any]]: ...
    async def run_maintenance(self, task: Callable[[AbortSignal], Awaitable[T]]) -> T: ...


@final
class Agent:
    """One agent as its users see it: give it work, cancel it, wait for it, read its state.

        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))

    A call changes the control state only by firing the table's event for it (``send``,
    ``cancel``, ``maintenance_start`` then ``maintenance_finish``, and ``remove`` for
    ``inbox.remove``) through the agent's private core; nothing else on an ``Agent`` fires
    one (``assemble()`` only reads). Handing it to a listener, as every payload does, grants
    exactly what a caller has. ``phase``, ``status`` and ``table_state`` are read when you ask,
    never cached.
    """

    __slots__ = ("_core",)

    def __init__(self, core: _Core) -> None:
        self._core = core

    @property
    def id(self) -> str:
        return self._core.id

    @property
    def session(self) -> Session:
        """The durable log this agent records into."""
        return self._core.session

    @property
    def inbox(self) -> Inbox:
        """The queued and steering work; ``inbox.remove(id)`` takes a message back."""
        return self._core.inbox

    @property
    def phase(self) -> Phase:
        """The agent table's state: who owns the agent now."""
        return self._core.phase

    @property
    def status(self) -> Status:
        """What ``agent/status`` last published: ``idle`` or ``running``."""
        return self._core.status

    @property
    def table_state(self) -> Mapping[str, Value]:
        """The agent table's current values, ``phase`` first: a read-only snapshot.

        It reads what the table says (``holder``, ``latch``, ``scheduled``, ...) for tests,
        diagnostics and ports comparing notes; nothing written to it reaches the agent.
        """
        return self._core.table_state

    def send(self, message: UserMessage, target: Lane = "next_turn", wakeup: bool = True) -> None:
        """Queue ``message``; a waking send schedules the driver for a later loop iteration.

        Raises :class:`~fsm_core.Rejected` once the agent is disposed, and
        :class:`~fsm_core.UsageError` (changing nothing) for a message that is not a
        :class:`UserMessage` of strings, an id that is already pending, a lane or ``wakeup`` of
        the wrong type, or a waking send with no running event loop to schedule the driver on.
        """
        self._admit(message, target, wakeup)
        self._core.send(message, target, wakeup)

    def _admit(self, message: UserMessage, target: Lane, wakeup: bool) -> None:
        """Refuse, before the table moves, what would corrupt the inbox or the log."""
        # Exact types only: a subclass could answer the checks here one way and the inbox,
        # the table or the log another way later.
        if type(message) is not UserMessage:
            raise UsageError(
                f"agent {self.id}: send() takes a UserMessage, not {type(message).__name__}"
            )
        if type(message.id) is not str or type(message.text) is not str:
            field, value = (
                ("id", message.id) if type(message.id) is not str else ("text", message.text)
            )
            raise UsageError(
                f"agent {self.id}: a message's {field} must be a str, not {type(value).__name__}"
            )
        lane: object = target  # typed as a Lane, but a careless caller passes anything
        if type(lane) is not str or lane not in _LANES:
            raise UsageError(
                f"agent {self.id}: target must be 'next_turn' or 'next_step', not {echo(target)}"
            )
        if not isinstance(wakeup, bool):
            raise UsageError(f"agent {self.id}: wakeup must be a bool, not {echo(wakeup)}")
        if self.inbox._holds(message.id):
            raise UsageError(f"agent {self.id}: message {echo(message.id)} is already pending")
        if wakeup:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                raise UsageError(
                    f"agent {self.id}: a waking send needs a running event loop to schedule "
                    "the driver on (send from async code, or use inject())"
                ) from None

    def followup(self, message: UserMessage) -> None:
        self.send(message, "next_turn", True)

    def steer(self, message: UserMessage) -> None:
        """Steer the running turn at its next step (a followup when no turn runs)."""
        self.send(message, "next_step", True)

    def inject(self, message: UserMessage) -> None:
        """Queue without waking: the message waits for a later wake."""
        self.send(message, "next_turn", False)

    def cancel(self, cause: AgentCancelCause = USER, *, keep_inbox: bool = False) -> None:
        """Stop the current turn (first cause wins) and, unless ``keep_inbox``, queued work.

        On an idle agent with nothing queued this does nothing and arms nothing.
        """
        if not isinstance(cause, (UserCause, ParentCause)):
            # Before the table moves: a look-alike (its ``kind`` says "user") would otherwise
            # begin the cancel and then fail where the cause is read, leaving the turn running.
            raise UsageError(
                f"agent {self.id}: cancel takes a cause, USER or PARENT, not {echo(cause)}"
            )
        if not isinstance(keep_inbox, bool):
            raise UsageError(f"agent {self.id}: keep_inbox must be a bool, not {echo(keep_inbox)}")
        self._core.cancel(cause, keep_inbox)

    def when_idle(self) -> Awaitable[None]:
        """An awaitable that resolves once nothing runs or is about to run (work ignoring its
        signal included), registered inside this call: a synchronous listener may ask for it.
        Awaiting it from the agent's own turn raises :class:`~fsm_core.UsageError`."""
        return self._core.when_idle()

    async def run_maintenance(self, task: Callable[[AbortSignal], Awaitable[T]]) -> T:
        """Run ``task(signal)`` owning the idle agent, and return (or raise) what it did.

        Wakes that arrive meanwhile are latched. When this returns or raises, the maintenance
        has finished: the agent is idle again (or disposing, if disposal interrupted it), and a
        latched wake's driver is scheduled. Raises :class:`~fsm_core.Rejected`, running nothing,
        unless the agent is idle with no driver scheduled.
        """
        return await self._core.run_maintenance(task)

    async def assemble(self) -> Sequence[Mapping[str, Any]]:
        """The conversation so far, as the ``agent/assemble`` waterfall leaves it, assembled
        outside any turn: what the next request starts from, before the next turn claims its
        messages (those still in the inbox are not said: they may yet be discarded).

            async def compact(signal):
                messages = await agent.assemble()   # what the model would be given
                ...
            await agent.run_maintenance(compact)

        The listeners receive an :class:`~fsm_core.AssembleContext` whose ``signal`` is None:
        this assembly belongs to no turn, so no cancel or disposal reaches it. It fires no table
        event and records nothing, so you may call it in any phase; what a listener raises is
        raised here. The messages are a read-only snapshot, as a request's are.
        """
        return await self._core.assemble()

    def __repr__(self) -> str:
        v = self.table_state
        holder, latch = v["holder"], int(bool(v["latch"]))
        turn = self._core.turn
        return f"<Agent {self.id} phase={self.phase} holder={holder} latch={latch} turn={turn}>"
