"""The agent's story vectors, replayed through the asyncio runtime.

A story (specs/vectors/agent.jsonl, ``story/<name>/<step>``) is a sequence of table events from
the initial state, with listener scripts. Here the runtime consumes it: each input event is the
user call that fires it, each listener script entry is a call made inside the effect it names,
and each internal event is what the runtime's driver does next once the test lets it (it opens
the model's gate for ``retire``, the flush's for ``converge``, the maintenance task's for
``maintenance_finish``). The lockstep recorder of tests/race records every table event the
runtime fires, and the runtime must fire the story's events, in order, with the story's
arguments, effects, calls inside effects and states; the lockstep oracle replays them on the
interpreter besides. An internal event the story shows refused is one the runtime must never
fire, so it is not expected from it.

A story the runtime cannot tell as written is excluded with its reason (:data:`UNTOLD`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fsm_core import PARENT, USER, Flush, Rejected
from fsm_core.runtime import AbortSignal, Reply, Request, Runtime, UserMessage
from fsm_core.runtime._llm import Finish
from fsm_core.table import Effect, load_spec
from fsm_core.testing import Gate
from tests.helpers import core_of
from tests.race.bridge import LoopBridge
from tests.race.lockstep import Fire, Oracle, Recorder
from tests.table_driver import Json, Story, VectorFile, full

AGENT = load_spec().machines["agent"]
VECTORS = VectorFile.read(AGENT)
STORIES = sorted({v["story"]["name"] for v in VECTORS.vectors if "story" in v})
INPUT = {e for e, spec in AGENT.table.events.items() if spec.kind == "input"}
FINISH: dict[str, Finish] = {"completed": "stop", "max_tokens": "max_tokens", "blocked": "blocked"}

UNTOLD = {
    "driver_events_outside_a_driver_are_refused": (
        "it fires only driver events where no driver runs, which the runtime never does"
    ),
    "maintenance_needs_an_idle_agent_with_no_driver": (
        "run_maintenance fires maintenance_start when its task first runs, after the driver "
        "a followup scheduled in the same loop iteration has started"
    ),
}


class GatedModel:
    """Every request waits at a fresh gate, ignoring the signal, until the test answers it."""

    def __init__(self) -> None:
        self.waiting: list[tuple[Gate, list[Reply]]] = []

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        gate, answer = Gate("model"), list[Reply]()
        self.waiting.append((gate, answer))
        await gate.wait(signal, cooperate=False)
        return answer[0]

    def answer(self, end: str) -> None:
        """Let the turn waiting in the model end with ``end`` (if one is waiting)."""
        for gate, answer in self.waiting:
            if not gate.is_open:
                answer.append(Reply("done", finish=FINISH.get(end, "stop")))
                gate.open()


class Telling:
    """One story told by a runtime: the user calls, the gates, the recorded table events."""

    def __init__(self, story: Story) -> None:
        self.story = story
        self.bridge = LoopBridge(lambda: True, lambda: repr(self.recorder.roots[-3:]))
        self.model = GatedModel()
        self.flushes: list[Gate] = []
        self.maintenance = Gate("maintenance")
        self.pending: list[Awaitable[Any]] = []
        self.sent = 0
        self.rt = Runtime(model=self.model)
        self.rt.events.on("session/flush", self._flush)
        self.handle = self.bridge.loop.run_until_complete(self.rt.create_agent("a1"))
        self.agent = self.handle.agent
        control = core_of(self.agent).control
        self.recorder = Recorder(control)
        recorded = control._perform
        assert recorded is not None

        def perform(effect: Effect) -> None:
            recorded(effect)
            self._listen(effect)

        control._perform = perform
        # The story's steps the runtime fires: all but the internal events it shows refused.
        self.expected = [
            step
            for step in story.steps
            if step["call"]["event"] in INPUT or "refused" not in step["expect"]
        ]

    async def _flush(self, payload: Flush, proceed: Callable[[Flush], Awaitable[None]]) -> None:
        gate = Gate("flush")
        self.flushes.append(gate)
        await gate.wait()
        await proceed(payload)

    def _listen(self, effect: Effect) -> None:
        """The listeners of the step being fired: its script entries at this effect."""
        if not self.recorder.busy:
            return
        root = len(self.recorder.roots) - 1
        ordinal = sum(len(node.effects) for node in self.recorder.roots[root].walk()) - 1
        if root >= len(self.expected):
            return
        for entry in self.expected[root].get("script", []):
            if entry["at"] == ordinal:
                self._call(entry["event"], entry["args"])

    def _call(self, event: str, args: Json) -> None:
        """The user call that fires ``event(args)``."""
        if event == "send":
            self.sent += 1
            message = UserMessage(f"m{self.sent}", f"message {self.sent}")
            self.agent.send(message, args["lane"], args["wake"])
        elif event == "cancel":
            cause = USER if args["cause"] == "user" else PARENT
            self.agent.cancel(cause, keep_inbox=args["keep_inbox"])
        elif event == "dispose":
            self.pending.append(asyncio.ensure_future(self.handle.dispose()))
        elif event == "maintenance_start":
            task = self.agent.run_maintenance(lambda signal: self.maintenance.wait())
            self.pending.append(asyncio.ensure_future(task))
        elif event == "remove":
            queued = [*core_of(self.agent).inbox.next_turn, *core_of(self.agent).inbox.next_step]
            self.agent.inbox.remove(queued[-1].id)
        else:
            raise AssertionError(f"no user call fires {event}")

    def _users(self, steps: list[Json]) -> None:
        """Make the user calls of ``steps``, in one loop iteration, then let the loop run."""

        def calls() -> None:
            for step in steps:
                # A refusal is in the recorder; the story says whether it is right.
                with contextlib.suppress(Rejected):
                    self._call(step["call"]["event"], step["call"]["args"])

        self.bridge.run(calls)

    def tell(self) -> None:
        """Make the runtime fire the story's events: user calls run together in one loop
        iteration, until an internal event, which the runtime fires once let."""
        users: list[Json] = []
        for step in self.story.steps:
            event = step["call"]["event"]
            if event == "maintenance_start":
                # run_maintenance fires when its task first runs: let it, before what follows.
                self._users([*users, step])
                users = []
                continue
            if event in INPUT or event == "remove":
                users.append(step)
                continue
            self._users(users)
            users = []
            if "refused" in step["expect"]:
                continue
            if event == "retire":
                self.model.answer(step["call"]["args"]["end"])
            elif event == "converge":
                for gate in self.flushes:
                    gate.open()
            elif event == "maintenance_finish":
                self.maintenance.open()
            self.bridge.settle()
        self._users(users)

    def close(self) -> None:
        def release() -> bool:
            closed = [g for g in [*self.flushes, self.maintenance] if not g.is_open]
            for gate in closed:
                gate.open()
            self.model.answer("completed")
            return bool(closed)

        self.bridge.close(release)


def _compare(where: str, fired: Fire, step: Json) -> None:
    call, expect = step["call"], step["expect"]
    assert (fired.event, fired.kwargs) == (call["event"], call["args"]), where
    if "refused" in expect:
        assert fired.outcome == expect["refused"], where
        return
    assert fired.outcome == "ok", where
    assert [str(e) for e in fired.effects] == expect["effects"], where
    inside = expect.get("inside", [])
    assert [c.at for c in fired.children] == [c["at"] for c in inside], where
    for child, want in zip(fired.children, inside, strict=True):
        _compare(f"{where} > inside {want}", child, {"call": _call(child), "expect": want})


def _call(fired: Fire) -> Json:
    return {"event": fired.event, "args": fired.kwargs}


def _rows(expect: Json) -> list[str]:
    """The rows a call tree took, in call order, as the oracle lists them."""
    own = [expect["row"]] if expect.get("row") else []
    return own + [r for child in expect.get("inside", []) for r in _rows(child)]


@pytest.mark.parametrize("name", [s for s in STORIES if s not in UNTOLD])
def test_the_runtime_tells_the_story(name: str) -> None:
    story = VECTORS.story(name)
    telling = Telling(story)
    try:
        telling.tell()
        roots = telling.recorder.roots
        assert len(roots) >= len(telling.expected), [str(r) for r in roots]
        oracle = Oracle(AGENT)
        oracle.follow(roots)  # the interpreter agrees, re-entrant calls included
        rows = [r for step in telling.expected for r in _rows(step["expect"])]
        assert oracle.rows[: len(rows)] == rows
        for k, step in enumerate(telling.expected):
            where = f"story {name}, {step['id']}: the runtime fired {roots[k]}"
            _compare(where, roots[k], step)
            after = full(AGENT, {**step["state"], **step["expect"].get("changes", {})})
            assert roots[k].after == after, where
        assert telling.recorder.problems == []
    finally:
        telling.close()


def test_every_untold_story_exists() -> None:
    assert set(UNTOLD) <= set(STORIES)
