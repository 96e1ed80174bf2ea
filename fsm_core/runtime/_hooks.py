"""The hook bridge: shell commands the runtime runs at a turn's seams, killed with the turn.

A hook is a shell command. It reads one JSON object on stdin (which seam, which agent, which
turn, and what is at stake) and answers with its exit status and, optionally, a JSON object on
stdout::

    exit 0, stdout {"decision": "block", "reason": "..."}   -> block
    exit 0, stdout {"decision": "allow"} or anything else   -> allow (no decision: the default)
    exit 2                                                   -> block, the reason on stderr
    any other exit                                           -> no decision (the hook failed)

:func:`run_hook` runs one, and takes the turn's signal (``RunHookOptions(signal=...)``). When
the signal aborts, the hook's whole process group is stopped (SIGTERM, then SIGKILL after
``grace`` seconds) and ``run_hook`` returns only once every process the hook started is gone,
reaped, not a zombie (``_reaper.py`` says how). A killed hook decodes as "no exit code, no
decision"; ``run_hook`` never raises for what the hook did::

    result = await run_hook("./check-prompt.sh", RunHookOptions(signal=signal, input=b"{}"))
    if result.decision == "block": ...

A :class:`Runtime` built with ``hooks=Hooks(prompt=[...], tool=[...], stop=[...])`` runs them
with the turn's signal: ``prompt`` hooks before the turn's first step (a block ends the turn
``blocked`` before any request), ``tool`` hooks before each approved tool call (a block answers
the call ``blocked``), ``stop`` hooks once the turn stops (their decision is not read). The
driver awaits each hook, so ``when_idle()`` and disposal never return while a hook's process
still lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal as signals
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, final

from fsm_core.runtime._session import MAX_DEPTH
from fsm_core.runtime._signal import AbortSignal

__all__ = [
    "HookDecision",
    "HookResult",
    "Hooks",
    "RunHookOptions",
    "run_hook",
    "run_hooks",
]

log = logging.getLogger("fsm_core.runtime")

HookDecision = Literal["allow", "block"]

_REAPER = str(Path(__file__).with_name("_reaper.py"))
_spawn = asyncio.create_subprocess_exec
"""How the supervisor is started (a seam: a test holds the start open to cancel inside it)."""
_CHUNK = 65536


@final
@dataclass(frozen=True, slots=True)
class RunHookOptions:
    """How to run one hook. ``signal`` is required: it is how a turn stops its hooks.

    ``input`` is written to the hook's stdin (then closed); ``env`` replaces the environment
    when given; ``grace`` is how long a stopped hook has between SIGTERM and SIGKILL;
    ``limit`` caps how many bytes of stdout and of stderr are kept (the rest is read and
    dropped, so a chatty hook never blocks on a full pipe).
    """

    signal: AbortSignal
    input: bytes = b""
    cwd: str | os.PathLike[str] | None = None
    env: Mapping[str, str] | None = None
    grace: float = 0.5
    limit: int = 1 << 20

    def __post_init__(self) -> None:
        if not isinstance(self.signal, AbortSignal):
            raise TypeError(f"RunHookOptions.signal is an AbortSignal, not {self.signal!r}")
        if not (isinstance(self.grace, int | float) and 0 <= self.grace <= 60):
            raise TypeError(
                f"RunHookOptions.grace is a number of seconds from 0 to 60, not {self.grace!r}"
            )
        if type(self.limit) is not int or self.limit < 0:
            raise TypeError(f"RunHookOptions.limit is a byte count, not {self.limit!r}")


@final
@dataclass(frozen=True, slots=True)
class HookResult:
    """What a hook answered. ``killed`` is True iff its signal aborted while it ran; a killed
    hook, or one that died by a signal, has no ``exit_code`` and no ``decision``."""

    exit_code: int | None
    decision: HookDecision | None
    reason: str = ""
    stdout: str = ""
    stderr: str = ""
    killed: bool = False


@final
@dataclass(frozen=True, slots=True)
class Hooks:
    """The hook commands a :class:`~fsm_core.Runtime` runs at each seam, in order.

    ``prompt``: before a turn's first step; the first ``block`` ends the turn ``blocked``.
    ``tool``: before each approved tool call; the first ``block`` answers the call ``blocked``.
    ``stop``: once the turn stopped (after ``agent/turn-stopping``); observe only.
    """

    prompt: Sequence[str] = ()
    tool: Sequence[str] = ()
    stop: Sequence[str] = ()
    grace: float = 0.5
    env: Mapping[str, str] | None = field(default=None)

    def __post_init__(self) -> None:
        for seam in ("prompt", "tool", "stop"):
            commands = getattr(self, seam)
            if isinstance(commands, str) or not all(
                isinstance(c, str) and c.strip() for c in commands
            ):
                raise TypeError(
                    f"Hooks.{seam} is a sequence of non-empty shell commands, not {commands!r}"
                )
            object.__setattr__(self, seam, tuple(commands))
        if not (isinstance(self.grace, int | float) and 0 <= self.grace <= 60):
            raise TypeError(f"Hooks.grace is a number of seconds from 0 to 60, not {self.grace!r}")


def _decode(code: int, stdout: str, stderr: str) -> tuple[HookDecision | None, str]:
    """The decision and reason a hook that exited with ``code`` gave (module docstring)."""
    if code == 2:
        return "block", stderr.strip()
    if code != 0 or not stdout.lstrip().startswith("{"):
        return None, ""
    try:
        answer = json.loads(stdout)
    except (ValueError, RecursionError):  # a deeply nested answer is as malformed as any
        return None, ""
    decision = answer.get("decision") if isinstance(answer, dict) else None
    if decision not in ("allow", "block"):
        return None, ""
    reason = answer.get("reason", "")
    return decision, reason if isinstance(reason, str) else ""


async def _read(stream: asyncio.StreamReader | None, limit: int) -> bytes:
    """Everything ``stream`` gives until end-of-file, keeping the first ``limit`` bytes."""
    kept = bytearray()
    if stream is None:
        return b""
    while chunk := await stream.read(_CHUNK):
        kept += chunk[: max(0, limit - len(kept))]
    return bytes(kept)


async def _feed(stdin: asyncio.StreamWriter | None, data: bytes) -> None:
    """Write ``data`` to the hook's stdin and close it; a hook that does not read is fine."""
    if stdin is None:
        return
    with contextlib.suppress(ConnectionError, BrokenPipeError, OSError):
        stdin.write(data)
        await stdin.drain()
    stdin.close()
    with contextlib.suppress(ConnectionError, BrokenPipeError, OSError):
        await stdin.wait_closed()


async def _settle(*work: asyncio.Future[Any]) -> None:
    """Await every one of ``work`` to its end even when the caller is cancelled meanwhile;
    then re-raise the cancellation. Used only where leaving early would leave a process
    behind (each is awaited through a shield, so a cancellation never reaches it)."""
    cancelled = False
    for future in work:
        while not future.done():
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                cancelled = True
            except BaseException:
                break  # its outcome is read (or dropped) by the caller
    if cancelled:
        raise asyncio.CancelledError


async def run_hook(command: str, options: RunHookOptions) -> HookResult:
    """Run the shell ``command`` as a hook; return what it answered (see the module docstring).

    Raises :class:`TypeError` for a command that is not a non-empty string, or options that are
    not :class:`RunHookOptions`. Nothing the hook does raises: a hook that cannot start exits
    127, as the shell says. A hook whose signal is already aborted is not started.
    """
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        raise TypeError(f"a hook command is a non-empty shell command string, not {command!r}")
    if not isinstance(options, RunHookOptions):
        raise TypeError(f"run_hook takes RunHookOptions, not {type(options).__name__}")
    signal = options.signal
    if signal.aborted:
        return HookResult(None, None, killed=True)
    spawning = asyncio.ensure_future(
        _spawn(
            sys.executable,
            "-I",
            "-S",
            _REAPER,
            str(os.getpid()),
            repr(float(options.grace)),
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=options.cwd,
            env=dict(options.env) if options.env is not None else None,
            start_new_session=True,  # a terminal's Ctrl-C goes to the runtime, which stops it
        )
    )
    # A cancellation that lands while the supervisor is being started must not orphan it: the
    # start runs to its end in its own task, and the hook is then stopped and reaped below.
    interrupted: BaseException | None = None
    while not spawning.done():
        try:
            await asyncio.wait([spawning])
        except BaseException as error:  # the caller is cancelled (or interrupted)
            interrupted = interrupted or error
    if interrupted is not None and spawning.exception() is not None:
        raise interrupted
    process = spawning.result()
    killed = False

    def stop(_signal: AbortSignal) -> None:
        nonlocal killed
        if process.returncode is None:
            killed = True
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signals.SIGTERM)

    off = signal.add_listener(stop)
    if signal.reason is not None:  # it aborted while the supervisor was being started
        stop(signal)
    readers = asyncio.gather(
        _read(process.stdout, options.limit),
        _read(process.stderr, options.limit),
        _feed(process.stdin, options.input),
    )
    exited = asyncio.ensure_future(process.wait())
    try:
        if interrupted is not None:
            raise interrupted
        await asyncio.shield(exited)
    except BaseException:
        # The caller is cancelled (or interrupted): stop the hook all the same, and leave
        # only once everything it started is gone.
        stop(signal)
        await _settle(exited, readers)
        raise
    finally:
        off()
    # The supervisor has reaped every process of the hook: the pipes are at end-of-file.
    await _settle(readers)
    out, err, _ = readers.result()
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    code = process.returncode
    assert code is not None
    if killed or code < 0:
        return HookResult(None, None, stdout=stdout, stderr=stderr, killed=killed)
    decision, reason = _decode(code, stdout, stderr)
    return HookResult(code, decision, reason, stdout, stderr)


def _encode(payload: Mapping[str, Any]) -> bytes | str:
    """``payload`` as JSON (objects JSON lacks written as their ``repr``), or why it cannot be:
    a field nested deeper than the session's ``MAX_DEPTH`` (so a hook sees whatever the session
    records; checked without recursion, before the encoder would exhaust the stack), circular,
    or otherwise not encodable."""
    stack: list[tuple[object, int, str]] = [(v, 0, str(k)) for k, v in payload.items()]
    while stack:
        value, depth, field = stack.pop()
        if isinstance(value, Mapping | list | tuple):
            if depth >= MAX_DEPTH:
                return f"nests deeper than {MAX_DEPTH} levels, under {field!r}"
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            stack.extend((v, depth + 1, field) for _, v in items)
    try:
        return json.dumps(payload, default=repr).encode()
    except (ValueError, TypeError, RecursionError) as error:
        return f"cannot be written as JSON: {error}"


async def run_hooks(
    commands: Sequence[str], payload: Mapping[str, Any], signal: AbortSignal, hooks: Hooks
) -> HookResult | None:
    """Run ``commands`` in order with ``payload`` as JSON on stdin; return the first result
    that blocks, or None. Stops early once the signal aborts (the caller checks it).

    A payload that cannot be written as JSON (a field nested deeper than ``MAX_DEPTH``,
    circular) runs no hook and *blocks*, with a reason naming the seam and the depth: a hook
    is a gate, and one that cannot see what it guards must not let it through (truncating the
    payload would let a tool argument hide from the hook below the cut). The turn goes on;
    only the call (or, at the prompt seam, the turn) is refused.
    """
    data = _encode(payload)
    if isinstance(data, str):
        seam = payload.get("hook", "?")
        reason = f"the {seam} hooks did not run: their payload {data}"
        log.warning("%s (%d hooks, the first: %s)", reason, len(commands), commands[:1])
        return HookResult(None, "block", reason)
    for command in commands:
        if signal.aborted:
            return None
        result = await run_hook(
            command, RunHookOptions(signal=signal, input=data, env=hooks.env, grace=hooks.grace)
        )
        if result.exit_code not in (0, 2, None):
            log.warning("a %s hook exited %s: %s", payload.get("hook"), result.exit_code, command)
        if result.decision == "block":
            return result
    return None
