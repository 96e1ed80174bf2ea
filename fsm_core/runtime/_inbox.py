"""Messages and the agent's inbox: two lanes, every message ending claimed or discarded."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, final

__all__ = ["Inbox", "Lane", "UserMessage"]

Lane = Literal["next_turn", "next_step"]
"""``next_turn`` waits for a turn to claim it; ``next_step`` steers the running turn."""


@final
@dataclass(frozen=True, slots=True)
class UserMessage:
    id: str
    text: str


@final
class Inbox:
    """Queued work of one agent. The agent changes it only through its table's effects.

    Users see it as ``agent.inbox``: the two lanes, ``pending``, and :meth:`remove`, which
    goes through the agent so the table learns what is left.
    """

    def __init__(self, remove: Callable[[str], bool]) -> None:
        self._lanes: dict[Lane, deque[UserMessage]] = {"next_turn": deque(), "next_step": deque()}
        # The ids queued in either lane: admission refuses a duplicate id in O(1), so a parent
        # receiving thousands of settlement notices does not rescan its whole inbox each time.
        self._ids: set[str] = set()
        self._remove = remove

    @property
    def next_turn(self) -> tuple[UserMessage, ...]:
        return tuple(self._lanes["next_turn"])

    @property
    def next_step(self) -> tuple[UserMessage, ...]:
        return tuple(self._lanes["next_step"])

    @property
    def pending(self) -> bool:
        return bool(self._lanes["next_turn"] or self._lanes["next_step"])

    def remove(self, message_id: str) -> bool:
        """Remove a queued message by id; True if it was there (it then ends discarded)."""
        return self._remove(message_id)

    def _holds(self, message_id: str) -> bool:
        return message_id in self._ids

    # --- used by the agent's effects ---------------------------------------------------------

    def _insert(self, message: UserMessage, lane: Lane) -> None:
        self._lanes[lane].append(message)
        self._ids.add(message.id)

    def _take(self, message_id: str) -> UserMessage | None:
        if message_id not in self._ids:
            return None
        self._ids.discard(message_id)
        for lane in self._lanes.values():
            for message in lane:
                if message.id == message_id:
                    lane.remove(message)
                    return message
        return None

    def _clear(self) -> list[UserMessage]:
        out = [*self._lanes["next_step"], *self._lanes["next_turn"]]
        for lane in self._lanes.values():
            lane.clear()
        self._ids.clear()
        return out

    def _claim(self) -> list[UserMessage]:
        """A turn's claim: every steering message, then the first next-turn message; later
        next-turn messages stay queued for the next turn."""
        out = list(self._lanes["next_step"])
        self._lanes["next_step"].clear()
        if self._lanes["next_turn"]:
            out.append(self._lanes["next_turn"].popleft())
        self._ids.difference_update(m.id for m in out)
        return out

    def _claim_steering(self) -> list[UserMessage]:
        out = list(self._lanes["next_step"])
        self._lanes["next_step"].clear()
        self._ids.difference_update(m.id for m in out)
        return out

    def __repr__(self) -> str:
        return f"<Inbox next_turn={len(self.next_turn)} next_step={len(self.next_step)}>"
