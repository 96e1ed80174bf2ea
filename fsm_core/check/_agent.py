"""One agent, composed with a budgeted environment and re-entrant listeners.

The environment is the user: it calls the events named in the model's ``budgets`` (``send``,
``cancel``, ``dispose``, ...) as often as the budget allows. The runtime's own driver fires the
other events whenever the table enables them, with every argument (``retire`` ends in every
way). Re-entrancy is part of the model: inside each notifying effect named in ``reactions``
(``publish_status``, ``notify_cancel_requested``, ``abort_holder``, ...), listeners may call
budgeted events, up to ``max_reactions`` per step, and the checker explores every choice of
where and what. A step is the event plus everything listeners did inside it, so the states the
search stores are the ones between steps; the states a listener sees mid-step are checked
against the invariants too, and a violation there ends the step so its trace shows it.

At every effect the checker proves the effect's ``requires`` contract; at every notifying
effect, where a listener observes the state, it also proves the invariants and the table's
step invariants (``reason_first_wins``). A broken contract or step invariant is recorded in
the ghost ``broken`` and the step ends there.

A ghost ``prerun`` instruments DESIGN.md decision 1: a cancel on an idle agent with a driver
scheduled sets it, a waking send (a replacement) or the driver's start clears it, and
``prerun_cancel_opens_no_turn`` says the driver never publishes ``running`` while it is set.

A ghost ``owed`` instruments DESIGN.md decision 9: it is set when a waking send is
accepted before disposal, and cleared when the work is claimed (``claim_inbox``, the last
``take_steering``), discarded (``clear_inbox``, removal of the last message), parked by a
``keep_inbox`` cancel, or when disposal begins or the driver halts on an escape (``halt``).
``no_parked_wake`` says an idle agent with no driver scheduled never owes a wake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fsm_core.check._codegen import compile_predicates
from fsm_core.check._explore import System
from fsm_core.check._moves import Labels, Move
from fsm_core.check._needs import Needs
from fsm_core.table._expr import Value, show
from fsm_core.table._machine import REFUSED, State

if TYPE_CHECKING:  # the model loader imports this module for NEEDS and PROPERTIES
    from fsm_core.check._modelfile import Model

NO_PARKED_WAKE = "no_parked_wake"
"""The property name of decision 9's guarantee."""

PRERUN_OPENS_NO_TURN = "prerun_cancel_opens_no_turn"
"""The property name of decision 1's guarantee: a pre-run cancel opens no turn."""

PROPERTIES = (NO_PARKED_WAKE, PRERUN_OPENS_NO_TURN)
"""The agent composition's own properties, besides the table's and the explorer's."""

NEEDS = Needs(
    variables=("closing", "scheduled"),
    events={
        "send": ("wake",),
        "cancel": ("keep_inbox",),
        "remove": ("rest",),
        "take_steering": ("rest",),
    },
)
"""What the ghosts read by name: the lifecycle flag, the scheduled driver, and the
arguments that owe, park or discard a wake."""

USER_INTERNAL = frozenset({"remove"})
"""Internal events the user causes, which a budget may bound like an input event: ``remove``
is the user's ``inbox.remove(id)``, internal only because it fires when a message was queued.
Any other internal event is the driver's, and a budget on it would silently restrict the
runtime rather than the user."""

Choice = tuple[str, tuple[Value, ...]] | None


class _Stop(Exception):
    """An invariant broke inside a step: stop the step where a listener would see it."""

    def __init__(self, at: str) -> None:
        super().__init__(at)
        self.at = at  # the notifying effect, e.g. ``publish_status(idle)``


class _Refused(Exception):
    """The table rejects the event here, or no row is enabled."""


class _Invalid(Exception):
    """This plan asks a listener for something the budget or the table does not allow."""


@dataclass(frozen=True, slots=True)
class _Outcome:
    move: Move
    state: State
    points: int


class AgentSystem:
    """Builds the explorer's view of an ``agent`` model. ``system`` is what to explore."""

    def __init__(self, model: Model, max_reactions: int = 2) -> None:
        self.model = model
        self.machine = m = model.machine
        self.n = len(m.names)
        self.budget_events = tuple(model.budgets)
        self._budget_index = {e: self.n + i for i, e in enumerate(self.budget_events)}
        self._owed = self.n + len(self.budget_events)
        self._prerun = self._owed + 1
        self._broken = self._owed + 2
        self.max_reactions = max_reactions
        # The ghosts read the lifecycle flag and the scheduled driver.
        self._closing = m.names.index("closing")
        self._scheduled = m.names.index("scheduled")
        self._reactions = frozenset(model.reactions)
        self._notifying = frozenset(n for n, e in m.table.effects.items() if e.notifies)
        self._options: list[tuple[str, tuple[Value, ...]]] = [
            (e, args)
            for e in self.budget_events
            if m.table.events[e].kind == "input"
            for args in m.all_arguments(e)
        ]
        self._events = [(e, list(m.all_arguments(e))) for e in m.table.events]
        self._params = {e: tuple(p for p, _ in spec.params) for e, spec in m.table.events.items()}
        # The ghost reads these arguments by position: send's wake, cancel's keep_inbox and
        # the rest of remove and take_steering.
        self._wake = self._params["send"].index("wake")
        self._keep_inbox = self._params["cancel"].index("keep_inbox")
        self._rest = {e: self._params[e].index("rest") for e in ("remove", "take_steering")}
        # Compiled once: evaluated on the agent's positions of every state and every notification.
        self._violated = compile_predicates(m, {i.id: i.expr for i in m.table.invariants})
        self._unquiet = compile_predicates(m, {"quiescent": m.table.defs["quiescent"].expr})
        self._labels = Labels()
        self.labels = self._labels.moves
        initial = (*m.initial, *(model.budgets[e] for e in self.budget_events), False, False, "")
        self.names: tuple[str, ...] = (
            *m.names,
            *(f"budget.{e}" for e in self.budget_events),
            "ghost.owed",
            "ghost.prerun",
            "ghost.broken",
        )
        self.system: System[State] = System(
            model.name, initial, self.successors, self.labels, self.first_violated, self.quiescent
        )

    # --- properties --------------------------------------------------------------------------

    def first_violated(self, s: State) -> str | None:
        if s[self._broken]:
            return str(s[self._broken])
        agent = s[: self.n]
        bad = self._violated(agent)
        if bad is not None:
            return bad
        # Idle with nothing scheduled: quiescent, and the state variable ``phase`` is idle.
        if s[self._owed] and agent[0] == "idle" and self._unquiet(agent) is None:
            return NO_PARKED_WAKE
        return None

    def quiescent(self, s: State) -> bool:
        return self._unquiet(s[: self.n]) is None

    # --- successors --------------------------------------------------------------------------

    def successors(self, s: State) -> list[tuple[int, State]]:
        out: list[tuple[int, State]] = []
        for event, arguments in self._events:
            slot = self._budget_index.get(event)
            if slot is not None and s[slot] == 0:
                continue
            for args in arguments:
                for move, nxt in self._runs(s, event, args):
                    out.append((self._labels.index(move), nxt))
        return out

    def _runs(self, s: State, event: str, args: tuple[Value, ...]) -> list[tuple[Move, State]]:
        """Every way the step can go: one run per plan of listener reactions."""
        results: list[tuple[Move, State]] = []
        plans: list[tuple[Choice, ...]] = [()]
        while plans:
            plan = plans.pop()
            try:
                outcome = self._run(s, event, args, plan)
            except _Invalid:
                continue
            if outcome is None:
                return []
            results.append((outcome.move, outcome.state))
            if sum(c is not None for c in plan) >= self.max_reactions:
                continue
            for i in range(len(plan), outcome.points):
                gap: tuple[Choice, ...] = (None,) * (i - len(plan))
                plans.extend((*plan, *gap, option) for option in self._options)
        return results

    def _run(
        self, s: State, event: str, args: tuple[Value, ...], plan: tuple[Choice, ...]
    ) -> _Outcome | None:
        """Run one plan; None when the top-level event is not enabled here at all.

        The composite store is the agent's variables followed by the budgets and the ghost;
        the compiled rows index only the agent's positions, so they run on it directly.
        """
        store = list(s)
        points = 0
        frames: list[list[tuple[str, Move]]] = [[]]
        # The calls in progress and the effects they re-entered through, so that a step
        # stopped by a broken invariant still shows (and replays) what led there.
        calls: list[tuple[str, tuple[Value, ...], str | None]] = []
        entered: list[str] = []

        def fire(ev: str, a: tuple[Value, ...]) -> Move:
            row = self.machine.lookup(store, ev, a)
            if row is REFUSED:
                raise _Refused
            frames.append([])
            calls.append((ev, a, row.row.id if row else None))
            if row is not None:
                self._ghost(store, ev, a, before=True)
                self.machine.execute(row, store, a, perform)
                self._ghost(store, ev, a, before=False)
            calls.pop()
            return self._move(ev, a, row.row.id if row else None, tuple(frames.pop()))

        observed = [s]

        def perform(name: str, values: tuple[Value, ...]) -> None:
            nonlocal points
            if name in ("claim_inbox", "clear_inbox"):
                store[self._owed] = False
            now = tuple(store)
            broken = self._observe(observed, now, name, values)
            if broken is not None:
                store[self._broken] = broken
            if broken is not None or (
                name in self._notifying and self.first_violated(now) is not None
            ):
                raise _Stop(f"{name}({', '.join(show(v) for v in values)})")
            if name not in self._reactions:
                return
            choice = plan[points] if points < len(plan) else None
            points += 1
            if choice is None:
                return
            ev, a = choice
            slot = self._budget_index[ev]
            if store[slot] == 0:
                raise _Invalid
            store[slot] = int(store[slot]) - 1
            effect = f"{name}({', '.join(show(v) for v in values)})"
            entered.append(effect)
            try:
                nested = fire(ev, a)
            except _Refused:
                raise _Invalid from None
            entered.pop()
            frames[-1].append((effect, nested))

        slot = self._budget_index.get(event)
        if slot is not None:
            store[slot] = int(store[slot]) - 1
        try:
            move = fire(event, args)
            unstable = self.machine.unstable(observed[0], store)
            if unstable:
                store[self._broken] = unstable[0]
        except _Refused:
            return None
        except _Stop as stop:
            # Fold the calls in progress, innermost first: the innermost stopped at ``stop.at``.
            nested: Move | None = None
            for depth in range(len(calls) - 1, -1, -1):
                ev, a, row_id = calls[depth]
                inside = frames[depth + 1] + ([(entered[depth], nested)] if nested else [])
                at = stop.at if nested is None else ""
                nested = self._move(ev, a, row_id, tuple(inside), stopped=at)
            assert nested is not None
            move = nested
        return _Outcome(move, tuple(store), points)

    def _observe(
        self, observed: list[State], now: State, effect: str, values: tuple[Value, ...]
    ) -> str | None:
        """What ``effect`` finds broken in the store ``now``: its own contract, at any effect;
        a step invariant or decision 1's ghost, at a notification, where a listener observes
        the state.

        ``observed[0]`` is the last state a listener could see; it moves on to this one.
        """
        if self.machine.unmet(effect, now, values):
            return f"{effect}.requires"
        if effect not in self._notifying:
            return None
        before, observed[0] = observed[0], now
        unstable = self.machine.unstable(before, now)
        if unstable:
            return unstable[0]
        if effect == "publish_status" and values[0] == "running" and now[self._prerun]:
            return PRERUN_OPENS_NO_TURN
        return None

    def _move(
        self,
        event: str,
        args: tuple[Value, ...],
        row: str | None,
        inside: tuple[tuple[str, Move], ...],
        stopped: str = "",
    ) -> Move:
        named = tuple(zip(self._params[event], args, strict=True))
        return Move(event, named, row, "", inside, stopped)

    # --- ghost ---------------------------------------------------------------------------------

    def _ghost(
        self, store: list[Value], event: str, args: tuple[Value, ...], *, before: bool
    ) -> None:
        """Update ``owed`` around a fired event (effects update it in ``perform``).

        A waking send owes a wake as it is accepted; a ``keep_inbox`` cancel parks, and
        disposal excuses, whatever was owed when it *finishes*, so work a cancel-requested
        observer queues inside that cancel is parked with the rest (pre-abort, D4). A halting
        driver excuses what was owed as it *starts*: its own idle notification is checked.
        """
        if before:
            if event == "send" and args[self._wake]:
                store[self._prerun] = False
                if not store[self._closing]:
                    store[self._owed] = True
            elif event == "cancel" and store[0] == "idle" and store[self._scheduled]:
                store[self._prerun] = True
            elif event == "halt":
                store[self._owed] = False  # before the row: its idle notification is checked
            return
        if event == "start":
            store[self._prerun] = False
        if (
            (event == "cancel" and args[self._keep_inbox])
            or event == "dispose"
            or (event in self._rest and not args[self._rest[event]])
        ):
            store[self._owed] = False
