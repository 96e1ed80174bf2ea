"""Symmetry between siblings: one canonical order for the admitted children of every parent.

Two children of one parent that differ only by their slot are interchangeable: nothing in
the tables, the wiring or the properties names a child's number. So a tree model with
``[tree] symmetry = true`` is searched over *orbits*: every state reached is replaced by its
canonical member, in which each parent's admitted children come sorted by their whole subtree
(bottom-up, as a tree's canonical form: a child's key is its own slots and the sorted keys of
its children). A subtree moves as one: the node's activation, its agent, its ghosts
(``ghost.closes``, ``ghost.notices``, ``ghost.owed``) and every descendant's; the budgets,
the door and the tree-wide ghosts stay; the record of what broke, which names a node
(``INVARIANT@a.1``), is renamed with it. This is Murphi's scalarset reduction (rumur's
exhaustive canonicalisation), specialised to a tree's sibling group, where sorting subtrees
is exact: two states get one canonical member iff one is a sibling permutation of the other.

Why it is sound, and what was checked rather than assumed:

- *The initial state* is fixed: only the root is admitted.
- *Admission fills the first free slot*, so admitted children are always a prefix of their
  parent's slots (no slot is ever emptied) and a permutation is taken only among them: the
  next admission goes to the same slot in every member of an orbit.
- *The properties* quantify over every node alike; only the names of a table's invariant or
  contract carry a node, and those are renamed with it (a trace is rebuilt to name the node
  the concrete run breaks it on, below).
- *Teardown visits children in slot order inside one atomic step* (``dispose_children``, as
  the runtime's ordered set of owned children does), and ``last`` reads the siblings as the
  visit finds them: so a permutation is not obviously an automorphism of the step relation.
  What the reduction needs is weaker: from every reachable state and every sibling
  permutation of it, the successors fall in the same orbits (then a breadth-first search of
  representatives meets every reachable orbit at its distance, so verdicts and the lengths of
  shortest counterexamples agree). It is enough to try every member of every orbit the reduced
  search itself reaches (:func:`orbit_faults`): by induction on the distance, each orbit
  reached at d leads, from every member, to the orbits the search reaches at d + 1.
  ``tests/test_symmetry.py`` proves exactly that, and that the orbits add up to the unreduced
  count, on the width-2 activation trees and on ``agent_tree_pair``, the smallest agent tree
  with siblings (238,763 orbits of 464,668 states, its settled children's listeners re-entering
  the parent and the door; a slow test, 2.5 to 4 minutes of a core); any other tree
  on demand (``FSM_CORE_PROVE_SYMMETRY=MODEL,...``, the README says how). A model outside those
  is trusted to the same argument: sibling teardowns touch disjoint subtrees, and what each
  hands its parent (``child_settled(failed, last)``) is folded by an update that ignores the
  order (``children := not last``, ``failure := failure or failed``), whichever child goes
  first; no listener calls a sibling (specs/README.md, What listeners re-enter). The proof
  compares verdicts, successor orbits and what each step takes (its rows and reactions, less
  the nodes they name), so the rows a reduced search reports never taken (``untaken``) and
  the effects nothing re-enters are proven the unreduced search's too.
- *Traces*: a representative's path is not a run. :func:`concrete_trace` replays it in the
  unreduced system, at each step taking a successor in the next representative's orbit, so
  every counterexample printed is executable as printed, and names the property as the
  concrete state breaks it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from itertools import pairwise, permutations, product
from math import factorial
from typing import Any

from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._composed._compose import Engine
from fsm_core.check._composed._tree import TreeWiring
from fsm_core.check._explore import Grouped
from fsm_core.check._moves import Move

Key = tuple[Any, ...]
"""A subtree's sort key: its node's slots' number (:attr:`Siblings._ids`), then its admitted
children's keys in order."""


class Siblings:
    """The canonical sibling order of a :class:`~._tree.TreeWiring`'s states.

    ``canonical(state)`` is the orbit's representative; ``orbit_size(state)`` how many states
    the orbit holds; ``permuted(state)`` every member (for the tests' proof)::

        sib = Siblings(wiring)
        assert sib.canonical(sib.canonical(s)) == sib.canonical(s)
    """

    def __init__(self, wiring: TreeWiring) -> None:
        shape = wiring.shape
        n = len(shape.names)
        self._children = shape.children
        self._names = shape.names
        self._broken = len(wiring.layout.names) - 1
        assert wiring.layout.names[self._broken].startswith("ghost.broken")
        agents = wiring.agent is not None
        # Each node's own positions, in one order for every node: they move together.
        self._own = tuple(
            (
                i,
                *((n + i,) if agents else ()),
                wiring.layout[f"ghost.closes.{x}"],
                wiring.layout[f"ghost.notices.{x}"],
                *((wiring.layout[f"ghost.owed.{x}"],) if agents else ()),
            )
            for i, x in enumerate(shape.names)
        )
        # Parents deepest first, so a parent's children's keys are known when it is sorted.
        depth = [0] * n
        for i in range(1, n):
            p = shape.parent[i]
            assert p is not None
            depth[i] = depth[p] + 1
        self._parents = tuple(
            sorted((i for i in range(n) if shape.children[i]), key=lambda i: -depth[i])
        )
        self._ids: dict[tuple[Any, ...], str] = {}
        """Each node's slots met, by their sort key: their ``repr``, a total order on them that
        is the same in every process (the order they were met in would make sorting canonical
        in one process only, and a partitioned search's shards must pick the same
        representative), cached so each distinct slot tuple is written once."""
        self._agents = agents

    def _key(self, state: Sequence[Any], i: int, keys: dict[int, Key]) -> Key:
        own = tuple(state[k] for k in self._own[i])
        name = self._ids.get(own)
        if name is None:
            name = self._ids[own] = repr(own)
        return (name, *(keys[c] for c in self._admitted(state, i, keys)))

    def _admitted(self, state: Sequence[Any], i: int, keys: dict[int, Key]) -> list[int]:
        """Node ``i``'s admitted children, in canonical order (their keys are in ``keys``)."""
        admitted = [c for c in self._children[i] if state[c] is not None]
        if len(admitted) > 1:
            admitted.sort(key=keys.__getitem__)
        return admitted

    def _order(self, state: Sequence[Any]) -> dict[int, list[int]] | None:
        """Each parent's children in canonical order (the admitted ones sorted, then the empty
        slots, whose subtrees are empty), or None when every parent's already are."""
        keys: dict[int, Key] = {}
        order: dict[int, list[int]] = {}
        moved = False
        for p in self._parents:
            children = self._children[p]
            for c in children:
                if state[c] is not None and c not in keys:
                    keys[c] = self._key(state, c, keys)
            admitted = self._admitted(state, p, keys)
            order[p] = admitted + [c for c in children if state[c] is None]
            moved = moved or tuple(admitted) != children[: len(admitted)]
        return order if moved else None

    def canonical(self, state: tuple[Any, ...]) -> tuple[Any, ...]:
        """The representative of ``state``'s orbit (``state`` itself when it is one)."""
        order = self._order(state)
        return state if order is None else self._moved(state, self._mapping(order))

    def _mapping(self, order: dict[int, list[int]]) -> dict[int, int]:
        """Where each node goes: top-down, the k-th child in ``order`` (every child of each
        parent named there) takes the k-th slot of where its parent went."""
        where = {0: 0}
        stack = [0]
        while stack:
            old = stack.pop()
            new = where[old]
            for k, c in enumerate(order.get(old, ())):
                where[c] = self._children[new][k]
                stack.append(c)
        return where

    def _moved(self, state: tuple[Any, ...], where: dict[int, int]) -> tuple[Any, ...]:
        out = list(state)
        for old, new in where.items():
            if old != new:
                for a, b in zip(self._own[old], self._own[new], strict=True):
                    out[b] = state[a]
        broken = state[self._broken]
        if broken and "@" in broken:
            prop, _, node = broken.rpartition("@")
            path, colon, rest = node.partition(":")
            index = self._names.index(path)
            out[self._broken] = f"{prop}@{self._names[where.get(index, index)]}{colon}{rest}"
        return tuple(out)

    def orbit_size(self, state: Sequence[Any]) -> int:
        """How many states ``state``'s orbit holds: at each parent, the distinct orders of its
        admitted children (k! over the factorial of each class of equal subtrees), times
        those inside each child."""
        keys: dict[int, Key] = {}
        size = 1
        for p in self._parents:
            for c in self._children[p]:
                if state[c] is not None and c not in keys:
                    keys[c] = self._key(state, c, keys)
            admitted = self._admitted(state, p, keys)
            size *= factorial(len(admitted))
            run = 1
            for a, b in pairwise(admitted):
                run = run + 1 if keys[a] == keys[b] else 1
                size //= run
        return size

    def permuted(self, state: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
        """Every sibling permutation of ``state`` (with repeats when subtrees are equal): each
        parent's admitted children in every order, subtrees moving whole."""
        parents = self._parents  # every one: an empty subtree moves as well
        choices = []
        for p in parents:
            admitted = [c for c in self._children[p] if state[c] is not None]
            choices.append(list(permutations(admitted)))
        for pick in product(*choices):
            order = {
                p: [*o, *(c for c in self._children[p] if state[c] is None)]
                for p, o in zip(parents, pick, strict=True)
            }
            yield self._moved(state, self._mapping(order))


def reduced_steps(
    successors: Callable[[Any], Sequence[tuple[int, Any]]], canon: Callable[[Any], Any]
) -> Callable[[Any], list[tuple[int, Any]]]:
    """``successors`` with every next state replaced by its orbit's representative."""

    def steps(state: Any) -> list[tuple[int, Any]]:
        return [(label, canon(t)) for label, t in successors(state)]

    return steps


def reduced_grouped(grouped: Grouped[Any], canon: Callable[[Any], Any]) -> Grouped[Any]:
    """:attr:`~fsm_core.check._explore.System.grouped` the same way (two groups may now lead to
    one representative: the explorer keeps the first, as it does any state met twice)."""

    def steps(state: Any) -> tuple[list[tuple[int, Any]], int, Sequence[Iterable[int]]]:
        pairs, count, labels = grouped(state)
        return [(label, canon(t)) for label, t in pairs], count, labels

    return steps


def concrete_trace(
    reps: Sequence[Hashable],
    initial: Hashable,
    successors: Callable[[Any], Sequence[tuple[int, Any]]],
    canon: Callable[[Any], Any],
) -> list[tuple[int | None, Any]]:
    """A run of the unreduced system along the representatives ``reps`` (initial first): at
    each step the first successor, in the system's order, in the next representative's orbit.

    Raises AssertionError if some step has none: the reduction would then have searched a
    state no run reaches (the symmetry argument failed for this model)."""
    assert canon(initial) == reps[0], "the initial state is its own representative"
    state = initial
    out: list[tuple[int | None, Any]] = [(None, state)]
    for k, rep in enumerate(reps[1:], 1):
        for label, t in successors(state):
            if canon(t) == rep:
                out.append((label, t))
                state = t
                break
        else:
            raise AssertionError(
                f"symmetry: no run follows the representatives' step {k}: the sibling "
                "permutation is not a symmetry of this model"
            )
    return out


class Reduction:
    """A tree engine's states mapped to their orbits' representatives, as the engine stores
    them (a packed number for the compiled engine, a tuple for the interpreted one), with the
    unreduced system's steps kept for :func:`concrete_trace`."""

    def __init__(self, engine: Engine) -> None:
        assert isinstance(engine.wiring, TreeWiring), "only a tree has siblings"
        self.siblings = Siblings(engine.wiring)
        self.engine = engine
        self._compiled = engine if isinstance(engine, CompiledEngine) else None
        self._canon: dict[Any, Any] = {}
        self._sizes: dict[Any, int] = {}

    def canonical(self, state: Any) -> Any:
        """The representative of ``state``'s orbit, as the engine stores states."""
        c = self._compiled
        if c is None:
            return self.siblings.canonical(state)
        base, code = c.budgetless(state)
        found = self._canon.get(base)
        if found is None:
            full = c.unpack(base)
            canon = self.siblings.canonical(full)
            found = self._canon[base] = base if canon is full else c.pack(canon)
        return found + code

    def orbit_size(self, state: Any) -> int:
        """How many states ``state``'s orbit holds (budgets never differ within one)."""
        c = self._compiled
        base: Any = state if c is None else c.budgetless(state)[0]
        found = self._sizes.get(base)
        if found is None:
            full = base if c is None else c.unpack(base)
            found = self._sizes[base] = self.siblings.orbit_size(full)
        return found

    def pack(self, state: tuple[Any, ...]) -> Any:
        """An unpacked state as the engine stores it."""
        return state if self._compiled is None else self._compiled.pack(state)


def _told(move: Move) -> tuple[Hashable, ...]:
    """What a step's ``move`` tells a report, less the nodes it names: each call in it, its
    reactions' included, as (the effect it ran inside, event, arguments, row, where it stopped).
    Sorted: a permutation of siblings may reorder the calls a teardown makes to them. A report's
    ``untaken`` rows and unreacted effects are read from exactly these."""
    calls: list[tuple[str, str, Hashable, str | None, str]] = []

    def walk(m: Move, within: str) -> None:
        calls.append((within, m.event, m.args, m.row, m.stopped))
        for effect, nested in m.inside:
            walk(nested, effect)

    walk(move, "")
    return tuple(sorted(calls, key=repr))


def orbit_faults(reduction: Reduction, states: Iterable[Any]) -> Iterator[str]:
    """Where a sibling permutation of one of ``states`` (as the engine stores them) is not a
    symmetry: its verdict (the property broken, less the node it names; quiescent) differs, or
    its steps do: each step, as the orbit it leads to and what its move tells the report (the
    rows taken, the reactions made: :func:`_told`), must have its like from every member. Empty
    proves the reduction exact for the model when ``states`` holds every representative the
    reduced search reaches (or every reachable state): by induction on the distance, every
    orbit the unreduced system reaches at distance d is then reached by the reduced search at
    d, with one verdict for the whole orbit and the same rows and reactions taken from it."""
    engine = reduction.engine
    canon = reduction.canonical
    siblings = reduction.siblings
    told: dict[int, tuple[Hashable, ...]] = {}

    def verdict(s: Any) -> tuple[str | None, bool]:
        broken = engine.first_violated(s)
        return broken and broken.partition("@")[0], engine.quiescent(s)

    def steps(s: Any) -> set[tuple[tuple[Hashable, ...], Any]]:
        out = set()
        for label, t in engine.steps(s):
            if label not in told:
                told[label] = _told(engine.moves[label])
            out.add((told[label], canon(t)))
        return out

    for s in states:
        full = engine.unpack(s)
        want: set[tuple[tuple[Hashable, ...], Any]] | None = None
        judged = verdict(s)
        for p in siblings.permuted(full):
            if p == full:
                continue
            packed = reduction.pack(p)
            if verdict(packed) != judged:
                yield f"verdict of {p} differs from {full}'s"
                continue
            if want is None:
                want = steps(s)
            if steps(packed) != want:
                yield f"steps of {p} differ from those of {full} by orbit or by what they take"
