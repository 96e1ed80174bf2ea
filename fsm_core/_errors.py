"""The error hierarchy: one root, a table error, and the two ways a transition can fail."""

from __future__ import annotations

__all__ = ["FsmError", "NotEnabled", "Rejected", "SpecError", "TransitionError", "UsageError"]


class FsmError(Exception):
    """Root of every error fsm_core raises on purpose."""


class SpecError(FsmError):
    """A table (or model file) is malformed; nothing of it was loaded.

    The message is ``FILE: WHERE: FAULT``, e.g.
    ``specs/agent.toml: row 'cancel.noop': unknown state 'idel' in from``.
    """

    def __init__(self, file: str, where: str, fault: str) -> None:
        self.file = file
        self.where = where
        self.fault = fault
        super().__init__(f"{file}: {where}: {fault}" if where else f"{file}: {fault}")


class TransitionError(FsmError):
    """An event could not be applied to a machine's current state."""


class NotEnabled(TransitionError):
    """No row of the table is enabled for this event, state and arguments.

    For an internal event this means the runtime fired it at the wrong moment, which is a bug
    in the runtime, not in the caller.
    """


class Rejected(TransitionError):
    """The table refuses this event here on purpose (a ``reject`` row or a rejected pair).

    ``str(error)`` is the table's reason, e.g. ``the agent is disposed; it accepts no more
    messages``.
    """


class UsageError(FsmError):
    """The runtime refused a call at the door, before anything changed.

    A message that is not a :class:`~fsm_core.UserMessage` of strings, an id that is already
    pending, a waking send with no running event loop, a session another agent owns, an agent
    created while the runtime closes: each would corrupt the table, the inbox or the durable
    log if it got in, so it does not.
    """
