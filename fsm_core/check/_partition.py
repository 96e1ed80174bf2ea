"""One model's breadth-first search partitioned across processes, level by level.

Every state has an owner among ``n`` shards: a hash of the state modulo ``n`` (of the state
without its budgets for an agent or a tree, so the states a compiled engine memoizes together
meet in one process). A shard keeps the states it owns: its visited set and, per level, its
states with the key that first reached each (the parent records). Each level is two rounds:

1. expand: each shard ranks its slice of the frontier (below), checks each state (the
   invariants, then deadlock) and sends each successor, with its key, to the successor's owner;
   a state-at-a-time shard sends a successor it has not met before only (not one of its own
   visited states, nor one it sent its owner in an earlier level), so a shard sends a state
   at most once, in the level that first reaches it;
2. merge: each shard keeps, of what it received, each unvisited state once with its least key,
   and sorts them by key: its slice of the next level, whose keys every shard is sent.

A key is ``rank * K + i``: the parent's rank in its level and the successor's position among
the parent's successors (a table's label). A state's rank is its position among every shard's
keys of its level (a sum of ``searchsorted``), which is the order in which the single-process
search (:func:`~fsm_core.check._explore.explore`) appends the level's states. So the first bad
state of a level, what was counted before it, and where ``max_states`` cuts a level are that
search's, number for number, and the trace has the same length. A trace is a walk back through
the parent ranks across shards; each step's label is asked of the parent's owner, which expands
the parent again.

What crosses between processes is portable: a table model's codes (integers over its domain's
mixed radix, the same in every process), a composed model's states as tuples with the budgets
apart (a compiled engine numbers the states it meets, so its numbers mean nothing in another
process), and labels as :class:`~fsm_core.check._moves.Move` values (a composed model numbers
its moves as met, too).

Where the shards run is a :class:`Transport`'s business: :class:`Local` runs shard 0 in this
process and the others in worker processes, over pipes; :mod:`fsm_core.check._cluster` runs
them on a Dask cluster. The liveness pass (a quiescent state
reachable from every state) needs every edge at once and is not partitioned: a check that runs
it stays in one process (:func:`~fsm_core.check._parallel.partitions`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import signal
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from operator import itemgetter
from typing import Any, Final, Literal, NoReturn, Protocol, TypeAlias, final

import numpy as np
import numpy.typing as npt

from fsm_core._errors import FsmError, TransitionError, UsageError
from fsm_core.check._check import Report
from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._config import Model
from fsm_core.check._explore import Progress, Result, Violation, paused_gc
from fsm_core.check._modelfile import load_model
from fsm_core.check._moves import Move
from fsm_core.check._parallel import Source, WorkerDied, _context
from fsm_core.check._reentry import unreached, unreacted
from fsm_core.check._system import Built, build

__all__ = [
    "Held",
    "Local",
    "Shard",
    "Transport",
    "check_partitioned",
    "search",
]

Keys: TypeAlias = npt.NDArray[np.int64]
Engine = Literal["vector", "python"]

WIDTH: Final = 1 << 24
"""``K`` of a composed model's keys: more successors than any state has (asserted)."""


# --- the shards ------------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class Expanded:
    """What a shard's expansion of its slice of a level found."""

    bad: tuple[int, str] | None
    """The rank and broken property of its first bad state (invariant, then deadlock)."""
    transitions: int
    """Transitions from its slice (up to its first bad state)."""
    taken: frozenset[Move]
    """Labels taken that this shard had not reported before."""


@final
@dataclass(frozen=True, slots=True)
class Cut:
    """A shard's part of a level cut after its first ``processed`` states (by rank)."""

    states: int
    """The next level's states its processed part discovered first."""
    transitions: int
    taken: frozenset[Move]


Found = tuple[tuple[Any, ...], int | None, int | None]
"""A state looked up by level and rank: (the state as a trace shows it, its parent's rank, its
position among its parent's successors); None twice for the initial state."""


class Shard(Protocol):
    """One owner's part of the search. Every method but :meth:`begin` follows the round
    before it; the payloads are what :meth:`expand` sends each shard and :meth:`merge`
    receives from each."""

    def begin(self) -> Keys:
        """Own the initial state if it is ours; the keys of our level 0."""
        ...

    def expand(self, others: Sequence[Keys | None]) -> tuple[Expanded, list[Any]]:
        """Rank the frontier with the other shards' keys of it (None: ours), check and expand
        it; the summary and a payload per shard."""
        ...

    def merge(self, payloads: Sequence[Any]) -> Keys:
        """Keep what is new of what every shard sent; the keys of our slice of the next level."""
        ...

    def cut(self, processed: int) -> Cut:
        """The last expanded level's part before rank ``processed``."""
        ...

    def lookup(self, depth: int, rank: int) -> Found | None:
        """The state of ``rank`` in level ``depth``, if ours."""
        ...

    def label(self, depth: int, rank: int, position: int) -> Move:
        """The label of the successor at ``position`` of our state ``rank`` in level ``depth``."""
        ...


def _ranks(me: int, own: Keys, others: Sequence[Keys | None]) -> npt.NDArray[np.int64]:
    """Each of our keys' rank among every shard's keys of the level (keys are unique)."""
    ranks = np.arange(own.size, dtype=np.int64)
    for j, keys in enumerate(others):
        if j != me and keys is not None and keys.size:
            ranks += np.searchsorted(keys, own)
    return ranks


_GOLDEN: Final = np.uint64(0x9E3779B97F4A7C15)


def _code_owners(codes: npt.NDArray[np.int64], owners: int) -> npt.NDArray[np.int64]:
    """The owner of each table code: a multiplicative hash, so neighbouring codes spread."""
    mixed = (codes.view(np.uint64) * _GOLDEN) >> np.uint64(32)
    mixed %= np.uint64(owners)
    return mixed.view(np.int64)


class TableShard:
    """A table model's shard on the vector backend: a level at a time with NumPy."""

    def __init__(
        self, built: Built, model: Model, me: int, owners: int, search: Any = None
    ) -> None:
        # Imported here: NumPy's backend is only for the table models that fit it.
        from fsm_core.check import _vector  # noqa: PLC0415

        self._v = _vector
        self.search = search or self.compiled(model, built)
        self.system = built.system
        self.me, self.owners = me, owners
        self.count = max(1, self.search.label_count)
        layout = self.search.layout
        self.size = layout.size
        self.code_bits = max(1, (layout.size - 1).bit_length())
        self.visited = _vector._Visited(layout.size, _vector.BYTES_LIMIT)
        self.levels: list[tuple[npt.NDArray[np.int64], Keys]] = []
        """Per level, our states' codes and keys, in key order."""
        self.ranks: list[npt.NDArray[np.int64]] = []
        """Per expanded level, our states' ranks."""
        self.reported: set[int] = set()

    @staticmethod
    def compiled(model: Model, built: Built) -> Any:
        """``model``'s table compiled for the vector backend (raises ``Unfit``)."""
        from fsm_core.check import _vector  # noqa: PLC0415

        return _vector.VectorSearch(model, built.system)

    def begin(self) -> Keys:
        code = np.array([self.search.initial], dtype=np.int64)
        if int(_code_owners(code, self.owners)[0]) != self.me:
            code = code[:0]
        self.visited.add(code)
        keys = np.zeros(code.size, dtype=np.int64)
        self.levels.append((code, keys))
        return keys

    def _moves(self, labels: set[int]) -> frozenset[Move]:
        return frozenset(self.system.labels[i] for i in labels)  # type: ignore[misc]

    def expand(self, others: Sequence[Keys | None]) -> tuple[Expanded, list[Any]]:
        """Each payload is the edges to one shard, each code once with its least key: packed
        as ``code << shift | key`` (the vector backend's fast path) when that fits in 63
        bits, ``shift`` the same in every shard (from the level's size), else as two arrays."""
        codes, keys = self.levels[-1]
        ranks = _ranks(self.me, keys, others)
        self.ranks.append(ranks)
        count = self.count
        total = sum(k.size for k in others if k is not None) + keys.size
        shift = max(1, (total * count).bit_length())
        if self.code_bits + shift > 63:
            shift = 0
        level = self.search._level(codes, shift, count, ranks)
        bad: tuple[int, str] | None = None
        if level.bad is not None:
            state = self.search.layout.decode(int(codes[level.bad]))
            name = self.system.first_violated(state) or self.system.deadlock
            bad = (int(ranks[level.bad]), name)
        edges = level.edges
        transitions = int(edges.size)
        payloads: list[Any] = []
        if shift:  # each code once, with its least key
            edges.sort()
            code = edges >> shift
            head = np.empty(code.size, dtype=np.bool_)
            head[:1] = True
            np.not_equal(code[1:], code[:-1], out=head[1:])
            edges, code = edges[head], code[head]
            owner = _code_owners(code, self.owners)
            payloads = [(edges[owner == j], shift) for j in range(self.owners)]
        else:
            global_keys = level.keys
            assert global_keys is not None
            owner = _code_owners(edges, self.owners)
            payloads = [
                ((edges[mine], global_keys[mine]), 0)
                for mine in (owner == j for j in range(self.owners))
            ]
        new = level.taken - self.reported
        self.reported |= new
        return Expanded(bad, transitions, self._moves(new)), payloads

    def merge(self, payloads: Sequence[Any]) -> Keys:
        v = self._v
        shift = payloads[0][1]
        empty32 = np.empty(0, dtype=np.int32)
        if shift:
            edges = np.concatenate([p[0] for p in payloads])
            level = v._Level(None, edges, None, shift, set(), edges[:0], empty32, empty32)
        else:
            edges = np.concatenate([p[0][0] for p in payloads])
            keys = np.concatenate([p[0][1] for p in payloads])
            level = v._Level(None, edges, keys, 0, set(), edges[:0], empty32, empty32)
        v._first_discoveries(level, self.size, self.code_bits, self.visited, self.count)
        found: Keys = level.parents.astype(np.int64) * self.count + level.labels
        self.levels.append((level.codes, found))
        return found

    def cut(self, processed: int) -> Cut:
        codes, _ = self.levels[-2]
        done = int(np.searchsorted(self.ranks[-1], processed))
        level = self.search._level(codes[:done], 0, self.count, self.ranks[-1])
        _, following = self.levels[-1]
        first = int(np.searchsorted(following, processed * self.count))
        return Cut(first, int(level.edges.size), self._moves(level.taken))

    def lookup(self, depth: int, rank: int) -> Found | None:
        ranks = self.ranks[depth]
        at = int(np.searchsorted(ranks, rank))
        if at >= ranks.size or ranks[at] != rank:
            return None
        codes, keys = self.levels[depth]
        state = self.search.layout.decode(int(codes[at]))
        if depth == 0:
            return state, None, None
        parent, label = divmod(int(keys[at]), self.count)
        return state, parent, label

    def label(self, depth: int, rank: int, position: int) -> Move:
        move: Move = self.system.labels[position]  # type: ignore[assignment]
        return move


class PythonShard:
    """A shard of any model, a state at a time (agents and trees; a table on the python
    backend): the states are the system's own, packed ones turned portable to cross."""

    def __init__(self, built: Built, me: int, owners: int) -> None:
        self.system = built.system
        self.me, self.owners = me, owners
        c = built.composition
        if isinstance(c, CompiledEngine):
            budgets = [i for i, n in enumerate(built.names) if n.startswith("budget.")]
            lo = budgets[0] if budgets else 0
            hi = lo + len(budgets)
            unpack, pack = c.unpack, c.pack

            def portable(s: Any) -> tuple[Any, Any]:
                full = unpack(s)
                return full[:lo] + full[hi:], full[lo:hi]

            def local(p: tuple[Any, Any]) -> Any:
                rest, spent = p
                return pack(rest[:lo] + spent + rest[lo:])

            self.portable: Callable[[Any], Any] = portable
            self.local: Callable[[Any], Any] = local
            self._hashed: Callable[[Any], Hashable] = itemgetter(0)
            # The engine's state numbers over this are its numbers of the states without their
            # budgets: the budgets' code is the number's remainder, and the initial state's,
            # the model's budgets, is the largest (budgets only fall).
            self._codes = c.budgetless(c.initial())[1] + 1
        else:  # states are tuples of values already
            self.portable = self.local = tuple
            self._hashed = tuple
            self._codes = 0
        self.owner_of: dict[Hashable, int] = {}
        """The owner of each state this shard met, by the state without its budgets (a
        compiled engine's number of it, which every state differing only in budgets shares):
        each is hashed once, whatever level meets it again."""
        self.met: set[Any] = set()
        """The states this shard never keeps or sends again: those it owns and has visited,
        and those it sent their owners in an earlier level (which has visited them since).
        A state is sent at most once, then: a successor another shard owns is sent in the
        level that first reaches it, not in every level that reaches it again."""
        self.levels: list[tuple[list[Any], Keys]] = []
        self.ranks: list[npt.NDArray[np.int64]] = []
        self.taken: set[int] = set()
        """Labels taken so far."""
        self.reported: set[int] = set()
        """Labels taken so far, as the coordinator has been told them."""

    def _owner(self, s: Any) -> int:
        """The owner of ``s``: a hash of its text without its budgets (Python's ``hash`` of
        a string differs from one process to the next)."""
        group = s // self._codes if self._codes else s
        found = self.owner_of.get(group)
        if found is None:
            text = repr(self._hashed(self.portable(s))).encode()
            found = self.owner_of[group] = zlib.crc32(text) % self.owners
        return found

    def begin(self) -> Keys:
        s = self.system.initial
        ours = self._owner(s) == self.me
        if ours:
            self.met.add(s)
        keys = np.zeros(int(ours), dtype=np.int64)
        self.levels.append(([s] if ours else [], keys))
        return keys

    def _expand(self, s: Any) -> tuple[str | None, Sequence[tuple[int, Any]], int, set[int]]:
        """The property ``s`` breaks, else its successors, how many transitions, and labels
        (for :meth:`cut` and :meth:`label`; :meth:`expand` has this inlined)."""
        system = self.system
        bad = system.first_violated(s)
        if bad is not None:
            return bad, (), 0, set()
        labels: set[int] = set()
        if system.grouped is None:
            nexts = system.successors(s)
            pairs = len(nexts)
            labels.update(label for label, _ in nexts)
        else:
            nexts, pairs, labelled = system.grouped(s)
            for group in labelled:
                labels.update(group)
        if not nexts and not system.quiescent(s):
            return system.deadlock, (), 0, set()
        return None, nexts, pairs, labels

    def _moves(self, labels: set[int]) -> frozenset[Move]:
        return frozenset(self.system.labels[i] for i in labels)  # type: ignore[misc]

    def expand(self, others: Sequence[Keys | None]) -> tuple[Expanded, list[Any]]:
        states, keys = self.levels[-1]
        ranks = _ranks(self.me, keys, others)
        self.ranks.append(ranks)
        # Each successor of the slice not met before, with the least key that reached it.
        first: dict[Any, int] = {}
        met = self.met
        system = self.system
        succ, grouped, violated = system.successors, system.grouped, system.first_violated
        labels, taken = system.labels, self.taken
        transitions = 0
        bad: tuple[int, str] | None = None
        with paused_gc():
            for s, rank in zip(states, ranks.tolist(), strict=True):
                broken = violated(s)
                labelled: Sequence[Iterable[int]] = ()
                if broken is None:
                    if grouped is None:
                        nexts = succ(s)
                        transitions += len(nexts)
                    else:
                        nexts, pairs, labelled = grouped(s)
                        transitions += pairs
                    if not nexts and not system.quiescent(s):
                        broken = system.deadlock
                if broken is not None:
                    bad = (rank, broken)
                    break  # no state after it is processed: the stop is here or before
                if len(taken) < len(labels):  # as the single-process search, once all are in
                    if grouped is None:
                        taken.update(label for label, _ in nexts)
                    else:
                        for group in labelled:
                            taken.update(group)
                assert len(nexts) < WIDTH, f"{len(nexts)} successors of one state"
                base = rank * WIDTH
                for i, (_, t) in enumerate(nexts):
                    if t not in first and t not in met:
                        first[t] = base + i
            payloads = self._split(first)
        if system.level_done is not None:
            system.level_done(states)
        new = taken - self.reported
        self.reported |= new
        return Expanded(bad, transitions, self._moves(new)), payloads

    def _split(self, first: dict[Any, int]) -> list[Any]:
        """``first`` by owner, in key order: ours as they are, the others' portable (and
        met from now on: their owners will have visited them once this level is merged)."""
        out: list[list[tuple[Any, int]]] = [[] for _ in range(self.owners)]
        owner_of, owner, codes = self.owner_of, self._owner, self._codes
        for t, k in first.items():
            o = owner_of.get(t // codes if codes else t)
            if o is None:
                o = owner(t)
            out[o].append((t, k))
        portable = self.portable
        for j, sent in enumerate(out):
            if j != self.me:
                self.met.update(t for t, _ in sent)
                out[j] = [(portable(t), k) for t, k in sent]
        return out

    def merge(self, payloads: Sequence[Any]) -> Keys:
        best: dict[Any, int] = {}
        met = self.met
        with paused_gc():
            for j, payload in enumerate(payloads):
                local = None if j == self.me else self.local
                for sent, k in payload:
                    t = sent if local is None else local(sent)
                    if t in met:
                        continue
                    old = best.get(t)
                    if old is None or k < old:
                        best[t] = k
            ordered = sorted(best.items(), key=itemgetter(1))
            met.update(best)
        keys = np.fromiter((k for _, k in ordered), dtype=np.int64, count=len(ordered))
        self.levels.append(([t for t, _ in ordered], keys))
        return keys

    def cut(self, processed: int) -> Cut:
        states, _ = self.levels[-2]
        done = int(np.searchsorted(self.ranks[-1], processed))
        transitions = 0
        taken: set[int] = set()
        for s in states[:done]:
            _, _, pairs, labels = self._expand(s)
            transitions += pairs
            taken |= labels
        _, following = self.levels[-1]
        first = int(np.searchsorted(following, processed * WIDTH))
        return Cut(first, transitions, self._moves(taken))

    def _at(self, depth: int, rank: int) -> int | None:
        ranks = self.ranks[depth]
        at = int(np.searchsorted(ranks, rank))
        return at if at < ranks.size and ranks[at] == rank else None

    def lookup(self, depth: int, rank: int) -> Found | None:
        at = self._at(depth, rank)
        if at is None:
            return None
        states, keys = self.levels[depth]
        state = states[at]
        shown: Any = state if self.system.unpack is None else self.system.unpack(state)
        if depth == 0:
            return tuple(shown), None, None
        parent, position = divmod(int(keys[at]), WIDTH)
        return tuple(shown), parent, position

    def label(self, depth: int, rank: int, position: int) -> Move:
        at = self._at(depth, rank)
        assert at is not None, f"no state of rank {rank} in level {depth} here"
        _, nexts, _, _ = self._expand(self.levels[depth][0][at])
        move: Move = self.system.labels[nexts[position][0]]  # type: ignore[assignment]
        return move


def make_shard(model: Model, engine: Engine, me: int, owners: int) -> Shard:
    """Shard ``me`` of ``owners`` of ``model``'s search on ``engine``."""
    built = build(model)
    search = TableShard.compiled(model, built) if engine == "vector" else None
    return _shard(model, built, search, me, owners)


def width(engine: Engine, built: Built) -> int:
    """``K`` of the keys of ``engine``'s shards: a table's label count, else :data:`WIDTH`."""
    return max(1, len(built.system.labels)) if engine == "vector" else WIDTH


def engine_for(model: Model, built: Built, backend: str) -> tuple[Engine, str | None, Any]:
    """Which shards explore ``model`` (as :func:`~fsm_core.check._check.check` chooses its
    backend), why not the vector backend when it was asked for, and the table compiled for
    the vector backend when it explores (None otherwise)."""
    if backend == "python":
        return "python", None, None
    if model.kind != "table":
        explain = f"it is an {model.kind} model; the vector backend explores table models"
        return "python", explain, None
    from fsm_core.check import _vector  # noqa: PLC0415

    try:
        return "vector", None, TableShard.compiled(model, built)
    except _vector.Unfit as e:
        return "python", str(e), None


# --- a shard between rounds ------------------------------------------------------------------


@final
class Held:
    """A shard as its process holds it, with the payload it sends itself, kept from its
    expansion to its merge (it never leaves the process)."""

    def __init__(self, shard: Shard, me: int) -> None:
        self.shard = shard
        self.me = me
        self.own: Any = None

    def expand(self, keys: Sequence[Keys | None]) -> tuple[Expanded, list[Any]]:
        """:meth:`Shard.expand`; the payloads for the other shards (None for ours)."""
        expanded, payloads = self.shard.expand(keys)
        self.own, payloads[self.me] = payloads[self.me], None
        return expanded, payloads

    def merge(self, payloads: Sequence[Any]) -> Keys:
        """:meth:`Shard.merge` of ``payloads`` (ours None) and the one we kept."""
        own, self.own = self.own, None
        return self.shard.merge([own if j == self.me else p for j, p in enumerate(payloads)])

    def step(self, what: str, *args: Any) -> Any:
        """Any step by name: ``begin``, ``expand``, ``merge``, ``cut``, ``lookup``, ``label``."""
        if what in ("expand", "merge"):
            return getattr(self, what)(*args)
        return getattr(self.shard, what)(*args)


# --- the coordinator -------------------------------------------------------------------------


class Transport(Protocol):
    """Where the shards run: it carries each round's keys and payloads between them, and
    tells the coordinator only the summaries."""

    owners: int

    def begin(self) -> None:
        """Every shard takes its part of level 0."""
        ...

    def expand(self) -> list[Expanded]:
        """Every shard expands its slice of the level (ranked by every shard's keys)."""
        ...

    def merge(self) -> list[int]:
        """Every shard merges what the others sent it; how many new states each kept."""
        ...

    def keys(self) -> list[Keys]:
        """Every shard's keys of the level its last merge made."""
        ...

    def ask(self, shard: int, what: str, *args: Any) -> Any:
        """Shard ``shard``'s answer to ``cut``, ``lookup`` or ``label`` (:class:`Shard`)."""
        ...


def search(
    name: str,
    transport: Transport,
    width: int,
    *,
    max_states: int | None = None,
    progress: Progress | None = None,
) -> tuple[Result[Any], list[Move]]:
    """The partitioned search, with the result :func:`~fsm_core.check._explore.explore` gives
    but for the parent pointers (none here); its ``labels_taken`` and its violation's trace
    index the moves returned beside it. ``width`` is the shards' ``K`` (:func:`width`)."""
    start = time.perf_counter()
    moves: list[Move] = []
    index: dict[Move, int] = {}

    def number(move: Move) -> int:
        found = index.get(move)
        if found is None:
            found = index[move] = len(moves)
            moves.append(move)
        return found

    taken: set[int] = set()
    transport.begin()
    states, transitions, depth, frontier = 1, 0, 0, 1
    next_report = start + 1.0
    while frontier:
        expanded = transport.expand()
        found = transport.merge()
        following = sum(found)
        bads = [e.bad for e in expanded if e.bad is not None]
        bad = min(bads) if bads else None
        stop = _stop(transport, states, following, bad, max_states, width)
        if stop is not None:
            processed = stop
            cuts: list[Cut] = [transport.ask(i, "cut", processed) for i in range(transport.owners)]
            states += sum(c.states for c in cuts)
            transitions += sum(c.transitions for c in cuts)
            for c in cuts:
                taken.update(number(m) for m in c.taken)
            violation = None
            if bad is not None and bad[0] == processed:
                trace = _trace(transport, depth, bad[0], number)
                violation = Violation(bad[1], trace)
            return Result(
                name, states, transitions, depth, time.perf_counter() - start,
                complete=False, violation=violation, labels_taken=taken,
            ), moves  # fmt: skip
        states += following
        transitions += sum(e.transitions for e in expanded)
        for e in expanded:
            taken.update(number(m) for m in e.taken)
        if following:
            depth += 1
        frontier = following
        now = time.perf_counter()
        if progress is not None and now >= next_report:
            progress(states, frontier, depth, now - start)
            next_report = now + 1.0
    result: Result[Any] = Result(
        name, states, transitions, depth, time.perf_counter() - start, complete=True,
        labels_taken=taken,
    )  # fmt: skip
    return result, moves


def _stop(
    transport: Transport,
    states: int,
    following: int,
    bad: tuple[int, str] | None,
    max_states: int | None,
    width: int,
) -> int | None:
    """How many of the level's states (by rank) the single-process search processes before
    it stops in this level, if it does: at the first bad state, or once the states it has
    found exceed ``max_states``."""
    limit: int | None = None
    if max_states is not None and states + following > max_states:
        room = max_states - states
        if room < 0:
            limit = 0
        else:  # the parent of the state that takes the count past the limit
            keys = np.sort(np.concatenate(transport.keys()))
            parents = keys // width
            limit = int(parents[room])
    if bad is not None and (limit is None or bad[0] <= limit):
        return bad[0]
    if limit is not None:
        return limit + 1
    return None


def _trace(
    transport: Transport, depth: int, rank: int, number: Callable[[Move], int]
) -> tuple[tuple[int | None, Any], ...]:
    """The path to the state of ``rank`` in level ``depth``, along parent ranks across shards."""
    steps: list[tuple[int | None, Any]] = []
    child: tuple[Any, int] | None = None  # the state found last, and its position
    while True:
        answers = [transport.ask(i, "lookup", depth, rank) for i in range(transport.owners)]
        shard, (state, parent, position) = next(
            (i, a) for i, a in enumerate(answers) if a is not None
        )
        if child is not None:
            later, at = child
            steps.append((number(transport.ask(shard, "label", depth, rank, at)), later))
        if parent is None:
            steps.append((None, state))
            return tuple(reversed(steps))
        assert position is not None
        child = (state, position)
        depth, rank = depth - 1, parent


def report_of(
    model: Model,
    built: Built,
    result: Result[Any],
    moves: list[Move],
    engine: Engine,
    fallback: str | None,
) -> Report:
    """The report of a partitioned search of ``model``, as :func:`~fsm_core.check._check.check`
    makes it without the liveness pass."""
    taken = [moves[i] for i in sorted(result.labels_taken)]
    rows = {row for move in taken for row in move.rows()}
    violation = result.violation
    idle = unreached(model, taken) if result.complete and violation is None else ()
    dead = tuple(r.id for r in model.machine.table.rows if r.reject is None and r.id not in rows)
    return Report(
        model, result, built.names, moves, built.properties, dead, violation, unreacted(model),
        idle, engine, fallback,
    )  # fmt: skip


# --- shards in processes of this machine ------------------------------------------------------


_Reply = tuple[str, Any]
"""What a worker answers a step: ``("ok", answer)``, ``("refused", message)`` (an
:class:`FsmError`) or ``("failed", traceback)`` (a bug)."""


def _send(conn: Connection, message: Any) -> None:
    """Send ``message`` over ``conn``, its NumPy arrays' memory written to the pipe as it is
    (pickle's out-of-band buffers): a level's codes are copied once each way, not three times."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    conn.send((head, len(buffers)))
    for buffer in buffers:
        conn.send_bytes(buffer.raw())


def _recv(conn: Connection) -> Any:
    """What :func:`_send` sent (its arrays read-only, over the bytes received)."""
    head, count = conn.recv()
    return pickle.loads(head, buffers=[conn.recv_bytes() for _ in range(count)])


@contextmanager
def _deaf_to_ctrl_c() -> Iterator[None]:
    """Hold SIGINT back in the block: a worker forked inside starts with it blocked, so a
    Ctrl-C that lands before :func:`_serve_shard` ignores it cannot print the worker's
    ``KeyboardInterrupt``; one that lands on this process meanwhile is delivered after."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _serve_shard(conn: Connection, made: Callable[[], Shard], me: int) -> None:
    """A worker's body: be shard ``me`` (``made()``), and take each step it is sent, as
    ``(what, *args)`` for :meth:`Held.step`, until it is sent None or the coordinator is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the coordinator alone answers Ctrl-C
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # forked blocked: now ignored
    held: Held | None = None
    while True:
        try:
            step: tuple[Any, ...] | None = _recv(conn)
        except EOFError:
            return
        if step is None:
            return
        reply: _Reply
        try:
            if held is None:
                held = Held(made(), me)
            reply = ("ok", held.step(*step))
        except TransitionError:
            reply = ("failed", traceback.format_exc())
        except FsmError as e:
            reply = ("refused", str(e))
        except Exception:
            reply = ("failed", traceback.format_exc())
        _send(conn, reply)


def _loaded(source: Source, engine: Engine, me: int, owners: int) -> Shard:
    """Shard ``me``, the model loaded from ``source`` (in a worker that does not have it)."""
    model = load_model(source.path, source.display, specs=source.specs)
    return make_shard(model, engine, me, owners)


def _shard(model: Model, built: Built, search: Any, me: int, owners: int) -> Shard:
    """Shard ``me`` of ``built``: on the vector backend when ``search`` is its compiled table."""
    if search is not None:
        return TableShard(built, model, me, owners, search)
    return PythonShard(built, me, owners)


class PartitionFault(FsmError):
    """A shard refused its model (a file that changed since this process read it)."""


@final
class Local:
    """A :class:`Transport` over this machine's cores: shard 0 in this process (on the model
    it has loaded already), each other shard in a worker process, forked from this one with
    the model compiled (on Linux; elsewhere made as :mod:`fsm_core.check._parallel` makes its
    workers, loading the model from its file). Each worker talks to this process over a pipe
    of its own, which carries the steps, the keys and the payloads: directly between the two
    shards of a two-way search, relayed by this process between two workers (a command is
    sent to a waiting worker, and its answer read before the next command, so no two
    processes ever wait on each other's writes). Use it as a context manager: leaving it
    stops every worker, whatever ended the search.

    A worker that dies (killed, out of memory) raises :class:`WorkerDied` naming its part of
    the model at the next step it was to answer."""

    def __init__(
        self, model: Model, source: Source, built: Built, search: Any, owners: int
    ) -> None:
        self.model = model
        self.owners = owners
        self.workers: list[tuple[BaseProcess, Connection]] = []
        self._keys: list[Keys] = []
        self._pieces: list[list[Any]] = []
        try:
            # ``search`` (the compiled table) is made before the workers are forked: they
            # start with it.
            engine: Engine = "python" if search is None else "vector"
            forking = "fork" in multiprocessing.get_all_start_methods() and sys.platform == "linux"
            context = multiprocessing.get_context("fork") if forking else _context()
            for me in range(1, owners):
                made: Callable[[], Shard] = (
                    partial(_shard, model, built, search, me, owners)
                    if forking
                    else partial(_loaded, source, engine, me, owners)
                )
                ours, theirs = context.Pipe()
                process = context.Process(  # type: ignore[attr-defined]
                    target=_serve_shard,
                    args=(theirs, made, me),
                    name=f"fsm-core partition {me}",
                    daemon=True,
                )
                with _deaf_to_ctrl_c():  # a fork inherits it: no Ctrl-C before its handler
                    process.start()
                theirs.close()  # the worker holds the only other end: its death is EOF here
                self.workers.append((process, ours))
            self.held = Held(_shard(model, built, search, 0, owners), 0)
        except BaseException:
            self.close(clean=False)
            raise

    def __enter__(self) -> Local:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(clean=kind is None)

    def close(self, clean: bool = True) -> None:
        """Stop every worker: sent None after a search that ended cleanly, stopped outright
        (SIGTERM) after an exception, which may have come in the middle of a :func:`_send`
        (a Ctrl-C does): the rest of that pipe's stream is no message a worker can read."""
        if clean:
            for _, conn in self.workers:
                with contextlib.suppress(OSError):
                    _send(conn, None)
        for process, conn in self.workers:
            if clean:
                process.join(timeout=1.0)
            if process.exitcode is None:
                process.terminate()
                process.join()
            conn.close()
        self.workers = []

    def _every(self, what: str, args: Callable[[int], tuple[Any, ...]]) -> list[Any]:
        """``what`` on every shard, shard ``i`` with ``args(i)``: sent to the workers, taken
        here, then the workers' answers read."""
        for i in range(1, self.owners):
            self._send(i, (what, *args(i)))
        answers = [self.held.step(what, *args(0))]
        return answers + [self._receive(i) for i in range(1, self.owners)]

    def begin(self) -> None:
        self._keys = self._every("begin", lambda i: ())

    def expand(self) -> list[Expanded]:
        keys = self._keys

        def others(i: int) -> tuple[Any, ...]:
            return ([None if j == i else k for j, k in enumerate(keys)],)

        answers = self._every("expand", others)
        self._pieces = [payloads for _, payloads in answers]
        return [expanded for expanded, _ in answers]

    def merge(self) -> list[int]:
        pieces = self._pieces
        self._pieces = []
        self._keys = self._every("merge", lambda j: ([p[j] for p in pieces],))
        return [int(k.size) for k in self._keys]

    def keys(self) -> list[Keys]:
        return self._keys

    def ask(self, shard: int, what: str, *args: Any) -> Any:
        if shard == 0:
            return self.held.step(what, *args)
        self._send(shard, (what, *args))
        return self._receive(shard)

    def _send(self, shard: int, step: tuple[Any, ...]) -> None:
        try:
            _send(self.workers[shard - 1][1], step)
        except OSError:  # BrokenPipeError: it is gone
            self._died(shard)

    def _receive(self, shard: int) -> Any:
        process, conn = self.workers[shard - 1]
        wait([conn, process.sentinel])
        try:
            kind, answer = _recv(conn) if conn.poll() else ("gone", None)
        except (EOFError, OSError):  # a worker killed mid-reply resets the pipe
            kind, answer = "gone", None
        if kind == "ok":
            return answer
        if kind == "refused":
            raise PartitionFault(answer)
        if kind == "failed":
            raise RuntimeError(f"part {shard} of the search of {self.model.name} failed:\n{answer}")
        self._died(shard)

    def _died(self, shard: int) -> NoReturn:
        process, _ = self.workers[shard - 1]
        process.join()
        code = process.exitcode
        how = (
            f"killed by {signal.Signals(-code).name}"
            if code is not None and code < 0
            else f"exit status {code}"
        )
        raise WorkerDied(
            f"the worker searching part {shard} of {self.owners} of {self.model.name} "
            f"({self.model.file}) died ({how}); nothing is reported: --workers 1 checks it "
            "in one process"
        )


def check_partitioned(
    model: Model,
    source: Source,
    workers: int,
    *,
    progress: Progress | None = None,
    max_states: int | None = None,
    backend: str = "auto",
) -> Report:
    """``check(model, liveness=False)``'s report, the search partitioned across ``workers``
    shards: this process and ``workers - 1`` worker processes (forked, or loading ``model``
    from ``source``). The same report but for the timings: the shards' keys put every level
    in the single-process search's order, so even the trace is the same one."""
    if model.symmetry:
        raise UsageError(
            f"{model.name}: a search over sibling orbits ([tree] symmetry) is not partitioned: "
            "its traces are rebuilt and its orbits counted in one process"
        )
    built = build(model)
    engine, fallback, table = engine_for(model, built, backend)
    with Local(model, source, built, table, workers) as transport:
        result, moves = search(
            model.name, transport, width(engine, built), max_states=max_states, progress=progress
        )
    return report_of(model, built, result, moves, engine, fallback)
