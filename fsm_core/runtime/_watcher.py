"""The settlement watcher: how an activation's natural end grows its own teardown.

One task per activation (:meth:`Watcher.start`) waits for its agent's idle, then asks the
activation table for a verdict (``watch``) from the inbox and the ledger alone, never the
agent's execution state: ``closed``, ``retry``, ``wait`` (for a poke: a message inserted into
or discarded from the agent's inbox) or ``ready``, whose row starts the disposal.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import final

from fsm_core._errors import Rejected
from fsm_core.runtime._node import Node, Verdict
from fsm_core.runtime._payloads import MessageDiscarded, MessageInserted
from fsm_core.runtime._signal import AbortSignal
from fsm_core.runtime._teardown import raise_if_cancelling

__all__ = ["Watcher"]

log = logging.getLogger("fsm_core.runtime")


@final
class Watcher:
    """The settlement watchers of one registry, whose resident activations are ``resident``."""

    def __init__(self, resident: Mapping[str, Node]) -> None:
        self._resident = resident
        self.tasks: set[asyncio.Task[None]] = set()
        """The watchers running."""

    def start(self, node: Node) -> None:
        """Start ``node``'s watcher."""
        task = asyncio.get_running_loop().create_task(self._watch(node), name=f"watch {node.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def poke(self, changed: MessageInserted | MessageDiscarded) -> None:
        """The agent's inbox changed: a watcher waiting on queued work decides again (a
        user's cancel or remove that empties the inbox of an idle agent ends its work as
        surely as an idle with nothing queued; no other idle follows it)."""
        node = self._resident.get(changed.agent.id)
        if node is not None and node.agent is changed.agent:
            node.pokes += 1
            node.poked.set()

    async def _watch(self, node: Node) -> None:
        """After each idle, ask the table for a verdict from the inbox and the ledger alone.

        The verdict is taken inside ``run_maintenance``, which only an idle agent grants:
        on ``ready`` the disposal starts there, under idle ownership. An agent that became
        busy again refuses the maintenance, and the verdict is taken with ``busy``.

        The watcher has no caller to raise to: whatever a listener raises inside it (a
        BaseException too) is logged, and the watcher goes on with the verdict the table
        gave before it, or, given none, waits for a poke, so it neither dies with an error
        nobody reads nor spins. Its own cancellation, and an interrupt or exit (which
        asyncio raises out of the loop), end it.
        """
        while node.stage == "active":
            await node.agent.when_idle()
            seen = node.pokes
            verdict = Verdict()

            async def decide(
                _signal: AbortSignal, verdict: Verdict = verdict, seen: int = seen
            ) -> None:
                self._verdict(node, verdict, seen, busy=False)

            try:
                if node.stage != "active":
                    # The inbox is closing: the table's verdict is closed, with no need to
                    # own the agent to learn it.
                    self._verdict(node, verdict, seen, busy=False)
                    return
                try:
                    await node.agent.run_maintenance(decide)
                except Rejected:
                    self._verdict(node, verdict, seen, busy=True)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException:
                raise_if_cancelling()
                log.exception("the settlement watcher of %s failed", node.id)
            if verdict.value in ("closed", "ready"):
                return
            if verdict.value != "retry":
                while node.pokes == seen and node.stage == "active":
                    node.poked.clear()
                    await node.poked.wait()

    def _verdict(self, node: Node, verdict: Verdict, seen: int, *, busy: bool) -> None:
        if node.agent.phase in ("disposing", "disposed"):
            # Idle at once and refusing maintenance for good: the table says wait for a poke
            # (the activation's own dispose pokes it) rather than retry and spin.
            node.fire("watch_gone", verdict)
            return
        pending = node.agent.inbox.pending
        node.fire("watch", verdict, current=node.pokes == seen, busy=busy, pending=pending)

    def __repr__(self) -> str:
        return f"<Watcher running={len(self.tasks)}>"
