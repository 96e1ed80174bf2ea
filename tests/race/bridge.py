"""The loop bridge: a private event loop that a synchronous state machine steps.

Hypothesis rules are synchronous; the runtime is asyncio. A :class:`LoopBridge` owns one event
loop (closed by :meth:`LoopBridge.close`) and runs each rule's synchronous calls *inside* it,
then keeps the loop turning until nothing can run::

    bridge = LoopBridge(settled=quiescent_or_at_a_gate, describe=lambda: repr(agent))
    bridge.run(lambda: agent.followup(message))   # the send, then every task it wakes
    bridge.close()

A rule therefore ends at the runtime's next quiescent point or gate: every task the runtime
(or the test) started is waiting on something only the next rule can give, typically a
:class:`Gate` a seam is blocked on. Calls that must race inside one loop iteration (sends,
then a cancel, before the scheduled driver starts) go in one action.

How the bridge knows that nothing can run
-----------------------------------------
The loop tells it, through the one public seam a selector event loop has: its selector.
``asyncio.SelectorEventLoop(selector)`` takes any :class:`selectors.BaseSelector`, and the
bridge passes an :class:`IdleProbe` that wraps the platform's default selector. Every loop
iteration starts with one ``select(timeout)`` call, and a loop may only *wait* there (a
timeout of ``None``, or a positive one while only timers are pending) when no callback is
ready: a loop that waited with work ready would stall that work until I/O arrived, so this
is what being a correct event loop means, not a detail of CPython's. While a rule settles,
the probe answers such a call by polling the real selector without waiting; if no I/O is
ready either, the loop is idle, and instead of blocking the probe resolves the future the
bridge awaits and returns no events. The bridge's task wakes in that same iteration, checks
``settled()`` and returns, and ``run_until_complete`` hands control back to the rule. A call
with timeout 0 is a busy iteration; the probe counts them, and past ``max_iterations`` it
resolves the future with "busy" (a livelock). The failure modes are safe: a loop that
polled with timeout 0 while idle would be reported as a livelock, never as settled.

The runtime uses no timers and no I/O, so an idle loop stays idle until the next rule: that
is the harness stepping the loop, not a test waiting on work. A pending timer is a wait the
bridge does not pass, as a gate is. At that point ``settled()`` must hold (for the agent:
quiescent, or some seam waits at a closed gate); an idle loop where it does not is a hang,
and the bridge fails with ``describe()``.

The alternatives, and why not
-----------------------------
- asyncio's private ready queue (``loop._ready``), which the bridge used to read after each
  ``sleep(0)`` of its own: private, and the bridge's own task took a turn in every
  iteration it watched.
- A loop subclass, or a policy installing one: it overrides private methods
  (``_run_once``), so it is no more public than reading ``_ready``.
- A wrapper around :class:`asyncio.AbstractEventLoop`: dozens of methods to forward, and
  the wrapper still cannot see inside ``run_forever`` when the loop runs out of work.
- A task factory (``loop.set_task_factory``) tracking every task until each waits on a
  future: it misses plain callbacks (``call_soon``, future done-callbacks) and a task
  between two steps, so "every task waits" is not "nothing can run".

The probe relies on public API only: the selector constructor argument, the
:class:`selectors.BaseSelector` interface, and :class:`asyncio.Future`.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

__all__ = ["IdleProbe", "LoopBridge", "NeverSettled"]

T = TypeVar("T")

MAX_ITERATIONS = 10_000
"""How many loop iterations one rule may take before the bridge gives up (a livelock)."""


class NeverSettled(AssertionError):
    """The loop kept running past the bound, or went idle where nothing was settled."""


class IdleProbe(selectors.BaseSelector):
    """A selector that, while watched, reports the loop's first idle iteration instead of
    blocking in it; otherwise it is the platform's default selector.

    :meth:`watch` arms it with a future; the future resolves with ``True`` at the first
    ``select`` that would wait with no I/O ready, or with ``False`` after ``budget`` busy
    iterations. :attr:`iterations` counts the ``select`` calls since :meth:`watch`.
    """

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._watching: asyncio.Future[bool] | None = None
        self._budget = 0
        self.iterations = 0

    def watch(self, idle: asyncio.Future[bool], budget: int) -> None:
        self._watching = idle
        self._budget = budget
        self.iterations = 0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        watching = self._watching
        if watching is None or watching.done():
            self._watching = None
            return self._selector.select(timeout)
        self.iterations += 1
        if timeout is not None and timeout <= 0:  # a callback is ready: a busy iteration
            if self.iterations >= self._budget:
                self._watching = None
                watching.set_result(False)
            return self._selector.select(timeout)
        events = self._selector.select(0)  # the loop would wait: is any I/O ready now?
        if not events:
            self._watching = None
            watching.set_result(True)  # wakes the bridge within this very iteration
        return events

    def register(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._selector.register(fileobj, events, data)

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._selector.unregister(fileobj)

    def modify(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._selector.modify(fileobj, events, data)

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._selector.get_map()

    def close(self) -> None:
        self._selector.close()


class LoopBridge:
    """One private event loop, stepped rule by rule to its next idle point."""

    def __init__(
        self,
        settled: Callable[[], bool],
        describe: Callable[[], str],
        *,
        max_iterations: int = MAX_ITERATIONS,
    ) -> None:
        self._probe = IdleProbe()
        self.loop = asyncio.SelectorEventLoop(self._probe)
        self._settled = settled
        self._describe = describe
        self._max_iterations = max_iterations
        self.iterations = 0
        """Loop iterations the last :meth:`run` took to go idle (or to give up)."""
        self._stepping: asyncio.Task[Any] | None = None

    def run(self, action: Callable[[], T]) -> T:
        """Call ``action()`` inside the loop, then turn the loop until it is idle; return."""

        async def step() -> T:
            result = action()
            await self._settle()
            return result

        task = self.loop.create_task(step(), name="bridge")
        self._stepping = task
        try:
            return self.loop.run_until_complete(task)
        finally:
            self._stepping = None

    def settle(self) -> None:
        """Turn the loop until it is idle (a rule that only lets time pass)."""
        self.run(lambda: None)

    def spawn(self, coroutine: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Start ``coroutine`` as a task of this loop; it runs when the loop next turns."""
        return self.loop.create_task(coroutine, name=name)

    def pending(self) -> set[asyncio.Task[Any]]:
        """Every unfinished task of the loop but the bridge's own (``describe()`` runs in it)."""
        tasks = asyncio.all_tasks(self.loop)
        if self._stepping is not None:
            tasks.discard(self._stepping)
        return tasks

    async def _settle(self) -> None:
        idle = self.loop.create_future()
        self._probe.watch(idle, self._max_iterations)
        went_idle = await idle
        self.iterations = self._probe.iterations
        if not went_idle:
            raise NeverSettled(
                f"the event loop was still busy after {self.iterations} iterations "
                f"(a livelock): {self._describe()}"
            )
        if not self._settled():
            raise NeverSettled(
                "the event loop is idle but the runtime is neither quiescent nor "
                f"waiting at a gate (a hang): {self._describe()}"
            )

    def close(self, release: Callable[[], bool] = lambda: False) -> None:
        """Let the loop's tasks finish and close it; never raises for what the tasks do.

        ``release()`` opens whatever the tasks wait on and answers whether it opened
        anything; it is called until it answers False. Tasks still pending after that are
        cancelled. The loop is closed in any case.
        """
        loop = self.loop
        if loop.is_closed():
            return
        try:
            # Teardown closes the loop whatever the tasks did; a failure was reported already.
            with contextlib.suppress(Exception):
                for _ in range(100):
                    self.run(lambda: None)
                    if not self.pending() or not release():
                        break
        finally:
            leftover = self.pending()
            for task in leftover:
                task.cancel()
            if leftover:
                loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
