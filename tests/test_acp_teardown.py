"""The ACP adapter's teardown holes found by review: each test failed before its fix."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from acp.schema import CloseSessionResponse, TextContentBlock

from fsm_core.acp import AcpAgent, EchoModel, serve
from fsm_core.acp._adapter import _serve
from fsm_core.acp._lines import LINE_LIMIT, UPDATE_LIMIT, Lines
from fsm_core.runtime import USER, Hooks

pytestmark = pytest.mark.timeout(30)


def test_aclose_answers_a_prompt_no_turn_claimed_cancelled() -> None:
    async def main() -> None:
        agent = AcpAgent(EchoModel())
        sid = (await agent.new_session("/")).session_id
        queued = asyncio.Event()
        agent.runtime(sid).events.on("inbox/inserted", lambda _e: queued.set())
        prompt = asyncio.ensure_future(
            agent.prompt(sid, [TextContentBlock(type="text", text="hi")])
        )
        await queued.wait()  # queued; its turn has not claimed it yet
        await agent.aclose()
        assert (await prompt).stop_reason == "cancelled"

    asyncio.run(main())


def test_a_session_cancel_is_the_users_cancel() -> None:
    """``session/cancel`` is a person asking to stop (seed 000): the agent's cancel carries
    ``USER``, never ``PARENT``, and the prompt it cut answers ``cancelled``."""

    async def main() -> None:
        agent = AcpAgent(EchoModel())
        sid = (await agent.new_session("/")).session_id
        queued = asyncio.Event()
        causes: list[object] = []
        agent.runtime(sid).events.on("inbox/inserted", lambda _e: queued.set())
        agent.runtime(sid).events.on("agent/cancel-requested", lambda e: causes.append(e.cause))
        prompt = asyncio.ensure_future(
            agent.prompt(sid, [TextContentBlock(type="text", text="hi")])
        )
        await queued.wait()  # queued, its driver scheduled: a pre-run cancel is effective
        await agent.cancel(sid)
        assert (await prompt).stop_reason == "cancelled"
        assert causes == [USER]
        await agent.aclose()

    asyncio.run(main())


def test_two_racing_closes_of_one_session_both_succeed() -> None:
    async def main() -> None:
        agent = AcpAgent(EchoModel())
        sid = (await agent.new_session("/")).session_id
        both = await asyncio.gather(agent.close_session(sid), agent.close_session(sid))
        assert list(both) == [CloseSessionResponse(), CloseSessionResponse()]
        await agent.aclose()

    asyncio.run(main())


def _served(data: bytes, model: EchoModel) -> list[dict[str, Any]]:
    """Every message the agent writes when the client sends ``data`` and closes stdin."""

    async def main() -> list[dict[str, Any]]:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        written: list[bytes] = []

        async def write(data: bytes) -> None:
            written.append(data)

        reader.feed_data(data)
        reader.feed_eof()
        await serve(model, (reader, write))
        return [json.loads(line) for line in written]

    return asyncio.run(main())


def test_a_deeply_nested_line_is_refused_and_the_agent_goes_on_serving() -> None:
    params: dict[str, Any] = {"cwd": "/", "mcpServers": []}
    new = {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": params}
    deep = b"[" * 200_000 + b"]" * 200_000 + b"\n"
    answers = _served(deep + json.dumps(new).encode() + b"\n", EchoModel())
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700),
        (2, None),
    ]
    assert answers[0]["error"]["data"] == {"details": "a line nested too deeply to parse"}


def _request(rid: int, method: str, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()


NEW = _request(1, "session/new", cwd="/", mcpServers=[])


def _prompt(rid: int, text: str) -> bytes:
    return _request(
        rid, "session/prompt", sessionId="session-1", prompt=[{"type": "text", "text": text}]
    )


def test_a_prompt_read_before_stdin_closed_is_answered_cancelled() -> None:
    """The client sends a prompt and closes stdin at once: the prompt still gets its answer."""
    served = _served(NEW + b"\n" + _prompt(2, "hold") + b"\n", EchoModel(hold="hold"))
    answers = {a["id"]: a for a in served if "id" in a}
    assert answers[2]["result"] == {"stopReason": "cancelled"}


def test_a_cancel_does_not_wait_for_a_client_that_stopped_reading() -> None:
    """A client stops reading stdout: the turn's progress update cannot be written, yet the
    client's ``session/cancel`` ends the turn at once; the answers go out once it reads."""

    async def main() -> list[dict[str, Any]]:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        written: list[bytes] = []
        wrote = asyncio.Event()
        reading = asyncio.Event()
        reading.set()
        stuck = asyncio.Event()  # a write is waiting for the client to read

        async def write(data: bytes) -> None:
            if not reading.is_set():
                stuck.set()
                await reading.wait()
            written.append(data)
            wrote.set()

        agent = AcpAgent(EchoModel(hold="hold"))
        ended: list[str] = []
        turn_ended = asyncio.Event()

        def on_end(event: Any) -> None:
            ended.append(str(event.outcome["kind"]))
            turn_ended.set()

        serving = asyncio.ensure_future(_serve(agent, reader, write))
        reader.feed_data(NEW + b"\n")
        await wrote.wait()  # the session exists once its answer is written
        agent.runtime("session-1").events.on("turn/end", on_end)
        reading.clear()  # the client stops reading
        reader.feed_data(_prompt(2, "hold") + b"\n")
        await stuck.wait()  # the turn's first update is waiting for the client
        cancel = {
            "jsonrpc": "2.0",
            "method": "session/cancel",
            "params": {"sessionId": "session-1"},
        }
        reader.feed_data(json.dumps(cancel).encode() + b"\n")
        await turn_ended.wait()  # before the client read anything more
        assert not reading.is_set() and ended == ["aborted"]
        reading.set()
        reader.feed_eof()
        await serving
        return [json.loads(line) for line in written]

    answers = asyncio.run(main())
    assert [a.get("id") for a in answers] == [1, None, 2]
    assert answers[1]["params"]["update"]["content"]["text"] == "step 1"
    assert answers[2]["result"] == {"stopReason": "cancelled"}


def _chunk(kind: str, text: str) -> dict[str, Any]:
    update = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    return {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s", "update": update},
    }


def _not_read() -> tuple[Lines, asyncio.Event, list[bytes]]:
    """Output to a client that reads (into the list) only once the event is set."""
    reading = asyncio.Event()
    written: list[bytes] = []

    async def write(data: bytes) -> None:
        await reading.wait()
        written.append(data)

    return Lines(asyncio.StreamReader(), write, at_end=lambda: None), reading, written


def test_updates_for_a_client_that_stopped_reading_are_bounded_merged_then_dropped() -> None:
    """Past UPDATE_LIMIT waiting updates, a text chunk joins the last one waiting of its
    session and kind; an update of another kind is dropped; answers are never dropped."""

    async def main() -> list[dict[str, Any]]:
        lines, reading, written = _not_read()
        for i in range(UPDATE_LIMIT):
            await lines.send(_chunk("agent_message_chunk", f"{i},"))
        await lines.send(_chunk("agent_message_chunk", "more"))  # merged into the last
        await lines.send(_chunk("agent_thought_chunk", "step 2"))  # dropped
        answer = asyncio.ensure_future(lines.send({"jsonrpc": "2.0", "id": 7, "result": {}}))
        reading.set()
        await answer
        await lines.finish()
        return [json.loads(line) for line in written]

    out = asyncio.run(main())
    texts = [m["params"]["update"]["content"]["text"] for m in out[:-1]]
    assert len(texts) == UPDATE_LIMIT
    assert texts[-1] == f"{UPDATE_LIMIT - 1},more"
    assert out[-1] == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_a_prompt_with_a_lone_surrogate_is_answered_and_the_agent_still_exits() -> None:
    """JSON's ``"\\ud800"`` is a lone surrogate, which UTF-8 cannot encode: the echo's update
    and the answer go out escaped, and the writer does not die holding every answer."""

    async def main() -> list[dict[str, Any]]:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        written: list[bytes] = []
        answered = asyncio.Event()

        async def write(data: bytes) -> None:
            written.append(data)
            if json.loads(data).get("id") == 2:
                answered.set()

        serving = asyncio.ensure_future(serve(EchoModel(), (reader, write)))
        reader.feed_data(NEW + b"\n" + _prompt(2, "\ud800") + b"\n")
        await answered.wait()
        reader.feed_eof()
        await serving
        return [json.loads(line) for line in written]

    out = asyncio.run(main())
    texts = [m["params"]["update"]["content"]["text"] for m in out if "method" in m]
    assert texts[-1] == "echo: \ud800"
    assert out[-1] == {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}


def test_a_request_with_a_null_id_is_answered_before_exit_despite_a_refused_line() -> None:
    """A refusal's id is null too: it must not count as the answer to a request whose id is
    null, or stdin's end would stop the agent before that request is answered."""
    held = json.loads(_prompt(2, "hold"))
    held["id"] = None
    data = NEW + b"\n" + json.dumps(held).encode() + b"\nnot json\n"
    served = _served(data, EchoModel(hold="hold"))
    answers = [(m["id"], m.get("result")) for m in served if "method" not in m]
    assert sorted(answers, key=repr) == [
        (1, {"sessionId": "session-1"}),
        (None, None),  # the refusal
        (None, {"stopReason": "cancelled"}),
    ]


def test_merged_updates_for_a_client_that_stopped_reading_hold_at_most_a_line_of_text() -> None:
    """Merging is bounded too: past LINE_LIMIT characters in the last waiting update, further
    text is dropped (memory stays bounded however long a turn streams)."""

    async def main() -> tuple[list[dict[str, Any]], int]:
        lines, reading, written = _not_read()
        for _ in range(UPDATE_LIMIT):
            await lines.send(_chunk("agent_message_chunk", "x"))
        piece = "y" * (LINE_LIMIT // 4)
        for _ in range(6):
            await lines.send(_chunk("agent_message_chunk", piece))
        reading.set()
        await lines.finish()
        return [json.loads(line) for line in written], lines.dropped

    out, dropped = asyncio.run(main())
    last = out[-1]["params"]["update"]["content"]["text"]
    assert len(out) == UPDATE_LIMIT
    assert last == "x" + "y" * (3 * (LINE_LIMIT // 4))
    assert dropped == 3


def test_a_session_needs_an_absolute_directory_and_its_hooks_get_it_as_their_cwd() -> None:
    """ACP: ``cwd`` is an absolute path; a relative one (or one that is no directory) is
    refused with the schema's Invalid params, and the session's hooks run in it."""
    from acp import RequestError

    async def main() -> None:
        agent = AcpAgent(EchoModel(), hooks=Hooks(stop=["true"]))
        for bad in ("relative/dir", "/no/such/dir/anywhere"):
            with pytest.raises(RequestError) as refused:
                await agent.new_session(bad)
            assert refused.value.code == -32602
        sid = (await agent.new_session("/tmp")).session_id
        assert agent.runtime(sid).hooks.cwd == "/tmp"
        assert agent.runtime(sid).hooks.stop == ("true",)
        await agent.aclose()

    asyncio.run(main())
    with pytest.raises(TypeError, match=r"Hooks\.cwd is a directory path"):
        Hooks(cwd=3)  # type: ignore[arg-type]


def test_a_cancel_request_cancels_only_the_running_prompt_it_names() -> None:
    """``$/cancel_request`` naming a running ``session/prompt`` cancels its turn (answered
    ``cancelled``); one naming another request, or no request, or malformed, is ignored, and
    a request (with an id) of that name is not a method."""
    notes = [
        {"requestId": 99},
        {"requestId": {"no": "such"}},
        {"requestId": [1]},
        {},
        {"requestId": 2},
    ]

    async def main() -> list[dict[str, Any]]:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        written: list[bytes] = []
        stepped = asyncio.Event()
        answered = asyncio.Event()

        async def write(data: bytes) -> None:
            written.append(data)
            message = json.loads(data)
            if message.get("method") == "session/update":
                stepped.set()
            if message.get("id") == 2:
                answered.set()

        serving = asyncio.ensure_future(serve(EchoModel(hold="hold"), (reader, write)))
        reader.feed_data(NEW + b"\n" + _prompt(2, "hold") + b"\n")
        await stepped.wait()  # the prompt's turn is in its model request
        for params in notes:
            note = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": params}
            reader.feed_data(json.dumps(note).encode() + b"\n")
        reader.feed_data(_request(3, "$/cancel_request", requestId=2) + b"\n")
        await answered.wait()
        reader.feed_eof()
        await serving
        return [json.loads(line) for line in written]

    out = asyncio.run(main())
    answers = {m["id"]: m for m in out if "id" in m and "method" not in m}
    assert answers[2]["result"] == {"stopReason": "cancelled"}
    assert answers[3]["error"]["code"] == -32601
