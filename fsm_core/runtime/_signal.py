"""A small, typed AbortController/AbortSignal pair for cooperative cancellation.

The holder owns the controller; every seam of a turn receives the same :class:`AbortSignal`
explicitly. A signal is aborted once, first wins, and keeps a detached frozen reason::

    controller = AbortController()
    signal = controller.signal
    controller.abort(USER)          # listeners run synchronously, inside this call
    signal.aborted, signal.reason   # (True, UserCause(kind='user'))
    controller.abort(PARENT)        # no effect: the first reason won

``aborted`` does *not* mean the work has stopped: cancellation is cooperative, and work that
ignores the signal runs to its end; the runtime waits for it rather than abandoning it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import final

from fsm_core.runtime._causes import Interruption, detach

__all__ = ["AbortController", "AbortSignal", "Aborted"]

log = logging.getLogger("fsm_core.runtime")

AbortListener = Callable[["AbortSignal"], object]


@final
class Aborted(Exception):
    """Raised by cooperating work when its signal is aborted; carries the signal's reason."""

    def __init__(self, reason: Interruption) -> None:
        super().__init__(reason.kind)
        self.reason = reason


@final
class AbortSignal:
    """The read side: whether the turn was aborted, why, and a way to wait for it."""

    __slots__ = ("_event", "_listeners", "_reason")

    def __init__(self) -> None:
        self._reason: Interruption | None = None
        self._listeners: list[AbortListener] = []
        self._event: asyncio.Event | None = None

    @property
    def aborted(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> Interruption | None:
        """The detached frozen reason, or None while the signal is live."""
        return self._reason

    def add_listener(self, listener: Callable[[AbortSignal], object]) -> Callable[[], None]:
        """Call ``listener(signal)`` synchronously when the signal aborts; returns a disposer.

        A listener added after the abort is not called. Exceptions a listener raises are
        logged and contained: they cannot stop the abort or the other listeners.
        """
        self._listeners.append(listener)

        def dispose() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return dispose

    def raise_if_aborted(self) -> None:
        if self._reason is not None:
            raise Aborted(self._reason)

    async def wait(self) -> Interruption:
        """Return the reason once the signal aborts (at once if it already has)."""
        if self._reason is None:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        assert self._reason is not None
        return self._reason

    def _abort(self, reason: Interruption) -> bool:
        if self._reason is not None:
            return False
        self._reason = detach(reason)
        if self._event is not None:
            self._event.set()
        escaped: BaseException | None = None
        for listener in list(self._listeners):
            try:
                listener(self)
            except (Exception, asyncio.CancelledError):
                log.exception("an abort listener raised; the abort goes on")
            except BaseException as error:  # every listener still runs; then it propagates
                escaped = escaped or error
        self._listeners.clear()
        if escaped is not None:
            raise escaped
        return True

    def __repr__(self) -> str:
        state = f"aborted reason={self._reason.kind}" if self._reason else "live"
        return f"<AbortSignal {state}>"


@final
class AbortController:
    """The write side, owned by exactly one holder."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Interruption) -> bool:
        """Abort with a detached copy of ``reason``; False if the signal was already aborted."""
        return self.signal._abort(reason)
