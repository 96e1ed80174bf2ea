"""``fsm-core acp`` against hostile clients: huge values to echo, malformed notifications by the
thousand, a client that writes requests and never reads. Each test runs the real agent over
real pipes (or the adapter over a real ``StreamReader``) and asserts the bound that is the
point: bytes written, lines logged, requests read while the client reads nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from fsm_core._errors import ECHO_LIMIT, echo

AGENT = (sys.executable, "-m", "fsm_core.acp")
BIG = "s" * (1 << 20)
"""A megabyte of client input, to be quoted (if at all) in short."""


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
    its message) each come back in a few hundred bytes."""
    data = b"".join(
        [
            _request(1, "session/prompt", {"sessionId": BIG, "prompt": []}),
            _notification("session/cancel", {"sessionId": BIG}),
            _request(2, BIG),
            _request(3, "session/prompt", {"sessionId": {BIG: BIG}, "prompt": []}),
            _request(4, "session/prompt", {"sessionId": "x", "prompt": [{"type": BIG}]}),
            _request(5, "session/prompt", {"sessionId": "x", "prompt": [{"type": "x"}] * 5000}),
        ]
    )
    done = _run(data)
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    answers = [json.loads(line) for line in lines]
    assert [(a["id"], a["error"]["code"]) for a in answers] == [
        (1, -32602),
        (2, -32601),
        (3, -32602),
        (4, -32602),
        (5, -32602),
    ]
    assert max(len(line) for line in lines) < 4200, [len(line) for line in lines]
    details = answers[0]["error"]["data"]["details"]
    assert details == "no session " + echo(BIG)
    assert len(details) <= len("no session ") + ECHO_LIMIT
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
