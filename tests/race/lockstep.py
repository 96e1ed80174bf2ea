"""Lockstep: record every table event a live machine fires, replay it on the interpreter.

A :class:`Recorder` wraps one :class:`~fsm_core.HostedMachine` (an agent's, an
activation's, or the activation registry's door): its ``fire`` and its ``perform``
callback. Each ``fire`` becomes a :class:`Fire` node; a ``fire`` made while one of its effects
runs (a listener re-entering inside a notification) becomes a child attached to that effect's
ordinal. A node records the effects the runtime performed, whether the call was refused
(``Rejected``, ``NotEnabled``), and for a root the runtime's state when it returned::

    recorder = Recorder(control)         # an agent's: its core's hosted machine
    oracle = Oracle(control.spec)
    ...                                  # the runtime runs
    oracle.follow(recorder.roots)        # replay every new root; raises on the first mismatch
    assert oracle.state == control.snapshot()

The :class:`Oracle` replays the same tree on the pure interpreter (``Machine.select`` and
``Machine.execute`` on a store of its own): the same rows, the same effects in the same order,
each child replayed inside the effect it happened in, the same refusals. So the runtime's control
state is the table's, step for step, re-entrant listeners included.

The recorder also watches the moments a listener can observe, each notifying effect and each
root's end, as the checker does: every state invariant holds there and no step invariant
(``unchanged ... while ...``) breaks between two of them. What it finds is in
:attr:`Recorder.problems`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fsm_core import Effect, HostedMachine, Machine, NotEnabled, Rejected, State
from fsm_core.table._expr import Value

__all__ = ["Fire", "LockstepError", "Oracle", "Recorder"]

Outcome = str
"""``ok``, ``rejected``, ``not-enabled``, ``raised <Type>``, or ``running`` while it runs."""


class LockstepError(AssertionError):
    """The runtime did something the table, replaying the same events, does not."""


def _show(value: Value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


@dataclass(slots=True, eq=False)
class Fire:
    """One ``fire`` call on the hosted machine and what it did.

    ``at`` is the ordinal (in the parent's ``effects``) of the effect during which this call
    was made; -1 for a root, made outside any other call.
    """

    event: str
    kwargs: dict[str, Value]
    at: int
    effects: list[Effect] = field(default_factory=list)
    children: list[Fire] = field(default_factory=list)
    outcome: Outcome = "running"
    after: State | None = None
    """The runtime's state when this call returned."""

    def __str__(self) -> str:
        args = ", ".join(f"{k}={_show(v)}" for k, v in self.kwargs.items())
        return f"{self.event}({args})"

    def walk(self) -> list[Fire]:
        """This node and every node under it, in call order."""
        out = [self]
        for child in self.children:
            out += child.walk()
        return out


class Recorder:
    """Records every ``fire`` of ``hosted`` as a tree of :class:`Fire` nodes."""

    def __init__(
        self, hosted: HostedMachine, refused: Callable[[Fire], None] | None = None
    ) -> None:
        self.hosted = hosted
        self._refused = refused
        """Called with each root call the table refused (``Rejected``), once it returned: the
        caller's refusal follows it, so a test can match the two."""
        self.spec = hosted.spec
        self.roots: list[Fire] = []
        self.problems: list[str] = []
        """Invariants broken at a moment a listener could observe, in the order found."""
        self._stack: list[Fire] = []
        self._notifying = frozenset(n for n, e in self.spec.table.effects.items() if e.notifies)
        self._observed: State = hosted.snapshot()
        self._fire = hosted.fire
        perform = hosted._perform
        if perform is None:
            raise TypeError("Recorder: the hosted machine has no perform callback to wrap")
        self._original_perform: Callable[[Effect], None] = perform
        hosted.fire = self._record_fire  # type: ignore[method-assign]
        hosted._perform = self._record_effect

    @property
    def current(self) -> Fire | None:
        """The innermost call in progress, if any."""
        return self._stack[-1] if self._stack else None

    @property
    def busy(self) -> bool:
        return bool(self._stack)

    def _record_fire(self, event: str, context: object = None, /, **kwargs: Value) -> list[Effect]:
        # The fire's context (the message sent, the cause requested) is passed on, not recorded:
        # the table never sees it, so the oracle's replay does not need it.
        parent = self.current
        node = Fire(event, dict(kwargs), -1 if parent is None else len(parent.effects) - 1)
        (self.roots if parent is None else parent.children).append(node)
        self._stack.append(node)
        try:
            effects = self._fire(event, context, **kwargs)
        except Rejected:
            node.outcome = "rejected"
            raise
        except NotEnabled:
            node.outcome = "not-enabled"
            raise
        except BaseException as error:
            node.outcome = f"raised {type(error).__name__}"
            raise
        else:
            node.outcome = "ok"
            return effects
        finally:
            popped = self._stack.pop()
            assert popped is node
            node.after = self.hosted.snapshot()
            if parent is None:
                self._observe(f"after {node}")
                if node.outcome == "rejected" and self._refused is not None:
                    self._refused(node)

    def _record_effect(self, effect: Effect) -> None:
        node = self.current
        if node is None:
            self.problems.append(f"{effect} was performed outside any fire()")
        else:
            node.effects.append(effect)
            if effect.name in self._notifying:
                self._observe(f"at {effect} of {node}")
        self._original_perform(effect)

    def _observe(self, where: str) -> None:
        now = self.hosted.snapshot()
        shown = self.spec.format_state(now)
        for name in self.spec.unstable(self._observed, now):
            self.problems.append(
                f"step invariant {name} broke {where}: "
                f"{self.spec.format_state(self._observed)} -> {shown}"
            )
        for name in self.spec.violated(now):
            self.problems.append(f"invariant {name} fails {where}: {shown}")
        self._observed = now


class Oracle:
    """The pure interpreter on a store of its own, fed the recorder's tree."""

    def __init__(self, spec: Machine) -> None:
        self.spec = spec
        self._store: list[Value] = list(spec.initial)
        self.replayed = 0
        """How many roots have been replayed."""
        self.rows: list[str] = []
        """Every row the replay ran, in order, nested ones included."""
        self.refusals: dict[Fire, str] = {}
        """Each replayed call the table refused, with the table's refusal text (``CODE: why``
        for a row's ``reject``): what the runtime's caller must be told, by the table's word."""

    @property
    def state(self) -> State:
        return tuple(self._store)

    def follow(self, roots: Sequence[Fire]) -> None:
        """Replay every finished root not replayed yet; raise :class:`LockstepError` on the
        first difference, naming the root, its place and both sides."""
        while self.replayed < len(roots):
            root = roots[self.replayed]
            if root.outcome == "running":
                return
            number = self.replayed + 1
            self._replay(root, f"table event #{number}")
            if root.after is not None and self.state != root.after:
                raise LockstepError(
                    f"table event #{number} {root}: the runtime is in "
                    f"{self.spec.format_state(root.after)}, the table in "
                    f"{self.spec.format_state(self.state)}"
                )
            self.replayed += 1

    def _replay(self, node: Fire, where: str) -> None:
        spec = self.spec
        before = spec.format_state(self.state)

        def fail(what: str) -> LockstepError:
            return LockstepError(f"{where} {node} in {before}: {what}")

        if node.outcome.startswith("raised"):
            raise fail(f"the runtime's fire {node.outcome}")
        args = spec.arguments(node.event, **node.kwargs)
        try:
            row = spec.select(self._store, node.event, args)
        except Rejected as refused:
            if node.outcome != "rejected":
                raise fail(f"the table rejects it, the runtime's fire was {node.outcome}") from None
            self.refusals[node] = str(refused)
            return
        except NotEnabled:
            if node.outcome != "not-enabled":
                raise fail(f"no row is enabled, the runtime's fire was {node.outcome}") from None
            return
        if node.outcome != "ok":
            chosen = "ignores it" if row is None else f"runs row {row.row.id}"
            raise fail(f"the table {chosen}, the runtime's fire was {node.outcome}")
        children: dict[int, list[Fire]] = {}
        for child in node.children:
            children.setdefault(child.at, []).append(child)
        performed: list[Effect] = []

        def perform(name: str, values: tuple[Value, ...]) -> None:
            effect = Effect(name, values)
            ordinal = len(performed)
            performed.append(effect)
            runtime = node.effects[ordinal] if ordinal < len(node.effects) else None
            if runtime != effect:
                did = "nothing more" if runtime is None else str(runtime)
                raise fail(f"effect {ordinal + 1}: the table performs {effect}, the runtime {did}")
            for k, child in enumerate(children.get(ordinal, ())):
                self._replay(child, f"{where} > inside {effect} #{k + 1}")

        if row is not None:
            self.rows.append(row.row.id)
            spec.execute(row, self._store, args, perform)
        if len(performed) != len(node.effects):
            extra = ", ".join(str(e) for e in node.effects[len(performed) :])
            raise fail(f"the runtime also performed {extra}")
        stray = [c for c in node.children if not 0 <= c.at < len(performed)]
        if stray:
            raise fail(f"{stray[0]} fired outside any of its effects")
