"""The hook supervisor: runs one hook command and reaps every process it leaves behind.

:func:`fsm_core.run_hook` does not start a hook itself; it starts this script, with the standard
library only and no site packages (``python -I -S _reaper.py PARENT GRACE COMMAND``), which

1. marks itself a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): a process of the
   hook whose parent dies is re-parented to the supervisor, not to init, so the supervisor can
   kill and reap it at once, even one that left the hook's process group with ``setsid``;
2. asks for SIGTERM when its parent dies (``PR_SET_PDEATHSIG``), so a runtime killed outright
   still stops its hooks;
3. runs ``/bin/sh -c COMMAND`` in a new session (its process group id is its pid), with the
   supervisor's stdin, stdout and stderr, then points its own at ``/dev/null`` so the pipes
   reach end-of-file exactly when the hook's processes are gone;
4. on SIGTERM (the runtime aborting the hook), or once the hook's shell exits, stops whatever
   is left: SIGTERM to the hook's group and to every child it has, SIGKILL to both after
   ``GRACE`` seconds, again and again until ``waitpid`` says it has no child left;
5. exits as the hook's shell did: its exit status, or death by the same signal.

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


def _children() -> list[int]:
    """The supervisor's living children (Linux ``/proc``); empty where it cannot tell."""
    pid = os.getpid()
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listing:
            return [int(p) for p in listing.read().split()]
    except OSError:
        return []


def _signal(pgid: int, sig: int, spared: set[int]) -> None:
    """Send ``sig`` to the hook's group, and to each child of the supervisor not in ``spared``
    (then add it there): a hook that traps SIGTERM gets it once, not once per tick."""
    if pgid not in spared:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        spared.add(pgid)  # the group's leader is the hook's shell, a child too
    for child in _children():
        if child not in spared:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, sig)
            spared.add(child)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    parent, grace, command = int(argv[1]), float(argv[2]), argv[3]
    watched = {signal.SIGTERM, signal.SIGCHLD, signal.SIGINT, signal.SIGHUP}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    stopping = os.getppid() != parent  # the runtime died before PDEATHSIG was armed

    leader = os.fork()
    if leader == 0:  # the hook: its own session, the caller's signal mask, then the shell
        try:
            os.setsid()
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            os.execv("/bin/sh", ["/bin/sh", "-c", command])
        finally:
            os._exit(127)

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)

    status: int | None = None
    deadline: float | None = None
    terminated: set[int] = set()
    while True:
        while True:  # reap every child that has exited
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, wait_status = -1, 0
            if pid == leader:
                status = wait_status
            if pid <= 0:
                break
        if pid == -1 and (subreaper or not _group_alive(leader)):
            break  # no descendant is left
        if status is not None:
            stopping = True  # the hook's shell is done; what it left behind goes too
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
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        return 128 + sig  # a signal whose default is not to terminate
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
