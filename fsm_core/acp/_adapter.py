"""The agent side of the Agent Client Protocol, over one fsm_core :class:`~fsm_core.Runtime`.

Each ACP session is one fsm_core agent. ``session/prompt`` sends the prompt as a followup and
answers when the turn that claimed it ends; ``session/cancel`` is ``agent.cancel(USER)``
(seed 000: ACP cancellation maps to ``user``), so the pending prompt answers ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import itertools
import json
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, cast

import acp
from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.helpers import update_agent_message_text, update_agent_thought_text
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    CloseSessionResponse,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    StopReason,
    TextContentBlock,
)

from fsm_core.runtime import (
    USER,
    AbortSignal,
    Agent,
    AgentHandle,
    MessageDiscarded,
    MessagesClaimed,
    ModelAdapter,
    Reply,
    Request,
    Runtime,
    TurnEnded,
    UserMessage,
)

__all__ = ["STOP_REASONS", "AcpAgent", "EchoModel", "load_model", "serve"]

log = logging.getLogger("fsm_core.acp")

STOP_REASONS: Mapping[str, StopReason] = {
    "completed": "end_turn",
    "max-tokens": "max_tokens",
    "blocked": "refusal",
    "aborted": "cancelled",
    "disposed": "cancelled",
}
"""The ACP stop reason of each durable turn outcome; an ``error`` outcome answers the prompt
with a JSON-RPC error instead (ACP has no stop reason for a failed turn)."""

LINE_LIMIT = 16 << 20
"""The longest JSON-RPC message read from the client, in bytes; a longer one is answered
``Invalid request`` and skipped."""


class EchoModel:
    """The default model: answers each prompt with ``echo: <the prompt>``, with no network.

    ``hold``: a prompt that is exactly this text waits until its turn is cancelled, so a
    client (or a test) can cancel a turn in the middle of a model request.
    """

    def __init__(self, hold: str | None = None) -> None:
        self.hold = hold

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        users = [m for m in request.messages if m.get("role") == "user"]
        text = str(users[-1].get("text", "")) if users else ""
        if self.hold is not None and text == self.hold:
            await signal.wait()
            signal.raise_if_aborted()
        return Reply(f"echo: {text}")


@dataclass(eq=False)
class _Prompt:
    """One pending ``session/prompt``: its message, and the turn's outcome once it ended."""

    message_id: str
    turn: int | None = None
    ended: asyncio.Future[Mapping[str, str | int]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass(eq=False)
class _Session:
    handle: AgentHandle
    prompt: _Prompt | None = None


class _Streaming:
    """The model seam as the adapter lends it: tell the client a step began, ask the model,
    stream its reply text to the client, all inside the turn (before the prompt answers)."""

    def __init__(self, adapter: AcpAgent, model: ModelAdapter) -> None:
        self._adapter = adapter
        self._model = model

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        await self._adapter._update(request.agent_id, "thought", f"step {request.step}")
        reply = await self._model.generate(request, signal)
        if isinstance(reply, Reply) and isinstance(reply.text, str) and reply.text:
            await self._adapter._update(request.agent_id, "message", reply.text)
        return reply


def _invalid_params(detail: str, **data: Any) -> RequestError:
    return RequestError(-32602, "Invalid params", {"details": detail, **data})


class AcpAgent:
    """An ACP agent (``acp.Agent``) whose sessions are the agents of one runtime."""

    def __init__(self, model: ModelAdapter) -> None:
        self.runtime = Runtime(model=_Streaming(self, model))
        self._client: Client | None = None
        self._sessions: dict[str, _Session] = {}
        self._ids = itertools.count(1)
        events = self.runtime.events
        events.on("inbox/claimed", self._claimed)
        events.on("inbox/discarded", self._discarded)
        events.on("turn/end", self._turn_ended)

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    # --- ACP methods --------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **_: Any,
    ) -> InitializeResponse:
        try:
            ours = version("fsm-core")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            ours = "0"
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(load_session=False),
            agent_info=Implementation(
                name="fsm-core", title="fsm_core reference agent", version=ours
            ),
        )

    async def new_session(self, cwd: str, **_: Any) -> NewSessionResponse:
        session_id = f"session-{next(self._ids)}"
        handle = await self.runtime.create_agent(session_id)
        self._sessions[session_id] = _Session(handle)
        return NewSessionResponse(session_id=session_id)

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        session = self._session(session_id)
        if session.prompt is not None:
            raise RequestError(
                -32600,
                "Invalid request",
                {"details": f"a prompt is already running in {session_id}; cancel it or wait"},
            )
        texts = []
        for index, block in enumerate(prompt):
            if not isinstance(block, TextContentBlock):
                raise _invalid_params(
                    f"prompt[{index}] is a {getattr(block, 'type', type(block).__name__)} block; "
                    "this agent reads text only",
                )
            texts.append(block.text)
        pending = session.prompt = _Prompt(f"{session_id}/prompt-{next(self._ids)}")
        try:
            session.handle.agent.followup(UserMessage(pending.message_id, "\n".join(texts)))
            outcome = await asyncio.shield(pending.ended)
        finally:
            session.prompt = None
        kind = str(outcome["kind"])
        if kind not in STOP_REASONS:
            raise RequestError(
                -32603, "Internal error", {"details": "the turn failed", "outcome": dict(outcome)}
            )
        return PromptResponse(stop_reason=STOP_REASONS[kind])

    async def cancel(self, session_id: str, **_: Any) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            log.warning("session/cancel for an unknown session %s", json.dumps(session_id))
            return
        session.handle.agent.cancel(USER)

    async def close_session(self, session_id: str, **_: Any) -> CloseSessionResponse:
        """Dispose the session's agent; a prompt still pending answers ``cancelled``."""
        session = self._session(session_id)
        try:
            await session.handle.dispose()
        finally:
            del self._sessions[session_id]
            # Disposal keeps queued work parked: a prompt no turn claimed never ends on its own.
            if session.prompt is not None and not session.prompt.ended.done():
                session.prompt.ended.set_result({"kind": "disposed"})
        return CloseSessionResponse()

    # --- plumbing ----------------------------------------------------------------------

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise _invalid_params(f"no session {json.dumps(session_id)}", sessionId=session_id)
        return session

    def _pending(self, agent: Agent) -> _Prompt | None:
        session = self._sessions.get(agent.id)
        return session.prompt if session is not None else None

    def _claimed(self, event: MessagesClaimed) -> None:
        pending = self._pending(event.agent)
        if pending is not None and any(m.id == pending.message_id for m in event.messages):
            pending.turn = event.turn

    def _discarded(self, event: MessageDiscarded) -> None:
        """A prompt cancelled before any turn claimed it: it answers ``cancelled``."""
        pending = self._pending(event.agent)
        if (
            pending is not None
            and event.message.id == pending.message_id
            and not pending.ended.done()
        ):
            pending.ended.set_result({"kind": "aborted"})

    def _turn_ended(self, event: TurnEnded) -> None:
        pending = self._pending(event.agent)
        if pending is not None and pending.turn == event.turn and not pending.ended.done():
            pending.ended.set_result(event.outcome)

    async def _update(self, session_id: str, kind: str, text: str) -> None:
        if self._client is None:
            return
        update = (
            update_agent_thought_text(text)
            if kind == "thought"
            else update_agent_message_text(text)
        )
        with contextlib.suppress(ConnectionError):  # the client left; the turn goes on
            await self._client.session_update(session_id=session_id, update=update)

    async def aclose(self) -> None:
        """Dispose every session's agent and wait for all their work."""
        await self.runtime.aclose()


class _Lines:
    """Newline-delimited JSON-RPC over the process's stdin and stdout (an ``acp`` transport).

    Unlike the package's own framing, input that is not a JSON-RPC message gets the error
    response JSON-RPC 2.0 prescribes (``Parse error`` for a line that is not JSON, ``Invalid
    request`` for JSON that is not a request, a response or a notification) and the agent
    goes on reading; a line longer than :data:`LINE_LIMIT` is skipped the same way.
    """

    def __init__(
        self, reader: asyncio.StreamReader, write: Callable[[bytes], Awaitable[None]]
    ) -> None:
        self._reader = reader
        self._write = write
        self._lock = asyncio.Lock()

    async def send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        async with self._lock:  # one message per line, whole, whatever task sends it
            await self._write(line)

    async def receive(self) -> dict[str, Any] | None:
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                if not end.partial.strip():
                    return None
                line = end.partial
            except asyncio.LimitOverrunError:
                await self._skip_line()
                await self._refuse(
                    -32600, "Invalid request", f"a message longer than {LINE_LIMIT} bytes"
                )
                continue
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                await self._refuse(-32700, "Parse error", "a line that is not JSON")
                continue
            problem = _not_a_message(message)
            if problem is not None:
                await self._refuse(-32600, "Invalid request", problem)
                continue
            return cast(dict[str, Any], message)

    async def _skip_line(self) -> None:
        while True:
            try:
                await self._reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as over:
                await self._reader.readexactly(over.consumed)
            except asyncio.IncompleteReadError:
                return

    async def _refuse(self, code: int, message: str, details: str) -> None:
        error = {"code": code, "message": message, "data": {"details": details}}
        with contextlib.suppress(ConnectionError):
            await self.send({"jsonrpc": "2.0", "id": None, "error": error})

    async def close(self) -> None:
        """Nothing to release: the streams are the process's own."""


def _not_a_message(message: object) -> str | None:
    """Why ``message`` is not a JSON-RPC 2.0 request, notification or response, or None."""
    if not isinstance(message, dict):
        return f"a JSON {type(message).__name__}, not an object (batches are not supported)"
    if "id" in message and not (
        message["id"] is None or isinstance(message["id"], str) or type(message["id"]) is int
    ):
        return "an id that is not a string, an integer or null"
    if "method" in message:
        if not isinstance(message["method"], str):
            return "a method that is not a string"
        if "params" in message and not isinstance(message["params"], dict | list | None):
            return "params that are neither an object nor an array"
    elif "id" not in message or not ("result" in message or "error" in message):
        return "neither a method call nor a response"
    return None


async def serve(
    model: ModelAdapter,
    streams: tuple[asyncio.StreamReader, Callable[[bytes], Awaitable[None]]] | None = None,
) -> None:
    """Serve ``model`` as an ACP agent on ``streams`` (a reader of the client's lines and an
    async ``write(bytes)``; default: this process's stdin and stdout) until the client closes
    its side; then dispose every session and return once all their work has settled."""
    reader, write = streams if streams is not None else await _stdio()
    agent = AcpAgent(model)
    try:
        # AcpAgent has the methods it serves; the router answers the others "Method not found".
        served = cast(acp.Agent, agent)
        await run_agent(served, _Lines(reader, write), use_unstable_protocol=True)
    finally:
        await agent.aclose()


async def _stdio() -> tuple[asyncio.StreamReader, Callable[[bytes], Awaitable[None]]]:
    """This process's stdin as a stream reader and stdout as an async write: through the event
    loop for pipes, and through a thread (stdin) or blocking writes (stdout) for a regular
    file, which the event loop cannot watch (``fsm-core acp < requests.jsonl > out``)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except ValueError:
        threading.Thread(target=_feed, args=(loop, reader), daemon=True).start()
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, sys.stdout
        )
    except ValueError:

        async def write_file(data: bytes) -> None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

        return reader, write_file
    writer = asyncio.StreamWriter(transport, protocol, None, loop)

    async def write_pipe(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    return reader, write_pipe


def _feed(loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader) -> None:
    try:
        while chunk := os.read(sys.stdin.fileno(), 65536):
            loop.call_soon_threadsafe(reader.feed_data, chunk)
    finally:
        loop.call_soon_threadsafe(reader.feed_eof)


def load_model(spec: str) -> Callable[[], ModelAdapter]:
    """The factory named ``module:attribute``; raises ValueError naming what is wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--model {spec!r}: expected MODULE:FACTORY, like mypkg.models:make")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"--model {spec!r}: cannot import {module_name}: {error}") from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ValueError(f"--model {spec!r}: {module_name} has no callable {attribute}")
    return factory  # type: ignore[no-any-return]
