"""A test harness that drives one compiled table the way the runtime does.

It keeps a live store, runs rows in place with :meth:`Machine.execute`, records every effect
as it is reached, and lets a test install *reactions*: callbacks that run inside a notifying
effect and may fire more events re-entrantly, exactly as a synchronous listener does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fsm_core.table import Effect, Machine, State
from fsm_core.table._expr import Value

Reaction = Callable[["TableDriver", Effect], object]


@dataclass
class TableDriver:
    machine: Machine
    store: list[Value] = field(default_factory=list)
    log: list[Effect] = field(default_factory=list)
    rows: list[str | None] = field(default_factory=list)
    reactions: dict[str, list[Reaction]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.store:
            self.store = list(self.machine.initial)

    def fire(self, event: str, **kwargs: Value) -> str | None:
        """Fire ``event`` on the live store; return the row id (None when ignored)."""
        args = self.machine.arguments(event, **kwargs)
        row = self.machine.select(self.store, event, args)
        self.rows.append(row.row.id if row is not None else None)
        if row is not None:
            self.machine.execute(row, self.store, args, self._perform)
        return row.row.id if row is not None else None

    def on(self, effect: str, reaction: Reaction, *, once: bool = True) -> None:
        """Run ``reaction`` inside the next (or every) ``effect`` performed."""

        def wrapped(driver: TableDriver, e: Effect) -> object:
            if once:
                self.reactions[effect].remove(wrapped)
            return reaction(driver, e)

        self.reactions.setdefault(effect, []).append(wrapped)

    def _perform(self, name: str, args: tuple[Value, ...]) -> None:
        effect = Effect(name, args)
        self.log.append(effect)
        for reaction in list(self.reactions.get(name, ())):
            reaction(self, effect)

    def __getitem__(self, name: str) -> Value:
        return self.machine.get(self.store, name)

    @property
    def state(self) -> State:
        return tuple(self.store)

    def effects(self) -> list[str]:
        """The effects performed so far as text, then forget them."""
        out = [str(e) for e in self.log]
        self.log.clear()
        return out
