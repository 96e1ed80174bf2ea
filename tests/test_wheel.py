"""The wheel is what a user installs: typed, licensed, and whole without the repository.

Built from this checkout with the ``uv`` that runs the tests (``uv run`` names it in ``$UV``),
then installed in a fresh virtual environment and run from an empty directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

UV = os.environ.get("UV") or shutil.which("uv")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if UV is None:
        pytest.skip("no uv to build the wheel with (run the tests with `uv run`)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [UV, "build", "--wheel", "--out-dir", str(out), "--quiet", str(ROOT)],
        check=True,
        cwd=ROOT,
    )
    (found,) = out.glob("fsm_core-*.whl")
    return found


def test_the_wheel_is_typed_and_licensed(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = z.read(metadata).decode()
    assert "fsm_core/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: MIT" in text
    assert "Classifier: Typing :: Typed" in text
    assert "fsm_core/data/specs/agent.toml" in names
    assert "fsm_core/data/models/window.toml" in names


def test_the_installed_wheel_checks_a_model_outside_the_repository(
    wheel: Path, tmp_path: Path
) -> None:
    assert UV is not None
    venv = tmp_path / "venv"
    subprocess.run([UV, "venv", "--quiet", str(venv)], check=True, cwd=tmp_path)
    python = venv / "bin" / "python"
    subprocess.run(
        [UV, "pip", "install", "--quiet", "--python", str(python), str(wheel)],
        check=True,
        cwd=tmp_path,
    )
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    done = subprocess.run(
        [str(venv / "bin" / "fsm-core"), "check", "window"],
        check=False,
        cwd=empty,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "window" in done.stdout and "ok" in done.stdout


def test_the_installed_wheel_writes_the_viewer_page(wheel: Path, tmp_path: Path) -> None:
    """`fsm-core view` reads its template from package data, which the wheel must carry."""
    assert UV is not None
    venv = tmp_path / "venv"
    subprocess.run([UV, "venv", "--quiet", str(venv)], check=True, cwd=tmp_path)
    subprocess.run(
        [UV, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel)],
        check=True,
        cwd=tmp_path,
    )
    done = subprocess.run(
        [str(venv / "bin" / "fsm-core"), "view", "--out", "page.html"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (0, "wrote page.html\n"), done.stderr
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "specs/agent.toml" in page
