"""Fuzzed table and model files: the only exception is SpecError, naming the file and a place,
in a bounded message with no control character; a table loads whole or not at all.

The inputs are the shipped files mutated as a careless or hostile author would (a key dropped,
renamed or given a value of the wrong type, a huge, deep or odd string, a huge integer, bytes
that are not UTF-8) and plain garbage. Each test runs a quarter of the profile's examples:
25 in ``ci`` (the file takes seconds), 1,250 with ``--hypothesis-profile=deep`` (minutes).
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsm_core import SpecError, load_spec
from fsm_core._errors import SHOWN_FAULTS
from fsm_core._paths import models_dir, specs_dir
from fsm_core.check import load_model
from tests.helpers import copy_specs
from tests.test_spec_faults import BASE, write_specs

# A fraction of the profile's examples: each loads (and proves) a table.
FUZZ = settings(
    max_examples=max(10, settings().max_examples // 4),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MESSAGE_LIMIT = 1_000
"""Generous: a fault quotes at most 80 characters of any one input."""

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

# --- writing TOML -----------------------------------------------------------------------------


def _string(text: str) -> str:
    # JSON escapes what TOML requires escaped, except DEL.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value).lower() if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    assert isinstance(value, dict), value
    return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"


def to_toml(data: dict[str, Any]) -> str:
    """``data`` as TOML, every table inline: one ``key = value`` line per top-level key."""
    return "".join(f"{_key(k)} = {_value(v)}\n" for k, v in data.items())


# --- strategies -------------------------------------------------------------------------------


def _strings_of(data: object) -> list[str]:
    if isinstance(data, dict):
        return [s for k, v in data.items() for s in (k, *_strings_of(v))]
    if isinstance(data, list):
        return [s for v in data for s in _strings_of(v)]
    return [data] if isinstance(data, str) else []


def _nested(depth: int) -> object:
    value: object = 1
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


ODD_TEXT = ["\x1b[2J", "a\nb", "\u202e", "", " ", "a.b", "int[0..100000]", "int[0..K]"]


def odd_values(words: list[str]) -> st.SearchStrategy[object]:
    """Values of every TOML type, plausible (the table's own words, expressions of them) and
    hostile (control characters, huge, deep, out of range)."""
    word = st.sampled_from(words)
    tokens = st.sampled_from([*words, "and", "or", "not", "(", ")", "==", "+", "1", "in", "{"])
    scalars = st.one_of(
        word,
        st.lists(tokens, min_size=1, max_size=12).map(" ".join),
        st.text(max_size=40),
        st.from_regex(r"[a-z_][a-z0-9_.]{0,12}", fullmatch=True),
        st.sampled_from(ODD_TEXT),
        st.integers(1_000, 200_000).map(lambda n: "x" * n),
        st.integers(1, 300).map(lambda n: "(" * n + "phase == idle" + ")" * n),
        st.integers(-(2**64), 2**64),
        st.sampled_from([0, 1, -1, 2**31, 10**9, 10**4000]),
        st.booleans(),
        st.floats(allow_nan=True),
        st.dates(),
    )
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=4),
        st.dictionaries(word, scalars, max_size=3),
        st.integers(1, 60).map(_nested),
    )


@st.composite
def mutated(draw: st.DrawFn, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with one to three keys dropped, renamed or given an odd value."""
    data = json.loads(json.dumps(data, default=str))  # a deep copy with dates as text
    words = _strings_of(data) or ["x"]
    values = odd_values(words)
    new_keys = st.one_of(st.sampled_from(words), st.text(max_size=30), st.sampled_from(ODD_TEXT))
    for _ in range(draw(st.integers(1, 3))):
        node: Any = data
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            child = node[key]
            # Descend three times in four: most faults worth finding are deep in a row.
            if isinstance(child, dict | list) and child and draw(st.integers(0, 3)):
                node = child
                continue
            action = draw(st.sampled_from(["drop", "replace", "rename"]))
            if action == "drop":
                del node[key]
            elif action == "rename" and isinstance(node, dict):
                node[draw(new_keys)] = node.pop(key)
            else:
                node[key] = draw(values)
            break
    return data


@st.composite
def damaged(draw: st.DrawFn, text: str) -> bytes:
    """``text`` as UTF-8 with a slice replaced by arbitrary bytes (or cut short)."""
    raw = text.encode()
    start = draw(st.integers(0, len(raw)))
    end = draw(st.integers(start, min(len(raw), start + 40)))
    junk = draw(st.one_of(st.binary(max_size=20), st.sampled_from([b"\xff", b"\x00", b"\xc3"])))
    return raw[:start] + junk + raw[end:]


@st.composite
def table_files(draw: st.DrawFn, text: str) -> bytes:
    """Eight times in ten valid TOML with odd content; else damaged bytes, or garbage."""
    pick = draw(st.integers(0, 9))
    if pick == 0:
        return draw(st.one_of(st.binary(max_size=400), st.text(max_size=400).map(str.encode)))
    if pick == 1:
        return draw(damaged(text))
    return to_toml(draw(mutated(tomllib.loads(text)))).encode()


# --- the properties ---------------------------------------------------------------------------


FILE_LEVEL = (
    "file not found",
    "a directory; expected a file",
    "not a regular file; expected a file",
    "cannot open the file: ",
    "cannot read the file: ",
    "larger than the limit of ",
    "not valid UTF-8 at line ",
    "not valid TOML: ",
    "values nested over ",
    "unknown key ",
    "missing key ",
)
"""Faults of a whole file (or its top level), which need no place beyond the file."""


def assert_refusal(error: SpecError, file: str) -> None:
    """A refusal names the file and a place (with its line, where one holds it) for each
    fault, boundedly, printably."""
    assert error.file == file
    lines = str(error).split("\n")
    if len(error.faults) > 1:
        assert lines[0] == f"{file}: {len(error.faults):,} faults; nothing of it was loaded:"
        assert lines[1:] == [f"  {e}" for e in error.faults[:SHOWN_FAULTS]] + (
            [f"  ... and {len(error.faults) - SHOWN_FAULTS:,} more faults"]
            if len(error.faults) > SHOWN_FAULTS
            else []
        )
    for fault in error.faults:
        message = str(fault)
        at = fault.file if fault.line is None else f"{fault.file}:{fault.line}"
        assert fault.where or fault.fault.startswith(FILE_LEVEL), message
        assert message == (
            f"{at}: {fault.where}: {fault.fault}" if fault.where else f"{at}: {fault.fault}"
        )
        assert message.isprintable(), message
        assert len(message) <= MESSAGE_LIMIT, message[:200]


@pytest.fixture(scope="module")
def shipped_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of specs/ and models/bench/ with room for model files in models/."""
    root = tmp_path_factory.mktemp("shipped")
    copy_specs(root)
    shutil.copytree(models_dir() / "bench", root / "models" / "bench")
    return root


def _small_specs(root: Path) -> Path:
    return write_specs(root, {})


def _shipped_specs(root: Path) -> Path:
    specs = root / "specs"
    shutil.copytree(specs_dir(), specs, ignore=shutil.ignore_patterns("*.toml", "vectors"))
    shutil.copy(specs_dir() / "clauses.toml", specs)
    return specs


TABLES = [
    pytest.param(BASE, _small_specs, id="small"),
    pytest.param(
        (specs_dir() / "activation.toml").read_text(encoding="utf-8"),
        _shipped_specs,
        id="activation",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        (specs_dir() / "agent.toml").read_text(encoding="utf-8"),
        _shipped_specs,
        id="agent",
        marks=pytest.mark.slow,
    ),
]


@pytest.mark.parametrize(("table", "specs_for"), TABLES)
@FUZZ
@given(data=st.data())
def test_a_fuzzed_table_loads_whole_or_is_refused_with_a_spec_error(
    tmp_path_factory: pytest.TempPathFactory,
    table: str,
    specs_for: Callable[[Path], Path],
    data: st.DataObject,
) -> None:
    raw = data.draw(table_files(table))
    specs = specs_for(tmp_path_factory.mktemp("table"))  # a fresh root: load_spec caches
    (specs / "t.toml").write_bytes(raw)
    try:
        spec = load_spec(specs)
    except SpecError as e:
        assert_refusal(e, "specs/t.toml")
        # Nothing was kept: loading again fails the same way.
        with pytest.raises(SpecError) as again:
            load_spec(specs)
        assert str(again.value) == str(e)
        return
    # Whole: the one table, compiled, with the whole catalogue.
    assert spec.clauses == load_spec(specs_for(tmp_path_factory.mktemp("clauses"))).clauses
    (machine,) = spec.machines.values()
    assert machine.violated(machine.initial) == []


@pytest.mark.parametrize("model", ["agent_races", "activation_tree", "bench_S"])
@FUZZ
@given(data=st.data())
def test_a_fuzzed_model_file_loads_or_is_refused_with_a_spec_error(
    shipped_models: Path, model: str, data: st.DataObject
) -> None:
    text = (models_dir() / f"{model}.toml").read_text(encoding="utf-8")
    raw = data.draw(table_files(text))
    path = shipped_models / "models" / f"{model}.toml"
    path.write_bytes(raw)
    try:
        loaded = load_model(path)
    except SpecError as e:
        # A fault of the model file, or of the table or catalogue it names.
        assert e.file
        assert_refusal(e, e.file)
        return
    assert loaded.file == f"models/{model}.toml"
    assert loaded.machine.violated(loaded.machine.initial) == []
