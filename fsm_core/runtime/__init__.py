"""The asyncio reference runtime of seeds 000 and 004, driven by specs/agent.toml and
specs/activation.toml.

    rt = Runtime(model=ScriptedModel([Reply("hello")]))     # fsm_core.testing's stand-in
    handle = await rt.create_agent("a1")
    handle.agent.followup(UserMessage("m1", "hi"))
    await handle.agent.when_idle()
    await rt.aclose()

Every name here is also exported from :mod:`fsm_core`; scripted models, tools and gates for
tests live in :mod:`fsm_core.testing`.
"""

from fsm_core.runtime._activation import (
    Activation,
    ActivationSettled,
    ActivationTeardownFailed,
    SubagentCode,
    SubagentError,
    SubagentResult,
    SubagentSpec,
    TeardownFailure,
    Terminal,
)
from fsm_core.runtime._agent import Agent, Phase, Status
from fsm_core.runtime._causes import (
    DISPOSED,
    PARENT,
    USER,
    AgentCancelCause,
    Disposed,
    Interruption,
    ParentCause,
    UserCause,
)
from fsm_core.runtime._core import AgentHandle
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._hooks import HookDecision, HookResult, Hooks, RunHookOptions, run_hook
from fsm_core.runtime._inbox import Inbox, Lane, UserMessage
from fsm_core.runtime._initiators import AgentRegistry
from fsm_core.runtime._llm import Finish, ModelAdapter, Reply, Request, Tool, ToolCall, ToolSpec
from fsm_core.runtime._payloads import (
    AssembleContext,
    AssistantMessageRecorded,
    CancelRequested,
    DisposalEnded,
    DisposalStarted,
    Flush,
    MessageDiscarded,
    MessageInserted,
    MessagesClaimed,
    PreStep,
    RequestConfig,
    RequestError,
    StatusChanged,
    StepBoundary,
    ToolApproval,
    TurnEnded,
    TurnFailed,
    TurnStarted,
    TurnStopping,
    UserMessageRecorded,
)
from fsm_core.runtime._runtime import Runtime
from fsm_core.runtime._scope import initiating_agent
from fsm_core.runtime._session import (
    ERROR_CODES,
    EVENT_SHAPES,
    OUTCOME_KINDS,
    ErrorCode,
    EventType,
    OutcomeKind,
    Session,
    SessionError,
    SessionEvent,
)
from fsm_core.runtime._signal import AbortController, Aborted, AbortSignal
from fsm_core.runtime._subagents import Subagents
from fsm_core.runtime._teardown import Pending

__all__ = [
    "DISPOSED",
    "ERROR_CODES",
    "EVENT_SHAPES",
    "OUTCOME_KINDS",
    "PARENT",
    "USER",
    "AbortController",
    "AbortSignal",
    "Aborted",
    "Activation",
    "ActivationSettled",
    "ActivationTeardownFailed",
    "Agent",
    "AgentCancelCause",
    "AgentHandle",
    "AgentRegistry",
    "AssembleContext",
    "AssistantMessageRecorded",
    "CancelRequested",
    "DisposalEnded",
    "DisposalStarted",
    "Disposed",
    "ErrorCode",
    "EventBus",
    "EventType",
    "Finish",
    "Flush",
    "HookDecision",
    "HookResult",
    "Hooks",
    "Inbox",
    "Interruption",
    "Lane",
    "MessageDiscarded",
    "MessageInserted",
    "MessagesClaimed",
    "ModelAdapter",
    "OutcomeKind",
    "ParentCause",
    "Pending",
    "Phase",
    "PreStep",
    "Reply",
    "Request",
    "RequestConfig",
    "RequestError",
    "RunHookOptions",
    "Runtime",
    "Session",
    "SessionError",
    "SessionEvent",
    "Status",
    "StatusChanged",
    "StepBoundary",
    "SubagentCode",
    "SubagentError",
    "SubagentResult",
    "SubagentSpec",
    "Subagents",
    "TeardownFailure",
    "Terminal",
    "Tool",
    "ToolApproval",
    "ToolCall",
    "ToolSpec",
    "TurnEnded",
    "TurnFailed",
    "TurnStarted",
    "TurnStopping",
    "UserCause",
    "UserMessage",
    "UserMessageRecorded",
    "initiating_agent",
    "run_hook",
]
