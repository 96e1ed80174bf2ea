"""The README's main command works as a new user runs it: in a fresh clone, with the system
``python3`` first on ``PATH`` (a stock Debian or Ubuntu one: PEP 668's
``externally-managed-environment``, perhaps no pip) and an empty ``HOME``, so nothing of this
machine's uv, caches or virtual environments helps (uv's cache is the empty HOME's, fresh: every
dependency is downloaded again). Slow (a minute or more): the ``slow`` stage of scripts/test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SYSTEM_PYTHON = Path("/usr/bin/python3")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def readme_command(marker: str) -> str:
    """The one line of the fenced block after ``<!-- marker -->`` in README.md, as .ci/run reads
    the test command."""
    after = README.read_text(encoding="utf-8").split(f"<!-- {marker} -->\n", 1)[1]
    block = after.split("```", 2)[1]
    lines = [line for line in block.splitlines()[1:] if line.strip()]
    assert len(lines) == 1, f"README.md: the {marker} block holds {lines}, not one line"
    return lines[0]


def fresh_clone(dest: Path) -> Path:
    """A ``git clone`` of this checkout, with the working tree's uncommitted changes and new
    files laid over it (so a developer tests what they have; in CI the two are the same)."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dest)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--modified", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source, target = ROOT / name, dest / name
        if source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        else:
            target.unlink(missing_ok=True)
    return dest


def test_the_readme_main_command_checks_the_models_with_the_system_python(
    tmp_path: Path,
) -> None:
    if not SYSTEM_PYTHON.exists():
        pytest.skip("no system python3 at /usr/bin/python3")
    command = readme_command("main-command")
    clone = fresh_clone(tmp_path / "clone")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(tmp_path),
        # What reaching PyPI may need on this network, and nothing else of this environment.
        **{
            k: v
            for k, v in os.environ.items()
            if k.lower() in {"http_proxy", "https_proxy", "no_proxy", "ssl_cert_file"}
        },
    }
    python = subprocess.run(
        ["python3", "-c", "import sys; print(sys.executable)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert python.stdout.strip() == str(SYSTEM_PYTHON)

    done = subprocess.run(
        ["bash", "-c", command],
        cwd=clone,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert done.stdout.splitlines()[-1].startswith("Done. "), done.stdout[-2000:]
    # Nothing was installed for the user (``pip install --user`` writes ~/.local).
    assert not (home / ".local").exists()
