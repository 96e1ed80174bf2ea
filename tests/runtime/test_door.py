"""What the runtime refuses at the door, and the calls that must not wedge or lose data.

Values that would corrupt the table, the inbox or the durable log are refused with a
:class:`~fsm_core.UsageError` (or a :class:`~fsm_core.runtime.SessionError` for the log) before
anything changes; teardown survives a cancelled caller and reports a failed final flush.
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from fsm_core import USER, Runtime, StatusChanged, UsageError, UserMessage
from fsm_core.runtime import Reply, Session, SessionError, ToolCall, UserCause
from fsm_core.testing import Gate, ScriptedModel, ScriptedTool, Wait
from tests.helpers import core_of
from tests.runtime.test_faults import (
    Boom,
    assert_agrees,
    assert_balanced,
    blocked_in_model,
    bounded,
)


def _quiet_table(agent: Any) -> dict[str, Any]:
    return dict(agent.table_state)


@pytest.mark.parametrize(
    ("message", "fault"),
    [
        (UserMessage(1, "hi"), "agent a1: a message's id must be a str, not int"),  # type: ignore[arg-type]
        (UserMessage("m1", None), "agent a1: a message's text must be a str, not NoneType"),  # type: ignore[arg-type]
        (None, "agent a1: send() takes a UserMessage, not NoneType"),
        ("hi", "agent a1: send() takes a UserMessage, not str"),
    ],
)
def test_a_malformed_message_is_refused_before_the_table_moves(message: Any, fault: str) -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel())
        agent = (await rt.create_agent("a1")).agent
        before = _quiet_table(agent)
        with pytest.raises(UsageError, match=rf"^{re.escape(fault)}$"):
            agent.followup(message)
        assert _quiet_table(agent) == before
        assert not agent.inbox.pending
        await bounded(agent.when_idle())
        await bounded(rt.aclose())

    asyncio.run(main())


def test_a_second_pending_message_with_an_id_already_pending_is_refused() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([Reply("one")]))
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "first"))
        with pytest.raises(UsageError, match=r"^agent a1: message 'm1' is already pending$"):
            agent.steer(UserMessage("m1", "again"))
        assert [m.text for m in agent.inbox.next_turn] == ["first"]
        assert agent.inbox.next_step == ()
        agent.cancel()  # discards exactly the one pending message
        assert not agent.inbox.pending and not agent.table_state["pending"]
        await bounded(agent.when_idle())
        discarded = [e.data["ids"] for e in agent.session.events if e.type == "inbox/discarded"]
        assert discarded == [("m1",)]
        agent.followup(UserMessage("m1", "the id is free again"))
        await bounded(agent.when_idle())
        await bounded(rt.aclose())

    asyncio.run(main())


def test_a_waking_send_with_no_running_loop_is_refused_and_changes_nothing() -> None:
    async def make() -> Any:
        rt = Runtime(model=ScriptedModel())
        return (await rt.create_agent("a1")).agent

    agent = asyncio.run(make())
    before = _quiet_table(agent)
    with pytest.raises(
        UsageError,
        match=r"^agent a1: a waking send needs a running event loop to schedule the driver on "
        r"\(send from async code, or use inject\(\)\)$",
    ):
        agent.followup(UserMessage("m1", "hi"))
    assert _quiet_table(agent) == before
    agent.inject(UserMessage("m1", "hi"))  # no wake, no loop needed
    assert agent.table_state["pending"] and not agent.table_state["scheduled"]


def test_a_listener_base_exception_reaches_the_caller_after_the_row_completes() -> None:
    async def main() -> None:
        gate = Gate("model")
        rt = Runtime(model=ScriptedModel([Wait(gate, Reply("late"))]))
        agent = (await rt.create_agent("a1")).agent
        rt.events.on("agent/cancel-requested", lambda _e: (_ for _ in ()).throw(Boom()))
        agent.followup(UserMessage("m1", "hi"))
        await bounded(gate.reached.wait())
        with pytest.raises(Boom):
            agent.cancel(USER)
        # The row completed before the exception left: the holder is aborted with the cause.
        assert agent.table_state["holder"] == "aborted"
        assert agent.table_state["reason"] == "user"
        await bounded(agent.when_idle())
        outcomes = [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"]
        assert outcomes == [{"kind": "aborted"}]
        await bounded(rt.aclose())

    asyncio.run(main())


def test_aclose_stops_admitting_and_waits_for_work_that_ignores_its_signal() -> None:
    async def main() -> None:
        rt, handle, gate, signal = await blocked_in_model()
        agent = handle.agent
        closing = asyncio.ensure_future(rt.aclose())
        await bounded(signal.wait())  # aclose() began: it disposed the agent
        with pytest.raises(
            UsageError, match=r"^the runtime is closing; agent 'a2' was not created$"
        ):
            await rt.create_agent("a2")
        assert not closing.done()
        gate.open()
        await bounded(closing)
        await bounded(rt.aclose())  # memoized: a second call returns too
        assert agent.phase == "disposed" and rt.agents == {}

    asyncio.run(main())


def test_a_cancelled_dispose_caller_does_not_cancel_the_teardown() -> None:
    async def main() -> None:
        rt, handle, gate, signal = await blocked_in_model()
        impatient = asyncio.ensure_future(handle.dispose())
        await bounded(signal.wait())  # the caller began the teardown
        impatient.cancel()
        with pytest.raises(asyncio.CancelledError):
            await impatient
        gate.open()
        await bounded(handle.dispose())
        assert handle.agent.phase == "disposed"
        await bounded(rt.aclose())

    asyncio.run(main())


def test_a_session_records_one_agent_at_a_time_and_turns_continue_its_numbering() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([Reply("one"), Reply("two")]))
        session = Session()
        first = await rt.create_agent("a1", session)
        with pytest.raises(
            UsageError,
            match=r"^<session>: agent 'a1' already records into this session; "
            r"agent 'a2' needs a session of its own$",
        ):
            await rt.create_agent("a2", session)
        first.agent.followup(UserMessage("m1", "hi"))
        await bounded(first.agent.when_idle())
        await bounded(first.dispose())
        second = await rt.create_agent("a2", session)
        second.agent.followup(UserMessage("m2", "again"))
        await bounded(second.agent.when_idle())
        turns = [e.data["turn"] for e in session.events if e.type == "turn/start"]
        assert turns == [1, 2]
        await bounded(rt.aclose())

    asyncio.run(main())


class _Odd:
    pass


def test_a_failed_final_flush_reaches_every_dispose_caller_after_disposal(tmp_path: Path) -> None:
    async def main() -> None:
        folder = tmp_path / "gone"
        folder.mkdir()
        rt = Runtime(model=ScriptedModel([Reply("one")]))
        handle = await rt.create_agent("a1", Session(folder / "a1.jsonl"))
        other = await rt.create_agent("a2", Session(folder / "a2.jsonl"))
        handle.agent.followup(UserMessage("m1", "hi"))
        await bounded(handle.agent.when_idle())
        shutil.rmtree(folder)
        cannot = rf"^{re.escape(str(folder))}/a1\.jsonl: cannot write the log: "
        with pytest.raises(SessionError, match=cannot):
            await bounded(handle.dispose())
        assert handle.agent.phase == "disposed"
        with pytest.raises(SessionError, match=cannot):
            await bounded(handle.dispose())  # memoized: the same failure
        # aclose() disposes the agent left, and raises its failure once everything settled.
        with pytest.raises(BaseExceptionGroup) as group:
            await bounded(rt.aclose())
        assert [type(e) for e in group.value.exceptions] == [SessionError]
        assert other.agent.phase == "disposed"

    asyncio.run(main())


def test_append_refuses_what_the_log_could_not_write_and_read_back() -> None:
    session = Session()
    deep: Any = "x"
    for _ in range(65):
        deep = [deep]
    with pytest.raises(SessionError, match=r"nested deeper than 64 levels"):
        session.append(
            "tool/call", {"turn": 1, "step": 1, "id": "c", "name": "t", "args": {"a": deep}}
        )
    with pytest.raises(SessionError, match=r"beyond \+-\(2\*\*53 - 1\)"):
        session.append("turn/start", {"turn": 10**5000})
    with pytest.raises(SessionError, match=r"beyond \+-\(2\*\*53 - 1\)"):
        Session.from_jsonl('{"seq":0,"type":"turn/start","data":{"turn":9007199254740992}}\n')
    assert len(session.events) == 0
    session.append("turn/start", {"turn": 2**53 - 1})
    assert Session.from_jsonl(session.to_jsonl()).events == session.events


def test_a_wrongly_typed_lane_or_flag_is_refused_and_queues_nothing() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel())
        agent = (await rt.create_agent("a1")).agent
        with pytest.raises(UsageError):
            agent.send(UserMessage("m1", "hi"), "sideways")  # type: ignore[arg-type]
        with pytest.raises(UsageError):
            agent.send(UserMessage("m1", "hi"), wakeup=1)  # type: ignore[arg-type]
        with pytest.raises(UsageError):
            agent.cancel(USER, keep_inbox="yes")  # type: ignore[arg-type]
        assert not agent.inbox.pending
        await bounded(rt.aclose())

    asyncio.run(main())


class _AnyLane:
    """Equal to everything: it would pass a membership test and confuse the table."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 1


class _Shifty(str):
    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


def test_objects_that_lie_about_equality_are_refused_at_the_door() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel())
        agent = (await rt.create_agent("a1")).agent
        with pytest.raises(UsageError, match=r"^agent a1: target must be 'next_turn' or "):
            agent.send(UserMessage("m1", "hi"), _AnyLane())  # type: ignore[arg-type]
        with pytest.raises(
            UsageError, match=r"^agent a1: a message's id must be a str, not _Shifty$"
        ):
            agent.followup(UserMessage(_Shifty("m1"), "hi"))
        assert not agent.inbox.pending and not agent.table_state["pending"]
        await bounded(rt.aclose())

    asyncio.run(main())


class _Lazy(Mapping[str, object]):
    """A view whose backend is gone: reading it raises."""

    def __getitem__(self, key: str) -> object:
        raise ConnectionError("backend gone")

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1


class _Weird(int):
    def __le__(self, other: object) -> bool:
        raise TypeError("no order")


INVALID = (False, "invalid-result")


@pytest.mark.parametrize(
    ("result", "recorded"),
    [
        (math.nan, INVALID),
        ({1, 2}, INVALID),
        (_Odd(), INVALID),
        (10**5000, INVALID),
        (2**53, INVALID),
        (_Lazy(), INVALID),
        (_Weird(3), (True, 3)),  # copied as a plain int; its own comparisons never run
    ],
    ids=["nan", "set", "object", "huge-int", "unsafe-int", "raising-mapping", "int-subclass"],
)
def test_a_tool_result_the_log_cannot_hold_is_recorded_as_invalid(
    result: object, recorded: tuple[bool, object]
) -> None:
    async def main() -> None:
        rt = Runtime(
            model=ScriptedModel(
                [Reply(tool_calls=(ToolCall("c1", "odd"),), finish="tool_calls"), Reply("done")]
            ),
            tools=[ScriptedTool("odd", [result])],
        )
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await bounded(agent.when_idle())
        results = [e.data for e in agent.session.events if e.type == "tool/result"]
        assert [(r["ok"], r["result"]) for r in results] == [recorded]
        assert_balanced(agent.session)
        assert_agrees(agent)
        await bounded(rt.aclose())

    asyncio.run(main())


def test_once_aclose_is_called_no_agent_runs_new_work() -> None:
    async def main() -> None:
        rt, handle, gate, _signal = await blocked_in_model()
        agent = handle.agent
        agent.cancel(USER)
        closing = asyncio.ensure_future(rt.aclose())  # disposal begins inside the call ...
        agent.followup(UserMessage("m2", "too late"))  # ... so this is parked, never run
        gate.open()
        await bounded(closing)
        outcomes = [e.data["outcome"] for e in agent.session.events if e.type == "turn/end"]
        assert outcomes == [{"kind": "disposed"}], "disposal wins over the cancel (decision 6)"
        assert [m.id for m in agent.inbox.next_turn] == ["m2"], "parked, never claimed"

    asyncio.run(main())


def test_a_turn_awaiting_its_own_disposal_is_refused_instead_of_deadlocking() -> None:
    async def main() -> None:
        refused: list[str] = []
        rt = Runtime(model=ScriptedModel([Reply("ok")]))
        handle = await rt.create_agent("a1")

        async def pre_step(payload: Any, next_: Any) -> Any:
            for wait in (handle.dispose, rt.aclose):
                try:
                    await wait()
                except UsageError as error:
                    refused.append(str(error))
            return await next_(payload)

        rt.events.on("agent/pre-step", pre_step)
        handle.agent.followup(UserMessage("m1", "hi"))
        await bounded(handle.agent.when_idle())
        assert refused == [
            "agent a1: its own turn cannot await its disposal, which waits for that turn to end; "
            "the disposal has begun, return from the turn",
            "an agent's own turn cannot await aclose(), which waits for that turn to end; the "
            "close has begun, return from the turn",
        ]
        await bounded(rt.aclose())
        assert handle.agent.phase == "disposed"
        outcomes = [e.data["outcome"] for e in handle.agent.session.events if e.type == "turn/end"]
        assert outcomes == [{"kind": "disposed"}]

    asyncio.run(main())


class _EqualToAll(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


def test_a_table_argument_must_be_exactly_a_value_of_its_type() -> None:
    """1 is not true, and a str subclass equal to everything is no cause: the table refuses
    both before any row runs, so nothing but its own values reaches its state."""

    async def main() -> None:
        rt = Runtime(model=ScriptedModel())
        agent = (await rt.create_agent("a1")).agent
        machine = core_of(agent).control.spec
        with pytest.raises(ValueError, match=r"^agent\.send: wake=1 is not a value of bool$"):
            machine.fire(machine.initial, "send", wake=1, lane="next_turn")
        agent.inject(UserMessage("m1", "hi"))
        before = dict(agent.table_state)
        cause = UserCause()
        object.__setattr__(cause, "kind", _EqualToAll("user"))
        with pytest.raises(ValueError, match=r"^agent\.cancel: cause='user' is not a value"):
            agent.cancel(cause)
        assert dict(agent.table_state) == before and agent.inbox.pending
        await bounded(rt.aclose())

    asyncio.run(main())


def test_an_agent_only_originates_and_its_table_state_is_a_read_only_snapshot() -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel([Reply("done")]))
        agent = (await rt.create_agent("a1")).agent
        public = {name for name in dir(agent) if not name.startswith("_")}
        assert public == {
            *("id", "session", "inbox", "phase", "status", "table_state", "assemble"),
            *("send", "followup", "steer", "inject", "cancel", "when_idle", "run_maintenance"),
        }  # assemble() reads (tests/runtime/test_request_and_assembly_seams.py): no table event
        before = agent.table_state
        with pytest.raises(TypeError):
            before["phase"] = "running"  # type: ignore[index]
        agent.followup(UserMessage("m1", "hi"))
        assert (before["pending"], agent.table_state["pending"]) == (False, True)
        assert repr(agent) == "<Agent a1 phase=idle holder=none latch=0 turn=0>"
        await agent.when_idle()
        assert repr(agent) == "<Agent a1 phase=idle holder=none latch=0 turn=1>"
        await rt.aclose()

    asyncio.run(main())


def test_a_synchronous_listener_begins_disposal_and_registers_for_idle_in_line() -> None:
    """dispose(), aclose() and when_idle() act inside the call, as the seeds' disposal does;
    the awaitable they return can be awaited later, or never."""

    async def main() -> None:
        rt = Runtime(model=ScriptedModel([Reply("never sent")]))
        handle = await rt.create_agent("a1")
        seen: list[tuple[str, object]] = []
        pending: list[Any] = []
        registered = asyncio.Event()

        def on_status(event: StatusChanged) -> None:
            if event.status == "running":
                pending.append(handle.dispose())  # not awaited: disposal begins right here
                seen.append((handle.agent.phase, handle.agent.table_state["closing"]))
                pending.append(handle.agent.when_idle())
                registered.set()

        rt.events.on("agent/status", on_status)
        handle.agent.followup(UserMessage("m1", "hi"))
        await bounded(registered.wait())
        assert seen == [("cancelling", True)]
        for awaitable in pending:
            await bounded(awaitable)
        assert handle.agent.phase == "disposed"
        outcomes = [e.data["outcome"] for e in handle.agent.session.events if e.type == "turn/end"]
        assert outcomes == []  # disposal began before the claim: no turn opened
        await bounded(rt.aclose())

    asyncio.run(main())
