"""fsm_core: the executable, model-checked specification of turn cancellation and teardown.

The transition tables in ``specs/`` are the single source of truth. Load them, fire events
on a state and read the next state and the ordered effects::

    from fsm_core import load_spec

    agent = load_spec().machines["agent"]
    step = agent.fire(agent.initial, "cancel", cause="user", keep_inbox=False)
    assert step.row == "cancel.noop" and step.effects == ()   # idle cancel: nothing at all
"""

from fsm_core._errors import (
    FsmError,
    NotEnabled,
    Rejected,
    SpecError,
    TransitionError,
    UsageError,
)
from fsm_core.host import HostedMachine
from fsm_core.runtime import (
    PARENT,
    USER,
    AbortSignal,
    Agent,
    AgentCancelCause,
    AgentHandle,
    Runtime,
    UserMessage,
)
from fsm_core.table import Clause, Effect, Machine, Spec, State, Step, load_spec

__all__ = [
    "PARENT",
    "USER",
    "AbortSignal",
    "Agent",
    "AgentCancelCause",
    "AgentHandle",
    "Clause",
    "Effect",
    "FsmError",
    "HostedMachine",
    "Machine",
    "NotEnabled",
    "Rejected",
    "Runtime",
    "Spec",
    "SpecError",
    "State",
    "Step",
    "TransitionError",
    "UsageError",
    "UserMessage",
    "load_spec",
]
