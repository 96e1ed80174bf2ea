"""Faults at every seam: whatever escapes, the table converges and nothing wedges.

Each seam of a turn (the model, a tool, every waterfall, every notification) raises, once, an
``Exception``, an ``asyncio.CancelledError`` or a ``BaseException`` that is not an
``Exception``. Afterwards ``when_idle()`` and ``Runtime.aclose()`` return, the durable log is
balanced (every turn, step and tool call that opened also closed), the state the runtime shows
agrees with the table's, and a later cancel still works.

A wedge would hang a test forever, so every wait runs under :func:`bounded`: a deadline that
turns a hang into a failure. Nothing waits on time for work to happen.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from fsm_core import USER, Agent, AgentHandle, Runtime, UserMessage
from fsm_core.runtime import AbortSignal, Reply, Request, Session, ToolCall
from fsm_core.testing import Gate, ScriptedModel, Wait
from tests.helpers import core_of

T = TypeVar("T")


class Boom(BaseException):
    """Like ``KeyboardInterrupt``: a ``BaseException`` that is not an ``Exception``."""


FAULTS: dict[str, Callable[[], BaseException]] = {
    "exception": lambda: RuntimeError("injected"),
    "cancelled": asyncio.CancelledError,
    "base": Boom,
}

WATERFALLS = (
    "agent/pre-step",
    "agent/assemble",
    "agent/request",
    "agent/request-error",
    "agent/tool-approval",
    "agent/turn-stopping",
    "session/flush",
)
NOTIFICATIONS = (
    "agent/status",
    "inbox/inserted",
    "inbox/claimed",
    "turn/start",
    "step/start",
    "step/end",
    "turn/end",
    "agent/cancel-requested",
    "inbox/discarded",
    "user/message",
    "assistant/message",
)
"""Every notification the scenario below reaches (``turn/error`` and disposal: see
``test_notifications.py``)."""
SEAMS = ("model", "tool", *WATERFALLS, *NOTIFICATIONS)


async def bounded(work: Awaitable[T]) -> T:
    """Await ``work``; a wedge fails the test instead of hanging it."""
    async with asyncio.timeout(10):
        return await work


async def blocked_in_model() -> tuple[Runtime, AgentHandle, Gate, AbortSignal]:
    """Agent a1 inside its first model call, at a gate that ignores the turn's signal: the
    runtime, the agent's handle, the gate and the turn's signal."""
    gate = Gate("model")
    model = ScriptedModel([Wait(gate, Reply("late"), cooperate=False)])
    rt = Runtime(model=model)
    handle = await rt.create_agent("a1")
    handle.agent.followup(UserMessage("m1", "hi"))
    await bounded(gate.reached.wait())
    return rt, handle, gate, model.requests[0][1]


async def cancel_the_driver_in_the_model(
    model: Any, gate: Gate
) -> tuple[Runtime, Agent, asyncio.Task[Any]]:
    """Turn 1 of agent a1 waits at ``gate`` inside ``model`` while m2 is queued; then its
    driver task is cancelled from outside (a supervisor) and the agent settles."""
    rt = Runtime(model=model)
    agent = (await rt.create_agent("a1")).agent
    agent.followup(UserMessage("m1", "one"))
    await bounded(gate.reached.wait())
    agent.followup(UserMessage("m2", "two"))
    (driver,) = [t for t in asyncio.all_tasks() if t.get_name() == "driver a1"]
    driver.cancel()
    await bounded(agent.when_idle())
    return rt, agent, driver


class Injector:
    """Raises the fault the first time its seam is reached, and counts that it did."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.raised = 0

    def strike(self) -> None:
        if self.raised == 0:
            self.raised += 1
            raise FAULTS[self.fault]()


class Model:
    """Turn 1: a transient failure, then a tool call, then an answer. A request holding the
    text "second" waits on ``gate`` (cooperating with the signal) instead."""

    def __init__(self, gate: Gate, injector: Injector | None) -> None:
        self.gate = gate
        self.injector = injector
        self.failed_once = False

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        if self.injector is not None:
            self.injector.strike()
        if any(m.get("text") == "second" for m in request.messages):
            await self.gate.wait(signal)
            return Reply("late")
        if not self.failed_once:
            self.failed_once = True
            raise RuntimeError("transient")
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply("done")
        return Reply(tool_calls=(ToolCall("c1", "echo", {"x": 1}),), finish="tool_calls")


class Echo:
    name = "echo"

    def __init__(self, injector: Injector | None) -> None:
        self.injector = injector

    async def execute(self, args: Any, signal: AbortSignal) -> Any:
        if self.injector is not None:
            self.injector.strike()
        return dict(args)


def assert_balanced(session: Session) -> None:
    """Every turn, step and tool call that opened in the log also closed, in order."""
    opened: Counter[tuple[str, object]] = Counter()
    for event in session.events:
        kind, _, edge = event.type.partition("/")
        if event.type in ("turn/start", "step/start"):
            opened[(kind, _key(event.data))] += 1
        elif event.type in ("turn/end", "step/end"):
            assert opened[(kind, _key(event.data))] == 1, f"{event} closes nothing"
            opened[(kind, _key(event.data))] -= 1
        elif event.type == "tool/call":
            opened[("tool", event.data["id"])] += 1
        elif event.type == "tool/result":
            assert opened[("tool", event.data["id"])] == 1, f"{event} answers no call"
            opened[("tool", event.data["id"])] -= 1
        del edge
    assert +opened == Counter(), f"left open: {dict(+opened)}"


def _key(data: Any) -> object:
    return (data["turn"], data.get("step"))


def assert_agrees(agent: Agent) -> None:
    """What users see is the table's state: phase, published status, queued work."""
    values = agent.table_state
    control = core_of(agent).control
    assert control.spec.holds("quiescent", control.snapshot())
    assert agent.status == "idle"
    assert values["holder"] == "none" and not values["turn"]
    assert agent.inbox.pending == values["pending"]


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("seam", SEAMS)
def test_a_fault_at_any_seam_leaves_a_converged_agent(seam: str, fault: str) -> None:
    async def main() -> None:
        injector = Injector(fault)
        gate = Gate("second turn")
        rt = Runtime(
            model=Model(gate, injector if seam == "model" else None),
            tools=[Echo(injector if seam == "tool" else None)],
        )
        agent = (await rt.create_agent("a1")).agent
        escaped: list[BaseException] = []

        def user(call: Callable[[], None]) -> None:
            """A user's call: a listener's Boom reaches its caller once the row completed."""
            try:
                call()
            except Boom as error:
                escaped.append(error)

        async def retry(_payload: Any, _next: Any) -> str:
            return "retry"

        if seam in WATERFALLS:

            async def faulty(payload: Any, next_: Callable[[Any], Awaitable[Any]]) -> Any:
                injector.strike()
                return await next_(payload)

            rt.events.on(seam, faulty)
        elif seam in NOTIFICATIONS:
            rt.events.on(seam, lambda _payload: injector.strike())
        rt.events.on("agent/request-error", retry)

        user(lambda: agent.followup(UserMessage("m1", "first")))
        await bounded(agent.when_idle())
        assert_agrees(agent)

        user(lambda: agent.followup(UserMessage("m2", "second")))
        await bounded(gate.reached.wait())
        user(lambda: agent.followup(UserMessage("m3", "third")))
        user(lambda: agent.cancel(USER))
        await bounded(agent.when_idle())
        assert_agrees(agent)
        assert injector.raised == 1, f"the {seam} seam was never reached"
        assert_balanced(agent.session)
        ends = [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"]
        assert ends[-1] == {"kind": "aborted"}, "the cancel of the second turn still took"

        await bounded(rt.aclose())
        assert agent.phase == "disposed"
        assert_balanced(agent.session)

    asyncio.run(main())


def test_a_keyboard_interrupt_from_the_model_retires_the_turn_on_its_way_out() -> None:
    """KeyboardInterrupt leaves the event loop at once; the table converged before it did."""
    seen: dict[str, Agent] = {}

    class Interrupting:
        async def generate(self, request: Request, signal: AbortSignal) -> Reply:
            raise KeyboardInterrupt

    async def main() -> None:
        rt = Runtime(model=Interrupting())
        agent = seen["agent"] = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    agent = seen["agent"]
    assert agent.phase == "idle"
    assert_agrees(agent)
    assert_balanced(agent.session)
    assert [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"] == [
        {"kind": "error", "step": 1, "code": "halted"}
    ]


def test_a_driver_cancelled_from_outside_halts_and_parks_the_queued_work(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A supervisor cancelling every task: the open turn ends as an error, the driver halts,
    the work it had not claimed stays queued, and the next wake runs it."""

    async def main() -> None:
        gate = Gate("model")
        answers = iter([gate, None])

        class Blocking:
            async def generate(self, request: Request, signal: AbortSignal) -> Reply:
                step = next(answers)
                if step is not None:
                    await step.wait(signal, cooperate=False)
                return Reply("ok")

        rt, agent, driver = await cancel_the_driver_in_the_model(Blocking(), gate)
        assert_agrees(agent)
        assert driver.cancelled()
        assert [m.id for m in agent.inbox.next_turn] == ["m2"]
        outcomes = [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"]
        assert outcomes == [{"kind": "error", "step": 1, "code": "halted"}]

        agent.followup(UserMessage("m3", "three"))
        await bounded(agent.when_idle())
        claimed = [e.data["ids"] for e in agent.session.events if e.type == "inbox/claimed"]
        # One next-turn message a claim: the next wake's driver runs m2, then m3, as turns.
        assert claimed == [("m1",), ("m2",), ("m3",)]
        await bounded(rt.aclose())

    with caplog.at_level(logging.ERROR, "fsm_core.runtime"):
        asyncio.run(main())


def test_a_shutdown_cancelling_every_task_before_the_driver_ran_still_converges() -> None:
    """A driver task cancelled before its first step never runs: the table's halt drops its
    schedule, so when_idle() and aclose() return; the queued work stays parked."""

    async def main() -> None:
        rt = Runtime(model=Model(Gate("unused"), None))
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await bounded(agent.when_idle())
        assert_agrees(agent)
        assert [m.id for m in agent.inbox.next_turn] == ["m1"]
        assert len(agent.session.events) == 0  # no turn opened
        await bounded(rt.aclose())
        assert agent.phase == "disposed"

    asyncio.run(main())


@pytest.mark.parametrize("victim", ["dispose a1", "aclose"])
def test_cancelling_the_teardown_task_itself_does_not_stop_the_teardown(victim: str) -> None:
    async def main() -> None:
        rt, handle, gate, signal = await blocked_in_model()
        agent = handle.agent
        waiting = asyncio.ensure_future(handle.dispose() if victim != "aclose" else rt.aclose())
        await bounded(signal.wait())  # the teardown began: it aborted the turn
        (teardown,) = [t for t in asyncio.all_tasks() if t.get_name() == victim]
        teardown.cancel()
        gate.open()
        await bounded(waiting)
        assert agent.phase == "disposed"
        await bounded(handle.dispose())
        await bounded(rt.aclose())
        assert_balanced(agent.session)

    asyncio.run(main())


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_an_abort_listener_that_raises_cannot_stop_the_other_abort_listeners(fault: str) -> None:
    async def main() -> None:
        gate = Gate("second turn")
        rt = Runtime(model=Model(gate, None))
        agent = (await rt.create_agent("a1")).agent
        injector = Injector(fault)

        async def pre_step(payload: Any, next_: Callable[[Any], Awaitable[Any]]) -> Any:
            payload.signal.add_listener(lambda _signal: injector.strike())
            return await next_(payload)

        rt.events.on("agent/pre-step", pre_step)
        agent.followup(UserMessage("m1", "second"))
        await bounded(gate.reached.wait())
        try:
            agent.cancel(USER)  # the gate's own abort listener must still run
        except Boom:
            assert fault == "base"
        await bounded(agent.when_idle())
        assert injector.raised == 1
        assert_agrees(agent)
        outcomes = [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"]
        assert outcomes == [{"kind": "aborted"}]
        await bounded(rt.aclose())

    asyncio.run(main())


def test_a_seam_that_turns_an_outside_cancel_into_another_error_still_halts_the_driver() -> None:
    async def main() -> None:
        gate = Gate("model")

        class Wrapping:
            async def generate(self, request: Request, signal: AbortSignal) -> Reply:
                try:
                    await gate.wait(signal, cooperate=False)
                except asyncio.CancelledError as error:
                    raise RuntimeError("the SDK wraps every failure") from error
                return Reply("ok")

        rt, agent, _driver = await cancel_the_driver_in_the_model(Wrapping(), gate)
        assert [m.id for m in agent.inbox.next_turn] == ["m2"], "m2 parked, not run"
        outcomes = [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"]
        assert outcomes == [{"kind": "error", "step": 1, "code": "halted"}]
        await bounded(rt.aclose())

    asyncio.run(main())
