"""What a model request carries, and where prompt assembly sits in a step (issue 11, items 2
and 3).

An agent is a conversation: each request holds the history folded from the durable session
(``fsm_core/runtime/_history.py`` states the rule), so a second turn sees the first turn's
exchange and an agent resumed on a recorded log starts from it. ``agent/pre-step`` and prompt
assembly run before the step opens: a cancel or disposal while assembly blocks ends the turn
with no ``step/start``, no request and no empty step pair in the log.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fsm_core import AssembleContext, StepBoundary
from fsm_core.runtime import Hooks, Reply, Runtime, Session, ToolCall, UserMessage
from fsm_core.runtime._history import History
from fsm_core.testing import Gate, ScriptedModel, ScriptedTool, Wait
from tests.runtime.test_turns import (
    ABORTED,
    COMPLETED,
    DISPOSED_OUTCOME,
    assert_durable_log_clean,
    assert_log_invariants,
    outcomes,
    records,
    run,
)

pytestmark = pytest.mark.timeout(30)

Next = Callable[[AssembleContext], Awaitable[AssembleContext]]


def user(message_id: str, text: str) -> dict[str, Any]:
    return {"role": "user", "id": message_id, "text": text}


def said(text: str, *calls: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "text": text, "tool_calls": list(calls)}


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args}


def result(call_id: str, value: Any, ok: bool = True) -> dict[str, Any]:
    return {"role": "tool", "id": call_id, "ok": ok, "result": value}


def plain(messages: Any) -> list[Any]:
    """The messages as plain lists and dicts, to compare against literals."""

    def thaw(value: Any) -> Any:
        if isinstance(value, dict) or hasattr(value, "items"):
            return {k: thaw(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [thaw(v) for v in value]
        return value

    return [thaw(m) for m in messages]


def types(session: Session) -> list[str]:
    return [event.type for event in session.events]


# --- item 3: assembly before the step opens ------------------------------------------------------


@pytest.mark.parametrize("how", ["cancel", "dispose"])
def test_an_interruption_while_assembly_blocks_ends_the_turn_before_its_step_opens(
    how: str,
) -> None:
    async def scenario() -> None:
        gate = Gate("assemble")
        model = ScriptedModel([Reply("never asked")])
        rt = Runtime(model=model)
        handle = await rt.create_agent("a1")
        agent = handle.agent
        steps: list[StepBoundary] = []
        rt.events.on("step/start", steps.append)

        async def assemble(payload: AssembleContext, next: Next) -> AssembleContext:
            await gate.wait(payload.signal)  # cooperates: raises Aborted once it aborts
            return await next(payload)

        rt.events.on("agent/assemble", assemble)
        agent.followup(UserMessage("m1", "hi"))
        await gate.reached.wait()
        if how == "cancel":
            agent.cancel()
            await agent.when_idle()
        else:
            await handle.dispose()

        expected = ABORTED if how == "cancel" else DISPOSED_OUTCOME
        assert outcomes(agent.session) == {1: expected}
        assert model.requests == [] and steps == []
        assert "step/start" not in types(agent.session)
        assert "step/end" not in types(agent.session)
        assert_log_invariants(agent.session, ["m1"])
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_pre_step_and_assembly_run_before_step_start() -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel([Reply("hello")]))
        agent = (await rt.create_agent("a1")).agent
        order: list[str] = []

        async def pre_step(payload: Any, next: Callable[[Any], Awaitable[Any]]) -> Any:
            order.append("pre-step")
            return await next(payload)

        async def assemble(payload: AssembleContext, next: Next) -> AssembleContext:
            order.append("assemble")
            return await next(payload)

        rt.events.on("agent/pre-step", pre_step)
        rt.events.on("agent/assemble", assemble)
        rt.events.on("step/start", lambda _p: order.append("step/start"))
        rt.events.on("step/end", lambda _p: order.append("step/end"))
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()

        assert order == ["pre-step", "assemble", "step/start", "step/end"]
        await rt.aclose()

    run(scenario())


# --- item 2: the conversation --------------------------------------------------------------------


def test_the_second_turn_asks_with_the_first_turns_exchange() -> None:
    async def scenario() -> None:
        model = ScriptedModel([Reply("hello, Ada"), Reply("you said your name is Ada")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "I am Ada"))
        await agent.when_idle()
        agent.followup(UserMessage("m2", "who am I?"))
        await agent.when_idle()

        (first, _), (second, _) = model.requests
        assert plain(first.messages) == [user("m1", "I am Ada")]
        assert plain(second.messages) == [
            user("m1", "I am Ada"),
            said("hello, Ada"),
            user("m2", "who am I?"),
        ]
        assert outcomes(agent.session) == {1: COMPLETED, 2: COMPLETED}
        await rt.aclose()

    run(scenario())


def test_a_step_after_tool_calls_carries_the_calls_and_their_results() -> None:
    async def scenario() -> None:
        asks = Reply(
            "looking",
            (ToolCall("c1", "lookup", {"q": "a"}), ToolCall("c2", "lookup", {"q": "b"})),
            "tool_calls",
        )
        model = ScriptedModel([asks, Reply("found both")])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", ["A", "B"])])
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "find a and b"))
        await agent.when_idle()

        (_, _), (second, _) = model.requests
        assert plain(second.messages) == [
            user("m1", "find a and b"),
            said("looking", call("c1", "lookup", q="a"), call("c2", "lookup", q="b")),
            result("c1", "A"),
            result("c2", "B"),
        ]
        await rt.aclose()

    run(scenario())


def test_an_agent_resumed_on_a_recorded_session_starts_with_its_history() -> None:
    async def scenario() -> None:
        asks = Reply("", (ToolCall("c1", "lookup", {"q": "a"}),), "tool_calls")
        first_rt = Runtime(
            model=ScriptedModel([asks, Reply("it is A")]),
            tools=[ScriptedTool("lookup", ["A"])],
        )
        first = await first_rt.create_agent("a1")
        first.agent.followup(UserMessage("m1", "what is a?"))
        await first.agent.when_idle()
        await first_rt.aclose()
        recorded = first.agent.session.to_jsonl()

        model = ScriptedModel([Reply("still A")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1", Session.from_jsonl(recorded))).agent
        agent.followup(UserMessage("m2", "and again?"))
        await agent.when_idle()

        ((request, _),) = model.requests
        assert (request.turn, request.step) == (2, 1)
        assert plain(request.messages) == [
            user("m1", "what is a?"),
            said("", call("c1", "lookup", q="a")),
            result("c1", "A"),
            said("it is A"),
            user("m2", "and again?"),
        ]
        await rt.aclose()

    run(scenario())


def test_discarded_messages_never_appear_and_an_aborted_turn_stays_in_the_history() -> None:
    async def scenario() -> None:
        gate = Gate("model")
        model = ScriptedModel([Wait(gate, Reply("too late")), Reply("fresh start")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "first"))
        await gate.reached.wait()
        agent.followup(UserMessage("m2", "queued, then discarded"))
        agent.steer(UserMessage("s1", "steering, then discarded"))
        agent.cancel()
        await agent.when_idle()
        agent.followup(UserMessage("m3", "again"))
        await agent.when_idle()

        discarded = [r["data"] for r in records(agent.session) if r["type"] == "inbox/discarded"]
        assert discarded == [{"ids": ["s1", "m2"]}]
        (_, _), (second, _) = model.requests
        # The aborted turn recorded its claimed message and no answer: that stays.
        assert plain(second.messages) == [user("m1", "first"), user("m3", "again")]
        assert outcomes(agent.session) == {1: ABORTED, 2: COMPLETED}
        await rt.aclose()

    run(scenario())


def test_assembly_transforms_the_request_but_not_the_history() -> None:
    async def scenario() -> None:
        model = ScriptedModel([Reply("one"), Reply("two")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        system = {"role": "system", "text": "be brief"}
        seen: list[Any] = []

        async def assemble(payload: AssembleContext, next: Next) -> AssembleContext:
            seen.append(plain(payload.messages))
            messages = (system, *payload.messages)
            return await next(dataclasses.replace(payload, messages=messages))

        rt.events.on("agent/assemble", assemble)
        agent.followup(UserMessage("m1", "a"))
        await agent.when_idle()
        agent.followup(UserMessage("m2", "b"))
        await agent.when_idle()

        assert seen == [[user("m1", "a")], [user("m1", "a"), said("one"), user("m2", "b")]]
        assert plain(model.requests[1][0].messages) == [system, *seen[1]]
        await rt.aclose()

    run(scenario())


def test_history_messages_are_read_only_json_ready_dicts() -> None:
    session = Session()
    session.append("user/message", {"id": "m1", "text": "hi"})
    session.append("assistant/message", {"turn": 1, "step": 1, "text": ""})
    call_data = {"turn": 1, "step": 1, "id": "c1", "name": "t", "args": {"xs": [1, {"y": 2}]}}
    session.append("tool/call", call_data)
    result_data = {"turn": 1, "step": 1, "id": "c1", "ok": True, "result": {"z": [3]}}
    session.append("tool/result", result_data)
    messages = History().read(session.events)
    assert json.loads(json.dumps(list(messages))) == [
        user("m1", "hi"),
        said("", call("c1", "t", xs=[1, {"y": 2}])),
        result("c1", {"z": [3]}),
    ]
    message = messages[0]
    with pytest.raises(TypeError):
        message["text"] = "rewritten"
    with pytest.raises(TypeError):
        message.update(text="rewritten")
    with pytest.raises(TypeError):
        messages[1]["tool_calls"][0]["args"]["xs"] = ()
    assert {**message, "text": "new"} == user("m1", "new")
    assert copy.deepcopy(messages) == messages and message == user("m1", "hi")


def test_a_read_is_a_snapshot_that_later_records_do_not_change() -> None:
    session = Session()
    session.append("user/message", {"id": "m1", "text": "hi"})
    session.append("assistant/message", {"turn": 1, "step": 1, "text": "let me look"})
    history = History()
    before = history.read(session.events)
    # The step's call folds into the answer `before` already holds, and more is said after.
    session.append("tool/call", {"turn": 1, "step": 1, "id": "c1", "name": "t", "args": {}})
    session.append("tool/result", {"turn": 1, "step": 1, "id": "c1", "ok": True, "result": 1})
    after = history.read(session.events)

    assert plain(before) == [user("m1", "hi"), said("let me look")]
    assert plain(after) == [user("m1", "hi"), said("let me look", call("c1", "t")), result("c1", 1)]
    first, answer = before
    assert (len(before), before[-1], before[-2], before[1:], list(reversed(before))) == (
        2,
        answer,
        first,
        (answer,),
        [answer, first],
    )
    assert before == [first, answer] and before == (first, answer) == before[:]
    assert before != after and copy.copy(before) == before and first is after[0]
    with pytest.raises(IndexError, match=r"^message index out of range$"):
        before[2]
    with pytest.raises(TypeError):
        before[0] = user("m0", "rewritten")  # type: ignore[index]


def test_a_model_that_keeps_its_requests_reads_each_as_it_was_asked() -> None:
    async def scenario() -> None:
        asks = Reply("", (ToolCall("c1", "lookup", {}),), "tool_calls")
        model = ScriptedModel([asks, Reply("found it"), Reply("bye")])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", ["found"])])
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "look"))
        await agent.when_idle()
        agent.followup(UserMessage("m2", "thanks"))
        await agent.when_idle()

        # Read only now, two turns later: each request still holds what it was asked with.
        (first, _), (second, _), (third, _) = model.requests
        assert plain(first.messages) == [user("m1", "look")]
        assert plain(second.messages) == [
            user("m1", "look"),
            said("", call("c1", "lookup")),
            result("c1", "found"),
        ]
        assert plain(third.messages) == [
            *plain(second.messages),
            said("found it"),
            user("m2", "thanks"),
        ]
        await rt.aclose()

    run(scenario())


def test_history_folds_a_hand_written_log_and_reads_only_what_was_appended() -> None:
    session = Session.seed(
        [
            {"seq": 0, "type": "inbox/discarded", "data": {"ids": ["gone"]}},
            {"seq": 1, "type": "turn/start", "data": {"turn": 1}},
            {"seq": 2, "type": "inbox/claimed", "data": {"turn": 1, "ids": ["m1"]}},
            {"seq": 3, "type": "user/message", "data": {"id": "m1", "text": "go"}},
            {"seq": 4, "type": "step/start", "data": {"turn": 1, "step": 1}},
            {
                "seq": 5,
                "type": "tool/call",
                "data": {"turn": 1, "step": 1, "id": "c1", "name": "t", "args": {}},
            },
            {
                "seq": 6,
                "type": "tool/result",
                "data": {"turn": 1, "step": 1, "id": "c1", "ok": False, "result": "aborted"},
            },
            {"seq": 7, "type": "step/end", "data": {"turn": 1, "step": 1}},
            {"seq": 8, "type": "turn/end", "data": {"turn": 1, "outcome": {"kind": "aborted"}}},
        ]
    )
    history = History()
    assert plain(history.read(session.events)) == [
        user("m1", "go"),
        said("", call("c1", "t")),
        result("c1", "aborted", ok=False),
    ]
    session.append("user/message", {"id": "m2", "text": "more"})
    assert plain(history.read(session.events))[-1] == user("m2", "more")
    assert len(history.read(session.events)) == 4


def test_a_steer_sent_while_assembly_blocks_waits_for_the_next_step_boundary() -> None:
    async def scenario() -> None:
        gate = Gate("assemble")
        asks = Reply("", (ToolCall("c1", "lookup", {}),), "tool_calls")
        model = ScriptedModel([asks, Reply("steered")])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", ["found"])])
        agent = (await rt.create_agent("a1")).agent
        assemblies = 0

        async def assemble(payload: AssembleContext, next: Next) -> AssembleContext:
            nonlocal assemblies
            assemblies += 1
            if assemblies == 1:
                await gate.wait(payload.signal)
            return await next(payload)

        rt.events.on("agent/assemble", assemble)
        agent.followup(UserMessage("m1", "look"))
        await gate.reached.wait()
        agent.steer(UserMessage("s1", "also this"))
        gate.open()
        await agent.when_idle()

        (first, _), (second, _) = model.requests
        assert plain(first.messages) == [user("m1", "look")]
        assert plain(second.messages)[-1] == user("s1", "also this")
        assert (second.turn, second.step) == (1, 2)
        assert outcomes(agent.session) == {1: COMPLETED}
        await rt.aclose()

    run(scenario())


# --- issue 26: a refusal unsays its turn -----------------------------------------------------


def test_a_refused_turn_is_left_out_of_every_later_request_and_of_a_log_read_back() -> None:
    """A model-side refusal (``finish="blocked"``) and a prompt hook's block each drop their
    turn's prompt and everything after it from the next request; the log keeps the records,
    and a session read back from its JSONL folds to the same history (the rule is the fold's,
    not a caller's patch)."""

    async def scenario() -> None:
        model = ScriptedModel(
            [
                Reply("one"),
                Reply("calling", (ToolCall("c1", "t"),), finish="tool_calls"),
                Reply("I will not", finish="blocked"),
                Reply("three"),
            ]
        )
        tool = ScriptedTool("t", ["ran"])
        hooks = Hooks(
            prompt=[
                """python3 -c "import json,sys; sys.exit(2 if 'forbidden' in
json.load(sys.stdin)['prompt'][0] else 0)" """
            ]
        )
        rt = Runtime(model=model, tools=[tool], hooks=hooks)
        agent = (await rt.create_agent("a1")).agent
        for mid, text in [("m1", "first"), ("m2", "bad"), ("m3", "forbidden request")]:
            agent.followup(UserMessage(mid, text))
            await agent.when_idle()
        refused = model.requests[-1][0].messages  # the refused turn's last request, kept
        agent.followup(UserMessage("m4", "history"))
        await agent.when_idle()

        assert [o["kind"] for o in outcomes(agent.session).values()] == [
            "completed",
            "blocked",
            "blocked",
            "completed",
        ]
        last = model.requests[-1][0].messages
        assert plain(last) == [user("m1", "first"), said("one"), user("m4", "history")]
        assert plain(refused)[-1] == result("c1", "ran")  # a snapshot is never cut
        back = Session.from_jsonl(agent.session.to_jsonl())
        assert plain(History().read(back.events)) == [*plain(last), said("three")]
        assert "forbidden request" in agent.session.to_jsonl()  # recorded, only unsaid
        await rt.aclose()

    run(scenario())
