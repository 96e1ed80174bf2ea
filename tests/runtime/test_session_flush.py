"""A session writer that never returns: every flush waits ``flush_timeout`` at most (issue 22).

The writer here awaits an event nobody sets. Each flush that meets it reaches its deadline
(a tiny one, set on the session), and that is a failed flush like any other: a turn's is
logged and the agent goes on, an activation's final flush and its agent's disposal flush are
boundaries of its teardown that failed, and the teardown, ``drain()`` and ``aclose()`` return.
On a writer awaited unbounded each of these tests hangs; :func:`bounded` turns that into a
failure. Nothing waits on time: the tests await the teardown, which the deadline ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from fsm_core.runtime import (
    ActivationTeardownFailed,
    Agent,
    Reply,
    Runtime,
    Session,
    SessionError,
    TeardownFailure,
    UserMessage,
)
from fsm_core.testing import Gate, ScriptedModel, Wait
from tests.runtime.subagent_support import Models, run, turn_outcomes

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")

TINY = 0.01
"""The sessions' flush deadline here, in seconds: each stuck flush costs this much."""

TIMED_OUT = (
    "<session>: the writer did not return within 0.01 s; the flush cancelled the call and "
    "stopped waiting for it, so the log is not known to be stored"
)


async def bounded(work: Awaitable[T]) -> T:
    """Await ``work``; a wedge fails the test instead of hanging it."""
    async with asyncio.timeout(10):
        return await work


class Stuck:
    """A session whose writer, once :attr:`armed`, never returns: it awaits an event that
    nobody sets (and, like most async code, lets the flush's cancellation end it)."""

    def __init__(self, armed: bool = False) -> None:
        self.armed = armed
        self.calls = 0
        """How many calls met the stuck writer."""
        self.never = asyncio.Event()
        self.session = Session(writer=self._write, flush_timeout=TINY)

    async def _write(self, _log: str) -> None:
        if self.armed:
            self.calls += 1
            await self.never.wait()


def boundaries(failures: tuple[TeardownFailure, ...]) -> list[tuple[str, str, str]]:
    return [(f.activation, f.boundary, str(f.error)) for f in failures]


def test_a_writer_that_never_returns_fails_both_flush_boundaries_and_the_activation_settles(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Disposed mid-turn, the activation meets the stuck writer three times: the aborted
    turn's flush (logged; the agent goes idle), the final flush and its agent's disposal
    flush (each a boundary that failed). It settles failed, gone from the registry."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        stuck = Stuck()
        gate = Gate("c")
        models.script("c", Wait(gate, Reply("late")))
        act = await rt.subagents.start(host, "c", "work", session=stuck.session)
        await bounded(gate.reached.wait())
        stuck.armed = True
        with pytest.raises(ActivationTeardownFailed) as caught:
            await bounded(rt.subagents.dispose(act))
        assert boundaries(caught.value.failures) == [
            ("c", "final flush", TIMED_OUT),
            ("c", "handle dispose", TIMED_OUT),
        ]
        assert all(type(f.error) is SessionError for f in caught.value.failures)
        assert act.stage == "settled" and act.failed is True
        assert act.terminal is not None and act.terminal.outcome == {"kind": "aborted"}
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0
        assert stuck.calls == 3
        assert turn_outcomes(act.agent) == ["aborted"]
        failed = [
            r for r in caplog.records if r.getMessage() == "agent c: the flush after turn 1 failed"
        ]
        assert len(failed) == 1 and failed[0].exc_info is not None
        assert str(failed[0].exc_info[1]) == TIMED_OUT
        await bounded(rt.aclose())

    with caplog.at_level(logging.ERROR, logger="fsm_core.runtime"):
        run(test)


def test_a_drain_over_a_stuck_grandchild_returns_with_its_failures_and_aclose_returns() -> None:
    """A grandchild's stuck writer fails its own boundaries only: its parent's teardown
    joins it and goes on, the drain raises both of the grandchild's failures, and
    ``aclose()`` returns."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        stuck = Stuck()
        gates = Gate("c"), Gate("g")
        models.script("c", Wait(gates[0], Reply("late")))
        models.script("g", Wait(gates[1], Reply("late")))
        c = await rt.subagents.start(host, "c", "work")
        g = await rt.subagents.start(c.agent, "g", "work", session=stuck.session)
        await bounded(asyncio.gather(gates[0].reached.wait(), gates[1].reached.wait()))
        stuck.armed = True
        with pytest.raises(ActivationTeardownFailed) as caught:
            await bounded(rt.subagents.drain())
        assert caught.value.activation == "the drain"
        assert boundaries(caught.value.failures) == [
            ("g", "final flush", TIMED_OUT),
            ("g", "handle dispose", TIMED_OUT),
        ]
        assert (c.stage, c.failed, g.stage, g.failed) == ("settled", True, "settled", True)
        assert rt.subagents.resident == ()
        await bounded(rt.aclose())

    run(test)


def test_an_agent_whose_writer_never_returns_goes_idle_and_aclose_raises_its_disposal_flush(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A turn's flush that times out is logged and the agent goes idle, as after any failed
    flush; its disposal's flush times out too, and ``aclose()`` returns, raising it."""

    async def main() -> None:
        rt = Runtime(ScriptedModel([Reply("done")]))
        stuck = Stuck(armed=True)
        handle = await rt.create_agent("a1", stuck.session)
        handle.agent.followup(UserMessage("m1", "hi"))
        await bounded(handle.agent.when_idle())
        assert turn_outcomes(handle.agent) == ["completed"]
        with pytest.raises(BaseExceptionGroup) as caught:
            await bounded(rt.aclose())
        assert [type(e) for e in caught.value.exceptions] == [SessionError]
        assert str(caught.value.exceptions[0]) == TIMED_OUT
        assert handle.agent.phase == "disposed" and stuck.calls == 2
        with pytest.raises(SessionError, match=r"^<session>: the writer did not return "):
            await bounded(handle.dispose())  # every caller of the disposal sees it

    with caplog.at_level(logging.ERROR, logger="fsm_core.runtime"):
        asyncio.run(main())
    failed = [
        r for r in caplog.records if r.getMessage() == "agent a1: the flush after turn 1 failed"
    ]
    assert len(failed) == 1
