"""Explicit-state breadth-first search with parent pointers.

BFS visits states in order of distance from the initial state, so the first violation found
has a shortest trace; the price is memory (one dict entry per state, about 250 bytes in
CPython) rather than DFS's stack. Every state is checked when it is taken from the frontier:
the invariants first, then deadlock (no successor outside a quiescent state), under the name the
model's ``deadlock-free`` property record gives it.

Verdicts keep "not found" apart from "cannot happen": :attr:`Result.complete` is False when a
state limit stopped the search early, and then a clean result proves nothing.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, final

S = TypeVar("S", bound=Hashable)


Grouped = Callable[[S], tuple[Sequence[tuple[int, S]], int, Sequence[Iterable[int]]]]
"""See :attr:`System.grouped`."""


@dataclass(frozen=True, slots=True)
class System(Generic[S]):
    """What the explorer needs to know about a model, and nothing else.

    ``successors(s)`` returns ``(label, next)`` pairs, labels being indices into ``labels``;
    ``first_violated(s)`` names the first invariant ``s`` breaks, or None; a state with no
    successor that is not ``quiescent`` breaks the property named ``deadlock``. A system may
    store its states packed: ``unpack`` gives one as a trace shows it.

    A system whose states have many steps to the same next state (an agent's, one per plan of
    listener calls) may also give them ``grouped``: ``grouped(s)`` returns the first
    ``(label, next)`` pair to each next state, in the order of ``successors(s)``, the number
    of pairs, and every pair's label in groups. The search is then the same, pair for pair
    where it matters (the first pair to a state is its parent), for a tenth of the work.
    """

    name: str
    initial: S
    successors: Callable[[S], Sequence[tuple[int, S]]]
    labels: Sequence[object]
    first_violated: Callable[[S], str | None]
    quiescent: Callable[[S], bool]
    deadlock: str
    unpack: Callable[[S], Hashable] | None = None
    grouped: Grouped[S] | None = None


@final
@dataclass(frozen=True, slots=True)
class Violation(Generic[S]):
    """The property ``name`` failed; ``trace`` is a shortest path to it, as (label, state) steps.

    The first step has no label: it is the initial state.
    """

    name: str
    trace: tuple[tuple[int | None, S], ...]

    @property
    def state(self) -> S:
        return self.trace[-1][1]


@final
@dataclass(slots=True)
class Result(Generic[S]):
    name: str
    states: int
    transitions: int
    depth: int
    seconds: float
    complete: bool
    violation: Violation[Any] | None = None
    """The first property broken, with a shortest trace to it, its states unpacked."""
    labels_taken: set[int] = field(default_factory=set)
    graph: dict[S, list[S]] | None = None
    parent: dict[S, tuple[S, int] | None] = field(default_factory=dict)
    """Parent pointers of every visited state, as the system stores it (packed, for an agent
    or a tree: see :attr:`System.unpack`): :func:`trace_to` walks them."""


Progress = Callable[[int, int, int, float], None]
"""Called about once a second with (states, frontier, depth, elapsed seconds)."""


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for the block.

    A search allocates millions of tuples, none in a cycle, and keeps most of them: the
    collector would scan the growing heap again and again for garbage it never finds (a
    third of a check's time). Reference counting still frees everything as usual. Afterwards
    what the block allocated joins the oldest generation unscanned (``freeze`` then
    ``unfreeze``), instead of being scanned all at once by the first collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if enabled:
            gc.enable()


def explore(
    system: System[S],
    *,
    max_states: int | None = None,
    keep_graph: bool = False,
    progress: Progress | None = None,
) -> Result[S]:
    """Explore every reachable state of ``system``, stopping at the first violation.

    ``keep_graph`` stores every edge, which the liveness check needs and small models can
    afford. The result records which labels (rows) were ever taken.
    """
    with paused_gc():
        return _explore(system, max_states, keep_graph, progress)


def _explore(
    system: System[S], max_states: int | None, keep_graph: bool, progress: Progress | None
) -> Result[S]:
    start = time.perf_counter()
    succ = system.successors
    grouped = system.grouped
    violated = system.first_violated
    quiescent = system.quiescent
    deadlock = system.deadlock
    init = system.initial
    labels = system.labels
    parent: dict[S, tuple[S, int] | None] = {init: None}
    graph: dict[S, list[S]] | None = {} if keep_graph else None
    taken: set[int] = set()
    transitions = 0
    depth = 0
    frontier: list[S] = [init]
    next_report = start + 1.0
    count = 0
    while frontier:
        following: list[S] = []
        append = following.append
        for s in frontier:
            bad = violated(s)
            labelled: Sequence[Iterable[int]] = ()
            if bad is not None:
                nexts: Sequence[tuple[int, S]] = ()
            elif grouped is None:
                nexts = succ(s)
                transitions += len(nexts)
            else:
                nexts, pairs, labelled = grouped(s)
                transitions += pairs
            if bad is None and not nexts and not quiescent(s):
                bad = deadlock
            if bad is not None:
                return _stop(system, parent, s, bad, transitions, depth, start, taken, graph)
            if graph is not None:
                graph[s] = [t for _, t in nexts]
            for label, t in nexts:
                if t not in parent:
                    parent[t] = (s, label)
                    append(t)
            # Stop recording once every label is taken (the bench takes all of its rows early).
            if len(taken) < len(labels):
                if grouped is None:
                    taken.update(label for label, _ in nexts)
                else:
                    for group in labelled:
                        taken.update(group)
            count += 1
            # Every 1,024 states: an agent's or a tree's search expands a few hundred a
            # second on a busy machine, and a progress line is due about once a second.
            if progress is not None and count & 0x3FF == 0:
                now = time.perf_counter()
                if now >= next_report:
                    progress(len(parent), len(following), depth, now - start)
                    next_report = now + 1.0
            if max_states is not None and len(parent) > max_states:
                return Result(
                    system.name, len(parent), transitions, depth,
                    time.perf_counter() - start, complete=False, labels_taken=taken, graph=graph,
                    parent=parent,
                )  # fmt: skip
        if following:
            depth += 1
        frontier = following
    return Result(
        system.name, len(parent), transitions, depth, time.perf_counter() - start,
        complete=True, labels_taken=taken, graph=graph, parent=parent,
    )  # fmt: skip


def trace_to(
    parent: dict[S, tuple[S, int] | None], s: S, unpack: Callable[[S], Any] | None = None
) -> tuple[tuple[int | None, Any], ...]:
    """The path from the initial state to ``s`` along parent pointers, each state unpacked."""
    steps: list[tuple[int | None, S]] = []
    node: S = s
    while (link := parent[node]) is not None:
        steps.append((link[1], node))
        node = link[0]
    steps.append((None, node))
    return tuple(
        (label, state if unpack is None else unpack(state)) for label, state in reversed(steps)
    )


def _stop(
    system: System[S],
    parent: dict[S, tuple[S, int] | None],
    s: S,
    prop: str,
    transitions: int,
    depth: int,
    start: float,
    taken: set[int],
    graph: dict[S, list[S]] | None,
) -> Result[S]:
    return Result(
        system.name, len(parent), transitions, depth, time.perf_counter() - start,
        complete=False, violation=Violation(prop, trace_to(parent, s, system.unpack)),
        labels_taken=taken, graph=graph, parent=parent,
    )  # fmt: skip


def unreachable_quiescence(graph: dict[S, list[S]], quiescent: Callable[[S], bool]) -> list[S]:
    """States from which no quiescent state is reachable (AG EF quiescent fails there).

    A backward search from every quiescent state over the stored edges; whatever it does not
    reach is stuck in a cycle or a dead end that never settles.
    """
    with paused_gc():
        return _unreachable_quiescence(graph, quiescent)


def _unreachable_quiescence(graph: dict[S, list[S]], quiescent: Callable[[S], bool]) -> list[S]:
    reverse: dict[S, list[S]] = {s: [] for s in graph}
    for s, nexts in graph.items():
        for t in nexts:
            reverse.setdefault(t, []).append(s)
    seen = {s for s in reverse if quiescent(s)}
    stack = list(seen)
    while stack:
        for p in reverse[stack.pop()]:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return [s for s in graph if s not in seen]
