"""Fetch the uv binary from PyPI with the standard library only, for a python3 that has no pip
or may not install packages (PEP 668's ``externally-managed-environment`` on Debian 12 and
Ubuntu 24.04). Nothing is installed into that Python: the wheel's ``uv`` binary is unpacked
into a directory of its own.

    python3 scripts/_uv_fetch.py DIR     # prints DIR/uv once it is there and verified

The release is the one ``uv-pins.txt`` beside this script names, and the wheel is its wheel for
this platform, as ``pip install uv==VERSION`` would pick. That file also holds each wheel's
SHA-256, and the download must match it: the index is trusted for where the wheel lies, never
for what it is (a wheel the index swapped, or its JSON listing with it, is refused). A platform
with no pinned wheel is refused by name. Only https is spoken, redirects included.
``FSM_CORE_PYPI`` replaces ``https://pypi.org`` (a mirror serving the same JSON API).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import platform
import re
import stat
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import IO, NoReturn

PYPI = os.environ.get("FSM_CORE_PYPI", "https://pypi.org").rstrip("/")
PINS = Path(__file__).resolve().with_name("uv-pins.txt")
HELP = "install uv (https://docs.astral.sh/uv/)"


def fail(message: str) -> NoReturn:
    sys.exit(f"scripts/_uv_fetch.py: {message}")


def read_pins(path: Path) -> tuple[str, dict[str, str]]:
    """The pinned release and its wheels' SHA-256 digests by file name, from ``uv-pins.txt``."""
    version = ""
    digests: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        value = value.strip()
        if key == "version" and not version and re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", value):
            version = value
        elif (
            version
            and key.startswith(f"uv-{version}-")
            and key.endswith(".whl")
            and re.fullmatch(r"[0-9a-f]{64}", value)
        ):
            digests[key] = value
        else:
            fail(
                f"{path}:{number}: expected 'version X.Y.Z', then 'uv-X.Y.Z-....whl SHA256' "
                f"lines, got {line!r}"
            )
    if not digests:
        fail(f"{path}: pins no uv wheel")
    return version, digests


def this_platform() -> str:
    """This machine as the error messages name it: ``linux x86_64 glibc 2.36``."""
    libc, libc_version = platform.libc_ver()
    return " ".join(p for p in (sys.platform, platform.machine(), libc, libc_version) if p)


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


def pick(names: list[str]) -> str:
    """The wheel to fetch: a pinned one one of whose platform tags fits, the lowest first."""
    fitting = [
        name
        for name in names
        if any(tag_fits(t) for t in name[: -len(".whl")].rsplit("-", maxsplit=1)[-1].split("."))
    ]
    return sorted(fitting)[0] if fitting else ""


class HttpsRedirectsOnly(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to an https URL (urllib's own would follow one to http)."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme != "https":
            raise urllib.error.HTTPError(
                req.full_url, code, f"redirect to {newurl} refused: not https", headers, fp
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


OPENER = urllib.request.build_opener(HttpsRedirectsOnly)


def open_https(url: str, timeout: float) -> IO[bytes]:
    if urllib.parse.urlsplit(url).scheme != "https":
        fail(f"{url}: not an https URL; uv is fetched over https only")
    return OPENER.open(url, timeout=timeout)  # type: ignore[no-any-return]


def main(target: Path) -> None:
    version, digests = read_pins(PINS)
    name = pick(list(digests))
    if not name:
        fail(f"no uv {version} wheel is pinned for {this_platform()} in {PINS}; {HELP}")
    index = f"{PYPI}/pypi/uv/json"
    try:
        fetch(index, version, name, digests[name], target)
    except (OSError, ValueError) as e:  # urllib's errors are OSErrors; bad JSON a ValueError
        fail(f"could not fetch uv from {PYPI} ({e}); {HELP}")
    except (LookupError, TypeError, AttributeError) as e:  # JSON of another shape
        fail(f"{index} is not the JSON a package index sends ({type(e).__name__}: {e}); {HELP}")


def fetch(index: str, version: str, name: str, pinned: str, target: Path) -> None:
    with open_https(index, timeout=60) as r:
        project = json.load(r)
    # The project page's "releases" is deprecated in PyPI's JSON API for the release's own page
    # (/pypi/uv/VERSION/json, its "urls"), but mirrors may serve only the project page (this
    # workplace's PyPI proxy answers the release's page 404): the page every index serves.
    files = project.get("releases", {}).get(version, [])  # the API's other keys: the latest's
    listed = [f for f in files if f.get("filename") == name]
    if not listed:
        fail(f"{index} does not list {name}; {HELP}")
    (wheel,) = listed[:1]
    if wheel["digests"]["sha256"] != pinned:
        fail(f"{name}: {index} lists sha256 {wheel['digests']['sha256']}, but {PINS} pins {pinned}")
    url = urllib.parse.urljoin(index, str(wheel["url"]))  # a mirror's may be relative
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target) as tmp:
        path = Path(tmp) / name
        with open_https(url, timeout=300) as r, path.open("wb") as out:
            while chunk := r.read(1 << 20):
                out.write(chunk)
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if got != pinned:
            fail(f"{name} from {url}: sha256 {got}, but {PINS} pins {pinned}")
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
