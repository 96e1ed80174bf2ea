"""The asyncio reference runtime of seed 000, driven by specs/agent.toml.

rt = Runtime(model=ScriptedModel([Reply("hello")]))
handle = await rt.create_agent("a1")
handle.agent.followup(UserMessage("m1", "hi"))
await handle.agent.when_idle()
await rt.aclose()
"""

from fsm_core.runtime._agent import Agent, AgentHandle, Phase
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
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._inbox import Inbox, Lane, UserMessage
from fsm_core.runtime._model import (
    Fail,
    Gate,
    ModelAdapter,
    Reply,
    Request,
    ScriptedModel,
    ScriptedTool,
    Tool,
    ToolCall,
    Wait,
)
from fsm_core.runtime._payloads import Status
from fsm_core.runtime._runtime import Runtime
from fsm_core.runtime._scope import initiating_agent
from fsm_core.runtime._session import Session, SessionError, SessionEvent
from fsm_core.runtime._signal import AbortController, Aborted, AbortSignal

__all__ = [
    "DISPOSED",
    "PARENT",
    "USER",
    "AbortController",
    "AbortSignal",
    "Aborted",
    "Agent",
    "AgentCancelCause",
    "AgentHandle",
    "Disposed",
    "EventBus",
    "Fail",
    "Gate",
    "Inbox",
    "Interruption",
    "Lane",
    "ModelAdapter",
    "ParentCause",
    "Phase",
    "Reply",
    "Request",
    "Runtime",
    "ScriptedModel",
    "ScriptedTool",
    "Session",
    "SessionError",
    "SessionEvent",
    "Status",
    "Tool",
    "ToolCall",
    "UserCause",
    "UserMessage",
    "Wait",
    "initiating_agent",
]
