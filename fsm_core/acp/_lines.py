"""Newline-delimited JSON-RPC on the agent's stdin and stdout, as ``fsm-core acp`` frames it:
:class:`Lines` answers input that is not a message as JSON-RPC prescribes, bounds what waits
for a client that does not read (answers pause the reading, progress updates merge or drop;
:meth:`Lines.room_for_updates` for updates that must all arrive), and withdraws a permission
request when its turn is cancelled. :mod:`._adapter` serves the ACP methods over it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from acp.schema import CancelNotification, CancelRequestNotification
from pydantic import BaseModel, ValidationError

from fsm_core._errors import ECHO_LIMIT, echo, named
from fsm_core.acp._mcp import skip_line

log = logging.getLogger("fsm_core.acp")

UPDATE_LIMIT = 256
"""The most progress updates (``session/update``) that wait for a client that is not reading;
past it, updates are merged or dropped (see ``Lines``)."""

LINE_LIMIT = 16 << 20
"""The longest JSON-RPC message read from the client, in bytes; a longer one is answered
``Invalid request`` and skipped."""

ANSWER_LIMIT = 256
"""The most answers (responses, and refusals of lines that are not messages) that wait for a
client that is not reading; at this many, the agent reads no more of its input until half of
them are written (backpressure: see ``Lines``)."""

READ_LIMIT = 64 << 10
"""The input the agent buffers from its stdin before it stops reading the pipe, in bytes
(twice this, plus one read of the pipe); a longer line is assembled piece by piece, up to
:data:`LINE_LIMIT`."""

DETAIL_LIMIT = 4 * ECHO_LIMIT
"""The longest string an error's data carries whole; a longer one is shortened by
:func:`~fsm_core._errors.echo` (see ``_bounded``)."""

ITEM_LIMIT = 8
"""The most items of a list or an object an error's data carries (see ``_bounded``)."""

ERROR_LIMIT = 4096
"""The most bytes of JSON an error carries; past it, once ``_bounded``, its data is echoed."""

NOTIFICATIONS: Mapping[str, type[BaseModel]] = {
    "session/cancel": CancelNotification,
    "$/cancel_request": CancelRequestNotification,
}
"""The params of each notification this agent serves; any other notification (but an
extension's, ``_name``) is logged and ignored, as is one whose params do not validate."""


@dataclass(eq=False, slots=True)
class _Out:
    """One message waiting for the writer. ``written`` is None for a progress update (its
    sender does not wait); otherwise the sender awaits it."""

    message: dict[str, Any]
    written: asyncio.Future[None] | None
    refusal: bool = False
    """True iff this is the answer to a line that was not a message (its id is null, but it
    answers no request)."""
    merged: dict[str, Any] | None = None
    """The text content the texts in ``more`` join onto when the line is written."""
    more: list[str] = field(default_factory=list)
    """Texts merged into this update, joined once, when it is written (joining at each merge
    would copy the text so far each time: a flood of merges would take quadratic time)."""
    size: int = 0
    """The characters of text this update holds with ``more``; at most :data:`LINE_LIMIT`."""


class Lines:
    """Newline-delimited JSON-RPC over the process's stdin and stdout (an ``acp`` transport).

    Unlike the package's own framing, input that is not a JSON-RPC message gets the error
    response JSON-RPC 2.0 prescribes (``Parse error`` for a line that is not JSON, ``Invalid
    request`` for JSON that is not a request, a response or a notification) and the agent
    goes on reading; a line longer than :data:`LINE_LIMIT` is skipped the same way.

    Output goes through one writer task, in order, one whole line per message. A response or
    a request waits until its line is written (a client that stops reading holds back its own
    answers, and nothing more); a progress update (``session/update``) does not wait at all,
    so a turn streaming to a client that stopped reading is never stuck in a write, and its
    cancel takes effect at once. At most :data:`UPDATE_LIMIT` updates wait: past that, an
    update of the same session and kind as the last one waiting is merged into it (their texts
    joined, up to :data:`LINE_LIMIT` characters), and any other is dropped, with a warning.

    Answers cannot be dropped (JSON-RPC promises one to every request), so a client that
    stops reading is held back instead: while :data:`ANSWER_LIMIT` answers wait, the agent
    reads no more of its input, until half of them are written. Its stdin pipe fills and the
    client's own writes block: what the agent holds for it stays bounded (the waiting answers,
    :data:`UPDATE_LIMIT` updates, the requests still running, and :data:`READ_LIMIT` of input
    on stdin), however many requests it tries to send. The first pause logs a warning; the
    counts are logged when the connection closes.

    Input from the client is quoted only in short (errors through ``_shortened``, logs through
    :func:`~fsm_core._errors.echo`), and a notification that is not served or does not
    validate is logged in one line and ignored (the package would log a traceback for it).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        write: Callable[[bytes], Awaitable[None]],
        at_end: Callable[[], None],
        cancel_prompt: Callable[[str], None] = lambda _session_id: None,
    ) -> None:
        self._reader = reader
        self._write = write
        self._at_end = at_end
        self._cancel_prompt = cancel_prompt
        self._prompts: dict[Any, str] = {}
        """The id of each ``session/prompt`` read and not yet answered, with its session (what
        ``$/cancel_request`` names)."""
        self._asking: dict[str, Any] = {}
        """The id of each session's ``session/request_permission`` written and not yet
        withdrawn (at most one a session: a turn asks about one call at a time)."""
        self._queue: collections.deque[_Out] = collections.deque()
        self._updates = 0  # Invariant: the number of progress updates in _queue.
        self._answers = 0  # Invariant: the number of messages in _queue that are not updates.
        self._room = asyncio.Event()
        """Set iff reading may go on: fewer than ANSWER_LIMIT answers wait (since the last
        pause, fewer than half of them), or the client's end is closed."""
        self._room.set()
        self._update_room = asyncio.Event()
        """Set iff an update queued now is written as it is: fewer than UPDATE_LIMIT updates
        wait (since they last reached it, at most half of them), or the client's end is
        closed (see :meth:`room_for_updates`)."""
        self._update_room.set()
        self._writer: asyncio.Task[None] | None = None
        self._broken: BaseException | None = None
        self._open: dict[Any, int] = {}
        """The ids of the requests read and not yet answered, each with how many times."""
        self._answered = asyncio.Event()
        self.dropped = 0
        """How many progress updates were dropped because the client was not reading."""
        self.paused = 0
        """How many times reading paused because ANSWER_LIMIT answers waited."""
        self.ignored = 0
        """How many notifications were ignored, not served or not valid."""
        self.read = 0
        """How many messages were read."""

    async def send(self, message: dict[str, Any], *, refusal: bool = False) -> None:
        """Write ``message`` (see the class docstring for when this waits). Raises
        ConnectionError when the client's end is closed, but for an answer, which is dropped:
        the client is gone, and no one else could use it."""
        try:
            await self._send(message, refusal)
        except ConnectionError:
            if "method" in message:
                raise

    async def _send(self, message: dict[str, Any], refusal: bool) -> None:
        if self._broken is not None:
            raise ConnectionError(f"the client's end is closed: {self._broken}")
        if message.get("method") == "session/request_permission" and "id" in message:
            self._asking[message["params"]["sessionId"]] = message["id"]
        if message.get("method") == "session/update":
            if self._updates >= UPDATE_LIMIT:
                self._update_room.clear()
                if not self._merge(message):
                    self.dropped += 1
                    if self.dropped == 1:
                        log.warning("the client is not reading; dropping progress updates")
                return
            self._queue.append(_Out(message, None))
            self._updates += 1
            self._start()
            return
        if "error" in message:
            message = {**message, "error": _shortened(message["error"])}
        written = asyncio.get_running_loop().create_future()
        self._queue.append(_Out(message, written, refusal))
        self._answers += 1
        if self._answers >= ANSWER_LIMIT and self._room.is_set():
            self._room.clear()
            self.paused += 1
            if self.paused == 1:
                log.warning(
                    "the client is not reading; reading no more requests while %d answers "
                    "wait (%d messages read)",
                    self._answers,
                    self.read,
                )
        self._start()
        await written

    async def room_for_updates(self) -> None:
        """Wait until an update sent now is neither merged nor dropped: for updates that must
        all arrive as sent (a loaded session's conversation), unlike a turn's progress."""
        if self._updates >= UPDATE_LIMIT:
            self._update_room.clear()
        await self._update_room.wait()

    def _merge(self, message: dict[str, Any]) -> bool:
        """Join ``message``'s text onto the last update waiting, if it is the same session and
        kind with text content; True iff it did."""
        if len(self._queue) < 2 or self._queue[-1].written is not None:
            return False  # the first one waiting may be in the middle of its write
        last = self._queue[-1].message.get("params")
        params = message.get("params")
        if not (isinstance(last, dict) and isinstance(params, dict)):
            return False
        if last.get("sessionId") != params.get("sessionId"):
            return False
        old, new = last.get("update"), params.get("update")
        if not (isinstance(old, dict) and isinstance(new, dict)) or set(old) != set(new):
            return False
        if old.get("sessionUpdate") != new.get("sessionUpdate"):
            return False
        a, b = old.get("content"), new.get("content")
        if not (_is_text(a) and _is_text(b)):
            return False
        assert isinstance(a, dict) and isinstance(b, dict)
        out = self._queue[-1]
        if out.merged is None:
            out.merged, out.size = a, len(a["text"])
        if out.size + len(b["text"]) > LINE_LIMIT:
            return False
        out.more.append(b["text"])
        out.size += len(b["text"])
        return True

    def _start(self) -> None:
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        """Write every waiting message, in order; on a write error, fail them all."""
        while self._queue:
            out = self._queue[0]
            if out.merged is not None and out.more:
                out.merged["text"] += "".join(out.more)
                out.more.clear()
            try:
                await self._write(_line(out.message))
            except Exception as error:  # the client closed its end (or a line failed to encode)
                self._fail(error)
                return
            except BaseException:
                self._fail(ConnectionError("the writer was stopped"))
                raise
            self._queue.popleft()
            if out.written is None:
                self._updates -= 1
                if self._updates <= UPDATE_LIMIT // 2:
                    self._update_room.set()
            else:
                self._answers -= 1
                if self._answers <= ANSWER_LIMIT // 2:
                    self._room.set()
                if not out.written.done():
                    out.written.set_result(None)
            answer = out.message.get("id")
            if "method" not in out.message and not out.refusal:
                self._prompts.pop(answer, None)
            if "method" not in out.message and not out.refusal and answer in self._open:
                self._open[answer] -= 1
                if not self._open[answer]:
                    del self._open[answer]
                if not self._open:
                    self._answered.set()

    def _fail(self, error: BaseException) -> None:
        self._broken = error
        self._answered.set()
        self._update_room.set()
        while self._queue:
            out = self._queue.popleft()
            if out.written is not None and not out.written.done():
                out.written.set_exception(ConnectionError(f"the client's end is closed: {error}"))
        self._updates = self._answers = 0
        self._room.set()

    async def finish(self) -> None:
        """Return once every request read has been answered and every line is written (or
        the client's end closed)."""
        while self._open and self._broken is None:
            self._answered.clear()
            await self._answered.wait()
        while self._writer is not None and not self._writer.done():
            await asyncio.wait([self._writer])

    async def receive(self) -> dict[str, Any] | None:
        """The next message; at the end of the input, None, but only once ``at_end()`` ran
        and every request read has been answered (the connection stops its handlers when
        this returns None).

        Waits first while the client holds back :data:`ANSWER_LIMIT` answers (see the class
        docstring), once the last request read has had its turn to run: a request that needs
        no waiting is answered, or its answer queued, before the next one is read."""
        await asyncio.sleep(0)
        await self._room.wait()
        message = await self._receive()
        if message is None:
            self._at_end()
            await self.finish()
        elif "method" in message and "id" in message:
            self._open[message["id"]] = self._open.get(message["id"], 0) + 1
            params = message.get("params")
            if message["method"] == "session/prompt" and isinstance(params, dict):
                session_id = params.get("sessionId")
                if isinstance(session_id, str):
                    self._prompts[message["id"]] = session_id
        return message

    async def withdraw(self, session_id: str) -> None:
        """Withdraw ``session_id``'s pending permission request (``$/cancel_request``): its
        turn was cancelled, and its answer is no longer awaited."""
        request_id = self._asking.pop(session_id, None)
        if request_id is not None:
            cancel = {"requestId": request_id}
            with contextlib.suppress(ConnectionError):
                await self.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": cancel})

    async def _receive(self) -> dict[str, Any] | None:
        while True:
            try:
                line = await self._read_line()
            except _TooLong:
                await self._refuse(
                    -32600, "Invalid request", f"a message longer than {LINE_LIMIT} bytes"
                )
                continue
            if line is None:
                return None
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                await self._refuse(-32700, "Parse error", "a line that is not JSON")
                continue
            except RecursionError:  # valid JSON, perhaps, but deeper than the decoder goes
                await self._refuse(-32700, "Parse error", "a line nested too deeply to parse")
                continue
            problem = _not_a_message(message)
            if problem is not None:
                await self._refuse(-32600, "Invalid request", problem)
                continue
            self.read += 1
            if "id" not in message and self._ignore(message):
                continue
            if "id" not in message and message["method"] == "$/cancel_request":
                # JSON-RPC's own cancellation: served here, never the package's to route. Only
                # a running session/prompt can be cancelled; any other request is ignored.
                session_id = self._prompts.get(message["params"]["requestId"])
                if session_id is not None:
                    self._cancel_prompt(session_id)
                continue
            if "method" not in message and message.get("id") in self._asking.values():
                self._asking = {k: v for k, v in self._asking.items() if v != message["id"]}
            return cast(dict[str, Any], message)

    def _ignore(self, notification: dict[str, Any]) -> bool:
        """True iff ``notification`` is one this agent does not serve, or whose params do not
        validate; it is logged in one line. (Handed to the package, it would be logged with a
        whole traceback, the params' pydantic errors included.)"""
        method = notification["method"]
        if method.startswith("_"):  # an extension's: the package ignores it quietly
            return False
        model = NOTIFICATIONS.get(method)
        if model is None:
            fault = "not served"
        else:
            try:
                model.model_validate(notification.get("params"))
                return False
            except ValidationError as error:
                fault = _fault(error)
        self.ignored += 1
        log.warning("ignored notification #%d, %s: %s", self.ignored, echo(method), fault)
        return True

    async def _read_line(self) -> bytes | None:
        """The next line of input, assembled from pieces of at most the reader's limit;
        None at the end of the input. Raises ``_TooLong`` for a line longer than
        :data:`LINE_LIMIT` bytes, once it is skipped to its end."""
        pieces: list[bytes] = []
        size = 0
        while True:
            try:
                piece = await self._reader.readuntil(b"\n")
                ended = True
            except asyncio.IncompleteReadError as end:  # the input ends
                if size + len(end.partial) > LINE_LIMIT:
                    raise _TooLong from None
                line = b"".join([*pieces, end.partial])
                return line if line.strip() else None
            except asyncio.LimitOverrunError as over:
                piece = await self._reader.readexactly(over.consumed)
                ended = False
            size += len(piece.rstrip(b"\n") if ended else piece)
            if size > LINE_LIMIT:
                if not ended:
                    await skip_line(self._reader)
                raise _TooLong
            pieces.append(piece)
            if ended:
                return b"".join(pieces)

    async def _refuse(self, code: int, message: str, details: str) -> None:
        error = {"code": code, "message": message, "data": {"details": details}}
        await self.send({"jsonrpc": "2.0", "id": None, "error": error}, refusal=True)

    async def close(self) -> None:
        """Stop the writer (a client that never reads again would hold it forever), and log
        how often the client held the agent back; the streams are the process's own."""
        if self.dropped or self.paused:
            log.warning(
                "the client was slow to read (progress updates dropped: %d, reading paused: %d)",
                self.dropped,
                self.paused,
            )
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
            await asyncio.wait([self._writer])


class _TooLong(Exception):
    """A line of input was longer than :data:`LINE_LIMIT` bytes (and is skipped)."""


def _bounded(value: object, depth: int = 0) -> Any:
    """``value`` (an error, whose data may quote the client's input: a pydantic error's
    ``input``, ``loc`` and ``msg``, an unknown method's name) with each string longer than
    :data:`DETAIL_LIMIT` shortened by :func:`~fsm_core._errors.echo`, each list or object cut
    to :data:`ITEM_LIMIT` items (a list ends with ``"... N more"``), and anything nested
    deeper than six levels echoed."""
    if isinstance(value, str):
        return value if len(value) <= DETAIL_LIMIT else echo(value)
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= 256 else echo(value)
    if depth >= 6:
        return echo(value)
    if isinstance(value, list | tuple):
        items = [_bounded(item, depth + 1) for item in value[:ITEM_LIMIT]]
        if len(value) > ITEM_LIMIT:
            items.append(f"... {len(value) - ITEM_LIMIT} more")
        return items
    if isinstance(value, dict):
        return {
            _bounded(str(key)): _bounded(item, depth + 1)
            for key, item in itertools.islice(value.items(), ITEM_LIMIT)
        }
    return echo(value)


def _shortened(error: object) -> Any:
    """``error`` (a JSON-RPC error object) as it may be written: ``_bounded``, and at most
    :data:`ERROR_LIMIT` bytes of JSON (past it, its data is echoed)."""
    shown = _bounded(error)
    if isinstance(shown, dict) and len(json.dumps(shown)) > ERROR_LIMIT:
        shown["data"] = echo(shown.get("data"))
    return shown


def _fault(error: ValidationError) -> str:
    """A pydantic error in one short line: where and what its first fault is, and how many
    more there are."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "params"
    where, what = named(where), named(str(first["msg"]))
    more = error.error_count() - 1
    return f"{where}: {what}" + (f" (and {more} more)" if more else "")


def _line(message: dict[str, Any]) -> bytes:
    """``message`` as one line of JSON in UTF-8. A lone surrogate (a client's ``"\\ud800"``,
    echoed back) has no UTF-8: that line escapes it as JSON does (``ensure_ascii``)."""
    text = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def _is_text(content: object) -> bool:
    return (
        isinstance(content, dict)
        and content.get("type") == "text"
        and isinstance(content.get("text"), str)
    )


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
