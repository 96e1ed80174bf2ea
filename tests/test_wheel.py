"""The wheel is what a user installs: typed, licensed, and whole without the repository.

Built from this checkout with the ``uv`` that runs the tests (``uv run`` names it in ``$UV``),
then installed in a fresh virtual environment and run from an empty directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
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


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed in a fresh virtual environment: its ``bin`` directory."""
    assert UV is not None
    root = tmp_path_factory.mktemp("installed")
    venv = root / "venv"
    subprocess.run([UV, "venv", "--quiet", str(venv)], check=True, cwd=root)
    python = venv / "bin" / "python"
    subprocess.run(
        [UV, "pip", "install", "--quiet", "--python", str(python), str(wheel)],
        check=True,
        cwd=root,
    )
    return venv / "bin"


def _elsewhere(installed: Path, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """The installed ``fsm-core argv`` run from an empty directory, outside the repository."""
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    return subprocess.run(
        [str(installed / "fsm-core"), *argv],
        check=False,
        cwd=empty,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_installed_wheel_checks_a_model_outside_the_repository(
    installed: Path, tmp_path: Path
) -> None:
    done = _elsewhere(installed, tmp_path, "check", "window")
    assert done.returncode == 0, done.stderr
    assert "window" in done.stdout and "ok" in done.stdout


def test_the_installed_wheel_writes_the_viewer_page(installed: Path, tmp_path: Path) -> None:
    """`fsm-core view` reads its template from package data, which the wheel must carry."""
    done = _elsewhere(installed, tmp_path, "view", "--out", "page.html")
    assert (done.returncode, done.stdout) == (0, "wrote page.html\n"), done.stderr
    page = (tmp_path / "elsewhere" / "page.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "specs/agent.toml" in page


def test_the_installed_wheel_prints_its_version(installed: Path, tmp_path: Path) -> None:
    done = _elsewhere(installed, tmp_path, "--version")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert (done.returncode, done.stdout) == (0, f"fsm-core {version}\n")


@pytest.mark.skipif(shutil.which("node") is None, reason="the JavaScript port needs node")
def test_the_installed_wheel_replays_the_vectors_it_ships(installed: Path, tmp_path: Path) -> None:
    """Outside a checkout, ``vectors --replay`` reads the vectors inside the wheel (it read an
    empty ``./vectors`` before)."""
    replayer = f"node {ROOT / 'ports' / 'js' / 'replay.js'}"
    done = _elsewhere(installed, tmp_path, "vectors", "--replay", replayer)
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = sum(
        len(p.read_text().splitlines()) for p in (ROOT / "specs" / "vectors").glob("*.jsonl")
    )
    assert done.stdout.splitlines()[-1] == (
        f"replayed {shipped} vectors with {replayer}: {shipped} pass"
    )
