"""The package has one public face: ``fsm_core.__all__``, and nothing private leaks into it.

Every public module's ``__all__`` is exactly its public names, and each of those names is
also exported from :mod:`fsm_core` as the same object, but for :data:`APART`. Docs and
examples import only public modules.
"""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

import fsm_core

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_MODULES = (
    "fsm_core.acp",
    "fsm_core.check",
    "fsm_core.diagrams",
    "fsm_core.export",
    "fsm_core.host",
    "fsm_core.runtime",
    "fsm_core.table",
    "fsm_core.testing",
)

APART: dict[str, str] = {
    "fsm_core.testing": "test doubles stay out of the runtime's face",
    "fsm_core.acp": "an application of the runtime that loads the ACP package (and pydantic)",
    "fsm_core.check": "the checker's Model and check() would read as the LLM seam and a verb",
    "fsm_core.export": "FORMAT, SEMANTICS and VERSION describe the export file, not the package",
}
"""Public modules whose names are not re-exported from fsm_core, and why."""

DOCS = (
    "README.md",
    "specs/README.md",
    "models/README.md",
    "benchmarks/README.md",
    *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "benchmarks").glob("*.py"))),
)
PRIVATE_IMPORT = re.compile(r"^\s*(?:from|import)\s+(fsm_core(?:\.\w+)*\._\w+)", re.MULTILINE)


def _public(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in ("annotations",)
    }


def test_every_public_name_is_exported_and_exists() -> None:
    assert len(set(fsm_core.__all__)) == len(fsm_core.__all__)  # ruff (RUF022) keeps it sorted
    for name in fsm_core.__all__:
        assert hasattr(fsm_core, name), name


def test_no_undeclared_public_name_leaks() -> None:
    for name in fsm_core.__all__:  # the lazy ones (PEP 562) are in vars() once looked up
        getattr(fsm_core, name)
    assert _public(fsm_core) == set(fsm_core.__all__)
    assert sorted(dir(fsm_core)) == sorted(vars(fsm_core))


def test_importing_the_package_loads_no_submodule_until_a_name_is_used() -> None:
    """``import fsm_core`` is cheap (a CLI run pays only for what it uses); the TYPE_CHECKING
    imports in ``fsm_core/__init__.py`` show mypy the same names."""
    import subprocess
    import sys

    probe = (
        "import sys, fsm_core\n"
        "print(sorted(m for m in sys.modules if m.startswith('fsm_core.') and '._' not in m))\n"
        "fsm_core.Runtime\n"
        "print('fsm_core.runtime' in sys.modules, 'asyncio' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["[]", "True True"]


def test_the_submodules_import_fsm_core_always_bound_are_still_attributes() -> None:
    """``import fsm_core; fsm_core.table.load_spec(...)`` worked while the package imported its
    submodules eagerly, and mypy still accepts it: the lazy package imports them on first use."""
    import subprocess
    import sys

    probe = (
        "import fsm_core\n"
        "print(fsm_core.table.load_spec is fsm_core.load_spec, fsm_core.runtime.__name__)\n"
        "print(sorted(n for n in ('diagrams', 'export', 'host') if n in dir(fsm_core)))\n"
        "print(fsm_core.host.__name__)\n"
    )
    argv = [sys.executable, "-c", probe]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.stdout.splitlines() == [
        "True fsm_core.runtime",
        "['diagrams', 'export', 'host']",
        "fsm_core.host",
    ], done.stderr


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_a_public_module_declares_exactly_its_public_names(name: str) -> None:
    module = importlib.import_module(name)
    declared = set(module.__all__)
    assert declared <= _public(module), f"{name}.__all__ names what it does not define"
    leaked = {
        n
        for n in _public(module) - declared
        if getattr(getattr(module, n), "__module__", name).startswith(name)
    }
    assert not leaked, f"{name} defines public names outside __all__: {sorted(leaked)}"


@pytest.mark.parametrize("name", [m for m in PUBLIC_MODULES if m not in APART])
def test_a_public_modules_names_are_exported_from_the_package(name: str) -> None:
    module = importlib.import_module(name)
    missing = [n for n in module.__all__ if getattr(fsm_core, n, None) is not getattr(module, n)]
    assert not missing, f"fsm_core does not export {name}'s {missing}"


@pytest.mark.parametrize("doc", DOCS)
def test_docs_and_examples_import_only_public_modules(doc: str) -> None:
    assert PRIVATE_IMPORT.findall((ROOT / doc).read_text(encoding="utf-8")) == []


def test_errors_share_one_root() -> None:
    for name in ("SpecError", "TransitionError", "NotEnabled", "Rejected", "UsageError"):
        assert issubclass(getattr(fsm_core, name), fsm_core.FsmError)
