"""A cache of the proofs the loader has already made: a table proved once is not proved again.

The loader proves every table over its whole domain each time it loads it (see
:func:`fsm_core.table._load._validate`), and every command loads its tables. A proof that
passed is recorded under a key that covers everything its verdict depends on: the table's
content (as parsed), the clause catalogue, the limits, the Python version and the source of
the modules that decide what a valid table is. A table, a limit or a checker edited since is a
different key, so it is proved again. Only a proof that passed is recorded: a table with a
fault is proved, and its fault reported, on every load.

The proof runs at the table's declared constants whatever a model overrides, so the
overrides are not part of the key. The table is still parsed and type-checked on every load;
only the search over the domain is skipped.

Entries live in ``$XDG_CACHE_HOME/fsm-core/proofs`` (``~/.cache/fsm-core/proofs`` when unset),
one small file per proof, written whole (:func:`fsm_core._files.write_whole`). An entry that
cannot be read, does not say exactly what this module writes, or is not this user's in a
directory of this user's that no one else may write, is no proof: the table is proved
again. A directory that cannot be made or written leaves the loader as it was without the
cache. ``FSM_CORE_NO_CACHE=1`` turns the cache off.

The cache is bounded: a hit marks its entry used (its modification time), and a write that
finds more than :data:`KEEP` entries removes the least recently used down to three quarters of
it. Every edit of a table is a new key, so without the bound a fuzzing run or a long life of
edits would leave an entry behind for each.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import sys
from collections.abc import Mapping
from contextlib import suppress
from functools import cache
from pathlib import Path
from typing import Any

from fsm_core._files import write_whole
from fsm_core.table._limits import Limits
from fsm_core.table._table import Clause

NO_CACHE = "FSM_CORE_NO_CACHE"
"""The environment variable that turns the cache off when set to anything but "" or "0"."""

KEEP = 1024
"""The most entries the cache keeps (about 4 MiB of disk blocks): a few hundred tables' proofs,
as the spec mutants and a session of edits make."""

_KEY = re.compile("[0-9a-f]{64}")
"""An entry's name: a key (:func:`proof_key`)."""

_PACKAGE = Path(__file__).resolve().parent
_DECIDERS = (*sorted(_PACKAGE.glob("*.py")), _PACKAGE.parent / "_errors.py")
"""The modules whose source decides whether a table is valid: the table package (the loader,
the expression checker, the interpreter, the generated search) and the errors it raises."""


def proof_key(data: Mapping[str, Any], clauses: Mapping[str, Clause], limits: Limits) -> str:
    """The key of the proof of the table parsed as ``data`` under ``clauses`` and ``limits``."""
    h = hashlib.sha256(_checker())
    for part in (data, sorted(clauses.items()), limits):
        text = repr(part).encode("utf-8", "surrogatepass")
        h.update(len(text).to_bytes(8, "big"))
        h.update(text)
    return h.hexdigest()


def proved(key: str) -> bool:
    """True iff the cache holds a passed proof under ``key``; False on any trouble reading."""
    where = _directory()
    if where is None:
        return False
    try:
        fd = os.open(where / key, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        entry = os.fstat(fd)
        if not stat.S_ISREG(entry.st_mode) or not _own(entry) or not _private(where):
            return False
        if os.read(fd, 256) != _entry(key).encode("ascii"):
            return False
    except OSError:
        return False
    finally:
        os.close(fd)
    with suppress(OSError):  # a read-only cache still answers
        os.utime(where / key)  # used now: the last entry a bounded cache would remove
    return True


def record(key: str) -> None:
    """Record a passed proof under ``key``; nothing happens when the cache cannot be written."""
    where = _directory()
    if where is None:
        return
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_whole(where / key, _entry(key))
        _prune(where)
    except OSError:
        pass  # no cache here: the next load proves the table again


def _prune(where: Path) -> None:
    """Remove the least recently used entries once there are more than :data:`KEEP`."""
    with os.scandir(where) as listing:  # entries only: not another writer's temporary file
        entries = [
            e for e in listing if _KEY.fullmatch(e.name) and e.is_file(follow_symlinks=False)
        ]
    if len(entries) <= KEEP:
        return
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns)
    for gone in entries[: len(entries) - KEEP * 3 // 4]:
        with suppress(OSError):  # removed by another process meanwhile, or not ours to remove
            os.unlink(gone.path)


def _own(st: os.stat_result) -> bool:
    """True iff this user owns what ``st`` describes (always, where there are no users)."""
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def _private(where: Path) -> bool:
    """True iff the cache directory is this user's and no one else may write it: an entry's key
    is computed from public inputs, so one planted by another user would pass a faulty table."""
    try:
        st = os.stat(where)
    except OSError:
        return False
    return _own(st) and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _entry(key: str) -> str:
    return f"fsm-core proof passed {key}\n"


def _directory() -> Path | None:
    """Where entries live, or None when the cache is off or has no home."""
    if os.environ.get(NO_CACHE, "") not in ("", "0"):
        return None
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG rule: a relative path is ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
        if not os.path.isabs(base):  # no home directory to be found
            return None
    return Path(base) / "fsm-core" / "proofs"


@cache
def _checker() -> bytes:
    """A digest of the deciding modules' source and the Python running them, once a process."""
    h = hashlib.sha256(sys.version.encode())
    for path in _DECIDERS:
        h.update(path.name.encode())
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(os.urandom(16))  # unreadable source: a key no other process makes
    return h.digest()


__all__ = ["KEEP", "NO_CACHE", "proof_key", "proved", "record"]
