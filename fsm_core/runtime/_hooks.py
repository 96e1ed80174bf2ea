"""The hook bridge: shell commands the runtime runs at a turn's seams, killed with the turn.

A hook is a shell command. It reads one JSON object on stdin (which seam, which agent, which
turn, and what is at stake) and answers with its exit status and, optionally, a JSON object on
stdout::

    exit 0, stdout {"decision": "block", "reason": "..."}   -> block
    exit 0, stdout {"decision": "allow"} or anything else   -> allow (no decision: the default)
    exit 0, stdout longer than ``limit`` (1 MiB)             -> block (it cannot be read whole)
    exit 2                                                   -> block, the reason on stderr
    any other exit                                           -> no decision (the hook failed)

The third row is the bridge failing closed: only ``limit`` bytes of stdout are kept, so a
longer answer (a long reason, or the answer after a flood of whitespace) cannot be read, and a
gate that cannot read its answer does not let the call through. Verbose output goes to stderr.

:func:`run_hook` runs one, and takes the turn's signal (``RunHookOptions(signal=...)``). When
the signal aborts, the hook's whole process tree is stopped (SIGTERM, then SIGKILL after
``grace`` seconds) and ``run_hook`` returns only once every process the hook started is gone,
reaped, not a zombie (``_reaper.py`` says how), whatever the hook did to the process it sees
as its parent. A killed hook decodes as "no exit code, no decision"; ``run_hook`` never raises
for what the hook did::

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

from fsm_core._errors import UsageError, echo
from fsm_core.runtime._reaper import descendants
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
_SLACK = 1.0
"""Seconds past its grace a stopped hook's supervisor has to finish before the runtime steps
in (``_Escalation``)."""
_TICK = 0.1
"""Seconds between the runtime's own rounds of killing, once it stepped in."""
_ROUNDS = 10
"""Rounds after which the runtime kills a supervisor that still has not finished."""


@final
@dataclass(frozen=True, slots=True)
class RunHookOptions:
    """How to run one hook. ``signal`` is required: it is how a turn stops its hooks.

    ``input`` (bytes) is written to the hook's stdin (then closed); ``cwd`` is the directory
    it runs in (one that cannot be entered makes it exit 127); ``env`` replaces the environment
    when given; ``grace`` is how long a stopped hook has between SIGTERM and SIGKILL;
    ``limit`` caps how many bytes of stdout and of stderr are kept (the rest is read and
    dropped, so a chatty hook never blocks on a full pipe; an exit-0 stdout past it *blocks*,
    see :func:`run_hook`). Each is checked as a type when the options are built::

        RunHookOptions(signal=signal, input="{}")
        # UsageError: RunHookOptions.input is the hook's stdin as bytes, not '{}'
    """

    signal: AbortSignal
    input: bytes = b""
    cwd: str | os.PathLike[str] | None = None
    env: Mapping[str, str] | None = None
    grace: float = 0.5
    limit: int = 1 << 20

    def __post_init__(self) -> None:
        if not isinstance(self.signal, AbortSignal):
            raise UsageError(f"RunHookOptions.signal is an AbortSignal, not {echo(self.signal)}")
        if not isinstance(self.input, bytes):
            raise UsageError(
                f"RunHookOptions.input is the hook's stdin as bytes, not {echo(self.input)}"
            )
        if self.cwd is not None and not _is_path(self.cwd):
            raise UsageError(
                f"RunHookOptions.cwd is a directory path (str or os.PathLike), not {echo(self.cwd)}"
            )
        if self.env is not None and not _is_env(self.env):
            raise UsageError(
                "RunHookOptions.env maps names to values, both strings without NUL "
                f"(and names without '='), not {echo(self.env)}"
            )
        if not _is_grace(self.grace):
            raise UsageError(
                f"RunHookOptions.grace is a number of seconds from 0 to 60, not {echo(self.grace)}"
            )
        if type(self.limit) is not int or self.limit < 0:
            raise UsageError(
                f"RunHookOptions.limit is a byte count (an int from 0), not {echo(self.limit)}"
            )


def _is_grace(value: object) -> bool:
    """True iff ``value`` is a number of seconds from 0 to 60 (a bool is not a number here)."""
    return type(value) in (int, float) and 0 <= value <= 60  # type: ignore[operator]


def _is_path(value: object) -> bool:
    """True iff ``value`` is a non-empty str path (or ``os.PathLike`` of one) without NUL."""
    if not isinstance(value, str | os.PathLike):
        return False
    path = os.fspath(value)
    return isinstance(path, str) and path != "" and "\0" not in path


def _is_env(value: object) -> bool:
    """True iff ``value`` maps non-empty names without ``=`` to values, all strings
    without NUL."""
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in value.items()
    )


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
    ``cwd``: the directory every hook runs in (default: the runtime process's own); the ACP
    adapter sets it to the session's ``cwd``.
    """

    prompt: Sequence[str] = ()
    tool: Sequence[str] = ()
    stop: Sequence[str] = ()
    grace: float = 0.5
    env: Mapping[str, str] | None = field(default=None)
    cwd: str | None = None

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
        if not _is_grace(self.grace):
            raise TypeError(f"Hooks.grace is a number of seconds from 0 to 60, not {self.grace!r}")
        if self.env is not None and not _is_env(self.env):
            raise TypeError(
                "Hooks.env maps names to values, both strings without NUL "
                f"(and names without '='), not {echo(self.env)}"
            )
        if self.cwd is not None and not (isinstance(self.cwd, str) and _is_path(self.cwd)):
            raise TypeError(f"Hooks.cwd is a directory path (a str), not {echo(self.cwd)}")


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


@final
class _Capture:
    """One of the hook's output pipes, read as the loop finds data: the first ``limit`` bytes
    are kept, the rest counted and dropped (a chatty hook never blocks on a full pipe).
    Registered synchronously, so no cancellation can land between the pipe and its reader."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd = fd
        self.limit = limit
        self.kept = bytearray()
        self.total = 0
        self.inode = os.fstat(fd).st_ino
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()
        os.set_blocking(fd, False)
        self.loop.add_reader(fd, self._ready)

    def _ready(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, _CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.close()
                return
            self.total += len(chunk)
            self.kept += chunk[: max(0, self.limit - len(self.kept))]

    def close(self) -> None:
        """Stop reading and close the pipe (at its end, or when the runtime gives up on it)."""
        if not self.done.done():
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.done.set_result(None)

    @property
    def overflowed(self) -> bool:
        """True iff the hook wrote more than ``limit`` bytes here."""
        return self.total > self.limit


async def _feed(stdin: asyncio.StreamWriter | None, data: bytes) -> None:
    """Write ``data`` to the hook's stdin and close it; a hook that does not read is fine."""
    if stdin is None:
        return
    try:
        with contextlib.suppress(ConnectionError, BrokenPipeError, OSError):
            stdin.write(data)
            await stdin.drain()
    finally:
        stdin.close()
    with contextlib.suppress(ConnectionError, BrokenPipeError, OSError):
        await stdin.wait_closed()


def _holders(inodes: set[int]) -> list[int]:
    """The processes (other than this one) holding one of the pipes ``inodes`` open: Linux
    ``/proc``, empty where it cannot tell."""
    wanted = {f"pipe:[{inode}]" for inode in inodes}
    found: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{entry}/fd"):
                    with contextlib.suppress(OSError):
                        if os.readlink(f"/proc/{entry}/fd/{fd}") in wanted:
                            found.append(int(entry))
                            break
    return found


def _kill(pids: Sequence[int], *, first: int = signals.SIGKILL) -> None:
    for pid in pids:
        for sig in (first, signals.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


@final
class _Escalation:
    """What the runtime does itself once a supervisor has not finished ``_SLACK`` seconds past
    its grace: the supervisor was stopped, or killed, by something other than the runtime (its
    hook hunted it down; the hook's own ``$PPID`` is the supervisor's stub, which it may kill
    or stop freely, see ``_reaper.py``)."""

    def __init__(self, process: asyncio.subprocess.Process, pipes: Sequence[_Capture]) -> None:
        self.process = process
        self.pipes = pipes
        self.rounds = 0

    def __call__(self) -> None:
        self.rounds += 1
        process = self.process
        if process.returncode is None:
            # Alive, stopped or held up: it is still the subreaper of every process of its
            # hook, so its tree is all of them. Kill them from here; resumed, it reaps them.
            _kill(descendants(process.pid))
            if self.rounds > _ROUNDS:  # not Linux (no tree to walk), or it will not finish
                _kill([process.pid])
            else:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signals.SIGCONT)
            return
        # Gone: its hook's processes were re-parented away from it (to init, which reaps
        # them, or not). Kill whichever still holds the hook's pipes, then let the pipes go.
        _kill(_holders({pipe.inode for pipe in self.pipes if not pipe.done.done()}))
        if self.rounds > _ROUNDS:
            log.warning("a hook's processes outlived its supervisor; its pipes are dropped")
            for pipe in self.pipes:
                pipe.close()
        if process.stdin is not None:
            process.stdin.close()


async def _finish(
    work: Sequence[asyncio.Future[Any]],
    aborted: asyncio.Event,
    grace: float,
    escalate: _Escalation,
) -> None:
    """Wait for each of ``work`` (the supervisor's exit, the pipes' ends, stdin written); once
    ``aborted`` is set, give the supervisor ``grace + _SLACK`` seconds, then ``escalate``
    every ``_TICK`` until all of ``work`` is done."""
    pending = {future for future in work if not future.done()}
    watching = asyncio.ensure_future(aborted.wait())
    try:
        while pending and not aborted.is_set():
            await asyncio.wait({*pending, watching}, return_when=asyncio.FIRST_COMPLETED)
            pending = {future for future in work if not future.done()}
    finally:
        watching.cancel()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace + _SLACK
    while pending:
        delay = deadline - loop.time()
        if delay <= 0:
            escalate()
            delay = _TICK
        await asyncio.wait(pending, timeout=delay)
        pending = {future for future in work if not future.done()}


async def settle(*work: asyncio.Future[Any]) -> None:
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

    Raises :class:`~fsm_core.UsageError` for a command that is not a non-empty string, or
    options that are not :class:`RunHookOptions`. Nothing the hook does raises: a hook that
    cannot start (no such command, a ``cwd`` that cannot be entered) exits 127, the reason on
    its stderr. A hook whose signal is already aborted is not started.
    """
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        raise UsageError(f"a hook command is a non-empty shell command string, not {echo(command)}")
    if not isinstance(options, RunHookOptions):
        raise UsageError(f"run_hook takes RunHookOptions, not {type(options).__name__}")
    signal = options.signal
    if signal.aborted:
        return HookResult(None, None, killed=True)
    cwd = "" if options.cwd is None else os.fspath(options.cwd)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    spawning = asyncio.ensure_future(
        _spawn(
            sys.executable,
            "-I",
            "-S",
            _REAPER,
            str(os.getpid()),
            repr(float(options.grace)),
            command,
            cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=out_w,
            stderr=err_w,
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
    os.close(out_w)  # the supervisor has its own copies; the pipes end when its tree does
    os.close(err_w)
    if spawning.exception() is not None:
        os.close(out_r)
        os.close(err_r)
        if interrupted is not None:
            raise interrupted
        spawning.result()  # raises: the supervisor could not start (no Python, no fork)
    process = spawning.result()
    out = _Capture(out_r, options.limit)
    err = _Capture(err_r, options.limit)
    killed = False
    aborted = asyncio.Event()

    def stop(_signal: AbortSignal) -> None:
        nonlocal killed
        aborted.set()
        if process.returncode is None:
            killed = True
            _kill([process.pid], first=signals.SIGTERM)  # SIGCONT too: it may be stopped

    off = signal.add_listener(stop)
    if signal.reason is not None:  # it aborted while the supervisor was being started
        stop(signal)
    feeding = asyncio.ensure_future(_feed(process.stdin, options.input))
    exited = asyncio.ensure_future(process.wait())
    finishing = asyncio.ensure_future(
        _finish(
            [exited, out.done, err.done, feeding],
            aborted,
            float(options.grace),
            _Escalation(process, [out, err]),
        )
    )
    try:
        if interrupted is not None:
            raise interrupted
        await asyncio.shield(finishing)
    except BaseException:
        # The caller is cancelled (or interrupted): stop the hook all the same, and leave
        # only once everything it started is gone.
        stop(signal)
        await settle(finishing)
        raise
    finally:
        off()
        out.close()
        err.close()
    # The supervisor has reaped every process of the hook, and the pipes are at their end.
    stdout = out.kept.decode("utf-8", "replace")
    stderr = err.kept.decode("utf-8", "replace")
    code = process.returncode
    if killed or code is None or code < 0:
        return HookResult(None, None, stdout=stdout, stderr=stderr, killed=killed)
    if code == 0 and out.overflowed:
        reason = (
            f"the hook's stdout passed the limit of {options.limit} bytes, so its answer "
            "could not be read whole"
        )
        return HookResult(code, "block", reason, stdout, stderr)
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
            command,
            RunHookOptions(
                signal=signal, input=data, env=hooks.env, grace=hooks.grace, cwd=hooks.cwd
            ),
        )
        if result.exit_code not in (0, 2, None):
            log.warning("a %s hook exited %s: %s", payload.get("hook"), result.exit_code, command)
        if result.decision == "block":
            return result
    return None
