"""One agent's turns: the steps of each, their requests, tool calls and hooks, and what they record.

A :class:`TurnRunner` is the work the driver of ``_core.py`` awaits between a turn's claim and
its retire. Its core builds one and lends it what a turn needs (:class:`TurnHost`)::

    ending = await runner.run(signal, turn, claimed)   # "completed", ..., or "error"
    core._fire("retire", end=ending)                   # the table classifies the outcome

The runner fires no table event: a step boundary that finds steering queued asks its host to
take it (``take_steering``), the only event a turn's work causes. A turn whose own work failed
keeps how (its class of failure and the exception) and returns ``"error"``; the core's turn
effects then ask the runner what to record (:meth:`TurnRunner.record_claim`,
:meth:`TurnRunner.ended`, :meth:`TurnRunner.failure`), so the failure is classified and
recorded in one place. Everything else a turn does is the seams' (the model, the tools, the
hooks, the event bus's listeners) and the durable log's.

Each step, in order: ``agent/pre-step``, the step boundary, prompt assembly, then the step itself,
bracketed by ``step/start`` and ``step/end``: request configuration (``agent/request``), the
model request, the tool calls. The signal is checked after every awaited seam; cancellation is
cooperative, and the runner never abandons a seam's work. Assembly also runs outside any turn,
with no signal (:meth:`TurnRunner.assemble`, for :meth:`Agent.assemble`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast, final, get_args

from fsm_core._errors import UsageError, echo
from fsm_core.runtime._agent import Agent
from fsm_core.runtime._events import EventBus
from fsm_core.runtime._history import History
from fsm_core.runtime._hooks import Hooks, run_hooks
from fsm_core.runtime._inbox import Inbox, UserMessage
from fsm_core.runtime._llm import Finish, ModelAdapter, Reply, Request, Tool, ToolCall
from fsm_core.runtime._payloads import (
    AssembleContext,
    AssistantMessageRecorded,
    PreStep,
    RequestConfig,
    RequestError,
    StepBoundary,
    ToolApproval,
    TurnFailed,
    TurnStopping,
    UserMessageRecorded,
)
from fsm_core.runtime._session import ErrorCode, Session, SessionError
from fsm_core.runtime._signal import Aborted, AbortSignal
from fsm_core.runtime._teardown import raise_if_cancelling

__all__ = ["TurnHost", "TurnRunner", "TurnSeams"]

log = logging.getLogger("fsm_core.runtime")

_DURABLE_OUTCOME = {"max_tokens": "max-tokens"}
_ENDINGS = {"stop": "completed", "max_tokens": "max_tokens", "blocked": "blocked"}
_FINISHES: tuple[Finish, ...] = get_args(Finish)
_CALLS = (tuple, list)
"""What a reply's ``tool_calls`` may be."""


class _InvalidReply(Exception):
    """The model answered with a reply the turn cannot use (durable code ``invalid-reply``)."""


def _usable(reply: object) -> Reply:
    """``reply`` if the turn can use it: a :class:`Reply` of the declared field types."""
    if not (
        isinstance(reply, Reply)
        and isinstance(reply.text, str)
        and reply.finish in _FINISHES
        and isinstance(reply.tool_calls, _CALLS)
        and (
            not reply.tool_calls
            or all(
                isinstance(call, ToolCall)
                and isinstance(call.id, str)
                and isinstance(call.name, str)
                and isinstance(call.args, Mapping)
                for call in reply.tool_calls
            )
        )
    ):
        raise _InvalidReply(f"the model answered {type(reply).__name__}, not a usable Reply")
    return reply


async def _same(value: Any) -> Any:
    return value


class TurnSeams(Protocol):
    """What a turn calls out to, read live: the model, the tools and the runtime's hooks."""

    @property
    def model(self) -> ModelAdapter: ...
    @property
    def tools(self) -> Mapping[str, Tool]: ...
    @property
    def hooks(self) -> Hooks: ...


class TurnHost(Protocol):
    """What a :class:`TurnRunner` asks of the agent whose turns it runs (its core)."""

    @property
    def id(self) -> str: ...
    @property
    def agent(self) -> Agent: ...
    @property
    def session(self) -> Session: ...
    @property
    def events(self) -> EventBus: ...
    @property
    def seams(self) -> TurnSeams: ...
    @property
    def inbox(self) -> Inbox: ...

    def take_steering(self, rest: bool) -> None:
        """Take the queued steering at a step boundary (the table's ``take_steering``);
        ``rest`` tells the table whether next-turn work stays queued."""
        ...


@final
class TurnRunner:
    """Runs one agent's turns, one at a time; its core builds one and owns it.

        runner = TurnRunner(core)
        ending = await runner.run(signal, turn, claimed)

    ``run`` returns the turn's own ending and never raises for a seam's failure: it keeps the
    failure for :meth:`ended` and returns ``"error"``. It raises only when the driver's own task
    is being cancelled, or a ``BaseException`` that is no ``Exception`` escapes a seam; the
    driver then tells the runner (:meth:`halted`) as it retires the turn.
    """

    def __init__(self, host: TurnHost) -> None:
        self._host = host
        # The core never replaces these: read once, so a step reads them as the core did.
        self.id = host.id
        self.agent = host.agent
        self.session = host.session
        self.events = host.events
        self.seams = host.seams
        self.inbox = host.inbox
        self._history = History()
        """What each request says, folded from the session as it grows."""
        self._code: ErrorCode | None = None
        """How the turn's own work failed, set where :meth:`run` classifies the failure and
        consumed by :meth:`ended`; None there means the driver halted (``halted``)."""
        self._model_error: BaseException | None = None
        """The model's exception that no ``agent/request-error`` listener retried, so the
        classification can tell it (``model-failed``) from a seam's."""
        self._error: BaseException | None = None
        """What ended the turn's work (the exception ``_code`` classifies, or the escape that
        halted the driver, :meth:`halted`), consumed with the code by :meth:`ended`."""
        self._failed: TurnFailed | None = None
        """The ``turn/error`` payload :meth:`ended` left for :meth:`failure`, which the
        ``publish_turn_error`` effect calls in the same row."""

    # --- what the core's effects record of a turn ---------------------------------------------

    def record_claim(self, turn: int, messages: list[UserMessage]) -> None:
        """The durable claim by the open turn, then each claimed message's text."""
        self.session.append("inbox/claimed", {"turn": turn, "ids": [m.id for m in messages]})
        for message in messages:
            self.session.append("user/message", {"id": message.id, "text": message.text})

    def announce(self, signal: AbortSignal, turn: int, messages: list[UserMessage]) -> None:
        """Notify ``user/message`` for each claimed message, after it was recorded."""
        for message in messages:
            self.events.notify(
                "user/message", UserMessageRecorded, self.agent, signal, turn, message
            )

    def halted(self, escape: BaseException) -> None:
        """The driver retires the open turn after ``escape``: it ends in error, ``halted``."""
        self._error = escape

    def ended(self, turn: int, outcome: str) -> dict[str, str | int]:
        """The open turn's durable outcome (``publish_turn_end``); for ``error``, a class of
        failure and where, never the exception (seed 000: durable-clean), which it keeps for
        :meth:`failure`."""
        durable: dict[str, str | int] = {"kind": _DURABLE_OUTCOME.get(outcome, outcome)}
        code, self._code, self._model_error = self._code or "halted", None, None
        error, self._error = self._error, None
        if outcome == "error":
            step = self._last_step(turn)
            durable |= {"step": step, "code": code}
            assert error is not None, "a turn ends in error only after its work failed"
            self._failed = TurnFailed(self.agent, turn, step, code, error)
        return durable

    def failure(self) -> TurnFailed:
        """The ``turn/error`` payload :meth:`ended` left, with the exception; taken once."""
        failed, self._failed = self._failed, None
        assert failed is not None, "publish_turn_error follows publish_turn_end(error)"
        return failed

    def _last_step(self, turn: int) -> int:
        """The number of ``turn``'s last ``step/start`` in the log, 0 if it opened none."""
        for event in reversed(self.session.events):
            if event.type in ("turn/start", "turn/end"):
                break
            if event.type == "step/start" and event.data["turn"] == turn:
                return cast(int, event.data["step"])
        return 0

    # --- the turn's work ------------------------------------------------------------------------

    async def run(self, signal: AbortSignal, turn: int, claimed: Sequence[UserMessage]) -> str:
        """Run one turn's steps; return its own ending. The table classifies the outcome.

        Each step, in order: ``agent/pre-step``, the step boundary (takes the steering sent
        so far), prompt assembly (:meth:`_assemble`), then the step itself (:meth:`_step`),
        which opens with ``step/start``. The signal is checked after every awaited seam, so a
        cancel or disposal before the step opens leaves no step in the log and no request.
        After the last step, ``agent/turn-stopping``. The runtime's hooks (:class:`Hooks`) run
        with the same signal: ``prompt`` before the first step, ``stop`` last.
        """
        step = 0
        try:
            # Prompt hooks first: a block refuses the turn before any step or request.
            blocked = bool(self.seams.hooks.prompt) and await self._hook(
                "prompt", signal, turn, prompt=[m.text for m in claimed]
            )
            while not blocked:
                step += 1
                if self.events.heard("agent/pre-step"):  # observe-only: no listener, no seam
                    await self.events.waterfall(
                        "agent/pre-step", PreStep(self.agent, signal, turn, step), _same
                    )
                signal.raise_if_aborted()
                if self.inbox.next_step:
                    self._host.take_steering(rest=bool(self.inbox.next_turn))
                messages = await self.assemble(signal)
                signal.raise_if_aborted()
                reply = await self._step(signal, turn, step, messages)
                if reply.finish != "tool_calls":
                    break
            ending = "blocked" if blocked else _ENDINGS[reply.finish]
            if self.events.heard("agent/turn-stopping"):
                await self.events.waterfall(
                    "agent/turn-stopping", TurnStopping(self.agent, signal, turn, ending), _same
                )
            if self.seams.hooks.stop:
                await self._hook("stop", signal, turn, ending=ending)
            return ending
        except Aborted as error:
            # The table reads the aborted holder and records aborted/disposed; the code counts
            # only for an Aborted some seam raised while the turn's own signal was not aborted.
            self._code, self._error = self._classify(error), error
            return "error"
        except (Exception, asyncio.CancelledError) as error:
            # The driver's own task is being cancelled (a seam may have turned the
            # CancelledError into another exception): _drive retires the turn and halts.
            raise_if_cancelling()
            log.exception("agent %s: turn %d failed", self.id, turn)
            self._code, self._error = self._classify(error), error
            return "error"

    async def _hook(self, seam: str, signal: AbortSignal, turn: int, **about: Any) -> bool:
        """Run the ``seam`` hooks of the runtime (:class:`Hooks`) with the turn's signal; True
        iff one blocked. Raises :class:`Aborted` when the signal aborted meanwhile: the
        hooks' processes are gone by then (``run_hook`` waits for them)."""
        commands = getattr(self.seams.hooks, seam)
        if not commands:
            return False
        payload = {"hook": seam, "agent": self.id, "turn": turn, **about}
        blocked = await run_hooks(commands, payload, signal, self.seams.hooks)
        signal.raise_if_aborted()
        return blocked is not None

    def _classify(self, error: BaseException) -> ErrorCode:
        """The durable class of the failure that ended the turn (see ``ErrorCode``)."""
        model_error, self._model_error = self._model_error, None
        if error is model_error:
            return "model-failed"
        if isinstance(error, _InvalidReply | SessionError):
            return "invalid-reply"  # the only content the turn records unchecked is the reply's
        return "seam-failed"

    async def assemble(self, signal: AbortSignal | None) -> Sequence[Mapping[str, Any]]:
        """The conversation so far, as the ``agent/assemble`` waterfall leaves it: a step's
        prompt (``signal`` is the turn's), or, with ``signal=None``, an assembly outside any
        turn (:meth:`Agent.assemble`), which fires no table event and records nothing. The
        conversation is read from the durable session (see ``_history.py`` for which records
        say what), so a replay or a resumed log asks the same."""
        history = self._history.read(self.session.events)
        if not self.events.heard("agent/assemble"):
            return history
        assembled = await self.events.waterfall(
            "agent/assemble", AssembleContext(self.agent, signal, history), _same
        )
        if type(assembled) is not AssembleContext:
            raise UsageError(
                f"agent {self.id}: an agent/assemble listener returned {echo(assembled)}, not "
                "an AssembleContext; return the context it was given, or a changed copy"
            )
        # A snapshot already; what a listener built is copied, so it cannot change it later.
        return history if assembled.messages is history else tuple(assembled.messages)

    async def _step(
        self, signal: AbortSignal, turn: int, step: int, messages: Sequence[Mapping[str, Any]]
    ) -> Reply:
        """One step, bracketed by ``step/start`` and ``step/end``: the request, the assistant's
        answer and the tool calls it asked for."""
        self.session.append("step/start", {"turn": turn, "step": step})
        try:
            self.events.notify("step/start", StepBoundary, self.agent, signal, turn, step)
            signal.raise_if_aborted()
            request = Request(self.id, turn, step, messages, self._tool_names())
            if self.events.heard("agent/request"):  # observe-only: no listener, no seam
                request = await self._configure(signal, turn, step, request)
                signal.raise_if_aborted()
            reply = await self._request(request, signal)
            signal.raise_if_aborted()
            self.session.append(
                "assistant/message", {"turn": turn, "step": step, "text": reply.text}
            )
            self.events.notify(
                "assistant/message", AssistantMessageRecorded, self.agent, signal, turn, step, reply
            )
            for call in reply.tool_calls:
                if signal.aborted:
                    # As the original: the log shows every call the model asked for, each
                    # answered; those after the abort never reach their tool.
                    self._record_call(turn, step, call)
                    self._record_result(turn, step, call, False, "aborted")
                    continue
                with contextlib.suppress(Aborted):  # re-raised below, once all are answered
                    await self._call_tool(signal, turn, step, call)
            signal.raise_if_aborted()
            return reply
        finally:
            self.session.append("step/end", {"turn": turn, "step": step})
            self.events.notify("step/end", StepBoundary, self.agent, signal, turn, step)

    async def _configure(
        self, signal: AbortSignal, turn: int, step: int, request: Request
    ) -> Request:
        """The request the ``agent/request`` waterfall leaves; it must be this step's."""
        configured = await self.events.waterfall(
            "agent/request", RequestConfig(self.agent, signal, turn, step, request), _same
        )
        if type(configured) is not RequestConfig:
            raise UsageError(
                f"agent {self.id}: an agent/request listener returned {echo(configured)}, not "
                "a RequestConfig; return the payload it was given, or a changed copy"
            )
        sent = configured.request
        if type(sent) is not Request or (sent.agent_id, sent.turn, sent.step) != (
            request.agent_id,
            turn,
            step,
        ):
            raise UsageError(
                f"agent {self.id}: an agent/request listener left {echo(sent)}, not the "
                f"Request of turn {turn} step {step}; change a copy of the request it was given"
            )
        if sent.messages is request.messages:
            return sent
        # As assembly does: what a listener built is copied, so it cannot change it later.
        return dataclasses.replace(sent, messages=tuple(sent.messages))

    async def _request(self, request: Request, signal: AbortSignal) -> Reply:
        """Send ``request`` (already configured: a retry sends it again, as it is)."""
        attempt = 0
        while True:
            try:
                reply = await self.seams.model.generate(request, signal)
            except Aborted:
                raise
            except Exception as error:
                attempt += 1
                decision = await self.events.waterfall(
                    "agent/request-error",
                    RequestError(self.agent, signal, error, attempt),
                    lambda _e: _same("fail"),
                )
                signal.raise_if_aborted()
                if decision != "retry":
                    self._model_error = error  # if it ends the turn: model-failed
                    raise
                continue
            return _usable(reply)

    async def _call_tool(self, signal: AbortSignal, turn: int, step: int, call: ToolCall) -> None:
        """Ask approval, run the tool, and record its answer; the history reads it from the log."""
        self._record_call(turn, step, call)
        # A failure is recorded as a short classification, never as an exception's text. Every
        # tool/call gets its tool/result, even when the turn is interrupted during approval.
        ok, result = False, "aborted"
        try:
            approved = await self.events.waterfall(
                "agent/tool-approval",
                ToolApproval(self.agent, signal, call),
                lambda _a: _same(True),
            )
            signal.raise_if_aborted()
            about = {"step": step, "id": call.id, "tool": call.name, "args": dict(call.args)}
            blocked = approved and await self._hook("tool", signal, turn, **about)
            tool = self.seams.tools.get(call.name)
            result = "blocked" if blocked else "refused" if not approved else "unknown-tool"
            if approved and not blocked and tool is not None:
                result = "aborted"
                try:
                    result, ok = await tool.execute(call.args, signal), True
                except Aborted:
                    raise
                except Exception:
                    log.exception("agent %s: tool %s failed", self.id, call.name)
                    result = "failed"
        finally:
            self._record_result(turn, step, call, ok, result)

    def _record_call(self, turn: int, step: int, call: ToolCall) -> None:
        self.session.append(
            "tool/call",
            {"turn": turn, "step": step, "id": call.id, "name": call.name, "args": dict(call.args)},
        )

    def _record_result(self, turn: int, step: int, call: ToolCall, ok: bool, result: Any) -> None:
        """Append the call's ``tool/result``; a result the log cannot hold (NaN, a set, an
        object, an integer beyond JSON's safe range) is recorded as ``invalid-result``."""
        data = {"turn": turn, "step": step, "id": call.id, "ok": ok, "result": result}
        try:
            self.session.append("tool/result", data)
        except Exception:  # SessionError, or a result that raises while the log reads it
            log.exception("agent %s: tool %s gave a result the log cannot hold", self.id, call.name)
            self.session.append("tool/result", {**data, "ok": False, "result": "invalid-result"})

    def _tool_names(self) -> tuple[str, ...]:
        return tuple(sorted(self.seams.tools))
