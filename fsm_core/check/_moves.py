"""What one step of a model is: an event fired on an instance, plus listeners' reactions."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import final

from fsm_core.table._expr import Value, show


@final
@dataclass(frozen=True, slots=True)
class Move:
    """One labelled transition of a model.

    ``row`` is the table row that handled the event (None when the table ignores it there).
    ``inside`` lists what listeners did re-entrantly: ``(effect, move)`` pairs, in the order the
    notifying effects ran. ``stopped`` names the notifying effect (``publish_status(idle)``)
    at which this move was cut short because a property broke there; empty when it ran out.
    ``target`` names the instance the call named when the model routed it to ``instance``
    (an admission the environment asks below node ``a.1``, which the door takes first).
    """

    event: str
    args: tuple[tuple[str, Value], ...]
    row: str | None
    instance: str = ""
    inside: tuple[tuple[str, Move], ...] = ()
    stopped: str = ""
    target: str = ""

    def call(self) -> str:
        args = ", ".join(f"{k}={show(v)}" for k, v in self.args)
        where = f"{self.instance}." if self.instance else ""
        aimed = f" for {self.target}" if self.target else ""
        return f"{where}{self.event}({args}){aimed}"

    def __str__(self) -> str:
        text = f"{self.call()} -> {self.row or '(ignored)'}"
        if self.stopped:
            text += f" (stopped at {self.stopped})"
        for effect, nested in self.inside:
            text += f" [inside {effect}: {nested}]"
        return text

    def rows(self) -> Iterator[str]:
        """Every row this move took, its reactions' included."""
        if self.row is not None:
            yield self.row
        for _, nested in self.inside:
            yield from nested.rows()


class Labels:
    """Moves numbered by first appearance: the explorer stores the numbers, not the moves."""

    def __init__(self) -> None:
        self.moves: list[Move] = []
        self._index: dict[Move, int] = {}

    def index(self, move: Move) -> int:
        found = self._index.get(move)
        if found is None:
            found = self._index[move] = len(self.moves)
            self.moves.append(move)
        return found
