"""Scripted stand-ins for tests of code that drives fsm_core agents: models, tools, gates.

:class:`ScriptedModel` and :class:`ScriptedTool` play a list of steps. A step is a result, a
:class:`Fail` to raise, or a :class:`Wait` on a :class:`Gate` first::

    gate = Gate("model")
    model = ScriptedModel([Wait(gate, Reply("done")), Reply("next turn")])
    ...
    await gate.reached.wait()   # the turn is now inside the model call
    agent.cancel()              # a cooperative step raises Aborted; an uncooperative one waits
    gate.open()
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, final

from fsm_core.runtime._llm import Reply, Request
from fsm_core.runtime._signal import AbortSignal

__all__ = ["Fail", "Gate", "ScriptedModel", "ScriptedTool", "Wait"]


@final
class Gate:
    """A barrier a test controls: work waits on it, the test opens (or fails) it.

    ``reached`` is set when some work starts waiting, so a test waits on the event rather
    than sleeping. ``cooperate=True`` waiters also stop when their signal aborts, raising
    :class:`Aborted`; others wait for the gate whatever the signal says.
    """

    def __init__(self, name: str = "gate") -> None:
        self.name = name
        self.reached = asyncio.Event()
        self._opened = asyncio.Event()
        self._wakers: list[asyncio.Event] = []
        self._error: BaseException | None = None

    def open(self) -> None:
        self._opened.set()
        for wake in self._wakers:
            wake.set()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self.open()

    @property
    def is_open(self) -> bool:
        return self._opened.is_set()

    async def wait(self, signal: AbortSignal | None = None, *, cooperate: bool = True) -> None:
        self.reached.set()
        if cooperate and signal is not None:
            wake = asyncio.Event()
            self._wakers.append(wake)
            off = signal.add_listener(lambda _s: wake.set())
            try:
                if not signal.aborted and not self.is_open:
                    await wake.wait()
            finally:
                off()
                self._wakers.remove(wake)
            if not self.is_open:
                signal.raise_if_aborted()
        else:
            await self._opened.wait()
        if self._error is not None:
            raise self._error

    def __repr__(self) -> str:
        return f"<Gate {self.name} {'open' if self.is_open else 'closed'}>"


@final
@dataclass(frozen=True, slots=True)
class Wait:
    """Wait on ``gate`` (cooperating with the signal unless told not to), then give ``then``."""

    gate: Gate
    then: Any
    cooperate: bool = True


@final
@dataclass(frozen=True, slots=True)
class Fail:
    """Raise ``error`` (a request error, a failing tool)."""

    error: BaseException


Step: TypeAlias = Any
"""A result, a :class:`Wait` or a :class:`Fail`."""


async def _play(step: Step, signal: AbortSignal) -> Any:
    while True:
        if isinstance(step, Wait):
            await step.gate.wait(signal, cooperate=step.cooperate)
            step = step.then
            continue
        if isinstance(step, Fail):
            raise step.error
        return step


@final
class ScriptedModel:
    """A model adapter that plays ``script`` one step per request.

    ``requests`` records every request and the signal it came with, so a test can assert
    that every seam of a turn saw the same signal and the next turn a fresh one.
    """

    def __init__(self, script: Sequence[Step] = ()) -> None:
        self.script = list(script)
        self.requests: list[tuple[Request, AbortSignal]] = []

    def then(self, *steps: Step) -> ScriptedModel:
        self.script.extend(steps)
        return self

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        self.requests.append((request, signal))
        if not self.script:
            raise AssertionError(f"ScriptedModel: no step left for request {request}")
        reply = await _play(self.script.pop(0), signal)
        if not isinstance(reply, Reply):
            raise TypeError(f"ScriptedModel: a step gave {reply!r}, not a Reply")
        return reply


@final
class ScriptedTool:
    """A tool that plays ``script`` one step per call; ``calls`` records args and signals."""

    def __init__(self, name: str, script: Sequence[Step] = ()) -> None:
        self._name = name
        self.script = list(script)
        self.calls: list[tuple[Mapping[str, Any], AbortSignal]] = []

    @property
    def name(self) -> str:
        return self._name

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        self.calls.append((args, signal))
        if not self.script:
            raise AssertionError(f"ScriptedTool {self._name}: no step left")
        return await _play(self.script.pop(0), signal)
