"""specs/session.schema.json: the durable session format as a JSON Schema a port validates with.

The schema and :data:`~fsm_core.runtime.EVENT_SHAPES` must say the same thing: every event type,
every field and its JSON type, the outcome forms, the error codes and the I-JSON integer
range (checked by walking the schema). Every record the runtime writes validates, and the
records the loader rejects for their shape the schema rejects too.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from jsonschema import Draft202012Validator

from fsm_core._paths import specs_dir
from fsm_core.runtime import (
    ERROR_CODES,
    EVENT_SHAPES,
    OUTCOME_KINDS,
    Reply,
    Request,
    Runtime,
    Session,
    SessionError,
    ToolCall,
    UserMessage,
)
from fsm_core.runtime._session import _CLASSIFICATION_MAX, _RECORD_KEYS, SAFE_INTEGER, FieldType
from fsm_core.runtime._signal import AbortSignal
from fsm_core.testing import Fail, Gate, ScriptedModel, ScriptedTool, Wait
from tests.test_session import logs

SCHEMA: dict[str, Any] = json.loads(
    (specs_dir() / "session.schema.json").read_text(encoding="utf-8")
)
VALIDATOR = Draft202012Validator(SCHEMA)
DEFS: dict[str, Any] = SCHEMA["$defs"]

FIELD_DEFS: dict[FieldType, str] = {
    "int": "#/$defs/int",
    "str": "#/$defs/str",
    "bool": "#/$defs/bool",
    "[str]": "#/$defs/strs",
    "object": "#/$defs/object",
    "json": "#/$defs/json",
    "outcome": "#/$defs/outcome",
}
"""Each field type of EVENT_SHAPES and the schema definition that states it."""


def deref(node: dict[str, Any]) -> dict[str, Any]:
    ref = node["$ref"]
    assert ref.startswith("#/$defs/"), ref
    found: dict[str, Any] = DEFS[ref.removeprefix("#/$defs/")]
    return found


def data_defs() -> dict[str, dict[str, Any]]:
    """Event type -> the data definition the schema's tagged union selects for it."""
    union: dict[str, dict[str, Any]] = {}
    for branch in SCHEMA["allOf"]:
        assert branch["if"]["required"] == ["type"]
        tag = branch["if"]["properties"]["type"]["const"]
        assert tag not in union, f"{tag} is tagged twice"
        union[tag] = deref(branch["then"]["properties"]["data"])
    return union


# --- the schema and EVENT_SHAPES agree -----------------------------------------------------------


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_a_record_is_exactly_seq_type_and_data() -> None:
    assert SCHEMA["required"] == list(_RECORD_KEYS)
    assert list(SCHEMA["properties"]) == list(_RECORD_KEYS)
    assert SCHEMA["additionalProperties"] is False
    assert SCHEMA["properties"]["type"]["enum"] == list(EVENT_SHAPES)


def test_the_tagged_union_has_one_branch_per_event_type_with_exactly_its_fields() -> None:
    union = data_defs()
    assert list(union) == list(EVENT_SHAPES)
    for event_type, shape in EVENT_SHAPES.items():
        data = union[event_type]
        assert data["type"] == "object" and data["additionalProperties"] is False, event_type
        assert data["required"] == list(shape), event_type
        fields = {name: node["$ref"] for name, node in data["properties"].items()}
        assert fields == {name: FIELD_DEFS[field] for name, field in shape.items()}, event_type


def test_every_field_type_has_its_definition() -> None:
    used = {field for shape in EVENT_SHAPES.values() for field in shape.values()}
    assert used == set(FIELD_DEFS)
    for ref in FIELD_DEFS.values():
        deref({"$ref": ref})


def test_integer_fields_are_bounded_to_i_json() -> None:
    assert (DEFS["int"]["minimum"], DEFS["int"]["maximum"]) == (-SAFE_INTEGER, SAFE_INTEGER)
    assert SCHEMA["properties"]["seq"] == {
        "description": SCHEMA["properties"]["seq"]["description"],
        "$ref": "#/$defs/int",
        "minimum": 0,
    }


def test_free_json_numbers_are_where_the_schema_is_laxer_than_the_loader() -> None:
    """JSON Schema has no integer-versus-float distinction for 2**53 and 2**53.0: the schema
    accepts both inside a tool's result, the loader only the number a double holds exactly."""
    record = tool_result(True, {"a": [2**53]})
    assert VALIDATOR.is_valid(record)
    with pytest.raises(SessionError, match="beyond"):
        Session.seed([record])
    assert VALIDATOR.is_valid(tool_result(True, {"a": [2.0**53]}))
    Session.seed([tool_result(True, {"a": [2.0**53]})])


def test_the_outcome_forms_and_error_codes_agree() -> None:
    coarse, error_ref = DEFS["outcome"]["oneOf"]
    assert coarse["required"] == ["kind"] and coarse["additionalProperties"] is False
    error = deref(error_ref)
    assert error["required"] == ["kind", "step", "code"]
    assert error["additionalProperties"] is False
    assert error["properties"]["kind"] == {"const": "error"}
    assert set(coarse["properties"]["kind"]["enum"]) | {"error"} == set(OUTCOME_KINDS)
    assert "error" not in coarse["properties"]["kind"]["enum"]
    assert deref(error["properties"]["code"])["enum"] == list(ERROR_CODES)
    assert error["properties"]["step"]["minimum"] == 0


def test_a_failed_tool_result_is_a_classification_in_the_schema_too() -> None:
    result = data_defs()["tool/result"]
    assert result["if"]["properties"]["ok"] == {"const": False}
    assert deref(result["then"]["properties"]["result"])["maxLength"] == _CLASSIFICATION_MAX


# --- what the runtime writes validates -----------------------------------------------------------


class Raw:
    """A model adapter answering something that is not a Reply (an ``invalid-reply`` error)."""

    async def generate(self, request: Request, signal: AbortSignal) -> Any:
        return "not a reply"


Play = Callable[[Runtime, Session, Gate], Awaitable[None]]


async def one_turn(rt: Runtime, session: Session, gate: Gate) -> None:
    agent = (await rt.create_agent("a1", session)).agent
    agent.followup(UserMessage("m1", "hi"))
    await agent.when_idle()


async def cancelled_with_queued_work(rt: Runtime, session: Session, gate: Gate) -> None:
    agent = (await rt.create_agent("a1", session)).agent
    agent.followup(UserMessage("m1", "first"))
    await gate.reached.wait()
    agent.followup(UserMessage("m2", "queued"))
    agent.cancel()  # aborted, and m2 discarded
    await agent.when_idle()


async def disposed_mid_turn(rt: Runtime, session: Session, gate: Gate) -> None:
    handle = await rt.create_agent("a1", session)
    handle.agent.followup(UserMessage("m1", "first"))
    await gate.reached.wait()
    await handle.dispose()


async def halted_by_an_escape(rt: Runtime, session: Session, gate: Gate) -> None:
    agent = (await rt.create_agent("a1", session)).agent
    agent.followup(UserMessage("m1", "first"))
    await gate.reached.wait()
    (driver,) = [t for t in asyncio.all_tasks() if t.get_name() == "driver a1"]
    driver.cancel()
    await agent.when_idle()


CALLS = Reply("calling", (ToolCall("c1", "lookup", {"q": [1, 2.5, None]}),), finish="tool_calls")
TWO = Reply("two", (ToolCall("c2", "lookup", {}), ToolCall("c3", "nope", {})), finish="tool_calls")


WAIT = "wait"
"""A script step: the model waits at the scenario's gate, cooperating with the signal."""


def scripted(*steps: Any) -> Callable[[Gate], Runtime]:
    def make(gate: Gate) -> Runtime:
        script = [Wait(gate, Reply("x")) if step == WAIT else step for step in steps]
        tool = ScriptedTool("lookup", [{"lines": 2}, Fail(RuntimeError("x"))])
        return Runtime(model=ScriptedModel(script), tools=[tool])

    return make


SCENARIOS: dict[str, tuple[Callable[[Gate], Runtime], Play]] = {
    "completed-with-tools": (scripted(CALLS, TWO, Reply("done")), one_turn),
    "aborted": (scripted(WAIT), cancelled_with_queued_work),
    "disposed": (scripted(WAIT), disposed_mid_turn),
    "error-model-failed": (scripted(Fail(RuntimeError("x"))), one_turn),
    "error-invalid-reply": (lambda _gate: Runtime(model=Raw()), one_turn),
    "error-halted": (scripted(WAIT), halted_by_an_escape),
    "max-tokens": (scripted(Reply("x", finish="max_tokens")), one_turn),
    "blocked": (scripted(Reply("", finish="blocked")), one_turn),
}


def written(scenario: str) -> list[Any]:
    """Every record the runtime wrote in ``scenario``, parsed back from its JSONL."""
    make, play = SCENARIOS[scenario]
    session = Session()

    async def main() -> None:
        gate = Gate("model")
        rt = make(gate)
        try:
            await play(rt, session, gate)
        finally:
            await rt.aclose()

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        assert scenario == "error-halted"
    return [json.loads(line) for line in session.to_jsonl().splitlines()]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_record_the_runtime_writes_validates(scenario: str) -> None:
    records = written(scenario)
    assert records
    for record in records:
        VALIDATOR.validate(record)


def test_the_scenarios_write_every_event_type_and_every_outcome_kind() -> None:
    records = [record for scenario in SCENARIOS for record in written(scenario)]
    assert {r["type"] for r in records} == set(EVENT_SHAPES)
    ends = [r["data"]["outcome"] for r in records if r["type"] == "turn/end"]
    assert {end["kind"] for end in ends} == set(OUTCOME_KINDS)
    codes = {end["code"] for end in ends if end["kind"] == "error"}
    assert codes == {"model-failed", "invalid-reply", "halted"}


@given(logs(max_size=8))
def test_every_record_the_shapes_accept_validates(writes: list[Any]) -> None:
    session = Session()
    for event_type, data in writes:
        session.append(event_type, data)
    for line in session.to_jsonl().splitlines():
        VALIDATOR.validate(json.loads(line))


# --- what the loader rejects for its shape, the schema rejects ---------------------------------


def turn_end(outcome: object) -> dict[str, Any]:
    return {"seq": 0, "type": "turn/end", "data": {"turn": 1, "outcome": outcome}}


def tool_result(ok: bool, result: object) -> dict[str, Any]:
    data = {"turn": 1, "step": 1, "id": "c1", "ok": ok, "result": result}
    return {"seq": 0, "type": "tool/result", "data": data}


REJECTED: list[Any] = [
    pytest.param(turn_end({"kind": "error"}), id="legacy-bare-error"),
    pytest.param(turn_end({"kind": "error", "step": 1, "code": "oops"}), id="unknown-code"),
    pytest.param(
        turn_end({"kind": "error", "step": 1, "code": "halted", "message": "x"}), id="error-text"
    ),
    pytest.param(turn_end({"kind": "error", "step": -1, "code": "halted"}), id="negative-step"),
    pytest.param(turn_end({"kind": "aborted", "reason": "user"}), id="aborted-with-reason"),
    pytest.param(turn_end({"kind": "aborted", "step": 1, "code": "halted"}), id="aborted-code"),
    pytest.param(turn_end({"kind": "user"}), id="cause-as-kind"),
    pytest.param({**turn_end({"kind": "completed"}), "at": 1}, id="extra-record-key"),
    pytest.param({"seq": 0, "type": "turn/start", "data": {"turn": 1, "x": 1}}, id="extra-field"),
    pytest.param({"seq": 0, "type": "turn/start", "data": {}}, id="missing-field"),
    pytest.param({"seq": 0, "type": "turn/nope", "data": {}}, id="unknown-type"),
    pytest.param({"seq": 0, "type": "turn/start", "data": {"turn": 2**53}}, id="unsafe-int"),
    pytest.param({"seq": 0, "type": "turn/start", "data": {"turn": "1"}}, id="string-int"),
    pytest.param(tool_result(False, "Traceback (most recent call last)"), id="failure-text"),
    pytest.param(
        {"seq": 0, "type": "inbox/claimed", "data": {"turn": 1, "ids": [1]}}, id="id-not-a-string"
    ),
]


@pytest.mark.parametrize("record", REJECTED)
def test_a_record_the_loader_rejects_the_schema_rejects(record: dict[str, Any]) -> None:
    with pytest.raises(SessionError):
        Session.seed([record])
    assert not VALIDATOR.is_valid(record)
