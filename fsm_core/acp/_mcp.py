"""Stdio MCP servers of ACP sessions: started with the session, their tools offered to the
model and called with the turn's signal, stopped and reaped with the session.

``session/new`` may list MCP servers (``mcpServers``); each stdio one is started before the
session answers, in the session's ``cwd``, with the agent's environment plus the server's
``env``, and spoken to with the official ``mcp`` SDK's ``ClientSession``. It runs under the
runtime's hook supervisor (``fsm_core/runtime/_reaper.py``): in a session and process group of
its own, with every process it forks (even one that called ``setsid``) re-parented to the
supervisor, which kills and reaps them all when the server exits or is stopped. So stopping a
server is: close its stdin (the MCP shutdown), give it :data:`GRACE` seconds to exit, then
SIGTERM the supervisor, which sends SIGTERM to the server's tree and SIGKILL :data:`GRACE`
seconds later; the stop returns once the supervisor has exited, which it does only when every
process of the server is gone. A supervisor whose agent dies outright (SIGKILL) gets SIGTERM
from the kernel (``PR_SET_PDEATHSIG``) and stops its server the same way.

Each tool of a server is offered to the model as ``mcp__<server>__<tool>``
(:class:`McpTool`): ``Request.tools`` names it, ``Request.tool_specs`` carries its description
and input schema (:class:`~fsm_core.ToolSpec`). A call runs ``tools/call`` with the turn's
signal: when the signal aborts, the request is abandoned and the SDK sends the server
``notifications/cancelled`` for it, and the call raises :class:`~fsm_core.Aborted` at once.

The ``mcp`` package is imported only when a session has a stdio server to start (it takes
about as long to import as the ACP package itself).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import shlex
import signal as signals
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any, final

from acp.schema import McpServerStdio

from fsm_core._errors import echo, named, shown
from fsm_core.runtime import (
    AbortSignal,
    Request,
    ToolSpec,
    _reaper,
)
from fsm_core.runtime._hooks import settle

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.client.session import ClientSession
    from mcp.shared.message import SessionMessage
    from mcp_types import Tool as WireTool

__all__ = [
    "GRACE",
    "START_TIMEOUT",
    "McpServers",
    "McpTool",
    "ServerFailed",
    "StdioServer",
    "stdio_servers",
]

log = logging.getLogger("fsm_core.acp")

GRACE = 0.5
"""Seconds a stopping server has to exit once its stdin closed, and then (its supervisor
signalled) from SIGTERM to SIGKILL."""

START_TIMEOUT = 30.0
"""Seconds a server has to answer ``initialize`` and list its tools before ``session/new``
gives up on it."""

_SLACK = 1.0
"""Seconds past its own grace a signalled supervisor has to exit before the agent kills its
tree itself (a supervisor something else stopped, as ``_hooks.py``'s ``_Escalation``)."""

_TICK = 0.1
"""Seconds between the agent's own rounds of killing, once it stepped in."""

_STDERR_KEPT = 2048
"""The bytes of a server's stderr kept (its last ones) for the error a failed start gives."""

TOOLS_LIMIT = 1024
"""The most tools one server may list: past it (a server paging ``tools/list`` forever, or
listing more than any model is offered) the server is refused, before its pages fill memory
or its start times out."""

_LOGGED = 1000
"""The most characters of one line of a server's stderr the debug log shows (escaped)."""

_LINE_LIMIT = 16 << 20
"""The longest line a server may write, in bytes; a longer one is skipped (logged)."""

_PREFIX = "mcp__"

_RESULT_KEYS = ("content", "structuredContent", "isError")
"""What the model gets of a ``CallToolResult`` (its other keys are the protocol's own)."""


class ServerFailed(Exception):
    """A stdio MCP server did not start; the message names it and says why."""


class _Unlisted(Exception):
    """A server's ``tools/list`` pages are more than a session takes; the message says why."""


@final
@dataclass(frozen=True, slots=True)
class StdioServer:
    """One stdio MCP server as ``session/new`` gives it (ACP's ``McpServerStdio``)."""

    name: str
    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]


def stdio_servers(servers: Sequence[object]) -> list[StdioServer]:
    """The servers of ``session/new``'s ``mcpServers`` (the ``acp`` package's models); raises
    ValueError for one of a transport this agent does not run (it advertises stdio only) or
    a name given twice."""
    stdio: list[StdioServer] = []
    for index, server in enumerate(servers):
        if not isinstance(server, McpServerStdio):
            kind = getattr(server, "type", type(server).__name__)
            raise ValueError(
                f"mcpServers[{index}] is an {kind} server; this agent runs stdio MCP servers only"
            )
        if any(s.name == server.name for s in stdio):
            raise ValueError(f"mcpServers[{index}]: a second server named {echo(server.name)}")
        env = {variable.name: variable.value for variable in server.env}
        stdio.append(StdioServer(server.name, server.command, tuple(server.args), env))
    return stdio


@final
class McpTool:
    """One tool of a running MCP server, as the runtime calls it (a :class:`~fsm_core.Tool`).

        tool.name   # "mcp__files__read": the server's name, then the tool's
        await tool.execute({"path": "README.md"}, signal)   # the CallToolResult, as JSON

    ``execute`` returns the server's ``CallToolResult`` as MCP JSON (``content``,
    ``structuredContent``, ``isError``): a tool that failed *inside* (``isError: true``)
    still answers, so the model reads why. A call the server refuses (a JSON-RPC error) or a
    server that went away raises, and the runtime records the call ``failed``.
    """

    def __init__(self, server: _Server, tool: WireTool) -> None:
        self.name = f"{_PREFIX}{server.name}__{tool.name}"
        self.spec = ToolSpec(self.name, tool.description or "", tool.input_schema)
        self._server = server
        self._tool = tool.name

    async def execute(self, args: Mapping[str, Any], signal: AbortSignal) -> Any:
        signal.raise_if_aborted()
        session = self._server.session
        if session is None:
            raise ConnectionError(f"the MCP server {self._server.name!r} has stopped")
        call = asyncio.ensure_future(session.call_tool(self._tool, dict(args)))
        off = signal.add_listener(lambda _signal: call.cancel())
        try:
            await _through(call)
        finally:
            off()
        if call.cancelled():  # the signal aborted: the SDK told the server (cancelled)
            signal.raise_if_aborted()
            raise ConnectionError(f"the call to {self.name} was cancelled")
        wire = call.result().model_dump(by_alias=True, mode="json", exclude_none=True)
        return {key: wire[key] for key in _RESULT_KEYS if key in wire}

    def __repr__(self) -> str:
        return f"<McpTool {self.name}>"


async def _through(work: asyncio.Future[Any]) -> None:
    """Wait for ``work`` to end. Cancelled meanwhile, cancel it too, wait for it all the same
    (its courtesy ``notifications/cancelled`` is written), then re-raise."""
    interrupted: BaseException | None = None
    while not work.done():
        try:
            await asyncio.wait([work])
        except BaseException as error:
            interrupted = interrupted or error
            work.cancel()
    if interrupted is not None:
        raise interrupted


@final
class _Server:
    """One running stdio server: its supervisor process, the client session (entered and left
    in the server's own task, as anyio's scopes require) and its tools."""

    def __init__(self, params: StdioServer, cwd: str, timeout: float) -> None:
        self.name = params.name
        self.params = params
        self.cwd = cwd
        self.timeout = timeout
        self.session: ClientSession | None = None
        """The live client session; None before the server answered and once it stops."""
        self.tools: list[McpTool] = []
        self.pid: int | None = None
        """The supervisor's pid, once it started."""
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stopping = asyncio.Event()
        self._cancel_start: Callable[[], None] | None = None
        self._stderr: collections.deque[bytes] = collections.deque()
        self._stderr_size = 0
        self._pumps: list[asyncio.Future[None]] = []
        self.task = asyncio.ensure_future(self._live())

    def stop(self) -> None:
        """Begin stopping; ``task`` ends once every process of the server is gone."""
        self._stopping.set()
        if self._cancel_start is not None:
            self._cancel_start()

    async def _live(self) -> None:
        failure: str | None = None
        try:
            process = await self._spawn()
        except (OSError, ValueError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            self.ready.set_exception(self._failed(f"cannot be started in {self.cwd}: {reason}"))
            return
        self.pid = process.pid
        try:
            failure = await self._serve(process)
        except Exception as error:  # the SDK's session failed under it
            log.exception("MCP server %s: the client session failed", named(self.name))
            failure = f"failed ({type(error).__name__}: {error})"
        except BaseException as error:  # cancelled: stop the server all the same, re-raise
            failure = f"was interrupted ({type(error).__name__})"
            raise
        finally:
            # Its pipes end once every process of the server is gone: reaped first.
            await settle(asyncio.ensure_future(self._reap(process)), *self._pumps)
            if not self.ready.done():
                self.ready.set_exception(self._failed(self._why(failure, process.returncode)))

    async def _spawn(self) -> asyncio.subprocess.Process:
        command = "exec " + shlex.join([self.params.command, *self.params.args])
        spawning = asyncio.ensure_future(
            asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                _reaper.__file__,
                str(os.getpid()),
                repr(float(GRACE)),
                command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.cwd,
                env={**os.environ, **self.params.env},
                start_new_session=True,  # a terminal's Ctrl-C goes to the agent, which stops it
                limit=_LINE_LIMIT,
            )
        )
        await settle(spawning)  # a start cut short must not orphan the supervisor
        return spawning.result()

    async def _serve(self, process: asyncio.subprocess.Process) -> str | None:
        """Speak MCP to the server until it is stopped; why it failed to start, or None."""
        import anyio  # noqa: PLC0415
        from mcp.client.session import ClientSession  # noqa: PLC0415
        from mcp.shared.exceptions import MCPError  # noqa: PLC0415
        from mcp.shared.message import SessionMessage  # noqa: PLC0415
        from mcp_types import CONNECTION_CLOSED, Implementation  # noqa: PLC0415

        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
        self._pumps = [
            asyncio.ensure_future(_from_server(self.name, process.stdout, read_send)),
            asyncio.ensure_future(_to_server(process.stdin, write_receive)),
            asyncio.ensure_future(self._keep_stderr(process.stderr)),
        ]
        client = Implementation(name="fsm-core", version=_version())
        failure: str | None = None
        try:
            async with ClientSession(read_receive, write_send, client_info=client) as session:
                with anyio.CancelScope() as starting:
                    self._cancel_start = starting.cancel
                    if self._stopping.is_set():
                        starting.cancel()
                    try:
                        with anyio.fail_after(self.timeout):
                            await session.initialize()
                            tools = await _list_tools(session)
                    except TimeoutError:
                        failure = f"did not answer initialize within {self.timeout:g} s"
                    except _Unlisted as error:
                        failure = str(error)
                    except MCPError as error:  # "" for a server that went away (_why)
                        failure = "" if error.code == CONNECTION_CLOSED else f"refused ({error})"
                    except Exception as error:
                        failure = f"failed its start ({type(error).__name__}: {error})"
                self._cancel_start = None
                if failure is None and starting.cancel_called:
                    failure = "was stopped while it started"
                if failure is None:
                    self.tools = _named(self, tools)
                    self.session = session
                    self.ready.set_result(None)
                    await self._stopping.wait()
        finally:
            self.session = None
            write_send.close()  # the MCP shutdown: the server's stdin closes
            read_receive.close()
        return failure

    async def _reap(self, process: asyncio.subprocess.Process) -> None:
        """Close the server's stdin, wait :data:`GRACE` for it to exit, then SIGTERM its
        supervisor (which kills the tree, SIGKILL after its grace); past that and
        :data:`_SLACK`, kill the tree from here. Returns once the supervisor exited."""
        if process.stdin is not None:
            process.stdin.close()
        exited = asyncio.ensure_future(process.wait())
        await asyncio.wait([exited], timeout=GRACE)
        if not exited.done():
            _kill([process.pid], signals.SIGTERM)
            await asyncio.wait([exited], timeout=GRACE + _SLACK)
        while not exited.done():
            _kill([*_reaper.descendants(process.pid), process.pid], signals.SIGKILL)
            await asyncio.wait([exited], timeout=_TICK)

    async def _keep_stderr(self, stderr: asyncio.StreamReader) -> None:
        """Read the server's stderr to its end, keeping the last :data:`_STDERR_KEPT` bytes
        (each line is logged at debug level)."""
        while chunk := await stderr.read(65536):
            for line in chunk.splitlines():
                log.debug(
                    "MCP server %s: %s",
                    named(self.name),
                    shown(line.decode("utf-8", "replace"), _LOGGED),
                )
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size - len(self._stderr[0]) >= _STDERR_KEPT:
                self._stderr_size -= len(self._stderr.popleft())

    def _why(self, failure: str | None, status: int | None) -> str:
        if not failure:  # it went away before it answered
            failure = (
                f"exited with status {status} before it answered initialize"
                if status is not None and status >= 0
                else f"was killed by signal {-(status or 0)} before it answered initialize"
            )
        tail = b"".join(self._stderr)[-_STDERR_KEPT:].decode("utf-8", "replace").strip()
        if tail:
            failure += f"; its stderr ends: {echo(tail.splitlines()[-1])}"
        return failure

    def _failed(self, why: str) -> ServerFailed:
        return ServerFailed(f"the MCP server {self.name!r} did not start: it {why}")

    def __repr__(self) -> str:
        state = "running" if self.session else "stopping" if self._stopping.is_set() else "new"
        return f"<MCP server {self.name!r} {state} pid={self.pid} tools={len(self.tools)}>"


async def _list_tools(session: ClientSession) -> list[WireTool]:
    """Every tool the server lists (each page of ``tools/list``); none without the tools
    capability."""
    from mcp_types import PaginatedRequestParams  # noqa: PLC0415

    capabilities = session.server_capabilities
    if capabilities is None or capabilities.tools is None:
        return []
    tools: list[WireTool] = []
    cursor: str | None = None
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        tools += page.tools
        if len(tools) > TOOLS_LIMIT:
            raise _Unlisted(f"lists more than {TOOLS_LIMIT} tools")
        cursor = page.next_cursor
        if cursor is None:
            return tools


def _named(server: _Server, tools: Sequence[WireTool]) -> list[McpTool]:
    tools_by_name: dict[str, McpTool] = {}
    for tool in tools:
        offered = McpTool(server, tool)
        if offered.name in tools_by_name:
            log.warning(
                "MCP server %s lists %s twice; the first is kept",
                named(server.name),
                named(tool.name),
            )
            continue
        tools_by_name[offered.name] = offered
    return list(tools_by_name.values())


async def _from_server(
    name: str,
    stdout: asyncio.StreamReader,
    send: MemoryObjectSendStream[SessionMessage | Exception],
) -> None:
    """Hand each line the server writes to the client session, until the end of its stdout
    (read to the end even once the session has gone: the supervisor's pipe must drain)."""
    import anyio  # noqa: PLC0415
    from mcp.shared.message import SessionMessage  # noqa: PLC0415
    from mcp_types import jsonrpc_message_adapter  # noqa: PLC0415

    delivering = True
    try:
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                line = end.partial
                if not line.strip():
                    return
            except asyncio.LimitOverrunError as over:
                await stdout.readexactly(over.consumed)
                await skip_line(stdout)
                # The line was a message (an answer, most likely) the client can never read: a
                # request waiting for it would wait forever, so the session with the server
                # ends, which fails what is pending (a tool call: ``failed``).
                log.warning(
                    "MCP server %s wrote a line over %d bytes: the session with it ends",
                    echo(name),
                    _LINE_LIMIT,
                )
                if delivering:
                    delivering = False
                    send.close()
                continue
            if not delivering or not line.strip():
                continue
            item: SessionMessage | Exception
            try:
                item = SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
            except ValueError as error:
                item = error
            try:
                await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                delivering = False
    finally:
        send.close()


async def skip_line(reader: asyncio.StreamReader) -> None:
    """Read past the rest of the line ``reader`` is in, however long, to its end or the
    stream's (a line over the reader's limit is skipped whole, never read as a new line)."""
    while True:
        try:
            await reader.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as over:
            await reader.readexactly(over.consumed)
        except asyncio.IncompleteReadError:
            return


async def _to_server(
    stdin: asyncio.StreamWriter, receive: MemoryObjectReceiveStream[SessionMessage]
) -> None:
    """Write each message of the client session to the server's stdin, one line each; close
    its stdin when the session ends (the MCP shutdown) or the server stops reading."""
    try:
        async for message in receive:
            line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            stdin.write(line.encode() + b"\n")
            await stdin.drain()
    except (ConnectionError, OSError):
        pass  # the server is gone; its session sees its stdout end
    finally:
        receive.close()
        stdin.close()


def _kill(pids: Sequence[int], first: int) -> None:
    for pid in pids:
        for sig in (first, signals.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def _version() -> str:
    try:
        return version("fsm-core")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


@final
class _SessionServers:
    """The stdio MCP servers of one ACP session."""

    def __init__(self, servers: Sequence[StdioServer], cwd: str, timeout: float) -> None:
        self.servers = [_Server(params, cwd, timeout) for params in servers]
        self.tools: dict[str, McpTool] = {}

    async def start(self) -> None:
        """Wait for every server to answer; raise :class:`ServerFailed` for the first (in
        the order given) that did not, once every server was stopped again."""
        await asyncio.wait([server.ready for server in self.servers])
        failures = [s.ready.exception() for s in self.servers if s.ready.exception()]
        if failures:
            await self.aclose()
            raise failures[0]  # type: ignore[misc]
        for server in self.servers:
            for tool in server.tools:
                if tool.name in self.tools:
                    await self.aclose()
                    raise ServerFailed(
                        f"two MCP servers offer a tool named {tool.name!r}; rename a server"
                    )
                self.tools[tool.name] = tool

    async def aclose(self) -> None:
        """Stop every server; return once every process of each is gone."""
        for server in self.servers:
            server.stop()
        await settle(*(server.task for server in self.servers))


@final
class McpServers:
    """The stdio MCP servers of every session of one ACP agent, by session id.

    servers = McpServers()
    await servers.start("session-1", "/work", [StdioServer(...)])   # ServerFailed
    session_runtime.tools.update(servers.tools("session-1"))       # the session's own runtime
    await servers.stop("session-1")        # every process of its servers reaped
    """

    def __init__(self, timeout: float = START_TIMEOUT) -> None:
        self.timeout = timeout
        self._sessions: dict[str, _SessionServers] = {}
        self._starting: set[_SessionServers] = set()

    async def start(self, session_id: str, cwd: str, servers: Sequence[StdioServer]) -> None:
        """Start ``servers`` for ``session_id``, all or none: raises :class:`ServerFailed`
        naming the first that did not start, with the others stopped again."""
        if not servers:
            return
        started = _SessionServers(servers, cwd, self.timeout)
        self._starting.add(started)
        try:
            await started.start()
        except BaseException:
            await started.aclose()
            raise
        finally:
            self._starting.discard(started)
        self._sessions[session_id] = started

    def tools(self, session_id: str) -> Mapping[str, McpTool]:
        servers = self._sessions.get(session_id)
        return servers.tools if servers is not None else {}

    def offer(self, request: Request) -> Request:
        """``request`` with the :class:`~fsm_core.ToolSpec` of each MCP tool it names."""
        tools = self.tools(request.agent_id)
        if not tools:
            return request
        specs = tuple(tools[name].spec for name in request.tools if name in tools)
        return dataclasses.replace(request, tool_specs=specs)

    async def stop(self, session_id: str) -> None:
        servers = self._sessions.pop(session_id, None)
        if servers is not None:
            await servers.aclose()

    async def aclose(self) -> None:
        """Stop every server, those still starting too."""
        every = [*self._sessions.values(), *self._starting]
        self._sessions.clear()
        for servers in every:
            for server in servers.servers:
                server.stop()
        await settle(*(server.task for servers in every for server in servers.servers))
