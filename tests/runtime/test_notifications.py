"""The process-local notifications of messages, turn errors and disposal (issue 11).

``user/message`` and ``assistant/message`` announce a record the durable log already holds;
``turn/error`` follows the ``turn/end`` of a failed turn and hands observers the exception the
log never holds; ``agent/disposing`` is published inside the call that begins disposal and
``agent/disposed`` once teardown completed. None of them is durable, and those published after
the turn's holder is gone carry no signal. A listener that raises, or re-enters the agent,
wedges nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fsm_core import DISPOSED, Rejected, Runtime, UserMessage
from fsm_core.runtime import (
    AssistantMessageRecorded,
    DisposalEnded,
    DisposalStarted,
    Reply,
    Session,
    SessionEvent,
    ToolCall,
    TurnFailed,
    UserMessageRecorded,
)
from fsm_core.testing import Fail, Gate, ScriptedModel, ScriptedTool, Wait

T = TypeVar("T")

# A watchdog, not a clock: a wedge shows up as a hang, so fail fast instead.
pytestmark = pytest.mark.timeout(30)


async def bounded(work: Awaitable[T]) -> T:
    async with asyncio.timeout(10):
        return await work


def record(event: SessionEvent) -> tuple[str, dict[str, Any]]:
    return event.type, event.to_json()["data"]


class Heard:
    """What listeners of ``names`` heard, in order, with the log's last record at that moment."""

    def __init__(self, rt: Runtime, names: tuple[str, ...]) -> None:
        self.heard: list[tuple[str, Any, tuple[str, dict[str, Any]] | None]] = []
        for name in names:
            rt.events.on(name, lambda payload, name=name: self._note(name, payload))

    def _note(self, name: str, payload: Any) -> None:
        events = payload.agent.session.events
        self.heard.append((name, payload, record(events[-1]) if events else None))

    def names(self) -> list[str]:
        return [name for name, _, _ in self.heard]

    def of(self, name: str) -> list[Any]:
        return [payload for heard, payload, _ in self.heard if heard == name]

    def last_records(self, name: str) -> list[tuple[str, dict[str, Any]] | None]:
        return [last for heard, _, last in self.heard if heard == name]


# --- user/message and assistant/message ------------------------------------------------------


def test_messages_are_announced_in_log_order_each_after_its_record() -> None:
    async def scenario() -> None:
        gate = Gate("tool")
        tool = ScriptedTool("echo", [Wait(gate, "echoed")])
        call = ToolCall("c1", "echo", {"x": 1})
        model = ScriptedModel([Reply("calling", (call,), "tool_calls"), Reply("done")])
        rt = Runtime(model=model, tools=[tool])
        agent = (await rt.create_agent("a1")).agent
        heard = Heard(
            rt,
            ("turn/start", "inbox/claimed", "user/message", "assistant/message", "step/end"),
        )
        agent.followup(UserMessage("m1", "first"))
        await bounded(gate.reached.wait())
        agent.steer(UserMessage("m2", "steering"))  # claimed at the next step boundary
        gate.open()
        await bounded(agent.when_idle())
        await rt.aclose()

        assert heard.names() == [
            "turn/start",
            "inbox/claimed",
            "user/message",  # m1, by the turn's claim, after inbox/claimed
            "assistant/message",  # step 1, before its tool call is recorded
            "step/end",
            "user/message",  # m2, by step 2's steering claim
            "assistant/message",
            "step/end",
        ]
        users: list[UserMessageRecorded] = heard.of("user/message")
        assert [(u.turn, u.message) for u in users] == [
            (1, UserMessage("m1", "first")),
            (1, UserMessage("m2", "steering")),
        ]
        assert heard.last_records("user/message") == [
            ("user/message", {"id": "m1", "text": "first"}),
            ("user/message", {"id": "m2", "text": "steering"}),
        ]
        answers: list[AssistantMessageRecorded] = heard.of("assistant/message")
        assert [(a.turn, a.step, a.reply) for a in answers] == [
            (1, 1, Reply("calling", (call,), "tool_calls")),
            (1, 2, Reply("done")),
        ]
        assert heard.last_records("assistant/message") == [
            ("assistant/message", {"turn": 1, "step": 1, "text": "calling"}),
            ("assistant/message", {"turn": 1, "step": 2, "text": "done"}),
        ]
        # Inside the turn, each carries the turn's one signal, as every seam of it does.
        (started,) = heard.of("turn/start")
        payloads: list[UserMessageRecorded | AssistantMessageRecorded] = [*users, *answers]
        assert all(p.signal is started.signal for p in payloads)
        assert all(p.agent is agent for p in payloads)

    asyncio.run(scenario())


def test_a_user_message_listener_that_cancels_stops_the_turn_before_its_request() -> None:
    async def scenario() -> None:
        model = ScriptedModel()  # any request would fail the turn: none is made
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        heard = Heard(rt, ("user/message", "agent/cancel-requested", "turn/end"))
        rt.events.on("user/message", lambda p: p.agent.cancel())
        agent.followup(UserMessage("m1", "hi"))
        await bounded(agent.when_idle())
        await rt.aclose()

        assert heard.names() == ["user/message", "agent/cancel-requested", "turn/end"]
        assert model.requests == []
        types = [e.type for e in agent.session.events]
        assert types == ["turn/start", "inbox/claimed", "user/message", "turn/end"]
        assert agent.session.events[-1].data["outcome"] == {"kind": "aborted"}

    asyncio.run(scenario())


def test_an_assistant_message_listener_that_cancels_answers_the_calls_unrun() -> None:
    async def scenario() -> None:
        tool = ScriptedTool("echo")  # any call would fail: none runs
        call = ToolCall("c1", "echo", {})
        rt = Runtime(model=ScriptedModel([Reply("", (call,), "tool_calls")]), tools=[tool])
        agent = (await rt.create_agent("a1")).agent
        rt.events.on("assistant/message", lambda p: p.agent.cancel())
        agent.followup(UserMessage("m1", "hi"))
        await bounded(agent.when_idle())
        await rt.aclose()

        assert tool.calls == []
        tail = [record(e) for e in agent.session.events][-5:]
        assert tail == [
            ("assistant/message", {"turn": 1, "step": 1, "text": ""}),
            ("tool/call", {"turn": 1, "step": 1, "id": "c1", "name": "echo", "args": {}}),
            ("tool/result", {"turn": 1, "step": 1, "id": "c1", "ok": False, "result": "aborted"}),
            ("step/end", {"turn": 1, "step": 1}),
            ("turn/end", {"turn": 1, "outcome": {"kind": "aborted"}}),
        ]

    asyncio.run(scenario())


# --- turn/error -----------------------------------------------------------------------------


def test_a_failed_turn_is_announced_after_its_turn_end_with_the_exception() -> None:
    down = RuntimeError("the model is down: secret-token-123")

    async def scenario() -> None:
        gate = Gate("third")
        model = ScriptedModel([Fail(down), Reply("fine"), Wait(gate, Reply("never"))])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        heard = Heard(rt, ("turn/end", "turn/error"))
        agent.followup(UserMessage("m1", "one"))
        await bounded(agent.when_idle())
        agent.followup(UserMessage("m2", "two"))  # completes
        await bounded(agent.when_idle())
        agent.followup(UserMessage("m3", "three"))  # aborted
        await bounded(gate.reached.wait())
        agent.cancel()
        await bounded(agent.when_idle())
        await rt.aclose()

        assert heard.names() == ["turn/end", "turn/error", "turn/end", "turn/end"]
        (failed,) = heard.of("turn/error")
        assert isinstance(failed, TurnFailed)
        assert (failed.agent, failed.turn, failed.step, failed.code) == (
            agent,
            1,
            1,
            "model-failed",
        )
        assert failed.error is down
        assert heard.last_records("turn/error") == [
            (
                "turn/end",
                {"turn": 1, "outcome": {"kind": "error", "step": 1, "code": "model-failed"}},
            )
        ]
        # Published after the holder is gone: no signal; and the exception is never durable.
        assert "signal" not in {f.name for f in dataclasses.fields(TurnFailed)}
        assert "secret-token-123" not in agent.session.to_jsonl()

    asyncio.run(scenario())


def test_a_halted_turn_is_announced_with_the_escape_that_halted_it() -> None:
    async def scenario() -> None:
        gate = Gate("model")
        rt = Runtime(model=ScriptedModel([Wait(gate, Reply("never"), cooperate=False)]))
        agent = (await rt.create_agent("a1")).agent
        heard = Heard(rt, ("turn/error",))
        agent.followup(UserMessage("m1", "one"))
        await bounded(gate.reached.wait())
        (driver,) = [t for t in asyncio.all_tasks() if t.get_name() == "driver a1"]
        driver.cancel()  # a supervisor cancels the driver's task from outside
        await bounded(agent.when_idle())
        await rt.aclose()

        (failed,) = heard.of("turn/error")
        assert (failed.turn, failed.step, failed.code) == (1, 1, "halted")
        assert isinstance(failed.error, asyncio.CancelledError)

    asyncio.run(scenario())


# --- agent/disposing and agent/disposed ------------------------------------------------------


def test_disposal_is_announced_inside_the_call_that_begins_it_and_once_it_ends(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a1.jsonl"
    at_start: list[tuple[str, object, list[str]]] = []
    at_end: list[tuple[str, Session, BaseException | None]] = []

    async def scenario() -> None:
        gate = Gate("model")
        model = ScriptedModel([Wait(gate, Reply("never"))])
        rt = Runtime(model=model)
        handle = await rt.create_agent("a1", Session(path))
        agent = handle.agent
        heard = Heard(rt, ("agent/disposing", "turn/end", "agent/disposed"))

        def disposing(payload: DisposalStarted) -> None:
            types: list[str] = [e.type for e in payload.agent.session.events]
            signal = model.requests[0][1]  # the turn's
            at_start.append((str(payload.agent.phase), signal.reason, types))

        def disposed(payload: DisposalEnded) -> None:
            refused: BaseException | None = None
            try:
                payload.agent.followup(UserMessage("late", "too late"))
            except Rejected as error:
                refused = error
            at_end.append((payload.agent.phase, Session.load(path), refused))

        rt.events.on("agent/disposing", disposing)
        rt.events.on("agent/disposed", disposed)
        agent.followup(UserMessage("m1", "hi"))
        await bounded(gate.reached.wait())

        pending = handle.dispose()
        assert heard.names() == ["agent/disposing"]  # inside the call, before any await
        assert handle.dispose() is not None and heard.names() == ["agent/disposing"]
        await bounded(pending)
        await bounded(rt.aclose())
        assert heard.names() == ["agent/disposing", "turn/end", "agent/disposed"]
        assert [type(p) for p in heard.of("agent/disposing") + heard.of("agent/disposed")] == [
            DisposalStarted,
            DisposalEnded,
        ]
        assert all(
            "signal" not in {f.name for f in dataclasses.fields(kind)}
            for kind in (DisposalStarted, DisposalEnded)
        )

        ((phase, reason, types),) = at_start
        assert phase == "cancelling"  # the live turn is already interrupted
        assert reason == DISPOSED
        assert types[-1] == "step/start"  # the turn's turn/end comes once its driver retires
        ((phase, on_disk, refused),) = at_end
        assert phase == "disposed"
        assert on_disk.events == agent.session.events  # after the final flush
        assert on_disk.events[-1].data["outcome"] == {"kind": "disposed"}
        assert refused is not None

    asyncio.run(scenario())


# --- listeners that raise or re-enter wedge nothing ------------------------------------------


class Boom(BaseException):
    """Like ``KeyboardInterrupt``: a ``BaseException`` that is not an ``Exception``."""


def raising(kind: type[BaseException]) -> Callable[[Any], None]:
    def listener(_payload: Any) -> None:
        raise kind("from a listener")

    return listener


def reentering(payload: Any) -> None:
    payload.agent.cancel()
    payload.agent.when_idle()  # registered in-line, never awaited


LISTENERS: dict[str, Callable[[Any], None]] = {
    "exception": raising(RuntimeError),
    "cancelled": raising(asyncio.CancelledError),
    "base": raising(Boom),
    "re-entering": reentering,
}


@pytest.mark.parametrize("listener", sorted(LISTENERS))
@pytest.mark.parametrize("name", ["turn/error", "agent/disposing", "agent/disposed"])
def test_a_listener_that_raises_or_reenters_wedges_nothing(name: str, listener: str) -> None:
    async def scenario() -> None:
        model = ScriptedModel([Fail(RuntimeError("down")), Reply("after")])
        rt = Runtime(model=model)
        handle = await rt.create_agent("a1")
        agent = handle.agent
        rt.events.on(name, LISTENERS[listener])
        escaped: list[BaseException] = []

        def call(work: Callable[[], T]) -> T | None:
            try:
                return work()
            except Boom as error:  # held to the row's end, then raised to the caller
                escaped.append(error)
                return None

        call(lambda: agent.followup(UserMessage("m1", "fails")))
        await bounded(agent.when_idle())
        call(lambda: agent.followup(UserMessage("m2", "works")))
        await bounded(agent.when_idle())
        outcomes = [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"]
        assert outcomes == [
            {"kind": "error", "step": 1, "code": "model-failed"},
            {"kind": "completed"},
        ]

        call(handle.dispose)
        try:
            await bounded(handle.dispose())  # memoized: the teardown that began above
        except Boom as error:
            escaped.append(error)
        assert agent.phase == "disposed"
        try:
            await bounded(rt.aclose())
        except BaseExceptionGroup as group:  # a disposal that raised is raised here again
            assert listener == "base" and name == "agent/disposed", group
        # A listener's BaseException reaches whoever fired the event once its row completed:
        # the user's dispose() for the disposal notifications, the driver (which halts, and
        # the agent goes on, as above) for turn/error.
        assert bool(escaped) == (listener == "base" and name != "turn/error"), escaped

    asyncio.run(scenario())
