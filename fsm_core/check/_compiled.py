"""The compiled composition: :class:`~fsm_core.check._compose.Engine`'s steps, made fast.

:class:`CompiledEngine` takes the same :class:`~fsm_core.check._compose.Wiring` and returns the
same steps, in the same order, with the same moves and the same properties; a differential
test holds the two equal. Three things make it fast:

- **Rows as code.** :func:`~fsm_core.check._codegen.compile_rows` turns each row into straight
  Python over an instance's variables, cut at the effects the engine performs (notifications,
  effects the wiring reacts to): a segment runs up to such an effect and hands it over with its
  arguments, the engine performs it (the checks, the reactions inside it), then runs the
  segment after it. Contracts of the other effects are proven inline.
- **Plans as a search.** The interpreted engine runs one whole step per plan of listener calls,
  from the start. Here a step is a depth-first search over its reaction points: at each, the
  path that lets no listener in runs on, and each listener call runs on a copy of the path as
  it is there, so plans that agree up to a point share the work before it, and a call the table
  refuses costs one lookup. The copies are visited in the order the interpreted engine's plan
  stack visits its plans, so the steps come out in the same order.
- **Steps memoized without budgets.** No hook, property or row reads a budget: a budget only
  decides whether a call may be made. So the steps of a state are computed once per state
  *without its budgets*, as if every budget were unlimited, each step recording what it spent;
  a state's steps are those whose spending its budgets cover, in the same order (a step a
  budget forbids here is one whose plan the interpreted engine finds invalid, and so is every
  step that extends it). The budgets are the positions named ``budget.*``; they must be
  contiguous in the layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fsm_core.check._codegen import (
    IGNORED,
    REFUSED,
    RowCode,
    compile_contracts,
    compile_rows,
    compile_stability,
)
from fsm_core.check._compose import Args, Engine, Wiring
from fsm_core.check._moves import Move
from fsm_core.check._property import requires_name
from fsm_core.table._expr import Value, show

Notice = tuple[str, Args]
"""A performed effect as a listener sees it: its name and arguments."""

MoveKey = tuple[int, str, Args, str | None, tuple[tuple[Notice, Any], ...], Notice | None]
"""A move as plain data, cheap to hash: (instance, event, args, row, inside, stopped)."""

_Out = list[tuple[MoveKey, tuple[Any, ...], tuple[int, ...]]]
"""Steps as a search finds them: (move, next state, what it spent of each budget)."""

_Step = tuple[int, tuple[Any, ...], tuple[Any, ...], int]
"""A memoized step: (label, positions before the budgets, positions after them, spending)."""


class _Frame:
    """One event firing in a path: its row, where its code resumes, and what ran inside it."""

    __slots__ = (
        "args", "effect", "event", "i", "inside", "pending", "point", "resume", "row", "via"
    )  # fmt: skip

    def __init__(self, i: int, event: str, args: Args, row: RowCode, via: Notice | None) -> None:
        self.i = i
        self.event = event
        self.args = args
        self.row = row
        self.resume = 0
        self.inside: list[tuple[Notice, MoveKey]] = []
        self.pending: list[tuple[int, str, Args]] = []
        """The wired reactions of the effect in progress still to fire, last first."""
        self.effect: Notice = ("", ())
        """The effect in progress (the last one the code handed over)."""
        self.point = False
        """True iff the effect in progress is a reaction point not yet branched on."""
        self.via = via
        """The effect this firing re-entered through; None for the step's own event."""

    def copy(self) -> _Frame:
        f = _Frame(self.i, self.event, self.args, self.row, self.via)
        f.resume = self.resume
        f.inside = self.inside[:]
        f.pending = self.pending[:]
        f.effect = self.effect
        f.point = self.point
        return f


class _Path:
    """One way a step goes, in progress: copied at each reaction point it branches on."""

    __slots__ = ("done", "frames", "nodes", "observed", "spent", "start", "store", "used")

    def __init__(self, start: tuple[Any, ...], budgets: int) -> None:
        self.start = start
        self.store: list[Any] = list(start)
        self.nodes: dict[int, list[Value]] = {}
        """A tree's instances touched by the step, as mutable copies of their slots."""
        self.observed: dict[int, Sequence[Any]] = {}
        """The last state of each instance a listener observed (the step's start until then)."""
        self.used = 0
        """Listener calls made so far."""
        self.spent = [0] * budgets
        self.frames: list[_Frame] = []
        self.done: MoveKey | None = None

    def fork(self) -> _Path:
        p = _Path.__new__(_Path)
        p.start = self.start
        p.store = self.store[:]
        p.nodes = {i: v[:] for i, v in self.nodes.items()}
        p.observed = self.observed.copy()
        p.used = self.used
        p.spent = self.spent[:]
        p.frames = [f.copy() for f in self.frames]
        p.done = self.done
        return p

    def live(self, i: int) -> list[Value]:
        node = self.nodes.get(i)
        if node is None:
            node = self.nodes[i] = list(self.store[i])
        return node

    def flush(self) -> None:
        for i, values in self.nodes.items():
            self.store[i] = tuple(values)


class CompiledEngine(Engine):
    """A :class:`~fsm_core.check._compose.Engine` whose steps run as generated code."""

    def __init__(self, name: str, wiring: Wiring) -> None:
        super().__init__(name, wiring)
        w, m = wiring, self.machine
        self._flat = w.flat
        self._hooked = w.hooked
        self._reactions = w.reactions
        code = compile_rows(m, self.notifying | w.hooked | w.reactions)
        self._lookups = code.lookups
        self._rows = code.rows
        self._contracts = compile_contracts(m)
        self._first_unstable = compile_stability(m)
        self._stable = tuple(s.id for s in m.table.stable)
        budgets = [i for i, n in enumerate(self.layout.names) if n.startswith("budget.")]
        self._lo = budgets[0] if budgets else 0
        self._hi = self._lo + len(budgets)
        if budgets != list(range(self._lo, self._hi)):
            raise ValueError(f"{name}: the budget positions are not contiguous: {budgets}")
        lo = self._lo
        self._options = tuple(
            (event, args, tuple(s - lo for s in w.charges(event, args)))
            for event, args in w.listener_calls
        )
        self._cap: tuple[int, ...] = self.initial()[self._lo : self._hi]
        self._memo: dict[tuple[Any, ...], tuple[list[_Step], list[tuple[int, ...]]]] = {}
        self._label_of: dict[MoveKey, int] = {}

    # --- a state's steps, from its memoized steps -------------------------------------------------

    def steps(self, state: tuple[Any, ...]) -> list[tuple[int, tuple[Any, ...]]]:
        lo, hi = self._lo, self._hi
        have = state[lo:hi]
        if _left(self._cap, have) is None:
            # More budget than the initial state's: not a state of the model, but the steps
            # memoized so far would miss some of its steps.
            self._cap = tuple(map(max, self._cap, have))
            self._memo.clear()
        key = state[:lo] + state[hi:]
        entry = self._memo.get(key)
        if entry is None:
            entry = self._memo[key] = self._memoize(state)
        steps, spending = entry
        left = [_left(have, spent) for spent in spending]
        return [
            (label, before + rest + after)
            for label, before, after, k in steps
            if (rest := left[k]) is not None
        ]

    def _memoize(self, state: tuple[Any, ...]) -> tuple[list[_Step], list[tuple[int, ...]]]:
        """Every step from ``state`` as if its budgets were unlimited, with what each spent."""
        out: _Out = []
        w, lo, hi = self.wiring, self._lo, self._hi
        slots = range(len(w.instances))
        instances = (0,) if self._flat else [i for i in slots if state[i] is not None]
        for i in instances:
            for event, arguments in w.offered:
                if not w.offers(state, i, event):
                    continue
                for args in arguments:
                    path = _Path(state, hi - lo)
                    for slot in w.charges(event, args):
                        path.spent[slot - lo] += 1
                    if _left(self._cap, tuple(path.spent)) is not None:
                        self._search(path, i, event, args, out)
        spending: dict[tuple[int, ...], int] = {}
        steps: list[_Step] = []
        for key, nxt, spent in out:
            k = spending.setdefault(spent, len(spending))
            steps.append((self._label(key), nxt[:lo], nxt[hi:], k))
        return steps, list(spending)

    def _label(self, key: MoveKey) -> int:
        found = self._label_of.get(key)
        if found is None:
            found = self._label_of[key] = self._labels.index(self._move(key))
        return found

    def _move(self, key: MoveKey) -> Move:
        i, event, args, row, inside, stopped = key
        nested = tuple((_notice(n), self._move(k)) for n, k in inside)
        return self.move(i, event, args, row, nested, _notice(stopped) if stopped else "")

    # --- one step, every plan --------------------------------------------------------------------

    def _search(
        self,
        path: _Path,
        i: int,
        event: str,
        args: Args,
        out: _Out,
    ) -> None:
        """Every way ``event(args)`` fired on ``i`` can go, in the interpreted engine's order.

        A path that reaches a reaction point with calls left pushes its copy, to be branched
        on once the path itself and every branch it pushed later have ended: that is the plan
        stack's order, where a plan's alternatives at later points come before those at
        earlier ones, and each point's listener calls go last one first.
        """
        found = self._lookups[event](self._node(path, i), args)
        if found == REFUSED:
            return
        self._enter(path, found, i, event, args, None)
        work: list[tuple[_Path, int]] = []
        self._run(path, out, work)
        options, cap = self._options, self._cap
        while work:
            snap, j = work.pop()
            if j:
                work.append((snap, j - 1))
            event, args, charged = options[j]
            if any(snap.spent[slot] >= cap[slot] for slot in charged):
                continue  # no state has the budget for this call: every plan with it is invalid
            f = snap.frames[-1]
            found = self._lookups[event](self._node(snap, f.i), args)
            if found == REFUSED:
                continue  # the listener's call is refused: this plan is invalid
            p = snap.fork() if j else snap
            for slot in charged:
                p.spent[slot] += 1
            p.used += 1
            self._enter(p, found, f.i, event, args, f.effect)
            self._run(p, out, work)

    def _node(self, path: _Path, i: int) -> list[Value]:
        return path.store if self._flat else path.live(i)

    def _enter(
        self, path: _Path, found: int, i: int, event: str, args: Args, via: Notice | None
    ) -> None:
        """Begin firing ``event`` on ``i``, whose lookup ``found`` a row or :data:`IGNORED`."""
        if found == IGNORED:
            self._deliver(path, (i, event, args, None, (), None), via)
            return
        path.frames.append(_Frame(i, event, args, self._rows[found], via))
        self.wiring.before(path.store, i, event, args)

    def _deliver(self, path: _Path, move: MoveKey, via: Notice | None) -> None:
        """A firing is done: record it inside the one it re-entered, or as the step's move."""
        if path.frames:
            assert via is not None
            path.frames[-1].inside.append((via, move))
        else:
            path.done = move

    def _run(
        self,
        path: _Path,
        out: _Out,
        work: list[tuple[_Path, int]],
    ) -> None:
        """Run ``path`` to its end, recording its step in ``out`` (unless a listener's call in it
        is refused); its reaction points push their branches on ``work``."""
        frames, w = path.frames, self.wiring
        while frames:
            f = frames[-1]
            if f.pending:
                target, event, args = f.pending.pop()
                found = self._lookups[event](self._node(path, target), args)
                if found != REFUSED:
                    self._enter(path, found, target, event, args, f.effect)
                    continue
                for prop, holds in self.delivered:
                    if not holds(path.store, (event, args)):
                        self._stop(path, prop, f.effect, out)
                        return
                continue
            if f.point:
                f.point = False
                if path.used < w.max_reactions and self._options:
                    work.append((path.fork(), len(self._options) - 1))
                continue
            r = f.row.segments[f.resume](self._node(path, f.i), f.args)
            if r is None:
                frames.pop()
                w.after(path.store, f.i, f.event, f.args)
                move = (f.i, f.event, f.args, f.row.id, tuple(f.inside), None)
                self._deliver(path, move, f.via)
                continue
            site, values = r
            s = f.row.sites[site]
            f.effect = (s.effect, values)
            if s.resume < 0:
                self._stop(path, self._named(requires_name(s.effect), f.i), f.effect, out)
                return
            f.resume = s.resume
            if not self._perform(path, f, out):
                return
        self._finish(path, out)

    def _perform(self, path: _Path, f: _Frame, out: _Out) -> bool:
        """Perform ``f``'s effect in progress: its hooks and checks, then queue its wired
        reactions and its reaction point. False iff a property broke there (the step ended)."""
        name, values = f.effect
        i, store, w = f.i, path.store, self.wiring
        node = self._node(path, i)
        hooked = name in self._hooked
        if hooked:
            w.effect(store, i, name, values)
        holds = self._contracts.get(name)
        if holds is not None and not holds(node, values):
            self._stop(path, self._named(requires_name(name), i), f.effect, out)
            return False
        if name in self.notifying:
            path.flush()
            before = path.observed.get(i)
            if before is None:
                before = path.start if self._flat else path.start[i]
            path.observed[i] = tuple(node)
            k = self._first_unstable(before, node)
            if k >= 0:
                self._stop(path, self._named(self._stable[k], i), f.effect, out)
                return False
            for prop, holds_at in self.notified:
                if not holds_at(store, f.effect):
                    self._stop(path, prop, f.effect, out)
                    return False
            if self.first_violated(store) is not None:
                self._stop(path, None, f.effect, out)
                return False
        if hooked:
            f.pending = list(reversed(w.wire(store, i, name, values)))
        f.point = name in self._reactions
        return True

    def _named(self, prop: str, i: int) -> str:
        node = self.wiring.instances[i]
        return f"{prop}@{node}" if node else prop

    def _stop(
        self,
        path: _Path,
        prop: str | None,
        at: Notice,
        out: _Out,
    ) -> None:
        """End the step at the effect ``at``, recording ``prop`` as broken (None: the state
        there breaks a property between steps, which needs no record)."""
        path.flush()
        if prop is not None:
            path.store[self.broken] = prop
        nested: MoveKey | None = None
        frames = path.frames
        for d in range(len(frames) - 1, -1, -1):
            f = frames[d]
            inside = tuple(f.inside)
            if nested is not None:
                via = frames[d + 1].via
                assert via is not None  # only the step's own event has none
                inside = (*inside, (via, nested))
            nested = (f.i, f.event, f.args, f.row.id, inside, at if nested is None else None)
        assert nested is not None
        out.append((nested, tuple(path.store), tuple(path.spent)))

    def _finish(self, path: _Path, out: _Out) -> None:
        """The step ran out: prove the step invariants of every instance it touched."""
        store = path.store
        for i in (0,) if self._flat else tuple(path.nodes):
            before = path.observed.get(i)
            if before is None:
                before = path.start if self._flat else path.start[i]
            k = self._first_unstable(before, self._node(path, i))
            if k >= 0:
                store[self.broken] = self._named(self._stable[k], i)
        path.flush()
        assert path.done is not None
        out.append((path.done, tuple(store), tuple(path.spent)))


def _left(have: tuple[int, ...], spent: tuple[int, ...]) -> tuple[int, ...] | None:
    """The budgets left after spending ``spent`` of ``have``; None if they do not cover it."""
    left = tuple(h - s for h, s in zip(have, spent, strict=True))
    return None if any(x < 0 for x in left) else left


def _notice(n: Notice) -> str:
    name, values = n
    return f"{name}({', '.join(show(v) for v in values)})"
