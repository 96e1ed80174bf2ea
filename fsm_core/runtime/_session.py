"""The durable session: one agent's append-only log of plain JSON events, persisted as JSONL.

A :class:`Session` records what happened to an agent's turns, in order. Each
:class:`SessionEvent` has a ``seq`` (0, 1, 2, ... in append order), a ``type`` and ``data``
of exactly the shape :data:`EVENT_SHAPES` declares for that type::

    session.append("turn/start", {"turn": 1})
    session.append("turn/end", {"turn": 1, "outcome": {"kind": "aborted"}})
    assert Session.from_jsonl(session.to_jsonl()).events == session.events

The shapes are checked on append and again on load and seed, and they admit plain JSON only,
so nothing else can reach the durable log: no signal, exception object, stack, cancel cause
or text from a canceller. In particular an interrupted turn ends with the *coarse* outcome,
exactly ``{"kind": "aborted"}``: the outcome says what happened to the turn, not who asked
(the runtime signal knows that, and the process-local ``agent/cancel-requested`` notification
carries it; neither is durable). Loading rejects the legacy records that kept a reason beside
``kind``, so replay cannot bring caller-owned cancellation detail back.

A failed turn ends with ``{"kind": "error", "step": N, "code": C}``: ``step`` is the number of
the turn's last ``step/start`` (0 when it failed before opening one) and ``code`` one of
:data:`ERROR_CODES`, a class of failure, never an exception's text, type or stack. Every other
outcome is exactly ``{"kind": ...}``. The bare legacy ``{"kind": "error"}`` is rejected too:
loading yields exactly the shapes the runtime writes. So is an error whose ``step`` is not its
turn's last ``step/start`` in the log before it (on append as on load: what goes in reads
back); that one check reads more than one record.

``specs/session.schema.json`` is the same format as a JSON Schema (draft 2020-12), for ports
that validate their logs; a test keeps it and :data:`EVENT_SHAPES` in agreement.

Loading and seeding are all or nothing: the first fault rejects the whole input with a
:class:`SessionError` naming the source and the line (or index), and no session exists. A file
is read only if it is regular and at most :data:`MAX_LOG_BYTES` long (a directory, FIFO or
device is refused without blocking, before a byte is read), and no integer, however many digits
it has, gets past its field's check: every bound is a :class:`SessionError`, never an
``OSError``, ``ValueError`` or ``MemoryError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import json
import math
import os
import re
import stat
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, NoReturn, TypeAlias, cast, final, get_args, overload

from fsm_core._errors import FsmError, UsageError, echo

if sys.platform != "win32":
    import fcntl

__all__ = [
    "ERROR_CODES",
    "EVENT_SHAPES",
    "JSON",
    "OUTCOME_KINDS",
    "ErrorCode",
    "EventType",
    "FieldType",
    "OutcomeKind",
    "Session",
    "SessionError",
    "SessionEvent",
]

JSON: TypeAlias = "str | int | float | bool | Sequence[JSON] | Mapping[str, JSON] | None"
"""A plain JSON value as the log stores it: arrays are tuples, objects are read-only mappings."""

StrPath: TypeAlias = "str | os.PathLike[str]"

EventType = Literal[
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/message",
    "tool/call",
    "tool/result",
    "inbox/claimed",
    "inbox/discarded",
]
"""Every durable event type; :data:`EVENT_SHAPES` gives each one's data."""

OutcomeKind = Literal["completed", "max-tokens", "error", "aborted", "disposed", "blocked"]
"""How a turn ended (DESIGN.md decision 6). ``aborted`` covers both user and parent causes."""

OUTCOME_KINDS: Final[tuple[OutcomeKind, ...]] = get_args(OutcomeKind)

ErrorCode = Literal["model-failed", "invalid-reply", "seam-failed", "halted"]
"""Why a turn ended in ``error``: the class of failure, never the exception itself.

- ``model-failed``: the model adapter raised and no ``agent/request-error`` listener retried;
- ``invalid-reply``: the model answered with a reply the turn cannot use or the log cannot hold
  (not a :class:`~fsm_core.runtime.Reply`, an unknown ``finish``, text that is not a string, a
  malformed tool call);
- ``seam-failed``: anything else raised inside the turn, which is a waterfall listener
  (``agent/pre-step``, ``agent/assemble``, ``agent/request``, ``agent/request-error``,
  ``agent/tool-approval``, ``agent/turn-stopping``), an ``asyncio.CancelledError`` one raised
  included, or an ``agent/request`` listener that left another step's request;
- ``halted``: the driver halted with the turn open: its task was cancelled from outside, or a
  ``BaseException`` that is not an ``Exception`` escaped (``KeyboardInterrupt``, a listener's).

A failing tool does not end its turn (its ``tool/result`` records the failure), and a
notification listener's exception is contained, so neither has a code.
"""

ERROR_CODES: Final[tuple[ErrorCode, ...]] = get_args(ErrorCode)

FieldType = Literal["int", "str", "bool", "[str]", "object", "json", "outcome"]
"""The JSON type of one data field.

``object`` is any JSON object, ``json`` any JSON value, and ``outcome`` exactly
``{"kind": OutcomeKind}`` with no other key, except that an ``error`` outcome is exactly
``{"kind": "error", "step": int >= 0, "code": ErrorCode}``.
"""

_SHAPES: dict[EventType, dict[str, FieldType]] = {
    "turn/start": {"turn": "int"},
    "turn/end": {"turn": "int", "outcome": "outcome"},
    "step/start": {"turn": "int", "step": "int"},
    "step/end": {"turn": "int", "step": "int"},
    "user/message": {"id": "str", "text": "str"},
    "assistant/message": {"turn": "int", "step": "int", "text": "str"},
    "tool/call": {"turn": "int", "step": "int", "id": "str", "name": "str", "args": "object"},
    # Invariant: when ok is false, result is an error classification (see _CLASSIFICATION).
    "tool/result": {"turn": "int", "step": "int", "id": "str", "ok": "bool", "result": "json"},
    "inbox/claimed": {"turn": "int", "ids": "[str]"},
    "inbox/discarded": {"ids": "[str]"},
}

EVENT_SHAPES: Final[Mapping[EventType, Mapping[str, FieldType]]] = MappingProxyType(
    {name: MappingProxyType(shape) for name, shape in _SHAPES.items()}
)
"""The one table of durable shapes: event type -> field -> JSON type. Data has exactly these
fields, no more and no fewer."""

_EXPECTED: Final[Mapping[FieldType, str]] = {
    "int": "an integer",
    "str": "a string",
    "bool": "a boolean",
    "[str]": "an array of strings",
    "object": "a JSON object",
    "json": "a JSON value",
    "outcome": 'an outcome {"kind": ...}',
}
_ERROR_KEYS: Final = ("kind", "step", "code")
_ERROR_FORM: Final = '{"kind": "error", "step": ..., "code": ...}'


# A failed tool's result names a class of failure ("aborted", "tool-error", "invalid-args"),
# never an exception's text, type name or stack.
_CLASSIFICATION: Final = re.compile(r"[a-z][a-z0-9]*(?:[-_/.][a-z0-9]+)*\Z")
_CLASSIFICATION_MAX: Final = 64

# What every reader of the log can hold (RFC 7493, I-JSON): integers a double represents
# exactly, so a JavaScript port replays the same numbers, and a bounded nesting depth, so no
# reader runs out of stack. Checked on append, load and seed alike: what goes in reads back.
SAFE_INTEGER: Final = 2**53 - 1
MAX_DEPTH: Final = 64

MAX_LOG_BYTES: Final = 64 * 2**20
"""The largest session file read or written (64 MiB). Loading reads only a regular file and
refuses a larger one before reading it (and stops reading one that holds more than its size
said); a flush or save of a larger log is refused, so a file the session wrote loads back."""

_INT_DIGITS: Final = len(str(SAFE_INTEGER))
"""The longest a JSON integer literal within +-SAFE_INTEGER can be (no leading zeros)."""

_FLUSH_TIMEOUT: Final = 30.0
"""How many seconds a session's flush waits for its writer unless told otherwise."""

_RECORD_KEYS: Final = ("seq", "type", "data")
_EVENT_TYPES: Final[Mapping[str, EventType]] = {name: name for name in _SHAPES}


@final
class SessionError(FsmError):
    """A session input or append was rejected; nothing of it was recorded.

    The message is ``SOURCE: WHERE: FAULT``, e.g. ``session.jsonl: line 3: turn/end: field
    'outcome' must be exactly {"kind": ...}, but also has 'reason' (...)``. ``WHERE`` is
    ``line N`` (1-based) for JSONL and ``event N`` (the index, which is the seq) for seeds and
    appends.
    """

    def __init__(self, source: str, where: str, fault: str) -> None:
        self.source = source
        self.where = where
        self.fault = fault
        super().__init__(f"{source}: {where}: {fault}" if where else f"{source}: {fault}")


class _Fault(Exception):
    """A fault found while checking one record; the caller adds the source and place."""


# --- values ----------------------------------------------------------------------------------


def _kind(value: object) -> str:
    """The JSON name of ``value``'s type, or its Python type name if it is not JSON at all."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return f"{type(value).__name__} (not a JSON value)"


def _freeze(value: object, path: str, stack: tuple[int, ...] = ()) -> JSON:
    """A deep, read-only copy of a JSON value made of exact built-in types; faults otherwise.

    Subclasses of ``str``, ``int`` and ``float`` are copied to the base type, so nothing a
    caller attached to them survives into the log.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return _safe_int(value, path)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Fault(f"field {echo(path)} is {echo(value)}; JSON numbers are finite")
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list | tuple | Mapping):
        if id(value) in stack:
            raise _Fault(f"field {echo(path)} contains itself")
        if len(stack) >= MAX_DEPTH:
            raise _Fault(f"field {echo(path)} is nested deeper than {MAX_DEPTH} levels")
        inner = (*stack, id(value))
        if isinstance(value, Mapping):
            frozen: dict[str, JSON] = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise _Fault(f"field {echo(path)} has a non-string key {echo(key)}")
                frozen[str.__str__(key)] = _freeze(item, f"{path}.{key}", inner)
            return MappingProxyType(frozen)
        return tuple(_freeze(item, f"{path}[{i}]", inner) for i, item in enumerate(value))
    raise _Fault(f"field {echo(path)} must be a JSON value, found {type(value).__name__}")


def _safe_int(value: int, path: str) -> int:
    value = int.__int__(value)  # an int subclass's own comparisons never run
    if not -SAFE_INTEGER <= value <= SAFE_INTEGER:
        raise _Fault(
            f"field {echo(path)} is an integer beyond +-(2**53 - 1), which not every JSON reader "
            "holds exactly"
        )
    return value


def _thaw(value: JSON) -> Any:
    """A plain, mutable copy (dicts and lists) of a frozen value, for ``json`` and callers."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def _retrieved(call: asyncio.Future[None]) -> None:
    """Read the outcome of a writer's call no flush awaits, so asyncio reports nothing."""
    if not call.cancelled():
        call.exception()


def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


# --- shapes ----------------------------------------------------------------------------------


def _check_field(name: str, field_type: FieldType, value: object) -> JSON:
    def wrong() -> NoReturn:
        raise _Fault(f"field {echo(name)} must be {_EXPECTED[field_type]}, found {_kind(value)}")

    match field_type:
        case "int":
            if not isinstance(value, int) or isinstance(value, bool):
                wrong()
            return _safe_int(value, name)
        case "str":
            if not isinstance(value, str):
                wrong()
            return str.__str__(value)
        case "bool":
            if not isinstance(value, bool):
                wrong()
            return value
        case "[str]":
            if not isinstance(value, list | tuple):
                wrong()
            for i, item in enumerate(value):
                if not isinstance(item, str):
                    raise _Fault(f"field '{name}[{i}]' must be a string, found {_kind(item)}")
            return tuple(str.__str__(item) for item in value)
        case "object":
            if not isinstance(value, Mapping):
                wrong()
            return _freeze(value, name)
        case "json":
            return _freeze(value, name)
        case "outcome":
            if not isinstance(value, Mapping):
                wrong()
            return _check_outcome(name, value)


def _check_outcome(name: str, value: Mapping[Any, object]) -> JSON:
    """An outcome: exactly ``{"kind"}``, or for ``error`` exactly ``{"kind", "step", "code"}``."""
    kind = value.get("kind")
    if kind == "error":
        extra = sorted(echo(key) for key in value if key not in _ERROR_KEYS)
        if extra:
            raise _Fault(
                f"field {echo(name)} must be exactly {_ERROR_FORM}, but also has "
                f"{', '.join(extra)} (a durable error records its step and a classification, "
                "never an exception's text or stack)"
            )
        missing = [key for key in _ERROR_KEYS if key not in value]
        if missing:
            raise _Fault(
                f"field {echo(name)} must be exactly {_ERROR_FORM}, but has no "
                f"{', '.join(repr(key) for key in missing)}"
            )
        step, code = value["step"], value["code"]
        if not isinstance(step, int) or isinstance(step, bool):
            raise _Fault(f"field '{name}.step' must be an integer, found {_kind(step)}")
        step = _safe_int(step, f"{name}.step")
        if step < 0:
            raise _Fault(f"field '{name}.step' is {step}; a step number is 0 or more")
        if not isinstance(code, str):
            raise _Fault(f"field '{name}.code' must be a string, found {_kind(code)}")
        if code not in ERROR_CODES:
            raise _Fault(
                f"field '{name}.code' is {echo(code)}, not one of: {', '.join(ERROR_CODES)}"
            )
        return MappingProxyType({"kind": "error", "step": step, "code": str.__str__(code)})
    extra = sorted(echo(key) for key in value if key != "kind")
    if extra:
        raise _Fault(
            f'field {echo(name)} must be exactly {{"kind": ...}}, but also has '
            f"{', '.join(extra)} (a durable outcome never records who cancelled or why)"
        )
    if "kind" not in value:
        raise _Fault(f"field {echo(name)} has no 'kind'")
    if not isinstance(kind, str):
        raise _Fault(f"field '{name}.kind' must be a string, found {_kind(kind)}")
    if kind not in OUTCOME_KINDS:
        raise _Fault(f"field '{name}.kind' is {echo(kind)}, not one of: {', '.join(OUTCOME_KINDS)}")
    return MappingProxyType({"kind": str.__str__(kind)})


_PLAIN_OUTCOMES: Final = {
    kind: MappingProxyType({"kind": kind}) for kind in OUTCOME_KINDS if kind != "error"
}
"""Every outcome but ``error``, frozen once: it is exactly ``{"kind": kind}``."""

_SCALARS: Final[Mapping[FieldType, type]] = {"int": int, "str": str, "bool": bool}

_QUICK: Final[Mapping[EventType, tuple[tuple[str, type | FieldType], ...]]] = {
    event_type: tuple((name, _SCALARS.get(field, field)) for name, field in shape.items())
    for event_type, shape in _SHAPES.items()
    if all(field in _SCALARS or field in ("[str]", "outcome") for field in shape.values())
}
"""The event types whose data the quick check can accept: each field with the exact Python
type it must have, or ``"[str]"`` or ``"outcome"``."""


def _check_data(event_type: EventType, data: object) -> Mapping[str, JSON]:
    """The frozen data of one event, checked against its row of :data:`EVENT_SHAPES`.

    What the runtime appends (a ``dict`` of exact built-in scalars, string lists and plain
    outcomes) is accepted by a loop that only looks at types; anything else, and every
    fault, takes the full check.
    """
    quick = _QUICK.get(event_type)
    if quick is not None and type(data) is dict and len(data) == len(quick):
        frozen: dict[str, JSON] = {}
        for name, kind in quick:
            value = data.get(name, _check_data)  # a sentinel no JSON value is
            if type(value) is kind:
                if kind is int and not -SAFE_INTEGER <= cast(int, value) <= SAFE_INTEGER:
                    break
                frozen[name] = cast(JSON, value)
            elif kind == "[str]" and type(value) is list and all(type(i) is str for i in value):
                frozen[name] = tuple(value)
            elif (
                kind == "outcome"
                and type(value) is dict
                and len(value) == 1
                and type(outcome := value.get("kind")) is str
                and outcome in _PLAIN_OUTCOMES
            ):
                frozen[name] = _PLAIN_OUTCOMES[outcome]
            else:
                break
        else:
            return MappingProxyType(frozen)
    return _check_data_fully(event_type, data)


def _check_data_fully(event_type: EventType, data: object) -> Mapping[str, JSON]:
    shape = EVENT_SHAPES[event_type]
    exactly = f"{event_type} data is exactly: {', '.join(shape)}"
    try:
        if not isinstance(data, Mapping):
            raise _Fault(f"data must be a JSON object, found {_kind(data)}")
        for key in data:
            if key not in shape:
                raise _Fault(f"unexpected field {echo(key)} ({exactly})")
        for key in shape:
            if key not in data:
                raise _Fault(f"missing field {key!r} ({exactly})")
        frozen = {name: _check_field(name, field, data[name]) for name, field in shape.items()}
        if event_type == "tool/result" and frozen["ok"] is False:
            result = frozen["result"]
            if (
                not isinstance(result, str)
                or len(result) > _CLASSIFICATION_MAX
                or not _CLASSIFICATION.match(result)
            ):
                raise _Fault(
                    "field 'result' must be an error classification when ok is false "
                    '(a short lowercase token such as "tool-error" or "aborted", never an '
                    "exception's text)"
                )
        return MappingProxyType(frozen)
    except _Fault as fault:
        raise _Fault(f"{event_type}: {fault}") from None
    except RecursionError:
        raise _Fault(f"{event_type}: data is nested too deeply") from None
    except Exception as error:
        # A caller's mapping or sequence that raises while it is read (a lazy view, a broken
        # __getitem__) is refused like any other value the log cannot hold.
        raise _Fault(
            f"{event_type}: data could not be read ({type(error).__name__} while copying it)"
        ) from None


def _check_type(event_type: object) -> EventType:
    if not isinstance(event_type, str):
        raise _Fault(f"type must be a string, found {_kind(event_type)}")
    if event_type not in _EVENT_TYPES:
        raise _Fault(f"unknown event type {echo(event_type)} (known: {', '.join(EVENT_SHAPES)})")
    return _EVENT_TYPES[event_type]


def _check_record(record: object, seq: int) -> SessionEvent:
    """One recorded event ``{"seq", "type", "data"}`` that must come at position ``seq``."""
    if not isinstance(record, Mapping):
        raise _Fault(f"a record must be a JSON object, found {_kind(record)}")
    exactly = f"a record is exactly: {', '.join(_RECORD_KEYS)}"
    for key in record:
        if key not in _RECORD_KEYS:
            raise _Fault(f"record has an unexpected key {echo(key)} ({exactly})")
    for key in _RECORD_KEYS:
        if key not in record:
            raise _Fault(f"record has no key {key!r} ({exactly})")
    got = record["seq"]
    if not isinstance(got, int) or isinstance(got, bool):
        raise _Fault(f"seq must be an integer, found {_kind(got)}")
    got = int.__int__(got)  # an int subclass's own comparisons never run
    if got != seq:
        counts = f"should be {seq} (seq counts 0, 1, 2, ... in order)"
        if not -SAFE_INTEGER <= got <= SAFE_INTEGER:  # str() of 5,000 digits raises
            raise _Fault(f"seq is an integer beyond +-(2**53 - 1), but {counts}")
        raise _Fault(f"seq is {got} but {counts}")
    event_type = _check_type(record["type"])
    return SessionEvent(seq, event_type, _check_data(event_type, record["data"]))


@final
class _Steps:
    """What step a durable ``error`` outcome must name: its turn's last ``step/start`` since the
    log's last turn boundary (``turn/start`` or ``turn/end``), 0 when it opened none there. The
    runtime records exactly that (``AgentCore._last_step``), so a log that says otherwise was
    not written by it, or was changed since."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[JSON, JSON] = {}
        """Turn -> the step of its last step/start since the last turn boundary."""

    def follow(self, event: SessionEvent) -> None:
        """Take ``event`` as the log's next; raise :class:`_Fault`, taking nothing, if it is an
        error outcome naming another step."""
        data = event.data
        if event.type == "step/start":
            self._last[data["turn"]] = data["step"]
        elif event.type == "turn/start":
            self._last = {}
        elif event.type == "turn/end":
            outcome = data["outcome"]
            assert type(outcome) is MappingProxyType  # _check_outcome's
            expected = self._last.get(data["turn"], 0)
            if outcome["kind"] == "error" and outcome["step"] != expected:
                opened = (
                    f"its last step/start is step {expected}"
                    if expected
                    else "it opened no step since the last turn boundary"
                )
                raise _Fault(
                    f"turn/end: the error outcome of turn {data['turn']} names step "
                    f"{outcome['step']}, but {opened} (a durable error names its turn's last "
                    "step/start, 0 when it opened none)"
                )
            self._last = {}


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _parse_int(literal: str) -> int:
    """A JSON integer literal: read when it can be within +-SAFE_INTEGER, and otherwise the
    nearest integer beyond it, which the field's check refuses naming the field. So no literal
    costs a conversion (quadratic in its digits), and none past Python's 4,300-digit limit
    raises a ValueError that could only name the line."""
    if len(literal.lstrip("-")) <= _INT_DIGITS:
        return int(literal)
    return -(SAFE_INTEGER + 1) if literal.startswith("-") else SAFE_INTEGER + 1


def _parse(line: str) -> object:
    if not line.strip():
        raise _Fault("blank line (every line is one JSON record)")
    try:
        return json.loads(
            line,
            object_pairs_hook=_reject_duplicates,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
        )
    except ValueError as e:  # JSONDecodeError, duplicate keys, NaN and Infinity
        raise _Fault(f"not valid JSON ({e})") from None
    except RecursionError:
        raise _Fault("not valid JSON (nested too deeply)") from None


# --- reading a session file --------------------------------------------------------------------

_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)

_FILE_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _open_log(path: StrPath, display: str) -> int | None:
    """A descriptor of the session file at ``path``, or None if there is none.

    Opened without blocking (a FIFO would wait for a writer) and checked on the descriptor,
    not the name, so no rename between a check and the open can slip another file in: only a
    regular file of at most :data:`MAX_LOG_BYTES` is kept open. Anything else raises
    :class:`SessionError` naming ``display``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
    except FileNotFoundError:
        return None
    except IsADirectoryError:  # where a directory cannot even be opened for reading
        raise SessionError(display, "", _not_regular("a directory")) from None
    except OSError as error:
        raise SessionError(display, "", f"cannot open the file: {_reason(error)}") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            kind = next((kind for test, kind in _FILE_KINDS if test(status.st_mode)), None)
            raise SessionError(display, "", _not_regular(kind or "a special file"))
        if status.st_size > MAX_LOG_BYTES:
            raise SessionError(display, "", f"{status.st_size:,} bytes, {_too_large()}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_log(fd: int, display: str) -> bytes:
    """The bytes of the file open at ``fd`` (see :func:`_open_log`), reading no more than
    ``MAX_LOG_BYTES + 1`` of them even when the file holds more than its size said."""
    chunks: list[bytes] = []
    size = 0
    try:
        while size <= MAX_LOG_BYTES and (
            chunk := os.read(fd, min(1 << 20, MAX_LOG_BYTES + 1 - size))
        ):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise SessionError(display, "", f"cannot read the file: {_reason(error)}") from None
    if size > MAX_LOG_BYTES:
        raise SessionError(display, "", _too_large())
    return b"".join(chunks)


def _not_regular(kind: str) -> str:
    return f"{kind}, not a regular file (a session is read only from a regular file)"


def _too_large() -> str:
    return f"larger than the limit of {MAX_LOG_BYTES:,} bytes for a session file"


def _reason(error: OSError) -> str:
    return error.strerror or type(error).__name__


# --- writing it ----------------------------------------------------------------------------------

_TEMP_TRIES: Final = 16


def _temp_names(path: Path) -> re.Pattern[str]:
    """The names :func:`_write_atomically` gives its temp files for ``path``, and only those:
    ``.NAME.`` then the 8 characters of ``[a-z0-9_]`` that ``tempfile.mkstemp`` draws, then
    ``.tmp`` (a test pins that a real flush's temp file matches)."""
    return re.compile(rf"\.{re.escape(path.name)}\.[a-z0-9_]{{8}}\.tmp\Z")


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step: a synced temp file beside it, then rename.

    The temp file is locked (``flock``) from its creation until it is renamed over ``path``,
    so :func:`_sweep_temp_files` in any process knows it for a live writer's. The kernel drops
    the lock when the writer dies, and a killed writer's temp file is then the sweep's.
    """
    fd, tmp = _locked_temp_file(path)
    try:
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
            os.replace(tmp, path)  # still locked: a sweep cannot take it before the rename
        _fsync_directory(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _locked_temp_file(path: Path) -> tuple[int, str]:
    """A new temp file beside ``path``, created and locked by this writer: its descriptor and
    name. One a sweep locked first (between the creation and the lock, it took the file for a
    killed writer's) is left to that sweep, and another is made."""
    for _ in range(_TEMP_TRIES):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            if _try_lock(fd) and os.fstat(fd).st_nlink > 0:
                return fd, tmp
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(errno.EAGAIN, "every temp file made beside the log was taken by a sweep")


def _sweep_temp_files(path: Path) -> None:
    """Remove the temp files that writers of ``path`` killed during a flush left beside it.

    Only regular files named as :func:`_write_atomically` names this log's temp files
    (:func:`_temp_names`) that no process holds locked, so never a live writer's, in this
    process or another; a symlink, directory or FIFO of that name is left alone. Where there is
    no ``flock`` (Windows), a live writer cannot be told from a dead one, and nothing is
    removed. Best effort: a file that cannot be opened, locked or removed stays.
    """
    if sys.platform == "win32":
        return
    names = _temp_names(path)
    try:
        with os.scandir(path.parent) as entries:
            found = [entry.name for entry in entries if names.match(entry.name)]
    except OSError:
        return
    for name in found:
        _remove_if_abandoned(path.parent / name)


def _remove_if_abandoned(tmp: Path) -> None:
    """Remove ``tmp`` iff it is a regular file no writer holds: lock it, then unlink it while
    its name still leads to the file locked (a writer that renamed it away took its name)."""
    try:
        fd = os.open(tmp, os.O_RDONLY | _NONBLOCK | _NOFOLLOW | _CLOEXEC)
    except OSError:
        return
    try:
        held = os.fstat(fd)
        if stat.S_ISREG(held.st_mode) and _try_lock(fd):
            now = os.stat(tmp, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                os.unlink(tmp)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); where directories cannot be opened, skip."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- one live writer per file ----------------------------------------------------------------

_HOLDERS: dict[str, str] = {}
"""What the sessions attached in this process hold -> the agent recording there: each one's
resolved path, and ``inode DEV:INO`` of the log it found there when that had hard links (its
descriptor held open, so the number cannot go to another file meanwhile)."""


@final
class _Claim:
    """An attached session's exclusive hold on its file, from attach to detach.

    A ``flock`` lock kept by an open descriptor on the sidecar ``.NAME.lock`` beside the
    resolved log, which no flush replaces (each flush renames a new file over the log, so a
    lock on the log's own inode would guard a file no longer there). When the log found at
    attach has other names (hard links), a second one on its inode, so those are refused too;
    a log with one name costs one descriptor, not two. ``flock`` and not ``fcntl.lockf``:
    POSIX record locks belong to the process, so a second attach in this process would be
    granted, and closing any descriptor of the file would drop them all; a ``flock`` belongs
    to the open file description. The kernel releases it when the process dies.
    """

    __slots__ = ("fds", "keys", "target")

    def __init__(self, target: Path) -> None:
        self.target = target
        """The log's resolved path, where the attached session writes."""
        self.fds: list[int] = []
        self.keys: list[str] = []

    def take(self, key: str, agent_id: str) -> None:
        """Record ``key`` as held by ``agent_id`` in this process."""
        _HOLDERS[key] = agent_id
        self.keys.append(key)

    def release(self) -> None:
        for key in self.keys:
            _HOLDERS.pop(key, None)
        self.keys.clear()
        fds, self.fds = self.fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                _unlock(fd)
            os.close(fd)


def _try_lock(fd: int) -> bool:
    """Lock ``fd`` exclusively without waiting; False iff another open file holds it."""
    if sys.platform == "win32":  # no flock: the claim holds in this process only
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _unlock(fd: int) -> None:
    """Release ``fd``'s lock even if a fork left a copy of the descriptor open somewhere."""
    if sys.platform != "win32":
        fcntl.flock(fd, fcntl.LOCK_UN)


# --- the log ---------------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True, repr=False)
class SessionEvent:
    """One durable event: its place in the log, its type and its plain JSON data.

    You do not build these: :meth:`Session.append`, :meth:`Session.seed` and loading do, after
    checking the data against :data:`EVENT_SHAPES`. ``data`` is deep-frozen (objects are
    read-only mappings, arrays are tuples), so no caller can change the log through it; use
    :meth:`to_json` for a plain, mutable copy.
    """

    seq: int
    type: EventType
    data: Mapping[str, JSON]

    def to_json(self) -> dict[str, Any]:
        """The JSONL record ``{"seq": ..., "type": ..., "data": ...}`` as fresh plain values."""
        return {"seq": self.seq, "type": self.type, "data": _thaw(self.data)}

    def __hash__(self) -> int:
        return hash((self.seq, self.type, _dumps(_thaw(self.data))))

    def __repr__(self) -> str:
        return f"SessionEvent(seq={self.seq}, type={self.type!r}, data={_thaw(self.data)!r})"


_SEQ, _TYPE, _DATA = (SessionEvent.__dict__[name].__set__ for name in ("seq", "type", "data"))


def _recorded(seq: int, event_type: EventType, data: Mapping[str, JSON]) -> SessionEvent:
    """``SessionEvent(seq, event_type, data)``, built through its slots: a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, which costs twice as much,
    and the runtime records seven events a turn."""
    event = object.__new__(SessionEvent)
    _SEQ(event, seq)
    _TYPE(event, event_type)
    _DATA(event, data)
    return event


@final
class _Events(Sequence[SessionEvent]):
    """A live, read-only view of a session's events; equal to any sequence of equal events."""

    __slots__ = ("_events",)

    def __init__(self, events: list[SessionEvent]) -> None:
        self._events = events

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[SessionEvent, ...]: ...
    def __getitem__(self, index: int | slice) -> SessionEvent | tuple[SessionEvent, ...]:
        if isinstance(index, slice):
            return tuple(self._events[index])
        return self._events[index]

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[SessionEvent]:
        return iter(self._events)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Events):
            return self._events == other._events
        if isinstance(other, list | tuple):
            return self._events == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a live view is not a value

    def __repr__(self) -> str:
        return repr(self._events)


@final
class Session:
    """The append-only durable log of one agent.

    ::

        session = Session()                                   # in memory
        session.append("user/message", {"id": "m1", "text": "hi"})

    ``Session(path)`` persists the log at ``path``: an existing log there is loaded first (all
    or nothing), and every :meth:`flush` replaces the file atomically with the whole log: a
    temp file beside it, locked until it is renamed over the log. A writer killed mid-flush
    leaves that temp file; this session's first write to the file removes the ones no live
    writer holds. A log past :data:`MAX_LOG_BYTES` is neither read nor written.
    :meth:`load` and :meth:`from_jsonl` read a log without attaching to it, so replaying a
    recorded file never writes to it.

    A file has one live writer. The agent recording into ``Session(path)`` holds the file from
    its creation until it is disposed: a second attach of that file, through another session,
    runtime or process, by any name of it (symlink, relative path, hard link), raises
    :class:`~fsm_core.UsageError` naming the file and, in this process, the holding agent. So
    does attaching a session read before another writer recorded into the file, whose
    flushes would erase those events. The hold is an OS lock (``flock``) the kernel releases
    if the process dies; :meth:`load`, :meth:`from_jsonl` and :meth:`save` take none. An
    attached session writes through a symlink to the file it names.

    ``Session(writer=store)`` hands the whole log (:meth:`to_jsonl`) to the async callable
    ``store`` at every :meth:`flush` instead, for a log kept elsewhere than a local file; the
    flush waits for it and raises what it raises. Overlapping flushes call it one at a time,
    in order, so the last log it took is the latest.

    A flush waits for the writer ``flush_timeout`` seconds at most (30 by default; None waits
    for good), so a writer that never returns cannot hold the agent's teardown, a drain or
    ``aclose()``::

        session = Session(writer=store, flush_timeout=5.0)

    At the deadline the flush cancels the writer's call, stops waiting for it and raises
    :class:`SessionError` (``the writer did not return within 5 s; ...``). That is a failed
    flush like any other: the agent logs a turn's and goes on, as it does any failed flush;
    an activation records its final flush as a ``final flush``
    :class:`~fsm_core.runtime.TeardownFailure` and its agent's disposal flush as ``handle
    dispose``; the teardown goes on and the activation settles failed. The log itself records
    nothing of it. The bound is a deadline, not the teardown's signal: a teardown flushes
    *after* it cancelled the agent (seed 004's finishDisposal), so that signal has already
    aborted when the flush begins and could only skip the flush, never bound it.

    The writer's call is not awaited past the deadline. One that swallows the cancellation
    runs on, and the next flush waits (within its own deadline) for it to end before it
    calls the writer again, so two calls never overlap and an older log never lands last: it
    raises ``an earlier call of the writer had not returned ...`` while that call runs. Every
    flush hands over the whole log, so the next flush that succeeds makes up for one that
    timed out. A path's write is synchronous and is not bounded.

    A ``tool/result`` with ``ok`` false records a short error *classification* as its result
    (``"tool-error"``, ``"aborted"``, ``"invalid-args"``), never an exception's text: the
    shape rejects anything else, as it rejects any value that is not plain JSON.
    """

    __slots__ = (
        "_agent",
        "_claim",
        "_events",
        "_flush_timeout",
        "_lines",
        "_name",
        "_path",
        "_steps",
        "_stray",
        "_swept",
        "_target",
        "_writer",
        "_writing",
    )

    def __init__(
        self,
        path: StrPath | None = None,
        *,
        writer: Callable[[str], Awaitable[None]] | None = None,
        flush_timeout: float | None = _FLUSH_TIMEOUT,
    ) -> None:
        # Invariant: _events[i].seq == i; every event passed _check_data.
        self._events: list[SessionEvent] = []
        # Invariant: _lines[i] is the JSONL line of _events[i] (a prefix; filled lazily).
        self._lines: list[str] = []
        self._path = None if path is None else Path(path)
        self._name = "<session>" if path is None else os.fspath(path)
        self._agent: str | None = None
        """The agent recording into this session object, if any."""
        self._claim: _Claim | None = None
        """The attached writer's hold on the file; None iff detached or held in memory."""
        self._target = self._path
        """Where :meth:`flush` writes: the path, resolved once an agent attached."""
        self._steps = _Steps()
        if writer is not None and (path is not None or not callable(writer)):
            raise UsageError(
                f"a session writes to a path or through a writer, not {echo(path)} and "
                f"{echo(writer)}"
                if path is not None
                else f"a session's writer is an async callable, not {echo(writer)}"
            )
        self._writer = writer
        self._writing = asyncio.Lock()
        """One writer call at a time, each taking the log when its turn comes: a slow write
        finishing after a later one would leave the older log as the last written."""
        if flush_timeout is not None and (
            type(flush_timeout) not in (int, float) or not 0 < flush_timeout < math.inf
        ):
            raise UsageError(
                "a session's flush_timeout is a number of seconds above 0, or None to wait for "
                f"the writer for good, not {echo(flush_timeout)}"
            )
        self._flush_timeout = flush_timeout
        # Invariant: _stray is None or a call of _writer no flush is waiting for any more.
        self._stray: asyncio.Future[None] | None = None
        """The writer's call a flush stopped waiting for (its deadline passed, or its task was
        cancelled), until a later flush saw it end: no call begins while it runs."""
        self._swept: Path | None = None
        """The file whose killed writers' temp files this session removed: its first write
        there sweeps them (see :func:`_sweep_temp_files`)."""
        if self._path is not None:
            loaded = Session._read(self._path, self._name, missing_ok=True)
            if loaded is not None:
                self._events, self._steps = loaded._events, loaded._steps

    @property
    def events(self) -> Sequence[SessionEvent]:
        """Every event so far, in seq order: a live, read-only view."""
        return _Events(self._events)

    @property
    def flush_timeout(self) -> float | None:
        """How many seconds a :meth:`flush` waits for the writer; None: no deadline."""
        return self._flush_timeout

    @property
    def path(self) -> Path | None:
        """Where :meth:`flush` writes, or None for a session held only in memory."""
        return self._path

    def append(self, type: EventType, data: Mapping[str, object]) -> SessionEvent:
        """Record one event and return it, with the next seq.

        Raises :class:`SessionError` (and records nothing) for an unknown ``type``, data that
        does not have exactly the declared shape, or an ``error`` outcome whose ``step`` is not
        its turn's last ``step/start``. The log keeps a deep-frozen copy, so changing ``data``
        afterwards does not change the log.
        """
        seq = len(self._events)
        try:
            event_type = _check_type(type)
            event = _recorded(seq, event_type, _check_data(event_type, data))
            self._steps.follow(event)
        except _Fault as fault:
            raise SessionError(self._name, f"event {seq}", str(fault)) from None
        self._events.append(event)
        return event

    def to_jsonl(self) -> str:
        """One compact JSON record per line, keys sorted, ASCII only, each ending in ``\\n``."""
        for event in self._events[len(self._lines) :]:
            self._lines.append(_dumps(event.to_json()) + "\n")
        return "".join(self._lines)

    def save(self, path: StrPath) -> None:
        """Write the log to ``path`` atomically; the session does not attach to it."""
        self._write(Path(path), os.fspath(path))

    async def flush(self) -> None:
        """A durability point: when it returns, the whole log is on disk (if attached), or
        its writer has taken it. A session whose agent was disposed writes its file no more
        (it holds it no more: another agent may have resumed the log since).

        The runtime awaits it through the ``session/flush`` waterfall after each turn ends,
        before the next turn and before idle, and once more when the agent is disposed. With
        neither path nor writer it returns at once. A failed write raises
        :class:`SessionError` naming the file; the file then still holds the last log written
        whole. A writer that has not returned within :attr:`flush_timeout` seconds (waiting
        for an earlier call included) is cancelled and left: the flush raises
        :class:`SessionError`, and the log is not known to be stored.
        """
        if self._target is not None:
            self._write(self._target, self._name)
        elif self._writer is not None:
            called: list[bool] = []
            deadline = asyncio.timeout(self._flush_timeout)
            try:
                async with deadline, self._writing:
                    await self._call(self._writer, called)
            except TimeoutError:
                if not deadline.expired():
                    raise  # the writer's own
                raise SessionError(self._name, "", self._overdue(bool(called))) from None

    async def _call(self, writer: Callable[[str], Awaitable[None]], called: list[bool]) -> None:
        """Call ``writer`` with the log once no earlier call runs, and wait for it. Its own
        task, so that a flush that stops waiting (:meth:`flush`'s deadline, or its task
        cancelled) leaves it behind, cancelled, even if it ignores that."""
        if self._stray is not None:
            await asyncio.wait({self._stray})
            self._stray = None
        taken = writer(self.to_jsonl())
        if not inspect.isawaitable(taken):
            raise UsageError(
                f"a session's writer must return an awaitable; it returned {echo(taken)}"
            )
        called.append(True)
        call = asyncio.ensure_future(taken)
        try:
            await asyncio.wait({call})
        except BaseException:
            call.add_done_callback(_retrieved)
            if not call.done():
                call.cancel()
                self._stray = call
            raise
        call.result()

    def _overdue(self, called: bool) -> str:
        """What a flush that reached its deadline says: which call it stopped waiting for."""
        within = f"within {self._flush_timeout:g} s"
        if called:
            return (
                f"the writer did not return {within}; the flush cancelled the call and "
                "stopped waiting for it, so the log is not known to be stored"
            )
        return (
            f"an earlier call of the writer had not returned {within}; the flush did not "
            "call the writer, so the log is not stored"
        )

    def _write(self, path: Path, name: str) -> None:
        text = self.to_jsonl()
        if len(text) > MAX_LOG_BYTES:  # ASCII: one byte a character
            raise SessionError(
                name,
                "",
                f"the log is {len(text):,} bytes, {_too_large()}; it was not written (the file "
                "keeps the last log written)",
            )
        if self._swept != path:
            _sweep_temp_files(path)
            self._swept = path
        try:
            _write_atomically(path, text)
        except OSError as error:
            raise SessionError(name, "", f"cannot write the log: {_reason(error)}") from error

    @classmethod
    def from_jsonl(cls, text: str, source: str = "<jsonl>") -> Session:
        """A session holding the events of ``text``; any fault rejects it whole.

        The error names ``source`` and the 1-based line: ``session.jsonl: line 3: not valid
        JSON (...)``. A final newline is optional; blank lines are faults.
        """
        # Split on "\n" only: str.splitlines() would also split on U+2028 and friends.
        lines = text.split("\n")
        if lines[-1] == "":
            lines.pop()
        events: list[SessionEvent] = []
        steps = _Steps()
        for number, line in enumerate(lines, 1):
            try:
                event = _check_record(_parse(line), len(events))
                steps.follow(event)
            except _Fault as fault:
                raise SessionError(source, f"line {number}", str(fault)) from None
            events.append(event)
        return cls._holding(events, steps, source)

    @classmethod
    def load(cls, path: StrPath) -> Session:
        """The session stored at ``path`` (see :meth:`from_jsonl`), not attached to it.

        Only a regular file of at most :data:`MAX_LOG_BYTES` is read: a directory, FIFO or
        device is refused without blocking, before a byte is read, and so is a larger file,
        each with a :class:`SessionError` naming ``path``.
        """
        session = cls._read(path, os.fspath(path), missing_ok=False)
        assert session is not None  # missing_ok=False raises instead
        return session

    @classmethod
    def _read(cls, path: StrPath, display: str, *, missing_ok: bool) -> Session | None:
        """The session stored at ``path``; None iff there is no file and ``missing_ok``."""
        fd = _open_log(path, display)
        if fd is None:
            if missing_ok:
                return None
            raise SessionError(display, "", "file not found")
        try:
            raw = _read_log(fd, display)
        finally:
            os.close(fd)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            raise SessionError(display, f"line {line}", f"not UTF-8 ({e.reason})") from None
        return cls.from_jsonl(text, source=display)

    @classmethod
    def seed(
        cls, events: Iterable[Mapping[str, object] | SessionEvent], source: str = "<seed>"
    ) -> Session:
        """A session starting from recorded events: records ``{"seq", "type", "data"}`` or
        :class:`SessionEvent` values, checked exactly as loading checks them.

        The error names ``source`` and the 0-based index: ``<seed>: event 2: ...``.
        """
        checked: list[SessionEvent] = []
        steps = _Steps()
        for index, event in enumerate(events):
            record = event.to_json() if isinstance(event, SessionEvent) else event
            try:
                checked.append(_check_record(record, index))
                steps.follow(checked[-1])
            except _Fault as fault:
                raise SessionError(source, f"event {index}", str(fault)) from None
        return cls._holding(checked, steps, source)

    @classmethod
    def _holding(cls, events: list[SessionEvent], steps: _Steps, name: str) -> Session:
        session = cls()
        session._events = events
        session._steps = steps
        session._name = name
        return session

    @property
    def _owner(self) -> str | None:
        """The agent of this process recording into this session or its file, if any, for a
        caller that must refuse before it begins an attach it could not undo. Another
        process's writer, or a log changed since this session read it, shows only at attach.
        """
        if self._agent is not None or self._path is None:
            return self._agent
        target = os.path.realpath(self._path)
        holder = _HOLDERS.get(target)
        if holder is None:
            with contextlib.suppress(OSError):
                status = os.stat(target)
                holder = _HOLDERS.get(f"inode {status.st_dev}:{status.st_ino}")
        return holder

    def _attach(self, agent_id: str) -> None:
        """Record that ``agent_id`` writes this log; two writers would interleave their turns.

        A session with a path also holds its file (see :class:`_Claim`) until :meth:`_detach`:
        refused while another writer, in this process or another, holds it, or when the file
        holds events this log does not begin with; a refused attach holds nothing.
        """
        if self._agent is not None:
            raise UsageError(
                f"{self._name}: agent {self._agent!r} already records into this session; "
                f"agent {agent_id!r} needs a session of its own"
            )
        if self._path is not None:
            claim = _Claim(Path(os.path.realpath(self._path)))
            try:
                self._hold(claim, agent_id)
            except BaseException:
                claim.release()
                raise
            self._claim = claim
            self._target = claim.target
        self._agent = agent_id

    def _hold(self, claim: _Claim, agent_id: str) -> None:
        """Lock ``claim``'s file for ``agent_id`` and check that this log begins with it."""
        log = os.fspath(claim.target)
        where = self._name if self._name == log else f"{self._name} (the file {log})"

        def held(by: str) -> NoReturn:
            raise UsageError(
                f"{where}: {by} already records into this log; agent {agent_id!r} needs a log "
                "of its own (or to resume it once that writer is disposed)"
            )

        if log in _HOLDERS:
            held(f"agent {_HOLDERS[log]!r}")
        lockfile = claim.target.with_name(f".{claim.target.name}.lock")
        try:
            claim.fds.append(os.open(lockfile, os.O_RDWR | os.O_CREAT, 0o644))
            if not _try_lock(claim.fds[-1]):
                held(f"another process (holding {lockfile})")
            claim.take(log, agent_id)
            fd = _open_log(claim.target, where)
            if fd is None:
                return  # a new log: nothing there to lose
            claim.fds.append(fd)
            status = os.fstat(fd)
            inode = f"inode {status.st_dev}:{status.st_ino}"
            if inode in _HOLDERS:
                held(f"agent {_HOLDERS[inode]!r}, through another name of the file,")
            # Another name of the file exists now: hold its inode too (one descriptor more).
            # Only a held inode is recorded: once the descriptor is closed and a flush renamed
            # a new file over the log, the filesystem may give the number to an unrelated file.
            linked = status.st_nlink > 1 and sys.platform != "win32"
            if linked:
                if not _try_lock(fd):
                    held("another process, through another name of the file,")
                claim.take(inode, agent_id)
            found = _read_log(fd, where)
            if not linked:
                claim.fds.remove(fd)
                os.close(fd)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            file = f" ({error.filename})" if error.filename else ""
            raise SessionError(self._name, "", f"cannot lock the log: {reason}{file}") from error
        if not self._begins_with(found, log):
            raise UsageError(
                f"{where}: the file holds events this session does not (another writer recorded "
                "there since the session read it); open it again to resume it as it is now"
            )

    def _begins_with(self, found: bytes, source: str) -> bool:
        """True iff this log begins with the events of ``found`` (a log's bytes), so writing
        it over them loses none. Another writer's formatting counts as the same events."""
        if self.to_jsonl().encode("ascii").startswith(found):
            return True
        try:
            events = Session.from_jsonl(found.decode("utf-8"), source).events
        except (UnicodeDecodeError, SessionError):
            return False
        return len(events) <= len(self._events) and list(events) == self._events[: len(events)]

    def _detach(self) -> None:
        """The writer is disposed: another agent, here or in another process, may resume the
        log."""
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.release()
            # It wrote its last log at disposal; holding the file no more, it writes it no more:
            # a late flush would overwrite whatever a writer that resumed the log since wrote.
            self._target = None
        self._agent = None

    def __repr__(self) -> str:
        last = f" last={self._events[-1].type}" if self._events else ""
        return f"<Session {self._name} events={len(self._events)}{last}>"
