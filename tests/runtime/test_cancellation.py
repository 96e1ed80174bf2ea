"""Turn cancellation as a user sees it (seed 000, DESIGN.md decisions 1-6).

Each test drives a real agent through the runtime and asserts what a user can observe:
notifications on ``rt.events``, ``agent.phase`` and ``agent.status``, the durable session,
the signals the seams received, and exceptions; where the protocol itself names a variable
(the wake latch, the holder), also the table state ``agent.table_state`` reads, which a port
must reproduce. Nothing sleeps: a test waits on a gate's ``reached`` event, on ``when_idle()``,
on a signal, or on the table event it needs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import pytest

from fsm_core import Rejected, UsageError
from fsm_core._errors import echo
from fsm_core.runtime import (
    DISPOSED,
    PARENT,
    USER,
    AbortSignal,
    Agent,
    AgentCancelCause,
    AgentHandle,
    ParentCause,
    Reply,
    Runtime,
    UserCause,
    UserMessage,
)
from fsm_core.table import Effect
from fsm_core.testing import Gate, ScriptedModel, Wait
from tests.helpers import NOTIFICATIONS, core_of

PROJECT = Path(__file__).resolve().parents[2]

# A watchdog, not a clock: a protocol bug here shows up as a hang, so fail fast instead.
pytestmark = pytest.mark.timeout(30)


def m(n: int) -> UserMessage:
    return UserMessage(f"m{n}", f"message {n}")


class Seen:
    """Every notification the runtime's bus published, in order, as ``(name, payload)``."""

    def __init__(self, rt: Runtime) -> None:
        self.log: list[tuple[str, Any]] = []
        for name in NOTIFICATIONS:
            rt.events.on(name, lambda payload, name=name: self.log.append((name, payload)))

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    def of(self, name: str) -> list[Any]:
        return [payload for seen, payload in self.log if seen == name]

    def statuses(self) -> list[str]:
        return [p.status for p in self.of("agent/status")]

    def causes(self) -> list[AgentCancelCause]:
        return [p.cause for p in self.of("agent/cancel-requested")]

    def discarded(self) -> list[str]:
        return [p.message.id for p in self.of("inbox/discarded")]

    def claimed(self) -> list[list[str]]:
        """The message ids each turn claimed, turn by turn."""
        return [[msg.id for msg in p.messages] for p in self.of("inbox/claimed")]

    def outcomes(self) -> list[Mapping[str, str]]:
        return [p.outcome for p in self.of("turn/end")]


class TableEvents:
    """The table events an agent fires, in the order they return, and a way to wait for one.

    Some moments publish nothing (disposal beginning on a turn a cancel already aborted), so a
    test waits for the table event itself instead of sleeping.
    """

    def __init__(self, agent: Agent) -> None:
        self.fired: list[str] = []
        self._events: dict[str, asyncio.Event] = {}
        control = core_of(agent).control
        fire = control.fire

        def spy(event: str, context: object = None, /, **kwargs: Any) -> list[Effect]:
            effects = fire(event, context, **kwargs)
            self.fired.append(event)
            self._event(event).set()
            return effects

        control.fire = spy  # type: ignore[method-assign]

    def _event(self, name: str) -> asyncio.Event:
        return self._events.setdefault(name, asyncio.Event())

    async def wait_for(self, name: str) -> None:
        await self._event(name).wait()


@dataclass
class Scene:
    """A runtime with one agent ``a1``, its handle, and what its bus published."""

    rt: Runtime
    handle: AgentHandle
    model: ScriptedModel
    seen: Seen

    @property
    def agent(self) -> Agent:
        return self.handle.agent


async def scene(model: ScriptedModel) -> Scene:
    rt = Runtime(model=model)
    handle = await rt.create_agent("a1")
    return Scene(rt, handle, model, Seen(rt))


async def blocked_turn(
    gate: Gate, *, cooperate: bool = True, then: tuple[Reply, ...] = ()
) -> tuple[Scene, AbortSignal]:
    """An agent whose first turn (claiming m1) waits on ``gate`` inside its model call, and
    that turn's signal as the model received it."""
    s = await scene(ScriptedModel([Wait(gate, Reply("first"), cooperate=cooperate), *then]))
    s.agent.followup(m(1))
    await gate.reached.wait()
    _, signal = s.model.requests[-1]
    return s, signal


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


# --- the typed cause ----------------------------------------------------------------------------


def test_agent_cancel_cause_is_exactly_user_or_parent() -> None:
    assert get_args(AgentCancelCause) == (UserCause, ParentCause)
    assert (USER.kind, PARENT.kind, DISPOSED.kind) == ("user", "parent", "disposed")


def test_the_type_checker_rejects_any_other_cause(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """\
            from fsm_core.runtime import DISPOSED, PARENT, Agent


            def use(agent: Agent) -> None:
                agent.cancel()
                agent.cancel(PARENT, keep_inbox=True)
                agent.cancel({"kind": "user"})
                agent.cancel(DISPOSED)
            """
        )
    )
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", snippet.name],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(PROJECT)},
        capture_output=True,
        text=True,
        check=False,
    )
    wrong = 'Argument 1 to "cancel" of "Agent" has incompatible type "{}"; expected "{}"'
    union = "UserCause | ParentCause"
    assert checked.stdout.splitlines() == [
        f"snippet.py:7: error: {wrong.format('dict[str, str]', union)}  [arg-type]",
        f"snippet.py:8: error: {wrong.format('Disposed', union)}  [arg-type]",
        "Found 2 errors in 1 file (checked 1 source file)",
    ], checked.stdout + checked.stderr


@pytest.mark.parametrize(
    "cause",
    [SimpleNamespace(kind="user"), {"kind": "user"}, "user", DISPOSED, None],
    ids=["look-alike", "dict", "str", "disposed", "none"],
)
def test_what_is_not_a_cause_is_refused_before_anything_changes(cause: object) -> None:
    """A look-alike cause used to move the table to cancelling and then fail with an
    AssertionError: no notification, no abort, and the turn ran on to completed."""

    async def scenario() -> None:
        gate = Gate("model")
        s, signal = await blocked_turn(gate)
        shown = re.escape(echo(cause))
        with pytest.raises(
            UsageError, match=rf"^agent a1: cancel takes a cause, USER or PARENT, not {shown}$"
        ):
            s.agent.cancel(cause)  # type: ignore[arg-type]  # what is refused
        assert (s.agent.phase, signal.aborted, s.seen.causes()) == ("running", False, [])
        gate.open()
        await s.agent.when_idle()
        assert s.seen.outcomes() == [{"kind": "completed"}]
        await s.rt.aclose()

    run(scenario)


# --- the reason: frozen, detached, default, first wins ------------------------------------------


def test_signal_reason_is_a_frozen_detached_copy_of_the_cause() -> None:
    async def scenario() -> None:
        s, signal = await blocked_turn(Gate("model"))
        mine = UserCause()
        s.agent.cancel(mine)
        assert signal.reason == mine
        assert signal.reason is not mine
        assert s.seen.causes() == [mine]
        assert s.seen.causes()[0] is not mine

        object.__setattr__(mine, "kind", "parent")  # the caller changes its object afterwards
        assert signal.reason == UserCause()
        with pytest.raises(dataclasses.FrozenInstanceError):
            signal.reason.kind = "parent"  # type: ignore[misc, assignment]
        await s.agent.when_idle()
        assert s.seen.outcomes() == [{"kind": "aborted"}]
        await s.rt.aclose()

    run(scenario)


def test_cancel_defaults_to_the_user_cause() -> None:
    async def scenario() -> None:
        s, signal = await blocked_turn(Gate("model"))
        s.agent.cancel()
        assert signal.reason == USER
        assert signal.reason is not USER
        assert s.seen.causes() == [USER]
        await s.rt.aclose()

    run(scenario)


def test_repeated_cancel_is_first_wins_but_still_clears_new_work() -> None:
    async def scenario() -> None:
        s, signal = await blocked_turn(Gate("model"))
        s.agent.cancel(USER)
        s.agent.followup(m(2))  # queued after the abort
        s.agent.cancel(PARENT)

        assert signal.reason == USER
        assert s.seen.causes() == [USER, PARENT]
        assert s.seen.discarded() == ["m2"]
        await s.agent.when_idle()
        assert s.seen.claimed() == [["m1"]]
        assert s.seen.outcomes() == [{"kind": "aborted"}]
        assert s.seen.statuses() == ["running", "idle"]
        await s.rt.aclose()

    run(scenario)


# --- which cancels are effective, and in what order ---------------------------------------------


def test_idle_cancel_emits_nothing_and_arms_nothing() -> None:
    async def scenario() -> None:
        s = await scene(ScriptedModel([Reply("hello")]))
        s.agent.cancel()
        s.agent.cancel(PARENT)
        assert s.seen.log == []
        assert s.agent.phase == "idle"

        s.agent.followup(m(1))  # runs normally: the idle cancel armed nothing
        await s.agent.when_idle()
        assert s.seen.statuses() == ["running", "idle"]
        assert s.seen.outcomes() == [{"kind": "completed"}]
        _, signal = s.model.requests[0]
        assert not signal.aborted
        await s.rt.aclose()

    run(scenario)


def test_a_no_op_keep_inbox_cancel_emits_nothing() -> None:
    async def scenario() -> None:
        s = await scene(ScriptedModel())
        s.agent.inject(m(1))  # queued without a wake: nothing runs, nothing to abort
        s.seen.log.clear()

        s.agent.cancel(keep_inbox=True)
        assert s.seen.log == []
        assert s.agent.inbox.next_turn == (m(1),)
        await s.rt.aclose()

    run(scenario)


def test_effective_cancel_notifies_before_it_clears_and_aborts() -> None:
    async def scenario() -> None:
        s, signal = await blocked_turn(Gate("model"))
        s.agent.followup(m(2))  # queued behind the running turn
        order: list[tuple[object, ...]] = []
        s.rt.events.on(
            "agent/cancel-requested",
            lambda p: order.append(("cancel-requested", p.agent, p.cause)),
        )
        s.rt.events.on("inbox/discarded", lambda p: order.append(("discarded", p.message.id)))
        signal.add_listener(lambda s: order.append(("abort", s.reason)))

        s.agent.cancel(PARENT)
        assert order == [
            ("cancel-requested", s.agent, PARENT),
            ("discarded", "m2"),
            ("abort", PARENT),
        ]
        await s.rt.aclose()

    run(scenario)


def test_observers_that_raise_cannot_veto_the_stop(caplog: pytest.LogCaptureFixture) -> None:
    def boom(_: object) -> None:
        raise RuntimeError("observer failed")

    async def scenario() -> None:
        s, signal = await blocked_turn(Gate("model"))
        s.agent.followup(m(2))
        s.rt.events.on("agent/cancel-requested", boom)
        s.rt.events.on("inbox/discarded", boom)
        signal.add_listener(boom)

        with caplog.at_level(logging.ERROR, logger="fsm_core.runtime"):
            s.agent.cancel()
        assert signal.aborted
        assert s.seen.discarded() == ["m2"]
        await s.agent.when_idle()
        assert s.seen.outcomes() == [{"kind": "aborted"}]
        assert s.agent.phase == "idle"
        await s.rt.aclose()

    run(scenario)
    assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        ("a listener of agent/cancel-requested raised; the notification goes on", True),
        ("a listener of inbox/discarded raised; the notification goes on", True),
        ("an abort listener raised; the abort goes on", True),
    ]


def test_work_queued_by_a_cancel_requested_observer_is_discarded_by_that_cancel() -> None:
    async def scenario() -> None:
        s, _ = await blocked_turn(Gate("model"))
        s.rt.events.on("agent/cancel-requested", lambda p: p.agent.followup(m(2)))

        s.agent.cancel()
        assert s.seen.discarded() == ["m2"]
        assert s.agent.inbox.next_turn == ()
        await s.agent.when_idle()
        assert s.seen.claimed() == [["m1"]]
        assert s.seen.statuses() == ["running", "idle"]
        await s.rt.aclose()

    run(scenario)


def test_work_queued_by_an_abort_observer_runs_after_the_aborted_turn_converges() -> None:
    async def scenario() -> None:
        s, signal = await blocked_turn(Gate("model"), then=(Reply("second"),))
        signal.add_listener(lambda _: s.agent.followup(m(2)))

        s.agent.cancel()
        assert s.seen.discarded() == []
        await s.agent.when_idle()
        assert s.seen.claimed() == [["m1"], ["m2"]]
        assert s.seen.outcomes() == [{"kind": "aborted"}, {"kind": "completed"}]
        # DESIGN.md decision 2: the aborted turn reaches idle, then the latched wake runs.
        assert s.seen.statuses() == ["running", "idle", "running", "idle"]
        await s.rt.aclose()

    run(scenario)


def test_work_queued_by_a_discard_observer_of_a_turn_cancel_runs_after_it_converges() -> None:
    """Issue 23: an ``inbox/discarded`` observer runs inside the clear, after the
    cancel-requested observers: its followup is later work, latched like an abort
    observer's, not parked on an idle agent forever."""

    async def scenario() -> None:
        s, _ = await blocked_turn(Gate("model"), then=(Reply("second"),))
        s.agent.followup(m(2))  # queued behind the blocked turn: the clear discards it
        resent: list[str] = []

        def resend(discarded: Any) -> None:
            if not resent:
                resent.append(discarded.message.id)
                discarded.agent.followup(m(3))

        s.rt.events.on("inbox/discarded", resend)
        s.agent.cancel()
        assert s.seen.discarded() == ["m2"]
        assert s.agent.table_state["latch"]
        await s.agent.when_idle()
        assert s.seen.claimed() == [["m1"], ["m3"]]
        assert s.seen.outcomes() == [{"kind": "aborted"}, {"kind": "completed"}]
        assert s.agent.inbox.next_turn == ()
        await s.rt.aclose()

    run(scenario)


def test_an_inbox_claimed_observer_that_cancels_aborts_the_turn_it_claimed() -> None:
    async def scenario() -> None:
        s = await scene(ScriptedModel())

        def cancel_the_claim(claimed: Any) -> None:
            claimed.agent.followup(m(2))
            claimed.agent.cancel()

        s.rt.events.on("inbox/claimed", cancel_the_claim)
        s.agent.followup(m(1))
        await s.agent.when_idle()

        # The holder spans the claim, so the claimed turn ends aborted; its durable record
        # stays whole: turn/start, the claim's messages, then what the cancel did.
        assert [e.type for e in s.agent.session.events] == [
            "turn/start",
            "inbox/claimed",
            "user/message",
            "inbox/discarded",
            "turn/end",
        ]
        assert s.seen.discarded() == ["m2"]
        assert s.seen.outcomes() == [{"kind": "aborted"}]
        assert s.model.requests == []
        await s.rt.aclose()

    run(scenario)


def test_a_turn_start_observer_that_cancels_discards_the_still_pending_prompt() -> None:
    """Issue 11 item 5 (specs/README.md): the turn claims after turn/start, so a cancel from
    a turn/start observer discards the prompt the turn had not claimed yet."""

    async def scenario() -> None:
        s = await scene(ScriptedModel())
        seen_queued: list[list[str]] = []

        def cancel_at_turn_start(started: Any) -> None:
            seen_queued.append([msg.id for msg in started.agent.inbox.next_turn])
            started.agent.cancel()

        s.rt.events.on("turn/start", cancel_at_turn_start)
        s.agent.followup(m(1))
        await s.agent.when_idle()

        assert seen_queued == [["m1"]], "turn/start observers see the prompt still queued"
        assert [e.type for e in s.agent.session.events] == [
            "turn/start",
            "inbox/discarded",
            "turn/end",
        ]
        assert s.seen.claimed() == []
        assert s.seen.discarded() == ["m1"]
        assert s.seen.outcomes() == [{"kind": "aborted"}]
        assert s.seen.statuses() == ["running", "idle"]
        assert s.model.requests == []
        await s.rt.aclose()

    run(scenario)


# --- the pre-run window and replacements --------------------------------------------------------


def test_pre_run_cancel_opens_no_turn_and_publishes_no_status() -> None:
    async def scenario() -> None:
        s = await scene(ScriptedModel())
        # One loop iteration: the sends only schedule the driver, so no turn is claimed yet.
        s.agent.followup(m(1))
        s.agent.steer(m(2))
        s.agent.cancel()
        assert s.agent.table_state["scheduled"]  # so when_idle() registers a waiter

        await s.agent.when_idle()
        assert s.seen.names() == [
            "inbox/inserted",
            "inbox/inserted",
            "agent/cancel-requested",
            "inbox/discarded",
            "inbox/discarded",
        ]
        assert s.model.requests == []
        assert [e.type for e in s.agent.session.events] == ["inbox/discarded"]
        assert (s.agent.phase, s.agent.status) == ("idle", "idle")
        assert not s.agent.table_state["scheduled"]
        await s.rt.aclose()

    run(scenario)


def test_a_followup_after_a_pre_run_cancel_runs() -> None:
    async def scenario() -> None:
        s = await scene(ScriptedModel([Reply("hello")]))
        s.agent.followup(m(1))
        s.agent.cancel()
        s.agent.followup(m(2))  # still the same loop iteration

        await s.agent.when_idle()
        assert s.seen.discarded() == ["m1"]
        assert s.seen.claimed() == [["m2"]]
        assert s.seen.statuses() == ["running", "idle"]
        assert s.seen.outcomes() == [{"kind": "completed"}]
        await s.rt.aclose()

    run(scenario)


def test_work_queued_by_a_discard_observer_of_a_pre_run_cancel_runs() -> None:
    """Issue 23: the pre-run marker is set before the clear, so a followup sent from an
    ``inbox/discarded`` observer clears it again and runs, instead of leaving the agent idle
    with work pending and no driver (the 2-step ``no_parked_wake`` counterexample)."""

    async def scenario() -> None:
        s = await scene(ScriptedModel([Reply("hello")]))
        s.rt.events.on(
            "inbox/discarded",
            lambda p: p.agent.followup(m(2)) if p.message.id == "m1" else None,
        )
        s.agent.followup(m(1))
        s.agent.cancel()  # the same loop iteration: a pre-run cancel

        await s.agent.when_idle()
        assert s.seen.discarded() == ["m1"]
        assert s.seen.claimed() == [["m2"]]
        assert s.seen.outcomes() == [{"kind": "completed"}]
        assert (s.agent.phase, s.agent.table_state["pending"]) == ("idle", False)
        await s.rt.aclose()

    run(scenario)


def test_a_running_listener_that_cancels_and_sends_a_replacement_gets_a_fresh_signal() -> None:
    async def scenario() -> None:
        s = await scene(ScriptedModel([Reply("replacement done")]))
        aborted: list[AbortSignal] = []

        def replace(payload: Any) -> None:
            if payload.status == "running" and not aborted:
                # The aborted holder never reaches a seam: only the agent itself holds it.
                controller = core_of(s.agent)._controller
                assert controller is not None
                aborted.append(controller.signal)
                s.agent.cancel()
                s.agent.followup(m(2))

        s.rt.events.on("agent/status", replace)
        s.agent.followup(m(1))
        await s.agent.when_idle()

        assert aborted[0].reason == USER
        (turn,) = s.seen.of("turn/start")
        assert turn.signal is not aborted[0]
        assert not turn.signal.aborted
        assert s.model.requests[0][1] is turn.signal
        assert s.seen.discarded() == ["m1"]
        assert s.seen.claimed() == [["m2"]]
        # DESIGN.md decision 3: no idle between the aborted holder and the replacement.
        assert s.seen.statuses() == ["running", "idle"]
        assert s.seen.outcomes() == [{"kind": "completed"}]
        await s.rt.aclose()

    run(scenario)


# --- keep_inbox parking and the wake latch ------------------------------------------------------


def test_keep_inbox_cancel_parks_queued_work_until_a_later_wake() -> None:
    async def scenario() -> None:
        s, _ = await blocked_turn(Gate("model"), then=(Reply("later"), Reply("last")))
        s.agent.followup(m(2))  # queued before the abort

        s.agent.cancel(keep_inbox=True)
        await s.agent.when_idle()
        assert s.agent.inbox.next_turn == (m(2),)
        assert s.seen.claimed() == [["m1"]]
        assert s.seen.statuses() == ["running", "idle"]
        assert not s.agent.table_state["scheduled"]

        s.agent.followup(m(3))  # the later wake
        await s.agent.when_idle()
        # One next-turn message a claim: the woken driver runs m2 and m3 as two turns.
        assert s.seen.claimed() == [["m1"], ["m2"], ["m3"]]
        completed = {"kind": "completed"}
        assert s.seen.outcomes() == [{"kind": "aborted"}, completed, completed]
        assert s.seen.statuses() == ["running", "idle", "running", "idle"]
        assert s.seen.discarded() == []
        await s.rt.aclose()

    run(scenario)


def test_a_wake_after_the_abort_is_latched_and_replayed() -> None:
    async def scenario() -> None:
        s, _ = await blocked_turn(Gate("model"), then=(Reply("replayed"),))
        s.agent.cancel(keep_inbox=True)
        s.agent.followup(m(2))  # after the abort
        assert s.agent.table_state["latch"]

        await s.agent.when_idle()
        assert s.seen.claimed() == [["m1"], ["m2"]]
        assert s.seen.outcomes() == [{"kind": "aborted"}, {"kind": "completed"}]
        assert s.seen.statuses() == ["running", "idle", "running", "idle"]
        await s.rt.aclose()

    run(scenario)


def test_removing_the_latched_message_suppresses_its_replay() -> None:
    async def scenario() -> None:
        s, _ = await blocked_turn(Gate("model"))
        s.agent.cancel()
        s.agent.followup(m(2))
        assert s.agent.inbox.remove("m2")
        assert not s.agent.table_state["latch"]

        await s.agent.when_idle()
        assert s.seen.discarded() == ["m2"]
        assert s.seen.claimed() == [["m1"]]
        assert s.seen.statuses() == ["running", "idle"]
        assert s.agent.inbox.next_turn == ()
        await s.rt.aclose()

    run(scenario)


def test_maintenance_latches_wakes_until_the_task_finishes() -> None:
    async def scenario() -> None:
        s = await scene(ScriptedModel([Reply("after maintenance")]))
        gate = Gate("maintenance")
        order: list[str] = []

        async def task(signal: AbortSignal) -> None:
            await gate.wait(signal)
            order.append("maintenance finished")

        s.rt.events.on("turn/start", lambda _: order.append("turn/start"))
        maintenance = asyncio.create_task(s.agent.run_maintenance(task))
        await gate.reached.wait()
        assert s.agent.phase == "maintenance"

        s.agent.followup(m(1))
        assert s.agent.table_state["latch"]
        gate.open()
        await maintenance
        await s.agent.when_idle()
        assert order == ["maintenance finished", "turn/start"]
        assert s.seen.claimed() == [["m1"]]
        assert s.seen.outcomes() == [{"kind": "completed"}]
        await s.rt.aclose()

    run(scenario)


def test_a_clearing_cancel_clears_the_latch() -> None:
    async def scenario() -> None:
        s, _ = await blocked_turn(Gate("model"))
        s.agent.cancel(keep_inbox=True)
        s.agent.followup(m(2))
        assert s.agent.table_state["latch"]

        s.agent.cancel()
        assert not s.agent.table_state["latch"]
        assert s.seen.discarded() == ["m2"]
        await s.agent.when_idle()
        assert s.seen.claimed() == [["m1"]]
        assert s.seen.statuses() == ["running", "idle"]
        await s.rt.aclose()

    run(scenario)


def test_disposal_never_latches_and_a_disposed_agent_rejects_sends() -> None:
    async def scenario() -> None:
        gate = Gate("model")
        s, _ = await blocked_turn(gate, cooperate=False)
        table = TableEvents(s.agent)
        disposal = asyncio.ensure_future(s.handle.dispose())
        await table.wait_for("dispose")

        s.agent.followup(m(2))  # accepted and parked, never latched
        assert not s.agent.table_state["latch"]
        gate.open()
        await disposal
        assert s.agent.phase == "disposed"
        assert s.agent.inbox.next_turn == (m(2),)
        assert s.seen.claimed() == [["m1"]]
        assert s.seen.outcomes() == [{"kind": "disposed"}]
        assert len(s.model.requests) == 1

        with pytest.raises(Rejected, match=r"^the agent is disposed; it accepts no more messages$"):
            s.agent.followup(m(3))
        await s.rt.aclose()

    run(scenario)


# --- cancel versus dispose, and quiescence ------------------------------------------------------


@pytest.mark.parametrize("first", ["cancel", "dispose"])
def test_cancel_and_dispose_in_either_order_wait_for_the_work_and_end_disposed(first: str) -> None:
    async def scenario() -> None:
        gate = Gate("model")
        s, signal = await blocked_turn(gate, cooperate=False)  # the model ignores its signal
        table = TableEvents(s.agent)
        if first == "cancel":
            s.agent.cancel()
        idle = asyncio.ensure_future(s.agent.when_idle())
        disposal = asyncio.ensure_future(s.handle.dispose())
        await table.wait_for("dispose")
        if first == "dispose":
            s.agent.cancel()

        # Whoever came first won the signal's reason; it is never rewritten.
        assert signal.reason == (USER if first == "cancel" else DISPOSED)
        assert (s.agent.phase, idle.done(), disposal.done()) == ("cancelling", False, False)
        gate.open()  # only now does the work settle
        await disposal
        assert idle.done()
        assert s.agent.phase == "disposed"
        # DESIGN.md decision 6: lifecycle first, so disposal wins in both orders.
        assert s.seen.outcomes() == [{"kind": "disposed"}]
        (end,) = (e for e in s.agent.session.events if e.type == "turn/end")
        assert end.data["outcome"] == {"kind": "disposed"}
        await s.rt.aclose()

    run(scenario)


def test_handle_dispose_is_memoized() -> None:
    async def scenario() -> None:
        gate = Gate("model")
        s, _ = await blocked_turn(gate, cooperate=False)
        table = TableEvents(s.agent)
        first = asyncio.ensure_future(s.handle.dispose())
        second = asyncio.ensure_future(s.handle.dispose())
        await table.wait_for("dispose")
        gate.open()
        await asyncio.gather(first, second)
        await s.handle.dispose()  # after the teardown: returns at once

        assert table.fired.count("dispose") == 1
        assert table.fired.count("dispose_finish") == 1
        assert s.agent.phase == "disposed"
        assert s.rt.agents == {}
        await s.rt.aclose()

    run(scenario)


def test_aclose_waits_for_work_that_ignores_the_signal() -> None:
    async def scenario() -> None:
        gate = Gate("model")
        s, signal = await blocked_turn(gate, cooperate=False)
        table = TableEvents(s.agent)
        closing = asyncio.ensure_future(s.rt.aclose())
        await table.wait_for("dispose")
        assert signal.reason == DISPOSED
        assert not closing.done()
        assert s.seen.outcomes() == []

        gate.open()
        await closing
        assert s.seen.outcomes() == [{"kind": "disposed"}]
        assert [e.type for e in s.agent.session.events][-2:] == ["step/end", "turn/end"]
        assert s.agent.phase == "disposed"

    run(scenario)


# --- the table decides ---------------------------------------------------------------------------


def test_an_illegal_event_raises_instead_of_being_applied() -> None:
    async def scenario() -> None:
        s = await scene(ScriptedModel())
        before = core_of(s.agent).control.snapshot()
        with pytest.raises(Rejected, match=r"^no driver owns the agent$"):
            core_of(s.agent).control.fire("claim")
        assert core_of(s.agent).control.snapshot() == before
        assert s.seen.log == []
        await s.rt.aclose()

    run(scenario)
