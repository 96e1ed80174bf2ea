"""The registry's door (specs/admission.toml) as a user of ``rt.subagents`` sees it: what
outlives an activation (cold-resume memory, a root's notice), how drain_descendants drains
below each parent it names, and a spawn asked for under an already aborted turn.

Each test drives real agents and asserts what a user can observe: errors, ``dormant``, the
registry's ``resident``, the agents' logs, notices and model requests, and the log records.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from fsm_core import FsmError, UsageError
from fsm_core.runtime import (
    Aborted,
    AbortSignal,
    Agent,
    CancelRequested,
    MessageInserted,
    Reply,
    Runtime,
    SubagentError,
    SubagentSpec,
    ToolCall,
    UserMessage,
)
from fsm_core.testing import Gate, Wait
from tests.runtime.subagent_support import HeldSession, Models, Settlements, run, turn_outcomes

pytestmark = pytest.mark.timeout(30)


def at_once(call: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends to its end, inside a synchronous listener."""
    try:
        call.send(None)
    except StopIteration as done:
        return done.value
    finally:
        call.close()
    raise AssertionError("the call suspended")


def notices_to(rt: Runtime, into: list[str]) -> None:
    """Record the id of every settlement notice inserted into any inbox."""

    def seen(event: MessageInserted) -> None:
        if ":settled:" in event.message.id:
            into.append(f"{event.agent.id} <- {event.message.id}")

    rt.events.on("inbox/inserted", seen)


# --- what outlives an activation ------------------------------------------------------------------


def test_a_child_settling_while_its_host_parent_disposes_is_not_remembered() -> None:
    """release.forget: once its host parent is disposing, nobody could resume the child, so a
    followup to it is a UsageError (not an admission refused below a disposing parent), and
    nothing is kept; its notice is parked in the disposing parent's inbox, not refused."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        parent_flush, child_flush = Gate("h's final flush"), Gate("c's flushes")
        h = await rt.create_agent("h", HeldSession().hold(parent_flush).session)
        c = await rt.subagents.start(
            h.agent, "c", "work", session=HeldSession().hold(child_flush).session
        )
        await child_flush.reached.wait()  # c's turn ended; its flush is held
        teardown = rt.subagents.dispose(c)
        disposal = h.dispose()
        try:
            assert h.agent.phase == "disposing"
            child_flush.open()
            await teardown
            assert c.stage == "settled" and h.agent.phase == "disposing"
            assert rt.subagents.dormant == ()
            with pytest.raises(UsageError, match=r"^no continuable subagent is named 'c'$"):
                await rt.subagents.followup("c", "more")
            assert rt.subagents.resident == () and rt.subagents.dormant == ()
            assert [m.id for m in h.agent.inbox.next_turn] == ["c:settled:1"]  # parked
        finally:
            parent_flush.open()
        await disposal
        assert turn_outcomes(h.agent) == []  # the notice woke no turn

    run(test)


@contextmanager
def logged() -> Iterator[list[logging.LogRecord]]:
    """Every record the runtime's logger emits inside the block, at any level (no fixture:
    the teardown mutants call these tests bare)."""
    logger, records = logging.getLogger("fsm_core.runtime"), list[logging.LogRecord]()

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_root_settling_after_its_host_parent_was_disposed_tells_nobody_quietly() -> None:
    """root_settled.gone: the disposed host parent is stale; no notice is sent, nothing is
    logged, the teardown succeeds and nothing is remembered."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        notices: list[str] = []
        notices_to(rt, notices)
        gate = Gate("c's flushes")
        h = await rt.create_agent("h")
        c = await rt.subagents.start(h.agent, "c", "work", session=HeldSession().hold(gate).session)
        await gate.reached.wait()
        teardown = rt.subagents.dispose(c)
        await h.dispose()
        with logged() as records:
            gate.open()
            await teardown
        assert c.stage == "settled" and c.failed is False
        assert notices == [] and rt.subagents.dormant == ()
        assert [r.getMessage() for r in records] == []

    run(test)


def test_a_notice_the_door_allowed_but_the_parent_refused_is_raised_after_settling() -> None:
    """Were the door and the agent table to disagree (here, a registry that misjudges a
    disposed host as live), the refused notice is no silent loss: every dispose caller gets an
    FsmError naming it, after the activation converged (it left every ledger)."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        gate = Gate("c's flushes")
        h = await rt.create_agent("h")
        c = await rt.subagents.start(h.agent, "c", "work", session=HeldSession().hold(gate).session)
        await gate.reached.wait()
        first, second = rt.subagents.dispose(c), rt.subagents.dispose(c)
        await h.dispose()
        rt.subagents._ledger.parent_kind = lambda parent: ("host", None)  # type: ignore[method-assign]
        gate.open()
        refused = (
            r"^activation c: a table allowed the wiring's call door\.notices_host, but 'h' "
            r"refused it: .*disposed"
        )
        for caller in (first, second):
            with pytest.raises(FsmError, match=refused):
                await caller
        assert c.stage == "settled" and c.failed is False
        assert rt.subagents.resident == () and rt.subagents.slots_held == 0
        assert rt.subagents.owner("c") is None

    run(test)


def test_a_refused_notice_at_a_natural_end_is_logged_as_a_bug() -> None:
    """The same disagreement at a natural end, whose teardown has no caller to raise to: the
    activation settles, and the bug is logged as an error, not dropped."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        settled = Settlements(rt)
        turn_end, gate = Gate("c's end-of-turn flush"), Gate("c's handle flush")
        h = await rt.create_agent("h")
        held = HeldSession().hold(turn_end)
        c = await rt.subagents.start(h.agent, "c", "work", session=held.session)
        await turn_end.reached.wait()  # c's only turn ended; its natural end follows the flush
        held.hold(gate)
        turn_end.open()
        await gate.reached.wait()  # the natural end's teardown disposes c's handle
        await h.dispose()  # its dispose of its root c joins the teardown running
        rt.subagents._ledger.parent_kind = lambda parent: ("host", None)  # type: ignore[method-assign]
        with logged() as records:
            gate.open()
            await settled.of("c")
            # The natural end's teardown, memoized: it has logged the bug by the time a later
            # caller of the same teardown resumes.
            with pytest.raises(FsmError):
                await rt.subagents.dispose(c)
        assert settled.log == [("c", False)] and rt.subagents.resident == ()
        errors = [(r.levelname, r.getMessage()) for r in records]
        assert errors == [("ERROR", "a natural end's teardown found a bug")]
        assert "a table allowed the wiring's call door.notices_host" in str(records[0].exc_info)

    run(test)


def test_an_admission_below_a_closing_activation_names_it() -> None:
    """admit.below: the parent activation's own row refuses while it tears down (someone's
    dispose, no drain: ACTIVATION_CLOSING), and the refusal names that activation."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        models.script("a", Wait(Gate("a"), Reply("late")))
        a = await rt.subagents.start(host, "a", "work")
        teardown = rt.subagents.dispose(a)
        with pytest.raises(SubagentError) as caught:
            await rt.subagents.start(a.agent, "b", "work")
        assert (caught.value.code, str(caught.value)) == (
            "ACTIVATION_CLOSING",
            "activation 'a' is closing and admits no children",
        )
        await teardown
        assert rt.subagents.resident == ()

    run(test)


# --- drain_descendants: every parent named, then each drained through the door -------------------


def test_drain_below_a_host_closes_admission_before_disposing_its_roots() -> None:
    """drain_below.host: close_below_host() then dispose_roots(): a listener on the first
    root's cancel already finds admission below that parent closed."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        for name in ("r1", "r2"):
            models.script(name, Wait(Gate(name), Reply("late")))
            await rt.subagents.start(host, name, "work")
        tried: list[str] = []

        def admit_during_the_drain(event: CancelRequested) -> None:
            if event.agent.id == "r1" and not tried:
                try:
                    at_once(rt.subagents.start(host, "late", "work"))
                except SubagentError as refused:
                    tried.append(f"{refused.code}: {refused}")
                else:
                    tried.append("admitted")

        rt.events.on("agent/cancel-requested", admit_during_the_drain)
        await rt.subagents.drain_descendants([host])
        assert tried == [
            "DRAINING: continuable subagents below parent 'host' are draining; "
            "the operation was not admitted"
        ]
        assert rt.subagents.resident == ()

    run(test)


def test_a_parent_disposed_by_a_listener_after_it_was_named_drains_nothing() -> None:
    """drain_below.not_live: drain_descendants names every parent first, then drains below
    each; a listener that disposes the second parent while the first one's roots are cancelled
    drains nothing below it (its own disposal tears its roots down, parent_disposing), and the
    call raises UNAUTHORIZED naming it, once the first drain has begun."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        gate = Gate("h2's final flush")
        h1 = await rt.create_agent("h1")
        h2 = await rt.create_agent("h2", HeldSession().hold(gate).session)
        for parent, name in ((h1, "r1"), (h2, "r2")):
            models.script(name, Wait(Gate(name), Reply("late")))
            await rt.subagents.start(parent.agent, name, "work")
        disposals: list[Any] = []

        def dispose_h2(event: CancelRequested) -> None:
            if event.agent.id == "r1" and not disposals:
                disposals.append(h2.dispose())

        rt.events.on("agent/cancel-requested", dispose_h2)
        try:
            with pytest.raises(
                SubagentError, match=r"^<Agent h2 phase=disposing .*> is not a live parent agent"
            ) as caught:
                rt.subagents.drain_descendants([h1.agent, h2.agent])
            assert caught.value.code == "UNAUTHORIZED"
            r1, r2 = rt.subagents.get("r1"), rt.subagents.get("r2")
            assert r1 is not None and r2 is not None
            assert (r1.stage, r2.stage) == ("joining", "joining")
        finally:
            gate.open()
        await disposals[0]
        await rt.subagents.dispose(r2)

    run(test)


def test_drain_below_a_new_agent_leaves_the_roots_of_a_disposed_agent_of_that_name() -> None:
    """drain_below.host awaits the roots the exact named agent owns: a root whose host parent's
    disposal began its teardown (here held at a flush) is no descendant of a later agent of
    the same name, and the drain below that one does not wait for it."""

    async def test(rt: Runtime, models: Models, host: Agent) -> None:
        gate = Gate("old's flushes")
        for name in ("old", "new"):
            models.script(name, Wait(Gate(name), Reply("late")))
        p = await rt.create_agent("p")
        old = await rt.subagents.start(
            p.agent, "old", "work", session=HeldSession().hold(gate).session
        )
        await p.dispose()
        await gate.reached.wait()
        assert old.stage not in ("active", "settled")
        p2 = await rt.create_agent("p")
        new = await rt.subagents.start(p2.agent, "new", "work")
        await rt.subagents.drain_descendants([p2.agent])
        assert new.stage == "settled" and old.stage not in ("active", "settled")
        assert rt.subagents.resident == ("old",)
        gate.open()
        await rt.subagents.dispose(old)

    run(test)


# --- spawn under an aborted turn ------------------------------------------------------------------


class LateDelegate:
    """A tool that waits at ``gate`` ignoring its signal, then spawns ``s1``."""

    name = "late"

    def __init__(self, gate: Gate) -> None:
        self.rt: Runtime | None = None
        self.gate = gate
        self.raised: list[BaseException] = []

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        assert self.rt is not None
        await self.gate.wait()
        try:
            return (await self.rt.subagents.spawn(signal, SubagentSpec("s1", "do it"))).text
        except BaseException as error:
            self.raised.append(error)
            raise


def test_a_spawn_under_an_already_aborted_turn_runs_no_turn_and_raises_aborted() -> None:
    """spawn.parent_aborted: run_child(false) parks the prompt unwoken: the child never asks
    the model, is disposed, and the tool raises the parent's abort."""

    async def main() -> None:
        models, gate = Models(), Gate("the tool")
        tool = LateDelegate(gate)
        rt = Runtime(models, [tool])
        tool.rt = rt
        disposed: list[str] = []
        rt.events.on("agent/disposed", lambda event: disposed.append(event.agent.id))
        parent = (await rt.create_agent("parent")).agent
        call = ToolCall("t0", "late", {})
        models.script("parent", Reply(tool_calls=(call,), finish="tool_calls"))
        parent.followup(UserMessage("m1", "go"))
        await gate.reached.wait()
        parent.cancel()
        gate.open()
        await parent.when_idle()
        assert [type(e) for e in tool.raised] == [Aborted]
        assert "s1" not in models.signals  # no model request: no turn began
        assert disposed == ["s1"] and "s1" not in rt.agents
        results = [
            (e.data["ok"], e.data["result"])
            for e in parent.session.events
            if e.type == "tool/result"
        ]
        assert results == [(False, "aborted")]
        await rt.aclose()

    asyncio.run(main())
