"""scripts/'s helpers, what the README's two commands stand on: the uv that scripts/_uv.sh
fetches for a python3 with no pip (a verified wheel, unpacked, nothing installed), and the wait
for the dpkg lock before scripts/test's apt-get. The commands themselves, on the system python3
in a fresh clone: tests/test_readme_commands.py (slow)."""

from __future__ import annotations

import fcntl
import hashlib
import http.server
import io
import json
import os
import platform
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def fake_wheel() -> tuple[str, bytes]:
    """A uv wheel for this machine whose ``uv`` is a shell script printing its version."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        pytest.skip("the fake wheel's tag is a glibc Linux one")
    name = f"uv-9.9.9-py3-none-manylinux_2_17_{platform.machine()}.whl"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("uv-9.9.9.data/scripts/uv", "#!/bin/sh\necho uv 9.9.9\n")
        z.writestr("uv-9.9.9.dist-info/METADATA", "Name: uv\nVersion: 9.9.9\n")
    return name, out.getvalue()


@pytest.fixture
def pypi() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A local stand-in for PyPI's JSON API: (its URL, the files it serves by path)."""
    files: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", files
    finally:
        server.shutdown()
        server.server_close()


def serve(files: dict[str, bytes], name: str, wheel: bytes, sha256: str) -> None:
    files["/packages/" + name] = wheel
    release = {"urls": [{"filename": name, "url": "../../packages/" + name,
                         "digests": {"sha256": sha256}}]}  # fmt: skip
    files["/pypi/uv/json"] = json.dumps(release).encode()


def fetch(url: str, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "_uv_fetch.py"), str(target)],
        env={**os.environ, "FSM_CORE_PYPI": url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_uv_is_fetched_from_the_wheel_pypi_lists_for_this_machine(
    pypi: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    url, files = pypi
    name, wheel = fake_wheel()
    serve(files, name, wheel, hashlib.sha256(wheel).hexdigest())
    done = fetch(url, tmp_path / "uv")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'uv' / 'uv'}\n"
    ran = subprocess.run([str(tmp_path / "uv" / "uv")], capture_output=True, text=True, check=True)
    assert ran.stdout == "uv 9.9.9\n"
    assert sorted(p.name for p in (tmp_path / "uv").iterdir()) == ["uv"]


def test_a_uv_wheel_that_does_not_match_pypis_digest_is_refused(
    pypi: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    url, files = pypi
    name, wheel = fake_wheel()
    serve(files, name, wheel, "0" * 64)
    done = fetch(url, tmp_path / "uv")
    got = hashlib.sha256(wheel).hexdigest()
    assert done.returncode == 1
    assert done.stderr == (
        f"scripts/_uv_fetch.py: {name}: sha256 {got}, but PyPI lists {'0' * 64}\n"
    )
    assert list((tmp_path / "uv").iterdir()) == []


def test_an_unreachable_pypi_is_named_with_what_to_do(tmp_path: Path) -> None:
    done = fetch("http://127.0.0.1:9", tmp_path / "uv")
    assert done.returncode == 1
    assert done.stderr.startswith(
        "scripts/_uv_fetch.py: could not fetch uv from http://127.0.0.1:9"
    )
    assert done.stderr.endswith("; install uv (https://docs.astral.sh/uv/)\n")


def test_apt_get_waits_for_a_held_dpkg_lock_and_goes_on_once_it_is_free(tmp_path: Path) -> None:
    lock = tmp_path / "lock-frontend"
    lock.touch()
    with lock.open("r+") as held:
        fcntl.lockf(held, fcntl.LOCK_EX)  # as unattended-upgrades holds it
        waiter = subprocess.Popen(
            [sys.executable, str(SCRIPTS / "_apt_wait.py"), str(lock)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert waiter.stdout is not None
        assert waiter.stdout.readline() == f"waiting for {lock}: another process holds it\n"
        assert waiter.poll() is None
    # Closing the file released the lock.
    out, err = waiter.communicate(timeout=60)
    assert (waiter.returncode, out, err) == (0, f"{lock} is free\n", "")


def test_the_dpkg_lock_wait_gives_up_naming_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    lock.touch()
    with lock.open("r+") as held:
        fcntl.lockf(held, fcntl.LOCK_EX)
        done = subprocess.run(
            [sys.executable, str(SCRIPTS / "_apt_wait.py"), str(lock)],
            env={**os.environ, "FSM_CORE_APT_WAIT": "0.1"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert (done.returncode, done.stderr) == (1, f"{lock} still held after 0 s\n")


def test_free_and_absent_locks_are_not_waited_for(tmp_path: Path) -> None:
    (tmp_path / "free").touch()
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "_apt_wait.py"), str(tmp_path / "free"), "/nonexistent"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert (done.stdout, done.stderr) == ("", "")


def test_the_uv_on_path_is_used_as_it_is(tmp_path: Path) -> None:
    """(A bare ``uv`` inside the ``uv`` function recursed until bash crashed.)"""
    fake = tmp_path / "uv"
    fake.write_text('#!/bin/sh\necho "fake uv $*"\n')
    fake.chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", f"source {SCRIPTS / '_uv.sh'} && uv run --locked x"],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "fake uv run --locked x\n", "")
