"""The guard and effect language: parsing, precedence, unparsing, typing and compilation."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm_core.table._expr import (
    BOOL,
    Assign,
    BinOp,
    Call,
    Cond,
    Expr,
    ExprError,
    Ident,
    In,
    Lit,
    Not,
    Scope,
    Type,
    Value,
    check,
    check_stmt_value,
    compile_expr,
    enum_type,
    int_type,
    parse_expr,
    parse_stmt,
    unparse,
    unparse_stmt,
)
from tests.helpers import exactly

# The scope every test works in: three booleans, an enumeration, a bounded integer, one event
# parameter and one definition. State tuples are (a, b, c, e, n); argument tuples are (p,).
LETTERS = ("x", "y", "z")
LETTER = enum_type("letter", LETTERS)
COUNT = int_type(0, 2)
VARS: dict[str, Type] = {"a": BOOL, "b": BOOL, "c": BOOL, "e": LETTER, "n": COUNT}
PARAMS: dict[str, Type] = {"p": BOOL}
D_TREE = parse_expr("a and not b")
SCOPE = Scope(VARS, PARAMS, {"d": D_TREE}, frozenset(LETTERS))
VAR_INDEX = {name: i for i, name in enumerate(VARS)}
PARAM_INDEX = {name: i for i, name in enumerate(PARAMS)}
VALUATIONS = [
    (state, args)
    for state in itertools.product(*(t.values for t in VARS.values()))
    for args in itertools.product(*(t.values for t in PARAMS.values()))
]


def ident(name: str) -> Ident:
    return Ident(name)


def op(operator: str, left: Expr, right: Expr) -> BinOp:
    return BinOp(operator, left, right)


# --- precedence and associativity ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        pytest.param(
            "a or b and c",
            op("or", ident("a"), op("and", ident("b"), ident("c"))),
            id="and-over-or",
        ),
        pytest.param(
            "a and b or c", op("or", op("and", ident("a"), ident("b")), ident("c")), id="and-first"
        ),
        pytest.param("not a == b", Not(op("==", ident("a"), ident("b"))), id="compare-under-not"),
        pytest.param("not a and b", op("and", Not(ident("a")), ident("b")), id="not-over-and"),
        pytest.param(
            "a implies b implies c",
            op("implies", ident("a"), op("implies", ident("b"), ident("c"))),
            id="implies-right-assoc",
        ),
        pytest.param(
            "a or b implies c",
            op("implies", op("or", ident("a"), ident("b")), ident("c")),
            id="or-in-implies",
        ),
        pytest.param(
            "a and b and c",
            op("and", op("and", ident("a"), ident("b")), ident("c")),
            id="and-left-assoc",
        ),
        pytest.param(
            "n - 1 - n", op("-", op("-", ident("n"), Lit(1)), ident("n")), id="minus-left-assoc"
        ),
        pytest.param(
            "n + 1 < 2", op("<", op("+", ident("n"), Lit(1)), Lit(2)), id="sum-in-compare"
        ),
        pytest.param(
            "e in {x, y} and a", op("and", In(ident("e"), ("x", "y")), ident("a")), id="in-over-and"
        ),
        pytest.param(
            "if a then b else c or d",
            Cond(ident("a"), ident("b"), op("or", ident("c"), ident("d"))),
            id="if-lowest",
        ),
        pytest.param(
            "if a then b implies c else d",
            Cond(ident("a"), op("implies", ident("b"), ident("c")), ident("d")),
            id="if-then-branch-is-whole",
        ),
        pytest.param(
            "(a or b) and c",
            op("and", op("or", ident("a"), ident("b")), ident("c")),
            id="parentheses",
        ),
        pytest.param("true == false", op("==", Lit(True), Lit(False)), id="literals"),
    ],
)
def test_precedence_and_associativity(text: str, tree: Expr) -> None:
    assert parse_expr(text) == tree


# --- unparse -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("a implies (b implies c)", "a implies b implies c"),
        ("(a implies b) implies c", "(a implies b) implies c"),
        ("(a != b) == c", "(a != b) == c"),
        ("(not a) == b", "(not a) == b"),
        ("(e in {x}) == a", "(e in {x}) == a"),
        ("not (a and b)", "not (a and b)"),
        ("not a == b", "not (a == b)"),
        ("(n - 1) - n", "n - 1 - n"),
        ("n - (1 - n)", "n - (1 - n)"),
        ("a and (if b then c else a)", "a and (if b then c else a)"),
        ("if (if a then b else c) then a else b", "if if a then b else c then a else b"),
        ("((a))", "a"),
    ],
)
def test_unparse_is_canonical_and_parses_back(text: str, canonical: str) -> None:
    tree = parse_expr(text)
    assert unparse(tree) == canonical
    assert parse_expr(canonical) == tree


BOOL_LEAVES: list[Expr] = [Lit(True), Lit(False), *map(ident, ["a", "b", "c", "p", "d"])]
# Repeats weigh the forms: orderings differ from each other only at equal operands.
BOOL_FORMS = ["leaf", "not", "logic", "logic", "order", "order", "order", "int=", "bool=", "enum="]
BOOL_FORMS += ["in", "if"]


def bools(draw: st.DrawFn, depth: int) -> Expr:
    form = "leaf" if depth == 0 else draw(st.sampled_from(BOOL_FORMS))
    match form:
        case "leaf":
            return draw(st.sampled_from(BOOL_LEAVES))
        case "not":
            return Not(bools(draw, depth - 1))
        case "logic":
            logic = draw(st.sampled_from(["and", "or", "implies"]))
            return op(logic, bools(draw, depth - 1), bools(draw, depth - 1))
        case "order" | "int=":
            ops = ["<", "<=", ">", ">="] if form == "order" else ["==", "!="]
            return op(draw(st.sampled_from(ops)), ints(draw, depth - 1), ints(draw, depth - 1))
        case "bool=":
            equality = draw(st.sampled_from(["==", "!="]))
            return op(equality, bools(draw, depth - 1), bools(draw, depth - 1))
        case "enum=":
            equality = draw(st.sampled_from(["==", "!="]))
            left, left_values = letters(draw, depth - 1)
            right, right_values = letters(draw, depth - 1)
            # The checker refuses constant comparisons (two bare values) and disjoint ones.
            bare = {ident(v) for v in LETTERS}
            if {left, right} <= bare or not set(left_values) & set(right_values):
                right = ident("e")
            return op(equality, left, right)
        case "in":
            operand, values = letters(draw, depth - 1)
            members = draw(st.lists(st.sampled_from(values), min_size=1, unique=True))
            return In(operand, tuple(members))
        case _:
            return Cond(bools(draw, depth - 1), bools(draw, depth - 1), bools(draw, depth - 1))


def ints(draw: st.DrawFn, depth: int) -> Expr:
    leaf = st.one_of(st.just(ident("n")), st.integers(0, 3).map(Lit))
    if depth == 0:
        return draw(leaf)
    match draw(st.sampled_from(["leaf", "sum", "sum", "if"])):
        case "leaf":
            return draw(leaf)
        case "sum":
            sign = draw(st.sampled_from(["+", "-"]))
            return op(sign, ints(draw, depth - 1), ints(draw, depth - 1))
        case _:
            return Cond(bools(draw, depth - 1), ints(draw, depth - 1), ints(draw, depth - 1))


def letters(draw: st.DrawFn, depth: int) -> tuple[Expr, tuple[str, ...]]:
    """An enumeration-valued expression and the values it may take (``e`` may take any)."""
    if depth == 0 or draw(st.booleans()):
        name = draw(st.sampled_from(["e", "x", "y", "z"]))
        return ident(name), LETTERS if name == "e" else (name,)
    then, then_values = letters(draw, depth - 1)
    orelse, else_values = letters(draw, depth - 1)
    return Cond(bools(draw, depth - 1), then, orelse), tuple(
        dict.fromkeys(then_values + else_values)
    )


@st.composite
def expressions(draw: st.DrawFn) -> Expr:
    """A well-typed expression tree, as the parser builds it, over ``SCOPE``."""
    depth = draw(st.integers(1, 4))
    match draw(st.sampled_from(["bool", "bool", "bool", "int", "enum"])):
        case "bool":
            return bools(draw, depth)
        case "int":
            return ints(draw, depth)
        case _:
            return letters(draw, depth)[0]


def evaluate(e: Expr, env: Mapping[str, Value]) -> Value:
    """A reference evaluator over parsed trees: names are looked up in ``env`` or are values."""
    match e:
        case Lit(value=v):
            return v
        case Ident(name=n):
            if n == "d":
                return evaluate(D_TREE, env)
            return env.get(n, n)
        case Not(operand=o):
            return not evaluate(o, env)
        case In(operand=o, members=m):
            return evaluate(o, env) in m
        case Cond(test=t, then=a, orelse=b):
            return evaluate(a, env) if evaluate(t, env) else evaluate(b, env)
        case BinOp(op="and", left=left, right=right):
            return bool(evaluate(left, env)) and bool(evaluate(right, env))
        case BinOp(op="or", left=left, right=right):
            return bool(evaluate(left, env)) or bool(evaluate(right, env))
        case BinOp(op="implies", left=left, right=right):
            return not evaluate(left, env) or bool(evaluate(right, env))
        case BinOp(op="==", left=left, right=right):
            return evaluate(left, env) == evaluate(right, env)
        case BinOp(op="!=", left=left, right=right):
            return evaluate(left, env) != evaluate(right, env)
        case BinOp(op=operator, left=left, right=right):
            i, j = evaluate(left, env), evaluate(right, env)
            assert isinstance(i, int) and isinstance(j, int)
            results = {"<": i < j, "<=": i <= j, ">": i > j, ">=": i >= j, "+": i + j, "-": i - j}
            return results[operator]
    raise AssertionError(e)


def assert_compiled_agrees_with_reference(tree: Expr) -> None:
    """Over every valuation of ``SCOPE``: the closure gives the reference's value, in its type."""
    resolved, typ = check(tree, SCOPE)
    d = compile_expr(check(D_TREE, SCOPE)[0], VAR_INDEX, {}, {})
    compiled = compile_expr(resolved, VAR_INDEX, PARAM_INDEX, {"d": d})
    for state, args in VALUATIONS:
        env = dict(zip(VARS, state, strict=True)) | dict(zip(PARAMS, args, strict=True))
        want = evaluate(tree, env)
        got = compiled(state, args)
        assert (type(got), got) == (type(want), want), (unparse(tree), env)
        assert got in typ.values, (unparse(tree), env, str(typ))  # the type bounds the value


@pytest.mark.parametrize(
    "text",
    [
        *(f"a {logic} b" for logic in ("and", "or", "implies")),
        *(f"n {compare} 1" for compare in ("==", "!=", "<", "<=", ">", ">=")),
        *(f"a {equality} b" for equality in ("==", "!=")),
        *(f"e {equality} y" for equality in ("==", "!=")),
        "n + 1",
        "n - 1",
        "1 - n",
        "not a",
        "e in {x, z}",
        "if a then n else 2",
        "if p then e else y",
        "d",
    ],
)
def test_each_operator_compiles_to_its_meaning(text: str) -> None:
    assert_compiled_agrees_with_reference(parse_expr(text))


@given(expressions())
def test_unparse_round_trips_and_compiled_code_agrees_with_a_reference(tree: Expr) -> None:
    text = unparse(tree)
    parsed = parse_expr(text)
    assert repr(parsed) == repr(tree), text  # repr tells Lit(True) from Lit(1)
    assert_compiled_agrees_with_reference(parsed)


# --- typing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "typ"),
    [
        ("n", "int[0..2]"),
        ("2", "int[2..2]"),
        ("n + 1", "int[1..3]"),
        ("n + n", "int[0..4]"),
        ("n - n", "int[-2..2]"),
        ("1 - n", "int[-1..1]"),
        ("n - 1 + 3", "int[2..4]"),
        ("if a then n else 5", "int[0..5]"),
        ("if a then x else y", "x|y"),
        ("if a then e else x", "letter"),
        ("e", "letter"),
        ("n + 1 < 3", "bool"),
        ("d", "bool"),
        ("p", "bool"),
    ],
)
def test_expressions_have_types_and_integers_have_ranges(text: str, typ: str) -> None:
    assert str(check(parse_expr(text), SCOPE)[1]) == typ


def test_integer_arithmetic_types_are_ranges() -> None:
    _, typ = check(parse_expr("n - 3"), SCOPE)
    assert typ == int_type(-3, -1)
    assert tuple(typ.values) == (-3, -2, -1)
    assert int_type(0, 4).admits(int_type(1, 3))
    assert not int_type(0, 2).admits(int_type(1, 3))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("zz", "unknown name 'zz' (did you mean 'z'?)", id="unknown-name"),
        pytest.param("not n", "type mismatch: 'not' needs a boolean, not int[0..2]", id="not"),
        pytest.param("a and n", "type mismatch: 'and' needs a boolean, not int[0..2]", id="and"),
        pytest.param("e or a", "type mismatch: 'or' needs a boolean, not letter", id="or"),
        pytest.param(
            "a implies 1", "type mismatch: 'implies' needs a boolean, not int[1..1]", id="implies"
        ),
        pytest.param(
            "if n then a else b", "type mismatch: 'if' needs a boolean, not int[0..2]", id="if-test"
        ),
        pytest.param(
            "if a then n else b",
            "type mismatch: 'then' is int[0..2] but 'else' is bool",
            id="if-branches",
        ),
        pytest.param(
            "n in {x}", "'in' needs an enumeration on its left, not int[0..2]", id="in-operand"
        ),
        pytest.param(
            "e in {x, w}", "'w' is not a value of letter (values: x, y, z)", id="in-outside-domain"
        ),
        pytest.param(
            "n + a", "type mismatch: '+' needs integers, not int[0..2] and bool", id="plus"
        ),
        pytest.param(
            "e - 1", "type mismatch: '-' needs integers, not letter and int[1..1]", id="minus"
        ),
        pytest.param(
            "e == a", "type mismatch: cannot compare letter with bool", id="compare-kinds"
        ),
        pytest.param(
            "n == true", "type mismatch: cannot compare int[0..2] with bool", id="int-with-bool"
        ),
        pytest.param("a < b", "type mismatch: '<' needs integers, not bool", id="order-bools"),
        pytest.param("e >= x", "type mismatch: '>=' needs integers, not letter", id="order-enums"),
        pytest.param("x == y", "comparing two values (x, y) is constant", id="constant-comparison"),
        pytest.param(
            "(if a then x else x) == y",
            "type mismatch: x and y share no value",
            id="disjoint-enums",
        ),
    ],
)
def test_ill_typed_expressions_are_rejected_with_the_rule_they_break(
    text: str, message: str
) -> None:
    with pytest.raises(ExprError, match=exactly(message)):
        check(parse_expr(text), SCOPE)


def test_a_definition_or_parameter_resolves_before_an_enumeration_value() -> None:
    resolved, _ = check(parse_expr("d and p"), SCOPE)
    assert repr(resolved) == "BinOp(op='and', left=Def(name='d'), right=Param(name='p'))"


# --- malformed expressions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "empty expression", id="empty"),
        pytest.param("   ", "empty expression", id="blank"),
        pytest.param("(a and b", "unexpected end of expression, expected ')'", id="unclosed-paren"),
        pytest.param("a and b)", "unexpected ')' after a complete expression", id="extra-paren"),
        pytest.param("a and", "unexpected end of expression, expected a name", id="dangling-and"),
        pytest.param("a or and b", "expected a name but found 'and'", id="two-operators"),
        pytest.param("a & b", "unexpected character '&' at column 3", id="bad-character"),
        pytest.param("a  ≥ b", "unexpected character '≥' at column 4", id="non-ascii-character"),
        pytest.param("a b", "unexpected 'b' after a complete expression", id="two-names"),
        pytest.param(
            "a == b == c", "unexpected '==' after a complete expression", id="chained-compare"
        ),
        pytest.param("e in {}", "expected a name but found '}'", id="empty-set"),
        pytest.param("e in {x", "unexpected end of expression, expected '}'", id="unclosed-set"),
        pytest.param("e in x", "expected '{' but found 'x'", id="set-without-braces"),
        pytest.param("e in {true}", "expected a name but found 'true'", id="keyword-in-set"),
        pytest.param(
            "if a then b", "unexpected end of expression, expected 'else'", id="if-no-else"
        ),
        pytest.param("if a b else c", "expected 'then' but found 'b'", id="if-no-then"),
        pytest.param("-1", "expected a name but found '-'", id="no-unary-minus"),
        pytest.param("a := b", "unexpected ':=' after a complete expression", id="statement"),
    ],
)
def test_malformed_expressions_are_rejected_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=exactly(message)):
        parse_expr(text)


# --- statements ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "stmt"),
    [
        ("n := n + 1", Assign("n", op("+", ident("n"), Lit(1)))),
        ("a := b and not c", Assign("a", op("and", ident("b"), Not(ident("c"))))),
        ("e := if a then x else e", Assign("e", Cond(ident("a"), ident("x"), ident("e")))),
        ("go()", Call("go", ())),
        ("f(a, n + 1)", Call("f", (ident("a"), op("+", ident("n"), Lit(1))))),
        ("f(if a then x else y)", Call("f", (Cond(ident("a"), ident("x"), ident("y")),))),
        ("  f( a ,b )  ", Call("f", (ident("a"), ident("b")))),
    ],
)
def test_statements_parse_to_assignments_and_calls(text: str, stmt: Assign | Call) -> None:
    assert parse_stmt(text) == stmt
    assert parse_stmt(unparse_stmt(stmt)) == stmt


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "empty effect", id="empty"),
        pytest.param("a", "an effect is 'var := expr' or 'effect(args)', not 'a'", id="bare-name"),
        pytest.param(
            "a + 1", "an effect is 'var := expr' or 'effect(args)', not 'a + 1'", id="expression"
        ),
        pytest.param("a :=", "unexpected end of expression, expected a name", id="no-value"),
        pytest.param("a = b", "unexpected character '=' at column 3", id="single-equals"),
        pytest.param(":= b", "expected a name but found ':='", id="no-target"),
        pytest.param("true := b", "expected a name but found 'true'", id="keyword-target"),
        pytest.param("a := b c", "unexpected 'c' after a complete expression", id="trailing-name"),
        pytest.param("f(a", "unexpected end of expression, expected ')'", id="unclosed-call"),
        pytest.param("f(a,)", "expected a name but found ')'", id="trailing-comma"),
        pytest.param("f(a b)", "expected ')' but found 'b'", id="missing-comma"),
        pytest.param("f(a) g()", "unexpected 'g' after a complete expression", id="two-calls"),
    ],
)
def test_malformed_statements_are_rejected_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=exactly(message)):
        parse_stmt(text)


@pytest.mark.parametrize(
    ("text", "target", "effect", "message"),
    [
        pytest.param(
            "a",
            COUNT,
            None,
            "type mismatch: n is int[0..2] but the value is bool",
            id="assign-kind",
        ),
        pytest.param(
            "if a then x else y",
            enum_type("only_x", ("x",)),
            None,
            "out-of-domain assignment: n := if a then x else y may give y, not in only_x (x)",
            id="assign-domain",
        ),
        pytest.param(
            "n",
            BOOL,
            "go",
            "type mismatch: go's parameter n is bool but the value is int[0..2]",
            id="argument-kind",
        ),
        pytest.param(
            "e",
            enum_type("xy", ("x", "y")),
            "go",
            "out-of-domain argument: go(n=e) may give z, not in xy (x, y)",
            id="argument-domain",
        ),
    ],
)
def test_assigned_values_and_arguments_must_fit_their_target(
    text: str, target: Type, effect: str | None, message: str
) -> None:
    with pytest.raises(ExprError, match=exactly(message)):
        check_stmt_value(parse_expr(text), target, SCOPE, "n", effect=effect)


def test_integer_assignments_are_left_to_domain_enumeration() -> None:
    # `n := n + 1` may overflow int[0..2]; the loader finds the state where it does.
    resolved = check_stmt_value(parse_expr("n + 1"), COUNT, SCOPE, "n")
    assert repr(resolved) == "BinOp(op='+', left=Var(name='n'), right=Lit(value=1))"
