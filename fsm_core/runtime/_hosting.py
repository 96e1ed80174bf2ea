"""How the runtime hosts a table: one set of rules for the agent, each activation and the door.

An owner of one live table (the agent's core, an activation's node, the registry's door)
subclasses :class:`Hosted`, declares a handler for each of the table's effects with
:func:`performs`, and registers the class with :func:`hosts`::

    @hosts("agent")
    class AgentCore(Hosted[AgentContext]):
        @performs("enqueue")
        def _enqueue(self, lane: str) -> None:
            message = self._about(UserMessage)  # the fire's context: the message sent
            ...

    core._host(spec)   # refused here if a handler is missing or extra, or takes other parameters
    core._fire("send", message, wake=True, lane="next_turn")

:func:`hosts` collects the class's handlers once, when the class is built (as Hypothesis
collects a state machine's rules); :meth:`Hosted._host` checks them against the table it is
given, once per class and table: a table effect without a handler, a handler of no effect of
the table, or a handler whose parameters are not the effect's (by name, in order), raises
:class:`FsmError` naming the table's file and the effect, before anything runs.

The rules every hosted table follows, in this order:

- :meth:`Hosted._fire` fires the event on the owner's :class:`~fsm_core.HostedMachine`
  (``self.control``); the machine performs the row's effects as the row reaches them, in the
  table's order, each by its declared handler, looked up on the owner when performed (so a
  test may replace one on an instance);
- a handler may fire again (a listener re-enters): the nested row runs at once on the live
  store, with its own context (:meth:`Hosted._about` reads the innermost fire's);
- from the first re-entry of a :class:`Scope` until its outermost fire returns, each effect's
  ``requires`` is checked as it runs (before any re-entry, the loader's proof covers the row);
- a handler's ``Exception`` is the runtime's own fault and propagates at once; a listener's
  ``BaseException`` that is no ``Exception`` is *held* (the first one wins) until the
  outermost fire of the scope has returned, then raised, so no row stops half-way. When the
  outermost fire itself raises, that is what its caller sees, and the held one is dropped.

A :class:`Scope` is what "outermost" means: every host sharing one scope nests in one count.
Each agent has its own; all the activations of a registry share one (so a row of one
activation that fires another's is one nesting), and the scope's ``settle`` runs once the
outermost fire returned, before a held exception is raised (the registry's cascade of
child disposals).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast, final

from fsm_core._errors import FsmError
from fsm_core.host import HostedMachine
from fsm_core.table import Effect, Machine
from fsm_core.table._expr import Value

__all__ = ["Handler", "Hosted", "Scope", "check_handlers", "hosts", "performs"]

C = TypeVar("C")
"""The type of what a fire of the table carries beside its arguments (its context)."""

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., None])
H = TypeVar("H", bound="Hosted[Any]")


@dataclass(frozen=True, slots=True)
class Handler:
    """The method ``attr`` of a hosting class performs the table effect ``effect``, which it
    takes with the parameters ``params`` (the effect's, by name and in order)."""

    effect: str
    attr: str
    params: tuple[str, ...]


def performs(effect: str) -> Callable[[F], F]:
    """Declare the decorated method the handler of the table effect ``effect``.

    It takes the effect's parameters, named as the table names them; :func:`hosts` collects
    it when its class is built.
    """

    def declare(method: F) -> F:
        vars(method)["__performs__"] = effect
        return method

    return declare


def hosts(table: str) -> Callable[[type[H]], type[H]]:
    """Register a :class:`Hosted` subclass as the host of the table named ``table``: collect
    its :func:`performs` handlers, once, now (a method replaced later, on the class or an
    instance, is still the handler of its effect)."""

    def collect(cls: type[H]) -> type[H]:
        found: dict[str, Handler] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                effect = getattr(value, "__dict__", {}).get("__performs__")
                if effect is None:
                    continue
                if effect in found and found[effect].attr != attr:
                    raise FsmError(
                        f"{cls.__name__}: both {found[effect].attr} and {attr} perform {effect}"
                    )
                params = tuple(inspect.signature(value).parameters)[1:]
                found[effect] = Handler(effect, attr, params)
        cls._table = table
        cls._handlers = found
        cls._handles = {h.effect: h.attr for h in found.values()}
        return cls

    return collect


_ACCEPTED: weakref.WeakKeyDictionary[Machine, set[type[Any]]] = weakref.WeakKeyDictionary()
"""For each compiled table, the hosting classes whose handlers :func:`check_handlers` accepted."""


def check_handlers(cls: type[Hosted[Any]], spec: Machine) -> None:
    """Raise :class:`FsmError` unless ``cls``'s handlers are exactly ``spec``'s effects, with
    their parameters (checked once per class and table; :meth:`Hosted._host` calls it)."""
    accepted = _ACCEPTED.setdefault(spec, set())
    if cls in accepted:
        return
    file = spec.table.file
    if cls._table != spec.name:
        raise FsmError(f"{cls.__name__} hosts the {cls._table} table, not {file}'s {spec.name}")
    problems: list[str] = []
    for name, declared in spec.table.effects.items():
        params = tuple(p for p, _ in declared.params)
        handler = cls._handlers.get(name)
        if handler is None:
            problems.append(f"{name}({', '.join(params)}) has no handler in {cls.__name__}")
        elif handler.params != params:
            problems.append(
                f"{name} takes ({', '.join(params)}), but its handler {cls.__name__}."
                f"{handler.attr} takes ({', '.join(handler.params)})"
            )
    for name, handler in cls._handlers.items():
        if name not in spec.table.effects:
            problems.append(
                f"{cls.__name__}.{handler.attr} performs {name}, which the table does not declare"
            )
    if problems:
        raise FsmError(f"the runtime and {file} disagree on effects: " + "; ".join(problems))
    accepted.add(cls)


@final
class Scope:
    """One nesting of fires: the hosts sharing it count their fires together.

    ``settle``, if given, runs once the outermost fire returned (fires it makes count as part
    of that outermost one: they neither settle again nor raise the held exception).
    """

    __slots__ = ("depth", "held", "reentered", "settle", "settling")

    def __init__(self, settle: Callable[[], None] | None = None) -> None:
        self.depth = 0
        """How many fires of the scope's hosts are in progress (listeners nest them)."""
        self.reentered = False
        """True iff, since the outermost fire in progress began, another fire began inside it."""
        self.held: BaseException | None = None
        """A listener's uncontained BaseException, raised once the outermost fire returned."""
        self.settle = settle
        self.settling = False
        """True iff ``settle`` is running."""


class Hosted(Generic[C]):
    """The owner of one hosted table, fired with contexts of type ``C``.

    A subclass is registered with :func:`hosts` and calls :meth:`_host` once, in its
    constructor, before it fires anything.
    """

    _table: str
    """The name of the table the class hosts (set by :func:`hosts`)."""
    _handlers: Mapping[str, Handler]
    """Its handlers, by effect (set by :func:`hosts`)."""
    _handles: Mapping[str, str]
    """The attribute performing each effect (set by :func:`hosts`)."""

    control: HostedMachine
    """The hosted table; fired only through :meth:`_fire`."""
    _scope: Scope

    def _host(self, spec: Machine, scope: Scope | None = None) -> None:
        """Host ``spec`` on this instance, in ``scope`` (a fresh one if None); raises
        :class:`FsmError` unless this class's handlers are exactly the table's effects."""
        check_handlers(type(self), spec)
        self._scope = Scope() if scope is None else scope
        self.control = HostedMachine(spec, perform=self._perform)

    def _who(self) -> str:
        """How an error names this instance (``agent a1``, ``activation c1``)."""
        raise NotImplementedError

    def _fire(self, event: str, context: C | None = None, /, **args: Value) -> None:
        """Fire ``event`` with ``context``; a listener's held BaseException is raised once the
        scope's outermost fire (and its ``settle``) returned."""
        scope = self._scope
        scope.depth += 1
        if scope.depth > 1:
            scope.reentered = True
        try:
            self.control.fire(event, context, **args)
        except BaseException:
            if scope.depth == 1:
                scope.held = None  # the fire's own failure is the one to report
            raise
        finally:
            scope.depth -= 1
            if scope.depth == 0:
                scope.reentered = False
        if scope.depth or scope.settling:
            return
        if scope.settle is not None:
            scope.settling = True
            try:
                scope.settle()
            finally:
                scope.settling = False
        if scope.held is not None:
            held, scope.held = scope.held, None
            raise held

    def _perform(self, effect: Effect) -> None:
        scope = self._scope
        if scope.reentered and self.control.unmet(effect):
            spec = self.control.spec
            requires = spec.table.effects[effect.name].requires_text
            raise FsmError(
                f"{self._who()}: {effect} runs where its contract {requires!r} does not hold "
                f"({spec.format_state(self.control.snapshot())})"
            )
        try:
            getattr(self, self._handles[effect.name])(*effect.args)
        except Exception:
            raise  # a fault of the runtime itself, not of a listener
        except BaseException as error:
            # A listener raised what emit and the signal do not contain. The row must
            # complete, so it waits for the outermost fire to return.
            scope.held = scope.held or error

    def _about(self, kind: type[T]) -> T:
        """The innermost fire's context, which the effect being performed reads as a ``kind``."""
        context = self.control.context
        if not isinstance(context, kind):
            raise FsmError(
                f"{self._who()}: an effect read the fire's context as {kind.__name__}, "
                f"but the fire gave {type(context).__name__}"
            )
        return context

    @property
    def _context(self) -> C:
        """The innermost fire's context, as this table's fires give it."""
        return cast(C, self.control.context)
