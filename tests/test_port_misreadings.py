"""``ports/js/misread.js``: every deliberate misreading of the rules that the JavaScript port can
switch on fails some vector, so the conformance kit catches each; and specs/README.md keeps a
count for each of them (the counts themselves take a full replay per misreading to measure:
run ``node ports/js/misread.js --markdown``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")
HARNESS = REPO / "ports" / "js" / "misread.js"
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js `node` is not on PATH")


def node(*argv: str) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run([NODE, *argv], capture_output=True, text=True, check=False, cwd=REPO)


def misreadings() -> list[str]:
    listed = node("-e", "console.log(Object.keys(require('./ports/js/fsm').MISREADINGS).join(' '))")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def test_the_vectors_catch_every_misreading_of_the_port() -> None:
    """``--first`` replays the unmodified port (it passes everything), then each misreading up
    to the first vector that fails it."""
    done = node(str(HARNESS), "--first")
    lines = done.stdout.splitlines()
    names = misreadings()
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.partition(":")[0] for line in lines[:-1]] == names
    assert all(": caught by " in line for line in lines[:-1]), lines
    assert lines[-1] == f"Done. misreadings={len(names)} caught={len(names)} missed=0"


def test_a_misreading_no_vector_catches_fails_the_harness(tmp_path: Path) -> None:
    """A vector file that holds nothing a misreading changes: the harness says it missed it."""
    vectors = REPO / "specs" / "vectors"
    shutil.copy(vectors / "tables.json", tmp_path)
    header = (vectors / "admission.jsonl").read_text(encoding="utf-8").splitlines()[0]
    (tmp_path / "admission.jsonl").write_text(header + "\n", encoding="utf-8")
    done = node(str(HARNESS), "--first", "--rule", "true_as_int", str(tmp_path))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "true_as_int: MISSED: no vector fails",
        "Done. misreadings=1 caught=0 missed=1",
    ]


def test_the_specs_readme_counts_every_misreading() -> None:
    readme = (REPO / "specs" / "README.md").read_text(encoding="utf-8")
    section = readme.partition("## How hard the vectors pin each rule")[2].partition("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == misreadings()
