"""Small helpers more than one test module needs."""

from __future__ import annotations

import re

__all__ = ["NOTIFICATIONS", "exactly"]

NOTIFICATIONS = (
    "agent/status",
    "agent/cancel-requested",
    "inbox/inserted",
    "inbox/discarded",
    "inbox/claimed",
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
)
"""Every notification an agent publishes on the runtime's bus (``EventBus.emit``)."""


def exactly(message: str) -> str:
    """A ``match=`` pattern for exactly this whole message."""
    return f"^{re.escape(message)}$"
