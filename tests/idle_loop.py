"""A point where whatever could still happen has happened: the event loop is idle.

A test asserting that something has *not* happened (a close has not returned, a watcher
has not disposed) needs a point where it would have had to happen. When the runtime offers
no later event to wait on, that point is the loop's first iteration where nothing can run:
every task waits on something only the test can give (a gate, an event, a release). This
reuses the race harness's :class:`~tests.race.bridge.IdleProbe`, which learns it from the
loop's selector (public API only), instead of counting ``sleep(0)`` yields::

    loop = IdleLoop()

    async def main() -> None:
        ...
        await loop.idle()
        assert not closed.done()

    loop.run(main())
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from tests.race.bridge import MAX_ITERATIONS, IdleProbe, NeverSettled

T = TypeVar("T")


class IdleLoop:
    """Runs a coroutine on a loop whose idle iterations :meth:`idle` can wait for."""

    def __init__(self) -> None:
        self._probe = IdleProbe()

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(self._probe)) as r:
            return r.run(main)

    async def idle(self) -> None:
        """Return at the loop's first iteration where nothing else can run; raise
        :class:`NeverSettled` if it keeps running (a livelock)."""
        went_idle: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._probe.watch(went_idle, MAX_ITERATIONS)
        if not await went_idle:
            raise NeverSettled(f"the event loop was still busy after {MAX_ITERATIONS} iterations")
