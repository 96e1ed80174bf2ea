"""Holes found by review of the subagent registry: each test failed before its fix."""

from __future__ import annotations

import pytest

from fsm_core.runtime import AbortSignal, Agent, Reply, Runtime
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import Models, Settlements, run

pytestmark = pytest.mark.timeout(30)


class Interrupt(BaseException):
    """A listener's BaseException (as KeyboardInterrupt would be)."""


def test_a_listener_interrupt_during_dispose_still_cancels_and_settles_every_child() -> None:
    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        gates = {n: Gate(n) for n in ("p", "c1", "c2")}
        for name, gate in gates.items():
            models.script(name, Wait(gate, Reply("late")))
        p = await rt.subagents.start(host, "p", "work")
        await gates["p"].reached.wait()
        kids = []
        for name in ("c1", "c2"):
            kids.append(await rt.subagents.start(p.agent, name, "work"))
            await gates[name].reached.wait()
        fired = []

        def interrupt(_signal: AbortSignal) -> None:
            fired.append(True)
            raise Interrupt

        # p's model call hears the abort first, and its listener raises.
        models.signals["p"][-1].add_listener(interrupt)
        with pytest.raises(Interrupt):
            rt.subagents.dispose(p)
        assert fired  # the listener did interrupt the dispose
        # The interrupt is raised once the whole subtree was cancelled, not half-way.
        assert [k.stage for k in kids] == ["joining", "joining"]
        await settled.of("p")
        assert settled.log == [("c1", False), ("c2", False), ("p", False)]
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0

    run(test)
