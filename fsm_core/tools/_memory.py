"""Where a check's memory goes: the explorer's store of visited states, the liveness graph, the
composition engine's memo caches and the symmetry reduction's, measured by size after one search.

    python3 -m uv run --locked python -m fsm_core.tools._memory agent_tree
    python3 -m uv run --locked python -m fsm_core.tools._memory --explorer-only agent_tree_pair

Each part is sized by walking the objects it reaches (``sys.getsizeof`` of every container,
number and string, each object counted once, by the first part that reaches it, in the order
printed), so a packed state shared by the store and the graph counts once, with the store. The
resident set size (RSS) grown during the search is printed beside, as the operating system saw
it. ``--explorer-only`` sizes the explorer's parts alone (walking the engine's caches of a
model of half a million states takes as much memory again). To measure another checkout of
fsm_core the same way, put its root first on ``PYTHONPATH``. Memory is reported, never asserted. The
last line is for scripts: ``Done. model=bytes/state,...`` (the explorer's bytes).
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from fsm_core._paths import models_dir
from fsm_core.check import load_model
from fsm_core.check._explore import explore
from fsm_core.check._system import build

_LEAVES = (int, float, str, bytes, bool, type(None))


def deep_size(roots: Iterable[Any], seen: set[int]) -> int:
    """The bytes of every object ``roots`` reach and ``seen`` does not hold yet (then it does).

    Functions, classes, modules and code are not walked: they are the program, not its data.
    """
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if callable(obj) and not hasattr(obj, "__slots__"):
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, _LEAVES):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif hasattr(obj, "nbytes") and hasattr(obj, "base"):  # a NumPy array: its buffer
            total += 0 if obj.base is not None else int(obj.nbytes)
        elif hasattr(obj, "buffer_info"):  # an array.array: getsizeof counts its buffer
            continue
        else:
            for klass in type(obj).__mro__:
                for name in getattr(klass, "__slots__", ()):
                    if hasattr(obj, name):
                        stack.append(getattr(obj, name))
            if hasattr(obj, "__dict__"):
                stack.extend(vars(obj).values())
    return total


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def measure(name: str, explorer_only: bool = False) -> float:
    """Search ``name`` with the liveness graph kept, print what each part holds; returns the
    bytes per state of the explorer's parts (store and graph)."""
    model = load_model(models_dir() / f"{name}.toml")
    built = build(model)
    gc.collect()
    before = _rss()
    start = time.process_time()
    result = explore(built.system, keep_graph=True)
    cpu = time.process_time() - start
    grown = _rss() - before
    n = result.states
    seen: set[int] = set()
    engine = built.composition
    parts: list[tuple[str, int]] = [
        ("explorer: visited states", deep_size([result.parent], seen)),
        ("explorer: liveness graph", deep_size([result.graph], seen)),
    ]
    if not explorer_only:
        caches = [(k, deep_size([v], seen)) for k, v in _attributes(engine)]
        caches.sort(key=lambda kv: -kv[1])
        parts += [(f"engine: {k}", size) for k, size in caches if size >= 2**20]
        if built.reduction is not None:  # its own memo: it holds the engine, sized above
            memo = [v for k, v in _attributes(built.reduction) if k != "engine"]
            parts.append(("symmetry: canonical memo", deep_size(memo, seen)))
    print(f"{name}: {n:,} states, {result.transitions:,} transitions, {cpu:.1f} s CPU")
    print(f"  RSS grown during the search: {grown / 2**20:,.1f} MiB ({grown / n:,.0f} B/state)")
    for label, size in parts:
        print(f"  {label:<40} {size / 2**20:9,.1f} MiB {size / n:9,.0f} B/state")
    total = sum(size for _, size in parts)
    print(f"  {'total measured':<40} {total / 2**20:9,.1f} MiB {total / n:9,.0f} B/state")
    return (parts[0][1] + parts[1][1]) / n


def _attributes(obj: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for klass in type(obj).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if hasattr(obj, name):
                out.append((name, getattr(obj, name)))
    if hasattr(obj, "__dict__"):
        out += list(vars(obj).items())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--explorer-only", action="store_true", help="size the explorer alone")
    args = parser.parse_args(argv)
    figures = [f"{m}={measure(m, args.explorer_only):.0f}" for m in args.models]
    print("Done. " + ",".join(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
