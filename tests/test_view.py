"""``fsm-core view``: the page it writes, and that page driven in a real browser.

The browser tests run Debian's chromium headless through ``playwright-core`` from npm
(installed once per checkout into pytest's cache, as the ACP client tests install theirs;
``npx playwright install`` is never used): ``tests/view_driver.mjs`` clicks and steps as a user
would and reports what the page shows; the tests check that against the tables and the trace
file. Skipped, saying why, only where node, npm or chromium is absent (``scripts/test``
installs chromium)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fsm_core.cli import main
from fsm_core.table import Spec, load_spec
from fsm_core.table._expr import unparse, unparse_stmt
from fsm_core.tools._mutants import BY_NAME
from fsm_core.tools._view import render_view
from tests.helpers import copy_specs, edit, npm_install

pytestmark = pytest.mark.timeout(180)

HERE = Path(__file__).parent
ROOT = HERE.parent
DRIVER = HERE / "view_driver.mjs"
PLAYWRIGHT = "playwright-core"
PLAYWRIGHT_VERSION = "1.65.2"
CHROMIUM = shutil.which("chromium")
HAVE_DOT = shutil.which("dot") is not None
HOSTILE = '</script><img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
"""Table text and trace text that would run if the page took it for markup."""
MUTANT = "parent_leaves_before_children"
"""A planted table bug that activation_chain kills in three steps, with calls nested inside
calls (the door's admit admits below; a dispose disposes its children)."""


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


# --- the page as written --------------------------------------------------------------------------


def data_of(page: str) -> Any:
    found = re.search(r'<script type="application/json" id="fsm-data">(.*?)</script>', page, re.S)
    assert found is not None
    return json.loads(found[1])


def test_the_page_is_self_contained_and_lets_only_its_own_script_run() -> None:
    page = render_view(load_spec())
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=", page)
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None
    script = re.search(r"<script>(.*)</script>", page, re.S)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script[1].encode()).digest()).decode()
    assert policy[1] == (
        f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{digest}'"
    )
    for marker in ("{{script-hash}}", "/*{{style}}*/", "/*{{script}}*/", "{{data}}"):
        assert marker not in page
    data = data_of(page)
    assert [m["name"] for m in data["machines"]] == ["activation", "admission", "agent"]
    assert data["clauses"]["D1"]["quote"] == load_spec().clauses["D1"].quote


def test_table_and_trace_text_is_embedded_as_json_never_as_markup(tmp_path: Path) -> None:
    spec, trace = hostile(tmp_path)
    page = render_view(spec, [("evil.json", json.loads(trace.read_text()))])
    assert HOSTILE not in page
    assert page.count("<script") == 2 and page.count("</script>") == 2
    data = data_of(page)
    admission = next(m for m in data["machines"] if m["name"] == "admission")
    assert admission["title"] == HOSTILE
    assert data["traces"][0]["itf"]["states"][1]["#meta"]["action"] == HOSTILE


def test_view_writes_the_page_and_says_where(tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    code, said, err = run("view", "--out", str(out))
    assert (code, said, err) == (0, f"wrote {out}\n", "")
    assert data_of(out.read_text(encoding="utf-8"))["traces"] == []


def test_view_refuses_a_page_it_cannot_write_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "page.html"
    code, said, err = run("view", "--out", str(out))
    assert (code, said, err) == (2, "", f"fsm-core: --out {out}: No such file or directory\n")
    assert list(tmp_path.iterdir()) == []


def test_view_without_dot_lists_states_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    out = tmp_path / "page.html"
    code, said, err = run("view", "--out", str(out))
    assert (code, said) == (0, f"wrote {out}\n")
    assert err == (
        "fsm-core: Graphviz `dot` is not on PATH: the page lists each machine's states instead "
        "of drawing its overview (install graphviz to draw them)\n"
    )
    data = data_of(out.read_text(encoding="utf-8"))
    assert [m["svg"] for m in data["machines"]] == [None, None, None]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{", "not JSON (line 1, column 2: Expecting property name enclosed in double quotes)"),
        (
            '{"vars": []}',
            'not an ITF trace (it needs a list of states under "states"; '
            "`fsm-core check --trace-format itf --trace-out FILE` writes one)",
        ),
        # Python reads NaN, the page's JSON.parse does not: one in a trace blanked the page.
        ('{"states": [{"x": NaN}]}', "not JSON (NaN is no JSON value)"),
    ],
    ids=["not-json", "not-itf", "nan"],
)
def test_a_trace_that_is_not_itf_is_refused_naming_the_file(
    tmp_path: Path, content: str, why: str
) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(content, encoding="utf-8")
    out = tmp_path / "page.html"
    code, said, err = run("view", "--out", str(out), "--trace", str(trace))
    assert (code, said, err) == (2, "", f"fsm-core: --trace {trace}: {why}\n")
    assert not out.exists()


# --- in the browser -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def playwright_core(request: pytest.FixtureRequest) -> Path:
    """Where ``playwright-core`` is installed: once per checkout, under pytest's cache (or the
    temporary directory, without the cache plugin)."""
    missing = [
        what
        for what, found in (
            ("node", shutil.which("node")),
            ("npm", shutil.which("npm")),
            ("chromium", CHROMIUM),
        )
        if found is None
    ]
    if missing:
        pytest.skip(
            f"{' and '.join(missing)} not on PATH: the viewer's browser tests drive Debian's "
            "chromium with playwright-core from npm (`apt-get install chromium nodejs npm`)"
        )
    prefix = npm_install(request, "view-npm", PLAYWRIGHT, PLAYWRIGHT_VERSION)
    return prefix / "node_modules"


def drive(core: Path, **plan: object) -> Any:
    """Run the driver on ``plan`` (see view_driver.mjs); what the page showed."""
    done = subprocess.run(
        ["node", str(DRIVER), str(core), json.dumps({"chromium": CHROMIUM, **plan})],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def counterexample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real counterexample: activation_chain checked against a planted table bug, written
    as ITF by ``fsm-core check --trace-out``."""
    root = tmp_path_factory.mktemp("mutant")
    BY_NAME[MUTANT].plant(copy_specs(root))
    (root / "models").mkdir()
    model = shutil.copy(ROOT / "models" / "activation_chain.toml", root / "models")
    trace = root / "counterexample.json"
    code, _, err = run("check", str(model), "--trace-format", "itf", "--trace-out", str(trace))
    assert code == 1, err
    return trace


@pytest.fixture(scope="module")
def seen(
    playwright_core: Path, counterexample: Path, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """One browser session: click the agent's idle state, then its arrow for cancel from running
    to cancelling (where dot drew one), open the activation's row children.joined, open the
    counterexample through the page's file input, step through it with the arrow key, then
    press prev once."""
    page = tmp_path_factory.mktemp("page") / "view.html"
    page.write_text(render_view(load_spec()), encoding="utf-8")
    return drive(
        playwright_core,
        page=str(page),
        click_state=["agent", "idle"],
        click_arrow=["agent", "event:running:cancel:cancelling"] if HAVE_DOT else None,
        click_row=["activation", "children.joined"],
        open_trace=str(counterexample),
    )


def test_the_page_draws_every_state_and_fetches_nothing(seen: Any) -> None:
    assert (seen["errors"], seen["requests"], seen["dialogs"]) == ([], [], [])
    spec = load_spec()
    drawn = [[m, s.name] for m, machine in spec.machines.items() for s in machine.table.states]
    assert sorted(seen["drawn"]) == (sorted(drawn) if HAVE_DOT else [])


def row_texts(spec: Spec, machine: str, row_id: str) -> tuple[str, list[str]]:
    m = spec.machines[machine]
    row = next(r for r in m.table.rows if r.id == row_id)
    guard = unparse(row.guard) if row.guard_text is not None else "(none: always)"
    return f"guard: {guard}", [unparse_stmt(s) for s in row.effects]


def test_clicking_a_state_shows_each_of_its_rows_guard_effects_and_seed_sentence(
    seen: Any,
) -> None:
    spec = load_spec()
    shown = seen["state_details"]
    assert (shown["machine"], shown["state"], seen["clicked_svg"]) == ("agent", "idle", HAVE_DOT)
    rows = [r for r in spec.machines["agent"].table.rows if "idle" in r.sources]
    assert [r["id"] for r in shown["rows"]] == [r.id for r in rows]
    for row, got in zip(rows, shown["rows"], strict=True):
        guard, effects = row_texts(spec, "agent", row.id)
        assert (got["guard"], got["effects"]) == (guard, effects)
        assert [c[0] for c in got["clauses"]] == list(row.clauses)
        for cid, text in got["clauses"]:
            clause = spec.clauses[cid]
            assert text == f"{cid} ({clause.source}): {clause.summary}\n{clause.quote}"
    if HAVE_DOT:
        assert seen["selected"] == ["idle"]


@pytest.mark.skipif(not HAVE_DOT, reason="Graphviz `dot` is not on PATH: no arrows are drawn")
def test_clicking_an_arrow_shows_the_rows_it_stands_for(seen: Any) -> None:
    assert seen["arrow_details"] == {
        "title": "agent · cancel: running → cancelling",
        "rows": ["cancel.turn", "cancel.flush"],
    }


def test_clicking_a_row_shows_its_guard_and_clauses(seen: Any) -> None:
    spec = load_spec()
    guard, _ = row_texts(spec, "activation", "children.joined")
    text = seen["row_details"]
    assert text.startswith("activation · row children.joined\n")
    assert guard in text.splitlines()
    row = next(r for r in spec.machines["activation"].table.rows if r.id == "children.joined")
    for cid in row.clauses:
        assert spec.clauses[cid].quote in text


def show(value: Any) -> str:
    """An ITF scalar as the page shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict) and "#bigint" in value:
        return str(value["#bigint"])
    assert isinstance(value, str), value
    return value


def flatten(state: dict[str, Any]) -> dict[str, str]:
    """The page's variables of one state: a record's fields as ``var.field``."""
    out: dict[str, str] = {}
    for name, value in state.items():
        if name == "#meta":
            continue
        inner = value
        if isinstance(value, dict) and set(value) == {"tag", "value"}:
            if value["tag"] == "None":
                out[name] = "absent"
                continue
            inner = value["value"]
        if isinstance(inner, dict) and "#bigint" not in inner:
            out |= {f"{name}.{k}": show(v) for k, v in inner.items()}
        else:
            out[name] = show(inner)
    return out


def calls(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "action": meta["action"],
        "row": meta["row"],
        "inside": [calls(c) for c in meta.get("inside", [])],
    }


def test_stepping_a_counterexample_highlights_the_instance_its_state_and_what_changed(
    seen: Any, counterexample: Path
) -> None:
    spec = load_spec()
    states = json.loads(counterexample.read_text())["states"]
    assert [s["index"] for s in seen["steps"]] == list(range(len(states)))
    assert len(states) == 4
    for i, step in enumerate(seen["steps"]):
        assert step["label"] == f"step {i} / {len(states) - 1}"
        if i == 0:
            assert (step["changed"], step["active_nodes"], step["calls"]) == ([], [], [])
            continue
        before, after = flatten(states[i - 1]), flatten(states[i])
        changed = [
            [name, f"{name}: {before.get(name, '—')} → {after.get(name, '—')}"]
            for name in [*after, *(n for n in before if n not in after)]
            if before.get(name) != after.get(name)
        ]
        assert step["changed"] == changed, i
        meta = states[i]["#meta"]
        record = states[i][meta["instance"]]["value"]
        machine = next(n for n, m in spec.machines.items() if m.table.state_var in record)
        active = [[machine, record[spec.machines[machine].table.state_var]]]
        assert step["active_instances"] == [meta["instance"]]
        assert step["active_buttons"] == active
        assert step["active_nodes"] == (active if HAVE_DOT else [])
        assert step["calls"] == [calls(meta)]
    nested = seen["steps"][2]["calls"][0]
    assert nested["inside"][0]["action"] == "a.1.dispose(final_state_flushed=false, drain=false)"
    assert seen["after_prev"]["index"] == len(states) - 2


def hostile(tmp_path: Path) -> tuple[Spec, Path]:
    """Tables whose title, state doc, row doc and clause summary are :data:`HOSTILE`, and a
    trace whose action, row, instance, variable name and value are."""
    specs = copy_specs(tmp_path)
    text = json.dumps(HOSTILE)
    edit(
        specs / "admission.toml",
        'title = "Admission: the registry\'s door, registry-wide drains and live parents"',
        f"title = {text}",
    )
    edit(
        specs / "admission.toml",
        "drained = { doc = \"drain() (or the runtime's close) closed admission registry-wide, "
        'for good." }',
        f"drained = {{ doc = {text} }}",
    )
    edit(
        specs / "clauses.toml",
        'summary = "The caller cause is exactly user or parent; cancel() defaults to user."',
        f"summary = {text}",
    )
    trace = {
        "vars": ["a", HOSTILE],
        "states": [
            {"#meta": {"index": 0}, "a": {"stage": "active"}, HOSTILE: HOSTILE},
            {
                "#meta": {
                    "index": 1,
                    "action": HOSTILE,
                    "instance": HOSTILE,
                    "row": HOSTILE,
                    "inside": [{"effect": HOSTILE, "action": HOSTILE, "row": None}],
                },
                "a": {"stage": "joining"},
                HOSTILE: {"#bigint": "1"},
            },
        ],
    }
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    return load_spec(specs), path


def test_hostile_table_and_trace_text_is_shown_and_never_runs(
    playwright_core: Path, tmp_path: Path
) -> None:
    spec, trace = hostile(tmp_path)
    page = tmp_path / "evil.html"
    page.write_text(render_view(spec, [(HOSTILE, json.loads(trace.read_text()))]), "utf-8")
    got = drive(
        playwright_core,
        page=str(page),
        click_state=["admission", "drained"],
        click_row=None,
        open_trace=str(trace),
    )
    assert (got["errors"], got["dialogs"], got["requests"]) == ([], [], [])
    assert (got["images"], got["pwned"]) == (0, None)
    assert HOSTILE in got["state_details"]["text"]  # the state's doc, as text
    step = got["steps"][1]
    assert step["changed"] == [
        ["a.stage", "a.stage: active → joining"],
        [HOSTILE, f"{HOSTILE}: {HOSTILE} → 1"],
    ]
    assert step["calls"][0]["action"] == HOSTILE
    assert step["calls"][0]["inside"][0]["action"] == HOSTILE
