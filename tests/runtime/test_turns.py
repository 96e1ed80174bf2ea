"""Turns of the reference runtime: one signal per turn across every seam, the outcome each
ending records, and a durable log that holds its invariants and nothing else.

Seed 000's loop tests: cooperative listeners wait on the turn's signal at pre-step, prompt
assembly, the model request, request-error recovery, tool approval and execution, and turn
stopping; a cancel while blocked at any of them ends the turn with exactly
``{"kind": "aborted"}`` and the agent reaches idle. Every seam of a turn receives the same
signal and the next turn a fresh one; ``turn/end`` observers and the durability flush have no
cancellation authority (DESIGN.md decisions 6 and 7).

No test sleeps to wait for work: each waits on a gate's ``reached``, on ``when_idle()`` or on a
signal, and shows that something did not happen early by the order things were observed in.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fsm_core import (
    CancelRequested,
    Flush,
    Rejected,
    RequestError,
    StatusChanged,
    TurnEnded,
    TurnStarted,
)
from fsm_core.runtime import (
    DISPOSED,
    PARENT,
    USER,
    Aborted,
    AbortSignal,
    Agent,
    AgentCancelCause,
    AgentHandle,
    Reply,
    Runtime,
    Session,
    ToolCall,
    UserMessage,
)
from fsm_core.runtime._session import ERROR_CODES, OUTCOME_KINDS
from fsm_core.testing import Fail, Gate, ScriptedModel, ScriptedTool, Wait
from tests.helpers import exactly

T = TypeVar("T")

# A watchdog, not a clock: a protocol bug shows up as a hang, so fail fast instead.
pytestmark = pytest.mark.timeout(30)

COMPLETED = {"kind": "completed"}
ABORTED = {"kind": "aborted"}
DISPOSED_OUTCOME = {"kind": "disposed"}

SECRET = "do-not-persist"
"""Text carried only by exceptions; it must never reach the durable log."""

LEAKS = (
    SECRET,
    "Traceback",
    "Error",
    "Exception",
    "Aborted",
    "Signal",
    "signal",
    "Cause",
    "cause",
    "reason",
    '"user"',
    '"parent"',
    " at 0x",
)
"""Substrings that would mean a signal, exception, stack or cause reached the durable log."""

TOOL_CALL = ToolCall("c1", "lookup", {"q": "notes"})
ASKS_FOR_TOOL = Reply("let me look", (TOOL_CALL,), finish="tool_calls")


class ModelDown(Exception):
    """A request failure whose text must stay out of the log."""


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(scenario)


def records(session: Session) -> list[dict[str, Any]]:
    return [event.to_json() for event in session.events]


def outcomes(session: Session) -> dict[int, dict[str, Any]]:
    """Each turn's durable outcome, by turn number."""
    return {
        r["data"]["turn"]: r["data"]["outcome"] for r in records(session) if r["type"] == "turn/end"
    }


def one(signals: Sequence[AbortSignal | None]) -> AbortSignal:
    """The single signal object that every entry of ``signals`` is."""
    assert signals, "no seam received a signal"
    first = signals[0]
    assert first is not None
    distinct = {id(s) for s in signals}
    assert len(distinct) == 1, f"{len(distinct)} distinct signals within one turn"
    return first


def assert_durable_log_clean(session: Session) -> None:
    """No signal, exception, stack, cause or canceller text is in any durable event, and every
    outcome is exactly ``{"kind": ...}``, or ``{"kind": "error", "step": N, "code": ...}``."""
    for record in records(session):
        text = json.dumps(record["data"], sort_keys=True)
        assert [leak for leak in LEAKS if leak in text] == [], record
        if record["type"] == "turn/end":
            outcome = record["data"]["outcome"]
            if outcome["kind"] == "error":
                assert sorted(outcome) == ["code", "kind", "step"], record
                assert outcome["code"] in ERROR_CODES and outcome["step"] >= 0, record
            else:
                assert list(outcome) == ["kind"] and outcome["kind"] in OUTCOME_KINDS, record


def assert_log_invariants(
    session: Session,
    accepted: Sequence[str],
    queued: Sequence[str] = (),
    next_turn: Sequence[str] = (),
) -> None:
    """The durable log's invariants, checked over the whole log:

    - every accepted message ends exactly once, as claimed or discarded, unless still queued;
    - turns count 1, 2, ... and turn/start N+1 never precedes turn/end N;
    - step/start and step/end balance inside their turn, steps count 1, 2, ..., and every
      assistant message, tool call and tool result lies inside its step, each call answered;
    - every inbox splice is recorded inside its turn: a turn's claim (at most one next-turn
      message) just after its turn/start, a steering claim between two steps, each followed
      by the claimed messages' user/message records.
    """
    log = records(session)
    ended = Counter(
        message_id
        for r in log
        if r["type"] in ("inbox/claimed", "inbox/discarded")
        for message_id in r["data"]["ids"]
    )
    assert [m for m, n in ended.items() if n > 1] == [], "a message ended twice"
    assert set(ended).isdisjoint(queued), "a queued message already ended"
    assert sorted([*ended, *queued]) == sorted(accepted)

    turn: int | None = None
    last_turn = 0
    step: int | None = None
    last_step = 0
    calls: set[str] = set()
    for index, r in enumerate(log):
        kind, data = r["type"], r["data"]
        if kind == "turn/start":
            assert turn is None, f"turn/start {data['turn']} before turn/end {turn}"
            assert data["turn"] == last_turn + 1
            turn = last_turn = data["turn"]
            last_step = 0
        elif kind == "turn/end":
            assert data["turn"] == turn and step is None, f"turn/end at {index} unbalanced"
            turn = None
        elif kind == "step/start":
            assert data["turn"] == turn and step is None, f"step/start at {index} unbalanced"
            assert data["step"] == last_step + 1
            step = last_step = data["step"]
        elif kind == "step/end":
            assert (data["turn"], data["step"]) == (turn, step), f"step/end at {index}"
            assert calls == set(), f"tool calls {sorted(calls)} got no tool/result"
            step = None
        elif kind in ("assistant/message", "tool/call", "tool/result"):
            assert (data["turn"], data["step"]) == (turn, step), f"{kind} at {index}"
            if kind == "tool/call":
                calls.add(data["id"])
            elif kind == "tool/result":
                calls.remove(data["id"])
        elif kind == "inbox/claimed":
            # A turn's claim right after its turn/start, or steering between two steps.
            assert data["turn"] == turn and step is None, f"inbox/claimed at {index}"
            if log[index - 1]["type"] == "turn/start":
                followups = [i for i in data["ids"] if i in next_turn]
                assert len(followups) <= 1, f"turn {turn} claimed followups {followups}"
            spliced = log[index + 1 : index + 1 + len(data["ids"])]
            assert [(s["type"], s["data"]["id"]) for s in spliced] == [
                ("user/message", message_id) for message_id in data["ids"]
            ]
    assert turn is None and step is None, "the log ends inside a turn"


# --- every seam of a turn -----------------------------------------------------------------------

ALL_SEAMS = {
    "inbox/claimed",
    "turn/start",
    "step/start",
    "step/end",
    "agent/pre-step",
    "agent/assemble",
    "agent/request",
    "model",
    "agent/request-error",
    "agent/tool-approval",
    "tool",
    "agent/turn-stopping",
}
BLOCKING_SEAMS = [
    "agent/pre-step",
    "agent/assemble",
    "agent/request",
    "model",
    "agent/request-error",
    "agent/tool-approval",
    "tool",
    "agent/turn-stopping",
]


class Seams:
    """A runtime whose first turn passes every seam, recording the signal each one receives.

    The turn: its first request fails and an ``agent/request-error`` listener retries it; the
    retry asks for a tool, which ``agent/tool-approval`` approves and the tool runs; the next
    request stops, then ``agent/turn-stopping``. ``block`` names the one seam that waits,
    cooperatively, on :attr:`gate` the first time it is reached.
    """

    def __init__(self, block: str | None = None) -> None:
        self.block = block
        self.gate = Gate(block or "unused")
        asks = Wait(self.gate, ASKS_FOR_TOOL) if block == "model" else ASKS_FOR_TOOL
        self.model = ScriptedModel([Fail(ModelDown(SECRET)), asks, Reply("all done")])
        self.tool = ScriptedTool(
            "lookup", [Wait(self.gate, "found") if block == "tool" else "found"]
        )
        self.rt = Runtime(model=self.model, tools=[self.tool])
        self.seen: dict[int, list[tuple[str, AbortSignal | None]]] = {}
        self._turn = 0
        events = self.rt.events
        events.on("inbox/claimed", lambda e: self._saw(e.turn, "inbox/claimed", e.signal))
        events.on("turn/start", self._turn_started)
        events.on("step/start", lambda e: self._saw(e.turn, "step/start", e.signal))
        events.on("step/end", lambda e: self._saw(e.turn, "step/end", e.signal))
        for name in ("agent/pre-step", "agent/assemble", "agent/request", "agent/tool-approval"):
            events.on(name, self._passing(name))
        events.on("agent/turn-stopping", self._passing("agent/turn-stopping"))
        events.on("agent/request-error", self._retry)

    def signals(self, turn: int) -> list[AbortSignal | None]:
        """Every signal turn ``turn`` handed out (the tool runs only in turn 1)."""
        out = [signal for _, signal in self.seen.get(turn, [])]
        out += [signal for request, signal in self.model.requests if request.turn == turn]
        if turn == 1:
            out += [signal for _, signal in self.tool.calls]
        return out

    def seams(self, turn: int) -> set[str]:
        names = {name for name, _ in self.seen.get(turn, [])}
        if any(request.turn == turn for request, _ in self.model.requests):
            names.add("model")
        if turn == 1 and self.tool.calls:
            names.add("tool")
        return names

    def _saw(self, turn: int, seam: str, signal: AbortSignal | None) -> None:
        self.seen.setdefault(turn, []).append((seam, signal))

    def _turn_started(self, event: TurnStarted) -> None:
        self._turn = event.turn
        self._saw(event.turn, "turn/start", event.signal)

    async def _at(self, seam: str, signal: AbortSignal | None) -> None:
        self._saw(self._turn, seam, signal)
        if seam == self.block and not self.gate.reached.is_set():
            await self.gate.wait(signal)

    def _passing(self, seam: str) -> Callable[[Any, Callable[[Any], Awaitable[Any]]], Any]:
        async def listener(payload: Any, next: Callable[[Any], Awaitable[Any]]) -> Any:
            await self._at(seam, payload.signal)
            return await next(payload)

        return listener

    async def _retry(self, payload: RequestError, next: Callable[..., Awaitable[str]]) -> str:
        await self._at("agent/request-error", payload.signal)
        return "retry"


def test_every_seam_of_a_turn_sees_one_signal_and_the_next_turn_a_fresh_one() -> None:
    async def scenario() -> None:
        seams = Seams()
        agent = (await seams.rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "look it up"))
        await agent.when_idle()
        seams.model.script = [Reply("again")]
        agent.followup(UserMessage("m2", "once more"))
        await agent.when_idle()

        assert seams.seams(1) == ALL_SEAMS
        first, second = one(seams.signals(1)), one(seams.signals(2))
        assert first is not second
        assert not first.aborted and not second.aborted
        assert outcomes(agent.session) == {1: COMPLETED, 2: COMPLETED}
        assert_log_invariants(agent.session, ["m1", "m2"])
        assert_durable_log_clean(agent.session)
        await seams.rt.aclose()

    run(scenario())


@pytest.mark.parametrize("seam", BLOCKING_SEAMS)
def test_cancel_while_blocked_at_a_seam_aborts_the_turn_and_reaches_idle(seam: str) -> None:
    async def scenario() -> None:
        seams = Seams(block=seam)
        agent = (await seams.rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "look it up"))
        await seams.gate.reached.wait()
        assert agent.status == "running"

        agent.cancel()
        await agent.when_idle()

        assert (agent.phase, agent.status) == ("idle", "idle")
        assert outcomes(agent.session) == {1: ABORTED}
        assert seam in seams.seams(1)
        signal = one(seams.signals(1))
        assert signal.aborted and signal.reason == USER

        seams.model.script = [Reply("again")]
        agent.followup(UserMessage("m2", "once more"))
        await agent.when_idle()
        fresh = one(seams.signals(2))
        assert fresh is not signal and not fresh.aborted
        assert outcomes(agent.session) == {1: ABORTED, 2: COMPLETED}
        assert_log_invariants(agent.session, ["m1", "m2"])
        assert_durable_log_clean(agent.session)
        await seams.rt.aclose()

    run(scenario())


def test_a_tool_call_interrupted_during_approval_is_answered_aborted() -> None:
    async def scenario() -> None:
        seams = Seams(block="agent/tool-approval")
        agent = (await seams.rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "look it up"))
        await seams.gate.reached.wait()

        agent.cancel()
        await agent.when_idle()

        tools = [r for r in records(agent.session) if r["type"].startswith("tool/")]
        assert [(r["type"], r["data"]["id"]) for r in tools] == [
            ("tool/call", "c1"),
            ("tool/result", "c1"),
        ]
        assert (tools[1]["data"]["ok"], tools[1]["data"]["result"]) == (False, "aborted")
        assert seams.tool.calls == []  # the tool never ran
        assert_durable_log_clean(agent.session)
        await seams.rt.aclose()

    run(scenario())


def test_a_cancel_inside_a_tool_batch_answers_every_call_and_runs_none_after_it() -> None:
    """As the original: the log keeps every call the model asked for, each answered; the
    tools after the abort never execute."""

    async def scenario() -> None:
        gate = Gate("first tool")
        calls = tuple(ToolCall(f"c{i}", "probe", {"n": i}) for i in (1, 2, 3))
        tool = ScriptedTool("probe", [Wait(gate, "late"), "two", "three"])
        rt = Runtime(
            model=ScriptedModel([Reply("three lookups", calls, finish="tool_calls")]),
            tools=[tool],
        )
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "look it up thrice"))
        await gate.reached.wait()

        agent.cancel()
        await agent.when_idle()

        tools = [r for r in records(agent.session) if r["type"].startswith("tool/")]
        assert [(r["type"], r["data"]["id"]) for r in tools] == [
            ("tool/call", "c1"),
            ("tool/result", "c1"),
            ("tool/call", "c2"),
            ("tool/result", "c2"),
            ("tool/call", "c3"),
            ("tool/result", "c3"),
        ]
        results = [(r["data"]["ok"], r["data"]["result"]) for r in tools[1::2]]
        assert results == [(False, "aborted")] * 3
        assert [args for args, _signal in tool.calls] == [{"n": 1}]  # only the first ran
        ends = [r["data"]["outcome"] for r in records(agent.session) if r["type"] == "turn/end"]
        assert ends == [{"kind": "aborted"}]
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


# --- the holder's lifetime: installed before running, gone before turn/end ----------------------


def test_the_holder_is_installed_before_running_is_published() -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel([Reply("hi")]))
        agent = (await rt.create_agent("a1")).agent
        seen: list[tuple[str, object]] = []

        def on_status(event: StatusChanged) -> None:
            seen.append((event.status, event.agent.table_state["holder"]))

        rt.events.on("agent/status", on_status)
        agent.followup(UserMessage("m1", "hello"))
        await agent.when_idle()

        assert seen == [("running", "live"), ("idle", "none")]
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_a_turn_end_observer_cannot_cancel_the_finished_turn() -> None:
    async def scenario() -> None:
        model = ScriptedModel([Reply("hi")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        seen: list[tuple[str, object]] = []
        requested: list[CancelRequested] = []

        def on_turn_end(event: TurnEnded) -> None:
            seen.append((event.agent.status, event.agent.table_state["holder"]))
            event.agent.cancel()
            event.agent.cancel(PARENT)

        rt.events.on("turn/end", on_turn_end)
        rt.events.on("agent/cancel-requested", requested.append)
        agent.followup(UserMessage("m1", "hello"))
        await agent.when_idle()

        assert seen == [("running", "none")]  # still running until the flush settles
        # The first cancel cuts the driver's next turn, so it is effective; the second has
        # nothing new to cut (first wins). Neither touches the finished turn.
        assert [(r.agent, r.cause) for r in requested] == [(agent, USER)]
        assert outcomes(agent.session) == {1: COMPLETED}
        ((_, signal),) = model.requests
        assert not signal.aborted
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_a_blocked_flush_has_no_cancellation_authority_and_holds_back_the_next_turn() -> None:
    async def scenario() -> None:
        model = ScriptedModel([Reply("first"), Reply("second")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        flush = Gate("flush")
        order: list[str] = []
        requested: list[CancelRequested] = []

        async def slow_flush(payload: Flush, next: Callable[[Flush], Awaitable[None]]) -> None:
            await flush.wait()  # ignores every signal: a flush has none
            await next(payload)
            order.append("flushed")

        rt.events.on("session/flush", slow_flush)
        rt.events.on("turn/start", lambda e: order.append(f"turn/start {e.turn}"))
        rt.events.on("turn/end", lambda e: order.append(f"turn/end {e.turn}"))
        rt.events.on("agent/cancel-requested", requested.append)

        agent.followup(UserMessage("m1", "hello"))
        await flush.reached.wait()
        assert (agent.status, agent.table_state["holder"]) == ("running", "none")
        agent.cancel()
        agent.cancel(PARENT)
        agent.followup(UserMessage("m2", "and then"))

        async def wait_idle() -> None:
            await agent.when_idle()
            order.append("idle")

        idle = asyncio.ensure_future(wait_idle())
        assert order == ["turn/start 1", "turn/end 1"]
        assert [r.cause for r in requested] == [USER]  # it cuts the next turn, not this one

        flush.open()
        await idle
        # Neither the next turn nor idle came before the flush they wait for.
        assert order == [
            "turn/start 1",
            "turn/end 1",
            "flushed",
            "turn/start 2",
            "turn/end 2",
            "flushed",
            "idle",
        ]
        assert outcomes(agent.session) == {1: COMPLETED, 2: COMPLETED}
        assert [signal.aborted for _, signal in model.requests] == [False, False]
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


@pytest.mark.parametrize("keep_inbox", [True, False])
def test_a_cancel_during_the_flush_runs_no_turn_from_work_queued_before_it(
    keep_inbox: bool,
) -> None:
    """Seed 004: cancel starts no turn, it only cuts the present. Work queued during a finished
    turn's held flush is not run as one more turn once a cancel lands there: a keep_inbox cancel
    leaves it parked for a later wake, a default cancel discards it."""

    async def scenario() -> None:
        model = ScriptedModel([Reply("first"), Reply("second"), Reply("third")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        flush = Gate("flush")
        starts: list[int] = []
        requested: list[CancelRequested] = []

        async def held_flush(payload: Flush, next: Callable[[Flush], Awaitable[None]]) -> None:
            await flush.wait()
            await next(payload)

        rt.events.on("session/flush", held_flush)
        rt.events.on("turn/start", lambda e: starts.append(e.turn))
        rt.events.on("agent/cancel-requested", requested.append)

        agent.followup(UserMessage("m1", "hello"))
        await flush.reached.wait()
        agent.followup(UserMessage("m2", "and then"))
        agent.cancel(keep_inbox=keep_inbox)
        flush.open()
        await agent.when_idle()

        assert starts == [1] and len(model.requests) == 1
        assert [r.cause for r in requested] == [USER]
        assert outcomes(agent.session) == {1: COMPLETED}
        assert agent.status == "idle"
        assert agent.inbox.pending is keep_inbox
        if keep_inbox:  # parked, not lost: the next wake runs it first
            agent.followup(UserMessage("m3", "last"))
            await agent.when_idle()
            assert starts == [1, 2, 3] and len(model.requests) == 3
        await rt.aclose()

    run(scenario())


def test_a_failing_flush_is_logged_and_the_agent_still_reaches_idle(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel([Reply("first"), Reply("second")]))
        agent = (await rt.create_agent("a1")).agent

        async def failing_flush(payload: Flush, next: Callable[[Flush], Awaitable[None]]) -> None:
            raise OSError(SECRET)

        stop_failing = rt.events.on("session/flush", failing_flush)
        agent.followup(UserMessage("m1", "hello"))
        await agent.when_idle()

        assert (agent.phase, agent.status) == ("idle", "idle")
        assert "agent a1: the flush after turn 1 failed" in caplog.messages
        stop_failing()
        agent.followup(UserMessage("m2", "and then"))
        await agent.when_idle()
        assert outcomes(agent.session) == {1: COMPLETED, 2: COMPLETED}
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


# --- terminal classification and durable outcomes (DESIGN.md decision 6) ----------------------


@pytest.mark.parametrize(
    ("finish", "durable"),
    [("stop", "completed"), ("max_tokens", "max-tokens"), ("blocked", "blocked")],
)
def test_the_model_finish_gives_the_durable_outcome(finish: Any, durable: str) -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel([Reply("answer", finish=finish)]))
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hello"))
        await agent.when_idle()

        assert outcomes(agent.session) == {1: {"kind": durable}}
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_a_request_failure_nobody_retries_ends_the_turn_in_error() -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel([Fail(ModelDown(SECRET))]))
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hello"))
        await agent.when_idle()

        assert agent.phase == "idle"
        assert outcomes(agent.session) == {1: {"kind": "error", "step": 1, "code": "model-failed"}}
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


@pytest.mark.parametrize("cause", [USER, PARENT], ids=["user", "parent"])
def test_a_user_or_parent_cancel_records_only_the_coarse_aborted_outcome(
    cause: AgentCancelCause,
) -> None:
    async def scenario() -> None:
        gate = Gate("model")
        model = ScriptedModel([Wait(gate, Reply("never"))])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        requested: list[CancelRequested] = []
        rt.events.on("agent/cancel-requested", requested.append)
        agent.followup(UserMessage("m1", "hello"))
        await gate.reached.wait()

        agent.cancel(cause)
        await agent.when_idle()

        assert [r.cause for r in requested] == [cause]  # who asked: process-local only
        assert model.requests[0][1].reason == cause
        assert outcomes(agent.session) == {1: ABORTED}
        assert '"outcome":{"kind":"aborted"},' in agent.session.to_jsonl()
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_dispose_during_a_turn_records_disposed() -> None:
    async def scenario() -> None:
        gate = Gate("model")
        model = ScriptedModel([Wait(gate, Reply("never"))])
        rt = Runtime(model=model)
        handle = await rt.create_agent("a1")
        agent = handle.agent
        agent.followup(UserMessage("m1", "hello"))
        await gate.reached.wait()

        await handle.dispose()

        assert agent.phase == "disposed"
        assert model.requests[0][1].reason == DISPOSED
        assert outcomes(agent.session) == {1: DISPOSED_OUTCOME}
        assert_durable_log_clean(agent.session)
        with pytest.raises(
            Rejected, match=exactly("the agent is disposed; it accepts no more messages")
        ):
            agent.followup(UserMessage("m2", "too late"))
        await rt.aclose()

    run(scenario())


def test_cancel_then_dispose_records_disposed_though_the_cancel_won_the_reason() -> None:
    async def scenario() -> None:
        gate = Gate("model")
        model = ScriptedModel([Wait(gate, Reply("never"))])
        rt = Runtime(model=model)
        handle = await rt.create_agent("a1")
        agent = handle.agent
        agent.followup(UserMessage("m1", "hello"))
        await gate.reached.wait()

        agent.cancel()
        await handle.dispose()

        assert model.requests[0][1].reason == USER  # first wins: never rewritten
        assert outcomes(agent.session) == {1: DISPOSED_OUTCOME}  # lifecycle is read first
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


# --- request-error recovery and steering --------------------------------------------------------


def test_a_retrying_request_error_listener_sends_the_request_again_with_the_same_signal() -> None:
    async def scenario() -> None:
        model = ScriptedModel([Fail(ModelDown(SECRET)), Reply("second try")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        attempts: list[tuple[int, type[BaseException], AbortSignal]] = []

        async def retry(payload: RequestError, next: Callable[..., Awaitable[str]]) -> str:
            attempts.append((payload.attempt, type(payload.error), payload.signal))
            return "retry"

        rt.events.on("agent/request-error", retry)
        agent.followup(UserMessage("m1", "hello"))
        await agent.when_idle()

        (first, first_signal), (second, second_signal) = model.requests
        assert second == first and second_signal is first_signal
        assert attempts == [(1, ModelDown, first_signal)]
        assert outcomes(agent.session) == {1: COMPLETED}
        said = [r["data"] for r in records(agent.session) if r["type"] == "assistant/message"]
        assert said == [{"turn": 1, "step": 1, "text": "second try"}]
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_a_steer_during_a_turn_is_claimed_at_the_next_step_of_that_turn() -> None:
    async def scenario() -> None:
        gate = Gate("tool")
        model = ScriptedModel([ASKS_FOR_TOOL, Reply("steered")])
        tool = ScriptedTool("lookup", [Wait(gate, "found")])
        rt = Runtime(model=model, tools=[tool])
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "look it up"))
        await gate.reached.wait()

        agent.steer(UserMessage("s1", "the other file"))
        gate.open()
        await agent.when_idle()

        (first, _), (second, _) = model.requests
        steer = {"role": "user", "id": "s1", "text": "the other file"}
        assert (second.turn, second.step) == (1, 2)
        assert steer in second.messages and steer not in first.messages
        claims = [r["data"] for r in records(agent.session) if r["type"] == "inbox/claimed"]
        assert claims == [{"turn": 1, "ids": ["m1"]}, {"turn": 1, "ids": ["s1"]}]
        assert outcomes(agent.session) == {1: COMPLETED}
        assert_log_invariants(agent.session, ["m1", "s1"])
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_followups_sent_together_become_one_turn_each_in_send_order_in_one_running_interval() -> (
    None
):
    """Issue 11 item 1, as the original: a claim takes every steering message and exactly one
    next-turn message; the rest stays queued for the same driver's next turn, which runs
    without publishing idle in between."""

    async def scenario() -> None:
        model = ScriptedModel([Reply("one"), Reply("two"), Reply("three")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        statuses: list[str] = []
        rt.events.on("agent/status", lambda e: statuses.append(e.status))
        for n in (1, 2, 3):
            agent.followup(UserMessage(f"m{n}", f"message {n}"))
        await agent.when_idle()

        claims = [r["data"] for r in records(agent.session) if r["type"] == "inbox/claimed"]
        assert claims == [{"turn": n, "ids": [f"m{n}"]} for n in (1, 2, 3)]
        assert statuses == ["running", "idle"]
        assert outcomes(agent.session) == {1: COMPLETED, 2: COMPLETED, 3: COMPLETED}
        for request, _ in model.requests:  # each turn sees its own message, none queued after
            said = [m["id"] for m in request.messages if m.get("role") == "user"]
            assert said[-1:] == [f"m{request.turn}"]
            assert not {f"m{n}" for n in range(request.turn + 1, 4)} & set(said)
        assert_log_invariants(agent.session, ["m1", "m2", "m3"], next_turn=["m1", "m2", "m3"])
        await rt.aclose()

    run(scenario())


# --- invariants over the log, across scenarios ---------------------------------------------------


@dataclass
class Scene:
    """One agent with a scripted model and tool, remembering every message it accepted."""

    rt: Runtime
    handle: AgentHandle
    model: ScriptedModel
    accepted: list[str] = field(default_factory=list)
    followups: list[str] = field(default_factory=list)
    inserted: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)

    @classmethod
    async def create(cls, script: Sequence[Any], tool_script: Sequence[Any] = ()) -> Scene:
        model = ScriptedModel(script)
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", tool_script)])
        scene = cls(rt, await rt.create_agent("a1"), model)
        rt.events.on("inbox/inserted", lambda e: scene.inserted.append(e.message.id))
        rt.events.on("inbox/discarded", lambda e: scene.discarded.append(e.message.id))
        return scene

    @property
    def agent(self) -> Agent:
        return self.handle.agent

    @property
    def signal(self) -> AbortSignal:
        """The signal of the latest model request."""
        return self.model.requests[-1][1]

    def followup(self, message_id: str) -> None:
        self.agent.followup(UserMessage(message_id, f"about {message_id}"))
        self.accepted.append(message_id)
        self.followups.append(message_id)

    def steer(self, message_id: str) -> None:
        self.agent.steer(UserMessage(message_id, f"about {message_id}"))
        self.accepted.append(message_id)

    def queued(self) -> list[str]:
        return [m.id for m in (*self.agent.inbox.next_turn, *self.agent.inbox.next_step)]


async def followups_claimed_one_a_turn_and_one_during_the_turn() -> Scene:
    gate = Gate("model")
    s = await Scene.create([Wait(gate, Reply("one")), Reply("two"), Reply("three")])
    s.followup("m1")
    s.followup("m2")
    await gate.reached.wait()
    s.followup("m3")
    gate.open()
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {1: COMPLETED, 2: COMPLETED, 3: COMPLETED}
    return s


async def cancel_in_the_model_discards_queued_and_steering_work() -> Scene:
    gate = Gate("model")
    s = await Scene.create([Wait(gate, Reply("never"))])
    s.followup("m1")
    await gate.reached.wait()
    s.followup("m2")
    s.steer("s1")
    s.agent.cancel()
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {1: ABORTED}
    return s


async def prerun_cancel_then_a_replacement() -> Scene:
    s = await Scene.create([Reply("replacement")])
    s.followup("m1")
    s.agent.cancel()
    s.followup("m2")
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {1: COMPLETED}
    return s


async def keep_inbox_cancel_parks_work_until_a_later_wake() -> Scene:
    gate = Gate("model")
    s = await Scene.create([Wait(gate, Reply("never")), Reply("later"), Reply("last")])
    s.followup("m1")
    await gate.reached.wait()
    s.followup("m2")
    s.agent.cancel(keep_inbox=True)
    await s.agent.when_idle()
    assert s.queued() == ["m2"]
    s.followup("m3")
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {1: ABORTED, 2: COMPLETED, 3: COMPLETED}
    return s


async def cancel_in_a_tool_with_work_queued() -> Scene:
    gate = Gate("tool")
    s = await Scene.create([ASKS_FOR_TOOL], [Wait(gate, "found")])
    s.followup("m1")
    await gate.reached.wait()
    s.followup("m2")
    s.agent.cancel()
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {1: ABORTED}
    return s


async def steering_taken_between_steps() -> Scene:
    gate = Gate("tool")
    s = await Scene.create([ASKS_FOR_TOOL, Reply("steered"), Reply("two")], [Wait(gate, "found")])
    s.followup("m1")
    await gate.reached.wait()
    s.steer("s1")  # taken at step 2 of turn 1
    s.followup("m2")  # waits for turn 2
    gate.open()
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {1: COMPLETED, 2: COMPLETED}
    return s


async def abort_observer_work_is_latched_and_replayed() -> Scene:
    gate = Gate("model")
    s = await Scene.create([Wait(gate, Reply("never")), Reply("replayed")])
    s.followup("m1")
    await gate.reached.wait()
    s.signal.add_listener(lambda _signal: s.followup("m2"))
    s.agent.cancel()
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {1: ABORTED, 2: COMPLETED}
    return s


async def removed_work_is_discarded() -> Scene:
    gate = Gate("model")
    s = await Scene.create([Wait(gate, Reply("one"))])
    s.followup("m1")
    await gate.reached.wait()
    s.followup("m2")
    assert s.agent.inbox.remove("m2")
    gate.open()
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {1: COMPLETED}
    return s


async def a_failed_turn_then_a_good_one() -> Scene:
    s = await Scene.create([Fail(ModelDown(SECRET)), Reply("fine")])
    s.followup("m1")
    await s.agent.when_idle()
    s.followup("m2")
    await s.agent.when_idle()
    assert outcomes(s.agent.session) == {
        1: {"kind": "error", "step": 1, "code": "model-failed"},
        2: COMPLETED,
    }
    return s


async def dispose_mid_turn_parks_later_sends() -> Scene:
    gate = Gate("model")
    s = await Scene.create([Wait(gate, Reply("ignored"), cooperate=False)])
    s.followup("m1")
    await gate.reached.wait()
    s.followup("m2")
    disposal = asyncio.ensure_future(s.handle.dispose())
    await s.signal.wait()  # disposal began: it aborted the turn's signal
    s.followup("m3")  # accepted and parked, never run
    gate.open()
    await disposal
    assert s.agent.phase == "disposed"
    assert s.queued() == ["m2", "m3"]
    assert outcomes(s.agent.session) == {1: DISPOSED_OUTCOME}
    return s


SCENARIOS: list[Callable[[], Coroutine[Any, Any, Scene]]] = [
    followups_claimed_one_a_turn_and_one_during_the_turn,
    cancel_in_the_model_discards_queued_and_steering_work,
    prerun_cancel_then_a_replacement,
    keep_inbox_cancel_parks_work_until_a_later_wake,
    cancel_in_a_tool_with_work_queued,
    steering_taken_between_steps,
    abort_observer_work_is_latched_and_replayed,
    removed_work_is_discarded,
    a_failed_turn_then_a_good_one,
    dispose_mid_turn_parks_later_sends,
]


@pytest.mark.parametrize("play", SCENARIOS, ids=lambda play: play.__name__)
def test_every_message_ends_once_and_turns_and_steps_balance(
    play: Callable[[], Coroutine[Any, Any, Scene]],
) -> None:
    async def scenario() -> None:
        s = await play()
        await s.rt.aclose()

        assert_log_invariants(s.agent.session, s.accepted, s.queued(), s.followups)
        assert s.inserted == s.accepted
        durable = [
            message_id
            for r in records(s.agent.session)
            if r["type"] == "inbox/discarded"
            for message_id in r["data"]["ids"]
        ]
        assert durable == s.discarded
        assert_durable_log_clean(s.agent.session)
        assert Session.from_jsonl(s.agent.session.to_jsonl()).events == s.agent.session.events

    run(scenario())


# --- the durable session of a real run -----------------------------------------------------------


def test_a_real_run_round_trips_through_session_jsonl(tmp_path: Path) -> None:
    async def scenario() -> None:
        gate = Gate("tool")
        stuck = Gate("model")
        model = ScriptedModel([ASKS_FOR_TOOL, Reply("steered"), Wait(stuck, Reply("never"))])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", [Wait(gate, {"lines": 2})])])
        path = tmp_path / "a1.jsonl"
        agent = (await rt.create_agent("a1", Session(path))).agent
        agent.followup(UserMessage("m1", "look it up ✓"))
        await gate.reached.wait()
        agent.steer(UserMessage("s1", "the other file"))
        gate.open()
        await agent.when_idle()
        agent.followup(UserMessage("m2", "and this"))
        await stuck.reached.wait()
        agent.cancel()
        await agent.when_idle()

        assert outcomes(agent.session) == {1: COMPLETED, 2: ABORTED}
        assert Session.from_jsonl(agent.session.to_jsonl()).events == agent.session.events
        assert Session.load(path).events == agent.session.events  # flushed after each turn
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


# --- maintenance ---------------------------------------------------------------------------------


def test_maintenance_gets_a_live_signal_while_it_owns_the_idle_agent() -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel())
        agent = (await rt.create_agent("a1")).agent
        seen: list[tuple[str, bool]] = []

        async def task(signal: AbortSignal) -> None:
            assert isinstance(signal, AbortSignal)
            seen.append((agent.phase, signal.aborted))

        await agent.run_maintenance(task)

        assert seen == [("maintenance", False)]
        assert agent.phase == "idle"
        await rt.aclose()

    run(scenario())


def test_maintenance_returns_or_raises_what_its_task_did_once_the_agent_is_idle_again() -> None:
    """As the original's ``runMaintenance``: the job's own result, after the agent is idle."""

    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel())
        agent = (await rt.create_agent("a1")).agent

        async def compact(signal: AbortSignal) -> dict[str, int]:
            return {"compacted": 3}

        async def broken(signal: AbortSignal) -> None:
            raise LookupError("index missing")

        assert await agent.run_maintenance(compact) == {"compacted": 3}
        assert agent.phase == "idle"
        with pytest.raises(LookupError, match=r"^index missing$"):
            await agent.run_maintenance(broken)
        assert agent.phase == "idle"
        await rt.aclose()

    run(scenario())


def test_cancel_aborts_maintenance() -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel())
        agent = (await rt.create_agent("a1")).agent
        gate = Gate("maintenance")
        reasons: list[object] = []

        async def task(signal: AbortSignal) -> None:
            try:
                await gate.wait(signal)
            finally:
                reasons.append(signal.reason)

        job = asyncio.ensure_future(agent.run_maintenance(task))
        await gate.reached.wait()
        agent.cancel()

        with pytest.raises(Aborted):
            await job
        assert reasons == [USER]
        assert agent.phase == "idle"
        await agent.when_idle()
        await rt.aclose()

    run(scenario())


def test_dispose_aborts_maintenance_with_the_disposed_reason() -> None:
    async def scenario() -> None:
        rt = Runtime(model=ScriptedModel())
        handle = await rt.create_agent("a1")
        gate = Gate("maintenance")
        reasons: list[object] = []

        async def task(signal: AbortSignal) -> None:
            try:
                await gate.wait(signal)
            finally:
                reasons.append(signal.reason)

        job = asyncio.ensure_future(handle.agent.run_maintenance(task))
        await gate.reached.wait()
        await handle.dispose()

        with pytest.raises(Aborted):
            await job
        assert reasons == [DISPOSED]
        assert handle.agent.phase == "disposed"
        await rt.aclose()

    run(scenario())


def test_maintenance_on_a_running_agent_is_rejected() -> None:
    async def scenario() -> None:
        gate = Gate("model")
        rt = Runtime(model=ScriptedModel([Wait(gate, Reply("done"))]))
        agent = (await rt.create_agent("a1")).agent
        ran: list[AbortSignal] = []

        async def task(signal: AbortSignal) -> None:
            ran.append(signal)

        agent.followup(UserMessage("m1", "hello"))
        scheduled = "a driver is scheduled; maintenance needs an idle agent with no driver pending"
        with pytest.raises(Rejected, match=exactly(scheduled)):
            await agent.run_maintenance(task)
        await gate.reached.wait()
        with pytest.raises(
            Rejected, match=exactly("the agent is busy; maintenance needs an idle agent")
        ):
            await agent.run_maintenance(task)

        gate.open()
        await agent.when_idle()
        assert ran == []
        assert outcomes(agent.session) == {1: COMPLETED}
        assert_durable_log_clean(agent.session)
        await rt.aclose()

    run(scenario())


def test_a_turn_whose_prompt_a_turn_start_observer_removed_runs_with_nothing_claimed() -> None:
    """The empty turn (specs/README.md): the turn opened before its claim, so it runs its steps
    with nothing claimed, and its request carries the conversation so far and nothing new."""

    async def scenario() -> None:
        model = ScriptedModel([Reply("first"), Reply("unprompted")])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hello"))
        await agent.when_idle()
        rt.events.on("turn/start", lambda p: p.agent.inbox.remove("m2"))
        agent.followup(UserMessage("m2", "never said"))
        await agent.when_idle()
        await rt.aclose()

        events = [(e.type, e.to_json()["data"]) for e in agent.session.events]
        assert events[events.index(("turn/start", {"turn": 2})) :] == [
            ("turn/start", {"turn": 2}),
            ("inbox/discarded", {"ids": ["m2"]}),
            ("step/start", {"turn": 2, "step": 1}),
            ("assistant/message", {"turn": 2, "step": 1, "text": "unprompted"}),
            ("step/end", {"turn": 2, "step": 1}),
            ("turn/end", {"turn": 2, "outcome": {"kind": "completed"}}),
        ]
        request = model.requests[1][0]
        assert [dict(message) for message in request.messages] == [
            {"role": "user", "id": "m1", "text": "hello"},
            {"role": "assistant", "text": "first", "tool_calls": ()},
        ]

    asyncio.run(scenario())
