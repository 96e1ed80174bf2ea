"""Small helpers more than one test module needs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from fsm_core._paths import specs_dir

__all__ = ["NOTIFICATIONS", "copy_specs", "edit", "exactly", "write_model"]

NOTIFICATIONS = (
    "agent/status",
    "agent/cancel-requested",
    "inbox/inserted",
    "inbox/discarded",
    "inbox/claimed",
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
)
"""Every notification an agent publishes on the runtime's bus (``EventBus.emit``)."""


def exactly(message: str) -> str:
    """A ``match=`` pattern for exactly this whole message."""
    return f"^{re.escape(message)}$"


def copy_specs(parent: Path) -> Path:
    """A private copy of the shipped tables at ``parent/specs`` (``load_spec`` caches by path)."""
    specs = parent / "specs"
    shutil.copytree(specs_dir(), specs)
    return specs


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old``, which must occur exactly once in the file, by ``new``."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} must occur exactly once in {path.name}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def write_model(parent: Path, name: str, body: str) -> Path:
    """``parent/models/NAME.toml`` holding ``body``, beside a copy of the shipped ``specs/``
    (made on first use), so ``table = "../specs/..."`` finds the copy."""
    if not (parent / "specs").exists():
        copy_specs(parent)
    path = parent / "models" / f"{name}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return path
