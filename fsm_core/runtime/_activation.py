"""The public face of seed 004's subagents: an activation, its terminal facts, the errors.

    act = await rt.subagents.start(parent, "c1", "summarise the log")
    act.agent.phase          # the child agent, as any agent
    act.stage                # the activation table's state: active, joining, ..., settled
    await rt.subagents.dispose(act)

An :class:`Activation` only reads: every change to an activation goes through the registry
(``rt.subagents``), which fires an event of specs/activation.toml for it. The registry's
plumbing (``_node.py``) owns the hosted table, the effect handlers and the teardown task; this
module imports none of it.

Errors carry a stable ``code`` (:data:`SubagentCode`) a caller can switch on; the text says
what was refused and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, final

from fsm_core._errors import FsmError
from fsm_core.runtime._agent import Agent
from fsm_core.table._expr import Value

__all__ = [
    "Activation",
    "ActivationSettled",
    "ActivationTeardownFailed",
    "SubagentCode",
    "SubagentError",
    "SubagentResult",
    "SubagentSpec",
    "TeardownFailure",
    "Terminal",
]

SubagentCode = Literal[
    "DRAINING", "ACTIVATION_CLOSING", "UNAUTHORIZED", "ACTIVATION_TEARDOWN_FAILED"
]
"""Why the registry refused or failed an operation:

- ``DRAINING``: a drain closed admission (registry-wide, or below the named parent);
- ``ACTIVATION_CLOSING``: the activation is being torn down by someone's dispose or drain;
- ``UNAUTHORIZED``: the caller named a parent that is not the exact live parent of the child;
- ``ACTIVATION_TEARDOWN_FAILED``: some boundary of a teardown failed (every failure named).
"""


class SubagentError(FsmError):
    """An operation of ``rt.subagents`` was refused or failed; ``code`` says which way.

    ``str(error)`` is the message, e.g. ``continuable subagents are draining; the operation
    was not admitted``.
    """

    def __init__(self, code: SubagentCode, message: str) -> None:
        super().__init__(message)
        self.code: SubagentCode = code


@final
@dataclass(frozen=True, slots=True)
class TeardownFailure:
    """One boundary of one activation's teardown that failed.

    ``boundary`` is ``final flush`` (the activation's final state flush) or ``handle
    dispose`` (its agent's own reverse teardown).
    """

    activation: str
    boundary: Literal["final flush", "handle dispose"]
    error: BaseException

    def __str__(self) -> str:
        return f"activation {self.activation!r} at {self.boundary}: {self.error!r}"


@final
class ActivationTeardownFailed(SubagentError):
    """The teardown of ``activation`` finished, but some boundary in its subtree failed.

    ``failures`` names every failed boundary, the activation's own and its descendants'
    (a child's failure never stopped its siblings' teardown). It is raised only after the
    six convergence steps ran: the activation is gone either way.
    """

    def __init__(self, activation: str, failures: Sequence[TeardownFailure]) -> None:
        self.activation = activation
        self.failures = tuple(failures)
        listed = "; ".join(str(f) for f in self.failures)
        count = len(self.failures)
        super().__init__(
            "ACTIVATION_TEARDOWN_FAILED",
            f"the teardown of {activation} failed at {count} "
            f"{'boundary' if count == 1 else 'boundaries'}: {listed}",
        )


@final
@dataclass(frozen=True, slots=True)
class Terminal:
    """What an activation's teardown captured from its agent, after the final flush.

    ``outcome`` is the last ``turn/end`` outcome in the agent's log (None if it ran no turn);
    ``pending`` the ids of messages still queued (the teardown cancels with ``keep_inbox``,
    so they survive into this capture, settlement notices of its children included).
    """

    turns: int
    outcome: Mapping[str, str | int] | None
    pending: tuple[str, ...]


@final
@dataclass(frozen=True, slots=True)
class SubagentSpec:
    """What ``spawn`` and ``fork`` run: a fresh child ``child_id`` given ``prompt``."""

    child_id: str
    prompt: str


@final
@dataclass(frozen=True, slots=True)
class SubagentResult:
    """How a spawned or forked child ended: its last turn's outcome and last answer."""

    child_id: str
    outcome: Mapping[str, str | int] | None
    text: str


class _Node(Protocol):
    """What an :class:`Activation` reads of its plumbing."""

    @property
    def id(self) -> str: ...
    @property
    def agent(self) -> Agent: ...
    @property
    def parent_agent(self) -> Agent: ...
    @property
    def stage(self) -> str: ...
    @property
    def table_state(self) -> Mapping[str, Value]: ...
    @property
    def terminal(self) -> Terminal | None: ...
    @property
    def failed(self) -> bool | None: ...


@final
class Activation:
    """One continuable child: an agent owned by a parent, resident in ``rt.subagents``.

        act = await rt.subagents.start(parent, "c1", "hello")
        await act.agent.when_idle()

    ``stage`` and ``table_state`` read the activation table now. ``failed`` is None until the
    activation settled, then whether any boundary of its teardown failed. An activation
    that settled is not reused: a later ``followup`` to its id starts a fresh one (cold
    resume) on the same session.
    """

    __slots__ = ("_node",)

    def __init__(self, node: _Node) -> None:
        self._node = node

    @property
    def id(self) -> str:
        return self._node.id

    @property
    def agent(self) -> Agent:
        """The child agent."""
        return self._node.agent

    @property
    def parent(self) -> Agent:
        """The agent that owns this activation."""
        return self._node.parent_agent

    @property
    def stage(self) -> str:
        """The activation table's state (``active`` until a teardown begins)."""
        return self._node.stage

    @property
    def table_state(self) -> Mapping[str, Value]:
        """The activation table's values, ``stage`` first: a read-only snapshot."""
        return self._node.table_state

    @property
    def terminal(self) -> Terminal | None:
        """What the teardown captured; None before the capture."""
        return self._node.terminal

    @property
    def failed(self) -> bool | None:
        """None until settled; then True iff some boundary of its teardown failed."""
        return self._node.failed

    def __repr__(self) -> str:
        return f"<Activation {self.id} parent={self.parent.id} stage={self.stage}>"


@final
@dataclass(frozen=True, slots=True)
class ActivationSettled:
    """``subagent/settled``: convergence step 5, the activation's epoch ended.

        rt.events.on("subagent/settled", lambda e: e.failure and report(e.activation.id, e.failure))

    ``failure`` is what its teardown failed with: the aggregated
    :class:`ActivationTeardownFailed` (every failed boundary of its subtree, the same object
    its teardown raises to whoever awaits it), or None if no boundary failed. It is the
    failure a natural end's teardown has nobody to raise to. ``failed`` is ``failure is not
    None``. The payload is not written to any durable log.
    """

    activation: Activation
    failure: BaseException | None
    """The teardown's failure; None iff it succeeded."""

    @property
    def failed(self) -> bool:
        """True iff some boundary of the teardown failed (``failure`` is not None)."""
        return self.failure is not None
