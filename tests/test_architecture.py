"""The package's shape: no import cycle among fsm_core's modules, and the public agent apart
from its plumbing.

Imports are read from the source with :mod:`ast`, every ``import`` statement wherever it stands:
at module level, inside a function, and under ``if TYPE_CHECKING:``, since a cycle that only
the type checker sees is still two modules that cannot be understood apart. An edge goes to the
module an import names (``from fsm_core.runtime import _core`` names ``fsm_core.runtime._core``);
the parent packages Python initialises on the way are not edges, or every module would depend on
``fsm_core/__init__.py``, which re-exports everything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import fsm_core

PACKAGE = Path(fsm_core.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The package modules that the module ``name`` at ``path`` imports, anywhere in it."""
    known = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in known:
                    out.add(submodule)  # ``from package import module``
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def graph() -> dict[str, set[str]]:
    """The import graph of the package: each module, and the package modules it imports."""
    found = modules()
    return {name: imports(name, path, found) for name, path in found.items()}


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(edges.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(out)


def test_no_import_cycle_among_the_package_modules() -> None:
    assert cycles(graph()) == []


def test_type_checking_imports_are_edges() -> None:
    scope = modules()["fsm_core.runtime._scope"]
    assert "if TYPE_CHECKING:" in scope.read_text(encoding="utf-8")
    assert "fsm_core.runtime._agent" in graph()["fsm_core.runtime._scope"]


def test_a_planted_cycle_is_found() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]


def test_the_public_agent_imports_no_plumbing() -> None:
    """``Agent`` originates; the core, the host, the payloads and the runtime are plumbing."""
    assert graph()["fsm_core.runtime._agent"] == {
        "fsm_core._errors",
        "fsm_core.runtime._causes",
        "fsm_core.runtime._inbox",
        "fsm_core.runtime._session",
        "fsm_core.runtime._signal",
        "fsm_core.table._expr",
    }
