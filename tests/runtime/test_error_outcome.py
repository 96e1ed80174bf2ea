"""What a durable ``error`` outcome carries: the step and a classification code, nothing else.

Each of the runtime's error paths ends the turn with ``{"kind": "error", "step": N, "code": C}``
where ``N`` is the turn's last ``step/start`` in the log (0 when none opened) and ``C`` the
path's class of failure (:data:`~fsm_core.runtime.ERROR_CODES`). The exception's text never
reaches the log. A failing tool or a notification listener's exception does not end the turn,
so neither has a code.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from fsm_core.runtime import (
    ERROR_CODES,
    AbortSignal,
    Reply,
    Request,
    Runtime,
    Session,
    SessionError,
    ToolCall,
    UserMessage,
)
from fsm_core.testing import Fail, Gate, ScriptedModel, ScriptedTool, Wait

pytestmark = pytest.mark.timeout(30)

SECRET = "do-not-persist"
CALL = ToolCall("c1", "lookup", {"q": "notes"})
ASKS_FOR_TOOL = Reply("let me look", (CALL,), finish="tool_calls")


class Boom(BaseException):
    """Like ``KeyboardInterrupt``: a ``BaseException`` that is not an ``Exception``."""


class Raw:
    """A model adapter that answers ``reply`` as it is, whatever its type."""

    def __init__(self, *replies: object) -> None:
        self.replies = list(replies)

    async def generate(self, request: Request, signal: AbortSignal) -> Any:
        return self.replies.pop(0)


def error(step: int, code: str) -> dict[str, Any]:
    return {"kind": "error", "step": step, "code": code}


def ends(session: Session) -> list[Any]:
    return [e.to_json()["data"]["outcome"] for e in session.events if e.type == "turn/end"]


def fails_on(listener_seam: str, at_step: int = 1) -> Callable[[Runtime], None]:
    """Install a waterfall listener of ``listener_seam`` that raises on step ``at_step``."""

    def install(rt: Runtime) -> None:
        async def listener(payload: Any, next_: Callable[[Any], Awaitable[Any]]) -> Any:
            if getattr(payload, "step", at_step) == at_step:
                raise RuntimeError(SECRET)
            return await next_(payload)

        rt.events.on(listener_seam, listener)

    return install


def nothing(_rt: Runtime) -> None:
    pass


def raising_request_error(rt: Runtime) -> None:
    async def listener(payload: Any, next_: Any) -> Any:
        raise RuntimeError(SECRET)

    rt.events.on("agent/request-error", listener)


def cancelled_error_at_pre_step(rt: Runtime) -> None:
    async def listener(payload: Any, next_: Any) -> Any:
        raise asyncio.CancelledError  # a seam's own fault, not the driver's cancellation

    rt.events.on("agent/pre-step", listener)


PATHS: list[Any] = [
    pytest.param([Fail(RuntimeError(SECRET))], nothing, error(1, "model-failed"), id="model"),
    pytest.param(
        [ASKS_FOR_TOOL, Fail(RuntimeError(SECRET))],
        nothing,
        error(2, "model-failed"),
        id="model-on-step-2",
    ),
    pytest.param(
        [Fail(RuntimeError("first")), Fail(RuntimeError(SECRET))],
        raising_request_error,
        error(1, "seam-failed"),
        id="request-error-listener",
    ),
    pytest.param([Reply("x")], fails_on("agent/pre-step"), error(0, "seam-failed"), id="pre-step"),
    pytest.param(
        [ASKS_FOR_TOOL, Reply("x")],
        fails_on("agent/pre-step", at_step=2),
        error(1, "seam-failed"),
        id="pre-step-of-step-2",
    ),
    # Assembly runs before its step opens (issue 11, item 3): a failure there opened no step.
    pytest.param([Reply("x")], fails_on("agent/assemble"), error(0, "seam-failed"), id="assemble"),
    # Request configuration runs inside its step: a failure there ends the step it opened.
    pytest.param([Reply("x")], fails_on("agent/request"), error(1, "seam-failed"), id="request"),
    pytest.param(
        [ASKS_FOR_TOOL], fails_on("agent/tool-approval"), error(1, "seam-failed"), id="approval"
    ),
    pytest.param(
        [ASKS_FOR_TOOL, Reply("done")],
        fails_on("agent/turn-stopping"),
        error(2, "seam-failed"),
        id="turn-stopping",
    ),
    pytest.param(
        [Reply("x")], cancelled_error_at_pre_step, error(0, "seam-failed"), id="seam-cancelled"
    ),
]


@pytest.mark.parametrize(("script", "install", "outcome"), PATHS)
def test_each_error_path_records_its_step_and_code(
    script: Sequence[Any], install: Callable[[Runtime], None], outcome: dict[str, Any]
) -> None:
    async def main() -> None:
        rt = Runtime(model=ScriptedModel(script), tools=[ScriptedTool("lookup", [{"n": 1}])])
        install(rt)
        seen: list[Any] = []
        rt.events.on("turn/end", lambda e: seen.append(dict(e.outcome)))
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        assert ends(agent.session) == [outcome]
        assert seen == [outcome], "turn/end observers see the durable outcome"
        assert SECRET not in agent.session.to_jsonl()
        await rt.aclose()

    asyncio.run(main())


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param("just text", id="not-a-reply"),
        pytest.param(Reply("x", finish="weird"), id="unknown-finish"),  # type: ignore[arg-type]
        pytest.param(Reply(42), id="text-not-a-string"),  # type: ignore[arg-type]
        pytest.param(
            Reply("x", ("c1",), finish="tool_calls"),  # type: ignore[arg-type]
            id="tool-call-not-a-tool-call",
        ),
        pytest.param(
            Reply("x", (ToolCall("c1", "lookup", {"q": {1, 2}}),), finish="tool_calls"),
            id="tool-args-the-log-cannot-hold",
        ),
    ],
)
def test_a_reply_the_turn_cannot_use_is_an_invalid_reply(reply: object) -> None:
    async def main() -> None:
        rt = Runtime(model=Raw(reply), tools=[ScriptedTool("lookup", [{"n": 1}])])
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        assert ends(agent.session) == [error(1, "invalid-reply")]
        await rt.aclose()

    asyncio.run(main())


def test_a_failing_tool_or_notification_listener_does_not_end_the_turn_in_error() -> None:
    async def main() -> None:
        model = ScriptedModel([ASKS_FOR_TOOL, Reply("done")])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", [Fail(RuntimeError(SECRET))])])

        def raising(_payload: Any) -> None:
            raise RuntimeError(SECRET)

        rt.events.on("step/start", raising)
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        assert ends(agent.session) == [{"kind": "completed"}]
        await rt.aclose()

    asyncio.run(main())


def test_a_listener_escape_before_the_first_step_halts_with_step_0() -> None:
    """A ``turn/start`` listener's BaseException is held until the claim's row completed,
    then halts the driver: the open turn ends as ``halted`` at step 0."""

    async def main() -> None:
        rt = Runtime(model=ScriptedModel([Reply("never")]))
        raised: list[int] = []

        def escape(_payload: Any) -> None:
            if not raised:
                raised.append(1)
                raise Boom

        rt.events.on("turn/start", escape)
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        (driver,) = [t for t in asyncio.all_tasks() if t.get_name() == "driver a1"]
        with pytest.raises(Boom):
            await driver
        await agent.when_idle()
        assert ends(agent.session) == [error(0, "halted")]
        await rt.aclose()

    asyncio.run(main())


def test_an_aborted_turn_carries_no_code_even_when_its_seam_raised() -> None:
    """The table classifies an aborted holder as aborted; the code of the seam's failure is
    dropped and does not leak into the next error."""

    async def main() -> None:
        gate = Gate("model")
        model = ScriptedModel([Wait(gate, Fail(RuntimeError(SECRET))), Fail(RuntimeError("x"))])
        rt = Runtime(model=model)
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await gate.reached.wait()
        agent.cancel()
        await agent.when_idle()
        agent.followup(UserMessage("m2", "again"))
        await agent.when_idle()
        assert ends(agent.session) == [{"kind": "aborted"}, error(1, "model-failed")]
        await rt.aclose()

    asyncio.run(main())


def test_every_code_has_a_path_here() -> None:
    codes = {p.values[2]["code"] for p in PATHS} | {"invalid-reply", "halted"}
    assert codes == set(ERROR_CODES)


# --- the step is checked against the log ----------------------------------------------------

NAMES_ITS_STEP = "(a durable error names its turn's last step/start, 0 when it opened none)"


def failed_at_step_2() -> Session:
    """A log the runtime wrote: turn 1 fails in step 2's request (``model-failed`` at step 2)."""

    async def main() -> Session:
        model = ScriptedModel([ASKS_FOR_TOOL, Fail(RuntimeError(SECRET))])
        rt = Runtime(model=model, tools=[ScriptedTool("lookup", [{"n": 1}])])
        agent = (await rt.create_agent("a1")).agent
        agent.followup(UserMessage("m1", "hi"))
        await agent.when_idle()
        await rt.aclose()
        return agent.session

    return asyncio.run(main())


def test_a_log_whose_error_names_another_step_refuses_to_load_naming_the_line(
    tmp_path: Path,
) -> None:
    session = failed_at_step_2()
    assert ends(session) == [error(2, "model-failed")]
    path = tmp_path / "a1.jsonl"
    session.save(path)
    assert Session.load(path).events == session.events  # as the runtime wrote it, it loads

    lines = path.read_text().splitlines(keepends=True)
    (line,) = [n for n, text in enumerate(lines, 1) if '"type":"turn/end"' in text]
    path.write_text("".join(lines).replace('"step":2},"turn":1}', '"step":1},"turn":1}'))
    with pytest.raises(SessionError) as raised:
        Session.load(path)
    assert str(raised.value) == (
        f"{path}: line {line}: turn/end: the error outcome of turn 1 names step 1, but its last "
        f"step/start is step 2 {NAMES_ITS_STEP}"
    )


def test_an_error_naming_a_step_its_turn_never_opened_is_refused_by_seed_and_append() -> None:
    records = [
        {"seq": 0, "type": "turn/start", "data": {"turn": 1}},
        {"seq": 1, "type": "turn/end", "data": {"turn": 1, "outcome": error(1, "halted")}},
    ]
    fault = (
        "turn/end: the error outcome of turn 1 names step 1, but it opened no step since the "
        f"last turn boundary {NAMES_ITS_STEP}"
    )
    with pytest.raises(SessionError, match=rf"^<seed>: event 1: {re.escape(fault)}$"):
        Session.seed(records)

    session = Session()
    session.append("turn/start", {"turn": 1})
    with pytest.raises(SessionError, match=rf"^<session>: event 1: {re.escape(fault)}$"):
        session.append("turn/end", {"turn": 1, "outcome": error(1, "halted")})
    assert len(session.events) == 1  # nothing recorded
    session.append("turn/end", {"turn": 1, "outcome": error(0, "halted")})  # the true step


def test_the_step_an_error_names_is_its_own_turns_since_the_last_boundary() -> None:
    """A step/start of another turn, or before the turn's own turn/start, does not count."""
    session = Session()
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 3})
    session.append("turn/end", {"turn": 1, "outcome": {"kind": "completed"}})
    session.append("turn/start", {"turn": 2})
    with pytest.raises(SessionError, match=r"names step 3, but it opened no step"):
        session.append("turn/end", {"turn": 2, "outcome": error(3, "seam-failed")})
    session.append("turn/end", {"turn": 2, "outcome": error(0, "seam-failed")})
    assert Session.from_jsonl(session.to_jsonl()).events == session.events
