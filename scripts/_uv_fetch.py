"""Fetch the uv binary from PyPI with the standard library only, for a python3 that has no pip
or may not install packages (PEP 668's ``externally-managed-environment`` on Debian 12 and
Ubuntu 24.04). Nothing is installed into that Python: the wheel's ``uv`` binary is unpacked
into a directory of its own.

    python3 scripts/_uv_fetch.py DIR     # prints DIR/uv once it is there and verified

The wheel is the latest release's for this platform, as ``pip install uv`` would pick, and its
SHA-256 must match the digest PyPI's JSON API lists for it (a truncated or altered download is
refused). ``FSM_CORE_PYPI`` replaces ``https://pypi.org`` (a mirror serving the same JSON API).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import stat
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import NoReturn

PYPI = os.environ.get("FSM_CORE_PYPI", "https://pypi.org").rstrip("/")


def fail(message: str) -> NoReturn:
    sys.exit(f"scripts/_uv_fetch.py: {message}")


def tag_fits(tag: str) -> bool:
    """True iff a wheel's platform tag (``manylinux_2_17_x86_64``) runs on this machine."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if sys.platform == "darwin":
        mac = {"aarch64": "arm64"}.get(machine, machine)
        return tag.startswith("macosx_") and tag.endswith("_" + mac)
    if not sys.platform.startswith("linux") or not tag.endswith("_" + machine):
        return False
    libc, version = platform.libc_ver()
    if libc == "glibc":
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_.+", tag)
        have = tuple(int(p) for p in version.split(".")[:2])
        return m is not None and (int(m[1]), int(m[2])) <= have
    return tag.startswith("musllinux_")


def pick(files: list[dict[str, object]]) -> dict[str, object]:
    """The release file to fetch: a wheel one of whose platform tags fits, the lowest first."""
    fitting = []
    for f in files:
        name = str(f["filename"])
        if name.endswith(".whl"):
            tags = name[: -len(".whl")].rsplit("-", maxsplit=1)[-1].split(".")
            if any(tag_fits(t) for t in tags):
                fitting.append(f)
    if not fitting:
        fail(f"no uv wheel on {PYPI} for {sys.platform} {platform.machine()}")
    return sorted(fitting, key=lambda f: str(f["filename"]))[0]


def main(target: Path) -> None:
    index = f"{PYPI}/pypi/uv/json"
    try:
        fetch(index, target)
    except (OSError, ValueError) as e:  # urllib's errors are OSErrors; bad JSON a ValueError
        fail(f"could not fetch uv from {PYPI} ({e}); install uv (https://docs.astral.sh/uv/)")


def fetch(index: str, target: Path) -> None:
    with urllib.request.urlopen(index, timeout=60) as r:
        release = json.load(r)
    wheel = pick(release["urls"])
    digests = wheel["digests"]
    assert isinstance(digests, dict)
    expected = digests["sha256"]
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp:
        path = Path(tmp) / str(wheel["filename"])
        url = urllib.parse.urljoin(index, str(wheel["url"]))  # a mirror's may be relative
        with urllib.request.urlopen(url, timeout=300) as r, path.open("wb") as out:
            while chunk := r.read(1 << 20):
                out.write(chunk)
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if got != expected:
            fail(f"{wheel['filename']}: sha256 {got}, but PyPI lists {expected}")
        with zipfile.ZipFile(path) as z:
            (member,) = (n for n in z.namelist() if re.fullmatch(r"uv-[^/]+\.data/scripts/uv", n))
            binary = Path(tmp) / "uv"
            binary.write_bytes(z.read(member))
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        binary.replace(target / "uv")  # atomic: a concurrent run sees no half-written binary
    print(target / "uv")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        fail("usage: python3 scripts/_uv_fetch.py DIR")
    main(Path(sys.argv[1]))
