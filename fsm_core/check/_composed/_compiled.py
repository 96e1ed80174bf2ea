"""The compiled composition: :class:`~._compose.Engine`'s steps, made fast.

:class:`CompiledEngine` takes the same :class:`~._compose.Wiring` and returns the
same steps, in the same order, with the same moves and the same properties;
``tests/test_compiled.py`` holds the two equal. What makes it fast:

- **Rows as code.** :func:`~fsm_core.table._codegen.compile_rows` turns each row into straight
  Python over an instance's variables, cut at the effects the engine performs (notifications,
  effects the wiring reacts to): a segment runs up to such an effect and hands it over with its
  arguments, the engine performs it (the checks, the reactions inside it), then runs the
  segment after it. Contracts of the other effects are proven inline.
- **Plans as a search.** The interpreted engine runs one whole step per plan of listener calls,
  from the start. Here a step is a depth-first search over its reaction points: at each, the
  path that lets no listener in runs on, and each listener call runs on a copy of the path as
  it is there, so plans that agree up to a point share the work before it, and a call the table
  refuses costs one lookup. Each path records where it branched (:attr:`StepPath.order`): the
  interpreted engine's plans come in the order of these records, and so do the steps here.
- **Steps memoized without budgets.** No hook, property or row reads a budget: a budget only
  decides whether a call may be made. So the steps a call begins are searched once per state
  *without its budgets*, within a bound on the budgets (the most of each the states met so far
  had), each step recording what it spent; a state's steps are those whose spending its
  budgets cover, in the same order (a step a budget forbids is one whose plan the interpreted
  engine finds invalid, and so is every step that extends it). A state with more budget widens
  the bound: the search resumes where the old bound left listener calls out, and the new steps
  are merged in by their order; a search that left nothing out is complete, and no bound
  resumes it. A call whose row performs no effect changes only its instance's variables, so
  its step is also cached by those variables (with the call, which is memoized by them).
- **Searches scoped by what they read.** In a tree, a call's search from a state that breaks
  no property records the positions it reads (:attr:`StepPath.reads`: the instances it runs, what
  the wiring's hooks and the properties read); a state that agrees there takes its steps from
  that search (:meth:`CompiledEngine._recall`), its next states being that state with what the
  search wrote. Where a hook only asks a question of a position the search does not otherwise
  read (is this sibling settled?), the search keeps the answer instead of the position
  (:func:`~fsm_core.check._property.ask`), and serves every state that answers the same.
  Such a search rechecks, at a notification, only the invariants of the instances it changed
  and the parts of ``always`` properties whose declared scope it changed
  (:class:`~fsm_core.check._property.Conjunction`): the rest held at its start and reads
  nothing it changed.
- **Offers decided once.** Which calls a state offers naming an instance is decided by
  reading a few positions (the instances the calls are fired on, what
  :meth:`~._compose.Wiring.offers` reads): deciding is deterministic, so the answer is kept by
  the values at the positions read, and a state that agrees there is answered without asking.
- **Packed states.** A state is a number: the state without its budgets, numbered as met,
  times the number of budgets' codes, plus the budgets' mixed-radix code under the initial
  budgets (budgets only fall). A state's steps are then arithmetic on the memo, and its
  verdicts are cached per state without budgets. :meth:`CompiledEngine.unpack` gives a state as
  the layout names it.
- **Memory by level.** The memo of a state's steps (the calls, their saved search paths) is
  most of a check's memory, and a breadth-first search needs it only while states of the same
  key are still met: past :attr:`CompiledEngine.memo_keys` keys, :meth:`CompiledEngine.level_done`
  drops it for keys no state of the last two levels had. A key met again later is searched
  again, to the same steps in the same order (a call's steps are sorted by their order).

Instances of different tables (a tree's nodes and its door) each run their own table's code
(:class:`_Code`, generated once per table). The layout must hold the instances first, then
the budgets (the positions named ``budget.*``, contiguous), then the rest, the record of what
broke among it. What a step's search is made of (its paths and frames, the calls a step may
begin with, what a scoped search keeps) is in :mod:`._search`; this module runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from operator import add
from typing import Any

from fsm_core.check._composed._compose import Args, Engine, Wiring
from fsm_core.check._composed._search import (
    Aim,
    Branch,
    Call,
    Frame,
    Group,
    Known,
    MoveKey,
    Notice,
    Option,
    Out,
    Searched,
    Start,
    Step,
    StepPath,
    Test,
    affords,
    budgets_left,
    fold,
    projection,
)
from fsm_core.check._moves import Move
from fsm_core.check._property import Conjunction, Predicate, Reading, requires_name
from fsm_core.table._codegen import (
    IGNORED,
    REFUSED,
    compile_contracts,
    compile_predicates,
    compile_rows,
    compile_stability,
)
from fsm_core.table._expr import show
from fsm_core.table._machine import Machine

SELF = -1
"""An offer's ``on`` in :attr:`CompiledEngine._offers`: the instance the call names."""

NOTICED = 200_000
"""At most this many of :meth:`CompiledEngine._notice`'s answers are kept (a few hundred bytes
each, beside states the engine keeps anyway); the default models keep under 3,000."""

_Seen = tuple[int, Sequence[Any], tuple[Any, ...], Notice]
"""What a listener observes at an effect: the instance, its variables when a listener last
observed it, the state, and the effect."""


class _Code:
    """One table's generated code and what the engine asks of its effects, shared by every
    instance of the table."""

    __slots__ = (
        "effects", "first_unstable", "handing", "local_ids", "local_rows", "lookups", "rows",
        "stable", "violated",
    )  # fmt: skip

    def __init__(self, m: Machine, w: Wiring, notifying: frozenset[str]) -> None:
        code = compile_rows(m, notifying | w.hooked_effects | w.reactions)
        self.lookups = code.lookups
        self.rows = code.rows
        contracts = compile_contracts(m)
        self.first_unstable = compile_stability(m)
        self.violated = compile_predicates(m, {i.id: i.expr for i in m.table.invariants})
        """The first of the table's invariants an instance's variables break, or None."""
        self.stable = tuple(s.id for s in m.table.stable)
        self.local_rows = [all(site.resume < 0 for site in row.sites) for row in self.rows]
        """Per row: True iff it performs no effect (its code hands none over)."""
        self.local_ids = frozenset(
            r.id for r, local in zip(self.rows, self.local_rows, strict=True) if local
        )
        self.handing = [
            all(s.effect in w.binding and s.effect not in notifying for s in row.sites)
            for row in self.rows
        ]
        """Per row: True iff every effect it hands over is binding (and notifies nobody)."""
        self.effects = {
            name: (
                name in w.hooked_effects,
                contracts.get(name),
                name in notifying,
                name in w.reactions,
            )
            for name in m.table.effects
        }
        """Per effect: whether the wiring acts on it, its contract, whether it notifies, and
        whether listeners may call inside it."""


class CompiledEngine(Engine):
    """A :class:`~fsm_core.check._composed._compose.Engine` whose steps run as generated code."""

    memo_keys = 1 << 16
    """How many states without budgets the memo of steps may grow to before
    :meth:`level_done` forgets those of past levels: at some 10 kB each (their calls' saved
    search paths), about 650 MB."""

    def __init__(self, name: str, wiring: Wiring) -> None:
        super().__init__(name, wiring)
        w = wiring
        self._flat = w.flat
        shared: dict[int, _Code] = {}
        self._tables = tuple(
            shared.get(id(m)) or shared.setdefault(id(m), _Code(m, w, self.notifying[i]))
            for i, m in enumerate(w.machines)
        )
        """Each instance's table's code."""
        budgets = [i for i, n in enumerate(self.layout.names) if n.startswith("budget.")]
        lo = self._lo = budgets[0] if budgets else 0
        self._hi = lo + len(budgets)
        instances = len(w.machines[0].names) if w.flat else len(w.instances)
        if budgets != list(range(lo, self._hi)) or instances > lo or self.broken < self._hi:
            raise ValueError(
                f"{name}: the layout must hold the instances, the budgets (contiguous) and the "
                f"record of what broke in this order: {self.layout.names}"
            )
        self._bound: tuple[int, ...] = ()
        """The budgets the search in progress assumes."""
        self._pruned: list[Branch] = []
        """The listener calls the search in progress left out for its bound."""

        def spending(event: str, args: Args, on: int | None) -> tuple[int, ...]:
            spent = [0] * len(budgets)
            for slot in w.charges(event, args, on):
                spent[slot - lo] += 1
            return tuple(spent)

        groups: dict[Any, int] = {}
        self._offers: list[tuple[tuple[int, ...], tuple[Any, ...]]] = []
        """Each distinct list of offers, with the instances its calls are fired on (SELF: the
        named one): (those instances, per offer (event, on, every (args, spending)))."""
        self._group: list[int] = []
        """Each instance's list of offers, by its index in :attr:`_offers`."""
        for i, offers in enumerate(w.offered):
            calls = tuple(
                (
                    event,
                    SELF if on == i else on,
                    tuple(
                        (args, spending(event, args, i if on == i else on)) for args in arguments
                    ),
                )
                for event, arguments, on in offers
            )
            if calls not in groups:
                groups[calls] = len(self._offers)
                self._offers.append((tuple(dict.fromkeys(on for _, on, _ in calls)), calls))
            self._group.append(groups[calls])
        # A reaction point tries the listener calls last one first (the plan stack's order).
        self._options = tuple(reversed(self.options))
        self._spending = spending
        self._aiming = frozenset(q for q, (aim, _, _) in enumerate(self._options) if aim)
        """The listener calls aimed at another instance, by their index in the calls."""
        self._aims: dict[tuple[int, str], tuple[tuple[Aim, ...], tuple[int, ...]]] = {}
        """Per instance and reaction effect, the listener calls a reaction point there may
        make, resolved (:meth:`Wiring.aim`), and the instances they are fired on."""
        self._branching = bool(self._options) and w.max_reactions > 0
        self._hooked_events = w.hooked_events
        self._binding = w.binding
        self._handed_to: dict[tuple[Any, ...], tuple[int, ...]] = {}
        self._handed: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
        """For each call searched whose row only hands the call on through binding effects
        (:meth:`_handed_step`): by the instance, the event, its row, the arguments, the target
        and the instance's variables, the instances it handed the call to; by that and their
        variables, its outcome: (its label, the instances' variables after it, what it
        recorded broken), () if it is refused, None if it reached further (it is searched
        each time)."""
        self._width = len(w.machines[0].names)
        self._taken: dict[tuple[Any, ...], tuple[list[Option], list[Option]]] = {}
        """The listener calls taken at a reaction point, by the instance and the effect, the
        variables there of every instance a listener's call there is fired on (the notifying
        instance's, and those of the instances its aimed calls reach), what the path has spent
        and the bound of the search."""
        self._label_of: dict[MoveKey, int] = {}
        self._moves: dict[MoveKey, Move] = {}
        """The move of each move key met, a listener's nested in a step's included."""
        self._noticed: dict[_Seen, tuple[str | None, ...]] = {}
        """:meth:`_notice`'s answers, by the instance, its variables a listener last observed,
        the state and the effect: what a listener observes depends on nothing else."""
        self._numbers: dict[tuple[int, ...], int] = {}
        self._spendings: list[tuple[int, ...]] = []
        """Every spending a call or a memoized step records, by number."""
        # Packed states: the budgets in mixed radix below the model's (budgets only fall),
        # above them the number of the rest of the state.
        self._radix = tuple(b + 1 for b in w.initial()[lo : self._hi])
        self._codes: int = prod(self._radix)
        self._top = self._codes - 1
        """The code of the model's budgets, which covers every budgets' code."""
        self._keys: list[tuple[Any, ...]] = []
        """The states without their budgets, by number."""
        self._key_of: dict[tuple[Any, ...], int] = {}
        self._calls_of: list[list[Call] | None] = []
        """The calls a step may begin with from each state without its budgets."""
        self._takes_at: dict[tuple[Any, ...], list[Start]] = {}
        """:meth:`_taken_at`'s answers."""
        self._offered: list[list[_Decided]] = [[] for _ in w.instances]
        """:meth:`_offered_at`'s answers, per instance: by each set of positions deciding
        them read, by the values there."""
        self._steps_of: list[list[Step] | None] = []
        """Without listener calls: the steps from each state without its budgets."""
        self._groups_of: list[list[Group] | None] = []
        """Those steps folded (:func:`fold`), once asked."""
        self._verdicts: list[tuple[str | None, bool] | None] = []
        """What :meth:`first_violated` and :meth:`quiescent` say of each, once asked."""
        self._budgets: dict[int, tuple[int, ...]] = {}
        """The budgets of each code met."""
        self._after: dict[int, list[int]] = {}
        """For each budgets' code, the code of what each numbered spending leaves of them
        (-1: more than they have)."""
        self._covers: dict[int, bool] = {}
        """For a bound's code times the number of codes plus budgets' code: True iff the
        bound covers the budgets."""
        self._count = len(w.instances)
        self._free = self._number((0,) * len(budgets))
        """The number of spending nothing."""
        self._scoping = not w.flat
        """True iff a call's search may be scoped (:meth:`_scoped`): a flat instance is the
        whole state, so a flat search reads all of it anyway."""
        parts: dict[int, list[Predicate]] = {}
        self._whole: list[Predicate] = []
        """The ``always`` properties not split into parts: a scoped notification checks them
        whole."""
        for prop in w.own:
            if prop.kind != "always":
                continue
            if not isinstance(prop.predicate, Conjunction):
                assert prop.predicate is not None  # an always property has one
                self._whole.append(prop.predicate)
                continue
            for scope, holds in prop.predicate.parts:
                for k in scope:
                    parts.setdefault(k, []).append(holds)
        self._recheck = {k: tuple(found) for k, found in parts.items()}
        """Per position, the parts of ``always`` properties whose scope holds it: what a
        scoped notification rechecks when a step changed the position."""
        self._searched: dict[tuple[Any, ...], list[Known]] = {}
        """Scoped searches' outcomes (:class:`Searched`), by the call, then by the positions
        the search read, then by the values there. A search within a bound serves every state
        whose budgets the bound covers: steps its budgets do not cover are none of its steps
        anyway."""
        self._written: set[int] = set()
        """The positions the scoped search in progress may have changed, on any path."""
        self._last: set[int] = set()
        """The keys of the last level the search expanded (:meth:`level_done`)."""
        self._held: set[int] | None = None
        """The keys whose steps may be memoized, once :meth:`level_done` forgets (None: any)."""

    # --- packed states ----------------------------------------------------------------------------

    def initial(self) -> int:
        return self.pack(tuple(self.wiring.initial()))

    def pack(self, state: tuple[Any, ...]) -> int:
        """The number of ``state``."""
        lo, hi = self._lo, self._hi
        return self._key(state[:lo] + state[hi:]) * self._codes + self._code(state[lo:hi])

    def budgetless(self, state: int) -> tuple[int, int]:
        """``state`` as (the same state with every budget spent, what its budgets add to that
        number): a map of states that leaves budgets alone (a canonical sibling order,
        :mod:`._symmetry`) maps the first, memoized, and adds the second back."""
        code = state % self._codes
        return state - code, code

    def unpack(self, state: Any) -> tuple[Any, ...]:
        """The state numbered ``state``, as the layout names its positions."""
        key, code = divmod(int(state), self._codes)
        rest = self._keys[key]
        return rest[: self._lo] + self._budget(code) + rest[self._lo :]

    def _key(self, rest: tuple[Any, ...]) -> int:
        found = self._key_of.get(rest)
        if found is None:
            found = self._key_of[rest] = len(self._keys)
            self._keys.append(rest)
            self._calls_of.append(None)
            self._steps_of.append(None)
            self._groups_of.append(None)
            self._verdicts.append(None)
        return found

    def _code(self, budgets: tuple[int, ...]) -> int:
        code = 0
        for b, r in zip(budgets, self._radix, strict=True):
            if not 0 <= b < r:
                raise ValueError(f"{self.name}: a budget of {b} is not within the model's")
            code = code * r + b
        return code

    def _budget(self, code: int) -> tuple[int, ...]:
        found = self._budgets.get(code)
        if found is None:
            digits: list[int] = []
            rest = code
            for r in reversed(self._radix):
                rest, b = divmod(rest, r)
                digits.append(b)
            found = self._budgets[code] = tuple(reversed(digits))
        return found

    def first_violated(self, state: Any, *, between: bool = True) -> str | None:
        """Between steps only: a state a listener observes mid-step is never packed."""
        assert between, "a packed state is one between steps"
        return self._verdict(state)[0]

    def quiescent(self, state: Any) -> bool:
        return self._verdict(state)[1]

    def _verdict(self, state: int) -> tuple[str | None, bool]:
        """No property reads a budget: a verdict holds for every state that differs only in
        its budgets."""
        key = state // self._codes
        found = self._verdicts[key]
        if found is None:
            full = self.unpack(state)
            found = self._verdicts[key] = (
                Engine.first_violated(self, full),
                Engine.quiescent(self, full),
            )
        return found

    def level_done(self, states: Sequence[int]) -> None:
        """:attr:`~fsm_core.check._explore.System.level_done`: once the memo holds more than
        :attr:`memo_keys` keys, forget the steps memoized for every key no state of the last
        two levels had.

        States of one key differ in their budgets only, and budgets only fall: a key's states
        mostly come in a few adjacent levels, so its memo serves while they come and rarely
        after. Forgetting costs 5-10% more time on the default trees (a key met again is
        searched again, and freeing takes time too), so a small search keeps everything.
        """
        level = {s // self._codes for s in states}
        keep = self._last | level
        self._last = level
        if len(self._keys) <= self.memo_keys:
            return
        # Only the states a level expands get a memo, so after one sweep of every key the
        # keys that may hold one are those the last sweep kept.
        held = range(len(self._keys)) if self._held is None else self._held
        calls, steps, groups = self._calls_of, self._steps_of, self._groups_of
        for key in held:
            if key not in keep:
                calls[key] = steps[key] = groups[key] = None
        self._held = keep

    # --- a state's steps, from its memoized steps -------------------------------------------------

    def steps(self, state: Any) -> list[tuple[int, Any]]:
        key, code = divmod(state, self._codes)
        if self._branching:
            calls, after = self._ready(key, code)
            lists = [c.steps for c in calls]
        else:
            lists, after = [self._unbranched(key, code)], self._spend(code)
        out: list[tuple[int, int]] = []
        append = out.append
        for steps in lists:
            for label, base, k in steps:
                left = after[k]
                if left >= 0:
                    append((label, base + left))
        return out

    def grouped(self, state: Any) -> tuple[list[tuple[int, Any]], int, list[tuple[int, ...]]]:
        """:meth:`steps` folded by where they lead, for the explorer: the first step to each
        next state, in the order of :meth:`steps`; how many steps there are; and the labels
        of every step, in groups. A state has about ten times as many steps as next states
        (one per plan of listener calls, each plan a different move), so the explorer saves
        the work of the other nine, and this method the work of telling them apart."""
        key, code = divmod(state, self._codes)
        if self._branching:
            calls, after = self._ready(key, code)
            lists = [c.fold() if c.groups is None else c.groups for c in calls]
        else:
            groups = self._groups_of[key]
            if groups is None:
                groups = self._groups_of[key] = fold(self._unbranched(key, code))
            lists, after = [groups], self._spend(code)
        out: list[tuple[int, int]] = []
        labels: list[tuple[int, ...]] = []
        count = 0
        append = out.append
        for groups in lists:
            for label, base, k, n, every in groups:
                left = after[k]
                if left >= 0:
                    append((label, base + left))
                    count += n
                    labels.append(every)
        return out, count, labels

    def _unbranched(self, key: int, code: int) -> list[Step]:
        """Without listener calls: every step of a call spends what the call does, so a state
        without budgets has one list of steps, searched at once."""
        found = self._steps_of[key]
        if found is None:
            full = self.unpack(key * self._codes + code)
            found = []
            for start in self._starts(full):
                if start[5] is not None and not full[self.broken]:
                    found.append(self._local_step(full, start, key))
                else:
                    found += self._steps(full, start)
            self._steps_of[key] = found
        return found

    def _ready(self, key: int, code: int) -> tuple[list[Call], list[int]]:
        """The calls a step may begin with from the state numbered ``key * codes + code``, their
        steps memoized within a bound that covers its budgets, and what each numbered spending
        leaves of them (a step whose spending they do not cover is none of this state's)."""
        full_state: tuple[Any, ...] | None = None
        valid: bool | None = None
        calls = self._calls_of[key]
        covers, codes, top = self._covers, self._codes, self._top
        if calls is None:
            full_state = self.unpack(key * self._codes + code)
            calls = self._calls_of[key] = []
            broken = full_state[self.broken]
            run: Call | None = None
            for start in self._starts(full_state):
                if start[5] is None or broken:
                    run = None
                    calls.append(Call(*start))
                    continue
                # A local call has one step, whatever the budgets: done now, never widened.
                # Calls in a row that are local make one call of their steps, each spending
                # what its call does (a step the budgets do not cover is dropped anyway).
                if run is None:
                    run = Call(*start)
                    run.spent, run.bound, run.local = self._free, top, None
                    calls.append(run)
                run.steps.append(self._local_step(full_state, start, key))
        after = self._spend(code)
        ready: list[Call] = []
        for c in calls:
            if after[c.spent] < 0:
                continue  # the budgets do not cover the call itself
            b = c.bound
            if b != top and (b < 0 or not (covers.get(b * codes + code) or self._covered(c, code))):
                # Search within the most of each budget the states of this key have had: a
                # state with more widens it (breadth first, the richest tend to come first).
                first = c.bound < 0
                if valid is None:
                    valid = self._scoping and self._verdict(key * codes + code)[0] is None
                if first:
                    c.bound = code
                else:
                    c.bound = self._code(tuple(map(max, self._budget(c.bound), self._budget(code))))
                if full_state is None:
                    full_state = self.unpack(key * self._codes + code)
                self._memoize(full_state, c, first, valid, key)
                if not c.pruned and not c.stale:  # the bound left nothing out: no wider one
                    c.bound = self._top  # adds a step
                after = self._spend(code)
            ready.append(c)
        return ready, after

    def _spend(self, code: int) -> list[int]:
        """What each numbered spending leaves of the budgets coded ``code``."""
        after = self._after.get(code)
        if after is None:
            after = self._after[code] = []
        if len(after) < len(self._spendings):
            have = self._budget(code)
            for spent in self._spendings[len(after) :]:
                left = budgets_left(have, spent)
                after.append(-1 if left is None else self._code(left))
        return after

    def _covered(self, c: Call, code: int) -> bool:
        """True iff ``c``'s bound covers the budgets coded ``code``."""
        where = c.bound * self._codes + code
        found = affords(self._budget(c.bound), self._budget(code))
        self._covers[where] = found
        return found

    def _starts(self, state: tuple[Any, ...]) -> list[Start]:
        """The calls the environment and the driver may begin a step with from ``state``, and
        the table takes there."""
        slots = range(len(self.wiring.instances))
        instances = (0,) if self._flat else [i for i in slots if state[i] is not None]
        out: list[Start] = []
        for i in instances:
            out += self._offered_at(state, i)
        return out

    def _offered_at(self, state: tuple[Any, ...], i: int) -> list[Start]:
        """The calls naming ``i`` that the tables take from ``state`` and the wiring offers
        there. Memoized by what deciding them read: the instances the calls are fired on and
        the positions :meth:`Wiring.offers` read. Deciding is deterministic, so a state that
        agrees with an earlier one on every position deciding it read is decided the same."""
        memo = self._offered[i]
        for _, project, known in memo:
            found = known.get(project(state))
            if found is not None:
                return found
        ons, _ = self._offers[self._group[i]]
        reading = Reading(state)
        if self._flat:
            reading.read.update(range(self._width))
        else:
            reading.read.update(i if on == SELF else on for on in ons)
        offers = self.wiring.offers
        found = [s for s in self._taken_at(state, i) if offers(reading, i, s[2], s[3])]
        reads = tuple(sorted(reading.read))
        entry = next((e for e in memo if e[0] == reads), None)
        if entry is None:
            entry = (reads, projection(reads), {})
            memo.append(entry)
        entry[2][entry[1](state)] = found
        return found

    def _taken_at(self, state: tuple[Any, ...], i: int) -> list[Start]:
        """The calls naming ``i`` that the tables take from ``state``, in the order of its
        offers. Memoized by ``i`` and the variables of the instances they are fired on."""
        ons, calls = self._offers[self._group[i]]
        if self._flat:
            nodes: tuple[Any, ...] = (state[: self._width],)
        else:
            nodes = tuple(state[i if on == SELF else on] for on in ons)
        where = (i, nodes)
        found = self._takes_at.get(where)
        if found is None:
            found = self._takes_at[where] = []
            for event, on, each in calls:
                node = nodes[ons.index(on)]
                fired = i if on == SELF else on
                target = None if fired == i else i
                code = self._tables[fired]
                lookup, local = code.lookups[event], code.local_rows
                found += [
                    (
                        fired,
                        row,
                        event,
                        args,
                        self._number(spent),
                        [None]
                        if row == IGNORED or (event not in self._hooked_events and local[row])
                        else None,
                        target,
                    )
                    for args, spent in each
                    if (row := lookup(node, args)) != REFUSED
                ]
        return found

    def _steps(self, state: tuple[Any, ...], start: Start) -> list[Step]:
        """The steps a call without listener calls begins from ``state``."""
        i, found, event, args, spent, local, target = start
        if not state[self.broken]:
            if local is not None:
                return [self._local_step(state, start)]
            handing = found != IGNORED and self._tables[i].handing[found]
            if handing and event not in self._hooked_events:
                return self._handed_step(state, start)
        out: Out = []
        path = StepPath(state, self._spendings[spent], target)
        self._enter(path, found, i, event, args, None)
        self._run(path, out, [])
        return [self._step(key, nxt, spent) for key, nxt, spent, _ in out]

    def _handed_step(self, state: tuple[Any, ...], start: Start) -> list[Step]:
        """The steps of a call whose row only hands it on through binding effects (whose
        wiring reads nothing and fires only on instances the step's target decides): when
        the calls it hands on perform no effect either (or are ignored, or refused), the step
        reads and changes only the instance and those it handed the call to, so its outcome
        is that of the step searched from the same variables of each."""
        i, found, event, args, spent, _, target = start
        call = (i, event, found, args, target, state[i])
        to = self._handed_to.get(call)
        where: tuple[Any, ...] | None = None
        known = None
        if to is not None:
            where = (*call, *(state[k] for k in to))
            known = self._handed.get(where)
        if known is None:
            out: Out = []
            path = StepPath(state, self._spendings[spent], target)
            self._enter(path, found, i, event, args, None)
            self._run(path, out, [])
            if where is None or where not in self._handed:
                self._remember(call, out, state, path.refused)
            return [self._step(key, nxt, spent) for key, nxt, spent, _ in out]
        if not known:
            return []
        assert to is not None  # an outcome is kept only with where the call went
        label, after, record = known
        lo, hi = self._lo, self._hi
        rest = list(state[:lo] + state[hi:])  # the instances and the record come before or
        for k, variables in zip((i, *to), after, strict=True):  # after the budgets
            rest[k] = variables
        rest[self.broken - (hi - lo)] = record
        return [(label, self._key(tuple(rest)) * self._codes, spent)]

    def _remember(
        self, call: tuple[Any, ...], out: Out, state: tuple[Any, ...], refused: int
    ) -> None:
        """Keep a handed-on step's outcome in :attr:`_handed` (None if it reached past the
        calls it handed on: it is searched every time). ``refused`` is the instance that
        refused the call handed on (-1: none did)."""
        to: tuple[int, ...] = ()
        outcome: tuple[Any, ...] | None = None
        if not out:
            if refused >= 0:
                to, outcome = (refused,), ()  # the table refused the call handed on: no step
        elif len(out) == 1:
            ((key, nxt, _, _),) = out
            to = tuple(nested[0] for _, nested in key[4])
            outcome = (self._label(key), tuple(nxt[k] for k in (call[0], *to)), nxt[self.broken])
            for _, nested in key[4]:
                k, event, row, inside = nested[0], nested[1], nested[3], nested[4]
                further = row is not None and row not in self._tables[k].local_ids
                if further or inside or event in self._hooked_events or k == call[0]:
                    outcome = None
            kept = (*range(self._lo), *range(self._hi, len(state)))
            touched = (call[0], *to, self.broken)
            if any(nxt[k] != state[k] for k in kept if k not in touched):
                outcome = None
        self._handed_to.setdefault(call, to)
        if self._handed_to[call] == to:
            self._handed[(*call, *(state[k] for k in to))] = outcome

    def _step(self, key: MoveKey, nxt: tuple[Any, ...], spent: tuple[int, ...]) -> Step:
        label = self._label_of.get(key)
        if label is None:
            label = self._label(key)
        rest = nxt[: self._lo] + nxt[self._hi :]
        number = self._key_of.get(rest)
        if number is None:
            number = self._key(rest)
        k = self._numbers.get(spent)
        if k is None:
            k = self._number(spent)
        return label, number * self._codes, k

    def _number(self, spent: tuple[int, ...]) -> int:
        found = self._numbers.get(spent)
        if found is None:
            found = self._numbers[spent] = len(self._spendings)
            self._spendings.append(spent)
        return found

    def _memoize(
        self, state: tuple[Any, ...], c: Call, first: bool, scoped: bool, key: int
    ) -> None:
        """Search the steps ``c`` begins from ``state`` (numbered ``key`` without its budgets)
        within its bound: all of them the ``first`` time, else only those the last bound left
        out, merged in. ``scoped``: the state breaks nothing, so a search from it may be
        scoped (:meth:`_recall`)."""
        if c.local is not None and not state[self.broken]:
            start = (c.i, c.found, c.event, c.args, c.spent, c.local, c.target)
            c.steps = [self._local_step(state, start)]
            c.groups = None
            return
        if c.stale:  # its steps are another state's: no snapshot here to resume
            first, c.stale = True, False
        scoped = first and scoped and self._scoping
        if scoped and self._recall(state, c, key):
            return
        out: Out = []
        bound = self._bound = self._budget(c.bound)
        work: list[tuple[StepPath, list[Option], int, bool]] = []
        pruned, self._pruned = self._pruned, []
        reads: set[int] | None = None
        tests: list[Test] = []
        if first:
            if scoped:
                reads, self._written = {c.i}, set()
            path = StepPath(state, self._spendings[c.spent], c.target, reads, tests)
            self._enter(path, c.found, c.i, c.event, c.args, None)
            self._run(path, out, work)
        else:
            for snap, options in c.pruned:
                fits = [o for o in options if affords(bound, o[4])]
                if len(fits) < len(options):
                    self._pruned.append((snap, [o for o in options if o not in fits]))
                if fits:
                    work.append((snap, fits, 0, True))
        self._drain(work, out)
        c.pruned, self._pruned = self._pruned, pruned
        if not out and not first:
            return  # the wider bound lets no listener call in that the last one left out
        found = [(order, self._step(key, nxt, spent)) for key, nxt, spent, order in out]
        if not first:
            found += zip(c.orders, c.steps, strict=True)
            found.sort()
        c.orders = [order for order, _ in found]
        c.steps = [step for _, step in found]
        c.groups = None
        if reads is not None:
            self._keep(state, c, reads, tests, out)

    def _recall(self, state: tuple[Any, ...], c: Call, key: int) -> bool:
        """Take ``c``'s steps from a scoped search of the same call, within a bound that covers
        ``c``'s, from a state that agrees with ``state`` (numbered ``key`` without its budgets)
        on every position that search read; False if none was kept.

        A scoped search (from a state that breaks nothing) records every position it reads:
        the instances it runs, and what the wiring's hooks, the properties and the parts it
        rechecks read (:meth:`_scoped_notice`). Every choice in it is decided by those, so a
        search from a state that agrees there makes the same choices and writes the same
        values: its next states are ``state`` with those values written. A test the search
        asked of a position it did not read (:meth:`Tracked.test`) must have the same answer
        in ``state``.
        """
        memo = self._searched.get((c.i, c.found, c.event, c.args, c.target, c.spent))
        if memo is None:
            return False
        code, covers = c.bound, self._covers
        for _, project, known in memo:
            for found in known.get(project(state), ()):
                if found.tests and not all(
                    test(state[k]) == answer for k, test, answer in found.tests
                ):
                    continue
                bound = found.bound
                if bound != code:
                    where = bound * self._codes + code
                    fits = covers.get(where)
                    if fits is None:
                        fits = covers[where] = affords(self._budget(bound), self._budget(code))
                    if not fits:
                        continue
                c.bound = bound
                rest = self._keys[key]
                places, own = found.places, key * self._codes
                now = found.pick(rest)
                bases: list[int] = []
                for values in found.groups:
                    if values == now:  # the search changed nothing here: back to ``state``
                        bases.append(own)
                        continue
                    after = list(rest)
                    for k, v in zip(places, values, strict=True):
                        after[k] = v
                    bases.append(self._key(tuple(after)) * self._codes)
                c.steps = [(label, bases[g], k) for label, g, k in found.steps]
                c.groups = [(x, bases[g], k, n, e) for x, g, k, n, e in found.folded]
                c.orders, c.pruned = found.orders, []
                c.stale = bound != self._top
                return True
        return False

    def _keep(
        self, state: tuple[Any, ...], c: Call, reads: set[int], tests: list[Test], out: Out
    ) -> None:
        """Keep the outcome of ``c``'s first search from ``state``, scoped, read ``reads``,
        asked ``tests`` and stepped ``out`` (whose steps :attr:`Call.steps` holds), for
        :meth:`_recall`. A test of a position the search also read is decided by the value
        read."""
        lo, hi = self._lo, self._hi
        places = sorted((reads | self._written | {self.broken}) - set(range(lo, hi)))
        groups: dict[tuple[Any, ...], int] = {}
        steps: list[tuple[int, int, int]] = []
        for (_, nxt, _, _), (label, _, k) in zip(out, c.steps, strict=True):
            g = groups.setdefault(tuple(nxt[p] for p in places), len(groups))
            steps.append((label, g, k))
        searched = Searched(
            tuple(p if p < lo else p - (hi - lo) for p in places),
            tuple(groups),
            steps,
            c.orders,
            c.bound if c.pruned else self._top,
            tuple(t for t in dict.fromkeys(tests) if t[0] not in reads),
        )
        where = tuple(sorted(reads))
        memo = self._searched.setdefault((c.i, c.found, c.event, c.args, c.target, c.spent), [])
        entry = next((e for e in memo if e[0] == where), None)
        if entry is None:
            entry = (where, projection(where), {})
            memo.append(entry)
        entry[2].setdefault(entry[1](state), []).append(searched)

    def _local_step(self, state: tuple[Any, ...], start: Start, key: int = -1) -> Step:
        """The one step of a local call from ``state`` (``key``: the number of the state
        without its budgets, when the caller has it): the instance's variables after it, and
        what it recorded broken, are those of the step searched from the same variables,
        which the call keeps (it is memoized by them).

        Most local calls change nothing (a query a table answers from its variables): their
        step leads back to ``state`` itself, whose number needs no new key."""
        i, found, event, args, spent, local, target = start
        assert local is not None
        lo, hi = self._lo, self._hi
        known = local[0]
        if known is None:
            out: Out = []
            path = StepPath(state, self._spendings[spent], target)
            self._enter(path, found, i, event, args, None)
            self._run(path, out, [])
            ((move, nxt, _, _),) = out  # no performed effect: no reaction point, no branch
            after = nxt[: self._width] if self._flat else nxt[i]
            known = local[0] = (self._label(move), after, nxt[self.broken])
        label, after, record = known
        was = state[: self._width] if self._flat else state[i]
        if was == after and state[self.broken] == record:
            if key < 0:
                key = self._key(state[:lo] + state[hi:])
            return label, key * self._codes, spent
        # The instance and the record come before or after the budgets.
        changed = list(state[:lo] + state[hi:] if key < 0 else self._keys[key])
        if self._flat:
            changed[: self._width] = after
        else:
            changed[i] = after
        changed[self.broken - (hi - lo)] = record
        return label, self._key(tuple(changed)) * self._codes, spent

    def _label(self, key: MoveKey) -> int:
        found = self._label_of.get(key)
        if found is None:
            found = self._label_of[key] = self._labels.index(self._move(key))
        return found

    def _move(self, key: MoveKey) -> Move:
        found = self._moves.get(key)
        if found is None:
            i, event, args, row, inside, stopped, target = key
            nested = tuple((_notice(n), self._move(k)) for n, k in inside)
            shown = _notice(stopped) if stopped else ""
            found = self.move(i, event, args, row, nested, shown, target)
            self._moves[key] = found
        return found

    # --- one step, every plan --------------------------------------------------------------------

    def _drain(self, work: list[tuple[StepPath, list[Option], int, bool]], out: Out) -> None:
        """Branch on every listener call pushed on ``work``, and on those the branches push.

        The branches are run in the interpreted engine's plan stack order (the latest point
        first, a point's listener calls last one first), though the steps are sorted by their
        :attr:`StepPath.order` in the end anyway. A snapshot ``kept`` for a wider bound is
        copied for every call; else the last call runs on the snapshot itself.
        """
        while work:
            snap, options, j, kept = work.pop()
            last = j + 1 == len(options)
            if not last:
                work.append((snap, options, j + 1, kept))
            q, found, event, args, spent, on, aimed = options[j]
            p = snap if last and not kept else snap.fork()
            p.spent = spent
            p.used += 1
            p.order += (q + 1,)
            self._enter(p, found, on, event, args, p.frames[-1].effect, aimed)
            self._run(p, out, work)

    def _branches(self, path: StepPath, f: Frame) -> tuple[list[Option], list[Option]]:
        """The listener calls ``path`` may make at ``f``'s reaction point, of those the table
        takes there (the others make the plan invalid): the ones whose spending fits the
        bound, and the ones it does not."""
        name = f.effect[0]
        aims, reached = self._aimed(f.i, name)
        if self._flat:
            nodes: tuple[Any, ...] = (tuple(path.store[: self._width]),)
        else:
            nodes = tuple(tuple(path.live(k)) for k in reached)
        where = (f.i, name, nodes, path.spent, self._bound)
        found = self._taken.get(where)
        if found is None:
            found = self._taken[where] = self._takes(path, aims)
        if not self._aiming:
            return found
        # Whether an aimed call is offered reads more of the state than the key (a free slot
        # below the parent): decided here, never memoized.
        fits, beyond = found
        return self._offered_now(path, fits), self._offered_now(path, beyond)

    def _offered_now(self, path: StepPath, options: list[Option]) -> list[Option]:
        offers, aimed, seen = self.wiring.offers, self._aiming, path.hooked()
        return [
            o
            for o in options
            if o[0] not in aimed or offers(seen, o[5] if o[6] is None else o[6], o[2], o[3])
        ]

    def _aimed(self, i: int, name: str) -> tuple[tuple[Aim, ...], tuple[int, ...]]:
        """The listener calls a reaction point at the effect ``name`` of ``i`` may make, as
        the wiring resolves them, and the instances they are fired on (``i`` first)."""
        found = self._aims.get((i, name))
        if found is None:
            aims: list[Aim] = []
            for q, (aim, event, args) in enumerate(self._options):
                where = self.wiring.aim(i, name, aim)
                if where is not None:
                    on, named = where
                    cost = self._spending(event, args, on if aim else None)
                    aims.append((q, on, named, event, args, cost))
            reached = tuple(dict.fromkeys((i, *(a[1] for a in aims))))
            found = self._aims[i, name] = (tuple(aims), reached)
        return found

    def _takes(self, path: StepPath, aims: tuple[Aim, ...]) -> tuple[list[Option], list[Option]]:
        bound, spent = self._bound, path.spent
        fits: list[Option] = []
        beyond: list[Option] = []
        for q, on, named, event, args, cost in aims:
            node = path.store if self._flat else path.live(on)
            found = self._tables[on].lookups[event](node, args)
            if found != REFUSED:
                total = tuple(map(add, spent, cost))
                (fits if affords(bound, total) else beyond).append(
                    (q, found, event, args, total, on, named)
                )
        return fits, beyond

    def _enter(
        self,
        path: StepPath,
        found: int,
        i: int,
        event: str,
        args: Args,
        via: Notice | None,
        aimed: int | None = None,
    ) -> None:
        """Begin firing ``event`` on ``i``, whose lookup ``found`` a row or :data:`IGNORED`;
        ``aimed``: the instance a listener's routed call names (the step's call names the
        step's target)."""
        frames = path.frames
        if not frames:
            aimed = path.target
        if found == IGNORED:
            if frames:
                assert via is not None
                frames[-1].inside += ((via, (i, event, args, None, (), None, aimed)),)
            else:
                path.done = (i, event, args, None, (), None, aimed)
            return
        target = aimed if aimed is not None or not frames else frames[-1].target
        frames.append(Frame(i, event, args, self._tables[i].rows[found], via, aimed, target))
        if event in self._hooked_events:
            self.wiring.before(path.hooked(), i, event, args)

    def _run(
        self, path: StepPath, out: Out, work: list[tuple[StepPath, list[Option], int, bool]]
    ) -> None:
        """Run ``path`` to its end and record its step in ``out``; its reaction points push
        their branches on ``work``."""
        frames, w, flat, code = path.frames, self.wiring, self._flat, self._tables
        store, live, hooked_events = path.store, path.live, self._hooked_events
        while frames:
            f = frames[-1]
            if f.pending:
                (target, event, args), *rest = f.pending
                f.pending = rest
                found = code[target].lookups[event](store if flat else live(target), args)
                if found != REFUSED:
                    self._enter(path, found, target, event, args, f.effect)
                    continue
                if f.effect[0] in self._binding:
                    path.refused = target
                    return  # the step is refused: no step at all
                for prop, holds in self.delivered:
                    if not holds(path.hooked(), (event, args)):
                        self._stop(path, prop, f.effect, out)
                        return
                continue
            if f.point:
                f.point = False
                if path.used < w.max_reactions:
                    fits, beyond = self._branches(path, f)
                    if fits or beyond:
                        snap = path.fork()
                        if fits:
                            work.append((snap, fits, 0, bool(beyond)))
                        if beyond:
                            self._pruned.append((snap, beyond))
                        path.order += (0,)
                continue
            r = f.row.segments[f.resume](store if flat else live(f.i), f.args)
            if r is None:
                frames.pop()
                if f.event in hooked_events:
                    w.after(path.hooked(), f.i, f.event, f.args)
                move = (f.i, f.event, f.args, f.row.id, f.inside, None, f.aimed)
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

    def _perform(self, path: StepPath, f: Frame, out: Out) -> bool:
        """Perform ``f``'s effect in progress: its hooks and checks, then queue its wired
        reactions and its reaction point. False iff a property broke there (the step ended)."""
        name, values = f.effect
        i, store, w = f.i, path.store, self.wiring
        node = store if self._flat else path.live(i)
        code = self._tables[i]
        hooked, holds, notifies, reacts = code.effects[name]
        if hooked:
            w.effect(path.hooked(), i, name, values)
        if holds is not None and not holds(node, values):
            self._stop(path, self._named(requires_name(name), i), f.effect, out)
            return False
        if notifies:
            path.flush()
            before = path.observed.get(i)
            if before is None:
                before = path.start if self._flat else path.start[i]
            now = path.observed[i] = tuple(node)
            if before is None:  # created inside this step: nothing observed it before
                before = now
            if path.reads is not None:
                verdict = self._scoped_notice(path, before, now, f.effect, i, code)
            else:
                where = (i, before, now if self._flat else tuple(store), f.effect)
                known = self._noticed.get(where)
                if known is None:
                    known = self._notice(before, now, store, f.effect, i, code)
                    if len(self._noticed) < NOTICED:
                        self._noticed[where] = known
                verdict = known
            if verdict:
                self._stop(path, verdict[0], f.effect, out)
                return False
        if hooked:
            f.pending = w.wire(path.hooked(), i, name, values, f.target)
        f.point = reacts
        return True

    def _notice(
        self,
        before: Sequence[Any],
        now: Sequence[Any],
        store: list[Any],
        at: Notice,
        i: int,
        code: _Code,
    ) -> tuple[str | None, ...]:
        """What a listener observing ``store`` at the effect ``at`` of ``i``, whose variables
        went from ``before`` to ``now`` since a listener last observed it, finds broken: ()
        for nothing, else the property to record (None: the state breaks one between steps,
        which needs no record)."""
        k = code.first_unstable(before, now)
        if k >= 0:
            return (self._named(code.stable[k], i),)
        for prop, holds_at in self.notified:
            if not holds_at(store, at):
                return (prop,)
        if Engine.first_violated(self, store, between=False) is not None:
            return (None,)
        return ()

    def _scoped_notice(
        self,
        path: StepPath,
        before: Sequence[Any],
        now: Sequence[Any],
        at: Notice,
        i: int,
        code: _Code,
    ) -> tuple[str | None, ...]:
        """:meth:`_notice` in a scoped search, whose start breaks no property: of the tables'
        invariants and the ``always`` properties split into parts, only an instance or a part
        whose scope holds a position the path changed can break, and only those are checked,
        what they read recorded (a part may read less than its scope: what it read decides
        it). The properties not split are checked whole."""
        k = code.first_unstable(before, now)
        if k >= 0:
            return (self._named(code.stable[k], i),)
        seen = path.hooked()
        for prop, holds_at in self.notified:
            if not holds_at(seen, at):
                return (prop,)
        store, reads, recheck, tables = path.store, path.reads, self._recheck, self._tables
        assert reads is not None
        for p in sorted(path.changed()):
            if p < self._count:
                reads.add(p)
                values = store[p]
                if values is not None and tables[p].violated(values) is not None:
                    return (None,)
            for holds in recheck.get(p, ()):
                if not holds(seen, None):
                    return (None,)
        for holds in self._whole:
            if not holds(seen, None):
                return (None,)
        return ()

    def _named(self, prop: str, i: int) -> str:
        node = self.wiring.instances[i]
        return f"{prop}@{node}" if node else prop

    def _stop(self, path: StepPath, prop: str | None, at: Notice, out: Out) -> None:
        """End the step at the effect ``at``, recording ``prop`` as broken (None: the state
        there breaks a property between steps, which needs no record)."""
        path.flush()
        if path.reads is not None:
            self._written |= path.changed()
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
            nested = (
                f.i, f.event, f.args, f.row.id, inside, at if nested is None else None, f.aimed
            )  # fmt: skip
        assert nested is not None
        out.append((nested, tuple(path.store), path.spent, path.order))

    def _finish(self, path: StepPath, out: Out) -> None:
        """The step ran out: prove the step invariants of every instance it touched."""
        store = path.store
        if path.reads is not None:
            self._written |= path.changed()
        for i in (0,) if self._flat else tuple(path.nodes):
            before = path.observed.get(i)
            if before is None:
                before = path.start if self._flat else path.start[i]
            code = self._tables[i]
            now = store if self._flat else path.live(i)
            k = code.first_unstable(now if before is None else before, now)
            if k >= 0:
                store[self.broken] = self._named(code.stable[k], i)
        path.flush()
        assert path.done is not None
        out.append((path.done, tuple(store), path.spent, path.order))


_Decided = tuple[tuple[int, ...], Callable[[Sequence[Any]], Any], dict[Any, list[Start]]]
"""Answers decided by reading the positions named (sorted), by the values there: the
positions, what gives the values, and the answers."""


def _notice(n: Notice) -> str:
    name, values = n
    return f"{name}({', '.join(show(v) for v in values)})"
