"""The initiating agent: the one ambient value, and only the agent.

Work a driver runs (listeners, the model, tools) can ask which agent initiated it. The scope
carries the exact :class:`Agent` and nothing else: no turn, step or signal, so a callback that
outlives its turn cannot find a stale signal and act on a later turn. Cancellation travels
explicitly, as the ``signal`` argument of each seam.

    agent = initiating_agent()   # None outside any driver
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fsm_core.runtime._agent import Agent

__all__ = ["initiating_agent"]

_INITIATOR: contextvars.ContextVar[Agent | None] = contextvars.ContextVar(
    "fsm_core_initiator", default=None
)


def initiating_agent() -> Agent | None:
    """The agent whose driver is running the current task, if any."""
    return _INITIATOR.get()


def context_for(agent: Agent) -> contextvars.Context:
    """A copy of the current context in which ``agent`` is the initiator."""
    context = contextvars.copy_context()
    context.run(_INITIATOR.set, agent)
    return context
