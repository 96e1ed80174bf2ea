"""scripts/'s helpers, what the README's two commands stand on: the uv that scripts/_uv.sh
finds or fetches for a python3 with no pip (the pinned release's wheel over https, checked
against scripts/uv-pins.txt, unpacked, nothing installed), the wait for the dpkg lock before
scripts/test's apt-get, and scripts/test's own frame (its shell, its stage clock). The commands
themselves, on the system python3 in a fresh clone: tests/test_readme_commands.py (slow)."""

from __future__ import annotations

import fcntl
import hashlib
import http.server
import importlib.util
import io
import json
import os
import platform
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
HELP = "install uv (https://docs.astral.sh/uv/)"


def load_script(name: str) -> ModuleType:
    """scripts/NAME imported as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), SCRIPTS / name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


@dataclass
class Index:
    """A local stand-in for PyPI's JSON API: its URL, the files it serves by path, and the paths
    it redirects elsewhere."""

    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    redirects: dict[str, str] = field(default_factory=dict)

    def list(self, name: str, sha256: str, url: str = "") -> None:
        """Lists ``name`` as uv 9.9.9's wheel, at ``url`` (default: where it serves it)."""
        url = url or "../../packages/" + name  # relative, as a mirror's may be
        release = [{"filename": name, "url": url, "digests": {"sha256": sha256}}]
        self.files["/pypi/uv/json"] = json.dumps({"releases": {"9.9.9": release}}).encode()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key: the https index's, and the only CA
    the fetch trusts (``SSL_CERT_FILE``)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl makes the local index's certificate")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
         "-out", str(cert)],
        capture_output=True, check=True,
    )  # fmt: skip
    return cert, key


def serve_index(tls: tuple[Path, Path] | None) -> Iterator[Index]:
    """Runs an :class:`Index` over https (with ``tls``'s certificate and key) or plain http."""
    index = Index("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path in index.redirects:
                self.send_response(302)
                self.send_header("Location", index.redirects[self.path])
                self.end_headers()
                return
            body = index.files.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    index.url = f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    # shutdown() waits for the loop's next poll: half a second per test at the default.
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield index
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def pypi(certificate: tuple[Path, Path]) -> Iterator[Index]:
    yield from serve_index(certificate)


@pytest.fixture
def plain_http() -> Iterator[Index]:
    yield from serve_index(None)


def pin(tmp_path: Path, pins: dict[str, str]) -> Path:
    """A copy of scripts/_uv_fetch.py beside a ``uv-pins.txt`` pinning uv 9.9.9's ``pins``."""
    where = tmp_path / "scripts"
    where.mkdir()
    shutil.copy(SCRIPTS / "_uv_fetch.py", where)
    lines = ["version 9.9.9", *(f"{name} {digest}" for name, digest in pins.items())]
    (where / "uv-pins.txt").write_text("\n".join(lines) + "\n")
    return where / "_uv_fetch.py"


def fetch(
    script: Path, url: str, target: Path, cert: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), str(target)],
        env={**os.environ, "FSM_CORE_PYPI": url, "SSL_CERT_FILE": str(cert or "/nonexistent")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_uv_is_fetched_over_https_from_the_pinned_wheel_for_this_machine(
    pypi: Index, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    name, wheel = fake_wheel()
    digest = hashlib.sha256(wheel).hexdigest()
    script = pin(tmp_path, {"uv-9.9.9-py3-none-win_amd64.whl": "1" * 64, name: digest})
    pypi.files["/packages/" + name] = wheel
    pypi.list(name, digest)
    done = fetch(script, pypi.url, tmp_path / "uv", certificate[0])
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'uv' / 'uv'}\n"
    ran = subprocess.run([str(tmp_path / "uv" / "uv")], capture_output=True, text=True, check=True)
    assert ran.stdout == "uv 9.9.9\n"
    assert sorted(p.name for p in (tmp_path / "uv").iterdir()) == ["uv"]


def test_a_swapped_wheel_is_refused_even_when_the_index_lists_its_digest(
    pypi: Index, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    """(The digest was PyPI's own: an index that swapped the wheel swapped its digest too.)"""
    name, wheel = fake_wheel()
    script = pin(tmp_path, {name: "0" * 64})
    pypi.files["/packages/" + name] = wheel
    pypi.list(name, hashlib.sha256(wheel).hexdigest())
    done = fetch(script, pypi.url, tmp_path / "uv", certificate[0])
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"scripts/_uv_fetch.py: {name}: {pypi.url}/pypi/uv/json lists sha256 "
        f"{hashlib.sha256(wheel).hexdigest()}, but {script.with_name('uv-pins.txt')} pins "
        f"{'0' * 64}\n"
    )
    assert not (tmp_path / "uv").exists()


@pytest.mark.parametrize(
    "reply",
    [[], {"releases": []}, {"releases": {"9.9.9": [{"filename": "NAME"}]}},
     {"releases": {"9.9.9": [{"filename": "NAME", "digests": None}]}}, {"releases": {"9.9.9": 7}}],
    ids=["a-list", "releases-a-list", "no-digests", "digests-null", "files-a-number"],
)  # fmt: skip
def test_an_index_reply_of_another_shape_is_refused_naming_it(
    pypi: Index, certificate: tuple[Path, Path], tmp_path: Path, reply: object
) -> None:
    """A mirror's JSON of another shape is named in one line, not a traceback."""
    name, wheel = fake_wheel()
    script = pin(tmp_path, {name: hashlib.sha256(wheel).hexdigest()})
    pypi.files["/pypi/uv/json"] = json.dumps(reply).replace("NAME", name).encode()
    done = fetch(script, pypi.url, tmp_path / "uv", certificate[0])
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        f"scripts/_uv_fetch.py: {pypi.url}/pypi/uv/json is not the JSON a package index sends ("
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "uv").exists()


def test_a_wheel_that_does_not_match_its_pin_is_refused_and_nothing_is_left(
    pypi: Index, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    name, wheel = fake_wheel()
    script = pin(tmp_path, {name: "0" * 64})
    pypi.files["/packages/" + name] = wheel
    pypi.list(name, "0" * 64)
    done = fetch(script, pypi.url, tmp_path / "uv", certificate[0])
    got = hashlib.sha256(wheel).hexdigest()
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"scripts/_uv_fetch.py: {name} from {pypi.url}/packages/{name}: sha256 {got}, but "
        f"{script.with_name('uv-pins.txt')} pins {'0' * 64}\n"
    )
    assert list((tmp_path / "uv").iterdir()) == []


def test_a_platform_with_no_pinned_wheel_is_refused_by_name(tmp_path: Path) -> None:
    script = pin(tmp_path, {"uv-9.9.9-py3-none-win_amd64.whl": "1" * 64})
    done = fetch(script, "https://127.0.0.1:9", tmp_path / "uv")
    this = " ".join(p for p in (sys.platform, platform.machine(), *platform.libc_ver()) if p)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"scripts/_uv_fetch.py: no uv 9.9.9 wheel is pinned for {this} in "
        f"{script.with_name('uv-pins.txt')}; {HELP}\n"
    )


def test_an_index_that_is_not_https_is_refused(tmp_path: Path) -> None:
    name, _ = fake_wheel()
    done = fetch(pin(tmp_path, {name: "0" * 64}), "http://127.0.0.1:9", tmp_path / "uv")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "scripts/_uv_fetch.py: http://127.0.0.1:9/pypi/uv/json: not an https URL; uv is "
        "fetched over https only\n"
    )


def test_a_wheel_listed_at_an_http_url_is_refused(
    pypi: Index, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    name, wheel = fake_wheel()
    digest = hashlib.sha256(wheel).hexdigest()
    pypi.list(name, digest, url=f"http://127.0.0.1:9/{name}")
    done = fetch(pin(tmp_path, {name: digest}), pypi.url, tmp_path / "uv", certificate[0])
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"scripts/_uv_fetch.py: http://127.0.0.1:9/{name}: not an https URL; uv is fetched "
        "over https only\n"
    )


def test_a_redirect_to_http_is_refused(
    pypi: Index, plain_http: Index, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    name, wheel = fake_wheel()
    digest = hashlib.sha256(wheel).hexdigest()
    plain_http.files["/" + name] = wheel
    pypi.redirects["/packages/" + name] = f"{plain_http.url}/{name}"
    pypi.list(name, digest)
    done = fetch(pin(tmp_path, {name: digest}), pypi.url, tmp_path / "uv", certificate[0])
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"scripts/_uv_fetch.py: could not fetch uv from {pypi.url} (HTTP Error 302: redirect "
        f"to {plain_http.url}/{name} refused: not https); {HELP}\n"
    )
    assert list((tmp_path / "uv").iterdir()) == []


def test_an_unreachable_pypi_is_named_with_what_to_do(tmp_path: Path) -> None:
    name, _ = fake_wheel()
    done = fetch(pin(tmp_path, {name: "0" * 64}), "https://127.0.0.1:9", tmp_path / "uv")
    assert done.returncode == 1
    assert done.stderr.startswith(
        "scripts/_uv_fetch.py: could not fetch uv from https://127.0.0.1:9 ("
    )
    assert done.stderr.endswith(f"); {HELP}\n")


def test_the_checked_in_pins_name_one_release_and_a_wheel_for_this_machine() -> None:
    uv_fetch = load_script("_uv_fetch.py")
    version, digests = uv_fetch.read_pins(SCRIPTS / "uv-pins.txt")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert all(name.startswith(f"uv-{version}-py3-none-") for name in digests)
    assert uv_fetch.pick(list(digests)), "no pinned wheel fits this machine"


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


def test_a_lock_freed_as_the_budget_runs_out_is_taken_not_timed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(The wait was bounded by SIGALRM, which could go off between taking the lock and
    disarming the timer: a lock this process held was reported held by another.) Time is the
    test's: the holder lets go at t=5, the budget's end, when a timer armed for it goes off."""
    apt_wait = load_script("_apt_wait.py")
    lock = tmp_path / "lock"
    lock.touch()
    now = [0.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return now[0]

        @staticmethod
        def sleep(seconds: float) -> None:
            now[0] += seconds

    class Locks:
        LOCK_EX, LOCK_NB, LOCK_UN = fcntl.LOCK_EX, fcntl.LOCK_NB, fcntl.LOCK_UN

        @staticmethod
        def lockf(fd: int, cmd: int) -> None:
            if cmd == fcntl.LOCK_UN or now[0] >= 5:
                return
            if cmd & fcntl.LOCK_NB:
                raise BlockingIOError("held by another process")
            now[0] = 5  # a blocking take returns when the holder lets go, as the alarm fires
            signal.raise_signal(signal.SIGALRM)

    monkeypatch.setattr(apt_wait, "time", Clock)
    monkeypatch.setattr(apt_wait, "fcntl", Locks)
    monkeypatch.setenv("FSM_CORE_APT_WAIT", "5")
    handler = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        assert apt_wait.main([str(lock)]) == 0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler)
    out, err = capsys.readouterr()
    assert (out, err) == (f"waiting for {lock}: another process holds it\n{lock} is free\n", "")
    assert now[0] == 5


def fake_bin(tmp_path: Path, **tools: str) -> Path:
    """A directory of shell scripts named for ``tools``, each running its body."""
    where = tmp_path / "bin"
    where.mkdir()
    for name, body in tools.items():
        (where / name).write_text(f"#!/bin/sh\n{body}\n")
        (where / name).chmod(0o755)
    return where


def test_uv_sh_sourced_twice_keeps_the_uv_it_found(tmp_path: Path) -> None:
    """(Sourced again, ``command -v uv`` found the ``uv`` function it had defined, which then
    called itself until bash crashed.)"""
    fake = fake_bin(tmp_path, uv='echo "fake uv $*"')
    uv_sh = SCRIPTS / "_uv.sh"
    done = subprocess.run(
        ["bash", "-c", f"source {uv_sh} && source {uv_sh} && uv run --locked x"],
        env={"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "fake uv run --locked x\n", "")


@pytest.mark.parametrize(
    ("xdg", "where"),
    [(None, "{home}/.cache"), ("relative/cache", "{home}/.cache"), ("/abs/cache", "/abs/cache")],
    ids=["unset", "relative", "absolute"],
)
def test_the_scripts_cache_follows_the_xdg_rule_as_the_proof_cache_does(
    tmp_path: Path, xdg: str | None, where: str
) -> None:
    """(A relative XDG_CACHE_HOME was taken as given: scripts/test's bytecode and uv went
    beside the current directory while fsm-core's proof cache, per XDG, ignored it.)"""
    fake = fake_bin(tmp_path, uv='echo "fake uv $*"')
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)}
    if xdg is not None:
        env["XDG_CACHE_HOME"] = xdg
    done = subprocess.run(
        ["bash", "-uc", f"source {SCRIPTS / '_uv.sh'} && _fsm_core_uv_dir"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    expected = where.format(home=tmp_path) + "/fsm-core/uv\n"
    assert (done.returncode, done.stdout, done.stderr) == (0, expected, "")


def test_scripts_test_stops_at_once_under_a_shell_that_is_not_bash() -> None:
    if shutil.which("dash") is None:
        pytest.skip("dash is the shell that is not bash here")
    done = subprocess.run(
        ["dash", str(SCRIPTS / "test")], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        "scripts/test: a bash script; run it as scripts/test or bash scripts/test\n",
    )


@pytest.mark.parametrize("clock", ["EPOCHREALTIME", "no EPOCHREALTIME (bash 3.2 and 4)"])
def test_scripts_test_times_each_stage_with_or_without_bash_5s_clock(
    clock: str, tmp_path: Path
) -> None:
    """scripts/test in a world of fakes (uv, dot, chromium): mypy's stage takes 0.3 s, and its
    printed time says so. (Without bash 5's EPOCHREALTIME it read ``$SECONDS`` as microseconds:
    every stage took 0.0 s.)"""
    fake = fake_bin(
        tmp_path,
        uv='case "$*" in *mypy*) sleep 0.3 ;; esac; echo "fake uv $*"',
        dot="",
        chromium="",
    )
    unset = "" if clock == "EPOCHREALTIME" else "unset EPOCHREALTIME; "
    done = subprocess.run(
        ["bash", "-c", f"{unset}source {SCRIPTS / 'test'} tests/none.py"],
        env={"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fake uv run --locked pytest -n 2 tests/none.py\n" in done.stdout
    times = dict(re.findall(r"^<== (.+): (\d+\.\d) s$", done.stdout, re.MULTILINE))
    assert list(times) == [
        "system dependencies (graphviz 'dot')",
        "uv",
        "uv sync --locked --group fuzz",
        "ruff check",
        "ruff format --check",
        "mypy (strict)",
        "pytest -n 2 tests/none.py",
    ]
    assert float(times["mypy (strict)"]) >= 0.3
    total = re.search(r"^scripts/test: passed in (\d+\.\d) s \(", done.stdout, re.MULTILINE)
    assert total is not None and float(total[1]) >= 0.3
