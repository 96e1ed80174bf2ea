"""Who asked for a cancellation: the closed, typed vocabulary of seed 000.

``AgentCancelCause`` is exactly ``UserCause | ParentCause``. The type checker enforces it at
``Agent.cancel()``; there is no runtime validator, no fallback and no free-form string. The
runtime-only :class:`Disposed` interruption is deliberately *not* a cause: only disposal
requests it, and no caller can pass it to ``cancel()``.

    agent.cancel()          # USER, the default
    agent.cancel(PARENT)    # an in-process parent propagating its own cancellation
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias, final


@final
@dataclass(frozen=True, slots=True)
class UserCause:
    """A person (or ACP client) asked to stop."""

    kind: Literal["user"] = "user"


@final
@dataclass(frozen=True, slots=True)
class ParentCause:
    """An in-process parent agent (spawn, fork, teardown) propagated its cancellation."""

    kind: Literal["parent"] = "parent"


@final
@dataclass(frozen=True, slots=True)
class Disposed:
    """The runtime-only interruption disposal requests on the active holder."""

    kind: Literal["disposed"] = "disposed"


AgentCancelCause: TypeAlias = UserCause | ParentCause
"""What a caller may pass to ``Agent.cancel()``."""

Interruption: TypeAlias = UserCause | ParentCause | Disposed
"""What a turn's signal reason can be: a cause, or disposal."""

USER = UserCause()
PARENT = ParentCause()
DISPOSED = Disposed()

CAUSES: dict[str, AgentCancelCause] = {"user": USER, "parent": PARENT}
"""The cause each value of the tables' ``cause`` type stands for (a wiring call's cancel)."""


def detach(reason: Interruption) -> Interruption:
    """A fresh frozen copy: equal to ``reason``, never the caller's object.

    The signal keeps its own copy, so nothing a caller later does to the object it passed can
    reach a turn's reason.
    """
    match reason:
        case UserCause():
            return UserCause()
        case ParentCause():
            return ParentCause()
        case Disposed():
            return Disposed()
