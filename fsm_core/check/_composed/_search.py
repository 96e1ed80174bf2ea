"""The data of a compiled step's search: the paths it branches into, the calls it begins with,
and what a scoped search keeps for other states (:mod:`._compiled` runs the search).

A step of :class:`~._compiled.CompiledEngine` is a depth-first search over its reaction points:
a :class:`StepPath` is one way the step goes, made of :class:`Frame` (one event firing each),
copied (:meth:`StepPath.fork`) at each reaction point it branches on. A :class:`Call` is a call
a step may begin with, memoized per state without its budgets with the steps it begins
(searched within a bound on the budgets). A scoped search records what it read through a
:class:`Tracked` store and is kept as :class:`Searched`, replayed on a state that agrees there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableSequence, Sequence
from operator import ge, itemgetter, sub
from typing import Any, overload

from fsm_core.check._composed._compose import Args
from fsm_core.check._property import Reading
from fsm_core.table._codegen import RowCode
from fsm_core.table._expr import Value

Notice = tuple[str, Args]
"""A performed effect as a listener sees it: its name and arguments."""

MoveKey = tuple[
    int, str, Args, str | None, tuple[tuple[Notice, Any], ...], Notice | None, int | None
]
"""A move as plain data, cheap to hash: (instance, event, args, row, inside, stopped, target)."""

Out = list[tuple[MoveKey, tuple[Any, ...], tuple[int, ...], tuple[int, ...]]]
"""Steps as a search finds them: (move, next state, what it spent of each budget, the path's
:attr:`StepPath.order`)."""

Step = tuple[int, int, int]
"""A memoized step: (label, the number of the next state without its budgets times the number
of budgets' codes, the number of what it spent)."""

Group = tuple[int, int, int, int, tuple[int, ...]]
"""Memoized steps to one next state: (the first's label, the number of the next state without
its budgets times the number of budgets' codes, the number of what each spent, how many, and
every label in order)."""

Test = tuple[int, Callable[[Any], bool], bool]
"""A test a scoped search asked of a position it did not read (:meth:`Tracked.test`): the
position, the test, and its answer there."""


def fold(steps: list[Step]) -> list[Group]:
    """``steps`` grouped by where they lead (the state without its budgets, and what they spend),
    in the order of each group's first step."""
    if len(steps) == 1:
        ((label, base, k),) = steps
        return [(label, base, k, 1, (label,))]
    where: dict[tuple[int, int], list[int]] = {}
    for label, base, k in steps:
        every = where.get((base, k))
        if every is None:
            where[base, k] = [label]
        else:
            every.append(label)
    return [(every[0], base, k, len(every), tuple(every)) for (base, k), every in where.items()]


class Frame:
    """One event firing in a path: its row, where its code resumes, and what ran inside it.

    Its sequences are tuples, so a path's copy copies each frame shallowly.
    """

    __slots__ = (
        "aimed", "args", "effect", "event", "i", "inside", "pending", "point", "resume", "row",
        "target", "via",
    )  # fmt: skip

    def __init__(
        self,
        i: int,
        event: str,
        args: Args,
        row: RowCode,
        via: Notice | None,
        aimed: int | None,
        target: int | None,
    ) -> None:
        self.i = i
        self.aimed = aimed
        """The instance the call names when routed (the step's, or a listener's), as its move
        shows it."""
        self.target = target
        """The instance the wiring's targets read as the one named: :attr:`aimed`, or the
        calling frame's."""
        self.event = event
        self.args = args
        self.row = row
        self.resume = 0
        self.inside: tuple[tuple[Notice, MoveKey], ...] = ()
        self.pending: Sequence[tuple[int, str, Args]] = ()
        """The wired reactions of the effect in progress still to fire, in order."""
        self.effect: Notice = ("", ())
        """The effect in progress (the last one the code handed over)."""
        self.point = False
        """True iff the effect in progress is a reaction point not yet branched on."""
        self.via = via
        """The effect this firing re-entered through; None for the step's own event."""

    def copy(self) -> Frame:
        f = Frame.__new__(Frame)
        f.i, f.event, f.args, f.row, f.via = self.i, self.event, self.args, self.row, self.via
        f.aimed, f.target = self.aimed, self.target
        f.resume, f.inside, f.pending = self.resume, self.inside, self.pending
        f.effect, f.point = self.effect, self.point
        return f


class StepPath:
    """One way a step goes, in progress: copied at each reaction point it branches on."""

    __slots__ = (
        "done", "frames", "nodes", "observed", "order", "reads", "refused", "spent", "start",
        "store", "target", "tests", "used", "view", "wrote",
    )  # fmt: skip

    def __init__(
        self,
        start: tuple[Any, ...],
        spent: tuple[int, ...],
        target: int | None,
        reads: set[int] | None = None,
        tests: list[Test] | None = None,
    ) -> None:
        self.start = start
        self.reads = reads
        """When the search is scoped (:meth:`CompiledEngine._scoped`): the positions of
        ``start`` it read, shared by every path of the search; else None."""
        self.tests = tests
        """When the search is scoped: the tests of positions it did not read, with their
        answers (:meth:`Tracked.test`), shared by every path of the search."""
        self.wrote: set[int] = set()
        """The positions the wiring's hooks wrote on this path (scoped searches only)."""
        self.target = target
        """The instance the step's call named, when the wiring routed it to another."""
        self.refused = -1
        """The instance whose table refused a call a binding effect handed on (-1: none)."""
        self.store: list[Any] = list(start)
        self.view: MutableSequence[Any] | None = None
        """:meth:`hooked`'s answer, once asked (:attr:`store` is never replaced)."""
        self.nodes: dict[int, list[Value]] = {}
        """A tree's instances touched by the step, as mutable copies of their slots."""
        self.observed: dict[int, Sequence[Any]] = {}
        """The last state of each instance a listener observed (the step's start until then)."""
        self.used = 0
        """Listener calls made so far."""
        self.spent = spent
        """What the step has spent of each budget."""
        self.frames: list[Frame] = []
        self.done: MoveKey | None = None
        self.order: tuple[int, ...] = ()
        """Where the path is in the search: at each reaction point it branched at, 0 for no
        listener call, else 1 + the call's index in :attr:`CompiledEngine._options`. The
        interpreted engine's plans come in the order of these tuples."""

    def fork(self) -> StepPath:
        p = StepPath.__new__(StepPath)
        p.start, p.used, p.spent, p.done = self.start, self.used, self.spent, self.done
        p.reads, p.wrote, p.tests = self.reads, set(self.wrote), self.tests
        p.target, p.refused = self.target, self.refused
        p.order = self.order
        p.store = self.store[:]
        p.view = None
        p.nodes = {i: v[:] for i, v in self.nodes.items()} if self.nodes else {}
        p.observed = self.observed.copy()
        p.frames = [f.copy() for f in self.frames]
        return p

    def live(self, i: int) -> list[Value]:
        node = self.nodes.get(i)
        if node is None:
            node = self.nodes[i] = list(self.store[i])
            if self.reads is not None:
                self.reads.add(i)
        return node

    def hooked(self) -> MutableSequence[Any]:
        """The store as the wiring's hooks and predicates get it: recording what they read
        and write when the search is scoped."""
        view = self.view
        if view is None:
            reads = self.reads
            view = self.view = (
                self.store
                if reads is None or self.tests is None
                else Tracked(self.store, reads, self.wrote, self.tests)
            )
        return view

    def changed(self) -> set[int]:
        """The positions this path may have changed: the instances it touched, and what the
        hooks wrote."""
        return self.wrote.union(self.nodes)

    def flush(self) -> None:
        for i, values in self.nodes.items():
            self.store[i] = tuple(values)


Local = list[tuple[int, Any, str] | None]
"""A local call's step, once searched: its label, the instance's variables after it, and what it
recorded broken (the one item is None until then)."""

Start = tuple[int, int, str, Args, int, Local | None, int | None]
"""A call a step may begin with: (instance, its row or :data:`IGNORED`, event, arguments, the
number of what it spends, its step if it is local (see :attr:`Call.local`), else None, the
step's target). The calls are memoized by the variables of the instance they are fired on, so
a local call's step is kept with it."""


class Call:
    """A call a step may begin with, from one state without its budgets, and the steps it
    begins, searched within a bound on the budgets."""

    __slots__ = (
        "args", "bound", "event", "found", "groups", "i", "local", "orders", "pruned", "spent",
        "stale", "steps", "target",
    )  # fmt: skip

    def __init__(
        self,
        i: int,
        found: int,
        event: str,
        args: Args,
        spent: int,
        local: Local | None,
        target: int | None,
    ) -> None:
        self.i, self.event, self.args, self.target = i, event, args, target
        self.found = found
        """The row the table fires, or :data:`IGNORED`."""
        self.local = local
        """Not None iff the step changes nothing but the instance's variables (and may record
        a broken property): no hook acts on the event, and its row performs no effect. Then it
        holds the step, once searched (:meth:`CompiledEngine._local_step`)."""
        self.spent = spent
        """The number of what the call itself spends."""
        self.bound = -1
        """The code of the budgets its steps were searched within (-1: not searched yet)."""
        self.steps: list[Step] = []
        self.groups: list[Group] | None = None
        """:attr:`steps` folded (:func:`fold`), once asked; None when they have changed since."""
        self.orders: list[tuple[int, ...]] = []
        """Each step's :attr:`StepPath.order`."""
        self.pruned: list[Branch] = []
        """The listener calls the bound left out, where the search met them: a wider bound
        resumes the search there."""
        self.stale = False
        """True iff :attr:`steps` were recalled from another state's search that left
        listener calls out (:meth:`CompiledEngine._recall`): a wider bound searches again."""

    def fold(self) -> list[Group]:
        self.groups = fold(self.steps)
        return self.groups


Option = tuple[int, int, str, Args, tuple[int, ...], int, int | None]
"""A listener call a reaction point may make: (its index in the calls, its row or
:data:`IGNORED`, event, arguments, what the path has spent with it, the instance it is fired
on, the instance it names when routed)."""

Aim = tuple[int, int, int | None, str, Args, tuple[int, ...]]
"""A listener call resolved at a reaction point: (its index in the calls, the instance it is
fired on, the instance it names when routed, event, arguments, what it spends)."""

Branch = tuple["StepPath", list[Option]]
"""A path as it was at a reaction point, and listener calls to branch on there."""


class Searched:
    """A scoped search's outcome, as :meth:`CompiledEngine._recall` replays it on another
    state: the positions (of a state without its budgets) its next states may differ in,
    the values there of each next state, and each step as (label, next state's index, the
    number of what it spent), with each step's :attr:`StepPath.order`; and the tests it asked of
    positions it did not read, which a state must answer the same to be replayed."""

    __slots__ = ("bound", "folded", "groups", "orders", "pick", "places", "steps", "tests")

    def __init__(
        self,
        places: tuple[int, ...],
        groups: tuple[tuple[Any, ...], ...],
        steps: list[tuple[int, int, int]],
        orders: list[tuple[int, ...]],
        bound: int,
        tests: tuple[Test, ...],
    ) -> None:
        self.places, self.groups, self.steps, self.orders = places, groups, steps, orders
        self.tests = tests
        self.pick: Callable[[Sequence[Any]], tuple[Any, ...]] = (
            itemgetter(*places) if len(places) > 1 else lambda state: (state[places[0]],)
        )
        """The values at :attr:`places` of a state without its budgets, as :attr:`groups`
        holds them (there is always one place: the record of what broke)."""
        self.bound = bound
        """The code of the budgets the search was within; the model's when it left no
        listener call out (then it serves every budgets)."""
        self.folded = fold(steps)
        """The steps folded (:func:`fold`), a next state's number standing for the next state
        (distinct values make distinct next states)."""


Known = tuple[tuple[int, ...], Callable[[Sequence[Any]], Any], dict[Any, list[Searched]]]
"""Scoped searches of one call that read the positions named (sorted): the positions, what
gives the values there, and the searches by those values (one per bound)."""


def projection(reads: tuple[int, ...]) -> Callable[[Sequence[Any]], Any]:
    """What gives a state's values at ``reads``, hashable."""
    if len(reads) > 1:
        return itemgetter(*reads)
    if reads:
        (k,) = reads
        return lambda state: state[k]
    return lambda _: ()


# Reading types a slice as a Sequence; over a list store it is one, mutable as the ABC says.
class Tracked(Reading, MutableSequence[Any]):  # type: ignore[misc]
    """A scoped search's store as the wiring's hooks and predicates see it: what they read is
    added to the search's reads (``read``), what they write to the path's writes."""

    __slots__ = ("store", "tests", "wrote")

    def __init__(
        self, store: list[Any], reads: set[int], wrote: set[int], tests: list[Test]
    ) -> None:
        super().__init__(store, reads)
        self.store, self.wrote, self.tests = store, wrote, tests

    def test(self, k: int, test: Callable[[Any], bool]) -> bool:
        """A position the search has neither read nor written on this path holds its value in
        the search's start: the answer is recorded with the test (a state whose value there
        gives the same answer is searched the same), not the position as read."""
        if k in self.read or k in self.wrote:
            return test(self[k])
        answer = test(self.store[k])
        self.tests.append((k, test, answer))
        return answer

    @overload
    def __setitem__(self, k: int, value: Any) -> None: ...
    @overload
    def __setitem__(self, k: slice, value: Iterable[Any]) -> None: ...
    def __setitem__(self, k: int | slice, value: Any) -> None:
        if isinstance(k, slice):
            raise TypeError("a hook writes one position at a time")
        self.wrote.add(k % len(self.store))
        self.store[k] = value

    def __delitem__(self, k: int | slice) -> None:
        raise TypeError("a hook never removes a position")

    def insert(self, index: int, value: Any) -> None:
        raise TypeError("a hook never inserts a position")


def affords(have: tuple[int, ...], spent: tuple[int, ...]) -> bool:
    """True iff budgets ``have`` cover spending ``spent`` (:func:`budgets_left` is not None)."""
    return all(map(ge, have, spent))


def budgets_left(have: tuple[int, ...], spent: tuple[int, ...]) -> tuple[int, ...] | None:
    """The budgets left after spending ``spent`` of ``have``; None if they do not cover it."""
    left = tuple(map(sub, have, spent))
    return None if any(x < 0 for x in left) else left
