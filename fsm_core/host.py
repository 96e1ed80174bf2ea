"""Host a live agent's (or activation's) control state: the compiled table fires, ``transitions``
answers questions about it.

A :class:`HostedMachine` is the control state of one agent, built from a compiled table.
:meth:`~HostedMachine.fire` runs the table's rows in place on the agent's store: it chooses the
row as :meth:`Machine.select` does, moves the state and performs the effects as the row
reaches them, as :meth:`Machine.execute` does. It runs them as the straight-line code the
checker generates from the same syntax trees (:func:`fsm_core.table._codegen.compile_rows`,
built once per table on first use: every state variable and argument a row reads is read
when the row reaches it, so a listener that re-enters is seen), because every table event
an agent fires goes through here and the interpreter's closures cost several times more::

    hosted = HostedMachine(load_spec().machines["agent"])
    hosted.fire("send", wake=True, lane="next_turn")  # [enqueue(next_turn), schedule_driver()]

You introspect it as you would a ``transitions`` model: ``hosted.state``,
``hosted.get_triggers("idle")``, ``hosted.may_trigger("cancel", cause="user", keep_inbox=False)``.
Those answers come from one ``transitions.Machine`` per compiled table, built on first use and
shared by every hosted machine of that table (``transitions`` keeps no per-model state of its
own: each hosted machine passes itself as the model), so an agent that is never introspected
costs no ``transitions`` objects, and a thousand agents of one table share one set.

How a table becomes a ``transitions`` machine:

- one transition per (row, source state), added in table order, so ``transitions`` tries them in
  the order :meth:`Machine.select` does. Its one condition is the row's compiled guard, evaluated
  on the hosted machine's live store and the event's keyword arguments;
- a row with a target gets ``dest=row.target``; a row that stays is an internal transition
  (``dest=None``): ``transitions`` neither touches the state nor runs exit/enter callbacks;
- the ``after`` callback runs the row's effects, in order, on the live store (``transitions``
  has already moved the state, as :meth:`Machine.execute` does first);
- a ``reject`` row raises :class:`Rejected` with its reason from its ``before`` callback;
- an ``[[ignored]]`` pair is an internal transition with no condition and no callbacks;
- an ``[[rejected]]`` pair gets no transition: to ``transitions`` the event is not a trigger of
  that state (``get_triggers`` leaves it out), and the hosted machine raises ``Rejected`` with
  the table's reason;
- a handled pair where no condition passes raises :class:`NotEnabled` with the interpreter's
  message.

:meth:`~HostedMachine.trigger` fires through that machine instead of the generated rows. Nothing in
the runtime uses it: it is how the differential test (``tests/test_host.py``) proves that what
``transitions`` answers is what :meth:`~HostedMachine.fire` does (the same row, target, effects
in order, and refusals, on every state, event and argument tuple of both tables).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import NoReturn, cast, final

from transitions import EventData, MachineError
from transitions import Machine as TransitionsMachine

from fsm_core._errors import FsmError, NotEnabled, Rejected, TransitionError
from fsm_core.table import Effect, Machine, State, Step
from fsm_core.table._codegen import compile_predicates, compile_rows
from fsm_core.table._expr import Value
from fsm_core.table._machine import CompiledRow

__all__ = ["HostedMachine"]


@final
class _Frame:
    """What one :meth:`HostedMachine.trigger` call saw: the row that ran and its effects.

    ``claimed`` is True once the row has taken this frame; a nested trigger pushes a frame of
    its own, so each call collects only its own row's effects. (:meth:`HostedMachine.fire`
    needs none: its loop holds its row and effects.)
    """

    __slots__ = ("claimed", "effects", "row")

    def __init__(self) -> None:
        self.claimed = False
        self.row: str | None = None
        self.effects: list[Effect] = []


@final
class _Guard:
    """A row's compiled guard as a ``transitions`` condition, read on the model's store."""

    __slots__ = ("_row",)

    def __init__(self, row: CompiledRow) -> None:
        self._row = row

    def __call__(self, data: EventData) -> bool:
        hosted = data.model
        assert isinstance(hosted, HostedMachine)
        return bool(self._row.guard(hosted._store, hosted._arguments(self._row.row.event, data)))

    def __repr__(self) -> str:
        return f"<guard of {self._row.row.id}: {self._row.row.guard_text or 'true'}>"


@final
class _Effects:
    """A row's effects as a ``transitions`` ``after`` callback, run on the model's store."""

    __slots__ = ("_row",)

    def __init__(self, row: CompiledRow) -> None:
        self._row = row

    def __call__(self, data: EventData) -> None:
        hosted = data.model
        assert isinstance(hosted, HostedMachine)
        args = hosted._arguments(self._row.row.event, data)
        hosted.spec.run_effects(self._row, hosted._store, args, hosted._performer(self._row))

    def __repr__(self) -> str:
        return f"<effects of {self._row.row.id}>"


@final
class _Refuse:
    """A ``before`` callback that refuses the event with the table's reason."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __call__(self, data: EventData) -> None:
        raise Rejected(self.reason)

    def __repr__(self) -> str:
        return f"<refuse: {self.reason}>"


_SHARED: weakref.WeakKeyDictionary[Machine, TransitionsMachine] = weakref.WeakKeyDictionary()
"""The one ``transitions`` machine of each compiled table, built on first use."""

_Test = Callable[[Sequence[Value]], str | None]
"""A generated test of one named definition: None iff it holds."""


@final
class _Code:
    """One table's generated code, shared by its hosted machines: every row, every effect
    performed (a row stops at each effect so the hosted machine performs it, then resumes it),
    and the named definitions as they are asked for."""

    __slots__ = ("rows", "spec", "tests")

    def __init__(self, spec: Machine) -> None:
        self.spec = spec
        self.rows = compile_rows(spec, spec.table.effects)
        self.tests: dict[str, _Test] = {}

    def test(self, definition: str) -> _Test:
        """The generated test of ``definition``; KeyError if the table defines no such name."""
        expr = self.spec.table.defs[definition].expr
        # The generated code reads positions only, so a hosted machine's list store will do.
        test = cast(_Test, compile_predicates(self.spec, {definition: expr}))
        self.tests[definition] = test
        return test


_CODE: weakref.WeakKeyDictionary[Machine, _Code] = weakref.WeakKeyDictionary()
"""Each compiled table's generated code, built on first use."""


_EFFECTS: dict[tuple[str, tuple[Value, ...]], Effect] = {}
"""One :class:`Effect` per name and arguments: effects are immutable values, and a row's
effects take few distinct arguments, so hosted machines hand out the same objects instead of
building one per effect performed."""

_EFFECTS_KEPT = 1 << 12


def _effect(key: tuple[str, tuple[Value, ...]]) -> Effect:
    """A new :class:`Effect` ``name(*values)`` for ``key = (name, values)``, kept to be shared
    (:data:`_EFFECTS`) while there is room."""
    effect = Effect(*key)
    if len(_EFFECTS) < _EFFECTS_KEPT:
        _EFFECTS[key] = effect
    return effect


def _transitions_of(spec: Machine) -> TransitionsMachine:
    """The ``transitions`` machine of ``spec``, shared by every hosted machine of that table."""
    machine = _SHARED.get(spec)
    if machine is not None:
        return machine
    # No model is registered: ``add_model`` would set trigger methods (``send``, ``may_send``,
    # ...) onto it with setattr. Each hosted machine passes itself to the trigger as the model.
    machine = TransitionsMachine(
        model=None,
        states=list(spec.table.state_names),
        initial=spec.table.initial,
        auto_transitions=False,
        send_event=True,
        queued=False,
        ignore_invalid_triggers=False,
        name=spec.name,
    )
    for compiled in spec.rows.values():
        row = compiled.row
        for source in row.sources:
            if row.reject is not None:
                machine.add_transition(
                    row.event,
                    source,
                    None,
                    conditions=[_Guard(compiled)],
                    before=[_Refuse(row.reject)],
                )
            else:
                machine.add_transition(
                    row.event,
                    source,
                    row.target,
                    conditions=[_Guard(compiled)],
                    after=[_Effects(compiled)],
                )
    for rule in spec.table.pair_rules:
        if rule.kind == "ignored":
            for event in rule.events:
                machine.add_transition(event, list(rule.states), None)
    _SHARED[spec] = machine
    return machine


@final
class HostedMachine:
    """One live control state (an agent's or an activation's), fired by the compiled table.

    The state lives in a mutable store in :attr:`Machine.names` order: slot 0 is the state
    variable (what ``transitions`` reads and writes as :attr:`state`), then the table's
    variables. :meth:`fire` fires an event and returns the effects its row performed::

        hosted = HostedMachine(agent, perform=runtime.perform)
        hosted.fire("cancel", cause="user", keep_inbox=False)

    ``perform`` receives each effect as the row reaches it. It may fire again, re-entrantly: the
    nested event runs at once, on the live store, and the outer row's later effects see what it
    changed (a ``{ when, do }`` block tests its condition when it is reached). The nested
    ``fire`` returns its own row's effects; they are *not* part of the outer call's list.

    A caller may pass one positional ``context`` with an event: whatever the event is about
    that the table does not model (the message a ``send`` enqueues, the cause a ``cancel``
    requests). While that call's row runs, :attr:`context` returns it to ``perform``; a nested
    ``fire`` has its own, and the outer one's is back once the nested call returns::

        hosted.fire("send", message, wake=True, lane="next_turn")
        # in perform, for enqueue(next_turn): hosted.context is message

    ``transitions`` reads and sets :attr:`state` on this object, but it is not registered as
    the machine's model: registering would set trigger methods (``send()``, ``may_send()``, ...)
    onto it with setattr, and their ``may_`` answers would count refusals as possible.
    """

    def __init__(self, spec: Machine, perform: Callable[[Effect], None] | None = None) -> None:
        self.spec = spec
        # Invariant: len(_store) == len(spec.names); _store[0] is a state of the table.
        self._store: list[Value] = list(spec.initial)
        self._perform = perform
        # Invariant: one frame per trigger in progress, innermost last.
        self._frames: list[_Frame] = []
        # Invariant: one context per fire or trigger in progress, innermost last.
        self._contexts: list[object] = []
        code = _CODE.get(spec) or _CODE.setdefault(spec, _Code(spec))
        self._code = code.rows
        self._tests = code.tests

    @property
    def machine(self) -> TransitionsMachine:
        """The table's ``transitions`` machine, shared by every hosted machine of the same table."""
        return _transitions_of(self.spec)

    # --- the model ------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """The state variable (``phase`` for the agent), as ``transitions`` sees it."""
        return str(self._store[0])

    @state.setter
    def state(self, value: str) -> None:
        if value not in self.spec.table.state_names:
            raise ValueError(f"{self.spec.name} has no state {value!r}")
        self._store[0] = value

    @property
    def values(self) -> dict[str, Value]:
        """The whole state as ``{name: value}``, state variable first (a copy)."""
        return self.spec.describe(self._store)

    def get(self, name: str) -> Value:
        """One variable's current value (``hosted.get("holder")``), without copying the state."""
        return self.spec.get(self._store, name)

    def holds(self, definition: str) -> bool:
        """True iff the table's named definition (e.g. ``quiescent``) holds now."""
        test = self._tests.get(definition) or _CODE[self.spec].test(definition)
        return test(self._store) is None

    def takes(self, event: str, **kwargs: Value) -> bool:
        """True iff a row of the table would run ``event`` now (not an ignore, not a refusal)."""
        args = self.spec.arguments(event, **kwargs)
        return self._code.lookups[event](self._store, args) >= 0

    def unmet(self, effect: Effect) -> bool:
        """True iff ``effect``'s contract (its ``requires``) does not hold now."""
        return self.spec.unmet(effect.name, self._store, effect.args)

    @property
    def context(self) -> object:
        """The ``context`` of the innermost :meth:`fire` in progress; None outside any fire.

        Read it from ``perform``: there the innermost call is the one whose row reached the
        effect (a nested fire's frame is gone once it returns).
        """
        return self._contexts[-1] if self._contexts else None

    def snapshot(self) -> State:
        """The whole state as a tuple in :attr:`Machine.names` order."""
        return tuple(self._store)

    def load(self, state: Sequence[Value]) -> None:
        """Replace the whole state, e.g. to start a test from a chosen valuation."""
        table = self.spec.table
        if len(state) != len(self.spec.names):
            raise ValueError(
                f"{self.spec.name}: a state has {len(self.spec.names)} values "
                f"({', '.join(self.spec.names)}), got {len(state)}"
            )
        if state[0] not in table.state_names:
            raise ValueError(f"{self.spec.name} has no state {state[0]!r}")
        for var, value in zip(table.variables, state[1:], strict=True):
            if value not in var.type.values:
                raise ValueError(
                    f"{self.spec.name}: {var.name}={value!r} is not a value of {var.type}"
                )
        self._store[:] = state

    # --- firing ---------------------------------------------------------------------------------

    def fire(self, event: str, context: object = None, /, **kwargs: Value) -> list[Effect]:
        """Fire ``event`` and return the effects its row performed, in order.

        ``context`` is what :attr:`context` returns while this call runs. It is positional so
        that it never collides with an event parameter of the same name.

        Raises :class:`Rejected` when the table refuses the event here and :class:`NotEnabled`
        when no row is enabled; the state is then unchanged. An event the table ignores here
        returns ``[]``.
        """
        effects: list[Effect] = []
        self._run(event, context, self.spec.arguments(event, **kwargs), effects)
        return effects

    def step(self, event: str, context: object = None, /, **kwargs: Value) -> Step:
        """Fire ``event`` and describe the step as :meth:`Machine.fire_args` does.

        ``row`` is the row that ran (None when the table ignores the event here). ``target`` is
        the state when this call returns, so it includes whatever nested fires from ``perform``
        changed.
        """
        args = self.spec.arguments(event, **kwargs)
        source = tuple(self._store)
        effects: list[Effect] = []
        row = self._run(event, context, args, effects)
        if row is None:
            return Step(event, args, None, source, source, ())
        return Step(event, args, row, source, tuple(self._store), tuple(effects))

    def _run(
        self, event: str, context: object, args: tuple[Value, ...], effects: list[Effect]
    ) -> str | None:
        """Select the row and execute it in place, appending its effects to ``effects``; the
        row's id, or None if the table ignores the event here."""
        store = self._store
        found = self._code.lookups[event](store, args)
        if found < 0:  # ignored here, or refused: the interpreter tells which, and why
            if self.spec.select(store, event, args) is None:  # raises Rejected or NotEnabled
                return None
            raise AssertionError(f"{self.spec.name}: the code refused {event}, select did not")
        row = self._code.rows[found]
        contexts = self._contexts
        contexts.append(context)
        try:
            # Segment 0 moves to the target and runs up to the first effect; each effect
            # performed, its site's segment runs the rest of the row up to the next one. A
            # nested fire (from perform) pushes and pops its own context in between.
            segments, sites, perform = row.segments, row.sites, self._perform
            stop = segments[0](store, args)
            while stop is not None:
                site = sites[stop[0]]
                key = (site.effect, stop[1])
                effect = _EFFECTS.get(key) or _effect(key)
                effects.append(effect)
                if perform is not None:
                    perform(effect)
                stop = segments[site.resume](store, args)
        finally:
            contexts.pop()
        return row.id

    def trigger(self, event: str, context: object = None, /, **kwargs: Value) -> Step:
        """:meth:`step` through the shared ``transitions`` machine's trigger machinery.

        The same answer as :meth:`step`, slower; it exists so that a test can prove that
        ``transitions``, which :meth:`get_triggers` and :meth:`may_trigger` consult, agrees with
        the table as :meth:`fire` runs it. A disagreement raises :class:`FsmError`.
        """
        args = self.spec.arguments(event, **kwargs)
        source = self.snapshot()
        # transitions knows an event once some state has a transition for it.
        trigger = self.machine.events.get(event)
        frame = _Frame()
        self._frames.append(frame)
        self._contexts.append(context)
        handled, refused = False, trigger is None
        try:
            if trigger is not None:
                handled = trigger.trigger(self, **kwargs)
        except MachineError:
            if trigger is None or source[0] in trigger.transitions:
                raise  # not about this event: a nested trigger failed
            # No transition from this state: the table lists the pair [[rejected]].
            refused = True
        finally:
            self._contexts.pop()
            popped = self._frames.pop()
            assert popped is frame
        if not handled:
            self._explain(source, event, args, Rejected if refused else NotEnabled)
        return Step(event, args, frame.row, source, self.snapshot(), tuple(frame.effects))

    def _performer(self, row: CompiledRow) -> Callable[[str, tuple[Value, ...]], None]:
        """What ``row``'s effects are performed through on the ``transitions`` path: recorded
        in the frame of the trigger that reached it, then handed to ``perform``.

        That frame is the innermost one no row has taken yet: a nested trigger pushes its own
        before its row runs. A trigger made straight on the ``transitions`` machine has none.
        """
        frames = self._frames
        frame = frames[-1] if frames and not frames[-1].claimed else None
        if frame is not None:
            frame.claimed = True
            frame.row = row.row.id
        effects = None if frame is None else frame.effects
        listener = self._perform

        def perform(name: str, values: tuple[Value, ...]) -> None:
            effect = Effect(name, values)
            if effects is not None:
                effects.append(effect)
            if listener is not None:
                listener(effect)

        return perform

    def _explain(
        self,
        source: State,
        event: str,
        args: tuple[Value, ...],
        expected: type[TransitionError],
    ) -> NoReturn:
        """Raise the interpreter's error for an event ``transitions`` found no transition for."""
        try:
            chosen = self.spec.select(source, event, args)
        except expected:
            raise
        except TransitionError as e:
            raise FsmError(
                f"{self.spec.name}: the hosted machine and the table disagree on {event} in "
                f"{self.spec.format_state(source)}: transitions expected {expected.__name__}, "
                f"the table raised {type(e).__name__}: {e}"
            ) from e
        row = "ignores it" if chosen is None else f"chooses row {chosen.row.id!r}"
        raise FsmError(
            f"{self.spec.name}: the hosted machine and the table disagree on {event} in "
            f"{self.spec.format_state(source)}: transitions found no transition, the table {row}"
        )

    def _arguments(self, event: str, data: EventData) -> tuple[Value, ...]:
        if data.args:
            raise TypeError(f"{self.spec.name}.{event} takes keyword arguments only")
        return self.spec.arguments(event, **data.kwargs)

    # --- introspection --------------------------------------------------------------------------

    def get_triggers(self, *states: str) -> list[str]:
        """The events that are triggers of ``states`` (default: the current state).

        An event the table rejects in a state is not a trigger there; one it ignores is.
        """
        return self.machine.get_triggers(*(states or (self.state,)))

    def may_trigger(self, event: str, **kwargs: Value) -> bool:
        """True iff :meth:`fire` would succeed now: a row runs, or the table ignores the event.

        Unlike ``transitions``' own ``may_trigger``, a refusal (a ``reject`` row whose guard
        holds) answers False: its condition passes, but firing raises :class:`Rejected`.
        """
        self.spec.arguments(event, **kwargs)
        machine = self.machine
        trigger = machine.events.get(event)
        candidates = None if trigger is None else trigger.transitions.get(self.state)
        if trigger is None or candidates is None:
            return False
        data = EventData(machine.get_state(self.state), trigger, machine, self, (), dict(kwargs))
        for transition in candidates:
            if all(condition.check(data) for condition in transition.conditions):
                return not any(isinstance(cb, _Refuse) for cb in transition.before)
        return False

    def __repr__(self) -> str:
        return f"<HostedMachine {self.spec.name} {self.spec.format_state(self._store)}>"
