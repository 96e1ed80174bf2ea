"""Writing a file whole or not at all (a trace, a model's ``[expect]``, the viewer's page)."""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8, line endings as given) over ``path``, or leave it as it was.

    The text goes to a temporary file beside the file ``path`` names (a symlink's target, so
    the link stays a link), with that file's permissions, synced, then renamed over it: neither
    an interrupt nor a full disk nor a crash leaves half a file where a reader would read it.
    """
    target = path.resolve() if path.is_symlink() else path
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with temporary.open("x", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            if target.exists():
                os.chmod(f.fileno(), target.stat().st_mode & 0o7777)
            os.fsync(f.fileno())
        temporary.replace(target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
