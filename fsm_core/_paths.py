"""Where the shipped tables and models live: inside the wheel, or at the repository root."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _data(name: str) -> Path:
    installed = _PACKAGE / "data" / name
    return installed if installed.is_dir() else _PACKAGE.parent / name


def specs_dir() -> Path:
    """``specs/``: the transition tables and the clause catalogue."""
    return _data("specs")


def models_dir() -> Path:
    """``models/``: the bounded model configurations."""
    return _data("models")
