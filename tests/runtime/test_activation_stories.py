"""The activation's story vectors, told by the real runtime's ``rt.subagents``.

A story (specs/vectors/activation.jsonl, ``story/<name>/<step>``) is a sequence of table events
on one activation from its initial state. Here the story's activation is ``a1``, a root child of
a host-owned agent ``host``, and each input event is the registry call that fires it on ``a1``:
``admit`` starts a child of ``a1``'s agent, ``dispose`` disposes ``a1``, ``drain`` runs
``drain()`` (scope registry) or ``drain_descendants([a1's agent])`` (scope descendants), and
``drain_child`` runs ``drain_children`` from a stranger (no lineage) or from ``host``. Each
internal event is what the runtime does next once the test lets it: ``watch`` once ``a1``'s
model request is answered (after queueing a message without waking it, for ``pending``, or
with a followup landing at its idle, for ``busy``), ``child_settled`` once the next child's
held teardown is released (failing it for ``failed``), the teardown's own steps by themselves.

The lockstep recorder of tests/race records every event the registry fires on ``a1``, and the
runtime must fire the story's events in order with the story's arguments, outcome and effects;
the lockstep oracle replays all it fired on the interpreter besides. Two differences from the
agent's stories, both the registry's shape rather than slack:

- The effects ``request_dispose`` and ``dispose_in_maintenance`` are performed by firing
  ``dispose`` on the same activation inside the row (the interpreter, which performs no effect,
  shows none): each must show exactly that call, with ``final_state_flushed`` false and true.
  Such a row's state afterwards is the nested call's too, so it is compared on what the
  row changes (the oracle checks the whole of it).
- A teardown runs on its own once begun, so between two story steps the runtime may fire
  internal events of that teardown the story does not list (``children_joined`` before the
  watcher's ``closed``): the story's steps must be a subsequence of what it fired, every skipped
  call internal, and once one was skipped a step's state is compared on what its row changes.

A story the runtime cannot tell as written is excluded with its reason (:data:`UNTOLD`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from fsm_core import Rejected
from fsm_core.runtime import (
    AbortSignal,
    Agent,
    Reply,
    Request,
    Runtime,
    SubagentError,
    UserMessage,
)
from fsm_core.runtime._node import Node as _Node
from fsm_core.table import load_spec
from fsm_core.testing import Gate
from tests.race.bridge import LoopBridge
from tests.race.lockstep import Fire, Oracle, Recorder
from tests.runtime.subagent_support import HeldSession
from tests.table_driver import Json, Story, VectorFile, full

pytestmark = pytest.mark.timeout(30)

ACTIVATION = load_spec().machines["activation"]
VECTORS = VectorFile.read(ACTIVATION)
STORIES = sorted({v["story"]["name"] for v in VECTORS.vectors if "story" in v})
INPUT = {e for e, spec in ACTIVATION.table.events.items() if spec.kind == "input"}

FIRING = {
    "request_dispose": {"final_state_flushed": False, "drain": True},
    "dispose_in_maintenance": {"final_state_flushed": True, "drain": False},
}
"""Effects the registry performs by firing ``dispose`` inside the row, as specs/wiring.toml
says, with the arguments it gives (both of the table's ``request_dispose`` are drains')."""

UNTOLD = {
    "dispose_is_memoized": (
        "its second call is dispose(final_state_flushed=true), which only the settlement "
        "watcher fires, and only from a ready verdict on an active activation: once the inbox "
        "is closing the watcher's verdict is closed, so the runtime never fires it there"
    ),
    "natural_end_skips_the_final_flush": (
        "the runtime fires dispose(final_state_flushed=true) only inside the watcher's watch "
        "row (dispose_in_maintenance), never as a call of its own; settlement_watcher_ready "
        "tells that path, and the teardown after it is the same"
    ),
    "settlement_watcher_retry_when_not_current": (
        "the watcher reads its poke count after its agent's idle and takes the verdict in the "
        "same loop step (run_maintenance runs the verdict before its first await), so no "
        "message can land in between: the runtime never fires watch(current=false)"
    ),
}


class GatedModel:
    """Every request of a child waits at a fresh cooperating gate; the others answer."""

    def __init__(self) -> None:
        self.gates: dict[str, list[Gate]] = {}

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        if request.agent_id in ("host", "other"):
            return Reply(f"{request.agent_id}: ok")
        gate = Gate(f"model {request.agent_id}")
        self.gates.setdefault(request.agent_id, []).append(gate)
        await gate.wait(signal)
        return Reply(f"{request.agent_id}: done")

    def answer(self, agent_id: str) -> None:
        for gate in self.gates.get(agent_id, []):
            gate.open()


class Telling:
    """One activation story told by a runtime: the registry calls, the gates, the record."""

    def __init__(self, story: Story) -> None:
        self.story = story
        self.bridge = LoopBridge(lambda: True, lambda: repr(self.recorder.roots[-3:]))
        self.model = GatedModel()
        self.rt = Runtime(self.model)
        self.registry = self.rt.subagents
        self.pending: list[Any] = []
        self.children: list[tuple[str, HeldSession]] = []
        self.sent = 0
        run = self.bridge.loop.run_until_complete
        self.host: Agent = run(self.rt.create_agent("host")).agent
        self.other: Agent = run(self.rt.create_agent("other")).agent
        self.recorder: Recorder = run(self._start())
        node = self.registry._resident["a1"]
        self.node: _Node = node
        self.agent = node.agent
        # The story's steps the runtime fires: all but the internal events it shows refused.
        self.expected = [
            step
            for step in story.steps
            if step["call"]["event"] in INPUT or "refused" not in step["expect"]
        ]

    async def _start(self) -> Recorder:
        await self.registry.start(self.host, "a1", "work", session=HeldSession().session)
        # start() returned without yielding: nothing has fired on a1's table yet.
        return Recorder(self.registry._resident["a1"].control)

    def _message(self) -> UserMessage:
        self.sent += 1
        return UserMessage(f"m{self.sent}", f"message {self.sent}")

    def _call(self, event: str, args: Json) -> None:
        """The registry call that fires ``event(args)`` on a1; a refusal is in the record."""
        registry = self.registry
        if event == "admit":
            child = f"c{len(self.children) + 1}"
            session = HeldSession().hold(Gate(f"teardown {child}"))
            self.children.append((child, session))

            async def admit() -> None:
                with contextlib.suppress(SubagentError):
                    await registry.start(self.agent, child, "work", session=session.session)

            self.pending.append(asyncio.ensure_future(admit()))
        elif event == "dispose":
            assert args["final_state_flushed"] is False, "only the watcher disposes flushed"
            self.pending.append(registry.dispose(self.node.public))
        elif event == "drain" and args["scope"] == "registry":
            self.pending.append(registry.drain())
        elif event == "drain":
            self.pending.append(registry.drain_descendants([self.agent]))
        elif event == "drain_child":
            parent = self.host if args["lineage"] else self.other
            with contextlib.suppress(SubagentError):
                self.pending.append(registry.drain_children(parent, ["a1"]))
        else:
            raise AssertionError(f"no registry call fires {event}")

    def _let(self, event: str, args: Json) -> None:
        """Let the runtime fire the internal ``event(args)``."""
        if event == "watch" and self.node.stage == "active":
            if args["busy"] or args["pending"]:
                self._at_idle(self._busy_again if args["busy"] else self._queue_quietly)
            self.bridge.run(lambda: self.model.answer("a1"))
        elif event == "child_settled":
            session = next(s for _c, s in self.children if s.gate is not None)
            if args["failed"]:
                session.fail()
            gate, session.gate = session.gate, None
            assert gate is not None
            self.bridge.run(gate.open)
        else:
            self.bridge.settle()  # the teardown's own steps run by themselves

    def _at_idle(self, action: Callable[[], None]) -> None:
        """Call ``action`` once a1 next publishes idle, before its watcher runs."""

        def idle(event: Any) -> None:
            if event.agent is self.agent and event.status == "idle":
                off()
                asyncio.get_running_loop().call_soon(action)

        off = self.rt.events.on("agent/status", idle)

    def _queue_quietly(self) -> None:
        """A message queued without waking: the idle agent has pending work."""
        self.agent.send(self._message(), "next_turn", wakeup=False)

    def _busy_again(self) -> None:
        """A followup, taken back at once: a driver is scheduled (the agent is busy again)
        with nothing pending."""
        message = self._message()
        self.agent.followup(message)
        with contextlib.suppress(Rejected):
            self.agent.inbox.remove(message.id)

    def tell(self) -> None:
        for step in self.story.steps:
            event, args = step["call"]["event"], step["call"]["args"]
            if event in INPUT:
                self.bridge.run(partial(self._call, event, args))
            elif "refused" not in step["expect"]:
                self._let(event, args)

    def close(self) -> None:
        def release() -> bool:
            closed = [s.gate for _c, s in self.children if s.gate is not None]
            for gate in closed:
                gate.open()
            for agent_id in list(self.model.gates):
                self.model.answer(agent_id)
            return bool(closed)

        async def aclose() -> None:
            for pending in [*self.pending, self.rt.aclose()]:
                with contextlib.suppress(Exception):  # a failing teardown is the story's
                    await pending

        release()
        self.bridge.spawn(aclose(), "aclose")
        self.bridge.close(release)


def _compare(where: str, fired: Fire, step: Json) -> None:
    call, expect = step["call"], step["expect"]
    assert (fired.event, fired.kwargs) == (call["event"], call["args"]), where
    if "refused" in expect:
        assert fired.outcome == expect["refused"], where
        return
    assert fired.outcome == "ok", where
    assert [str(e) for e in fired.effects] == expect["effects"], where
    assert "inside" not in expect, where  # no activation story installs a listener
    firing = [(k, e.name) for k, e in enumerate(fired.effects) if e.name in FIRING]
    assert [(c.at, c.event) for c in fired.children] == [(k, "dispose") for k, _ in firing], where
    for child, (_k, name) in zip(fired.children, firing, strict=True):
        assert child.kwargs == FIRING[name], where
        assert child.outcome == "ok", where


@pytest.mark.parametrize("name", [s for s in STORIES if s not in UNTOLD])
def test_the_runtime_tells_the_activation_story(name: str) -> None:
    story = VECTORS.story(name)
    telling = Telling(story)
    try:
        telling.tell()
        roots = telling.recorder.roots
        oracle = Oracle(ACTIVATION)
        oracle.follow(roots)  # the interpreter agrees with every call, nested ones included
        assert telling.recorder.problems == []
        k, skipped = 0, False
        for step in telling.expected:
            call = step["call"]
            while k < len(roots) and (roots[k].event, roots[k].kwargs) != (
                call["event"],
                call["args"],
            ):
                assert roots[k].event not in INPUT, f"story {name}: unexpected {roots[k]}"
                k, skipped = k + 1, True
            fired = [str(r) for r in roots]
            assert k < len(roots), f"story {name}, {step['id']}: never fired; fired {fired}"
            where = f"story {name}, {step['id']}: the runtime fired {roots[k]} ({fired})"
            _compare(where, roots[k], step)
            after = roots[k].after
            assert after is not None, where
            if not skipped and not roots[k].children:
                expected = {**step["state"], **step["expect"].get("changes", {})}
                assert after == full(ACTIVATION, expected), where
            else:
                values = dict(zip(ACTIVATION.names, after, strict=True))
                for var, value in step["expect"].get("changes", {}).items():
                    assert values[var] == value, f"{where}: {var}"
            k += 1
    finally:
        telling.close()


def test_every_untold_activation_story_exists() -> None:
    assert set(UNTOLD) <= set(STORIES)
