"""specs/SEMANTICS.md: each rule it states, pinned.

The grammar's tokens, precedence and associativity, the integer arithmetic, the order a row
runs in, the rendering of effects, arguments and states, and what listeners may do. Rules the
conformance vectors already show a port (refusal messages, log order, the state a listener
sees) are pinned by tests/test_agent_table.py on the vectors themselves.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from fsm_core import PARENT, Effect
from fsm_core.check import load_model
from fsm_core.check._composed._agent import AgentWiring
from fsm_core.runtime import CancelRequested, Reply, Runtime, UserMessage
from fsm_core.table import Machine, load_spec
from fsm_core.table._expr import (
    BinOp,
    Cond,
    Expr,
    ExprError,
    Ident,
    Lit,
    Not,
    Scope,
    Value,
    check,
    compile_expr,
    parse_expr,
)
from fsm_core.table._limits import MAX_INT
from fsm_core.testing import Gate, ScriptedModel, Wait
from fsm_core.tools._vectors import subjects
from tests.helpers import exactly

SEMANTICS = (Path(__file__).resolve().parent.parent / "specs" / "SEMANTICS.md").read_text(
    encoding="utf-8"
)
AGENT = load_spec().machines["agent"]
WINDOW: Machine = next(s.machine for s in subjects() if s.machine.name == "window")


def a(name: str) -> Ident:
    return Ident(name)


def op(o: str, left: Expr, right: Expr) -> BinOp:
    return BinOp(o, left, right)


# --- grammar -------------------------------------------------------------------------------------


def test_the_precedence_table_is_the_parsers() -> None:
    """Each row of SEMANTICS.md's table binds tighter than the one above it."""
    table = re.findall(r"^\| (\d) \| (.+?) \| (.+?) \|$", SEMANTICS, re.M)
    assert [level for level, _, _ in table] == ["1", "2", "3", "4", "5", "6", "7"]
    assert parse_expr("if a then b else c implies d") == Cond(
        a("a"), a("b"), op("implies", a("c"), a("d"))
    )
    assert parse_expr("a implies b or c") == op("implies", a("a"), op("or", a("b"), a("c")))
    assert parse_expr("a or b and c") == op("or", a("a"), op("and", a("b"), a("c")))
    assert parse_expr("not a and b") == op("and", Not(a("a")), a("b"))
    assert parse_expr("not a == b") == Not(op("==", a("a"), a("b")))
    assert parse_expr("a + b < c") == op("<", op("+", a("a"), a("b")), a("c"))


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("a implies b implies c", op("implies", a("a"), op("implies", a("b"), a("c")))),
        ("a or b or c", op("or", op("or", a("a"), a("b")), a("c"))),
        ("a and b and c", op("and", op("and", a("a"), a("b")), a("c"))),
        ("a - b + c", op("+", op("-", a("a"), a("b")), a("c"))),
        ("a - b - c", op("-", op("-", a("a"), a("b")), a("c"))),
        ("if c then a else b or d", Cond(a("c"), a("a"), op("or", a("b"), a("d")))),
    ],
    ids=["implies-right", "or-left", "and-left", "sum-left", "difference-left", "else-extends"],
)
def test_associativity(text: str, tree: Expr) -> None:
    assert parse_expr(text) == tree


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a == b == c", "unexpected '==' after a complete expression"),
        ("a < b in {x}", "unexpected 'in' after a complete expression"),
        ("x == if c then 1 else 2", "expected a name but found 'if'"),
        ("0 - -1", "expected a name but found '-'"),
        ("-1", "expected a name but found '-'"),
        ("a == ٣", "unexpected character '٣' at column 6"),
        ("a\u00a0and b", "unexpected character '\\xa0' at column 2"),
        ("a and b\u2003", "unexpected character '\\u2003' at column 8"),
        ("a # a comment", "unexpected character '#' at column 3"),
        ("a = b", "unexpected character '=' at column 3"),
        (f"n < {MAX_INT + 1}", f"the integer '{MAX_INT + 1}' is over the limit of 2,147,483,647"),
        ("true and", "unexpected end of expression, expected a name"),
        ("a in {}", "expected a name but found '}'"),
    ],
)
def test_what_the_grammar_refuses(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=exactly(message)):
        parse_expr(text)


def test_tokens_are_ascii_taken_first_match_longest() -> None:
    assert parse_expr("x == (if c then 1 else 2)") == op("==", a("x"), Cond(a("c"), Lit(1), Lit(2)))
    assert parse_expr(" a\tand\r\n\f\vb ") == op("and", a("a"), a("b"))
    assert parse_expr("n<=007") == op("<=", a("n"), Lit(7)), "<= is one token; zeros lead"
    assert parse_expr(f"n < {MAX_INT}") == op("<", a("n"), Lit(MAX_INT))
    assert parse_expr("n < 1and b") == op("and", op("<", a("n"), Lit(1)), a("b")), "1, and"
    with pytest.raises(ExprError, match=exactly("expected a name but found 'true'")):
        parse_expr("n in {true}")  # a keyword is never a name


# --- integers ------------------------------------------------------------------------------------


def _value(text: str) -> object:
    tree, _ = check(parse_expr(text), Scope({}, {}, {}, frozenset()))
    return compile_expr(tree, {}, {}, {})((), ())


def test_integer_arithmetic_is_exact_beyond_32_bits() -> None:
    assert _value(f"{MAX_INT} + {MAX_INT} > {MAX_INT}") is True
    assert _value(f"{MAX_INT} + {MAX_INT} - {MAX_INT} == {MAX_INT}") is True
    assert _value(f"0 - {MAX_INT} - {MAX_INT} < 0 - {MAX_INT}") is True
    assert _value("if 1 < 2 then 0 - 3 else 4") == -3


def test_an_intermediate_value_may_leave_every_domain() -> None:
    """``ack.open``'s guard computes ``window + n`` = 5 where ``window`` ends at 3."""
    state = WINDOW.state(size=3, window=3, in_flight=0)
    assert [r.row.id for r in WINDOW.enabled(state, "ack", (2,))] == []


# --- a row runs in order -------------------------------------------------------------------------


def test_the_state_variable_moves_before_the_first_statement() -> None:
    """``claim.nothing`` moves to idle, then its ``when quiescent`` block (which needs idle)
    settles the waiters."""
    state = AGENT.state(phase="running", holder="live")
    step = AGENT.fire(state, "claim")
    assert step.row == "claim.nothing"
    assert [str(e) for e in step.effects] == [
        "release_holder()",
        "publish_status(idle)",
        "settle_idle()",
    ]


def test_each_statement_sees_the_ones_before_it() -> None:
    """``ack.open`` adds the credit, then tests the new credit: positive again, it unblocks."""
    state = WINDOW.state(size=2, window=0, in_flight=2)
    step = WINDOW.fire(state, "ack", n=1)
    assert [str(e) for e in step.effects] == ["unblock(1)"]
    assert WINDOW.describe(step.target)["window"] == 1


@pytest.mark.parametrize(
    ("before", "row", "seen"),
    [
        (
            {"phase": "running", "holder": "live", "pending": True},
            "cancel.turn",
            ("cancelling", "live"),
        ),
        ({"phase": "maintenance", "holder": "live"}, "cancel.maintenance", ("maintenance", "live")),
        ({"scheduled": True, "pending": True}, "cancel.prerun", ("idle", "none")),
        ({"pending": True}, "cancel.discard", ("idle", "none")),
    ],
)
def test_cancel_requested_observers_see_nothing_aborted_yet(
    before: dict[str, Value], row: str, seen: tuple[str, str]
) -> None:
    """specs/README.md: only a live turn's cancel is already ``cancelling`` when it notifies."""
    store = list(AGENT.state(**before))
    observed: list[tuple[Value, Value]] = []

    def perform(name: str, values: tuple[Value, ...]) -> None:
        if name == "notify_cancel_requested":
            observed.append((AGENT.get(store, "phase"), AGENT.get(store, "holder")))

    args = AGENT.arguments("cancel", cause="user", keep_inbox=False)
    chosen = AGENT.select(store, "cancel", args)
    assert chosen is not None and chosen.row.id == row
    AGENT.execute(chosen, store, args, perform)
    assert observed == [seen]


# --- rendering -----------------------------------------------------------------------------------


def test_effects_arguments_and_states_render_as_the_tables_write_them() -> None:
    assert str(Effect("f", (-2, True, "next_turn"))) == "f(-2, true, next_turn)"
    assert str(Effect("settle_idle", ())) == "settle_idle()"
    step = WINDOW.fire(WINDOW.state(size=3, window=0, in_flight=3), "resize", to=1)
    assert [str(e) for e in step.effects] == ["owe(2)"]
    assert WINDOW.format_state(step.target) == "open{size=1, window=-2, in_flight=3}"


# --- listeners -----------------------------------------------------------------------------------


def test_the_checker_lets_listeners_fire_input_events_only() -> None:
    model = load_model(Path(__file__).resolve().parent.parent / "models" / "agent_races.toml")
    calls = {event for event, _ in AgentWiring(model).listener_calls}
    assert calls == {"send", "cancel", "dispose", "maintenance_start"}
    assert all(model.machine.table.events[e].kind == "input" for e in calls)


def test_an_internal_event_fired_by_a_listener_breaks_a_contract() -> None:
    """A ``start`` inside the ``enqueue`` of ``send.idle.wake`` unschedules the driver
    before the row's ``schedule_driver()``, whose ``requires`` then fails."""
    store: list[Value] = list(AGENT.initial)
    broken: list[str] = []

    def perform(name: str, values: tuple[Value, ...]) -> None:
        if AGENT.unmet(name, store, values):
            broken.append(name)
        if name == "enqueue":
            row = AGENT.select(store, "start", ())
            assert row is not None and row.row.id == "start.turn"
            AGENT.execute(row, store, (), perform)

    args = AGENT.arguments("send", wake=True, lane="next_turn")
    row = AGENT.select(store, "send", args)
    assert row is not None
    AGENT.execute(row, store, args, perform)
    assert broken == ["schedule_driver"]


def test_nothing_guards_a_listener_against_re_entering_itself() -> None:
    """A cancel-requested listener that cancels runs again inside its own cancel, nested,
    until it stops itself."""

    async def scenario() -> list[int]:
        gate = Gate("model")
        rt = Runtime(model=ScriptedModel([Wait(gate, Reply("late"))]))
        agent = (await rt.create_agent("a1")).agent
        depth: list[int] = []
        nesting = 0

        def again(event: CancelRequested) -> None:
            nonlocal nesting
            depth.append(nesting)
            if nesting < 3:
                nesting += 1
                agent.cancel(PARENT)
                nesting -= 1

        agent.followup(UserMessage("m1", "hi"))
        await gate.reached.wait()  # a live turn: each cancel is effective while the holder is
        rt.events.on("agent/cancel-requested", again)
        agent.cancel(PARENT)
        await agent.when_idle()
        await rt.aclose()
        return depth

    assert asyncio.run(scenario()) == [0, 1, 2, 3]
