"""The agent side of the Agent Client Protocol, over fsm_core runtimes (one a session).

Each ACP session is one fsm_core agent, in a runtime of its own: its hooks run in the
session's ``cwd`` (and its tools are the session's). ``session/prompt`` sends the prompt as a
followup and answers when the turn that claimed it ends; ``session/cancel``, and
``$/cancel_request`` naming a running ``session/prompt``, are ``agent.cancel(USER)`` (seed
000: ACP cancellation maps to ``user``), so the pending prompt answers ``cancelled``.

Each tool call the model asks for goes on the wire as a ``tool_call`` update (``pending``),
asks the client with ``session/request_permission`` (the runtime's ``agent/tool-approval``
seam), moves to ``in_progress`` once allowed, and ends in a ``tool_call_update`` whose status
is ``completed`` or ``failed`` (its ``rawOutput`` the durable result: a refused, blocked,
unknown or cancelled call is ``failed`` with the classification, ``refused``, ``blocked``,
``unknown-tool`` or ``aborted``: ACP has no ``cancelled`` tool status). The statuses are read
from the durable log, so the client sees what the log says.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import itertools
import logging
import os
import re
import selectors
import signal
import stat
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, cast, final

import acp
from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.helpers import (
    update_agent_message_text,
    update_agent_thought_text,
    update_user_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    CloseSessionResponse,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    SessionCapabilities,
    SessionCloseCapabilities,
    StopReason,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)

from fsm_core._errors import UsageError, echo
from fsm_core.acp._lines import READ_LIMIT, Lines
from fsm_core.acp._mcp import McpServers, ServerFailed, stdio_servers
from fsm_core.runtime import (
    USER,
    AbortSignal,
    Agent,
    AgentHandle,
    Hooks,
    MessageDiscarded,
    MessagesClaimed,
    ModelAdapter,
    Reply,
    Request,
    Runtime,
    Session,
    SessionError,
    Tool,
    ToolApproval,
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


@final
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
    """One ACP session: its agent, in a runtime of its own (so its hooks, and its tools, are
    the session's), and where it works."""

    id: str
    cwd: str
    """The session's working directory, absolute (checked by ``session/new``): hooks run
    there, and so should anything else the session starts."""
    runtime: Runtime
    handle: AgentHandle
    prompt: _Prompt | None = None
    allowed: set[str] = field(default_factory=set)
    """The tools the user allowed always (``allow_always``): not asked about again."""
    reported: int = 0
    """How many events of the session's log were read for tool calls to report."""


PERMISSIONS = (
    PermissionOption(option_id="allow_once", name="Allow", kind="allow_once"),
    PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
)
"""What ``session/request_permission`` offers for each tool call."""


def _wire_id(data: Mapping[str, Any]) -> str:
    """A tool call's id on the wire: unique within the session, as ACP asks (a model's own
    call ids need only be unique within its reply)."""
    return f"{data['turn']}.{data['step']}.{data['id']}"


_KEPT_ID = re.compile(r"session-[0-9a-f]{32}")
"""The id of a session kept in the sessions directory (``--sessions``): the only names
``session/load`` looks for there, so no id reaches another path."""


def _working_directory(cwd: str) -> None:
    """Refuse a ``cwd`` that is not an absolute path to a directory (hooks run there: one that
    cannot start there decides nothing, a gate let through)."""
    if not os.path.isabs(cwd):
        raise _invalid_params(f"cwd {echo(cwd)} is not an absolute path (ACP: it must be)")
    if not os.path.isdir(cwd):
        raise _invalid_params(f"cwd {echo(cwd)} is not a directory")


class _Streaming:
    """The model seam as the adapter lends it: tell the client a step began, ask the model,
    stream its reply text to the client, all inside the turn (before the prompt answers)."""

    def __init__(self, adapter: AcpAgent, model: ModelAdapter) -> None:
        self._adapter = adapter
        self._model = model

    async def generate(self, request: Request, signal: AbortSignal) -> Reply:
        await self._adapter._report(request.agent_id)  # the last step's tool results
        await self._adapter._update(request.agent_id, "thought", f"step {request.step}")
        reply = await self._model.generate(self._adapter.mcp.offer(request), signal)
        if isinstance(reply, Reply) and isinstance(reply.text, str) and reply.text:
            await self._adapter._update(request.agent_id, "message", reply.text)
        return reply


def _invalid_params(detail: str, **data: Any) -> RequestError:
    return RequestError(-32602, "Invalid params", {"details": detail, **data})


def _prompt_text(prompt: list[Any]) -> str:
    """The prompt's blocks as the text the model reads: text as it is, a ``resource_link`` as
    ``[name](uri)`` (ACP's baseline: every agent reads both). Any other block is refused: this
    agent advertises no ``image``, ``audio`` or ``embeddedContext``."""
    texts = []
    for index, block in enumerate(prompt):
        if isinstance(block, TextContentBlock):
            texts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            texts.append(f"[{block.name}]({block.uri})")
        else:
            kind = getattr(block, "type", type(block).__name__)
            raise _invalid_params(
                f"prompt[{index}] is a {kind} block; this agent reads text and resource_link "
                "blocks only (its promptCapabilities advertise no image, audio or "
                "embeddedContext)",
            )
    return "\n".join(texts)


@final
class AcpAgent:
    """An ACP agent (``acp.Agent``): each session is one agent, in a runtime of its own."""

    def __init__(
        self,
        model: ModelAdapter,
        *,
        hooks: Hooks | None = None,
        tools: Sequence[Tool] = (),
        sessions: Path | None = None,
    ) -> None:
        self._model = _Streaming(self, model)
        self._kept = sessions
        """Where each session's durable log is kept (``SESSION_ID.jsonl``), so that
        ``session/load`` can take it up again in a later process; None: kept nowhere."""
        self._hooks = hooks if hooks is not None else Hooks()
        self._tools = tuple(tools)
        self.mcp = McpServers()
        """The stdio MCP servers of each session (``_mcp.py``); their tools are the session's."""
        self._client: Client | None = None
        self._lines: Lines | None = None
        self._sessions: dict[str, _Session] = {}
        self._ids = itertools.count(1)
        self._left = False  # True iff the client closed its side (client_left)
        self._closing: list[Runtime] = []
        """The runtimes of closed sessions, until ``aclose`` has awaited them."""

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
        # ACP: the client's version if the agent speaks it, else the latest the agent speaks.
        # This agent speaks exactly PROTOCOL_VERSION, so that is the answer to every ask.
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=self._kept is not None,
                prompt_capabilities=PromptCapabilities(
                    image=False, audio=False, embedded_context=False
                ),
                mcp_capabilities=McpCapabilities(http=False, sse=False),
                session_capabilities=SessionCapabilities(close=SessionCloseCapabilities()),
            ),
            agent_info=Implementation(
                name="fsm-core", title="fsm_core reference agent", version=ours
            ),
        )

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> NewSessionResponse:
        _working_directory(cwd)
        if self._kept is None:
            session_id, log = f"session-{next(self._ids)}", None
        else:  # kept past this process: an id no other process of this agent gives
            session_id = f"session-{uuid.uuid4().hex}"
            log = self._log(session_id)
        await self._open(session_id, cwd, mcp_servers, log)
        return NewSessionResponse(session_id=session_id)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> LoadSessionResponse:
        """Take up a session an earlier process of this agent kept (``--sessions``): its agent
        is created on the session's log, and the conversation so far is streamed to the client
        (``user_message_chunk``, ``agent_message_chunk``, each tool call and its result) before
        the answer, as ACP asks."""
        if self._kept is None:
            raise _invalid_params("this agent keeps no sessions: start it with --sessions DIR")
        _working_directory(cwd)
        if not _KEPT_ID.fullmatch(session_id):
            raise RequestError(
                -32002, "Resource not found", {"details": f"no session {echo(session_id)}"}
            )
        if session_id in self._sessions:
            raise RequestError(
                -32600, "Invalid request", {"details": f"{session_id} is open already"}
            )
        if not (self._kept / f"{session_id}.jsonl").is_file():
            raise RequestError(
                -32002,
                "Resource not found",
                {"details": f"no session {session_id} in {echo(str(self._kept))}"},
            )
        session = await self._open(session_id, cwd, mcp_servers, self._log(session_id))
        await self._replay(session)
        return LoadSessionResponse()

    def _log(self, session_id: str) -> Session:
        """The durable log of ``session_id`` in the sessions directory, loaded if a file is
        there (refused if it is not a session's log: nothing of it is taken up)."""
        assert self._kept is not None
        try:
            return Session(self._kept / f"{session_id}.jsonl")
        except SessionError as error:
            raise _invalid_params(str(error)) from None

    async def _open(
        self, session_id: str, cwd: str, mcp_servers: list[Any] | None, log: Session | None
    ) -> _Session:
        """Start the session's MCP servers and its agent, in a runtime of its own, on ``log``
        (a fresh in-memory log when None)."""
        try:
            await self.mcp.start(session_id, cwd, stdio_servers(mcp_servers or []))
        except ValueError as refused:  # a server this agent does not run
            raise _invalid_params(str(refused)) from None
        except ServerFailed as failed:
            raise RequestError(-32603, "Internal error", {"details": str(failed)}) from None
        runtime = Runtime(
            model=self._model, tools=self._tools, hooks=dataclasses.replace(self._hooks, cwd=cwd)
        )
        runtime.tools.update(self.mcp.tools(session_id))
        events = runtime.events
        events.on("inbox/claimed", self._claimed)
        events.on("inbox/discarded", self._discarded)
        events.on("turn/end", self._turn_ended)
        events.on("agent/tool-approval", self._approve)
        try:
            handle = await runtime.create_agent(session_id, log)
        except UsageError as held:  # another process of the agent has the session open
            await self.mcp.stop(session_id)
            await runtime.aclose()
            raise RequestError(-32600, "Invalid request", {"details": str(held)}) from None
        except BaseException:  # the runtime is closing: its servers go too
            await self.mcp.stop(session_id)
            raise
        session = self._sessions[session_id] = _Session(session_id, cwd, runtime, handle)
        return session

    async def _replay(self, session: _Session) -> None:
        """Stream a loaded session's conversation to the client in the log's order: each user
        message and reply, and each tool call and its result as a live turn reports them."""
        lines = self._lines
        for event in session.handle.agent.session.events:
            if lines is not None:  # every line of it arrives: it waits for a slow client
                await lines.room_for_updates()
            text = str(event.data.get("text", ""))
            if event.type == "user/message":
                await self._send_update(session.id, update_user_message_text(text))
            elif event.type == "assistant/message" and text:  # not a reply of tool calls only
                await self._send_update(session.id, update_agent_message_text(text))
            elif event.type in ("tool/call", "tool/result"):
                await self._report_event(session.id, event.type, event.data)
        session.reported = len(session.handle.agent.session.events)

    async def prompt(self, session_id: str, prompt: list[Any], **_: Any) -> PromptResponse:
        session = self._session(session_id)
        if session.prompt is not None:
            raise RequestError(
                -32600,
                "Invalid request",
                {"details": f"a prompt is already running in {session_id}; cancel it or wait"},
            )
        text = _prompt_text(prompt)
        if self._left:  # read before the client left, handled after: cancelled unstarted
            return PromptResponse(stop_reason="cancelled")
        pending = session.prompt = _Prompt(f"{session_id}/prompt-{next(self._ids)}")
        try:
            session.handle.agent.followup(UserMessage(pending.message_id, text))
            outcome = await asyncio.shield(pending.ended)
            await self._report(session_id)  # the last tool results, before the answer
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
            log.warning("session/cancel for an unknown session %s", echo(session_id))
            return
        session.handle.agent.cancel(USER)

    async def close_session(self, session_id: str, **_: Any) -> CloseSessionResponse:
        """Dispose the session's agent and close its runtime; a prompt still pending answers
        ``cancelled``."""
        session = self._session(session_id)
        try:
            await session.handle.dispose()
        finally:
            # Racing closes of one session each get here: the first removes it.
            if self._sessions.get(session_id) is session:
                del self._sessions[session_id]
                self._closing.append(session.runtime)
            _unpark(session)
        try:
            await session.runtime.aclose()
        finally:
            await self.mcp.stop(session_id)  # every process of its servers reaped
        with contextlib.suppress(ValueError):  # a racing close of the session removed it
            self._closing.remove(session.runtime)
        return CloseSessionResponse()

    # --- plumbing ----------------------------------------------------------------------

    def runtime(self, session_id: str) -> Runtime:
        """The runtime of the open session ``session_id`` (its events, its agent)."""
        return self._session(session_id).runtime

    def _session(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError(
                -32002, "Resource not found", {"details": f"no session {echo(session_id)}"}
            )
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
        update = (
            update_agent_thought_text(text)
            if kind == "thought"
            else update_agent_message_text(text)
        )
        await self._send_update(session_id, update)

    async def _send_update(self, session_id: str, update: Any) -> None:
        if self._client is None:
            return
        with contextlib.suppress(ConnectionError):  # the client left; the turn goes on
            await self._client.session_update(session_id=session_id, update=update)

    async def _report(self, session_id: str) -> None:
        """Tell the client of the tool calls and results the session's log recorded since the
        last report: ``tool_call`` (pending) for each call, ``tool_call_update`` (completed or
        failed) for each result. Called at each step, each approval and the prompt's end, so
        the client sees every call before its turn's answer."""
        session = self._sessions.get(session_id)
        if session is None:
            return
        events = session.handle.agent.session.events
        new, session.reported = events[session.reported :], len(events)
        for event in new:
            await self._report_event(session_id, event.type, event.data)

    async def _report_event(self, session_id: str, kind: str, data: Mapping[str, Any]) -> None:
        """A ``tool/call`` (``tool_call``, pending) or ``tool/result`` (``tool_call_update``,
        completed or failed) of the session's log, told to the client."""
        if kind == "tool/call":
            await self._send_update(
                session_id,
                ToolCallStart(
                    session_update="tool_call",
                    tool_call_id=_wire_id(data),
                    title=str(data["name"]),
                    kind="other",
                    status="pending",
                    raw_input=_thawed(data["args"]),
                ),
            )
        elif kind == "tool/result":
            await self._send_update(
                session_id,
                ToolCallProgress(
                    session_update="tool_call_update",
                    tool_call_id=_wire_id(data),
                    status="completed" if data["ok"] else "failed",
                    raw_output={"result": _thawed(data["result"])},
                ),
            )

    async def _approve(
        self, payload: ToolApproval, next: Callable[[ToolApproval], Awaitable[bool]]
    ) -> bool:
        """The ``agent/tool-approval`` seam: ask the client (``session/request_permission``)
        unless the user allowed this tool always; once allowed, the call is ``in_progress``.
        A turn cancelled while the client is asked stops waiting at once, withdraws the
        request (``$/cancel_request``) and counts it as the ``cancelled`` outcome: refused."""
        session = self._sessions.get(payload.agent.id)
        if session is None:
            return await next(payload)
        await self._report(session.id)  # the call itself, pending
        recorded = session.handle.agent.session.events[-1]  # the turn records it, then asks
        assert recorded.type == "tool/call" and recorded.data["id"] == payload.call.id
        wire = _wire_id(recorded.data)
        if payload.call.name not in session.allowed and not await self._ask(session, payload, wire):
            return False
        if not await next(payload):
            return False
        await self._send_update(
            session.id,
            ToolCallProgress(
                session_update="tool_call_update", tool_call_id=wire, status="in_progress"
            ),
        )
        return True

    async def _ask(self, session: _Session, payload: ToolApproval, wire: str) -> bool:
        """True iff the client allows the call (a client that cannot be asked refuses it)."""
        if self._client is None or payload.signal.aborted:
            return False
        call = payload.call
        asking = asyncio.ensure_future(
            self._client.request_permission(
                session_id=session.id,
                tool_call=ToolCallUpdate(
                    tool_call_id=wire,
                    title=call.name,
                    kind="other",
                    status="pending",
                    raw_input=dict(call.args),
                ),
                options=list(PERMISSIONS),
            )
        )
        aborted = asyncio.ensure_future(payload.signal.wait())
        try:
            await asyncio.wait({asking, aborted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
            if not asking.done():  # the turn was cancelled (or this task): withdraw the ask
                asking.cancel()
                if self._lines is not None:
                    await self._lines.withdraw(session.id)
        if asking.cancelled():
            return False
        try:
            answer = asking.result()
        except Exception as error:  # the client failed the request, or left
            log.warning("session %s: the permission request failed: %s", session.id, error)
            return False
        outcome = answer.outcome
        if not isinstance(outcome, AllowedOutcome):  # cancelled
            return False
        if outcome.option_id == "allow_always":
            session.allowed.add(call.name)
        return outcome.option_id in ("allow_once", "allow_always")

    def client_left(self) -> None:
        """The client closed its side (stdin reached end-of-file): cancel every running prompt
        with ``cancel(USER)``; each still gets its answer, ``cancelled``, before the process
        exits.

        Why cancel rather than finish them: a client that closes stdin is leaving (ACP clients,
        like MCP's, close stdin to stop an agent, and signal it if it does not exit), so no one
        waits for the rest of a turn, and a turn may run for as long as its model likes. Its
        leaving is the user's cancel (seed 000 maps ACP cancellation to ``user``). Answering
        each prompt anyway, and flushing, keeps JSON-RPC's promise that every request gets a
        response, for a client that still reads stdout. A client that pipes requests in from a
        file must therefore keep stdin open until its prompts are answered.
        """
        self._left = True
        for session in self._sessions.values():
            if session.prompt is not None:
                session.handle.agent.cancel(USER)

    def cancel_request(self, session_id: str) -> None:
        """``$/cancel_request`` named the running ``session/prompt`` of ``session_id``: its
        turn is cancelled as ``session/cancel`` cancels it (``USER``)."""
        session = self._sessions.get(session_id)
        if session is not None and session.prompt is not None:
            session.handle.agent.cancel(USER)

    async def aclose(self) -> None:
        """Dispose every session's agent and wait for all their work; a prompt still pending
        answers ``cancelled``."""
        runtimes = [*self._closing, *(s.runtime for s in self._sessions.values())]
        closes = [asyncio.ensure_future(r.aclose()) for r in runtimes]
        try:
            if closes:
                await asyncio.wait(closes)
        finally:
            for session in list(self._sessions.values()):
                _unpark(session)
            await self.mcp.aclose()
        for close in closes:
            close.result()


def _thawed(value: Any) -> Any:
    """A logged value (read-only mappings, tuples) as plain JSON for the wire."""
    if isinstance(value, Mapping):
        return {key: _thawed(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_thawed(item) for item in value]
    return value


def _unpark(session: _Session) -> None:
    """Answer the prompt of a disposed session that no turn claimed: disposal keeps queued
    work parked, so it would never end on its own."""
    if session.prompt is not None and not session.prompt.ended.done():
        session.prompt.ended.set_result({"kind": "disposed"})


async def serve(
    model: ModelAdapter,
    streams: tuple[asyncio.StreamReader, Callable[[bytes], Awaitable[None]]] | None = None,
    *,
    hooks: Hooks | None = None,
    tools: Sequence[Tool] = (),
    sessions: Path | None = None,
) -> None:
    """Serve ``model`` as an ACP agent on ``streams`` (a reader of the client's lines and an
    async ``write(bytes)``; default: this process's stdin and stdout) until the client closes
    its side; then answer what is pending (see :meth:`AcpAgent.client_left`), dispose every
    session and return once all their work has settled and every answer is written.
    ``hooks`` are the hook commands (:class:`~fsm_core.Hooks`), run in each session's
    ``cwd``; ``tools`` the tools every session offers its model; ``sessions`` a directory
    where each session's durable log is kept, so a later process serves ``session/load``."""
    reader, write = streams if streams is not None else await _stdio()
    if streams is None:  # SIGTERM stops the agent as Ctrl-C does: its MCP servers are reaped
        with contextlib.suppress(ValueError, RuntimeError):  # not in the main thread
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGTERM, signal.raise_signal, signal.SIGINT
            )
    await _serve(AcpAgent(model, hooks=hooks, tools=tools, sessions=sessions), reader, write)


async def _serve(
    agent: AcpAgent, reader: asyncio.StreamReader, write: Callable[[bytes], Awaitable[None]]
) -> None:
    try:
        # AcpAgent has the methods it serves; the router answers the others "Method not found".
        served = cast(acp.Agent, agent)
        lines = Lines(reader, write, at_end=agent.client_left, cancel_prompt=agent.cancel_request)
        agent._lines = lines
        await run_agent(served, lines, use_unstable_protocol=True)
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the acp package's receive loop returns
            raise asyncio.CancelledError  # when cancelled (Ctrl-C): it is not the client leaving
    finally:
        await agent.aclose()


async def _stdio() -> tuple[asyncio.StreamReader, Callable[[bytes], Awaitable[None]]]:
    """This process's stdin as a stream reader and stdout as an async write: through the event
    loop for pipes, sockets and terminals, and through a thread (stdin) or blocking writes
    (stdout) for what the event loop cannot watch: a regular file or ``/dev/null``
    (``fsm-core acp < requests.jsonl > out``; such a stdin ends at once, so its prompts answer
    ``cancelled``: see ``AcpAgent.client_left``)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    if _watchable(sys.stdin.fileno(), selectors.EVENT_READ):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    else:
        threading.Thread(target=_feed, args=(loop, reader), daemon=True).start()
    if _watchable(sys.stdout.fileno(), selectors.EVENT_WRITE):
        # A copy of the descriptor: the transport closes its pipe when the client's end
        # closes, and sys.stdout itself must stay open for the exit's flush.
        out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, out)
    else:

        async def write_file(data: bytes) -> None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()

        return reader, write_file
    writer = asyncio.StreamWriter(transport, protocol, None, loop)

    async def write_pipe(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    return reader, write_pipe


def _watchable(fd: int, events: int) -> bool:
    """Whether the event loop can wait on ``fd``: a pipe, a socket or a character device (what
    asyncio's pipe transports take) that the selector accepts. ``/dev/null`` is a character
    device epoll refuses, and the loop finds that out only in a callback, after the transport
    is made, leaving a reader that never sees end-of-file: ask a selector of our own first."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False  # a regular file: kqueue (macOS) would take it, the transports do not
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, events)
        except (OSError, ValueError):
            return False
    return True


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
