"""Teardown that outlives whoever cancels it, and awaitables for work begun inside a call.

``dispose()`` and ``aclose()`` run their work in a task so that every caller awaits the same
teardown. A shutdown that cancels every task (``asyncio.run`` ending, a supervisor) would
cancel that task too, possibly before its first step, and the agent would stay disposing for
good. :func:`persist` runs the work again whenever its task ends cancelled; the work is
written to be repeatable (it waits for settled work, then finishes once).

``dispose()``, ``aclose()`` and ``when_idle()`` are plain methods, not coroutines: the seeds'
disposal begins *inside* the call, so a synchronous listener can begin it (or register for
idle) in-line and await the :class:`Pending` it gets back later, or never. A failure that
reaches its caller some other way too (an activation's settlement tells its own) is
:func:`reported_elsewhere`: awaiting still raises it, and nobody awaiting is no bug for asyncio to
warn about.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Generator
from typing import Any, final

__all__ = ["Pending", "persist", "raise_if_cancelling", "reported_elsewhere"]


@final
class Pending:
    """Work that began when it was asked for; await it for the outcome, or do not.

    ``dispose()``, ``aclose()``, ``when_idle()`` and ``rt.agents.close()`` return one. The work
    runs whether or not you await it, so a synchronous listener can begin it and return::

        pending = handle.dispose()      # disposal has begun
        await pending                   # returns once the agent is disposed

    ``done()`` says whether awaiting would return (or raise) at once. You never build one.

    Awaiting one where that would wait for itself (an agent's own turn awaiting its own
    disposal or idle) raises instead: ``refuse`` runs when it is awaited and raises there.
    """

    __slots__ = ("_future", "_refuse")

    def __init__(self, future: asyncio.Future[None], refuse: Callable[[], None]) -> None:
        self._future = future
        self._refuse = refuse

    def done(self) -> bool:
        """True iff the work has settled (awaiting returns or raises at once)."""
        return self._future.done()

    def __await__(self) -> Generator[Any, None, None]:
        self._refuse()
        return self._future.__await__()


def persist(work: Callable[[], Coroutine[Any, Any, None]], name: str) -> asyncio.Future[None]:
    """Run ``work()`` in a task named ``name``, again whenever the task is cancelled; the
    returned future settles with the first run that is not cancelled."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[None] = loop.create_future()

    def start() -> None:
        loop.create_task(work(), name=name).add_done_callback(ended)

    def ended(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            start()
        elif (error := task.exception()) is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(None)

    start()
    return outcome


def reported_elsewhere(future: asyncio.Future[None]) -> asyncio.Future[None]:
    """Mark ``future``'s exception retrieved once it settles, and return it.

    For a future whose failure is reported another way (logged once, or told by each
    activation's settlement): a caller awaiting it still gets the exception, but when nobody
    does, asyncio has nothing to log as "never retrieved".
    """
    future.add_done_callback(_retrieve)
    return future


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def raise_if_cancelling() -> None:
    """Raise ``CancelledError`` iff the current task has a pending cancellation request.

    Tells a seam that *raises* ``CancelledError`` (a fault, contained like any exception) from
    the driver's own task being cancelled from outside, which must halt the driver even when
    a seam swallowed the cancellation or turned it into another exception.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling() > 0:
        raise asyncio.CancelledError
