"""Replaying a port: ``fsm-core vectors --replay CMD`` runs a replayer over each vector file
and judges its verdicts (README "For port authors"; the format in specs/SEMANTICS.md).

The replayer is untrusted input, like a table: what it prints is read in bounded pieces
(:func:`verdict_bound`), decoded with replacement, parsed only when it nests less than
:data:`VERDICT_DEPTH` deep, and shown escaped and shortened (:func:`shown`); the processes it
starts never outlive its file (:func:`_kill_tree`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import selectors
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final, Literal

from fsm_core._errors import FsmError, echo, shown


@dataclass(frozen=True, slots=True)
class Failure:
    """A vector a port failed: its file, line and id, and why.

    ``reason`` is what a terminal may show: escaped and at most :data:`REASON_SHOWN` characters
    (:func:`shown`); :func:`replay` writes the whole reason to its ``full`` file.
    """

    file: str
    line: int
    id: str
    reason: str

    def __str__(self) -> str:
        where = f"{shown(self.file, REASON_SHOWN)}:{self.line}"
        return f"{where}: {shown(self.id, REASON_SHOWN)}: {self.reason}"


REPLAY_TIMEOUT = 600.0
"""The default ``--timeout``: the seconds a replayer has for one vector file (the JS reference
replays the largest in a few seconds)."""

REASON_SHOWN: Final = 200
"""The most characters of a failure's reason (or file, or id) printed; the rest is in the file
of failures in full."""

VERDICT_SLACK: Final = 4096
"""The bytes a verdict may take beyond four times its vector (see :func:`verdict_bound`)."""

VERDICT_DEPTH: Final = 16
"""The deepest a verdict line may nest arrays and objects; a verdict is one flat object, so a
deeper line is a failing verdict (not a ``RecursionError`` in the parser)."""

STDERR_KEPT: Final = 4096
"""The bytes of a replayer's standard error kept: the last ones, where a crash says why."""

_SAID: Final = 200
"""The characters of that standard error a failure quotes (its end)."""

_DRAIN: Final = 1.0
"""The seconds a replayer's pipes have to reach end-of-file once its processes are killed: at
once, unless a process this one cannot see holds them; then what was read is the output."""

_TOKEN: Final = "FSM_CORE_REPLAYER"
"""The environment variable that marks a replayer's processes with a random value: each child
inherits it, so a process that left the replayer's group (``setsid``, a double fork) and closed
its pipes is still found (:func:`_strays`)."""

_ROUNDS: Final = 8
"""How often :func:`_kill_tree` looks again for processes a dying one started."""


def verdict_bound(vector: bytes) -> int:
    """The most bytes a verdict on ``vector`` (a line of a vector file) may take: a verdict
    quotes its vector at most twice (what was expected, what the port got), which JSON escaping
    can double, plus :data:`VERDICT_SLACK` for the message around it (a stack trace). So a
    file's answer is capped at the sum of its lines' bounds, about four times the file."""
    return 4 * len(vector) + VERDICT_SLACK


def replay(
    command: Sequence[str],
    files: Sequence[Path],
    tables: Path,
    timeout: float = REPLAY_TIMEOUT,
    full: IO[str] | None = None,
) -> tuple[int, list[Failure]]:
    """Run a port's replayer on each vector file of ``files``: ``command TABLES`` (``tables``,
    the files' ``tables.json``) with the file on standard input; it must print one verdict
    line per input line, in order,
    ``{"id": ID, "verdict": "pass"}`` or ``{"id": ID, "verdict": "fail", "reason": WHY}``.
    Returns the vectors replayed and every failure, each naming its file and line, with its
    reason shortened; ``full``, if given, gets each failure whole as a JSON line.

    The replayer's output is bounded: a verdict longer than :func:`verdict_bound`, a verdict
    past the last vector, or more standard error than the file's whole answer may take stops
    it, and the vector it was on fails saying so. A replayer still running ``timeout`` seconds
    after it was given a file is stopped too, and the vector it gave no verdict for is reported
    as timed out. Stopped or exited, its processes go with it: its process group (it runs in a
    session of its own) and every process that carries its mark or holds its pipes
    (:func:`_kill_tree`), ``setsid`` children included.
    """
    failures: list[Failure] = []

    def fail(file: str, line: int, vid: str, reason: str) -> None:
        if full is not None:
            record = {"file": file, "line": line, "id": vid, "reason": reason}
            full.write(json.dumps(record) + "\n")  # ASCII: no control character survives
        failures.append(Failure(file, line, vid, shown(reason, REASON_SHOWN)))

    count = 0
    for path in files:
        lines = path.read_bytes().splitlines()
        ids = [_id(line) for line in lines]
        count += len(lines)

        def judge(number: int, text: str, name: str = path.name, ids: list[str] = ids) -> None:
            why = _judge(text, ids[number - 1])
            if why is not None:
                fail(name, number, ids[number - 1], why)

        bounds = [verdict_bound(line) for line in lines]
        data = b"\n".join(lines) + b"\n"
        run = _run_port([*command, str(tables)], data, bounds, timeout, judge)
        answered = min(run.verdicts, len(lines))
        said = run.stderr.decode("utf-8", "replace").strip()[-_SAID:]
        for number in range(answered + 1, len(lines) + 1):
            fail(path.name, number, ids[number - 1], _unanswered(run, number, answered, said))
        if run.stopped == "extra" or (run.stopped == "stderr" and answered == len(lines)):
            fail(path.name, len(lines), "-", _unanswered(run, 0, answered, said))
    return count, failures


def _unanswered(run: _Run, number: int, answered: int, said: str) -> str:
    """Why vector ``number`` has no verdict (0: why the replayer failed after the last one)."""
    at = answered + 1
    if run.stopped == "extra":
        return "more verdicts than vectors; the replayer was killed"
    if number > at:
        why = "timed out" if run.stopped == "timeout" else "was killed"
        return f"not replayed (the replayer {why} at line {at})"
    if run.stopped == "verdict":
        return (
            f"the verdict is longer than {run.bound:,} bytes (4 times the vector and "
            f"{VERDICT_SLACK:,}); the replayer was killed"
        )
    if run.stopped == "stderr":
        return (
            f"the replayer wrote more than {run.cap:,} bytes to standard error (the most its "
            f"answer on this file may take) and was killed: {said}"
        )
    if run.stopped == "timeout":
        return f"no verdict within {run.timeout:g} s; the replayer was killed: {said}"
    return f"no verdict (the replayer exited {run.code}: {said})"


@dataclass(slots=True)
class _Run:
    """What a replayer did with one file."""

    timeout: float
    cap: int
    """The most bytes of standard error it may write: what its whole answer may take."""
    verdicts: int = 0
    """The verdict lines it printed (the last one may lack its newline)."""
    code: int | None = None
    """Its exit status; None iff it was stopped."""
    stopped: Literal["timeout", "verdict", "stderr", "extra"] | None = None
    """Why it was stopped, if it was: it took longer than the timeout, a verdict passed its
    bound (``bound``), its standard error passed ``cap``, or it printed more than one verdict
    per vector."""
    bound: int = 0
    """The bound of the verdict it was stopped on, when it was stopped on one."""
    stderr: bytearray = field(default_factory=bytearray)
    """The end of its standard error, at most :data:`STDERR_KEPT` bytes."""


def _run_port(
    argv: list[str],
    data: bytes,
    bounds: Sequence[int],
    timeout: float,
    verdict: Callable[[int, str], None],
) -> _Run:
    """Run the replayer ``argv`` with ``data`` on standard input, calling ``verdict(n, line)``
    for its n-th line of output as it comes (``bounds[n - 1]`` bytes at most), until it exits,
    ``timeout`` seconds pass or it breaks a bound. No process of its tree outlives the call."""
    marker = secrets.token_hex(16)
    try:
        port = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, _TOKEN: marker},
        )
    except OSError as e:
        raise FsmError(
            f"--replay {shown(shlex.join(argv[:-1]), REASON_SHOWN)}: {e.strerror or e}"
        ) from None
    tree = f"{_TOKEN}={marker}".encode()
    try:
        talk = _Conversation(port, data, bounds, verdict, _Run(timeout, sum(bounds)))
    except BaseException:  # no conversation (an fstat, a selector, Ctrl-C): no replayer either
        _kill_tree(port, tree, frozenset())
        for pipe in (port.stdin, port.stdout, port.stderr):
            if pipe is not None:
                pipe.close()
        port.wait()
        raise
    try:
        talk.run(timeout, lambda: _kill_tree(port, tree, talk.pipes))
    except BaseException:  # an interrupt (Ctrl-C): the replayer goes too
        _kill_tree(port, tree, talk.pipes)
        raise
    finally:
        talk.close()
        port.wait()
    if talk.result.stopped is None:
        talk.result.code = port.returncode
    return talk.result


class _Conversation:
    """One replayer run: its standard input written, its output read and bounded as it comes.

    Invariant: the replayer is not reaped before its tree is killed (its pid names its process
    group until then); its exit is seen on a pidfd, or by ``waitid`` with ``WNOWAIT``.
    """

    def __init__(
        self,
        port: subprocess.Popen[bytes],
        data: bytes,
        bounds: Sequence[int],
        verdict: Callable[[int, str], None],
        result: _Run,
    ) -> None:
        assert port.stdin is not None and port.stdout is not None and port.stderr is not None
        self.port = port
        self.data = memoryview(data)
        self.sent = 0
        self.bounds = bounds
        self.verdict = verdict
        self.result = result
        self.line = bytearray()
        self.errors = 0
        self.stdin, self.stdout, self.stderr = (
            port.stdin.fileno(),
            port.stdout.fileno(),
            port.stderr.fileno(),
        )
        self.pipes = frozenset(
            f"pipe:[{os.fstat(fd).st_ino}]" for fd in (self.stdin, self.stdout, self.stderr)
        )
        self.exited = False
        self.over: Literal["timeout", "verdict", "stderr", "extra"] | None = None
        self.selector = selectors.DefaultSelector()
        os.set_blocking(self.stdin, False)
        self.selector.register(self.stdin, selectors.EVENT_WRITE)
        self.selector.register(self.stdout, selectors.EVENT_READ)
        self.selector.register(self.stderr, selectors.EVENT_READ)
        self.exit_fd: int | None = None
        if hasattr(os, "pidfd_open"):  # else (not Linux) waitid(WNOWAIT) polls instead
            with contextlib.suppress(OSError):  # a kernel without pidfds: the same
                self.exit_fd = os.pidfd_open(port.pid)
                self.selector.register(self.exit_fd, selectors.EVENT_READ)

    def run(self, timeout: float, kill_tree: Callable[[], None]) -> None:
        """Talk until the replayer exits, ``timeout`` passes or a bound breaks; kill its tree;
        then read the rest of its output (not after a broken bound)."""
        deadline = time.monotonic() + timeout
        while not self.exited and self.over is None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                self.over = "timeout"
                break
            self._poll(wait)
        self._close_stdin()
        kill_tree()
        grace = time.monotonic() + _DRAIN
        while self._reading() and self.over in (None, "timeout"):
            wait = grace - time.monotonic()
            if wait <= 0:  # a process out of sight holds a pipe: what was read is the output
                break
            self._poll(wait)
        if self.line and self.over in (None, "timeout"):
            self._answer(bytes(self.line))  # a last verdict without its newline
        self.result.stopped = self.over

    def close(self) -> None:
        self.selector.close()
        if self.exit_fd is not None:
            os.close(self.exit_fd)
        for pipe in (self.port.stdin, self.port.stdout, self.port.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):  # stdin's unwritten rest: no reader
                    pipe.close()

    def _reading(self) -> bool:
        keys = self.selector.get_map()
        return self.stdout in keys or self.stderr in keys

    def _poll(self, wait: float) -> None:
        if self.exit_fd is None:
            wait = min(wait, 0.05)
        for key, _ in self.selector.select(wait):
            fd = key.fd
            if fd == self.exit_fd:
                self.exited = True
                self.selector.unregister(fd)
            elif fd == self.stdin:
                self._write()
            else:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.selector.unregister(fd)
                elif fd == self.stdout:
                    self._out(chunk)
                else:
                    self._err(chunk)
            if self.over is not None:
                return
        if self.exit_fd is None and not self.exited:
            self.exited = _exited(self.port)

    def _write(self) -> None:
        try:
            self.sent += os.write(self.stdin, self.data[self.sent : self.sent + (1 << 16)])
        except BlockingIOError:
            return
        except OSError:  # the replayer stopped reading (BrokenPipeError): it is its answer
            self._close_stdin()
            return
        if self.sent == len(self.data):
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self.stdin in self.selector.get_map():
            self.selector.unregister(self.stdin)
        if self.port.stdin is not None:
            with contextlib.suppress(OSError):
                self.port.stdin.close()

    def _out(self, chunk: bytes) -> None:
        *complete, rest = chunk.split(b"\n")
        for part in complete:
            self.line += part
            line, self.line = bytes(self.line), bytearray()
            self._answer(line)
            if self.over is not None:
                return
        self.line += rest
        if self.line and len(self.line) > self._bound():
            self._overflow()

    def _bound(self) -> int:
        number = self.result.verdicts + 1
        return self.bounds[number - 1] if number <= len(self.bounds) else 0

    def _overflow(self) -> None:
        self.result.bound = self._bound()
        self.over = "verdict" if self.result.verdicts < len(self.bounds) else "extra"

    def _answer(self, line: bytes) -> None:
        if len(line) > self._bound() or self.result.verdicts == len(self.bounds):
            self._overflow()
            return
        self.result.verdicts += 1
        self.verdict(self.result.verdicts, line.decode("utf-8", "replace"))

    def _err(self, chunk: bytes) -> None:
        self.errors += len(chunk)
        kept = self.result.stderr
        kept += chunk
        del kept[:-STDERR_KEPT]
        if self.errors > self.result.cap:
            self.over = "stderr"


def _exited(port: subprocess.Popen[bytes]) -> bool:
    """True iff the replayer has exited, without reaping it where ``waitid`` can."""
    if hasattr(os, "waitid"):
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        try:
            return os.waitid(os.P_PID, port.pid, flags) is not None
        except ChildProcessError:
            return True
    return port.poll() is not None


def _kill_tree(port: subprocess.Popen[bytes], marker: bytes, pipes: frozenset[str]) -> None:
    """SIGKILL the replayer's process group, then every process that carries ``marker`` in its
    environment or holds one of ``pipes`` (:func:`_strays`), and wait (up to :data:`_DRAIN`
    seconds a round) for them to die; again while a round finds any, since a dying process may
    have just started another. Only before the replayer is reaped: until then its pid, the
    group's id, cannot name another process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(port.pid, signal.SIGKILL)
    for _ in range(_ROUNDS):
        strays = _strays(marker, pipes)
        if not strays:
            return
        dying: list[int] = []
        for pid in strays:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            except OSError:  # a kernel without pidfds: by pid, just after the scan named it
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                continue
            if not _holds(pid, marker, pipes):  # the pid was reused since the scan
                os.close(fd)
                continue
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            dying.append(fd)
        poll = select.poll()
        for fd in dying:
            poll.register(fd, select.POLLIN)
        left, grace = len(dying), time.monotonic() + _DRAIN
        while left and (wait := grace - time.monotonic()) > 0:
            for fd, _ in poll.poll(wait * 1000):
                poll.unregister(fd)
                left -= 1
        for fd in dying:
            os.close(fd)


def _strays(marker: bytes, pipes: frozenset[str]) -> list[int]:
    """Every process but this one that carries ``marker`` in its environment or holds one of
    ``pipes`` open: a replayer's tree, wherever it moved. Read from Linux's ``/proc``; where
    there is none, the process group is all a kill reaches."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    me = str(os.getpid())
    return [int(n) for n in names if n.isdigit() and n != me and _holds(int(n), marker, pipes)]


def _holds(pid: int, marker: bytes, pipes: frozenset[str]) -> bool:
    """True iff process ``pid`` carries ``marker`` in its environment or has one of ``pipes``
    open (False for one this user may not inspect, or a zombie)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            if marker in fh.read().split(b"\0"):
                return True
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in pipes:
                return True
    return False


def _id(line: bytes) -> str:
    """A vector line's id, or ``?`` for a line that is not a vector (a port must fail it)."""
    try:
        vector = json.loads(line)
    except (ValueError, RecursionError):
        return "?"
    return str(vector.get("id")) if isinstance(vector, dict) else "?"


_STRING = re.compile(r'"(?:[^"\\]|\\.)*+"')
_BRACKET = re.compile(r"[\[\]{}]")


def _deeper(text: str, limit: int) -> bool:
    """True iff the JSON ``text`` nests arrays and objects more than ``limit`` deep (brackets
    inside strings do not count)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > limit:
            return True
    return False


def _judge(text: str, vid: str) -> str | None:
    if _deeper(text, VERDICT_DEPTH):
        return f"the verdict nests more than {VERDICT_DEPTH} deep: {echo(text)}"
    try:
        verdict = json.loads(text)
    except ValueError:
        return f"the verdict is not JSON: {echo(text)}"
    if not isinstance(verdict, dict) or verdict.get("id") != vid:
        return f"the verdict names another vector: {echo(text)}"
    if verdict.get("verdict") == "pass":
        return None
    if verdict.get("verdict") == "fail":
        return str(verdict.get("reason", "failed"))
    return f"not a verdict: {echo(text)}"


# --- command line --------------------------------------------------------------------------------
