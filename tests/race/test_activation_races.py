"""Seed 004's named races that the activation race machine does not already fix as a test in
tests/runtime/test_subagents.py (a three-level tree torn down by four racing callers with a
failing grandchild; delivery losing the race with final disposal; a watcher that finds its agent
busy again are there): a drain racing a running spawn, and a natural end whose teardown fails."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import subprocess
import sys
from collections.abc import Awaitable
from pathlib import Path

import pytest

from fsm_core.runtime import (
    ActivationTeardownFailed,
    Agent,
    CancelRequested,
    Reply,
    Runtime,
    UserMessage,
)
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import HeldSession, Models, Settlements, run, turn_outcomes
from tests.runtime.test_subagents_spawn import calls, runtime, tool_results

pytestmark = pytest.mark.timeout(30)


def test_drain_during_a_spawn_leaves_it_to_its_parents_turn_and_refuses_the_next() -> None:
    """Seed 004: drain() reaches every root *activation*. A spawned child is not one: it belongs
    to its parent's tool call, which its parent's signal cancels (with PARENT). So a drain lets
    it run to its end, returns without waiting for it, and refuses the next spawn."""

    async def main() -> None:
        rt, models, delegate, _probe = await runtime()
        parent = (await rt.create_agent("parent")).agent
        gate = Gate("s1's request")
        models.script(
            "parent",
            calls(("delegate", {"id": "s1", "prompt": "one"})),
            calls(("delegate", {"id": "s2", "prompt": "two"})),
            Reply("done"),
        )
        models.script("s1", Wait(gate, Reply("s1's answer")))
        parent.followup(UserMessage("m1", "go"))
        await gate.reached.wait()
        await rt.subagents.drain()  # returns with s1 still inside its request
        spawned = rt.agents.get("s1")
        assert spawned is not None and spawned.phase != "disposed"
        assert not models.signals["s1"][0].aborted
        gate.open()
        await parent.when_idle()
        assert tool_results(parent) == [(True, "s1's answer"), (False, "failed")]
        assert [e.code for e in delegate.errors] == ["DRAINING"]
        assert turn_outcomes(parent) == ["completed"]
        await rt.aclose()

    asyncio.run(main())


def natural_failing_end() -> list[str]:
    """A child ends its work naturally with a session that fails its flushes; what the loop's
    exception handler got once everything was collected."""
    unretrieved: list[str] = []

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _l, c: unretrieved.append(c["message"])
        )
        settled = Settlements(rt)
        session = HeldSession()
        await rt.subagents.start(host, "c", "work", session=session.session)
        session.fail()  # the turn's own flushes fail too; then the handle's
        await settled.of("c")
        await host.when_idle()
        assert settled.log == [("c", True)]
        notices = [e.data["text"] for e in host.session.events if e.type == "user/message"]
        assert notices == ["subagent c failed"]

    logging.getLogger("fsm_core").disabled = True  # the turn's failure is expected
    run(test)
    gc.collect()
    return unretrieved


def test_a_natural_end_whose_teardown_fails_reports_it_and_leaves_no_unretrieved_error() -> None:
    """The watcher's own disposal has no caller to raise to: the failure is the settlement's
    ``failed`` and the parent's notice, and asyncio finds no future whose error nobody read.

    It runs in a fresh interpreter: pytest keeps references (reports, captured records) that
    would keep the failed future from ever being collected, and so from being reported.
    """
    code = "from tests.race.test_activation_races import natural_failing_end as f; print(f())"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_parents_teardown_names_only_the_failures_of_the_subtree_it_tore_down() -> None:
    """drain_descendants([p]) tears c down while p stays active and reports c's failure; p's
    own teardown later fails too, and its error must name p alone: c was not part of it."""

    named: list[set[str]] = []

    async def failing(teardown: Awaitable[None]) -> None:
        try:
            await teardown
        except ActivationTeardownFailed as error:
            named.append({f.activation for f in error.failures})
        else:
            named.append(set())

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        parent = await rt.subagents.start(host, "p", "work", session=HeldSession().fail().session)
        await rt.subagents.start(parent.agent, "c", "work", session=HeldSession().fail().session)
        await failing(rt.subagents.drain_descendants([parent.agent]))
        await failing(rt.subagents.dispose(parent))

    logging.getLogger("fsm_core").disabled = True  # the failing turns are expected
    try:
        with contextlib.suppress(BaseExceptionGroup):  # the runtime's close reports p's too
            run(test)
    finally:
        logging.getLogger("fsm_core").disabled = False
    assert named == [{"c"}, {"p"}]


class Boom(BaseException):
    """What a listener may raise that is no Exception: a host's own control-flow exception."""


def natural_end_with_a_listener_raising() -> list[str]:
    """A child ends its work naturally, and a listener of its teardown's cancel raises a
    BaseException inside the settlement watcher; what the loop's exception handler got and
    what the runtime logged, once everything was collected."""
    seen: list[str] = []

    class Records(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _l, c: seen.append(c["message"]))
        settled = Settlements(rt)
        raised: list[str] = []

        def cancelled(event: CancelRequested) -> None:
            if event.agent.id == "c" and not raised:
                raised.append("c")
                raise Boom("the host stops")

        rt.events.on("agent/cancel-requested", cancelled)
        await rt.subagents.start(host, "c", "work")
        await settled.of("c")
        assert raised == ["c"] and settled.log == [("c", False)]
        assert rt.subagents.resident == ()

    logging.getLogger("fsm_core").addHandler(Records())
    run(test)
    gc.collect()
    return seen


def test_a_base_exception_in_the_settlement_watcher_is_reported_not_left_unretrieved() -> None:
    """The watcher has no caller: a listener's BaseException raised inside it is logged, the
    activation it began tearing down still settles, and asyncio finds no task whose error
    nobody read. A fresh interpreter, as for the natural end's failure above."""
    code = (
        "from tests.race.test_activation_races import natural_end_with_a_listener_raising as f;"
        " print(f())"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "['the settlement watcher of c failed']", (
        done.stdout + done.stderr
    )
