"""The package has one public face: ``fsm_core.__all__``, and nothing private leaks into it."""

from __future__ import annotations

import types

import fsm_core


def test_every_public_name_is_exported_and_exists() -> None:
    assert len(set(fsm_core.__all__)) == len(fsm_core.__all__)  # ruff (RUF022) keeps it sorted
    for name in fsm_core.__all__:
        assert hasattr(fsm_core, name), name


def test_no_undeclared_public_name_leaks() -> None:
    public = {
        name
        for name, value in vars(fsm_core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(fsm_core.__all__)


def test_errors_share_one_root() -> None:
    for name in ("SpecError", "TransitionError", "NotEnabled", "Rejected", "UsageError"):
        assert issubclass(getattr(fsm_core, name), fsm_core.FsmError)
