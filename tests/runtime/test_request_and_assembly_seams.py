"""Request configuration (``agent/request``) and assembly outside a turn (seed 000).

The seed: "request configuration ... [receives] the current signal", and ``AssembleContext``
carries ``signal?`` "because that object is an explicit request value that can also represent
signal-less assembly outside a turn". Each test drives a real agent and asserts what a user
sees: what the model was asked with and which signal, the durable log, the notifications and
the table state; nothing sleeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from fsm_core import UsageError
from fsm_core.runtime import (
    USER,
    AbortSignal,
    AssembleContext,
    Reply,
    RequestConfig,
    RequestError,
    Runtime,
    ToolCall,
    UserMessage,
)
from fsm_core.testing import Fail, Gate, ScriptedModel, ScriptedTool
from tests.helpers import NOTIFICATIONS
from tests.runtime.test_turns import (
    ABORTED,
    COMPLETED,
    assert_durable_log_clean,
    assert_log_invariants,
    outcomes,
    records,
    run,
)

pytestmark = pytest.mark.timeout(30)

NextRequest = Callable[[RequestConfig], Awaitable[RequestConfig]]
NextAssembly = Callable[[AssembleContext], Awaitable[AssembleContext]]
ASKS_FOR_TOOL = Reply(tool_calls=(ToolCall("c1", "lookup", {"q": "x"}),), finish="tool_calls")
SYSTEM = {"role": "system", "text": "be brief"}


# --- agent/request: request configuration inside a turn ------------------------------------------


def test_the_request_seam_receives_the_signal_turn_and_step_of_the_model_call() -> None:
    async def scenario() -> None:
        model = ScriptedModel([ASKS_FOR_TOOL, Reply("done")])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", ["found"])])
        agent = (await rt.create_agent("a1")).agent
        seen: list[RequestConfig] = []

        async def configure(payload: RequestConfig, next: NextRequest) -> RequestConfig:
            seen.append(payload)
            return await next(payload)

        rt.events.on("agent/request", configure)
        agent.followup(UserMessage("m1", "look it up"))
        await agent.when_idle()

        assert [(p.agent, p.turn, p.step) for p in seen] == [(agent, 1, 1), (agent, 1, 2)]
        # One per step, each the very request and signal the model call then received.
        assert [(p.request, p.signal) for p in seen] == model.requests
        assert seen[0].signal is seen[1].signal and not seen[0].signal.aborted
        assert outcomes(agent.session) == {1: COMPLETED}
        await rt.aclose()

    run(scenario())


def test_a_request_a_listener_changes_is_what_the_model_receives() -> None:
    async def scenario() -> None:
        model = ScriptedModel([Reply("hello")])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup")])
        agent = (await rt.create_agent("a1")).agent
        built: list[Mapping[str, Any]] = []

        async def configure(payload: RequestConfig, next: NextRequest) -> RequestConfig:
            built.extend([SYSTEM, *payload.request.messages])
            request = dataclasses.replace(payload.request, messages=built, tools=())
            return await next(dataclasses.replace(payload, request=request))

        rt.events.on("agent/request", configure)
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        built.append({"role": "user", "text": "added after the request was sent"})

        ((request, _signal),) = model.requests
        assert request.tools == ()  # the runtime offered ("lookup",); the listener took it away
        assert [dict(m) for m in request.messages] == [
            SYSTEM,
            {"role": "user", "id": "m1", "text": "hi"},
        ]  # a copy: what the listener did to its list afterwards is not in the request
        # Configuration shapes the request, never the durable conversation.
        assert [r["type"] for r in records(agent.session) if r["type"].endswith("/message")] == [
            "user/message",
            "assistant/message",
        ]
        assert outcomes(agent.session) == {1: COMPLETED}
        await rt.aclose()

    run(scenario())


@pytest.mark.parametrize("cooperate", [True, False], ids=["cooperating", "ignoring-the-signal"])
def test_a_cancel_while_a_request_listener_blocks_aborts_the_turn_before_the_model_call(
    cooperate: bool,
) -> None:
    """A listener that ignores the signal still finishes (nothing is abandoned), and its
    ``next`` returns; the turn checks the signal after the waterfall and never asks the model."""

    async def scenario() -> None:
        gate = Gate("agent/request")
        model = ScriptedModel([Reply("never asked")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        signals: list[AbortSignal] = []

        async def configure(payload: RequestConfig, next: NextRequest) -> RequestConfig:
            signals.append(payload.signal)
            await gate.wait(payload.signal, cooperate=cooperate)
            return await next(payload)

        rt.events.on("agent/request", configure)
        agent.followup(UserMessage("m1", "hi"))
        await gate.reached.wait()
        agent.cancel()
        if not cooperate:
            gate.open()
        await agent.when_idle()

        assert model.requests == []
        (signal,) = signals
        assert signal.aborted and signal.reason == USER
        assert outcomes(agent.session) == {1: ABORTED}
        # The request belongs to its step: the step opened, and closed with no answer.
        kinds = [r["type"] for r in records(agent.session)]
        assert kinds[kinds.index("step/start") :] == ["step/start", "step/end", "turn/end"]
        assert_log_invariants(agent.session, ["m1"])
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_a_retry_after_request_error_resends_the_configured_request_without_configuring_again() -> (
    None
):
    async def scenario() -> None:
        model = ScriptedModel([Fail(RuntimeError("transient")), Reply("second time lucky")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        configured: list[RequestConfig] = []

        async def configure(payload: RequestConfig, next: NextRequest) -> RequestConfig:
            request = dataclasses.replace(payload.request, tools=("configured",))
            configured.append(payload)
            return await next(dataclasses.replace(payload, request=request))

        async def retry(payload: RequestError, next: Callable[..., Awaitable[str]]) -> str:
            return "retry"

        rt.events.on("agent/request", configure)
        rt.events.on("agent/request-error", retry)
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()

        assert len(configured) == 1
        (first, signal), (again, same) = model.requests
        assert again is first and first.tools == ("configured",)
        assert same is signal is configured[0].signal
        assert outcomes(agent.session) == {1: COMPLETED}
        await rt.aclose()

    run(scenario())


@pytest.mark.parametrize(
    "change",
    [{"step": 2}, {"turn": 7}, {"agent_id": "someone-else"}],
    ids=["step", "turn", "agent"],
)
def test_a_listener_that_readdresses_the_request_ends_the_turn_seam_failed(
    change: dict[str, Any],
) -> None:
    async def scenario() -> None:
        model = ScriptedModel([Reply("never asked")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent

        async def configure(payload: RequestConfig, next: NextRequest) -> RequestConfig:
            moved = dataclasses.replace(payload.request, **change)
            return await next(dataclasses.replace(payload, request=moved))

        rt.events.on("agent/request", configure)
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()

        assert model.requests == []
        assert outcomes(agent.session) == {1: {"kind": "error", "step": 1, "code": "seam-failed"}}
        await rt.aclose()

    run(scenario())


# --- assembly outside a turn: Agent.assemble() -------------------------------------------------


def test_assembly_outside_a_turn_gets_no_signal_and_the_history_the_next_turn_starts_from() -> None:
    async def scenario() -> None:
        model = ScriptedModel([ASKS_FOR_TOOL, Reply("found it"), Reply("again")])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", ["found"])])
        agent = (await rt.create_agent("a1")).agent
        seen: list[AbortSignal | None] = []

        async def assemble(payload: AssembleContext, next: NextAssembly) -> AssembleContext:
            seen.append(payload.signal)
            return await next(payload)

        rt.events.on("agent/assemble", assemble)
        agent.followup(UserMessage("m1", "look it up"))
        await agent.when_idle()
        turn_signal = model.requests[0][1]
        assert seen == [turn_signal, turn_signal]

        async def maintenance(signal: AbortSignal) -> Any:
            return await agent.assemble()

        outside = await agent.run_maintenance(maintenance)
        assert seen[2:] == [None]

        agent.followup(UserMessage("m2", "once more"))
        await agent.when_idle()
        next_request = model.requests[-1][0]
        # The next turn's first request: the same history, then the message it claimed.
        assert list(next_request.messages) == [
            *outside,
            {"role": "user", "id": "m2", "text": "once more"},
        ]
        assert [m["role"] for m in outside] == ["user", "assistant", "tool", "assistant"]
        await rt.aclose()

    run(scenario())


def test_one_assemble_listener_shapes_both_a_turns_prompt_and_assembly_outside_a_turn() -> None:
    async def scenario() -> None:
        model = ScriptedModel([Reply("one"), Reply("two")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent

        async def keep_last(payload: AssembleContext, next: NextAssembly) -> AssembleContext:
            if payload.signal is not None:
                payload.signal.raise_if_aborted()  # cooperates only when there is a signal
            return await next(dataclasses.replace(payload, messages=payload.messages[-1:]))

        rt.events.on("agent/assemble", keep_last)
        agent.followup(UserMessage("m1", "first"))
        await agent.when_idle()

        assert [dict(m) for m in await agent.assemble()] == [
            {"role": "assistant", "text": "one", "tool_calls": ()}
        ]
        agent.followup(UserMessage("m2", "second"))
        await agent.when_idle()
        assert [dict(m) for m in model.requests[-1][0].messages] == [
            {"role": "user", "id": "m2", "text": "second"}
        ]
        await rt.aclose()

    run(scenario())


@pytest.mark.parametrize("where", ["idle", "maintenance"])
def test_assembly_outside_a_turn_fires_no_table_event_and_records_nothing(where: str) -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel([Reply("hello")]))
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        published: list[str] = []
        for name in NOTIFICATIONS:
            rt.events.on(name, lambda _p, name=name: published.append(name))
        log_before = list(agent.session.events)

        async def look(signal: AbortSignal | None) -> tuple[Any, Any, Any, list[str]]:
            before, heard = dict(agent.table_state), len(published)
            messages = await agent.assemble()
            return before, messages, dict(agent.table_state), published[heard:]

        if where == "maintenance":
            before, messages, after, during = await agent.run_maintenance(look)
        else:
            before, messages, after, during = await look(None)
        assert before["phase"] == where
        assert after == before and during == []
        assert [m["role"] for m in messages] == ["user", "assistant"]
        assert agent.session.events == log_before
        await rt.aclose()

    run(scenario())


def test_a_listener_that_raises_outside_a_turn_raises_to_the_caller_and_leaves_the_agent_idle() -> (
    None
):
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel([Reply("later")]))
        agent = (await rt.create_agent("a1")).agent

        async def broken(payload: AssembleContext, next: NextAssembly) -> AssembleContext:
            if payload.signal is None:
                raise RuntimeError("no summary yet")
            return await next(payload)

        rt.events.on("agent/assemble", broken)
        with pytest.raises(RuntimeError, match=r"^no summary yet$"):
            await agent.assemble()
        assert agent.phase == "idle" and agent.status == "idle"
        assert agent.session.events == []
        agent.followup(UserMessage("m1", "hi"))  # a turn's assembly is unaffected
        await agent.when_idle()
        assert outcomes(agent.session) == {1: COMPLETED}
        await rt.aclose()

    run(scenario())


def test_a_listener_that_returns_no_payload_is_named_not_an_attribute_error() -> None:
    """Review of issue 23: a waterfall listener returning something else than the payload it
    was given (here the messages alone) is a UsageError naming what it returned: outside a
    turn it reaches the caller; inside one the turn ends seam-failed, before any request."""

    async def scenario() -> None:
        model = ScriptedModel([Reply("never asked")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent

        async def messages_only(payload: AssembleContext, next: NextAssembly) -> Any:
            return payload.messages

        rt.events.on("agent/assemble", messages_only)
        with pytest.raises(UsageError, match=r"returned Messages\(\[\]\), not an Assemble"):
            await agent.assemble()
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        assert model.requests == []  # assembly comes before the step opens: step 0
        assert outcomes(agent.session) == {1: {"kind": "error", "step": 0, "code": "seam-failed"}}
        await rt.aclose()

    run(scenario())


def test_a_request_listener_that_returns_the_request_alone_ends_the_turn_seam_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        model = ScriptedModel([Reply("never asked")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent

        async def request_only(payload: RequestConfig, next: NextRequest) -> Any:
            return payload.request

        rt.events.on("agent/request", request_only)
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        assert model.requests == []
        assert outcomes(agent.session) == {1: {"kind": "error", "step": 1, "code": "seam-failed"}}
        (error,) = [r.exc_info[1] for r in caplog.records if r.exc_info]
        assert isinstance(error, UsageError)  # not an AttributeError
        assert "listener returned Request(" in str(error)
        await rt.aclose()

    run(scenario())
