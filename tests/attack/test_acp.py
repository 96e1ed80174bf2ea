"""``fsm-core acp`` against hostile clients: huge values to echo, malformed notifications by the
thousand, a client that writes requests and never reads. Each test runs the real agent over
real pipes (or the adapter over a real ``StreamReader``) and asserts the bound that is the
point: bytes written, lines logged, requests read while the client reads nothing."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fsm_core._errors import ECHO_LIMIT, echo
from fsm_core.acp import EchoModel, serve
from fsm_core.acp._lines import ANSWER_LIMIT, LINE_LIMIT, READ_LIMIT

AGENT = (sys.executable, "-m", "fsm_core.acp")
BIG = "s" * (1 << 20)
"""A megabyte of client input, to be quoted (if at all) in short."""
WIDE = {f"k{i}": {f"j{j}": "v" * 400 for j in range(8)} for i in range(8)}
"""An input that is still over ERROR_LIMIT once each part is bounded (64 echoed strings)."""


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def _request(rid: int, method: str, params: Any = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return _line(message)


def _notification(method: str, params: Any) -> bytes:
    return _line({"jsonrpc": "2.0", "method": method, "params": params})


def _run(data: bytes) -> subprocess.CompletedProcess[bytes]:
    """The agent given ``data`` on stdin, which then closes."""
    return subprocess.run(AGENT, input=data, capture_output=True, check=False, timeout=60)


@pytest.mark.timeout(90)
def test_a_megabyte_of_client_input_is_quoted_in_short_in_answers_and_logs() -> None:
    """An unknown 1 MB session id (a prompt, a cancel), a 1 MB method name, and 1 MB values
    pydantic refuses (its error quotes the input, its location and, for a bad tag, the tag in
    its message) each come back in a few hundred bytes, an error in at most ERROR_LIMIT."""
    data = b"".join(
        [
            _request(1, "session/prompt", {"sessionId": BIG, "prompt": []}),
            _notification("session/cancel", {"sessionId": BIG}),
            _request(2, BIG),
            _request(3, "session/prompt", {"sessionId": {BIG: BIG}, "prompt": []}),
            _request(4, "session/prompt", {"sessionId": "x", "prompt": [{"type": BIG}]}),
            _request(5, "session/prompt", {"sessionId": "x", "prompt": [{"type": "x"}] * 5000}),
            _request(6, "session/prompt", {"sessionId": WIDE, "prompt": []}),
        ]
    )
    done = _run(data)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    answers = [json.loads(line) for line in lines]
    assert [(a["id"], a["error"]["code"]) for a in answers] == [
        (1, -32002),  # no such session: ACP's "Resource not found"
        (2, -32601),
        (3, -32602),
        (4, -32602),
        (5, -32602),
        (6, -32602),
    ]
    assert max(len(line) for line in lines) < 4200, [len(line) for line in lines]
    details = answers[0]["error"]["data"]["details"]
    assert details == "no session " + echo(BIG)
    assert len(details) <= len("no session ") + ECHO_LIMIT
    wide = answers[5]["error"]["data"]  # over ERROR_LIMIT once bounded: echoed whole
    assert isinstance(wide, str) and len(wide) <= ECHO_LIMIT
    assert len(done.stderr) < 200 and done.stderr.count(b"\n") == 1  # the unknown session
    assert b"s" * (ECHO_LIMIT + 1) not in done.stdout + done.stderr


@pytest.mark.timeout(90)
def test_a_thousand_malformed_notifications_log_one_short_line_each() -> None:
    """Five kinds of malformed notification, 200 of each: no traceback, one line apiece."""
    kinds = [
        _notification("session/cancel", {}),
        _notification("session/cancel", {"sessionId": {"k": "x" * 10_000}}),
        _notification("session/cancel", ["not", "an", "object"]),
        _notification("no/such/" + "m" * 10_000, {}),
        _notification("session/prompt", {"sessionId": "session-1", "prompt": []}),
    ]
    data = b"".join(kinds * 200) + _request(1, "initialize", {"protocolVersion": 1})
    done = _run(data)
    assert done.returncode == 0
    assert json.loads(done.stdout)["id"] == 1
    logged = done.stderr.decode().splitlines()
    assert b"Traceback" not in done.stderr
    assert len(logged) == 1000, logged[:3]
    assert max(len(line) for line in logged) <= 200
    assert logged[:5] == [
        "ignored notification #1, 'session/cancel': sessionId: Field required",
        "ignored notification #2, 'session/cancel': sessionId: Input should be a valid string",
        "ignored notification #3, 'session/cancel': params: Input should be a valid dictionary"
        " or instance of CancelNotification",
        "ignored notification #4, 'no/such/" + "m" * 29 + "..." + "m" * 38 + "': not served",
        "ignored notification #5, 'session/prompt': not served",
    ]
    assert logged[-1].startswith("ignored notification #1000, ")


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")  # pragma: no cover


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
@pytest.mark.timeout(180)
# 160,000 requests, four times as many, read no more than 40,000 do: CI's slow stage shows
# it; every change runs the 40,000, the same code.
@pytest.mark.parametrize("count", [40_000, pytest.param(160_000, marks=pytest.mark.slow)])
def test_a_client_that_never_reads_is_held_back_and_every_request_is_answered(
    count: int,
) -> None:
    """A client writes ``count`` requests and reads nothing. The agent stops reading its
    stdin once ANSWER_LIMIT answers wait, so the client's writes block before it has sent
    them all (they are megabytes; the agent holds at most a few hundred KB of input), the
    agent has read a number of requests that does not grow with ``count``, and its memory
    has not grown. Once the client reads, every request is answered, none dropped."""
    process = subprocess.Popen(
        AGENT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    try:
        stdin.write(_request(0, "initialize", {"protocolVersion": 1}))
        stdin.flush()
        assert json.loads(stdout.readline())["id"] == 0
        before = _rss_kb(process.pid)

        flood = b"".join(_request(rid, "no/such/method") for rid in range(1, count + 1))
        # Far more than the agent buffers: twice READ_LIMIT, one read, the pipe's 64 KiB.
        assert len(flood) > 4 * (2 * READ_LIMIT + (256 << 10) + (64 << 10))
        events: queue.Queue[str] = queue.Queue()

        def write() -> None:
            stdin.write(flood)
            stdin.flush()
            events.put("the client wrote every request")

        def log() -> None:
            for line in stderr:
                events.put(line.decode())

        threading.Thread(target=write, daemon=True).start()
        threading.Thread(target=log, daemon=True).start()
        paused = events.get()  # the writer blocks for good unless the agent reads it all
        found = re.fullmatch(
            rf"the client is not reading; reading no more requests while {ANSWER_LIMIT} "
            r"answers wait \((\d+) messages read\)\n",
            paused,
        )
        assert found is not None, paused
        assert int(found[1]) < 4 * ANSWER_LIMIT + (256 << 10) // 80
        grown = _rss_kb(process.pid) - before
        assert grown < 16 << 10, f"{grown} KB"

        answered = {json.loads(stdout.readline())["id"] for _ in range(count)}
        assert answered == set(range(1, count + 1))
        assert events.get() == "the client wrote every request"
        stdin.close()
        assert process.wait(timeout=60) == 0
        assert events.get().startswith(
            "the client was slow to read (progress updates dropped: 0, reading paused: "
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.timeout(60)
def test_a_line_past_the_line_limit_is_refused_and_lines_past_the_read_limit_are_served() -> None:
    """Input is read in pieces of READ_LIMIT: a request longer than that is served whole,
    one longer than LINE_LIMIT is refused, and the agent reads on."""
    long_text = "t" * (3 * READ_LIMIT)
    prompt = {"sessionId": "session-1", "prompt": [{"type": "text", "text": long_text}]}
    data = b"".join(
        [
            _request(1, "session/new", {"cwd": "/", "mcpServers": []}),
            _request(2, "session/prompt", prompt),
            b" " * (LINE_LIMIT + 1) + b"\n",
            b"x" * (LINE_LIMIT + 1) + b"\n",
            _request(3, "initialize", {"protocolVersion": 1}),
        ]
    )

    async def main() -> list[dict[str, Any]]:
        reader = asyncio.StreamReader(limit=READ_LIMIT)
        written: list[bytes] = []

        async def write(data: bytes) -> None:
            written.append(data)

        reader.feed_data(data)
        reader.feed_eof()
        await serve(EchoModel(), (reader, write))
        return [json.loads(line) for line in written]

    out = asyncio.run(main())
    texts = [m["params"]["update"]["content"]["text"] for m in out if "method" in m]
    assert texts[-1] == "echo: " + long_text
    answers = [(m["id"], m.get("error", {}).get("code")) for m in out if "method" not in m]
    assert sorted(answers, key=repr) == [(1, None), (2, None), (3, None)] + [(None, -32600)] * 2
    assert [m["error"]["data"] for m in out if m.get("id", 0) is None] == [
        {"details": f"a message longer than {LINE_LIMIT} bytes"}
    ] * 2


@pytest.mark.parametrize("stdout_to", ["/dev/null", "a file"])
def test_stdin_from_dev_null_ends_the_agent_at_once(tmp_path: Path, stdout_to: str) -> None:
    """``fsm-core acp < /dev/null`` hung, printing a traceback: the event loop cannot watch
    /dev/null (epoll refuses it) and found that out only after the transport was made."""
    out = Path(os.devnull) if stdout_to == "/dev/null" else tmp_path / "out"
    with open(os.devnull, "rb") as stdin, out.open("wb") as stdout:
        done = subprocess.run(
            AGENT, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, check=False, timeout=60
        )
    assert (done.returncode, done.stderr) == (0, b"")


def test_requests_from_a_file_are_answered_into_a_file(tmp_path: Path) -> None:
    """Neither end a pipe: stdin read by a thread, stdout written as a file is."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_request(1, "initialize", {"protocolVersion": 1}))
    with requests.open("rb") as stdin, (tmp_path / "out").open("wb") as stdout:
        done = subprocess.run(
            AGENT, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, check=False, timeout=60
        )
    assert (done.returncode, done.stderr) == (0, b"")
    (answer,) = (tmp_path / "out").read_bytes().splitlines()
    assert json.loads(answer)["result"]["protocolVersion"] == 1
