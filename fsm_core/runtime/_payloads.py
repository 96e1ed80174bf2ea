"""Event payloads: one object per event, agent-scoped ones carrying ``agent`` (and the turn's
``signal`` where the event belongs to a turn).

Notifications (``EventBus.emit``): ``agent/status``, ``agent/cancel-requested``,
``inbox/inserted``, ``inbox/discarded``, ``inbox/claimed``, ``turn/start``, ``turn/end``,
``turn/error``, ``step/start``, ``step/end``, ``user/message``, ``assistant/message``,
``agent/disposing``, ``agent/disposed``. None of them is durable: ``turn/error`` carries the
exception itself, which the log never holds. Waterfalls (``EventBus.waterfall``, listeners
``async (payload, next)``): ``agent/pre-step``, ``agent/assemble``, ``agent/request``,
``agent/request-error``, ``agent/tool-approval``, ``agent/turn-stopping``, ``session/flush``.

Carrying the :class:`Agent` itself is safe: the public agent originates (send, cancel, wait,
read) and cannot fire a table event or load a state; that plumbing stays in its private core.

``turn/end``, ``turn/error``, ``session/flush`` and the disposal notifications carry no signal:
the holder is cleared before turn/end is published, so none of their observers has any
cancellation authority over the turn that ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

from fsm_core.runtime._agent import Agent, Status
from fsm_core.runtime._causes import AgentCancelCause
from fsm_core.runtime._inbox import Lane, UserMessage
from fsm_core.runtime._llm import Reply, Request, ToolCall
from fsm_core.runtime._session import ErrorCode, Session
from fsm_core.runtime._signal import AbortSignal


@final
@dataclass(frozen=True, slots=True)
class StatusChanged:
    agent: Agent
    status: Status


@final
@dataclass(frozen=True, slots=True)
class CancelRequested:
    agent: Agent
    cause: AgentCancelCause


@final
@dataclass(frozen=True, slots=True)
class MessageInserted:
    agent: Agent
    message: UserMessage
    lane: Lane


@final
@dataclass(frozen=True, slots=True)
class MessageDiscarded:
    agent: Agent
    message: UserMessage


@final
@dataclass(frozen=True, slots=True)
class MessagesClaimed:
    agent: Agent
    signal: AbortSignal
    turn: int
    messages: tuple[UserMessage, ...]


@final
@dataclass(frozen=True, slots=True)
class TurnStarted:
    agent: Agent
    signal: AbortSignal
    turn: int


@final
@dataclass(frozen=True, slots=True)
class TurnEnded:
    agent: Agent
    turn: int
    outcome: Mapping[str, str | int]


@final
@dataclass(frozen=True, slots=True)
class TurnFailed:
    """``turn/error``: the turn ended in ``error``, published after its ``turn/end``.

    ``step`` and ``code`` are what the durable outcome records; ``error`` is what the log
    never holds: the exception that ended the turn (for ``halted``, what escaped the driver).
    """

    agent: Agent
    turn: int
    step: int
    code: ErrorCode
    error: BaseException


@final
@dataclass(frozen=True, slots=True)
class UserMessageRecorded:
    """``user/message``: a claimed message was recorded, by the turn's claim (after
    ``inbox/claimed``) or by a step boundary's steering claim."""

    agent: Agent
    signal: AbortSignal
    turn: int
    message: UserMessage


@final
@dataclass(frozen=True, slots=True)
class AssistantMessageRecorded:
    """``assistant/message``: the model's answer was recorded, before its tool calls run."""

    agent: Agent
    signal: AbortSignal
    turn: int
    step: int
    reply: Reply


@final
@dataclass(frozen=True, slots=True)
class DisposalStarted:
    """``agent/disposing``: disposal has begun, inside the call that requested it; a live turn
    is already interrupted with ``disposed``."""

    agent: Agent


@final
@dataclass(frozen=True, slots=True)
class DisposalEnded:
    """``agent/disposed``: teardown completed (after the final flush, failed or not); the
    agent accepts no more messages."""

    agent: Agent


@final
@dataclass(frozen=True, slots=True)
class StepBoundary:
    """``step/start`` and ``step/end``."""

    agent: Agent
    signal: AbortSignal
    turn: int
    step: int


@final
@dataclass(frozen=True, slots=True)
class PreStep:
    agent: Agent
    signal: AbortSignal
    turn: int
    step: int


@final
@dataclass(frozen=True, slots=True)
class AssembleContext:
    """``agent/assemble``: prompt assembly. ``messages`` is the conversation read from the
    durable session (read-only dicts); a listener returns this context, or a changed copy,
    to its ``next``.

        async def compact(ctx: AssembleContext, next):
            return await next(dataclasses.replace(ctx, messages=ctx.messages[-20:]))

    In a turn, assembly runs for each step before the step opens (no ``step/start`` yet),
    and ``signal`` is the turn's. ``signal`` is None when the assembly belongs to no turn
    (:meth:`Agent.assemble`, from a maintenance task for instance): no cancellation reaches
    it, so one listener serves both paths and cooperates with the signal only when there is
    one.
    """

    agent: Agent
    signal: AbortSignal | None
    messages: Sequence[Mapping[str, Any]]


@final
@dataclass(frozen=True, slots=True)
class RequestConfig:
    """``agent/request``: request configuration, the step's model request about to be sent.

    Runs inside the step (after ``step/start``), once the prompt is assembled; a listener
    returns this payload, or a changed copy, to its ``next``, and the model receives the
    ``request`` the waterfall leaves::

        async def no_tools(cfg: RequestConfig, next):
            return await next(dataclasses.replace(
                cfg, request=dataclasses.replace(cfg.request, tools=())))

    ``signal`` is the turn's, the one the model call gets: the turn checks it once the
    waterfall returns, so a cancel while a listener blocks ends the turn with no model call.
    The request a listener leaves must be the same step's (``agent_id``, ``turn`` and
    ``step`` unchanged), or the turn ends ``seam-failed``. It runs once per step: a retry
    that an ``agent/request-error`` listener asks for sends the same configured request
    again, without running ``agent/request`` twice.
    """

    agent: Agent
    signal: AbortSignal
    turn: int
    step: int
    request: Request


@final
@dataclass(frozen=True, slots=True)
class RequestError:
    """A model request failed; listeners decide ``"retry"`` or ``"fail"`` (the default)."""

    agent: Agent
    signal: AbortSignal
    error: BaseException
    attempt: int


@final
@dataclass(frozen=True, slots=True)
class ToolApproval:
    """A tool call awaits approval; listeners return True to run it, False to refuse it."""

    agent: Agent
    signal: AbortSignal
    call: ToolCall


@final
@dataclass(frozen=True, slots=True)
class TurnStopping:
    agent: Agent
    signal: AbortSignal
    turn: int
    ending: str


@final
@dataclass(frozen=True, slots=True)
class Flush:
    agent: Agent
    session: Session
