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
from operator import add, sub
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

_Step = tuple[int, tuple[Any, ...], int, tuple[Any, ...]]
"""A memoized step: (label, positions before the budgets, its spending's number, positions
after them)."""


class _Frame:
    """One event firing in a path: its row, where its code resumes, and what ran inside it.

    Its sequences are tuples, so a path's copy copies each frame shallowly.
    """

    __slots__ = (
        "args", "effect", "event", "i", "inside", "pending", "point", "resume", "row", "via"
    )  # fmt: skip

    def __init__(self, i: int, event: str, args: Args, row: RowCode, via: Notice | None) -> None:
        self.i = i
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

    def copy(self) -> _Frame:
        f = _Frame.__new__(_Frame)
        f.i, f.event, f.args, f.row, f.via = self.i, self.event, self.args, self.row, self.via
        f.resume, f.inside, f.pending = self.resume, self.inside, self.pending
        f.effect, f.point = self.effect, self.point
        return f


class _Path:
    """One way a step goes, in progress: copied at each reaction point it branches on."""

    __slots__ = ("done", "frames", "nodes", "observed", "spent", "start", "store", "used")

    def __init__(self, start: tuple[Any, ...], spent: tuple[int, ...]) -> None:
        self.start = start
        self.store: list[Any] = list(start)
        self.nodes: dict[int, list[Value]] = {}
        """A tree's instances touched by the step, as mutable copies of their slots."""
        self.observed: dict[int, Sequence[Any]] = {}
        """The last state of each instance a listener observed (the step's start until then)."""
        self.used = 0
        """Listener calls made so far."""
        self.spent = spent
        """What the step has spent of each budget."""
        self.frames: list[_Frame] = []
        self.done: MoveKey | None = None

    def fork(self) -> _Path:
        p = _Path.__new__(_Path)
        p.start, p.used, p.spent, p.done = self.start, self.used, self.spent, self.done
        p.store = self.store[:]
        p.nodes = {i: v[:] for i, v in self.nodes.items()} if self.nodes else {}
        p.observed = self.observed.copy()
        p.frames = [f.copy() for f in self.frames]
        return p

    def live(self, i: int) -> list[Value]:
        node = self.nodes.get(i)
        if node is None:
            node = self.nodes[i] = list(self.store[i])
        return node

    def flush(self) -> None:
        for i, values in self.nodes.items():
            self.store[i] = tuple(values)


class _Call:
    """A call a step may begin with, from one state without its budgets: the steps it
    begins, searched within ``bound`` on the budgets (None: not searched yet)."""

    __slots__ = ("args", "bound", "event", "found", "i", "local", "spent", "steps")

    def __init__(self, i: int, found: int, event: str, args: Args, spent: int, local: bool) -> None:
        self.i, self.event, self.args = i, event, args
        self.found = found
        """The row the table fires, or :data:`IGNORED`."""
        self.local = local
        """True iff the step changes nothing but the instance's variables (and may record a
        broken property): no hook acts on the event, and its row performs no effect."""
        self.spent = spent
        """The number of what the call itself spends."""
        self.bound: tuple[int, ...] | None = None
        self.steps: list[_Step] = []


_Option = tuple[int, str, Args, tuple[int, ...]]
"""A listener call a reaction point may make: (its row or :data:`IGNORED`, event, arguments,
what it spends of each budget)."""


class CompiledEngine(Engine):
    """A :class:`~fsm_core.check._compose.Engine` whose steps run as generated code."""

    def __init__(self, name: str, wiring: Wiring) -> None:
        super().__init__(name, wiring)
        w, m = wiring, self.machine
        self._flat = w.flat
        code = compile_rows(m, self.notifying | w.hooked_effects | w.reactions)
        self._lookups = code.lookups
        self._rows = code.rows
        self._contracts = compile_contracts(m)
        self._first_unstable = compile_stability(m)
        self._stable = tuple(s.id for s in m.table.stable)
        budgets = [i for i, n in enumerate(self.layout.names) if n.startswith("budget.")]
        lo = self._lo = budgets[0] if budgets else 0
        self._hi = lo + len(budgets)
        if budgets != list(range(lo, self._hi)):
            raise ValueError(f"{name}: the budget positions are not contiguous: {budgets}")
        self._bound: tuple[int, ...] = ()
        """The budgets the search in progress assumes."""

        def spending(event: str, args: Args) -> tuple[int, ...]:
            spent = [0] * len(budgets)
            for slot in w.charges(event, args):
                spent[slot - lo] += 1
            return tuple(spent)

        self._calls = tuple(
            (event, tuple((args, spending(event, args)) for args in arguments))
            for event, arguments in w.offered
        )
        # A reaction point tries the listener calls last one first (the plan stack's order).
        self._options = tuple(
            (event, args, spending(event, args)) for event, args in reversed(w.listener_calls)
        )
        self._branching = bool(self._options) and w.max_reactions > 0
        self._hooked_events = w.hooked_events
        self._local_rows = [all(site.resume < 0 for site in row.sites) for row in self._rows]
        """Per row: True iff it performs no effect (its code hands none over)."""
        self._local: dict[tuple[Any, ...], tuple[MoveKey, Any, str]] = {}
        """The step of each local call searched, by the instance, the event and its row, the
        instance's variables and the arguments: its move, the variables after it, and what it recorded
        broken."""
        self._width = len(m.names)
        self._taken: dict[tuple[Any, ...], list[_Option]] = {}
        """The listener calls taken at a reaction point, by the instance's variables there,
        what the path has spent and the bound of the search."""
        self._effects = {
            name: (
                name in w.hooked_effects,
                self._contracts.get(name),
                name in self.notifying,
                name in w.reactions,
            )
            for name in m.table.effects
        }
        """Per effect: whether the wiring acts on it, its contract, whether it notifies, and
        whether listeners may call inside it."""
        self._memo: dict[tuple[Any, ...], list[_Call]] = {}
        """The calls a step may begin with from each state without its budgets."""
        self._label_of: dict[MoveKey, int] = {}
        self._numbers: dict[tuple[int, ...], int] = {}
        self._spendings: list[tuple[int, ...]] = []
        """Every spending a call or a memoized step records, by number."""
        self._left: dict[tuple[int, ...], list[tuple[int, ...] | None]] = {}
        """For each budgets seen, what each numbered spending leaves of them (None: too much)."""

    # --- a state's steps, from its memoized steps -------------------------------------------------

    def steps(self, state: tuple[Any, ...]) -> list[tuple[int, tuple[Any, ...]]]:
        lo, hi = self._lo, self._hi
        have = state[lo:hi]
        key = state[:lo] + state[hi:]
        calls = self._memo.get(key)
        if calls is None:
            calls = self._memo[key] = self._calls_from(state)
        left = self._leaves(have)
        out: list[tuple[int, tuple[Any, ...]]] = []
        append = out.append
        for c in calls:
            if left[c.spent] is None:
                continue  # the budgets do not cover the call itself
            if c.bound is None or (self._branching and _left(c.bound, have) is None):
                # Search within the most of each budget the states of this key have had: a
                # state with more widens it (breadth first, the richest tend to come first).
                c.bound = have if c.bound is None else tuple(map(max, c.bound, have))
                c.steps = self._memoize(state, c)
                left = self._leaves(have)
            for label, before, k, after in c.steps:
                rest = left[k]
                if rest is not None:
                    append((label, before + rest + after))
        return out

    def _calls_from(self, state: tuple[Any, ...]) -> list[_Call]:
        """The calls the environment and the driver may begin a step with from ``state``, and
        the table takes there."""
        w, lookups = self.wiring, self._lookups
        slots = range(len(w.instances))
        instances = (0,) if self._flat else [i for i in slots if state[i] is not None]
        local = self._local_rows
        return [
            _Call(
                i,
                found,
                event,
                args,
                self._number(spent),
                found == IGNORED or (event not in self._hooked_events and local[found]),
            )
            for i in instances
            for event, calls in self._calls
            if w.offers(state, i, event)
            for args, spent in calls
            if (found := lookups[event](state if self._flat else state[i], args)) != REFUSED
        ]

    def _number(self, spent: tuple[int, ...]) -> int:
        found = self._numbers.get(spent)
        if found is None:
            found = self._numbers[spent] = len(self._spendings)
            self._spendings.append(spent)
        return found

    def _leaves(self, have: tuple[int, ...]) -> list[tuple[int, ...] | None]:
        """What each numbered spending leaves of ``have``."""
        left = self._left.get(have)
        if left is None:
            left = self._left[have] = []
        if len(left) < len(self._spendings):
            left += [_left(have, spent) for spent in self._spendings[len(left) :]]
        return left

    def _memoize(self, state: tuple[Any, ...], c: _Call) -> list[_Step]:
        """Every step ``c`` begins from ``state`` within its bound, with what each spent."""
        assert c.bound is not None
        out: _Out = []
        if c.local and not state[self.broken]:
            out.append(self._local_step(state, c))
        else:
            self._bound = c.bound
            self._search(_Path(state, self._spendings[c.spent]), c, out)
        lo, hi = self._lo, self._hi
        return [
            (self._label(key), nxt[:lo], self._number(spent), nxt[hi:]) for key, nxt, spent in out
        ]

    def _local_step(
        self, state: tuple[Any, ...], c: _Call
    ) -> tuple[MoveKey, tuple[Any, ...], tuple[int, ...]]:
        """The one step of a local call, from the step it makes from the same variables
        of the same instance, if one was searched."""
        i, broken = c.i, self.broken
        node = state[: self._width] if self._flat else state[i]
        where = (i, c.event, c.found, node, c.args)
        found = self._local.get(where)
        if found is not None:
            key, after, record = found
            store = list(state)
            if self._flat:
                store[: self._width] = after
            else:
                store[i] = after
            store[broken] = record
            return key, tuple(store), self._spendings[c.spent]
        out: _Out = []
        self._search(_Path(state, self._spendings[c.spent]), c, out)
        ((key, nxt, spent),) = out  # no performed effect: no reaction point, no branch
        after = nxt[: self._width] if self._flat else nxt[i]
        self._local[where] = (key, after, nxt[broken])
        return key, nxt, spent

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

    def _search(self, path: _Path, c: _Call, out: _Out) -> None:
        """Every way the call ``c`` can go, in the interpreted engine's order.

        A path that reaches a reaction point with calls left pushes its copy there, with the
        calls the table takes, to be branched on once the path itself and every branch it
        pushed later have ended: that is the plan stack's order, where a plan's alternatives
        at later points come before those at earlier ones, and a point's listener calls go
        last one first.
        """
        self._enter(path, c.found, c.i, c.event, c.args, None)
        work: list[tuple[_Path, list[_Option], int]] = []
        self._run(path, out, work)
        while work:
            snap, options, j = work.pop()
            last = j + 1 == len(options)
            if not last:
                work.append((snap, options, j + 1))
            found, event, args, spent = options[j]
            p = snap if last else snap.fork()
            p.spent = spent
            p.used += 1
            self._enter(p, found, p.frames[-1].i, event, args, p.frames[-1].effect)
            self._run(p, out, work)

    def _branches(self, path: _Path, f: _Frame) -> list[_Option]:
        """The listener calls ``path`` may make at ``f``'s reaction point: those the table
        takes there (the others make the plan invalid) and whose spending fits the bound."""
        node = path.store if self._flat else path.live(f.i)
        where = (tuple(node[: self._width]), path.spent, self._bound)
        found = self._taken.get(where)
        if found is None:
            found = self._taken[where] = self._takes(node, path.spent)
        return found

    def _takes(self, node: Sequence[Value], spent: tuple[int, ...]) -> list[_Option]:
        lookups, bound = self._lookups, self._bound
        out: list[_Option] = []
        for event, args, cost in self._options:
            total = tuple(map(add, spent, cost))
            if _left(bound, total) is None:
                continue  # no state has the budget: every plan with this call is invalid
            found = lookups[event](node, args)
            if found != REFUSED:
                out.append((found, event, args, total))
        return out

    def _enter(
        self, path: _Path, found: int, i: int, event: str, args: Args, via: Notice | None
    ) -> None:
        """Begin firing ``event`` on ``i``, whose lookup ``found`` a row or :data:`IGNORED`."""
        if found == IGNORED:
            move: MoveKey = (i, event, args, None, (), None)
            if path.frames:
                assert via is not None
                path.frames[-1].inside += ((via, move),)
            else:
                path.done = move
            return
        path.frames.append(_Frame(i, event, args, self._rows[found], via))
        if event in self._hooked_events:
            self.wiring.before(path.store, i, event, args)

    def _run(self, path: _Path, out: _Out, work: list[tuple[_Path, list[_Option], int]]) -> None:
        """Run ``path`` to its end and record its step in ``out``; its reaction points push
        their branches on ``work``."""
        frames, w, flat, lookups = path.frames, self.wiring, self._flat, self._lookups
        while frames:
            f = frames[-1]
            if f.pending:
                (target, event, args), *rest = f.pending
                f.pending = rest
                found = lookups[event](path.store if flat else path.live(target), args)
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
                if path.used < w.max_reactions:
                    options = self._branches(path, f)
                    if options:
                        work.append((path.fork(), options, 0))
                continue
            r = f.row.segments[f.resume](path.store if flat else path.live(f.i), f.args)
            if r is None:
                frames.pop()
                if f.event in self._hooked_events:
                    w.after(path.store, f.i, f.event, f.args)
                move = (f.i, f.event, f.args, f.row.id, f.inside, None)
                if frames:
                    assert f.via is not None
                    frames[-1].inside += ((f.via, move),)
                else:
                    path.done = move
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
        node = store if self._flat else path.live(i)
        hooked, holds, notifies, reacts = self._effects[name]
        if hooked:
            w.effect(store, i, name, values)
        if holds is not None and not holds(node, values):
            self._stop(path, self._named(requires_name(name), i), f.effect, out)
            return False
        if notifies:
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
            f.pending = w.wire(store, i, name, values)
        f.point = reacts
        return True

    def _named(self, prop: str, i: int) -> str:
        node = self.wiring.instances[i]
        return f"{prop}@{node}" if node else prop

    def _stop(self, path: _Path, prop: str | None, at: Notice, out: _Out) -> None:
        """End the step at the effect ``at``, recording ``prop`` as broken (None: the state
        there breaks a property between steps, which needs no record)."""
        path.flush()
        if prop is not None:
            path.store[self.broken] = prop
        nested: MoveKey | None = None
        frames = path.frames
        for d in range(len(frames) - 1, -1, -1):
            f = frames[d]
            inside = f.inside
            if nested is not None:
                via = frames[d + 1].via
                assert via is not None  # only the step's own event has none
                inside = (*inside, (via, nested))
            nested = (f.i, f.event, f.args, f.row.id, inside, at if nested is None else None)
        assert nested is not None
        out.append((nested, tuple(path.store), path.spent))

    def _finish(self, path: _Path, out: _Out) -> None:
        """The step ran out: prove the step invariants of every instance it touched."""
        store = path.store
        for i in (0,) if self._flat else tuple(path.nodes):
            before = path.observed.get(i)
            if before is None:
                before = path.start if self._flat else path.start[i]
            k = self._first_unstable(before, store if self._flat else path.live(i))
            if k >= 0:
                store[self.broken] = self._named(self._stable[k], i)
        path.flush()
        assert path.done is not None
        out.append((path.done, tuple(store), path.spent))


def _left(have: tuple[int, ...], spent: tuple[int, ...]) -> tuple[int, ...] | None:
    """The budgets left after spending ``spent`` of ``have``; None if they do not cover it."""
    left = tuple(map(sub, have, spent))
    return None if any(x < 0 for x in left) else left


def _notice(n: Notice) -> str:
    name, values = n
    return f"{name}({', '.join(show(v) for v in values)})"
