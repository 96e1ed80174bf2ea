"""The durable session: plain JSON events that round-trip through JSONL, and nothing else.

Seed 000 asks for the coarse Session JSON round trip and the rejection of legacy records:
an interrupted turn ends with exactly ``{"kind": "aborted"}``, and loading or seeding a
record with anything beside ``kind`` (or any other fault) rejects the whole input with a
message naming the source and the line. Every message is pinned in full.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
from pathlib import Path
from typing import Any, cast, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm_core import FsmError, UsageError
from fsm_core.runtime._causes import PARENT, USER
from fsm_core.runtime._session import (
    ERROR_CODES,
    EVENT_SHAPES,
    OUTCOME_KINDS,
    EventType,
    FieldType,
    Session,
    SessionError,
    SessionEvent,
)
from fsm_core.runtime._signal import AbortController, Aborted
from tests.helpers import exactly

KNOWN = (
    "turn/start, turn/end, step/start, step/end, user/message, assistant/message, tool/call, "
    "tool/result, inbox/claimed, inbox/discarded"
)
NO_CAUSE = "(a durable outcome never records who cancelled or why)"
NOT_CLASSIFICATION = (
    "field 'result' must be an error classification when ok is false (a short lowercase "
    'token such as "tool-error" or "aborted", never an exception\'s text)'
)


# A realistic turn: a message is claimed, the model calls a tool, then answers.
TURN: list[tuple[EventType, dict[str, Any]]] = [
    ("user/message", {"id": "m1", "text": "what is in notes.txt?"}),
    ("inbox/claimed", {"turn": 1, "ids": ["m1"]}),
    ("turn/start", {"turn": 1}),
    ("step/start", {"turn": 1, "step": 1}),
    ("tool/call", {"turn": 1, "step": 1, "id": "c1", "name": "read", "args": {"path": "n"}}),
    ("tool/result", {"turn": 1, "step": 1, "id": "c1", "ok": True, "result": {"lines": 2}}),
    ("step/end", {"turn": 1, "step": 1}),
    ("step/start", {"turn": 1, "step": 2}),
    ("assistant/message", {"turn": 1, "step": 2, "text": "Two lines: a shopping list."}),
    ("step/end", {"turn": 1, "step": 2}),
    ("turn/end", {"turn": 1, "outcome": {"kind": "completed"}}),
]


def recorded() -> Session:
    session = Session()
    for event_type, data in TURN:
        session.append(event_type, data)
    return session


def jsonl(*records: object) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def good(seq: int) -> dict[str, Any]:
    """A valid record for position ``seq``."""
    return {"seq": seq, "type": "turn/start", "data": {"turn": seq}}


def load(*records: object) -> Session:
    return Session.from_jsonl(jsonl(*records), source="session.jsonl")


# --- the table -------------------------------------------------------------------------------


def test_the_shape_table_declares_every_event_type_and_nothing_else() -> None:
    assert tuple(EVENT_SHAPES) == get_args(EventType)
    assert {t for shape in EVENT_SHAPES.values() for t in shape.values()} == set(
        get_args(FieldType)
    )


@pytest.mark.parametrize(
    "outcome",
    [
        {"kind": "completed"},
        {"kind": "max-tokens"},
        {"kind": "error", "step": 2, "code": "model-failed"},
        {"kind": "aborted"},
        {"kind": "disposed"},
        {"kind": "blocked"},
    ],
    ids=lambda outcome: outcome["kind"],
)
def test_each_durable_outcome_of_design_decision_6_is_recorded(outcome: dict[str, Any]) -> None:
    session = Session()
    session.append("step/start", {"turn": 1, "step": 2})  # the step an error names
    session.append("turn/end", {"turn": 1, "outcome": outcome})
    assert Session.from_jsonl(session.to_jsonl()).events[-1].data["outcome"] == outcome
    assert Session.seed(session.events).events[-1].data["outcome"] == outcome


def test_the_error_codes_are_a_closed_set_of_classifications() -> None:
    assert ERROR_CODES == ("model-failed", "invalid-reply", "seam-failed", "halted")


def test_session_error_is_an_fsm_error() -> None:
    assert issubclass(SessionError, FsmError)


# --- round trip ------------------------------------------------------------------------------


def test_a_turn_round_trips_through_jsonl() -> None:
    session = recorded()
    text = session.to_jsonl()

    loaded = Session.from_jsonl(text)

    assert loaded.events == session.events
    assert loaded.to_jsonl() == text
    assert [event.seq for event in loaded.events] == list(range(len(TURN)))
    assert [(event.type, event.to_json()["data"]) for event in loaded.events] == TURN


def test_jsonl_is_one_compact_sorted_record_per_line() -> None:
    lines = recorded().to_jsonl().split("\n")

    assert (
        lines[0]
        == '{"data":{"id":"m1","text":"what is in notes.txt?"},"seq":0,"type":"user/message"}'
    )
    assert (
        lines[-2] == '{"data":{"outcome":{"kind":"completed"},"turn":1},"seq":10,"type":"turn/end"}'
    )
    assert lines[-1] == ""  # every line ends in "\n"


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    session = recorded()
    path = tmp_path / "session.jsonl"

    session.save(path)

    assert path.read_text(encoding="ascii") == session.to_jsonl()
    assert Session.load(path).events == session.events
    assert session.path is None  # saving does not attach
    assert Session.load(path).path is None  # nor does loading


def test_text_with_line_separators_stays_on_one_line() -> None:
    session = Session()
    session.append("user/message", {"id": "m1", "text": "a\u2028b\x85c\rd\ne\u00e9\U0001f600"})

    text = session.to_jsonl()

    assert text.count("\n") == 1 and text.isascii()
    assert Session.from_jsonl(text).events == session.events


def test_a_final_newline_is_optional_and_empty_text_is_an_empty_session() -> None:
    assert Session.from_jsonl(recorded().to_jsonl().rstrip("\n")).events == recorded().events
    assert len(Session.from_jsonl("").events) == 0


def test_seed_starts_from_recorded_events_and_appends_continue_the_seq() -> None:
    session = recorded()

    from_records = Session.seed(event.to_json() for event in session.events)
    from_events = Session.seed(session.events)

    assert from_records.events == from_events.events == session.events
    assert from_events.append("turn/start", {"turn": 2}).seq == len(TURN)


def test_a_session_with_a_path_flushes_the_whole_log_there_atomically(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    session = Session(path)
    session.append("turn/start", {"turn": 1})

    asyncio.run(session.flush())
    first = path.read_text(encoding="ascii")
    session.append("turn/end", {"turn": 1, "outcome": {"kind": "aborted"}})
    asyncio.run(session.flush())

    assert first == '{"data":{"turn":1},"seq":0,"type":"turn/start"}\n'
    assert path.read_text(encoding="ascii") == session.to_jsonl()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.jsonl"]  # no temp file left


def test_a_session_with_a_path_resumes_the_log_found_there(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    recorded().save(path)

    resumed = Session(path)
    resumed.append("turn/start", {"turn": 2})
    asyncio.run(resumed.flush())

    assert resumed.path == path
    assert Session.load(path).events[: len(TURN)] == tuple(recorded().events)
    assert Session.load(path).events[-1].seq == len(TURN)


def test_flush_without_a_path_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a relative default would land
    session = recorded()
    asyncio.run(session.flush())
    assert list(tmp_path.iterdir()) == []


# --- the coarse outcome ----------------------------------------------------------------------


def test_an_aborted_turn_ends_with_exactly_kind_aborted() -> None:
    session = Session()
    session.append("turn/start", {"turn": 1})
    end = session.append("turn/end", {"turn": 1, "outcome": {"kind": "aborted"}})

    assert end.data["outcome"] == {"kind": "aborted"}
    assert session.to_jsonl().split("\n")[1] == (
        '{"data":{"outcome":{"kind":"aborted"},"turn":1},"seq":1,"type":"turn/end"}'
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(
            {"turn": 1, "outcome": {"kind": "aborted", "reason": "user"}},
            f"turn/end: field 'outcome' must be exactly {{\"kind\": ...}}, but also has 'reason' "
            f"{NO_CAUSE}",
            id="reason-beside-kind",
        ),
        pytest.param(
            {"turn": 1, "outcome": {"kind": "aborted", "cause": {"kind": "parent"}, "at": 3}},
            f"turn/end: field 'outcome' must be exactly {{\"kind\": ...}}, but also has 'at', "
            f"'cause' {NO_CAUSE}",
            id="cause-beside-kind",
        ),
        pytest.param(
            {"turn": 1, "outcome": {"kind": "user"}},
            "turn/end: field 'outcome.kind' is 'user', not one of: completed, max-tokens, "
            "error, aborted, disposed, blocked",
            id="cause-as-kind",
        ),
        pytest.param(
            {"turn": 1, "outcome": USER},
            "turn/end: field 'outcome' must be an outcome {\"kind\": ...}, found UserCause "
            "(not a JSON value)",
            id="cause-object-as-outcome",
        ),
        pytest.param(
            {"turn": 1, "outcome": {"kind": "aborted"}, "cause": "parent"},
            "turn/end: unexpected field 'cause' (turn/end data is exactly: turn, outcome)",
            id="cause-beside-outcome",
        ),
    ],
)
def test_a_user_or_parent_cause_cannot_be_recorded(data: dict[str, Any], message: str) -> None:
    session = Session()
    with pytest.raises(SessionError, match=exactly(f"<session>: event 0: {message}")):
        session.append("turn/end", data)
    assert len(session.events) == 0


# --- the error outcome: where and what class of failure, never the exception --------------------

ERROR_FORM = '{"kind": "error", "step": ..., "code": ...}'
NO_TEXT = (
    "(a durable error records its step and a classification, never an exception's text or stack)"
)


def test_an_error_outcome_records_its_step_and_code_in_one_compact_line() -> None:
    session = Session()
    outcome = {"kind": "error", "step": 0, "code": "halted"}
    end = session.append("turn/end", {"turn": 1, "outcome": outcome})

    assert end.data["outcome"] == outcome
    assert session.to_jsonl() == (
        '{"data":{"outcome":{"code":"halted","kind":"error","step":0},"turn":1},"seq":0,'
        '"type":"turn/end"}\n'
    )


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        pytest.param(
            {"kind": "error"},
            f"field 'outcome' must be exactly {ERROR_FORM}, but has no 'step', 'code'",
            id="legacy-bare-error",
        ),
        pytest.param(
            {"kind": "error", "step": 1},
            f"field 'outcome' must be exactly {ERROR_FORM}, but has no 'code'",
            id="no-code",
        ),
        pytest.param(
            {"kind": "error", "step": 1, "code": "model-failed", "message": "boom"},
            f"field 'outcome' must be exactly {ERROR_FORM}, but also has 'message' {NO_TEXT}",
            id="text-beside-code",
        ),
        pytest.param(
            {"kind": "error", "step": 1, "code": "model-failed", "stack": [], "error": {}},
            f"field 'outcome' must be exactly {ERROR_FORM}, but also has 'error', 'stack' "
            f"{NO_TEXT}",
            id="stack-and-error-object",
        ),
        pytest.param(
            {"kind": "error", "step": 1, "code": "RuntimeError: model down"},
            "field 'outcome.code' is 'RuntimeError: model down', not one of: model-failed, "
            "invalid-reply, seam-failed, halted",
            id="exception-text-as-code",
        ),
        pytest.param(
            {"kind": "error", "step": 1, "code": ["model-failed"]},
            "field 'outcome.code' must be a string, found array",
            id="code-not-a-string",
        ),
        pytest.param(
            {"kind": "error", "step": "1", "code": "seam-failed"},
            "field 'outcome.step' must be an integer, found string",
            id="step-a-string",
        ),
        pytest.param(
            {"kind": "error", "step": True, "code": "seam-failed"},
            "field 'outcome.step' must be an integer, found boolean",
            id="step-a-boolean",
        ),
        pytest.param(
            {"kind": "error", "step": -1, "code": "seam-failed"},
            "field 'outcome.step' is -1; a step number is 0 or more",
            id="step-negative",
        ),
        pytest.param(
            {"kind": "error", "step": 2**53, "code": "seam-failed"},
            "field 'outcome.step' is an integer beyond +-(2**53 - 1), which not every JSON "
            "reader holds exactly",
            id="step-unsafe",
        ),
        pytest.param(
            {"kind": "aborted", "step": 1, "code": "halted"},
            f"field 'outcome' must be exactly {{\"kind\": ...}}, but also has 'code', 'step' "
            f"{NO_CAUSE}",
            id="error-fields-on-aborted",
        ),
        pytest.param(
            {"kind": "completed", "step": 3},
            f"field 'outcome' must be exactly {{\"kind\": ...}}, but also has 'step' {NO_CAUSE}",
            id="step-on-completed",
        ),
    ],
)
def test_an_error_outcome_is_exactly_kind_step_and_a_known_code(
    outcome: dict[str, Any], message: str
) -> None:
    """Append, load and seed refuse the same forms with the same fault."""
    data = {"turn": 1, "outcome": outcome}
    record = {"seq": 0, "type": "turn/end", "data": data}
    with pytest.raises(SessionError, match=exactly(f"<session>: event 0: turn/end: {message}")):
        Session().append("turn/end", data)
    with pytest.raises(SessionError, match=exactly(f"session.jsonl: line 1: turn/end: {message}")):
        load(record)
    with pytest.raises(SessionError, match=exactly(f"<seed>: event 0: turn/end: {message}")):
        Session.seed([record])


def test_no_runtime_object_can_reach_the_log() -> None:
    controller = AbortController()
    controller.abort(PARENT)
    session = Session()

    def result(value: object) -> dict[str, object]:
        return {"turn": 1, "step": 1, "id": "c1", "ok": True, "result": value}

    with pytest.raises(
        SessionError,
        match=exactly(
            "<session>: event 0: tool/result: field 'result' must be a JSON value, found Aborted"
        ),
    ):
        session.append("tool/result", result(Aborted(PARENT)))
    with pytest.raises(
        SessionError,
        match=exactly(
            "<session>: event 0: tool/call: field 'args.signal' must be a JSON value, found "
            "AbortSignal"
        ),
    ):
        session.append(
            "tool/call",
            {"turn": 1, "step": 1, "id": "c1", "name": "x", "args": {"signal": controller.signal}},
        )
    with pytest.raises(
        SessionError,
        match=exactly(
            "<session>: event 0: tool/result: field 'result[0]' must be a JSON value, found "
            "ParentCause"
        ),
    ):
        session.append("tool/result", result([controller.signal.reason]))
    assert len(session.events) == 0


@pytest.mark.parametrize(
    "text",
    ["division by zero", "Traceback (most recent call last):", "ValueError", "", "x" * 65, 42],
)
def test_a_failed_tool_result_is_a_classification_not_exception_text(text: object) -> None:
    session = Session()
    with pytest.raises(
        SessionError, match=exactly(f"<session>: event 0: tool/result: {NOT_CLASSIFICATION}")
    ):
        session.append(
            "tool/result", {"turn": 1, "step": 1, "id": "c1", "ok": False, "result": text}
        )


def test_a_failed_tool_result_records_its_classification() -> None:
    session = Session()
    for kind in ("tool-error", "aborted", "invalid_args", "http/404"):
        session.append(
            "tool/result", {"turn": 1, "step": 1, "id": "c", "ok": False, "result": kind}
        )
    assert [event.data["result"] for event in session.events] == [
        "tool-error",
        "aborted",
        "invalid_args",
        "http/404",
    ]


# --- append ----------------------------------------------------------------------------------


def test_append_rejects_an_unknown_type_and_records_nothing() -> None:
    session = recorded()
    with pytest.raises(
        SessionError,
        match=exactly(f"<session>: event 11: unknown event type 'turn/pause' (known: {KNOWN})"),
    ):
        session.append("turn/pause", {"turn": 1})  # type: ignore[arg-type]
    assert len(session.events) == len(TURN)
    assert session.append("turn/start", {"turn": 2}).seq == len(TURN)


@pytest.mark.parametrize(
    ("event_type", "data", "fault"),
    [
        ("turn/start", {"turn": "1"}, "field 'turn' must be an integer, found string"),
        ("turn/start", {"turn": True}, "field 'turn' must be an integer, found boolean"),
        ("turn/start", {}, "missing field 'turn' (turn/start data is exactly: turn)"),
        ("step/end", {"turn": 1}, "missing field 'step' (step/end data is exactly: turn, step)"),
        ("user/message", {"id": 1, "text": "hi"}, "field 'id' must be a string, found integer"),
        (
            "tool/result",
            {"turn": 1, "step": 1, "id": "c", "ok": 1, "result": None},
            "field 'ok' must be a boolean, found integer",
        ),
        (
            "tool/call",
            {"turn": 1, "step": 1, "id": "c", "name": "n", "args": []},
            "field 'args' must be a JSON object, found array",
        ),
        (
            "tool/call",
            {"turn": 1, "step": 1, "id": "c", "name": "n", "args": {1: "x"}},
            "field 'args' has a non-string key 1",
        ),
        (
            "tool/result",
            {"turn": 1, "step": 1, "id": "c", "ok": True, "result": float("nan")},
            "field 'result' is nan; JSON numbers are finite",
        ),
        ("inbox/discarded", {"ids": "m1"}, "field 'ids' must be an array of strings, found string"),
        (
            "inbox/claimed",
            {"turn": 1, "ids": ["m1", 2]},
            "field 'ids[1]' must be a string, found integer",
        ),
        ("turn/end", {"turn": 1, "outcome": {}}, "field 'outcome' has no 'kind'"),
        (
            "turn/end",
            {"turn": 1, "outcome": "aborted"},
            "field 'outcome' must be an outcome {\"kind\": ...}, found string",
        ),
        ("turn/start", [("turn", 1)], "data must be a JSON object, found array"),
    ],
)
def test_append_rejects_data_of_the_wrong_shape_naming_the_field(
    event_type: EventType, data: Any, fault: str
) -> None:
    session = Session()
    with pytest.raises(SessionError, match=exactly(f"<session>: event 0: {event_type}: {fault}")):
        session.append(event_type, data)
    assert len(session.events) == 0


def test_append_rejects_a_value_that_contains_itself() -> None:
    args: dict[str, Any] = {}
    args["self"] = args
    with pytest.raises(
        SessionError,
        match=exactly("<session>: event 0: tool/call: field 'args.self' contains itself"),
    ):
        Session().append("tool/call", {"turn": 1, "step": 1, "id": "c", "name": "n", "args": args})


# --- immutability ----------------------------------------------------------------------------


def test_returned_events_cannot_change_the_log() -> None:
    session = Session()
    data: dict[str, Any] = {"turn": 1, "step": 1, "id": "c1", "name": "n", "args": {"xs": [1]}}
    event = session.append("tool/call", data)
    data["args"]["xs"].append(2)  # the caller's object is not the log's

    with pytest.raises(dataclasses.FrozenInstanceError):
        event.seq = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        event.data["turn"] = 2  # type: ignore[index]
    with pytest.raises(TypeError):
        event.data["args"]["xs"] = []  # type: ignore[index]
    plain = event.to_json()
    plain["data"]["args"]["xs"].append(3)  # a fresh copy each time

    assert event.data["args"] == {"xs": (1,)}
    assert session.to_jsonl() == (
        '{"data":{"args":{"xs":[1]},"id":"c1","name":"n","step":1,"turn":1},"seq":0,'
        '"type":"tool/call"}\n'
    )


def test_the_events_view_is_read_only_and_live() -> None:
    session = Session()
    view = session.events
    session.append("turn/start", {"turn": 1})

    assert len(view) == 1 and view[0].type == "turn/start"
    assert not hasattr(view, "append")
    with pytest.raises(TypeError):
        view[0] = view[0]  # type: ignore[index]


def test_events_print_as_code_you_can_paste_back() -> None:
    event = recorded().events[-1]
    assert repr(event) == (
        "SessionEvent(seq=10, type='turn/end', data={'turn': 1, 'outcome': {'kind': 'completed'}})"
    )
    assert repr(recorded()) == "<Session <session> events=11 last=turn/end>"
    assert hash(event) == hash(Session.seed(recorded().events).events[-1])


# --- legacy and faulty input: rejected whole -------------------------------------------------


def test_an_aborted_record_with_a_reason_is_rejected_on_load() -> None:
    outcome = {"kind": "aborted", "reason": "user"}
    legacy = {"seq": 1, "type": "turn/end", "data": {"turn": 0, "outcome": outcome}}
    with pytest.raises(
        SessionError,
        match=exactly(
            "session.jsonl: line 2: turn/end: field 'outcome' must be exactly {\"kind\": ...}, but "
            f"also has 'reason' {NO_CAUSE}"
        ),
    ):
        load(good(0), legacy)


def test_any_outcome_with_a_field_beside_kind_is_rejected_on_seed() -> None:
    outcome = {"kind": "completed", "tokens": 9}
    legacy = {"seq": 0, "type": "turn/end", "data": {"turn": 0, "outcome": outcome}}
    with pytest.raises(
        SessionError,
        match=exactly(
            "<seed>: event 0: turn/end: field 'outcome' must be exactly {\"kind\": ...}, but also "
            f"has 'tokens' {NO_CAUSE}"
        ),
    ):
        Session.seed([legacy])


def test_a_truncated_line_is_rejected() -> None:
    text = recorded().to_jsonl()[:-30]  # the last write was cut short
    assert text.endswith('{"data":{"outcome":{"kind":"completed"},"turn":1')
    with pytest.raises(
        SessionError,
        match=exactly(
            "session.jsonl: line 11: not valid JSON (Expecting ',' delimiter: line 1 column 49 "
            "(char 48))"
        ),
    ):
        Session.from_jsonl(text, source="session.jsonl")


def test_a_line_that_is_not_json_is_rejected() -> None:
    with pytest.raises(
        SessionError,
        match=exactly(
            "session.jsonl: line 2: not valid JSON (Expecting value: line 1 column 1 (char 0))"
        ),
    ):
        Session.from_jsonl(jsonl(good(0)) + "turn/start 1\n", source="session.jsonl")


def test_a_blank_line_is_rejected() -> None:
    with pytest.raises(
        SessionError,
        match=exactly("session.jsonl: line 2: blank line (every line is one JSON record)"),
    ):
        Session.from_jsonl(jsonl(good(0)) + "\n" + jsonl(good(1)), source="session.jsonl")


def test_a_duplicate_key_is_rejected() -> None:
    line = '{"seq":0,"type":"turn/start","data":{"turn":0},"data":{"turn":1}}'
    with pytest.raises(
        SessionError, match=exactly("session.jsonl: line 1: not valid JSON (duplicate key 'data')")
    ):
        Session.from_jsonl(line, source="session.jsonl")


def test_a_non_finite_number_is_rejected() -> None:
    line = (
        '{"seq":0,"type":"tool/result","data":{"turn":0,"step":0,"id":"c","ok":true,"result":NaN}}'
    )
    with pytest.raises(
        SessionError,
        match=exactly("session.jsonl: line 1: not valid JSON (NaN is not a JSON number)"),
    ):
        Session.from_jsonl(line, source="session.jsonl")


def test_a_record_that_is_not_an_object_is_rejected() -> None:
    with pytest.raises(
        SessionError,
        match=exactly("session.jsonl: line 1: a record must be a JSON object, found array"),
    ):
        load([0, "turn/start", {"turn": 0}])


def test_a_record_without_a_top_level_key_is_rejected() -> None:
    with pytest.raises(
        SessionError,
        match=exactly(
            "session.jsonl: line 2: record has no key 'data' (a record is exactly: seq, type, data)"
        ),
    ):
        load(good(0), {"seq": 1, "type": "turn/start"})


def test_a_record_with_an_extra_top_level_key_is_rejected() -> None:
    with pytest.raises(
        SessionError,
        match=exactly(
            "session.jsonl: line 1: record has an unexpected key 'stack' (a record is exactly: "
            "seq, type, data)"
        ),
    ):
        load({**good(0), "stack": "Traceback ..."})


def test_an_unknown_event_type_is_rejected() -> None:
    with pytest.raises(
        SessionError,
        match=exactly(
            f"session.jsonl: line 2: unknown event type 'agent/cancel-requested' (known: {KNOWN})"
        ),
    ):
        load(good(0), {"seq": 1, "type": "agent/cancel-requested", "data": {"cause": "user"}})


def test_a_data_shape_violation_is_rejected_naming_the_field() -> None:
    with pytest.raises(
        SessionError,
        match=exactly(
            "session.jsonl: line 1: step/start: field 'step' must be an integer, found number"
        ),
    ):
        load({"seq": 0, "type": "step/start", "data": {"turn": 0, "step": 1.5}})


def test_an_extra_data_field_is_rejected() -> None:
    with pytest.raises(
        SessionError,
        match=exactly(
            "session.jsonl: line 1: turn/start: unexpected field 'signal' (turn/start data is "
            "exactly: turn)"
        ),
    ):
        load({"seq": 0, "type": "turn/start", "data": {"turn": 0, "signal": "aborted"}})


@pytest.mark.parametrize(
    ("seqs", "line", "fault"),
    [
        ((0, 2), 2, "seq is 2 but should be 1"),
        ((0, 1, 1), 3, "seq is 1 but should be 2"),
        ((1,), 1, "seq is 1 but should be 0"),
        ((1, 0), 1, "seq is 1 but should be 0"),
    ],
)
def test_an_out_of_order_seq_is_rejected(seqs: tuple[int, ...], line: int, fault: str) -> None:
    records = [{**good(0), "seq": seq} for seq in seqs]
    with pytest.raises(
        SessionError,
        match=exactly(f"session.jsonl: line {line}: {fault} (seq counts 0, 1, 2, ... in order)"),
    ):
        load(*records)


def test_a_seq_that_is_not_an_integer_is_rejected() -> None:
    with pytest.raises(
        SessionError, match=exactly("session.jsonl: line 1: seq must be an integer, found string")
    ):
        load({**good(0), "seq": "0"})


def test_seed_rejects_an_out_of_order_event_naming_its_index() -> None:
    events = list(recorded().events)
    with pytest.raises(
        SessionError,
        match=exactly(
            "replay: event 1: seq is 2 but should be 1 (seq counts 0, 1, 2, ... in order)"
        ),
    ):
        Session.seed([events[0], events[2]], source="replay")


def test_a_file_that_is_missing_or_not_utf8_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    with pytest.raises(SessionError, match=exactly(f"{path}: file not found")):
        Session.load(path)
    path.write_bytes(jsonl(good(0)).encode() + b'{"seq":1,"type":"\xff"}\n')
    with pytest.raises(
        SessionError, match=exactly(f"{path}: line 2: not UTF-8 (invalid start byte)")
    ):
        Session.load(path)


def test_a_fault_on_the_last_line_rejects_the_whole_file_and_leaves_it_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "session.jsonl"
    text = recorded().to_jsonl() + jsonl(
        {
            "seq": len(TURN),
            "type": "turn/end",
            "data": {"turn": 1, "outcome": {"kind": "aborted", "reason": "x"}},
        }
    )
    path.write_text(text, encoding="ascii")
    fault = f"line {len(TURN) + 1}: turn/end: field 'outcome' must be exactly"

    with pytest.raises(SessionError, match=f"^{re.escape(f'{path}: {fault}')}"):
        Session.load(path)
    with pytest.raises(SessionError, match=f"^{re.escape(f'{path}: {fault}')}"):
        Session(path)  # opening to resume: no half-loaded session, and nothing is written

    assert path.read_text(encoding="ascii") == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.jsonl"]


def test_a_fault_in_a_later_seed_event_rejects_the_whole_seed() -> None:
    bad: dict[str, object] = {"seq": len(TURN), "type": "turn/nope", "data": {}}
    events: list[SessionEvent | dict[str, object]] = [*recorded().events, bad]
    with pytest.raises(SessionError, match=r"^<seed>: event 11: unknown event type 'turn/nope' "):
        Session.seed(events)


# --- property --------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
FIELDS: dict[FieldType, st.SearchStrategy[object]] = {
    "int": st.integers(min_value=-1, max_value=2**40),
    "str": st.text(max_size=12),
    "bool": st.booleans(),
    "[str]": st.lists(st.text(max_size=4), max_size=3),
    "object": st.dictionaries(st.text(max_size=4), json_values, max_size=3),
    "json": json_values,
    "outcome": st.sampled_from([k for k in OUTCOME_KINDS if k != "error"]).map(
        lambda kind: {"kind": kind}
    )
    | st.builds(
        lambda step, code: {"kind": "error", "step": step, "code": code},
        st.integers(min_value=0, max_value=2**53 - 1),
        st.sampled_from(ERROR_CODES),
    ),
}


def named_steps(
    writes: list[tuple[EventType, dict[str, object]]],
) -> list[tuple[EventType, dict[str, object]]]:
    """The same appends, each ``error`` outcome naming its turn's last ``step/start`` since the
    last turn boundary (0 if none), as the log requires; where that step is negative, which no
    error may name, the turn ends ``completed`` instead."""
    last: dict[object, int] = {}
    out: list[tuple[EventType, dict[str, object]]] = []
    for event_type, data in writes:
        outcome = data.get("outcome")
        named = data
        if event_type == "turn/end" and isinstance(outcome, dict) and outcome["kind"] == "error":
            step = last.get(data["turn"], 0)
            ended = {**outcome, "step": step} if step >= 0 else {"kind": "completed"}
            named = {**data, "outcome": ended}
        if event_type in ("turn/start", "turn/end"):
            last = {}
        elif event_type == "step/start":
            last[data["turn"]] = cast(int, data["step"])
        out.append((event_type, named))
    return out


def logs(
    *, min_size: int = 0, max_size: int
) -> st.SearchStrategy[list[tuple[EventType, dict[str, object]]]]:
    """Valid sequences of appends: each valid alone, and every error naming its step."""
    return st.lists(appends(), min_size=min_size, max_size=max_size).map(named_steps)


@st.composite
def appends(draw: st.DrawFn) -> tuple[EventType, dict[str, object]]:
    """One valid append, drawn from the shape table itself."""
    event_type = draw(st.sampled_from(list(EVENT_SHAPES)))
    data = {name: draw(FIELDS[field]) for name, field in EVENT_SHAPES[event_type].items()}
    if event_type == "tool/result" and data["ok"] is False:
        data["result"] = draw(st.sampled_from(["tool-error", "aborted", "invalid-args"]))
    return event_type, data


@given(logs(max_size=12))
def test_any_sequence_of_valid_appends_round_trips_through_jsonl(
    writes: list[tuple[EventType, dict[str, object]]],
) -> None:
    session = Session()
    for event_type, data in writes:
        assert session.append(event_type, data).to_json()["data"] == data

    text = session.to_jsonl()
    loaded = Session.from_jsonl(text)

    assert loaded.events == session.events
    assert loaded.to_jsonl() == text
    assert text.count("\n") == len(writes)
    assert Session.seed(session.events).events == session.events
    assert [event.seq for event in loaded.events] == list(range(len(writes)))


@given(logs(min_size=1, max_size=6), st.data())
def test_a_damaged_log_is_rejected_whole_naming_its_line_or_read_exactly(
    tmp_path_factory: pytest.TempPathFactory,
    writes: list[tuple[EventType, dict[str, object]]],
    data: st.DataObject,
) -> None:
    """Bytes overwritten, inserted or cut anywhere in a valid log: loading either rejects the
    whole file with one SessionError naming a line that exists, or reads a valid log."""
    session = Session()
    for event_type, fields in writes:
        session.append(event_type, fields)
    raw = session.to_jsonl().encode()
    at = data.draw(st.integers(0, len(raw) - 1), label="at")
    cut = data.draw(st.integers(0, 8), label="cut")
    junk = data.draw(st.binary(max_size=8), label="junk")
    damaged = raw[:at] + junk + raw[at + cut :]
    path = tmp_path_factory.mktemp("damaged") / "log.jsonl"
    path.write_bytes(damaged)
    try:
        loaded = Session.load(path)
    except SessionError as error:
        found = re.match(rf"^{re.escape(str(path))}: line (\d+): ", str(error))
        assert found is not None, str(error)
        assert 1 <= int(found.group(1)) <= damaged.count(b"\n") + 1
        assert path.read_bytes() == damaged  # loading never writes
    else:
        assert Session.from_jsonl(loaded.to_jsonl()).events == loaded.events


@given(st.lists(st.text(max_size=40), min_size=1, max_size=4))
def test_garbage_lines_are_rejected_with_one_session_error(lines: list[str]) -> None:
    text = "\n".join(lines)
    try:
        Session.from_jsonl(text, "fuzz.jsonl")
    except SessionError as error:
        assert re.match(r"^fuzz\.jsonl: line \d+: ", str(error)), str(error)


def test_a_writer_takes_the_whole_log_at_each_flush_and_excludes_a_path(tmp_path: Path) -> None:
    written: list[str] = []

    async def store(log: str) -> None:
        written.append(log)

    session = Session(writer=store)
    session.append("user/message", {"id": "m1", "text": "hi"})
    asyncio.run(session.flush())
    session.append("user/message", {"id": "m2", "text": "again"})
    asyncio.run(session.flush())
    assert written == [session.to_jsonl().splitlines(keepends=True)[0], session.to_jsonl()]
    assert session.path is None
    with pytest.raises(UsageError, match=r"^a session writes to a path or through a writer, not "):
        Session(tmp_path / "log.jsonl", writer=store)
    with pytest.raises(UsageError, match=r"^a session's writer is an async callable, not 3$"):
        Session(writer=3)  # type: ignore[arg-type]


def test_a_writer_that_returns_no_awaitable_is_named_at_the_flush() -> None:
    """``writer=print`` is callable, so only the flush can tell it is not async: the error
    names what it returned, not asyncio's "can't be used in 'await' expression"."""
    written: list[str] = []
    session = Session(writer=written.append)  # type: ignore[arg-type]
    session.append("user/message", {"id": "m1", "text": "hi"})
    with pytest.raises(
        UsageError, match=r"^a session's writer must return an awaitable; it returned None$"
    ):
        asyncio.run(session.flush())
    assert written == [session.to_jsonl()]


def test_overlapping_flushes_hand_the_writer_the_logs_in_order() -> None:
    """A flush returns once the writer took the whole log; a slow earlier write finishing
    after a later one must not leave the older log as the last one written."""
    written: list[str] = []
    calls: list[str] = []
    slow = asyncio.Event()
    called = asyncio.Event()

    async def store(log: str) -> None:
        calls.append(log)
        called.set()
        if len(calls) == 1:
            await slow.wait()  # the first write is slow; the second would not be
        written.append(log)

    async def main() -> None:
        session = Session(writer=store)
        session.append("user/message", {"id": "m1", "text": "hi"})
        first = asyncio.ensure_future(session.flush())
        await called.wait()  # the first write is under way, held
        assert calls == [session.to_jsonl()]
        session.append("user/message", {"id": "m2", "text": "again"})
        second = asyncio.ensure_future(session.flush())
        slow.set()  # the later flush was asked for while the first write is held
        await asyncio.gather(first, second)
        assert written[-1] == session.to_jsonl()

    asyncio.run(main())


def test_a_flush_waits_for_its_writer_flush_timeout_seconds_at_most() -> None:
    """30 seconds unless the session says otherwise; None waits for good. Anything but a
    number of seconds above 0 is refused when the session is built."""

    async def store(_log: str) -> None:
        pass

    assert Session().flush_timeout == 30.0
    assert Session(writer=store, flush_timeout=None).flush_timeout is None
    assert Session(writer=store, flush_timeout=2).flush_timeout == 2
    for bad, shown in ((0, "0"), (-1.0, "-1.0"), (float("nan"), "nan"), (True, "True")):
        with pytest.raises(
            UsageError,
            match=exactly(
                "a session's flush_timeout is a number of seconds above 0, or None to wait for "
                f"the writer for good, not {shown}"
            ),
        ):
            Session(writer=store, flush_timeout=bad)
    with pytest.raises(UsageError, match=r"flush_timeout .*, not inf$"):
        Session(writer=store, flush_timeout=float("inf"))
    with pytest.raises(UsageError, match=r"flush_timeout .*, not '5'$"):
        Session(writer=store, flush_timeout="5")  # type: ignore[arg-type]


def test_a_writer_that_ignores_its_cancellation_is_never_called_twice_at_once() -> None:
    """At the deadline the flush cancels the writer's call and stops waiting; a writer that
    swallows that runs on, and the next flush, rather than call it over the stale call (an
    older log could land last), waits for it within its own deadline and then refuses. Once
    the call ended, a flush hands the writer the whole log again."""
    taken: list[str] = []
    released = asyncio.Event()

    async def stubborn(log: str) -> None:
        taken.append(log)
        while not released.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await released.wait()

    async def main() -> None:
        session = Session(writer=stubborn, flush_timeout=0.01)
        session.append("user/message", {"id": "m1", "text": "hi"})
        with pytest.raises(
            SessionError,
            match=exactly(
                "<session>: the writer did not return within 0.01 s; the flush cancelled the "
                "call and stopped waiting for it, so the log is not known to be stored"
            ),
        ):
            await asyncio.wait_for(session.flush(), 10)
        session.append("user/message", {"id": "m2", "text": "again"})
        with pytest.raises(
            SessionError,
            match=exactly(
                "<session>: an earlier call of the writer had not returned within 0.01 s; the "
                "flush did not call the writer, so the log is not stored"
            ),
        ):
            await asyncio.wait_for(session.flush(), 10)
        assert len(taken) == 1
        released.set()
        await asyncio.wait_for(session.flush(), 10)
        assert taken[1:] == [session.to_jsonl()]

    asyncio.run(main())


def test_a_writer_raising_its_own_timeout_error_fails_the_flush_with_it() -> None:
    """Only the flush's own deadline reads as the writer not returning."""

    async def store(_log: str) -> None:
        raise TimeoutError("the store's own")

    with pytest.raises(TimeoutError, match=r"^the store's own$"):
        asyncio.run(Session(writer=store, flush_timeout=5).flush())
