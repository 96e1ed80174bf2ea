"""The hook supervisor: runs one hook command and reaps every process it leaves behind.

:func:`fsm_core.run_hook` does not start a hook itself; it starts this script, with the standard
library only and no site packages (``python -I -S _reaper.py PARENT GRACE COMMAND [CWD]``),
which

1. marks itself a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): a process of the
   hook whose parent dies is re-parented to the supervisor, not to init, so the supervisor can
   kill and reap it at once, even one that left the hook's process group with ``setsid``;
2. asks for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), so a runtime killed outright
   still stops its hooks;
3. forks a *stub* that starts a new session (its process group id is its pid), enters ``CWD``
   (exit 127, the reason on stderr, when it cannot) and runs ``/bin/sh -c COMMAND`` with the
   supervisor's stdin, stdout and stderr, waits for it and exits as it did; the supervisor
   then points its own descriptors at ``/dev/null``, so the pipes reach end-of-file exactly
   when the hook's processes are gone;
4. on SIGTERM (the runtime aborting the hook), or once the stub exits, stops whatever is left:
   SIGTERM (and SIGCONT) to the hook's group and to every descendant, SIGKILL to them after
   ``GRACE`` seconds, again and again until ``waitpid`` says it has no child left;
5. exits as the hook's shell did (as the stub reported it): its exit status, or death by the
   same signal.

Why the stub: the hook's ``$PPID`` is the stub, not the supervisor. A hook that kills it
(``kill -KILL $PPID``) loses only its exit status: its processes are re-parented to the
supervisor, which stops and reaps them; one that stops it (``kill -STOP $PPID``) is resumed by
the supervisor, which watches its stub with ``WUNTRACED``. A hook that hunts the supervisor
itself down is the runtime's to handle (``_hooks.py``, ``_Escalation``): a stopped supervisor
is still the subreaper of the whole tree, so the runtime kills that tree from ``/proc``.

Why a separate process rather than polling ``os.killpg(pgid, 0)`` in the runtime: a killed
grandchild is re-parented to init, which reaps it when it gets round to it (over a second on
some machines, never under a PID 1 that does not reap), and a process that called ``setsid``
is not in the group at all. Making the runtime itself the subreaper would re-parent every
orphan of the whole host program to it. Here the guarantee is local and exact: when
``waitpid(-1)`` fails with ``ECHILD``, every descendant is gone, because a living descendant
has a living parent that is a descendant or has been re-parented to the subreaper.

Without ``PR_SET_CHILD_SUBREAPER`` (not Linux), the supervisor falls back to the process group:
it waits until ``os.killpg(pgid, 0)`` finds no process, relying on init to reap.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
TICK = 0.01
"""How often, while stopping, to look for processes newly re-parented to the supervisor."""


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def descendants(root: int) -> list[int]:
    """Every descendant of process ``root``, parents before their children (Linux ``/proc``:
    each task's ``children`` list, walked down); empty where it cannot tell. The runtime walks
    the supervisor's too, when the supervisor is stopped (``_hooks.py``)."""
    found: list[int] = []
    queue = [root]
    while queue:
        pid = queue.pop(0)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as listing:
                    children = [int(p) for p in listing.read().split()]
            except (OSError, ValueError):
                continue
            found.extend(children)
            queue.extend(children)
    return found


def _signal(pgid: int, sig: int, spared: set[int]) -> None:
    """Send ``sig`` to the hook's group, and to each descendant of the supervisor not in
    ``spared`` (then add it there): a hook that traps SIGTERM gets it once, not once per tick.
    A SIGTERM is followed by SIGCONT, so a stopped process handles it within the grace."""
    targets: list[int] = [] if pgid in spared else [-pgid]
    spared.add(pgid)
    for pid in descendants(os.getpid()):
        if pid not in spared:
            targets.append(pid)
            spared.add(pid)
    for target in targets:
        for each in (sig, signal.SIGCONT) if sig == signal.SIGTERM else (sig,):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target, each)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exit_as(status: int) -> int:
    """Leave as a child that ended with wait ``status`` did: its exit status, or death by the
    same signal (128 + the signal, for one whose default is not to terminate)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.WEXITSTATUS(status)


def _stub(command: str, cwd: str, old_mask: Iterable[int]) -> int:
    """The hook's parent (its ``$PPID``), in the hook's new session: enters ``cwd``, runs the
    shell, waits for it and exits as it did. It holds nothing the supervisor needs, so a hook
    that kills or stops it loses only its own exit status."""
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as error:
            os.write(
                2, f"fsm_core: the hook cannot start: cwd {cwd!r}: {error.strerror}\n".encode()
            )
            return 127
    shell = os.fork()
    if shell == 0:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            os.execv("/bin/sh", ["/bin/sh", "-c", command])
        finally:
            os._exit(127)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    _, status = os.waitpid(shell, 0)
    signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    return _exit_as(status)


def main(argv: list[str]) -> int:
    parent, grace, command = int(argv[1]), float(argv[2]), argv[3]
    cwd = argv[4] if len(argv) > 4 else ""
    watched = {signal.SIGTERM, signal.SIGCHLD, signal.SIGINT, signal.SIGHUP}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    stopping = os.getppid() != parent  # the runtime died before PDEATHSIG was armed

    leader = os.fork()
    if leader == 0:
        code = 127
        try:
            code = _stub(command, cwd, old_mask)
        finally:
            os._exit(code)

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)

    status: int | None = None
    deadline: float | None = None
    terminated: set[int] = set()
    while True:
        while True:  # reap every child that has exited; resume the stub if it was stopped
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                pid, wait_status = -1, 0
            if pid == leader and os.WIFSTOPPED(wait_status):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(leader, signal.SIGCONT)
            elif pid == leader:
                status = wait_status
            if pid <= 0:
                break
        if pid == -1 and (subreaper or not _group_alive(leader)):
            break  # no descendant is left
        if status is not None:
            stopping = True  # the hook is done; what it left behind goes too
        if stopping:
            if deadline is None:
                deadline = time.monotonic() + grace
            if time.monotonic() < deadline:
                _signal(leader, signal.SIGTERM, terminated)
            else:
                _signal(leader, signal.SIGKILL, set())  # every tick: re-parented ones too
        received = signal.sigtimedwait(watched, TICK if stopping else 3600.0)
        if received is not None and received.si_signo != signal.SIGCHLD:
            stopping = True

    assert status is not None
    return _exit_as(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
