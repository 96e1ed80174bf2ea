"""The agent protocol: one agent, composed with a budgeted environment and re-entrant listeners.

Everything this composition adds to the table is declared here, and :mod:`._compose` runs it:
the state layout, the ghosts and how events and effects move them, what the user and the
driver call, and the properties with their meanings.

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
accepted before disposal, and cleared when the last of the work is claimed (a ``claim_inbox``
that leaves nothing pending, the last ``claim_steering``: a claim takes one next-turn message,
and what it leaves stays owed until a later turn of the same driver claims it), discarded
(``clear_inbox``, ``discard_removed`` of the last message), parked by a ``keep_inbox``
cancel, or when disposal begins or the driver halts on an escape (``halt``). A send to an
agent whose hosting activation shut it (``shut``, when the table has it) owes nothing: it is
parked, as under disposal.
``no_parked_wake`` says an idle agent with no driver scheduled never owes a wake.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from fsm_core.check._composed._compiled import CompiledEngine
from fsm_core.check._composed._compose import (
    BROKEN,
    Aimed,
    Args,
    Engine,
    Layout,
    Offer,
    Reaction,
    Store,
)
from fsm_core.check._config import Model
from fsm_core.check._needs import Needs
from fsm_core.check._property import Notice, Property
from fsm_core.table._codegen import compile_predicates
from fsm_core.table._machine import Machine

NO_PARKED_WAKE = "no_parked_wake"
"""The property name of decision 9's guarantee."""

PRERUN_OPENS_NO_TURN = "prerun_cancel_opens_no_turn"
"""The property name of decision 1's guarantee: a pre-run cancel opens no turn."""

OWED, PRERUN = "ghost.owed", "ghost.prerun"
"""The layout names of decision 9's and decision 1's ghosts."""

_CLAIMS = frozenset({"claim_inbox", "claim_steering", "discard_removed"})
"""The effects that take work out of the inbox: each settles what was owed when it leaves
nothing pending."""

NEEDS = Needs(
    variables=("closing", "scheduled", "pending"),
    events={
        "send": ("wake",),
        "cancel": ("keep_inbox",),
        "remove": ("rest",),
        "take_steering": ("rest",),
    },
)
"""What the ghosts read by name: the lifecycle flag, the scheduled driver, whether work is
pending (as a claim leaves it), and the arguments that owe, park or discard a wake."""

USER_INTERNAL = frozenset({"remove"})
"""Internal events the user causes, which a budget may bound like an input event: ``remove``
is the user's ``inbox.remove(id)``, internal only because it fires when a message was queued.
Any other internal event is the driver's, and a budget on it would silently restrict the
runtime rather than the user."""


_Predicates = Callable[[Sequence[Any]], str | None]


class AgentWiring:
    """The agent protocol as a :class:`~fsm_core.check._composed._compose.Wiring`.

    The state is the agent's variables, then ``budget.EVENT`` for each budgeted event (what
    the user may still call), then the ghosts ``ghost.owed``, ``ghost.prerun`` and
    ``ghost.broken``.
    """

    flat = True
    instances: tuple[str, ...] = ("",)
    hooked_events = frozenset({"send", "cancel", "halt", "start", "dispose", "shut"})
    hooked_effects = frozenset({"clear_inbox", *_CLAIMS})
    binding: frozenset[str] = frozenset()
    aimed_calls: tuple[Aimed, ...] = ()
    """One agent: a listener calls nothing but the agent."""

    def aim(self, instance: int, effect: str, aim: str) -> tuple[int, int | None] | None:
        """A listener's every call is on the agent."""
        return (instance, None) if not aim else None

    def __init__(self, model: Model, max_reactions: int = 2) -> None:
        self.model = model
        self.machine = m = model.machine
        self.machines: tuple[Machine, ...] = (m,)
        self.layout = layout = Layout(
            (*m.names, *(f"budget.{e}" for e in model.budgets), OWED, PRERUN, BROKEN)
        )
        self._budget = {e: (layout[f"budget.{e}"],) for e in model.budgets}
        self._owed, self._prerun = layout[OWED], layout[PRERUN]
        self.max_reactions = max_reactions
        self.reactions = frozenset(model.reactions)
        self.offered: tuple[tuple[Offer, ...], ...] = (
            tuple((e, tuple(m.all_arguments(e)), 0) for e in m.table.events),
        )
        self.listener_calls = tuple(
            (e, args)
            for e in model.budgets
            if m.table.events[e].kind == "input"
            for args in m.all_arguments(e)
        )
        # The ghosts read the lifecycle flag, the scheduled driver, and these arguments by
        # position: send's wake, cancel's keep_inbox and the rest of remove and take_steering.
        self._phase = layout[m.names[0]]
        self._closing, self._scheduled = layout["closing"], layout["scheduled"]
        self._shut = layout.get("shut")  # a table without it has no hosting activation
        self._pending = layout["pending"]
        params = {e: tuple(p for p, _ in spec.params) for e, spec in m.table.events.items()}
        self._wake = params["send"].index("wake")
        self._keep_inbox = params["cancel"].index("keep_inbox")
        # Compiled once: evaluated on the agent's positions of every state and notification.
        # The generated code reads the agent's positions, the first of the composite state's.
        self._violated = cast(
            _Predicates, compile_predicates(m, {i.id: i.expr for i in m.table.invariants})
        )
        self._unquiet = cast(
            _Predicates, compile_predicates(m, {"quiescent": m.table.defs["quiescent"].expr})
        )
        self.own: tuple[Property, ...] = (
            Property(
                NO_PARKED_WAKE,
                "always",
                "an idle agent with no driver scheduled still owes a waking send its turn",
                self._no_parked_wake,
            ),
            Property(
                PRERUN_OPENS_NO_TURN,
                "notified",
                "the driver published running after a pre-run cancel",
                self._prerun_opens_no_turn,
            ),
        )

    def initial(self) -> tuple[Any, ...]:
        budgets = (self.model.budgets[e] for e in self.model.budgets)
        return (*self.machine.initial, *budgets, False, False, "")

    # --- properties ------------------------------------------------------------------------------

    def table_violated(self, state: Sequence[Any]) -> str | None:
        return self._violated(state)

    def quiescent(self, state: Sequence[Any]) -> bool:
        return self._unquiet(state) is None

    def _no_parked_wake(self, s: Sequence[Any], _: Notice | None) -> bool:
        """Idle with nothing scheduled (quiescent, and ``phase`` idle) owes no wake."""
        return not (s[self._owed] and s[self._phase] == "idle" and self.quiescent(s))

    def _prerun_opens_no_turn(self, s: Sequence[Any], at: Notice | None) -> bool:
        return not (at == ("publish_status", ("running",)) and s[self._prerun])

    # --- environment -----------------------------------------------------------------------------

    def charges(self, event: str, args: Args, on: int | None) -> tuple[int, ...]:
        return self._budget.get(event, ())

    def offers(self, state: Sequence[Any], instance: int, event: str, args: Args) -> bool:
        return True

    # --- ghosts ----------------------------------------------------------------------------------

    def before(self, store: Store, instance: int, event: str, args: Args) -> None:
        """A waking send owes a wake as it is accepted (and replaces a pre-run cancel); a
        cancel on an idle agent with a driver scheduled is a pre-run cancel; a halting
        driver excuses what was owed as it *starts*: its own idle notification is checked."""
        if event == "send" and args[self._wake]:
            store[self._prerun] = False
            if not store[self._closing] and not (self._shut is not None and store[self._shut]):
                store[self._owed] = True
        elif event == "cancel" and store[self._phase] == "idle" and store[self._scheduled]:
            store[self._prerun] = True
        elif event == "halt":
            store[self._owed] = False

    def after(self, store: Store, instance: int, event: str, args: Args) -> None:
        """The driver's start ends a pre-run cancel's window. A ``keep_inbox`` cancel parks,
        and disposal or the hosting activation's shut excuses, whatever was owed when it
        *finishes*, so work a cancel-requested observer queues inside that cancel is parked
        with the rest (pre-abort, D4)."""
        if event == "start":
            store[self._prerun] = False
        if (event == "cancel" and args[self._keep_inbox]) or event in ("dispose", "shut"):
            store[self._owed] = False

    def effect(self, store: Store, instance: int, name: str, values: Args) -> None:
        """Discarding the inbox, or a claim or a removal that leaves nothing pending, settles
        what was owed, before it is observed: a wake a listener sends inside it is owed again.
        A claim takes one next-turn message and its row has already set ``pending`` to what is
        left: work left over stays owed until a later claim takes it."""
        if name == "clear_inbox" or (name in _CLAIMS and not store[self._pending]):
            store[self._owed] = False

    def wire(
        self, store: Store, instance: int, name: str, values: Args, target: int | None
    ) -> Sequence[Reaction]:
        return ()


def agent_engine(model: Model, *, interpreted: bool = False) -> Engine:
    """The composition of an ``agent`` model, ready to explore: compiled unless
    ``interpreted`` (the reference the compiled engine is tested against)."""
    wiring = AgentWiring(model)
    return Engine(model.name, wiring) if interpreted else CompiledEngine(model.name, wiring)
