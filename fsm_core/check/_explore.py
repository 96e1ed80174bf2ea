"""Explicit-state breadth-first search with parent pointers.

BFS visits states in order of distance from the initial state, so the first violation found
has a shortest trace; the price is memory (every state kept, with its parent) rather than DFS's
stack. The states are numbered as met (:class:`Visited`): one level's frontier is a range of
numbers, parent pointers and labels are machine integers in arrays, and the edges the liveness
check needs are numbers too (:class:`Graph`). On ``agent_tree_pair`` with its edges kept that is
196 bytes a state, where a dict of parent tuples and a dict of lists of edges took 855; the
composition engine's memo holds some 12,000 more (``python -m fsm_core.tools._memory``).

Every state is checked when it is taken from the frontier: the invariants first, then deadlock
(no successor outside a quiescent state), under the name the model's ``deadlock-free`` property
record gives it.

Verdicts keep "not found" apart from "cannot happen": :attr:`Result.complete` is False when a
state limit stopped the search early, and then a clean result proves nothing.
"""

from __future__ import annotations

import gc
import time
from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
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

    A system that memoizes per state may give ``level_done``: the search calls it with each
    level's states once it has expanded all of them, and never asks for their steps again
    (a search is breadth first: the level after next reaches a state of its own, or one met
    before, whose steps are not needed). It may drop what it keeps for them.
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
    level_done: Callable[[Sequence[S]], None] | None = None


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
class Visited(Mapping[S, tuple[S, int] | None]):
    """Every state a search visited, numbered in the order met (breadth first, so a level's
    states have consecutive numbers), each with the number of its parent and the label of the
    step from it: a shortest path back to the initial state.

    As a mapping, it gives each state's parent and label (None for the initial state), as a
    dict of them would, and iterates in the order met::

        visited = explore(system).parent
        assert next(iter(visited)) == system.initial and visited[system.initial] is None
    """

    __slots__ = ("_index", "_labels", "_parents", "_states")

    def __init__(self) -> None:
        self._index: dict[S, int] = {}
        """The number of each state."""
        self._states: list[S] = []
        """Each state, by number."""
        self._parents = array("i")
        """The number of each state's parent (-1: the initial state's)."""
        self._labels = array("i")
        """The label of the step from its parent to each state (-1: the initial state's)."""

    def __len__(self) -> int:
        return len(self._states)

    def __iter__(self) -> Iterator[S]:
        return iter(self._states)

    def __contains__(self, state: object) -> bool:
        return state in self._index

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Visited):
            return super().__eq__(other)
        return (self._states, self._parents, self._labels) == (
            other._states, other._parents, other._labels,
        )  # fmt: skip

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Visited states={len(self._states)}>"

    def __getitem__(self, state: S) -> tuple[S, int] | None:
        i = self._index[state]
        p = self._parents[i]
        return None if p < 0 else (self._states[p], self._labels[i])


@final
@dataclass(frozen=True, slots=True)
class Graph:
    """Every edge a search met, by the states' numbers in :class:`Visited` (compressed sparse
    rows): the next states of state ``i`` are ``targets[offsets[i]:offsets[i + 1]]``, one per
    step the search recorded (the first of each group, with :attr:`System.grouped`)."""

    offsets: array[int]
    targets: array[int]


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
    graph: Graph | None = None
    parent: Mapping[S, tuple[S, int] | None] = field(default_factory=dict)
    """Parent pointers of every visited state, as the system stores it (packed, for an agent
    or a tree: see :attr:`System.unpack`), in the order visited (a :class:`Visited`, from
    :func:`explore`); :func:`trace_to` walks them."""


Progress = Callable[[int, int, int, float], None]
"""Called about once a second with (states, frontier, depth, elapsed seconds)."""


FREEZE_FROM = 100_000
"""How many objects a :func:`paused_gc` block must have left for them to be frozen unscanned:
below it the collector's scan of them is cheap, and asking whether the caller froze any
(:func:`gc.get_freeze_count` walks every frozen object) might cost more. A partitioned search
pauses the collector once a level, and a test session runs thousands of small searches."""


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for the block.

    A search allocates millions of tuples, none in a cycle, and keeps most of them: the
    collector would scan the growing heap again and again for garbage it never finds (a
    third of a check's time). Reference counting still frees everything as usual. Afterwards
    what a large block allocated (:data:`FREEZE_FROM` objects or more) joins the oldest
    generation unscanned (``freeze`` then ``unfreeze``), instead of being scanned all at once
    by the first collection. Where the caller had frozen objects already (a server that
    freezes before it forks), the block's objects are left to the collector as usual:
    ``unfreeze`` would thaw the caller's objects too, and leaving them frozen would keep them
    from the collector for good.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # The collector is off, so its young generation's count is what the block left.
        if gc.get_count()[0] >= FREEZE_FROM and not gc.get_freeze_count():
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
    level_done = system.level_done
    visited: Visited[S] = Visited()
    index, states = visited._index, visited._states
    parents, labels_of = visited._parents, visited._labels
    index[init] = 0
    states.append(init)
    parents.append(-1)
    labels_of.append(-1)
    graph = Graph(array("i", [0]), array("i")) if keep_graph else None
    edge = None if graph is None else graph.targets.append
    ends = None if graph is None else graph.offsets.append
    taken: set[int] = set()
    transitions = 0
    depth = 0
    # Invariant: the frontier is the states numbered lo to hi - 1, the whole of one level.
    lo, hi = 0, 1
    next_report = start + 1.0
    while lo < hi:
        for i in range(lo, hi):
            s = states[i]
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
                return Result(
                    system.name, len(states), transitions, depth, time.perf_counter() - start,
                    complete=False, violation=Violation(bad, trace_to(visited, s, system.unpack)),
                    labels_taken=taken, graph=graph, parent=visited,
                )  # fmt: skip
            for label, t in nexts:
                j = index.get(t)
                if j is None:
                    j = index[t] = len(states)
                    states.append(t)
                    parents.append(i)
                    labels_of.append(label)
                if edge is not None:
                    edge(j)
            if ends is not None:
                ends(len(graph.targets))  # type: ignore[union-attr]
            # Stop recording once every label is taken (the bench takes all of its rows early).
            if len(taken) < len(labels):
                if grouped is None:
                    taken.update(label for label, _ in nexts)
                else:
                    for group in labelled:
                        taken.update(group)
            # Every 1,024 states: an agent's or a tree's search expands a few hundred a
            # second on a busy machine, and a progress line is due about once a second.
            if progress is not None and i & 0x3FF == 0x3FF:
                now = time.perf_counter()
                if now >= next_report:
                    progress(len(states), len(states) - hi, depth, now - start)
                    next_report = now + 1.0
            if max_states is not None and len(states) > max_states:
                return Result(
                    system.name, len(states), transitions, depth,
                    time.perf_counter() - start, complete=False, labels_taken=taken, graph=graph,
                    parent=visited,
                )  # fmt: skip
        if level_done is not None:
            level_done(states[lo:hi])
        if len(states) > hi:
            depth += 1
        lo, hi = hi, len(states)
    return Result(
        system.name, len(states), transitions, depth, time.perf_counter() - start,
        complete=True, labels_taken=taken, graph=graph, parent=visited,
    )  # fmt: skip


def trace_to(
    parent: Mapping[S, tuple[S, int] | None], s: S, unpack: Callable[[S], Any] | None = None
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


def unreachable_quiescence(
    graph: Graph, visited: Visited[S], quiescent: Callable[[S], bool]
) -> list[S]:
    """States from which no quiescent state is reachable (AG EF quiescent fails there), in the
    order of ``visited`` (so the first has a shortest trace).

    A backward search from every quiescent state over the stored edges; whatever it does not
    reach is stuck in a cycle or a dead end that never settles.
    """
    with paused_gc():
        return _unreachable_quiescence(graph, visited, quiescent)


def _unreachable_quiescence(
    graph: Graph, visited: Visited[S], quiescent: Callable[[S], bool]
) -> list[S]:
    offsets, targets, states = graph.offsets, graph.targets, visited._states
    n = len(offsets) - 1
    # The edges reversed, as compressed sparse rows too: count each state's predecessors,
    # then place each predecessor at the end of its target's row.
    starts = array("i", bytes(4 * (n + 1)))
    for t in targets:
        starts[t + 1] += 1
    for i in range(n):
        starts[i + 1] += starts[i]
    fill = array("i", starts)
    sources = array("i", bytes(4 * len(targets)))
    for i in range(n):
        for k in range(offsets[i], offsets[i + 1]):
            t = targets[k]
            sources[fill[t]] = i
            fill[t] += 1
    seen = bytearray(n)
    stack = [i for i in range(n) if quiescent(states[i])]
    for i in stack:
        seen[i] = 1
    while stack:
        t = stack.pop()
        for k in range(starts[t], starts[t + 1]):
            p = sources[k]
            if not seen[p]:
                seen[p] = 1
                stack.append(p)
    return [states[i] for i in range(n) if not seen[i]]
