"""The runtime's event bus: synchronous, contained notifications and awaited waterfalls.

A *notification* (``emit``) calls every listener synchronously, inside the call that emits it,
so a listener that calls ``agent.cancel()`` or ``agent.send()`` re-enters the agent exactly
where the table says it may. A listener that raises is logged and contained: it cannot veto
what is being announced, nor stop the listeners after it. That includes
``asyncio.CancelledError``: a synchronous listener cannot be the target of a task's
cancellation, so one it raises is a fault of the listener like any other. A ``BaseException``
that is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``, ...) is not swallowed:
the remaining listeners still run, then the first such exception is raised from ``emit``.

A *waterfall* (``waterfall``) is awaited: each listener receives ``(payload, next)`` and may
await ``next(payload)`` to continue the chain, which ends in the runtime's own step. Listeners
run in registration order. Payloads are objects; agent-scoped payloads carry ``agent`` and,
for turn seams, the turn's ``signal``.

    off = rt.events.on("agent/status", lambda e: print(e.agent.id, e.status))
    off()   # the disposer removes the listener
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple, final

__all__ = ["EventBus"]

log = logging.getLogger("fsm_core.runtime")

P = TypeVar("P")
Fields = TypeVarTuple("Fields")
R = TypeVar("R")
Listener = Callable[..., object]
"""``(payload)`` for a notification, ``async (payload, next)`` for a waterfall."""
Next = Callable[[P], Awaitable[R]]


@final
class EventBus:
    """Listeners by event name. ``on`` returns a disposer."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Listener]] = {}

    def on(self, name: str, listener: Callable[..., object]) -> Callable[[], None]:
        """Call ``listener`` at each ``name``: ``listener(payload)`` for a notification,
        ``await listener(payload, next)`` for a waterfall. Returns a disposer."""
        self._listeners.setdefault(name, []).append(listener)

        def dispose() -> None:
            listeners = self._listeners.get(name, [])
            if listener in listeners:
                listeners.remove(listener)

        return dispose

    def heard(self, name: str) -> bool:
        """True iff a listener of ``name`` is registered now."""
        return bool(self._listeners.get(name))

    def notify(self, name: str, make: Callable[[*Fields], object], /, *args: *Fields) -> None:
        """``emit(name, make(*args))``, building the payload only if a listener hears it: the
        runtime announces every moment of every turn, most of them to nobody."""
        if self._listeners.get(name):
            self.emit(name, make(*args))

    def emit(self, name: str, payload: object) -> None:
        """Notify every listener of ``name`` now.

        Exceptions (``CancelledError`` included) are logged, never raised. Every listener runs
        even when one raises a ``BaseException`` such as ``KeyboardInterrupt``; the first of
        those is raised once the last listener has returned.
        """
        listeners = self._listeners.get(name)
        if not listeners:
            return
        escaped: BaseException | None = None
        for listener in list(listeners):
            try:
                listener(payload)
            except (Exception, asyncio.CancelledError):
                log.exception("a listener of %s raised; the notification goes on", name)
            except BaseException as error:
                escaped = escaped or error
        if escaped is not None:
            raise escaped

    async def waterfall(self, name: str, payload: P, last: Callable[[P], Awaitable[R]]) -> R:
        """Run the listeners of ``name`` as a chain ending in ``last``; return its result.

        Each listener is ``async (payload, next)``: it may inspect or replace the payload,
        await ``next(payload)`` and return (or transform) the result. A listener that returns
        without calling ``next`` ends the chain with its own result.
        """
        chain = self._listeners.get(name)
        if not chain:
            return await last(payload)
        chain = list(chain)

        async def call(index: int, value: P) -> R:
            if index == len(chain):
                return await last(value)
            result = chain[index](value, lambda v: call(index + 1, v))
            assert isinstance(result, Awaitable), f"a {name} listener must be async"
            out: R = await result
            return out

        return await call(0, payload)
