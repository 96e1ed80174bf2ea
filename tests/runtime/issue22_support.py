"""Shared doubles of the issue 22 fault tests: a bounded await that turns a hang into a
failure, and a runner that fails a test leaving any task behind.

Every wait is on an event, a gate, a future or the idle loop; the deadline of
:func:`bounded` is only a failure guard, never how a test waits for work to happen.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tests.idle_loop import IdleLoop

T = TypeVar("T")

HANG = 1.0
"""Seconds a call that should settle within a few loop iterations gets before a hang fails
the test (a refusal, a teardown of idle agents, a cancel reaching every generation)."""

GUARD = 5.0
"""Seconds a whole scenario gets before a hang fails the test."""


async def bounded(work: Awaitable[T], seconds: float = HANG) -> T:
    """Await ``work``; a hang raises ``TimeoutError`` after ``seconds`` instead."""
    async with asyncio.timeout(seconds):
        return await work


async def returns(work: Awaitable[T], what: str, seconds: float = HANG) -> T:
    """Await ``work``; a hang fails the test naming ``what`` after ``seconds``."""
    try:
        return await bounded(work, seconds)
    except TimeoutError:
        raise AssertionError(f"{what} did not return within {seconds}s (a hang)") from None


def drive(main: Callable[[IdleLoop], Coroutine[Any, Any, None]]) -> None:
    """Run ``main(loop)`` on a fresh idle-probed loop; then, once the loop is idle, no task
    may be left: one still waiting is cancelled and fails the test (so a hang guard that
    fired leaves nothing running behind it)."""
    loop = IdleLoop()

    async def checked() -> None:
        try:
            await main(loop)
        finally:
            await _nothing_left(loop)

    loop.run(checked())


async def _nothing_left(loop: IdleLoop) -> None:
    await loop.idle()
    me = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if left:
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=HANG)
        names = sorted(t.get_name() for t in left)
        raise AssertionError(f"tasks left running after the test: {names}")


@contextmanager
def no_thread_left() -> Iterator[None]:
    """No test of issue 22 may leave a background thread behind (each module's autouse
    fixture wraps every test in this)."""
    before = set(threading.enumerate())
    yield
    left = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not left, f"threads left running after the test: {left}"
