"""Teardown that outlives whoever cancels it.

``dispose()`` and ``aclose()`` run their work in a task so that every caller awaits the same
teardown. A shutdown that cancels every task (``asyncio.run`` ending, a supervisor) would
cancel that task too, possibly before its first step, and the agent would stay disposing for
good. :func:`persist` runs the work again whenever its task ends cancelled; the work is
written to be repeatable (it waits for settled work, then finishes once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["persist"]


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
