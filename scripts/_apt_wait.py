"""Wait until no other process holds apt's or dpkg's locks, so that scripts/test's apt-get waits
for a fresh VM's unattended-upgrades (which runs at boot) instead of failing on a held lock.

    python3 scripts/_apt_wait.py [LOCK ...]      # default: dpkg's and apt's lock files

apt and dpkg hold these with ``fcntl`` locks: each is tried here without blocking, every
``POLL`` seconds until it is taken or the budget is spent, and released at once. No signal
bounds the wait (an alarm could go off between taking a lock and disarming it), only a deadline
checked between tries. apt-get's own ``DPkg::Lock::Timeout`` covers the window between that
release and apt-get's take. Exits 0 once every lock was free (or its file is absent or
unreadable: not ours to wait for), 1 naming the lock still held after ``FSM_CORE_APT_WAIT``
seconds (default 300).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

LOCKS = (
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/lib/apt/lists/lock",
    "/var/cache/apt/archives/lock",
)
POLL = 0.5


def take(fd: int) -> bool:
    """True iff this process took the lock on ``fd`` (it then holds it); False if another does."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def main(locks: list[str]) -> int:
    budget = float(os.environ.get("FSM_CORE_APT_WAIT", "300"))
    deadline = time.monotonic() + budget
    for path in locks:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            if not take(fd):
                print(f"waiting for {path}: another process holds it", flush=True)
                while not take(fd):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        print(f"{path} still held after {budget:.0f} s", file=sys.stderr)
                        return 1
                    time.sleep(min(POLL, left))
                print(f"{path} is free", flush=True)
            fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(LOCKS)))
