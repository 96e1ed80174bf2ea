"""The loop bridge: a private event loop that a synchronous state machine steps.

Hypothesis rules are synchronous; the runtime is asyncio. A :class:`LoopBridge` owns one event
loop (``asyncio.new_event_loop()``, closed by :meth:`LoopBridge.close`) and runs each rule's
synchronous calls *inside* it, then keeps the loop turning until nothing is ready to run::

    bridge = LoopBridge(settled=quiescent_or_at_a_gate, describe=lambda: repr(agent))
    bridge.run(lambda: agent.followup(message))   # the send, then every task it wakes
    bridge.close()

A rule therefore ends at the runtime's next quiescent point or gate: every task the runtime
(or the test) started is waiting on something only the next rule can give, typically a
:class:`Gate` a seam is blocked on. Calls that must race inside one loop iteration (sends,
then a cancel, before the scheduled driver starts) go in one action.

"Nothing is ready" is read from the loop itself: after yielding with ``asyncio.sleep(0)``, the
bridge's task resumes with an empty ready queue exactly when every other callback of that
iteration has run and none scheduled another. The runtime uses no timers and no I/O, so the
loop is then idle for good. That is the harness stepping the loop, not a test waiting on work.
At that point ``settled()`` must hold (for the agent: quiescent, or some seam waits at a closed
gate); an idle loop where it does not is a hang, and the bridge fails with ``describe()``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopBridge", "NeverSettled"]

T = TypeVar("T")

MAX_ITERATIONS = 10_000
"""How many loop iterations one rule may take before the bridge gives up (a livelock)."""


class NeverSettled(AssertionError):
    """The loop kept running past the bound, or went idle where nothing was settled."""


class LoopBridge:
    """One private event loop, stepped rule by rule to its next idle point."""

    def __init__(
        self,
        settled: Callable[[], bool],
        describe: Callable[[], str],
        *,
        max_iterations: int = MAX_ITERATIONS,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self._settled = settled
        self._describe = describe
        self._max_iterations = max_iterations
        self.iterations = 0
        """Loop iterations the last :meth:`run` took to settle."""
        ready = getattr(self.loop, "_ready", None)
        if not isinstance(ready, deque):
            self.loop.close()
            raise TypeError("LoopBridge needs asyncio's own event loop (it reads its ready queue)")
        self._ready: deque[Any] = ready

    def run(self, action: Callable[[], T]) -> T:
        """Call ``action()`` inside the loop, then turn the loop until it is idle; return."""

        async def step() -> T:
            result = action()
            await self._settle()
            return result

        return self.loop.run_until_complete(step())

    def settle(self) -> None:
        """Turn the loop until it is idle (a rule that only lets time pass)."""
        self.run(lambda: None)

    def spawn(self, coroutine: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Start ``coroutine`` as a task of this loop; it runs when the loop next turns."""
        return self.loop.create_task(coroutine, name=name)

    def pending(self) -> set[asyncio.Task[Any]]:
        """Every unfinished task of the loop."""
        return asyncio.all_tasks(self.loop)

    async def _settle(self) -> None:
        for iteration in range(1, self._max_iterations + 1):
            await asyncio.sleep(0)
            if not self._ready:
                self.iterations = iteration
                if not self._settled():
                    raise NeverSettled(
                        "the event loop is idle but the runtime is neither quiescent nor "
                        f"waiting at a gate (a hang): {self._describe()}"
                    )
                return
        raise NeverSettled(
            f"the event loop was still busy after {self._max_iterations} iterations "
            f"(a livelock): {self._describe()}"
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
