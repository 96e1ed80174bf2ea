"""Event payloads: one object per event, agent-scoped ones carrying ``agent`` (and the turn's
``signal`` where the event belongs to a turn).

Notifications (``EventBus.emit``): ``agent/status``, ``agent/cancel-requested``,
``inbox/inserted``, ``inbox/discarded``, ``inbox/claimed``, ``turn/start``, ``turn/end``,
``step/start``, ``step/end``. Waterfalls (``EventBus.waterfall``, listeners
``async (payload, next)``): ``agent/pre-step``, ``agent/assemble``, ``agent/request-error``,
``agent/tool-approval``, ``agent/turn-stopping``, ``session/flush``.

Carrying the :class:`Agent` itself is safe: the public agent originates (send, cancel, wait,
read) and cannot fire a table event or load a state; that plumbing stays in its private core.

``turn/end`` and ``session/flush`` carry no signal: the holder is cleared before turn/end is
published, so neither its observers nor the flush have any cancellation authority.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fsm_core.runtime._agent import Agent, Status
from fsm_core.runtime._causes import AgentCancelCause
from fsm_core.runtime._inbox import Lane, UserMessage
from fsm_core.runtime._llm import ToolCall
from fsm_core.runtime._session import Session
from fsm_core.runtime._signal import AbortSignal


@dataclass(frozen=True, slots=True)
class StatusChanged:
    agent: Agent
    status: Status


@dataclass(frozen=True, slots=True)
class CancelRequested:
    agent: Agent
    cause: AgentCancelCause


@dataclass(frozen=True, slots=True)
class MessageInserted:
    agent: Agent
    message: UserMessage
    lane: Lane


@dataclass(frozen=True, slots=True)
class MessageDiscarded:
    agent: Agent
    message: UserMessage


@dataclass(frozen=True, slots=True)
class MessagesClaimed:
    agent: Agent
    signal: AbortSignal
    turn: int
    messages: tuple[UserMessage, ...]


@dataclass(frozen=True, slots=True)
class TurnStarted:
    agent: Agent
    signal: AbortSignal
    turn: int


@dataclass(frozen=True, slots=True)
class TurnEnded:
    agent: Agent
    turn: int
    outcome: Mapping[str, str | int]


@dataclass(frozen=True, slots=True)
class StepBoundary:
    """``step/start`` and ``step/end``."""

    agent: Agent
    signal: AbortSignal
    turn: int
    step: int


@dataclass(frozen=True, slots=True)
class PreStep:
    agent: Agent
    signal: AbortSignal
    turn: int
    step: int


@dataclass(frozen=True, slots=True)
class AssembleContext:
    """Prompt assembly for one step of a turn, before the step opens (no ``step/start``
    yet). ``messages`` is the conversation read from the durable session (read-only
    dicts); a listener returns this context, or a changed copy, to its ``next``."""

    agent: Agent
    signal: AbortSignal
    messages: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class RequestError:
    """A model request failed; listeners decide ``"retry"`` or ``"fail"`` (the default)."""

    agent: Agent
    signal: AbortSignal
    error: BaseException
    attempt: int


@dataclass(frozen=True, slots=True)
class ToolApproval:
    """A tool call awaits approval; listeners return True to run it, False to refuse it."""

    agent: Agent
    signal: AbortSignal
    call: ToolCall


@dataclass(frozen=True, slots=True)
class TurnStopping:
    agent: Agent
    signal: AbortSignal
    turn: int
    ending: str


@dataclass(frozen=True, slots=True)
class Flush:
    agent: Agent
    session: Session
