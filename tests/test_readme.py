"""The README's Python examples run and print what the README says; its commands are typed as
the command line parses them; its counts and its Done line are current; its links resolve; its
exit statuses are the command line's."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from fsm_core import cli
from fsm_core._paths import models_dir
from fsm_core.check import check, load_model
from fsm_core.tools._mutants import MUTANTS as SPEC_MUTANTS
from tests.helpers import FSM_CORE, head, interrupt, shipped_models, write_model
from tests.race.runtime_mutants import MUTANTS as RUNTIME_MUTANTS
from tests.race.teardown_mutants import TEARDOWN_MUTANTS

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_its_examples() -> None:
    assert len(BLOCKS) == 3


@pytest.mark.parametrize("code", BLOCKS, ids=["tables", "runtime", "subagents"])
def test_readme_example_prints_what_it_claims(code: str) -> None:
    claimed = [
        re.sub(r"\s+<-.*$", "", line[2:]).rstrip()
        for line in code.splitlines()
        if line.startswith("# ")
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    assert out.getvalue().splitlines() == claimed


def test_readme_counts_the_mutant_catalogues_as_they_are() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert f"`fsm-core mutants --spec` plants {len(SPEC_MUTANTS)} plausible" in text
    assert f"plants {len(RUNTIME_MUTANTS)} plausible bugs in the runtime's own Python" in text
    assert f"runs seed 004's {len(TEARDOWN_MUTANTS)} teardown mutants" in text


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """One row of the README's exit-status table."""

    status: int
    summary: str
    command: list[str]
    """The example's arguments, after ``fsm-core`` and before a ``| head -1``."""
    interrupted: bool
    """The example ends ", then Ctrl-C"."""
    piped: bool
    """The example ends ``| head -1``."""


_ROW = re.compile(
    r"^\| (?P<status>\d+) \| \*\*(?P<summary>[^*]+)\*\*.* \| "
    r"`fsm-core (?P<command>[^`]+?)(?P<piped> \\\| head -1)?`(?P<interrupted>, then Ctrl-C)? \|$"
)


def _exit_statuses() -> list[ExitStatus]:
    text = README.read_text(encoding="utf-8")
    table = text.split("<!-- exit-statuses -->\n", 1)[1].split("\n\n", 1)[0]
    rows = table.splitlines()[2:]  # after the header and its rule
    found = [_ROW.match(row) for row in rows]
    assert all(found), [row for row, m in zip(rows, found, strict=True) if m is None]
    return [
        ExitStatus(
            int(m["status"]),
            m["summary"],
            shlex.split(m["command"]),
            m["interrupted"] is not None,
            m["piped"] is not None,
        )
        for m in found
        if m is not None
    ]


EXIT_STATUSES = _exit_statuses()


def test_the_cli_docstring_lists_the_readmes_exit_statuses() -> None:
    assert cli.__doc__ is not None
    listed = re.findall(r"^- (\d+): (.+)$", cli.__doc__, re.M)
    assert [int(status) for status, _ in listed] == [e.status for e in EXIT_STATUSES]
    for (_, text), e in zip(listed, EXIT_STATUSES, strict=True):
        assert text.startswith(e.summary), (text, e.summary)


@pytest.mark.parametrize("e", EXIT_STATUSES, ids=[str(e.status) for e in EXIT_STATUSES])
def test_readme_exit_status_example_exits_with_it(
    e: ExitStatus, capsys: pytest.CaptureFixture[str]
) -> None:
    if e.interrupted:
        # The example checks one model, last on its command line.
        code, _, _ = interrupt(e.command, under_way=f"{e.command[-1]}: states=")
    elif e.piped:
        code, _, _ = head(e.command)
    else:
        code = cli.main(e.command)
        capsys.readouterr()
    assert code == e.status


# --- the commands a newcomer types --------------------------------------------------------------

FENCED = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _command_lines() -> list[list[str]]:
    """Each command of the README's ``sh`` blocks as words: continuation lines joined, comments
    and leading ``VAR=value`` assignments dropped, ``a && b`` as two commands."""
    commands = []
    for lang, body in FENCED.findall(README.read_text(encoding="utf-8")):
        if lang != "sh":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                cut = words.index("&&") if "&&" in words else len(words)
                command, words = words[:cut], words[cut + 1 :]
                while command and re.match(r"^[A-Z_]+=", command[0]):
                    command = command[1:]
                if command:
                    commands.append(command)
    return commands


def _fsm_core_argv(words: list[str]) -> list[str] | None:
    """The arguments after ``fsm-core`` of a command that runs it, as typed or through uv."""
    for prefix in (["fsm-core"], ["python3", "-m", "uv", "run", "--locked", "fsm-core"]):
        if words[: len(prefix)] == prefix:
            return words[len(prefix) :]
    return None


FSM_CORE_COMMANDS = [a for w in _command_lines() if (a := _fsm_core_argv(w)) is not None]


def test_the_readme_shows_fsm_core_commands() -> None:
    subcommands = {argv[0] for argv in FSM_CORE_COMMANDS}
    assert {"check", "spec", "diagrams", "vectors", "mutants"} <= subcommands


@pytest.mark.parametrize("argv", FSM_CORE_COMMANDS, ids=[" ".join(a) for a in FSM_CORE_COMMANDS])
def test_each_fsm_core_command_in_the_readme_parses(argv: list[str]) -> None:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = cli._parser(argv).parse_args(argv)
    except SystemExit:
        pytest.fail(f"fsm-core {shlex.join(argv)}: {err.getvalue()}")
    if args.command == "check":  # a model named by name is one the repository has
        for name in args.model:
            if "/" not in name:
                assert (models_dir() / f"{name}.toml").is_file(), name


def test_the_readmes_spec_commands_run(capsys: pytest.CaptureFixture[str]) -> None:
    """The commands that only read run as typed; the ones that write or take minutes are
    covered where their subcommand is tested (diagrams, vectors, mutants, bench)."""
    spec = [argv for argv in FSM_CORE_COMMANDS if argv[:1] == ["spec"]]
    assert spec
    for argv in spec:
        assert cli.main(argv) == 0, argv
        assert capsys.readouterr().out


def test_every_other_command_names_files_that_exist() -> None:
    """``scripts/test``, ``node ports/js/...``, ``pytest tests/race``: every path a command
    names, before the options that take free text, is in the repository."""
    others = [w for w in _command_lines() if _fsm_core_argv(w) is None]
    assert any(w[0] == "scripts/test" for w in others)
    for words in others:
        for word in words:
            if word.startswith(("scripts/", "tests/", "ports/", "benchmarks/")):
                assert (REPO / word).exists(), (words, word)


# --- the figures ---------------------------------------------------------------------------------


def test_the_done_line_adds_up_the_default_models_expectations() -> None:
    """The Done line shown is what ``fsm-core check`` prints but for ``sec``: tests/test_models.py
    holds each default model to its ``[expect]``, and the Done line adds them up."""
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- done-line -->\n```text\n", 1)[1].split("```", 1)[0]
    m = re.fullmatch(
        r"Done\. models=(\d+) states=(\d+) transitions=(\d+) depth=(\d+) violations=0 "
        r"sec=\d+\.\d\d\n",
        block,
    )
    assert m is not None, block
    expected = [
        e
        for model in shipped_models()
        if model.tier == "default"
        for e in [model.expect]
        if e is not None
    ]
    assert all(e.verdict == "ok" for e in expected)
    assert [int(g) for g in m.groups()] == [
        len(expected),
        sum(e.states for e in expected),
        sum(e.transitions for e in expected),
        max(e.depth for e in expected),
    ]


def test_the_counterexample_shown_is_the_checkers() -> None:
    """The README's trace is what ``fsm-core mutants --spec --show last_wins_cause`` prints,
    each line as printed up to where the README cuts it with an ellipsis."""
    text = README.read_text(encoding="utf-8")
    after = text.split("disposes, and the outer cancel then rewrites the reason")[1]
    shown = after.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    done = subprocess.run(
        [*FSM_CORE, "mutants", "--spec", "--show", "last_wins_cause"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    printed = printed[next(i for i, line in enumerate(printed) if line.startswith("0. ")) :]
    assert len(shown) == len(printed)
    for mine, real in zip(shown, printed, strict=True):
        assert real.startswith(mine.removesuffix("…").rstrip(" ,")), (mine, real)


def test_the_own_model_example_proves_with_the_numbers_shown(tmp_path: Path) -> None:
    text = README.read_text(encoding="utf-8")
    body = text.split("<!-- own-model -->\n```toml\n", 1)[1].split("```", 1)[0]
    after = " ".join(text.split("<!-- own-model -->", 1)[1].split())
    claimed = re.search(
        r"proves it \(verdict `ok`, (\d+) states, (\d+) transitions, depth (\d+)\)", after
    )
    assert claimed is not None
    report = check(load_model(write_model(tmp_path, "my_agent", body)))
    assert report.verdict == "ok"
    assert report.unreacted == () and report.unreached == ()
    result = report.result
    assert [result.states, result.transitions, result.depth] == [int(g) for g in claimed.groups()]
    states, transitions, depth = claimed.groups()
    assert f"`states = {states}`, `transitions = {transitions}`, `depth = {depth}`" in after


# --- the links -----------------------------------------------------------------------------------

DOCS = [README, *sorted((REPO / "docs").glob("*.md")), REPO / "models" / "README.md"]
DOCS += [REPO / "benchmarks" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """``text`` without fenced blocks and code spans, where brackets are not links."""
    return re.sub(r"`[^`]*`", "", FENCED.sub("", text))


def _anchors(doc: Path) -> set[str]:
    """The anchors GitHub gives ``doc``'s headings."""
    headings = re.findall(r"^#+ (.+)$", FENCED.sub("", doc.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_relative_link_resolves(doc: Path) -> None:
    for link in LINK.findall(_prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        assert target.is_relative_to(REPO) and target.exists(), f"{doc.name}: {link}"
        if anchor:
            assert anchor in _anchors(target), f"{doc.name}: {link}"
