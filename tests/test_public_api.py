"""The package has one public face: ``fsm_core.__all__``, and nothing private leaks into it.

Every public module's ``__all__`` is exactly its public names, and each of those names is
also exported from :mod:`fsm_core` as the same object, but for :data:`APART`. Docs and
examples import only public modules.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

import fsm_core

PACKAGE: types.ModuleType = fsm_core
"""fsm_core as a module object: its ``__all__`` is computed on first use, which mypy (shown the
names by star imports) does not see."""

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
    assert PACKAGE.__all__ == sorted(set(PACKAGE.__all__))
    for name in PACKAGE.__all__:
        assert hasattr(fsm_core, name), name


def test_no_undeclared_public_name_leaks() -> None:
    for name in PACKAGE.__all__:  # the lazy ones (PEP 562) are in vars() once looked up
        getattr(fsm_core, name)
    assert _public(fsm_core) == set(PACKAGE.__all__)
    assert sorted(dir(fsm_core)) == sorted(vars(fsm_core))


def test_importing_the_package_loads_no_submodule_until_a_name_is_used() -> None:
    """``import fsm_core`` is cheap, and a name's first use loads its own module and what that
    module imports anyway (the runtime: the tables and the host), nothing else."""
    import subprocess
    import sys

    probe = (
        "import sys, fsm_core\n"
        "loaded = lambda: [m[9:] for m in sorted(sys.modules) if m.startswith('fsm_core.')"
        " and '._' not in m]\n"
        "print(loaded())\n"
        "fsm_core.load_spec\n"
        "print(loaded())\n"
        "fsm_core.Runtime\n"
        "print(loaded(), 'asyncio' in sys.modules)\n"
        "fsm_core.spec_to_json\n"
        "print(loaded())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [
        "[]",
        "['table']",
        "['host', 'runtime', 'table'] True",
        "['export', 'host', 'runtime', 'table']",
    ]


def test_mypy_is_shown_the_names_the_package_exports_at_run_time() -> None:
    """The ``TYPE_CHECKING`` imports in ``fsm_core/__init__.py`` star-import each part exported
    whole and name the names picked from the others, so mypy sees exactly ``__all__``."""
    tree = ast.parse((ROOT / "fsm_core" / "__init__.py").read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "typing.TYPE_CHECKING"
    )
    shown: dict[str, set[str] | None] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module is not None, ast.unparse(node)
        if [alias.name for alias in node.names] == ["*"]:
            shown[node.module] = None
        else:
            assert all(alias.asname == alias.name for alias in node.names), ast.unparse(node)
            names = shown.setdefault(node.module, set())
            assert names is not None
            names.update(alias.name for alias in node.names)
    parts = fsm_core._PARTS
    assert shown == {m: None if names is None else set(names) for m, names in parts.items()}


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


NOT_BUILT_BY_USERS: dict[str, str] = {
    "Activation": "Subagents.spawn builds it around the child agent",
    "Agent": "Runtime.create_agent builds it behind its AgentHandle",
    "AgentHandle": "Runtime.create_agent returns it",
    "Machine": "load_table and load_spec compile it from a table",
}
"""Exported classes whose constructor takes internal parts, so it is no public signature: the
package builds them; you get one back."""

INTERNAL_IN_PUBLIC: dict[str, str] = {
    "fsm_core.table._machine.CompiledRow": "Machine's interpreter seam (select, lookup, "
    "execute, run_effects, enabled), shared by the host, the checker and the vector tools",
    "Perform (an alias)": "the effect callback of that seam (execute, run_effects)",
    "fsm_core.table._machine.Refused": "Machine.lookup's refusal marker, of the same seam",
    "Evaluator (an alias)": "WiredCall.args, WiredAwait's guard: compiled expressions the runtime "
    "and the checker call; WiredCall.arguments() and keywords() are the public reading",
    "Expr (an alias)": "WiredCall.arg_exprs, WiredAwait's parsed expressions, which export and "
    "diagrams read; arg_text is the public reading",
    "fsm_core.table._expr.*": "the node classes of Expr",
    "Refused (an alias)": "WiredCall.refused, Literal['never', 'caller']: exporting it wants a "
    "name apart from Machine.lookup's Refused and the Rejected error",
    "fsm_core.table._limits.Limits": "load_table's limits, which the checker passes from a model",
    "fsm_core.check._explore.Graph": "Result.graph, the edges the liveness pass reads; check() "
    "drops them before it returns",
}
"""Internal types (``*``: a pattern) that public signatures still show, each with who reads
them: candidates to hide behind a leading underscore rather than to export."""


def _annotated(owner: object) -> Iterator[tuple[str, object, dict[str, object]]]:
    """Each public signature ``owner`` has: (where, the annotated object, its annotations)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if not klass.__module__.startswith("fsm_core"):
                continue
            fields = vars(klass).get("__annotations__", {})
            yield owner.__qualname__, klass, {k: v for k, v in fields.items() if k[0] != "_"}
            for name, attr in vars(klass).items():
                if name == "__init__" and owner.__name__ in NOT_BUILT_BY_USERS:
                    continue
                if name.startswith("_") and not name.endswith("__"):
                    continue
                function = attr.fget if isinstance(attr, property) else attr
                function = getattr(function, "__func__", function)  # classmethod, staticmethod
                if isinstance(function, types.FunctionType):
                    where = f"{owner.__qualname__}.{name}"
                    yield where, function, dict(function.__annotations__)
    elif isinstance(owner, types.FunctionType):
        yield owner.__qualname__, owner, dict(owner.__annotations__)


def _internal_types_in(
    annotated: object, annotations: dict[str, object], public: set[int], aliases: dict[int, str]
) -> set[str]:
    """The fsm_core types the annotations name that no public module exports: the classes
    ``typing.get_type_hints`` resolves them to, and (which it would expand away) the aliases
    each name in them refers to."""
    namespace = vars(sys.modules[getattr(annotated, "__module__", "")])
    exported = {name: getattr(fsm_core, name) for name in PACKAGE.__all__}  # TYPE_CHECKING imports
    found: set[str] = set()
    try:
        hints = typing.get_type_hints(annotated, localns=exported)
    except (NameError, TypeError):  # a typeshed-only name (StrPath), a recursive alias (JSON)
        hints = {}
    stack = [hints[name] for name in annotations if name in hints]
    while stack:
        hint = stack.pop()
        stack.extend(hint if isinstance(hint, list) else typing.get_args(hint))  # Callable[[...]
        module = getattr(hint, "__module__", "")
        if isinstance(hint, type) and module.startswith("fsm_core") and id(hint) not in public:
            found.add(f"{module}.{hint.__qualname__}")
    for text in annotations.values():
        if not isinstance(text, str):
            continue
        for node in ast.walk(ast.parse(f"[{text}]", mode="eval")):  # [...]: `*Fields` parses
            if isinstance(node, ast.Name):
                value = namespace.get(node.id, exported.get(node.id))
                if id(value) in aliases and id(value) not in public:
                    found.add(aliases[id(value)])
    return found


def test_public_signatures_name_only_exported_types() -> None:
    """What a public function takes and returns, and a public class's fields, are types you can
    import from a public module, so you can annotate what you pass and what you get back."""
    modules = [fsm_core, *(importlib.import_module(name) for name in PUBLIC_MODULES)]
    public = {id(getattr(module, name)) for module in modules for name in module.__all__}
    aliases = {  # every alias an fsm_core module binds (bool | int | str, Literal[...], ...)
        id(value): f"{alias} (an alias)"  # bound in several modules; named as written
        for name, module in list(sys.modules.items())
        if name.startswith("fsm_core")
        for alias, value in vars(module).items()
        if typing.get_origin(value) is not None or isinstance(value, types.UnionType)
    }
    leaks: dict[str, set[str]] = {}
    for module in modules:
        for name in module.__all__:
            for where, annotated, hints in _annotated(getattr(module, name)):
                for leaked in _internal_types_in(annotated, hints, public, aliases):
                    leaks.setdefault(leaked, set()).add(where)
    unexplained = {leaked: sorted(wheres) for leaked, wheres in leaks.items()}
    for pattern in INTERNAL_IN_PUBLIC:
        explained = fnmatch.filter(unexplained, pattern)
        assert explained, f"{pattern} no longer leaks: drop it from INTERNAL_IN_PUBLIC"
        for leaked in explained:
            del unexplained[leaked]
    assert unexplained == {}


OPEN_CLASSES: dict[str, str] = {
    "FsmError": "the root error: fsm_core's errors subclass it, and you catch it",
    "TransitionError": "NotEnabled and Rejected subclass it; you catch either with it",
    "SubagentError": "ActivationTeardownFailed subclasses it; you catch either with it",
    "ModelAdapter": "a Protocol: you implement it (subclassing it is one way)",
    "Tool": "a Protocol: you implement it (subclassing it is one way)",
}
"""The exported classes meant to be subclassed, and why. Every other one is ``@final``, which
mypy enforces; nothing refuses a subclass at run time (README, "The public face")."""


def test_every_exported_class_is_final_unless_meant_for_subclassing() -> None:
    modules = [fsm_core, *(importlib.import_module(name) for name in PUBLIC_MODULES)]
    classes = {
        value
        for module in modules
        for value in (getattr(module, name) for name in module.__all__)
        if isinstance(value, type)
    }
    open_ = sorted(c.__name__ for c in classes if not getattr(c, "__final__", False))
    assert open_ == sorted(OPEN_CLASSES)


def test_the_version_is_the_installed_distributions_and_the_command_line_prints_it() -> None:
    import subprocess
    from importlib.metadata import version

    assert fsm_core.__version__ == version("fsm-core")
    assert "__version__" not in PACKAGE.__all__
    for argv in (["--version"], ["check", "--version"]):
        done = subprocess.run(
            [sys.executable, "-m", "fsm_core", *argv], capture_output=True, text=True, check=True
        )
        assert done.stdout == f"fsm-core {version('fsm-core')}\n"
